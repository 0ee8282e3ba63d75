"""Cut a set of nodes out of a model as a model of its own: what `split` writes per part and what `reduce` tries.

The nodes keep their names, attributes and subgraphs. Every non-constant tensor they read from outside becomes a
typed graph input; the tensors asked for become graph outputs; only the initializers they (and their subgraphs)
read are kept, external-data references included (`base_dir` resolves them). A constant they read from outside
(a tensor the original computes from constants only) comes in one of two ways: its constant cone is copied in
(the nodes that compute it; a Constant node is the simplest cone), or its value is computed with onnxruntime
and stored as an initializer (`fold`). Nothing here changes the original model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx
from onnx import ModelProto, TensorProto, helper

from surgery.graph import GraphFacts, all_inputs, dim_of, dtype_name


class CutError(Exception):
    """A tensor at the cut cannot be typed, or a constant cannot be computed: the message names it."""

    def __init__(self, message: str, tensor: str = "", node: str = ""):
        super().__init__(message)
        self.tensor, self.node = tensor, node


@dataclass
class Cut:
    model: ModelProto
    nodes: list[int]  # original indices of the part's own nodes, in the cut model's order after `cone`
    cone: list[int] = field(default_factory=list)  # original indices of constant nodes copied in (first)
    inputs: list[str] = field(default_factory=list)  # non-constant tensors read from outside
    folded: list[str] = field(default_factory=list)  # constants stored as initializers by value

    def original_index(self, position: int) -> int:
        """The original index of the cut model's node at `position`."""
        return [*self.cone, *self.nodes][position]


def describe_tensor(facts: GraphFacts, tensor: str) -> str:
    """'tensor 'x' (output of Op 'node')' or '(graph input)'."""
    p = facts.producer.get(tensor)
    if p is None:
        return f"tensor '{tensor}' (a graph input)"
    return f"tensor '{tensor}' (output of {facts.model.graph.node[p].op_type} '{facts.keys[p]}')"


def typed(
    facts: GraphFacts, tensor: str, types: dict[str, onnx.TypeProto] | None = None
) -> onnx.ValueInfoProto:
    """A ValueInfo for `tensor`: the original's declaration for a graph input or output, else inference, else a
    type learned by running the model (`types`). A tensor none of these types raises CutError."""
    g = facts.model.graph
    for vi in [*g.input, *g.output]:
        if vi.name == tensor and vi.type.WhichOneof("value") is not None:
            if vi.type.HasField("tensor_type") and not vi.type.tensor_type.elem_type:
                break
            return vi
    info = facts.info(tensor)
    if info.dtype:
        return facts.value_info(tensor)
    if types and tensor in types:
        vi = onnx.ValueInfoProto(name=tensor)
        vi.type.CopyFrom(types[tensor])
        return vi
    raise CutError(f"{describe_tensor(facts, tensor)} has no known dtype", tensor)


def cut(
    model: ModelProto,
    facts: GraphFacts,
    nodes: list[int],
    outputs: list[str],
    *,
    fold: set[str] | frozenset[str] = frozenset(),
    fold_all: bool = False,
    values: dict | None = None,
    types: dict[str, onnx.TypeProto] | None = None,
    base_dir=None,
    name: str = "",
    loose_outputs: bool = False,
) -> Cut:
    """The model made of `nodes` (original indices, any order: they are put in topological order) computing
    `outputs`. Constants read from outside: copied with their cone, or folded to an initializer when the tensor
    is in `fold` (or `fold_all`); `values` caches folded values between calls (tensor -> numpy array). With
    `loose_outputs` an output nothing types is declared without a type instead of raising CutError."""
    graph = model.graph
    pos = facts.position
    own = sorted(set(nodes), key=pos.__getitem__)
    produced = {o for i in own for o in graph.node[i].output if o}
    reads: list[str] = []
    for i in own:
        reads.extend(x for x in all_inputs(graph.node[i]) if x and x not in produced)
    reads.extend(o for o in outputs if o not in produced)  # an output passed straight through, or a constant
    reads = list(dict.fromkeys(reads))

    inputs, const_reads = [], []
    inits: dict[str, TensorProto] = {}
    for x in reads:
        if x in facts.initializers and not facts.is_constant(x):
            inits[x] = facts.initializers[x]  # an input with a default (IR >= 4): the part keeps the default
        else:
            (const_reads if facts.is_constant(x) else inputs).append(x)
    cone: set[int] = set()
    folded: list[str] = []
    for x in const_reads:
        if x in facts.initializers:
            inits[x] = facts.initializers[x]
        elif fold_all or x in fold:
            folded.append(x)
        else:
            cone.update(facts.constant_producers(x))
    cone_nodes = sorted(cone - set(own), key=pos.__getitem__)
    for i in cone_nodes:
        for x in all_inputs(graph.node[i]):
            if x in facts.initializers:
                inits[x] = facts.initializers[x]
    for i in own:
        for x in all_inputs(graph.node[i]):
            if x in facts.initializers and facts.is_constant(x):
                inits[x] = facts.initializers[x]
    if folded:
        inits.update(_fold(model, facts, folded, values, base_dir))

    vi_in = [typed(facts, x, types) for x in inputs]
    vi_out = []
    for o in outputs:
        try:
            vi_out.append(typed(facts, o, types))
        except CutError:
            if not loose_outputs:
                raise
            vi_out.append(helper.make_empty_tensor_value_info(o))
    g = helper.make_graph(
        [graph.node[i] for i in [*cone_nodes, *own]],
        name or graph.name,
        vi_in,
        vi_out,
        list(inits.values()),
    )
    out = helper.make_model(g, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    used = {(n.domain, n.op_type) for n in g.node}
    out.functions.extend(f for f in model.functions if (f.domain, f.name) in used or _nested_use(g, f))
    for attr in ("producer_name", "producer_version", "domain", "model_version"):
        setattr(out, attr, getattr(model, attr))
    return Cut(out, own, cone_nodes, inputs, folded)


def _nested_use(graph: onnx.GraphProto, f: onnx.FunctionProto) -> bool:
    from surgery.graph import iter_subgraphs

    return any(
        (n.domain, n.op_type) == (f.domain, f.name) for s in iter_subgraphs(graph) for n in s.graph.node
    )


def _fold(model, facts, tensors: list[str], values: dict | None, base_dir) -> dict[str, TensorProto]:
    """Initializers holding the values of constant `tensors`, computed with onnxruntime (cached in `values`)."""
    from onnx import numpy_helper

    from surgery.fixes import FixError
    from surgery.fixes.fold_constants import _evaluate

    cache = values if values is not None else {}
    missing = [t for t in tensors if t not in cache]
    if missing:
        try:
            cache.update(_evaluate(model, facts, missing, {}, None if base_dir is None else str(base_dir)))
        except FixError as exc:
            raise CutError(
                f"could not compute the constant {describe_tensor(facts, missing[0])}: {exc}"
            ) from None
    out = {}
    for t in tensors:
        value = cache[t]
        out[t] = numpy_helper.from_array(value, t)
    return out


def learn_types(
    model: ModelProto, tensors: list[str], runs: list[tuple[int, dict]], base_dir=None
) -> dict[str, onnx.TypeProto]:
    """Types of intermediate `tensors` that inference left untyped, learned by running `model` with onnxruntime
    with them exposed as outputs, once per (size of every symbolic input dim, feeds) in `runs`. A dim that keeps
    its size across runs is static; one that follows the symbolic size takes the name of the graph inputs'
    symbolic dim when they have only one; any other is named after the tensor. {} where the model cannot run."""
    import numpy as np

    from surgery.graph import tensor_info_from_type
    from surgery.ort import make_session
    from surgery.verify import _with_outputs

    if not tensors or not runs:
        return {}
    symbolic = {
        d
        for vi in model.graph.input
        for d in (tensor_info_from_type(vi.name, vi.type).shape or ())
        if isinstance(d, str)
    }
    seen: list[tuple[int, dict]] = []
    names: list[str] = []
    try:
        sess = make_session(_with_outputs(model, tensors), base_dir)
        names = [o.name for o in sess.get_outputs() if o.name in set(tensors)]
        wanted = {i.name for i in sess.get_inputs()}
        for size, feeds in runs:
            got = sess.run(names, {k: v for k, v in feeds.items() if k in wanted})
            seen.append((size, dict(zip(names, got))))
    except Exception:  # a run that fails keeps what the runs before it learned
        if not seen:
            return {}
    out = {}
    for name in names:
        values = [(size, got[name]) for size, got in seen]
        if not all(isinstance(v, np.ndarray) for _, v in values) or len({v.ndim for _, v in values}) != 1:
            continue
        value = values[0][1]
        try:
            elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        except (KeyError, TypeError, ValueError):
            elem = TensorProto.STRING if value.dtype.kind in "OUS" else 0
        if not elem:
            continue
        dims: list = []
        for k in range(value.ndim):
            if len(values) > 1 and len({v.shape[k] for _, v in values}) == 1:
                dims.append(value.shape[k])
            elif len(values) > 1 and len(symbolic) == 1 and all(v.shape[k] == size for size, v in values):
                dims.append(next(iter(symbolic)))
            else:
                dims.append(f"{name}_d{k}")
        out[name] = helper.make_tensor_type_proto(elem, dims)
    return out


def type_text(vi: onnx.ValueInfoProto) -> tuple[str, list]:
    """(dtype name, shape as a list of ints / names / None) of a ValueInfo, for plans and reports."""
    tp = vi.type
    if not tp.HasField("tensor_type"):
        return tp.WhichOneof("value") or "?", []
    tt = tp.tensor_type
    shape = None
    if tt.HasField("shape"):
        shape = [dim_of(d) or None for d in tt.shape.dim]
    return dtype_name(tt.elem_type) if tt.elem_type else "?", shape
