"""Rules: the built-in rules and the user's saved ones; why a rule does or does not match the selected node."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/: the modules the pages import


import fixing  # noqa: E402
import opening  # noqa: E402
import session  # noqa: E402
import sidebar  # noqa: E402
import streamlit as st  # noqa: E402
from verdicts import inline_code, md_escape  # noqa: E402

from surgery.rulebook import explain  # noqa: E402

sidebar.render()

opening.ensure_state()
s = session.state()
st.title("Rules")
rules = fixing.all_rules()
mine_dir = session.user_rules_dir()
mine_count = sum(str(mine_dir) in r.path for r in rules)
st.caption(f"{len(rules)} rules: built-in (rules/) and {mine_count} of yours ({mine_dir}), marked ⭐.")
for rule in rules:
    mine = str(mine_dir) in rule.path
    # a rule's text is the file's text (a user's rule file may hold '$stride' or '<b>'): never Markdown or HTML
    with st.expander(("⭐ " if mine else "") + md_escape(f"{rule.id} — {rule.title} [{rule.safety}]")):
        st.markdown(f"**What it does.** {md_escape(rule.what)}")
        st.markdown(f"**Why.** {md_escape(rule.why)}")
        st.markdown(
            f"**Fix.** {inline_code(rule.primitive)} {inline_code(rule.params) if rule.params else ''}"
        )
        if rule.safety_note:
            st.markdown(f"**Safety.** {md_escape(rule.safety_note)}")
        if s.selected:
            st.markdown(f"**On the selected node {inline_code(s.selected)}:**")
            for line in explain(session.workspace().current, rule, s.selected):
                st.text(line)
