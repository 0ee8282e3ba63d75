"""Sessions that outlive the process: a workspace (its original model, every step, undone ones included, and
the cursor) kept on disk so that a reload, a second tab or a restarted server finds the work where it was left.

One folder per session under the state folder ($ONNX_SURGERY_STATE_DIR, else ~/.onnx-surgery/sessions):

    <state>/<session id>/state.json     what to restore (format SESSION_FORMAT)
    <state>/<session id>/original.onnx  the uploaded model's bytes (uploads only)

A model opened from a path (or a sample) is not copied: the path and the original's fingerprint are kept, and a
path whose model has changed since is refused as a stale session rather than replayed on something else. Every
write is atomic (a temporary file in the same folder, fsync, os.replace): a reader sees the old state or the new,
never half of one. Each write raises the state's revision, under a lock on the session's folder: a writer that
names the revision it last read (`expect`) and finds another is told (SessionConflict) rather than writing over
the other's steps (two tabs on one session). Session ids are random (secrets.token_urlsafe) and checked against SESSION_ID before they
name anything on disk. A state file that cannot be used is a SessionError of one line, never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from surgery.model import Model, ModelLoadError, load_model
from surgery.text import first_line
from surgery.workspace import RECIPE_FORMAT, RecipeError, Step, Workspace, read_recipe

SESSION_FORMAT = "onnx-surgery-session/1"
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")  # token_urlsafe's alphabet; no dot, no slash
STATE_FILE = "state.json"
UPLOAD_FILE = "original.onnx"
MAX_STATE_BYTES = 16 * 1024 * 1024  # a recipe is small; a bigger state.json is not one of ours
MAX_STEPS = (
    10_000  # replay cost is bounded before any step runs (280,000 no-op steps blanked a page for 88 s)
)
MAX_UPLOAD_BYTES = 2 * 1024**3  # an uploaded model's copy: protobuf's own limit
KEEP = 50  # sessions kept by prune()


class SessionError(ValueError):
    """A session that cannot be restored or listed; the message is one line naming the session and why."""


class SessionConflict(SessionError):
    """Another writer saved the session since this one read it (`revision`: what is on disk now)."""

    def __init__(self, message: str, revision: int):
        super().__init__(message)
        self.revision = revision


@dataclass(frozen=True)
class Saved:
    path: Path  # the state file
    revision: int  # the revision written: the `expect` of this writer's next save


def state_dir() -> Path:
    """Where sessions live: $ONNX_SURGERY_STATE_DIR, else ~/.onnx-surgery/sessions."""
    env = os.environ.get("ONNX_SURGERY_STATE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".onnx-surgery" / "sessions"


def new_id() -> str:
    return secrets.token_urlsafe(16)


def valid_id(sid: Any) -> bool:
    return isinstance(sid, str) and SESSION_ID.fullmatch(sid) is not None


def session_dir(sid: str, root: str | os.PathLike | None = None) -> Path:
    """The session's folder; a session id that is not one of ours (../../x, a slash, too long) is refused."""
    if not valid_id(sid):
        raise SessionError(f"{_shown(sid)}: not a session id")
    return Path(root or state_dir()) / sid


@dataclass
class Restored:
    """A session read back: the workspace at its cursor, and what the app kept beside it."""

    id: str
    workspace: Workspace
    name: str
    targets: list[str]
    saved_at: float
    sample: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    warning: str | None = None  # restored, but not the same model as saved (a fix that changed since)
    revision: int = 0  # the state's revision when read: the `expect` of the next save


@dataclass(frozen=True)
class SessionInfo:
    """One line of the recent-sessions list."""

    id: str
    name: str
    steps: int  # steps in effect (the cursor)
    total: int  # steps kept, undone ones included
    saved_at: float

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.saved_at))
        undone = f" (+{self.total - self.steps} undone)" if self.total > self.steps else ""
        return f"{self.name} · {self.steps} step(s){undone} · {when}"


# -- writing ---------------------------------------------------------------------------------------------------


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a reader sees the old file or the new one, never part of it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(
        OSError
    ):  # the rename itself, durable (not every file system lets a folder be opened)
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def save(
    ws: Workspace,
    sid: str,
    *,
    name: str,
    targets: list[str] | None = None,
    sample: str | None = None,
    upload: bytes | None = None,
    extra: dict[str, Any] | None = None,
    original_fp: str | None = None,
    current_fp: str | None = None,
    root: str | os.PathLike | None = None,
    expect: int | None = None,
) -> Saved:
    """Write the session `sid`: the original (a sample's name, a file's path, or for a model that came as bytes
    a copy of them: `upload`, else its serialization), every step and the cursor, the targets, the name, the time
    and `extra` (JSON values the app keeps beside the recipe). The fingerprints may be given when the caller
    has them (hashing a big model takes a while). `expect`: the revision this writer last read or wrote; when
    the state on disk has another, nothing is written and SessionConflict says so. Returns the state file and
    the revision written."""
    folder = session_dir(sid, root)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    original = ws.original
    original_fp = original_fp or original.fingerprint()
    where: dict[str, Any] = {"source": Path(original.source).name, "fingerprint": original_fp}
    if sample is not None:
        where["sample"] = sample
    elif original.base_dir is not None:
        where["path"] = str(Path(original.source).resolve())
    else:
        where["copy"] = UPLOAD_FILE
        copy = folder / UPLOAD_FILE
        if upload is not None or not copy.exists():
            atomic_write(copy, bytes(upload) if upload is not None else original.proto.SerializeToString())
    state = {
        "format": SESSION_FORMAT,
        "id": sid,
        "name": name,
        "saved_at": time.time(),
        "targets": list(targets or []),
        "recipe": {
            "format": RECIPE_FORMAT,
            "original": where,
            "result_fingerprint": current_fp or ws.fingerprint(),
            "steps": [s.to_dict() for s in ws.steps],  # undone ones too: redo survives a reload
        },
        "cursor": ws.cursor,
        "extra": extra or {},
    }
    path = folder / STATE_FILE
    with _locked(folder):
        now = _revision(path)
        if expect is not None and now != expect:
            raise SessionConflict(
                f"session {sid}: saved elsewhere since (revision {now}, this writer last saw {expect})", now
            )
        state["revision"] = now + 1
        atomic_write(path, (json.dumps(state, indent=1) + "\n").encode())
    return Saved(path, now + 1)


@contextlib.contextmanager
def _locked(folder: Path):
    """Hold the session's lock (an flock on <folder>/.lock) for one read-compare-write; where the platform has
    no flock (Windows), writes are atomic but not serialized."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _revision(path: Path) -> int:
    """The revision of the state on disk: 0 when there is none (or none that can be read: it is replaced)."""
    try:
        state = json.loads(_read_own("", path, MAX_STATE_BYTES))
    except (SessionError, ValueError, RecursionError):
        return 0
    return _revision_of(state) if isinstance(state, dict) else 0


# -- reading ---------------------------------------------------------------------------------------------------


def read_state(sid: str, root: str | os.PathLike | None = None) -> dict[str, Any]:
    """The session's state.json as a dict, checked for the fields `load` and `recent` read."""
    folder = session_dir(sid, root)
    path = folder / STATE_FILE
    if folder.is_symlink():
        raise SessionError(
            f"session {sid}: its folder is a symbolic link; sessions are read only in {folder.parent}"
        )
    data = _read_own(sid, path, MAX_STATE_BYTES)
    try:
        state = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SessionError(f"session {sid}: {path} is not valid JSON ({_first(exc)})") from None
    except RecursionError:
        raise SessionError(f"session {sid}: {path} is nested too deep to be a session state") from None
    if not isinstance(state, dict) or state.get("format") != SESSION_FORMAT:
        raise SessionError(f"session {sid}: {path} is not an onnx-surgery session ({SESSION_FORMAT})")
    recipe, cursor = state.get("recipe"), state.get("cursor")
    original = recipe.get("original") if isinstance(recipe, dict) else None
    steps = recipe.get("steps") if isinstance(recipe, dict) else None
    if not isinstance(original, dict) or not isinstance(steps, list):
        raise SessionError(f"session {sid}: {path} has no recipe with an original and steps")
    if type(cursor) is not int or not 0 <= cursor <= len(steps):
        raise SessionError(f"session {sid}: {path}: cursor {cursor!r} is not a step count (0..{len(steps)})")
    if not isinstance(state.get("saved_at"), int | float) or not isinstance(state.get("name"), str):
        raise SessionError(f"session {sid}: {path} has no name or time")
    saved = state["saved_at"]
    if isinstance(saved, bool) or not (0 <= saved <= time.time() + 366 * 86400):  # NaN fails both
        raise SessionError(f"session {sid}: {path}: saved_at {saved!r} is not a time")
    try:
        state["name"].encode("utf-8")
    except UnicodeEncodeError:
        raise SessionError(f"session {sid}: {path}: its name is not text (a lone surrogate)") from None
    if len(steps) > MAX_STEPS:
        raise SessionError(
            f"session {sid}: {path}: {len(steps):,} steps; a session holds at most {MAX_STEPS:,}"
        )
    return state


def _read_own(sid: str, path: Path, limit: int, missing: str = "") -> bytes:
    """A file of the session's own folder: a regular file, never through a symbolic link, at most `limit` bytes.
    `missing`: what to say when it is not there."""
    try:
        fd = os.open(
            path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        )
    except FileNotFoundError:
        raise SessionError(
            f"session {sid}: {missing or 'not found (it was never saved here, or was pruned)'}"
        ) from None
    except OSError as exc:  # ELOOP: a symbolic link
        raise SessionError(f"session {sid}: cannot read {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SessionError(f"session {sid}: {path} is not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise SessionError(f"session {sid}: {path} is over {limit >> 20} MiB, not a session's file")
    return data


def load(sid: str, root: str | os.PathLike | None = None, *, allowed=None) -> Restored:
    """Restore session `sid`: open its original (refused when it changed since), replay every step and put the
    cursor back. `allowed(path) -> bool`: the server paths the original may be read from (a tampered state naming
    /etc/passwd is refused unopened). Raises SessionError (one line) for anything that stops it."""
    state = read_state(sid, root)
    recipe = state["recipe"]
    original = recipe["original"]
    model = _original(sid, session_dir(sid, root), original, allowed)
    try:
        steps, _ = read_recipe(json.dumps(recipe))
    except (RecipeError, TypeError, ValueError) as exc:  # params that are not a mapping, ...
        raise SessionError(f"session {sid}: {_first(exc)}") from None
    extra = state.get("extra")
    extra = extra if isinstance(extra, dict) else {}
    steps = _with_nodes(steps, extra.pop("step_nodes", None))
    ws = Workspace(model)
    try:
        ws.replay(steps)
        ws.cursor = state["cursor"]
        now = ws.fingerprint()
    except Exception as exc:  # a fix that refuses its own saved step (a fix that changed since)
        raise SessionError(f"session {sid}: replaying its steps failed: {_first(exc)}") from None
    want = recipe.get("result_fingerprint")
    warning = None
    if want and want != now:
        warning = (
            f"session {sid}: replaying its {state['cursor']} step(s) gives a model with fingerprint {now}, "
            f"not {want} as saved (a fix changed since)"
        )
    targets = state.get("targets")
    return Restored(
        sid,
        ws,
        state["name"],
        [t for t in targets if isinstance(t, str)] if isinstance(targets, list) else [],
        float(state["saved_at"]),
        original.get("sample") if isinstance(original.get("sample"), str) else None,
        extra,
        warning,
        _revision_of(state),
    )


def _revision_of(state: dict[str, Any]) -> int:
    rev = state.get("revision", 1)  # states written before revisions: one write
    return rev if type(rev) is int and rev >= 0 else 0


def _with_nodes(steps: list[Step], nodes) -> list[Step]:
    """Sessions saved before a step recorded its node kept the nodes beside the recipe (extra.step_nodes, a
    list in step order): a step that names no node of its own takes that one."""
    if not isinstance(nodes, list):
        return steps
    return [
        replace(s, node=n) if s.node is None and isinstance(n, str) else s
        for s, n in zip(steps, nodes + [None] * (len(steps) - len(nodes)))
    ]


def _original(sid: str, folder: Path, where: dict[str, Any], allowed=None) -> Model:
    """The session's original model, checked against the fingerprint it was saved with."""
    want = where.get("fingerprint")
    try:
        if isinstance(where.get("sample"), str):
            from surgery.samples import sample_path

            source = where["sample"]
            model = load_model(sample_path(where["sample"]))
        elif isinstance(where.get("path"), str):
            source = where["path"]
            if allowed is not None and not allowed(Path(source)):
                raise SessionError(
                    f"session {sid}: its model {_shown(source)} is not a file this app may open (the start model, "
                    "or one under --models-dir); not opened"
                )
            model = load_model(source, weights_in_file=True)  # as the app opens a path
        elif where.get("copy") == UPLOAD_FILE:
            source = str(folder / UPLOAD_FILE)
            gone = f"its uploaded model's copy is gone from {folder}"
            data = _read_own(sid, folder / UPLOAD_FILE, MAX_UPLOAD_BYTES, gone)
            model = load_model(data, name=str(where.get("source") or "upload.onnx"))
        else:
            raise SessionError(f"session {sid}: the state names no original model")
    except FileNotFoundError:
        raise SessionError(f"session {sid}: its uploaded model's copy is gone from {folder}") from None
    except (ModelLoadError, KeyError, OSError) as exc:
        raise SessionError(f"session {sid}: its original model cannot be opened: {_first(exc)}") from None
    got = model.fingerprint()
    if not want or got != want:
        raise SessionError(
            f"session {sid}: stale: {source} has changed since the session was saved "
            f"(fingerprint {got}, the session's steps were made on {want})"
        )
    return model


# -- listing and pruning ---------------------------------------------------------------------------------------


def recent(
    limit: int | None = 10, root: str | os.PathLike | None = None
) -> tuple[list[SessionInfo], list[str]]:
    """Saved sessions, newest first, and one line for each session folder that could not be read (skipped)."""
    found, problems = [], []
    for sid in _ids(root):
        try:
            state = read_state(sid, root)
        except SessionError as exc:
            problems.append(str(exc))
            continue
        found.append(
            SessionInfo(
                sid,
                state["name"],
                state["cursor"],
                len(state["recipe"]["steps"]),
                float(state["saved_at"]),
            )
        )
    found.sort(key=lambda i: i.saved_at, reverse=True)
    return (found if limit is None else found[:limit]), problems


def prune(
    keep: int = KEEP, root: str | os.PathLike | None = None, *, spare: tuple[str, ...] = ()
) -> list[str]:
    """Remove all but the `keep` most recently saved sessions (never those in `spare`); returns the ids
    removed. Folders that are not sessions of ours (a name that is not a session id) are left alone."""
    base = Path(root or state_dir())

    def when(sid: str) -> float:
        try:
            return (base / sid / STATE_FILE).stat().st_mtime
        except OSError:
            return 0.0

    ids = sorted(_ids(root), key=when, reverse=True)
    gone = [sid for sid in ids[keep:] if sid not in spare]
    for sid in gone:
        shutil.rmtree(base / sid, ignore_errors=True)
    return gone


def remove(sid: str, root: str | os.PathLike | None = None) -> None:
    shutil.rmtree(session_dir(sid, root), ignore_errors=True)


def _ids(root: str | os.PathLike | None) -> list[str]:
    base = Path(root or state_dir())
    try:
        return [e.name for e in os.scandir(base) if valid_id(e.name) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


# -- helpers ---------------------------------------------------------------------------------------------------


def _first(exc: BaseException) -> str:
    return first_line(str(exc)) or type(exc).__name__


def _shown(sid: Any) -> str:
    text = repr(sid)
    return text if len(text) <= 40 else text[:37] + "..."
