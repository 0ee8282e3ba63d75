"""The `mixed_precision` fix primitive: float16/bfloat16 everywhere but the nodes kept in float32
(surgery.mixed_precision)."""

from __future__ import annotations

from onnx import ModelProto

from surgery.fixes import FixError, Safety, register
from surgery.mixed_precision import mixed_precision_model


@register(
    "mixed_precision",
    safety=Safety.APPROXIMATE,
    summary="Compute in float16/bfloat16 except the nodes kept in float32, with Casts where they meet.",
    params={
        "precision": "str: fp16 | bf16",
        "keep": "list of node names (keys) left in float32",
        "base_dir": "str: folder of the model's external data (the workspace sets it)",
    },
)
def mixed_precision(model: ModelProto, precision: str = "fp16", keep=(), base_dir=None) -> ModelProto:
    try:
        return mixed_precision_model(model, precision, list(keep or ()), base_dir)
    except ValueError as exc:
        raise FixError(str(exc)) from None
