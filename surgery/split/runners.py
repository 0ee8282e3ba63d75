"""Running one part of a plan: through its own backend where this machine can run it, else onnxruntime.

onnxruntime runs anything it supports. OpenVINO (CPU, fp32 precision hint) and TVM (Relax, llvm) run here when
installed. A TensorRT engine needs an NVIDIA GPU and full TensorRT: a TensorRT part runs on onnxruntime, and the
plan says so. A runner is `feeds -> {output name: array}`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from onnx import ModelProto

Runner = Callable[[dict], dict]
RUNNABLE = ("onnxruntime", "openvino", "tvm")


def can_run(backend: str) -> tuple[bool, str]:
    """Whether parts for `backend` can run through it here, and why not."""
    name = backend.split("@")[0]
    if name == "onnxruntime":
        return True, ""
    if name in ("openvino", "tvm"):
        if importlib.util.find_spec(name) is None:
            return False, f"{name} is not installed"
        return True, ""
    if name.startswith("tensorrt"):
        return False, "TensorRT engines need an NVIDIA GPU and full TensorRT; none here"
    return False, f"no runner for {backend}"


def make_runner(backend: str, model: ModelProto, base_dir=None) -> tuple[Runner, str, str]:
    """(runner, the backend it runs on, a note when that is not `backend`)."""
    ok, why = can_run(backend)
    name = backend.split("@")[0] if ok else "onnxruntime"
    note = "" if ok else f"ran on onnxruntime: {why}"
    if name == "openvino":
        from surgery.backends.openvino.run import runner
    elif name == "tvm":
        from surgery.backends.tvm.run import runner
    else:
        name = "onnxruntime"
        from surgery.backends.onnxruntime.run import runner
    return runner(model, base_dir), name, note
