"""Test-build a model on one or more backends: the use case behind `onnx-surgery build` and the app's Test build
page. A Q/DQ (INT8) model is built on the precision ladder (int8 as given, fp16 and fp32 as the float32 model it
stands for) unless a precision is asked for; with a calibration, the model is first quantized (surgery.quantize)
and built on the ladder. Every report's numbers are against the float32 original."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from onnx import ModelProto

from surgery.backends.base import BuildOptions, BuildReport, Progress


@dataclass
class BuildRequest:
    backends: list[str]
    options: BuildOptions = field(default_factory=BuildOptions)  # tune_trials applies to TVM alone
    precision_asked: bool = True  # False: a Q/DQ model is built on the ladder (int8, fp16, fp32)
    calibration: str | None = None  # quantize first with this calibration (surgery.quantize's spec)
    per_channel: bool = False


@dataclass
class BuildOutcome:
    reports: list[BuildReport]
    quantized: ModelProto | None = None  # the INT8 (Q/DQ) model built, where the request quantized first

    @property
    def ok(self) -> bool:
        return bool(self.reports) and all(r.ok for r in self.reports)


def build(
    model: ModelProto,
    request: BuildRequest,
    *,
    base_dir: str | None = None,
    progress_for: Callable[[str], Progress | None] | None = None,
    quantize_progress: Progress | None = None,
) -> BuildOutcome:
    """Build `model` on every backend of `request`, in order. Raises surgery.quantize.CalibrationError for a
    calibration that cannot be used (nothing built then) and ValueError for profiles that contradict the model."""
    from surgery.backends.build import build_ladder, build_model, check_profiles
    from surgery.quantize import has_qdq, progress_to, quantize

    check_profiles(model, request.options.profiles)
    quantized = None
    if request.calibration is not None:
        with progress_to(quantize_progress):
            quantized = quantize(
                model, request.calibration, per_channel=request.per_channel, base_dir=base_dir
            )
        model, base_dir = quantized, None  # the quantized model carries its weights
    ladder = quantized is not None or (not request.precision_asked and has_qdq(model))
    reports: list[BuildReport] = []
    for backend in request.backends:
        options = dataclasses.replace(
            request.options,
            precision="fp32" if quantized is not None else request.options.precision,
            tune_trials=request.options.tune_trials if backend == "tvm" else 0,
        )
        progress = progress_for(backend) if progress_for else None
        if ladder:
            reports.extend(build_ladder(backend, model, options, progress, base_dir))
        else:
            reports.append(build_model(backend, model, options, progress, base_dir))
    return BuildOutcome(reports, quantized)
