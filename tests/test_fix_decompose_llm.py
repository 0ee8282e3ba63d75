"""The LLM-export decompositions and rewrites of issue 28 (surgery.fixes.decompose_llm) against onnxruntime's own
kernels: RotaryEmbedding / RMSNormalization / Attention (opset 23), SimplifiedLayerNormalization,
SkipSimplifiedLayerNormalization, com.microsoft RotaryEmbedding and MatMulNBits; the cos/sin caches expanded to
the input's batch; a uint8 input cast before the data movement that carried it."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.fixes import FixError, get_fix
from surgery.fixes.decompose_llm import dequantize_nbits


def _run(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _model(node, inputs, outputs, inits=(), opset=23, ms=False):
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    g = helper.make_graph([node], "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=ops, ir_version=10)


def _same_after_decompose(model, feeds, tol=2e-6):
    fixed = get_fix("decompose").fn(model, node=model.graph.node[0].name)
    assert model.graph.node[0].op_type not in {n.op_type for n in fixed.graph.node}
    for a, b in zip(_run(model, feeds), _run(fixed, feeds)):
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, atol=tol, rtol=0)
    return fixed


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


R = np.random.default_rng(0)
F = TensorProto.FLOAT


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("form", ["4d", "3d", "positions", "partial"])
def test_rotary_embedding_opset23_equals_onnxruntime(form, interleaved):
    b, n, s, h = 2, 2, 3, 8
    attrs = {"interleaved": interleaved}
    inputs = ["x", "cos", "sin"]
    x_shape = [b, n, s, h] if form != "3d" else [b, s, n * h]
    if form == "3d":
        attrs["num_heads"] = n
    rot = h // 2 if form == "partial" else h
    if form == "partial":
        attrs["rotary_embedding_dim"] = rot
    cache = [b, s, rot // 2] if form != "positions" else [10, rot // 2]
    feeds = {
        "x": R.standard_normal(x_shape).astype(np.float32),
        "cos": R.standard_normal(cache).astype(np.float32),
        "sin": R.standard_normal(cache).astype(np.float32),
    }
    vis = [_vi("x", F, x_shape), _vi("cos", F, cache), _vi("sin", F, cache)]
    if form == "positions":
        inputs.append("pos")
        feeds["pos"] = R.integers(0, 10, (b, s)).astype(np.int64)
        vis.append(_vi("pos", TensorProto.INT64, [b, s]))
    node = helper.make_node("RotaryEmbedding", inputs, ["y"], name="rope", **attrs)
    _same_after_decompose(_model(node, vis, [_vi("y", F, x_shape)]), feeds)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_normalization_equals_onnxruntime(axis):
    shape = [2, 3, 8]
    scale = numpy_helper.from_array(
        R.standard_normal(shape[axis:] if axis > 0 else [8]).astype(np.float32), "g"
    )
    node = helper.make_node("RMSNormalization", ["x", "g"], ["y"], name="rms", axis=axis, epsilon=1e-5)
    m = _model(node, [_vi("x", F, shape)], [_vi("y", F, shape)], [scale])
    _same_after_decompose(m, {"x": R.standard_normal(shape).astype(np.float32) * 3})


@pytest.mark.parametrize("mask", ["none", "bool", "float", "causal"])
def test_attention_opset23_grouped_query_equals_onnxruntime(mask):
    b, nq, nk, s, t, h = 2, 4, 2, 3, 5, 8
    feeds = {
        "q": R.standard_normal([b, nq, s, h]).astype(np.float32),
        "k": R.standard_normal([b, nk, t, h]).astype(np.float32),
        "v": R.standard_normal([b, nk, t, h]).astype(np.float32),
    }
    vis = [_vi("q", F, [b, nq, s, h]), _vi("k", F, [b, nk, t, h]), _vi("v", F, [b, nk, t, h])]
    inputs, attrs = ["q", "k", "v"], {}
    if mask == "bool":
        feeds["m"] = R.random([b, 1, s, t]) > 0.3
        feeds["m"][..., 0] = True
        vis.append(_vi("m", TensorProto.BOOL, [b, 1, s, t]))
        inputs.append("m")
    if mask == "float":
        feeds["m"] = R.standard_normal([s, t]).astype(np.float32)
        vis.append(_vi("m", F, [s, t]))
        inputs.append("m")
    if mask == "causal":
        attrs["is_causal"] = 1
    node = helper.make_node("Attention", inputs, ["y"], name="attn", **attrs)
    _same_after_decompose(_model(node, vis, [_vi("y", F, [b, nq, s, h])]), feeds)


def test_attention_with_past_state_is_refused():
    node = helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "pko", "pvo"], name="attn")
    vis = [_vi(x, F, [1, 2, 3, 4]) for x in ("q", "k", "v", "pk", "pv")]
    outs = [_vi(x, F, None) for x in ("y", "pko", "pvo")]
    with pytest.raises(FixError, match="past_key"):
        get_fix("decompose").fn(_model(node, vis, outs), node="attn")


def test_skip_simplified_and_simplified_layer_norm_equal_onnxruntime():
    shape = [2, 3, 8]
    gamma = numpy_helper.from_array(R.standard_normal([8]).astype(np.float32), "g")
    bias = numpy_helper.from_array(R.standard_normal([8]).astype(np.float32), "b")
    node = helper.make_node(
        "SkipSimplifiedLayerNormalization", ["x", "s", "g", "b"], ["y", "", "", "sum"], name="n",
        domain="com.microsoft", epsilon=1e-6,
    )  # fmt: skip
    m = _model(node, [_vi("x", F, shape), _vi("s", F, shape)], [_vi("y", F, shape), _vi("sum", F, shape)],
               [gamma, bias], opset=17, ms=True)  # fmt: skip
    feeds = {
        "x": R.standard_normal(shape).astype(np.float32),
        "s": R.standard_normal(shape).astype(np.float32),
    }
    _same_after_decompose(m, feeds)
    node = helper.make_node(
        "SimplifiedLayerNormalization", ["x", "g"], ["y"], name="n", epsilon=1e-6, axis=-1
    )
    m = _model(node, [_vi("x", F, shape)], [_vi("y", F, shape)], [gamma], opset=17)
    _same_after_decompose(m, {"x": feeds["x"]})


@pytest.mark.parametrize("form", ["3d", "4d", "offset", "interleaved"])
def test_ms_rotary_embedding_equals_onnxruntime(form):
    b, n, s, h, max_pos = 2, 2, 3, 8, 12
    x_shape = [b, s, n * h] if form != "4d" else [b, n, s, h]
    attrs = {"num_heads": n, "interleaved": int(form == "interleaved")}
    pos_shape = [1] if form == "offset" else [b, s]
    feeds = {
        "x": R.standard_normal(x_shape).astype(np.float32),
        "pos": (np.array([4]) if form == "offset" else R.integers(0, max_pos, (b, s))).astype(np.int64),
    }
    cos = numpy_helper.from_array(R.standard_normal([max_pos, h // 2]).astype(np.float32), "cos")
    sin = numpy_helper.from_array(R.standard_normal([max_pos, h // 2]).astype(np.float32), "sin")
    node = helper.make_node(
        "RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="rope", domain="com.microsoft", **attrs
    )
    vis = [_vi("x", F, x_shape), _vi("pos", TensorProto.INT64, pos_shape)]
    m = _model(node, vis, [_vi("y", F, x_shape)], [cos, sin], opset=17, ms=True)
    _same_after_decompose(m, feeds)


@pytest.mark.parametrize("zero_points", [None, "packed", "float"])
def test_matmul_nbits_weights_and_product_equal_onnxruntime_at_accuracy_level_0(zero_points):
    k, n, block = 48, 5, 16  # K not a multiple of 32: a padded last block
    blocks = k // block
    q = R.integers(0, 256, (n, blocks, block // 2)).astype(np.uint8)
    scales = (R.random(n * blocks) * 0.1 + 0.01).astype(np.float32)
    inits = [numpy_helper.from_array(q, "w"), numpy_helper.from_array(scales, "sc")]
    inputs = ["a", "w", "sc"]
    if zero_points == "packed":
        inits.append(
            numpy_helper.from_array(R.integers(0, 256, (n, (blocks + 1) // 2)).astype(np.uint8), "zp")
        )
        inputs.append("zp")
    if zero_points == "float":
        inits.append(numpy_helper.from_array((R.random(n * blocks) * 15).astype(np.float32), "zp"))
        inputs.append("zp")
    node = helper.make_node(
        "MatMulNBits", inputs, ["y"], name="mm", domain="com.microsoft", K=k, N=n, bits=4, block_size=block,
        accuracy_level=0,
    )  # fmt: skip
    m = _model(node, [_vi("a", F, ["M", k])], [_vi("y", F, ["M", n])], inits, opset=17, ms=True)
    fixed = _same_after_decompose(m, {"a": R.standard_normal([3, k]).astype(np.float32)}, tol=1e-4)
    assert "com.microsoft" not in {o.domain for o in fixed.opset_import}
    # the weights themselves: column j of the identity picks row j of W^T
    eye = np.eye(k, dtype=np.float32)
    w = dequantize_nbits(
        q, scales, None if zero_points is None else numpy_helper.to_array(inits[2]), k, n, 4, block
    )
    np.testing.assert_allclose(_run(fixed, {"a": eye})[0], w.T, atol=1e-6)


def test_rotary_caches_broadcast_to_the_batch_runs_where_the_original_does_not():
    x_shape = ["N", 2, 3, 4]
    cos = numpy_helper.from_array(R.standard_normal([1, 3, 2]).astype(np.float32), "cos")
    sin = numpy_helper.from_array(R.standard_normal([1, 3, 2]).astype(np.float32), "sin")
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"], name="rope")
    m = _model(node, [_vi("x", F, x_shape)], [_vi("y", F, x_shape)], [cos, sin])
    fixed = get_fix("broadcast_rotary_caches").fn(m, node="rope")
    onnx.checker.check_model(fixed, full_check=True)
    x1 = R.standard_normal([1, 2, 3, 4]).astype(np.float32)
    np.testing.assert_array_equal(_run(fixed, {"x": x1})[0], _run(m, {"x": x1})[0])
    x2 = np.concatenate([x1, x1 * 2])
    with pytest.raises(Exception, match="cos_cache"):  # onnxruntime refuses batch 2 with caches of batch 1
        _run(m, {"x": x2})
    y = _run(fixed, {"x": x2})[0]
    np.testing.assert_allclose(y[1], 2 * y[0], rtol=1e-6)


def test_uint8_input_is_cast_before_transpose_and_slice_exactly():
    nodes = [
        helper.make_node("Slice", ["image", "st", "en", "ax", "stp"], ["bgr"], name="flip"),
        helper.make_node("Transpose", ["bgr"], ["t"], name="perm", perm=[0, 3, 1, 2]),
        helper.make_node("Cast", ["t"], ["f"], name="cast", to=F),
        helper.make_node("Div", ["f", "k"], ["y"], name="div"),
    ]
    inits = [numpy_helper.from_array(np.array(v, np.int64), nm) for nm, v in
             (("st", [-1]), ("en", [-(2**62)]), ("ax", [3]), ("stp", [-1]))]  # fmt: skip
    inits.append(numpy_helper.from_array(np.array(255.0, np.float32), "k"))
    g = helper.make_graph(nodes, "g", [_vi("image", TensorProto.UINT8, ["N", 4, 4, 3])],
                          [_vi("y", F, ["N", 3, 4, 4])], inits)  # fmt: skip
    m = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    fixed = get_fix("cast_uint8_input").fn(m, input="image")
    onnx.checker.check_model(fixed, full_check=True)
    assert fixed.graph.input[0].type.tensor_type.elem_type == TensorProto.UINT8
    assert (
        fixed.graph.node[0].op_type == "Cast"
        and fixed.graph.node[1].input[0] == fixed.graph.node[0].output[0]
    )
    img = R.integers(0, 256, (2, 4, 4, 3)).astype(np.uint8)
    np.testing.assert_array_equal(_run(fixed, {"image": img})[0], _run(m, {"image": img})[0])


def test_uint8_input_read_as_uint8_elsewhere_is_refused():
    nodes = [
        helper.make_node("Transpose", ["image"], ["t"], name="perm", perm=[0, 3, 1, 2]),
        helper.make_node("Cast", ["t"], ["y"], name="cast", to=F),
        helper.make_node("Identity", ["image"], ["raw"], name="keep"),
    ]
    g = helper.make_graph(nodes, "g", [_vi("image", TensorProto.UINT8, [1, 4, 4, 3])],
                          [_vi("y", F, None), _vi("raw", TensorProto.UINT8, None)])  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(FixError, match="data movement"):
        get_fix("cast_uint8_input").fn(m, input="image")


def test_a_decoder_with_a_kv_cache_is_verified_with_related_lengths():
    """past + new tokens = the mask's length: one size for every symbolic dim cannot run such a model."""
    from surgery.feeds import kv_cache_dims
    from surgery.verify import verify

    i64 = TensorProto.INT64
    nodes = [
        helper.make_node("ReduceSum", ["past_key_values.0.key", "axes"], ["p"], keepdims=0),
        helper.make_node("Cast", ["input_ids"], ["ids_f"], to=F),
        helper.make_node("Concat", ["p", "ids_f"], ["both"], axis=1),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=F),
        helper.make_node("Add", ["both", "mask_f"], ["y"]),
    ]
    inputs = [
        _vi("input_ids", i64, ["batch", "sequence_length"]),
        _vi("attention_mask", i64, ["batch", "total_length"]),
        _vi("past_key_values.0.key", F, ["batch", 2, "past_sequence_length", 4]),
    ]
    axes = numpy_helper.from_array(np.array([1, 3], np.int64), "axes")
    g = helper.make_graph(nodes, "kv", inputs, [_vi("y", F, ["batch", "total_length"])], [axes])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert kv_cache_dims(m) == {
        "past_sequence_length": 4,
        "total_length": 7,
        "sequence_length": 3,
    }  # the batch is left free: 1 only where a GroupQueryAttention needs it (tests/test_feeds.py)
    report = verify(m, m)
    assert report.status == "ok", report.summary()
    # onnxruntime-genai's symbolic head size: twice its rotary cache's width
    genai = onnx.ModelProto()
    genai.CopyFrom(m)
    genai.graph.input[2].type.tensor_type.shape.dim[3].dim_param = "kv_cache_dim"
    genai.graph.initializer.append(numpy_helper.from_array(np.zeros([16, 2], np.float32), "cos_cache"))
    assert kv_cache_dims(genai)["kv_cache_dim"] == 4
    assert verify(genai, genai).status == "ok"
    # a model whose mask has the tokens' own length is left to the usual sizes
    inputs[1] = _vi("attention_mask", i64, ["batch", "sequence_length"])
    g2 = helper.make_graph(nodes[:1], "kv", inputs, [_vi("p", F, None)], [axes])
    assert kv_cache_dims(helper.make_model(g2, opset_imports=[helper.make_opsetid("", 17)])) == {}


@pytest.mark.parametrize("form", ["rotary", "plain", "no-past", "window", "separate-kv"])
def test_group_query_attention_equals_onnxruntime(form):
    b, s, p, n, nkv, h = 1, 3, 2, 4, 2, 16  # onnxruntime: head_size a multiple of 16
    b = 2 if form == "no-past" else 1  # onnxruntime: batch 1 when new tokens follow a past
    past = 0 if form == "no-past" else p
    total = past + s
    i32 = TensorProto.INT32
    attrs = {"num_heads": n, "kv_num_heads": nkv, "do_rotary": int(form != "plain")}
    if form == "window":
        attrs["local_window_size"] = 2
    feeds, vis = {}, []
    if form == "separate-kv":
        names = ["q", "k", "v"]
        for nm, width in (("q", n * h), ("k", nkv * h), ("v", nkv * h)):
            feeds[nm] = R.standard_normal([b, s, width]).astype(np.float32)
            vis.append(_vi(nm, F, [b, s, width]))
    else:
        names = ["qkv", "", ""]
        feeds["qkv"] = R.standard_normal([b, s, (n + 2 * nkv) * h]).astype(np.float32)
        vis.append(_vi("qkv", F, [b, s, (n + 2 * nkv) * h]))
    if past:
        for nm in ("pk", "pv"):
            feeds[nm] = R.standard_normal([b, nkv, past, h]).astype(np.float32)
            vis.append(_vi(nm, F, [b, nkv, past, h]))
        names += ["pk", "pv"]
    else:
        names += ["", ""]
    inits = [
        numpy_helper.from_array(np.full([b], total - 1, np.int32), "seqlens"),
        numpy_helper.from_array(np.array(total, np.int32), "total"),
        numpy_helper.from_array(R.standard_normal([16, h // 2]).astype(np.float32), "cos"),
        numpy_helper.from_array(R.standard_normal([16, h // 2]).astype(np.float32), "sin"),
    ]
    names += ["seqlens", "total", "cos", "sin"]
    node = helper.make_node(
        "GroupQueryAttention", names, ["y", "pko", "pvo"], name="gqa", domain="com.microsoft", **attrs
    )
    outs = [_vi("y", F, [b, s, n * h]), _vi("pko", F, [b, nkv, total, h]), _vi("pvo", F, [b, nkv, total, h])]
    m = _model(node, vis, outs, inits, opset=17, ms=True)
    assert i32 == inits[0].data_type
    _same_after_decompose(m, feeds, tol=1e-5)


def test_uint8_input_whose_shape_is_also_read_is_cast_first():
    """torch's dynamo exporter reads the image's Shape beside the Transpose: a Shape is the same of the float."""
    nodes = [
        helper.make_node("Shape", ["image"], ["s"], name="shape"),
        helper.make_node("Transpose", ["image"], ["t"], name="perm", perm=[0, 3, 1, 2]),
        helper.make_node("Cast", ["t"], ["y"], name="cast", to=F),
    ]
    g = helper.make_graph(nodes, "g", [_vi("image", TensorProto.UINT8, ["N", 4, 4, 3])],
                          [_vi("y", F, None), _vi("s", TensorProto.INT64, None)])  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    fixed = get_fix("cast_uint8_input").fn(m, input="image")
    img = R.integers(0, 256, (2, 4, 4, 3)).astype(np.uint8)
    for a, b in zip(_run(m, {"image": img}), _run(fixed, {"image": img})):
        np.testing.assert_array_equal(a, b)


def test_gather_block_quantized_equals_onnxruntime():
    rows, width, block = 5, 64, 32
    packed = R.integers(0, 256, (rows, width // 2)).astype(np.uint8)
    scales = (R.random((rows, width // block)) * 0.1).astype(np.float32)
    inits = [numpy_helper.from_array(packed, "table"), numpy_helper.from_array(scales, "sc")]
    node = helper.make_node(
        "GatherBlockQuantized", ["table", "ids", "sc"], ["y"], name="gbq", domain="com.microsoft",
        bits=4, block_size=block, gather_axis=0, quantize_axis=1,
    )  # fmt: skip
    m = _model(
        node, [_vi("ids", TensorProto.INT64, [2, 3])], [_vi("y", F, [2, 3, width])], inits, opset=17, ms=True
    )
    fixed = _same_after_decompose(m, {"ids": R.integers(0, rows, (2, 3)).astype(np.int64)}, tol=0)
    assert [n.op_type for n in fixed.graph.node] == ["Gather"]
