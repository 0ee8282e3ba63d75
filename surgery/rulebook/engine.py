"""Rules → proposals → workspace steps, each verified; `run_rules` applies them to a fixpoint (`fix` command)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from onnx import ModelProto

from surgery.fixes import FixError, get_fix
from surgery.isolate import Beside
from surgery.rulebook.matcher import Context, matched_any_input, matches, needs_graph_input
from surgery.rulebook.schema import Rule, applies_to
from surgery.rulebook.tracer import explain
from surgery.text import first_line
from surgery.verify import VerifyReport, prewarm_verification
from surgery.verify import verify as _verify
from surgery.workspace import Step, Workspace

__all__ = [
    "Applied",
    "Fingerprints",
    "Guard",
    "StepRefused",
    "NeedsValue",
    "Proposal",
    "applies_to",
    "apply",
    "check_targets",
    "explain",
    "propose",
    "run_rules",
    "verify_result",
]


class NeedsValue(FixError):
    """A rule needs a value only the user knows (e.g. the shape to freeze an input to)."""

    def __init__(self, rule: str, what: str):
        super().__init__(
            f"rule {rule or '?'} needs a value for '{what}'. Note: give it (CLI: --input-shape NAME:1x3x224x224 "
            f"for a shape, --input-value NAME=VALUE to pin an input; library: propose(..., values={{'{what}': ...}}))"
        )
        self.what = what


class StepRefused(FixError):
    """A step undone because its result breaks a promise: `kind` is "cut" (it loses an original output),
    "not-exact" (an exact fix changed the numbers), "beyond-bound" (an approximate fix passed its rule's bound),
    "did-not-cure" (every node it was meant for is still refused for the same reason) or "regresses" (another
    target went from accepting to rejecting). `nodes`: the nodes it concerns, where only some do."""

    def __init__(self, kind: str, message: str, nodes: tuple[str, ...] = (), detail: str = ""):
        super().__init__(message)
        self.kind = kind
        self.nodes = nodes
        self.detail = detail  # what broke, without the rule's name (a cut: the outputs it loses)


@dataclass
class Proposal:
    """A rule matching one node: the concrete step it would apply, in words, with its safety class."""

    rule: Rule
    node: str  # node key (the first one, for a batch)
    op_type: str
    step: Step | None  # None when the rule needs a value the user has not given
    description: str
    safety: str
    needs: str | None = None
    nodes: tuple[str, ...] = ()  # a batch: every node key the step acts on
    # a node inside an If/Loop/Scan body or a local function: the main-graph nodes that hold it (the If, the
    # calls of the function); its key is the body's path + its key there ('/if/If/then_branch//then/Resize')
    owners: tuple[str, ...] = ()

    def where(self) -> str:
        """'Resize '/up/Resize'' or '121 Conv nodes ('n0', 'n8', ...)'."""
        if len(self.nodes) > 1:
            names = ", ".join(f"'{k}'" for k in self.nodes[:3]) + (", ..." if len(self.nodes) > 3 else "")
            return f"{len(self.nodes)} {self.op_type} nodes ({names})"
        return f"{self.op_type} '{self.node}'"

    def __str__(self) -> str:
        return f"{self.rule.id} on {self.where()} [{self.safety}]: {self.description}"


@dataclass
class Applied:
    proposal: Proposal
    verification: VerifyReport | None  # None when applied with verify=False
    before: list = field(default_factory=list)  # backend Reports before the step, for the targets asked
    after: list = field(default_factory=list)
    cut: list[str] = field(default_factory=list)  # what the step lost of the model's outputs (taken as a cut)
    host: list[str] = field(default_factory=list)  # a cut: the nodes it removed, that the host must now run
    # the targets it turned from accepting to rejecting, where that was allowed
    regressed: list[str] = field(default_factory=list)

    def summary(self) -> str:
        checked = self.verification.summary() if self.verification else "not verified (verify=False)"
        return f"{self.proposal.rule.id} on {self.proposal.where()}: {checked}"


def _substitute(
    value: Any,
    node,
    model: ModelProto,
    key: str,
    values: dict[str, Any],
    rule_id: str,
    any_input: str | None = None,
) -> Any:
    """Fill a rule's parameters from the match: $node, $input[i], $output[i], $inputs, $graph_inputs,
    $any_input (the input that met `match.any_input`), $ask:<what> (from `values`; a dict there is looked up
    by the mapping key it fills, e.g. {image: [1, 3, 224, 224]} for `shapes: {$any_input: $ask:shape}`, else
    by the name of the input that met `match.any_input`, e.g. {k: 5} for `value: $ask:value`).
    Other '$name' strings pass through to the primitive (plugin_swap reads '$old_attribute' as "copy the old
    node's attribute")."""

    def one(v: Any, for_key: Any = None) -> Any:
        if isinstance(v, list):
            return [one(x) for x in v]
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                k2 = one(k)
                out[k2] = one(x, for_key=k2)
            return out
        if not isinstance(v, str) or not v.startswith("$"):
            return v
        if v == "$node":
            return key
        if v == "$inputs":
            return [x for x in node.input if x]
        if v == "$graph_inputs":
            inits = {t.name for t in model.graph.initializer}
            return [i.name for i in model.graph.input if i.name not in inits]
        if v == "$any_input":
            if any_input is None:
                raise FixError(f"rule {rule_id}: $any_input needs a match.any_input condition")
            return any_input
        for kind, seq in (("$input[", node.input), ("$output[", node.output)):
            if v.startswith(kind) and v.endswith("]"):
                i = int(v[len(kind) : -1])
                if i >= len(seq) or not seq[i]:
                    raise FixError(f"rule {rule_id}: {v} does not exist on node '{key}'")
                return seq[i]
        if v.startswith("$ask:"):
            what = v[5:]
            filled = values.get(what)
            if isinstance(filled, dict):  # by the mapping key it fills, else by the input that met any_input
                by = for_key if for_key in filled or any_input is None else any_input
                filled = filled.get(by)
                what = f"{what} of {by}" if by is not None else what
            if filled is None:
                raise NeedsValue(rule_id, what)
            return filled
        return v

    return one(value)


def propose(
    model: ModelProto,
    rules: list[Rule],
    targets: list[str] | None = None,
    values: dict[str, Any] | None = None,
    ctx: Context | None = None,
    only: set[str] | frozenset[str] | None = None,
) -> list[Proposal]:
    """Every (node, rule) that matches, nodes in topological order, with the concrete step it would apply.
    Rules whose targets do not include one of `targets` are left out (None: every rule). `only`: the node keys
    to look at (a node's proposals are the same as in a run over every node; the app asks for one node)."""
    ctx = ctx or Context(model)
    active = [r for r in rules if applies_to(r, targets)]
    by_op: dict[str, list[Rule]] = {}  # rules by the op types they match ('*': any), in rule order
    for rule in active:
        ops = rule.match["op"] if isinstance(rule.match["op"], list) else [rule.match["op"]]
        for op in ops:
            by_op.setdefault(op, []).append(rule)
    anywhere = {id(r) for r in by_op.get("*", [])}
    for_op: dict[str, list[Rule]] = {}  # the rules that can match an op type, in rule order
    # (op type, whether the node reads a graph input) -> the rules that can match such a node
    for_node: dict[tuple[str, bool], list[Rule]] = {}

    def rules_for(op: str) -> list[Rule]:
        if op not in for_op:
            named = {id(r) for r in by_op.get(op, [])}
            for_op[op] = [r for r in active if id(r) in named or id(r) in anywhere]
        return for_op[op]

    def rules_for_node(op: str, reads_input: bool) -> list[Rule]:
        got = for_node.get((op, reads_input))
        if got is None:
            got = rules_for(op) if reads_input else [r for r in rules_for(op) if not needs_graph_input(r)]
            for_node[(op, reads_input)] = got
        return got

    out = []
    nodes = model.graph.node
    order = ctx.facts.order
    if only is not None:
        order = [i for i in order if ctx.facts.keys[i] in only]
    graph_inputs = set(ctx.facts.graph_inputs)  # asked of the nodes visited only (the app asks for one)
    for i in order:
        node, key = nodes[i], ctx.facts.keys[i]
        rules = rules_for_node(node.op_type, not graph_inputs.isdisjoint(node.input))
        out += _node_proposals(ctx, node, key, rules, model, values)
    # inside If/Loop/Scan bodies and local functions: the rules whose primitive works there (by tensor name)
    inside = [r for r in active if r.primitive in BODY_PRIMITIVES]
    # a body node's key is its body's path + its key, never a main-graph key: asked for main-graph nodes only
    # (the app's selected node), the bodies are not walked
    if inside and (only is None or any(k not in ctx.facts.index for k in only)) and _has_bodies(model):
        from surgery.graph import iter_scopes

        for scope in iter_scopes(ctx.facts):
            sctx = Context.of_scope(scope)
            owners = _owners(ctx.facts, scope)
            for i in scope.order:
                node, key = scope.model.graph.node[i], scope.path + scope.keys[i]
                if only is not None and key not in only:
                    continue
                named = {id(r) for r in rules_for(node.op_type)}
                mine = [r for r in inside if id(r) in named]
                for p in _node_proposals(sctx, node, key, mine, scope.model, values):
                    p.owners = owners
                    out.append(p)
    return out


# fix primitives that can act inside a body (they name tensors, and tensor names are unique across scopes); the
# others take main-graph node keys, so their rules are not proposed for body nodes
BODY_PRIMITIVES = frozenset({"fold_constants"})


def _has_bodies(model: ModelProto) -> bool:
    from onnx import AttributeProto

    graphs = (AttributeProto.GRAPH, AttributeProto.GRAPHS)
    return bool(model.functions) or any(a.type in graphs for n in model.graph.node for a in n.attribute)


def _owners(main, scope) -> tuple[str, ...]:
    """The main-graph node keys that hold a body: the node whose attribute it is (for a nested body, the
    outermost one's), or the nodes that call the function."""
    top = scope
    while top.parent is not None and top.parent.parent is not None:
        top = top.parent
    if top.path.endswith("/") and not any(top.path.startswith(k + "/") for k in main.keys):
        name = top.path[:-1]  # a function: 'domain::name' or 'name'
        domain, _, op = name.rpartition("::")
        return tuple(
            k for k, n in zip(main.keys, main.model.graph.node) if (n.domain or "", n.op_type) == (domain, op)
        )
    return tuple(k for k in sorted(main.keys, key=len, reverse=True) if top.path.startswith(k + "/"))[:1]


def _node_proposals(ctx, node, key, rules, model, values) -> list[Proposal]:
    out = []
    for rule in rules:
        if not matches(ctx, rule, node):
            continue
        try:
            hit = matched_any_input(ctx, rule, node)
            params = _substitute(rule.params, node, model, key, values or {}, rule.id, hit)
        except NeedsValue as exc:
            step, needs = None, exc.what
        except FixError:
            continue
        else:
            step, needs = Step(rule.primitive, params, rule=rule.id, note=rule.title), None
        what = rule.what.split(". ")[0].rstrip(".")
        text = f"{what} — {step.describe() if step else f'needs a value for {needs}'}"
        out.append(Proposal(rule, key, node.op_type, step, text, rule.safety, needs))
    return out


def _verify_dims(model: ModelProto, size: int | None) -> dict[str, int] | None:
    if not size:
        return None
    dims = {}
    for vi in model.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param:
                dims[d.dim_param] = size
    return dims


def _drop_last(workspace: Workspace) -> None:
    workspace.undo()
    workspace.discard_undone()


class Fingerprints:
    """`surgery.model.fingerprint` of the last few models asked, by the model object: a fix run asks for the same
    model's again and again (the loop's states, the checks' cache keys), and each is a serialization of the whole
    model (seconds at 100k nodes). Models are values here (fix primitives copy them); an edit in place that
    changes the model's `edit_stamp` is noticed, as GraphFacts notices it."""

    KEEP = 4

    def __init__(self) -> None:
        from surgery.graph import version_cache

        self._seen: dict[int, tuple[ModelProto, tuple, str]] = {}
        self.computed = 0  # serializations made (tests count them)
        version_cache(self)

    def forget(self, model: ModelProto) -> None:
        """Drop `model`'s fingerprint: the workspace dropped that version (surgery.graph.forget_version)."""
        hit = self._seen.get(id(model))
        if hit is not None and hit[0] is model:
            del self._seen[id(model)]

    def __call__(self, model: ModelProto) -> str:
        from surgery.graph import edit_stamp
        from surgery.model import fingerprint

        stamp = edit_stamp(model)
        hit = self._seen.get(id(model))
        if hit is not None and hit[0] is model and hit[1] == stamp:
            return hit[2]
        fp = fingerprint(model)
        self.computed += 1
        self._seen.pop(id(model), None)
        self._seen[id(model)] = (model, stamp, fp)
        while len(self._seen) > self.KEEP:
            self._seen.pop(next(iter(self._seen)))
        return fp


def check_targets(
    model: ModelProto, targets: list[str], base_dir=None, depth=None, prints: Fingerprints | None = None
) -> list:
    """`surgery.diagnose.check_model` (a report per target, in order, cached; unknown targets raise before any
    backend runs), the model's fingerprint from `prints` where it knows it."""
    from surgery.backends import get_backend
    from surgery.diagnose import check_one

    for target in targets:
        get_backend(target)
    fp = (prints or Fingerprints())(model)
    return [check_one(model, target, base_dir, fp=fp, depth=depth) for target in targets]


@dataclass
class Guard:
    """What the steps of one fix run are held to against the targets it fixes for, beyond their numbers: a step
    that touches refused nodes and leaves every one of them refused for the same reason did not cure them; a step
    that turns a target from accepting to rejecting regresses it (undone unless `allow_regress`).

    Checks cost (a TVM or OpenVINO check of a detector takes seconds), so a step is checked only where one of
    these can happen: it acts on a node the targets refuse, or some target accepts the model it starts from.
    Between such steps the reports are kept as last checked (`stale`): the refusals they list stand until a step
    acts on them, and they are checked again before a step whenever one of them accepted."""

    targets: list[str]
    base_dir: str | None = None
    depth: str | None = None
    allow_regress: bool = False
    reports: list | None = None
    stale: bool = False  # `reports` are of an earlier model: steps since acted on no refused node
    prints: Fingerprints = field(default_factory=Fingerprints)  # the run's models' fingerprints

    def check(self, model: ModelProto) -> list:
        return check_targets(model, self.targets, self.base_dir, self.depth, self.prints)

    def current(self, model: ModelProto) -> list:
        """The reports a step is judged against: checked again where they are missing, or stale while a target
        accepted (a step could then regress it)."""
        if self.reports is None or (self.stale and self._accepting(self.reports)):
            self.reports, self.stale = self.check(model), False
        return self.reports

    def needs_check(self, proposal: Proposal, before: list) -> bool:
        """Whether the step's result must be checked: it acts on a refused node, or a target accepted before."""
        refused = _refusals(before)
        return self._accepting(before) or any(n in refused for n in (proposal.nodes or (proposal.node,)))

    def settle(self) -> None:
        """A step was applied without a check: the reports stay as they were, stale."""
        self.stale = True

    @staticmethod
    def _accepting(reports: list) -> bool:
        from surgery.verdict import Outcome

        return any(r.outcome is Outcome.ACCEPTS for r in reports)

    def judge(self, proposal: Proposal, before: list, after: list) -> list[str]:
        """Raise StepRefused when the step did not cure or regresses a target (not allowed); returns the targets
        it regressed where that is allowed."""
        from surgery.verdict import Outcome

        said_before, said_after = _refusals(before), _refusals(after)
        meant = [n for n in (proposal.nodes or (proposal.node,)) if n in said_before]
        uncured = [n for n in meant if said_before[n] & said_after.get(n, set())]
        if meant and len(uncured) == len(meant):
            backend, _, words = sorted(said_before[uncured[0]])[0]
            raise StepRefused(
                "did-not-cure",
                f"{proposal.rule.id}: did not cure, undone: {proposal.op_type} '{uncured[0]}' is still refused "
                f"by {backend} for the same reason ({first_line(words, 160)})",
                tuple(uncured),
            )
        regressed = []
        for b, a in zip(before, after):
            if b.outcome is Outcome.ACCEPTS and a.outcome is Outcome.REJECTS:
                why = next(iter(a.reasons()), "")
                regressed.append(f"{a.backend} from accepting to rejecting ({why})")
        if regressed and not self.allow_regress:
            raise StepRefused(
                "regresses",
                f"{proposal.rule.id}: undone: it turns {'; '.join(regressed)}. Note: --allow-regress takes it",
            )
        return regressed


def _refusals(reports: list) -> dict[str, set[tuple[str, str, str]]]:
    """node key -> what the targets refuse it for: (target, code + check ids, words or explanation)."""
    from surgery.verdict import Status

    out: dict[str, set] = {}
    for r in reports:
        for v in r.verdicts:
            if v.status is Status.REJECTED:
                why = " ".join([v.code, *v.checks])
                out.setdefault(v.node, set()).add((r.backend, why, v.words or v.explanation))
    return out


def apply(
    workspace: Workspace,
    proposal: Proposal,
    verify: bool = True,
    *,
    targets: list[str] | None = None,
    check: bool = True,
    depth: str | None = None,
    allow_cut: bool = False,
    guard: Guard | None = None,
    meanwhile: Callable[[ModelProto], None] | None = None,
) -> Applied:
    """Apply a proposal as a workspace step; verify it against the model before it (onnxruntime, seeded
    inputs); with `targets` (and `check`), check them before and after. A step that breaks a promise is undone
    and raised as StepRefused with its reason: it loses an original output (a cut: taken with `allow_cut`), an
    exact fix changed the numbers, an approximate one passed its rule's bound, or (with a `guard`) it did not
    cure the refusal it was meant for or regresses a target.

    The verification runs in a thread while this one checks the targets on the step's result and then calls
    `meanwhile(result)` (the next round's matching): most of a verification is a wait on onnxruntime in its
    isolated worker (at 50k nodes ~9 s of a 13 s verification), which a second core spends on that work. The
    outcome is judged as if in sequence: a broken number first, then the targets."""
    from surgery.verify import lost_outputs

    if proposal.step is None:
        raise NeedsValue(proposal.rule.id, proposal.needs or "a value")
    base = workspace.original.base_dir
    before_model = workspace.current
    before = []
    targets = targets if check else None
    if guard is not None:
        before = guard.current(before_model)
    elif targets:
        from surgery.diagnose import check_model

        before = check_model(before_model, targets, base, depth=depth)
    workspace.apply(replace(proposal.step, node=proposal.node))  # the step records the node it acted on
    result = workspace.current
    lost = lost_outputs(before_model, result)
    if lost and not allow_cut:
        _drop_last(workspace)
        raise StepRefused(
            "cut",
            f"{proposal.rule.id}: a cut, not a repair, undone: {'; '.join(lost)}. Note: allow the cut to take it "
            "(fix --allow-cut; the app's Take the cut): the host then runs what the step removes",
            detail="; ".join(lost),
        )

    def verification() -> VerifyReport:
        dims = _verify_dims(before_model, proposal.rule.verify_dims)
        return _verify(
            before_model,
            result,
            base_dir=base,
            safety=proposal.safety,
            dims=dims,
            feeds=_pinned_feeds(before_model, pins_in([proposal.step]), dims),
            bound=proposal.rule.bound,
        )

    checked = guard is not None and guard.needs_check(proposal, before)
    after, report = [], None
    pending = Beside(verification) if verify else None
    try:
        if pending is not None:
            pending.in_worker()  # its own analysis first, alone: the worker starts sooner
        if checked:
            after = guard.check(result)
        elif guard is None and targets:
            from surgery.diagnose import check_model

            after = check_model(result, targets, base, depth=depth)
        if meanwhile is not None:
            meanwhile(result)
        report = pending.result() if pending is not None else None
    except BaseException:
        # a crash, a failed check, Ctrl-C: the verification's worker is stopped, not awaited
        if pending is not None:
            pending.cancel()
        _drop_last(workspace)  # a step not verified and checked does not stay behind
        raise
    if report is not None and report.status == "failed" and proposal.safety == "exact":
        _drop_last(workspace)
        raise StepRefused(
            "not-exact",
            f"{proposal.rule.id}: an exact fix changed the results, undone: {report.summary()}",
        )
    if report is not None and report.status == "failed" and report.bound is not None:
        _drop_last(workspace)
        raise StepRefused(
            "beyond-bound",
            f"{proposal.rule.id}: beyond its bound ({report.bound:.2%} of each output's range), undone: "
            f"{report.summary()}",
        )
    regressed = []
    if checked:
        try:
            regressed = guard.judge(proposal, before, after)
        except StepRefused:
            _drop_last(workspace)
            raise
        guard.reports, guard.stale = after, False
    elif guard is not None:
        guard.settle()
    host = _removed_upstream(before_model, result) if lost else []
    return Applied(proposal, report, before, after, lost, host, regressed)


def _removed_upstream(before: ModelProto, after: ModelProto) -> list[str]:
    """The nodes of `before` that `after` no longer computes and that fed a lost output: what a cut sends to the
    host, as "Unique '/post/Unique'"."""
    from surgery.graph import all_inputs, node_keys

    produced = {o for n in after.graph.node for o in n.output if o}
    producer = {o: i for i, n in enumerate(before.graph.node) for o in n.output if o}
    keys = node_keys(before.graph.node)
    need, stack = set(), [o.name for o in before.graph.output]
    while stack:
        i = producer.get(stack.pop())
        if i is None or i in need or all(o in produced for o in before.graph.node[i].output if o):
            continue
        need.add(i)
        stack.extend(all_inputs(before.graph.node[i]))
    return [f"{before.graph.node[i].op_type} '{keys[i]}'" for i in sorted(need)]


SAFETY_ORDER = ("exact", "approximate", "changes-semantics")


def pins_in(steps: list[Step]) -> dict[str, Any]:
    """The inputs the steps pin to constants (pin_input, from --input-value or a rule), by name: the one place
    verification learns which values the original must be fed so that a pin alone compares equal."""
    pins = {}
    for step in steps:
        if step.fix != "pin_input":
            continue
        for params in step.params.get("each") or [step.params]:
            pins[params["input"]] = params["value"]
    return pins


def _pinned_feeds(original: ModelProto, pins: dict[str, Any], dims: dict[str, int]) -> dict | None:
    """Seeded inputs for the original with the pinned inputs at their values (None: no pins, or no inputs)."""
    if not pins:
        return None
    import numpy as np
    from onnx import helper

    from surgery.feeds import seeded_inputs
    from surgery.graph import tensor_info_from_type

    try:
        feeds = seeded_inputs(original, seed=0, dims=dims, default_dim=1)
    except ValueError:
        return None
    types = {vi.name: tensor_info_from_type(vi.name, vi.type) for vi in original.graph.input}
    for name, value in pins.items():
        if name not in types:
            continue
        info = types[name]
        array = np.asarray(value).astype(helper.tensor_dtype_to_np_dtype(info.dtype))
        feeds[name] = array.reshape([1] * len(info.shape)) if array.size == 1 and info.shape else array
    return feeds


def verify_result(workspace: Workspace, applied: list[Applied]) -> VerifyReport | None:
    """The fixed model against the original, at the least safe class among the steps (None: no steps). Symbolic
    dims take the largest `verify_dims` the applied rules ask for. Inputs pinned to constants anywhere in the
    recipe are fed their pinned values in the original, so a pin alone compares equal."""
    pins = pins_in(workspace.recipe)
    if not applied and not pins:
        return None
    if len(applied) == 1 and len(workspace.recipe) == 1 and applied[0].verification is not None:
        return applied[0].verification  # the one step was already checked against the original
    worst = max((a.proposal.safety for a in applied), key=SAFETY_ORDER.index, default="exact")
    if pins and not applied:
        worst = "changes-semantics"
    size = max((a.proposal.rule.verify_dims or 0 for a in applied), default=0)
    original = workspace.original.proto
    dims = _verify_dims(original, size)
    return _verify(
        original,
        workspace.current,
        base_dir=workspace.original.base_dir,
        safety=worst,
        dims=dims,
        feeds=_pinned_feeds(original, pins, dims),
    )


def batch(proposals: list[Proposal], index: dict[str, int]) -> Proposal:
    """The proposals of one rule on several nodes as one step: one recipe entry, one verification. Identical
    steps are one call; folds merge into one call (their `tensors` lists); a primitive registered with `batch`
    gets that parameter as a list (one call, its graph facts computed once); other primitives get an `each`
    step, applied from the last node in the graph to the first so that index-based node keys (Op#12) stay
    valid while nodes are replaced."""
    if len(proposals) == 1:
        return proposals[0]
    first = proposals[0]
    steps = [p.step for p in proposals]
    rest = [{k: v for k, v in s.params.items() if k != "tensors"} for s in steps]
    many = get_fix(first.step.fix).batch  # a parameter the primitive takes as a list: one call for all
    others = [{k: v for k, v in s.params.items() if k != many} for s in steps]
    if all(s.params == steps[0].params for s in steps):
        params = dict(steps[0].params)  # the same action wherever it matched (e.g. inline every function)
    elif (
        first.step.fix == "fold_constants"
        and all("tensors" in s.params for s in steps)
        and all(r == rest[0] for r in rest)
    ):
        tensors = list(dict.fromkeys(t for s in steps for t in s.params["tensors"]))
        params = {**rest[0], "tensors": tensors}
    elif many and all(many in s.params for s in steps) and all(o == others[0] for o in others):
        params = {**others[0], many: list(dict.fromkeys(s.params[many] for s in steps))}
    else:
        ordered = sorted(proposals, key=lambda p: -index.get(p.node, -1))
        params = {"each": [p.step.params for p in ordered]}
    step = Step(first.step.fix, params, rule=first.rule.id, note=first.rule.title)
    ops = {p.op_type for p in proposals}
    what = first.rule.what.split(". ")[0].rstrip(".")
    return Proposal(
        first.rule,
        first.node,
        first.op_type if len(ops) == 1 else "/".join(sorted(ops)),
        step,
        f"{what} — {step.describe()}",
        first.safety,
        nodes=tuple(p.node for p in proposals),
    )


def run_rules(
    workspace: Workspace,
    rules: list[Rule],
    targets: list[str] | None = None,
    max_rounds: int = 200,
    *,
    values: dict[str, Any] | None = None,
    verify: bool = True,
    only=None,
    log=None,
    guard: Guard | None = None,
    allow_cut: bool = False,
    undone: list[tuple[str, str]] | None = None,
) -> tuple[list[Applied], list[str]]:
    """Apply matching rules until nothing changes. Each round proposes on the current model and applies the
    first rule that matches, on every node it matches at once (one step, one verification: see `batch`); a
    batch that fails verification is halved until the node that breaks it is found and refused, the rest is
    proposed again. Node keys can move after a change, so matching starts again each round. A step that brings
    back an earlier model (two rules undoing each other) is undone; at most `max_rounds` steps.
    `only(model) -> node keys` limits the rules to those nodes (e.g. the nodes a target rejects). A step that
    breaks a promise is undone (see `apply`: cuts unless `allow_cut`; with a `guard`, steps that do not cure or
    regress a target); a step that did not cure some of a batch's nodes is tried again without them; each such
    step is also added to `undone` as (StepRefused.kind, its line).
    Returns what was applied and what was not (with the reason)."""
    applied: list[Applied] = []
    refused: list[str] = []
    tried: set[tuple[str, str, str]] = set()
    prints = guard.prints if guard is not None else Fingerprints()
    seen = {prints(workspace.current)}

    def refuse(line: str, kind: str | None = None) -> None:
        if line not in refused:
            refused.append(line)
            if kind and undone is not None:
                undone.append((kind, line))

    ahead: list[tuple[ModelProto, tuple, Context, list[Proposal]]] = []  # at most one: the last step's result

    def look_ahead(model: ModelProto) -> None:
        """The next round's proposals on a step's result, made while its verification runs (see `apply`)."""
        from surgery.graph import edit_stamp

        ctx = Context(model)
        ahead[:] = [(model, edit_stamp(model), ctx, propose(model, rules, targets, values, ctx=ctx))]

    def proposals_now() -> tuple[Context, list[Proposal]]:
        """This round's proposals: the look-ahead's where it was made on this very model, else made now."""
        from surgery.graph import edit_stamp

        model = workspace.current
        if ahead and ahead[0][0] is model and ahead[0][1] == edit_stamp(model):
            return ahead.pop()[2:]
        ahead.clear()
        ctx = Context(model)
        return ctx, propose(model, rules, targets, values, ctx=ctx)

    def attempt(group: list[Proposal], index: dict[str, int]) -> tuple[Applied | None, list[Proposal]]:
        """Apply the group as one step; on failure, halve it until the node that breaks it is refused (the rest
        is proposed again next round). Returns what was applied and the proposals refused."""
        proposal = batch(group, index)
        try:
            step = apply(workspace, proposal, verify, guard=guard, allow_cut=allow_cut, meanwhile=look_ahead)
            return step, []
        except StepRefused as exc:
            rest = [p for p in group if p.node not in exc.nodes]
            if exc.nodes and rest:  # some of the batch did not cure: those are refused, the rest tried again
                refuse(str(exc), exc.kind)
                done, failed = attempt(rest, index)
                return done, failed + [p for p in group if p.node in exc.nodes]
            if len(group) == 1 or exc.nodes:
                refuse(f"{proposal.rule.id} on '{proposal.node}': {exc}", exc.kind)
                return None, group
        except FixError as exc:
            if len(group) == 1:
                refuse(f"{proposal.rule.id} on '{proposal.node}': {exc}")
                return None, group
        except Exception as exc:  # a primitive's bug must not lose the steps already made
            if len(group) == 1:
                error = f"{type(exc).__name__}: {exc}"
                refuse(f"{proposal.rule.id} on '{proposal.node}': the fix failed: {error}")
                return None, group
        return attempt(group[: len(group) // 2], index)

    for _ in range(max_rounds):
        state = prints(workspace.current)
        eligible = only(workspace.current) if only else None
        ctx, proposals = proposals_now()
        ready = []
        for proposal in proposals:
            if (
                eligible is not None
                and proposal.node not in eligible
                and not eligible.intersection(proposal.owners)
            ):
                continue
            if (state, proposal.rule.id, proposal.node) in tried:
                continue
            if proposal.step is None:
                tried.add((state, proposal.rule.id, proposal.node))
                refuse(
                    f"{proposal.rule.id} on '{proposal.node}': {NeedsValue(proposal.rule.id, proposal.needs)}"
                )
                continue
            ready.append(proposal)
        if not ready:
            break
        group = [p for p in ready if p.rule.id == ready[0].rule.id]
        if verify:
            prewarm_verification()  # its worker starts while the step is applied and analysed
        done, failed = attempt(group, ctx.facts.index)
        tried.update((state, p.rule.id, p.node) for p in failed)
        if done is None:
            continue
        now = prints(workspace.current)
        if now in seen:  # no change, or back to an earlier model: a loop
            _drop_last(workspace)
            if guard is not None:
                guard.reports = None  # they were the undone model's
            tried.update((state, p.rule.id, p.node) for p in group)
            why = "changed nothing" if now == state else "would bring back an earlier model (loop)"
            refuse(f"{done.proposal.rule.id} on '{done.proposal.node}': {why}")
            continue
        seen.add(now)
        applied.append(done)
        if log:
            log(done)
    else:
        refuse(f"stopped after {max_rounds} steps; rules may still match. Note: raise max_rounds")
    return applied, refused
