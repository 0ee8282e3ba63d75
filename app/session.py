"""The session's state, and the one place pages read it: the workspace and its name, the selected node, the
folders a session may open, the scopes opened in the drawing. Every other app module reads and writes the
session through these functions."""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from surgery.workspace import Workspace


def user_rules_dir() -> Path:
    """Where "save as rule" writes and where the user's rules are read: $ONNX_SURGERY_USER_RULES or
    ~/.onnx-surgery/rules."""
    return Path(os.environ.get("ONNX_SURGERY_USER_RULES") or Path.home() / ".onnx-surgery" / "rules")


def models_dir() -> Path | None:
    d = os.environ.get("ONNX_SURGERY_MODELS_DIR")
    return Path(d).resolve() if d else None


def state():
    return st.session_state


def _set_workspace(ws: Workspace, name: str) -> None:
    s = state()
    s.ws, s.model_name = ws, name
    s.selected, s.last_applied, s.error, s.scopes, s.check_big = None, None, None, [], False
    s.last_verification, s.session_id, s.sample = None, None, None
    s.session_rev, s.session_steps = None, []
    s.fix_summary, s.notice, s.step_numbers = None, None, {}


def upload_limit() -> int:
    """The largest upload this server accepts, in bytes (`onnx-surgery app --upload-limit`; protobuf's 2 GiB)."""
    try:
        return max(1, int(os.environ.get("ONNX_SURGERY_UPLOAD_LIMIT", "")))
    except ValueError:
        return 2 << 30


def has_model() -> bool:
    """Whether this session has its model read already (a session's first page reads it)."""
    return "ws" in state()


def workspace() -> Workspace:
    """The session's workspace (app/main.py opens one for a new session before any page runs:
    opening.ensure_state)."""
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


def may_open(path: Path) -> bool:
    """A server path this app may read a model from: the start model it was given, or a file under
    --models-dir (what a saved session names is checked against this before it is opened)."""
    p = Path(os.path.realpath(path))
    start = os.environ.get("ONNX_SURGERY_START_MODEL")
    if start and p == Path(os.path.realpath(start)):
        return True
    root = models_dir()
    return root is not None and p.is_relative_to(Path(os.path.realpath(root)))


def last_verification() -> tuple[str, str] | None:
    """(status, line) of the last applied step's verification, kept across a reload: ok, skipped or failed."""
    return state().get("last_verification")


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


def new_click(click, graph: str = "graph") -> str | None:
    """What the graph component `graph` (its key) reported, the first time it is seen: the clicked ref ('' for
    the background, 'group:...' for a group); None when there is no new click (a component repeats its last
    value: with two graphs side by side, each its own)."""
    s = state()
    at = click.get("at") if isinstance(click, dict) else None
    seen = s.setdefault("_last_clicks", {})
    if at is None or seen.get(graph) == at:
        return None
    seen[graph] = at
    return click.get("ref") or ""


def walk(name: str) -> None:
    """A button callback: show lesson `name`'s walkthrough."""
    state().walk = name


def walking() -> str | None:
    return state().get("walk")


def step_node(n: int) -> str | None:
    """The node that recipe step `n` (1-based) was applied to (the step records it)."""
    return workspace().steps[n - 1].node
