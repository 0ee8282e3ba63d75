"""Backends: which backends run on this machine, and why the others don't."""

import pandas as pd
import streamlit as st

from surgery.backends import list_backends

st.title("Backends")
rows = [
    {
        "target": bid,
        "backend": label,
        "version": version,
        "available": "yes" if a.ok else "no",
        "details": a.reason,
    }
    for bid, label, version, a in list_backends()
]
st.dataframe(pd.DataFrame(rows), hide_index=True, key="backends_table")
st.caption(
    "tensorrt-static@VERSION predicts the verdicts of that TensorRT version from its cited support data "
    "and runs anywhere; the live `tensorrt` target uses full TensorRT where it is installed with a GPU, "
    "else TensorRT-RTX."
)
