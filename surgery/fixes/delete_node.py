"""Delete a node and wire its first input to the readers of its first output."""

from __future__ import annotations

from onnx import ModelProto

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import bypass, copy_model, find_node
from surgery.graph import GraphFacts

# ops whose first output always has their first input's shape: deletable even when shapes are not inferred
SHAPE_PRESERVING = frozenset(
    {
        "Identity",
        "Dropout",
        "Relu",
        "LeakyRelu",
        "Sigmoid",
        "Tanh",
        "Elu",
        "Selu",
        "Celu",
        "Gelu",
        "HardSigmoid",
        "HardSwish",
        "Softplus",
        "Softsign",
        "Mish",
        "Neg",
        "Abs",
        "Exp",
        "Log",
        "Sqrt",
        "Clip",
        "Erf",
        "Floor",
        "Ceil",
        "Round",
        "Sign",
        "Reciprocal",
        "Softmax",
        "LogSoftmax",
        "BatchNormalization",
        "LpNormalization",
        "InstanceNormalization",
        "LayerNormalization",
        "Cast",
        "CastLike",
    }
)


def _same_shape(a, b) -> bool | None:
    """True when provably equal, False when provably different, None when unknown dims leave it open."""
    if a is None or b is None:
        return None
    if len(a) != len(b):
        return False
    unknown = False
    for x, y in zip(a, b):
        if isinstance(x, int) and isinstance(y, int):
            if x != y:
                return False
        elif not (isinstance(x, str) and x == y and not x.startswith("unk__")):
            unknown = True
    return None if unknown else True


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
    same = _same_shape(a.shape, b.shape)
    if same is False:
        raise FixError(
            f"'{node}' turns shape {a.shape_str()} into {b.shape_str()}; deleting it would change shapes"
        )
    if same is None and not (n.op_type in SHAPE_PRESERVING and n.domain in ("", "ai.onnx")):
        raise FixError(
            f"cannot tell whether '{node}' ({n.op_type}) keeps the shape ({a.shape_str()} -> {b.shape_str()}). "
            "Note: freeze the input shapes first, so that both shapes are known"
        )
    others = [o for o in n.output[1:] if o and facts.consumers.get(o)]
    if others:
        raise FixError(f"'{node}' has other outputs in use ({others}); cannot delete it")
    bypass(out.graph, i)
    return out
