"""Graph facts every other module stands on: node keys, producers/consumers, topological order, inferred
dtypes and shapes (symbolic dims kept), which tensors are constant, subgraphs and local functions.

`GraphFacts` is built once per model version and never mutates the model.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache, cached_property

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, TensorProto, numpy_helper

from surgery.model import decoded, gc_paused
from surgery.text import first_line

# Ops whose output is never constant even when every input is (random, or reads state).
NONDETERMINISTIC_OPS = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)
DTYPE_NAMES = {v: k for k, v in TensorProto.DataType.items()}


def dtype_name(elem_type: int) -> str:
    return DTYPE_NAMES.get(elem_type, str(elem_type))


Dim = int | str | None  # int: fixed, str: symbolic name, None: unknown


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: int  # onnx.TensorProto.DataType, 0 = unknown
    shape: tuple[Dim, ...] | None  # None = rank unknown

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype) if self.dtype else "?"

    @property
    def is_dynamic(self) -> bool:
        return self.shape is None or any(not isinstance(d, int) for d in self.shape)

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    def shape_str(self) -> str:
        if self.shape is None:
            return "?"
        return "[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"

    def numel(self) -> int | None:
        if self.shape is None or any(not isinstance(d, int) for d in self.shape):
            return None
        n = 1
        for d in self.shape:
            n *= d
        return n


def tensor_info_from_type(name: str, tp: onnx.TypeProto) -> TensorInfo:
    if not tp.HasField("tensor_type"):
        return TensorInfo(name, 0, None)
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return TensorInfo(name, tt.elem_type, None)
    return TensorInfo(name, tt.elem_type, tuple(dim_of(d) for d in tt.shape.dim))


def dim_of(d: onnx.TensorShapeProto.Dimension) -> Dim:
    """A declared dim: its size, its name (dim_param), or None where it is dynamic without a name: unset, or a
    negative size (PaddlePaddle's exports write -1 for a dynamic batch, as TensorRT and numpy do). The one place
    a model's dims are read."""
    which = d.WhichOneof("value")  # dim_value and dim_param are a oneof: one call tells which (100k tensors)
    if which == "dim_value":
        return d.dim_value if d.dim_value >= 0 else None
    return d.dim_param if which == "dim_param" else None


def is_static_dim(d: onnx.TensorShapeProto.Dimension) -> bool:
    return d.WhichOneof("value") == "dim_value" and d.dim_value >= 0


def node_keys(nodes) -> list[str]:
    """A key per node: its name when non-empty and unique, else `Op#index`. Stable for a given model version.
    Always text: a name that is not UTF-8 is `decoded` (\\xNN escapes), as every output shows it."""
    names = _texts([n.name for n in nodes])
    counts = Counter(names)
    return [
        nm if nm and counts[nm] == 1 else f"{n.op_type}#{i}" for i, (nm, n) in enumerate(zip(names, nodes))
    ]


def _texts(names: list) -> list[str]:
    """`names` as text: protobuf gives a string field that is not UTF-8 as bytes (ONNX is proto2)."""
    if any(type(x) is bytes for x in names):
        return [decoded(x) for x in names]
    return names


def node_signature(node: NodeProto) -> tuple:
    """Op identity + attributes, without names: used to cache per-node verdicts."""
    attrs = tuple(sorted((a.name, a.SerializeToString(deterministic=True)) for a in node.attribute))
    return (node.domain or "", node.op_type, attrs)


@dataclass
class SubgraphRef:
    path: str  # "node_key/attr_name" chain from the main graph
    graph: onnx.GraphProto
    owner: str  # key of the node holding it


def iter_subgraphs(graph: onnx.GraphProto, prefix: str = "") -> Iterator[SubgraphRef]:
    keys = node_keys(graph.node)
    for key, node in zip(keys, graph.node):
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for i, sub in enumerate(subs):
                suffix = attr.name if len(subs) == 1 else f"{attr.name}[{i}]"
                path = f"{prefix}{key}/{suffix}"
                yield SubgraphRef(path, sub, key)
                yield from iter_subgraphs(sub, path + "/")


def count_nodes(model: ModelProto, *, with_subgraphs: bool = True, with_functions: bool = False) -> int:
    n = len(model.graph.node)
    if with_subgraphs:
        n += sum(len(s.graph.node) for s in iter_subgraphs(model.graph))
    if with_functions:
        n += sum(len(f.node) for f in model.functions)
    return n


def opset_of(model: ModelProto, domain: str = "") -> int | None:
    for o in model.opset_import:
        if (o.domain or "") in ((domain,) if domain else ("", "ai.onnx")):
            return o.version
    return None


class TensorTable(Mapping):
    """tensor name -> TensorInfo, each converted from its ValueInfo when first asked for: a 100k-node model has
    100k inferred value_infos, and most callers read a few (converting them all up front took ~0.5 s). Value
    infos (inputs, value_info, outputs: the last one listed wins) come first, then initializers and Constant
    outputs that none of them types, in that order."""

    def __init__(self, graph: onnx.GraphProto, weights: dict[str, TensorProto]):
        self._types: dict[str, onnx.TypeProto] = {}
        for vi in (*graph.input, *graph.value_info, *graph.output):
            self._types[vi.name] = vi.type
        self._weights = weights  # initializers, then Constant nodes' values: typed by their dims
        self._done: dict[str, TensorInfo] = {}

    def retyped(self, graph: onnx.GraphProto) -> TensorTable:
        """The same table with the value infos of `graph` (the model after shape inference)."""
        return TensorTable(graph, self._weights)

    def __getitem__(self, name: str) -> TensorInfo:
        info = self._done.get(name)
        if info is None:
            tp = self._types.get(name)
            if tp is not None:
                info = tensor_info_from_type(name, tp)
            else:
                t = self._weights[name]  # KeyError: not a tensor we know
                info = TensorInfo(name, t.data_type, tuple(t.dims))
            self._done[name] = info
        return info

    def get(self, name: str, default: TensorInfo | None = None) -> TensorInfo | None:
        """Mapping.get without its try/except around __getitem__ (the predictor asks ~5 times a node)."""
        info = self._done.get(name)
        if info is not None:
            return info
        return self[name] if name in self._types or name in self._weights else default

    def dtype(self, name: str) -> int:
        """The tensor's element type (0: unknown), read without converting its shape."""
        info = self._done.get(name)
        if info is not None:
            return info.dtype
        tp = self._types.get(name)
        if tp is not None:
            return tp.tensor_type.elem_type if tp.HasField("tensor_type") else 0
        t = self._weights.get(name)
        return 0 if t is None else t.data_type

    def __contains__(self, name: object) -> bool:
        return name in self._types or name in self._weights

    def __iter__(self) -> Iterator[str]:
        yield from self._types
        yield from (t for t in self._weights if t not in self._types)

    def __len__(self) -> int:
        return len(self._types) + sum(t not in self._types for t in self._weights)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    __hash__ = None  # a mapping: compared by content


FACTS_CACHED = 4  # model versions whose facts are kept (the workspace's current one, the one before, ...)
_FACTS: OrderedDict[int, tuple[ModelProto, tuple, GraphFacts]] = OrderedDict()
_FACTS_LOCK = threading.Lock()
# other caches by model version (each holds its models: a ModelProto takes no weak reference), told by
# `forget_version` when a version is dropped; each has `forget(model)`
_VERSION_CACHES: weakref.WeakSet = weakref.WeakSet()


def version_cache(cache) -> None:
    """Register `cache` (an object with `forget(model)`) to be told when a model version is dropped."""
    _VERSION_CACHES.add(cache)


def forget_version(model: ModelProto) -> None:
    """`model` is a version nobody will ask about again (the workspace dropped it): its facts and every
    registered cache's entry go, so that the model's memory (its weights, when they are in the file) is freed."""
    GraphFacts.forget(model)
    for held in list(_VERSION_CACHES):
        held.forget(model)


def edit_stamp(model: ModelProto) -> tuple:
    """What an edit in place changes, read without serializing the model: the counts of its nodes,
    initializers, inputs, outputs, value infos, functions and opsets, and its last node's op type and outputs.
    Not `ByteSize()`: with upb it serializes the whole model (a model with 0.5 GiB of weights in the file: 1 s and
    a transient copy of the weights, on every lookup)."""
    g = model.graph
    last = g.node[-1] if len(g.node) else None
    return (
        len(g.node),
        len(g.initializer),
        len(g.input),
        len(g.output),
        len(g.value_info),
        len(model.functions),
        len(model.opset_import),
        None if last is None else (last.op_type, tuple(last.output)),
    )


@dataclass
class GraphFacts:
    """Facts about the main graph of one model version."""

    model: ModelProto
    keys: list[str]
    index: dict[str, int]  # key -> node index
    producer: dict[str, int]  # tensor -> node index
    consumers: dict[str, list[int]]  # tensor -> node indices
    initializers: dict[str, TensorProto]
    graph_inputs: list[str]  # real inputs (not initializers)
    graph_outputs: list[str]
    tensors: Mapping[
        str, TensorInfo
    ]  # inferred dtype/shape for every named tensor we could type (TensorTable)
    constant: set[str]  # tensors computable from constants only
    order: list[int]  # topological order of node indices
    shape_inference_error: str | None = None
    inferred: bool = False  # shape inference ran (its results, or its error, are in `tensors`)
    functions: dict[tuple[str, str], onnx.FunctionProto] = field(default_factory=dict)
    typed: onnx.GraphProto | None = (
        None  # the graph after shape inference, nodes and bodies included, if kept
    )
    # a body's facts (scope_facts): where it is ('If_0/then_branch'), the facts of the scope around it, and what
    # each name it reads from outside stands for there (a function's formal input -> the caller's tensor)
    path: str = ""
    parent: GraphFacts | None = None
    free: dict[str, str] = field(default_factory=dict)

    @cached_property
    def position(self) -> dict[int, int]:
        """Node index -> its place in the topological order (computed once per facts)."""
        return {i: p for p, i in enumerate(self.order)}

    @cached_property
    def scopes(self) -> list[GraphFacts]:
        """Every body's and local function's facts under this graph (iter_scopes), made once per facts: looking
        nodes up in bodies, rule by rule and node by node, walks this list instead of remaking every scope."""
        return list(iter_scopes(self))

    @cached_property
    def _beyond_int32(self) -> dict[str, np.ndarray]:
        return {}

    @cached_property
    def weights_beyond_int32_names(self) -> frozenset[str]:
        """The weights (initializers, Constant outputs) whose `weights_beyond_int32` is not empty, found once per
        facts: the predictor asks about every input of every node, and at 50k nodes asking input by input was a
        fifth of a check."""
        candidates = set(self.initializers)
        for node in self.model.graph.node:
            if node.op_type == "Constant":
                candidates.update(node.output)
        return frozenset(x for x in candidates if x and self.weights_beyond_int32(x).size)

    def weights_beyond_int32(self, tensor: str) -> np.ndarray:
        """`beyond_int32` of the weights behind `tensor` (empty for any other tensor), read once per facts: the
        predictor asks for every input of every node, and a 50k-node model has 27k INT64 reads of the same few
        constants."""
        memo = self._beyond_int32
        found = memo.get(tensor)
        if found is None:
            t = self.weights_tensor(tensor)
            found = memo[tensor] = beyond_int32(t) if t is not None else np.zeros(0, np.int64)
        return found

    @cached_property
    def ops(self) -> list[str]:
        """Each node's op type, by node index (the declared pass keeps those it read: 0.05 s at 100k nodes)."""
        return [n.op_type for n in self.model.graph.node]

    # -- construction ------------------------------------------------------------------------------------
    @classmethod
    def of(cls, model: ModelProto, *, infer: bool = True) -> GraphFacts:
        """The facts of `model`, computed once per model version: the same ModelProto object asked again (by a
        backend, the rule engine, the view) gets the same facts while its `edit_stamp` is unchanged. Models are
        values here (fix primitives copy them); a caller that edits one in place after asking for its facts
        calls `GraphFacts.forget(model)` (an edit that keeps every count is not noticed otherwise), or passes a
        copy. Callers must not change the facts they get."""
        if not infer:
            return cls._build(model, infer)
        stamp = edit_stamp(model)
        with _FACTS_LOCK:
            hit = _FACTS.get(id(model))
            if hit is not None and hit[0] is model and hit[1] == stamp:
                _FACTS.move_to_end(id(model))
                return hit[2]
        facts = cls._build(model, infer)
        _remember(model, stamp, facts)
        return facts

    @staticmethod
    def forget(model: ModelProto) -> None:
        """Drop the facts kept for `model`: it was edited in place after they were computed."""
        with _FACTS_LOCK:
            _FACTS.pop(id(model), None)

    @classmethod
    def _build(cls, model: ModelProto, infer: bool) -> GraphFacts:
        # One pass over the nodes reads each node's inputs once (`all_inputs`, subgraphs' outer reads
        # included); the producers, consumers, topological order and constants all reuse it. Reading a field of
        # a protobuf message from Python costs ~1 µs, so at 100k nodes every extra pass is ~0.3 s.
        facts = cls._declared(model)
        if infer:
            inferred, error = _infer(model)
            graph = inferred.graph
            if error is None and not _has_bodies(model, facts.__dict__.get("_may_have_bodies")):
                graph = _types_only(graph)
            facts = facts.with_shapes(graph, error)
        return facts

    def with_shapes(self, inferred: onnx.GraphProto, error: str | None = None) -> GraphFacts:
        """These facts with the dtypes and shapes of `inferred`, the main graph after shape inference (which
        may have run elsewhere: the app infers a big model's shapes in a worker process after the first draw)."""
        typed = dataclasses.replace(
            self,
            tensors=self.tensors.retyped(inferred),
            shape_inference_error=error,
            inferred=True,
            typed=inferred if len(inferred.node) == len(self.model.graph.node) else None,
        )
        for same in ("ops", "position"):  # cached properties of the same nodes, computed already
            if same in self.__dict__:
                typed.__dict__[same] = self.__dict__[same]
        return typed

    @classmethod
    def _declared(cls, model: ModelProto) -> GraphFacts:
        """The facts with the types the model declares (no shape inference).

        One pass over the nodes: each protobuf field is read once (~1 µs a read from Python: at 100k nodes every
        extra pass costs ~0.1-0.3 s of opening the model). The pass also finds whether the file order is a
        topological order (a name is never read before the node that produces it, the spec's rule, which almost
        every file keeps) and, assuming it is, which tensors are constant; a file out of order is sorted and its
        constants found again in the sorted order (tests/test_graph.py compares every field with the plain
        algorithm)."""
        with gc_paused():
            return cls._declared_pass(model)

    @classmethod
    def _declared_pass(cls, model: ModelProto) -> GraphFacts:
        graph = model.graph
        nodes = list(graph.node)
        bodiless = _standard_ops_without_bodies()
        inits = {t.name: t for t in graph.initializer}
        real_inputs = {vi.name for vi in graph.input}
        inputs = [vi.name for vi in graph.input if vi.name not in inits]
        # From IR 4 on, an initializer that is also a graph input is a default the caller may override at run
        # time: not a constant. Before IR 4 every initializer had to be listed as an input too.
        seeds = {name for name in inits if model.ir_version < 4 or name not in real_inputs}
        constant = set(seeds)
        names: list[str] = []
        ops: list[str] = []
        producer: dict[str, int] = {}
        consumers: dict[str, list[int]] = defaultdict(list)
        reads: list[list[str]] = []
        others: list[int] = []  # the nodes that may have bodies: not a standard op without any
        held: list[tuple[str, TensorProto]] = []  # Constant nodes' tensors
        # the file order is topological unless a name is read before a node that produces it (the last one, as
        # `producer` keeps): noted as the names are produced
        read_early = False
        for i, node in enumerate(nodes):
            op, domain = node.op_type, node.domain
            standard = domain in ("", "ai.onnx")
            if standard and op in bodiless:
                ins = node.input[
                    :
                ]  # a list, as `[x for x in node.input if x]` but at C speed (mostly nothing to drop)
                if "" in ins:
                    ins = [x for x in ins if x]
            else:
                ins = all_inputs(node)
                others.append(i)
            outs = node.output[:]
            if "" in outs:
                outs = [o for o in outs if o]
            names.append(node.name)
            ops.append(op)
            reads.append(ins)
            for o in outs:  # before this node's own reads are noted: a node may read the name it writes
                if o in consumers:
                    read_early = True
                producer[o] = i
            for x in ins:
                consumers[x].append(i)
            if standard and op not in NONDETERMINISTIC_OPS:  # folds_through, inlined
                if op == "Constant" or (ins and constant.issuperset(ins)):
                    constant.update(outs)
                if op == "Constant" and not domain and outs:
                    t = constant_tensor(node)
                    if t is not None:
                        held.append((node.output[0], t))
        if not read_early:
            order = list(range(len(nodes)))
        else:
            order = _toposort(graph, producer, reads)
            constant = _constant_tensors(graph, order, inits, model.ir_version, reads, nodes)
        names = _texts(names)
        if len(set(names)) == len(names) and "" not in names:
            keys = names
        else:
            counts = Counter(names)
            keys = [
                nm if nm and counts[nm] == 1 else f"{op}#{i}" for i, (nm, op) in enumerate(zip(names, ops))
            ]
        weights: dict[str, TensorProto] = dict(inits)
        for name, t in held:
            weights.setdefault(name, t)
        facts = cls(
            model,
            keys,
            dict(zip(keys, range(len(keys)))),
            producer,
            dict(consumers),
            inits,
            inputs,
            [o.name for o in graph.output],
            TensorTable(graph, weights),
            constant,
            order,
            functions={(f.domain, f.name): f for f in model.functions},
        )
        facts.__dict__["ops"] = ops  # the cached property, as read here
        facts.__dict__["_may_have_bodies"] = others  # read by _build (not a field: replace() drops it)
        return facts

    # -- queries ---------------------------------------------------------------------------------------------
    def node(self, key_or_index: str | int) -> NodeProto:
        i = key_or_index if isinstance(key_or_index, int) else self.index[key_or_index]
        return self.model.graph.node[i]

    def info(self, tensor: str) -> TensorInfo:
        return self.tensors.get(tensor) or TensorInfo(tensor, 0, None)

    def dtype(self, tensor: str) -> int:
        """`info(tensor).dtype` (0: unknown), without converting the shape where the table is the model's own."""
        if type(self.tensors) is TensorTable:
            return self.tensors.dtype(tensor)
        return self.info(tensor).dtype

    def value_info(self, tensor: str) -> onnx.ValueInfoProto:
        """A typed ValueInfo for `tensor` from inference (float and unknown rank where nothing is known)."""
        info = self.info(tensor)
        shape = None if info.shape is None else [d if isinstance(d, int) else (d or None) for d in info.shape]
        return onnx.helper.make_tensor_value_info(tensor, info.dtype or TensorProto.FLOAT, shape)

    def is_constant(self, tensor: str) -> bool:
        return tensor == "" or tensor in self.constant

    def is_weights(self, tensor: str) -> bool:
        """What TensorRT's parser takes as weights (`is_weights()`): an initializer or a Constant node's output
        (an absent optional input counts too)."""
        if not tensor or tensor in self.initializers:
            return True
        p = self.producer_of(tensor)
        return p is not None and p.op_type == "Constant" and p.domain in ("", "ai.onnx")

    def weights_tensor(self, tensor: str) -> TensorProto | None:
        """The value behind a weights input (`is_weights`): the initializer, or the tensor a Constant node holds
        in its `value` attribute. None for an absent input, any other tensor, and a Constant's other forms."""
        t = self.initializers.get(tensor)
        if t is not None or not tensor:
            return t
        p = self.producer_of(tensor)
        if p is None or p.op_type != "Constant" or p.domain not in ("", "ai.onnx"):
            return None
        return constant_tensor(p)

    def producer_of(self, tensor: str) -> NodeProto | None:
        i = self.producer.get(tensor)
        return None if i is None else self.model.graph.node[i]

    def consumers_of(self, tensor: str) -> list[NodeProto]:
        return [self.model.graph.node[i] for i in self.consumers.get(tensor, [])]

    def constant_producers(self, tensor: str) -> list[int]:
        """Indices of the nodes that compute a constant tensor (its whole constant cone), in topological order."""
        if tensor not in self.constant:
            return []
        seen: set[int] = set()
        stack = [tensor]
        while stack:
            t = stack.pop()
            i = self.producer.get(t)
            if i is None or i in seen:
                continue
            seen.add(i)
            stack.extend(x for x in all_inputs(self.model.graph.node[i]) if x)
        pos = {n: p for p, n in enumerate(self.order)}
        return sorted(seen, key=pos.__getitem__)

    def is_custom_domain(self, node: NodeProto) -> bool:
        return (node.domain or "") not in ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training")


_GRAPH = onnx.AttributeProto.GRAPH
BODY_OPS = ("If", "Loop", "Scan")


def bodies(node: NodeProto) -> list[tuple[str, onnx.GraphProto]]:
    """The node's subgraphs, named as in `iter_subgraphs` paths ('then_branch', 'body', 'branches[1]')."""
    out = []
    for attr in node.attribute:
        subs = [attr.g] if attr.type == _GRAPH else list(attr.graphs)
        for i, sub in enumerate(subs):
            out.append((attr.name if len(subs) == 1 else f"{attr.name}[{i}]", sub))
    return out


def body_facts(outer: GraphFacts, index: int, name: str) -> GraphFacts:
    """The facts of the body `name` (see `bodies`) of the node at `index` of `outer`'s graph."""
    node = outer.model.graph.node[index]
    body = dict(bodies(node))[name]
    typed = None
    if outer.typed is not None and index < len(outer.typed.node):
        typed = dict(bodies(outer.typed.node[index])).get(name)
    return scope_facts(outer, body, path=f"{outer.path}{outer.keys[index]}/{name}/", typed=typed)


def function_facts(
    outer: GraphFacts, function: onnx.FunctionProto, call: NodeProto | None = None, path: str = ""
) -> GraphFacts:
    """The facts of a model-local function's body. With `call`, its formal inputs stand for the caller's
    tensors (an initializer passed in is a weight inside, as a parser that imports the body sees it); without,
    they are run-time values (what holds for every call: the facts a fold inside the function may use)."""
    bind = None
    if call is not None:
        bind = {f: (call.input[k] if k < len(call.input) else "") for k, f in enumerate(function.input)}
    name = f"{function.domain}::{function.name}" if function.domain else function.name
    return scope_facts(outer, function, path=path or f"{name}/", bind=bind)


def iter_scopes(facts: GraphFacts, *, functions: bool = True) -> Iterator[GraphFacts]:
    """The facts of every If/Loop/Scan body under `facts`' graph (outer bodies before the bodies inside them),
    then, for the main graph with `functions`, each model-local function's body (formal inputs as run-time
    values) and the bodies inside it. A body node's key is its scope's `path` + its key there."""
    for index, node in enumerate(facts.model.graph.node):
        for name, _ in bodies(node):
            inner = body_facts(facts, index, name)
            yield inner
            yield from iter_scopes(inner, functions=False)
    if functions and facts.parent is None:
        for f in facts.model.functions:
            inner = function_facts(facts, f)
            yield inner
            yield from iter_scopes(inner, functions=False)


def find_node(facts: GraphFacts, key: str) -> tuple[GraphFacts, int] | None:
    """(the scope's facts, the node's index there) for a node key of the main graph or of a body ('If_0/
    then_branch/Resize_3'); None when no node has that key."""
    if key in facts.index:
        return facts, facts.index[key]
    if "/" not in key:
        return None
    for scope in facts.scopes:
        if key.startswith(scope.path) and key[len(scope.path) :] in scope.index:
            return scope, scope.index[key[len(scope.path) :]]
    return None


def scope_facts(
    outer: GraphFacts,
    body: onnx.GraphProto | onnx.FunctionProto,
    *,
    path: str,
    bind: dict[str, str] | None = None,
    typed: onnx.GraphProto | None = None,
) -> GraphFacts:
    """Facts of an If/Loop/Scan body or a function body, with what it reads from the scope around it: an outer
    weight (initializer or Constant output) is a weight here too, a tensor computed only from constants there is
    a constant here, and an outer tensor keeps its type. A body's own inputs (a Loop's iteration count,
    condition and carried values, a Scan's slices) are run-time values, never constants. The facts' model is a
    copy holding the body as its graph (node indices are the body's); `path` ends with '/' and prefixes the
    body's node keys."""
    m = ModelProto()
    m.ir_version = outer.model.ir_version
    if isinstance(body, onnx.FunctionProto):
        m.opset_import.extend(body.opset_import or outer.model.opset_import)
        g = m.graph
        g.name = body.name
        g.node.extend(body.node)
        g.output.extend(onnx.helper.make_empty_tensor_value_info(o) for o in body.output)
        g.value_info.extend(getattr(body, "value_info", ()))  # IR 10 functions may type their tensors
        if bind is None:
            g.input.extend(onnx.helper.make_empty_tensor_value_info(x) for x in body.input)
            free = {}
        else:
            free = {f: a for f, a in bind.items() if a}
    else:
        m.opset_import.extend(outer.model.opset_import)
        m.graph.CopyFrom(body)
        copied_reads(body, m.graph)  # the copy's declared pass below reads its bodies' outer names again
        if typed is not None:
            del m.graph.value_info[:]
            m.graph.value_info.extend(typed.value_info)
        free = {x: x for x in outer_reads(body)}
    weights: dict[str, TensorProto] = {}
    constant: set[str] = set()
    for x, o in free.items():
        t = outer.weights_tensor(o)
        if t is not None:
            weights[x] = t
        if outer.is_constant(o) or x in weights:
            constant.add(x)
        info = outer.info(o)
        if info.dtype:
            shape = (
                None if info.shape is None else [d if isinstance(d, (int, str)) else None for d in info.shape]
            )
            m.graph.value_info.append(onnx.helper.make_tensor_value_info(x, info.dtype, shape))
    facts = GraphFacts._declared(m)
    facts.initializers.update(weights)
    seeds = dict.fromkeys(constant) | {k: v for k, v in facts.initializers.items()}
    const = _constant_tensors(m.graph, facts.order, seeds, m.ir_version)
    return dataclasses.replace(
        facts,
        graph_inputs=[],  # not network inputs: the parser does not import them as such
        constant=const,
        functions=outer.functions,
        typed=typed,
        path=path,
        parent=outer,
        free=free,
        inferred=outer.inferred,
    )


def _has_bodies(model: ModelProto, candidates: list[int] | None = None) -> bool:
    """Whether a main-graph node has an If/Loop/Scan body (a GRAPH or GRAPHS attribute): the standard ops whose
    schemas have none are not looked at, nor any node but `candidates` (indices) where given."""
    bodiless = _standard_ops_without_bodies()
    bodies = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    nodes = model.graph.node
    if candidates is not None:
        return any(a.type in bodies for i in candidates for a in nodes[i].attribute)
    return any(
        a.type in bodies
        for n in nodes
        if not (n.op_type in bodiless and n.domain in ("", "ai.onnx"))
        for a in n.attribute
    )


def _types_only(inferred: onnx.GraphProto) -> onnx.GraphProto:
    """The inputs, value infos and outputs of an inferred graph, without its nodes: what the facts of a model
    without bodies read of it (`typed`, the nodes' copy, is only for looking into bodies). The inferred model's
    nodes are a copy of the whole graph, three times the value infos in memory (48 MiB against 15 at 50k
    nodes), kept as long as any of its value infos is."""
    g = onnx.GraphProto()
    g.input.extend(inferred.input)
    g.value_info.extend(inferred.value_info)
    g.output.extend(inferred.output)
    return g


@cache
def _standard_ops_without_bodies() -> frozenset[str]:
    """Op types of the default domain whose schemas (every version) have no GRAPH or GRAPHS attribute."""
    from onnx import defs

    bodies = (defs.OpSchema.AttrType.GRAPH, defs.OpSchema.AttrType.GRAPHS)
    every, with_bodies = set(), set()
    for schema in defs.get_all_schemas_with_history():
        if schema.domain in ("", "ai.onnx"):
            every.add(schema.name)
            if any(a.type in bodies for a in schema.attributes.values()):
                with_bodies.add(schema.name)
    return frozenset(every - with_bodies)


def all_inputs(node: NodeProto) -> list[str]:
    """The node's inputs plus tensors its subgraphs read from the outer scope."""
    names = [x for x in node.input if x]
    # a standard op other than If/Loop/Scan/SequenceMap holds no subgraph: its attributes need not be read (at
    # 100k nodes, reading every node's attributes is ~0.2 s of opening a model)
    if node.op_type in _standard_ops_without_bodies() and node.domain in ("", "ai.onnx"):
        return names
    for attr in node.attribute:
        for sub in (attr.g,) if attr.type == _GRAPH else attr.graphs:
            names.extend(outer_reads(sub))
    return names


# `outer_reads` by graph object while `reads_memo()` is open (per thread): {id(graph): (graph, reads, origin)}. A body's
# outer reads walk every body nested in it, and each enclosing scope's facts read them again through the node
# holding the body: a fold that builds the facts of a body 4 levels deep walks the deepest bodies 4+ times.
_READS = threading.local()


@contextmanager
def reads_memo(store: dict | None = None):
    """Inside, each GraphProto's `outer_reads` are computed once. Only for stretches that edit no graph: an edit
    made while it is open is not seen (the memo is keyed by object, not content). Nested use shares the outer
    memo. `store`: a memo the caller keeps between stretches (read, and filled), e.g. the reads of a model's
    bodies while only some of them change; the caller drops what it edits (`forget_reads`)."""
    saved = getattr(_READS, "memo", None)
    if store is None and saved is not None:
        yield
        return
    _READS.memo = {} if store is None else store
    try:
        yield
    finally:
        _READS.memo = saved


def graphs_under(nodes) -> list[onnx.GraphProto]:
    """The bodies these nodes hold, and the bodies in those, at every depth."""
    out = []
    bodiless = _standard_ops_without_bodies()
    for n in nodes:
        if n.op_type in bodiless and n.domain in ("", "ai.onnx"):
            continue
        for _, body in bodies(n):
            out.append(body)
            out.extend(graphs_under(body.node))
    return out


def forget_reads(store: dict, graphs) -> None:
    """Drop these graphs' entries from a kept memo (`reads_memo(store)`): they are about to change, or go."""
    for g in graphs:
        store.pop(id(g), None)


def copied_reads(src: onnx.GraphProto, dst: onnx.GraphProto) -> None:
    """`dst` was just copied from `src`: inside `reads_memo()`, its nodes' bodies read what `src`'s do, noted
    without walking the copies (a no-op outside). Each copy remembers the graph it stands for, so that a copy
    of a copy maps to the first one's bodies too (a scope 4 levels deep is a copy of a copy of ...)."""
    memo = getattr(_READS, "memo", None)
    if memo is None:
        return
    hit = memo.get(id(src))
    if hit is not None and hit[0] is src:
        src = hit[2]  # the graph `src` is an unedited copy of: its bodies are in the memo already
    bodiless = _standard_ops_without_bodies()
    for a, b in zip(src.node, dst.node):
        if a.op_type in bodiless and a.domain in ("", "ai.onnx"):
            continue
        for x, y in zip(a.attribute, b.attribute):
            pairs = ((x.g, y.g),) if x.type == _GRAPH else zip(x.graphs, y.graphs)
            for g, h in pairs:
                reads = outer_reads(g)
                memo[id(h)] = (h, reads, memo[id(g)][2])


def outer_reads(graph: onnx.GraphProto) -> list[str]:
    memo = getattr(_READS, "memo", None)
    if memo is None:
        return _outer_reads(graph)
    hit = memo.get(id(graph))
    if hit is None or hit[0] is not graph:
        # the graph is held with its reads (and the graph it is a copy of, itself if none: copied_reads): its
        # id cannot name another object while the memo lives
        hit = memo[id(graph)] = (graph, _outer_reads(graph), graph)
    return list(hit[1])


def _outer_reads(graph: onnx.GraphProto) -> list[str]:
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    for n in graph.node:
        local.update(o for o in n.output if o)
    reads = []
    for n in graph.node:
        for x in all_inputs(n):
            if x and x not in local:
                reads.append(x)
    for o in graph.output:
        if o.name not in local:
            reads.append(o.name)
    return reads


def folds_through(node: NodeProto) -> bool:
    """Whether the node's outputs are constant when all its inputs are: an ai.onnx op that is not random (a
    custom op's semantics are unknown: never fold through it). The one rule of constant propagation."""
    return node.domain in ("", "ai.onnx") and node.op_type not in NONDETERMINISTIC_OPS


_INT32 = np.iinfo(np.int32)


def beyond_int32(t: TensorProto) -> np.ndarray:
    """The values of an INT64 tensor that INT32 cannot hold, flattened (empty for any other type, and for
    external data, which is not read)."""
    if t.data_type != TensorProto.INT64 or t.data_location == TensorProto.EXTERNAL:
        return np.zeros(0, np.int64)
    a = numpy_helper.to_array(t).reshape(-1)
    return a[(a > _INT32.max) | (a < _INT32.min)]


def constant_tensor(node: NodeProto) -> TensorProto | None:
    """The tensor a Constant node holds in its `value` attribute (None for the value_float/ints/... forms)."""
    for a in node.attribute:
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
            return a.t
    return None


# Initializers up to INFER_KEEP_ELEMENTS keep their values in a light copy (shape arithmetic)...
INFER_KEEP_ELEMENTS = 4096
# ...but floating-point ones only up to this: the values shape inference reads are integers (Reshape's shape,
# Slice's starts, pads, axes, ...) and a few float scalars or per-axis lists (Resize/Upsample scales, Range,
# OneHot's depth), never a float weight. Small float weights are most of a big model's light copy (transformer
# stack, 100k nodes: 42 MB, 18 MB without them), and inference parses and writes them back for nothing.
INFER_KEEP_FLOATS = 64
# the integer and floating element types, for code that asks which a tensor has (one home for both)
INT_TYPES = frozenset(
    {
        TensorProto.INT8,
        TensorProto.INT16,
        TensorProto.INT32,
        TensorProto.INT64,
        TensorProto.UINT8,
        TensorProto.UINT16,
        TensorProto.UINT32,
        TensorProto.UINT64,
    }
)
FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16})

_INTEGERS = frozenset(
    {
        TensorProto.UINT8,
        TensorProto.INT8,
        TensorProto.UINT16,
        TensorProto.INT16,
        TensorProto.INT32,
        TensorProto.INT64,
        TensorProto.STRING,
        TensorProto.BOOL,
        TensorProto.UINT32,
        TensorProto.UINT64,
        TensorProto.UINT4,
        TensorProto.INT4,
    }
)


def light_copy(model: ModelProto, inputs: list[onnx.ValueInfoProto] | None = None) -> ModelProto:
    """The model for shape inference: nodes, inputs (or `inputs` instead), outputs and value_info as they are,
    small initializers whole, large ones as stubs with their name, type and dims only (and external data never
    read). Inference on it costs what the graph costs, not what the weights weigh."""
    light = ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    g = light.graph
    g.name = model.graph.name
    g.node.extend(model.graph.node)
    g.input.extend(inputs if inputs is not None else model.graph.input)
    g.output.extend(model.graph.output)
    g.value_info.extend(model.graph.value_info)
    for t in model.graph.initializer:
        numel = 1
        for d in t.dims:
            numel *= d
        limit = INFER_KEEP_ELEMENTS if t.data_type in _INTEGERS else INFER_KEEP_FLOATS
        if numel <= limit and t.data_location != TensorProto.EXTERNAL:
            g.initializer.append(t)
        else:
            stub = g.initializer.add()
            stub.name, stub.data_type = t.name, t.data_type
            stub.dims.extend(t.dims)
    return light


def _infer(model: ModelProto) -> tuple[ModelProto, str | None]:
    try:
        return onnx.shape_inference.infer_shapes(
            light_copy(model), check_type=False, strict_mode=False, data_prop=False
        ), None
    except Exception as exc:  # inference is best-effort: facts degrade to declared types
        return model, f"shape inference failed: {first_line(str(exc)) or type(exc).__name__}"


def typed_values(light: bytes | str) -> tuple[bytes, str | None]:
    """Shape inference for a worker process, on a serialized light copy or on the model file at a path (read
    there, weights never: the parent need not copy a model it has not edited): the inferred graph's inputs,
    value_info and outputs (a serialized GraphProto: all that `GraphFacts.with_shapes` reads) and the error."""
    if isinstance(light, str):
        from surgery.model import load_model

        model = load_model(light).proto
    else:
        model = ModelProto.FromString(light)
    inferred, error = _infer(model)  # the light copy of a light copy is itself
    g = onnx.GraphProto()
    g.input.extend(inferred.graph.input)
    g.value_info.extend(inferred.graph.value_info)
    g.output.extend(inferred.graph.output)
    return g.SerializeToString(), error


def infer_in_worker(facts: GraphFacts, timeout: float = 600.0, path: str | None = None) -> GraphFacts:
    """`facts` with inferred shapes, inference run in a worker process (surgery.isolate) of low CPU
    priority: onnx's inference holds the GIL for its whole run (~1 s at 100k nodes), which would stall a server's
    other threads, and on 2 cores it would take the CPU the page's reruns and the browser's drawing need.
    `path`: the file `facts.model` was read from, unedited (the worker reads it: nothing to copy here). The
    result is remembered as `GraphFacts.of(facts.model)`'s answer."""
    from surgery.isolate import BACKGROUND_NICE, BackendCrash, call_isolated

    try:
        source = path if path else light_copy(facts.model).SerializeToString()
        data, error = call_isolated(
            "surgery.graph:typed_values", source, timeout=timeout, nice=BACKGROUND_NICE
        )
        inferred = facts.with_shapes(onnx.GraphProto.FromString(data), error)
    except BackendCrash as exc:
        inferred = facts.with_shapes(facts.model.graph, f"shape inference failed: {exc}")
    _remember(facts.model, edit_stamp(facts.model), inferred)
    return inferred


def _remember(model: ModelProto, stamp: tuple, facts: GraphFacts) -> None:
    with _FACTS_LOCK:  # the app infers in a thread of its own
        _FACTS[id(model)] = (model, stamp, facts)
        while len(_FACTS) > FACTS_CACHED:
            _FACTS.popitem(last=False)


def cycle_nodes(facts: GraphFacts) -> list[int]:
    """The main-graph nodes that sit on or behind a cycle (the ones `_toposort` could only append last), in file
    order; empty for a valid (acyclic) graph."""
    pos, producer = facts.position, facts.producer
    late = []
    for i in facts.order:
        if any(
            (p := producer.get(x)) is not None and p != i and pos[p] > pos[i]
            for x in all_inputs(facts.model.graph.node[i])
        ):
            late.append(i)
    if not late:
        return []
    first = min(
        pos[i] for i in late
    )  # every node from the first misplaced one on was appended after the cycle
    return sorted(i for i in facts.order if pos[i] >= first)


def _toposort(
    graph: onnx.GraphProto, producer: dict[str, int], reads: list[list[str]] | None = None
) -> list[int]:
    """Kahn's algorithm, stable (keeps file order among ready nodes). Nodes in a cycle are appended last.
    `reads`: each node's `all_inputs`, when the caller has them already."""
    import heapq

    n = len(graph.node)
    if reads is None:
        reads = [all_inputs(node) for node in graph.node]
    # Most files are already in topological order (the spec asks for it). Then the stable order is the file
    # order itself: by induction, nodes 0..k-1 placed, node k's producers all come before it, so it is ready
    # and the smallest ready index. One pass checks that, instead of the heap.
    get = producer.get
    if all(get(x, -1) <= i for i, ins in enumerate(reads) for x in ins):
        return list(range(n))
    indeg = [0] * n
    users: list[list[int]] = [[] for _ in range(n)]
    for i, ins in enumerate(reads):
        deps = {producer[x] for x in ins if x in producer and producer[x] != i}
        indeg[i] = len(deps)
        for d in deps:
            users[d].append(i)
    ready = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < n:
        placed = set(order)
        order.extend(i for i in range(n) if i not in placed)
    return order


def _constant_tensors(
    graph: onnx.GraphProto,
    order: list[int],
    inits: dict[str, TensorProto],
    ir_version: int = 4,
    reads: list[list[str]] | None = None,
    nodes: list[NodeProto] | None = None,
) -> set[str]:
    # From IR 4 on, an initializer that is also a graph input is a default the caller may override at run time:
    # not a constant. Before IR 4 every initializer had to be listed as an input too, so they all are constants.
    real_inputs = {vi.name for vi in graph.input} if ir_version >= 4 else set()
    constant = {name for name in inits if name not in real_inputs}
    nodes = graph.node if nodes is None else nodes
    for i in order:
        node = nodes[i]
        if not folds_through(node):
            continue
        ins = all_inputs(node) if reads is None else reads[i]
        if node.op_type == "Constant" or (ins and all(x in constant for x in ins)):
            constant.update(o for o in node.output if o)
    return constant
