"""Write out the axes of Squeeze nodes that have none (an Unsqueeze always has its axes: ONNX requires them).

Without axes, Squeeze drops every dimension of size 1. The explicit axes are the *static* dims of size 1: a
dynamic dim (e.g. the batch) is never listed, because it is not known to be 1. If such a dim is 1 at run time,
the original would also have dropped it and the fixed model will not: that corner changes semantics, which
is why this fix is not classed exact. TensorRT refuses to guess at all ("Cannot infer squeeze dimensions from
a dynamic shape!").
"""

from __future__ import annotations

import dataclasses
from collections import ChainMap

import numpy as np
import onnx
from onnx import ModelProto, helper

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import add_initializer, copy_model, find_node, fresh_name, node_index, used_names
from surgery.graph import GraphFacts, TensorInfo, light_copy, opset_of, tensor_info_from_type


def _has_axes(n) -> bool:
    return bool((len(n.input) > 1 and n.input[1]) or any(a.name == "axes" for a in n.attribute))


@register(
    "explicit_squeeze_axes",
    batch="node",
    safety=Safety.APPROXIMATE,
    summary="Give a Squeeze without axes the explicit axes of its static size-1 dims.",
    params={
        "node": "node key (str) of the Squeeze, or a list of them; default: every Squeeze without axes whose "
        "input has static "
        "size-1 dims (the others are left alone)",
    },
)
def explicit_squeeze_axes(model: ModelProto, node: str | list[str] | None = None) -> ModelProto:
    out = copy_model(model)
    base = GraphFacts.of(model)  # shared: not changed here

    def probed(nodes) -> GraphFacts:
        """The facts with the probed shapes of the tensors these nodes squeeze (only those are read: converting
        every tensor's type, twice, is seconds at 50k nodes)."""
        wanted = {n.input[0] for n in nodes if n.input}
        return dataclasses.replace(base, tensors=ChainMap(_probe_shapes(model, wanted), base.tensors))

    if isinstance(node, list):  # a batch: one inference and one scan of names serve every node
        index, used = node_index(out), used_names(out)
        for key in node:
            if key not in index:
                find_node(out, key)  # the usual error, naming the node
        facts = probed(out.graph.node[index[key]] for key in node)
        for key in node:
            _explicit(out, index[key], facts, key, used)
        return out
    if node is None:
        todo = [
            i
            for i, n in enumerate(out.graph.node)
            if n.op_type == "Squeeze" and not n.domain and not _has_axes(n)
        ]
        facts = probed(out.graph.node[i] for i in todo)
        done = 0
        for i in todo:
            try:
                _explicit(out, i, facts, facts.keys[i])
                done += 1
            except FixError:
                continue
        if not done:
            raise FixError("no Squeeze without axes whose input has a static dimension of size 1")
        return out
    i = find_node(out, node)
    _explicit(out, i, probed([out.graph.node[i]]), node)
    return out


SENTINELS = (7919, 7927)  # large primes a dynamic dim is set to, in two runs of shape inference


def _probe_shapes(model: ModelProto, wanted: set[str] | None = None) -> dict[str, TensorInfo]:
    """Shapes where ONNX shape inference alone loses them (a Squeeze without axes on a dynamic input has an
    output of unknown rank, so every Squeeze after it does too): inferred twice with every dynamic input dim
    set to a different large prime. A dim that comes out 1 in both runs is 1 whatever the dynamic dims are; a
    dim that differs between the runs stays dynamic. Only the dims of tensors both runs give are kept, and of
    those only the `wanted` ones (None: every tensor)."""
    runs = []
    for sentinel in SENTINELS:
        inputs = []
        for vi in model.graph.input:
            info = tensor_info_from_type(vi.name, vi.type)
            if info.shape is None or not info.dtype:
                inputs.append(vi)
                continue
            dims = [d if isinstance(d, int) else sentinel for d in info.shape]
            inputs.append(helper.make_tensor_value_info(vi.name, info.dtype, dims))
        try:
            inferred = onnx.shape_inference.infer_shapes(
                light_copy(model, inputs), check_type=False, strict_mode=False, data_prop=True
            )
        except Exception:  # inference is a help here: without it the model's own shapes stand
            return {}
        g = inferred.graph
        runs.append(
            {
                vi.name: tensor_info_from_type(vi.name, vi.type)
                for vi in [*g.value_info, *g.output]
                if wanted is None or vi.name in wanted
            }
        )
    out = {}
    for name, a in runs[0].items():
        b = runs[1].get(name)
        if b is None or a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
            continue
        dims = tuple(x if x == y and isinstance(x, int) else None for x, y in zip(a.shape, b.shape))
        out[name] = TensorInfo(name, a.dtype, dims)
    return out


def _explicit(out: ModelProto, i: int, facts: GraphFacts, key: str, used: set[str] | None = None) -> None:
    n = out.graph.node[i]
    if n.op_type == "Unsqueeze":
        raise FixError(
            f"Unsqueeze '{key}' always carries its axes (ONNX requires them); nothing to make explicit"
        )
    if n.op_type != "Squeeze":
        raise FixError(f"node '{key}' is a {n.op_type}, not a Squeeze")
    if _has_axes(n):
        raise FixError(f"Squeeze '{key}' already has axes")
    info = facts.info(n.input[0])
    if info.shape is None:
        raise FixError(f"the rank of '{n.input[0]}' is unknown; freeze the input shapes first")
    axes = [k for k, d in enumerate(info.shape) if d == 1]
    if not axes:
        raise FixError(
            f"'{n.input[0]}' has no static dimension of size 1 ({info.shape_str()}); nothing to squeeze. "
            "Note: a dynamic dim is never listed (see the module doc); freeze the shapes first"
        )
    if (opset_of(out) or 0) >= 13:
        name = fresh_name(out, f"{n.name or 'Squeeze'}/axes", used)
        add_initializer(out.graph, np.array(axes, np.int64), name)
        if len(n.input) == 1:
            n.input.append(name)
        else:
            n.input[1] = name
    else:
        n.attribute.append(helper.make_attribute("axes", axes))
