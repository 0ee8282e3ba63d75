"""Probing: ask a backend about one node at a time, for backends that stop at the first error.

A node is cut out into a one-node model: constant inputs keep their values as initializers, other inputs
become graph inputs typed from shape inference, outputs are typed. Verdicts are cached by node signature
(op, domain, opset, attributes, input dtypes, ranks and const-ness), so a model of 2k nodes with 30 distinct
signatures costs about 30 backend calls, and a second model with the same layers costs none.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import onnx
from onnx import ModelProto, TensorProto, helper, numpy_helper

from surgery.graph import GraphFacts, _all_inputs, node_signature


def _const_tensor(facts: GraphFacts, name: str) -> TensorProto | None:
    if name in facts.initializers:
        return facts.initializers[name]
    producer = facts.producer_of(name)
    if producer is not None and producer.op_type == "Constant" and not producer.domain:
        attr = next((a for a in producer.attribute if a.name == "value"), None)
        if attr is not None:
            t = TensorProto()
            t.CopyFrom(attr.t)
            t.name = name
            return t
    return None


def signature(facts: GraphFacts, index: int) -> tuple:
    """What decides a node's verdict: op identity and attributes, opsets, and each input's type and const-ness.
    Small constant inputs are part of it by value (a Resize's scales or a TopK's K decide the verdict)."""
    node = facts.model.graph.node[index]
    ins = []
    for x in _all_inputs(node):
        info = facts.info(x)
        const = _const_tensor(facts, x)
        value = None
        if const is not None and const.data_location != TensorProto.EXTERNAL and const.ByteSize() <= 256:
            value = hashlib.sha1(const.SerializeToString(deterministic=True)).hexdigest()[:12]
        ins.append((info.dtype, info.rank, facts.is_constant(x), value))
    opsets = tuple(sorted((o.domain, o.version) for o in facts.model.opset_import))
    return (node_signature(node), opsets, tuple(ins), len(node.output))


def isolate(facts: GraphFacts, index: int) -> ModelProto:
    """The one-node model around node `index`."""
    model = facts.model
    node = model.graph.node[index]
    inputs, inits, seen = [], [], set()
    for x in _all_inputs(node):
        if x in seen:
            continue
        seen.add(x)
        const = _const_tensor(facts, x)
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
    return probe


class VerdictCache:
    """Per-process cache: (backend id, version, signature) -> (ok, message)."""

    def __init__(self):
        self._store: dict[tuple, tuple[bool, str]] = {}
        self.hits = 0

    def get(self, key):
        found = self._store.get(key)
        if found is not None:
            self.hits += 1
        return found

    def put(self, key, value) -> None:
        self._store[key] = value


CACHE = VerdictCache()


def probe_nodes(
    facts: GraphFacts,
    ask: Callable[[ModelProto], tuple[bool, str]],
    cache_key: tuple,
    indices: list[int] | None = None,
) -> tuple[dict[int, tuple[bool, str]], int]:
    """Ask `ask(one_node_model) -> (ok, message)` for each node (deduplicated). Returns verdicts and calls made."""
    verdicts: dict[int, tuple[bool, str]] = {}
    calls = 0
    for i in indices if indices is not None else range(len(facts.model.graph.node)):
        key = (*cache_key, signature(facts, i))
        found = CACHE.get(key)
        if found is None:
            try:
                found = ask(isolate(facts, i))
            except onnx.checker.ValidationError as exc:  # a probe model that cannot be built says so
                found = (False, f"could not isolate the node: {exc}")
            calls += 1
            CACHE.put(key, found)
        verdicts[i] = found
    return verdicts, calls


def constant_value(facts: GraphFacts, name: str):
    t = _const_tensor(facts, name)
    return None if t is None else numpy_helper.to_array(t)
