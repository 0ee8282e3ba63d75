"""Probing: ask a backend about one node at a time, for backends that stop at the first error.

A node is cut out into a one-node model: constant inputs keep their values as initializers (a small constant
computed by other nodes is evaluated first), other inputs become graph inputs typed from shape inference,
outputs are typed. Verdicts are cached by node signature (op, domain, opset, attributes, input dtypes, ranks
and const-ness), so a model of 2k nodes with 30 distinct signatures costs about 30 backend calls, and a second
model with the same layers costs none. The cache lives in memory, and on disk when `use_disk_cache()` is on.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

from onnx import ModelProto, TensorProto, helper, numpy_helper

from surgery.backends.base import Status
from surgery.graph import GraphFacts, all_inputs, node_signature
from surgery.inspect import tensor_nbytes
from surgery.model import decoded

SMALL_CONSTANT_BYTES = 256  # constants this small are part of the signature by value (Resize scales, TopK K)
MAX_FOLD_NODES = 64  # constant cones up to this size are evaluated so the probe keeps the value

Answer = tuple[bool, str]  # (supported, the backend's words)
Entry = tuple[bool, str, tuple[str, ...]]  # an answer and the names of the probe it was given for


def _const_tensor(facts: GraphFacts, name: str) -> TensorProto | None:
    """The value of a constant input: an initializer, a Constant node's value, or a small constant cone
    evaluated with the ONNX reference runtime. None when it is not constant or cannot be had cheaply."""
    if name in facts.initializers:
        return facts.initializers[name]
    if facts.producer_of(name) is None or name not in facts.constant:
        return None
    value = facts.weights_tensor(name)  # a Constant node's value
    if value is not None:
        t = TensorProto()
        t.CopyFrom(value)
        t.name = name
        return t
    return _fold(facts, name)


def _fold(facts: GraphFacts, name: str) -> TensorProto | None:
    cache = facts.__dict__.setdefault("_probe_folded", {})
    if name in cache:
        return cache[name]
    cache[name] = None
    cone = facts.constant_producers(name)
    if not cone or len(cone) > MAX_FOLD_NODES:
        return None
    nodes = [facts.model.graph.node[i] for i in cone]
    if any(n.domain not in ("", "ai.onnx") for n in nodes):
        return None
    needed = {x for n in nodes for x in all_inputs(n)} - {o for n in nodes for o in n.output}
    inits = [facts.initializers[x] for x in needed if x in facts.initializers]
    if len(inits) != len(needed) or any(t.data_location == TensorProto.EXTERNAL for t in inits):
        return None
    try:
        from onnx.reference import ReferenceEvaluator

        graph = helper.make_graph(nodes, "fold", [], [helper.make_tensor_value_info(name, 0, None)], inits)
        sub = helper.make_model(
            graph, opset_imports=list(facts.model.opset_import), ir_version=facts.model.ir_version
        )
        (value,) = ReferenceEvaluator(sub).run(None, {})
        tensor = numpy_helper.from_array(value, name)
    except Exception:  # folding is a nicety: the probe then takes the tensor as an input
        return None
    cache[name] = tensor
    return tensor


def _canonical_dims(shape, symbols: dict) -> tuple | None:
    """Dims with symbolic names replaced by their order of first appearance (N, M → 's0', 's1')."""
    if shape is None:
        return None
    out = []
    for d in shape:
        if isinstance(d, str) and d:
            out.append(symbols.setdefault(d, f"s{len(symbols)}"))
        else:
            out.append(d)
    return tuple(out)


def _external_fields(t: TensorProto) -> tuple:
    return tuple((e.key, e.value) for e in t.external_data) if t.data_location == TensorProto.EXTERNAL else ()


def signature(facts: GraphFacts, index: int) -> tuple:
    """Everything the one-node probe shows the backend, except names and the values of large constants: op identity
    and attributes, the model's IR version and opsets, each input slot's dtype, shape (symbolic dims by order of
    appearance) and const-ness, small constants by value and large ones by type and external-data fields, each
    output slot (present or empty) with its declared dtype and shape, tensors read from the outer scope, and the
    body of a model-local function. Names are left out so equal layers share a verdict; `probe_nodes` reuses a
    cached answer only when its words do not name what the first probe was called."""
    node = facts.model.graph.node[index]
    symbols: dict = {}
    ins = []
    for x in node.input:
        if not x:
            ins.append(None)
            continue
        info = facts.info(x)
        value: object = None
        if facts.is_constant(x):
            const = _const_tensor(facts, x)
            if const is None:
                value = "?"  # constant but not evaluated here: the probe will see a graph input
            # its size from dims and type: ByteSize() serializes the tensor (a big embedded weight, once a probe)
            elif const.data_location != TensorProto.EXTERNAL and tensor_nbytes(const) <= SMALL_CONSTANT_BYTES:
                value = hashlib.sha1(const.SerializeToString(deterministic=True)).hexdigest()[:12]
            else:
                value = (const.data_type, tuple(const.dims), _external_fields(const))
        ins.append((info.dtype, _canonical_dims(info.shape, symbols), facts.is_constant(x), value))
    outs = []
    for o in node.output:
        info = facts.info(o) if o else None
        outs.append(None if info is None else (info.dtype, _canonical_dims(info.shape, symbols)))
    direct = set(node.input)
    outer = sorted(
        (
            (facts.info(x).dtype, _canonical_dims(facts.info(x).shape, {}) or ())
            for x in dict.fromkeys(all_inputs(node))
            if x not in direct
        ),
        key=repr,  # dims mix ints and symbol names: order by their text
    )
    domain = node.domain or ""
    body = ""
    for f in facts.model.functions:
        if f.name == node.op_type and f.domain == domain:
            body = hashlib.sha1(f.SerializeToString(deterministic=True)).hexdigest()[:12]
    opsets = tuple(
        sorted(("" if o.domain == "ai.onnx" else o.domain, o.version) for o in facts.model.opset_import)
    )
    return (
        node_signature(node),
        facts.model.ir_version,
        opsets,
        tuple(ins),
        tuple(outs),
        tuple(outer),
        body,
    )


def probe_names(facts: GraphFacts, index: int) -> tuple[str, ...]:
    """The names a probe of node `index` carries (the node's, then its tensors'): words that mention one of them
    are about this node only. A name that is not UTF-8 is given as text (`decoded`), as the words are."""
    node = facts.model.graph.node[index]
    return tuple(decoded(x) for x in (node.name, *all_inputs(node), *node.output) if x)


def isolate(facts: GraphFacts, index: int) -> ModelProto:
    """The one-node model around node `index`."""
    model = facts.model
    node = model.graph.node[index]
    inputs, inits, seen = [], [], set()
    for x in all_inputs(node):
        if x in seen:
            continue
        seen.add(x)
        const = _const_tensor(facts, x) if facts.is_constant(x) else None
        if const is not None:
            inits.append(const)
            continue
        inputs.append(facts.value_info(x))
    outputs = []
    for o in node.output:
        if o:
            info = facts.info(o)
            shape = (
                None if info.shape is None else [d if isinstance(d, int) else (d or None) for d in info.shape]
            )
            outputs.append(helper.make_tensor_value_info(o, info.dtype or TensorProto.FLOAT, shape))
    graph = helper.make_graph([node], f"probe_{node.op_type}", inputs, outputs, inits)
    probe = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    probe.functions.extend(model.functions)
    if any(facts.info(o).is_dynamic for o in node.output if o) and (inits or not inputs):
        _retype_outputs(probe)
    return probe


def _retype_outputs(probe: ModelProto) -> None:
    """Constants folded into the probe can tell shape inference more than the whole model's facts did."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=False, data_prop=True)
    except Exception:  # the facts' types stand
        return
    found = {vi.name: vi for vi in [*inferred.graph.value_info, *inferred.graph.output]}
    for out in probe.graph.output:
        better = found.get(out.name)
        if better is not None and better.type.tensor_type.HasField("shape"):
            known = lambda vi: sum(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)  # noqa: E731
            if not out.type.tensor_type.HasField("shape") or known(better) > known(out):
                out.type.CopyFrom(better.type)


class VerdictCache:
    """(backend id, version, options..., signature) -> (ok, words, probe names); in memory, and in a small
    JSON-lines file when a directory is set. Keys are hashed for the file; a file over `max_entries` is rewritten
    smaller."""

    def __init__(self, directory: str | Path | None = None, max_entries: int = 50_000):
        self._store: dict[tuple, Entry] = {}
        self._disk: dict[str, Entry] | None = None
        self.directory = Path(directory) if directory else None
        self.max_entries = max_entries
        self.hits = 0
        self._lock = threading.Lock()

    @staticmethod
    def _hash(key: tuple) -> str:
        return hashlib.sha1(repr(key).encode()).hexdigest()

    @property
    def path(self) -> Path | None:
        return None if self.directory is None else self.directory / "probe-verdicts-v2.jsonl"

    def _load(self) -> dict[str, Entry]:
        if self._disk is None:
            self._disk = {}
            if self.path is not None and self.path.exists():
                for line in self.path.read_text(errors="replace").splitlines():
                    try:
                        k, ok, msg, names = json.loads(line)
                        self._disk[k] = (bool(ok), str(msg), tuple(str(n) for n in names))
                    except (ValueError, TypeError):
                        continue  # a torn line from a concurrent writer: skip it
        return self._disk

    def get(self, key: tuple) -> Entry | None:
        found = self._store.get(key)
        if found is None and self.directory is not None:
            found = self._load().get(self._hash(key))
            if found is not None:
                self._store[key] = found
        if found is not None:
            self.hits += 1
        return found

    def put(self, key: tuple, value: Entry) -> None:
        self._store[key] = value
        if self.directory is None:
            return
        with self._lock:
            disk = self._load()
            disk[self._hash(key)] = value
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                if len(disk) > self.max_entries:
                    keep = list(disk.items())[-self.max_entries // 2 :]
                    self._disk = dict(keep)
                    tmp = self.path.with_suffix(".tmp")
                    tmp.write_text("".join(json.dumps([k, *v]) + "\n" for k, v in keep))
                    os.replace(tmp, self.path)
                else:
                    with open(self.path, "a") as f:
                        f.write(json.dumps([self._hash(key), *value]) + "\n")
            except OSError:
                pass  # a read-only home: the memory cache still works

    def clear(self, disk: bool = False) -> None:
        self._store.clear()
        self.hits = 0
        if disk and self.path is not None and self.path.exists():
            self.path.unlink()
        self._disk = None


CACHE = VerdictCache()


def use_disk_cache(directory: str | Path | None = "~/.cache/onnx-surgery") -> None:
    """Keep probe verdicts on disk too (None turns it off). The CLI turns it on unless told --no-cache."""
    CACHE.directory = None if directory is None else Path(os.path.expanduser(str(directory)))
    CACHE._disk = None


def _reusable(entry: Entry | None, names: tuple[str, ...]) -> bool:
    """A cached answer stands for this node when it was given for a probe of the same names, or its words name
    none of that probe's names (else the words would speak of another node)."""
    if entry is None:
        return False
    ok, words, used = entry
    return ok or used == names or not any(n and n in words for n in used)


def probe_nodes(
    facts: GraphFacts,
    ask: Callable[[ModelProto], Answer] | None,
    cache_key: tuple,
    indices: list[int] | None = None,
    *,
    ask_many: Callable[[list[ModelProto]], list[Answer]] | None = None,
) -> tuple[dict[int, Answer], int]:
    """A verdict for each node in `indices` (default: all), asking the backend once per distinct signature that
    is not cached: `ask(one_node_model)` per probe, or `ask_many(models)` once for all of them (a backend
    behind `call_isolated` pays one round trip). Returns {index: (ok, words)} and the number of probes."""
    indices = list(range(len(facts.model.graph.node))) if indices is None else indices
    keys = {i: (*cache_key, signature(facts, i)) for i in indices}
    names = {i: probe_names(facts, i) for i in indices}
    answers: dict[int, Answer] = {}
    todo: dict[tuple, list[int]] = {}  # key -> the nodes waiting for its probe
    for i in indices:
        entry = CACHE.get(keys[i])
        if _reusable(entry, names[i]):
            answers[i] = entry[:2]
        else:
            todo.setdefault(keys[i], []).append(i)
    calls = 0
    while todo:
        batch = {
            key: waiting[0] for key, waiting in todo.items()
        }  # one probe per key, named as its first node
        pending = []
        for key, i in batch.items():
            try:
                pending.append((key, i, isolate(facts, i)))
            except Exception as exc:  # a probe model that cannot be built says so
                CACHE.put(key, (False, f"could not isolate the node: {exc}", names[i]))
        if ask_many is not None:
            got = ask_many([m for _, _, m in pending]) if pending else []
        else:
            got = [_ask_safely(ask, m) for _, _, m in pending]
        calls += len(pending)
        for (key, i, _), (ok, words) in zip(pending, got):
            CACHE.put(key, (ok, words, names[i]))
        still: dict[tuple, list[int]] = {}
        for key, waiting in todo.items():
            entry = CACHE._store.get(key)
            for i in waiting:
                if i == batch[key] or _reusable(entry, names[i]):
                    answers[i] = entry[:2]
                else:
                    still.setdefault(key, []).append(i)  # its words name another node: ask again for this one
        todo = still
    return answers, calls


def untyped_inputs(facts: GraphFacts, index: int) -> list[str]:
    """Non-constant inputs of node `index` whose dtype or rank is unknown (shape inference stopped upstream,
    typically at a custom op). Alone, such a node is asked about a guess, so a refusal proves little."""
    node = facts.model.graph.node[index]
    out = []
    for x in dict.fromkeys(all_inputs(node)):
        info = facts.info(x)
        if not facts.is_constant(x) and (info.shape is None or not info.dtype):
            out.append(x)
    return out


SHAPE_SOURCES = frozenset({"Shape", "Size"})


def shape_derived(facts: GraphFacts) -> set[str]:
    """Tensors computed from tensor shapes (Shape/Size) and constants only: in the model a backend can track them
    as shapes, but cut out alone they become ordinary inputs (cached on the facts)."""
    cached = facts.__dict__.get("_probe_shape_derived")
    if cached is not None:
        return cached
    derived: set[str] = set()
    for i in facts.order:
        node = facts.model.graph.node[i]
        ins = [x for x in all_inputs(node)]
        if (node.op_type in SHAPE_SOURCES and not node.domain) or (
            ins and any(x in derived for x in ins) and all(x in derived or facts.is_constant(x) for x in ins)
        ):
            derived.update(o for o in node.output if o)
    facts.__dict__["_probe_shape_derived"] = derived
    return derived


def judge(
    facts: GraphFacts, index: int, answer: Answer, definite: bool = False, whole_error: str | None = None
) -> tuple[Status, str]:
    """A probe's answer as (status, our explanation); the backend's words stay the answer's message. A refusal is
    UNKNOWN when the node was asked about with a guess: an input of unknown type or rank (shape inference
    stopped upstream), or an input computed from shapes that alone became an ordinary tensor. It stays REJECTED
    when `definite` (the backend has no such op at all) or when it repeats the whole model's error word for
    word."""
    ok, message = answer
    if ok:
        return Status.SUPPORTED, ""
    if definite or (whole_error and message and message.splitlines()[0] in whole_error):
        return Status.REJECTED, "checked alone (a one-node model), the node is refused as in the whole model"
    untyped = untyped_inputs(facts, index)
    if untyped:
        names = ", ".join(f"'{x}'" for x in untyped[:3]) + (" ..." if len(untyped) > 3 else "")
        return (
            Status.UNKNOWN,
            f"input {names} has no known type or rank (shape inference stopped upstream), so the node was "
            "checked alone with a guess; the backend's answer to that guess proves little",
        )
    derived = shape_derived(facts)
    shapes = [x for x in dict.fromkeys(facts.model.graph.node[index].input) if x in derived]
    if shapes:
        names = ", ".join(f"'{x}'" for x in shapes[:3])
        return (
            Status.UNKNOWN,
            f"input {names} is computed from tensor shapes; checked alone it became an ordinary input, which "
            "the backend may refuse where the model is fine",
        )
    return Status.REJECTED, "checked alone (a one-node model with the node's inputs typed as in the model)"


def _ask_safely(ask: Callable[[ModelProto], Answer], model: ModelProto) -> Answer:
    """A probe that crashes the backend is a verdict on that node: refused, in the crash's words."""
    from surgery.isolate import BackendCrash

    try:
        return ask(model)
    except BackendCrash as exc:
        return (False, str(exc))


def constant_value(facts: GraphFacts, name: str):
    t = _const_tensor(facts, name)
    return None if t is None else numpy_helper.to_array(t)
