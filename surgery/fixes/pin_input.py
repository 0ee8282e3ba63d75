"""Pin a graph input to a value: the input becomes an initializer of that value, after which the constant-folding
rules can fold what it feeds. For inputs that only carry configuration (a crop size, a number of mel bins, a K):
the model stops taking that input, so this changes what the model is, on purpose."""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, helper

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import add_initializer, copy_model
from surgery.graph import tensor_info_from_type


@register(
    "pin_input",
    safety=Safety.CHANGES_SEMANTICS,
    summary="Turn a graph input into a constant of a given value (it is no longer an input).",
    params={
        "input": "str: the graph input's name",
        "value": "a number or a (nested) list of numbers; cast to the input's type, shaped as the input "
        "(a symbolic dim takes the value's size)",
    },
)
def pin_input(model: ModelProto, input: str, value) -> ModelProto:
    out = copy_model(model)
    graph = out.graph
    inits = {t.name for t in graph.initializer}
    k = next((k for k, vi in enumerate(graph.input) if vi.name == input and input not in inits), None)
    if k is None:
        names = ", ".join(vi.name for vi in graph.input if vi.name not in inits)
        raise FixError(f"the model has no graph input '{input}'. Note: its inputs are {names}")
    info = tensor_info_from_type(input, graph.input[k].type)
    if not info.dtype:
        raise FixError(f"input '{input}' is not a tensor of a known type; it cannot be pinned to a value")
    np_type = helper.tensor_dtype_to_np_dtype(info.dtype)
    array = _cast(input, value, np.dtype(np_type))
    if info.shape is not None:
        if array.ndim != len(info.shape) and array.size == 1 and len(info.shape) <= 1:
            array = array.reshape([1] * len(info.shape))
        fits = array.ndim == len(info.shape) and all(
            not isinstance(d, int) or d == s for d, s in zip(info.shape, array.shape)
        )
        if not fits:
            raise FixError(
                f"input '{input}' has shape {info.shape_str()}; the value {value!r} has shape {list(array.shape)}"
            )
    del graph.input[k]
    add_initializer(graph, array, input)
    return out


def _cast(input: str, value, dtype: np.dtype) -> np.ndarray:
    """`value` as an array of the input's type, refused (FixError) where the cast would change it: NaN or
    infinity, a fraction for an integer input, a number outside the type's range."""
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError, OverflowError):
        raw = np.asarray(None)
    if (
        raw.dtype.kind == "O"
        and dtype.kind in "iu"
        and all(isinstance(v, int) for v in raw.reshape(-1).tolist())
    ):
        limits = np.iinfo(dtype)  # Python ints numpy cannot hold in 64 bits
        raise FixError(f"input '{input}' is {dtype.name}; {shown} is outside [{limits.min}, {limits.max}]")
    if raw.dtype.kind not in "biuf":
        raise FixError(f"input '{input}' is {dtype.name}; {shown} is not a value of that type")
    if raw.dtype.kind == "f" and not np.all(np.isfinite(raw)):
        raise FixError(f"input '{input}': {shown} holds NaN or infinity; a pinned value is finite")
    if dtype.kind in "iu":
        if raw.dtype.kind == "f" and np.any(raw != np.round(raw)):
            raise FixError(f"input '{input}' is {dtype.name}; {shown} is not a whole number")
        limits = np.iinfo(dtype)
        if raw.size and (raw.min() < limits.min or raw.max() > limits.max):
            raise FixError(
                f"input '{input}' is {dtype.name}; {shown} is outside [{limits.min}, {limits.max}]"
            )
    elif dtype.kind == "f" and raw.size and np.max(np.abs(raw.astype(np.float64))) > np.finfo(dtype).max:
        raise FixError(f"input '{input}' is {dtype.name}; {shown} is beyond its largest value")
    elif dtype.kind == "b" and not np.all(np.isin(raw, (0, 1))):
        raise FixError(f"input '{input}' is bool; {shown} is not 0, 1, true or false")
    return raw.astype(dtype)
