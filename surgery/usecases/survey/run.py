"""Survey a folder of models (a model zoo, a registry's release, the corpus) against several targets in one run:
per model and target the outcome `check` gives (accepts, rejects, cannot confirm, unavailable; error when the
cell itself crashed or ran out of time), the refused nodes by op type and by reason, the rules that answer them,
and with `fix` what the fix use case (surgery.usecases.fix) did: its steps, the outcome after and the
verification of the fixed model against the original.

Every cell (one model, one target) runs in a child process with a time limit (surgery.isolate): a
backend that crashes or hangs turns that cell into "error" with its words, and the survey goes on. Cells run on
this machine with N threads, each driving its own child ("local"), or as Ray tasks ("ray": a local Ray runtime,
or a cluster joined by its address; the same cell function, retried where a Ray worker dies).

Each cell's result is cached on disk by (model sha256, target, depth, fix options, the content of the rules
that apply to the target, the tool's version, the backend's version): a re-run with nothing changed reads every
cell from the cache, a changed model or rule re-runs only the cells it touches, and an interrupted survey
resumes where it stopped (a cell is written to the cache as soon as it is done).

The pieces: surgery/usecases/survey/request.py, cells.py (one cell), cache.py, engines.py (local, Ray), report.py."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from surgery.usecases.survey.cache import (
    Hashes,
    backend_version,
    cache_dir,
    cell_key,
    read_cell,
    rules_hash,
    tool_version,
    write_cell,
)
from surgery.usecases.survey.cells import final_outcome, rules_once
from surgery.usecases.survey.engines import run_local, run_on_ray
from surgery.usecases.survey.request import ENGINES, OUTCOMES, Job, SurveyInputError, SurveyRequest


@dataclass
class SurveyProgress:
    done: int
    total: int
    cached: int
    counts: Counter  # final outcomes of the cells done so far
    slowest: list[tuple[float, str, str]]  # (seconds, model name, target), slowest first
    elapsed: float

    def line(self) -> str:
        counts = ", ".join(
            f"{n} {o}" for o, n in sorted(self.counts.items(), key=lambda x: OUTCOMES.index(x[0]))
        )
        slow = ", ".join(f"{Path(name).name} [{t}] {s:.1f} s" for s, name, t in self.slowest[:3])
        return (
            f"[{self.done}/{self.total} cells] {counts or 'nothing yet'}; {self.cached} from the cache; "
            f"{self.elapsed:.0f} s" + (f"; slowest: {slow}" if slow else "")
        )


@dataclass
class SurveyResult:
    report: dict[str, Any]
    cached: int = 0  # cells read from the cache
    computed: int = 0  # cells computed in this run
    errors: int = 0  # cells whose child crashed, timed out or raised
    seconds: float = 0.0
    interrupted: bool = False

    @property
    def refused(self) -> list[tuple[str, str]]:
        """(model name, target) of every cell a target still rejects after the fixes."""
        return [
            (m["name"], t)
            for m in self.report["models"]
            for t, cell in m["targets"].items()
            if final_outcome(cell) == "rejects"
        ]


# -- inputs ------------------------------------------------------------------------------------------------------


def find_models(paths: list[str]) -> list[tuple[str, Path]]:
    """(name, path) of every model `paths` name, in order, each once: a folder's .onnx files (recursively, named
    by their path in the folder), an .onnx file (named as given), a text file listing models one a line (relative
    to the list's folder; '#' starts a comment). Raises SurveyInputError for a path that does not exist or when
    no model is found."""
    found: dict[Path, str] = {}
    for given in paths:
        p = Path(given).expanduser()
        if p.is_dir():
            for f in sorted(p.rglob("*.onnx")):
                if f.is_file():
                    found.setdefault(f.resolve(), str(f.relative_to(p)))
        elif p.is_file() and p.suffix.lower() == ".onnx":
            found.setdefault(p.resolve(), str(given))
        elif p.is_file():
            try:
                lines = p.read_text().splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise SurveyInputError(f"{given}: not a model list ({exc})") from None
            for line in lines:
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                f = (p.parent / line).expanduser()
                if not f.is_file():
                    raise SurveyInputError(f"{given}: {line}: no such model file")
                found.setdefault(f.resolve(), line)
        else:
            raise SurveyInputError(f"{given}: no such file or folder")
    if not found:
        raise SurveyInputError(f"no .onnx model in {', '.join(paths)}")
    # names given as absolute paths (a list of them): shown from the folder they share
    absolute = [n for n in found.values() if os.path.isabs(n)]
    common = os.path.commonpath([os.path.dirname(n) for n in absolute]) if absolute else ""
    return [
        (os.path.relpath(name, common) if os.path.isabs(name) else name, path) for path, name in found.items()
    ]


# -- the survey ------------------------------------------------------------------------------------------------


def prepare(request: SurveyRequest) -> tuple[list[tuple[str, Path]], list]:
    """The models and rules a request names, and each target known: raises SurveyInputError before any work."""
    from surgery.backends import UnknownBackend, get_backend
    from surgery.rulebook import RuleError

    if request.engine not in ENGINES:
        raise SurveyInputError(f"unknown engine '{request.engine}' (local or ray)")
    if not request.targets:
        raise SurveyInputError("give at least one target (-t)")
    if request.depth not in (None, "parse", "build"):
        raise SurveyInputError(f"--depth {request.depth}: parse or build")
    if request.timeout <= 0 or request.workers < 1:
        raise SurveyInputError("--timeout and --workers must be positive")
    for t in request.targets:
        try:
            get_backend(t)
        except UnknownBackend as exc:
            raise SurveyInputError(str(exc)) from None
    models = find_models(request.paths)
    try:
        rules = rules_once(request.rules_dirs)
    except RuleError as exc:
        raise SurveyInputError(str(exc)) from None
    return models, rules


def survey(
    request: SurveyRequest,
    progress: Callable[[SurveyProgress], None] | None = None,
) -> SurveyResult:
    """Survey every model of `request` on every target; see the module's docstring. Raises SurveyInputError for
    bad input; a KeyboardInterrupt stops the survey with every cell done so far cached (a re-run resumes)."""
    t0 = time.perf_counter()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    models, rules = prepare(request)
    folder = cache_dir(request) if request.use_cache else None
    hashes = Hashes(folder)
    backends = {t: backend_version(t) for t in request.targets}
    rule_ids = {t: rules_hash(rules, t) for t in request.targets}
    entries, jobs = [], []
    for k, (name, path) in enumerate(models):
        sha, size = hashes.sha256(path)
        entries.append(
            {
                "name": name,
                "path": str(path),
                "sha256": sha,
                "bytes": size,
                "nodes": None,
                "opsets": None,
                "targets": {},
            }
        )
        for t in request.targets:
            jobs.append(Job(k, str(path), t, cell_key(request, sha, t, rule_ids[t], backends[t])))
    hashes.save()
    result = SurveyResult(report={})
    counts: Counter = Counter()
    slowest: list[tuple[float, str, str]] = []
    lock = threading.Lock()
    facts_of: dict[int, dict] = {}

    def record(job: Job, out: dict, cached: bool) -> None:
        with lock:
            cell = out["cell"]
            entries[job.model]["targets"][job.target] = cell
            if out.get("facts"):
                facts_of.setdefault(job.model, out["facts"])
            counts[final_outcome(cell)] += 1
            if cached:
                result.cached += 1
            else:
                result.computed += 1
                slowest.append((cell.get("seconds") or 0.0, entries[job.model]["name"], job.target))
                slowest.sort(reverse=True)
                del slowest[5:]
            if cell["outcome"] == "error":
                result.errors += 1
            if progress:
                progress(
                    SurveyProgress(
                        result.cached + result.computed,
                        len(jobs),
                        result.cached,
                        Counter(counts),
                        list(slowest),
                        time.perf_counter() - t0,
                    )
                )

    todo, twins = [], {}  # a model that is in the zoo twice (the same sha256) is computed once
    for job in jobs:
        if job.key in twins:
            twins[job.key].append(job)
            continue
        hit = read_cell(folder, job.key, request) if folder else None
        if hit is not None:
            record(job, hit, cached=True)
        else:
            todo.append(job)
            twins[job.key] = []

    probe_cache = (
        str(Path("~/.cache/onnx-surgery").expanduser()) if request.use_cache and request.probe_cache else None
    )

    def args_of(job: Job) -> tuple:
        return (
            job.path,
            job.target,
            request.depth,
            request.fix,
            request.rules_dirs,
            request.max_steps,
            request.answers,
            probe_cache,
        )

    def done(job: Job, out: dict) -> None:
        if folder:
            write_cell(folder, job.key, out)
        record(job, out, cached=False)
        for twin in twins.get(job.key, []):
            record(twin, out, cached=True)

    stop = threading.Event()
    engine = run_on_ray if request.engine == "ray" else run_local
    try:
        if todo:
            engine(todo, args_of, request, done, stop)
    except KeyboardInterrupt:
        result.interrupted = True
    for k, entry in enumerate(entries):
        facts = facts_of.get(k) or {}
        entry["nodes"] = facts.get("nodes")
        entry["opsets"] = facts.get("opsets")
        entry["targets"] = {t: entry["targets"][t] for t in request.targets if t in entry["targets"]}
    result.seconds = time.perf_counter() - t0
    result.report = {
        "tool": {"name": "onnx-surgery", "version": tool_version(), "backends": backends, "rules": rule_ids},
        "targets": list(request.targets),
        "started": started,
        "depth": request.depth,
        "fix": request.fix,
        "engine": request.engine if request.engine == "local" else f"ray {request.ray_address or '(local)'}",
        "models": entries,
        "summary": summarize(entries, request.targets),
        "stats": {
            "cells": len(jobs),
            "cached": result.cached,
            "computed": result.computed,
            "errors": result.errors,
            "seconds": round(result.seconds, 2),
            "interrupted": result.interrupted,
        },
    }
    return result


# -- the whole zoo ---------------------------------------------------------------------------------------------


def summarize(entries: list[dict], targets: list[str]) -> dict[str, Any]:
    """Per target: the outcomes before and after the fixes, how many rejected models the fixes repaired; across
    the zoo: the refusal reasons said for the most models, with the rules that answer them."""
    per_target = {}
    for t in targets:
        cells = [m["targets"][t] for m in entries if t in m["targets"]]
        before = Counter(c["outcome"] for c in cells)
        after = Counter(final_outcome(c) for c in cells)
        fixed = [c for c in cells if c.get("fix")]
        repaired = sum(1 for c in fixed if c["fix"].get("repaired"))
        per_target[t] = {
            "models": len(cells),
            "before": {o: before[o] for o in OUTCOMES if before[o]},
            "after": {o: after[o] for o in OUTCOMES if after[o]},
            "fixed": len(fixed),
            "repaired": repaired,
            "repair_rate": round(repaired / len(fixed), 4) if fixed else None,
        }
    reasons: dict[tuple, dict] = {}
    for m in entries:
        for t, cell in m["targets"].items():
            for r in cell.get("reasons", []):
                if r["status"] != "rejected":
                    continue
                key = (r["code"], r["reason"])
                agg = reasons.setdefault(
                    key,
                    {
                        "reason": r["reason"],
                        "code": r["code"],
                        "explanation": set(),
                        "models": set(),
                        "targets": set(),
                        "nodes": 0,
                        "op_types": Counter(),
                        "rules": set(),
                    },
                )
                agg["explanation"].add(r.get("explanation", ""))
                agg["models"].add(m["name"])
                agg["targets"].add(t)
                agg["nodes"] += r["nodes"]
                agg["op_types"].update(r["op_types"])
                agg["rules"].update(r["rules"])
    top = sorted(reasons.values(), key=lambda a: (-len(a["models"]), -a["nodes"], a["reason"]))[:25]
    return {
        "targets": per_target,
        "top_reasons": [
            {
                **a,
                "models": len(a["models"]),
                # ours, where every model was told the same (else each cell has its own)
                "explanation": next(iter(a["explanation"])) if len(a["explanation"]) == 1 else "",
                "targets": sorted(a["targets"]),
                "op_types": dict(a["op_types"].most_common()),
                "rules": sorted(a["rules"]),
            }
            for a in top
        ],
    }


def comparable(report: dict) -> dict:
    """The report without what differs from run to run (times, dates, the engine, cache counts): two surveys of
    the same models give equal `comparable` reports whatever engine ran them."""
    out = json.loads(json.dumps(report))
    for key in ("started", "stats", "engine"):
        out.pop(key, None)
    for m in out["models"]:
        for cell in m["targets"].values():
            cell.pop("seconds", None)
    return out
