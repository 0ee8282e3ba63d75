"""Backends: which backends run on this machine, and why the others don't."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/: the modules the pages import


import checks  # noqa: E402
import pandas as pd  # noqa: E402
import sidebar  # noqa: E402
import streamlit as st  # noqa: E402

sidebar.render()

st.title("Backends")
rows = [
    {
        "target": bid,
        "backend": label,
        "version": version,
        "available": "yes" if a.ok else "no",
        "details": a.reason,
    }
    for bid, label, version, a in checks.backends_here()
]
st.dataframe(pd.DataFrame(rows), hide_index=True, key="backends_table")
st.caption(
    "tensorrt-static@VERSION predicts the verdicts of that TensorRT version from its cited support data "
    "and runs anywhere; the live `tensorrt` target uses full TensorRT where it is installed with a GPU, "
    "else TensorRT-RTX."
)
