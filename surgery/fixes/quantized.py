"""Rewrites of quantized models that span more than one node, for TensorRT's Q/DQ import.

- `requantize_int8`: a QuantizeLinear -> DequantizeLinear pair on activations with a UINT8 (or non-zero INT8)
  zero point becomes INT8 with zero point 0, which is all TensorRT quantizes with (a UINT8 zero point 0 is read
  as INT8 and clips above 127). Ops between them that only move values (MaxPool, Flatten, Reshape, ... as
  onnxruntime's QOperator form leaves them on UINT8 data) move INT8 values instead. UINT8 with zero point 128 is
  the same grid shifted: exact. Any other zero point is requantized symmetrically over the same range, scale' =
  max(|lo|, |hi|) / 127, with a Clip to the old range in front (the old grid's saturation: onnxruntime drops a
  Relu whose clamp a UINT8 zero point 0 does): approximate, a coarser grid.
- `dequantize_constant`: a DequantizeLinear of a constant that TensorRT refuses (UINT8 or a non-zero zero point,
  INT32) is re-encoded as INT8 with zero point 0 where the values fit (exact), else folded into a float constant
  computed by onnxruntime itself (exact); a constant table gathered before its DequantizeLinear (onnxruntime's
  quantized embeddings) is folded into a float table that the Gather reads (exact).
- `dynamic_to_float`: onnxruntime's dynamic quantization (DynamicQuantizeLinear -> MatMulInteger / ConvInteger
  -> Cast -> Mul by the scales) becomes the float MatMul / Conv on the float input with the dequantized constant
  weights: approximate (the original rounds the activations to 8 bits at run time).
- `pad_four_bit`: a 4-bit constant (INT4, UINT4, FLOAT4E2M1) with an odd number of elements, which TensorRT packs
  two per byte and refuses, is padded to an even count and the DequantizeLinear's result is sliced back: exact.
"""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import add_initializer, copy_model, fresh_name, node_index, used_names
from surgery.graph import GraphFacts, all_inputs, opset_of

MS = "com.microsoft"
EIGHT_BIT = (TensorProto.UINT8, TensorProto.INT8)
FOUR_BIT = (TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT4E2M1)
# ops whose output holds input values (moved, selected, or picked by a monotone comparison)
PASSTHROUGH = frozenset(
    {
        "MaxPool",
        "Flatten",
        "Reshape",
        "Transpose",
        "Squeeze",
        "Unsqueeze",
        "Slice",
        "Gather",
        "Split",
        "Identity",
    }
    | {"Expand", "Tile", "DepthToSpace", "SpaceToDepth", "ReduceMax", "ReduceMin"}
)


def _name(node: NodeProto) -> str:
    return f"{node.op_type} '{node.name or node.output[0]}'"


def _domain(node: NodeProto) -> str:
    return "" if node.domain in ("", "ai.onnx") else node.domain


def _keys(node: str | list[str]) -> list[str]:
    keys = [node] if isinstance(node, str) else list(node)
    if not keys:
        raise FixError("no node given")
    return keys


def _value(facts: GraphFacts, name: str) -> np.ndarray | None:
    """A tensor's value when it is a constant (initializer, Constant, or a constant chain), else None."""
    if not name:
        return None
    t = facts.weights_tensor(name)  # an initializer or a Constant's value
    if t is not None:
        return None if t.data_location == TensorProto.EXTERNAL else numpy_helper.to_array(t)
    if facts.is_constant(name):
        from surgery.fixes.fold_constants import _evaluate

        return np.asarray(_evaluate(facts.model, facts, [name], {}, None)[name])
    return None


def _attr(node: NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


class _Edit:
    """Edits of one model copy: fresh names, new initializers, nodes to drop, tensors to retype."""

    def __init__(self, model: ModelProto):
        self.model = copy_model(model)
        self.graph = self.model.graph
        self.facts = GraphFacts.of(model)
        self.used = used_names(self.model)
        self.drop: set[int] = set()  # node indices to delete
        self.after: dict[int, list[NodeProto]] = {}  # node index -> nodes to insert right after it
        self.before: dict[int, list[NodeProto]] = {}
        self.orphans: set[str] = set()  # initializers that may no longer be read

    def producer(self, tensor: str) -> NodeProto | None:
        """The node of this copy that makes `tensor` (facts are of the input model: never edit their nodes)."""
        i = self.facts.producer.get(tensor)
        return None if i is None else self.graph.node[i]

    def readers(self, tensor: str) -> list[NodeProto]:
        return [self.graph.node[i] for i in self.facts.consumers.get(tensor, [])]

    def index(self, node: NodeProto) -> int:
        return next(k for k, n in enumerate(self.graph.node) if n is node)

    def fresh(self, base: str) -> str:
        return fresh_name(self.model, base, self.used)

    def init(self, base: str, array: np.ndarray) -> str:
        name = self.fresh(base)
        add_initializer(self.graph, array, name)
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str], base: str, domain: str = "", **attrs):
        return helper.make_node(op, inputs, outputs, name=self.fresh(base), domain=domain, **attrs)

    def constant(self, tensor: str, value: np.ndarray, index: int) -> None:
        """`tensor` becomes an initializer of that value (TensorRT's weights); a graph output gets an Identity
        from a new initializer instead (its name stays the output's)."""
        if tensor in self.facts.graph_outputs:
            src = self.init(f"{tensor}_value", value)
            self.after.setdefault(index, []).append(
                self.node("Identity", [src], [tensor], f"{tensor}/Identity")
            )
            return
        add_initializer(self.graph, value, tensor)
        if self.model.ir_version < 4:  # before IR 4 an initializer is also listed as a graph input
            self.graph.input.append(
                helper.make_tensor_value_info(
                    tensor, helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype), value.shape
                )
            )

    def retype(self, tensor: str, elem_type: int) -> None:
        for vi in list(self.graph.value_info) + list(self.graph.output):
            if vi.name == tensor and vi.type.HasField("tensor_type"):
                vi.type.tensor_type.elem_type = elem_type

    def finish(self) -> ModelProto:
        nodes, dropped = [], []
        for i, n in enumerate(self.graph.node):
            nodes.extend(self.before.get(i, []))
            (dropped if i in self.drop else nodes).append(n)
            nodes.extend(self.after.get(i, []))
        del self.graph.node[:]
        self.graph.node.extend(nodes)
        _prune(self.graph, {x for n in dropped for x in all_inputs(n)} | self.orphans)
        return self.model


def _prune(graph, loose: set[str]) -> None:
    """Drop what only fed the rewritten part: nodes making a tensor in `loose` that nobody reads any more (and,
    in turn, what only fed them), then initializers in `loose` nobody reads. The rest of the model is untouched,
    dead or not."""
    outputs = {o.name for o in graph.output}
    while True:
        read = {x for n in graph.node for x in all_inputs(n)} | outputs
        dead = [
            k
            for k, n in enumerate(graph.node)
            if any(o in loose for o in n.output) and not any(o in read for o in n.output if o)
        ]
        if not dead:
            break
        for k in reversed(dead):
            loose.update(all_inputs(graph.node[k]))
            del graph.node[k]
    inputs = {i.name for i in graph.input}  # an initializer that is also an input is part of the interface
    for k in range(len(graph.initializer) - 1, -1, -1):
        name = graph.initializer[k].name
        if name in loose and name not in read and name not in inputs:
            del graph.initializer[k]


def _nodes(edit: _Edit, keys: list[str]) -> list[tuple[int, NodeProto]]:
    index = node_index(edit.model)
    out = []
    for k in keys:
        if k not in index:
            hint = ", ".join(list(index)[:8])
            raise FixError(f"no node '{k}' in the model. Note: nodes are {hint} ...")
        out.append((index[k], edit.graph.node[index[k]]))
    return out


def _batch(keys: list[str], work) -> None:
    """Run `work(key)` for each node; a batch succeeds when one node is done (the others are proposed again);
    a single node's refusal, or every node's, is raised."""
    errors, done = [], 0
    for k in keys:
        try:
            work(k)
            done += 1
        except FixError as exc:
            errors.append(str(exc))
    if not done:
        raise FixError(errors[0] if len(errors) == 1 else f"{errors[0]} (and {len(errors) - 1} more node(s))")


# -- Q/DQ pairs to INT8 zero point 0 -------------------------------------------------------------------------------


def symmetric_int8(scale: np.ndarray, zero_point: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """(new scale, INT8 zero point 0, exact?) covering the range of an 8-bit grid (scale, zero point)."""
    z = zero_point.astype(np.int64)
    if zero_point.dtype == np.uint8 and np.all(z == 128):
        return scale.astype(np.float32), np.zeros(zero_point.shape, np.int8), True
    lo, hi = (0, 255) if zero_point.dtype == np.uint8 else (-128, 127)
    reach = np.maximum(np.abs(lo - z), np.abs(hi - z)).astype(np.float64)
    new = (scale.astype(np.float64) * reach / 127.0).astype(np.float32)
    return new, np.zeros(zero_point.shape, np.int8), False


@register(
    "requantize_int8",
    safety=Safety.APPROXIMATE,
    summary="Make a QuantizeLinear -> DequantizeLinear pair with a UINT8 or non-zero zero point INT8 with zero "
    "point 0 (exact for UINT8 zero point 128; else a symmetric grid over the same range).",
    params={
        "node": "node key (str), or a list: a DequantizeLinear reading a QuantizeLinear (or the Q itself)"
    },
    batch="node",
)
def requantize_int8(model: ModelProto, node) -> ModelProto:
    edit = _Edit(model)
    facts = edit.facts
    done: set[str] = set()

    def work(key: str) -> None:
        ((_, n),) = _nodes(edit, [key])
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear") or _domain(n):
            raise FixError(f"{_name(n)} is not a QuantizeLinear or DequantizeLinear")
        q = n if n.op_type == "QuantizeLinear" else _quantizer(edit, n.input[0])
        if q is None:
            raise FixError(
                f"{_name(n)} does not read a QuantizeLinear (directly or through ops that only move values)"
            )
        t = q.output[0]
        if t in done:
            return
        if len(q.input) < 3 or not q.input[2]:
            raise FixError(f"{_name(q)} has no zero point: it is UINT8 zero point 0 by default; give it one")
        scale, zp = _value(facts, q.input[1]), _value(facts, q.input[2])
        for what, name, value in (("scale", q.input[1], scale), ("zero point", q.input[2], zp)):
            if value is None:
                raise FixError(
                    f"{_name(q)}: its {what} '{name}' is computed at run time. Note: TensorRT needs constant "
                    "quantization parameters; fold it first (fold_constants)"
                )
        if zp.dtype not in (np.uint8, np.int8):
            raise FixError(f"{_name(q)}: zero point '{q.input[2]}' is {zp.dtype}, not an 8-bit type")
        if zp.dtype == np.int8 and not np.any(zp):
            raise FixError(f"{_name(q)}: already INT8 with zero point 0")
        axis = _attr(q, "axis", 1)
        tensors, readers = _quantized_region(edit, q, per_axis=scale.size > 1)
        for r in readers:
            if len(r.input) < 3 or not r.input[2]:
                raise FixError(f"{_name(r)} reads '{r.input[0]}' without its zero point")
            rs, rz = _value(facts, r.input[1]), _value(facts, r.input[2])
            if rs is None or rz is None or not np.array_equal(rs, scale) or not np.array_equal(rz, zp):
                raise FixError(
                    f"{_name(r)} dequantizes '{r.input[0]}' with another (or a computed) scale / zero point than "
                    f"{_name(q)} quantizes it with"
                )
            if scale.size > 1 and _attr(r, "axis", 1) != axis:
                raise FixError(f"{_name(r)} uses another axis than {_name(q)}")
        new_scale, new_zp, exact = symmetric_int8(scale, zp)
        if not exact:  # the old grid saturated at its own ends: keep that clamp
            _clamp(edit, q, scale, zp, axis)
        s_name = q.input[1] if np.array_equal(new_scale, scale) else edit.init(f"{t}_scale_int8", new_scale)
        z_name = edit.init(f"{t}_zero_point_int8", new_zp)
        for m in [q, *readers]:
            edit.orphans.update(m.input[1:3])
            m.input[1], m.input[2] = s_name, z_name
        for x in tensors:
            edit.retype(x, TensorProto.INT8)
        done.add(t)

    _batch(_keys(node), work)
    return edit.finish()


def _quantizer(edit: _Edit, tensor: str) -> NodeProto | None:
    """The QuantizeLinear that made `tensor`, directly or through ops that only move 8-bit values."""
    for _ in range(64):
        p = edit.producer(tensor)
        if p is None or _domain(p):
            return None
        if p.op_type == "QuantizeLinear":
            return p
        if p.op_type not in PASSTHROUGH:
            return None
        tensor = p.input[0]
    return None


def _quantized_region(edit: _Edit, q: NodeProto, per_axis: bool) -> tuple[list[str], list[NodeProto]]:
    """The 8-bit tensors a QuantizeLinear's output flows through (ops that only move values) and the
    DequantizeLinear nodes that end them; a refusal names any other reader."""
    tensors, readers, stack = [], [], [q.output[0]]
    while stack:
        t = stack.pop()
        if t in tensors:
            continue
        tensors.append(t)
        if t in edit.facts.graph_outputs:
            raise FixError(f"{_name(q)}: '{t}' is a graph output; its type is part of the model's interface")
        for r in edit.readers(t):
            if r.op_type == "DequantizeLinear" and not _domain(r) and r.input[0] == t:
                readers.append(r)
            elif r.op_type in PASSTHROUGH and not _domain(r) and r.input[0] == t:
                if per_axis:
                    raise FixError(f"{_name(q)} is per-axis and {_name(r)} moves its values between axes")
                stack.extend(o for k, o in enumerate(r.output) if o and not (r.op_type == "MaxPool" and k))
            else:
                raise FixError(
                    f"{_name(q)}: '{t}' is read by {_name(r)}, which computes on the 8-bit values. Note: decompose "
                    "it to its Q/DQ form first"
                )
    return tensors, readers


def _clamp(edit: _Edit, q: NodeProto, scale: np.ndarray, zp: np.ndarray, axis: int) -> None:
    """Clip the QuantizeLinear's input to the real range of its old grid, [(lo - z) s, (hi - z) s]: the wider
    symmetric grid would otherwise let through values the old one saturated (a UINT8 zero point 0 clamps every
    negative value to 0)."""
    lo, hi = (0, 255) if zp.dtype == np.uint8 else (-128, 127)
    z = zp.astype(np.float32)
    low = ((np.float32(lo) - z) * scale.astype(np.float32)).astype(np.float32)
    high = ((np.float32(hi) - z) * scale.astype(np.float32)).astype(np.float32)
    x = q.input[0]
    clipped = edit.fresh(f"{x}_clamped")
    base = q.name or q.output[0]
    i = edit.index(q)
    if scale.size == 1:
        low, high = low.reshape([]), high.reshape([])
        if (opset_of(edit.model) or 0) >= 11:
            ins = [x, edit.init(f"{base}/low", low), edit.init(f"{base}/high", high)]
            edit.before.setdefault(i, []).append(edit.node("Clip", ins, [clipped], f"{base}/Clip"))
        else:
            node = edit.node("Clip", [x], [clipped], f"{base}/Clip", min=float(low), max=float(high))
            edit.before.setdefault(i, []).append(node)
    else:
        rank = edit.facts.info(x).rank
        if rank is None:
            raise FixError(f"{_name(q)} is per-axis and the rank of '{x}' is unknown")
        shape = [1] * rank
        shape[axis % rank] = -1
        upper = edit.fresh(f"{x}_below_high")
        edit.before.setdefault(i, []).extend(
            [
                edit.node("Min", [x, edit.init(f"{base}/high", high.reshape(shape))], [upper], f"{base}/Min"),
                edit.node(
                    "Max", [upper, edit.init(f"{base}/low", low.reshape(shape))], [clipped], f"{base}/Max"
                ),
            ]
        )
    q.input[0] = clipped


# -- constants dequantized: INT8 zero point 0, or float ---------------------------------------------------------


def ort_dequantize(dq: NodeProto, arrays: list[np.ndarray], model: ModelProto) -> np.ndarray:
    """DequantizeLinear of constant inputs, computed by onnxruntime (bit for bit what the model computes)."""
    from surgery.ort import make_session

    names = [f"i{k}" for k in range(len(arrays))]
    inits = [numpy_helper.from_array(a, n) for a, n in zip(arrays, names)]
    attrs = {a.name: helper.get_attribute_value(a) for a in dq.attribute}
    node = helper.make_node("DequantizeLinear", names, ["y"], **attrs)
    out = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(arrays[1].dtype), None)
    graph = helper.make_graph([node], "dq", [], [out], inits)
    sub = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset_of(model) or 0)], ir_version=model.ir_version
    )
    return make_session(sub).run(None, {})[0]


def _dq_inputs(facts: GraphFacts, dq: NodeProto, x_value: np.ndarray) -> list[np.ndarray]:
    arrays = [x_value]
    for k, what in ((1, "scale"), (2, "zero point")):
        if k < len(dq.input) and dq.input[k]:
            v = _value(facts, dq.input[k])
            if v is None:
                raise FixError(
                    f"{_name(dq)}: its {what} '{dq.input[k]}' is computed at run time. Note: TensorRT needs "
                    "constant quantization parameters; fold it first (fold_constants)"
                )
            arrays.append(v)
    return arrays


def _reencode_int8(dq: NodeProto, arrays: list[np.ndarray]) -> np.ndarray | None:
    """x - zero point as INT8 when every value fits (the same real values with zero point 0), else None."""
    x = arrays[0]
    if len(arrays) < 3:
        z = np.zeros([], np.int64)
    else:
        z = arrays[2].astype(np.int64)
        if z.size > 1:
            if _attr(dq, "block_size", 0):
                return None
            axis = _attr(dq, "axis", 1) % max(x.ndim, 1)
            shape = [1] * x.ndim
            shape[axis] = -1
            z = z.reshape(shape)
        else:
            z = z.reshape([])
    centered = x.astype(np.int64) - z
    if centered.size and (centered.min() < -128 or centered.max() > 127):
        return None
    return centered.astype(np.int8)


def _dequantize_linear(edit, key: str) -> tuple[int, NodeProto]:
    """(index, node) of the DequantizeLinear `key` names; anything else is refused."""
    ((i, dq),) = _nodes(edit, [key])
    if dq.op_type != "DequantizeLinear":
        raise FixError(f"{_name(dq)} is not a DequantizeLinear")
    return i, dq


@register(
    "dequantize_constant",
    safety=Safety.EXACT,
    summary="A DequantizeLinear of a constant TensorRT refuses (UINT8 or a non-zero zero point, INT32, or a table "
    "gathered first): INT8 with zero point 0 where the values fit, else the float values.",
    params={"node": "node key (str), or a list of them: a DequantizeLinear"},
    batch="node",
)
def dequantize_constant(model: ModelProto, node) -> ModelProto:
    edit = _Edit(model)
    facts = edit.facts

    def work(key: str) -> None:
        i, dq = _dequantize_linear(edit, key)
        x = dq.input[0]
        producer = edit.producer(x)
        if producer is not None and producer.op_type == "Gather" and not facts.is_constant(x):
            _fold_gathered(edit, i, dq, producer)
            return
        value = _value(facts, x)
        if value is None:
            raise FixError(f"{_name(dq)}: its input '{x}' is computed at run time, not a constant")
        arrays = _dq_inputs(facts, dq, value)
        if value.dtype in (np.uint8, np.int8):
            if value.dtype == np.int8 and (len(arrays) < 3 or not np.any(arrays[2])):
                raise FixError(f"{_name(dq)}: already INT8 with zero point 0")
            centered = _reencode_int8(dq, arrays)
            if centered is not None:
                zero = np.zeros(arrays[2].shape if len(arrays) > 2 else [], np.int8)
                edit.orphans.update(dq.input[0:3:2])
                dq.input[0] = edit.init(f"{x}_int8", centered)
                if len(dq.input) > 2:
                    dq.input[2] = edit.init(f"{x}_zero_point_int8", zero)
                else:
                    dq.input.append(edit.init(f"{x}_zero_point_int8", zero))
                return
        elif value.dtype != np.int32:
            raise FixError(f"{_name(dq)}: '{x}' is {value.dtype}; this fix is for 8-bit and INT32 constants")
        edit.orphans.update(y for y in dq.input if y)
        edit.drop.add(i)
        edit.constant(dq.output[0], ort_dequantize(dq, arrays, model), i)

    _batch(_keys(node), work)
    return edit.finish()


def _fold_gathered(edit: _Edit, i: int, dq: NodeProto, gather: NodeProto) -> None:
    """Gather(constant table, indices) -> DequantizeLinear becomes Gather(dequantized table, indices)."""
    facts = edit.facts
    table = _value(facts, gather.input[0])
    if table is None:
        raise FixError(f"{_name(dq)} dequantizes what {_name(gather)} gathers from a computed table")
    arrays = _dq_inputs(facts, dq, table)
    if any(a.size > 1 for a in arrays[1:]):
        raise FixError(
            f"{_name(dq)} is per-axis after a Gather; the axis of the gathered values is not the table's"
        )
    t = gather.output[0]
    readers = edit.readers(t)
    if t in facts.graph_outputs or any(r.op_type != "DequantizeLinear" for r in readers):
        raise FixError(
            f"'{t}' gathered by {_name(gather)} is also read as 8-bit values; only a dequantized read folds"
        )
    for r in readers:
        rs = [_value(facts, y) for y in r.input[1:]]
        if any(v is None for v in rs) or any(not np.array_equal(a, b) for a, b in zip(rs, arrays[1:])):
            raise FixError(f"{_name(r)} dequantizes '{t}' with other parameters than {_name(dq)}")
    floats = edit.init(f"{gather.input[0]}_float", ort_dequantize(dq, arrays, edit.model))
    edit.orphans.add(gather.input[0])
    for r in readers:
        edit.orphans.update(y for y in r.input[1:] if y)
    gi = edit.index(gather)
    first, *rest = readers
    edit.after.setdefault(gi, []).append(
        edit.node(
            "Gather",
            [floats, gather.input[1]],
            [first.output[0]],
            f"{gather.name or 'gather'}/float",
            axis=_attr(gather, "axis", 0),
        )
    )
    for r in rest:
        ri = edit.index(r)
        edit.drop.add(ri)
        edit.after.setdefault(ri, []).append(
            edit.node("Identity", [first.output[0]], [r.output[0]], f"{r.name or 'dq'}/same")
        )
    edit.drop.add(edit.index(first))
    edit.drop.add(gi)


# -- onnxruntime's dynamic quantization to float ----------------------------------------------------------------


def _single_reader(edit: _Edit, tensor: str, ops: tuple[str, ...], what: str) -> NodeProto:
    readers = edit.readers(tensor)
    if len(readers) != 1 or readers[0].op_type not in ops or tensor in edit.facts.graph_outputs:
        got = ", ".join(r.op_type for r in readers) or "nothing"
        raise FixError(f"'{tensor}' should be read by one {'/'.join(ops)} ({what}), is read by {got}")
    return readers[0]


def _integer_bias(facts: GraphFacts, tensor: str) -> np.ndarray:
    """The float bias onnxruntime's older dynamic quantizer added in the integer domain: Reshape(Cast(Floor(
    Div(bias, scale)))): the bias before it was rounded, as a 1-D float array."""
    t, hops = tensor, 0
    while hops < 8:
        p = facts.producer_of(t)
        if p is None:
            break
        if p.op_type in ("Reshape", "Cast", "Floor", "Round", "Identity", "Unsqueeze", "Squeeze"):
            t, hops = p.input[0], hops + 1
            continue
        if p.op_type == "Div":
            value = _value(facts, p.input[0])
            if value is not None and value.dtype.kind == "f":
                return value.astype(np.float32).reshape(-1)
        break
    raise FixError(
        f"the integer bias '{tensor}' is not onnxruntime's Reshape(Cast(Floor(Div(bias, scale)))) of a constant bias"
    )


@register(
    "dynamic_to_float",
    safety=Safety.APPROXIMATE,
    summary="onnxruntime's dynamic quantization (DynamicQuantizeLinear -> MatMulInteger/ConvInteger -> Cast -> Mul "
    "by the scales) becomes the float MatMul/Conv with the dequantized constant weights.",
    params={"node": "node key (str), or a list of them: a MatMulInteger or ConvInteger"},
    batch="node",
)
def dynamic_to_float(model: ModelProto, node) -> ModelProto:
    edit = _Edit(model)
    facts = edit.facts
    at = edit.index

    def work(key: str) -> None:
        ((i, n),) = _nodes(edit, [key])
        if n.op_type not in ("MatMulInteger", "ConvInteger"):
            raise FixError(f"{_name(n)} is not a MatMulInteger or ConvInteger")
        dql = facts.producer_of(n.input[0])
        if dql is None or dql.op_type != "DynamicQuantizeLinear":
            raise FixError(f"{_name(n)}: its input '{n.input[0]}' is not made by DynamicQuantizeLinear")
        zp_in = n.input[2] if len(n.input) > 2 else ""
        if zp_in != dql.output[2]:
            raise FixError(
                f"{_name(n)} reads {('zero point ' + repr(zp_in)) if zp_in else 'no zero point'}, not "
                f"{_name(dql)}'s '{dql.output[2]}'"
            )
        w = _value(facts, n.input[1])
        if w is None:
            raise FixError(f"{_name(n)}: its weights '{n.input[1]}' are computed at run time, not constants")
        wz_name = n.input[3] if len(n.input) > 3 else ""
        wz = _value(facts, wz_name) if wz_name else np.zeros([], np.int64)
        if wz is None:
            raise FixError(f"{_name(n)}: the weights' zero point '{wz_name}' is computed at run time")
        y, bias, chain = n.output[0], None, [n]
        nxt = _single_reader(edit, y, ("Cast", "Add"), "the integer result")
        if nxt.op_type == "Add":
            if n.op_type != "ConvInteger":
                raise FixError(f"{_name(n)}: an integer Add after MatMulInteger is not onnxruntime's pattern")
            other = nxt.input[1] if nxt.input[0] == y else nxt.input[0]
            bias = _integer_bias(facts, other)
            chain.append(nxt)
            nxt = _single_reader(edit, nxt.output[0], ("Cast",), "the biased integer result")
        if _attr(nxt, "to") != TensorProto.FLOAT:
            raise FixError(f"{_name(nxt)} casts the integer result to {_attr(nxt, 'to')}, not FLOAT")
        chain.append(nxt)
        mul = _single_reader(edit, nxt.output[0], ("Mul",), "the scaling")
        chain.append(mul)
        scales = mul.input[1] if mul.input[0] == nxt.output[0] else mul.input[0]
        sp = facts.producer_of(scales)
        if sp is None or sp.op_type != "Mul" or dql.output[1] not in sp.input:
            raise FixError(f"{_name(mul)} does not scale by {_name(dql)}'s scale times the weights' scale")
        ws = _value(facts, sp.input[1] if sp.input[0] == dql.output[1] else sp.input[0])
        if ws is None:
            raise FixError(f"{_name(sp)}: the weights' scale is computed at run time")
        if n.op_type == "ConvInteger":
            per = [-1] + [1] * (w.ndim - 1)
        else:
            per = [-1]
        z = wz.astype(np.int64).reshape(per if wz.size > 1 else [])
        s = ws.astype(np.float32).reshape(per if ws.size > 1 else [])
        weights = (w.astype(np.int64) - z).astype(np.float32) * s
        base = (n.name or n.op_type).removesuffix("_quant")
        w_name = edit.init(f"{n.input[1]}_float", weights.astype(np.float32))
        x = dql.input[0]
        if n.op_type == "MatMulInteger":
            new = edit.node("MatMul", [x, w_name], [mul.output[0]], f"{base}/MatMul")
        else:
            ins = [x, w_name] + ([edit.init(f"{base}/bias_float", bias)] if bias is not None else [])
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            new = edit.node("Conv", ins, [mul.output[0]], f"{base}/Conv", **attrs)
        for m in chain:
            edit.drop.add(at(m))
            edit.orphans.update(x for x in m.input if x)
        edit.after.setdefault(at(mul), []).append(new)

    _batch(_keys(node), work)
    return edit.finish()


# -- 4-bit constants with an odd count ------------------------------------------------------------------------


def _four_bit_range(dtype: int) -> tuple[int, int]:
    return (-8, 7) if dtype == TensorProto.INT4 else (0, 15)


@register(
    "pad_four_bit",
    safety=Safety.EXACT,
    summary="A DequantizeLinear of a 4-bit constant with an odd number of elements: the constant padded to an even "
    "count, the result sliced back; a 4-bit zero point folded into the values (or dropped when 0).",
    params={"node": "node key (str), or a list of them: a DequantizeLinear reading a 4-bit initializer"},
    batch="node",
)
def pad_four_bit(model: ModelProto, node) -> ModelProto:
    edit = _Edit(model)
    facts = edit.facts

    def work(key: str) -> None:
        i, dq = _dequantize_linear(edit, key)
        x_name = dq.input[0]
        x_t = edit.facts.initializers.get(x_name)
        if x_t is None or x_t.data_type not in FOUR_BIT:
            raise FixError(f"{_name(dq)}: its input '{x_name}' is not a 4-bit initializer")
        x = numpy_helper.to_array(x_t)
        scale = _value(facts, dq.input[1])
        if scale is None:
            raise FixError(f"{_name(dq)}: its scale '{dq.input[1]}' is computed at run time")
        block = _attr(dq, "block_size", 0)
        axis = _attr(dq, "axis", 1) % max(x.ndim, 1) if scale.size > 1 or block else None
        zp_name = dq.input[2] if len(dq.input) > 2 else ""
        changed = False
        dtype = x_t.data_type
        if zp_name:
            zp = _value(facts, zp_name)
            if zp is None:
                raise FixError(f"{_name(dq)}: its zero point '{zp_name}' is computed at run time")
            if np.any(zp.astype(np.float32)):
                if block or dtype == TensorProto.FLOAT4E2M1:
                    raise FixError(f"{_name(dq)}: a non-zero blocked or FLOAT4 zero point cannot be folded")
                z = zp.astype(np.int64)
                if z.size > 1:
                    shape = [1] * x.ndim
                    shape[axis] = -1
                    z = z.reshape(shape)
                centered = x.astype(np.int64) - z.reshape(z.shape if z.size > 1 else [])
                lo, hi = _four_bit_range(TensorProto.INT4)
                if centered.min() < lo or centered.max() > hi:
                    raise FixError(
                        f"{_name(dq)}: '{x_name}' minus its zero point spans [{centered.min()}, {centered.max()}], "
                        "outside INT4 [-8, 7], so the zero point cannot be folded into the values"
                    )
                x = centered.astype(helper.tensor_dtype_to_np_dtype(TensorProto.INT4))
                dtype = TensorProto.INT4
            edit.orphans.add(zp_name)
            del dq.input[2:]
            changed = True
        odd = x.size % 2 == 1
        x_changed = dtype != x_t.data_type or not np.array_equal(
            x.astype(np.float32), numpy_helper.to_array(x_t).astype(np.float32)
        )
        if not odd and not changed:
            raise FixError(f"{_name(dq)}: '{x_name}' holds {x.size} values (even) and no zero point to fold")
        np4 = helper.tensor_dtype_to_np_dtype(dtype)
        base = dq.name or "dq"
        if not odd:
            if x_changed:
                edit.orphans.add(x_name)
                dq.input[0] = edit.init(f"{x_name}_int4", x.astype(np4))
            return
        out = dq.output[0]
        if block and x.ndim < 2:
            raise FixError(f"{_name(dq)}: blocked quantization of a rank-{x.ndim} tensor is not padded here")
        ops: list[NodeProto] = []
        if x.ndim <= 1:
            n = x.size
            padded = np.concatenate([x.reshape(-1), np.zeros(1, x.dtype)]).reshape(n + 1, 1).astype(np4)
            if axis is not None:
                new_scale = np.concatenate([scale.reshape(-1), np.ones(1, scale.dtype)])
                dq.input[1] = edit.init(f"{dq.input[1]}_padded", new_scale)
                edit.orphans.add(dq.input[1])
                _set_attr(dq, "axis", 0)
            flat = edit.fresh(f"{out}_padded_flat")
            sliced = out if x.ndim == 1 else edit.fresh(f"{out}_sliced")
            ops.append(
                edit.node(
                    "Reshape",
                    ["", edit.init(f"{base}/flat", np.array([n + 1], np.int64))],
                    [flat],
                    f"{base}/Reshape",
                )
            )
            ops.append(
                edit.node(
                    "Slice",
                    [
                        flat,
                        edit.init(f"{base}/start", np.array([0], np.int64)),
                        edit.init(f"{base}/end", np.array([n], np.int64)),
                        edit.init(f"{base}/axes", np.array([0], np.int64)),
                    ],
                    [sliced],
                    f"{base}/Slice",
                )
            )
            if x.ndim == 0:
                ops.append(
                    edit.node(
                        "Reshape",
                        [sliced, edit.init(f"{base}/scalar", np.zeros([0], np.int64))],
                        [out],
                        f"{base}/Scalar",
                    )
                )
        else:
            p = next(k for k in range(x.ndim - 1, -1, -1) if k != axis)
            pad = [(0, 0)] * x.ndim
            pad[p] = (0, 1)
            padded = np.pad(
                x.astype(np.float32) if dtype == TensorProto.FLOAT4E2M1 else x.astype(np.int64), pad
            ).astype(np4)
            if block:
                new_scale = np.pad(scale, pad, mode="edge")
                edit.orphans.add(dq.input[1])
                dq.input[1] = edit.init(f"{dq.input[1]}_padded", new_scale)
            ops.append(
                edit.node(
                    "Slice",
                    [
                        "",
                        edit.init(f"{base}/start", np.array([0], np.int64)),
                        edit.init(f"{base}/end", np.array([x.shape[p]], np.int64)),
                        edit.init(f"{base}/axes", np.array([p], np.int64)),
                    ],
                    [out],
                    f"{base}/Slice",
                )
            )
        edit.orphans.add(x_name)
        dq.input[0] = edit.init(f"{x_name}_padded", padded)
        padded_out = edit.fresh(f"{out}_padded")
        dq.output[0] = padded_out
        ops[0].input[0] = padded_out
        edit.after.setdefault(i, []).extend(ops)

    _batch(_keys(node), work)
    return edit.finish()


def _set_attr(node: NodeProto, name: str, value) -> None:
    for k, a in enumerate(node.attribute):
        if a.name == name:
            del node.attribute[k]
            break
    node.attribute.append(helper.make_attribute(name, value))
