"""The rule engine: rule files (data) → matches → proposals → verified workspace steps."""

from surgery.rulebook.engine import Applied, NeedsValue, Proposal, apply, explain, propose, run_rules
from surgery.rulebook.loader import BUILTIN_DIR, load_rule, load_rule_text, load_rules
from surgery.rulebook.schema import Rule, RuleError

__all__ = [
    "BUILTIN_DIR",
    "Applied",
    "NeedsValue",
    "Proposal",
    "Rule",
    "RuleError",
    "apply",
    "explain",
    "load_rule",
    "load_rule_text",
    "load_rules",
    "propose",
    "run_rules",
]
