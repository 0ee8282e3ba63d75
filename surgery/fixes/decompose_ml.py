"""Classical ML (ai.onnx.ml) operators decomposed into standard ONNX ops that TensorRT and OpenVINO import.

Each function is registered with `@decomposition("ai.onnx.ml", op)` (see surgery.fixes.decompose)."""

from __future__ import annotations

from surgery.fixes.decompose import decomposition  # noqa: F401
