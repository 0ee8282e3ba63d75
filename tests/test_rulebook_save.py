"""Save a rule from a step: the user's fix on one node becomes a rule file (op, domain, the conditions that made
it apply), validated, that matches elsewhere in the model and fixes a second, different model."""

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from surgery.backends import get_backend
from surgery.rulebook import RuleError, load_rules, propose, run_rules
from surgery.rulebook.loader import load_rule
from surgery.rulebook.save import draft_rule, matches_in, rule_from_step
from surgery.samples import build
from surgery.verify import verify
from surgery.workspace import Step, Workspace


def _two_resizes():
    """Two upsampling stages, each with scales computed by the graph (a different chain from the sample's):

    input -> Resize(scales = Concat(Constant[1,1], Cast(Constant[2,2]))) -> Resize(same) -> out [1,1,12,12]
    """
    nodes = []
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
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])


def test_rule_saved_from_a_step_generalises_the_node_and_fixes_a_second_model(tmp_path):
    first = build("resize_scales_chain")
    step = Step("fold_constants", {"tensors": ["/up/Concat_1_output_0"]})
    path, matches = rule_from_step(first, step, "/up/Resize", tmp_path, id="my-fold-resize")
    assert path == tmp_path / "my-fold-resize.yaml" and matches == ["/up/Resize"]
    data = yaml.safe_load(path.read_text())
    assert data["match"] == {
        "op": "Resize",
        "domain": "",
        "inputs": {2: {"foldable": True, "weights": False}},
    }
    assert data["fix"] == {"primitive": "fold_constants", "params": {"tensors": ["$input[2]"]}}
    assert data["safety"] == "exact"

    (rule,) = load_rules([tmp_path])
    second = _two_resizes()
    assert matches_in(rule, second) == ["/up0/Resize", "/up1/Resize"]
    ws = Workspace.open(second.SerializeToString(), name="second.onnx")
    applied, refused = run_rules(ws, [rule])
    assert [a.proposal.nodes for a in applied] == [("/up0/Resize", "/up1/Resize")] and not refused  # one step
    assert {"Concat", "Cast"}.isdisjoint(n.op_type for n in ws.current.graph.node)
    assert verify(second, ws.current).status == "ok"
    static = get_backend("tensorrt-static@8.2")
    assert {v.node for v in static.check(second).rejected} == {"/up0/Resize", "/up1/Resize"}
    assert not static.check(ws.current).rejected
    assert propose(ws.current, [rule]) == []  # fixed: nothing left to match


def test_a_node_level_fix_keeps_the_nodes_mode_flags(tmp_path):
    model = build("training_mode_ops")
    path, matches = rule_from_step(model, Step("inference_mode"), "/bn/BatchNormalization", tmp_path)
    data = yaml.safe_load(path.read_text())
    assert data["match"]["attrs"] == {"training_mode": {"eq": 1}}
    assert matches == ["/bn/BatchNormalization"]


def test_saving_never_overwrites_a_rule(tmp_path):
    first = build("resize_scales_chain")
    step = Step("fold_constants", {"tensors": ["/up/Concat_1_output_0"]})
    rule_from_step(first, step, "/up/Resize", tmp_path, id="mine")
    with pytest.raises(RuleError, match="mine.yaml: a rule file with this id exists"):
        rule_from_step(first, step, "/up/Resize", tmp_path, id="mine")
    a, _ = rule_from_step(first, step, "/up/Resize", tmp_path)  # a generated id takes the next free name
    b, _ = rule_from_step(first, step, "/up/Resize", tmp_path)
    assert (a.stem, b.stem) == ("fold-constants-resize", "fold-constants-resize-2")
    assert [r.id for r in load_rules([tmp_path])] == [
        "fold-constants-resize-2",
        "fold-constants-resize",
        "mine",
    ]


def _linear_classifier(multi_class: int) -> onnx.ModelProto:
    node = helper.make_node(
        "LinearClassifier",
        ["x"],
        ["label", "scores"],
        domain="ai.onnx.ml",
        name="clf",
        coefficients=[0.5, -1.0, 2.0, 1.5, 0.25, -0.5],
        intercepts=[0.1, -0.2, 0.3],
        classlabels_ints=[0, 1, 2],
        multi_class=multi_class,
        post_transform="NONE",
    )
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, [3]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [3, 3]),
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    return helper.make_model(g, opset_imports=opsets, ir_version=8)


def test_a_saved_rule_reads_as_words_and_matches_a_node_differing_in_a_flag_its_fix_ignores(tmp_path):
    """The decomposition handles any multi_class: the saved rule does not pin it (it matched only multi_class 1
    before), its title is words, and a preview (draft_rule) writes nothing."""
    first, second = _linear_classifier(1), _linear_classifier(0)
    step = Step("decompose", {"node": "clf"}, rule="ml-linear-decompose")
    path, text, rule = draft_rule(first, step, "clf", tmp_path)
    assert not path.exists() and "multi_class" not in text
    assert rule.title == "Decompose LinearClassifier into standard ops"
    assert "DECOMPOSITIONS" not in rule.title and "as the rule ml-linear-decompose does it" in rule.why
    path, matches = rule_from_step(first, step, "clf", tmp_path)
    assert matches == ["clf"] and matches_in(load_rule(path), second) == ["clf"]
    ws = Workspace.open(second.SerializeToString(), name="second.onnx")
    ws.apply(propose(second, [load_rule(path)])[0].step)
    assert verify(second, ws.current).status == "ok"
