"""TensorRT build (full TensorRT, or TensorRT-RTX ahead of time without a GPU): optimization profiles for
dynamic inputs, a reusable timing cache, a workspace limit, precision (builder flags on TensorRT 10; the graph's
own types on strongly typed TensorRT 11 / TensorRT-RTX), progress through TensorRT's IProgressMonitor."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from onnx import ModelProto

from surgery.backends.base import BuildOptions, BuildReport
from surgery.backends.isolate import report_progress
from surgery.backends.tensorrt_worker import import_trt


def _logger(trt, lines: list[str]):
    class Collect(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)

        def log(self, severity, msg):
            if severity <= trt.ILogger.Severity.WARNING:
                lines.append(f"[{str(severity).split('.')[-1]}] {msg}")

    return Collect()


def _monitor(trt):
    class Monitor(trt.IProgressMonitor):
        def __init__(self):
            trt.IProgressMonitor.__init__(self)
            self.phases: dict[str, tuple[int, int]] = {}

        def phase_start(self, phase_name, parent_phase, num_steps):
            self.phases[phase_name] = (0, max(num_steps, 1))
            report_progress(0.2, f"tensorrt: {phase_name}")

        def step_complete(self, phase_name, step):
            done, total = self.phases.get(phase_name, (0, 1))
            self.phases[phase_name] = (step + 1, total)
            report_progress(
                0.2 + 0.7 * min((step + 1) / total, 1.0), f"tensorrt: {phase_name} {step + 1}/{total}"
            )
            return True

        def phase_finish(self, phase_name):
            self.phases.pop(phase_name, None)

    return Monitor()


def _node_named(message: str, model: ModelProto) -> str | None:
    for n in model.graph.node:
        if n.name and n.name in message:
            return n.name
    return None


def build(data: bytes, options: BuildOptions, base_dir=None) -> BuildReport:
    trt, flavour = import_trt()
    model = ModelProto()
    model.ParseFromString(data)
    strongly_typed = flavour == "TensorRT-RTX" or int(trt.__version__.split(".")[0]) >= 11
    notes = []
    if options.precision in ("fp16", "bf16") and strongly_typed:
        from surgery.build.precision import lower_precision

        model = lower_precision(model, options.precision)
        notes.append(
            f"{flavour} is strongly typed: the graph's float math was lowered to {options.precision}"
        )
    elif options.precision == "int8" and strongly_typed:
        return BuildReport(
            "tensorrt",
            False,
            error=f"{flavour} is strongly typed: INT8 needs a quantized (Q/DQ) "
            "model. Note: quantize the model first, or build fp16",
        )
    lines: list[str] = []
    logger = _logger(trt, lines)
    if hasattr(trt, "init_libnvinfer_plugins"):
        trt.init_libnvinfer_plugins(logger, "")
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    report_progress(0.05, "tensorrt: parsing")
    t0 = time.perf_counter()
    blob = model.SerializeToString()
    if base_dir:
        fd, path = tempfile.mkstemp(suffix=".onnx", dir=base_dir)
        os.write(fd, blob)
        os.close(fd)
        ok = parser.parse_from_file(path)
        os.unlink(path)
    else:
        ok = parser.parse(blob)
    if not ok:
        errors = [parser.get_error(i) for i in range(parser.num_errors)]
        first = errors[0]
        return BuildReport(
            "tensorrt",
            False,
            error=f"parse failed: {first.desc()} ({first.func()})",
            node=first.node_name() or None,
            log="\n".join(lines + [str(e) for e in errors]),
            build_seconds=time.perf_counter() - t0,
        )
    config = builder.create_builder_config()
    if options.workspace_mb:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace_mb << 20)
    if not strongly_typed and options.precision in ("fp16", "bf16", "int8"):
        config.set_flag(
            {"fp16": trt.BuilderFlag.FP16, "bf16": trt.BuilderFlag.BF16, "int8": trt.BuilderFlag.INT8}[
                options.precision
            ]
        )
    if options.profiles:
        profile = builder.create_optimization_profile()
        for name, (lo, opt, hi) in options.profiles.items():
            profile.set_shape(name, lo, opt, hi)
        config.add_optimization_profile(profile)
    cache_bytes = b""
    if options.timing_cache and Path(options.timing_cache).exists():
        cache_bytes = Path(options.timing_cache).read_bytes()
    cache = config.create_timing_cache(cache_bytes)
    config.set_timing_cache(cache, ignore_mismatch=False)
    monitor = _monitor(trt)
    config.progress_monitor = monitor
    report_progress(0.15, "tensorrt: building")
    engine = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - t0
    if engine is None:
        errors = (
            [x for x in lines if x.startswith(("[ERROR]", "[INTERNAL_ERROR]"))] or lines[-1:] or ["no engine"]
        )
        message = errors[0].split("] ", 1)[-1]
        return BuildReport(
            "tensorrt",
            False,
            error=message,
            node=_node_named(message, model),
            log="\n".join(lines),
            build_seconds=seconds,
        )
    artifact = Path(options.out_dir) / "model.engine"
    artifact.write_bytes(bytes(engine))
    if options.timing_cache:
        Path(options.timing_cache).write_bytes(bytes(config.get_timing_cache().serialize()))
        notes.append(f"timing cache {'reused' if cache_bytes else 'created'}: {options.timing_cache}")
    if flavour == "TensorRT-RTX":
        notes.append(
            "engine built ahead of time; running it needs an NVIDIA GPU with TensorRT-RTX — not on this "
            "machine, so no latency or accuracy"
        )
    else:
        notes.append("running the engine here is not implemented: measure it with trtexec --loadEngine")
    return BuildReport(
        "tensorrt",
        True,
        log="\n".join(lines),
        build_seconds=seconds,
        artifact=str(artifact),
        note="; ".join(notes),
    )
