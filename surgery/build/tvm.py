"""TVM build: the Relax ONNX frontend, `tvm.compile` for llvm, run in the Relax VM; the library is the artifact."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from onnx import ModelProto

from surgery.backends.base import BuildOptions, BuildReport
from surgery.backends.isolate import report_progress
from surgery.build.measure import accuracy, latency, reference


def build(data: bytes, options: BuildOptions, base_dir=None) -> BuildReport:
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    model = ModelProto()
    model.ParseFromString(data)
    if options.precision != "fp32":
        return BuildReport(
            "tvm",
            False,
            error=f"precision {options.precision} is not offered for TVM here. Note: available: fp32",
        )
    report_progress(0.1, "tvm: importing")
    t = time.perf_counter()
    try:
        mod = from_onnx(model)
        report_progress(0.3, "tvm: compiling for llvm")
        ex = tvm.compile(mod, target="llvm")
    except Exception as exc:  # the frontend's or compiler's refusal
        return BuildReport(
            "tvm",
            False,
            error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:500]}",
            build_seconds=time.perf_counter() - t,
        )
    seconds = time.perf_counter() - t
    artifact = Path(options.out_dir) / "model.tvm.so"
    ex.export_library(str(artifact))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    feeds, ref = reference(model, base_dir)
    inits = {i.name for i in model.graph.initializer}
    order = [i.name for i in model.graph.input if i.name not in inits]
    args = [tvm.runtime.tensor(feeds[n]) for n in order]
    report_progress(0.6, "tvm: timing")
    out = vm["main"](*args)
    outs = (
        out
        if isinstance(out, list | tuple) or hasattr(out, "__len__") and not hasattr(out, "numpy")
        else [out]
    )
    got = {o.name: np.asarray(v.numpy()) for o, v in zip(model.graph.output, outs)}
    lat = latency(lambda: vm["main"](*args), options.runs, options.warmup)
    return BuildReport(
        "tvm",
        True,
        log=f"TVM {tvm.__version__}, Relax, target llvm",
        build_seconds=seconds,
        artifact=str(artifact),
        latency_ms=lat,
        accuracy=accuracy(ref, got),
    )
