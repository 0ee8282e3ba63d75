"""Check one model against several targets, with a verdict cache keyed by model fingerprint + backend id +
backend version + depth (+ options). A target that cannot run here gives a report that says why (no verdicts);
a backend that crashes gives UNKNOWN verdicts carrying the crash message — never a dead caller.

Depth: `parse` asks the backend's parser / importer / frontend; `build` also builds what parsed (the same build
`onnx-surgery build` runs, without timing it), so `check --depth build` accepts exactly what `build` builds.
Each backend has its own default (`default_depth`): parse for TensorRT, build where building is the check
(onnxruntime session creation, OpenVINO compile_model, TVM's Relax build)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from onnx import ModelProto

from surgery.backends import get_backend
from surgery.backends.base import BuildOptions
from surgery.graph import node_keys
from surgery.isolate import BackendCrash
from surgery.model import fingerprint
from surgery.text import error_line
from surgery.verdict import Evidence, Message, Outcome, Report, Stage, Status, Verdict

MAX_CACHED_REPORTS = 256
_CACHE: dict[tuple, Report] = {}
_LOCK = threading.Lock()


WORKER_TIMEOUT_S = 1800.0


def _check_in_worker(
    model: ModelProto, target: str, base_dir: str | None, depth: Stage, path: str | None = None
) -> Report:
    from surgery.isolate import BACKGROUND_NICE, call_isolated

    return call_isolated(
        "surgery.diagnose:checked_here",
        path or model.SerializeToString(),
        target,
        base_dir,
        depth.value,
        timeout=WORKER_TIMEOUT_S,
        nice=BACKGROUND_NICE,
    )


def checked_here(source: bytes | str, target: str, base_dir: str | None, depth: str) -> Report:
    """The worker's side of `check_one(in_worker=True)`: the model's serialization, or the path of the file it was
    read from unedited (read here: the server copies nothing)."""
    from surgery.model import load_model, parse_model_bytes

    backend = get_backend(target)
    if isinstance(source, str):
        model = load_model(source)
        path = model.file_as_read() if getattr(backend, "reads_file", False) else None
        return backend.check(model.proto, base_dir, depth=Stage(depth), **({"path": path} if path else {}))
    return backend.check(parse_model_bytes(source), base_dir, depth=Stage(depth))


def _unavailable_report(target: str, label: str, version: str, reason: str) -> Report:
    report = Report(target, label, version)
    report.messages.append(Message("info", explanation=f"not available here: {reason}"))
    return report


def _all_unknown(
    model: ModelProto, backend, code: str, source: str, *, words: str = "", explanation: str = ""
) -> Report:
    report = Report(backend.id, backend.label, backend.version, accepted=False)
    report.messages.append(Message("error", words=words, explanation=explanation, code=code))
    report.verdicts = [
        Verdict(
            k,
            i,
            n.op_type,
            Status.UNKNOWN,
            code,
            words=words,
            explanation=explanation,
            evidence=Evidence(source, backend.label),
            words_from="live" if words else "",
        )
        for i, (k, n) in enumerate(zip(node_keys(model.graph.node), model.graph.node))
    ]
    return report


def is_unavailable(report: Report) -> bool:
    return report.outcome is Outcome.UNAVAILABLE


def default_depth(target: str) -> Stage:
    return Stage(getattr(get_backend(target), "default_depth", Stage.PARSE))


def _build_stage(report: Report, model: ModelProto, backend, base_dir) -> None:
    """Build what parsed, as `onnx-surgery build` does (no timing runs): a failure becomes the verdict of the node
    the builder names, or a model-level error, in the builder's words, at stage build."""
    from surgery.backends.build import build_failure_into, build_model

    built = build_model(backend.id, model, BuildOptions(measure=False, artifact=False), base_dir=base_dir)
    report.backend_calls += 1
    build_failure_into(report, model, built, backend.label)


def check_one(
    model: ModelProto,
    target: str,
    base_dir: str | Path | None = None,
    *,
    fp: str | None = None,
    depth: Stage | str | None = None,
    options: dict | None = None,
    in_worker: bool = False,
    path: str | None = None,
    remember: bool = True,
) -> Report:
    """One target's report on `model` (cached), checked to `depth` (default: the backend's own). Raises
    UnknownBackend for a target id that does not exist.

    `in_worker` (a server): a backend whose check reads every weight (`reads_weights`) checks in a worker process
    of low CPU priority, given the model's serialization (weights in external files stay references to them):
    the server never holds the weights, and on a busy machine the page's drawing comes before the check. `path`:
    the file `model` was read from, unedited: the worker reads it there (a model whose weights are in the file
    itself is not serialized again in the server, a copy as big as the weights), and so does a backend that reads
    files itself (`reads_file`: onnxruntime) in this process.

    `remember=False` (a one-shot caller, the CLI's check): the report is neither looked up nor kept, and the
    model is not fingerprinted (a serialization of the whole model, for a key nobody would ask again)."""
    backend = get_backend(target)
    depth = Stage(depth) if depth else Stage(getattr(backend, "default_depth", Stage.PARSE))
    key = None
    if remember:
        key = (
            fp or fingerprint(model),
            backend.id,
            backend.version,
            depth.value,
            tuple(sorted((options or {}).items())),
        )
        with _LOCK:
            if key in _CACHE:
                return _CACHE[key]
    available = backend.availability()
    if not available.ok:
        return _unavailable_report(backend.id, backend.label, backend.version, available.reason)
    t0 = time.perf_counter()
    base = None if base_dir is None else str(base_dir)
    try:
        if in_worker and getattr(backend, "reads_weights", False):
            report = _check_in_worker(model, backend.id, base, depth, path)
        elif path and getattr(backend, "reads_file", False):
            report = backend.check(model, base, depth=depth, path=path)
        else:
            report = backend.check(model, base, depth=depth)
        built = report.depth is Stage.BUILD  # the backend's check built it in the same call (TVM)
        report.depth = depth
        if (
            depth is Stage.BUILD
            and getattr(backend, "builds_in_check", False)
            and not built
            and not report.rejected
        ):
            if report.outcome is Outcome.ACCEPTS:
                _build_stage(report, model, backend, base)
            report.seconds = time.perf_counter() - t0
    except BackendCrash as exc:  # the backend died: that is a verdict on the model, not a dead caller
        report = _all_unknown(model, backend, "CRASH", "crash", explanation=str(exc))
        report.depth = depth
        report.seconds = time.perf_counter() - t0
    except Exception as exc:  # a bug on our side of the backend: say so rather than take the caller down
        explanation = f"onnx-surgery could not check with {backend.id}: {error_line(exc)}"
        report = _all_unknown(model, backend, "ERROR", "error", explanation=explanation)
        report.depth = depth
        report.seconds = time.perf_counter() - t0
        return report  # not cached: it may be transient
    if key is None:
        return report
    with _LOCK:
        if len(_CACHE) >= MAX_CACHED_REPORTS:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = report
    return report


def check_model(
    model: ModelProto,
    targets: list[str],
    base_dir: str | Path | None = None,
    progress: Callable[[float, str], None] | None = None,
    *,
    depth: Stage | str | None = None,
    path: str | None = None,
    remember: bool = True,
) -> list[Report]:
    """A report per target, in order. Unknown target ids raise UnknownBackend before any backend runs. `path` and
    `remember`: as check_one's."""
    for target in targets:
        get_backend(target)  # fail fast on a typo, before minutes of checking
    fp = fingerprint(model) if remember else None
    reports = []
    for k, target in enumerate(targets):
        if progress:
            progress(k / max(len(targets), 1), f"checking with {target}")
        reports.append(check_one(model, target, base_dir, fp=fp, depth=depth, path=path, remember=remember))
    if progress:
        progress(1.0, "done")
    return reports


def clear_cache() -> None:
    with _LOCK:
        _CACHE.clear()
