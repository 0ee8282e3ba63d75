"""Small graph edits shared by the primitives."""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, numpy_helper

from surgery.fixes import FixError
from surgery.graph import node_keys
from surgery.model import copy_message


def copy_model(model: ModelProto) -> ModelProto:
    return copy_message(model)


# numpy dtypes whose TensorProto is the array's bytes as they are in memory (numpy_helper.from_array writes these
# as raw little-endian bytes; strings, the packed 2/4/6-bit types and any other go through from_array itself)
_RAW = (
    {
        np.dtype(t): d
        for t, d in [
            (np.float32, TensorProto.FLOAT),
            (np.float64, TensorProto.DOUBLE),
            (np.float16, TensorProto.FLOAT16),
            (np.int8, TensorProto.INT8),
            (np.int16, TensorProto.INT16),
            (np.int32, TensorProto.INT32),
            (np.int64, TensorProto.INT64),
            (np.uint8, TensorProto.UINT8),
            (np.uint16, TensorProto.UINT16),
            (np.uint32, TensorProto.UINT32),
            (np.uint64, TensorProto.UINT64),
            (np.bool_, TensorProto.BOOL),
        ]
    }
    if sys.byteorder == "little"
    else {}
)


def add_initializer(graph: onnx.GraphProto, value, name: str) -> TensorProto:
    """`value` (an array) added to `graph`'s initializers as `name`, the same tensor numpy_helper.from_array makes,
    written in place: from_array then `initializer.append` copied the bytes twice more (upb's append copies the
    whole message: 1.15 of the 2.06 s that folding zfnet512's 16 weights took)."""
    array = np.asarray(value)
    data_type = _RAW.get(array.dtype)
    if data_type is None:
        graph.initializer.append(numpy_helper.from_array(array, name))
        return graph.initializer[-1]
    tensor = graph.initializer.add()
    tensor.dims.extend(array.shape)
    tensor.name = name
    tensor.data_type = data_type
    tensor.raw_data = array.tobytes()
    return tensor


def find_node(model: ModelProto, key: str) -> int:
    """Index of the node with this key (name, or `Op#index`); a clear error when there is none."""
    keys = node_keys(model.graph.node)
    if key in keys:
        return keys.index(key)
    hint = ", ".join(keys[:8]) + (" ..." if len(keys) > 8 else "")
    raise FixError(f"no node '{key}' in the model. Note: nodes are {hint}")


def used_names(model: ModelProto) -> set[str]:
    """Every node, tensor, initializer and input name of the main graph. A scan of the whole graph: a primitive
    that names many tensors builds it (or a NameIndex) once per call, never once per name."""
    used = {o for n in model.graph.node for o in n.output} | {t.name for t in model.graph.initializer}
    return used | {n.name for n in model.graph.node} | {i.name for i in model.graph.input}


def fresh_name(model: ModelProto, base: str, used: set[str] | NameIndex | None = None) -> str:
    """`base`, or `base_1`, `base_2`, ... whichever the model does not use yet. With `used` (from used_names, or a
    NameIndex; kept up to date by this call) a batch of names costs one scan of the model."""
    if isinstance(used, NameIndex):
        return used.fresh(base)
    taken = used if used is not None else used_names(model)
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    if used is not None:
        used.add(name)
    return name


class NameIndex:
    """The names `used_names` lists, counted, built with one scan of the graph and kept up to date as a primitive
    edits it (`replaced`, `add`): one index serves every name of a step, however many nodes it rewrites. A name
    stays taken while anything in the graph still carries it (a node that is replaced gives its name back)."""

    def __init__(self, model: ModelProto):
        g = model.graph
        count: Counter[str] = Counter()
        for n in g.node:
            count.update(n.output)
            count[n.name] += 1
        count.update(t.name for t in g.initializer)
        count.update(i.name for i in g.input)
        self._count = count

    def __contains__(self, name: object) -> bool:
        return self._count.get(name, 0) > 0  # type: ignore[arg-type]

    def fresh(self, base: str, reserve: bool = True) -> str:
        """`base`, or `base_1`, `base_2`, ... whichever is not taken. `reserve`: taken from now on (else it is
        taken once the node or initializer that carries it is added)."""
        name, k = base, 1
        while name in self:
            name, k = f"{base}_{k}", k + 1
        if reserve:
            self._count[name] += 1
        return name

    def add(self, names) -> None:
        self._count.update(names)

    def replaced(self, old: onnx.NodeProto, new: list[onnx.NodeProto], inits=()) -> None:
        """`old` left the graph; `new` nodes and `inits` initializers joined it."""
        count = self._count
        for name in (*old.output, old.name):
            count[name] -= 1
            if count[name] <= 0:
                del count[name]
        for n in new:
            count.update(n.output)
            count[n.name] += 1
        count.update(t.name for t in inits)


def node_index(model: ModelProto) -> dict[str, int]:
    """Node key -> index, for finding many nodes with one scan (find_node finds one)."""
    return {k: i for i, k in enumerate(node_keys(model.graph.node))}


def replace_node(graph: onnx.GraphProto, index: int, new_nodes: list[onnx.NodeProto]) -> None:
    del graph.node[index]
    for k, n in enumerate(new_nodes):
        graph.node.insert(index + k, n)


def bypass(graph: onnx.GraphProto, index: int) -> None:
    """Remove the node at `index`; its first input takes the place of its first output. When that output is a
    graph output (its name is part of the model's interface), an Identity keeps the name instead."""
    node = graph.node[index]
    src, dst = node.input[0], node.output[0]
    if any(o.name == dst for o in graph.output):
        identity = onnx.helper.make_node("Identity", [src], [dst], name=node.name or f"Identity_{dst}")
        replace_node(graph, index, [identity])
        return
    rename_input_everywhere(graph, dst, src)
    del graph.node[index]


def rename_input_everywhere(graph: onnx.GraphProto, old: str, new: str) -> None:
    for n in graph.node:
        for k, x in enumerate(n.input):
            if x == old:
                n.input[k] = new
    for o in graph.output:
        if o.name == old:
            raise FixError(f"tensor '{old}' is a graph output; it cannot be rewired away")
