"""Why a rule does or does not match a node, condition by condition (onnxscript's tracer, for near-misses)."""

from __future__ import annotations

from onnx import ModelProto

from surgery.rulebook.matcher import Context, explain_node
from surgery.rulebook.schema import Rule, applies_to


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

    ctx = ctx or Context(model)
    head = []
    if targets:
        ok = applies_to(rule, targets)
        specs = ", ".join(f"{t} {v}" if v not in ("*", "") else t for t, v in rule.targets.items())
        head = [f"{'✓' if ok else '✗'} the rule is for {specs or 'any target'}; asked: {', '.join(targets)}"]
    from surgery.graph import find_node

    found = find_node(ctx.facts, node_key)
    if found is None:
        sample = ", ".join(list(ctx.facts.index)[:5])
        return [*head, f"✗ no node '{node_key}' in the model. Note: node keys look like: {sample}"]
    scope, index = found
    if scope is not ctx.facts:  # a node inside a body: its conditions are read in the body's scope
        ctx = Context.of_scope(scope)
    node = scope.model.graph.node[index]
    return head + [("✓ " if ok else "✗ ") + reason for ok, reason in explain_node(ctx, rule, node)]


def _body_nodes(ctx: Context, key: str) -> list[tuple[str, str]]:
    """(key, node) of every node inside the bodies a main-graph node holds, and inside the local function it
    calls: where a refusal of that node may come from (the predictor names the body node at fault)."""

    if key not in ctx.facts.index:
        return []
    node = ctx.facts.node(key)
    calls = (node.domain or "", node.op_type) in ctx.facts.functions
    fname = f"{node.domain}::{node.op_type}/" if node.domain else f"{node.op_type}/"
    out = []
    for scope in ctx.facts.scopes:
        if scope.path.startswith(key + "/") or (calls and scope.path.startswith(fname)):
            out += [(scope.path + k, n) for k, n in zip(scope.keys, scope.model.graph.node)]
    return out


def _at_fault(inside: list, explanation: str) -> list[tuple[str, str]]:
    """The body nodes a verdict names ("in its body, Resize '/then/Resize'", as the predictor words it), else
    every body node: (key, op type)."""
    named = [
        (k, n.op_type)
        for k, n in inside
        if f"{n.op_type} '{n.name or 'node_of_' + (n.output[0] if n.output else '')}'" in explanation
    ]
    return named or [(k, n.op_type) for k, n in inside]


def unrepaired(model: ModelProto, reports: list, rules: list[Rule]) -> list[tuple[str, str]]:
    """For each node still refused (or unknown) after `fix`: (node key, one line) — the nearest misses of the
    rules meant for that refusal (`answers`) and for that node's op type, condition by condition, or that one
    matches but its step was not taken (a cut, beyond its bound, did not cure, ...); or that no rule answers it. Shared by `fix` and bench/repair_rate.py."""
    from surgery.verdict import Status

    ctx = Context(model)
    out, seen = [], set()
    for r in reports:
        for v in r.verdicts:
            if v.status is Status.SUPPORTED or v.index < 0 or v.node in seen:
                continue
            seen.add(v.node)
            near = []
            inside = _at_fault(_body_nodes(ctx, v.node), v.explanation or "") if v.index >= 0 else []
            for rule in rules:
                if not (rule.answers and rule.answers_verdict(v) and applies_to(rule, [r.backend])):
                    continue
                if rule.match["op"] in ("*", ["*"]):  # a rule for any op (inlining) is not meant for this one
                    continue
                # the node itself, then the nodes in its bodies the rule is for (a Resize inside an If branch)
                for key, op in [(v.node, v.op_type), *inside]:
                    trace = explain(model, rule, key, ctx)
                    if trace and trace[0].startswith("✓"):  # the rule is for this op type: a near miss
                        failed = [x[2:] for x in trace if x.startswith("✗")]
                        if failed:
                            near.append(f"{rule.id} does not match {op} '{key}': {'; '.join(failed)}")
                        else:  # it matches: its step was undone or refused (`fix` says why: "not applied")
                            near.append(f"{rule.id} matches {op} '{key}', but its step was not taken")
            if near:
                out += [(v.node, line) for line in near]
            else:
                what = ", ".join([*v.checks, v.code] if v.checks else [v.code or v.status.value])
                out.append((v.node, f"no rule answers {v.op_type} '{v.node}' ({what}) for {r.backend}"))
    return out
