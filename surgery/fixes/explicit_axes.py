"""Write out the axes of Squeeze/Unsqueeze nodes that have none.

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


@register(
    "explicit_squeeze_axes",
    safety=Safety.APPROXIMATE,
    summary="Give a Squeeze without axes the explicit axes of its static size-1 dims.",
    params={"node": "key of the Squeeze node"},
)
def explicit_squeeze_axes(model: ModelProto, node: str) -> ModelProto:
    out = copy_model(model)
    i = find_node(out, node)
    n = out.graph.node[i]
    if n.op_type != "Squeeze":
        raise FixError(f"node '{node}' is a {n.op_type}, not a Squeeze")
    has_axes = (len(n.input) > 1 and n.input[1]) or any(a.name == "axes" for a in n.attribute)
    if has_axes:
        raise FixError(f"Squeeze '{node}' already has axes")
    info = GraphFacts.of(model).info(n.input[0])
    if info.shape is None:
        raise FixError(f"the rank of '{n.input[0]}' is unknown; freeze the input shapes first")
    axes = [k for k, d in enumerate(info.shape) if d == 1]
    if not axes:
        raise FixError(
            f"'{n.input[0]}' has no static dimension of size 1 ({info.shape_str()}); nothing to squeeze"
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
    return out
