"""The inspector's 'Minimal failing model' on a rejected node: surgery.reduce cuts the model down to the smallest
one the target still refuses with the same code and words, for a bug report, and offers it for download."""

from __future__ import annotations

import session
import split_reduce
import streamlit as st
from verdicts import md_escape


def show(node_key: str, reports) -> None:
    rejecting = [
        r for r in reports if (v := r.by_node().get(node_key)) is not None and v.status.value == "rejected"
    ]
    if not rejecting:
        return
    st.markdown("**Minimal failing model**")
    st.caption(
        "the smallest model the target still refuses with the same code and words, to attach to a bug report"
    )
    for r in rejecting:
        if st.button(
            md_escape(f"Reduce for {r.label}"),
            key=f"reduce-{r.backend}-{node_key}",
            icon=":material/content_cut:",
            width="stretch",
            help=f"cut the model down while {r.label} keeps refusing this node the same way; stops after "
            f"{split_reduce.REDUCE_TIME_LIMIT_S:g} s with the smallest found so far",
        ):
            bar = st.progress(0.0, text=md_escape(f"Reducing with {r.label}: starting"))
            with st.spinner(md_escape(f"Reducing with {r.label}…")):
                split_reduce.make_reduced(node_key, r.backend, progress=_bar(bar))
            bar.empty()
        result = split_reduce.reduced(node_key, r.backend)
        if result is None:
            continue
        if isinstance(result, str):
            st.error(md_escape(result))
            continue
        f = result.failure
        st.caption(
            md_escape(
                f"{result.nodes_before} → {result.nodes_after} node(s) in {result.checks} check(s), "
                f"{result.seconds:.1f} s: {result.label} still refuses {f.where()} ({f.code}, same words). "
                + (
                    result.stopped
                    or ("Minimal: removing any one more node loses it." if result.minimal else "")
                )
            )
        )
        stem = session.state().model_name.rsplit(".", 1)[0]
        st.download_button(
            "Download the minimal model",
            lambda result=result: split_reduce.reduced_bytes(result),
            f"{stem}.{node_key.strip('/').replace('/', '_')}.min.onnx",
            key=f"reduce-dl-{r.backend}-{node_key}",
            icon=":material/download:",
            mime="application/octet-stream",
            on_click="ignore",
        )


def _bar(bar):
    def say(fraction: float, message: str) -> None:
        bar.progress(min(max(float(fraction), 0.0), 1.0), text=md_escape(message[:100]))

    return say
