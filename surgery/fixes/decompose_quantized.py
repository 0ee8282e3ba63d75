"""Quantized operators (QOperator form, integer ops) rewritten into the Q/DQ form TensorRT imports.

Each function is registered with `@decomposition(domain, op)` (see surgery.fixes.decompose)."""

from __future__ import annotations

from surgery.fixes.decompose import decomposition  # noqa: F401
