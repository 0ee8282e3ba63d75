"""Overview's 'Split for deployment': the plan surgery.split makes for one target, drawn (parts coloured by
backend, crossing tensors on the edges and listed), its verification numbers, and the parts and plan as a zip."""

from __future__ import annotations

import adapter
import pandas as pd
import streamlit as st
from verdicts import md_escape

from surgery.split import DEFAULT_MIN_NODES, PART_COLORS, to_dot


def show(report) -> None:
    target = report.backend
    cols = st.columns([1.1, 1.5, 2.4], vertical_alignment="bottom")
    min_nodes = cols[0].number_input(
        "Smallest target part",
        1,
        1000,
        DEFAULT_MIN_NODES,
        key=f"split-min-{target}",
        help="a supported region with fewer compute nodes runs on the fallback instead (TF-TRT's minimum segment "
        "size), so the plan does not bounce between backends for every node",
    )
    if cols[1].button(
        "Split for deployment",
        key=f"split-{target}",
        icon=":material/call_split:",
        help="the supported regions as parts this target runs, the rest as onnxruntime parts; every part checked "
        "alone, and the chain run against the original on seeded inputs",
    ):
        with st.spinner(f"Splitting for {target}: cutting, checking every part, running the chain…"):
            adapter.make_split(target, int(min_nodes))
    plan = adapter.split_result(target, int(min_nodes))
    if plan is None:
        return
    if isinstance(plan, str):
        st.error(f"Cannot split: {md_escape(plan)}", icon=":material/call_split:")
        return
    v = plan.verification
    if plan.ok:
        st.success(
            f"Deployable: every {md_escape(target)} part is accepted alone, and the chain reproduces the original.",
            icon=":material/check_circle:",
        )
    else:
        why = []
        if not plan.accepted:
            why.append(f"a {target} part is refused on its own")
        if v is None or not v.ok:
            why.append("the chain does not reproduce the original")
        st.warning(md_escape("Not deployable as is: " + "; ".join(why) + "."), icon=":material/warning:")
    st.caption(md_escape(plan.summary()))
    legend = " &nbsp; ".join(
        f"<span style='color:{color};font-size:1.15em'>■</span> {name}"
        for name, color in (
            (f"{target} (target)", PART_COLORS["target"]),
            ("onnxruntime (fallback)", PART_COLORS["fallback"]),
        )
    )
    st.markdown(legend, unsafe_allow_html=True)
    st.graphviz_chart(to_dot(plan), width="stretch")
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "part": p.index,
                    "runs on": p.backend,
                    "role": p.role,
                    "nodes": len(p.nodes),
                    "alone": p.check.get("outcome", ""),
                    "file": p.file,
                    "reads": ", ".join(p.inputs[:4]) + (" …" if len(p.inputs) > 4 else ""),
                    "hands on": ", ".join(p.outputs[:4]) + (" …" if len(p.outputs) > 4 else ""),
                }
                for p in plan.parts
            ]
        ),
        hide_index=True,
        key=f"split-parts-{target}",
    )
    if plan.crossings:
        st.markdown(f"**Crossing tensors** ({len(plan.crossings)})")
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "tensor": c.name,
                        "dtype": c.dtype,
                        "shape": "?" if c.shape is None else str(c.shape),
                        "from part": c.source,
                        "to parts": ", ".join(map(str, c.targets)),
                        "bytes": c.bytes,
                        "bytes in the run": c.measured_bytes,
                    }
                    for c in plan.crossings
                ]
            ),
            hide_index=True,
            key=f"split-crossings-{target}",
        )
    if v is not None:
        st.markdown("**Verification** (the chain against the original, same seeded inputs)")
        st.caption(md_escape(v.summary()))
        for note in v.notes + plan.notes:
            st.caption(md_escape(note))
        if v.outputs:
            st.dataframe(
                pd.DataFrame(
                    [
                        {
                            "output": o["name"],
                            "max abs": o["max_abs"],
                            "mean rel": o["mean_rel"],
                            "ok": o["ok"],
                        }
                        for o in v.outputs
                    ]
                ),
                hide_index=True,
                key=f"split-verify-{target}",
            )
    stem = adapter.state().model_name.rsplit(".", 1)[0]
    st.download_button(
        "Download parts and plan (zip)",
        lambda: adapter.split_zip(plan),
        f"{stem}.split-{target.replace('@', '-')}.zip",
        key=f"split-zip-{target}",
        icon=":material/download:",
        mime="application/zip",
        on_click="ignore",
    )
