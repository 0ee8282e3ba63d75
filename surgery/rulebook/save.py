"""Save a fix the user made on one node as a rule that generalises it: same op and domain, and the input
conditions that made the fix possible (e.g. "input 2 is computed only from constants")."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from onnx import AttributeProto, ModelProto

from surgery.rulebook.engine import propose
from surgery.rulebook.loader import load_rule, load_rule_text
from surgery.rulebook.matcher import Context
from surgery.rulebook.schema import Rule, RuleError
from surgery.workspace import Step


def _generalise(value, node, key: str):
    """Replace the node's own key and tensor names in the step's params by references to the match."""
    if isinstance(value, list):
        return [_generalise(v, node, key) for v in value]
    if isinstance(value, dict):
        return {_generalise(k, node, key): _generalise(v, node, key) for k, v in value.items()}
    if value == key:
        return "$node"
    if isinstance(value, str):
        for i, x in enumerate(node.input):
            if x and value == x:
                return f"$input[{i}]"
        for i, x in enumerate(node.output):
            if x and value == x:
                return f"$output[{i}]"
    return value


def rule_from_step(
    model: ModelProto,
    step: Step,
    node_key: str,
    rules_dir: str | Path,
    id: str | None = None,
    title: str | None = None,
    targets: dict[str, str] | None = None,
):
    """Write a rule file for `step` as applied to `node_key` of `model`; return (path, matching node keys)."""
    from surgery.fixes import get_fix

    ctx = Context(model)
    node = ctx.facts.node(node_key)
    params = _generalise(dict(step.params), node, node_key)
    inputs = {}
    for i, x in enumerate(node.input):
        if not x:
            continue
        referenced = f"$input[{i}]" in repr(params)
        if referenced:  # the fix works on this input: what made it possible is part of the match
            cond = {"foldable": x in ctx.foldable, "weights": ctx.facts.is_weights(x)}
            inputs[i] = cond
    attrs = {}
    if not inputs:  # the fix is about the node itself: keep its mode flags (scalar ints) as conditions
        for a in node.attribute:
            if a.type == AttributeProto.INT:
                attrs[a.name] = {"eq": int(a.i)}
    rule_id = id or re.sub(r"[^a-z0-9]+", "-", f"{step.fix}-{node.op_type}".lower()).strip("-")
    fix = get_fix(step.fix)
    data = {
        "id": rule_id,
        "title": title or f"{fix.summary.rstrip('.')} ({node.op_type})",
        "what": f"Applies {step.fix} to {node.op_type} nodes like '{node_key}'. {fix.summary}",
        "why": f"Saved from a fix made in ONNX Surgery on {node.op_type} '{node_key}'.",
        "targets": targets or {},
        "match": {"op": node.op_type, "domain": node.domain if node.domain not in ("ai.onnx",) else ""}
        | ({"attrs": attrs} if attrs else {})
        | ({"inputs": inputs} if inputs else {}),
        "fix": {"primitive": step.fix} | ({"params": params} if params else {}),
        "safety": fix.safety.value,
        "example": {"node": node_key, "before": f"{node.op_type} '{node_key}'", "after": step.describe()},
    }
    if not data["targets"]:
        del data["targets"]
    path = Path(rules_dir) / f"{rule_id}.yaml"
    if id is None:  # a generated id: take the first free one
        k = 2
        while path.exists():
            data["id"] = f"{rule_id}-{k}"
            path = Path(rules_dir) / f"{data['id']}.yaml"
            k += 1
    if path.exists():
        raise RuleError(
            f"{path}: a rule file with this id exists. Note: give another id, or delete the file first"
        )
    text = yaml.dump(data, Dumper=_NoAliases, sort_keys=False, width=100)
    load_rule_text(text, str(path))  # validate before writing anything
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    rule = load_rule(path)
    return path, matches_in(rule, model)


class _NoAliases(yaml.SafeDumper):
    """Writes a value met twice out twice, never as an anchor and alias (&id001, *id001): rule files refuse those."""

    def ignore_aliases(self, data):
        return True


def matches_in(rule: Rule, model: ModelProto) -> list[str]:
    """The node keys of `model` the rule matches (any target), in topological order."""
    return [p.node for p in propose(model, [rule])]
