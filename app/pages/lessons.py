"""Lessons: each sample's failure walked through — open it, see the red node in the backend's words, fix it."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/: adapter, sidebar, graph_component


import adapter  # noqa: E402
import sidebar  # noqa: E402
import streamlit as st  # noqa: E402

from surgery.samples import lessons  # noqa: E402

sidebar.render()

adapter.ensure_state()
s = adapter.state()
st.title("Lessons")
st.caption(
    "One small model per failure class. Open one: the failing node is selected in the Workbench, with "
    "the backend's words and the rule that fixes it."
)
for lesson in lessons():
    with st.container(border=True):
        st.markdown(f"#### {lesson.title}")
        st.markdown(f"**Fails in** `{lesson.backend}`" + (f" at node `{lesson.node}`" if lesson.node else ""))
        st.code(lesson.message, language=None, wrap_lines=True)
        st.markdown(f"**Why.** {lesson.why}")
        st.markdown(f"**Fix.** {lesson.fix}" + (f" Rule: `{lesson.rule}`." if lesson.rule else ""))
        if st.button(
            "Open this lesson", key=f"lesson-{lesson.name}", on_click=adapter.open_lesson, args=(lesson.name,)
        ):
            st.switch_page("pages/workbench.py")
