"""Test-build an engine on a backend: the build in the backend's own words, its log and time, the artifact,
and — where this machine can run it — latency and accuracy against onnxruntime's fp32 reference.

Every build except onnxruntime's runs isolated in a child process with a time limit; progress is forwarded."""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
import time
from pathlib import Path

from onnx import ModelProto

from surgery.backends.base import BuildOptions, BuildReport, Progress
from surgery.isolate import BackendCrash, call_isolated
from surgery.verdict import Stage

BUILDERS = {
    "onnxruntime": "surgery.backends.onnxruntime.build:build",
    "openvino": "surgery.backends.openvino.build:build",
    "tvm": "surgery.backends.tvm.build:build",
    "tensorrt": "surgery.backends.tensorrt.build:build",
}


def named_node(message: str, model: ModelProto) -> str | None:
    """The node a backend's message names: in quotes or parentheses ("in node (/conv1/Conv)", "node with name
    'my_relu'"), or as TensorRT names a node's layers ("IConditionalOutputLayer /if/If_OutputLayer: ...",
    "/conv/Conv: ...", "nms_1 has no runners": a numbered layer of node 'nms'); the longest such name wins, so
    '/a/b' beats '/a' and a node named 'nms_1' beats 'nms'."""
    names = sorted({n.name for n in model.graph.node if n.name}, key=len, reverse=True)
    for name in names:
        quoted = rf"""['"(]{re.escape(name)}['")]"""
        layer = rf"(?<![\w/.]){re.escape(name)}(?:_[A-Za-z]*Layer|_\d+)?(?![\w/.])"
        if re.search(quoted, message) or re.search(layer, message):
            return name
    return None


def _profile(name: str, shapes) -> tuple[tuple[int, ...], ...]:
    try:
        lo, opt, hi = (tuple(int(d) for d in shape) for shape in shapes)
    except (TypeError, ValueError):
        raise ValueError(
            f"profile for '{name}' is {shapes!r}. Note: expected (min, opt, max) shapes, e.g. "
            "((1, 3, 224, 224), (4, 3, 224, 224), (8, 3, 224, 224))"
        ) from None
    return lo, opt, hi


def check_profiles(model: ModelProto, profiles: dict) -> None:
    """Refuse (ValueError, one line naming the input) a profile for an input the model does not have, one
    whose rank differs from the model's, one that contradicts a static dim, or one whose min <= opt <= max
    does not hold."""
    inits = {t.name for t in model.graph.initializer}
    declared = {vi.name: vi for vi in model.graph.input if vi.name not in inits}
    named: dict[str, tuple[str, int, tuple[int, int, int]]] = {}  # a symbolic dim -> where first given, range
    for name, shapes in profiles.items():
        lo, opt, hi = _profile(name, shapes)
        text = ":".join("x".join(map(str, s)) for s in (lo, opt, hi))
        if name not in declared:
            raise ValueError(
                f"profile for '{name}': the model has no input '{name}'. Note: inputs: {', '.join(declared)}"
            )
        for axis in range(len(lo)):
            if not lo[axis] <= opt[axis] <= hi[axis]:
                raise ValueError(
                    f"profile for '{name}' ({text}): at axis {axis}, min <= opt <= max does not hold"
                )
        t = declared[name].type.tensor_type
        if not t.HasField("shape"):
            continue  # no declared shape: any profile may stand
        from surgery.graph import dim_of

        dims = [d if d is not None else "?" for d in (dim_of(x) for x in t.shape.dim)]
        shown = "x".join(map(str, dims))
        if len(dims) != len(lo):
            raise ValueError(
                f"profile for '{name}' ({text}) has rank {len(lo)}, but input '{name}' is {shown} "
                f"(rank {len(dims)})"
            )
        for axis, d in enumerate(dims):
            if isinstance(d, int) and any(s[axis] != d for s in (lo, opt, hi)):
                given = "/".join(str(s[axis]) for s in (lo, opt, hi))
                raise ValueError(
                    f"profile for '{name}' ({text}) contradicts the model: input '{name}' is {shown}, static "
                    f"{d} at axis {axis}, and the profile gives {given} (min/opt/max) there"
                )
        for axis, dim in enumerate(t.shape.dim):
            # one symbolic dim is one value at run time: every profile that covers it gives it one range
            if not dim.dim_param:
                continue
            rng = (lo[axis], opt[axis], hi[axis])
            first = named.setdefault(dim.dim_param, (name, axis, rng))
            if first[2] != rng:
                was = "/".join(map(str, first[2]))
                now = "/".join(map(str, rng))
                raise ValueError(
                    f"profile for '{name}' ({text}) contradicts itself: dim '{dim.dim_param}' is {now} (min/opt/max) "
                    f"at axis {axis} of '{name}' but {was} at axis {first[1]} of '{first[0]}'; one dim, one range"
                )


def build_failure_into(report, model: ModelProto, built: BuildReport, label: str) -> None:
    """A check at depth build: `built`'s failure, in the builder's words at stage build, becomes the verdict of
    the node the builder names (else a model-level error) in `report`, which no longer accepts. Nothing for a
    build that succeeded."""
    from surgery.verdict import Evidence, Message, Stage, Status

    if built.ok:
        return
    report.accepted = False
    by_name = {model.graph.node[v.index].name: v for v in report.verdicts if v.index >= 0}
    hit = by_name.get(built.node) if built.node else None
    note = f"; {built.note}" if built.note else ""
    if hit is not None:
        hit.status, hit.stage, hit.code, hit.words, hit.words_from = (
            Status.REJECTED,
            Stage.BUILD,
            "BUILD_FAILED",
            built.error,
            "live",
        )
        hit.explanation = "the parser accepts this node; the builder refuses it" + note
        hit.evidence = Evidence("live builder", built.label or label)
    else:
        report.messages.append(
            Message(
                "error",
                words=built.error,
                explanation="the parser accepts the model; the builder refuses it" + note,
                code="BUILD_FAILED",
                stage=Stage.BUILD,
                words_from="live",
            )
        )


def build_model(
    backend_id: str,
    model: ModelProto,
    options: BuildOptions | None = None,
    progress: Progress | None = None,
    base_dir: str | None = None,
) -> BuildReport:
    """Build `model` on `backend_id`; never raises for a backend's failure (a crash or timeout of the isolated
    build is a failed BuildReport). `options` is not modified; the artifact goes to `options.out_dir` (a new
    temp folder when None). `base_dir` is where the model's external data lives."""
    options = dataclasses.replace(options or BuildOptions())
    name = backend_id.split("@")[0]
    if name not in BUILDERS:
        return BuildReport(
            backend_id,
            False,
            error=f"no builder for '{backend_id}'. Note: builders exist for {', '.join(BUILDERS)}",
        )
    options.profiles = {n: _profile(n, shapes) for n, shapes in options.profiles.items()}
    check_profiles(model, options.profiles)  # before anything is written
    if name == "tvm" and options.tune_trials > 0 and not options.tune_dir:
        from surgery.backends.tvm.build import tune_dir

        options.tune_dir = str(tune_dir(options))  # here, not in a worker started before the caller's env
    out_dir = Path(options.out_dir or tempfile.mkdtemp(prefix=f"onnx-surgery-{name}-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    scratch = not options.artifact and not options.out_dir  # nothing is kept: the folder goes afterwards
    options.out_dir = str(out_dir)
    t0 = time.perf_counter()
    if progress:
        progress(0.0, f"{name}: starting")
    try:
        report = call_isolated(
            BUILDERS[name],
            model.SerializeToString(),
            options,
            str(base_dir) if base_dir else None,
            timeout=options.timeout_s,
            progress=progress,
        )
    except BackendCrash as exc:
        report = BuildReport(
            backend_id, False, error=str(exc), log=exc.detail, build_seconds=time.perf_counter() - t0
        )
    finally:
        if scratch:
            shutil.rmtree(out_dir, ignore_errors=True)
    if scratch:
        report.artifact = None
    if not report.ok and report.node is None and report.error:
        report.node = named_node(report.error, model)
    from surgery.quantize import has_qdq

    # what the engine computes in: a builder that fell back from the precision asked says so (report.precision set)
    report.precision = "int8" if has_qdq(model) else report.precision or options.precision
    if progress:
        progress(1.0, f"{name}: {'built' if report.ok else 'failed'}")
    return report


LADDER = ("int8", "fp16", "fp32")  # what a Q/DQ model is built at by default, each against the fp32 original
INT8_FLAG = {
    "tensorrt",
    "onnxruntime",
}  # builders that take precision int8 (for the others the graph says so)


def build_ladder(
    backend_id: str,
    model: ModelProto,
    options: BuildOptions | None = None,
    progress: Progress | None = None,
    base_dir: str | None = None,
    precisions: tuple[str, ...] = LADDER,
) -> list[BuildReport]:
    """A Q/DQ (INT8) model next to its float32 original: int8 builds the model as given, fp16/bf16/fp32 build
    the float32 model it stands for (its Q/DQ pairs taken out, surgery.quantize.strip_qdq). Every report's
    accuracy is against that float32 original (surgery.backends.measure), so the rows compare. A model without
    Q/DQ is built once, at `options.precision`."""
    from surgery.quantize import has_qdq, strip_qdq

    options = options or BuildOptions()
    if not has_qdq(model):
        return [build_model(backend_id, model, options, progress, base_dir)]
    twin = None
    reports = []
    for k, precision in enumerate(precisions):
        if precision == "int8":
            flag = "int8" if backend_id.split("@")[0] in INT8_FLAG else "fp32"
            one, what = dataclasses.replace(options, precision=flag), model
        else:
            if twin is None:
                twin = strip_qdq(model)[0]
            one, what = dataclasses.replace(options, precision=precision), twin
        if options.out_dir:
            one.out_dir = str(Path(options.out_dir) / precision)

        def step(f, m, k=k, precision=precision):
            if progress:
                progress((k + f) / len(precisions), f"{precision}: {m}")

        report = build_model(backend_id, what, one, step, base_dir)
        report.precision = precision
        if precision != "int8":
            why = "the float32 original of this Q/DQ model (its Q/DQ pairs taken out)"
            report.note = f"{why}; {report.note}" if report.note else why
        reports.append(report)
    return reports


class BuiltHere:
    """Mixin for backends whose builds live in surgery.backends.build (one module per backend here)."""

    id: str
    default_depth = Stage.PARSE
    builds_in_check = True

    def build(
        self,
        model: ModelProto,
        options: BuildOptions,
        progress: Progress | None = None,
        base_dir: str | None = None,
    ) -> BuildReport:
        return build_model(self.id, model, options, progress, base_dir)
