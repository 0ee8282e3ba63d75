"""Overview's 'Split for deployment': the plan surgery.split makes for one target, drawn (parts coloured by
backend, crossing tensors on the edges and listed), its verification numbers, and the parts and plan as a zip."""

from __future__ import annotations

import re

import pandas as pd
import session
import split_reduce
import streamlit as st
from verdicts import md_escape

from surgery.split import DEFAULT_MIN_NODES, PART_COLORS, to_dot


def _bar(bar):
    """A progress callback that moves `bar` (st.progress) with the library's own words."""

    def say(fraction: float, message: str) -> None:
        bar.progress(min(max(float(fraction), 0.0), 1.0), text=md_escape(message[:100]))

    return say


def _why_not(plan) -> list[str]:
    """Why a plan is not deployable as is, one short clause per reason (the full words are in the table and the
    verification section below)."""
    why = []
    for p in plan.parts:
        if p.check.get("outcome") in (None, "", "accepts"):
            continue
        first = (p.check.get("reasons") or [""])[0]
        node = first.split("': ", 1)[0] + "'" if "': " in first else ""
        why.append(f"part {p.index} ({p.backend}) is refused on its own" + (f" ({node})" if node else ""))
    v = plan.verification
    if v is None:
        why.append("the chain was not run against the original")
    elif v.status == "differs":
        why.append("the chain does not reproduce the original")
    elif v.status == "failed":
        why.append("a part did not run in the chain")
    elif v.status != "reproduces":
        why.append(f"the chain is {v.status}")
    return why


def show(report) -> None:
    target = report.backend
    st.markdown("**Split for deployment**")
    st.caption(
        md_escape(
            f"cut the model into parts: the regions {report.label} supports run on it, the rest on onnxruntime; "
            "every part is checked alone and the chain is run against the original"
        )
    )
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
        bar = st.progress(0.0, text=md_escape(f"Splitting for {report.label}: starting"))
        with st.spinner(
            md_escape(f"Splitting for {report.label}: cutting, checking every part, running the chain…")
        ):
            split_reduce.make_split(target, int(min_nodes), progress=_bar(bar))
        bar.empty()
    plan = split_reduce.split_result(target, int(min_nodes))
    if plan is None:
        return
    if isinstance(plan, str):  # the library names its --min-nodes option; here it is the number box above
        text = re.sub(
            r"--min-nodes (\d+)\. Note: lower --min-nodes", r"\1 (Smallest target part); lower it", plan
        )
        text = text.replace("--min-nodes", "Smallest target part")
        st.error(f"No plan: {md_escape(text)}", icon=":material/call_split:")
        return
    v = plan.verification
    label = plan.target_label or target
    if plan.ok:
        st.success(
            md_escape(
                f"Deployable: every {label} part is accepted alone, and the chain reproduces the original."
            ),
            icon=":material/check_circle:",
        )
    else:
        st.warning(
            md_escape("Not deployable as is: " + "; ".join(_why_not(plan)) + "."), icon=":material/warning:"
        )
    st.caption(md_escape(plan.summary()))
    legend = " &nbsp; ".join(
        f"<span style='color:{color};font-size:1.4em;vertical-align:-0.1em'>■</span> {md_escape(name)}"
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
        icon = {"reproduces": ":material/check_circle:", "differs": ":material/error:"}.get(
            v.status, ":material/help:"
        )
        st.markdown(f"{icon} {md_escape(v.summary())}")
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
    stem = session.state().model_name.rsplit(".", 1)[0]
    st.download_button(
        "Download parts and plan (zip)",
        lambda: split_reduce.split_zip(plan),
        f"{stem}.split-{target.replace('@', '-')}.zip",
        key=f"split-zip-{target}",
        icon=":material/download:",
        mime="application/zip",
        on_click="ignore",
    )
