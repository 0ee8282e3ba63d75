"""int64_to_int32: Slice bounds clamped exactly, out-of-range data refused, INT64 constants and their shape
arithmetic retyped to INT32 with Casts at the boundaries."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.fixes import FixError, get_fix
from surgery.samples import build
from surgery.verify import verify

fix = get_fix("int64_to_int32")
BIG = np.iinfo(np.int64).max


def _inits(m):
    return {t.name: t for t in m.graph.initializer}


def test_sample_refuses_naming_the_tensor_and_values():
    #   input[1,8] -> Slice(starts=[1], ends=[INT64_MAX], axes=[1]) -> Relu -> output
    #   ids[1,4] -> Add(offset=[5e9]) -> shifted
    with pytest.raises(FixError, match=r"'offset' = \[5000000000\] \(read by Add '/ids/Add'\)"):
        fix(build("int64_out_of_range"))


def test_sample_slice_bounds_clamped_to_the_dimension():
    model = build("int64_out_of_range")
    out = fix(model, only_slice_bounds=True)
    onnx.checker.check_model(out, full_check=True)
    inits = _inits(out)
    assert numpy_helper.to_array(inits["ends"]).tolist() == [8]
    assert inits["offset"].data_type == TensorProto.INT64  # left alone in this mode
    assert verify(model, out).status == "ok"


def test_negative_step_bounds_stay_exact():
    #   x[6] -> Slice(starts=[INT64_MAX], ends=[-INT64_MAX], steps=[-1]) -> y (reversed)
    g = helper.make_graph(
        [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"], name="rev")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])],
        [
            numpy_helper.from_array(np.array([BIG], np.int64), "s"),
            numpy_helper.from_array(np.array([-BIG], np.int64), "e"),
            numpy_helper.from_array(np.array([0], np.int64), "a"),
            numpy_helper.from_array(np.array([-1], np.int64), "st"),
        ],
    )
    model = helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])
    out = fix(model, only_slice_bounds=True)
    assert numpy_helper.to_array(_inits(out)["s"]).tolist() == [6]
    assert numpy_helper.to_array(_inits(out)["e"]).tolist() == [-7]
    assert verify(model, out).status == "ok"


def _shape_model():
    #   x[N,2,3] -> Shape -> Gather(zero) -> Unsqueeze(ax0) -> Concat(.., minus1) -> Reshape(x, ..) -> y[N,6]
    #   ids[4] (INT64 data) -> Add(offset=[7]) -> z       idx[2] (INT64) -> Gather(table, idx) -> t
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["b"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"], name="unsq"),
        helper.make_node("Concat", ["b1", "minus1"], ["shp"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "shp"], ["y"], name="reshape"),
        helper.make_node("Add", ["ids", "offset"], ["z"], name="add"),
        helper.make_node("Gather", ["table", "idx"], ["t"], name="lookup", axis=0),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 3]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [4]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6]),
            helper.make_tensor_value_info("z", TensorProto.INT64, [4]),
            helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3]),
        ],
        [
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
            numpy_helper.from_array(np.array([0], np.int64), "ax0"),
            numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
            numpy_helper.from_array(np.array([7], np.int64), "offset"),
            numpy_helper.from_array(np.array([2, 0], np.int64), "idx"),
            numpy_helper.from_array(np.arange(9, dtype=np.float32).reshape(3, 3), "table"),
        ],
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


def test_constants_and_shape_arithmetic_become_int32_with_casts_at_boundaries():
    model = _shape_model()
    out = fix(model)
    onnx.checker.check_model(out, full_check=True)
    types = {t.name: t.data_type for t in out.graph.initializer}
    assert (
        types["zero"] == types["minus1"] == types["idx"] == TensorProto.INT32
    )  # read as INT32 by the schema
    assert types["ax0"] == TensorProto.INT64  # Unsqueeze's axes must be INT64: untouched, no Cast churn
    assert types["offset"] == TensorProto.INT64  # meets run-time data (ids): never narrowed
    casts = {
        n.output[0]: helper.get_attribute_value(n.attribute[0]) for n in out.graph.node if n.op_type == "Cast"
    }
    assert casts == {
        "b1/int32": TensorProto.INT32,
        "shp/int64": TensorProto.INT64,
    }  # Shape side down, Reshape up
    reshape = next(n for n in out.graph.node if n.name == "reshape")
    assert reshape.input[1] == "shp/int64"
    assert [o.name for o in out.graph.output] == ["y", "z", "t"]
    assert verify(model, out, dims={"N": 3}).status == "ok"


def test_graph_output_keeps_its_int64_type():
    #   s = Shape(x) ; d = Add(s, one) is a graph output (INT64) -> computed in INT32, cast back under its name
    g = helper.make_graph(
        [
            helper.make_node("Shape", ["x"], ["s"], name="shape"),
            helper.make_node("Add", ["s", "one"], ["d"], name="add"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("d", TensorProto.INT64, [2])],
        [numpy_helper.from_array(np.array([1], np.int64), "one")],
    )
    model = helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])
    out = fix(model)
    onnx.checker.check_model(out, full_check=True)
    assert [n.op_type for n in out.graph.node] == ["Shape", "Cast", "Add", "Cast"]
    assert (
        out.graph.node[-1].output[0] == "d"
        and out.graph.output[0].type.tensor_type.elem_type == TensorProto.INT64
    )
    assert verify(model, out, dims={"N": 5}).status == "ok"


def test_nothing_to_do_is_refused():
    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])],
        [numpy_helper.from_array(np.array([6], np.int64), "shape")],
    )
    model = helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(FixError, match="no INT64 constant to bring to INT32"):
        fix(model)
    with pytest.raises(FixError, match="no Slice start/end outside the INT32 range"):
        fix(model, only_slice_bounds=True)
