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
# The pages live in views/, not pages/: Streamlit reads a pages/ folder beside the main script as a multipage app
# of its own, and a fresh server whose first request is a page's address (a bookmark, a reload after `onnx-surgery
# app` restarted) served it that way, its sidebar listing the files (main, backends, build, ...), not these pages.
pages = [
    st.Page(HERE / "views" / "workbench.py", title="Workbench", icon=":material/healing:", default=True),
    st.Page(HERE / "views" / "overview.py", title="Overview", icon=":material/bar_chart:"),
    st.Page(HERE / "views" / "lessons.py", title="Lessons", icon=":material/school:"),
    st.Page(HERE / "views" / "build.py", title="Test build", icon=":material/build:"),
    st.Page(HERE / "views" / "precision.py", title="Precision", icon=":material/tune:"),
    st.Page(HERE / "views" / "rules.py", title="Rules", icon=":material/rule:"),
    st.Page(HERE / "views" / "survey.py", title="Survey", icon=":material/grid_on:"),
    st.Page(HERE / "views" / "backends.py", title="Backends", icon=":material/power:"),
]
st.navigation(pages).run()  # each page renders the shared sidebar itself
