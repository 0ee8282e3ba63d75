"""Which rules to suggest for a refused node: the rules meant for that refusal (`answers`: a check id or an error
code of the verdict), for that target, whose own matcher accepts the node. So `check` never suggests a rule that
`fix` would not apply; backends keep no table of rule ids."""

from __future__ import annotations

from onnx import ModelProto

from surgery.backends.base import Report, Status, Verdict
from surgery.rulebook.engine import applies_to
from surgery.rulebook.matcher import Context, matches
from surgery.rulebook.schema import Rule


def rules_for(ctx: Context, verdict: Verdict, target: str, rules: list[Rule]) -> list[str]:
    """Ids of the rules that answer `verdict` (from `target`) and match its node."""
    if verdict.status is Status.SUPPORTED or verdict.index < 0:
        return []
    node = ctx.model.graph.node[verdict.index]
    return [
        r.id
        for r in rules
        if applies_to(r, [target]) and r.answers_verdict(verdict) and matches(ctx, r, node)
    ]


def suggestions_for(
    model: ModelProto, reports: list[Report], rules: list[Rule]
) -> dict[tuple[str, str], list[str]]:
    """(target, node key) -> rule ids, for every refused or unknown node of every report."""
    ctx = Context(model)
    out = {}
    for r in reports:
        for v in r.verdicts:
            found = rules_for(ctx, v, r.backend, rules)
            if found:
                out[(r.backend, v.node)] = found
    return out
