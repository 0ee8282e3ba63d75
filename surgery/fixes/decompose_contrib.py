"""onnxruntime's contrib operators (com.microsoft) that its transformer optimizer writes (SkipLayerNormalization,
EmbedLayerNormalization, Attention, BiasGelu, FastGelu, Gelu, QuickGelu), decomposed into standard ops, for the
backends that have no importer for them (TensorRT looks for a plugin of that name and finds none).

Each function is registered with `@decomposition("com.microsoft", op)` (see surgery.fixes.decompose); the
semantics are the operator's schema in onnxruntime (its doc strings and defaults) and what onnxruntime's CPU
kernels compute, checked in tests/test_fix_decompose_ops.py."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from surgery.fixes.decompose import _attrs, decomposition
from surgery.fixes.decompose_ops import Ops, _f, gelu_erf, gelu_tanh, normalize, np_type

MS = "com.microsoft"
EPSILON = 1e-12  # the schemas' default for SkipLayerNormalization and EmbedLayerNormalization
MASK_FILTER = -10000.0  # Attention's default mask_filter_value


def _float_type(b: Ops, *tensors: str) -> int:
    """The float type of the first tensor whose type is known (contrib outputs are untyped to onnx's inference)."""
    for t in tensors:
        if t and b.facts.info(t).dtype:
            return b.facts.info(t).dtype
    return TensorProto.FLOAT


def _layer_norm(
    b: Ops, x: str, gamma: str, beta: str, eps: float, dt: int, out: str, mean_out="", inv_out=""
):
    norm = normalize(b, x, [-1], eps, dt, mean_out=mean_out, inv_std_out=inv_out)
    scaled = b.op("Mul", [norm, gamma], "scaled", None if beta else out)
    if beta:
        b.op("Add", [scaled, beta], out=out)


@decomposition(MS, "SkipLayerNormalization")
def skip_layer_normalization(node, facts, fresh):
    """SkipLayerNormalization: s = input + skip (+ bias); output = LayerNorm(s over the last axis) * gamma (+ beta);
    mean, inv_std_var and input_skip_bias_sum (s) when the model reads them."""
    b = Ops(node, facts, fresh)
    x, skip, gamma, beta, bias = (b.input(i) for i in range(5))
    eps = _attrs(node).get("epsilon", EPSILON)
    dt = _float_type(b, gamma, x)
    total = b.op("Add", [x, skip], "input_skip", None if bias else (b.output(3) or None))
    if bias:
        total = b.op("Add", [total, bias], "input_skip_bias", b.output(3) or None)
    _layer_norm(b, total, gamma, beta, eps, dt, node.output[0], b.output(1), b.output(2))
    return b.done()


@decomposition(MS, "EmbedLayerNormalization")
def embed_layer_normalization(node, facts, fresh):
    """EmbedLayerNormalization: Gather the word, position (position_ids, else rows 0..S-1) and segment
    embeddings, add them (embedding_sum), LayerNorm over the last axis * gamma + beta; mask_index is the number of
    ones in each row of the mask (as onnxruntime counts it)."""
    b = Ops(node, facts, fresh)
    ids, segments, words, positions, seg_table, gamma, beta, mask, position_ids = (
        b.input(i) for i in range(9)
    )
    eps = _attrs(node).get("epsilon", EPSILON)
    dt = _float_type(b, gamma, words)
    total = b.op("Gather", [words, ids], "word", axis=0)
    if position_ids:
        pos = b.op("Gather", [positions, position_ids], "position", axis=0)
    else:
        length = b.slice(b.op("Shape", [ids], "ids_shape"), [1], [2], [0], "sequence_length")
        zero = b.const(np.array([0], np.int64), what="zero")
        pos = b.op(
            "Slice", [positions, zero, length, b.const(np.array([0], np.int64), what="axis")], "position"
        )
    total = b.op("Add", [total, pos], "word_position")
    if segments and seg_table:
        total = b.op("Add", [total, b.op("Gather", [seg_table, segments], "segment", axis=0)], "embedding")
    if b.output(2):
        total = b.op("Identity", [total], out=b.output(2))
    _layer_norm(b, total, gamma, beta, eps, dt, node.output[0])
    if b.output(1):
        if not mask:
            raise b.refuse(
                "its mask_index output is read but it has no mask input",
                "give the mask (onnxruntime then counts its ones)",
            )
        mask_t = b.dtype(mask, TensorProto.INT32)
        ones = b.op("Equal", [mask, b.const(_f(1, mask_t), what="one")], "is_one")
        counted = b.reduce(
            "ReduceSum", b.cast(ones, TensorProto.INT32, "ones"), [1], keepdims=0, what="count"
        )
        b.op("Identity", [counted], out=b.output(1))
    return b.done()


@decomposition(MS, "BiasGelu")
def bias_gelu(node, facts, fresh):
    """BiasGelu(A, B) = Gelu(A + B), the erf form: (A + B)/2 * (1 + erf((A + B) / sqrt 2))."""
    b = Ops(node, facts, fresh)
    dt = _float_type(b, node.input[1], node.input[0])
    gelu_erf(b, b.op("Add", [node.input[0], node.input[1]], "biased"), node.output[0], dt)
    return b.done()


@decomposition(MS, "Gelu")
def ms_gelu(node, facts, fresh):
    """com.microsoft Gelu(X): the erf form, as the standard Gelu with approximate='none'."""
    b = Ops(node, facts, fresh)
    gelu_erf(b, node.input[0], node.output[0], _float_type(b, node.input[0]))
    return b.done()


@decomposition(MS, "FastGelu")
def fast_gelu(node, facts, fresh):
    """FastGelu(X, bias) = the tanh form of Gelu of X (+ bias): x/2 * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    b = Ops(node, facts, fresh)
    x, bias = b.input(0), b.input(1)
    dt = _float_type(b, bias, x)
    if bias:
        x = b.op("Add", [x, bias], "biased")
    gelu_tanh(b, x, node.output[0], dt)
    return b.done()


@decomposition(MS, "QuickGelu")
def quick_gelu(node, facts, fresh):
    """QuickGelu(X) = X * Sigmoid(alpha * X), alpha 1.702 by default."""
    b = Ops(node, facts, fresh)
    x = node.input[0]
    dt = _float_type(b, x)
    alpha = _attrs(node).get("alpha", 1.702)
    gate = b.op("Sigmoid", [b.op("Mul", [x, b.const(_f(alpha, dt), what="alpha")], "scaled")], "gate")
    b.op("Mul", [x, gate], out=node.output[0])
    return b.done()


@decomposition(MS, "Attention")
def attention(node, facts, fresh):
    """Attention (BERT/GPT-2 self-attention, no past state): Q, K, V = input @ weights + bias, split by
    qkv_hidden_sizes and into num_heads heads; softmax(Q K^T * scale + mask + attention_bias) V, heads merged.
    Masks add mask_filter_value where a key is masked: a raw mask [B, T] or [B, S, T] (0 masks), a 1-D
    mask_index [B] (keys from that position on are padding); unidirectional adds the type's lowest value to
    later keys, which leaves them out of the softmax as onnxruntime does."""
    b = Ops(node, facts, fresh)
    a = _attrs(node)
    x, weights, bias, mask, past, attn_bias, past_len = (b.input(i) for i in range(7))
    heads = a["num_heads"]
    if past or past_len or b.output(1):
        raise b.refuse(
            "it has a past/present key-value state", "the decomposition covers attention without a KV cache"
        )
    if a.get("do_rotary", 0) or a.get("past_present_share_buffer", 0):
        raise b.refuse(
            "do_rotary / past_present_share_buffer is set", "the decomposition covers plain attention"
        )
    wshape = b.facts.info(weights).shape
    total = wshape[1] if wshape is not None and len(wshape) == 2 else None
    sizes = list(a.get("qkv_hidden_sizes", []))
    if not sizes:
        if not isinstance(total, int):
            raise b.refuse(
                f"the shape of weights '{weights}' is not static", "give qkv_hidden_sizes or constant weights"
            )
        sizes = [total // 3] * 3
    hq, hk, hv = sizes
    if hq != hk or any(s % heads for s in sizes):
        raise b.refuse(
            f"qkv_hidden_sizes {sizes} do not split into {heads} heads with Q and K alike", "check them"
        )
    dt = _float_type(b, weights, x)
    head = hq // heads
    scale = a.get("scale", 1.0 / np.sqrt(head))
    mfv = a.get("mask_filter_value", MASK_FILTER)
    proj = b.op("MatMul", [x, weights], "qkv")
    if bias:
        proj = b.op("Add", [proj, bias], "qkv_biased")
    bounds = np.cumsum([0, hq, hk, hv])
    parts = []
    for k, (what, size) in enumerate(zip("qkv", sizes)):
        part = b.slice(proj, [int(bounds[k])], [int(bounds[k + 1])], [2], what)
        split = b.reshape(part, [0, 0, heads, size // heads], f"{what}_heads")
        perm = [0, 2, 3, 1] if what == "k" else [0, 2, 1, 3]  # K comes transposed: [B, H, d, T]
        parts.append(b.op("Transpose", [split], f"{what}_t", perm=perm))
    q, kt, v = parts
    scores = b.op("MatMul", [q, kt], "scores")
    scores = b.op("Mul", [scores, b.const(_f(scale, dt), what="scale")], "scaled_scores")
    masked = _attention_mask(b, mask, x, dt, mfv, bool(a.get("unidirectional", 0)))
    if masked:
        scores = b.op("Add", [scores, masked], "masked_scores")
    if attn_bias:
        scores = b.op("Add", [scores, attn_bias], "biased_scores")
    probs = b.op("Softmax", [scores], "probs", axis=-1)
    context = b.op("Transpose", [b.op("MatMul", [probs, v], "context")], "context_t", perm=[0, 2, 1, 3])
    b.reshape(context, [0, 0, hv], out=node.output[0])
    return b.done()


def _attention_mask(b: Ops, mask: str, x: str, dt: int, mfv: float, causal: bool) -> str:
    """What the scores get added: mask_filter_value where a key is masked, 0 elsewhere, broadcastable to
    [B, H, S, T]; '' when nothing is masked."""
    filt, zero = b.const(_f(mfv, dt), what="mask_filter"), b.const(_f(0, dt), what="zero")
    pieces = []
    if mask:
        rank = b.facts.info(mask).rank
        producer = b.facts.producer_of(mask)
        # contrib ops are opaque to onnx's shape inference; EmbedLayerNormalization's mask_index is [B]
        if (
            rank is None
            and producer is not None
            and (producer.domain, producer.op_type) == (MS, "EmbedLayerNormalization")
            and list(producer.output).index(mask) == 1
        ):
            rank = 1
        mask_t = b.dtype(mask, TensorProto.INT32)
        if rank == 1:
            length = b.op(
                "Gather",
                [b.op("Shape", [x], "x_shape"), b.const(np.array(1, np.int64), what="one")],
                "length",
                axis=0,
            )
            length = b.cast(length, mask_t, "length_cast")
            step = b.const(_f(1, mask_t), what="step")
            pos = b.op("Range", [b.const(_f(0, mask_t), what="start"), length, step], "positions")
            keep = b.op(
                "Less", [b.unsqueeze(pos, [0], "key_positions"), b.unsqueeze(mask, [1], "ends")], "keep"
            )
            pieces.append(b.unsqueeze(b.op("Where", [keep, zero, filt], "mask_add"), [1, 2], "mask_4d"))
        elif rank in (2, 3):
            keep = b.op("Greater", [mask, b.const(_f(0, mask_t), what="mask_zero")], "keep")
            add = b.op("Where", [keep, zero, filt], "mask_add")
            pieces.append(b.unsqueeze(add, [1, 2] if rank == 2 else [1], "mask_4d"))
        else:
            raise b.refuse(
                f"its mask_index '{mask}' has rank {rank}",
                "the decomposition takes a raw mask [B, T] or [B, S, T] or end positions [B]",
            )
    if causal:
        shape = b.op("Shape", [x], "x_shape_c")
        length = b.op("Gather", [shape, b.const(np.array(1, np.int64), what="one")], "length_c", axis=0)
        pos = b.op(
            "Range",
            [
                b.const(np.array(0, np.int64), what="start"),
                length,
                b.const(np.array(1, np.int64), what="step"),
            ],
            "positions_c",
        )
        later = b.op("Greater", [b.unsqueeze(pos, [0], "keys"), b.unsqueeze(pos, [1], "queries")], "later")
        # onnxruntime leaves later keys out of the softmax even where the mask masks every earlier key
        lowest = b.const(np.array(np.finfo(np_type(dt)).min, np_type(dt)), what="lowest")
        pieces.append(b.op("Where", [later, lowest, zero], "causal_add"))
    if not pieces:
        return ""
    if len(pieces) == 1:
        return pieces[0]
    return b.op("Add", pieces, "mask_sum")
