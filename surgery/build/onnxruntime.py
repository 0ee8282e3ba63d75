"""onnxruntime build: a session with every graph optimization; the optimized model is the artifact."""

from __future__ import annotations

import time
from pathlib import Path

from onnx import ModelProto

from surgery.backends.base import BuildOptions, BuildReport
from surgery.backends.isolate import report_progress
from surgery.build.measure import accuracy, latency, reference


def build(data: bytes, options: BuildOptions, base_dir=None) -> BuildReport:
    import onnxruntime as ort

    from surgery.ort import runnable_copy

    model = ModelProto()
    model.ParseFromString(data)
    artifact = str(Path(options.out_dir) / "model.ort-optimized.onnx")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = artifact
    so.log_severity_level = 3
    report_progress(0.1, "onnxruntime: creating the session")
    t = time.perf_counter()
    try:
        sess = ort.InferenceSession(
            runnable_copy(model).SerializeToString(), so, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # the session's refusal is the build failure
        return BuildReport(
            "onnxruntime",
            False,
            error=str(exc).strip().splitlines()[0][:500],
            build_seconds=time.perf_counter() - t,
        )
    seconds = time.perf_counter() - t
    feeds, ref = reference(model, base_dir)
    names = [o.name for o in sess.get_outputs()]
    report_progress(0.6, "onnxruntime: timing")
    got = dict(zip(names, sess.run(names, feeds)))
    lat = latency(lambda: sess.run(names, feeds), options.runs, options.warmup)
    return BuildReport(
        "onnxruntime",
        True,
        log=f"ORT_ENABLE_ALL, {ort.__version__}, CPUExecutionProvider",
        build_seconds=seconds,
        artifact=artifact,
        latency_ms=lat,
        accuracy=accuracy(ref, got),
    )
