"""Fix primitives: pure functions `fn(model, **params) -> ModelProto`, one module each, registered by id.

A primitive never mutates its input (it works on a copy) and never reads a rule file: rules name a primitive
and its parameters; the registry is the only way from a name to code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from onnx import ModelProto

from surgery.verdict import Safety


class FixError(Exception):
    """A primitive refuses: the message says why and what would work."""


@dataclass(frozen=True)
class FixPrimitive:
    id: str
    fn: Callable[..., ModelProto]
    safety: Safety
    summary: str
    params: dict[str, str]  # name -> one-line description
    batch: str | None = None  # a parameter that also takes a list: one call does the work for every entry

    def __call__(self, model: ModelProto, **params) -> ModelProto:
        unknown = set(params) - set(self.params)
        if unknown:
            raise FixError(
                f"fix '{self.id}' got unknown parameter(s) {sorted(unknown)}. Note: it takes {sorted(self.params)}"
            )
        return self.fn(model, **params)


_REGISTRY: dict[str, FixPrimitive] = {}
# modules that register primitives on import; new primitives add their module here
_MODULES = [
    "fold_constants",
    "plugin_swap",
    "plugin_to_ops",
    "freeze_shapes",
    "int64_to_int32",
    "explicit_axes",
    "training_mode",
    "decompose",
    "opset_upgrade",
    "extract",
    "delete_node",
    "set_attribute",
    "inline_functions",
    "deform_conv",
    "decompose_detection",
    "decompose_llm",
    "pin_input",
    "quantized",
    "quantize",
    "keep_fp32",
]
_loaded = False


def register(
    id: str, *, safety: Safety, summary: str, params: dict[str, str] | None = None, batch: str | None = None
):
    """Register a primitive. `batch` names a parameter that also takes a list (e.g. "node"): a rule applied to
    many nodes then makes one call, which can compute the graph facts once for all of them."""

    def deco(fn: Callable[..., ModelProto]) -> Callable[..., ModelProto]:
        _REGISTRY[id] = FixPrimitive(id, fn, safety, summary, params or {}, batch)
        return fn

    return deco


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    for mod in _MODULES:
        importlib.import_module(f"{__name__}.{mod}")
    _loaded = True


def get_fix(id: str) -> FixPrimitive:
    _load_all()
    try:
        return _REGISTRY[id]
    except KeyError:
        raise FixError(
            f"unknown fix primitive '{id}'. Note: available: {', '.join(sorted(_REGISTRY))}"
        ) from None


def all_fixes() -> dict[str, FixPrimitive]:
    _load_all()
    return dict(_REGISTRY)
