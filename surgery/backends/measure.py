"""Latency and accuracy of a built engine: median and p90 over timed runs after warm-up; per output the max abs
error and the relative error distribution (surgery.verify's definitions: each element's |ref - got| /
max(mean(|ref|), 1e-12), its mean, p99 and max) against onnxruntime's fp32 run of the model as given to the
builder, on seeded inputs (surgery.feeds.seeded_inputs). A Q/DQ (INT8) model is compared against the float32
model it stands for, its Q/DQ pairs taken out (surgery.quantize.strip_qdq), not against itself."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from onnx import ModelProto

from surgery.text import error_line
from surgery.verify import accuracy

SEED = 0


def input_dims(model: ModelProto, shapes: dict[str, tuple[int, ...]] | None) -> dict[str, int]:
    """Symbolic dim values taken from concrete input shapes (e.g. a profile's opt shapes)."""
    dims: dict[str, int] = {}
    for vi in model.graph.input:
        shape = (shapes or {}).get(vi.name)
        if shape is None:
            continue
        for d, value in zip(vi.type.tensor_type.shape.dim, shape):
            if d.dim_param:
                dims[d.dim_param] = int(value)
    return dims


def feeds_for(model: ModelProto, shapes: dict[str, tuple[int, ...]] | None = None, seed: int = SEED) -> dict:
    """Seeded inputs: an input listed in `shapes` (a profile point) gets that shape, even where the model
    declares none; other dynamic dims are 1."""
    from onnx import helper

    from surgery.feeds import seeded_inputs

    shaped = model
    if shapes:
        shaped = ModelProto()
        shaped.CopyFrom(model)
        for vi in shaped.graph.input:
            if vi.name in shapes and vi.type.HasField("tensor_type"):
                t = vi.type.tensor_type
                vi.type.CopyFrom(helper.make_tensor_type_proto(t.elem_type, list(shapes[vi.name])))
    return seeded_inputs(shaped, seed=seed, dims=input_dims(model, shapes), default_dim=1)


def reference(
    model: ModelProto, base_dir=None, shapes: dict[str, tuple[int, ...]] | None = None, seed: int = SEED
) -> tuple[dict, dict]:
    """Seeded inputs (feeds_for) and onnxruntime's fp32 outputs for them."""
    from surgery.ort import run

    feeds = feeds_for(model, shapes, seed)
    return feeds, run(model, feeds, base_dir)


def opt_shapes(options) -> dict[str, tuple[int, ...]]:
    return {name: tuple(opt) for name, (_, opt, _) in options.profiles.items()}


POINTS = ("min", "opt", "max")


def point_shapes(options) -> dict[str, dict[str, tuple[int, ...]]]:
    """{"min": {input: shape}, "opt": ..., "max": ...} from the options' profiles; {} without profiles."""
    if not options.profiles:
        return {}
    return {
        point: {name: tuple(shapes[k]) for name, shapes in options.profiles.items()}
        for k, point in enumerate(POINTS)
    }


def dims_text(shapes: dict[str, tuple[int, ...]]) -> dict[str, str]:
    return {name: "x".join(str(d) for d in shape) for name, shape in shapes.items()}


def measure_points(
    report, model: ModelProto, base_dir, options, prepare, opt_ref=None, progress: Progress | None = None
) -> None:
    """With profiles: latency (and the worst output's mean relative error against onnxruntime fp32) at the
    profile's min, opt and max shapes into `report.latency_points`, the same seeded inputs on every backend so
    the rows compare. A point the engine cannot run is recorded with its error; the others stand."""
    points = point_shapes(options)
    if not points or not options.measure:
        return
    report.latency_points = {}
    for point, shapes in points.items():
        entry: dict = {"shapes": dims_text(shapes)}
        try:
            if point == "opt" and opt_ref is not None and report.latency_ms:
                ref, got = opt_ref
                entry.update(report.latency_ms)
            else:
                feeds, ref = reference(model, base_dir, shapes)
                run_once = prepare(feeds)
                got = run_once()
                told = (
                    None if progress is None else lambda f, what, p=point: progress(f, f"{p} shapes, {what}")
                )
                entry.update(latency(run_once, options.runs, options.warmup, options.time_budget_s, told))
            errors = [v["mean_rel"] for v in accuracy(ref, got).values()]
            entry["worst_mean_rel"] = max(errors) if errors else None
        except Exception as exc:  # e.g. an engine compiled for one shape: this point only is missing
            entry["error"] = error_line(exc)
        report.latency_points[point] = entry


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def measure_into(
    report, model: ModelProto, base_dir, options, prepare, progress: Progress | None = None
) -> None:
    """Fill `report.accuracy` and `report.latency_ms`: `prepare(feeds)` returns a call that runs the built
    engine once and returns its outputs by name. A measurement that fails leaves the build standing and says
    why in `report.note`. Nothing runs when `options.measure` is off (a check's build stage). `progress`: told
    of each timed run (`timing_progress`)."""
    if not options.measure:
        return
    try:
        from surgery.quantize import has_qdq, strip_qdq

        ref_model = model
        if has_qdq(model):
            ref_model, exact = strip_qdq(model)
            feeds, ref = reference(ref_model, base_dir, opt_shapes(options))
            why = (
                "INT8 (Q/DQ) compared against its float32 original (the model with its Q/DQ pairs taken out)"
            )
            if not exact:
                why += "; its INT8 weights were dequantized for that, so weight rounding does not show"
            report.note = f"{report.note}; {why}" if report.note else why
        else:
            feeds, ref = reference(model, base_dir, opt_shapes(options))
        run_once = prepare(feeds)
        first, second = run_once(), run_once()
        report.accuracy = accuracy(ref, first)
        report.latency_ms = latency(run_once, options.runs, options.warmup, options.time_budget_s, progress)
        changed = [n for n in first if n in second and not _same(first[n], second[n])]
        if changed:
            why = f"outputs {', '.join(changed)} change from run to run on the same inputs (random ops?)"
            report.note = f"{report.note}; {why}" if report.note else why
    except Exception as exc:  # the engine exists; only its numbers are missing
        why = f"built, but not measured: {error_line(exc)}"
        report.note = f"{report.note}; {why}" if report.note else why
        return
    if options.profiles:
        measure_points(report, ref_model, base_dir, options, prepare, (ref, first), progress)


MIN_TIMED_RUNS = 3  # a median and p90 of fewer say little


Progress = Callable[[float, str], None]  # (how far the timing is, 0..1; what it is doing)
PROGRESS_EVERY_S = (
    0.25  # a timing of many short runs reports at most this often (each report is a file write)
)


def timing_progress(label: str, start: float, end: float = 0.98) -> Progress:
    """A `latency` progress that moves a build's bar (surgery.isolate.report_progress) from `start` to `end`,
    its message `LABEL: timing, run K ...`."""
    from surgery.isolate import report_progress

    return lambda done, what: report_progress(start + (end - start) * done, f"{label}: timing, {what}")


def latency(
    fn: Callable[[], object],
    runs: int,
    warmup: int,
    budget_s: float | None = None,
    progress: Progress | None = None,
) -> dict[str, float]:
    """Median and p90 wall time of `fn` in milliseconds over `runs` calls after `warmup` calls; with `budget_s`,
    warm-up and timing stop once that many seconds have passed (after at least MIN_TIMED_RUNS timed calls, and
    no more than `runs`). "runs": how many were timed; "budget_s" when the budget stopped them. `progress` hears
    of the warm-up and of each timed run (at most every PROGRESS_EVERY_S seconds, and of the last)."""
    start = time.perf_counter()

    def spent() -> bool:
        return budget_s is not None and time.perf_counter() - start >= budget_s

    def tell(k: int, last: bool = False) -> None:
        """After the k-th timed run (0: warming up); `last`: told even if one was told a moment ago."""
        nonlocal told, told_k
        now = time.perf_counter()
        if progress is None or k == told_k or (not last and now - told < PROGRESS_EVERY_S):
            return
        told, told_k = now, k
        if k == 0:
            progress(0.0, f"warming up ({max(warmup, 0)} run(s))")
        elif budget_s is None:
            progress(k / total, f"run {k} of {total}")
        else:
            elapsed = now - start
            progress(
                min(1.0, max(k / total, elapsed / budget_s)),
                f"run {k} of up to {total}, {elapsed:.1f} of {budget_s:g} s",
            )

    total = max(runs, 1)
    told, told_k = -PROGRESS_EVERY_S, None
    tell(0)
    for _ in range(max(warmup, 0)):
        if spent():
            break
        fn()
    times = []
    for k in range(total):
        if k >= min(MIN_TIMED_RUNS, runs) and spent():
            break
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
        tell(len(times))
    tell(len(times), last=True)
    out = {"median": float(np.median(times)), "p90": float(np.percentile(times, 90)), "runs": len(times)}
    if len(times) < runs:
        out["budget_s"] = float(budget_s)
    return out
