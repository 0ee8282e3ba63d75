"""Overview: per backend, rejected nodes grouped by reason; partitions; a chart."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/: adapter, sidebar, graph_component


from collections import Counter, defaultdict  # noqa: E402

import adapter  # noqa: E402
import pandas as pd  # noqa: E402
import sidebar  # noqa: E402
import split_view  # noqa: E402
import streamlit as st  # noqa: E402
from verdicts import md_escape, show_report_banner, words_block  # noqa: E402

sidebar.render()

adapter.ensure_state()
ws = adapter.workspace()
reports = adapter.reports()
st.title("Overview")
if not reports:
    st.info("Pick targets in the sidebar.")
rows = []
for r in reports:
    rows.append(
        {
            "backend": r.label,
            "outcome": r.outcome.value,
            "checked to": r.depth.value,
            "rejected": len(r.rejected),
            "unknown": len(r.unknown),
            "nodes": len(r.verdicts),
            "seconds": round(r.seconds, 3),
            "backend calls": r.backend_calls,
        }
    )
if rows:
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="overview_table")
    chart = pd.DataFrame({r.label: Counter(v.op_type for v in r.rejected) for r in reports}).fillna(0)
    if not chart.empty:
        st.markdown("**Rejected nodes by op type**")
        st.bar_chart(chart)
for r in reports:
    st.subheader(r.label)
    show_report_banner(r)
    groups = defaultdict(list)
    for v in r.rejected + r.unknown:
        groups[(v.status.value, v.stage, v.code, v.words, v.words_from, v.explanation)].append(v)
    for (status, stage, code, words, words_from, explanation), vs in groups.items():
        head = "cannot confirm" if status == "unknown" else "rejected"
        with st.expander(
            f"{len(vs)} × {head} at {stage.value} {code}: {md_escape((words or explanation)[:120])}"
        ):
            if words:
                words_block(f"{stage.value} stage says", words, words_from)
            if explanation:
                st.markdown(f"**Why** (our explanation): {md_escape(explanation)}")
            for v in vs:
                if st.button(f"{v.op_type} {v.node}", key=f"ov-{r.backend}-{v.node}"):
                    adapter.select(v.node)
                    st.switch_page("pages/workbench.py")
    if r.verdicts and (r.rejected or any(v.status.value == "unknown" for v in r.verdicts)):
        part = adapter.partition(r)
        m = st.columns(4)
        m[0].metric("engines (supported regions)", part.engines)
        m[1].metric("nodes falling back", part.fallback_nodes)
        m[2].metric("tensors crossing", len(part.crossings))
        nb = part.crossing_bytes
        m[3].metric("bytes crossing", "dynamic" if nb is None else f"{nb:,}")
        st.caption(part.summary())
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "region": k,
                        "runs on": r.label if reg.supported else "fallback",
                        "nodes": len(reg.nodes),
                        "first": reg.nodes[0] if reg.nodes else "",
                        "last": reg.nodes[-1] if reg.nodes else "",
                        "reads": ", ".join(reg.inputs[:4]) + (" …" if len(reg.inputs) > 4 else ""),
                        "hands on": ", ".join(reg.outputs[:4]) + (" …" if len(reg.outputs) > 4 else ""),
                    }
                    for k, reg in enumerate(part.regions)
                ]
            ),
            hide_index=True,
            key=f"regions-{r.backend}",
        )
        split_view.show(r)  # 'Split for deployment': the plan drawn, verified, downloadable
