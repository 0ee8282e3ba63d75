"""Precision node by node: emulate the model in fp16 / bf16 / INT8 (surgery.emulate), measure each node, and
find the smallest set of nodes to keep in float32 that brings every output within the tolerance. The `precision`
command, the app's Precision page and bench/precision.py call `search`; the CLI only renders the outcome.

The search, each step an emulated run on the same samples:

1. everything reduced: within the tolerance, nothing is kept (beyond what the user keeps);
2. range (fp16 / bf16): a node whose float32 values pass the format's largest value is kept ("overflow"), and so
   is a node where inf/NaN first appears in the all-reduced run (one past the range only in what it reads is
   given back at the end when the error stays within the tolerance);
3. sensitivity: the error when only that node runs reduced (the rest float32), one run per node;
4. the fewest of the most sensitive nodes that, kept too, bring the error within the tolerance (bisection over
   the sensitivity order), then each of them given back to the reduced precision when the error stays within
   it (least sensitive first);
5. the result verified by the emulation, and written as one step: `mixed_precision(precision, keep)` (casts in
   the graph) or, for INT8, `quantize_int8(..., exclude=keep)`.

The error of an output is its mean relative error (surgery.verify), over every sample; the tolerance holds it
for every output.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from onnx import ModelProto

from surgery.emulate import FORMATS, Emulator, Result
from surgery.workspace import Step

DEFAULT_TOLERANCE = 1e-2
DEFAULT_CALIB = "random:2"
PRUNE_LIMIT = 256  # kept-by-sensitivity nodes tried one by one for release; beyond, the bisection's set stays


class PrecisionInputError(ValueError):
    """What was asked cannot be done (a --keep that names no node, an unknown format): one line."""


@dataclass
class PrecisionRequest:
    precision: str  # fp16 | bf16 | int8
    calib: str = DEFAULT_CALIB
    tolerance: float = DEFAULT_TOLERANCE
    keep: list[str] = field(default_factory=list)  # node keys the user keeps in float32
    seed: int = 0
    samples: int = 4  # at most this many calibration samples are emulated (INT8 calibrates on all)
    sensitivity: bool = True  # False: range and bisection over the range order only (faster, larger set)


@dataclass
class KeptNode:
    key: str
    op_type: str
    reason: str  # "overflow" | "inf/NaN" | "sensitivity" | "asked"
    max_abs: float
    sensitivity: float | None


@dataclass
class PrecisionOutcome:
    precision: str
    tolerance: float
    before: Result  # everything reduced
    after: Result  # reduced except `kept`
    kept: list[KeptNode]
    nodes: list[dict[str, Any]]  # per node: key, op_type, max_abs, of_limit, sensitivity, kept, reason
    reduced_share: float  # of the float compute estimate left in the reduced precision
    seconds: float
    runs: int
    samples: int
    step: Step | None  # None: no float math to reduce
    layer_precisions: str  # trtexec flags for a weakly typed build
    exclude: list[str]  # the quantize --exclude list (INT8)
    overflow_origins: list[str] = field(default_factory=list)  # where inf/NaN first appears, all reduced

    @property
    def within(self) -> bool:
        return self.after.error <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        return {
            "precision": self.precision,
            "tolerance": self.tolerance,
            "within_tolerance": self.within,
            "before": [o.to_dict() for o in self.before.outputs],
            "after": [o.to_dict() for o in self.after.outputs],
            "error_before": self.before.error,
            "error_after": self.after.error,
            "kept": [k.__dict__ for k in self.kept],
            "overflow_origins": self.overflow_origins,
            "reduced_share": self.reduced_share,
            "seconds": self.seconds,
            "emulated_runs": self.runs,
            "samples": self.samples,
            "step": None if self.step is None else self.step.to_dict(),
            "trtexec": self.layer_precisions,
            "quantize_exclude": self.exclude,
            "nodes": self.nodes,
        }


def colouring(outcome: PrecisionOutcome):
    """A Report that colours a graph by the search: red where a node is kept in float32 (with why, its range and
    its error alone), green where it runs reduced; nodes without float math are left uncoloured."""
    from surgery.verdict import Evidence, Report, Status, Verdict

    fmt = outcome.precision
    verdicts = []
    for n in outcome.nodes:
        alone = n.get("sensitivity")
        said = f"max |value| {n['max_abs']:.3g} ({n['of_limit']:.0%} of {fmt}'s range)" + (
            f", output error when it alone runs in {fmt}: {alone:.2e}" if alone is not None else ""
        )
        kept = bool(n["kept"])
        verdicts.append(
            Verdict(
                n["key"],
                -1,
                n["op_type"],
                Status.REJECTED if kept else Status.SUPPORTED,
                explanation=(f"kept in float32 ({n['reason']}): " if kept else f"runs in {fmt}: ") + said,
                evidence=Evidence("emulation", f"{fmt} emulated on the CPU (surgery/emulate.py)"),
            )
        )
    return Report(f"precision:{fmt}", f"{fmt} emulation", "", verdicts)


def layer_precisions(keys: list[str], precision: str) -> str:
    """The keep set as trtexec flags for a weakly typed TensorRT build (the ONNX parser names each layer after
    its node): `--fp16 --precisionConstraints=obey --layerPrecisions=a:fp32,b:fp32`. INT8: `--int8` with the same
    constraints (a Q/DQ model is built strongly typed: use the quantize --exclude list instead)."""
    flag = {"fp16": "--fp16", "bf16": "--bf16", "int8": "--int8"}[precision]
    if not keys:
        return flag
    return f"{flag} --precisionConstraints=obey --layerPrecisions=" + ",".join(f"{k}:fp32" for k in keys)


def _samples(model: ModelProto, request: PrecisionRequest):
    from surgery.quantize import Calibration, CalibrationError

    try:
        calib = Calibration(model, request.calib, request.seed)
    except CalibrationError as exc:
        raise PrecisionInputError(str(exc)) from None
    return calib, [calib.sample(k) for k in range(min(len(calib), max(1, request.samples)))]


def all_reduced(model: ModelProto, precision: str, base_dir=None) -> tuple[float, list[str]]:
    """What an engine that keeps every intermediate in `precision` (fp16 | bf16) computes, emulated on seeded
    samples: the worst output's mean relative error and the nodes where inf/NaN first appears. What `build
    --fp16` adds to a backend's own numbers (onnxruntime's CPU provider computes many fp16 ops in fp32)."""
    from surgery.emulate import Emulator

    request = PrecisionRequest(precision)
    _, samples = _samples(model, request)
    emu = Emulator(model, precision, samples, base_dir=base_dir)
    result = emu.run(emu.candidates, watch=True)
    return result.error, [emu.nodes[k].key for k in emu.overflow_origins(result)]


def search(
    model: ModelProto,
    request: PrecisionRequest,
    *,
    base_dir=None,
    progress: Callable[[float, str], None] | None = None,
) -> PrecisionOutcome:
    """Find the keep set for `request` on `model` (not modified). Raises PrecisionInputError for bad input."""
    say = progress or (lambda f, m: None)
    started = time.perf_counter()
    if request.precision not in FORMATS:
        raise PrecisionInputError(f"precision must be one of {sorted(FORMATS)}, got {request.precision!r}")
    from surgery.model import name_not_utf8

    if (bad := name_not_utf8(model)) is not None:
        raise PrecisionInputError(f"{bad}; onnxruntime, which runs the emulation, reads every name as text")
    if not (request.tolerance >= 0):
        raise PrecisionInputError(f"--tolerance must be 0 or more, got {request.tolerance}")
    if not model.graph.node:
        raise PrecisionInputError("the graph has no nodes: nothing to run in reduced precision")
    calib, samples = _samples(model, request)
    quantized = None
    step_params: dict[str, Any] = {}
    if request.precision == "int8":
        quantized, step_params = _quantized(model, request, calib, base_dir, say)
    say(0.02, "float32 reference run")
    try:
        emu = Emulator(model, request.precision, samples, base_dir=base_dir, quantized=quantized)
    except ValueError as exc:
        raise PrecisionInputError(str(exc)) from None
    unknown = [k for k in request.keep if k not in emu.index]
    if unknown:
        raise PrecisionInputError(f"--keep names no node {', '.join(map(repr, unknown[:5]))} of the model")
    cand = list(emu.candidates)
    asked = {emu.index[k] for k in request.keep} & set(cand)
    say(0.05, f"everything in {request.precision}: {len(cand)} node(s)")
    before = emu.run(cand, watch=request.precision != "int8")
    origins = emu.overflow_origins(before) if request.precision != "int8" else []
    reason: dict[int, str] = {k: "asked" for k in asked}

    def error(keep: set[int]) -> float:
        return emu.run([k for k in cand if k not in keep]).error

    sens: dict[int, float] = {}
    if before.error > request.tolerance or asked:
        for k in emu.out_of_range():
            reason.setdefault(k, "overflow")
        for k in origins:
            if k in set(cand):
                reason.setdefault(k, "inf/NaN")
    keep = set(reason)
    if error(keep) > request.tolerance:
        rest = [k for k in cand if k not in keep]
        if request.sensitivity:
            for i, k in enumerate(rest):
                if i % 16 == 0:
                    say(0.1 + 0.6 * i / max(len(rest), 1), f"sensitivity: node {i + 1} of {len(rest)}")
                sens[k] = emu.run([k]).error
        order = sorted(rest, key=lambda k: (-sens.get(k, 0.0), -emu.nodes[k].max_abs, k))
        lo, hi = 0, len(order)  # error(keep + order[:hi]) is within (everything float32 but the rest)
        while lo < hi:
            mid = (lo + hi) // 2
            say(0.7 + 0.1 * (1 - (hi - lo) / max(len(order), 1)), f"bisection: keeping {mid} more node(s)")
            if error(keep | set(order[:mid])) <= request.tolerance:
                hi = mid
            else:
                lo = mid + 1
        chosen = order[:hi]
        for k in chosen:
            reason[k] = "sensitivity"
        keep |= set(chosen)
        trial = list(reversed(chosen))[:PRUNE_LIMIT]  # least sensitive first
        for i, k in enumerate(trial):
            say(0.8 + 0.15 * i / max(len(trial), 1), f"releasing kept nodes: {i + 1} of {len(trial)}")
            if error(keep - {k}) <= request.tolerance:
                keep.discard(k)
                reason.pop(k)
    # a node kept for an input past the range whose own outputs stay within it (Exp of a large negative, a
    # comparison) may compute in the format all the same: tried, kept only when the error needs it
    limit = emu.format.max
    for k in [k for k, why in reason.items() if why == "overflow" and emu.nodes[k].out_max_abs <= limit]:
        if error(keep - {k}) <= request.tolerance:
            keep.discard(k)
            reason.pop(k)
    say(0.97, "verifying the result")
    after = emu.run([k for k in cand if k not in keep], watch=request.precision != "int8")
    kept_keys = [emu.nodes[k].key for k in sorted(keep)]
    kept = [
        KeptNode(emu.nodes[k].key, emu.nodes[k].op_type, reason[k], emu.nodes[k].max_abs, sens.get(k))
        for k in sorted(keep)
    ]
    nodes = [
        {
            "key": f.key,
            "op_type": f.op_type,
            "max_abs": f.max_abs,
            "of_limit": f.max_abs / limit if limit not in (0, float("inf")) else 0.0,
            "sensitivity": sens.get(f.index),
            "kept": f.index in keep,
            "reason": reason.get(f.index, ""),
            "reduced": f.index in set(cand) and f.index not in keep,
        }
        for f in emu.nodes
        if f.float_math
    ]
    if not cand or (request.precision == "int8" and keep >= set(cand)):
        step = None  # nothing to reduce (INT8: no quantizable node left, which quantize refuses)
    elif request.precision == "int8":
        params = dict(step_params)
        if kept_keys:
            params["exclude"] = kept_keys
        step = Step(
            "quantize_int8", params, note=f"INT8, {len(kept_keys)} node(s) kept in float32 (precision)"
        )
    else:
        step = Step(
            "mixed_precision",
            {"precision": request.precision, "keep": kept_keys},
            note=f"{request.precision}, {len(kept_keys)} node(s) kept in float32 (precision)",
        )
    say(1.0, "done")
    return PrecisionOutcome(
        precision=request.precision,
        tolerance=request.tolerance,
        before=before,
        after=after,
        kept=kept,
        nodes=nodes,
        reduced_share=emu.reduced_share([k for k in cand if k not in keep]),
        seconds=time.perf_counter() - started,
        runs=emu.runs,
        samples=len(samples),
        step=step,
        layer_precisions=layer_precisions(kept_keys, request.precision),
        exclude=kept_keys if request.precision == "int8" else [],
        overflow_origins=[emu.nodes[k].key for k in origins],
    )


def _quantized(model, request, calib, base_dir, say):
    """The Q/DQ model `quantize` writes for every node, and the quantize_int8 step's parameters."""
    from surgery.quantize import (
        CalibrationError,
        calibration_digest,
        check_quantizable,
        progress_to,
        quantize,
    )

    params: dict[str, Any] = {"calib": calib.source.spec}
    try:
        check_quantizable(model)
        digest = calibration_digest(calib.source)
        if digest:
            params["sha256"] = digest
        if calib.source.kind == "random":
            params["seed"] = request.seed
        with progress_to(lambda f, m: say(0.01 * f, m)):
            q = quantize(model, calib.source.spec, seed=request.seed, base_dir=base_dir)
    except CalibrationError as exc:
        raise PrecisionInputError(str(exc)) from None
    return q, params
