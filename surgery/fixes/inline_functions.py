"""Inline model-local functions (onnx's inliner): every call becomes the function's body, so a backend that does
not import local functions, or calls a plugin of the same name instead (TensorRT 10.7+ prefers a registered
plugin), sees plain ops."""

from __future__ import annotations

from onnx import ModelProto

from surgery.fixes import FixError, Safety, register


@register(
    "inline_functions",
    safety=Safety.EXACT,
    summary="Inline model-local functions into the graph (onnx.inliner).",
    params={
        "functions": "list of 'domain::name' (or 'name' in the default domain) to inline; default: every "
        "model-local function; functions nobody calls any more are dropped",
    },
)
def inline_functions(model: ModelProto, functions=None) -> ModelProto:
    import onnx.inliner

    local = {(f.domain, f.name) for f in model.functions}
    if not local:
        raise FixError("the model has no local functions to inline")
    if functions is None:
        return onnx.inliner.inline_local_functions(model)
    wanted = []
    for name in functions:
        domain, _, op = str(name).rpartition("::")
        if (domain, op) not in local:
            known = ", ".join(f"{d}::{n}" if d else n for d, n in sorted(local))
            raise FixError(f"no local function '{name}'. Note: the model's local functions are {known}")
        wanted.append((domain, op))
    return onnx.inliner.inline_selected_functions(model, wanted, exclude=False)
