"""OpenVINO build: compile_model on CPU with a precision hint; the compiled blob is the artifact."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from onnx import ModelProto

from surgery.backends.base import BuildOptions, BuildReport
from surgery.backends.isolate import report_progress
from surgery.build.measure import accuracy, latency, reference

HINTS = {"fp32": "f32", "fp16": "f16", "bf16": "bf16"}


def build(data: bytes, options: BuildOptions, base_dir=None) -> BuildReport:
    import openvino as ov

    model = ModelProto()
    model.ParseFromString(data)
    if options.precision not in HINTS:
        return BuildReport(
            "openvino",
            False,
            error=f"precision {options.precision} is not offered for OpenVINO CPU. "
            f"Note: available: {', '.join(HINTS)}",
        )
    fd, path = tempfile.mkstemp(suffix=".onnx", dir=base_dir)
    os.write(fd, data)
    os.close(fd)
    core = ov.Core()
    report_progress(0.1, "openvino: converting")
    t = time.perf_counter()
    try:
        compiled = core.compile_model(
            core.read_model(path), "CPU", {"INFERENCE_PRECISION_HINT": HINTS[options.precision]}
        )
    except Exception as exc:  # the conversion or compilation failure, in OpenVINO's words
        lines = [x for x in str(exc).splitlines() if x.strip()]
        return BuildReport(
            "openvino",
            False,
            error=" ".join(lines[-3:])[:600],
            log=str(exc)[-4000:],
            build_seconds=time.perf_counter() - t,
        )
    finally:
        os.unlink(path)
    seconds = time.perf_counter() - t
    artifact = Path(options.out_dir) / "model.openvino.blob"
    blob = compiled.export_model()
    artifact.write_bytes(blob.getvalue() if hasattr(blob, "getvalue") else bytes(blob))
    feeds, ref = reference(model, base_dir)
    request = compiled.create_infer_request()
    report_progress(0.6, "openvino: timing")
    result = request.infer(feeds)
    got = {out.get_any_name(): value for out, value in result.items()}
    lat = latency(lambda: request.infer(feeds), options.runs, options.warmup)
    return BuildReport(
        "openvino",
        True,
        log=f"OpenVINO {ov.get_version()}, CPU, precision hint {HINTS[options.precision]}",
        build_seconds=seconds,
        artifact=str(artifact),
        latency_ms=lat,
        accuracy=accuracy(ref, got),
    )
