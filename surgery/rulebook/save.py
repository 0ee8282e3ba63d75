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


# how a saved rule's title starts, by primitive ("{op}": the node's op type); others read "<fix> on <op> nodes"
TITLES = {
    "decompose": "Decompose {op} into standard ops",
    "fold_constants": "Fold the computed inputs of {op} into constants",
    "inference_mode": "Put {op} in inference mode",
    "set_attribute": "Set an attribute of {op}",
    "int64_to_int32": "Compute {op} in int32 instead of int64",
    "delete_node": "Remove {op}",
    "pin_input": "Pin an input of {op}",
    "explicit_axes": "Give {op} its axes as a constant",
    "plugin_swap": "Swap {op} for a TensorRT plugin",
}


def draft_rule(
    model: ModelProto,
    step: Step,
    node_key: str,
    rules_dir: str | Path,
    id: str | None = None,
    title: str | None = None,
    targets: dict[str, str] | None = None,
    base_dir=None,
) -> tuple[Path, str, Rule]:
    """The rule file `rule_from_step` would write for `step` as applied to `node_key` of `model`, not written:
    (its path, its text, the rule). The match keeps the conditions the step depends on: the inputs it works on
    (with what made that possible: computed from constants, weights) and the node's mode flags (int attributes)
    whose other value leaves the step with nothing to do or refused; a flag the primitive handles either way is
    not pinned (a LinearClassifier decomposed for any multi_class)."""
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
    if not inputs:  # the fix is about the node itself: its mode flags, where the step depends on them
        for a in node.attribute:
            if a.type == AttributeProto.INT and _depends_on(
                model, step, ctx.facts.index[node_key], a, base_dir
            ):
                attrs[a.name] = {"eq": int(a.i)}
    rule_id = id or re.sub(r"[^a-z0-9]+", "-", f"{step.fix}-{node.op_type}".lower()).strip("-")
    fix = get_fix(step.fix)
    named = TITLES.get(step.fix, f"{step.fix.replace('_', ' ').capitalize()} on {{op}} nodes")
    data = {
        "id": rule_id,
        "title": title or named.format(op=node.op_type),
        "what": f"Applies {step.fix} to {node.op_type} nodes like '{node_key}'. {fix.summary}",
        "why": f"Saved from a fix made in ONNX Surgery on {node.op_type} '{node_key}'"
        + (f", as the rule {step.rule} does it" if step.rule else "")
        + ".",
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
    return path, text, load_rule_text(text, str(path))  # validated before anything is written


def rule_from_step(model: ModelProto, step: Step, node_key: str, rules_dir: str | Path, **options):
    """Write a rule file for `step` as applied to `node_key` of `model` (draft_rule, with its options: id, title,
    targets, base_dir); return (path, matching node keys)."""
    path, text, _ = draft_rule(model, step, node_key, rules_dir, **options)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    rule = load_rule(path)
    return path, matches_in(rule, model)


def _depends_on(model: ModelProto, step: Step, index: int, attr, base_dir=None) -> bool:
    """Does `step` depend on the node's int attribute `attr`? Tried: the same step on a copy of the model with the
    attribute's other value (0 <-> 1, else 0). Refused there, or the node left as it was: it does."""
    from surgery.fixes import FixError
    from surgery.workspace import apply_step

    other = ModelProto()
    other.CopyFrom(model)
    a = next(x for x in other.graph.node[index].attribute if x.name == attr.name)
    a.i = 1 if attr.i == 0 else 0
    try:
        after = apply_step(other, step, base_dir)
    except (FixError, ValueError, KeyError, IndexError):
        return True
    except Exception:  # a primitive that breaks on the other value depends on it
        return True
    node = other.graph.node[index].SerializeToString(deterministic=True)
    return any(n.SerializeToString(deterministic=True) == node for n in after.graph.node)


class _NoAliases(yaml.SafeDumper):
    """Writes a value met twice out twice, never as an anchor and alias (&id001, *id001): rule files refuse those."""

    def ignore_aliases(self, data):
        return True


def matches_in(rule: Rule, model: ModelProto) -> list[str]:
    """The node keys of `model` the rule matches (any target), in topological order."""
    return [p.node for p in propose(model, [rule])]
