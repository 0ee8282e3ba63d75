"""INT64 initializers outside the INT32 range, made safe for parsers that cast INT64 down (TensorRT < 9).

ONNX fixes the type of many integer inputs to INT64 (Slice starts/ends, Reshape shape, TopK K, ...), so the
tensors cannot simply become INT32. What changes results is a value that does not fit in INT32: TensorRT < 9
clamps it. This fix rewrites the values that can be rewritten exactly — Slice starts/ends beyond the
dimension are clamped to the dimension (the same slice) — and refuses, naming the tensor and its values,
where a value outside INT32 carries data.
"""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, numpy_helper

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import copy_model
from surgery.graph import GraphFacts

I32 = np.iinfo(np.int32)


def _out_of_range(a: np.ndarray) -> np.ndarray:
    return a[(a > I32.max) | (a < I32.min)]


@register(
    "int64_to_int32",
    safety=Safety.EXACT,
    summary="Bring INT64 initializers into the INT32 range where that is exact (Slice bounds); refuse otherwise.",
    params={"only_slice_bounds": "leave other initializers alone instead of refusing (default false)"},
)
def int64_to_int32(model: ModelProto, only_slice_bounds=False) -> ModelProto:
    out = copy_model(model)
    facts = GraphFacts.of(model)
    inits = {t.name: t for t in out.graph.initializer}
    readers: dict[str, list[tuple[str, int]]] = {}
    for n in out.graph.node:
        for k, x in enumerate(n.input):
            readers.setdefault(x, []).append((n, k))
    changed, refused = 0, []
    for name, t in inits.items():
        if t.data_type != TensorProto.INT64:
            continue
        values = numpy_helper.to_array(t)
        bad = _out_of_range(values)
        if not bad.size:
            continue
        uses = readers.get(name, [])
        if uses and all(n.op_type == "Slice" and k in (1, 2) for n, k in uses):
            fixed = values.copy()
            for n, _ in uses:  # clamp to the sliced dims where known, else to the INT32 range
                axes = _slice_axes(n, inits, len(values))
                shape = facts.info(n.input[0]).shape
                for j, ax in enumerate(axes):
                    dim = shape[ax] if shape is not None and ax < len(shape) else None
                    hi = dim if isinstance(dim, int) else I32.max
                    fixed[j] = int(np.clip(fixed[j], -hi - 1, hi))
            if len(uses) > 1 and any(
                _slice_axes(n, inits, len(values)) != _slice_axes(uses[0][0], inits, len(values))
                for n, _ in uses
            ):
                fixed = np.clip(values, I32.min, I32.max)
            t.CopyFrom(numpy_helper.from_array(fixed.astype(np.int64), name))
            changed += 1
        elif not only_slice_bounds:
            readers_txt = ", ".join(f"{n.op_type} '{n.name}'" for n, _ in uses) or "no node"
            refused.append(f"'{name}' = {bad[:4].tolist()} (read by {readers_txt})")
    if refused:
        raise FixError(
            "INT64 values outside the INT32 range carry data, so casting them down would change results: "
            + "; ".join(refused)
            + ". Note: keep these in INT64 (TensorRT >= 9 supports it), or fix the export"
        )
    if not changed:
        raise FixError(
            "no INT64 initializer holds a value outside the INT32 range that can be rewritten exactly"
        )
    return out


def _slice_axes(node, inits, count: int) -> list[int]:
    if len(node.input) > 3 and node.input[3] in inits:
        return [int(a) for a in numpy_helper.to_array(inits[node.input[3]]).reshape(-1)]
    return list(range(count))
