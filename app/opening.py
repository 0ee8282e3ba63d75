"""Opening a model in the app: a sample, a lesson, an upload, a server path under --models-dir, the session in
the URL, or the start model (taken from what the server read ahead: graph_facts.read_ahead); `ensure_state` opens the
first one for a new session."""

from __future__ import annotations

import os
from pathlib import Path

from checks import default_targets, target_options
from graph_facts import _take_read_ahead
from session import _set_workspace, models_dir, state, upload_limit
from session_store import _restore_from_url, _session_in_url, remember_session

from surgery.model import ModelLoadError, load_model
from surgery.samples import DEFAULT_SAMPLE, lessons, sample_path
from surgery.text import size_text
from surgery.workspace import Workspace


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


def open_sample(name: str, remember: bool = True) -> None:
    _set_workspace(Workspace.open(sample_path(name)), f"{name}.onnx")
    state().sample = name
    if remember:
        remember_session(new=True)


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
        model = (None if check_folder else _take_read_ahead(p)) or load_model(
            p, content_hash=True, weights_in_file=True
        )
        _set_workspace(Workspace(model), p.name)
        if remember:
            remember_session(new=True)
        return True
    except ModelLoadError as exc:
        state().error = str(exc)
        return False


def changed_on_disk() -> str | None:
    """Why this session cannot go on, in one line, when the file it opened has changed on disk since: its large
    weights are read from that file (load_model's weights_in_file), so its versions would now read others."""
    ws = state().get("ws")
    if ws is None or ws.original.own_file is None or ws.original.file_as_read() is not None:
        return None
    return (
        f"{state().model_name} changed on disk after it was opened, and this session reads the model's weights "
        "from the file: reopen it as it is now (this session's steps are applied to it again)"
    )


def reopen_changed() -> None:
    """A button callback: open the changed file again and apply this session's steps to it, as far as they
    still apply (the first that does not is said, with the steps before it kept)."""
    from surgery.usecases.replay import apply_steps

    s = state()
    steps, path, name = list(s.ws.recipe), s.ws.original.source, s.model_name
    if not open_path(path, check_folder=False):
        return
    failed = apply_steps(s.ws, steps)
    if failed is not None:
        k, line = failed
        s.error = f"{name} reopened: step {k} ({steps[k - 1].fix}) no longer applies: {line}; the steps before it are kept"
    remember_session()


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
