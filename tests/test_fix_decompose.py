"""decompose: exact decompositions (Scaler, CenterCropPad, Compress, BitShift, Mish), each checked in onnxruntime."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.fixes import FixError, get_fix
from surgery.fixes.decompose import DECOMPOSITIONS
from surgery.samples import build
from surgery.verify import verify

fix = get_fix("decompose")


def checked(m):
    onnx.checker.check_model(m, full_check=True)
    return m


def _one(op, inputs, outputs, inits=(), opset=18, **attrs):
    g = helper.make_graph(
        [helper.make_node(op, [i.name for i in inputs] + [t.name for t in inits], ["y"], name="n", **attrs)],
        "g",
        inputs,
        outputs,
        list(inits),
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", opset)])


def test_ml_scaler_becomes_sub_mul_and_drops_the_ml_domain():
    #   features[2,4] -> ai.onnx.ml::Scaler(offset, scale) -> Cast -> MatMul(w) -> Relu -> output
    model = build("ml_scaler")
    out = checked(fix(model, node="/prep/Scaler"))
    assert [n.op_type for n in out.graph.node][:2] == ["Sub", "Mul"]
    assert out.graph.node[1].output[0] == "scaled"  # readers untouched
    assert "ai.onnx.ml" not in {o.domain for o in out.opset_import}
    report = verify(model, out)
    assert report.status == "ok" and report.worst()[1] <= 1e-6


@pytest.mark.parametrize(
    "shape, target, out_shape",
    [([6, 7], [4, 7], [4, 7]), ([3, 5], [6, 2], [6, 2]), ([2, 3], [3, 3], [3, 3])],  # crop, crop+pad, odd pad
)
def test_center_crop_pad_becomes_slice_pad(shape, target, out_shape):
    #   x -> CenterCropPad(shape=target) -> y
    model = _one(
        "CenterCropPad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(np.array(target, np.int64), "target")],
    )
    out = checked(fix(model, node="n"))
    assert [n.op_type for n in out.graph.node] == ["Slice", "Pad"]
    report = verify(model, out)
    assert report.status == "ok" and report.worst() == (0.0, 0.0), report.summary()


@pytest.mark.parametrize("axis", [1, None])
def test_compress_with_constant_condition_becomes_gather(axis):
    #   x[3,4] -> Compress(cond=[1,0,1,1], axis) -> y
    cond = numpy_helper.from_array(np.array([True, False, True, True]), "cond")
    out_shape = [3, 3] if axis == 1 else [3]
    kw = {} if axis is None else {"axis": axis}
    model = _one(
        "Compress",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [cond],
        **kw,
    )
    out = checked(fix(model, node="n"))
    assert "Gather" in [n.op_type for n in out.graph.node] and "Compress" not in [
        n.op_type for n in out.graph.node
    ]
    assert verify(model, out).worst() == (0.0, 0.0)


@pytest.mark.parametrize("direction, dtype", [("LEFT", TensorProto.UINT8), ("RIGHT", TensorProto.UINT32)])
def test_bitshift_by_constant_becomes_mul_or_div(direction, dtype):
    #   x -> BitShift(amount=[1, 3, 7]) -> y
    np_t = helper.tensor_dtype_to_np_dtype(dtype)
    model = _one(
        "BitShift",
        [helper.make_tensor_value_info("x", dtype, [3])],
        [helper.make_tensor_value_info("y", dtype, [3])],
        [numpy_helper.from_array(np.array([1, 3, 7], np_t), "amount")],
        direction=direction,
    )
    out = checked(fix(model, node="n"))
    assert [n.op_type for n in out.graph.node] == ["Mul" if direction == "LEFT" else "Div"]
    feeds = {"x": np.array([255, 200, 129], np_t)}  # LEFT on uint8 drops the high bits, as the shift does
    report = verify(model, out, feeds=feeds)
    assert report.status == "ok" and report.worst() == (0.0, 0.0)


def test_mish_becomes_softplus_tanh_mul():
    model = _one(
        "Mish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])],
    )
    out = checked(fix(model, node="n"))
    assert [n.op_type for n in out.graph.node] == ["Softplus", "Tanh", "Mul"]
    assert verify(model, out).status == "ok"


def test_table_and_refusals():
    assert {op for _, op in DECOMPOSITIONS} >= {"Scaler", "CenterCropPad", "Compress", "BitShift", "Mish"}
    with pytest.raises(
        FixError, match=r"no decomposition for MatMul \('/fc/MatMul'\). Note: decompositions exist for"
    ):
        fix(build("ml_scaler"), node="/fc/MatMul")
    model = _one(
        "Compress",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    with pytest.raises(FixError, match="input 'c' is not a constant; fold constants first"):
        fix(model, node="n")
    dyn = _one(
        "CenterCropPad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
        [numpy_helper.from_array(np.array([2, 2], np.int64), "t")],
    )
    with pytest.raises(FixError, match="needs a static input shape; freeze the shapes first"):
        fix(dyn, node="n")
