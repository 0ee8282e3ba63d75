"""The inspector's 'Minimal failing model' on a rejected node: surgery.reduce cuts the model down to the smallest
one the target still refuses with the same code and words, for a bug report, and offers it for download."""

from __future__ import annotations

import adapter
import streamlit as st
from verdicts import md_escape


def show(node_key: str, reports) -> None:
    for r in reports:
        v = r.by_node().get(node_key)
        if v is None or v.status.value != "rejected":
            continue
        if st.button(
            f"Minimal failing model ({r.label})",
            key=f"reduce-{r.backend}-{node_key}",
            icon=":material/content_cut:",
            help="the smallest model this target still refuses with the same code and words (to attach to a bug "
            f"report); stops after {adapter.REDUCE_TIME_LIMIT_S:g} s with the smallest found so far",
        ):
            with st.spinner(f"Reducing with {r.backend}…"):
                adapter.make_reduced(node_key, r.backend)
        result = adapter.reduced(node_key, r.backend)
        if result is None:
            continue
        if isinstance(result, str):
            st.error(md_escape(result))
            continue
        st.caption(
            md_escape(
                f"{result.nodes_before} → {result.nodes_after} node(s), {result.checks} check(s): the "
                f"refusal kept ({result.failure.code}). "
                + (
                    result.stopped
                    or ("Minimal: removing any one more node loses it." if result.minimal else "")
                )
            )
        )
        stem = adapter.state().model_name.rsplit(".", 1)[0]
        st.download_button(
            "Download the minimal model",
            lambda result=result: adapter.reduced_bytes(result),
            f"{stem}.{node_key.strip('/').replace('/', '_')}.min.onnx",
            key=f"reduce-dl-{r.backend}-{node_key}",
            icon=":material/download:",
            mime="application/octet-stream",
            on_click="ignore",
        )
