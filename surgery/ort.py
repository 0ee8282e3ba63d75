"""Running models with onnxruntime: the runnable copy (IR version lowered where safe), sessions.

The model itself is never changed: only the copy handed to onnxruntime may carry a lower `ir_version`.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import EncodeError
from onnx import ModelProto, TensorProto, helper

from surgery.model import copy_message, has_external_data, save_model

# Minimal IR version that introduced each element type (onnx/onnx docs/IR.md, "IR version history").
_DTYPE_MIN_IR = {
    TensorProto.BFLOAT16: 4,
    TensorProto.FLOAT8E4M3FN: 9,
    TensorProto.FLOAT8E4M3FNUZ: 9,
    TensorProto.FLOAT8E5M2: 9,
    TensorProto.FLOAT8E5M2FNUZ: 9,
    TensorProto.UINT4: 10,
    TensorProto.INT4: 10,
    TensorProto.FLOAT4E2M1: 11,
}


@functools.cache
def max_ir_version() -> int:
    """The newest IR version this onnxruntime accepts, found by asking it (cached per process)."""
    import onnxruntime as ort

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    for ir in range(onnx.IR_VERSION + 2, 6, -1):
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=ir)
        try:
            ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            return ir
        except Exception:
            continue
    return 7


def _dtypes_used(model: ModelProto) -> set[int]:
    from onnx.external_data_helper import _get_all_tensors

    used = {t.data_type for t in _get_all_tensors(model)}
    g = model.graph
    for vi in [*g.input, *g.output, *g.value_info]:
        if vi.type.HasField("tensor_type"):
            used.add(vi.type.tensor_type.elem_type)
    return used


def runnable_ir(model: ModelProto) -> tuple[int, str]:
    """The IR version the run copy should carry, and why. Lowers only when nothing in the model needs more."""
    limit = max_ir_version()
    if model.ir_version <= limit:
        return model.ir_version, ""
    need = max((_DTYPE_MIN_IR.get(d, 3) for d in _dtypes_used(model)), default=3)
    if need > limit:
        return (
            model.ir_version,
            f"IR {model.ir_version} model uses element types that need IR {need} > {limit}",
        )
    return (
        limit,
        f"IR version lowered {model.ir_version} -> {limit} for onnxruntime (the model keeps its own)",
    )


def runnable_copy(model: ModelProto) -> ModelProto:
    ir, _ = runnable_ir(model)
    if ir == model.ir_version:
        return model
    copy = copy_message(model)
    copy.ir_version = ir
    return copy


def _serialized(model: ModelProto) -> bytes | None:
    """The model as one message; None past protobuf's 2 GiB (weights held in memory, as onnxruntime's quantizer
    leaves a 1B model), where protobuf raises EncodeError."""
    try:
        return model.SerializeToString()
    except EncodeError:
        return None


def _options(optimize: bool, config: dict[str, str] | None, opts: dict):
    """The session options every session here starts from (see `make_session`)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.enable_cpu_mem_arena = False
    so.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    for k, v in opts.items():
        setattr(so, k, v)
    for k, v in (config or {}).items():  # onnxruntime's session config entries, by their keys
        so.add_session_config_entry(k, v)
    return so


def make_session(
    model: ModelProto,
    base_dir: Path | str | None = None,
    *,
    optimize: bool = False,
    path: str | None = None,
    config: dict[str, str] | None = None,
    **opts,
):
    """An onnxruntime CPU session on the runnable copy. External data resolves against `base_dir`. `path`: the
    file `model` was read from, unedited (Model.file_as_read): onnxruntime reads it there, as its own call would,
    when the model needs no runnable copy (no serialization of the whole model here).

    onnxruntime's CPU memory arena is off unless `enable_cpu_mem_arena=True` is passed: these sessions run a model
    once or a few times to compare it, and the arena kept what a run allocated after its session was gone (a
    Llama-1B-shaped fp16 export: 3.5 GiB of a 5.9 GiB run stayed resident, so a second session, as split's
    verification makes, peaked at 9.5 GiB; without the arena 5.2 GiB, no slower). A build that times the
    deployed configuration passes it on. `config`: session config entries (onnxruntime's
    onnxruntime_session_options_config_keys.h), e.g. the check's "session.disable_prepacking"."""
    import onnxruntime as ort

    so = _options(optimize, config, opts)
    run = runnable_copy(model)
    if path is not None and run is model:
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    data = _serialized(run)
    if data is None:  # a private file with the weights beside it; the session has read them once it exists
        with tempfile.TemporaryDirectory(prefix="onnx-surgery-session-") as tmp:
            file = save_model(run, Path(tmp) / "model.onnx", base_dir, external=True)
            return ort.InferenceSession(str(file), so, providers=["CPUExecutionProvider"])
    if base_dir is not None and has_external_data(run):
        # external locations are relative to the model's folder: tell onnxruntime the folder (nothing written)
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(base_dir))
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def runnable_patch(model: ModelProto) -> bytes:
    """What makes `model`'s serialization runnable when appended to it (protobuf keeps a scalar field's last
    value): its IR version lowered as `runnable_copy` lowers it, else nothing."""
    ir, _ = runnable_ir(model)
    return b"" if ir == model.ir_version else ModelProto(ir_version=ir).SerializeToString()


def serialized_session(data: bytes, base_dir: str | None = None, patch: bytes = b""):
    """An onnxruntime CPU session (`make_session`'s options) on a serialized model, `patch` merged into it as
    protobuf merges appended bytes (`runnable_patch`, extra outputs). What an isolated worker makes: onnxruntime
    parses the bytes itself, with no Python copy of the model beside them (parsed here and serialized again,
    RetinaNet with its 123 MiB of weights inline grew the worker by 809 MiB; handed over, by 455, what
    onnxruntime's own call grows by: bench/worker_memory.py)."""
    import onnxruntime as ort

    so = _options(False, None, {})
    # external locations are relative to the model's folder (the entry is unused when there are none)
    if base_dir is not None:
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(base_dir))
    return ort.InferenceSession(data + patch if patch else data, so, providers=["CPUExecutionProvider"])


def run_serialized(
    data: bytes, feeds: dict, base_dir: str | None = None, patch: bytes = b""
) -> dict[str, np.ndarray]:
    """Every output of the serialized model (`patch` merged, see `serialized_session`) on `feeds` (what an
    isolated worker runs for surgery.verify)."""
    sess = serialized_session(data, base_dir, patch)
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    missing = wanted - set(feeds)
    if missing:
        raise ValueError(f"no value for input(s) {sorted(missing)}")
    return dict(zip(names, sess.run(names, {k: v for k, v in feeds.items() if k in wanted})))


def run(
    model: ModelProto, feeds: dict[str, np.ndarray], base_dir: Path | str | None = None
) -> dict[str, np.ndarray]:
    sess = make_session(model, base_dir)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))
