"""The rule engine: broken rule files name file/line/field; the tracer explains near-misses; a rule saved from
a step on one model fixes a second model; the fixpoint loop."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.rulebook import RuleError, explain, load_rule_text, load_rules, propose, run_rules
from surgery.rulebook.loader import BUILTIN_DIR
from surgery.rulebook.save import rule_from_step
from surgery.samples import build
from surgery.verify import verify
from surgery.workspace import Step, Workspace

GOOD = """\
id: my-rule
title: A rule
what: does a thing
why: because
match:
  op: Resize
fix:
  primitive: fold_constants
safety: exact
"""


def test_a_valid_rule_loads():
    rule = load_rule_text(GOOD, "my.yaml")
    assert rule.id == "my-rule" and rule.primitive == "fold_constants"


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (("safety: exact", "safety: risky"), r"my.yaml:9: field 'safety': 'risky' is not one of"),
        (
            ("primitive: fold_constants", "primitive: nope"),
            r"my.yaml:8: field 'fix.primitive': unknown primitive 'nope'",
        ),
        (("op: Resize", "op: Resize\n  colour: red"), r"my.yaml:7: field 'match.colour': unknown condition"),
        (("why: because\n", ""), r"field 'why': missing"),
        (
            ("primitive: fold_constants", "primitive: fold_constants\n  params: {nope: 1}"),
            r"my.yaml:9: field 'fix.params.nope': 'fold_constants' takes no parameter 'nope'",
        ),
        (("title: A rule", "title: [unclosed"), r"my.yaml:\d+: not valid YAML"),
    ],
)
def test_broken_rule_files_name_file_line_and_field(change, where):
    with pytest.raises(RuleError, match=where):
        load_rule_text(GOOD.replace(*change), "my.yaml")


def test_deep_nesting_and_huge_files_are_refused_before_parsing():
    deep = "a: " + "[" * 5000 + "]" * 5000
    with pytest.raises(RuleError, match="nested deeper than"):
        load_rule_text(deep, "deep.yaml")
    with pytest.raises(RuleError, match="over the .*-byte limit"):
        load_rule_text("x: " + "y" * 300_000, "big.yaml")


def test_yaml_tags_cannot_run_code():
    with pytest.raises(RuleError):
        load_rule_text("id: !!python/object/apply:os.system ['echo hi']\n" + GOOD, "evil.yaml")


def test_tracer_explains_a_near_miss_condition_by_condition():
    rule = next(r for r in load_rules([BUILTIN_DIR]) if r.id == "fold-resize-scales")
    lines = explain(build("resize_scales_chain"), rule, "/up/Resize")
    assert all(line.startswith("✓") for line in lines)
    # fold the scales first: now the input is an initializer and the rule no longer applies — and says why
    ws = Workspace.open(build("resize_scales_chain").SerializeToString())
    ws.apply(Step("fold_constants", {"tensors": ["/up/Concat_1_output_0"]}))
    lines = explain(ws.current, rule, "/up/Resize")
    assert any(line.startswith("✗") and "is an initializer" in line for line in lines)
    assert explain(ws.current, rule, "/relu/Relu")[0].startswith("✗ op is Relu, not Resize")


def _two_resizes():
    """Two upsampling stages, each with scales = Concat(Constant[1,1], Cast(Constant[2,2]))."""
    nodes, inits = [], []
    x = "input"
    for k in range(2):
        p = f"/up{k}"
        nodes += [
            helper.make_node(
                "Constant", [], [f"{p}/one"], value=numpy_helper.from_array(np.ones(2, np.float32))
            ),
            helper.make_node("Constant", [], [f"{p}/two"], value=numpy_helper.from_array(np.array([2, 2]))),
            helper.make_node("Cast", [f"{p}/two"], [f"{p}/twof"], name=f"{p}/Cast", to=TensorProto.FLOAT),
            helper.make_node(
                "Concat", [f"{p}/one", f"{p}/twof"], [f"{p}/scales"], name=f"{p}/Concat", axis=0
            ),
            helper.make_node(
                "Resize", [x, "", f"{p}/scales"], [f"{p}/out"], name=f"{p}/Resize", mode="nearest"
            ),
        ]
        x = f"{p}/out"
    g = helper.make_graph(
        nodes,
        "two",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 3, 3])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 1, 12, 12])],
        inits,
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])


def test_rule_saved_from_a_step_fixes_a_second_model(tmp_path):
    first = build("resize_scales_chain")
    step = Step("fold_constants", {"tensors": ["/up/Concat_1_output_0"]})
    path, matches = rule_from_step(first, step, "/up/Resize", tmp_path, id="my-fold-resize")
    assert path.exists() and matches == ["/up/Resize"]
    rule = load_rules([tmp_path])[0]
    second = _two_resizes()
    found = propose(second, [rule])
    assert [p.node for p in found] == ["/up0/Resize", "/up1/Resize"]
    ws = Workspace.open(second.SerializeToString(), name="second.onnx")
    applied, refused = run_rules(ws, [rule])
    assert len(applied) == 2 and not refused
    assert "Concat" not in [n.op_type for n in ws.current.graph.node]
    assert verify(second, ws.current).status == "ok"
    from surgery.backends import get_backend

    assert get_backend("tensorrt-static@8.2").check(second).rejected
    assert not get_backend("tensorrt-static@8.2").check(ws.current).rejected


def test_run_rules_reaches_a_fixpoint_and_stops():
    ws = Workspace.open(build("training_mode_ops").SerializeToString())
    applied, _ = run_rules(ws, load_rules([BUILTIN_DIR]), ["tensorrt-static@10.15"])
    assert len(applied) == 1  # one step fixes both nodes; nothing matches afterwards
    again, _ = run_rules(ws, load_rules([BUILTIN_DIR]), ["tensorrt-static@10.15"])
    assert again == []
