"""Overview: per backend, rejected nodes grouped by reason; partitions; a chart."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/: the modules the pages import


from collections import Counter  # noqa: E402

import checks  # noqa: E402
import opening  # noqa: E402
import pandas as pd  # noqa: E402
import session  # noqa: E402
import sidebar  # noqa: E402
import split_view  # noqa: E402
import streamlit as st  # noqa: E402
from verdicts import md_escape, show_report_banner, words_block  # noqa: E402

from surgery.text import first_line
from surgery.verdict import Status, said_line, speaker  # noqa: E402

sidebar.render()

opening.ensure_state()
ws = session.workspace()
reports = checks.reports()
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
    counts = pd.DataFrame(
        [
            {"op type": op, "target": r.label, "rejected nodes": n}
            for r in reports
            for op, n in Counter(v.op_type for v in r.rejected).items()
        ]
    )
    if not counts.empty:
        import altair as alt

        st.markdown("**Rejected nodes by op type**")
        # bars across, a bar per target: every op type's name is read whole (st.bar_chart cuts axis labels)
        bars = (
            alt.Chart(counts)
            .mark_bar()
            .encode(
                y=alt.Y("op type:N", sort="-x", title=None, axis=alt.Axis(labelLimit=0)),
                yOffset="target:N",
                x=alt.X("rejected nodes:Q", axis=alt.Axis(tickMinStep=1)),
                color=alt.Color("target:N", title=None, legend=alt.Legend(orient="bottom")),
                tooltip=["op type", "target", "rejected nodes"],
            )
            .properties(height=alt.Step(16))  # each bar 16 px high, the chart as tall as its bars
        )
        st.altair_chart(bars, width="stretch")
for r in reports:
    st.subheader(r.label)
    show_report_banner(r, reasons=False)  # the outcome; its reasons are the groups below, each with its nodes
    for g in r.groups():  # what was said, with the nodes it was said of
        head = "cannot confirm" if g.status is Status.UNKNOWN else "rejected"
        said = first_line(said_line(speaker(r.backend, g.stage), g.words, g.explanation, g.words_from), 140)
        with st.expander(f"{len(g.verdicts)} × {head} at {g.stage.value} {g.code}: {md_escape(said)}"):
            if g.words:
                words_block(speaker(r.backend, g.stage), g.words, g.words_from)
            if g.explanation:
                st.markdown(f"**Why** (our explanation): {md_escape(g.explanation)}")
            for v in g.verdicts:
                if st.button(md_escape(f"{v.op_type} {v.node}"), key=f"ov-{r.backend}-{v.node}"):
                    session.select(v.node)
                    st.switch_page("views/workbench.py")
    if r.verdicts and (r.rejected or any(v.status.value == "unknown" for v in r.verdicts)):
        part = checks.partition(r)
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
