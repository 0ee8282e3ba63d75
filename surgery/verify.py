"""Check a changed model against the original: same seeded inputs, onnxruntime, per-output error.

Definitions, used everywhere in ONNX Surgery (verification, test builds, benchmarks):

- max absolute error: max(|a - b|) over the elements, with `a` the original's output and `b` the changed one's;
- mean relative error: mean(|a - b|) / max(mean(|a|), 1e-12) — the average error in units of the output's
  average magnitude. One number per output, not a per-element ratio: a near-zero element cannot blow it up;
- relative error distribution (INT8 and other lossy builds): each element's |a - b| in the same unit,
  max(mean(|a|), 1e-12); its mean is the mean relative error, with its 99th percentile and maximum beside it.

NaN in the same place in both outputs counts as equal; NaN on one side only counts as an infinite error.

Thresholds for an EXACT fix (mean relative error): `rtol_fp32` (1e-6) for float32 and float64 outputs, 1e-3 for
float16/bfloat16 (10 mantissa bits), and 0 for integer and bool outputs (any difference is a different result).
An APPROXIMATE fix is held to the `bound` its rule states: on every output, the max absolute error as a fraction of
that output's range in the original (max - min over the run's finite values; `OutputError.of_range`). Without a
bound, and for CHANGES_SEMANTICS fixes, the numbers are reported but never fail.

Symbolic input dims take their size from `dims` (by name), else from the changed model where it fixed that dim
(after freeze_shapes), else the first of FREE_DIM_SIZES (1, 16, 512, 16000) at which the original runs. A model onnxruntime cannot run (custom op, plugin node) gives status `skipped`
with "not verifiable with onnxruntime: <reason>", never an exception.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from onnx import ModelProto

from surgery.feeds import MASK_BATCH, describe
from surgery.model import copy_message
from surgery.text import first_line
from surgery.verdict import Safety

EXACT_MEAN_REL_FP32 = 1e-6
EXACT_MEAN_REL_FP16 = 1e-3


def mean_relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """mean(|a - b|) / max(mean(|a|), 1e-12); NaN at the same places counts as equal."""
    diff, mag = _diff(a, b)
    if diff.size == 0:
        return 0.0
    return float(np.mean(diff) / max(float(np.mean(mag)), 1e-12))


def relative_error_distribution(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Each element's |a - b| / max(mean(|a|), 1e-12): its mean (= mean_relative_error), p99 and max."""
    diff, mag = _diff(a, b)
    if diff.size == 0:
        return {"mean_rel": 0.0, "p99_rel": 0.0, "max_rel": 0.0}
    unit = max(float(np.mean(mag)), 1e-12)
    rel = diff.reshape(-1) / unit
    p99 = float(np.percentile(rel, 99)) if np.isfinite(rel).all() else float("inf")
    return {"mean_rel": float(np.mean(diff) / unit), "p99_rel": p99, "max_rel": float(np.max(rel))}


def max_abs_error(a: np.ndarray, b: np.ndarray) -> float:
    diff, _ = _diff(a, b)
    return float(np.max(diff)) if diff.size else 0.0


def _diff(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        diff = np.abs(a64 - b64)
    both_nan = np.isnan(a64) & np.isnan(b64)
    same_inf = np.isinf(a64) & (a64 == b64)
    diff = np.where(both_nan | same_inf, 0.0, np.where(np.isnan(diff), np.inf, diff))
    mag = np.where(np.isfinite(a64), np.abs(a64), 0.0)
    return diff, mag


def exact_threshold(dtype: np.dtype, rtol_fp32: float = EXACT_MEAN_REL_FP32) -> float:
    """The mean relative error an EXACT fix may show on an output of this dtype."""
    dtype = np.dtype(dtype)
    if dtype in (np.float32, np.float64):
        return rtol_fp32
    if dtype.kind == "f" or dtype.name == "bfloat16":
        return EXACT_MEAN_REL_FP16
    return 0.0


@dataclass
class OutputError:
    name: str
    max_abs: float
    mean_rel: float
    shape: tuple[int, ...]
    note: str = ""
    dtype: str = ""
    changed_name: str = ""  # the name in the changed model when the output was renamed
    of_range: float = (
        0.0  # max_abs as a fraction of the original output's range (what an approximate bound caps)
    )


SUMMARY_OUTPUTS = 20  # a summary names at most this many outputs, the worst


@dataclass
class VerifyReport:
    status: str  # "ok" | "failed" | "skipped"
    safety: str
    outputs: list[OutputError] = field(default_factory=list)
    message: str = ""
    seed: int = 0
    feeds: dict[str, list[int]] = field(default_factory=dict)  # input name -> the shape it ran with
    bound: float | None = (
        None  # an approximate fix's promise: max abs within this fraction of each output's range
    )
    drawn: dict[str, str] = field(
        default_factory=dict
    )  # input name -> how its values were drawn (surgery.feeds)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def worst(self) -> tuple[float, float]:
        if not self.outputs:
            return 0.0, 0.0
        return max(o.max_abs for o in self.outputs), max(o.mean_rel for o in self.outputs)

    def summary(self) -> str:
        if self.status == "skipped":
            return f"not verified: {self.message}"
        ranged = self.safety == "approximate"
        shown = self.outputs
        if len(shown) > SUMMARY_OUTPUTS:  # the worst first (a changed region can have thousands)
            shown = sorted(shown, key=lambda o: (o.mean_rel, o.max_abs), reverse=True)[:SUMMARY_OUTPUTS]
        per = "; ".join(
            f"{o.name}{' -> ' + o.changed_name if o.changed_name else ''}: max abs {o.max_abs:.3g}"
            + (f" ({o.of_range:.2%} of its range)" if ranged else "")
            + f", mean rel {o.mean_rel:.3g}"
            for o in shown
        ) + (
            f"; {len(self.outputs) - len(shown)} more output(s) (the {len(shown)} with the largest errors shown)"
            if len(shown) < len(self.outputs)
            else ""
        )
        head = {"ok": "verified", "failed": "VERIFICATION FAILED"}[self.status]
        within = f", bound {self.bound:.2%} of range" if self.bound is not None else ""
        inputs = describe(self.drawn)  # only inputs drawn for their meaning (token ids, masks, ...)
        return (
            f"{head} ({self.safety}{within}, seed {self.seed}): {per}"
            + (f" — {self.message}" if self.message else "")
            + (f" — inputs: {inputs}" if inputs else "")
        )

    def to_dict(self) -> dict:
        return asdict(self)


def _with_outputs(model: ModelProto, names: list[str]) -> ModelProto:
    """A copy of `model` that also returns the intermediate tensors `names` (when it has them)."""
    from onnx import helper

    have = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    extra = [n for n in names if n in have and n not in {o.name for o in model.graph.output}]
    if not extra:
        return model
    out = copy_message(model)
    out.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in extra)
    return out


def _cone(model: ModelProto, names: list[str]) -> ModelProto | None:
    """A copy of `model` computing only `names` (the nodes they need): the original part an extracted or cut
    model corresponds to, runnable even when the rest holds a node onnxruntime cannot run."""
    from onnx import helper

    from surgery.graph import all_inputs

    producer = {o: i for i, n in enumerate(model.graph.node) for o in n.output if o}
    if not names or any(n not in producer and n not in {i.name for i in model.graph.input} for n in names):
        return None
    need, stack = set(), list(names)
    while stack:
        i = producer.get(stack.pop())
        if i is not None and i not in need:
            need.add(i)
            stack.extend(all_inputs(model.graph.node[i]))
    out = ModelProto()
    out.CopyFrom(model)
    kept = [n for i, n in enumerate(model.graph.node) if i in need]
    del out.graph.node[:]
    out.graph.node.extend(kept)
    del out.graph.output[:]
    out.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    return out


def _zipmap_keys(model: ModelProto) -> dict[str, list]:
    """The class labels of each ZipMap's output (the order of its maps' keys), by output name: one pass."""
    from onnx import helper

    out = {}
    for node in model.graph.node:
        if node.op_type == "ZipMap":
            for attr in node.attribute:
                if attr.name in ("classlabels_int64s", "classlabels_strings"):
                    keys = helper.get_attribute_value(attr)
                    for o in node.output:
                        out[o] = [k.decode() if isinstance(k, bytes) else k for k in keys]
    return out


def _maps_as_rows(value, keys: list | None) -> tuple[np.ndarray, bool]:
    """(array, was a sequence of maps): a sequence of maps (ZipMap's output) becomes [N, classes] float32 with
    the columns in `keys` order (else the first map's), so that it compares with the probability tensor."""
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        order = keys if keys is not None and set(keys) == set(value[0]) else list(value[0])
        return np.array([[m[k] for k in order] for m in value], np.float32), True
    return np.asarray(value), False


RUN_TIMEOUT_S = 600.0
RUN_IN_WORKER = "surgery.ort:run_serialized"


def prewarm_verification() -> None:
    """Start the worker that verification's onnxruntime runs take, importing what they need, while the caller
    goes on (a fix applying its first step): the run then does not wait for an interpreter and onnxruntime's
    import. Nothing when such a worker is idle already."""
    from surgery.isolate import prewarm

    prewarm((RUN_FIRST_IN_WORKER.partition(":")[0], "onnxruntime"))


def _run(model: ModelProto, feeds, base_dir):
    """The model's outputs, computed by onnxruntime in an isolated worker: random inputs can crash a kernel
    (an integer division by a zero input is SIGFPE), and a crash must not take the CLI or the app with it."""
    return _in_worker(RUN_IN_WORKER, model, feeds, base_dir)


def _in_worker(worker: str, model: ModelProto | bytes, payload, base_dir, patch: bytes = b""):
    """`worker` ("module:function") called in an isolated process on the serialized model, `payload`, the
    folder of its external data and `patch` (bytes the worker's onnxruntime merges into the model, with what
    makes a ModelProto runnable: surgery.ort.runnable_patch; a caller giving bytes gives that in `patch`); a
    missing input is a ValueError, a crash or a time-out a RuntimeError naming onnxruntime ("onnxruntime
    crashed: signal 8 (SIGFPE)")."""
    from surgery.isolate import BackendCrash, call_isolated
    from surgery.ort import runnable_patch

    if not isinstance(model, bytes):
        model, patch = model.SerializeToString(), patch + runnable_patch(model)
    try:
        return call_isolated(
            worker,
            model,
            payload,
            str(base_dir) if base_dir is not None else None,
            patch,
            timeout=RUN_TIMEOUT_S,
        )
    except BackendCrash as exc:
        message = str(exc)
        if "no value for input" in message:
            raise ValueError(message.split(": ", 1)[-1]) from None
        raise RuntimeError(message.replace("backend ", "onnxruntime ", 1)) from None


def _input_dims(original: ModelProto, changed: ModelProto, dims: dict[str, int] | None) -> dict[str, int]:
    """Sizes for symbolic dims: `dims` first, then what the changed model fixed at the same place, else 1."""
    from surgery.graph import tensor_info_from_type

    chosen: dict[str, int] = {}
    fixed = {vi.name: tensor_info_from_type(vi.name, vi.type).shape for vi in changed.graph.input}
    for vi in original.graph.input:
        shape = tensor_info_from_type(vi.name, vi.type).shape
        other = fixed.get(vi.name)
        for k, d in enumerate(shape or ()):
            if isinstance(d, str) and other is not None and k < len(other) and isinstance(other[k], int):
                chosen.setdefault(d, other[k])
    return chosen | dict(dims or {})


# Sizes tried for symbolic dims nobody gave, smallest first, while the original fails at run time (ORT: "Non-zero
# status code returned while running", or a kernel crash in the isolated worker): 1 is cheapest, but an audio front
# end needs at least one window (STFT n_fft 400-512 samples) and some models a minimum length. A size whose inputs
# pass FEED_LIMIT is not tried.
FREE_DIM_SIZES = (1, 16, 512, 16000)
FEED_LIMIT = 1 << 24  # elements per input
RUN_FAILURE = "Non-zero status code returned while running"


def _reference_run(original, changed, reference, seed, dims, base_dir):
    """(the drawn inputs, the original's outputs) at the first free-dim size the original runs at; raises the
    smallest size's failure when none runs. The inputs are surgery.feeds': token ids within the embedding table,
    padded masks (two rows, else one: some exports run at one only), related KV cache lengths. The sizes are
    tried in one session (making one costs more than running it: 8 s of CPU at 50k nodes); a crash or a session
    that cannot be made is tried again size by size, with the cone of what the changed model keeps."""
    drawer = _Drawer(original, changed, seed, dims)
    sets = _feed_sets(original, changed, seed, dims, drawer)
    try:
        k, a = _run_first(reference, [s.arrays for s in sets], base_dir)
        return sets[k], a
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        if "no value for input" in str(exc):
            raise
    first_error, tried = None, []
    for size in FREE_DIM_SIZES:
        fresh = False
        for rows in (MASK_BATCH, 1):  # a padded mask needs two rows; some exports run at one only
            drawn = drawer(size, rows)
            shapes = {k: np.shape(v) for k, v in drawn.arrays.items()}
            if shapes in tried:
                continue  # the same inputs again (no free dim, or no text rows)
            if tried and max(map(np.prod, shapes.values()), default=0) > FEED_LIMIT:
                raise first_error  # too large to try
            fresh = True
            tried.append(shapes)
            try:
                return drawn, _run_or_cone(reference, original, changed, drawn.arrays, base_dir)
            except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
                first_error = first_error or exc
                if not any(why in str(exc) for why in (RUN_FAILURE, "onnxruntime crashed")):
                    raise first_error from None  # the session cannot be made at all: sizes do not matter
        if not fresh:
            break
    raise first_error


class _Drawer:
    """`draw_for_both(original, changed, seed, dims, size, rows)` at any size, each model's input kinds
    (surgery.feeds.input_kinds: a pass over the whole graph, seconds at 50k nodes) found once for all sizes."""

    def __init__(self, original: ModelProto, changed: ModelProto, seed: int, dims: dict[str, int] | None):
        self.original, self.changed, self.seed, self.dims = original, changed, seed, dims or {}
        self.kinds: dict[int, dict] = {}
        self.calls = 0  # input_kinds passes made (tests count them)

    def _draw(self, model: ModelProto, size: int, rows: int | None):
        from surgery.feeds import draw, input_kinds

        if id(model) not in self.kinds:
            self.kinds[id(model)] = input_kinds(model)
            self.calls += 1
        return draw(
            model,
            seed=self.seed,
            dims=self.dims,
            default_dim=size,
            text_rows=rows,
            kinds=self.kinds[id(model)],
        )

    def __call__(self, size: int, rows: int | None):
        try:
            return self._draw(self.original, size, rows)
        except ValueError as first:  # as draw_for_both: the changed model's where the original has no shape
            try:
                return self._draw(self.changed, size, rows)
            except ValueError:
                raise first from None


def _feed_sets(original, changed, seed, dims, drawer: _Drawer | None = None) -> list:
    """The drawn inputs (surgery.feeds) at each size of FREE_DIM_SIZES, smallest first, two text rows then one,
    while the sizes change the inputs and stay within FEED_LIMIT; at least the first, and at most FEED_LIMIT
    elements in all."""
    drawer = drawer or _Drawer(original, changed, seed, dims)
    sets, tried, total = [], [], 0
    for size in FREE_DIM_SIZES:
        for rows in (MASK_BATCH, 1):
            try:
                drawn = drawer(size, rows)
            except ValueError:
                if not sets:
                    raise
                return sets  # a larger size the inputs cannot take: the smaller ones are tried
            shapes = {k: np.shape(v) for k, v in drawn.arrays.items()}
            if shapes in tried:
                continue
            total += sum(int(np.prod(s)) for s in shapes.values())
            if tried and (max(map(np.prod, shapes.values()), default=0) > FEED_LIMIT or total > FEED_LIMIT):
                return sets
            tried.append(shapes)
            sets.append(drawn)
    return sets


RUN_FIRST_IN_WORKER = "surgery.verify:run_first"


def run_first(
    data: bytes, feed_sets: list[dict], base_dir: str | None = None, patch: bytes = b""
) -> tuple[int, dict]:
    """The worker's side of `_run_first`: one session of the serialized model (`patch` merged into it: see
    surgery.ort.serialized_session), run on each set of inputs in turn until one runs: (its index, every
    output). Raises the first set's failure when none runs."""
    from surgery.ort import serialized_session

    sess = serialized_session(data, base_dir, patch)
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    first = None
    for k, feeds in enumerate(feed_sets):
        missing = wanted - set(feeds)
        if missing:
            raise ValueError(f"no value for input(s) {sorted(missing)}")
        try:
            return k, dict(zip(names, sess.run(names, {n: v for n, v in feeds.items() if n in wanted})))
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            if RUN_FAILURE not in str(exc):
                raise
            first = first or exc
    raise first


def _run_first(
    model: ModelProto | bytes, feed_sets: list[dict], base_dir, patch: bytes = b""
) -> tuple[int, dict]:
    """`run_first` in an isolated worker (see `_run`); `model` may be given serialized already, `patch` merged
    into it there."""
    return tuple(_in_worker(RUN_FIRST_IN_WORKER, model, feed_sets, base_dir, patch))


def _run_or_cone(reference, original, changed, feeds, base_dir):
    try:
        return _run(reference, feeds, base_dir)
    except Exception:
        cone = _cone(original, [o.name for o in changed.graph.output])
        if cone is None:
            raise
        return _run(cone, feeds, base_dir)


# Bool inputs (an If's run-time condition, a flag) are fed every way as well as seeded: each combination of all-true
# and all-false for up to BOOL_COMBINATIONS_UP_TO of them (2^k runs), else all true and all false together, so that
# both branches of a conditional are compared, whatever the seed draws.
BOOL_COMBINATIONS_UP_TO = 3


def verify(
    original: ModelProto,
    changed: ModelProto,
    *,
    base_dir: str | Path | None = None,
    feeds: dict[str, np.ndarray] | None = None,
    seed: int = 0,
    safety: Safety | str = Safety.EXACT,
    rtol_fp32: float = EXACT_MEAN_REL_FP32,
    dims: dict[str, int] | None = None,
    bound: float | None = None,
) -> VerifyReport:
    """Run both models on the same inputs and compare every output of the original.

    Outputs are matched by name; an output of the original missing from the changed model is matched to an
    unmatched output at the same position (reported as renamed), else reported as removed. An EXACT fix fails
    when an output's mean relative error exceeds its dtype's threshold (see the module doc), when an output's
    shape or dtype changes, or when an output is removed; an APPROXIMATE fix with a `bound` fails when an output's
    max absolute error passes that fraction of its range (or its shape or dtype changes). Without `feeds`, bool inputs are also fed all true and
    all false (see BOOL_COMBINATIONS_UP_TO); the report then holds the worst of the runs, per output.
    """
    report, used = _verify_once(
        original,
        changed,
        base_dir=base_dir,
        feeds=feeds,
        seed=seed,
        safety=safety,
        rtol_fp32=rtol_fp32,
        dims=dims,
        bound=bound,
    )
    if feeds is not None or report.status == "skipped" or not used:
        return report
    flags = [k for k, v in used.items() if np.asarray(v).dtype == np.bool_]
    if not flags:
        return report
    import itertools

    if len(flags) <= BOOL_COMBINATIONS_UP_TO:
        ways = list(itertools.product((True, False), repeat=len(flags)))
    else:
        ways = [(True,) * len(flags), (False,) * len(flags)]
    reports, said = [report], []
    for way in ways:
        variant = dict(used)
        for name, value in zip(flags, way):
            variant[name] = np.full(np.shape(used[name]), value, dtype=np.bool_)
        said.append(", ".join(f"{n}={'true' if v else 'false'}" for n, v in zip(flags, way)))
        one, _ = _verify_once(
            original,
            changed,
            base_dir=base_dir,
            feeds=variant,
            seed=seed,
            safety=safety,
            rtol_fp32=rtol_fp32,
            bound=bound,
        )
        reports.append(one)
    return _worst(reports, f"bool inputs fed both ways ({'; '.join(said)}) as well as seeded")


def _worst(reports: list[VerifyReport], note: str) -> VerifyReport:
    """One report for several runs: per output the largest errors, failed when one run failed, skipped when one
    could not run (with its message)."""
    skipped = next((r for r in reports if r.status == "skipped"), None)
    if skipped is not None:
        return skipped
    first = reports[0]
    outputs = []
    for k, o in enumerate(first.outputs):
        same = [r.outputs[k] for r in reports if k < len(r.outputs) and r.outputs[k].name == o.name]
        worst = max(same, key=lambda e: (e.mean_rel, e.max_abs))
        outputs.append(
            OutputError(
                o.name,
                max(e.max_abs for e in same),
                max(e.mean_rel for e in same),
                o.shape,
                worst.note,
                o.dtype,
                o.changed_name,
                max(e.of_range for e in same),
            )
        )
    messages = list(dict.fromkeys(m for r in reports for m in r.message.split("; ") if m))
    status = "failed" if any(r.status == "failed" for r in reports) else "ok"
    joined = "; ".join([*messages, note])
    return VerifyReport(
        status, first.safety, outputs, joined, first.seed, first.feeds, first.bound, first.drawn
    )


def _verify_once(
    original: ModelProto,
    changed: ModelProto,
    *,
    base_dir: str | Path | None = None,
    feeds: dict[str, np.ndarray] | None = None,
    seed: int = 0,
    safety: Safety | str = Safety.EXACT,
    rtol_fp32: float = EXACT_MEAN_REL_FP32,
    dims: dict[str, int] | None = None,
    bound: float | None = None,
) -> tuple[VerifyReport, dict[str, np.ndarray] | None]:
    """`verify` on one set of inputs: the report and the inputs it ran with (None when it did not run)."""
    safety = Safety(safety)
    bound = bound if safety is Safety.APPROXIMATE else None
    if len(original.graph.node) >= REGION_FROM_NODES:
        region = changed_region(original, changed)
        done = region and _verify_region(
            original, changed, region, base_dir, feeds, seed, safety, rtol_fp32, bound, dims
        )
        if done and done[0].status == "ok" and (safety is Safety.EXACT or _identical(done[0])):
            if _identical(done[0]):
                done[0].message += "; identical, so the rest of the model computes the same outputs"
            return done
    # a changed model may expose tensors the original computes inside (an extracted subgraph): compare those
    reference = _with_outputs(original, [o.name for o in changed.graph.output])
    shapes: dict = {}
    drawn: dict[str, str] = {}
    which = "original"
    try:
        if feeds is None:
            try:
                made, a = _reference_run(
                    original, changed, reference, seed, _input_dims(original, changed, dims), base_dir
                )
                feeds, drawn = made.arrays, made.drawn
            except ValueError as exc:
                if "no value for input" in str(exc):
                    raise
                return VerifyReport(
                    "skipped", safety.value, message=f"no inputs to run with: {exc}", seed=seed, bound=bound
                ), None
        else:
            a = _run_or_cone(reference, original, changed, feeds, base_dir)
        shapes = {k: list(np.shape(v)) for k, v in feeds.items()}
        which = "changed"
        b = _run(changed, feeds, base_dir)
    except Exception as exc:
        line = first_line(str(exc)) or type(exc).__name__
        return VerifyReport(
            "skipped",
            safety.value,
            message=f"not verifiable with onnxruntime: the {which} model does not run ({line})",
            seed=seed,
            feeds=shapes,
            bound=bound,
            drawn=drawn,
        ), None
    declared = [o.name for o in original.graph.output]
    a_order = declared + [n for n in a if n not in declared]
    b_order = [o.name for o in changed.graph.output]
    report = _compare(original, a, b, a_order, b_order, safety, rtol_fp32, bound)
    report.seed, report.feeds, report.drawn = seed, shapes, drawn
    return report, feeds


def _compare(
    original: ModelProto,
    a: dict,
    b: dict,
    a_order: list[str],
    b_order: list[str],
    safety: Safety,
    rtol_fp32: float,
    bound: float | None,
    notes: list[str] | None = None,
) -> VerifyReport:
    """The original's values `a` against the changed model's `b`, output by output in `a_order` (matched by
    name, else by position in `b_order`), held to `safety` (see `verify`); `notes` come first in the message."""
    pairs, notes, failed = [], list(notes or []), False
    zipmaps = _zipmap_keys(original)
    unmatched_b = [n for n in b_order if n not in a]
    for pos, name in enumerate(n for n in a_order if n in a):
        if name in b:
            pairs.append((name, name))
            continue
        at = b_order[pos] if pos < len(b_order) else None
        if at in unmatched_b:
            unmatched_b.remove(at)
            pairs.append((name, at))
            notes.append(f"output '{name}' renamed to '{at}'")
        else:
            notes.append(f"output '{name}' removed from the changed model")
            failed = failed or safety is not Safety.CHANGES_SEMANTICS
    notes += [f"new output '{n}'" for n in unmatched_b]
    held = safety is Safety.EXACT or bound is not None  # a shape or dtype change fails what promises numbers
    outputs = []
    for name, other_name in pairs:
        keys = zipmaps.get(name)
        value, was_maps = _maps_as_rows(a[name], keys)
        other, is_maps = _maps_as_rows(b[other_name], keys)
        renamed = other_name if other_name != name else ""
        if was_maps != is_maps:  # ZipMap dropped: its maps are compared with the tensor, key by key
            change = (
                "a sequence of maps became a tensor" if was_maps else "a tensor became a sequence of maps"
            )
            notes.append(f"output '{name}': {change}")
            failed = failed or safety is not Safety.CHANGES_SEMANTICS
        if value.shape != other.shape:
            note = f"shape {value.shape} became {other.shape}"
            outputs.append(OutputError(name, np.inf, np.inf, value.shape, note, str(value.dtype), renamed))
            notes.append(f"output '{name}': {note}")
            failed = failed or safety is not Safety.CHANGES_SEMANTICS
            continue
        dtype_note = "" if value.dtype == other.dtype else f"dtype {value.dtype} became {other.dtype}"
        if value.dtype.kind in "OUS":
            same = bool(np.all(value == other))
            err = 0.0 if same else float("inf")
            outputs.append(OutputError(name, err, err, value.shape, dtype_note, str(value.dtype), renamed))
        else:
            max_abs = max_abs_error(value, other)
            outputs.append(
                OutputError(
                    name,
                    max_abs,
                    mean_relative_error(value, other),
                    tuple(value.shape),
                    dtype_note,
                    str(value.dtype),
                    renamed,
                    share_of_range(max_abs, value),
                )
            )
        if dtype_note:
            notes.append(f"output '{name}': {dtype_note}")
            failed = failed or held
        if bound is not None and outputs[-1].of_range > bound:
            failed = True
            notes.append(
                f"output '{name}': beyond the rule's bound: max abs {outputs[-1].max_abs:.3g} is "
                f"{outputs[-1].of_range:.2%} of the output's range; the rule promises at most {bound:.2%}"
            )
        if safety is Safety.EXACT and value.dtype.kind not in "OUS":
            limit = exact_threshold(value.dtype, rtol_fp32)
            if outputs[-1].mean_rel > limit:
                failed = True
                notes.append(
                    f"output '{name}': an exact fix must stay within {limit:g} mean relative error "
                    f"({value.dtype}); got {outputs[-1].mean_rel:.3g} (max abs {outputs[-1].max_abs:.3g})"
                )
        elif safety is Safety.EXACT and outputs[-1].mean_rel > 0:
            failed = True
            notes.append(f"output '{name}': values differ")
    floats = [np.asarray(a[n]) for n, _ in pairs if np.asarray(a[n]).dtype.kind == "f"]
    if floats and not any(np.any(v) for v in floats):  # nothing to compare: say so rather than "max abs 0"
        notes.append(
            "the original's float outputs are all zero on these inputs, so this comparison shows little "
            "(seeded integer inputs are 0..3: lengths and indices may need real values)"
        )
    status = "failed" if failed else "ok"
    return VerifyReport(status, safety.value, outputs, "; ".join(notes), bound=bound)


# A change to a model of at least REGION_FROM_NODES nodes is verified on its changed region rather than by running
# both whole models: a session of a 50k-node model takes 8 s of CPU to make, one of its changed region a fraction
# of that. The model before the change runs once, returning the tensors at the region's boundary; the changed
# region runs on those values and its outputs are compared with what the whole model computed there. That
# comparison stands for an exact change that passes it, and for any change whose region outputs are identical
# (the rest of the model then computes the very same outputs: an approximate bound or a change of semantics
# holds with no error at all). Anything else, a failure included, is verified on the whole models, as a small
# model is: a refusal always rests on the model's outputs.
REGION_FROM_NODES = 5000
REGION_AT_MOST = 0.5  # of the changed model's nodes: a larger region is verified whole (no cheaper)


@dataclass
class Region:
    """What a change rewrote: the changed model's nodes that are not in the model before it (in its order), the
    tensors they read from the rest of the model or its inputs, and the tensors they write that the rest of the
    model or its outputs read (each written by the region on both sides)."""

    nodes: list
    inputs: list[str]
    outputs: list[str]
    removed: int  # nodes of the model before that the change dropped or rewrote


def changed_region(before: ModelProto, after: ModelProto) -> Region | None:
    """The region `after` changed in `before`, found by comparing nodes (as serialized) and initializers (by name
    and value); a node left as it was that reads a changed initializer is part of it. None where the change is
    not confined to nodes and weights (inputs, outputs, opsets, functions, bodies), where the region is more
    than REGION_AT_MOST of the model, reads a tensor the model before does not compute, or changes nothing."""
    from collections import Counter

    from onnx import AttributeProto

    gb, ga = before.graph, after.graph
    if (
        before.ir_version != after.ir_version
        or list(before.opset_import) != list(after.opset_import)
        or before.functions
        or after.functions
        or gb.sparse_initializer
        or ga.sparse_initializer
        or list(gb.input) != list(ga.input)
        or [o.name for o in gb.output] != [o.name for o in ga.output]
    ):
        return None
    bodies = (AttributeProto.GRAPH, AttributeProto.GRAPHS)
    if any(a.type in bodies for g in (gb, ga) for n in g.node for a in n.attribute):
        return None
    old_init = {t.name: t for t in gb.initializer}
    new_init = {t.name: t for t in ga.initializer}
    changed = {n for n in old_init.keys() | new_init.keys() if old_init.get(n) != new_init.get(n)}
    left = Counter(n.SerializeToString() for n in gb.node)
    added = []  # indices in `after` of the nodes the change wrote
    for i, n in enumerate(ga.node):
        key = n.SerializeToString()
        if left[key] > 0 and not changed.intersection(n.input):
            left[key] -= 1
        else:
            added.append(i)
    dropped = +left  # the nodes of `before` not kept, as serialized
    if not added or len(added) > REGION_AT_MOST * len(ga.node):
        return None
    added_set = set(added)
    kept_reads = {x for i, n in enumerate(ga.node) if i not in added_set for x in n.input if x}
    read_outside = kept_reads | {o.name for o in ga.output}
    writes_after = [o for i in added for o in ga.node[i].output if o]
    writes_before = set()
    for n in gb.node:
        key = n.SerializeToString() if n.output else None
        if key is not None and (dropped[key] > 0 or changed.intersection(n.input)):
            writes_before.update(o for o in n.output if o)
    outputs = [t for t in writes_after if t in read_outside]
    before_outputs = {t for t in writes_before if t in read_outside}
    if not outputs or set(outputs) != before_outputs:
        return None  # the two sides write different tensors the rest reads: not one region to compare
    written = set(writes_after)
    inits = {i.name for i in ga.input} & set(new_init)
    feeds = {i.name for i in gb.input} - inits
    computed = {o for n in gb.node for o in n.output if o} - writes_before
    inputs = list(
        dict.fromkeys(
            x for i in added for x in ga.node[i].input if x and x not in written and x not in new_init
        )
    )
    if any(x not in computed and x not in feeds for x in inputs):
        return None
    return Region([ga.node[i] for i in added], inputs, outputs, sum(dropped.values()))


def _region_model(after: ModelProto, region: Region, values: dict[str, np.ndarray]) -> ModelProto:
    """The changed region as a model of its own: its boundary tensors as inputs (typed by `values`), the
    initializers it reads, its outputs."""
    from onnx import helper

    reads = {x for n in region.nodes for x in n.input}
    graph = helper.make_graph(
        list(region.nodes),
        "changed region",
        [
            helper.make_tensor_value_info(
                n, helper.np_dtype_to_tensor_dtype(np.asarray(values[n]).dtype), np.shape(values[n])
            )
            for n in region.inputs
        ],
        [helper.make_empty_tensor_value_info(n) for n in region.outputs],
        [t for t in after.graph.initializer if t.name in reads],
    )
    return helper.make_model(graph, opset_imports=list(after.opset_import), ir_version=after.ir_version)


def _verify_region(original, changed, region, base_dir, feeds, seed, safety, rtol_fp32, bound, dims):
    """`_verify_once` on the changed region: the original runs once, whole, returning the region's boundary
    tensors and outputs; the changed region runs on those boundary values and its outputs are compared with the
    original's (see REGION_FROM_NODES for when that comparison stands). None where either does not run."""
    from onnx import GraphProto, helper

    from surgery.ort import runnable_patch

    inputs = {i.name for i in original.graph.input}
    declared = {o.name for o in original.graph.output}
    extra = [n for n in dict.fromkeys(region.inputs + region.outputs) if n not in inputs | declared]
    # the original with the boundary as extra outputs, serialized without copying it: the patch is merged into
    # it in the worker (repeated fields appended), not joined to it here (a second copy of the model at once)
    patch = ModelProto(graph=GraphProto(output=[helper.make_empty_tensor_value_info(n) for n in extra]))
    data = original.SerializeToString()
    try:
        dims = _input_dims(original, changed, dims)
        made = None if feeds is not None else _feed_sets(original, changed, seed, dims)
        sets = [feeds] if made is None else [d.arrays for d in made]
        k, a = _run_first(data, sets, base_dir, patch.SerializeToString() + runnable_patch(original))
        del data
        used, drawn = sets[k], {} if made is None else made[k].drawn
        values = {n: used[n] if n in inputs else a[n] for n in region.inputs}
        b = _run(_region_model(changed, region, values), values, base_dir)
    except Exception:  # noqa: BLE001 - onnxruntime raises its own types
        return None
    shown = ", ".join(f"'{n}'" for n in region.outputs[:3]) + (", ..." if len(region.outputs) > 3 else "")
    said = (
        f"compared the changed region, not the whole model: the {len(region.nodes)} node(s) the change wrote "
        f"(for {region.removed} of the original's) run on the original's own values of the "
        f"{len(region.inputs)} tensor(s) they read, from one run of the whole original; their "
        f"{len(region.outputs)} output tensor(s) that the rest of the model reads ({shown}) compared with the "
        "original's"
    )
    report = _compare(
        original,
        {n: a[n] for n in region.outputs},
        b,
        region.outputs,
        region.outputs,
        safety,
        rtol_fp32,
        bound,
        [said],
    )
    report.seed, report.feeds, report.drawn = seed, {k: list(np.shape(v)) for k, v in used.items()}, drawn
    return report, used


def _identical(report: VerifyReport) -> bool:
    """Every output compared equal, same shape and dtype: no error at all."""
    return all(o.max_abs == 0 and o.mean_rel == 0 and not o.note for o in report.outputs)


def share_of_range(max_abs: float, reference: np.ndarray) -> float:
    """`max_abs` as a fraction of the reference output's range (max - min of its finite values): 0 for no error,
    inf for an error on an output that is constant (or has no finite value) in the reference."""
    if max_abs == 0:
        return 0.0
    values = np.asarray(reference, dtype=np.float64)
    values = values[np.isfinite(values)]
    spread = float(values.max() - values.min()) if values.size else 0.0
    return max_abs / spread if spread > 0 else float("inf")


def lost_outputs(before: ModelProto, after: ModelProto) -> list[str]:
    """What a change lost of `before`'s outputs, one line each (empty: every output kept). An output is lost when
    its name is gone, its element type or rank changes (where both models declare them), or it no longer depends
    on any graph input where it did (the model then computes it from nothing: a constant, or a graph input passed
    through). Such a change is a cut, not a repair, whatever its numbers."""
    from onnx import helper

    from surgery.graph import tensor_info_from_type

    after_outputs = {o.name: o for o in after.graph.output}
    fed_before, fed_after = _fed_by_inputs(before), _fed_by_inputs(after)
    lines = []
    for out in before.graph.output:
        now = after_outputs.get(out.name)
        if now is None:
            lines.append(f"output '{out.name}' is gone")
            continue
        was, is_ = tensor_info_from_type(out.name, out.type), tensor_info_from_type(now.name, now.type)
        if was.dtype and is_.dtype and was.dtype != is_.dtype:
            names = [
                helper.tensor_dtype_to_string(t).removeprefix("TensorProto.") for t in (was.dtype, is_.dtype)
            ]
            lines.append(f"output '{out.name}' was {names[0]}, is {names[1]}")
        elif was.shape is not None and is_.shape is not None and len(was.shape) != len(is_.shape):
            lines.append(f"output '{out.name}' was rank {len(was.shape)}, is rank {len(is_.shape)}")
        elif out.name in fed_before and out.name not in fed_after:
            lines.append(f"output '{out.name}' no longer depends on any graph input (computed from nothing)")
    return lines


def _fed_by_inputs(model: ModelProto) -> set[str]:
    """The tensors whose value depends on the value of a graph input that is not an initializer (through any node,
    bodies' outer reads included), the inputs themselves included. Shape and Size read only a shape: folding them
    where the shape is static computes the same thing, so they carry no dependence."""
    from surgery.graph import all_inputs

    inits = {t.name for t in model.graph.initializer}
    fed = {i.name for i in model.graph.input if i.name not in inits}
    for node in model.graph.node:  # nodes are in topological order in a valid model
        if node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx"):
            continue
        if any(x in fed for x in all_inputs(node)):
            fed.update(o for o in node.output if o)
    return fed


def accuracy(ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Per output: max abs error and the relative error distribution (mean_rel, p99_rel, max_rel) of `got`
    against `ref`. An output the engine did not return is left out; a shape mismatch is reported as an infinite
    error rather than hidden."""
    out = {}
    for name, a in ref.items():
        if name not in got:
            continue
        b = np.asarray(got[name])
        if b.shape != a.shape:
            if b.size != a.size:
                inf = float("inf")
                out[name] = {"max_abs": inf, "mean_rel": inf, "p99_rel": inf, "max_rel": inf}
                continue
            b = b.reshape(a.shape)
        out[name] = {"max_abs": max_abs_error(a, b), **relative_error_distribution(a, b)}
    return out
