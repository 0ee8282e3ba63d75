"""OpenVINO build: `compile_model` on CPU with INFERENCE_PRECISION_HINT from the requested precision; the
compiled blob (`export_model`) is the artifact."""

from __future__ import annotations

import time
from pathlib import Path

from onnx import ModelProto

from surgery.backends.base import BuildOptions, BuildReport
from surgery.backends.isolate import report_progress
from surgery.build.measure import measure_into
from surgery.model import private_copy

HINTS = {"fp32": "f32", "fp16": "f16", "bf16": "bf16"}


def build(data: bytes, options: BuildOptions, base_dir=None) -> BuildReport:
    import openvino as ov

    model = ModelProto()
    model.ParseFromString(data)
    label = f"OpenVINO {ov.get_version().split('-')[0]}"
    if options.precision not in HINTS:
        return BuildReport(
            "openvino",
            False,
            error=f"precision {options.precision} is not an INFERENCE_PRECISION_HINT of OpenVINO's CPU plugin. "
            f"Note: available: {', '.join(HINTS)} (INT8 needs a quantized model, e.g. from NNCF)",
            label=label,
        )
    with private_copy(data, base_dir) as path:  # a private folder, external weights linked in
        return _build(ov, model, path, options, label, base_dir)


def _build(ov, model: ModelProto, path: str, options: BuildOptions, label: str, base_dir) -> BuildReport:
    core = ov.Core()
    report_progress(0.1, "openvino: converting")
    t = time.perf_counter()
    try:
        read = core.read_model(path)
        report_progress(0.3, f"openvino: compiling for CPU ({HINTS[options.precision]})")
        compiled = core.compile_model(read, "CPU", {"INFERENCE_PRECISION_HINT": HINTS[options.precision]})
    except Exception as exc:  # the conversion or compilation failure, in OpenVINO's words
        lines = [x for x in str(exc).splitlines() if x.strip()]
        return BuildReport(
            "openvino",
            False,
            error=" ".join(lines[-3:])[:600],
            log=str(exc)[-4000:],
            build_seconds=time.perf_counter() - t,
            label=label,
        )
    seconds = time.perf_counter() - t
    artifact = Path(options.out_dir) / "model.openvino.blob"
    blob = compiled.export_model()
    artifact.write_bytes(blob.getvalue() if hasattr(blob, "getvalue") else bytes(blob))
    runtime = compiled.get_runtime_model()
    report = BuildReport(
        "openvino",
        True,
        log=f"{label}, CPU, INFERENCE_PRECISION_HINT {compiled.get_property('INFERENCE_PRECISION_HINT')}; "
        f"{len(read.get_ops())} ops converted, {len(runtime.get_ops())} in the compiled graph",
        build_seconds=seconds,
        artifact=str(artifact),
        label=label,
    )
    request = compiled.create_infer_request()

    def prepare(feeds):
        def run_once():
            got = {}
            for out, value in request.infer(feeds).items():
                for name in out.get_names():
                    got[name] = value
            return got

        return run_once

    report_progress(0.6, "openvino: timing")
    measure_into(report, model, base_dir, options, prepare)
    return report
