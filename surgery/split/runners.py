"""Running one part of a plan: through its own backend where this machine can run it, else onnxruntime.

onnxruntime runs anything it supports. OpenVINO (CPU, fp32 precision hint) and TVM (Relax, llvm) run here when
installed. A TensorRT engine needs an NVIDIA GPU and full TensorRT: a TensorRT part runs on onnxruntime, and the
plan says so. A runner is `feeds -> {output name: array}`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import numpy as np
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
        return _openvino(model, base_dir), "openvino", note
    if name == "tvm":
        return _tvm(model, base_dir), "tvm", note
    return _onnxruntime(model, base_dir), "onnxruntime", note


def _onnxruntime(model: ModelProto, base_dir) -> Runner:
    from surgery.ort import make_session

    sess = make_session(model, base_dir)
    names = [o.name for o in sess.get_outputs()]
    wanted = [i.name for i in sess.get_inputs()]

    def run(feeds: dict) -> dict:
        return dict(zip(names, sess.run(names, {k: feeds[k] for k in wanted})))

    return run


def _openvino(model: ModelProto, base_dir) -> Runner:
    import openvino as ov

    from surgery.model import private_copy

    core = ov.Core()
    with private_copy(model, base_dir) as path:
        read = core.read_model(path)
        compiled = core.compile_model(read, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    wanted = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    outputs = [o.name for o in model.graph.output]

    def run(feeds: dict) -> dict:
        got = {}
        for port, value in request.infer({k: feeds[k] for k in wanted}).items():
            for n in port.get_names():
                got[n] = np.asarray(value)
        return {n: got[n] for n in outputs if n in got}

    return run


def _tvm(model: ModelProto, base_dir) -> Runner:
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from surgery.builders.tvm import _outputs, _with_weights

    ex = tvm.compile(from_onnx(_with_weights(model, base_dir)), target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    inits = {i.name for i in model.graph.initializer}
    order = [i.name for i in model.graph.input if i.name not in inits]
    names = [o.name for o in model.graph.output]

    def run(feeds: dict) -> dict:
        args = [tvm.runtime.tensor(feeds[n]) for n in order]
        return {n: np.asarray(v.numpy()) for n, v in zip(names, _outputs(vm["main"](*args)))}

    return run
