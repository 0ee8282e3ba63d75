"""Rules → proposals → workspace steps, each verified; run to a fixpoint for the `fix` command."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from onnx import ModelProto

from surgery.fixes import FixError
from surgery.rulebook.matcher import Context, explain_node, matches
from surgery.rulebook.schema import Rule, version_matches
from surgery.verify import VerifyReport, verify
from surgery.workspace import Step, Workspace


class NeedsValue(FixError):
    """A rule needs a value only the user knows (e.g. the shape to freeze an input to)."""

    def __init__(self, rule: str, what: str):
        super().__init__(f"rule {rule} needs {what}; give it (CLI: --set {what}=VALUE, e.g. --input-shape)")
        self.what = what


@dataclass
class Proposal:
    rule: Rule
    node: str  # node key
    op_type: str
    step: Step | None  # None when the rule needs a value the user has not given
    description: str
    safety: str
    needs: str | None = None


@dataclass
class Applied:
    proposal: Proposal
    verification: VerifyReport
    before: list = field(default_factory=list)  # Reports before, for the targets
    after: list = field(default_factory=list)

    def summary(self) -> str:
        return f"{self.proposal.rule.id} on {self.proposal.op_type} '{self.proposal.node}': {self.verification.summary()}"


def applies_to(rule: Rule, targets: list[str] | None) -> bool:
    """A rule with no targets applies everywhere; else one target must match name and version spec."""
    if not targets or not rule.targets:
        return True
    for target in targets:
        name, _, version = target.partition("@")
        spec = rule.targets.get(name)
        if spec is not None and (not version or version_matches(spec, version)):
            return True
    return False


def _substitute(value: Any, node, model: ModelProto, key: str, values: dict[str, Any]) -> Any:
    if isinstance(value, list):
        return [_substitute(v, node, model, key, values) for v in value]
    if isinstance(value, dict):
        return {
            _substitute(k, node, model, key, values): _substitute(v, node, model, key, values)
            for k, v in value.items()
        }
    if not isinstance(value, str) or not value.startswith("$"):
        return value
    if value == "$node":
        return key
    if value == "$inputs":
        return [x for x in node.input if x]
    if value == "$graph_inputs":
        inits = {t.name for t in model.graph.initializer}
        return [i.name for i in model.graph.input if i.name not in inits]
    for kind, seq in (("$input[", node.input), ("$output[", node.output)):
        if value.startswith(kind):
            return seq[int(value[len(kind) : -1])]
    if value.startswith("$ask:"):
        what = value[5:]
        filled = values.get(what)
        if filled is None:
            raise NeedsValue("", what)
        return filled
    return value


def propose(
    model: ModelProto,
    rules: list[Rule],
    targets: list[str] | None = None,
    values: dict[str, Any] | None = None,
    ctx: Context | None = None,
) -> list[Proposal]:
    """Every (rule, node) that matches, with the concrete step it would apply."""
    ctx = ctx or Context(model)
    out = []
    for rule in rules:
        if not applies_to(rule, targets):
            continue
        for key, node in zip(ctx.facts.keys, model.graph.node):
            if not matches(ctx, rule, node):
                continue
            try:
                params = _substitute(rule.params, node, model, key, values or {})
                step, needs = Step(rule.primitive, params, rule=rule.id, note=rule.title), None
            except NeedsValue as exc:
                step, needs = None, exc.what
            out.append(
                Proposal(
                    rule, key, node.op_type, step, f"{rule.title} ({rule.primitive})", rule.safety, needs
                )
            )
    return out


def explain(model: ModelProto, rule: Rule, node_key: str) -> list[str]:
    """Why the rule does or does not match this node, condition by condition."""
    ctx = Context(model)
    if node_key not in ctx.facts.index:
        return [f"no node '{node_key}'"]
    node = ctx.facts.node(node_key)
    return [("✓ " if ok else "✗ ") + reason for ok, reason in explain_node(ctx, rule, node)]


def apply(
    workspace: Workspace, proposal: Proposal, *, targets: list[str] | None = None, check: bool = True
) -> Applied:
    """Apply a proposal as a workspace step, verify it against the model before it, re-check the targets.
    An exact fix that fails verification is undone and raised as FixError with the numbers."""
    if proposal.step is None:
        raise NeedsValue(proposal.rule.id, proposal.needs or "a value")
    from surgery.diagnose import check_model

    before_model = workspace.current
    base = workspace.original.base_dir
    before = check_model(before_model, targets, base) if (check and targets) else []
    workspace.apply(proposal.step)
    report = verify(before_model, workspace.current, base_dir=base, safety=proposal.safety)
    if report.status == "failed" and proposal.safety == "exact":
        workspace.undo()
        workspace.discard_undone()
        raise FixError(f"{proposal.rule.id}: {report.summary()}")
    after = check_model(workspace.current, targets, base) if (check and targets) else []
    return Applied(proposal, report, before, after)


def run_rules(
    workspace: Workspace,
    rules: list[Rule],
    targets: list[str] | None = None,
    *,
    values: dict[str, Any] | None = None,
    max_rounds: int = 20,
    log=None,
) -> tuple[list[Applied], list[str]]:
    """Apply matching rules until nothing changes. Returns what was applied and what was refused (and why)."""
    applied, refused, tried = [], [], set()
    for _ in range(max_rounds):
        progress = False
        for proposal in propose(workspace.current, rules, targets, values):
            key = (workspace.fingerprint(), proposal.rule.id, proposal.node)
            if key in tried:
                continue
            tried.add(key)
            if proposal.step is None:
                refused.append(f"{proposal.rule.id} on '{proposal.node}': needs {proposal.needs}")
                continue
            before = workspace.fingerprint()
            try:
                done = apply(workspace, proposal, targets=None, check=False)
            except FixError as exc:
                line = f"{proposal.rule.id} on '{proposal.node}': {exc}"
                if line not in refused:
                    refused.append(line)
                continue
            if workspace.fingerprint() == before:
                continue
            applied.append(done)
            if log:
                log(done)
            progress = True
            break  # the model changed: match again on the new version
        if not progress:
            break
    return applied, refused
