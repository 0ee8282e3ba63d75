"""What the Workbench's graph area draws, cached: the layout once per model version and window (focus, scope),
shared by every target; the colouring per target on top of it (cheap). Library calls only (surgery.view)."""

from __future__ import annotations

import adapter
import streamlit as st


@st.cache_resource(show_spinner=False, max_entries=24)
def _structure(fp: str, focus: str | None, hops: int, scope: str | None, context: str | None, _facts):
    from surgery.view import structure

    return structure(_facts, focus=focus, hops=hops, scope=scope, context=context)


@st.cache_resource(show_spinner=False, max_entries=48)
def _painted(fp: str, layout: tuple, target: str | None, targets: tuple, _view, _facts, _verdicts, _reports):
    from surgery.view import paint

    return paint(_view, _facts, _verdicts, _reports)


def window() -> tuple[str | None, str | None]:
    """(scope, context) from the scope trail: the deepest scope, opened in place within the one above it
    ("" = the whole graph)."""
    scopes = adapter.state().get("scopes") or []
    if not scopes:
        return None, None
    return scopes[-1], (scopes[-2] if len(scopes) > 1 else "")


def view(report, reports, focus: str | None, hops: int):
    """The current model's drawing, coloured by `report`, hover texts with every report's verdict."""
    fp = adapter.fingerprint()
    facts = adapter.facts()
    scope, context = (None, None) if focus else window()
    structure = _structure(fp, focus, hops, scope, context, facts)
    verdicts = report.by_node() if report else {}
    return _painted(
        fp,
        (focus, hops, scope, context),
        report.backend if report else None,
        tuple(r.backend for r in reports),
        structure,
        facts,
        verdicts,
        tuple(reports),
    )


def open_group(view, gid: str) -> None:
    """A click on a group: open it in place. A group inside the opened scope goes one level deeper; a sibling
    of the opened scope takes its place."""
    scopes = adapter.state().setdefault("scopes", [])
    if view.opened is not None and gid not in view.inner_groups and scopes:
        scopes.pop()
    adapter.enter_scope(gid)


def go_to(depth: int) -> None:
    """Breadcrumb: keep the first `depth` scopes of the trail (0 = the whole graph)."""
    scopes = adapter.state().get("scopes") or []
    del scopes[depth:]
