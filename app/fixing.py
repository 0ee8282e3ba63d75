"""Rules and fixes on the current model: the rules, what they propose for a node (cached), what a rule matches,
the preview of a step, applying, undoing and redoing steps with their numbers, Fix all, and saving a step as a
rule; the lessons walked through."""

from __future__ import annotations

import streamlit as st
from checks import depth
from graph_facts import _rule_context, builtin_rules, facts
from session import state, user_rules_dir, version, workspace
from session_store import remember_session


def undo() -> None:
    state().notice = None
    workspace().undo()
    state().last_applied = state().last_verification = None
    remember_session()


def redo() -> None:
    state().notice = None
    workspace().redo()
    remember_session()


@st.cache_resource(show_spinner=False)
def lesson_failure(name: str):
    """What the lesson's backend says about its model (a Verdict, a Message, or None), from a real check."""
    from surgery.usecases.lesson import failure

    return failure(name)


def all_rules():
    """Built-in rules plus the user's saved rules (a broken user rule file is reported, not fatal)."""
    from surgery.rulebook import RuleError, load_rules

    rules = list(builtin_rules())
    mine = user_rules_dir()
    if mine.is_dir() and any(mine.glob("*.y*ml")):
        try:
            rules += load_rules([mine])
        except RuleError as exc:
            state().error = str(exc)
    return rules


def proposals(node_key: str | None = None, values: dict | None = None):
    """Rule proposals for the current model and targets (for one node when given); `values` fill the
    rules' asked values (e.g. {"shape": [1, 3, 224, 224]}). Cached per model version, targets and rules."""

    rules = all_rules()
    fp, model = version(), workspace().current
    return _proposals(
        fp,
        tuple(state().targets),
        tuple((r.id, r.path) for r in rules),
        repr(sorted((values or {}).items())),
        node_key,
        model,
        rules,
        values,
        _rule_context(fp, model, facts()),
    )


def _suggested(node_key: str, reports, find) -> dict:
    """rule id -> the first Suggestion `find(ctx, verdict, target, rules)` makes for the node, over the targets'
    verdicts on it (surgery.rulebook.suggest: at_readers, in_bodies)."""
    ctx = _rule_context(version(), workspace().current, facts())
    rules = all_rules()
    found = {}
    for r in reports:
        v = r.by_node().get(node_key)
        if v is not None:
            for s in find(ctx, v, r.backend, rules):
                found.setdefault(s.rule, s)
    return found


def fixes_at_readers(node_key: str, reports) -> list:
    """For a refused node no rule fixes itself: the rules whose fix removes or repairs it with a reader they match
    (surgery.rulebook.suggest.at_readers, as `check` suggests them), one per rule."""
    from surgery.rulebook.suggest import at_readers

    return list(_suggested(node_key, reports, at_readers).values())


def fixes_in_bodies(node_key: str, reports) -> list:
    """For a node refused for what sits in its body (an If branch, a Loop body, a local function): the proposals
    `fix` would apply there, at the body node the verdict names (surgery.rulebook.suggest.in_bodies)."""
    from surgery.rulebook.suggest import in_bodies

    wanted = _suggested(node_key, reports, in_bodies)
    return [p for s in wanted.values() for p in proposals(s.at) if p.rule.id == s.rule and p.node == s.at]


def why_no_fix(node_key: str, reports) -> list[str]:
    """For a refused node no rule fixes: the nearest misses of the rules meant for its refusal, or that no rule
    answers it (surgery.rulebook.tracer.unrepaired, as `fix` prints them)."""
    from surgery.rulebook.tracer import unrepaired

    refused = [
        r for r in reports if any(v.node == node_key and v.status.value != "supported" for v in r.verdicts)
    ]
    return [line for key, line in unrepaired(workspace().current, refused, all_rules()) if key == node_key]


@st.cache_resource(show_spinner=False, max_entries=64)
def _proposals(
    fp: str,
    targets: tuple,
    rules_key: tuple,
    values_key: str,
    node: str | None,
    _model,
    _rules,
    _values,
    _ctx,
):
    """The rules run over the selected node only (`propose(only=...)`: the same proposals as a run over the
    whole model gives that node): selecting a node in a 100k-node model must not wait for every other node."""
    from surgery.rulebook import propose

    only = None if node is None else {node}
    return propose(_model, _rules, list(targets), values=_values, ctx=_ctx, only=only)


def matches(proposal, values: dict | None = None) -> list:
    """Every proposal of `proposal`'s rule over the whole model for the chosen targets (the node's own first):
    what `fix` would batch into one step in its first round."""
    rule = proposal.rule
    fp, model = version(), workspace().current
    found = _matches(
        fp,
        tuple(state().targets),
        rule.id,
        rule.path,
        repr(sorted((values or {}).items())),
        model,
        rule,
        values,
        _rule_context(fp, model, facts()),
    )
    return sorted(found, key=lambda p: p.node != proposal.node)


@st.cache_resource(show_spinner=False, max_entries=32)
def _matches(fp: str, targets: tuple, rule_id: str, rule_path, values_key: str, _model, _rule, _values, _ctx):
    from surgery.rulebook import propose

    return [
        p for p in propose(_model, [_rule], list(targets), values=_values, ctx=_ctx) if p.step is not None
    ]


def batched(group: list):
    """The proposals of one rule as one step (surgery.rulebook.engine.batch): one recipe entry, one check."""
    from surgery.rulebook.engine import batch

    return batch(group, facts().index)


def parse_value(text: str, what: str = "value"):
    """A value typed for a rule's question: a shape (1x3x224x224, non-negative dims) where it asks for one, else a
    finite number or a list of them (surgery.specs). Raises ValueError with one line to show."""
    from surgery.specs import parse_answer

    return parse_answer(text, what)


def preview(proposal):
    """What applying the proposal would change (surgery.preview.StepPreview): nodes removed and added, and each
    target's rejected count before and after."""
    from surgery.preview import preview_step

    ws = workspace()
    return preview_step(ws.current, proposal.step, list(state().targets), ws.original.base_dir)


def apply_proposal(proposal, allow_cut: bool = False) -> None:
    """Apply as `fix` does, each promise held (surgery.rulebook.engine.apply); a step undone for breaking one is
    said in the sidebar, and a cut is remembered so that the page can offer to take it (`allow_cut`)."""
    from surgery.fixes import FixError
    from surgery.rulebook import apply
    from surgery.rulebook.engine import StepRefused

    s = state()
    s.refused_cut, s.notice = None, None
    try:
        s.last_applied = apply(workspace(), proposal, check=False, allow_cut=allow_cut)
        s.error = None
    except StepRefused as exc:
        if exc.kind == "cut":  # said on the rule's card, with the button that takes it
            s.refused_cut = (proposal.rule.id, proposal.node, exc.detail)
        else:
            s.error = str(exc)
        return
    except FixError as exc:
        s.error = str(exc)
        return
    except Exception as exc:  # a primitive's bug: said in one line, the workspace as it was (apply undoes)
        from surgery.text import error_line

        s.error = f"{proposal.rule.id}: the fix failed: {error_line(exc)}"
        return
    v = s.last_applied.verification
    s.last_verification = None if v is None else (v.status, s.last_applied.summary())
    _numbers(workspace().cursor, s.last_applied)
    remember_session()


def _numbers(n: int, applied) -> None:
    """Keep recipe step `n`'s own verification (status, line) for the recipe's list: every step shows its
    numbers, not only the last one."""
    v = applied.verification
    numbers = state().setdefault("step_numbers", {})
    numbers[str(n)] = None if v is None else [v.status, v.summary()]


def step_numbers(n: int) -> tuple[str, str] | None:
    """(status, line) of recipe step `n`'s verification when it was applied here, else None."""
    got = (state().get("step_numbers") or {}).get(str(n))
    return tuple(got) if isinstance(got, list) and len(got) == 2 else None


def fix_all(log=None) -> None:
    """Every rule for the chosen targets until nothing changes, as `onnx-surgery fix` runs them (the fix use case,
    surgery.usecases.fix): each step a recipe entry, undone one by one; steps that break a promise are undone and
    listed. `log(line)` hears of each step as it lands. The outcome's summary is kept for the page."""
    from surgery.text import error_line
    from surgery.usecases.fix import FixRequest, fix

    s = state()
    ws = workspace()

    def said(done) -> None:
        if log:
            log(
                f"{len(ws.recipe)}. {done.proposal.rule.id} on {done.proposal.where()} [{done.proposal.safety}]"
            )

    start = ws.cursor
    try:
        outcome = fix(ws, FixRequest(list(s.targets), all_rules(), depth=depth()), log=said)
    except Exception as exc:  # a backend that cannot load, a primitive's bug: one line, the steps made stay
        s.error = f"Fix all: {error_line(exc)}"
        return
    for k, done in enumerate(outcome.applied, start + 1):
        _numbers(k, done)
    lines = [f"{len(outcome.applied)} step(s) applied"]
    for b, a in zip(outcome.before, outcome.after):
        lines.append(
            f"{a.label}: {b.outcome.value} → {a.outcome.value} ({len(b.rejected)} → {len(a.rejected)} refused)"
        )
    lines += [f"undone ({kind}): {line}" for kind, line in outcome.undone]  # the numbers: the recipe's box
    s.fix_summary = lines
    v = outcome.overall
    s.last_verification = None if v is None else (v.status, f"original vs fixed: {v.summary()}")
    remember_session()


def save_rule(n: int, node_key: str):
    """Save recipe step `n` (1-based), as applied to `node_key`, as a rule in the user's rules folder."""
    from surgery.rulebook.save import rule_from_step

    ws = workspace()
    return rule_from_step(
        ws.model_at(n - 1), ws.steps[n - 1], node_key, user_rules_dir(), base_dir=ws.original.base_dir
    )


def draft_rule(n: int, node_key: str):
    """What saving recipe step `n` as a rule would write, not written: (path, YAML text, the node keys it matches
    in the model the step was applied to)."""
    from surgery.rulebook.save import draft_rule as draft
    from surgery.rulebook.save import matches_in

    ws = workspace()
    model = ws.model_at(n - 1)
    path, text, rule = draft(
        model, ws.steps[n - 1], node_key, user_rules_dir(), base_dir=ws.original.base_dir
    )
    return path, text, matches_in(rule, model)


@st.cache_resource(show_spinner=False, max_entries=16)
def walkthrough(name: str):
    """The lesson run end to end by the library (surgery.usecases.lesson.walk_through), once per server."""
    from surgery.usecases.lesson import walk_through

    return walk_through(name, builtin_rules())
