"""Walk a lesson through: its broken model checked, its rule proposed for the lesson's node, the step applied
and verified, and the model checked again, by the library alone (the app's Lessons page and the tests show it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from surgery.samples import SAMPLES, Lesson, build, lessons, sample_path


def failure(lesson: Lesson | str):
    """What the backend says about a lesson's model, from a real check (the Verdict of the lesson's node, or the
    report's first error message; None for a healthy model). Words are only ever the backend's own."""
    from surgery.diagnose import check_one

    if isinstance(lesson, str):
        lesson = SAMPLES[lesson][1]
    report = check_one(build(lesson.name), lesson.backend, depth=lesson.depth)
    if lesson.node is not None:
        return report.by_node().get(lesson.node)
    return next(iter(report.errors), None)


@dataclass
class Walkthrough:
    """A lesson run end to end by the library on a fresh workspace: the broken model's report and its verdict on
    the failing node, the rule's proposal (with the values it asks for, from the rule's example), the step
    applied and verified (`applied`, a rulebook Applied), and the report after. `error` says where it stopped:
    no proposal, or the fix refused."""

    lesson: Lesson
    before: Any  # the lesson backend's Report on the broken model
    verdict: Any = None  # its Verdict on the lesson's node
    values: dict | None = None
    proposal: Any = None
    applied: Any = None
    after: Any = None
    error: str | None = None


def walk_through(name: str, rules: list | None = None) -> Walkthrough:
    """Walk lesson `name` through (`rules`: where to find its rule, default the built-in rules)."""
    from surgery.diagnose import check_one
    from surgery.fixes import FixError
    from surgery.rulebook import apply, load_rules, propose
    from surgery.rulebook.engine import StepRefused
    from surgery.workspace import Workspace

    les = next(x for x in lessons() if x.name == name)
    ws = Workspace.open(sample_path(name))
    before = check_one(ws.current, les.backend, ws.original.base_dir, depth=les.depth)
    out = Walkthrough(les, before, before.by_node().get(les.node or ""))
    rule = next(r for r in (load_rules() if rules is None else rules) if r.id == les.rule)
    out.values = rule.example.get("values") or None  # a rule that asks (a shape) gets its example's answer
    found = [p for p in propose(ws.current, [rule], [les.backend], values=out.values) if p.step is not None]
    found.sort(key=lambda p: p.node != les.node)
    if not found:
        out.error = f"rule {les.rule} proposes nothing here for {les.backend}"
        return out
    out.proposal = found[0]
    try:
        try:
            out.applied = apply(ws, found[0], targets=[les.backend], depth=les.depth)
        except StepRefused as exc:
            if exc.kind != "cut":
                raise
            # a lesson whose fix is a cut teaches the cut: taken knowingly, and said so (Applied.cut, .host)
            out.applied = apply(ws, found[0], targets=[les.backend], depth=les.depth, allow_cut=True)
    except FixError as exc:
        out.error = str(exc)
        return out
    out.after = out.applied.after[0] if out.applied.after else None
    return out
