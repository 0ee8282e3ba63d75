"""surgery.feeds: inputs drawn for what they mean (token ids, masks, positions, KV caches, uint8 images), and the
verification that runs on them."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from surgery.feeds import KV_PAST, MASK_BATCH, TEXT_SEQUENCE, draw, kv_cache_dims
from surgery.verify import verify

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _embedding(rows, via=""):
    """ids [batch, seq] -> Cast -> Unsqueeze -> Squeeze -> Gather on a [rows, 4] table: an initializer, or one
    reached through DequantizeLinear (int8), Transpose (a tied lm_head [4, rows]) or Reshape ([rows * 2, 2])."""
    table = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4) / 10
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["i32"], to=TensorProto.INT32),
        helper.make_node("Unsqueeze", ["i32", "ax"], ["u"]),
        helper.make_node("Squeeze", ["u", "ax"], ["ids"]),
    ]
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "ax")]
    stored = {"dequantize": "emb.weight_quantized", "transpose": "lm_head", "reshape": "packed"}.get(
        via, "emb.weight"
    )
    if via == "dequantize":
        inits += [
            numpy_helper.from_array(np.arange(rows * 4, dtype=np.int8).reshape(rows, 4), stored),
            numpy_helper.from_array(np.array(0.1, np.float32), "scale"),
        ]
        nodes.append(helper.make_node("DequantizeLinear", [stored, "scale"], ["emb.weight"]))
    elif via == "transpose":
        inits.append(numpy_helper.from_array(table.T.copy(), stored))
        nodes.append(helper.make_node("Transpose", [stored], ["emb.weight"], perm=[1, 0]))
    elif via == "reshape":
        inits += [
            numpy_helper.from_array(table.reshape(rows * 2, 2), stored),
            numpy_helper.from_array(np.array([-1, 4], np.int64), "rows_by_4"),
        ]
        nodes.append(helper.make_node("Reshape", [stored, "rows_by_4"], ["emb.weight"]))
    else:
        inits.append(numpy_helper.from_array(table, stored))
    nodes.append(helper.make_node("Gather", ["emb.weight", "ids"], ["y"], axis=0))
    return _model(nodes, [_vi("input_ids", I64, ["batch", "seq"])], [_vi("y", F, None)], inits)


def test_token_ids_stay_within_the_embedding_table_and_use_it():
    for rows, via in ((3, "dequantize"), (300, ""), (40, "transpose"), (40, "reshape")):
        made = draw(_embedding(rows, via), seed=0, dims={"batch": 4, "seq": 64})
        ids = made.arrays["input_ids"]
        assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < rows, via
        if rows > 4:
            assert ids.max() > 3  # drawn over the table, not the 0..3 of other integers
        table = {"dequantize": "emb.weight_quantized", "transpose": "lm_head", "reshape": "packed"}.get(
            via, "emb.weight"
        )
        assert made.drawn["input_ids"] == f"token ids < {rows}, rows of {table}"


def test_a_gather_decomposition_is_verified_on_ids_the_table_has():
    """OneHot @ table equals Gather for ids in range only: onnxruntime's Gather refuses an id past the table, so
    the 0..3 other integers get would leave a 3-row table unverified."""
    rows = 3
    original = _embedding(rows)
    table = numpy_helper.to_array(next(t for t in original.graph.initializer if t.name == "emb.weight"))
    changed = _model(
        [
            helper.make_node("OneHot", ["input_ids", "depth", "off_on"], ["hot"], axis=-1),
            helper.make_node("MatMul", ["hot", "emb.weight"], ["y"]),
        ],
        [_vi("input_ids", I64, ["batch", "seq"])],
        [_vi("y", F, None)],
        [
            numpy_helper.from_array(table, "emb.weight"),
            numpy_helper.from_array(np.array(rows, np.int64), "depth"),
            numpy_helper.from_array(np.array([0, 1], np.float32), "off_on"),
        ],
    )
    report = verify(original, changed)
    assert report.status == "ok", report.summary()
    assert report.feeds["input_ids"] == [MASK_BATCH, TEXT_SEQUENCE]
    assert report.drawn["input_ids"] == "token ids < 3, rows of emb.weight"
    assert "inputs: input_ids: token ids < 3, rows of emb.weight" in report.summary()
    assert report.to_dict()["drawn"]["input_ids"].startswith("token ids < 3")


def _decoder(kv=True, positions=False):
    """input_ids, attention_mask (as long as past + new with a KV cache), optional position_ids and one past key;
    the output uses every input."""
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["e"], axis=0),
        helper.make_node("ReduceSum", ["e", "last"], ["tokens"], keepdims=0),
        helper.make_node("Cast", ["attention_mask"], ["m"], to=F),
        helper.make_node("ReduceSum", ["m", "last"], ["seen"], keepdims=0),
        helper.make_node("ReduceSum", ["tokens", "last"], ["t"], keepdims=0),
        helper.make_node("Add", ["t", "seen"], ["y"]),
    ]
    length = "total" if kv else "seq"
    inputs = [_vi("input_ids", I64, ["batch", "seq"]), _vi("attention_mask", I64, ["batch", length])]
    if positions:
        inputs.append(_vi("position_ids", I64, ["batch", "seq"]))
        nodes += [
            helper.make_node("Cast", ["position_ids"], ["pf"], to=F),
            helper.make_node("ReduceSum", ["pf", "last"], ["pos"], keepdims=0),
            helper.make_node("Add", ["y", "pos"], ["y2"]),
        ]
    out = "y2" if positions else "y"
    if kv:
        inputs.append(_vi("past_key_values.0.key", F, ["batch", 2, "past", 4]))
        nodes += [
            helper.make_node("ReduceSum", ["past_key_values.0.key", "kv_axes"], ["p"], keepdims=0),
            helper.make_node("Add", [out, "p"], ["z"]),
        ]
        out = "z"
    inits = [
        numpy_helper.from_array(np.ones([50, 4], np.float32), "emb"),
        numpy_helper.from_array(np.array([-1], np.int64), "last"),
        numpy_helper.from_array(np.array([1, 2, 3], np.int64), "kv_axes"),
    ]
    return _model(nodes, inputs, [_vi(out, F, ["batch"])], inits)


def test_masks_are_padded_with_one_full_row():
    mask = draw(_decoder(kv=False), text_rows=3).arrays["attention_mask"]
    assert mask.shape == (3, TEXT_SEQUENCE)
    assert mask[0].all()  # a full row
    for r in (1, 2):  # later rows end in zeros and keep their first token
        assert mask[r, 0] == 1 and mask[r, -1] == 0
        assert list(mask[r]) == sorted(mask[r], reverse=True)
    # a float mask known by its arithmetic (1 - mask), not its name, is a mask as well
    m = _model(
        [helper.make_node("Sub", ["one", "keep"], ["inv"]), helper.make_node("Mul", ["inv", "big"], ["y"])],
        [_vi("keep", F, [2, 5])],
        [_vi("y", F, None)],
        [numpy_helper.from_array(np.array(1, np.float32), "one"), numpy_helper.from_array(np.array(-1e4, np.float32), "big")],
    )  # fmt: skip
    made = draw(m)
    assert made.drawn["keep"].startswith("mask, padded")
    assert set(np.unique(made.arrays["keep"])) == {0.0, 1.0} and made.arrays["keep"][0].all()


def test_position_ids_count_from_the_past():
    plain = draw(_decoder(kv=False, positions=True), text_rows=MASK_BATCH).arrays["position_ids"]
    assert plain.tolist() == [list(range(TEXT_SEQUENCE))] * MASK_BATCH
    cached = draw(_decoder(kv=True, positions=True), text_rows=MASK_BATCH)
    assert cached.arrays["position_ids"][0].tolist() == list(range(KV_PAST, KV_PAST + TEXT_SEQUENCE))
    assert (
        cached.drawn["position_ids"]
        == f"positions {KV_PAST}..{KV_PAST + TEXT_SEQUENCE - 1} after {KV_PAST} past"
    )


def test_a_kv_cache_model_gets_consistent_lengths_and_is_verified():
    m = _decoder(kv=True)
    made = draw(m, text_rows=MASK_BATCH)
    ids, mask, past = (made.arrays[k] for k in ("input_ids", "attention_mask", "past_key_values.0.key"))
    assert mask.shape[1] == past.shape[2] + ids.shape[1]  # total = past + new
    assert ids.shape[0] == mask.shape[0] == past.shape[0] == MASK_BATCH
    assert made.drawn["past_key_values.0.key"] == f"KV cache, {KV_PAST} past positions"
    report = verify(m, m)
    assert report.status == "ok", report.summary()
    assert report.feeds["attention_mask"] == [MASK_BATCH, KV_PAST + TEXT_SEQUENCE]
    assert "mask, padded" in report.drawn["attention_mask"]
    # onnxruntime's GroupQueryAttention takes new tokens after a past at batch 1 only
    gqa = _decoder(kv=True)
    gqa.graph.node.append(helper.make_node("GroupQueryAttention", [], [], domain="com.microsoft"))
    assert kv_cache_dims(gqa)["batch"] == 1 and "batch" not in kv_cache_dims(m)


def test_verification_falls_back_to_one_row_where_the_model_runs_at_no_other():
    m = _model(
        [
            helper.make_node("Reshape", ["input_ids", "one_row"], ["r"]),
            helper.make_node("Gather", ["emb", "r"], ["y"], axis=0),
        ],
        [_vi("input_ids", I64, ["batch", "seq"])],
        [_vi("y", F, None)],
        [
            numpy_helper.from_array(np.ones([10, 2], np.float32), "emb"),
            numpy_helper.from_array(np.array([1, TEXT_SEQUENCE], np.int64), "one_row"),
        ],
    )
    report = verify(m, m)
    assert report.status == "ok", report.summary()
    assert report.feeds["input_ids"] == [1, TEXT_SEQUENCE]


def test_uint8_images_span_the_full_range_and_other_inputs_keep_their_draw():
    m = _model(
        [
            helper.make_node("Cast", ["image"], ["f"], to=F),
            helper.make_node("Cast", ["count"], ["c"], to=F),
            helper.make_node("ReduceSum", ["f"], ["s"], keepdims=0),
            helper.make_node("Add", ["s", "x"], ["y0"]),
            helper.make_node("Add", ["y0", "c"], ["y"]),
        ],
        [_vi("image", TensorProto.UINT8, [1, 64, 64, 3]), _vi("count", I64, [2]), _vi("x", F, [2])],
        [_vi("y", F, None)],
    )
    made = draw(m, seed=5)
    image = made.arrays["image"]
    assert image.dtype == np.uint8 and image.min() == 0 and image.max() == 255
    assert made.drawn == {"image": "pixels 0..255", "count": "integers 0..3", "x": "standard normal"}
    assert made.arrays["count"].max() <= 3
    # inputs without a meaning draw as before: the same values whatever the others got
    rng = np.random.default_rng(5)
    rng.integers(0, 4, size=[1, 64, 64, 3])
    assert made.arrays["count"].tolist() == rng.integers(0, 4, size=[2]).tolist()
    report = verify(m, m)
    assert report.status == "ok" and "inputs: image: pixels 0..255" in report.summary()


def test_a_model_drawn_per_dtype_has_no_inputs_clause():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", F, ["n", 3])], [_vi("y", F, None)])
    report = verify(m, m)
    assert report.ok and report.drawn == {"x": "standard normal"}
    assert "inputs:" not in report.summary()


def test_a_model_whose_inputs_reach_no_gather_never_reads_its_constants(monkeypatch):
    """Finding input kinds reads the model's constants only for a Gather an integer input reaches: at 50k nodes
    reading them all (and a map of every tensor's readers) was 0.7 s of each verification."""
    import surgery.feeds as feeds

    def refuse(self):
        raise AssertionError("the constants were read")

    monkeypatch.setattr(feeds._Tables, "_constants", property(refuse))
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["x"], ["x1"]),
            helper.make_node("MatMul", ["x1", "w"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert feeds.input_kinds(model) == {}
