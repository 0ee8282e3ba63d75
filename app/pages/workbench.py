"""Workbench: the graph coloured by verdict, the inspector, the fixes with verification, undo/redo."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/: adapter, sidebar, graph_component


import json  # noqa: E402

import adapter  # noqa: E402
import numpy as np  # noqa: E402
import sidebar  # noqa: E402
import streamlit as st  # noqa: E402
from graph_component import graph  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from surgery.backends.base import Status  # noqa: E402
from surgery.graph import GraphFacts  # noqa: E402
from surgery.view import build_view, search  # noqa: E402

sidebar.render()

adapter.ensure_state()
s = adapter.state()
ws = adapter.workspace()
facts = GraphFacts.of(ws.current)
reports = adapter.reports()

st.title("Workbench")
if not s.targets:
    st.info("Pick one or more targets in the sidebar to see what each backend rejects.")
color_by = st.selectbox("Colour by", [r.backend for r in reports] or ["(none)"], key="color_by")
report = next((r for r in reports if r.backend == color_by), None)
verdicts = report.by_node() if report else {}
rejected = [v.node for v in report.verdicts if v.status is Status.REJECTED] if report else []

top = st.columns([3, 1, 1, 1])
query = top[0].text_input("Search by name or op", key="search", placeholder="e.g. Resize or /up/")
if top[1].button("Next rejected", key="next_rejected", disabled=not rejected):
    i = (rejected.index(s.selected) + 1) % len(rejected) if s.selected in rejected else 0
    s.selected = rejected[i]
hops = top[2].number_input("Focus hops", 1, 20, 3, key="hops")
focus = top[3].toggle("Focus on selection", key="focus", value=len(ws.current.graph.node) > 400)
if query:
    hits = search(facts, query)
    if hits:
        pick = st.selectbox(f"{len(hits)} match(es)", hits, key="search_hit")
        if pick != s.selected and st.button("Select match", key="select_hit"):
            s.selected = pick
            st.rerun()
    else:
        st.caption("no match")

for r in reports:
    if r.rejected:
        st.error(
            f"**{r.label}** rejects {len(r.rejected)} of {len(r.verdicts)} node(s).", icon=":material/block:"
        )
    elif r.accepted:
        st.success(f"**{r.label}** accepts the model.", icon=":material/check_circle:")
    for m in r.messages:
        st.warning(f"**{r.label}**: {m}")

left, right = st.columns([3, 2])
with left:
    view = build_view(
        ws.current, verdicts, facts=facts, focus=s.selected if focus else None, hops=int(hops), scope=s.scope
    )
    legend = " ".join(
        f"<span style='color:{c}'>■</span> {name}"
        for name, c in [(x["status"], x["color"]) for x in view.payload()["legend"]]
    )
    st.markdown(legend, unsafe_allow_html=True)
    if view.note:
        st.caption(view.note)
    result = graph(view.payload(s.selected), key=f"graph-{ws.fingerprint()}")
    clicked = getattr(result, "selected", None)
    if clicked and clicked != s.get("_last_click"):
        s._last_click = clicked
        if clicked.startswith("group:"):
            s.scope = clicked[len("group:") :]
        elif not clicked.startswith(("input:", "output:")):
            s.selected = clicked
        st.rerun()
    if s.scope and st.button("Back to the whole graph", key="unscope"):
        s.scope = None
        st.rerun()

with right:
    key = s.selected
    if not key or key not in facts.index:
        st.subheader("Inspector")
        st.caption("Click a node in the graph (or use Next rejected).")
    else:
        node = facts.node(key)
        st.subheader(f"{node.op_type} `{key}`")
        st.caption(f"domain: {node.domain or 'ai.onnx'}")
        for r in reports:
            v = r.by_node().get(key)
            if v is None:
                continue
            icon = {"supported": ":material/check_circle:", "rejected": ":material/block:"}.get(
                v.status.value, ":material/help:"
            )
            st.markdown(f"{icon} **{r.label}**: {v.status.value}" + (f" — `{v.code}`" if v.code else ""))
            if v.message:
                st.code(v.message, language=None, wrap_lines=True)
            st.caption(f"evidence: {v.evidence.source} — {v.evidence.detail}")
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
            const = " (constant)" if facts.is_constant(x) else ""
            c1, c2 = st.columns([3, 1])
            c1.markdown(f"`{idx}` {x}: {info.dtype_name} {info.shape_str()}{const}")
            if producer is not None and c2.button(producer.op_type, key=f"in-{idx}-{x}"):
                s.selected = facts.keys[facts.producer[x]]
                st.rerun()
            if x in facts.initializers:
                arr = numpy_helper.to_array(facts.initializers[x])
                if arr.size <= 64:
                    c1.caption(f"value: {np.array2string(arr, threshold=64)}")
        st.markdown("**Outputs**")
        for o in node.output:
            info = facts.info(o)
            st.markdown(f"{o}: {info.dtype_name} {info.shape_str()}")
            for j in facts.consumers.get(o, [])[:8]:
                if st.button(f"→ {ws.current.graph.node[j].op_type} {facts.keys[j]}", key=f"out-{o}-{j}"):
                    s.selected = facts.keys[j]
                    st.rerun()

        st.markdown("**Fixes**")
        props = adapter.proposals(key)
        if not props:
            st.caption("No rule matches this node for the chosen targets.")
        for _k, p in enumerate(props):
            with st.container(border=True):
                st.markdown(f"**{p.rule.title}**  \n`{p.rule.id}` · safety: **{p.safety}**")
                st.caption(p.rule.why)
                if p.step is None:
                    st.caption(f"needs {p.needs}")
                else:
                    st.caption(f"step: {p.step.describe()}")
                    if st.toggle("Preview", key=f"preview-{p.rule.id}"):
                        diff = adapter.preview(p)
                        st.markdown(
                            f"removes {len(diff['removed'])} node(s): `{', '.join(diff['removed'][:8])}`  \n"
                            f"adds {len(diff['added'])} node(s): `{', '.join(diff['added'][:8])}`"
                        )
                        for line in diff["verdicts"]:
                            st.caption(line)
                    if st.button("Apply", key=f"apply-{p.rule.id}", type="primary"):
                        adapter.apply_proposal(p)
                        st.rerun()

st.divider()
hist, actions = st.columns([3, 2])
with hist:
    st.markdown("**Recipe**")
    if not ws.steps:
        st.caption("No steps yet. The original model is never changed; every step can be undone.")
    for n, step in enumerate(ws.steps, 1):
        done = n <= ws.cursor
        st.markdown(("" if done else "~~") + f"{n}. {step.describe()}" + ("" if done else "~~ (undone)"))
    applied = s.last_applied
    if applied is not None:
        v = applied.verification
        (st.success if v.status == "ok" else st.warning if v.status == "skipped" else st.error)(
            applied.summary(), icon=":material/science:"
        )
with actions:
    c = st.columns(2)
    if c[0].button("Undo", key="undo", disabled=not ws.can_undo):
        ws.undo()
        s.last_applied = None
        st.rerun()
    if c[1].button("Redo", key="redo", disabled=not ws.can_redo):
        ws.redo()
        st.rerun()
    stem = s.model_name.rsplit(".", 1)[0]
    st.download_button(
        "Download model", ws.current.SerializeToString(), f"{stem}.fixed.onnx", key="download_model"
    )
    st.download_button(
        "Download recipe",
        json.dumps(ws.recipe_dict(), indent=2),
        f"{stem}.recipe.json",
        key="download_recipe",
    )
    if ws.recipe and s.selected and st.button("Save last step as a rule", key="save_rule"):
        from surgery.rulebook.save import rule_from_step

        last = ws.recipe[-1]
        node_key = s.selected if s.selected in GraphFacts.of(ws.model_at(ws.cursor - 1)).index else None
        if node_key is None:
            s.error = "select the node the step was applied to before saving it as a rule"
        else:
            path, matches = rule_from_step(ws.model_at(ws.cursor - 1), last, node_key, adapter.USER_RULES)
            st.success(f"saved {path} — it matches {len(matches)} node(s) here")
