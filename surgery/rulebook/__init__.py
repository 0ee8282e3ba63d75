"""The rule engine: rule files (data) → matches → proposals → verified workspace steps."""

from surgery.rulebook.engine import (
    Applied,
    NeedsValue,
    Proposal,
    applies_to,
    apply,
    propose,
    run_rules,
    verify_result,
)
from surgery.rulebook.loader import BUILTIN_DIR, load_rule, load_rule_text, load_rules
from surgery.rulebook.schema import Rule, RuleError
from surgery.rulebook.tracer import explain

__all__ = [
    "BUILTIN_DIR",
    "Applied",
    "NeedsValue",
    "Proposal",
    "Rule",
    "RuleError",
    "applies_to",
    "apply",
    "explain",
    "load_rule",
    "load_rule_text",
    "load_rules",
    "propose",
    "run_rules",
    "verify_result",
]
