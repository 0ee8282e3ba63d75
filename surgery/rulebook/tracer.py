"""Why a rule does or does not match a node, condition by condition (onnxscript's tracer, for near-misses)."""

from __future__ import annotations

from onnx import ModelProto

from surgery.rulebook.matcher import Context, explain_node
from surgery.rulebook.schema import Rule


def explain(
    model: ModelProto,
    rule: Rule,
    node_key: str,
    ctx: Context | None = None,
    targets: list[str] | None = None,
) -> list[str]:
    """One line per condition: '✓ reason' where it holds, '✗ reason' where it does not. With `targets`, the
    first line says whether the rule is for one of them. The op check comes next; when the op differs, nothing
    else is evaluated (the other conditions would not mean anything)."""
    from surgery.rulebook.engine import applies_to

    ctx = ctx or Context(model)
    head = []
    if targets:
        ok = applies_to(rule, targets)
        specs = ", ".join(f"{t} {v}" if v not in ("*", "") else t for t, v in rule.targets.items())
        head = [f"{'✓' if ok else '✗'} the rule is for {specs or 'any target'}; asked: {', '.join(targets)}"]
    if node_key not in ctx.facts.index:
        sample = ", ".join(list(ctx.facts.index)[:5])
        return [*head, f"✗ no node '{node_key}' in the model. Note: node keys look like: {sample}"]
    node = ctx.facts.node(node_key)
    return head + [("✓ " if ok else "✗ ") + reason for ok, reason in explain_node(ctx, rule, node)]
