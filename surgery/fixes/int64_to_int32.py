"""INT64 constants made INT32, for parsers without INT64 (TensorRT < 9 casts INT64 weights down and clamps).

Three steps, in this order:

1. Slice starts/ends outside the INT32 range (INT64_MAX means "to the end", -INT64_MAX "before the start") are
   clamped to the sliced dimension (to the INT32 range where the dimension is unknown): the same elements are
   selected, so this is exact.
2. Any other INT64 constant value outside the INT32 range carries data: the fix refuses, naming the tensor, the
   offending values and the nodes that read it (no exact INT32 form exists).
3. Unless `only_slice_bounds`, every INT64 constant (initializer or Constant node) that some reader accepts as
   INT32 (by the op's ONNX schema: Gather indices, Add, Concat, Range, Where...) becomes INT32, and so do the
   intermediates computed from it, as far as the schemas allow. At the boundaries Casts are inserted: an INT64
   tensor (a Shape output, a graph input) meeting an INT32 one in the same type variable is cast down; an INT32
   tensor read where the schema needs INT64 (Reshape's shape, Unsqueeze's axes, TopK's K, a custom op, a
   subgraph) is cast back up. Graph outputs keep their name and type (the INT32 value is cast back).
   A constant that only ever feeds INT64-only inputs is left alone.

Exactness: the constants' values fit (step 2 checks), so they are unchanged. Intermediates now computed in INT32
could overflow where INT64 would not (a product of dims beyond 2**31): shape arithmetic of tensors with fewer than
2**31 elements cannot.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper, numpy_helper

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import NameIndex, copy_model, fresh_name
from surgery.graph import GraphFacts, all_inputs, beyond_int32, constant_tensor, opset_of, outer_reads

I32 = np.iinfo(np.int32)
INT32_T = "tensor(int32)"
# ops that keep shape values shape-sized (their first input is shape-derived)
_SHAPE_ARITHMETIC = frozenset(
    {
        "Gather",
        "Unsqueeze",
        "Squeeze",
        "Concat",
        "Slice",
        "Reshape",
        "Identity",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Max",
        "Min",
        "ReduceProd",
        "ReduceMax",
        "ReduceMin",
        "Neg",
        "Abs",
    }
)


def _constants(graph: onnx.GraphProto) -> dict[str, TensorProto]:
    """INT64 constant tensors by name: initializers (not overridable inputs) and Constant nodes' values."""
    inputs = {vi.name for vi in graph.input}
    found = {
        t.name: t
        for t in graph.initializer
        if t.data_type == TensorProto.INT64
        and t.name not in inputs
        and t.data_location != TensorProto.EXTERNAL
    }
    for n in graph.node:
        t = constant_tensor(n) if n.op_type == "Constant" and not n.domain and n.output else None
        if t is not None and t.data_type == TensorProto.INT64:
            found[n.output[0]] = t
    return found


@register(
    "int64_to_int32",
    safety=Safety.EXACT,
    summary="INT64 constants (and what is computed from them) become INT32 where the values fit; Slice bounds "
    "beyond INT32 are clamped to the dimension; refuses where a value does not fit.",
    params={
        "only_slice_bounds": "only clamp out-of-range Slice starts/ends; no casting, no refusal for other "
        "tensors (bool, default false)",
    },
)
def int64_to_int32(model: ModelProto, only_slice_bounds: bool = False) -> ModelProto:
    out = copy_model(model)
    graph = out.graph
    facts = GraphFacts.of(model)
    consts = _constants(graph)
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for n in graph.node:
        for k, x in enumerate(n.input):
            readers.setdefault(x, []).append((n, k))
    clamped, refused = 0, []
    for name, t in consts.items():
        bad = beyond_int32(t)
        if not bad.size:
            continue
        values = numpy_helper.to_array(t)
        uses = readers.get(name, [])
        if uses and all(n.op_type == "Slice" and k in (1, 2) for n, k in uses):
            t.CopyFrom(numpy_helper.from_array(_clamp_slice_bound(values, uses, consts, facts), t.name))
            clamped += 1
        elif not only_slice_bounds:
            readers_txt = ", ".join(f"{n.op_type} '{n.name}'" for n, _ in uses) or "no node"
            refused.append(f"'{name}' = {bad[:4].tolist()} (read by {readers_txt})")
    if refused:
        raise FixError(
            "INT64 values outside the INT32 range carry data, so casting them down would change results: "
            + "; ".join(refused)
            + ". Note: keep these in INT64 (TensorRT >= 9 supports it), or fix the export"
        )
    if only_slice_bounds:
        if not clamped:
            raise FixError("no Slice start/end outside the INT32 range to clamp")
        return out
    cast = _Caster(out, facts).run(consts)
    if not clamped and not cast:
        raise FixError(
            "no INT64 constant to bring to INT32: none is read where the op accepts INT32, and no Slice bound "
            "is out of range"
        )
    return out


def _clamp_slice_bound(values: np.ndarray, uses, consts, facts: GraphFacts) -> np.ndarray:
    """Clamp to [-dim-1, dim] per sliced axis (exact for either step sign), or to INT32 where dims are unknown."""
    per_use = []
    for n, _ in uses:
        axes = _slice_axes(n, consts, values.size)
        shape = facts.info(n.input[0]).shape
        hi = []
        for ax in axes:
            dim = shape[ax] if shape is not None and -len(shape) <= ax < len(shape) else None
            hi.append(dim if isinstance(dim, int) else int(I32.max) - 1)
        per_use.append(hi)
    # several readers slicing different dims: the largest bound is exact for all of them
    hi = np.max(np.array(per_use, dtype=np.int64), axis=0).reshape(values.shape)
    return np.clip(values, -hi - 1, hi).astype(np.int64)


def _slice_axes(node, consts, count: int) -> list[int]:
    if len(node.input) > 3 and node.input[3] in consts:
        return [int(a) for a in numpy_helper.to_array(consts[node.input[3]]).reshape(-1)]
    return list(range(count))


class _Caster:
    """Retype INT64 constants and what flows from them to INT32, by each op's schema type constraints."""

    def __init__(self, model: ModelProto, facts: GraphFacts):
        self.model, self.graph, self.facts = model, model.graph, facts
        self.used = NameIndex(model)  # one scan of the graph for every Cast this call adds
        self.opset = opset_of(model) or 0
        self.pinned = {o.name for o in self.graph.output}  # names whose INT64 type is part of the interface
        for n in self.graph.node:
            for a in n.attribute:
                for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                    self.pinned.update(outer_reads(sub))
        self.name32: dict[str, str] = {}  # tensor now INT32 -> the name holding the INT32 value
        self.up: dict[str, str] = {}  # INT32 tensor -> name of its INT64 copy
        self.down: dict[str, str] = {}  # INT64 tensor -> name of its INT32 copy
        self.new_nodes: list[onnx.NodeProto] = []
        self.consts: dict[str, TensorProto] = {}
        self.shape_derived: set[str] = set()

    # -- schema helpers ------------------------------------------------------------------------------------------
    def _schema(self, node):
        if node.domain not in ("", "ai.onnx") or any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute
        ):
            return None
        try:
            return onnx.defs.get_schema(node.op_type, self.opset, "")
        except Exception:
            return None

    @staticmethod
    def _formal(params, k: int):
        if k < len(params):
            return params[k]
        if params and params[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
            return params[-1]
        return None

    @staticmethod
    def _allows_int32(schema, type_str: str) -> bool:
        for tc in schema.type_constraints:
            if tc.type_param_str == type_str:
                return INT32_T in tc.allowed_type_strs
        return type_str == INT32_T

    def _narrowable(self, t: str) -> bool:
        """An INT64 tensor whose values surely fit INT32: a constant that fits, or a Shape/Size output. Run-time
        data (a graph input, an ArgMax) is never narrowed: its range is unknown."""
        return t in self.consts or t in self.shape_derived

    def _shape_derived(self) -> set[str]:
        """Tensors computed from Shape/Size outputs and constants by index and dim arithmetic."""
        found: set[str] = set()
        for i in self.facts.order:
            n = self.graph.node[i]
            if n.domain not in ("", "ai.onnx"):
                continue
            if n.op_type in ("Shape", "Size"):
                found.update(n.output)
            elif n.op_type in _SHAPE_ARITHMETIC and n.input and n.input[0]:
                ins = [x for x in n.input if x]
                if ins[0] in found and all(
                    x in found or x in self.consts or x in self.facts.constant for x in ins
                ):
                    found.add(n.output[0])
        return found

    def _accepts_int32(self, node, k: int) -> bool:
        """Does input k take INT32, with every other input of its type variable narrowable too?"""
        schema = self._schema(node)
        if schema is None:
            return False
        formal = self._formal(schema.inputs, k)
        if formal is None or not self._allows_int32(schema, formal.type_str):
            return False
        same = [
            x
            for j, x in enumerate(node.input)
            if x
            and j != k
            and (f := self._formal(schema.inputs, j)) is not None
            and f.type_str == formal.type_str
        ]
        return all(self._narrowable(x) for x in same)

    # -- casts ---------------------------------------------------------------------------------------------------
    def _cast(self, src: str, name: str, to: int) -> str:
        out = fresh_name(self.model, name, self.used)
        node = helper.make_node(
            "Cast", [src], [out], name=fresh_name(self.model, name + "/Cast", self.used), to=to
        )
        self.new_nodes.append(node)
        self.graph.node.append(node)  # the final order is rebuilt below
        return out

    def _as_int64(self, t: str) -> str:
        if t not in self.name32:
            return t
        if t in self.pinned:  # its own name still holds the INT64 value
            return t
        if t not in self.up:
            self.up[t] = self._cast(self.name32[t], f"{t}/int64", TensorProto.INT64)
        return self.up[t]

    def _as_int32(self, t: str) -> str:
        if t in self.name32:
            return self.name32[t]
        if t not in self.down:
            self.down[t] = self._cast(t, f"{t}/int32", TensorProto.INT32)
        return self.down[t]

    # -- the pass ------------------------------------------------------------------------------------------------
    def run(self, consts: dict[str, TensorProto]) -> int:
        graph = self.graph
        self.consts = consts
        self.shape_derived = self._shape_derived()
        order = [graph.node[i] for i in self.facts.order]
        seeds = 0
        for name, t in consts.items():
            if name in self.pinned or not any(self._accepts_int32(n, k) for n, k in self._readers(name)):
                continue
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.int32), t.name))
            self.name32[name] = name
            seeds += 1
        if not seeds:
            return 0
        placed: list[onnx.NodeProto] = []
        for node in order:
            start = len(self.new_nodes)
            self._retype(node)
            placed.extend(self.new_nodes[start:][: self._pre])  # casts feeding this node come before it
            placed.append(node)
            placed.extend(self.new_nodes[start:][self._pre :])
        copies = []
        for n in placed:  # copy before clearing: the list holds references into graph.node
            c = onnx.NodeProto()
            c.CopyFrom(n)
            copies.append(c)
        del graph.node[:]
        graph.node.extend(copies)
        changed = set(self.name32.values())
        keep = [vi for vi in graph.value_info if vi.name not in changed]
        del graph.value_info[:]
        graph.value_info.extend(keep)
        return seeds

    def _readers(self, name: str):
        nodes = [self.graph.node[i] for i in dict.fromkeys(self.facts.consumers.get(name, []))]
        return [(n, k) for n in nodes for k, x in enumerate(n.input) if x == name]

    def _retype(self, node) -> None:
        self._pre = 0
        if not any(x in self.name32 for x in all_inputs(node)):
            return
        schema = self._schema(node)
        if schema is None:  # custom op, subgraph, unknown schema: hand it INT64 everywhere
            before = len(self.new_nodes)
            for k, x in enumerate(node.input):
                if x in self.name32:
                    node.input[k] = self._as_int64(x)
            self._pre = len(self.new_nodes) - before
            return
        groups: dict[str, list[int]] = {}
        for k, x in enumerate(node.input):
            formal = self._formal(schema.inputs, k)
            if x and formal is not None:
                groups.setdefault(formal.type_str, []).append(k)
        go32 = {
            tv
            for tv, ks in groups.items()
            if self._allows_int32(schema, tv)
            and any(node.input[k] in self.name32 for k in ks)
            and all(node.input[k] in self.name32 or self._narrowable(node.input[k]) for k in ks)
        }
        before = len(self.new_nodes)
        for tv, ks in groups.items():
            for k in ks:
                x = node.input[k]
                node.input[k] = self._as_int32(x) if tv in go32 else self._as_int64(x)
        self._pre = len(self.new_nodes) - before
        for k, y in enumerate(node.output):
            formal = self._formal(schema.outputs, k)
            if not y or formal is None or formal.type_str not in go32:
                continue
            if y in self.pinned:  # keep the INT64 name: the node writes y/int32, a Cast restores y
                y32 = fresh_name(self.model, f"{y}/int32", self.used)
                node.output[k] = y32
                self.name32[y] = y32
                cast = helper.make_node(
                    "Cast",
                    [y32],
                    [y],
                    name=fresh_name(self.model, f"{y}/Cast", self.used),
                    to=TensorProto.INT64,
                )
                self.new_nodes.append(cast)
                self.graph.node.append(cast)
            else:
                self.name32[y] = y
