"""ONNX Surgery — the Streamlit app. `onnx-surgery app [MODEL]` or `streamlit run app/main.py`.

Pages lay out widgets; every decision is a library call. The session's state is app/session.py; opening a model
(opening.py), its facts in the background (graph_facts.py), checks (checks.py), fixes (fixing.py), saved
sessions (session_store.py) and split/reduce (split_reduce.py) keep their caches beside it."""

import sys
from pathlib import Path

import streamlit as st

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # app/: the modules the pages import

import opening  # noqa: E402

st.set_page_config(page_title="ONNX Surgery", layout="wide")  # no page_icon: material icons load from a CDN
opening.ensure_state()  # a new session's model, before any page asks for it
pages = [
    st.Page(HERE / "pages" / "workbench.py", title="Workbench", icon=":material/healing:", default=True),
    st.Page(HERE / "pages" / "overview.py", title="Overview", icon=":material/bar_chart:"),
    st.Page(HERE / "pages" / "lessons.py", title="Lessons", icon=":material/school:"),
    st.Page(HERE / "pages" / "build.py", title="Test build", icon=":material/build:"),
    st.Page(HERE / "pages" / "precision.py", title="Precision", icon=":material/tune:"),
    st.Page(HERE / "pages" / "rules.py", title="Rules", icon=":material/rule:"),
    st.Page(HERE / "pages" / "survey.py", title="Survey", icon=":material/grid_on:"),
    st.Page(HERE / "pages" / "backends.py", title="Backends", icon=":material/power:"),
]
st.navigation(pages).run()  # each page renders the shared sidebar itself
