"""Overview: per backend, rejected nodes grouped by reason; partitions; a chart."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/: adapter, sidebar, graph_component


from collections import Counter, defaultdict  # noqa: E402

import adapter  # noqa: E402
import pandas as pd  # noqa: E402
import sidebar  # noqa: E402
import streamlit as st  # noqa: E402

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
            "rejected": len(r.rejected),
            "nodes": len(r.verdicts),
            "accepted": "yes" if r.accepted else "no" if r.accepted is False else "?",
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
    for m in r.messages:
        st.warning(m)
    groups = defaultdict(list)
    for v in r.rejected:
        groups[(v.code, v.message)].append(v)
    if not groups and r.verdicts and all(v.status.value == "supported" for v in r.verdicts):
        st.success("Every node is supported.")
    for (code, message), vs in groups.items():
        with st.expander(f"{len(vs)} × {code or 'REJECTED'}: {message[:120]}"):
            st.code(message, language=None, wrap_lines=True)
            for v in vs:
                if st.button(f"{v.op_type} {v.node}", key=f"ov-{r.backend}-{v.node}"):
                    adapter.state().selected = v.node
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
