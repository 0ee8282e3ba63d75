"""Freeze input shapes: fixed dims for dynamic or unknown input shapes, then infer shapes and fold."""

from __future__ import annotations

import onnx
from onnx import ModelProto

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import copy_model
from surgery.fixes.fold_constants import fold_constants
from surgery.graph import is_static_dim
from surgery.text import first_line


def _set_shape(vi: onnx.ValueInfoProto, dims: list) -> None:
    """Sizes where `dims` gives them; a name (str) becomes that dim_param; None keeps the dim the input has there
    (else a dim_param of its own): '?x3x224x224' freezes all but the batch."""
    tt = vi.type.tensor_type
    old = list(tt.shape.dim) if tt.HasField("shape") else []
    kept = []
    for k in range(len(dims)):
        copy = onnx.TensorShapeProto.Dimension()
        if k < len(old):
            copy.CopyFrom(old[k])
        kept.append(copy)
    tt.ClearField("shape")
    shape = tt.shape
    shape.SetInParent()
    for k, d in enumerate(dims):
        dim = shape.dim.add()
        if isinstance(d, str):
            dim.dim_param = d
        elif d is None:
            if kept[k].WhichOneof("value") == "dim_param" or is_static_dim(kept[k]):
                dim.CopyFrom(kept[k])
            else:  # none there, or a -1 written as a size
                dim.dim_param = f"{vi.name}_dim{k}"
        else:
            dim.dim_value = int(d)


@register(
    "freeze_shapes",
    safety=Safety.CHANGES_SEMANTICS,
    summary="Give inputs fixed shapes (by input, or by symbolic dim name), infer shapes again, fold constants.",
    params={
        "shapes": "dict input name -> list of dims (the full shape; a dim already fixed must match; a name or None "
        "keeps that dim dynamic)",
        "dims": "dict symbolic dim name -> int size, applied to every input that uses that name",
        "fold": "bool: fold constants afterwards, so Shape chains become initializers (default true)",
        "base_dir": "str: folder of the model's external data (the workspace sets it)",
    },
)
def freeze_shapes(model: ModelProto, shapes=None, dims=None, fold=True, base_dir=None) -> ModelProto:
    if not shapes and not dims:
        raise FixError("freeze_shapes needs `shapes` (input -> dims) or `dims` (symbolic name -> size)")
    out = copy_model(model)
    inits = {t.name for t in out.graph.initializer}
    inputs = {vi.name: vi for vi in out.graph.input if vi.name not in inits}
    for name, new in (shapes or {}).items():
        if name not in inputs:
            raise FixError(f"no graph input '{name}'. Note: inputs are {sorted(inputs)}")
        old = inputs[name].type.tensor_type
        if old.HasField("shape") and len(old.shape.dim) not in (0, len(new)) and old.shape.dim:
            raise FixError(
                f"input '{name}' has rank {len(old.shape.dim)}; the new shape {new} has rank {len(new)}"
            )
        for k, d in enumerate(old.shape.dim if old.HasField("shape") else []):
            if is_static_dim(d) and isinstance(new[k], int) and d.dim_value != new[k]:
                raise FixError(
                    f"input '{name}' dim {k} is fixed at {d.dim_value}; cannot freeze it to {new[k]}"
                )
        _set_shape(inputs[name], new)
    unmatched = set(dims or {})
    for vi in inputs.values():
        tt = vi.type.tensor_type
        for d in tt.shape.dim if tt.HasField("shape") else []:
            if d.HasField("dim_param") and d.dim_param in (dims or {}):
                unmatched.discard(d.dim_param)
                d.dim_value = int(dims[d.dim_param])
    if unmatched:
        raise FixError(f"no input uses the symbolic dim(s) {sorted(unmatched)}")
    # value_info and outputs recorded for the old shapes may now be stale: let inference redo them
    del out.graph.value_info[:]
    try:
        out = onnx.shape_inference.infer_shapes(out, strict_mode=True)
    except Exception as exc:
        raise FixError(
            f"shape inference fails with the frozen shapes: {first_line(str(exc)) or type(exc).__name__}"
        ) from None
    return fold_constants(out, base_dir=base_dir) if fold else out
