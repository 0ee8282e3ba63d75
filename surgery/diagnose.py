"""Check one model against several targets, with a verdict cache keyed by model fingerprint and backend."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from onnx import ModelProto

from surgery.backends import get_backend
from surgery.backends.base import Evidence, Report, Status, Verdict
from surgery.backends.isolate import BackendCrash
from surgery.graph import node_keys
from surgery.model import fingerprint

_CACHE: dict[tuple[str, str, str], Report] = {}


def _unavailable_report(target: str, label: str, version: str, reason: str) -> Report:
    report = Report(target, label, version)
    report.messages.append(f"not available here: {reason}")
    return report


def check_one(
    model: ModelProto, target: str, base_dir: str | Path | None = None, *, fp: str | None = None
) -> Report:
    backend = get_backend(target)
    key = (fp or fingerprint(model), backend.id, backend.version)
    if key in _CACHE:
        return _CACHE[key]
    available = backend.availability()
    if not available.ok:
        return _unavailable_report(backend.id, backend.label, backend.version, available.reason)
    try:
        report = backend.check(model, None if base_dir is None else str(base_dir))
    except BackendCrash as exc:  # the backend died: that is a verdict on the model, not a dead app
        report = Report(backend.id, backend.label, backend.version, accepted=False)
        report.messages.append(str(exc))
        report.verdicts = [
            Verdict(k, i, n.op_type, Status.UNKNOWN, str(exc), "CRASH", Evidence("crash", backend.label))
            for i, (k, n) in enumerate(zip(node_keys(model.graph.node), model.graph.node))
        ]
    _CACHE[key] = report
    return report


def check_model(
    model: ModelProto,
    targets: list[str],
    base_dir: str | Path | None = None,
    progress: Callable[[float, str], None] | None = None,
) -> list[Report]:
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
    _CACHE.clear()
