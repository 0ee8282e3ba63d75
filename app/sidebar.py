"""The sidebar shared by every page: which model, which targets."""

import html
import re

import checks
import opening
import session
import session_store
import streamlit as st
from verdicts import md_escape

from surgery.samples import SAMPLES, lessons
from surgery.text import size_text

STYLE = """<style>
[data-testid="stMainBlockContainer"] { padding-top: 2.2rem; }
.wb-model { font-size: 0.875rem; color: rgba(49, 51, 63, 0.6); margin-bottom: 1rem; }
[data-testid="stFileUploaderDropzoneInstructions"] { display: none; }
</style>"""
_BREAKS = re.compile(r"(?<=[_.\-])")


def breakable(name: str) -> str:
    """`name` as HTML that wraps after '_', '.' and '-' (a long file name breaks between its words, not
    inside one); everything else escaped, '$' included (never the start of Markdown maths)."""
    return "<wbr>".join(html.escape(part).replace("$", "&#36;") for part in _BREAKS.split(name))


def _open_upload() -> None:
    """The uploader's callback: a chosen file opens at once (a bad one leaves the open model and says why)."""
    up = session.state().get("upload")
    if up is not None:
        opening.open_bytes(up.getvalue(), up.name)


def render() -> None:
    opening.ensure_state()
    s = session.state()
    st.markdown(STYLE, unsafe_allow_html=True)
    with st.sidebar:
        st.markdown("### ONNX Surgery")
        st.markdown(
            f"<div class='wb-model'>Model: <b>{breakable(s.model_name)}</b></div>", unsafe_allow_html=True
        )
        sample = st.selectbox("Sample model", ["—", *SAMPLES], key="sample_pick")
        if sample != "—" and st.button("Open sample", key="open_sample"):
            opening.open_sample(sample)
            st.rerun()
        st.file_uploader(
            "Upload an .onnx file",
            type=["onnx"],
            key="upload",
            on_change=_open_upload,
            help="the model opens as soon as the file is chosen",
        )
        # Streamlit's own line says its limit in whole decimal MB; this one is the limit the app holds
        limit = session.upload_limit()
        st.caption(f"Limit {size_text(limit)} ({limit:,} bytes) per .onnx file")
        if session.models_dir() is not None:
            path = st.text_input(f"Path under {session.models_dir()}", key="server_path")
            if path and st.button("Open path", key="open_path") and opening.open_path(path):
                st.rerun()
        options = checks.target_options()
        checks.keep_targets(options)  # the widget below is bound to this state
        st.multiselect("Targets", options, key="targets", on_change=session_store.targets_changed)
        st.selectbox(
            "Check to",
            list(checks.DEPTHS),
            key="check_depth",
            help="parse: the backend's parser / importer; build: also build what parsed (as Test build does); "
            "by default TensorRT checks to parse, onnxruntime, OpenVINO and TVM to build",
        )
        if checks.check_pending() and s.targets:
            n = len(session.workspace().current.graph.node)
            st.info(f"{n:,} nodes: the graph is drawn first; checking them takes a while.")
            st.button("Check with the targets", key="check_now", on_click=checks.allow_check, type="primary")
        if s.error:
            st.error(md_escape(s.error))  # it names the file, as the user named it
        if s.get("notice"):  # not an error: what happened to this tab's work (another tab saved the session)
            st.warning(md_escape(s.notice))
        with st.expander("Lessons", expanded=s.model_name == "healthy_cnn.onnx"):
            for lesson in lessons():
                if lesson.rule:
                    st.button(
                        lesson.title,
                        key=f"side-lesson-{lesson.name}",
                        on_click=opening.open_lesson,
                        args=(lesson.name,),
                    )
        _recent_sessions()
    if changed := opening.changed_on_disk():  # its weights are read from the file: no page goes on with them
        st.error(md_escape(changed))
        st.button(
            "Reopen it as it is now", key="reopen_changed", on_click=opening.reopen_changed, type="primary"
        )
        st.stop()  # the sidebar stays: another model can be opened instead


def _recent_sessions() -> None:
    """Work saved in earlier sessions (this server's state folder), to reopen where it was left."""
    found, problems = session_store.recent_sessions()
    if not found and not problems:
        return
    with st.expander("Recent sessions"):
        for info in found:
            st.button(
                md_escape(info.describe()),
                key=f"session-{info.id}",
                on_click=session_store.reopen_session,
                args=(info.id,),
                help="reopen this model with its steps, replayed from the original",
            )
        for line in problems[:3]:
            st.caption(md_escape(line))
