"""TVM build: the Relax ONNX frontend, `tvm.compile(mod, target="llvm")`, run in the Relax VM; the library
(`export_library`, a .so) is the artifact."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from onnx import ModelProto

from surgery.backends.base import BuildOptions, BuildReport, error_line
from surgery.backends.isolate import report_progress
from surgery.build.measure import measure_into


def _with_weights(model: ModelProto, base_dir) -> ModelProto:
    """The frontend reads weights from the proto: load external data into a copy."""
    from onnx.external_data_helper import load_external_data_for_model

    from surgery.model import has_external_data

    if not base_dir or not has_external_data(model):
        return model
    copy = ModelProto()
    copy.CopyFrom(model)
    load_external_data_for_model(copy, str(base_dir))
    return copy


def _outputs(value) -> list:
    if hasattr(value, "numpy"):
        return [value]
    return [x for v in value for x in _outputs(v)]


def build(data: bytes, options: BuildOptions, base_dir=None) -> BuildReport:
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    model = ModelProto()
    model.ParseFromString(data)
    label = f"TVM {tvm.__version__} (Relax, llvm)"
    if options.precision != "fp32":
        return BuildReport(
            "tvm",
            False,
            error=f"precision {options.precision} is not offered for TVM here. Note: available: fp32",
            label=label,
        )
    report_progress(0.1, "tvm: importing with the Relax ONNX frontend")
    t = time.perf_counter()
    try:
        mod = from_onnx(_with_weights(model, base_dir))
        report_progress(0.3, "tvm: compiling for llvm")
        ex = tvm.compile(mod, target="llvm")
    except Exception as exc:  # the frontend's or compiler's refusal
        return BuildReport(
            "tvm",
            False,
            error=error_line(exc, 500),
            log=str(exc)[-4000:],
            build_seconds=time.perf_counter() - t,
            label=label,
        )
    seconds = time.perf_counter() - t
    artifact = Path(options.out_dir) / "model.tvm.so"
    ex.export_library(str(artifact))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    report = BuildReport(
        "tvm",
        True,
        log=f"{label}; library {artifact.name}, {artifact.stat().st_size} bytes",
        build_seconds=seconds,
        artifact=str(artifact),
        label=label,
    )
    inits = {i.name for i in model.graph.initializer}
    order = [i.name for i in model.graph.input if i.name not in inits]
    names = [o.name for o in model.graph.output]

    def prepare(feeds):
        args = [tvm.runtime.tensor(feeds[n]) for n in order]
        return lambda: {n: np.asarray(v.numpy()) for n, v in zip(names, _outputs(vm["main"](*args)))}

    report_progress(0.6, "tvm: timing")
    measure_into(report, model, base_dir, options, prepare)
    return report
