"""The ops of 2026's LLM exports (issue 28), decomposed into standard ops, and two small rewrites around them.

- torch's dynamo exporter at opset 23 writes RotaryEmbedding, RMSNormalization and Attention (ONNX 1.18's ops);
- onnxruntime-genai's model builder writes MatMulNBits (int4 weights), SkipSimplifiedLayerNormalization,
  SimplifiedLayerNormalization and com.microsoft RotaryEmbedding (beside GroupQueryAttention, not decomposed
  here: see rules/ and docs/benchmarks.md);
- `broadcast_rotary_caches`: the cos/sin caches of a RotaryEmbedding without position_ids are made for batch 1
  (the positions are an arange); TensorRT-RTX wants them at the input's batch ("cosCache has batch size 1 but
  must have the same batch size as input which is -1"): Expand them to it, the op kept;
- `cast_uint8_input`: a uint8 graph input that goes through data movement (Transpose, Slice, Reshape, ...) into
  a Cast to float is cast to float first, so that nothing before the original Cast sees uint8 (TensorRT:
  "first input has type UInt8 but must have type Float").

Semantics are the operator schemas: https://onnx.ai/onnx/operators/onnx__RotaryEmbedding.html,
onnx__RMSNormalization.html, onnx__Attention.html (onnx 1.18.0, opset 23) and onnxruntime's
docs/ContribOperators.md (com.microsoft.MatMulNBits, SkipSimplifiedLayerNormalization, RotaryEmbedding) at
onnxruntime v1.22.0; checked against onnxruntime 1.32's CPU kernels in tests/test_fix_decompose_llm.py.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import NameIndex, copy_model, find_node, replace_node
from surgery.fixes.decompose import _attrs, decomposition
from surgery.fixes.decompose_ops import Ops, _f
from surgery.graph import GraphFacts

MS = "com.microsoft"
FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)


def _dt(b: Ops, *tensors: str) -> int:
    for t in tensors:
        if t and b.facts.info(t).dtype:
            return b.facts.info(t).dtype
    return TensorProto.FLOAT


def _rank(b: Ops, x: str) -> int | None:
    info = b.facts.info(x)
    return len(info.shape) if info.shape is not None else None


def _dim(b: Ops, x: str, start: int, end: int, what: str) -> str:
    """Shape(x)[start:end] as a 1-D int64 tensor."""
    return b.slice(b.op("Shape", [x], f"{what}_shape"), [start], [end], [0], what)


def _repeat_heads(b: Ops, t: str, rep: int, heads: int, head: int, what: str) -> str:
    """[B, KV, T, H] -> [B, KV * rep, T, H], each key/value head repeated `rep` times in place (grouped-query
    attention: query head i reads kv head i // rep)."""
    t5 = b.unsqueeze(t, [2], f"{what}_5d")
    shape = b.op(
        "Concat",
        [_dim(b, t, 0, 2, f"{what}_bn"), b.const(np.array([rep], np.int64)), _dim(b, t, 2, 4, f"{what}_th")],
        f"{what}_expand_shape",
        axis=0,
    )
    wide = b.op("Expand", [t5, shape], f"{what}_wide")
    return b.reshape(wide, [0, heads, -1, head], f"{what}_repeated")


# -- rotary embedding -----------------------------------------------------------------------------------------


def _rotate(b: Ops, x: str, cos: str, sin: str, out: str) -> str:
    """x [..., rot] rotated by cos/sin [..., rot/2] (broadcast): its halves x1, x2 become
    (cos x1 - sin x2, sin x1 + cos x2)."""
    last = b.const(np.array([-1], np.int64), what="last")
    half = b.op("Div", [_dim(b, x, -1, 2**62, "rot"), b.const(np.array([2], np.int64), what="two")], "half")
    x1 = b.op("Slice", [x, b.const(np.array([0], np.int64), what="zero"), half, last], "x1")
    x2 = b.op("Slice", [x, half, b.const(np.array([2**62], np.int64), what="end"), last], "x2")
    real = b.op("Sub", [b.op("Mul", [cos, x1], "cos_x1"), b.op("Mul", [sin, x2], "sin_x2")], "real")
    imag = b.op("Add", [b.op("Mul", [sin, x1], "sin_x1"), b.op("Mul", [cos, x2], "cos_x2")], "imag")
    return b.op("Concat", [real, imag], "rotated", out, axis=-1)


def _rope(
    b: Ops, x4: str, cos: str, sin: str, rot_dim: int, head: int | None, interleaved: bool, out: str
) -> str:
    """x4 [B, S, N, H] (heads on axis 2), cos/sin [B, S, rot/2] -> rotated first rot_dim lanes, the rest kept."""
    cos = b.unsqueeze(cos, [2], "cos_heads")
    sin = b.unsqueeze(sin, [2], "sin_heads")
    if rot_dim and (head is None or rot_dim < head):
        part = b.slice(x4, [0], [rot_dim], [-1], "x_rot")
        rest = b.slice(x4, [rot_dim], [2**62], [-1], "x_pass")
        part_r = (
            _rotate_rank4(b, part, cos, sin)
            if interleaved
            else _rotate(b, part, cos, sin, b.name("x_rotated"))
        )
        return b.op("Concat", [part_r, rest], "roped", out, axis=-1)
    if interleaved:
        return _rotate_rank4(b, x4, cos, sin, out)
    return _rotate(b, x4, cos, sin, out)


def _rotate_rank4(b: Ops, x4: str, cos: str, sin: str, out: str | None = None) -> str:
    """The interleaved form on a rank-4 x: [B, S, N, rot] -> [B, S, N, rot/2, 2]."""
    pairs = b.op("Reshape", [x4, b.const(np.array([0, 0, 0, -1, 2], np.int64), what="pairs_shape")], "pairs")
    last = b.const(np.array([-1], np.int64), what="last")
    x1 = b.op("Squeeze", [b.slice(pairs, [0], [1], [-1], "x1_"), last], "x1")
    x2 = b.op("Squeeze", [b.slice(pairs, [1], [2], [-1], "x2_"), last], "x2")
    real = b.op("Sub", [b.op("Mul", [cos, x1], "cos_x1"), b.op("Mul", [sin, x2], "sin_x2")], "real")
    imag = b.op("Add", [b.op("Mul", [sin, x1], "sin_x1"), b.op("Mul", [cos, x2], "cos_x2")], "imag")
    stacked = b.op("Concat", [b.unsqueeze(real, [-1]), b.unsqueeze(imag, [-1])], "stacked", axis=-1)
    return b.op("Reshape", [stacked, b.op("Shape", [x4], "x_shape")], "rotated", out)


def _to_bsnh(b: Ops, x: str, num_heads: int, rank: int | None) -> tuple[str, int | None]:
    """x [B, N, S, H] or [B, S, hidden] as [B, S, N, H]; also the head size where the shape says it."""
    shape = b.facts.info(x).shape
    if rank == 4:
        head = shape[3] if isinstance(shape[3], int) and shape[3] > 0 else None
        return b.op("Transpose", [x], "x_bsnh", perm=[0, 2, 1, 3]), head
    if rank == 3:
        if not num_heads:
            raise b.refuse("its input is 3-D and num_heads is not set", "the schema needs num_heads there")
        hidden = shape[2] if isinstance(shape[2], int) and shape[2] > 0 else None
        heads = b.const(np.array([0, 0, num_heads, -1], np.int64), what="heads_shape")
        return b.op("Reshape", [x, heads], "x_bsnh"), (hidden // num_heads if hidden else None)
    raise b.refuse("the rank of its input is not known", "run shape inference, or give the input a shape")


def _from_bsnh(b: Ops, y: str, x: str, rank: int, out: str) -> str:
    if rank == 4:
        return b.op("Transpose", [y], out=out, perm=[0, 2, 1, 3])
    return b.op("Reshape", [y, b.op("Shape", [x], "input_shape")], out=out)


@decomposition("", "RotaryEmbedding")
def rotary_embedding(node, facts, fresh):
    """RotaryEmbedding (opset 23): X [B, N, S, H] or [B, S, hidden] (num_heads), caches [B, S, rot/2] or, with
    position_ids, [max_position, rot/2] gathered by them; the first rotary_embedding_dim lanes of each head
    (all by default) rotated, split in halves or interleaved, the rest passed through."""
    b = Ops(node, facts, fresh)
    x, cos, sin, pos = (b.input(i) for i in range(4))
    a = _attrs(node)
    rank = _rank(b, x)
    x4, head = _to_bsnh(b, x, a.get("num_heads", 0), rank)
    if pos:
        cos = b.op("Gather", [cos, pos], "cos_at", axis=0)
        sin = b.op("Gather", [sin, pos], "sin_at", axis=0)
    y = _rope(
        b, x4, cos, sin, a.get("rotary_embedding_dim", 0), head, bool(a.get("interleaved", 0)), b.name("y")
    )
    _from_bsnh(b, y, x, rank, node.output[0])
    return b.done()


@decomposition(MS, "RotaryEmbedding")
def ms_rotary_embedding(node, facts, fresh):
    """com.microsoft RotaryEmbedding: input [B, S, hidden] or [B, N, S, H], position_ids [B, S] (or [1]: an
    offset, positions offset..offset+S-1), cos/sin caches [max_position, rot/2] gathered by position; rot is
    rotary_embedding_dim, else twice the cache's width; the rest of each head passes through."""
    b = Ops(node, facts, fresh)
    x, pos, cos, sin = (b.input(i) for i in range(4))
    a = _attrs(node)
    if a.get("is_packed_batching", 0):
        raise b.refuse("is_packed_batching is set", "only padded batches are decomposed")
    if a.get("scale", 1.0) != 1.0:
        raise b.refuse("scale is not 1", "onnxruntime's kernel ignores it on CPU; the meaning is unclear")
    rank = _rank(b, x)
    x4, head = _to_bsnh(b, x, a.get("num_heads", 0), rank)
    pinfo = b.facts.info(pos).shape
    if pinfo is not None and len(pinfo) == 1:  # an offset: positions offset + arange(S)
        seq = _dim(b, x4, 1, 2, "seq")
        steps = b.op(
            "Range",
            [
                b.const(np.array(0, np.int64)),
                b.op("Squeeze", [seq], "seq_len"),
                b.const(np.array(1, np.int64)),
            ],
            "steps",
        )
        pos = b.unsqueeze(b.op("Add", [steps, b.op("Squeeze", [pos], "offset")], "positions"), [0])
    cos_at = b.op("Gather", [cos, pos], "cos_at", axis=0)
    sin_at = b.op("Gather", [sin, pos], "sin_at", axis=0)
    width = b.facts.info(cos).shape
    rot = a.get("rotary_embedding_dim", 0) or (
        2 * width[1] if width is not None and isinstance(width[1], int) and width[1] > 0 else 0
    )
    y = _rope(b, x4, cos_at, sin_at, rot, head, bool(a.get("interleaved", 0)), b.name("y"))
    _from_bsnh(b, y, x, rank, node.output[0])
    return b.done()


# -- RMS normalizations ---------------------------------------------------------------------------------------


def _rms(b: Ops, x: str, scale: str, axis: int, eps: float, stash: int, out: str) -> str:
    """x / sqrt(mean(x^2 over [axis, rank)) + eps) * scale, in the stash type (float32 by default)."""
    dt = _dt(b, scale, x)  # the scale is an initializer: typed where a contrib op's output is not
    rank = _rank(b, x)
    if axis < 0:
        if rank is None and axis != -1:
            raise b.refuse("the rank of its input is not known", "run shape inference")
        axis = axis + rank if rank is not None else -1
    axes = [-1] if axis == -1 else list(range(axis, rank))
    calc = stash if stash in FLOATS and stash != dt else dt
    xs = b.cast(x, calc, "x_stash") if calc != dt else x
    ms = b.reduce("ReduceMean", b.op("Mul", [xs, xs], "squared"), axes, what="mean_square")
    rms = b.op("Sqrt", [b.op("Add", [ms, b.const(_f(eps, calc), what="epsilon")], "ms_eps")], "rms")
    norm = b.op("Div", [xs, rms], "normalized")
    if calc != dt:
        norm = b.cast(norm, dt, "normalized_back")
    return b.op("Mul", [norm, scale], out=out)


@decomposition("", "RMSNormalization")
def rms_normalization(node, facts, fresh):
    """RMSNormalization (opset 23): X / sqrt(mean(X^2 over axes [axis, rank)) + epsilon) * scale, computed in
    stash_type (float32 by default)."""
    b = Ops(node, facts, fresh)
    a = _attrs(node)
    _rms(b, b.input(0), b.input(1), a.get("axis", -1), a.get("epsilon", 1e-5), a.get("stash_type", 1),
         node.output[0])  # fmt: skip
    return b.done()


@decomposition("", "SimplifiedLayerNormalization")
def simplified_layer_normalization(node, facts, fresh):
    """onnxruntime's SimplifiedLayerNormalization (domain ai.onnx, RMS norm): as RMSNormalization; its
    inv_std_var output, when read, is 1 / rms."""
    b = Ops(node, facts, fresh)
    a = _attrs(node)
    if b.output(1) or b.output(2):
        raise b.refuse("its inv_std_var output is read", "only Y is decomposed")
    _rms(b, b.input(0), b.input(1), a.get("axis", -1), a.get("epsilon", 1e-5), a.get("stash_type", 1),
         node.output[0])  # fmt: skip
    return b.done()


@decomposition(MS, "SkipSimplifiedLayerNormalization")
def skip_simplified_layer_normalization(node, facts, fresh):
    """SkipSimplifiedLayerNormalization: s = input + skip (+ bias); output = RMSNorm(s over the last axis) *
    gamma; input_skip_bias_sum (output 3) is s."""
    b = Ops(node, facts, fresh)
    x, skip, gamma, bias = (b.input(i) for i in range(4))
    if b.output(1) or b.output(2):
        raise b.refuse(
            "its mean / inv_std_var output is read", "only output and input_skip_bias_sum are made"
        )
    total = b.op("Add", [x, skip], "input_skip", None if bias else (b.output(3) or None))
    if bias:
        total = b.op("Add", [total, bias], "input_skip_bias", b.output(3) or None)
    eps = _attrs(node).get("epsilon", 1e-12)
    _rms(b, total, gamma, -1, eps, TensorProto.FLOAT, node.output[0])
    return b.done()


# -- Attention (opset 23) -------------------------------------------------------------------------------------


@decomposition("", "Attention")
def attention(node, facts, fresh):
    """Attention (opset 23) on 4-D Q [B, Nq, S, H], K/V [B, Nkv, T, H] without past state: softmax(Q K^T * scale +
    mask) V, K and V repeated to Nq heads (grouped-query); a boolean mask adds -inf where False, a float mask is
    added; is_causal masks keys after the query's own position (upper-left aligned). 3-D inputs, past_key/past_value, softcap and the extra outputs are refused."""
    b = Ops(node, facts, fresh)
    q, k, v, mask, past_k, past_v = (b.input(i) for i in range(6))
    a = _attrs(node)
    if past_k or past_v or any(b.output(i) for i in (1, 2, 3)):
        raise b.refuse(
            "it has past_key/past_value or reads present_key/present_value/qk", "only plain attention"
        )
    if a.get("softcap", 0.0):
        raise b.refuse("softcap is set", "only softcap 0 is decomposed")
    if len(node.input) > 6 and node.input[6]:
        raise b.refuse("it has nonpad_kv_seqlen", "only plain attention")
    if _rank(b, q) != 4 or _rank(b, k) != 4:
        raise b.refuse("Q or K is not 4-D (or its rank is unknown)", "the 3-D form is not decomposed")
    dt = _dt(b, q)
    qs, ks = b.facts.info(q).shape, b.facts.info(k).shape
    nq, nk, head = qs[1], ks[1], qs[3]
    if not all(isinstance(d, int) and d > 0 for d in (nq, nk, head)):
        raise b.refuse("the head counts or head size are not static", "give Q and K static head dims")
    if nq != nk:
        rep = nq // nk

        k, v = _repeat_heads(b, k, rep, nq, head, "k"), _repeat_heads(b, v, rep, nq, head, "v")
    scale = a.get("scale", 1.0 / np.sqrt(head))
    kt = b.op("Transpose", [k], "k_t", perm=[0, 1, 3, 2])
    scores = b.op("Mul", [b.op("MatMul", [q, kt], "qk"), b.const(_f(scale, dt), what="scale")], "scores")
    if a.get("is_causal", 0):
        s_len, t_len = _dim(b, q, 2, 3, "q_len"), _dim(b, k, 2, 3, "k_len")
        rows = b.op(
            "Range",
            [b.const(np.array(0, np.int64)), b.op("Squeeze", [s_len]), b.const(np.array(1, np.int64))],
        )
        cols = b.op(
            "Range",
            [b.const(np.array(0, np.int64)), b.op("Squeeze", [t_len]), b.const(np.array(1, np.int64))],
        )
        # upper-left aligned, as the schema's tril(ones(S, T)): key j is later than query i when j > i
        later = b.op("Greater", [cols, b.unsqueeze(rows, [1])], "later")
        scores = b.op("Where", [later, b.const(_f(-np.inf, dt), what="neg_inf"), scores], "causal")
    if mask:
        if _dt(b, mask) == TensorProto.BOOL:
            scores = b.op("Where", [mask, scores, b.const(_f(-np.inf, dt), what="masked")], "masked_scores")
        else:
            scores = b.op("Add", [scores, mask], "masked_scores")
    probs = b.op("Softmax", [scores], "probs", axis=-1)
    b.op("MatMul", [probs, v], out=node.output[0])
    return b.done()


# -- MatMulNBits ----------------------------------------------------------------------------------------------


def dequantize_nbits(q: np.ndarray, scales: np.ndarray, zp: np.ndarray | None, k: int, n: int, bits: int,
                     block: int) -> np.ndarray:  # fmt: skip
    """MatMulNBits' B (uint8 [N, blocks, blob], low bits first) with its scales [N * blocks] and zero points
    (packed uint8, or of the scales' type; 2^(bits-1) when absent) as the float [N, K] it stands for."""
    blocks = (k + block - 1) // block
    per_byte = 8 // bits
    raw = q.reshape(n, -1).astype(np.uint8)
    vals = np.stack([(raw >> (bits * i)) & ((1 << bits) - 1) for i in range(per_byte)], axis=-1)
    vals = vals.reshape(n, -1)[:, : blocks * block].astype(np.float32).reshape(n, blocks, block)
    sc = scales.reshape(n, blocks).astype(np.float32)
    if zp is None:
        z = np.full((n, blocks), float(1 << (bits - 1)), np.float32)
    elif zp.dtype == np.uint8:
        zr = zp.reshape(n, -1)
        z = np.stack([(zr >> (bits * i)) & ((1 << bits) - 1) for i in range(per_byte)], axis=-1)
        z = z.reshape(n, -1)[:, :blocks].astype(np.float32)
    else:
        z = zp.reshape(n, blocks).astype(np.float32)
    w = (vals - z[:, :, None]) * sc[:, :, None]
    return w.reshape(n, -1)[:, :k].astype(scales.dtype)


@decomposition(MS, "MatMulNBits")
def matmul_nbits(node, facts, fresh):
    """MatMulNBits: Y = A @ dequantize(B)^T (+ bias), the blockwise weights dequantized at build time into a float
    [K, N] initializer of the scales' type (the int4 storage is given up: 8x the bytes in float32)."""
    b = Ops(node, facts, fresh)
    a = _attrs(node)
    if len(node.input) > 4 and node.input[4]:
        raise b.refuse("it has g_idx (act-order)", "only the plain block layout is decomposed")
    k, n, bits, block = a["K"], a["N"], a.get("bits", 4), a["block_size"]
    if bits not in (2, 4, 8):
        raise b.refuse(f"bits is {bits}", "2, 4 and 8 bits are decomposed")
    q = b.constant(1, "B")
    if q.dtype != np.uint8:
        raise b.refuse("B is not uint8 (a prepacked layout)", "save the model before onnxruntime prepacks it")
    scales = b.constant(2, "scales")
    zp = b.constant(3, "zero_points") if b.input(3) else None
    w = dequantize_nbits(q, scales, zp, k, n, bits, block)
    weight = b.const(np.ascontiguousarray(w.T), what="weight")
    bias = b.input(5)
    b.op("MatMul", [b.input(0), weight], "matmul", None if bias else node.output[0])
    if bias:
        b.op("Add", [b.nodes[-1].output[0], bias], out=node.output[0])
    return b.done()


# -- rewrites that keep the op ------------------------------------------------------------------------------


@register(
    "broadcast_rotary_caches",
    safety=Safety.EXACT,
    summary="Expand a RotaryEmbedding's cos/sin caches (made for batch 1) to its input's batch.",
    params={"node": "node key of the RotaryEmbedding (opset 23, without position_ids)"},
)
def broadcast_rotary_caches(model: ModelProto, node: str) -> ModelProto:
    out = copy_model(model)
    i = find_node(out, node)
    n = out.graph.node[i]
    if n.op_type != "RotaryEmbedding" or n.domain not in ("", "ai.onnx"):
        raise FixError(f"'{node}' is a {n.op_type}, not an ONNX RotaryEmbedding")
    if len(n.input) > 3 and n.input[3]:
        raise FixError(
            f"RotaryEmbedding '{node}' has position_ids: its caches are [max_position, d], no batch"
        )
    names = NameIndex(out)
    prefix = n.name or "RotaryEmbedding"

    def fresh(what: str) -> str:
        return names.fresh(f"{prefix}/{what}")

    mk = helper.make_node
    ints = onnx.numpy_helper.from_array
    starts, one, end = fresh("zero"), fresh("one"), fresh("end")
    inits = [ints(np.array([0], np.int64), starts), ints(np.array([1], np.int64), one),
             ints(np.array([2**62], np.int64), end)]  # fmt: skip
    xs, batch, cs, rest, shape = (
        fresh("x_shape"),
        fresh("batch"),
        fresh("cos_shape"),
        fresh("cos_rest"),
        fresh("cache_shape"),
    )
    new = [
        mk("Shape", [n.input[0]], [xs], name=fresh("Shape")),
        mk("Slice", [xs, starts, one], [batch], name=fresh("Slice")),
        mk("Shape", [n.input[1]], [cs], name=fresh("Shape_cache")),
        mk("Slice", [cs, one, end], [rest], name=fresh("Slice_cache")),
        mk("Concat", [batch, rest], [shape], name=fresh("Concat"), axis=0),
    ]
    expanded = []
    for j, what in ((1, "cos"), (2, "sin")):
        e = fresh(f"{what}_batch")
        new.append(mk("Expand", [n.input[j], shape], [e], name=fresh(f"Expand_{what}")))
        expanded.append(e)
    rope = onnx.NodeProto()
    rope.CopyFrom(n)
    rope.input[1], rope.input[2] = expanded
    replace_node(out.graph, i, [*new, rope])
    out.graph.initializer.extend(inits)
    return out


# Ops that only move or pick elements: a uint8 tensor through them, then cast to float, is the float tensor
# through them (cast first).
_MOVES = {"Transpose", "Slice", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Gather",
          "Expand", "Tile", "DepthToSpace", "SpaceToDepth"}  # fmt: skip


def _uint8_chain(
    facts: GraphFacts, model: ModelProto, name: str, moved: set[str]
) -> list[onnx.NodeProto] | None:
    """The Casts that read `name` through data movement (the tensors moved are added to `moved`), when every
    path ends in a Cast to a float type."""
    seen, todo, casts = set(), [name], []
    nodes = model.graph.node
    while todo:
        t = todo.pop()
        readers = facts.consumers.get(t, [])
        if t in facts.graph_outputs or not readers:
            return None
        for j in readers:
            r = nodes[j]
            if j in seen:
                continue
            seen.add(j)
            if r.op_type in ("Shape", "Size") and not r.domain:
                continue  # reads the shape only: the same of the float tensor
            if r.op_type == "Cast" and not r.domain:
                to = next(x.i for x in r.attribute if x.name == "to")
                if to not in FLOATS:
                    return None
                casts.append(r)
            elif r.op_type in _MOVES and not r.domain and r.input[0] == t and t not in r.input[1:]:
                todo.extend(r.output)
                moved.update(r.output)
            else:
                return None
    return casts


@register(
    "cast_uint8_input",
    safety=Safety.EXACT,
    summary="Cast a uint8 graph input to float where it enters the graph (it is cast to float after data "
    "movement anyway).",
    params={"input": "the uint8 graph input"},
)
def cast_uint8_input(model: ModelProto, input: str) -> ModelProto:
    out = copy_model(model)
    g = out.graph
    gi = next((v for v in g.input if v.name == input), None)
    if gi is None or gi.type.tensor_type.elem_type != TensorProto.UINT8:
        raise FixError(f"'{input}' is not a uint8 graph input")
    facts = GraphFacts.of(out)
    moved: set[str] = set()
    casts = _uint8_chain(facts, out, input, moved)
    if not casts:
        raise FixError(
            f"'{input}' does not reach a Cast to float through data movement only (Transpose, Slice, ...). "
            "Note: other readers would see a float where they expect uint8"
        )
    to = {next(x.i for x in c.attribute if x.name == "to") for c in casts}
    if len(to) != 1:
        raise FixError(f"'{input}' is cast to several float types")
    names = NameIndex(out)
    as_float = names.fresh(f"{input}_float")
    cast = helper.make_node("Cast", [input], [as_float], name=names.fresh(f"{input}/Cast_first"), to=to.pop())
    for n in g.node:
        for j, t in enumerate(n.input):
            if t == input:
                n.input[j] = as_float
    g.node.insert(0, cast)
    # the values between the new Cast and the old ones are float now
    for v in g.value_info:
        if v.name in moved:
            v.type.tensor_type.elem_type = cast.attribute[0].i
    return out


# -- GroupQueryAttention ----------------------------------------------------------------------------------------


def _head_size(b: Ops, query: str, heads: int, cos: str) -> int:
    """GroupQueryAttention's head size: the query's static width over its heads, else the MatMulNBits that makes it
    (its N), else twice the rotary cache's width."""
    shape = b.facts.info(query).shape
    if shape is not None and len(shape) == 3 and isinstance(shape[2], int) and shape[2] > 0:
        return shape[2] // heads
    p = b.facts.producer.get(query)
    if p is not None:
        maker = b.facts.model.graph.node[p]
        n = next((a.i for a in maker.attribute if a.name == "N"), 0)
        if maker.op_type == "MatMulNBits" and n:
            return n // heads
    width = b.facts.info(cos).shape if cos else None
    if width is not None and isinstance(width[-1], int) and width[-1] > 0:
        return 2 * width[-1]
    raise b.refuse("its head size is not known", "give the query a static last dimension")


@decomposition(MS, "GroupQueryAttention")
def group_query_attention(node, facts, fresh):
    """GroupQueryAttention (onnxruntime-genai's decoder layer): Q, K, V from the packed query (or the key and value
    inputs) as heads; with do_rotary, rotated at positions seqlens_k + 1 - S + s (the caches gathered there);
    present_key/value = past ++ new along the sequence; softmax(Q K^T * scale) V over the keys at or before each
    query's position (and within local_window_size), K and V shared by num_heads / kv_num_heads query heads; heads
    merged. softcap, smooth_softmax, position_ids, attention_bias and head_sink are refused."""
    b = Ops(node, facts, fresh)
    a = _attrs(node)
    query, key, value, past_k, past_v, seqlens, _total, cos, sin = (b.input(i) for i in range(9))
    if any(b.input(i) for i in (9, 10, 11)):
        raise b.refuse("it has position_ids, attention_bias or head_sink", "only the builder's plain form")
    if a.get("softcap", 0.0) or a.get("smooth_softmax", 0) or a.get("qk_output", 0):
        raise b.refuse("softcap, smooth_softmax or qk_output is set", "only plain softmax attention")
    n, nkv = a["num_heads"], a["kv_num_heads"]
    h = _head_size(b, query, n + (2 * nkv if not key else 0), cos)
    dt = _dt(b, cos, past_k, query)
    if not key:  # packed [B, S, (N + 2 Nkv) H]
        last = b.const(np.array([-1], np.int64), what="last")
        cuts = [0, n * h, (n + nkv) * h, (n + 2 * nkv) * h]
        q, key, value = (
            b.op(
                "Slice", [query, b.const(np.array([s], np.int64)), b.const(np.array([e], np.int64)), last], w
            )
            for s, e, w in zip(cuts, cuts[1:], ("q", "k", "v"))
        )
    else:
        q = query
    q4 = b.reshape(q, [0, 0, n, h], "q_heads")  # [B, S, N, H]
    k4 = b.reshape(key, [0, 0, nkv, h], "k_heads")
    v4 = b.reshape(value, [0, 0, nkv, h], "v_heads")
    # each query's position: seqlens_k + 1 - S + s (its row's total length less the new tokens after it)
    seq = _dim(b, q, 1, 2, "seq")
    steps = b.op(
        "Range",
        [b.const(np.array(0, np.int64)), b.op("Squeeze", [seq], "seq_len"), b.const(np.array(1, np.int64))],
        "steps",
    )
    last_pos = b.op(
        "Sub", [b.cast(seqlens, TensorProto.INT64, "seqlens"), b.op("Squeeze", [seq], "s")], "first"
    )
    start = b.op("Add", [last_pos, b.const(np.array(1, np.int64), what="one")], "start")  # [B]
    pos = b.op("Add", [b.unsqueeze(start, [1]), b.unsqueeze(steps, [0])], "positions")  # [B, S]
    if a.get("do_rotary", 0):
        at = b.op("Max", [pos, b.const(np.array(0, np.int64), what="zero_pos")], "rotary_positions")
        cos_at = b.op("Gather", [cos, at], "cos_at", axis=0)
        sin_at = b.op("Gather", [sin, at], "sin_at", axis=0)
        inter = bool(a.get("rotary_interleaved", 0))
        q4 = _rope(b, q4, cos_at, sin_at, 0, h, inter, b.name("q_rotated"))
        k4 = _rope(b, k4, cos_at, sin_at, 0, h, inter, b.name("k_rotated"))
    qh = b.op("Transpose", [q4], "q_bnsh", perm=[0, 2, 1, 3])
    kh = b.op("Transpose", [k4], "k_bnsh", perm=[0, 2, 1, 3])
    vh = b.op("Transpose", [v4], "v_bnsh", perm=[0, 2, 1, 3])
    if past_k:
        kh = b.op("Concat", [past_k, kh], "present_k", b.output(1) or None, axis=2)
        vh = b.op("Concat", [past_v, vh], "present_v", b.output(2) or None, axis=2)
    else:
        if b.output(1):
            kh = b.op("Identity", [kh], out=b.output(1))
        if b.output(2):
            vh = b.op("Identity", [vh], out=b.output(2))
    if n != nkv:
        rep = n // nkv

        kh, vh = _repeat_heads(b, kh, rep, n, h, "k"), _repeat_heads(b, vh, rep, n, h, "v")
    scale = a.get("scale", 0.0) or 1.0 / np.sqrt(h)
    kt = b.op("Transpose", [kh], "k_t", perm=[0, 1, 3, 2])
    scores = b.op("Mul", [b.op("MatMul", [qh, kt], "qk"), b.const(_f(scale, dt), what="scale")], "scores")
    t_len = b.op("Squeeze", [_dim(b, kh, 2, 3, "t")], "t_len")
    keys = b.op("Range", [b.const(np.array(0, np.int64)), t_len, b.const(np.array(1, np.int64))], "keys")
    at_q = b.unsqueeze(pos, [2], "query_positions")  # [B, S, 1]
    allowed = b.op("LessOrEqual", [keys, at_q], "allowed")  # [B, S, T]
    window = a.get("local_window_size", -1)
    if window > 0:
        recent = b.op("Greater", [keys, b.op("Sub", [at_q, b.const(np.array(window, np.int64))])], "recent")
        allowed = b.op("And", [allowed, recent], "in_window")
    allowed = b.unsqueeze(allowed, [1], "allowed_heads")
    scores = b.op("Where", [allowed, scores, b.const(_f(-np.inf, dt), what="masked")], "masked_scores")
    probs = b.op("Softmax", [scores], "probs", axis=-1)
    out = b.op("Transpose", [b.op("MatMul", [probs, vh], "context")], "context_bsnh", perm=[0, 2, 1, 3])
    b.reshape(out, [0, 0, n * h], out=node.output[0])
    return b.done()


@decomposition(MS, "GatherBlockQuantized")
def gather_block_quantized(node, facts, fresh):
    """GatherBlockQuantized (onnxruntime-genai's embedding, the lm_head's int4 table shared): the constant table
    dequantized at build time along quantize_axis (the last), blocks of block_size, (q - zero_point) * scale,
    zero point 2^(bits-1) for packed uint8 data when absent; then a plain Gather of the float table."""
    b = Ops(node, facts, fresh)
    a = _attrs(node)
    bits, block = a.get("bits", 4), a.get("block_size", 128)
    q = b.constant(0, "data")
    scales = b.constant(2, "scales")
    zp = b.constant(3, "zero_points") if b.input(3) else None
    if q.dtype != np.uint8 or bits not in (4, 8):
        raise b.refuse("its data is not packed uint8 of 4 or 8 bits", "int4-typed data is not decomposed")
    axis = a.get("quantize_axis", 1) % q.ndim
    if axis != q.ndim - 1:
        raise b.refuse("it is quantized along another axis than the last", "only the last axis is decomposed")
    rows = int(np.prod(q.shape[:-1]))
    width = q.shape[-1] * (8 // bits)
    w = dequantize_nbits(q.reshape(rows, -1), scales.reshape(rows, -1), zp, width, rows, bits, block)
    table = b.const(w.reshape(*q.shape[:-1], width), what="table")
    b.op("Gather", [table, b.input(1)], out=node.output[0], axis=a.get("gather_axis", 0))
    return b.done()
