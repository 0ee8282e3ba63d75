"""Lessons: each sample's failure walked through — open the broken model, the red node in the backend's words,
apply the fix, see it turn supported, read the numbers."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/: the modules the pages import


import fixing  # noqa: E402
import opening  # noqa: E402
import session  # noqa: E402
import sidebar  # noqa: E402
import streamlit as st  # noqa: E402
from verdicts import md_escape, show_message, show_report_banner, show_verdict  # noqa: E402

from surgery.samples import lessons  # noqa: E402
from surgery.verdict import Verdict  # noqa: E402

sidebar.render()

st.title("Lessons")
st.caption(
    "One small model per failure class. **Walk through** runs the lesson here, step by step; **Open in the "
    "Workbench** opens the broken model with its failing node selected, to fix it yourself."
)


def show_walkthrough(name: str) -> None:
    with st.spinner("Checking, fixing, verifying…"):
        w = fixing.walkthrough(name)
    before, verdict = w.before, w.verdict
    st.markdown(f"**1. Open the broken model** `{name}.onnx` and check it with **{before.label}**.")
    if verdict is not None:
        st.markdown(f"**2. The red node** `{verdict.node}` ({verdict.op_type}):")
        show_verdict(verdict, before.label, before.backend)
    else:
        st.markdown(f"**2. What {md_escape(before.label)} says** ({len(before.rejected)} node(s) rejected):")
        show_report_banner(before)
    p = w.proposal
    if p is None:
        st.warning(md_escape(w.error or "no proposal"))
        return
    asked = w.values
    given = (
        f" — with {', '.join(f'{k} = {v}' for k, v in asked.items())} (the rule asks for it)" if asked else ""
    )
    st.markdown(
        f"**3. Apply the fix** `{p.rule.id}` (safety: **{p.safety}**): {md_escape(p.description)}{md_escape(given)}"
    )
    if w.applied is None:
        st.info(f"The fix refuses: {md_escape(w.error)}", icon=":material/front_hand:")
        return
    if w.applied.cut:  # the lesson's fix is a cut: taken here on purpose, and said to be one
        st.warning(
            f"A **cut**, not a repair: {md_escape('; '.join(w.applied.cut))}. The host must now run "
            f"{md_escape(', '.join(w.applied.host) or 'what the step removed')}; `fix` takes such a step only with "
            "`--allow-cut`, and still exits 1.",
            icon=":material/content_cut:",
        )
    after = w.after
    if after is not None:
        now = after.by_node().get(p.node)
        if now is not None:
            st.markdown(
                f"**4. It turns {now.status.value}**: `{p.node}` — {len(before.rejected)} → "
                f"{len(after.rejected)} rejected node(s) in {after.label}."
            )
        else:
            st.markdown(
                f"**4. The node is replaced**: {len(before.rejected)} → {len(after.rejected)} rejected "
                f"node(s) in {after.label}."
            )
        (st.success if not after.rejected else st.warning)(
            f"{after.label} "
            + ("accepts the fixed model." if not after.rejected else "still rejects some nodes."),
            icon=":material/check_circle:" if not after.rejected else ":material/block:",
        )
    v = w.applied.verification
    if v is not None:
        st.markdown(
            "**5. The numbers** (the fixed model against the broken one, same seeded inputs, onnxruntime):"
        )
        (st.success if v.ok else st.info if v.status == "skipped" else st.error)(
            v.summary(), icon=":material/science:"
        )


for lesson in lessons():
    with st.container(border=True):
        st.markdown(f"#### {lesson.title}")
        failure = fixing.lesson_failure(lesson.name)
        if failure is None:  # a healthy model: nothing fails, so nothing to name
            st.markdown(f"**Accepted by** `{lesson.backend}`")
        else:
            st.markdown(
                f"**Fails in** `{lesson.backend}`" + (f" at node `{lesson.node}`" if lesson.node else "")
            )
        if isinstance(failure, Verdict):
            show_verdict(failure, lesson.backend, lesson.backend)
        elif failure is not None:
            show_message(failure, lesson.backend)
        st.markdown(f"**Why.** {md_escape(lesson.why)}")
        st.markdown(f"**Fix.** {md_escape(lesson.fix)}" + (f" Rule: `{lesson.rule}`." if lesson.rule else ""))
        if lesson.rule:
            b = st.columns([1, 1, 3])
            b[0].button("Walk through", key=f"walk-{lesson.name}", on_click=session.walk, args=(lesson.name,))
            if b[1].button(
                "Open in the Workbench",
                key=f"lesson-{lesson.name}",
                on_click=opening.open_lesson,
                args=(lesson.name,),
            ):
                st.switch_page("views/workbench.py")
            if session.walking() == lesson.name:
                show_walkthrough(lesson.name)
