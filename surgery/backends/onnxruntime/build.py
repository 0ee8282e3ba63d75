"""onnxruntime build: a CPU session with every graph optimization (ORT_ENABLE_ALL); the optimized model it
writes (`optimized_model_filepath`) is the artifact."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from onnx import ModelProto

from surgery.backends.base import BuildOptions, BuildReport
from surgery.backends.measure import measure_into, timing_progress
from surgery.isolate import report_progress
from surgery.text import first_line


def _optimized_summary(model: ModelProto, artifact: Path) -> str:
    import onnx

    try:
        optimized = onnx.load(str(artifact), load_external_data=False)
    except Exception as exc:  # the session ran; only the summary is lost
        return f"optimized model not readable: {exc}"
    fused = Counter(n.op_type for n in optimized.graph.node if n.domain not in ("", "ai.onnx"))
    line = f"nodes: {len(model.graph.node)} -> {len(optimized.graph.node)} after ORT_ENABLE_ALL"
    if fused:
        line += "; fused: " + ", ".join(f"{op} x{k}" for op, k in fused.most_common())
    return line


def build(data: bytes, options: BuildOptions, base_dir=None) -> BuildReport:
    import onnxruntime as ort

    from surgery.ort import make_session
    from surgery.quantize import has_qdq

    model = ModelProto()
    model.ParseFromString(data)
    label = f"onnxruntime {ort.__version__}"
    original, note = model, ""
    if options.precision in ("fp16", "bf16"):
        from surgery.backends.precision import lower_precision

        model = lower_precision(model, options.precision, base_dir)
        note = (
            f"the model's float32 math was converted to {options.precision} (as for strongly typed TensorRT); "
            "onnxruntime's CPU provider runs what it has kernels for"
        )
    elif options.precision == "int8" and has_qdq(model):
        note = (
            "INT8 from the model's Q/DQ nodes; onnxruntime's CPU provider fuses them into integer kernels only "
            "where a weight is stored as INT8 (a float weight behind a Q/DQ pair, as `quantize` writes for "
            "TensorRT, runs quantize-dequantize in float: INT8 rounding, not INT8 speed)"
        )
    elif options.precision != "fp32":
        return BuildReport(
            "onnxruntime",
            False,
            error=f"precision {options.precision} is not offered for onnxruntime's CPU provider. "
            "Note: available: fp32, fp16, bf16 (INT8 needs a quantized model)",
            label=label,
        )
    artifact = Path(options.out_dir) / "model.ort-optimized.onnx"
    report_progress(0.1, "onnxruntime: creating the session (ORT_ENABLE_ALL)")
    t = time.perf_counter()
    try:
        sess = make_session(
            model,
            base_dir,
            optimize=True,
            enable_cpu_mem_arena=True,  # timed as deployed: onnxruntime's default
            optimized_model_filepath=str(artifact),
        )
    except Exception as exc:  # the session's refusal is the build failure
        return BuildReport(
            "onnxruntime",
            False,
            error=first_line(str(exc), 600) or type(exc).__name__,
            log=str(exc),
            build_seconds=time.perf_counter() - t,
            label=label,
            note=note,
        )
    seconds = time.perf_counter() - t
    names = [o.name for o in sess.get_outputs()]
    report = BuildReport(
        "onnxruntime",
        True,
        log="\n".join(
            [f"{label}, providers {', '.join(sess.get_providers())}", _optimized_summary(model, artifact)]
        ),
        build_seconds=seconds,
        artifact=str(artifact),
        label=label,
        note=note,
    )
    report_progress(0.6, "onnxruntime: timing")
    measure_into(
        report,
        original,
        base_dir,
        options,
        lambda feeds: lambda: dict(zip(names, sess.run(names, feeds))),
        timing_progress("onnxruntime", 0.6),
    )
    return report
