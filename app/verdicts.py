"""How every page shows a verdict: the backend's words quoted and verbatim (a code block, labelled with who said
it and where it was recorded), our explanation as plain text beside it, the stage, and one answer per report
(accepts / rejects / cannot confirm). Text from models, backends and rules never goes through Markdown unescaped."""

from __future__ import annotations

import re

import streamlit as st

from surgery.text import telling_line
from surgery.verdict import Message, Outcome, Report, Status, Verdict, said_line, speaker, where_said

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|$<>~])")


def md_escape(text: str) -> str:
    """`text` safe inside st.markdown: no maths ($…$), no emphasis, no HTML, no links."""
    return _MD_SPECIAL.sub(r"\\\1", str(text))


def inline_code(text: str) -> str:
    """`text` as inline code: Markdown escapes mean nothing inside backticks, so only backticks are removed."""
    return "`" + str(text).replace("`", "'") + "`"


def words_block(who: str, words: str, words_from: str) -> None:
    """The backend's own words, verbatim, labelled as theirs."""
    where = f" — {where_said(words_from)}" if where_said(words_from) else ""
    st.caption(f"{who} (verbatim){md_escape(where)}:")
    st.code(words, language=None, wrap_lines=True)


def show_verdict(v: Verdict, label: str, backend: str = "", expanded: bool = True) -> None:
    """A node's verdict from one report (`backend`: its id, which says whose words they are): its line, then
    what was said (verdict_details)."""
    verdict_line(v, label)
    verdict_details(v, label, backend, expanded)


def verdict_line(v: Verdict, label: str) -> None:
    """One line: who, the status, the stage and the code."""
    icon = {"supported": ":material/check_circle:", "rejected": ":material/block:"}.get(
        v.status.value, ":material/help:"
    )
    status = "cannot confirm" if v.status.value == "unknown" else v.status.value
    code = f" — {inline_code(v.code)}" if v.code else ""
    stage = f" at {v.stage.value}" if v.status.value != "supported" else ""
    st.markdown(f"{icon} **{md_escape(label)}**: {status}{stage}{code}")


def verdict_details(v: Verdict, label: str, backend: str = "", expanded: bool = True) -> None:
    """The backend's words verbatim, our explanation and the evidence, folded under who said it and the words'
    telling line unless `expanded`."""
    if not (v.words or v.explanation):
        st.caption(
            f"{md_escape(label)} — evidence: {md_escape(v.evidence.source)} — {md_escape(v.evidence.detail)}"
        )
        return
    said = telling_line(v.words) if v.words else v.explanation
    head = f"{label} — {speaker(backend, v.stage)}: {said}" if v.words else f"{label} — why: {said}"
    with st.expander(md_escape(head if len(head) <= 110 else head[:107] + "…"), expanded=expanded):
        if v.words:
            words_block(speaker(backend, v.stage), v.words, v.words_from)
        if v.explanation:
            st.markdown(f"**Why** (our explanation): {md_escape(v.explanation)}")
        st.caption(f"evidence: {md_escape(v.evidence.source)} — {md_escape(v.evidence.detail)}")


def show_message(m: Message, backend: str = "") -> None:
    """A model-level message: the backend's words verbatim, our explanation apart."""
    if m.words:
        words_block(speaker(backend, m.stage), m.words, m.words_from)
    if m.explanation:
        st.caption(f"{m.level} at {m.stage.value}: {md_escape(m.explanation)}")


def show_report_line(r: Report) -> None:
    """The report's answer in one coloured line (while the inspector shows a node: the node's verdicts follow);
    a refusal of the whole model says its first words."""
    outcome = r.outcome
    label = md_escape(r.label)
    if outcome is Outcome.ACCEPTS:
        line = f":green[:material/check_circle: **{label}** accepts the model]"
    elif outcome is Outcome.REJECTS:
        n = len(r.rejected)
        what = f"{n} of {len(r.verdicts)} node(s)" if n else "the model"
        line = f":red[:material/block: **{label}** rejects {what}]"
        if not n and r.refusals:
            line += f" — {md_escape(telling_line(r.refusals[0].words or r.refusals[0].explanation, 120))}"
    elif outcome is Outcome.CANNOT_CONFIRM:
        line = f":orange[:material/help: **{label}** cannot confirm {len(r.unknown)} node(s)]"
    else:
        line = f":gray[:material/power_off: **{label}** is not available here]"
    st.markdown(line)


def show_report_banner(r: Report, reasons: bool = True) -> None:
    """One line per report, the same answer the CLI gives; the reasons it is not 'accepts' (unless the page lists
    them itself: `reasons=False`, the Overview) folded beneath it, so that four targets take four lines."""
    outcome = r.outcome
    label = md_escape(r.label)
    depth = f" (checked to {r.depth.value})"
    if outcome is Outcome.ACCEPTS:
        st.success(f"**{label}** accepts the model{depth}.", icon=":material/check_circle:")
    elif outcome is Outcome.REJECTS:
        n = len(r.rejected)
        what = f"{n} of {len(r.verdicts)} node(s)" if n else "the model"
        st.error(f"**{label}** rejects {what}{depth}.", icon=":material/block:")
    elif outcome is Outcome.CANNOT_CONFIRM:
        st.warning(
            f"**{label}** cannot confirm the model{depth}: {len(r.unknown)} node(s) without a verdict.",
            icon=":material/help:",
        )
    else:
        st.info(f"**{label}** is not available here.", icon=":material/power_off:")
    # what was said, a line per group of nodes it was said of: the backend's words quoted, our explanation after
    # "why:" (a parser's bare words, "false", say little alone); rejections first, else what cannot be confirmed
    groups = [] if outcome is Outcome.ACCEPTS or not reasons else r.groups()
    shown = [g for g in groups if g.status is Status.REJECTED] or groups
    messages = [m for m in r.messages if m.level != "info" or outcome is Outcome.UNAVAILABLE]
    if outcome is Outcome.UNAVAILABLE:  # why it is not available is the whole answer: not folded
        for m in messages:
            show_message(m, r.backend)
        return
    if not shown and not messages:
        return
    parts = [f"{len(shown)} reason(s)"] * bool(shown) + [f"{len(messages)} message(s)"] * bool(messages)
    with st.expander(f"Why: {', '.join(parts)}", expanded=False):
        for g in shown[:3]:
            st.caption(
                md_escape(
                    f"{g.nodes()} — "
                    f"{said_line(speaker(r.backend, g.stage), g.words, g.explanation, g.words_from)}"
                )
            )
        if len(shown) > 3:
            st.caption(f"… and {len(shown) - 3} more (the inspector has each node's verdict)")
        for m in messages:
            show_message(m, r.backend)
