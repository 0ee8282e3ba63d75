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
resumes where it stopped (a cell is written to the cache as soon as it is done)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

OUTCOMES = ("accepts", "rejects", "cannot confirm", "unavailable", "error")
CACHE_ENV = "ONNX_SURGERY_SURVEY_CACHE"
DEFAULT_CACHE = "~/.cache/onnx-surgery/survey"
CELL = "surgery.usecases.survey:survey_cell"  # what each cell runs in its child ("module:function")
CELL_FORMAT = 1  # bump when a cell's content changes shape: every cached cell is then computed again
ENGINES = ("local", "ray")


class SurveyInputError(ValueError):
    """What was asked cannot be surveyed (no such path, no model found, an unknown target, a broken rule file,
    Ray not installed): one line, nothing run."""


@dataclass
class SurveyRequest:
    paths: list[str]  # folders (searched recursively for .onnx), .onnx files, or text files listing models
    targets: list[str]
    fix: bool = False  # run the fix use case on every cell a target rejects
    rules_dirs: list[str] | None = (
        None  # as `fix --rules` (None: $ONNX_SURGERY_RULES, else the built-in rules)
    )
    depth: str | None = None  # parse | build (None: each backend's default, as `check`)
    workers: int = 1
    timeout: float = 300.0  # seconds per cell (one model, one target, fix included)
    engine: str = "local"  # local | ray
    ray_address: str | None = None  # None with engine "ray": start a local Ray runtime
    cache_dir: str | None = None  # None: $ONNX_SURGERY_SURVEY_CACHE, else ~/.cache/onnx-surgery/survey
    use_cache: bool = True  # False: compute every cell, read and write no cache (probe verdicts included)
    probe_cache: bool = (
        True  # the backends' probe verdicts under ~/.cache/onnx-surgery, as `check` keeps them
    )
    max_steps: int = 100
    answers: bool = False  # answer a rule's question with the model's test data (test_data_set_0 beside it)
    cell: str = CELL


@dataclass
class Job:
    """One cell to compute: a model file and a target."""

    model: int  # index in the survey's model list
    path: str
    target: str
    key: str  # the cache key


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


def final_outcome(cell: dict) -> str:
    """The cell's outcome after the fixes (the outcome as checked when no fix ran)."""
    fixed = cell.get("fix")
    return fixed["outcome"] if fixed else cell["outcome"]


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


def cache_dir(request: SurveyRequest) -> Path:
    return Path(request.cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


class _Hashes:
    """sha256 of model files, remembered by (size, mtime, inode) in the cache folder: a re-run does not read
    gigabytes of unchanged models again."""

    def __init__(self, folder: Path | None):
        self.path = folder / "hashes.json" if folder else None
        self.known: dict[str, list] = {}
        if self.path and self.path.is_file():
            with contextlib.suppress(OSError, ValueError):
                self.known = json.loads(self.path.read_text())
        self.changed = False

    def sha256(self, path: Path) -> tuple[str, int]:
        st = path.stat()
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        seen = self.known.get(str(path))
        if seen and seen[:3] == stamp:
            return seen[3], st.st_size
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        self.known[str(path)] = [*stamp, h.hexdigest()]
        self.changed = True
        return h.hexdigest(), st.st_size

    def save(self) -> None:
        if self.path and self.changed:
            from surgery.outputs import write_atomic

            write_atomic(self.path, json.dumps(self.known))


@functools.cache
def tool_version() -> str:
    """The package's version and a hash of its source: a changed checkout computes every cell again."""
    from surgery.resources import package_version

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return f"{package_version()}+{h.hexdigest()[:12]}"


def rules_hash(rules: list, target: str) -> str:
    """The content of the rule files that apply to `target`: a changed rule re-runs the cells it can touch."""
    from surgery.rulebook.engine import applies_to

    h = hashlib.sha256()
    for rule in sorted((r for r in rules if applies_to(r, [target])), key=lambda r: r.id):
        h.update(rule.id.encode())
        try:
            h.update(Path(rule.path).read_bytes())
        except (OSError, TypeError):
            h.update(repr(rule).encode())
    return h.hexdigest()[:16]


def backend_version(target: str) -> str:
    """The backend's version and whether it runs here ("unavailable" cells re-run once it is installed)."""
    from surgery.backends import get_backend

    b = get_backend(target)
    return f"{b.version}|{'on' if b.availability().ok else 'off'}"


def cell_key(request: SurveyRequest, sha: str, target: str, rules_id: str, backend: str) -> str:
    parts = [
        CELL_FORMAT,
        request.cell,
        sha,
        target,
        request.depth,
        request.fix,
        request.max_steps if request.fix else None,
        request.answers if request.fix else None,
        rules_id,
        tool_version(),
        backend,
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


# -- one cell (runs in the child) ------------------------------------------------------------------------------


_RULES: dict[tuple, list] = {}


def _rules(dirs: list[str] | None) -> list:
    from surgery.rulebook import load_rules

    key = tuple(dirs or ())
    if key not in _RULES:
        _RULES[key] = load_rules(dirs)
    return _RULES[key]


def test_values(path: Path) -> dict:
    """A model's first test data set by input name (ONNX's layout: test_data_set_0/input_K.pb beside the model):
    the answers given when a rule asks for the value of a configuration input (pin-config-input's `$ask:value`).
    Empty for a model without one."""
    import onnx
    from onnx import numpy_helper

    data = Path(path).parent / "test_data_set_0"
    if not data.is_dir():
        return {}
    model = onnx.load(path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    values = {}
    for i, vi in enumerate(inputs):
        name, f = vi.name, data / f"input_{i}.pb"
        if f.exists() and vi.type.HasField("tensor_type"):  # sequences and optionals are never configuration
            t = onnx.TensorProto()
            t.ParseFromString(f.read_bytes())
            values[name] = numpy_helper.to_array(t).tolist()
    return values


def describe(report, model, rules: list) -> dict[str, Any]:
    """A target's report as a survey cell: outcome, refused and unknown nodes by op type, the reasons (grouped as
    `check` groups them) each with the rules that answer it, and every such rule."""
    from surgery.rulebook.suggest import suggestions_for
    from surgery.text import first_line
    from surgery.verdict import Outcome, Status

    suggestions = suggestions_for(model, [report], rules) if (report.rejected or report.unknown) else {}
    reasons = []
    refusals = {id(m) for m in report.refusals}
    for m in report.errors:
        reasons.append(
            {
                "status": "rejected" if id(m) in refusals else "unknown",
                "stage": m.stage.value,
                "code": m.code,
                "reason": first_line(m.text()),
                "explanation": first_line(m.explanation) if m.words else "",
                "nodes": 0,
                "op_types": {},
                "rules": [],
            }
        )
    for g in report.groups():
        answering = sorted(
            {s.rule for v in g.verdicts for s in suggestions.get((report.backend, v.node), [])}
        )
        reasons.append(
            {
                "status": "rejected" if g.status is Status.REJECTED else "unknown",
                "stage": g.stage.value,
                "code": g.code,
                "reason": g.verdicts[0].reason() or first_line(g.explanation),
                "explanation": first_line(g.explanation),
                "nodes": len(g.verdicts),
                "op_types": dict(Counter(v.op_type for v in g.verdicts).most_common()),
                "rules": answering,
            }
        )
    cell = {
        "outcome": report.outcome.value,
        "label": report.label,
        "version": report.version,
        "depth": report.depth.value,
        "rejected": {
            "nodes": len(report.rejected),
            "by_op": dict(Counter(v.op_type for v in report.rejected).most_common()),
        },
        "unknown": {
            "nodes": len(report.unknown),
            "by_op": dict(Counter(v.op_type for v in report.unknown).most_common()),
        },
        "reasons": reasons,
        "rules": sorted({r for x in reasons for r in x["rules"]}),
        "seconds": round(report.seconds, 3),
    }
    if report.outcome is Outcome.UNAVAILABLE:
        cell["note"] = "; ".join(first_line(m.text()) for m in report.messages)
    return cell


def _fix_cell(model, report, target: str, rules: list, depth, max_steps: int, answers: dict | None) -> dict:
    """The fix use case on one target's refusal: its steps, the outcome after, the verification of the fixed
    model against the original, what was undone and why a refusal is left (surgery.rulebook.tracer)."""
    from surgery.rulebook.engine import verify_result
    from surgery.rulebook.tracer import unrepaired
    from surgery.usecases.fix import FixRequest, fix
    from surgery.verdict import Outcome
    from surgery.verify import lost_outputs
    from surgery.workspace import Workspace

    ws = Workspace(model)
    request = FixRequest([target], rules, depth=depth, max_steps=max_steps)
    outcome = fix(ws, request, before=[report])
    applied, refused, undone = outcome.applied, list(outcome.refused), list(outcome.undone)
    after, overall, pinned = outcome.after[0], outcome.overall, []
    first_try = after.outcome is Outcome.ACCEPTS
    if not first_try and answers:  # the user's answers (the model's test data), then fix again
        request.values = {"value": answers}
        more = fix(ws, request, before=[after])
        if more.applied:
            applied = applied + more.applied
            refused += more.refused
            undone += more.undone
            after = more.after[0]
            overall = verify_result(ws, applied)  # the whole recipe
        pinned = [
            a.proposal.step.params["input"] for a in more.applied if a.proposal.rule.id == "pin-config-input"
        ]
    cut = [a.proposal.rule.id for a in applied if a.cut]
    verification = None if overall is None else overall.status
    return {
        "steps": [
            {
                "rule": a.proposal.rule.id,
                "op_type": a.proposal.op_type,
                "nodes": list(a.proposal.nodes or (a.proposal.node,)),
                "safety": a.proposal.safety,
                "verification": None if a.verification is None else a.verification.status,
            }
            for a in applied
        ],
        "outcome": after.outcome.value,
        "rejected": {
            "nodes": len(after.rejected),
            "by_op": dict(Counter(v.op_type for v in after.rejected).most_common()),
        },
        "reasons": after.reasons()[:5],
        "verification": verification,
        "verification_line": None if overall is None else overall.summary(),
        "worst": None if overall is None else list(overall.worst()),
        "repaired": after.outcome is Outcome.ACCEPTS and verification == "ok" and not cut,
        "repaired_without_answers": first_try,
        "pinned": pinned,
        "cut": cut,
        "undone": [{"kind": kind, "line": line} for kind, line in undone],
        "not_applied": refused[:5],
        "why": [line for _, line in unrepaired(ws.current, [after], rules)][:5],
        "outputs_lost": lost_outputs(model.proto, ws.current),
        "beyond_bound_kept": [
            a.proposal.rule.id
            for a in applied
            if a.verification is not None
            and a.verification.bound is not None
            and a.verification.status == "failed"
        ],
    }


def survey_cell(
    path: str,
    target: str,
    depth: str | None = None,
    fix: bool = False,
    rules_dirs: list[str] | None = None,
    max_steps: int = 100,
    answers: bool = False,
    probe_cache: str | None = None,
) -> dict[str, Any]:
    """One model, one target: {"facts": the model's nodes and opsets, "cell": what `describe` says, with "fix"
    where `fix` and the target rejects}. Runs in a child process (`call_isolated`); raises what it cannot do."""
    from surgery.backends.probe import use_disk_cache
    from surgery.diagnose import check_one
    from surgery.model import load_model
    from surgery.verdict import Outcome

    if probe_cache:
        use_disk_cache(probe_cache)
    model = load_model(path)
    proto = model.proto
    facts = {
        "nodes": len(proto.graph.node),
        "opsets": {o.domain or "ai.onnx": o.version for o in proto.opset_import},
        "ir_version": proto.ir_version,
    }
    rules = _rules(rules_dirs)
    report = check_one(proto, target, model.base_dir, depth=depth)
    cell = describe(report, proto, rules)
    if fix and report.outcome is Outcome.REJECTS:
        given = test_values(Path(path)) if answers else None
        cell["fix"] = _fix_cell(model, report, target, rules, depth, max_steps, given)
    from surgery.model import jsonable

    return jsonable({"facts": facts, "cell": cell})  # names that are not UTF-8 as \xNN escapes


def survey_cell_for_test(path: str, target: str, *args, **kwargs) -> dict[str, Any]:
    """`survey_cell`, except that a model whose file name has "crash" in it kills its child with SIGSEGV and one
    with "hang" never returns (the tests prove such a cell becomes "error" and the survey goes on)."""
    import signal

    name = Path(path).name
    if "crash" in name:
        os.kill(os.getpid(), signal.SIGSEGV)
    if "hang" in name:
        time.sleep(3600)
    return survey_cell(path, target, *args, **kwargs)


def isolated_cell(cell: str, args: tuple, timeout: float) -> dict[str, Any]:
    """Run `cell(*args)` in a child with a time limit; a crash, a timeout or an exception is an error cell with
    its words. Both engines run this (the local one in a thread, Ray as a task)."""
    from surgery.isolate import BackendCrash, call_isolated

    t0 = time.perf_counter()
    try:
        out = call_isolated(cell, *args, timeout=timeout)
    except BackendCrash as exc:
        tail = [line for line in (exc.detail or "").strip().splitlines() if line.strip()][-3:]
        out = {
            "facts": None,
            "cell": {
                "outcome": "error",
                "error": str(exc),
                "detail": "\n".join(tail),
                "timed_out": "timed out" in str(exc),
                "timeout": timeout,
            },
        }
    out["cell"]["seconds"] = round(time.perf_counter() - t0, 3)
    return out


# -- engines ---------------------------------------------------------------------------------------------------


def _local(jobs: list[Job], args_of, request: SurveyRequest, done: Callable, stop: threading.Event) -> None:
    """N threads, each driving its own child process (surgery.isolate keeps one per thread)."""
    pool = ThreadPoolExecutor(max_workers=max(1, request.workers), thread_name_prefix="survey")
    futures = {pool.submit(isolated_cell, request.cell, args_of(j), request.timeout): j for j in jobs}
    try:
        for fut in as_completed(futures):
            done(futures[fut], fut.result())
    except (
        BaseException
    ):  # interrupted: the cells not started are dropped, those running end with their limit
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def _ray(jobs: list[Job], args_of, request: SurveyRequest, done: Callable, stop: threading.Event) -> None:
    try:
        import ray
    except ImportError:
        raise SurveyInputError("--ray: Ray is not installed (pip install 'onnx-surgery[ray]')") from None
    started = False
    if not ray.is_initialized():
        if request.ray_address:
            ray.init(address=request.ray_address, log_to_driver=False)
        else:
            ray.init(num_cpus=max(1, request.workers), include_dashboard=False, log_to_driver=False)
        started = True
    try:
        # a Ray worker that dies is retried (max_retries); one that leaks is replaced now and then (max_calls)
        task = ray.remote(num_cpus=1, max_retries=2, max_calls=100)(isolated_cell)
        pending = {task.remote(request.cell, args_of(j), request.timeout): j for j in jobs}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(ready[0])
            try:
                out = ray.get(ready[0])
            except (
                Exception
            ) as exc:  # the task failed past its retries: that cell is an error, the rest go on
                line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                out = {"facts": None, "cell": {"outcome": "error", "error": f"Ray task failed: {line}"}}
            done(job, out)
    finally:
        if started:
            ray.shutdown()


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
        rules = _rules(request.rules_dirs)
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
    hashes = _Hashes(folder)
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
        hit = _read_cell(folder, job.key, request) if folder else None
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
            _write_cell(folder, job.key, out)
        record(job, out, cached=False)
        for twin in twins.get(job.key, []):
            record(twin, out, cached=True)

    stop = threading.Event()
    engine = _ray if request.engine == "ray" else _local
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


def _cell_path(folder: Path, key: str) -> Path:
    return folder / "cells" / key[:2] / f"{key}.json"


def _read_cell(folder: Path, key: str, request: SurveyRequest) -> dict | None:
    try:
        out = json.loads(_cell_path(folder, key).read_text())
    except (OSError, ValueError):
        return None
    cell = out.get("cell") if isinstance(out, dict) else None
    if not isinstance(cell, dict) or cell.get("outcome") not in OUTCOMES:
        return None
    if cell.get("timed_out") and (cell.get("timeout") or 0) < request.timeout:
        return None  # it ran out of time: given more now, it runs again
    return out


def _write_cell(folder: Path, key: str, out: dict) -> None:
    from surgery.model import dumps
    from surgery.outputs import OutputError, write_atomic

    with contextlib.suppress(OutputError, OSError):  # a cache that cannot be written costs time, not results
        write_atomic(_cell_path(folder, key), dumps(out))


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
