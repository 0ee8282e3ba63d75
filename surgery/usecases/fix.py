"""Fix a model for its targets: pin the inputs asked, apply matching rules until nothing changes (each step
verified and held to its promises), check the targets again and verify the result against the original. The one
fix pipeline: the `fix` command, the app's Fix all and the benchmarks call it.

What a step must keep (surgery.rulebook.engine.apply): it loses no original output (else it is a cut, undone
unless `allow_cut`), an exact step keeps the numbers, an approximate one stays within its rule's bound, it cures
a refusal it was meant for, and it turns no target from accepting to rejecting (unless `allow_regress`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from surgery.fixes import FixError
from surgery.rulebook.engine import (
    Applied,
    Fingerprints,
    Guard,
    applies_to,
    check_targets,
    run_rules,
    verify_result,
)
from surgery.rulebook.schema import Rule
from surgery.verify import VerifyReport
from surgery.workspace import Step, Workspace


class FixInputError(ValueError):
    """What the user asked cannot be done (an input to pin that the model does not have, ...): nothing applied."""


@dataclass
class FixRequest:
    targets: list[str]
    rules: list[Rule]
    depth: str | None = None
    values: dict[str, Any] = field(default_factory=dict)  # answers to the rules' $ask: (e.g. {"shape": ...})
    pins: dict[str, Any] = field(default_factory=dict)  # graph inputs to pin to constants first
    only_rejected: bool = False  # rules only on nodes a target rejects (or cannot decide)
    max_steps: int = 200
    allow_cut: bool = False
    allow_regress: bool = False


@dataclass
class FixOutcome:
    before: list  # the targets' Reports on the model as given
    after: list  # and after the steps
    applied: list[Applied]
    refused: list[str]  # what was not applied, one line each with its reason
    pinned: list[tuple[str, Any]]
    overall: VerifyReport | None  # the fixed model against the original (None: nothing changed)
    # the steps undone for a broken promise: (StepRefused.kind, the line that says so)
    undone: list[tuple[str, str]] = field(default_factory=list)

    @property
    def cuts(self) -> list[Applied]:
        return [a for a in self.applied if a.cut]

    @property
    def unverified(self) -> list[Applied]:
        return [a for a in self.applied if not verified(a.verification)]

    @property
    def whole_unverified(self) -> bool:
        return self.overall is not None and not verified(self.overall)

    def to_dict(self, require_verified: bool = False) -> dict[str, Any]:
        """The outcome as `fix --format json` prints it."""

        def target(r) -> dict:
            return {
                "target": r.backend,
                "label": r.label,
                "outcome": r.outcome.value,
                "rejected": len(r.rejected),
                "unknown": len(r.unknown),
                "reasons": r.reasons()[:5],
            }

        return {
            "before": [target(r) for r in self.before],
            "after": [target(r) for r in self.after],
            "pinned": [{"input": n, "value": v} for n, v in self.pinned],
            "steps": [
                {
                    "rule": a.proposal.rule.id,
                    "nodes": list(a.proposal.nodes or (a.proposal.node,)),
                    "op_type": a.proposal.op_type,
                    "safety": a.proposal.safety,
                    "step": a.proposal.step.describe(),
                    "verification": None if a.verification is None else a.verification.to_dict(),
                    "cut": a.cut,
                    "host": a.host,
                    "regressed": a.regressed,
                }
                for a in self.applied
            ],
            "undone": [{"kind": kind, "line": line} for kind, line in self.undone],
            "not_applied": self.refused,
            "original_vs_fixed": None if self.overall is None else self.overall.to_dict(),
            "promises_broken": self.promises_broken(require_verified),
        }

    def promises_broken(self, require_verified: bool = False) -> list[str]:
        """What keeps this outcome from being a repair whatever the targets say, one line each: a cut was taken,
        or (require_verified) a step or the whole could not be verified. The CLI exits 1 on any."""
        lines = []
        if self.cuts:
            lines.append(
                f"{len(self.cuts)} step(s) cut the model (--allow-cut): the host must run "
                + (", ".join(h for a in self.cuts for h in a.host) or "what they removed")
            )
        if require_verified and (self.unverified or self.whole_unverified):
            what = [f"{len(self.unverified)} of {len(self.applied)} step(s)"] if self.unverified else []
            what += ["the fixed model against the original"] if self.whole_unverified else []
            lines.append(f"--require-verified: not verified: {' and '.join(what)}")
        return lines


def verified(report) -> bool:
    """Whether a step (or the whole) was checked against the model before it: a report that ran, ok or not."""
    return report is not None and report.status != "skipped"


def fix(
    workspace: Workspace,
    request: FixRequest,
    *,
    before: list | None = None,
    log: Callable[[Applied], None] | None = None,
    log_pin: Callable[[str, Any], None] | None = None,
) -> FixOutcome:
    """Fix `workspace.current` for `request.targets` in place (the workspace holds the steps). `before`: the
    targets' reports on the model as given, where the caller has them already. Raises FixInputError for a pin
    that cannot be made (nothing applied then) and surgery.backends.UnknownBackend for a target that does not
    exist."""
    from surgery.verdict import Status

    targets = request.targets
    base = workspace.original.base_dir
    prints = Fingerprints()  # each model version serialized once for its fingerprint, however often checked
    if before is None:
        before = check_targets(workspace.current, targets, base, request.depth, prints)
    pinned = []
    for name, value in request.pins.items():  # the user's own steps come first, recorded like any other
        try:
            workspace.apply(Step("pin_input", {"input": name, "value": value}, note="--input-value"))
        except FixError as exc:
            while workspace.recipe:  # nothing applied when a pin fails
                workspace.undo()
            workspace.discard_undone()
            raise FixInputError(f"--input-value {name}: {exc}") from None
        pinned.append((name, value))
        if log_pin:
            log_pin(name, value)

    def not_accepted(model) -> set[str]:
        reports = check_targets(model, targets, base, request.depth, prints)
        return {v.node for r in reports for v in r.verdicts if v.status is not Status.SUPPORTED}

    active = [r for r in request.rules if applies_to(r, targets)]
    guard = Guard(targets, base, request.depth, allow_regress=request.allow_regress, prints=prints)
    if not pinned:
        guard.reports = before
    undone: list[tuple[str, str]] = []
    applied, refused = run_rules(
        workspace,
        active,
        targets,
        request.max_steps,
        values=request.values,
        only=not_accepted if request.only_rejected else None,
        log=log,
        guard=guard,
        allow_cut=request.allow_cut,
        undone=undone,
    )
    # cached where a step checked it (its fingerprint, the cache's key, too)
    after = check_targets(workspace.current, targets, base, request.depth, prints)
    overall = verify_result(workspace, applied)
    return FixOutcome(before, after, applied, refused, pinned, overall, undone)
