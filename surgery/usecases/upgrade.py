"""What changes for a model between two targets (two TensorRT versions, typically): node by node, what is newly
refused (with the new target's words and the rules that answer them), newly accepted, or refused at another
stage. The `upgrade` command renders it; with a fix it runs the fix use case (surgery.usecases.fix) with the
rules that answer the new refusals, for the new target."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from onnx import ModelProto

from surgery.rulebook.schema import Rule

STATUSES = ("accepted", "rejected", "unknown")  # what `before` / `after` say


def target_id(text: str) -> str:
    """A target as the user may write it: a bare TensorRT version ("10.15", "11") is the predictor's."""
    t = text.strip()
    return f"tensorrt-static@{t}" if t[:1].isdigit() else t


@dataclass
class Change:
    node: str
    op_type: str
    before: str  # accepted | rejected | unknown
    after: str
    words: str  # the new target's words on the node ('' where it accepts, or its words are not known)
    rules: list[str]  # the rules that answer the new target's refusal
    stage_before: str = ""  # parse | build | run, where refused
    stage_after: str = ""
    explanation: str = ""  # ours, for the new target's verdict

    @property
    def newly_refused(self) -> bool:
        return self.after == "rejected" and self.before != "rejected"

    @property
    def kind(self) -> str:
        if self.newly_refused:
            return "newly refused"
        if self.before == "rejected" and self.after == "accepted":
            return "newly accepted"
        if self.before == self.after == "rejected":
            return f"refused at {self.stage_after} (was {self.stage_before})"
        return f"{self.before} -> {self.after}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "op_type": self.op_type,
            "before": self.before,
            "after": self.after,
            "words": self.words,
            "rules": list(self.rules),
        }


@dataclass
class UpgradeOutcome:
    source: str  # the target upgraded from
    target: str  # and to
    changes: list[Change]
    before: Any = None  # the two Reports
    after: Any = None
    fixed: Any = None  # the FixOutcome, when the fix ran
    fix_rules: list[str] = field(default_factory=list)

    @property
    def newly_refused(self) -> list[Change]:
        return [c for c in self.changes if c.newly_refused]

    def to_dict(self) -> dict[str, Any]:
        return {"from": self.source, "to": self.target, "changes": [c.to_dict() for c in self.changes]}


def _status(verdict) -> str:
    return {"supported": "accepted"}.get(verdict.status.value, verdict.status.value)


def compare(model: ModelProto, source: str, target: str, rules: list[Rule], base_dir=None, depth=None):
    """The node-by-node changes from `source` to `target` (both target ids). Raises UnknownBackend for a target
    that does not exist."""
    from surgery.diagnose import check_model
    from surgery.rulebook.suggest import suggestions_for

    before, after = check_model(model, [source, target], base_dir, depth=depth)
    suggested = suggestions_for(model, [after], rules)
    return UpgradeOutcome(source, target, changes(before, after, suggested), before, after)


def changes(before, after, suggested: dict | None = None) -> list[Change]:
    """What differs node by node between two Reports of one model (`suggested`: (backend, node) -> the rules'
    suggestions for `after`'s refusals, as surgery.rulebook.suggest.suggestions_for gives them)."""
    suggested = suggested or {}
    old = {v.node: v for v in before.verdicts}
    found = []
    for v in after.verdicts:
        was = old.get(v.node)
        b, a = (_status(was) if was else "unknown"), _status(v)
        stage_b = was.stage.value if was is not None and b == "rejected" and was.stage else ""
        stage_a = v.stage.value if a == "rejected" and v.stage else ""
        if b == a and stage_b == stage_a:
            continue
        found.append(
            Change(
                v.node,
                v.op_type,
                b,
                a,
                v.words if a != "accepted" else "",
                [s.text() for s in suggested.get((after.backend, v.node), [])] if a != "accepted" else [],
                stage_b,
                stage_a,
                v.explanation,
            )
        )
    return found


def changes_report(before, after):
    """A Report to colour a graph by what changes from `before` to `after`: the new target's verdict on each node
    whose verdict changed (newly refused: rejected; newly accepted: supported), nothing on the others."""
    from dataclasses import replace

    changed = {c.node for c in changes(before, after)}
    return replace(
        after,
        backend=f"{before.backend}->{after.backend}",
        label=f"{before.label} → {after.label}",
        verdicts=[v for v in after.verdicts if v.node in changed],
        messages=[],
    )


def upgrade(
    workspace,
    source: str,
    target: str,
    rules: list[Rule],
    *,
    fix: bool = False,
    depth=None,
) -> UpgradeOutcome:
    """Compare `workspace.current` on `source` and `target`; with `fix`, apply to it (in place: the workspace holds
    the steps) the rules that answer the new refusals, for `target`, through the fix use case."""
    from surgery.usecases.fix import FixRequest
    from surgery.usecases.fix import fix as run_fix

    base = workspace.original.base_dir
    outcome = compare(workspace.current, source, target, rules, base, depth)
    if not fix:
        return outcome
    wanted = {s.split(" ")[0] for c in outcome.newly_refused for s in c.rules}
    chosen = [r for r in rules if r.id in wanted]
    outcome.fix_rules = [r.id for r in chosen]
    if chosen:
        request = FixRequest(targets=[target], rules=chosen, depth=depth, only_rejected=True)
        outcome.fixed = run_fix(workspace, request, before=[outcome.after])
    return outcome
