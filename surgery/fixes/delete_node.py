"""Delete a node and wire its first input to the readers of its first output."""

from __future__ import annotations

from onnx import ModelProto

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import bypass, copy_model, find_node
from surgery.graph import GraphFacts


@register(
    "delete_node",
    safety=Safety.CHANGES_SEMANTICS,
    summary="Remove a node; its first input takes the place of its first output.",
    params={
        "node": "node key (str); refused unless its first input and first output have the same inferred "
        "dtype and shape and its other outputs are unused",
    },
)
def delete_node(model: ModelProto, node: str) -> ModelProto:
    out = copy_model(model)
    i = find_node(out, node)
    n = out.graph.node[i]
    if not n.input or not n.output:
        raise FixError(f"node '{node}' has no input to pass through")
    facts = GraphFacts.of(model)
    a, b = facts.info(n.input[0]), facts.info(n.output[0])
    if a.dtype and b.dtype and a.dtype != b.dtype:
        raise FixError(
            f"'{node}' turns {a.dtype_name} into {b.dtype_name}; deleting it would change the type"
        )
    if a.shape is not None and b.shape is not None and a.shape != b.shape:
        raise FixError(
            f"'{node}' turns shape {a.shape_str()} into {b.shape_str()}; deleting it would change shapes"
        )
    others = [o for o in n.output[1:] if o and facts.consumers.get(o)]
    if others:
        raise FixError(f"'{node}' has other outputs in use ({others}); cannot delete it")
    bypass(out.graph, i)
    return out
