"""What the Workbench's graph area draws, cached: the layout once per model version and window (focus, scope),
shared by every target; the colouring per target on top of it (cheap). Library calls only (surgery.view)."""

from __future__ import annotations

import fixing
import graph_facts
import session
import streamlit as st


@st.cache_resource(show_spinner=False, max_entries=24)
def _structure(
    fp: str, focus: str | None, hops: int, scope: str | None, context: str | None, typed: bool, _facts
):
    from surgery.view.draw import structure

    if focus is None and scope is None:
        ready = graph_facts.first_view(_facts)  # the start model's, read ahead by the server
        if ready is not None:
            return ready
    return structure(_facts, focus=focus, hops=hops, scope=scope, context=context)


@st.cache_resource(show_spinner=False, max_entries=48)
def _painted(fp: str, layout: tuple, target: str | None, targets: tuple, _view, _facts, _verdicts, _reports):
    from surgery.view.draw import paint

    return paint(_view, _facts, _verdicts, _reports)


def window() -> tuple[str | None, str | None]:
    """(scope, context) from the scope trail: the deepest scope, opened in place within the one above it
    ("" = the whole graph)."""
    scopes = session.state().get("scopes") or []
    if not scopes:
        return None, None
    return scopes[-1], (scopes[-2] if len(scopes) > 1 else "")


def view(report, reports, focus: str | None, hops: int):
    """The current model's drawing, coloured by `report`, hover texts with every report's verdict."""
    scope, context = (None, None) if focus else window()
    # a big model's collapsed drawing needs no shapes: it is drawn with the declared types while they are
    # inferred; a window (focus, scope) is drawn at once too, with the shapes on its edges once they are in
    facts = graph_facts.facts(shapes=bool(focus or scope), wait=False)
    fp = session.version()
    typed = facts.inferred
    structure = _structure(fp, focus, hops, scope, context, typed, facts)
    verdicts = report.by_node() if report else {}
    return _painted(
        fp,
        (focus, hops, scope, context, typed),
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
    session.enter_scope(gid, instead_of_last=view.opened is not None and gid not in view.inner_groups)


def go_to(depth: int) -> None:
    """Breadcrumb: keep the first `depth` scopes of the trail (0 = the whole graph)."""
    session.keep_scopes(depth)


@st.cache_resource(show_spinner=False, max_entries=8)
def _diff(fp_before: str, fp_after: str, target: str | None, _before, _after, _verdicts, _reports):
    from surgery.graph import GraphFacts
    from surgery.view.draw import diff_view

    return diff_view(GraphFacts.of(_before), GraphFacts.of(_after), _verdicts, reports=_reports)


def compare_options() -> dict[str, str]:
    """What the graph can compare (label -> choice id): every applied step of the recipe, the original with
    now, and each fix previewed in the inspector."""
    ws = session.workspace()
    out = {"—": ""}
    if ws.cursor:
        out["original → now (overlaid)"] = f"steps:0-{ws.cursor}"
    for n, step in enumerate(ws.recipe, 1):
        out[f"step {n}: {step.fix} (before → after)"] = f"steps:{n - 1}-{n}"
    s = session.state()
    key = s.get("selected")
    previewing = any(k.startswith("preview-") and s[k] is True for k in list(s.keys()))
    if key and previewing:  # proposals only when a fix is previewed (they cost seconds on big models)
        for p in fixing.proposals(key):
            if p.step is not None and s.get(f"preview-{p.rule.id}"):
                out[f"preview: {p.rule.id} on {key}"] = f"preview:{p.rule.id}"
    return out


def compare(choice: str, report, reports):
    """The overlaid before/after drawing for a `compare_options()` choice, or None."""
    from surgery.model import fingerprint

    ws = session.workspace()
    if choice.startswith("steps:"):
        a, _, b = choice[6:].partition("-")
        before, after = ws.model_at(int(a)), ws.model_at(int(b))
    elif choice.startswith("preview:"):
        from surgery.workspace import apply_step

        rule = choice[len("preview:") :]
        found = [p for p in fixing.proposals(session.state().get("selected")) if p.rule.id == rule and p.step]
        if not found:
            return None
        before = ws.current
        try:
            after = apply_step(before, found[0].step, ws.original.base_dir)
        except Exception:  # the fix refuses: the inspector's preview says why
            return None
    else:
        return None
    verdicts = report.by_node() if report else {}
    return _diff(
        fingerprint(before),
        fingerprint(after),
        report.backend if report else None,
        before,
        after,
        verdicts,
        tuple(reports),
    )
