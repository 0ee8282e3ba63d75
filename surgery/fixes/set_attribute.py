"""Set (or remove) one attribute of one node, e.g. Resize antialias=0 for a backend without antialiasing.

What the change does to the results depends on the attribute, so the primitive is classed as changing
semantics; a rule that uses it states its own class and why (a rule file's `safety`).
"""

from __future__ import annotations

from onnx import ModelProto, helper

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import copy_model, find_node


@register(
    "set_attribute",
    safety=Safety.CHANGES_SEMANTICS,
    summary="Set one attribute of one node to a given value (or remove it with value null).",
    params={
        "node": "node key (str) of the node to change",
        "name": "str: the attribute's name",
        "value": "the new value (int, float, str, or a list of one of those); null removes the attribute",
    },
)
def set_attribute(model: ModelProto, node: str, name: str, value=None) -> ModelProto:
    out = copy_model(model)
    n = out.graph.node[find_node(out, node)]
    old = [a for a in n.attribute if a.name == name]
    if value is None:
        if not old:
            raise FixError(f"node '{node}' has no attribute '{name}' to remove")
    elif old and helper.get_attribute_value(old[0]) == (value.encode() if isinstance(value, str) else value):
        raise FixError(f"attribute '{name}' of node '{node}' is already {value!r}")
    if value is None:
        keep = [a for a in n.attribute if a.name != name]
        del n.attribute[:]
        n.attribute.extend(keep)
        return out
    try:
        new = helper.make_attribute(name, value)
    except (TypeError, ValueError) as exc:
        raise FixError(
            f"cannot set attribute '{name}' of node '{node}' to {value!r}: {exc}. "
            "Note: values are int, float, str or a list of one of those"
        ) from None
    if old:
        old[0].CopyFrom(
            new
        )  # in place: the attribute keeps its position, so the same edit gives the same bytes
    else:
        n.attribute.append(new)
    return out
