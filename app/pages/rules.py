"""Rules: the built-in rules and the user's saved ones; why a rule does or does not match the selected node."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/: adapter, sidebar, graph_component


import adapter  # noqa: E402
import sidebar  # noqa: E402
import streamlit as st  # noqa: E402

from surgery.rulebook import explain  # noqa: E402

sidebar.render()

adapter.ensure_state()
s = adapter.state()
st.title("Rules")
rules = adapter.all_rules()
mine_dir = adapter.user_rules_dir()
mine_count = sum(str(mine_dir) in r.path for r in rules)
st.caption(f"{len(rules)} rules: built-in (rules/) and {mine_count} of yours ({mine_dir}), marked ⭐.")
for rule in rules:
    mine = str(mine_dir) in rule.path
    with st.expander(f"{'⭐ ' if mine else ''}{rule.id} — {rule.title} [{rule.safety}]"):
        st.markdown(f"**What it does.** {rule.what}")
        st.markdown(f"**Why.** {rule.why}")
        st.markdown(f"**Fix.** `{rule.primitive}` {rule.params or ''}")
        if rule.safety_note:
            st.markdown(f"**Safety.** {rule.safety_note}")
        if s.selected:
            st.markdown(f"**On the selected node `{s.selected}`:**")
            for line in explain(adapter.workspace().current, rule, s.selected):
                st.text(line)
