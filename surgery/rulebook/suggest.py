"""Which rules to suggest for a refused node: the rules meant for that refusal (`answers`: a check id or an error
code of the verdict), for that target, whose own matcher accepts the node. So `check` never suggests a rule that
`fix` would not apply; backends keep no table of rule ids.

A node that a rule's fix removes or repairs along with the node it matches (its `also_fixes`: the
DynamicQuantizeLinear that feeds a ConvInteger) is shown that rule too, applied at its reader, where the rule's
matcher accepts the reader."""

from __future__ import annotations

from dataclasses import dataclass

from onnx import ModelProto

from surgery.rulebook.engine import applies_to
from surgery.rulebook.matcher import Context, matches
from surgery.rulebook.schema import Rule
from surgery.verdict import Report, Status, Verdict


@dataclass(frozen=True)
class Suggestion:
    rule: str
    at: str | None = None  # where the rule applies, when not at the refused node itself
    inside: bool = False  # `at` is a node inside the refused node's body (If/Loop/Scan, a local function)

    def text(self) -> str:
        if self.at is None:
            return self.rule
        return (
            f"{self.rule} (in its body, at '{self.at}')"
            if self.inside
            else f"{self.rule} (at its reader '{self.at}')"
        )


def rules_for(ctx: Context, verdict: Verdict, target: str, rules: list[Rule]) -> list[str]:
    """Ids of the rules that answer `verdict` (from `target`), match its node, and act on the input the verdict
    names where it names one (see `binds`)."""
    if verdict.status is Status.SUPPORTED or verdict.index < 0:
        return []
    node = ctx.model.graph.node[verdict.index]
    return [
        r.id
        for r in rules
        if applies_to(r, [target])
        and r.answers_verdict(verdict)
        and matches(ctx, r, node)
        and binds(ctx, r, verdict, target)
    ]


def binds(ctx: Context, rule: Rule, verdict: Verdict, target: str) -> bool:
    """Whether the step the rule takes on the verdict's node acts on what the refusal is about: a step that names
    some of the node's inputs (a fold of input 1) must name one the verdict names (the refused `axes`, input 3);
    a step on the node as a whole, or a verdict that names no input, always does."""
    if not verdict.inputs:
        return True
    from surgery.rulebook.engine import propose

    node = ctx.model.graph.node[verdict.index]
    mine = set(node.input) - {""}
    for p in propose(ctx.model, [rule], [target], ctx=ctx, only={verdict.node}):
        if p.node != verdict.node or p.step is None:
            continue
        touched = mine & set(_strings(p.step.params))
        return not touched or bool(touched & set(verdict.inputs))
    return True


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


def in_bodies(ctx: Context, verdict: Verdict, target: str, rules: list[Rule]) -> list[Suggestion]:
    """For a node refused for what sits in its body (the predictor: "in its body, Resize '/then/Resize'"): the
    rules that answer the verdict and whose step `fix` would take on that body node (surgery.rulebook.engine
    proposes body nodes for the primitives that act there), one per rule, at that node."""
    if verdict.status is Status.SUPPORTED or verdict.index < 0:
        return []
    from surgery.rulebook.engine import propose
    from surgery.rulebook.tracer import _at_fault, _body_nodes

    inside = _at_fault(_body_nodes(ctx, verdict.node), verdict.explanation or "")
    if not inside:
        return []
    mine = [r for r in rules if applies_to(r, [target]) and r.answers_verdict(verdict)]
    keys = {k for k, _ in inside}
    out, seen = [], set()
    for p in propose(ctx.model, mine, [target], ctx=ctx, only=keys) if mine else []:
        if p.step is not None and p.node in keys and p.rule.id not in seen:
            seen.add(p.rule.id)
            out.append(Suggestion(p.rule.id, p.node, inside=True))
    return out


def at_readers(ctx: Context, verdict: Verdict, target: str, rules: list[Rule]) -> list[Suggestion]:
    """The rules (for `target`) that fix the refused node's op type with a reader they match (`also_fixes`): one
    suggestion per rule, at its first such reader in topological order."""
    if verdict.status is Status.SUPPORTED or verdict.index < 0:
        return []
    facts, nodes = ctx.facts, ctx.model.graph.node
    node = nodes[verdict.index]
    mine = [r for r in rules if node.op_type in r.also_fixes and applies_to(r, [target])]
    if not mine:
        return []
    readers = sorted(
        {j for o in node.output if o for j in facts.consumers.get(o, [])}, key=facts.position.__getitem__
    )
    out = []
    for r in mine:
        j = next((j for j in readers if matches(ctx, r, nodes[j])), None)
        if j is not None:
            out.append(Suggestion(r.id, facts.keys[j]))
    return out


def suggestions_for(
    model: ModelProto, reports: list[Report], rules: list[Rule]
) -> dict[tuple[str, str], list[Suggestion]]:
    """(target, node key) -> suggestions, for every refused or unknown node of every report: the rules that fix
    the node itself, else those that fix it with a reader."""
    ctx = Context(model)
    out = {}
    for r in reports:
        for v in r.verdicts:
            found = [Suggestion(rid) for rid in rules_for(ctx, v, r.backend, rules)]
            found = found or in_bodies(ctx, v, r.backend, rules) or at_readers(ctx, v, r.backend, rules)
            if found:
                out[(r.backend, v.node)] = found
    return out
