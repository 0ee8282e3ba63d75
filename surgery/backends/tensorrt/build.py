"""TensorRT build (full TensorRT with a GPU, or TensorRT-RTX ahead of time without one; one code path):
optimization profiles for dynamic inputs, a reusable timing cache, a workspace limit, precision (builder flags
on TensorRT 10; the graph's own types on strongly typed TensorRT 11 / TensorRT-RTX), progress through
TensorRT's IProgressMonitor. Runs inside an isolated worker (surgery.backends.build.build_model)."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

from onnx import ModelProto

from surgery.backends.base import BuildOptions, BuildReport
from surgery.backends.build import named_node
from surgery.backends.tensorrt.worker import clean_words, import_trt
from surgery.isolate import report_progress
from surgery.text import error_line

PARSE_END, BUILD_START, BUILD_END = 0.1, 0.15, 0.9
QDQ = {"QuantizeLinear", "DequantizeLinear"}


def _logger(trt, lines: list[str]):
    class Collect(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)

        def log(self, severity, msg):
            if severity <= trt.ILogger.Severity.INFO:
                lines.append(f"[{str(severity).split('.')[-1]}] {msg}")

    return Collect()


def _monitor(trt):
    """Forwards TensorRT's phases to report_progress: the fraction is nested (a step of a child phase is a
    fraction of its parent's current step) and held monotone (a phase TensorRT restarts does not move the bar
    back)."""

    class Monitor(trt.IProgressMonitor):
        def __init__(self):
            trt.IProgressMonitor.__init__(self)
            self.stack: list[list] = []  # [name, steps done, steps total]
            self.best = 0.0

        def _report(self, name: str) -> None:
            done, scale = 0.0, 1.0
            for _, step, total in self.stack:
                done += scale * min(step, total) / total
                scale /= total
            label = " / ".join(f"{n} {min(s + 1, t)}/{t}" for n, s, t in self.stack[-2:]) or name
            self.best = max(self.best, min(done, 1.0))
            report_progress(BUILD_START + (BUILD_END - BUILD_START) * self.best, f"tensorrt: {label}")

        def phase_start(self, phase_name, parent_phase, num_steps):
            while self.stack and parent_phase is not None and self.stack[-1][0] != parent_phase:
                self.stack.pop()  # a phase that never said it finished
            if parent_phase is None:
                self.stack.clear()
            self.stack.append([phase_name, 0, max(int(num_steps), 1)])
            self._report(phase_name)

        def step_complete(self, phase_name, step):
            for entry in self.stack:
                if entry[0] == phase_name:
                    entry[1] = step + 1
            self._report(phase_name)
            return True  # False would cancel the build

        def phase_finish(self, phase_name):
            while self.stack:
                if self.stack.pop()[0] == phase_name:
                    break

    return Monitor()


def _dims(shape) -> str:
    return "x".join(str(d) for d in shape)


def _profile_hint(dynamic: dict[str, tuple[int, ...]]) -> str:
    from surgery.specs import profile_example

    examples = [f"--profile {name}:{profile_example(shape)}" for name, shape in dynamic.items()]
    listed = ", ".join(f"{n} [{_dims(s).replace('-1', '?')}]" for n, s in dynamic.items())
    return (
        f"dynamic inputs: {listed}; give each a min:opt:max profile, e.g. {' '.join(examples)} "
        "(dynamic dims shown as 1, 4, 8: use your own range), or freeze the shapes"
    )


def _parse(parser, model: ModelProto, base_dir) -> bool:
    """Parse from memory; with `base_dir` the parser is told the model's path so external weights resolve
    beside it (nothing is written there)."""
    blob = model.SerializeToString()
    if not base_dir:
        return parser.parse(blob)
    return parser.parse(blob, str(Path(base_dir) / "model.onnx"))


def build(data: bytes, options: BuildOptions, base_dir=None) -> BuildReport:
    trt, flavour = import_trt()
    label = f"{flavour} {trt.__version__}"
    model = ModelProto()
    model.ParseFromString(data)
    original = model  # the fp32 reference for accuracy, whatever precision the engine gets
    strongly_typed = flavour == "TensorRT-RTX" or int(trt.__version__.split(".")[0]) >= 11
    notes: list[str] = []

    def fail(error: str, *, node=None, log="", seconds=0.0) -> BuildReport:
        return BuildReport(
            "tensorrt",
            False,
            error=error,
            node=node,
            log=log,
            build_seconds=seconds,
            label=label,
            note="; ".join(notes),
        )

    if options.precision in ("fp16", "bf16") and strongly_typed:
        from surgery.backends.precision import lower_precision

        model = lower_precision(model, options.precision, base_dir)
        notes.append(
            f"{flavour} builds strongly typed (TensorRT 11 removed weakly typed networks and the FP16/BF16 "
            f"builder flags): the model's float32 math was converted to {options.precision} by casts in the "
            "graph before parsing (inputs and outputs stay float32)"
        )
    elif options.precision == "int8" and strongly_typed:
        if not any(n.op_type in QDQ for n in model.graph.node):
            return fail(
                f"{flavour} builds strongly typed and has no INT8 builder flag (TensorRT 11 removed implicit INT8 "
                "calibration): INT8 needs a quantized model (QuantizeLinear/DequantizeLinear nodes). Note: "
                "quantize it first (onnx-surgery quantize MODEL -o OUT --calib DIR), or build fp16"
            )
        notes.append(f"{flavour} builds strongly typed: INT8 comes from the model's Q/DQ nodes")
    elif options.precision not in ("fp32", "fp16", "bf16", "int8"):
        return fail(f"unknown precision '{options.precision}'. Note: available: fp32, fp16, bf16, int8")

    lines: list[str] = []
    logger = _logger(trt, lines)
    if hasattr(trt, "init_libnvinfer_plugins"):
        trt.init_libnvinfer_plugins(logger, "")
    builder = trt.Builder(logger)
    major = int(trt.__version__.split(".")[0])
    explicit = getattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH", None)
    network = builder.create_network(1 << int(explicit) if explicit is not None and major < 10 else 0)
    parser = trt.OnnxParser(network, logger)
    report_progress(0.02, f"tensorrt: parsing with {label}")
    t0 = time.perf_counter()
    if not _parse(parser, model, base_dir):
        errors = [parser.get_error(i) for i in range(parser.num_errors)]
        if not errors:
            return fail("the ONNX parser failed without an error", log="\n".join(lines))
        first = errors[0]
        more = f" (and {len(errors) - 1} more parser errors, see the log)" if len(errors) > 1 else ""
        return fail(
            clean_words(str(first)) + more,
            node=first.node_name() or None,
            log="\n".join(lines + [clean_words(str(e)) for e in errors]),
            seconds=time.perf_counter() - t0,
        )
    report_progress(PARSE_END, "tensorrt: parsed")

    inputs = {network.get_input(i).name: tuple(network.get_input(i).shape) for i in range(network.num_inputs)}
    dynamic = {n: s for n, s in inputs.items() if any(d < 0 for d in s)}
    unknown = [n for n in options.profiles if n not in inputs]
    if unknown:
        return fail(
            f"a profile names input {', '.join(map(repr, unknown))}, which the network does not have. "
            f"Note: network inputs: {', '.join(f'{n} [{_dims(s)}]' for n, s in inputs.items())}",
            seconds=time.perf_counter() - t0,
        )

    config = builder.create_builder_config()
    if options.workspace_mb:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(options.workspace_mb) << 20)
    if not strongly_typed and options.precision != "fp32":
        flag = {"fp16": "FP16", "bf16": "BF16", "int8": "INT8"}[options.precision]
        config.set_flag(getattr(trt.BuilderFlag, flag))
        notes.append(f"builder flag {flag} (TensorRT may still pick fp32 kernels where faster)")
    if options.profiles:
        profile = builder.create_optimization_profile()
        for name, (lo, opt, hi) in options.profiles.items():
            profile.set_shape(name, tuple(lo), tuple(opt), tuple(hi))
        config.add_optimization_profile(profile)

    cache_path = Path(options.timing_cache) if options.timing_cache else None
    cache_bytes = cache_path.read_bytes() if cache_path and cache_path.exists() else b""
    with warnings.catch_warnings(record=True) as caught:  # TensorRT-RTX warns that the cache is a no-op
        warnings.simplefilter("always")
        cache = config.create_timing_cache(cache_bytes)
        if cache is None or not config.set_timing_cache(cache, ignore_mismatch=False):
            notes.append("the timing cache file did not match this builder; started a new cache")
            cache = config.create_timing_cache(b"")
            config.set_timing_cache(cache, ignore_mismatch=False)
    cache_noop = any("no-op" in str(w.message) for w in caught)
    if hasattr(trt, "IProgressMonitor"):  # TensorRT 10+ and TensorRT-RTX
        config.progress_monitor = _monitor(trt)

    report_progress(BUILD_START, "tensorrt: building")
    engine = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - t0
    log = "\n".join(lines)
    if engine is None:
        errors = [x for x in lines if x.startswith(("[ERROR]", "[INTERNAL_ERROR]"))] or lines[-1:]
        message = clean_words(errors[0].split("] ", 1)[-1]) if errors else "the builder returned no engine"
        if "no optimization profile" in message or (dynamic and "profile" in message):
            notes.append(_profile_hint(dynamic))
        return fail(message, node=named_node(message, model), log=log, seconds=seconds)

    out_dir = Path(options.out_dir)
    artifact = out_dir / ("model.rtx.engine" if flavour == "TensorRT-RTX" else "model.engine")
    artifact.write_bytes(bytes(engine))
    if cache_path:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        cache_path.write_bytes(bytes(config.get_timing_cache().serialize()))
        notes.append(f"timing cache {'reused' if cache_bytes else 'created'}: {cache_path}")
        if cache_noop:
            notes.append(
                "TensorRT-RTX says timing cache operations are no-ops: the cache does not speed it up"
            )
    warned = sum(x.startswith("[WARNING]") for x in lines)
    if warned:
        notes.append(f"{warned} builder warning{'s' * (warned > 1)} (see the log)")

    report = BuildReport(
        "tensorrt",
        True,
        log=log,
        build_seconds=seconds,
        artifact=str(artifact),
        label=label,
    )
    if flavour == "TensorRT-RTX":
        notes.append(
            "engine built ahead of time; running it needs an NVIDIA GPU with TensorRT-RTX — not on this machine"
        )
    else:
        report_progress(0.92, "tensorrt: timing the engine")
        report.note = "; ".join(notes)
        try:
            _run_engine(bytes(engine), original, options, base_dir, report)
        except ImportError as exc:  # the build stands; say why it was not measured
            report.note += f"; engine built, not measured: Polygraphy's TrtRunner is needed ({exc})"
        except Exception as exc:  # e.g. the runtime cannot load the engine: the build still stands
            report.note += f"; engine built, but running it failed: {error_line(exc)}"
        return report
    report.note = "; ".join(notes)
    return report


def _run_engine(engine: bytes, model: ModelProto, options: BuildOptions, base_dir, report: BuildReport):
    """Latency and accuracy of a full-TensorRT engine through Polygraphy's TrtRunner (it brings the CUDA
    plumbing). Inputs use each profile's opt shape."""
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    from surgery.backends.measure import measure_into, timing_progress

    with TrtRunner(EngineFromBytes(engine)) as runner:
        measure_into(
            report,
            model,
            base_dir,
            options,
            lambda feeds: lambda: dict(runner.infer(feeds)),
            timing_progress("tensorrt", 0.92),
        )
