"""Convert the model to another opset with onnx's version converter."""

from __future__ import annotations

from onnx import ModelProto, version_converter

from surgery.fixes import FixError, Safety, register
from surgery.graph import opset_of
from surgery.text import first_line


@register(
    "opset_upgrade",
    safety=Safety.EXACT,
    summary="Convert the model to the target opset (onnx.version_converter).",
    params={"target": "int: the ai.onnx opset to convert to (ir_version is raised if that opset needs it)"},
)
def opset_upgrade(model: ModelProto, target: int) -> ModelProto:
    if opset_of(model) == int(target):
        raise FixError(f"the model is already at opset {target}")
    try:
        out = version_converter.convert_version(model, int(target))
    except Exception as exc:
        raise FixError(
            f"onnx's version converter failed: {first_line(str(exc)) or type(exc).__name__}"
        ) from None
    from onnx.helper import find_min_ir_version_for

    out.ir_version = max(model.ir_version, find_min_ir_version_for(list(out.opset_import)))
    # nodes the converter adds (e.g. Constant axes for Unsqueeze at 13) have no name: give them stable ones
    used = {n.name for n in out.graph.node if n.name}
    for i, n in enumerate(out.graph.node):
        if not n.name:
            name, k = f"{n.output[0] if n.output else n.op_type}/{n.op_type}", 1
            while name in used:
                name, k = f"{n.op_type}_{i}_{k}", k + 1
            n.name = name
            used.add(name)
    return out
