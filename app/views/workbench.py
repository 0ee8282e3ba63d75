"""Workbench: the graph coloured by verdict, the inspector, the fixes with verification, undo/redo."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/: the modules the pages import


import html  # noqa: E402
import json  # noqa: E402

import checks  # noqa: E402
import fixing  # noqa: E402
import graph_facts  # noqa: E402
import graph_view  # noqa: E402
import numpy as np  # noqa: E402
import reduce_button  # noqa: E402
import session  # noqa: E402
import session_store  # noqa: E402
import sidebar  # noqa: E402
import streamlit as st  # noqa: E402
from graph_component import graph  # noqa: E402
from onnx import helper  # noqa: E402
from verdicts import (  # noqa: E402
    inline_code,
    md_escape,
    show_report_banner,
    show_report_line,
    verdict_details,
    verdict_line,
)

from surgery.model import model_bytes  # noqa: E402
from surgery.view.draw import COLORS, LEGEND  # noqa: E402
from surgery.view.find import next_rejected, previous_rejected, search  # noqa: E402
from surgery.view.groups import scope_label  # noqa: E402
from surgery.view.labels import constant_value, status_of  # noqa: E402

STYLE = """<style>
.wb-title { font-size: 1.15rem; margin: -0.4rem 0 -0.2rem 0; }
.wb-title span { font-size: 0.8rem; color: #6b7785; margin-left: 0.4rem; }
.wb-legend { font-size: 0.82rem; color: #55606c; text-align: right; }
.wb-key { white-space: nowrap; }
/* the inspector stays beside the graph: it keeps to the window's height and scrolls on its own */
.st-key-inspector-pane { position: sticky; top: 3.2rem; max-height: calc(100vh - 4.2rem); overflow-y: auto;
  overflow-x: hidden; padding-right: 0.3rem; }
.st-key-inspector-pane [data-testid="stAlert"] > div { padding: 0.3rem 0.7rem; }
.st-key-inspector-pane [data-testid="stAlert"] p { font-size: 0.85rem; }
.st-key-inspector-pane [data-testid="stExpander"] summary { padding-top: 0.25rem; padding-bottom: 0.25rem; }
.st-key-inspector-pane [data-testid="stExpander"] summary p { font-size: 0.85rem; }
.st-key-inspector-pane h3 { font-size: 1.05rem; padding-top: 0.4rem; word-break: break-all; }
</style>"""

st.markdown(STYLE, unsafe_allow_html=True)
left, right = st.columns([2.6, 1], gap="small")
with left:
    head = st.container()  # the title, the search and the view's controls
    # a container, not st.empty(): an empty slot blanks the drawing from the moment a rerun reaches it until the
    # new one is sent (a check coming in on a 1B export: the graph gone for ~2 s); a container's drawing stays
    # on screen until its element is updated in place
    graph_slot = st.container()

sidebar.render()
s = session.state()
ws = session.workspace()
with st.spinner("Reading the model…"):
    facts = graph_facts.facts(
        shapes=False
    )  # names, order and types; the inspector waits for a big model's shapes
n_nodes = len(ws.current.graph.node)
# Draw first, verdicts after: each target is checked in its own run after the page is drawn, and the graph is
# recoloured as each one finishes (the layout and the viewport stay).
pending = checks.unchecked_targets()
reports = checks.reports(checks.checked_targets())
select = session.select


def _clicked() -> None:
    """The graph's click callback, before the page runs: a clicked node is selected in this very run (the
    page draws once, the drawing is not re-sent: graph_component); a group's click is left to the page, which
    needs its view to open it."""
    for key in ("graph", "graph-before", "graph-after"):
        click = (st.session_state.get(key) or {}).get("selected")
        if isinstance(click, dict) and not str(click.get("ref") or "").startswith("group:"):
            ref = session.new_click(click, key)
            if ref:
                session.select(ref)


def search_enter() -> None:
    """Enter in the search box selects the first match."""
    hits = search(graph_facts.facts(shapes=False), s.get("search") or "")
    if hits:
        session.pick(hits[0])


with head:
    st.markdown(
        f"<div class='wb-title'><b>{html.escape(s.model_name)}</b> <span>{n_nodes:,} nodes</span></div>",
        unsafe_allow_html=True,
    )
    if not s.targets:
        st.info("Pick one or more targets in the sidebar to see what each backend rejects.")
    top = st.columns([1.5, 2.4, 0.5, 0.5, 1.05, 0.7], vertical_alignment="bottom")
    by_target = {r.backend: r for r in reports}
    pairs = {  # two checked targets: what changes from one to the other (a TensorRT upgrade, typically)
        f"{a} → {b}": (by_target[a], by_target[b])
        for i, a in enumerate(s.targets)
        for b in s.targets[i + 1 :]
        if a in by_target and b in by_target
    }
    held = s.get("precision_outcome")  # the Precision page's search, for this very model
    emulated = {}
    if held is not None and held[0] == session.fingerprint():
        emulated = {f"{held[1].precision} emulation: kept in float32": held[1]}
    color_by = top[0].selectbox(
        "Colour by",
        [*s.targets, *pairs, *emulated] or ["(no target)"],
        key="color_by",
        on_change=session_store.remember_session,  # kept with the session: a reload colours as before
        help="which target's verdicts colour the graph; 'A → B': what changes from target A to target B "
        "(red: refused by B, not by A; green: accepted by B, refused by A; grey: no change), as "
        "`onnx-surgery upgrade --from A --to B` lists it; after a search on the Precision page, the nodes it "
        "keeps in float32",
    )
    if color_by in pairs:
        from surgery.usecases.upgrade import changes_report

        report = changes_report(*pairs[color_by])
    elif color_by in emulated:
        from surgery.usecases.precision import colouring

        report = colouring(emulated[color_by])
    else:
        report = by_target.get(color_by)
    verdicts = report.by_node() if report else {}
    query = top[1].text_input(
        "Search by name or op",
        key="search",
        placeholder="name or op, Enter selects the first match",
        on_change=search_enter,
    )
    prv = previous_rejected(verdicts, facts, s.selected)
    nxt = next_rejected(verdicts, facts, s.selected)
    top[2].button(
        "",
        key="prev_rejected",
        icon=":material/arrow_back:",
        disabled=prv is None,
        on_click=select,
        args=(prv,),
        help="select the previous node this target rejects or cannot confirm (key p in the graph)",
        width="stretch",
    )
    top[3].button(
        "",
        key="next_rejected",
        icon=":material/arrow_forward:",
        disabled=nxt is None,
        on_click=select,
        args=(nxt,),
        help="select the next node this target rejects or cannot confirm (key n in the graph)",
        width="stretch",
    )
    focus = top[4].toggle(
        "Focus",
        key="focus",
        value=False,
        help="draw only the nodes within the given number of hops of the selected one",
    )
    hops = top[5].number_input(
        "Hops",
        1,
        20,
        3,
        key="hops",
        label_visibility="collapsed",
        disabled=not focus,
        help="with Focus on, only the nodes within this many hops of the selected one are drawn",
    )
    if query:
        hits = search(facts, query)
        if hits:
            pick = st.selectbox(
                f"{len(hits)} match(es) — pick one to select it",
                hits,
                index=None,
                key="search_hit",
            )
            if pick and pick != s.selected and pick != session.last_pick():
                session.pick(pick)
            rows = [
                f"{md_escape(ws.current.graph.node[facts.index[k]].op_type)} · {md_escape(k)} · "
                f"{status_of(verdicts.get(k)) if report else 'not checked'}"
                for k in hits[:6]
            ]
            st.caption("  \n".join(rows) + ("  \n…" if len(hits) > 6 else ""))
        else:
            st.caption(f"no node name or op contains “{md_escape(query)}”")
    hovered = (
        [*reports, report] if color_by in emulated else reports
    )  # the emulation's numbers in the tooltips
    view = graph_view.view(
        report, hovered, s.selected if focus and s.selected in facts.index else None, int(hops)
    )
    options = graph_view.compare_options()
    side_by_side = False
    if len(options) > 1:
        row = st.columns([4, 1.2], vertical_alignment="bottom")
        picked = row[0].selectbox(
            "Compare",
            list(options),
            key="compare",
            help="the graph before and after a step of the recipe, or a previewed fix: removed nodes struck out "
            "in red, added or changed ones outlined",
        )
        side_by_side = row[1].toggle(
            "Side by side", key="compare_side", help="before on the left, after on the right"
        )
        shown = graph_view.compare(options.get(picked, ""), report, reports)
        if shown is not None:
            view = shown
        else:
            side_by_side = False
    counts = view.counts()
    if color_by in emulated:
        o = emulated[color_by]
        st.caption(
            md_escape(
                f"{o.precision} emulation (the Precision page): {len(o.kept)} node(s) kept in float32 (red), the "
                f"rest in {o.precision} (green); grey: no float math. Hover a node for its range and its error alone"
            )
        )
    if color_by in pairs:
        a, b = pairs[color_by]
        gained = sum(v.status.value == "supported" for v in report.verdicts)
        st.caption(
            md_escape(
                f"{a.label} → {b.label}: {len(report.rejected)} node(s) newly refused (red), {gained} newly "
                f"accepted (green), {len(report.verdicts) - len(report.rejected) - gained} otherwise changed "
                "(amber); grey: no change"
            )
        )
    legend = " &nbsp; ".join(
        f"<span class='wb-key'><span style='color:{COLORS[name]};font-size:1.15em'>■</span> {name}"
        + (f" ({counts[name]})" if counts.get(name) else "")
        + "</span>"
        for name, _ in LEGEND
    )
    scopes = s.get("scopes") or []
    if scopes and not focus:
        crumbs = st.columns([0.5, 1.1, *([1.6] * min(len(scopes), 3)), 2], vertical_alignment="center")
        crumbs[0].button(
            "",
            key="scope_up",
            on_click=session.leave_scope,
            icon=":material/arrow_upward:",
            help="close the opened group",
        )
        crumbs[1].button("Whole graph", key="unscope", on_click=session.leave_scope, args=(True,))
        shown = list(enumerate(scopes, 1))[-3:]
        for col, (depth, sc) in zip(crumbs[2:], shown):
            col.button(
                "› " + scope_label(sc)[-28:],
                key=f"crumb-{depth}",
                on_click=graph_view.go_to,
                args=(depth,),
                disabled=depth == len(scopes),
                help=scope_label(sc),
            )
    # the view's note (what is drawn, when not the whole graph) and the colours' legend; the legend takes the
    # whole row when there is no note, and wraps rather than cut a colour's name
    info = st.columns([3, 2], vertical_alignment="center") if view.note else [st, st]
    if view.note:
        info[0].caption(md_escape(view.note))
    info[1].markdown(f"<div class='wb-legend'>{legend}</div>", unsafe_allow_html=True)
with left:
    if side_by_side:  # the two sides at the same places, so they line up
        halves = graph_slot.container().columns(2, gap="small")
        results, shown, keys = [], set(), ["graph-before", "graph-after"]
        for half, which in zip(halves, ("before", "after")):
            with half:
                result, layout_id = graph(
                    view.side(which), s.selected, f"graph-{which}", _clicked, report_drawn=bool(pending)
                )
                results.append(result)
                shown.add(layout_id)
    else:
        with graph_slot:  # one element: a new model relays it out in place
            result, layout_id = graph(view, s.selected, "graph", _clicked, report_drawn=bool(pending))
        results, shown, keys = [result], {layout_id}, ["graph"]
    drawn = {getattr(r, "drawn", None) for r in results}
    for result, key in zip(results, keys):  # a group's click (a node's was taken by _clicked): a new layout
        ref = session.new_click(getattr(result, "selected", None), key)
        if ref is not None:
            if ref.startswith("group:"):
                graph_view.open_group(view, ref[len("group:") :])
            elif ref:
                session.select(ref)
            st.rerun()

with right, st.container(key="inspector-pane"):  # beside the graph, scrolling on its own (STYLE)
    checking = st.empty()
    key = s.selected
    for r in reports:  # with a node in the inspector, a line each: the node's own verdicts follow
        (show_report_line if key and key in facts.index else show_report_banner)(r)
    if not key or key not in facts.index:
        st.subheader("Inspector")
        st.caption("Click a node in the graph, search for one, or use Next rejected.")
    else:
        facts = graph_facts.facts(wait=False)  # with shapes, once a big model's are inferred
        node = facts.node(key)
        st.subheader(f"{md_escape(node.op_type)} {inline_code(key)}")
        st.caption(
            md_escape(
                f"domain: {node.domain or 'ai.onnx'}" + (f" · name: {node.name}" if node.name != key else "")
            )
        )
        said = [(r, v) for r in reports if (v := r.by_node().get(key)) is not None]
        for r, v in said:  # a line per target; what each said comes after the fixes
            verdict_line(v, r.label)

        st.markdown("**Fixes**")
        ready = graph_facts.fixes_ready()
        props = fixing.proposals(key) if ready else []
        if ready and not props and (props := fixing.fixes_in_bodies(key, reports)):
            st.caption(
                f"Refused for what is in its body: the fix applies there, at {inline_code(props[0].node)}."
            )
        if not ready:
            st.caption(
                f"Fixes are proposed once the shapes of the {n_nodes:,} nodes are inferred (a few seconds)."
            )
        elif not props and (through := fixing.fixes_at_readers(key, reports)):
            for (
                sug
            ) in through:  # the fix of a reader removes or repairs this node too (the rule's `also_fixes`)
                reader = facts.node(sug.at)
                st.caption(
                    f"Fixed with its reader: {inline_code(sug.rule)} applies at {md_escape(reader.op_type)} "
                    f"{inline_code(sug.at)} and fixes this {md_escape(node.op_type)} with it."
                )
                st.button(
                    md_escape(f"Select {sug.at}"),
                    key=f"select-reader-{sug.rule}",
                    on_click=select,
                    args=(sug.at,),
                    icon=":material/arrow_downward:",
                )
        elif not props:
            st.caption("No rule matches this node for the chosen targets.")
            for line in fixing.why_no_fix(key, reports):  # the tracer's nearest misses, as `fix` prints them
                st.caption(md_escape(line))
        for p in props:
            with st.container(border=True):
                st.markdown(f"**{md_escape(p.rule.title)}**  \n`{p.rule.id}` · safety: **{p.safety}**")
                if p.step is None:
                    text = st.text_input(
                        f"The rule asks for {p.needs}",
                        key=f"ask-{p.rule.id}",
                        placeholder="e.g. 1x3x224x224" if "shape" in str(p.needs) else "e.g. 5 or [0, 2]",
                    )
                    if not text:
                        continue
                    try:
                        answer = fixing.parse_value(text, str(p.needs))
                    except ValueError as exc:
                        st.error(md_escape(str(exc)))
                        continue
                    values = {p.needs: answer}
                    asked = fixing.proposals(key, values)
                    p = next((q for q in asked if q.rule.id == p.rule.id and q.step is not None), p)
                    if p.step is None:
                        continue
                else:
                    values = None
                if not p.owners:  # a rule that matches elsewhere too: one step for all, as `fix` batches
                    group = fixing.matches(p, values)
                    if len(group) > 1 and st.radio(
                        "Apply to",
                        [f"all {len(group)} nodes it matches (one step)", "this node"],
                        key=f"scope-{p.rule.id}",
                        horizontal=True,
                        label_visibility="collapsed",
                    ).startswith("all"):
                        p = fixing.batched(group)
                act = st.columns([1, 1.6], vertical_alignment="center")  # the action first, the reading after
                if act[0].button("Apply", key=f"apply-{p.rule.id}", type="primary"):
                    fixing.apply_proposal(p)
                    st.rerun()
                if act[1].toggle("Preview", key=f"preview-{p.rule.id}"):
                    diff = fixing.preview(p)
                    st.markdown(
                        f"removes {len(diff.removed)} node(s): `{', '.join(diff.removed[:8])}`  \n"
                        f"adds {len(diff.added)} node(s): `{', '.join(diff.added[:8])}`"
                    )
                    for line in diff.verdict_lines():
                        st.caption(line)
                st.caption(f"step: {md_escape(p.step.describe())}")
                st.caption(md_escape(p.rule.why))
                cut = st.session_state.get("refused_cut")
                if cut and cut[:2] == (p.rule.id, p.node):  # undone as a cut: the user may still take it
                    st.warning(
                        f"Not applied: this step is a **cut**, not a repair: {md_escape(cut[2])}. Take it only "
                        "where the host will run what it removes."
                    )
                    if st.button("Take the cut (the host runs the rest)", key=f"cut-{p.rule.id}"):
                        fixing.apply_proposal(p, allow_cut=True)
                        st.rerun()

        if said:
            st.markdown("**What the targets said**")
        opened = (
            False  # the first refusal's words open; the others fold under who said them and their first line
        )
        for r, v in said:
            first = v.status.value != "supported" and not opened
            verdict_details(v, r.label, r.backend, expanded=first)
            opened = opened or first
        reduce_button.show(key, reports)  # 'Minimal failing model' where a target rejects the node
        with st.expander("Node details", expanded=True):
            if node.attribute:
                st.markdown("**Attributes**")
                st.json(
                    {a.name: str(helper.get_attribute_value(a))[:200] for a in node.attribute}, expanded=False
                )
            st.markdown("**Inputs**")
            for idx, x in enumerate(node.input):
                if not x:
                    continue
                info = facts.info(x)
                producer = facts.producer_of(x)
                const = " · constant" if facts.is_constant(x) else ""
                c1, c2 = st.columns([3, 1])
                c1.markdown(f"`{idx}` {md_escape(x)}  \n{info.dtype_name} {info.shape_str()}{const}")
                if producer is not None:
                    c2.button(
                        md_escape(producer.op_type),
                        key=f"in-{idx}-{x}",
                        on_click=select,
                        args=(facts.keys[facts.producer[x]],),
                        help="select the producer",
                    )
                value = constant_value(facts, x)
                if value is not None:
                    c1.caption(f"value: {np.array2string(value, threshold=64)}")
            st.markdown("**Outputs**")
            for o in node.output:
                info = facts.info(o)
                st.markdown(f"{md_escape(o)}  \n{info.dtype_name} {info.shape_str()}")
                value = constant_value(facts, o)
                if value is not None:
                    st.caption(f"value: {np.array2string(value, threshold=64)}")
                for j in facts.consumers.get(o, [])[:8]:
                    st.button(
                        f"→ {md_escape(ws.current.graph.node[j].op_type)} {md_escape(facts.keys[j])}",
                        key=f"out-{o}-{j}",
                        on_click=select,
                        args=(facts.keys[j],),
                    )

st.divider()
hist, actions = st.columns([3, 2])
with hist:
    st.markdown("**Recipe** — the original is never changed; every step can be undone")
    if not ws.steps:
        st.caption("No steps yet.")
    for n, step in enumerate(ws.steps, 1):
        done = n <= ws.cursor
        row = st.columns([6, 2])
        text = md_escape(step.describe())
        row[0].markdown(("" if done else "~~") + f"{n}. {text}" + ("" if done else "~~ (undone)"))
        numbers = fixing.step_numbers(n)
        if numbers is not None:  # each step its own numbers, as the CLI prints them under each step
            mark = {"ok": "✓", "skipped": "–"}.get(numbers[0], "✗")
            row[0].caption(md_escape(f"{mark} {numbers[1]}"))
        node_key = session.step_node(n) or (s.selected if s.selected in facts.index else None)
        if done and node_key and row[1].toggle("Save as rule", key=f"save_rule-{n}"):
            # the rule as it would be written and what it matches here, before anything is written
            try:
                path, text, matches = fixing.draft_rule(n, node_key)
            except Exception as exc:  # the rule writer says what it could not generalise
                st.error(md_escape(f"could not make step {n} a rule: {exc}"))
                continue
            shown = ", ".join(matches[:5]) + (", …" if len(matches) > 5 else "")
            st.caption(md_escape(f"{path.name}: matches {len(matches)} node(s) here: {shown}"))
            with st.expander("The rule file", expanded=False):
                st.code(text, language="yaml")
            if st.button("Save the rule", key=f"save_rule_now-{n}", type="primary"):
                try:
                    path, matches = fixing.save_rule(n, node_key)
                    st.success(
                        md_escape(
                            f"saved {path} — it matches {len(matches)} node(s) here; listed on the Rules page"
                        )
                    )
                except Exception as exc:
                    st.error(md_escape(f"could not save step {n} as a rule: {exc}"))
    verified = session.last_verification()  # kept across a reload
    if verified is not None:
        status, line = verified
        (st.success if status == "ok" else st.warning if status == "skipped" else st.error)(
            line, icon=":material/science:"
        )
with actions:
    if st.button(
        "Fix all",
        key="fix_all",
        icon=":material/auto_fix_high:",
        width="stretch",
        help="every rule for the chosen targets until nothing changes, as `onnx-surgery fix` does: each step "
        "verified, one recipe entry each",
    ):
        with st.status("Fixing for " + ", ".join(s.targets) + "…", expanded=True) as box:
            fixing.fix_all(log=lambda line: box.write(md_escape(line)))
            box.update(label="Fix all: done", state="complete", expanded=False)
        st.rerun()
    for line in st.session_state.get("fix_summary") or []:
        st.caption(md_escape(line))
    c = st.columns(2)
    if c[0].button("Undo", key="undo", disabled=not ws.can_undo, icon=":material/undo:", width="stretch"):
        fixing.undo()
        st.rerun()
    if c[1].button("Redo", key="redo", disabled=not ws.can_redo, icon=":material/redo:", width="stretch"):
        fixing.redo()
        st.rerun()
    stem = s.model_name.rsplit(".", 1)[0]
    current, own_file = ws.current, ws.original.own_file
    beside = ", ".join(f"`{f.location}`" for f in ws.original.external)
    c[0].download_button(
        "Download model",
        lambda: model_bytes(current, own_file),  # weights left in the opened file come back inline
        f"{stem}.fixed.onnx",
        key="download_model",
        icon=":material/download:",
        width="stretch",
        mime="application/octet-stream",
        on_click="ignore",
        # a model's external weights are not downloaded: the file names them, as the original does
        help=f"The weights in {beside} are not in this file: it reads them from there, so put it beside them"
        if beside
        else None,
    )
    c[1].download_button(
        "Download recipe",
        lambda: json.dumps(ws.recipe_dict(), indent=2),
        f"{stem}.recipe.json",
        key="download_recipe",
        icon=":material/download:",
        width="stretch",
        mime="application/json",
        on_click="ignore",
    )


@st.fragment(run_every=0.5)
def _rerun_when(ready, line: str = "") -> None:
    """A poll: one rerun of the whole page once `ready()` holds; `line` says meanwhile what the page waits for."""
    if ready():
        st.rerun(scope="app")
    if line:
        st.caption(line)


graph_facts.infer_shapes_soon()  # a big model's shapes, in the background now that the page is drawn
if (
    not graph_facts.fixes_ready()
):  # the inspector, a focus window and the fixes get the shapes when they are in
    with right:
        _rerun_when(
            graph_facts.fixes_ready,
            f"Inferring the shapes of {n_nodes:,} nodes… the inspector and fixes update when they are in.",
        )

if pending and not checks.checks_may_start(drawn, shown):  # the browser has not reported the drawing yet
    with right:
        _rerun_when(lambda: checks.checks_may_start(drawn, shown))
elif pending:  # the next target's verdicts, then a rerun to colour the graph with them
    with checking.container(), st.spinner(f"Checking with {pending[0]}… ({len(pending)} to go)"):
        checks.reports([pending[0]])
    checks.mark_checked(pending[0])
    st.rerun()
