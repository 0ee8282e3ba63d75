"""The one place where the app keeps state and caches: the workspace, the chosen targets, the selected node,
check results (cached by model fingerprint + target) and the loaded rules. Pages call these functions and the
library; they never hold state of their own."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import streamlit as st

from surgery.model import ModelLoadError, load_model
from surgery.samples import DEFAULT_SAMPLE, lessons, sample_path
from surgery.text import size_text
from surgery.workspace import Workspace

# Targets a new session checks: the live parser where it runs (its own words), the predictor for the TensorRT
# version most deployments run, and onnxruntime; $ONNX_SURGERY_TARGETS (comma-separated) names others.
DEFAULT_TARGETS = ["tensorrt-static@10.15", "onnxruntime"]


def default_targets() -> list[str]:
    """The targets a new session starts with (see DEFAULT_TARGETS); the live parser first where it runs here."""
    named = [t.strip() for t in os.environ.get("ONNX_SURGERY_TARGETS", "").split(",") if t.strip()]
    if named:  # `onnx-surgery app -t ...` checked them before the server started
        return named
    return (["tensorrt"] if live_parser_runs() else []) + list(DEFAULT_TARGETS)


@st.cache_resource(show_spinner=False)
def live_parser_runs() -> bool:
    from surgery.backends import get_backend

    try:
        return get_backend("tensorrt").availability().ok
    except Exception:  # noqa: BLE001 - a backend that cannot be constructed is not a default
        return False


def user_rules_dir() -> Path:
    """Where "save as rule" writes and where the user's rules are read: $ONNX_SURGERY_USER_RULES or
    ~/.onnx-surgery/rules."""
    return Path(os.environ.get("ONNX_SURGERY_USER_RULES") or Path.home() / ".onnx-surgery" / "rules")


def models_dir() -> Path | None:
    d = os.environ.get("ONNX_SURGERY_MODELS_DIR")
    return Path(d).resolve() if d else None


def state():
    return st.session_state


def ensure_state() -> None:
    s = state()
    if "ws" in s:
        _session_in_url()
        return
    start = os.environ.get("ONNX_SURGERY_START_MODEL")
    s.targets = default_targets()
    s.selected = None
    s.last_applied = None
    s.error = None
    s.scopes = []
    problem = _restore_from_url()  # the URL's ?session=...: the work as it was left, replayed
    if "ws" not in s and start:
        # `onnx-surgery app` refuses a bad file before the server starts; one spoiled since is said here (opening
        # the default sample below clears the error it set)
        open_path(start, check_folder=False, remember=False)
        problem = " · ".join(filter(None, (problem, s.error)))
    lesson = os.environ.get("ONNX_SURGERY_START_LESSON")
    if "ws" not in s and lesson in {x.name for x in lessons()}:
        open_lesson(lesson, remember=False)
    if "ws" not in s:
        open_sample(DEFAULT_SAMPLE, remember=False)
    if problem:
        s.error = problem


def _set_workspace(ws: Workspace, name: str) -> None:
    s = state()
    s.ws, s.model_name = ws, name
    s.selected, s.last_applied, s.error, s.scopes, s.check_big = None, None, None, [], False
    s.last_verification, s.session_id, s.sample = None, None, None
    s.session_rev, s.session_steps = None, []
    s.fix_summary, s.notice, s.step_numbers = None, None, {}


def open_sample(name: str, remember: bool = True) -> None:
    _set_workspace(Workspace.open(sample_path(name)), f"{name}.onnx")
    state().sample = name
    if remember:
        remember_session(new=True)


def upload_limit() -> int:
    """The largest upload this server accepts, in bytes (`onnx-surgery app --upload-limit`; protobuf's 2 GiB)."""
    try:
        return max(1, int(os.environ.get("ONNX_SURGERY_UPLOAD_LIMIT", "")))
    except ValueError:
        return 2 << 30


def open_bytes(data: bytes, name: str) -> bool:
    limit = upload_limit()
    if len(data) > limit:  # Streamlit's own check rounds to whole MB: the exact limit is held here
        state().error = (
            f"{name}: {size_text(len(data))} ({len(data):,} bytes) is over this server's upload limit of "
            f"{size_text(limit)} ({limit:,} bytes); the open model stays"
        )
        return False
    try:
        _set_workspace(Workspace.open(data, name=name), name)
        remember_session(new=True, upload=data)
        return True
    except ModelLoadError as exc:
        state().error = str(exc)
        return False


def open_path(path: str, check_folder: bool = True, remember: bool = True) -> bool:
    p = Path(path).expanduser().resolve()
    root = models_dir()
    if check_folder:
        if root is None:
            state().error = "opening server paths is off: start the app with --models-dir DIR"
            return False
        if root != p and root not in p.parents:
            state().error = f"{path}: refused — only files under {root} can be opened"
            return False
    try:
        model = (None if check_folder else _take_read_ahead(p)) or load_model(p, content_hash=True)
        _set_workspace(Workspace(model), p.name)
        if remember:
            remember_session(new=True)
        return True
    except ModelLoadError as exc:
        state().error = str(exc)
        return False


# -- the start model, read ahead ------------------------------------------------------------------------------
# `onnx-surgery app MODEL` names the model every first page shows before any browser asks for one. The server
# process (surgery.cli.serve) reads it, with its facts and first drawing, in a thread while the browser loads
# Streamlit's page (~0.9 s here): the first session then finds them done where it would compute them. Only the
# first session takes the model itself (a later one reads its own copy, so no two sessions share a Workspace's
# original); a file changed since it was read is read again.


class _ReadAhead:
    def __init__(self, path: Path):
        self.path, self.stat = path, _stat(path)
        self.model = self.facts = self.view = None


_AHEAD: dict[Path, object] = {}  # path -> Future of its _ReadAhead
_PREPARED: list[_ReadAhead] = []  # the one a session took, until its first view is asked for


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st_ = path.stat()
    except OSError:
        return None
    return st_.st_size, st_.st_mtime_ns


def read_ahead(path: str) -> None:
    """Start reading the start model at `path` (its facts, its first drawing) in a thread of this process."""
    from concurrent.futures import Future
    from threading import Thread

    p = Path(path).expanduser().resolve()
    future: Future = Future()
    _AHEAD[p] = future

    def work():
        # whatever goes wrong (a bad file), the page reads the file again and says why, as without a read ahead;
        # the Future always gets an answer, so no page waits on it for ever
        try:
            future.set_result(_read(p))
        except BaseException as exc:
            future.set_exception(exc)

    Thread(target=work, name="onnx-surgery-read-ahead", daemon=True).start()


def _read(path: Path) -> _ReadAhead:
    from surgery.graph import GraphFacts
    from surgery.view.draw import structure

    ahead = _ReadAhead(path)
    ahead.model = load_model(path, content_hash=True)
    proto = ahead.model.proto
    # as the first page asks for them: a big model's declared types, a smaller one's inferred shapes
    # (GraphFacts.of keeps those for this proto itself)
    ahead.facts = GraphFacts.of(proto, infer=len(proto.graph.node) <= SHAPES_LATER_OVER)
    ahead.view = structure(ahead.facts)
    return ahead


def _take_read_ahead(path: Path):
    """The start model read ahead from `path` (once: None for the next session, as when nothing was read ahead,
    the read failed, or the file changed since)."""
    future = _AHEAD.pop(path, None)
    if future is None:
        return None
    try:
        ahead = future.result()
    except BaseException:  # raised in the reading thread, never this page's own control flow
        return None
    if ahead.stat is None or ahead.stat != _stat(path):
        return None
    _PREPARED[:] = [ahead]
    return ahead.model


def _prepared(facts=None, model=None):
    """The read-ahead record whose facts are `facts` (or whose model is `model`), if a session took it."""
    for ahead in _PREPARED:
        if (facts is not None and ahead.facts is facts) or (model is not None and ahead.model.proto is model):
            return ahead
    return None


def first_view(facts):
    """The whole graph's drawing read ahead for these very facts, given once; None otherwise."""
    ahead = _prepared(facts=facts)
    if ahead is None:
        return None
    _PREPARED.clear()  # nothing more to hand out: the caches that asked hold what they need
    return ahead.view


def has_model() -> bool:
    """Whether this session has its model read already (a session's first page reads it)."""
    return "ws" in state()


def workspace() -> Workspace:
    ensure_state()
    return state().ws


def version() -> str:
    """The key the caches keep the current model version under (facts, drawings, reports), shared by every
    session: for the unedited model read from a file, the hash of the file's bytes (0.02 s for a 100k-node
    model, where its fingerprint, a hash of its serialization, takes 0.15-0.3 s of the first drawing); else the
    fingerprint. Never written anywhere: sessions and recipes keep `fingerprint()`."""
    ws = workspace()
    proto = ws.current
    memo = state().get("_fp_memo")
    if memo is None or memo[0] is not proto:
        raw = ws.original.content_hash if proto is ws.original.proto else None
        memo = state()["_fp_memo"] = (proto, f"file:{raw}" if raw else fingerprint())
    return memo[1]


def fingerprint() -> str:
    """The current model's fingerprint (surgery.model.fingerprint), computed once per model version."""
    proto = workspace().current
    memo = state().get("_real_fp_memo")
    if memo is None or memo[0] is not proto:
        memo = state()["_real_fp_memo"] = (proto, workspace().fingerprint())
    return memo[1]


# -- sessions that survive a reload or a restarted server (surgery.sessions keeps them on disk) -----------------


def remember_session(new: bool = False, upload: bytes | None = None) -> None:
    """Save the workspace (each step records its node), its targets, the selected node and the last verification to the
    session in the URL (?session=...); `new` (another model was opened) starts a new session, so that the one
    before stays in the recent list. A session that another tab saved since this one read it is not written
    over: see _rebase. A session that cannot be written is one line in the sidebar."""
    from surgery import sessions

    s = state()
    sid = s.get("session_id")
    if new or not sid:
        sid = s.session_id = sessions.new_id()
        s.session_rev = None
    try:
        _save(sid, upload)
        if new:
            sessions.prune(spare=(sid,))
    except sessions.SessionConflict:
        _rebase(sid)
    except (OSError, sessions.SessionError) as exc:
        s.error = f"the session could not be saved in {sessions.state_dir()}: {exc}"
    _session_in_url()


def _save(sid: str, upload: bytes | None = None) -> None:
    from surgery import sessions

    s, ws = state(), workspace()
    extra = {
        "selected": s.get("selected"),
        "last_verification": s.get("last_verification"),
        "color_by": s.get("color_by"),
        "step_numbers": s.get("step_numbers") or {},
    }
    saved = sessions.save(
        ws,
        sid,
        name=s.model_name,
        targets=list(s.targets),
        sample=s.get("sample"),
        upload=upload,
        extra=extra,
        original_fp=_original_fingerprint(),
        current_fp=fingerprint(),
        expect=s.get("session_rev"),
    )
    _synced(saved.revision)


def _synced(revision: int) -> None:
    """What this tab and the session on disk agree on: the revision, and the steps in effect then."""
    s = state()
    s.session_rev, s.session_steps = revision, [step.to_dict() for step in workspace().recipe]


def _rebase(sid: str) -> None:
    """Another tab saved session `sid` since this tab last did. Its work stays: the session is reopened as that
    tab left it, and the steps this tab applied since (if that is what it did) are applied after its steps, not
    verified again on that model. An undo, a redo or a change of targets here is not carried over: said. Where
    the steps cannot be applied there, this tab's work is kept as a session of its own. Nothing is lost."""
    from surgery import sessions

    s, mine = state(), workspace()
    base, now = s.get("session_steps") or [], [step.to_dict() for step in mine.recipe]
    added = mine.recipe[len(base) :] if now[: len(base)] == base else None
    try:
        restored = sessions.load(sid, allowed=may_open)
        for step in added or []:
            restored.workspace.apply(step)
    except Exception as exc:  # its steps do not apply on the other tab's model: keep this tab's as its own
        from surgery.text import error_line

        s.session_id, s.session_rev = sessions.new_id(), None
        remember_session()
        s.notice = (
            f"another tab changed this session since this tab read it, and this tab's steps do not apply on top "
            f"of its work ({error_line(exc)}): this tab's work is kept as a new session (the other tab's is in "
            "Recent sessions)"
        )
        return
    _set_workspace(restored.workspace, restored.name)
    s.session_id, s.sample, s.targets_next = sid, restored.sample, restored.targets  # the widget is drawn
    _synced(restored.revision)
    kept = len(restored.workspace.recipe) - len(added or [])
    if added:
        _save(sid)
        s.notice = (
            f"another tab saved this session since this tab read it: its {kept} step(s) are kept and this tab's "
            f"{len(added)} step(s) applied after them (replayed, not verified again on that model)"
        )
    else:
        s.notice = (
            f"another tab saved this session since this tab read it: shown as that tab left it ({kept} step(s)); "
            "what was done here since (undo, redo, targets) was not saved: do it again if it is still wanted"
        )


def _original_fingerprint() -> str:
    ws = workspace()
    if ws.current is ws.original.proto:
        return fingerprint()
    memo = state().get("_original_fp")
    if memo is None or memo[0] is not ws.original.proto:
        memo = state()["_original_fp"] = (ws.original.proto, ws.original.fingerprint())
    return memo[1]


def _session_in_url() -> None:
    """The session id in the URL (a page switch clears the query string): a reload finds the work again."""
    sid = state().get("session_id")
    if sid and st.query_params.get("session") != sid:
        st.query_params["session"] = sid


def _restore_from_url() -> str | None:
    """Restore the session the URL names; the one-line reason when it cannot be (then the URL drops it)."""
    sid = st.query_params.get("session")
    if not sid:
        return None
    problem = open_session(sid)
    if problem:
        del st.query_params["session"]
    return problem


def may_open(path: Path) -> bool:
    """A server path this app may read a model from: the start model it was given, or a file under
    --models-dir (what a saved session names is checked against this before it is opened)."""
    p = Path(os.path.realpath(path))
    start = os.environ.get("ONNX_SURGERY_START_MODEL")
    if start and p == Path(os.path.realpath(start)):
        return True
    root = models_dir()
    return root is not None and p.is_relative_to(Path(os.path.realpath(root)))


def open_session(sid: str) -> str | None:
    """Reopen a saved session (the URL's, or one picked in the recent list) by replaying its steps; returns
    the one-line reason it could not be (the open model stays)."""
    from surgery import sessions

    try:
        restored = sessions.load(sid, allowed=may_open)
    except sessions.SessionError as exc:
        return str(exc)
    _set_workspace(restored.workspace, restored.name)
    s, extra = state(), restored.extra
    s.session_id, s.sample, s.targets = sid, restored.sample, restored.targets
    _synced(restored.revision)
    if isinstance(extra.get("selected"), str):
        s.selected = extra["selected"]
    if isinstance(extra.get("color_by"), str):  # the widget's state, set before it is drawn
        s.color_by = extra["color_by"]
    if isinstance(extra.get("step_numbers"), dict):
        s.step_numbers = extra["step_numbers"]
    last = extra.get("last_verification")
    if isinstance(last, list) and len(last) == 2 and all(isinstance(x, str) for x in last):
        s.last_verification = tuple(last)
    s.error = restored.warning
    _session_in_url()
    return None


def reopen_session(sid: str) -> None:
    """A button callback: reopen a session from the recent list, or say why not."""
    problem = open_session(sid)
    if problem:
        state().error = problem


def recent_sessions(limit: int = 8):
    """Saved sessions other than this one, newest first, and a line for each one that could not be read."""
    from surgery import sessions

    found, problems = sessions.recent(limit + 1)
    return [i for i in found if i.id != state().get("session_id")][:limit], problems


def targets_changed() -> None:
    remember_session()


def undo() -> None:
    state().notice = None
    workspace().undo()
    state().last_applied = state().last_verification = None
    remember_session()


def redo() -> None:
    state().notice = None
    workspace().redo()
    remember_session()


def last_verification() -> tuple[str, str] | None:
    """(status, line) of the last applied step's verification, kept across a reload: ok, skipped or failed."""
    return state().get("last_verification")


@st.cache_resource(show_spinner=False, max_entries=8)
def _facts(fp: str, _model):
    from surgery.graph import GraphFacts

    return GraphFacts.of(_model)


# Shape inference is most of the time it takes to open a big model (100k nodes: ~1.5 of ~2.5 CPU s), and the
# collapsed first drawing needs no shapes: above this size the graph is drawn with the declared types while a
# worker process infers the shapes (surgery.graph.infer_in_worker; it reads the file itself when the model is
# the unedited original), started once the page is drawn.
SHAPES_LATER_OVER = 20_000  # nodes
_SHAPES = ThreadPoolExecutor(max_workers=1, thread_name_prefix="onnx-surgery-shapes")


@st.cache_resource(show_spinner=False, max_entries=8)
def _declared_facts(fp: str, _model):
    from surgery.graph import GraphFacts

    ahead = _prepared(model=_model)
    if ahead is not None and not ahead.facts.inferred:
        return ahead.facts
    return GraphFacts.of(_model, infer=False)


@st.cache_resource(show_spinner=False, max_entries=8)
def _background(fp: str, _declared, _path):
    """A big model's work after its first drawing, in order on the executor's one thread: the search index
    (~0.15 s at 100k nodes), the facts with shapes (inferred in the worker process), then what the first
    selected node's fixes need (the rules; the rule context's foldable set, ~0.4 s). Returns the Futures of the
    shapes and of the fixes' preparation."""
    from surgery.graph import infer_in_worker
    from surgery.view.find import search_index

    _SHAPES.submit(search_index, _declared)
    shapes = _SHAPES.submit(infer_in_worker, _declared, path=_path)
    fixes = _SHAPES.submit(
        lambda: (builtin_rules(), _rule_context(fp, _declared.model, shapes.result()).foldable)
    )
    return shapes, fixes


def _unedited_path() -> str | None:
    """The file the current model was read from, when it is that file's model unchanged (never for an upload:
    its name is not a path on this machine; nor for a file whose size changed since it was read)."""
    ws = workspace()
    original = ws.original
    if ws.current is not original.proto or original.base_dir is None:
        return None
    path = Path(original.base_dir) / Path(original.source).name
    try:
        return str(path) if path.stat().st_size == original.file_bytes else None
    except OSError:
        return None


def facts(shapes: bool = True, wait: bool = True):
    """GraphFacts of the current model, shared across reruns and sessions: with inferred shapes, waiting for
    them if they are being inferred (`wait=False`: the declared types until they are in); with `shapes=False`,
    a big model's declared types (what the collapsed drawing, search and navigation read: the collapsed drawing
    stays the same when the shapes arrive)."""
    fp, model = version(), workspace().current
    if len(model.graph.node) <= SHAPES_LATER_OVER:
        return _facts(fp, model)
    declared = _declared_facts(fp, model)
    if not shapes:
        return declared
    future = infer_shapes_soon()
    if not wait and not future.done():
        return declared
    with st.spinner("Inferring shapes…"):
        return future.result()


def _started():
    """A big model's background work (started now if it was not): (shapes, fixes) Futures; None for a model
    drawn with its shapes."""
    fp, model = version(), workspace().current
    if len(model.graph.node) <= SHAPES_LATER_OVER:
        return None
    return _background(fp, _declared_facts(fp, model), _unedited_path())


def infer_shapes_soon():
    """Start a big model's background work (once the page is drawn: the worker started with the first run
    slowed the first drawing of a 100k-node model from 5.5 to 7.4 s on 2 cores, bench/app_open.py); the Future
    of the facts with shapes, None for a model drawn with them already."""
    started = _started()
    return started[0] if started else None


def fixes_ready() -> bool:
    """Whether proposals can be made without waiting: the shapes are in and the rules and the rule context are
    prepared (always, for a model drawn with its shapes)."""
    started = _started()
    return started is None or started[1].done()


def enter_scope(scope: str, instead_of_last: bool = False) -> None:
    """Open a group in place; `instead_of_last`: it takes the place of the innermost opened one (a sibling)."""
    scopes = state().setdefault("scopes", [])
    if instead_of_last and scopes:
        scopes.pop()
    scopes.append(scope)


def leave_scope(all_levels: bool = False) -> None:
    scopes = state().get("scopes") or []
    del scopes[0 if all_levels else -1 :]


def keep_scopes(depth: int) -> None:
    """Breadcrumb: keep the first `depth` opened groups (0 = the whole graph)."""
    scopes = state().get("scopes") or []
    del scopes[depth:]


# -- what the pages change: they write the session state only through these ------------------------------------


def select(key: str | None) -> None:
    """Select a node (a click, a search hit, a button); None selects nothing."""
    state().selected = key


def pick(key: str) -> None:
    """A search hit picked: selected, and remembered, so that a rerun with the same pick does not select it
    again after another node was selected."""
    s = state()
    s.selected = s._last_pick = key


def last_pick() -> str | None:
    return state().get("_last_pick")


def new_click(click) -> str | None:
    """What the graph component reported, the first time it is seen: the clicked ref ('' for the background,
    'group:...' for a group); None when there is no new click (the component repeats its last value)."""
    s = state()
    if not isinstance(click, dict) or click.get("at") == s.get("_last_click_at"):
        return None
    s._last_click_at = click.get("at")
    return click.get("ref") or ""


def keep_targets(options: list[str]) -> None:
    """Drop the chosen targets that are not among `options` (the targets widget is bound to the state)."""
    s = state()
    chosen = s.pop("targets_next", None) or s.targets  # set by a run after the widget was drawn (_rebase)
    s.targets = [t for t in chosen if t in options]


def _checked() -> set:
    return state().setdefault("_checked", set())  # (fingerprint, target) pairs checked in this session


def checked_targets() -> list[str]:
    """The chosen targets already checked on this model version in this session (their verdicts are drawn)."""
    fp = version()
    return [t for t in state().targets if (fp, t) in _checked()]


def unchecked_targets() -> list[str]:
    """The chosen targets still to check on this model version, one per run after the page is drawn (none for a
    big model until its check is asked for)."""
    if check_pending():
        return []
    fp = version()
    return [t for t in state().targets if (fp, t) not in _checked()]


# Draw first: in a browser, a model's checks start once the browser says its drawing is on screen (the graph
# component reports it): each target's verdicts come with a rerun, and reruns while the page is still loading
# held a small model's first drawing up by ~0.6 s (bench/app_open.py). Without a report, after this long anyway.
CHECKS_WAIT_FOR_DRAWING_S = 3.0


def browser_attached() -> bool:
    """Whether this session is a page in a browser (AppTest's sessions have no request headers)."""
    return bool(st.context.headers)


def checks_may_start(drawn: set, shown: set) -> bool:
    """Whether this run may start the pending checks: the browser has reported drawing one of the layouts
    `shown` this run, or it has not within CHECKS_WAIT_FOR_DRAWING_S, or there is no browser (AppTest)."""
    import time

    if not browser_attached() or drawn & shown:
        return True
    waits = state().setdefault("_drawing_waits", {})
    key = (version(), frozenset(shown))
    since = waits.setdefault(key, time.monotonic())
    return time.monotonic() - since > CHECKS_WAIT_FOR_DRAWING_S


def mark_checked(target: str) -> None:
    _checked().add((version(), target))


def walk(name: str) -> None:
    """A button callback: show lesson `name`'s walkthrough."""
    state().walk = name


def walking() -> str | None:
    return state().get("walk")


@st.cache_resource(show_spinner=False, max_entries=64)  # not cache_data: unpickling 100k verdicts per rerun
def _check(fp: str, target: str, _model, _base_dir, depth: str | None = None, _path: str | None = None):
    """`_path`: the file `_model` was read from, unedited (a worker checking a heavy model reads it there: no
    copy of it in the server)."""
    from surgery.diagnose import check_one

    return check_one(_model, target, _base_dir, fp=fp, depth=depth, in_worker=_heavy(), path=_path)


# A check that reads every weight (onnxruntime's session) runs in a worker process for a model with more weights
# than this: the server, shared by every session, never holds a big model's weights (a 2 GiB external-data model:
# 1.8 GiB in the server otherwise). Below it, in the server: a worker's start and the graph facts it builds again
# cost ~0.5-1 s of a small model's verdicts (bench/app_open.py).
CHECK_IN_WORKER_OVER = 64 * 2**20  # bytes of weights, in the file and in external files


def _heavy() -> bool:
    """Whether the workspace's model has more weights than CHECK_IN_WORKER_OVER: the size of the file it was read
    from and its external data (an edit rarely changes the weights' volume; `model.ByteSize()` would serialize
    the whole model, weights included, on every check)."""
    ws = workspace()
    external = ws.original.external_bytes if ws.original.base_dir is not None else 0
    return ws.original.file_bytes + external > CHECK_IN_WORKER_OVER


DEPTHS = {"each target's default": None, "parse": "parse", "build": "build"}


def depth() -> str | None:
    """How far the checks go (the sidebar's choice): None for each target's default, else parse or build."""
    return DEPTHS.get(state().get("check_depth") or "")


CHECK_ON_REQUEST_OVER = (
    20_000  # nodes: a bigger model is drawn first and checked when asked (it takes a while)
)


def check_pending() -> bool:
    """True for a big model whose check has not been asked for yet in this workspace."""
    return len(workspace().current.graph.node) > CHECK_ON_REQUEST_OVER and not state().get("check_big")


def allow_check() -> None:
    state().check_big = True


def reports(targets: list[str] | None = None):
    """Check reports for the current model, one per target (cached by fingerprint and target); none for a big
    model until its check is asked for (`allow_check`)."""
    if targets is None and check_pending():
        return []
    ws = workspace()
    fp = version()
    out, path = [], _unedited_path() if _heavy() else None  # the file only matters to a worker's check
    for t in targets if targets is not None else state().targets:
        try:
            out.append(_check(fp, t, ws.current, ws.original.base_dir, depth(), path))
        except Exception as exc:  # an unknown target or a backend that cannot load: say so, keep going
            from surgery.text import error_line
            from surgery.verdict import Message, Report

            r = Report(t, t, "", accepted=False)
            r.messages.append(Message("error", explanation=f"could not check: {error_line(exc)}"))
            out.append(r)
    return out


@st.cache_resource(show_spinner=False)
def lesson_failure(name: str):
    """What the lesson's backend says about its model (a Verdict, a Message, or None), from a real check."""
    from surgery.usecases.lesson import failure

    return failure(name)


@st.cache_resource(show_spinner=False)
def builtin_rules():
    from surgery.rulebook import load_rules

    return load_rules()


def all_rules():
    """Built-in rules plus the user's saved rules (a broken user rule file is reported, not fatal)."""
    from surgery.rulebook import RuleError, load_rules

    rules = list(builtin_rules())
    mine = user_rules_dir()
    if mine.is_dir() and any(mine.glob("*.y*ml")):
        try:
            rules += load_rules([mine])
        except RuleError as exc:
            state().error = str(exc)
    return rules


def proposals(node_key: str | None = None, values: dict | None = None):
    """Rule proposals for the current model and targets (for one node when given); `values` fill the
    rules' asked values (e.g. {"shape": [1, 3, 224, 224]}). Cached per model version, targets and rules."""

    rules = all_rules()
    fp, model = version(), workspace().current
    return _proposals(
        fp,
        tuple(state().targets),
        tuple((r.id, r.path) for r in rules),
        repr(sorted((values or {}).items())),
        node_key,
        model,
        rules,
        values,
        _rule_context(fp, model, facts()),
    )


def _suggested(node_key: str, reports, find) -> dict:
    """rule id -> the first Suggestion `find(ctx, verdict, target, rules)` makes for the node, over the targets'
    verdicts on it (surgery.rulebook.suggest: at_readers, in_bodies)."""
    ctx = _rule_context(version(), workspace().current, facts())
    rules = all_rules()
    found = {}
    for r in reports:
        v = r.by_node().get(node_key)
        if v is not None:
            for s in find(ctx, v, r.backend, rules):
                found.setdefault(s.rule, s)
    return found


def fixes_at_readers(node_key: str, reports) -> list:
    """For a refused node no rule fixes itself: the rules whose fix removes or repairs it with a reader they match
    (surgery.rulebook.suggest.at_readers, as `check` suggests them), one per rule."""
    from surgery.rulebook.suggest import at_readers

    return list(_suggested(node_key, reports, at_readers).values())


def fixes_in_bodies(node_key: str, reports) -> list:
    """For a node refused for what sits in its body (an If branch, a Loop body, a local function): the proposals
    `fix` would apply there, at the body node the verdict names (surgery.rulebook.suggest.in_bodies)."""
    from surgery.rulebook.suggest import in_bodies

    wanted = _suggested(node_key, reports, in_bodies)
    return [p for s in wanted.values() for p in proposals(s.at) if p.rule.id == s.rule and p.node == s.at]


def why_no_fix(node_key: str, reports) -> list[str]:
    """For a refused node no rule fixes: the nearest misses of the rules meant for its refusal, or that no rule
    answers it (surgery.rulebook.tracer.unrepaired, as `fix` prints them)."""
    from surgery.rulebook.tracer import unrepaired

    refused = [
        r for r in reports if any(v.node == node_key and v.status.value != "supported" for v in r.verdicts)
    ]
    return [line for key, line in unrepaired(workspace().current, refused, all_rules()) if key == node_key]


@st.cache_resource(show_spinner=False, max_entries=8)
def _rule_context(fp: str, _model, _facts):
    """What rule conditions look at (facts, foldable tensors, ...), once per model version: not once per
    selected node (the foldable set alone is ~0.5 s at 100k nodes)."""
    from surgery.rulebook.matcher import Context

    ctx = Context(_model)
    ctx.facts = _facts  # the app's facts of this version: GraphFacts.of would size the model again (0.1 s)
    return ctx


@st.cache_resource(show_spinner=False, max_entries=64)
def _proposals(
    fp: str,
    targets: tuple,
    rules_key: tuple,
    values_key: str,
    node: str | None,
    _model,
    _rules,
    _values,
    _ctx,
):
    """The rules run over the selected node only (`propose(only=...)`: the same proposals as a run over the
    whole model gives that node): selecting a node in a 100k-node model must not wait for every other node."""
    from surgery.rulebook import propose

    only = None if node is None else {node}
    return propose(_model, _rules, list(targets), values=_values, ctx=_ctx, only=only)


def matches(proposal, values: dict | None = None) -> list:
    """Every proposal of `proposal`'s rule over the whole model for the chosen targets (the node's own first):
    what `fix` would batch into one step in its first round."""
    rule = proposal.rule
    fp, model = version(), workspace().current
    found = _matches(
        fp,
        tuple(state().targets),
        rule.id,
        rule.path,
        repr(sorted((values or {}).items())),
        model,
        rule,
        values,
        _rule_context(fp, model, facts()),
    )
    return sorted(found, key=lambda p: p.node != proposal.node)


@st.cache_resource(show_spinner=False, max_entries=32)
def _matches(fp: str, targets: tuple, rule_id: str, rule_path, values_key: str, _model, _rule, _values, _ctx):
    from surgery.rulebook import propose

    return [
        p for p in propose(_model, [_rule], list(targets), values=_values, ctx=_ctx) if p.step is not None
    ]


def batched(group: list):
    """The proposals of one rule as one step (surgery.rulebook.engine.batch): one recipe entry, one check."""
    from surgery.rulebook.engine import batch

    return batch(group, facts().index)


@st.cache_resource(show_spinner=False, max_entries=32)
def _partition(fp: str, backend: str, _model, _report, _facts):
    from surgery.partition import partition

    return partition(_model, _report, _facts)


def partition(report):
    """Supported regions, fallbacks and crossing tensors of the current model for one report (cached)."""
    return _partition(version(), report.backend, workspace().current, report, facts())


def parse_value(text: str, what: str = "value"):
    """A value typed for a rule's question: a shape (1x3x224x224, non-negative dims) where it asks for one, else a
    finite number or a list of them (surgery.specs). Raises ValueError with one line to show."""
    from surgery.specs import parse_answer

    return parse_answer(text, what)


def preview(proposal):
    """What applying the proposal would change (surgery.preview.StepPreview): nodes removed and added, and each
    target's rejected count before and after."""
    from surgery.preview import preview_step

    ws = workspace()
    return preview_step(ws.current, proposal.step, list(state().targets), ws.original.base_dir)


def apply_proposal(proposal, allow_cut: bool = False) -> None:
    """Apply as `fix` does, each promise held (surgery.rulebook.engine.apply); a step undone for breaking one is
    said in the sidebar, and a cut is remembered so that the page can offer to take it (`allow_cut`)."""
    from surgery.fixes import FixError
    from surgery.rulebook import apply
    from surgery.rulebook.engine import StepRefused

    s = state()
    s.refused_cut, s.notice = None, None
    try:
        s.last_applied = apply(workspace(), proposal, check=False, allow_cut=allow_cut)
        s.error = None
    except StepRefused as exc:
        if exc.kind == "cut":  # said on the rule's card, with the button that takes it
            s.refused_cut = (proposal.rule.id, proposal.node, exc.detail)
        else:
            s.error = str(exc)
        return
    except FixError as exc:
        s.error = str(exc)
        return
    except Exception as exc:  # a primitive's bug: said in one line, the workspace as it was (apply undoes)
        from surgery.text import error_line

        s.error = f"{proposal.rule.id}: the fix failed: {error_line(exc)}"
        return
    v = s.last_applied.verification
    s.last_verification = None if v is None else (v.status, s.last_applied.summary())
    _numbers(workspace().cursor, s.last_applied)
    remember_session()


def _numbers(n: int, applied) -> None:
    """Keep recipe step `n`'s own verification (status, line) for the recipe's list: every step shows its
    numbers, not only the last one."""
    v = applied.verification
    numbers = state().setdefault("step_numbers", {})
    numbers[str(n)] = None if v is None else [v.status, v.summary()]


def step_numbers(n: int) -> tuple[str, str] | None:
    """(status, line) of recipe step `n`'s verification when it was applied here, else None."""
    got = (state().get("step_numbers") or {}).get(str(n))
    return tuple(got) if isinstance(got, list) and len(got) == 2 else None


def fix_all(log=None) -> None:
    """Every rule for the chosen targets until nothing changes, as `onnx-surgery fix` runs them (the fix use case,
    surgery.usecases.fix): each step a recipe entry, undone one by one; steps that break a promise are undone and
    listed. `log(line)` hears of each step as it lands. The outcome's summary is kept for the page."""
    from surgery.text import error_line
    from surgery.usecases.fix import FixRequest, fix

    s = state()
    ws = workspace()

    def said(done) -> None:
        if log:
            log(
                f"{len(ws.recipe)}. {done.proposal.rule.id} on {done.proposal.where()} [{done.proposal.safety}]"
            )

    start = ws.cursor
    try:
        outcome = fix(ws, FixRequest(list(s.targets), all_rules(), depth=depth()), log=said)
    except Exception as exc:  # a backend that cannot load, a primitive's bug: one line, the steps made stay
        s.error = f"Fix all: {error_line(exc)}"
        return
    for k, done in enumerate(outcome.applied, start + 1):
        _numbers(k, done)
    lines = [f"{len(outcome.applied)} step(s) applied"]
    for b, a in zip(outcome.before, outcome.after):
        lines.append(
            f"{a.label}: {b.outcome.value} → {a.outcome.value} ({len(b.rejected)} → {len(a.rejected)} refused)"
        )
    lines += [f"undone ({kind}): {line}" for kind, line in outcome.undone]  # the numbers: the recipe's box
    s.fix_summary = lines
    v = outcome.overall
    s.last_verification = None if v is None else (v.status, f"original vs fixed: {v.summary()}")
    remember_session()


def step_node(n: int) -> str | None:
    """The node that recipe step `n` (1-based) was applied to (the step records it)."""
    return workspace().steps[n - 1].node


def save_rule(n: int, node_key: str):
    """Save recipe step `n` (1-based), as applied to `node_key`, as a rule in the user's rules folder."""
    from surgery.rulebook.save import rule_from_step

    ws = workspace()
    return rule_from_step(
        ws.model_at(n - 1), ws.steps[n - 1], node_key, user_rules_dir(), base_dir=ws.original.base_dir
    )


def draft_rule(n: int, node_key: str):
    """What saving recipe step `n` as a rule would write, not written: (path, YAML text, the node keys it matches
    in the model the step was applied to)."""
    from surgery.rulebook.save import draft_rule as draft
    from surgery.rulebook.save import matches_in

    ws = workspace()
    model = ws.model_at(n - 1)
    path, text, rule = draft(
        model, ws.steps[n - 1], node_key, user_rules_dir(), base_dir=ws.original.base_dir
    )
    return path, text, matches_in(rule, model)


@st.cache_resource(show_spinner=False, max_entries=16)
def walkthrough(name: str):
    """The lesson run end to end by the library (surgery.usecases.lesson.walk_through), once per server."""
    from surgery.usecases.lesson import walk_through

    return walk_through(name, builtin_rules())


@st.cache_resource(show_spinner="Looking for the backends on this machine…")
def backends_here():
    """`surgery.backends.list_backends()` once per server: (id, label, version, Availability)."""
    from surgery.backends import list_backends

    return list_backends()


def buildable() -> tuple[list[str], dict[str, str]]:
    """Backends with a builder that work here, and why the others do not."""
    from surgery.backends.build import BUILDERS

    ok, why = [], {}
    for bid, _label, _version, avail in backends_here():
        name = bid.split("@")[0]
        if name not in BUILDERS:
            continue
        if avail.ok:
            ok.append(name)
        else:
            why[name] = avail.reason
    return ok, why


def target_options() -> list[str]:
    from surgery.backends import static_versions

    try:
        statics = [f"tensorrt-static@{v}" for v in static_versions()]
    except Exception:
        statics = []
    return ["tensorrt", *statics, "onnxruntime", "openvino", "tvm"]


def open_lesson(name: str, remember: bool = True) -> None:
    """A button callback: open the lesson's broken model with its backend as target and its node selected
    (`remember`: as a new session; not for the page a server opens on, `onnx-surgery app --lesson`)."""
    lesson = next(x for x in lessons() if x.name == name)
    open_sample(name, remember=False)
    options = target_options()
    state().targets = [t for t in dict.fromkeys([lesson.backend, "onnxruntime"]) if t in options]
    state().selected = lesson.node
    if remember:
        remember_session(new=True)


def lesson(name: str):
    return next(x for x in lessons() if x.name == name)


def split_key(target: str, min_nodes: int) -> tuple:
    return (version(), target, depth(), int(min_nodes))


def make_split(target: str, min_nodes: int, progress=None) -> None:
    """Split the current model for `target` (surgery.split.make_plan, onnxruntime as the fallback); the plan, or
    the one-line reason there is none, is kept for this model version (`split_result`). `progress(fraction,
    message)` is called as the plan is made."""
    from surgery.backends import UnknownBackend
    from surgery.split import SplitError, make_plan

    ws = workspace()
    try:
        plan = make_plan(
            ws.current,
            target,
            min_nodes=int(min_nodes),
            depth=depth(),
            base_dir=ws.original.base_dir,
            progress=progress,
            source=state().model_name,  # plan.json says which model it splits, as the CLI's does
        )
    except (SplitError, UnknownBackend) as exc:
        plan = str(exc)
    state().setdefault("splits", {})[split_key(target, min_nodes)] = plan


def split_result(target: str, min_nodes: int):
    """The plan made by `make_split` for this model version, target and --min-nodes (or its error text)."""
    return (state().get("splits") or {}).get(split_key(target, min_nodes))


def split_zip(plan) -> bytes:
    """The parts and plan.json as a zip (surgery.split.Plan.to_zip)."""
    return plan.to_zip()


REDUCE_TIME_LIMIT_S = 60.0


def make_reduced(node_key: str, target: str, progress=None) -> None:
    """The minimal failing model for `node_key`'s refusal by `target` (surgery.reduce), kept for this model
    version (`reduced`); the one-line reason where there is none. `progress(fraction, message)` is called as
    it goes."""
    from surgery.reduce import ReduceError, reduce_model

    ws = workspace()
    try:
        result = reduce_model(
            ws.current,
            target,
            node=node_key,
            time_limit=REDUCE_TIME_LIMIT_S,
            depth=depth(),
            base_dir=ws.original.base_dir,
            progress=progress,
        )
    except ReduceError as exc:
        result = str(exc)
    state().setdefault("reduced", {})[(version(), target, depth(), node_key)] = result


def reduced(node_key: str, target: str):
    return (state().get("reduced") or {}).get((version(), target, depth(), node_key))


def reduced_bytes(result) -> bytes:
    return result.to_bytes(workspace().original.base_dir)
