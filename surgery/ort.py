"""Running models with onnxruntime: the runnable copy (IR version lowered where safe), sessions, seeded inputs.

The model itself is never changed: only the copy handed to onnxruntime may carry a lower `ir_version`.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper

from surgery.graph import tensor_info_from_type
from surgery.model import has_external_data
from surgery.specs import SHAPE_MAX_ELEMENTS

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
    copy = ModelProto()
    copy.CopyFrom(model)
    copy.ir_version = ir
    return copy


def make_session(model: ModelProto, base_dir: Path | str | None = None, *, optimize: bool = False, **opts):
    """An onnxruntime CPU session on the runnable copy. External data resolves against `base_dir`."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    for k, v in opts.items():
        setattr(so, k, v)
    run = runnable_copy(model)
    if base_dir is not None and has_external_data(run):
        # external locations are relative to the model's folder: tell onnxruntime the folder (nothing written)
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(base_dir))
    return ort.InferenceSession(run.SerializeToString(), so, providers=["CPUExecutionProvider"])


def run_serialized(data: bytes, feeds: dict, base_dir: str | None = None) -> dict[str, np.ndarray]:
    """Every output of the serialized model on `feeds` (what an isolated worker runs for surgery.verify)."""
    model = ModelProto()
    model.ParseFromString(data)
    sess = make_session(model, base_dir)
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    missing = wanted - set(feeds)
    if missing:
        raise ValueError(f"no value for input(s) {sorted(missing)}")
    return dict(zip(names, sess.run(names, {k: v for k, v in feeds.items() if k in wanted})))


_NP = {
    TensorProto.FLOAT: np.float32,
    TensorProto.DOUBLE: np.float64,
    TensorProto.FLOAT16: np.float16,
    TensorProto.INT64: np.int64,
    TensorProto.INT32: np.int32,
    TensorProto.INT16: np.int16,
    TensorProto.INT8: np.int8,
    TensorProto.UINT8: np.uint8,
    TensorProto.UINT16: np.uint16,
    TensorProto.UINT32: np.uint32,
    TensorProto.UINT64: np.uint64,
    TensorProto.BOOL: np.bool_,
}


def seeded_inputs(
    model: ModelProto, seed: int = 0, dims: dict[str, int] | None = None, default_dim: int = 2
) -> dict[str, np.ndarray]:
    """Deterministic inputs for every real graph input. Symbolic dims come from `dims`, else `default_dim` (2,
    not 1: a batch of 1 hides broadcasting and squeeze mistakes)."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    dims = dims or {}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        info = tensor_info_from_type(vi.name, vi.type)
        if info.shape is None:
            raise ValueError(f"input '{vi.name}' has no shape; give its shape to generate inputs")
        shape = [d if isinstance(d, int) else dims.get(str(d), default_dim) for d in info.shape]
        size = int(np.prod(shape, dtype=object)) if shape else 1
        if size > SHAPE_MAX_ELEMENTS:  # 2e9 floats would take the machine's memory and minutes to draw
            raise ValueError(
                f"input '{vi.name}' is {'x'.join(map(str, shape))}: {size:,} elements; inputs this tool generates "
                f"hold at most {SHAPE_MAX_ELEMENTS:,}. Note: give it a smaller shape"
            )
        np_type = _NP.get(info.dtype)
        if np_type is None:
            raise ValueError(
                f"input '{vi.name}' has type {info.dtype_name}, which seeded inputs cannot generate"
            )
        # np.asarray: a scalar input (shape []) is a 0-d array, not a numpy scalar onnxruntime refuses
        if np_type is np.bool_:
            feeds[vi.name] = np.asarray(rng.random(shape) > 0.5)
        elif np.issubdtype(np_type, np.integer) and vi.name == "attention_mask":
            feeds[vi.name] = np.ones(shape, np_type)  # a transformer's mask: every token attended
        elif np.issubdtype(np_type, np.integer):
            feeds[vi.name] = np.asarray(rng.integers(0, 4, size=shape).astype(np_type))
        else:
            feeds[vi.name] = np.asarray(rng.standard_normal(shape).astype(np_type))
    return feeds


def run(
    model: ModelProto, feeds: dict[str, np.ndarray], base_dir: Path | str | None = None
) -> dict[str, np.ndarray]:
    sess = make_session(model, base_dir)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))
