"""fold_constants: targeted folds (Resize scales, TopK K), whole-graph folds, constant If, static Shape,
size_threshold, external data read only where folded, refusals."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.fixes import FixError, get_fix
from surgery.fixes.fold_constants import fold_constants
from surgery.graph import GraphFacts
from surgery.samples import build
from surgery.verify import verify

fold = get_fix("fold_constants")


def checked(m):
    onnx.checker.check_model(m, full_check=True)
    return m


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", opset)])


def test_resize_scales_chain_becomes_one_initializer():
    #   input -> Conv -> Resize(roi=Constant_3, scales=?) -> Relu -> output
    #   scales = Concat_1(Constant, Cast(Concat(Unsqueeze(Constant_1), Unsqueeze(Constant_2))))
    model = build("resize_scales_chain")
    scales = "/up/Concat_1_output_0"
    out = checked(fold(model, tensors=[scales]))
    assert [n.name for n in out.graph.node] == [
        "/conv/Conv",
        "/up/Constant_3_output_0",
        "/up/Resize",
        "/relu/Relu",
    ]
    resize = next(n for n in out.graph.node if n.op_type == "Resize")
    assert resize.input[2] == scales
    inits = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    assert inits[scales].tolist() == [1.0, 1.0, 2.0, 2.0]
    assert set(inits) == {"conv.weight", scales}  # the chain's Constants are gone with it
    report = verify(model, out)
    assert report.status == "ok" and report.worst() == (0.0, 0.0)
    assert model.graph.node[4].op_type == "Unsqueeze"  # the input model is untouched


def test_topk_computed_k_folds_through_a_static_shape():
    #   scores[1,16] -> Shape -> Slice[1:2] -> Div(2) -> k ; TopK(scores, k)
    model = build("topk_computed_k")
    out = checked(fold(model))
    assert [n.op_type for n in out.graph.node] == ["TopK"]
    k = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}["k"]
    assert k.tolist() == [8]
    assert verify(model, out).status == "ok"


def test_if_with_constant_condition_is_inlined_with_unique_names():
    #   input -> ReduceSum -> x_sum ; cond = Greater(threshold, 0) ; If(cond){then: Identity(x_sum) | else: Reshape}
    model = build("if_branch_shapes")
    out = checked(fold(model))
    # then runs (1 > 0): its Identity only named the branch output, so it goes too
    assert [n.name for n in out.graph.node] == ["/pre/ReduceSum", "/post/Relu"]
    assert out.graph.node[1].input[0] == "x_sum"
    assert verify(model, out).status == "ok"
    other = build("if_branch_shapes")
    threshold = next(t for t in other.graph.initializer if t.name == "threshold")
    threshold.CopyFrom(numpy_helper.from_array(np.array(-1.0, np.float32), "threshold"))
    other.graph.output[0].CopyFrom(
        helper.make_tensor_value_info("output", TensorProto.FLOAT, [4])
    )  # else's shape
    out = checked(fold(other))  # else runs: its Reshape moves into the main graph under a prefixed name
    assert [n.name for n in out.graph.node] == [
        "/pre/ReduceSum",
        "/if/If/else//if/else/Reshape",
        "/post/Relu",
    ]
    assert out.graph.node[1].output[0] == "if_out"
    assert verify(other, out).status == "ok"


def test_whole_graph_fold_keeps_partly_dynamic_shapes_and_picks_static_dims():
    #   x[N,6] -> Shape -> Gather(1) -> c (=6, static) ; Reshape(x, Concat([-1], c))
    #   x -> Shape -> Gather(0) stays (N is dynamic)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "one"], ["c"], name="gather_c", axis=0),
        helper.make_node("Concat", ["m1", "c"], ["shp"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "shp"], ["y"], name="reshape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather_n", axis=0),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6]),
            helper.make_tensor_value_info("n", TensorProto.INT64, [1]),
        ],
        [
            numpy_helper.from_array(np.array([1], np.int64), "one"),
            numpy_helper.from_array(np.array([0], np.int64), "zero"),
            numpy_helper.from_array(np.array([-1], np.int64), "m1"),
        ],
    )
    out = checked(fold(model))
    assert [n.name for n in out.graph.node] == ["shape", "reshape", "gather_n"]
    assert numpy_helper.to_array(next(t for t in out.graph.initializer if t.name == "shp")).tolist() == [
        -1,
        6,
    ]
    assert verify(model, out, dims={"N": 3}).status == "ok"


def _big_chain(n: int = 64):
    #   c[n,n] -> Mul(2) -> Add(1) -> big ; y = x + big
    nodes = [
        helper.make_node("Mul", ["c", "two"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "one"], ["big"], name="add"),
        helper.make_node("Add", ["x", "big"], ["y"], name="use"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
        [
            numpy_helper.from_array(np.arange(n * n, dtype=np.float32).reshape(n, n), "c"),
            numpy_helper.from_array(np.array(2, np.float32), "two"),
            numpy_helper.from_array(np.array(1, np.float32), "one"),
        ],
    )


def test_size_threshold_leaves_large_results_unmaterialised():
    model = _big_chain(64)  # 16 KiB result
    kept = checked(fold(model, size_threshold=1024))
    assert [n.name for n in kept.graph.node] == ["mul", "add", "use"]
    folded = checked(fold(model, size_threshold=1 << 20))
    assert [n.name for n in folded.graph.node] == ["use"]
    assert verify(model, folded).status == "ok"


def test_result_is_topologically_sorted():
    model = _big_chain(4)
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend([nodes[2], nodes[1], nodes[0]])  # reversed: not sorted
    model.graph.node.append(helper.make_node("Relu", ["y"], ["z"], name="relu"))
    model.graph.output[0].name = "z"
    out = checked(fold(model, size_threshold=0))  # nothing materialised: only the order is fixed
    assert [n.name for n in out.graph.node] == ["mul", "add", "use", "relu"]


def test_external_weights_are_read_only_for_folded_tensors(tmp_path):
    #   W (external, not folded) + x ; chain c (external) -> Mul(2) -> Add(1) -> big
    from onnx.external_data_helper import convert_model_to_external_data

    model = _big_chain(8)
    model.graph.initializer.append(numpy_helper.from_array(np.ones((8, 8), np.float32), "W"))
    model.graph.node.append(helper.make_node("Add", ["y", "W"], ["z"], name="plus_w"))
    model.graph.output[0].name = "z"
    convert_model_to_external_data(model, all_tensors_to_one_file=False, size_threshold=128)
    onnx.save_model(model, str(tmp_path / "m.onnx"))
    (tmp_path / "W").unlink()  # W's weights are gone: folding must not need them
    proto = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    out = fold(proto, base_dir=str(tmp_path))
    assert [n.name for n in out.graph.node] == ["use", "plus_w"]
    w = next(t for t in out.graph.initializer if t.name == "W")
    assert w.data_location == TensorProto.EXTERNAL  # still a reference, never read
    big = numpy_helper.to_array(next(t for t in out.graph.initializer if t.name == "big"))
    assert np.array_equal(big, np.arange(64, dtype=np.float32).reshape(8, 8) * 2 + 1)


def test_refuses_a_tensor_that_depends_on_an_input():
    model = build("resize_scales_chain")
    with pytest.raises(
        FixError, match="'conv_out' is not computed only from constants.*freeze the input shapes"
    ):
        fold(model, tensors=["conv_out"])


def test_fold_is_idempotent():
    model = build("resize_scales_chain")
    once = fold(model)
    twice = fold(once)
    assert len(twice.graph.node) == len(once.graph.node) == 3
    assert GraphFacts.of(twice).constant == GraphFacts.of(once).constant


def test_untyped_intermediates_still_fold():
    #   a(int32) -> Add(a, a) -> b -> Mul(b, x) -> y   (facts without inference: b's dtype is unknown)
    model = _model(
        [
            helper.make_node("Add", ["a", "a"], ["b"], name="add"),
            helper.make_node("Mul", ["b", "x"], ["y"], name="mul"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.INT32, [3])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [3])],
        [numpy_helper.from_array(np.arange(3, dtype=np.int32), "a")],
    )
    from surgery.fixes import fold_constants as mod

    facts = GraphFacts.of(model, infer=False)
    values = mod._evaluate(model, facts, ["b"], {}, None)
    assert values["b"].dtype == np.int32 and values["b"].tolist() == [0, 2, 4]


def test_max_bytes_refuses_before_computing_and_names_the_node():
    #   s=[64,64,3,3] -> ConstantOfShape -> w (147 KiB of float32) -> Conv(x, w) -> y
    import onnx.parser

    model = onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 13]>
        g (float[1,64,8,8] x) => (float[1,64,6,6] y) <int64[4] s = {64, 64, 3, 3}> {
          [w] w = ConstantOfShape <value = float[1] {0.5}> (s)
          [conv] y = Conv (x, w)
        }"""
    )
    before = model.SerializeToString()
    with pytest.raises(
        FixError,
        match=r"folding 'w' \(read by Conv 'conv'\) would make a constant of 147,456 bytes, over max_bytes=1,000",
    ):
        fold_constants(model, tensors=["w"], max_bytes=1000)
    assert model.SerializeToString() == before  # the model is untouched
    out = fold_constants(model, tensors=["w"], max_bytes=147_456)
    assert [n.op_type for n in out.graph.node] == ["Conv"] and out.graph.initializer[-1].name == "w"
    with pytest.raises(FixError, match="max_bytes must be a number of bytes"):
        fold_constants(model, tensors=["w"], max_bytes="lots")


def test_an_initializer_written_in_place_is_the_tensor_from_array_makes():
    """`add_initializer` (what the primitives add weights with) writes the bytes into the graph once; the tensor
    must be the one numpy_helper.from_array makes, byte for byte, for every dtype (the ones it does not write
    itself go through from_array)."""
    import ml_dtypes

    from surgery.fixes._util import add_initializer

    rng = np.random.default_rng(0)
    arrays = [
        rng.standard_normal((3, 4)).astype(t)
        for t in (np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8)
    ]
    arrays += [
        np.array(7, np.uint16),  # 0-d
        np.zeros((0, 3), np.uint32),  # empty
        np.arange(12, dtype=np.uint64).reshape(3, 4).T,  # not contiguous
        rng.standard_normal((2, 3)) > 0,  # bool
        np.array(["a", "bé"], dtype=object),  # strings
        rng.standard_normal(5).astype(ml_dtypes.bfloat16),
        np.array([1, -2, 3], dtype=ml_dtypes.int4),  # packed two to a byte
    ]
    graph = onnx.GraphProto()
    for k, a in enumerate(arrays):
        written = add_initializer(graph, a, f"w{k}")
        assert written == graph.initializer[-1]
        expected = numpy_helper.from_array(a, f"w{k}")
        assert graph.initializer[k].SerializeToString() == expected.SerializeToString(), a.dtype


def _qdq_model():
    """x (batch x 4) quantized and dequantized, times INT8 weights through their DequantizeLinear; the weights'
    shape is an output too."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.integers(-100, 100, (4, 4)).astype(np.int8), "w_q"),
        numpy_helper.from_array(np.array(0.02, np.float32), "s_w"),
        numpy_helper.from_array(np.array(0, np.int8), "zp_w"),
        numpy_helper.from_array(np.array(0.05, np.float32), "s_x"),
        numpy_helper.from_array(np.array(0, np.int8), "zp_x"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "s_w", "zp_w"], ["w"], name="dq_w"),
        helper.make_node("QuantizeLinear", ["x", "s_x", "zp_x"], ["xq"], name="q_x"),
        helper.make_node("DequantizeLinear", ["xq", "s_x", "zp_x"], ["xdq"], name="dq_x"),
        helper.make_node("MatMul", ["xdq", "w"], ["y"], name="mm"),
        helper.make_node("Shape", ["w"], ["w_shape"], name="shape_w"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    outs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
        helper.make_tensor_value_info("w_shape", TensorProto.INT64, [2]),
    ]
    return _model(nodes, [x], outs, inits)


def test_a_qdq_model_keeps_its_int8_weights_through_folding_and_a_frozen_shape():
    """A DequantizeLinear of INT8 weights is how TensorRT's explicit quantization (and onnxruntime's QDQ fusion)
    knows a layer runs quantized: folding it would write float32 weights and the verification would still say
    exact. Neither the whole-graph fold nor freezing an input's shape (which folds after) touches it; the
    weights' shape still folds."""
    from collections import Counter

    model = checked(_qdq_model())
    for out in (fold(model), get_fix("freeze_shapes")(model, shapes={"x": [2, 4]})):
        ops = Counter(n.op_type for n in out.graph.node)
        assert ops["DequantizeLinear"] == 2 and ops["QuantizeLinear"] == 1 and "Shape" not in ops, ops
        assert numpy_helper.to_array({t.name: t for t in out.graph.initializer}["w_q"]).dtype == np.int8
        assert verify(model, out).ok


def test_constant_nodes_become_initializers_as_they_are_without_onnxruntime(monkeypatch):
    """A Paddle export keeps every weight in a Constant node: each becomes an initializer holding the node's own
    tensor (its encoding kept: float_data stays float_data, a bfloat16 stays bfloat16), not a value computed
    by onnxruntime and written back. A Cast of a Constant is still computed."""
    import surgery.ort

    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    w_text = helper.make_tensor("w_value", TensorProto.FLOAT, [3, 4], w.reshape(-1).tolist())  # float_data
    b16 = helper.make_tensor("b_value", TensorProto.BFLOAT16, [4], [1.0, -2.0, 0.5, 3.0])
    nodes = [
        helper.make_node("Constant", [], ["w"], name="cw", value=w_text),
        helper.make_node("Constant", [], ["b16"], name="cb", value=b16),
        helper.make_node("Cast", ["b16"], ["b"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["x", "w"], ["xw"], name="mm"),
        helper.make_node("Add", ["xw", "b"], ["y"], name="add"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    model = checked(_model(nodes, [x], [y]))
    sessions = []
    real = surgery.ort.make_session
    monkeypatch.setattr(
        surgery.ort, "make_session", lambda m, *a, **k: sessions.append(m) or real(m, *a, **k)
    )
    out = checked(fold(model))
    assert [n.op_type for n in out.graph.node] == ["MatMul", "Add"]
    inits = {t.name: t for t in out.graph.initializer}
    assert list(inits["w"].float_data) == list(w_text.float_data) and not inits["w"].raw_data
    assert numpy_helper.to_array(inits["w"]).tolist() == w.tolist()
    assert inits["b"].data_type == TensorProto.FLOAT
    assert numpy_helper.to_array(inits["b"]).tolist() == [1.0, -2.0, 0.5, 3.0]
    # one session, for the Cast alone: the weight never went through onnxruntime
    assert len(sessions) == 1
    assert [n.op_type for n in sessions[0].graph.node] == ["Constant", "Cast"]
    assert verify(model, out).ok
