"""ONNX Surgery — the Streamlit app. `onnx-surgery app [MODEL]` or `streamlit run app/main.py`.

Pages lay out widgets; every decision is a library call; state and caching live in app/adapter.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # so pages can `import adapter`

import sidebar  # noqa: E402
import streamlit as st  # noqa: E402

st.set_page_config(page_title="ONNX Surgery", page_icon=":material/healing:", layout="wide")
HERE = Path(__file__).resolve().parent
pages = [
    st.Page(HERE / "pages" / "workbench.py", title="Workbench", icon=":material/healing:", default=True),
    st.Page(HERE / "pages" / "overview.py", title="Overview", icon=":material/bar_chart:"),
    st.Page(HERE / "pages" / "lessons.py", title="Lessons", icon=":material/school:"),
    st.Page(HERE / "pages" / "rules.py", title="Rules", icon=":material/rule:"),
    st.Page(HERE / "pages" / "backends.py", title="Backends", icon=":material/power:"),
]
nav = st.navigation(pages)
sidebar.render()
nav.run()
