"""Check one model against several targets, with a verdict cache keyed by model fingerprint + backend id +
backend version (+ options). A target that cannot run here gives a report that says why (no verdicts); a
backend that crashes gives UNKNOWN verdicts carrying the crash message — never a dead caller."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from onnx import ModelProto

from surgery.backends import get_backend
from surgery.backends.base import Evidence, Report, Status, Verdict
from surgery.backends.isolate import BackendCrash
from surgery.graph import node_keys
from surgery.model import fingerprint

MAX_CACHED_REPORTS = 256
_CACHE: dict[tuple, Report] = {}
_LOCK = threading.Lock()


def _unavailable_report(target: str, label: str, version: str, reason: str) -> Report:
    report = Report(target, label, version)
    report.messages.append(f"not available here: {reason}")
    return report


def _all_unknown(model: ModelProto, backend, message: str, code: str, source: str) -> Report:
    report = Report(backend.id, backend.label, backend.version, accepted=False)
    report.messages.append(message)
    report.verdicts = [
        Verdict(k, i, n.op_type, Status.UNKNOWN, message, code, Evidence(source, backend.label))
        for i, (k, n) in enumerate(zip(node_keys(model.graph.node), model.graph.node))
    ]
    return report


def is_unavailable(report: Report) -> bool:
    return report.accepted is None and not report.verdicts


def check_one(
    model: ModelProto,
    target: str,
    base_dir: str | Path | None = None,
    *,
    fp: str | None = None,
    options: dict | None = None,
) -> Report:
    """One target's report on `model` (cached). Raises UnknownBackend for a target id that does not exist."""
    backend = get_backend(target)
    key = (fp or fingerprint(model), backend.id, backend.version, tuple(sorted((options or {}).items())))
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
    available = backend.availability()
    if not available.ok:
        return _unavailable_report(backend.id, backend.label, backend.version, available.reason)
    t0 = time.perf_counter()
    try:
        report = backend.check(model, None if base_dir is None else str(base_dir))
    except BackendCrash as exc:  # the backend died: that is a verdict on the model, not a dead app
        report = _all_unknown(model, backend, str(exc), "CRASH", "crash")
        report.seconds = time.perf_counter() - t0
    except Exception as exc:  # a bug on our side of the backend: say so rather than take the caller down
        line = (str(exc).strip().splitlines() or [""])[0][:300]
        message = f"onnx-surgery could not check with {backend.id}: {type(exc).__name__}: {line}"
        report = _all_unknown(model, backend, message, "ERROR", "error")
        report.seconds = time.perf_counter() - t0
        return report  # not cached: it may be transient
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
) -> list[Report]:
    """A report per target, in order. Unknown target ids raise UnknownBackend before any backend runs."""
    for target in targets:
        get_backend(target)  # fail fast on a typo, before minutes of checking
    fp = fingerprint(model)
    reports = []
    for k, target in enumerate(targets):
        if progress:
            progress(k / max(len(targets), 1), f"checking with {target}")
        reports.append(check_one(model, target, base_dir, fp=fp))
    if progress:
        progress(1.0, "done")
    return reports


def clear_cache() -> None:
    with _LOCK:
        _CACHE.clear()
