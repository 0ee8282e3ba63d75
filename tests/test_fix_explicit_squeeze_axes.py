"""explicit_squeeze_axes: the static size-1 dims become explicit axes (input from opset 13, attribute before)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.fixes import FixError, Safety, get_fix
from surgery.samples import build
from surgery.verify import verify

fix = get_fix("explicit_squeeze_axes")


def test_dynamic_batch_is_not_listed():
    #   features[batch,1,8] -> Squeeze() -> Relu -> output[batch,8]
    model = build("squeeze_dynamic")
    out = fix(model, node="/head/Squeeze")
    onnx.checker.check_model(out, full_check=True)
    sq = out.graph.node[0]
    axes = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}[sq.input[1]]
    assert axes.tolist() == [1] and sq.name == "/head/Squeeze"
    # equal wherever the batch is not 1; with batch 1 the original also drops it (why this is not exact)
    assert verify(model, out, dims={"batch": 3}).status == "ok"
    assert verify(model, out, dims={"batch": 1}).status == "failed"
    assert fix.safety is Safety.APPROXIMATE


def _old_opset():
    #   x[1,3,1,2] -> Squeeze (opset 11, no axes attribute) -> y[3,2]
    g = helper.make_graph(
        [helper.make_node("Squeeze", ["x"], ["y"], name="sq")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
    )
    return helper.make_model(g, ir_version=7, opset_imports=[helper.make_opsetid("", 11)])


def test_attribute_before_opset_13_and_default_is_every_squeeze():
    model = _old_opset()
    out = fix(model)
    onnx.checker.check_model(out, full_check=True)
    attrs = {a.name: helper.get_attribute_value(a) for a in out.graph.node[0].attribute}
    assert attrs == {"axes": [0, 2]} and len(out.graph.node[0].input) == 1
    assert verify(model, out).status == "ok"


def test_refusals():
    model = build("squeeze_dynamic")
    out = fix(model, node="/head/Squeeze")
    with pytest.raises(FixError, match="already has axes"):
        fix(out, node="/head/Squeeze")
    with pytest.raises(FixError, match="is a Relu, not a Squeeze"):
        fix(model, node="/head/Relu")
    with pytest.raises(FixError, match="no Squeeze without axes"):
        fix(out)
    g = helper.make_graph(
        [
            helper.make_node("Squeeze", ["x"], ["y"], name="sq"),
            helper.make_node("Unsqueeze", ["y", "a"], ["z"], name="un"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([0], np.int64), "a")],
    )
    dyn = helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(
        FixError, match=r"no static dimension of size 1 \(\[n, 4\]\).*freeze the shapes first"
    ):
        fix(dyn, node="sq")
    with pytest.raises(FixError, match="Unsqueeze 'un' always carries its axes"):
        fix(dyn, node="un")
