"""Why a rule does or does not match a node, condition by condition (onnxscript's tracer, for near-misses)."""

from __future__ import annotations

from onnx import ModelProto

from surgery.rulebook.matcher import Context, explain_node
from surgery.rulebook.schema import Rule


def explain(model: ModelProto, rule: Rule, node_key: str, ctx: Context | None = None) -> list[str]:
    """One line per condition: '✓ reason' where it holds, '✗ reason' where it does not. The op check comes
    first; when the op differs, nothing else is evaluated (the other conditions would not mean anything)."""
    ctx = ctx or Context(model)
    if node_key not in ctx.facts.index:
        sample = ", ".join(list(ctx.facts.index)[:5])
        return [f"✗ no node '{node_key}' in the model. Note: node keys look like: {sample}"]
    node = ctx.facts.node(node_key)
    return [("✓ " if ok else "✗ ") + reason for ok, reason in explain_node(ctx, rule, node)]
