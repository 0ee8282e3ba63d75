"""Decompositions of ops that a backend does not implement, into ops it does.

One function per (domain, op type), registered with `@decomposition(domain, op)`; each takes the node, the
graph facts and a name maker and returns (new nodes, new initializers), or raises FixError saying why it cannot
(e.g. a condition that is not constant). The outputs keep their names, so readers are untouched. The basic
ones are below; families live in their own modules (FAMILIES: classical ML, quantized operators, ...), each a
list of decorated functions. Whether a decomposition is exact or approximate is the rule's safety class.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import NameIndex, copy_model, find_node, replace_node
from surgery.graph import GraphFacts, all_inputs, opset_of

DECOMPOSITIONS: dict[tuple[str, str], Callable] = {}
# modules with more decompositions, imported on first use (each registers its functions)
FAMILIES = (
    "surgery.fixes.decompose_ml",
    "surgery.fixes.decompose_ml_svm",
    "surgery.fixes.decompose_ml_trees",
    "surgery.fixes.decompose_quantized",
    "surgery.fixes.decompose_ops",
    "surgery.fixes.decompose_contrib",
)


def decomposition(domain: str, op: str):
    """Register `fn(node, facts, fresh) -> (nodes, initializers)` as the decomposition of domain::op."""

    def deco(fn: Callable) -> Callable:
        DECOMPOSITIONS[(domain, op)] = fn
        return fn

    return deco


def _load_families() -> None:
    import importlib

    for module in FAMILIES:
        importlib.import_module(module)


def decomposes(domain: str, op: str) -> bool:
    """Whether `decompose` has a decomposition for op `op` of `domain` ("" or "ai.onnx": the standard ops)."""
    _load_families()
    return ("" if domain in ("", "ai.onnx") else domain, op) in DECOMPOSITIONS


def standard_opset(model: ModelProto) -> int:
    """The ai.onnx opset decompositions emit ops for: the model's, else (a model importing only ai.onnx.ml, as
    onnxmltools writes XGBoost) the newest its IR version allows, at most 17; decompose() then imports it."""
    version = opset_of(model)
    if version is not None:
        return version
    allowed = [row[2] for row in helper.VERSION_TABLE if row[1] <= max(model.ir_version, 3)]
    return min(max(allowed), 17)


def _attrs(node: NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _const_value(facts: GraphFacts, name: str) -> np.ndarray:
    t = facts.weights_tensor(name)
    if t is not None:
        return numpy_helper.to_array(t)
    raise FixError(f"input '{name}' is not a constant; fold constants first")


@decomposition("ai.onnx.ml", "Scaler")
def scaler(node, facts, fresh):
    """ai.onnx.ml Scaler: y = (x - offset) * scale, as float."""
    a = _attrs(node)
    x = node.input[0]
    ins, nodes = x, []
    if facts.info(x).dtype not in (TensorProto.FLOAT, 0):
        ins = fresh("cast")
        nodes.append(helper.make_node("Cast", [x], [ins], name=f"{node.name}/Cast", to=TensorProto.FLOAT))
    off, sc = fresh("offset"), fresh("scale")
    sub = fresh("centered")
    inits = [
        numpy_helper.from_array(np.array(a.get("offset", [0.0]), np.float32), off),
        numpy_helper.from_array(np.array(a.get("scale", [1.0]), np.float32), sc),
    ]
    nodes += [
        helper.make_node("Sub", [ins, off], [sub], name=f"{node.name}/Sub"),
        helper.make_node("Mul", [sub, sc], [node.output[0]], name=f"{node.name}/Mul"),
    ]
    return nodes, inits


@decomposition("", "Compress")
def compress(node, facts, fresh):
    """Compress with a constant condition: Gather with the constant indices of the true entries."""
    cond = _const_value(facts, node.input[1]).astype(bool).reshape(-1)
    axis = _attrs(node).get("axis")
    idx = fresh("indices")
    inits = [numpy_helper.from_array(np.nonzero(cond)[0].astype(np.int64), idx)]
    if axis is None:
        flat, shape1 = fresh("flat"), fresh("minus_one")
        inits.append(numpy_helper.from_array(np.array([-1], np.int64), shape1))
        return [
            helper.make_node("Reshape", [node.input[0], shape1], [flat], name=f"{node.name}/Reshape"),
            helper.make_node("Gather", [flat, idx], [node.output[0]], name=f"{node.name}/Gather", axis=0),
        ], inits
    return [
        helper.make_node(
            "Gather", [node.input[0], idx], [node.output[0]], name=f"{node.name}/Gather", axis=axis
        )
    ], inits


@decomposition("", "CenterCropPad")
def center_crop_pad(node, facts, fresh):
    """CenterCropPad with a static input shape and constant target shape: Slice for crops, Pad for pads."""
    info = facts.info(node.input[0])
    if info.shape is None or info.is_dynamic:
        raise FixError(f"CenterCropPad '{node.name}' needs a static input shape; freeze the shapes first")
    target = _const_value(facts, node.input[1]).astype(np.int64).reshape(-1)
    rank = len(info.shape)
    axes = [a % rank for a in _attrs(node).get("axes", list(range(rank)))]
    starts, ends, pads_b, pads_e = [], [], [0] * rank, [0] * rank
    for ax, want in zip(axes, target):
        have = info.shape[ax]
        if want < have:  # crop: the start rounds down, as the op's reference does
            s = (have - want) // 2
            starts.append(s)
            ends.append(s + int(want))
        else:
            starts.append(0)
            ends.append(have)
            pads_b[ax] = (int(want) - have) // 2
            pads_e[ax] = int(want) - have - pads_b[ax]
    names = [fresh(k) for k in ("starts", "ends", "axes", "pads", "cropped")]
    inits = [
        numpy_helper.from_array(np.array(v, np.int64), n)
        for v, n in zip((starts, ends, axes, pads_b + pads_e), names[:4])
    ]
    return [
        helper.make_node(
            "Slice", [node.input[0], names[0], names[1], names[2]], [names[4]], name=f"{node.name}/Slice"
        ),
        helper.make_node("Pad", [names[4], names[3]], [node.output[0]], name=f"{node.name}/Pad"),
    ], inits


@decomposition("", "BitShift")
def bitshift(node, facts, fresh):
    """BitShift by a constant amount: Mul / Div by 2**amount (unsigned integer types, exact)."""
    amount = _const_value(facts, node.input[1])
    dtype = facts.info(node.input[0]).dtype
    np_type = helper.tensor_dtype_to_np_dtype(dtype) if dtype else np.uint32
    if np.any(amount < 0) or np.any(amount >= np.iinfo(np_type).bits):
        raise FixError(f"shift amounts {amount.tolist()} out of range for {np.dtype(np_type).name}")
    factor = fresh("factor")
    inits = [numpy_helper.from_array((np.ones_like(amount, dtype=np_type) << amount.astype(np_type)), factor)]
    op = "Mul" if _attrs(node)["direction"] == b"LEFT" or _attrs(node)["direction"] == "LEFT" else "Div"
    return [helper.make_node(op, [node.input[0], factor], [node.output[0]], name=f"{node.name}/{op}")], inits


@decomposition("", "Mish")
def mish(node, facts, fresh):
    """Mish(x) = x * tanh(softplus(x))."""
    sp, th = fresh("softplus"), fresh("tanh")
    return [
        helper.make_node("Softplus", [node.input[0]], [sp], name=f"{node.name}/Softplus"),
        helper.make_node("Tanh", [sp], [th], name=f"{node.name}/Tanh"),
        helper.make_node("Mul", [node.input[0], th], [node.output[0]], name=f"{node.name}/Mul"),
    ], []


def _retype_outputs(model: ModelProto, produced: set[str]) -> None:
    """A graph output that a decomposition turned into a tensor (ZipMap's sequence of maps becomes the
    probabilities) is declared with the type shape inference gives it."""
    stale = [vi for vi in model.graph.output if vi.name in produced and not vi.type.HasField("tensor_type")]
    if not stale:
        return
    for vi in stale:
        vi.ClearField("type")
    facts = GraphFacts.of(model)
    GraphFacts.forget(model)  # edited further below and by the caller: its facts are not kept
    for vi in stale:
        vi.CopyFrom(facts.value_info(vi.name))


class _Readers(dict):
    """The tensors read in a model that a batch is rewriting, as `GraphFacts.consumers` says them (tensor -> the
    readers' node indices in the model before the batch), kept up to date as nodes are replaced: a node's
    replacements read under its index. Decompositions ask whether an output is read at all."""

    def replaced(self, index: int, old: NodeProto, new: list[NodeProto]) -> None:
        for x in all_inputs(old):
            readers = self.get(x)
            if readers and index in readers:
                readers = [r for r in readers]
                readers.remove(index)
                self[x] = readers
        for m in new:
            for x in all_inputs(m):
                self[x] = [*self.get(x, ()), index]


@register(
    "decompose",
    batch="node",
    safety=Safety.EXACT,
    summary="Replace an op by a composition of basic ops (the DECOMPOSITIONS registry: Scaler, Compress, "
    "CenterCropPad, BitShift, Mish, and the families in FAMILIES).",
    params={
        "node": "node key (str) of the node to decompose, or a list of them (one call decomposes them all, from "
        "the last in the graph to the first); its op type picks the decomposition (see DECOMPOSITIONS); outputs "
        "keep their names",
    },
)
def decompose(model: ModelProto, node: str | list[str]) -> ModelProto:
    """One copy of the model, one set of graph facts (shape inference once) and one name index serve every node
    of the call: a batch of n nodes costs what one node costs plus n small rewrites, not n passes over the
    model. The nodes are rewritten from the last in the graph to the first, exactly as n single calls in that
    order would (each node sees the readers its successors' rewrites left it, and the names they took)."""
    out = copy_model(model)
    keys = [node] if isinstance(node, str) else list(dict.fromkeys(node))
    facts = GraphFacts.of(model)
    todo: dict[int, str] = {}
    for key in keys:
        i = facts.index.get(key)
        if i is None:
            i = find_node(out, key)  # the usual error, naming the node
        todo.setdefault(i, key)
    _load_families()
    names = NameIndex(out)
    readers = _Readers(facts.consumers) if len(todo) > 1 else None
    seen = facts if readers is None else dataclasses.replace(facts, consumers=readers)
    emptied: set[str] = set()  # custom domains whose last nodes may be gone
    for i in sorted(todo, reverse=True):
        n = out.graph.node[i]
        domain = "" if n.domain in ("", "ai.onnx") else n.domain
        fn = DECOMPOSITIONS.get((domain, n.op_type))
        if fn is None:
            known = ", ".join(f"{d + '::' if d else ''}{op}" for d, op in DECOMPOSITIONS)
            raise FixError(
                f"no decomposition for {n.op_type} ('{todo[i]}'). Note: decompositions exist for {known}"
            )
        prefix = n.name or n.op_type
        new_nodes, inits = fn(
            n, seen, lambda what, prefix=prefix: names.fresh(f"{prefix}/{what}", reserve=False)
        )
        old = onnx.NodeProto()
        old.CopyFrom(n)
        replace_node(out.graph, i, new_nodes)
        out.graph.initializer.extend(inits)
        names.replaced(old, new_nodes, inits)
        if readers is not None:
            readers.replaced(i, old, new_nodes)
        if any(m.domain in ("", "ai.onnx") for m in new_nodes) and opset_of(out) is None:
            out.opset_import.append(helper.make_opsetid("", standard_opset(model)))
        _retype_outputs(out, {o for m in new_nodes for o in m.output})
        if domain:
            emptied.add(domain)
    if emptied:
        used = {m.domain for m in out.graph.node}
        gone = emptied - used
        if gone:
            kept = [
                helper.make_opsetid(o.domain, o.version) for o in out.opset_import if o.domain not in gone
            ]
            del out.opset_import[:]
            out.opset_import.extend(kept)
    return out
