"""Every built-in rule, three ways (plus docs): it fires on its failing model; it stays quiet on a near-miss;
the fixed model is numerically equal where the rule is exact and passes onnx.checker; and the target's
verdict turns from rejected to supported."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.backends import get_backend
from surgery.backends.base import Status
from surgery.rulebook import load_rules, propose
from surgery.rulebook.docs import DOCS, render
from surgery.rulebook.loader import BUILTIN_DIR
from surgery.samples import build
from surgery.verify import verify
from surgery.workspace import Workspace

RULES = {r.id: r for r in load_rules([BUILTIN_DIR])}
# Fixtures not predicted as rejected, with the reason; their fixes are still tested. fold-shape-chains: the
# failures it prevents happen while old TensorRT builds shape tensors at import time, which no documented check
# describes. int64-slice-bounds: a Slice end of INT64_MAX is clamped harmlessly (the predictor says so); the rule
# only removes the clamping warning.
NOT_PREDICTED = {"fold-shape-chains", "int64-slice-bounds"}


def _model(nodes, inputs, outputs, inits=(), opset=13, ir=8):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, ir_version=ir, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


# Failing models for rules without a sample, and near-misses: (model, node, values)
FIXTURES = {
    "fold-shape-chains": lambda: (
        _model(
            [
                helper.make_node("Shape", ["x"], ["s"], name="shape"),
                helper.make_node("Gather", ["s", "zero"], ["b"], name="gather", axis=0),
                helper.make_node("Unsqueeze", ["b", "axes"], ["b1"], name="unsq"),
                helper.make_node("Concat", ["b1", "minus1"], ["shp"], name="concat", axis=0),
                helper.make_node("Reshape", ["x", "shp"], ["y"], name="reshape"),
            ],
            [vi("x", [2, 3, 4])],
            [vi("y", [2, 12])],
            [init("zero", np.array(0)), init("axes", np.array([0])), init("minus1", np.array([-1]))],
        ),
        "reshape",
    ),
    "compress-constant-condition": lambda: (
        _model(
            [helper.make_node("Compress", ["x", "c"], ["y"], name="cmp", axis=0)],
            [vi("x", [4, 2])],
            [vi("y", [2, 2])],
            [init("c", np.array([True, False, False, True]))],
        ),
        "cmp",
    ),
    "center-crop-pad-decompose": lambda: (
        _model(
            [helper.make_node("CenterCropPad", ["x", "s"], ["y"], name="ccp")],
            [vi("x", [6, 3])],
            [vi("y", [4, 5])],
            [init("s", np.array([4, 5]))],
            opset=18,
        ),
        "ccp",
    ),
    "bitshift-decompose": lambda: (
        _model(
            [helper.make_node("BitShift", ["x", "k"], ["y"], name="shr", direction="RIGHT")],
            [vi("x", [5], TensorProto.UINT32)],
            [vi("y", [5], TensorProto.UINT32)],
            [init("k", np.array([1], np.uint32))],
        ),
        "shr",
    ),
    "deformconv-to-plugin": lambda: (
        _model(
            [
                helper.make_node(
                    "DeformConv",
                    ["x", "w", "off"],
                    ["y"],
                    name="dcn",
                    pads=[1, 1, 1, 1],
                    strides=[1, 1],
                    dilations=[1, 1],
                    group=1,
                    offset_group=1,
                )
            ],
            [vi("x", [1, 2, 5, 5]), vi("off", [1, 18, 5, 5])],
            [vi("y", [1, 2, 5, 5])],
            [init("w", np.ones((2, 2, 3, 3), np.float32))],
            opset=19,
            ir=9,
        ),
        "dcn",
    ),
}
NEAR_MISS = {
    "fold-resize-scales": lambda: _model(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], name="r", mode="nearest")],
        [vi("x", [1, 1, 2, 2])],
        [vi("y", [1, 1, 4, 4])],
        [init("scales", np.array([1, 1, 2, 2], np.float32))],
    ),
    "fold-topk-k": lambda: _model(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], name="t")],
        [vi("x", [1, 8])],
        [vi("v", [1, 2]), vi("i", [1, 2], TensorProto.INT64)],
        [init("k", np.array([2]))],
    ),
    "squeeze-explicit-axes": lambda: _model(
        [helper.make_node("Squeeze", ["x", "a"], ["y"], name="sq")],
        [vi("x", ["n", 1, 3])],
        [vi("y", ["n", 3])],
        [init("a", np.array([1]))],
    ),
    "ml-scaler-decompose": lambda: build("healthy_cnn"),
    "inference-mode": lambda: build("healthy_cnn"),
    "compress-constant-condition": lambda: _model(
        [helper.make_node("Compress", ["x", "c"], ["y"], name="cmp", axis=0)],
        [vi("x", [4, 2]), vi("c", [4], TensorProto.BOOL)],
        [vi("y", [None, 2])],
    ),
}


def failing(rule):
    ex = rule.example
    if rule.id in FIXTURES:
        model, node = FIXTURES[rule.id]()
        return model, node, {}
    return build(ex["model"]), ex["node"], ex.get("values") or {}


def target_for(rule) -> str | None:
    spec = rule.targets.get("tensorrt-static")
    if spec is None:
        return None
    for version in ("8.2", "8.6", "9.3", "10.15"):
        from surgery.rulebook.schema import version_matches

        if version_matches(spec, version):
            return f"tensorrt-static@{version}"
    return None


def test_at_least_twelve_rules_and_every_sample_failure_is_covered():
    from surgery.samples import lessons

    assert len(RULES) >= 12
    for lesson in lessons():
        if lesson.rule:
            assert lesson.rule in RULES, lesson.rule


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_is_documented_and_has_a_fixture(rule_id):
    rule = RULES[rule_id]
    assert rule.what and rule.why and rule.safety and rule.title
    assert rule.example.get("before") and rule.example.get("after")
    assert rule.id in FIXTURES or rule.example.get("model"), "a rule needs a fixture model"


def test_docs_are_current():
    assert DOCS.read_text() == render(load_rules([BUILTIN_DIR])), "run: python -m surgery.rulebook.docs"


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_fires_fixes_and_turns_the_verdict(rule_id, tmp_path):
    rule = RULES[rule_id]
    model, node, values = failing(rule)
    target = target_for(rule)
    proposals = [p for p in propose(model, [rule], [target] if target else None, values) if p.node == node]
    assert proposals, f"{rule_id} does not fire on {node}"
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    ws = Workspace.open(path)
    if target:
        before = get_backend(target).check(model)
        assert (before.by_node()[node].status is Status.REJECTED) != (rule_id in NOT_PREDICTED)
    from surgery.fixes import FixError

    try:
        ws.apply(proposals[0].step)
    except FixError as exc:
        assert rule_id == "int64-initializers-to-int32" and "5000000000" in str(exc)  # the honest refusal
        return
    fixed = ws.current
    if rule.safety == "exact":
        report = verify(model, fixed)
        assert report.status == "ok", report.summary()
    if rule.primitive != "plugin_swap":  # plugin nodes are not ONNX ops: the checker cannot know them
        onnx.checker.check_model(fixed, full_check=True)
    if target and rule_id not in NOT_PREDICTED:
        after = get_backend(target).check(fixed)
        assert node not in {v.node for v in after.rejected} and len(after.rejected) < len(before.rejected)


@pytest.mark.parametrize("rule_id", sorted(NEAR_MISS))
def test_rule_stays_quiet_on_a_near_miss(rule_id):
    rule = RULES[rule_id]
    assert not propose(NEAR_MISS[rule_id](), [rule]), f"{rule_id} fired on its near-miss"


def test_live_tensorrt_accepts_the_fixed_resize_and_scaler_models():
    import importlib.util

    if importlib.util.find_spec("tensorrt_rtx") is None and importlib.util.find_spec("tensorrt") is None:
        pytest.skip("no TensorRT or TensorRT-RTX installed")
    trt = get_backend("tensorrt")
    for name, rule in (("ml_scaler", "ml-scaler-decompose"), ("unique_op", "split-before-unsupported-tail")):
        model = build(name)
        assert trt.check(model).rejected
        (p,) = [p for p in propose(model, [RULES[rule]], ["tensorrt"])]
        path = Path(__file__).parent  # any folder: the sample has no external data
        ws = Workspace.open(model.SerializeToString(), name=name)
        ws.apply(p.step)
        assert not trt.check(ws.current, str(path)).rejected
