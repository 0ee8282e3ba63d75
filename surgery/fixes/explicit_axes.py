"""Write out the axes of Squeeze nodes that have none (an Unsqueeze always has its axes: ONNX requires them).

Without axes, Squeeze drops every dimension of size 1. The explicit axes are the *static* dims of size 1: a
dynamic dim (e.g. the batch) is never listed, because it is not known to be 1. If such a dim is 1 at run time,
the original would also have dropped it and the fixed model will not: that corner changes semantics, which
is why this fix is not classed exact. TensorRT refuses to guess at all ("Cannot infer squeeze dimensions from
a dynamic shape!").
"""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, helper, numpy_helper

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import copy_model, find_node, fresh_name, opset
from surgery.graph import GraphFacts


def _has_axes(n) -> bool:
    return bool((len(n.input) > 1 and n.input[1]) or any(a.name == "axes" for a in n.attribute))


@register(
    "explicit_squeeze_axes",
    safety=Safety.APPROXIMATE,
    summary="Give a Squeeze without axes the explicit axes of its static size-1 dims.",
    params={
        "node": "node key (str) of the Squeeze; default: every Squeeze without axes whose input has static "
        "size-1 dims (the others are left alone)",
    },
)
def explicit_squeeze_axes(model: ModelProto, node: str | None = None) -> ModelProto:
    out = copy_model(model)
    facts = GraphFacts.of(model)
    if node is None:
        todo = [
            i
            for i, n in enumerate(out.graph.node)
            if n.op_type == "Squeeze" and not n.domain and not _has_axes(n)
        ]
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
    _explicit(out, find_node(out, node), facts, node)
    return out


def _explicit(out: ModelProto, i: int, facts: GraphFacts, key: str) -> None:
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
    if opset(out) >= 13:
        name = fresh_name(out, f"{n.name or 'Squeeze'}/axes")
        out.graph.initializer.append(numpy_helper.from_array(np.array(axes, np.int64), name))
        if len(n.input) == 1:
            n.input.append(name)
        else:
            n.input[1] = name
    else:
        n.attribute.append(helper.make_attribute("axes", axes))
