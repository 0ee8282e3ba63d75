"""The backend registry: ids → backend objects, imported lazily so a missing optional backend costs nothing.

Ids: `tensorrt` (live parser), `tensorrt-static@<version>` (predicted), `onnxruntime`, `openvino`, `tvm`.
"""

from __future__ import annotations

import importlib

from surgery.backends.base import Availability, Backend, error_line

BACKEND_IDS = ["tensorrt", "tensorrt-static", "onnxruntime", "openvino", "tvm"]
_CLASSES = {
    "tensorrt": ("surgery.backends.tensorrt.live", "TensorRTBackend"),
    "onnxruntime": ("surgery.backends.onnxruntime.check", "OnnxRuntimeBackend"),
    "openvino": ("surgery.backends.openvino.check", "OpenVINOBackend"),
    "tvm": ("surgery.backends.tvm.check", "TVMBackend"),
}
# what each backend that checks in an isolated worker imports there (surgery.isolate.prewarm starts that worker
# before the model is read); TensorRT imports whichever of its two packages is installed
WORKER_IMPORTS = {
    "openvino": ("openvino", "surgery.backends.openvino.convert", "surgery.backends.openvino.build"),
    "tvm": ("tvm", "tvm.relax.frontend.onnx", "surgery.backends.tvm.check", "surgery.backends.tvm.build"),
    "tensorrt": ("tensorrt", "tensorrt_rtx", "surgery.backends.tensorrt.worker"),
}
_instances: dict[str, Backend] = {}
_factories: dict[str, object] = {}


class UnknownBackend(ValueError):
    pass


def get_backend(backend_id: str) -> Backend:
    """A backend by id, e.g. "onnxruntime" or "tensorrt-static@8.2". Instances are shared per process."""
    if backend_id in _instances:
        return _instances[backend_id]
    name, _, version = backend_id.partition("@")
    if backend_id in _factories:
        backend = _factories[backend_id]()
    elif name == "tensorrt-static":
        tensorrt_static = _module("surgery.backends.tensorrt.predictor", backend_id)
        if not version:
            raise UnknownBackend(
                "tensorrt-static needs a version, e.g. tensorrt-static@8.2. Note: available: "
                + ", ".join(static_versions())
            )
        try:
            backend = tensorrt_static.make(version)
        except ValueError as exc:
            raise UnknownBackend(str(exc)) from None
    elif name in _CLASSES and not version:
        module, cls = _CLASSES[name]
        backend = getattr(_module(module, backend_id), cls)()
    else:
        raise UnknownBackend(
            f"unknown target '{backend_id}'. Note: available: tensorrt, tensorrt-static@<version>, onnxruntime, "
            "openvino, tvm (see `onnx-surgery targets`)"
        )
    _instances[backend_id] = backend
    return backend


def register(backend_id: str, factory) -> None:
    """Add a backend under `backend_id` (a plugin's own target, or a test's): `factory()` builds it on first use."""
    _factories[backend_id] = factory
    _instances.pop(backend_id, None)


def _module(module: str, backend_id: str):
    """Import a backend module; one that is not part of this installation is a clear error, not a traceback."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise  # the module exists but a dependency of it is missing: let the real error through
        raise UnknownBackend(
            f"target '{backend_id}' is not implemented in this installation ({module} is missing). Note: "
            "available: " + ", ".join(_implemented())
        ) from None


def _implemented() -> list[str]:
    import importlib.util

    found = [n for n, (m, _) in _CLASSES.items() if importlib.util.find_spec(m) is not None]
    if importlib.util.find_spec("surgery.backends.tensorrt.predictor") is not None:
        found.insert(1, "tensorrt-static@<version>")
    return found


def static_versions() -> list[str]:
    """The TensorRT versions the static predictor knows, oldest first ([] when it is not installed)."""
    import importlib.util

    if importlib.util.find_spec("surgery.backends.tensorrt.predictor") is None:
        return []
    from surgery.backends.tensorrt import records

    return list(records.SUPPORTED_VERSIONS)


def list_backends() -> list[tuple[str, str, str, Availability]]:
    """(id, label, version, availability) for every backend, with the static predictor's newest version."""
    try:
        static = f"tensorrt-static@{static_versions()[-1]}"
    except Exception:
        static = "tensorrt-static"
    rows = []
    for backend_id in ["tensorrt", static, "onnxruntime", "openvino", "tvm"]:
        try:
            b = get_backend(backend_id)
            rows.append((b.id, b.label, b.version, b.availability()))
        except Exception as exc:  # a backend that cannot even be constructed says why
            rows.append((backend_id, backend_id, "", Availability(False, error_line(exc))))
    return rows
