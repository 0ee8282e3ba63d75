"""Inputs to run a model with: what verification, build measurements, calibration (random:N), split plans and rule
answers feed a model when the user gives none.

Every input is drawn from one generator seeded with `seed`, per dtype: standard normal floats, integers 0..3,
random bools, an integer `attention_mask` all ones. Where the graph says what an input means, its values are
drawn for that meaning instead (from a second generator, so that the other inputs keep their values):

- token ids: an integer input that reaches a Gather's indices (through Cast, Unsqueeze, Reshape, Flatten, ...) on
  a constant table (an initializer, also through DequantizeLinear, Transpose or Reshape; a GatherBlockQuantized)
  is drawn in [0, rows) of that table: an id past the table is an error, or garbage, on most backends;
- attention masks (an integer, bool or float input named like *mask*, or one that feeds mask arithmetic:
  Sub(1, mask), Equal(mask, 0), Not): ones, and from the second row on, trailing zeros (row r its last r
  positions, keeping the first): padding, with the first row all ones;
- position ids (an integer input named like *position_ids*): 0..seq-1 on every row, after the past length when
  a KV cache is fed;
- KV caches (past_key_values.*, past_key*, past_value*: [batch, heads, past, head]): standard normal, their
  lengths related to the tokens' and the mask's (kv_cache_dims);
- uint8 images (a uint8 input of rank 3 or more): the full range 0..255.

Shapes are the caller's (`dims`, else `default_dim`) unless it asks for related lengths (`text_rows`): then a
model fed token ids gets `text_rows` rows of TEXT_SEQUENCE tokens where its dims are free (text_dims; one token
cannot show attention, one row cannot show padding) and a decoder with a KV cache consistent lengths
(kv_cache_dims). Verification asks for MASK_BATCH rows, then 1 where the model does not run at two (onnxruntime's
RotaryEmbedding takes one row of positions for any batch on some exports). `draw` returns the arrays and, per
input, a short line saying how it was drawn (VerifyReport.drawn carries it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from onnx import ModelProto, NodeProto, TensorProto, numpy_helper

from surgery.graph import tensor_info_from_type
from surgery.specs import SHAPE_MAX_ELEMENTS

_NP = {
    TensorProto.FLOAT: np.float32,
    TensorProto.DOUBLE: np.float64,
    TensorProto.FLOAT16: np.float16,
    TensorProto.INT64: np.int64,
    TensorProto.INT32: np.int32,
    TensorProto.INT16: np.int16,
    TensorProto.INT8: np.int8,
    TensorProto.UINT8: np.uint8,
    TensorProto.UINT16: np.uint16,
    TensorProto.UINT32: np.uint32,
    TensorProto.UINT64: np.uint64,
    TensorProto.BOOL: np.bool_,
}

# What a drawn value keeps meaning through: ops that move or retype an input without computing on it.
_PASS = {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Expand", "Transpose", "Slice"}
# Ops through which a constant table keeps its rows where the output has them (shape inference does the rest).
_SAME_SHAPE = {"Cast", "Identity", "DequantizeLinear"}

KV_PAST, KV_SEQUENCE = 4, 3  # positions in the KV cache and new tokens, when a decoder's lengths are related
# rows and tokens for a model fed token ids, where its dims are free and related lengths are asked for
MASK_BATCH, TEXT_SEQUENCE = 2, 3


@dataclass
class Feeds:
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    drawn: dict[str, str] = field(default_factory=dict)  # input name -> how its values were drawn


_PLAIN = {"standard normal", "integers 0..3", "random bools", "ones"}  # drawn per dtype, as for any model


def draw(
    model: ModelProto,
    seed: int = 0,
    dims: dict[str, int] | None = None,
    default_dim: int = 2,
    *,
    text_rows: int | None = None,
    kinds: dict[str, Kind] | None = None,
) -> Feeds:
    """Deterministic inputs for every real graph input (see the module doc). Symbolic dims come from `dims`, else
    with `text_rows` from related lengths (text_dims with that many rows, kv_cache_dims), else `default_dim` (2,
    not 1: a batch of 1 hides broadcasting and squeeze mistakes). `kinds`: `input_kinds(model)`, where the caller
    draws the same model at several sizes (a pass over the whole graph: seconds at 50k nodes). Raises ValueError
    for an input without a shape or of a type it cannot draw."""
    rng = np.random.default_rng(seed)
    meant = np.random.default_rng([seed, 1])
    inits = {t.name for t in model.graph.initializer}
    kinds = input_kinds(model) if kinds is None else kinds
    if text_rows is not None:
        dims = {**text_dims(model, text_rows, kinds), **kv_cache_dims(model), **(dims or {})}
    dims = dims or {}
    out = Feeds()
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        info = tensor_info_from_type(vi.name, vi.type)
        if info.shape is None:
            raise ValueError(f"input '{vi.name}' has no shape; give its shape to generate inputs")
        shape = [d if isinstance(d, int) else dims.get(str(d), default_dim) for d in info.shape]
        size = int(np.prod(shape, dtype=object)) if shape else 1
        if size > SHAPE_MAX_ELEMENTS:  # 2e9 floats would take the machine's memory and minutes to draw
            raise ValueError(
                f"input '{vi.name}' is {'x'.join(map(str, shape))}: {size:,} elements; inputs this tool generates "
                f"hold at most {SHAPE_MAX_ELEMENTS:,}. Note: give it a smaller shape"
            )
        np_type = _NP.get(info.dtype)
        if np_type is None:
            raise ValueError(
                f"input '{vi.name}' has type {info.dtype_name}, which seeded inputs cannot generate"
            )
        # np.asarray: a scalar input (shape []) is a 0-d array, not a numpy scalar onnxruntime refuses
        if np_type is np.bool_:
            value, how = np.asarray(rng.random(shape) > 0.5), "random bools"
        elif np.issubdtype(np_type, np.integer) and vi.name == "attention_mask":
            value, how = np.ones(shape, np_type), "ones"
        elif np.issubdtype(np_type, np.integer):
            value, how = np.asarray(rng.integers(0, 4, size=shape).astype(np_type)), "integers 0..3"
        else:
            value, how = np.asarray(rng.standard_normal(shape).astype(np_type)), "standard normal"
        kind = kinds.get(vi.name)
        if kind is not None:
            value, how = _meant(kind, value, meant)
        out.arrays[vi.name], out.drawn[vi.name] = value, how
    _place_positions(out, kinds)
    return out


def seeded_inputs(
    model: ModelProto, seed: int = 0, dims: dict[str, int] | None = None, default_dim: int = 2
) -> dict[str, np.ndarray]:
    """`draw`'s arrays alone."""
    return draw(model, seed=seed, dims=dims, default_dim=default_dim).arrays


def draw_for_both(
    original: ModelProto,
    changed: ModelProto,
    seed: int,
    dims: dict[str, int],
    default_dim: int = 1,
    text_rows: int | None = MASK_BATCH,
) -> Feeds:
    """Inputs for both models of a comparison, in related lengths: the original's, or the changed model's where
    the original has no shape for one (e.g. before freeze_shapes)."""
    try:
        return draw(original, seed=seed, dims=dims, default_dim=default_dim, text_rows=text_rows)
    except ValueError as first:
        try:
            theirs = draw(changed, seed=seed, dims=dims, default_dim=default_dim, text_rows=text_rows)
        except ValueError:
            raise first from None
        return theirs


def describe(drawn: dict[str, str]) -> str:
    """The inputs drawn for their meaning as one short clause, '' when none was: "input_ids: token ids < 256,
    rows of embed.weight; past_key_values.0.key .. past_key_values.1.value (4 inputs): KV cache, 4 past
    positions" (inputs drawn alike are named together)."""
    alike: dict[str, list[str]] = {}
    for name, how in drawn.items():
        if how not in _PLAIN:
            alike.setdefault(how, []).append(name)
    parts = []
    for how, names in alike.items():
        who = ", ".join(names) if len(names) <= 2 else f"{names[0]} .. {names[-1]} ({len(names)} inputs)"
        parts.append(f"{who}: {how}")
    return "; ".join(parts)


# -- what an input means -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    what: str  # "ids" | "mask" | "positions" | "kv" | "image"
    rows: int = 0  # ids: the table's rows
    table: str = ""  # ids: the table's name


def input_kinds(model: ModelProto) -> dict[str, Kind]:
    """The graph inputs drawn for their meaning (see the module doc), by name."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    wanted = {
        vi.name: _NP.get(vi.type.tensor_type.elem_type)
        for vi in g.input
        if vi.name not in inits and vi.type.HasField("tensor_type")
    }
    reached = _reached({name for name, dtype in wanted.items() if dtype is not None}, g)
    tables = _Tables(model)
    kinds: dict[str, Kind] = {}
    for vi in g.input:
        dtype = wanted.get(vi.name)
        if dtype is None:
            continue
        t = vi.type.tensor_type
        rank = len(t.shape.dim) if t.HasField("shape") else -1
        integer = np.issubdtype(dtype, np.integer)
        lower = vi.name.lower()
        if integer:
            rows = [tables.rows(n, k) for n, k in reached[vi.name]]
            rows = [r for r in rows if r is not None]
            if rows:
                rows_, table = min(rows)
                kinds[vi.name] = Kind("ids", rows_, table)
                continue
        if _is_kv(vi.name, rank):
            kinds[vi.name] = Kind("kv")
        elif integer and "position_ids" in lower:
            kinds[vi.name] = Kind("positions")
        elif "mask" in lower or any(_masks(n, k, g, inits) for n, k in reached[vi.name]):
            kinds[vi.name] = Kind("mask")
        elif dtype is np.uint8 and rank >= 3:
            kinds[vi.name] = Kind("image")
    return kinds


def _reached(names: set[str], graph) -> dict[str, list]:
    """Per name, the (node, input index) pairs that read it or what the pass-through ops (_PASS) make of it: one
    pass over the nodes in their order (ONNX keeps them topologically sorted), with no map of every tensor's
    readers (at 50k nodes that map was most of the cost)."""
    found: dict[str, list] = {name: [] for name in names}
    origin: dict[str, set[str]] = {name: {name} for name in names}  # tensor -> the inputs it comes from
    for n in graph.node:
        for k, x in enumerate(n.input):
            sources = origin.get(x) if x else None
            if not sources:
                continue
            for name in sources:
                found[name].append((n, k))
            if n.op_type in _PASS and k == 0:
                for o in n.output:
                    if o:
                        origin.setdefault(o, set()).update(sources)
    return found


def _is_kv(name: str, rank: int) -> bool:
    """past_key_values.*, past_key.*, past_value.*: [batch, heads, past, head]."""
    return rank == 4 and name.startswith("past_")


def _masks(node, k: int, g, inits: set[str]) -> bool:
    """Whether input `k` of `node` is used as a mask: 1 - mask, mask == 0, not mask."""
    if node.op_type == "Not":
        return True
    if node.op_type not in ("Sub", "Equal") or len(node.input) != 2:
        return False
    other = node.input[1 - k]
    want = 1 if node.op_type == "Sub" else 0
    if node.op_type == "Sub" and k != 1:
        return False
    value = _constant(other, g, inits)
    return value is not None and value.size == 1 and float(value.reshape(-1)[0]) == want


def _constant(name: str, g, inits: set[str]) -> np.ndarray | None:
    for t in g.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    for n in g.node:
        if n.op_type == "Constant" and n.output and n.output[0] == name:
            for a in n.attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
    return None


class _Tables:
    """The rows of the constant table a Gather (or GatherBlockQuantized) indexes, by node; shape inference is run
    once, and only when a table is reached through other ops than _SAME_SHAPE, Transpose and a constant Reshape."""

    def __init__(self, model: ModelProto):
        self.model = model
        self._inferred: dict[str, list] | None = None

    @cached_property
    def producer(self) -> dict[str, NodeProto]:
        return {o: n for n in self.model.graph.node for o in n.output if o}

    @cached_property
    def _constants(self) -> tuple[dict[str, list], dict[str, np.ndarray]]:
        """(dims of every constant, the short 1-D int64 ones' values: the shapes a table is reshaped to); made on
        the first Gather asked about, not for a model whose inputs reach none."""
        g = self.model.graph
        dims = {t.name: list(t.dims) for t in g.initializer}
        values = {t.name: numpy_helper.to_array(t) for t in g.initializer if _shape_like(t)}
        for n in g.node:
            if n.op_type == "Constant" and n.output:
                for a in n.attribute:
                    if a.name == "value":
                        dims[n.output[0]] = list(a.t.dims)
                        if _shape_like(a.t):
                            values[n.output[0]] = numpy_helper.to_array(a.t)
        return dims, values

    @property
    def init_dims(self) -> dict[str, list]:
        return self._constants[0]

    @property
    def values(self) -> dict[str, np.ndarray]:
        return self._constants[1]

    def rows(self, node, k: int) -> tuple[int, str] | None:
        """(rows, table name) when input `k` of `node` is the indices of a Gather on a constant table."""
        if k != 1 or node.op_type not in ("Gather", "GatherBlockQuantized"):
            return None
        key = "gather_axis" if node.op_type == "GatherBlockQuantized" else "axis"
        axis = next((a.i for a in node.attribute if a.name == key), 0)
        found = self._shape(node.input[0], depth=8)
        if found is None:
            return None
        shape, table = found
        if not shape or not -len(shape) <= axis < len(shape):
            return None
        rows = shape[axis]
        return (rows, table) if isinstance(rows, int) and rows > 0 else None

    def _shape(self, name: str, depth: int) -> tuple[list, str] | None:
        if name in self.init_dims:
            return self.init_dims[name], name
        n = self.producer.get(name)
        if n is None or depth == 0 or not n.input:
            return None
        below = self._shape(n.input[0], depth - 1)
        if below is None:
            return None
        shape, table = below
        if n.op_type in _SAME_SHAPE:
            return shape, table
        if n.op_type == "Transpose":
            perm = next((list(a.ints) for a in n.attribute if a.name == "perm"), None)
            perm = perm or list(reversed(range(len(shape))))
            return [shape[p] for p in perm], table
        if n.op_type == "Reshape" and len(n.input) > 1 and n.input[1] in self.values:
            to = [int(d) for d in self.values[n.input[1]].reshape(-1)]
            to = [shape[k] if d == 0 and k < len(shape) else d for k, d in enumerate(to)]
            if to.count(-1) == 1 and all(isinstance(d, int) for d in shape):
                known = int(np.prod([d for d in to if d != -1]))
                to[to.index(-1)] = int(np.prod(shape)) // known if known else 0
            return to, table
        inferred = self._infer().get(name)
        return (inferred, table) if inferred is not None else None

    def _infer(self) -> dict[str, list]:
        if self._inferred is None:
            import onnx

            self._inferred = {}
            try:
                done = onnx.shape_inference.infer_shapes(self.model)
            except Exception:  # noqa: BLE001 - a model shape inference cannot take has no inferred table
                return self._inferred
            for vi in done.graph.value_info:
                shape = tensor_info_from_type(vi.name, vi.type).shape
                if shape is not None:
                    self._inferred[vi.name] = list(shape)
        return self._inferred


def _shape_like(t: TensorProto) -> bool:
    return (
        t.data_type == TensorProto.INT64
        and len(t.dims) == 1
        and t.dims[0] <= 8
        and t.data_location != TensorProto.EXTERNAL
    )


def _meant(kind: Kind, value: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """The value an input of this kind gets (positions are placed later, once the past length is known)."""
    shape, dtype = value.shape, value.dtype
    if kind.what == "ids":
        ids = rng.integers(0, kind.rows, size=shape).astype(dtype)
        return np.asarray(ids), f"token ids < {kind.rows}, rows of {kind.table}"
    if kind.what == "mask":
        return _padded(shape, dtype)
    if kind.what == "kv":
        past = shape[2] if len(shape) == 4 else 0
        return value, f"KV cache, {past} past position{'s' if past != 1 else ''}"
    if kind.what == "image":
        return np.asarray(rng.integers(0, 256, size=shape).astype(np.uint8)), "pixels 0..255"
    return value, "positions"


def _padded(shape: tuple, dtype: np.dtype) -> tuple[np.ndarray, str]:
    """Ones, with row r (r >= 1, along the first axis) ending in min(r, length - 1) zeros on the last axis."""
    mask = np.ones(shape, dtype=dtype)
    if len(shape) < 2 or shape[0] < 2 or shape[-1] < 2:
        return mask, "mask, all ones (no room for padding)"
    for r in range(1, shape[0]):
        mask[r, ..., shape[-1] - min(r, shape[-1] - 1) :] = 0
    rows = "row 2 ends" if shape[0] == 2 else f"rows 2..{shape[0]} end"
    return mask, f"mask, padded ({rows} in zeros)"


def _place_positions(out: Feeds, kinds: dict[str, Kind]) -> None:
    """Position ids 0..seq-1 per row, after the past positions when a KV cache is fed."""
    past = next((v.shape[2] for n, v in out.arrays.items() if n in kinds and kinds[n].what == "kv"), 0)
    for name, kind in kinds.items():
        if kind.what != "positions" or name not in out.arrays:
            continue
        value = out.arrays[name]
        seq = value.shape[-1] if value.ndim else 1
        at = np.arange(past, past + seq, dtype=value.dtype)
        out.arrays[name] = np.asarray(np.broadcast_to(at, value.shape).copy())
        after = f" after {past} past" if past else ""
        out.drawn[name] = f"positions {past}..{past + seq - 1}{after}"


# -- related lengths -----------------------------------------------------------------------------------------------


def kv_cache_dims(model: ModelProto) -> dict[str, int]:
    """Sizes for a decoder with a KV cache (inputs past_key_values.* / past_*: [batch, heads, past, head]) whose
    attention_mask is as long as the past and the new tokens together (its length another symbol than
    input_ids'): past KV_PAST, new KV_SEQUENCE, the mask's length their sum; batch 1 when the model holds a
    GroupQueryAttention (onnxruntime takes new tokens after a past at batch 1 only there; other decoders keep
    text_dims' two rows). One size for every dim cannot run such a model (past + new != total). Empty for any
    other model."""
    shapes = {i.name: [d.dim_param for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    past = [s for n, s in shapes.items() if n.startswith("past_") and len(s) == 4 and s[2]]
    ids, mask = shapes.get("input_ids"), shapes.get("attention_mask")
    if not past or not ids or not mask or len(ids) != 2 or len(mask) != 2 or not mask[1] or mask[1] == ids[1]:
        return {}
    out = {p[2]: KV_PAST for p in past} | {mask[1]: KV_PAST + KV_SEQUENCE}
    if ids[1]:
        out[ids[1]] = KV_SEQUENCE
    if ids[0] and any(n.op_type == "GroupQueryAttention" for n in model.graph.node):
        out[ids[0]] = 1
    # a symbolic head size (onnxruntime-genai's builder: 'kv_cache_dim'): twice the width of its full-rotary
    # cache 'cos_cache' [max_position, head / 2]
    cos = next((t for t in model.graph.initializer if t.name == "cos_cache" and len(t.dims) == 2), None)
    heads = {p[3] for p in past if p[3]}
    if cos is not None and len(heads) == 1:
        out[heads.pop()] = 2 * cos.dims[1]
    return out


def text_dims(
    model: ModelProto, rows: int = MASK_BATCH, kinds: dict[str, Kind] | None = None
) -> dict[str, int]:
    """Sizes for a model fed token ids (and attention masks) of shape [batch, length], where those are symbolic:
    `rows` rows (MASK_BATCH: one mask row padded, one full) and TEXT_SEQUENCE positions, so that attention has
    more than one token to weigh. kv_cache_dims, where it applies, comes on top. Empty without token ids."""
    kinds = input_kinds(model) if kinds is None else kinds
    if not any(k.what == "ids" for k in kinds.values()):
        return {}
    out: dict[str, int] = {}
    for vi in model.graph.input:
        kind = kinds.get(vi.name)
        if kind is None or kind.what not in ("ids", "mask"):
            continue
        dim = vi.type.tensor_type.shape.dim
        if len(dim) != 2:
            continue
        if dim[0].dim_param:
            out.setdefault(dim[0].dim_param, rows)
        if dim[1].dim_param:
            out.setdefault(dim[1].dim_param, TEXT_SEQUENCE)
    return out
