"""Build a rule's fixture from its `example`: the failing model (a sample by name, or a small graph in ONNX text
syntax parsed by `onnx.parser`), the node the rule must fire on, the values it asks for, and its near-miss.
Data only: nothing in a rule file runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx.parser
from onnx import ModelProto

from surgery.rulebook.schema import Rule, RuleError


@dataclass
class Fixture:
    model: ModelProto
    node: str
    values: dict[str, Any] = field(default_factory=dict)
    near_miss: ModelProto | None = None


def fixture(rule: Rule) -> Fixture:
    """The rule's failing model and node (RuleError naming the rule file when the example has neither)."""
    ex = rule.example
    if ex.get("graph"):
        model = onnx.parser.parse_model(ex["graph"])
    elif ex.get("model"):
        from surgery.samples import build

        try:
            model = build(ex["model"])
        except KeyError:
            raise RuleError(
                f"{rule.path or rule.id}: field 'example.model': no sample model '{ex['model']}'"
            ) from None
    else:
        raise RuleError(f"{rule.path or rule.id}: field 'example': needs a model (sample name) or a graph")
    if not ex.get("node"):
        raise RuleError(f"{rule.path or rule.id}: field 'example.node': missing (the node the rule fires on)")
    near = onnx.parser.parse_model(ex["near_miss"]) if ex.get("near_miss") else None
    return Fixture(model, ex["node"], dict(ex.get("values") or {}), near)
