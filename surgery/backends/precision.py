"""Lower a model's float32 math to float16 or bfloat16 in the graph itself: how strongly typed builders
(TensorRT 11, TensorRT-RTX) and onnxruntime are given reduced precision (surgery.mixed_precision, nothing kept)."""

from __future__ import annotations

from onnx import ModelProto

from surgery.mixed_precision import mixed_precision_model


def lower_precision(model: ModelProto, precision: str, base_dir=None) -> ModelProto:
    """A copy of `model` computing in `precision` ("fp16" | "bf16"). External weights are read from `base_dir`
    and the lowered ones are kept in the copy itself."""
    return mixed_precision_model(model, precision, (), base_dir)
