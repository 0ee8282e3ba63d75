"""Sessions that survive a reload or a restarted server (surgery.sessions keeps them on disk): saved after every
change, reopened from the URL's ?session=, rebased when another tab saved first."""

from __future__ import annotations

import streamlit as st
from session import _set_workspace, fingerprint, may_open, state, workspace

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
