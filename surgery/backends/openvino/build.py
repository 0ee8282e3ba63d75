"""OpenVINO build: `compile_model` on CPU with INFERENCE_PRECISION_HINT from the requested precision; the
compiled blob (`export_model`) is the artifact.

Dynamic models compile with partial shapes: an input with a profile is reshaped to bounded dims (each dim
min..max, static where min == max), others keep the model's dynamic dims. Where OpenVINO cannot compile the
model dynamic, it is reshaped to one static shape (the profile's opt, else dynamic dims 1), said in the note."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from surgery.backends.base import BuildOptions, BuildReport
from surgery.isolate import report_progress

if TYPE_CHECKING:
    from onnx import ModelProto

HINTS = {"fp32": "f32", "fp16": "f16", "bf16": "bf16"}


def build(data: bytes, options: BuildOptions, base_dir=None) -> BuildReport:
    import openvino as ov
    from onnx import ModelProto

    from surgery.model import private_copy

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


def build_for_check(path: str) -> BuildReport:
    """In the isolated process, right after the check's conversion: compile the model file at `path` as `build`
    does (fp32, no profiles), nothing measured or written: a check at depth build reads the file once more
    instead of a second worker call that serializes, copies and converts it again."""
    import openvino as ov

    label = f"OpenVINO {ov.get_version().split('-')[0]}"
    return _build(ov, None, path, BuildOptions(measure=False, artifact=False), label, None)


def _bounded(ov, lo, hi):
    return ov.PartialShape([ov.Dimension(a) if a == b else ov.Dimension(a, b) for a, b in zip(lo, hi)])


def _static_shapes(read, options: BuildOptions) -> dict[str, tuple[int, ...]]:
    """One static shape per dynamic input: the profile's opt shape, else the model's dims with dynamic ones 1."""
    shapes = {}
    for port in read.inputs:
        name = port.get_any_name()
        if name in options.profiles:
            shapes[name] = tuple(options.profiles[name][1])
        elif port.get_partial_shape().is_dynamic:
            shape = port.get_partial_shape()
            if shape.rank.is_dynamic:
                raise ValueError(f"input '{name}' has no rank; give it a profile")
            shapes[name] = tuple(d.get_length() if d.is_static else 1 for d in shape)
    return shapes


def _precision_of(hint) -> str:
    """'fp32' / 'fp16' / 'bf16' for the element type OpenVINO reports as its inference precision ("" if another)."""
    name = str(getattr(hint, "get_type_name", lambda: hint)()).lower()
    return {"f32": "fp32", "float32": "fp32", "f16": "fp16", "float16": "fp16", "bf16": "bf16"}.get(name, "")


def _words(exc: Exception) -> str:
    lines = [x for x in str(exc).splitlines() if x.strip()]
    return " ".join(lines[-2:])[:300]


def _build(
    ov, model: ModelProto | None, path: str, options: BuildOptions, label: str, base_dir
) -> BuildReport:
    core = ov.Core()
    report_progress(0.1, "openvino: converting")
    t = time.perf_counter()
    config = {"INFERENCE_PRECISION_HINT": HINTS[options.precision]}
    note = ""
    try:
        read = core.read_model(path)
        if options.profiles:
            read.reshape({name: _bounded(ov, lo, hi) for name, (lo, _, hi) in options.profiles.items()})
        report_progress(0.3, f"openvino: compiling for CPU ({HINTS[options.precision]})")
        dynamic = [p.get_any_name() for p in read.inputs if p.get_partial_shape().is_dynamic]
        try:
            compiled = core.compile_model(read, "CPU", config)
        except Exception as exc:
            if not dynamic:
                raise
            static = _static_shapes(read, options)
            read = core.read_model(path)
            read.reshape({n: ov.PartialShape(list(s)) for n, s in static.items()})
            compiled = core.compile_model(read, "CPU", config)
            shown = ", ".join(f"{n} {'x'.join(map(str, s))}" for n, s in static.items())
            note = (
                f"OpenVINO could not compile the model with dynamic shapes ({_words(exc)}); "
                f"compiled static at {shown}"
            )
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
    artifact = Path(options.out_dir) / "model.openvino.blob" if options.artifact else None
    if artifact is not None:
        blob = compiled.export_model()
        artifact.write_bytes(blob.getvalue() if hasattr(blob, "getvalue") else bytes(blob))
    runtime = compiled.get_runtime_model()
    report = BuildReport(
        "openvino",
        True,
        log=(f"inputs: {', '.join(f'{p.get_any_name()} {p.get_partial_shape()}' for p in read.inputs)}\n")
        + f"{label}, CPU, INFERENCE_PRECISION_HINT {compiled.get_property('INFERENCE_PRECISION_HINT')}; "
        f"{len(read.get_ops())} ops converted, {len(runtime.get_ops())} in the compiled graph",
        build_seconds=seconds,
        artifact=str(artifact) if artifact else None,
        label=label,
        note=note,
    )
    granted = _precision_of(compiled.get_property("INFERENCE_PRECISION_HINT"))
    if (
        granted and granted != options.precision
    ):  # the CPU plugin falls back where this CPU has no such compute
        report.precision = granted
        caps = ", ".join(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
        report.note = "; ".join(
            x
            for x in (
                note,
                f"this CPU computes no {options.precision} (OpenVINO's OPTIMIZATION_CAPABILITIES: {caps}): "
                f"OpenVINO runs the model in {granted}, so the {options.precision} accuracy is not measured here",
            )
            if x
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

    if options.measure:
        from surgery.backends.measure import measure_into, timing_progress

        report_progress(0.6, "openvino: timing")
        measure_into(report, model, base_dir, options, prepare, timing_progress("openvino", 0.6))
    return report
