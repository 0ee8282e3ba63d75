"""Standard ONNX operators that some backend or version lacks, decomposed into ops it has (LayerNormalization
with extra outputs, GroupNormalization, AffineGrid, Col2Im, DFT/STFT, Gelu, HardSwish, ...).

Each function is registered with `@decomposition("", op)` (see surgery.fixes.decompose)."""

from __future__ import annotations

from surgery.fixes.decompose import decomposition  # noqa: F401
