"""Inference mode: remove Dropout, set BatchNormalization training_mode=0 (what `model.eval()` exports)."""

from __future__ import annotations

from onnx import ModelProto, helper

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import bypass, copy_model


@register(
    "inference_mode",
    safety=Safety.CHANGES_SEMANTICS,
    summary="Remove Dropout and set BatchNormalization training_mode=0 (the model as exported in eval mode).",
    params={
        "nodes": "list of node keys to change (default: every Dropout and every BatchNormalization in "
        "training mode, i.e. training_mode=1 or, before opset 14, with running-statistics outputs)",
    },
)
def inference_mode(model: ModelProto, nodes=None) -> ModelProto:
    out = copy_model(model)
    graph = out.graph
    from surgery.graph import node_keys

    keys = node_keys(graph.node)
    wanted = set(nodes) if nodes else None
    changed = 0
    for i in reversed(range(len(graph.node))):
        node, key = graph.node[i], keys[i]
        if wanted is not None and key not in wanted:
            continue
        if node.op_type == "Dropout" and not node.domain:
            if len(node.output) > 1 and node.output[1] and any(node.output[1] in n.input for n in graph.node):
                raise FixError(f"Dropout '{key}' has its mask output in use; remove that reader first")
            bypass(graph, i)
            changed += 1
        elif node.op_type == "BatchNormalization" and not node.domain:
            attr = next((a for a in node.attribute if a.name == "training_mode"), None)
            # opset >= 14 says training_mode=1; opsets 9-13 say it with the extra outputs (mean, var, ...)
            if (attr is not None and attr.i) or (attr is None and len([o for o in node.output if o]) > 1):
                extra = [o for o in node.output[1:] if o]
                if any(o in n.input for n in graph.node for o in extra) or any(
                    o.name in extra for o in graph.output
                ):
                    raise FixError(f"BatchNormalization '{key}' has its running statistics outputs in use")
                if attr is not None:
                    attr.CopyFrom(helper.make_attribute("training_mode", 0))
                del node.output[1:]
                changed += 1
    if not changed:
        raise FixError("no Dropout and no BatchNormalization in training mode to change")
    return out
