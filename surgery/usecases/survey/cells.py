"""One cell of a survey (one model, one target), run in a child process with a time limit (surgery.isolate): the
outcome `check` gives, the refused nodes by op type and by reason, the rules that answer them, and with `fix`
what the fix use case did. A crash or a time-out is the cell's "error", with its words."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

CELL = "surgery.usecases.survey.cells:survey_cell"  # what each cell runs in its child ("module:function")


# -- one cell (runs in the child) ------------------------------------------------------------------------------


_RULES: dict[tuple, list] = {}


def final_outcome(cell: dict) -> str:
    """The cell's outcome after the fixes (the outcome as checked when no fix ran)."""
    fixed = cell.get("fix")
    return fixed["outcome"] if fixed else cell["outcome"]


def rules_once(dirs: list[str] | None) -> list:
    from surgery.rulebook import load_rules

    key = tuple(dirs or ())
    if key not in _RULES:
        _RULES[key] = load_rules(dirs)
    return _RULES[key]


def test_values(path: Path) -> dict:
    """A model's first test data set by input name (ONNX's layout: test_data_set_0/input_K.pb beside the model):
    the answers given when a rule asks for the value of a configuration input (pin-config-input's `$ask:value`).
    Empty for a model without one."""
    import onnx
    from onnx import numpy_helper

    data = Path(path).parent / "test_data_set_0"
    if not data.is_dir():
        return {}
    model = onnx.load(path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    values = {}
    for i, vi in enumerate(inputs):
        name, f = vi.name, data / f"input_{i}.pb"
        if f.exists() and vi.type.HasField("tensor_type"):  # sequences and optionals are never configuration
            t = onnx.TensorProto()
            t.ParseFromString(f.read_bytes())
            values[name] = numpy_helper.to_array(t).tolist()
    return values


def describe(report, model, rules: list) -> dict[str, Any]:
    """A target's report as a survey cell: outcome, refused and unknown nodes by op type, the reasons (grouped as
    `check` groups them) each with the rules that answer it, and every such rule."""
    from surgery.rulebook.suggest import suggestions_for
    from surgery.text import first_line
    from surgery.verdict import Outcome, Status

    suggestions = suggestions_for(model, [report], rules) if (report.rejected or report.unknown) else {}
    reasons = []
    refusals = {id(m) for m in report.refusals}
    for m in report.errors:
        reasons.append(
            {
                "status": "rejected" if id(m) in refusals else "unknown",
                "stage": m.stage.value,
                "code": m.code,
                "reason": first_line(m.text()),
                "explanation": first_line(m.explanation) if m.words else "",
                "nodes": 0,
                "op_types": {},
                "rules": [],
            }
        )
    for g in report.groups():
        answering = sorted(
            {s.rule for v in g.verdicts for s in suggestions.get((report.backend, v.node), [])}
        )
        reasons.append(
            {
                "status": "rejected" if g.status is Status.REJECTED else "unknown",
                "stage": g.stage.value,
                "code": g.code,
                "reason": g.verdicts[0].reason() or first_line(g.explanation),
                "explanation": first_line(g.explanation),
                "nodes": len(g.verdicts),
                "op_types": dict(Counter(v.op_type for v in g.verdicts).most_common()),
                "rules": answering,
            }
        )
    cell = {
        "outcome": report.outcome.value,
        "label": report.label,
        "version": report.version,
        "depth": report.depth.value,
        "rejected": {
            "nodes": len(report.rejected),
            "by_op": dict(Counter(v.op_type for v in report.rejected).most_common()),
        },
        "unknown": {
            "nodes": len(report.unknown),
            "by_op": dict(Counter(v.op_type for v in report.unknown).most_common()),
        },
        "reasons": reasons,
        "rules": sorted({r for x in reasons for r in x["rules"]}),
        "seconds": round(report.seconds, 3),
    }
    if report.outcome is Outcome.UNAVAILABLE:
        cell["note"] = "; ".join(first_line(m.text()) for m in report.messages)
    return cell


def _fix_cell(model, report, target: str, rules: list, depth, max_steps: int, answers: dict | None) -> dict:
    """The fix use case on one target's refusal: its steps, the outcome after, the verification of the fixed
    model against the original, what was undone and why a refusal is left (surgery.rulebook.tracer)."""
    from surgery.rulebook.engine import verify_result
    from surgery.rulebook.tracer import unrepaired
    from surgery.usecases.fix import FixRequest, fix
    from surgery.verdict import Outcome
    from surgery.verify import lost_outputs
    from surgery.workspace import Workspace

    ws = Workspace(model, kept_states=0)  # headless: no history to look back at
    request = FixRequest([target], rules, depth=depth, max_steps=max_steps)
    outcome = fix(ws, request, before=[report])
    applied, refused, undone = outcome.applied, list(outcome.refused), list(outcome.undone)
    after, overall, pinned = outcome.after[0], outcome.overall, []
    first_try = after.outcome is Outcome.ACCEPTS
    if not first_try and answers:  # the user's answers (the model's test data), then fix again
        request.values = {"value": answers}
        more = fix(ws, request, before=[after])
        if more.applied:
            applied = applied + more.applied
            refused += more.refused
            undone += more.undone
            after = more.after[0]
            overall = verify_result(ws, applied)  # the whole recipe
        pinned = [
            a.proposal.step.params["input"] for a in more.applied if a.proposal.rule.id == "pin-config-input"
        ]
    cut = [a.proposal.rule.id for a in applied if a.cut]
    verification = None if overall is None else overall.status
    return {
        "steps": [
            {
                "rule": a.proposal.rule.id,
                "op_type": a.proposal.op_type,
                "nodes": list(a.proposal.nodes or (a.proposal.node,)),
                "safety": a.proposal.safety,
                "verification": None if a.verification is None else a.verification.status,
            }
            for a in applied
        ],
        "outcome": after.outcome.value,
        "rejected": {
            "nodes": len(after.rejected),
            "by_op": dict(Counter(v.op_type for v in after.rejected).most_common()),
        },
        "reasons": after.reasons()[:5],
        "verification": verification,
        "verification_line": None if overall is None else overall.summary(),
        "worst": None if overall is None else list(overall.worst()),
        "repaired": after.outcome is Outcome.ACCEPTS and verification == "ok" and not cut,
        "repaired_without_answers": first_try,
        "pinned": pinned,
        "cut": cut,
        "undone": [{"kind": kind, "line": line} for kind, line in undone],
        "not_applied": refused[:5],
        "why": [line for _, line in unrepaired(ws.current, [after], rules)][:5],
        "outputs_lost": lost_outputs(model.proto, ws.current),
        "beyond_bound_kept": [
            a.proposal.rule.id
            for a in applied
            if a.verification is not None
            and a.verification.bound is not None
            and a.verification.status == "failed"
        ],
    }


def survey_cell(
    path: str,
    target: str,
    depth: str | None = None,
    fix: bool = False,
    rules_dirs: list[str] | None = None,
    max_steps: int = 100,
    answers: bool = False,
    probe_cache: str | None = None,
) -> dict[str, Any]:
    """One model, one target: {"facts": the model's nodes and opsets, "cell": what `describe` says, with "fix"
    where `fix` and the target rejects}. Runs in a child process (`call_isolated`); raises what it cannot do."""
    from surgery.backends.probe import use_disk_cache
    from surgery.diagnose import check_one
    from surgery.model import load_model
    from surgery.verdict import Outcome

    if probe_cache:
        use_disk_cache(probe_cache)
    model = load_model(path, weights_in_file=True)  # a fix makes versions; they refer to the file's weights
    proto = model.proto
    facts = {
        "nodes": len(proto.graph.node),
        "opsets": {o.domain or "ai.onnx": o.version for o in proto.opset_import},
        "ir_version": proto.ir_version,
    }
    rules = rules_once(rules_dirs)
    report = check_one(proto, target, model.base_dir, depth=depth)
    cell = describe(report, proto, rules)
    if fix and report.outcome is Outcome.REJECTS:
        given = test_values(Path(path)) if answers else None
        cell["fix"] = _fix_cell(model, report, target, rules, depth, max_steps, given)
    from surgery.model import jsonable

    return jsonable({"facts": facts, "cell": cell})  # names that are not UTF-8 as \xNN escapes


def survey_cell_for_test(path: str, target: str, *args, **kwargs) -> dict[str, Any]:
    """`survey_cell`, except that a model whose file name has "crash" in it kills its child with SIGSEGV and one
    with "hang" never returns (the tests prove such a cell becomes "error" and the survey goes on)."""
    import signal

    name = Path(path).name
    if "crash" in name:
        os.kill(os.getpid(), signal.SIGSEGV)
    if "hang" in name:
        time.sleep(3600)
    return survey_cell(path, target, *args, **kwargs)


def isolated_cell(cell: str, args: tuple, timeout: float) -> dict[str, Any]:
    """Run `cell(*args)` in a child with a time limit; a crash, a timeout or an exception is an error cell with
    its words. Both engines run this (the local one in a thread, Ray as a task)."""
    from surgery.isolate import BackendCrash, call_isolated

    t0 = time.perf_counter()
    try:
        out = call_isolated(cell, *args, timeout=timeout)
    except BackendCrash as exc:
        tail = [line for line in (exc.detail or "").strip().splitlines() if line.strip()][-3:]
        out = {
            "facts": None,
            "cell": {
                "outcome": "error",
                "error": str(exc),
                "detail": "\n".join(tail),
                "timed_out": "timed out" in str(exc),
                "timeout": timeout,
            },
        }
    out["cell"]["seconds"] = round(time.perf_counter() - t0, 3)
    return out
