"""Lessons: each sample's failure walked through — open it, see the red node in the backend's words, fix it."""

import adapter
import streamlit as st

from surgery.samples import lessons

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
        st.code(lesson.message, language=None)
        st.markdown(f"**Why.** {lesson.why}")
        st.markdown(f"**Fix.** {lesson.fix}" + (f" Rule: `{lesson.rule}`." if lesson.rule else ""))
        if st.button("Open this lesson", key=f"lesson-{lesson.name}"):
            adapter.open_sample(lesson.name)
            s.targets = [lesson.backend] + (["onnxruntime"] if lesson.backend != "onnxruntime" else [])
            s.selected = lesson.node
            st.switch_page("pages/workbench.py")
