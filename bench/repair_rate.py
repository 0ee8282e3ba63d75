"""How many real models does `fix` repair? For every corpus model (bench/corpus/build.py) and every target: the
verdict before, the steps `fix` applies, the verdict after, the verification of the fixed model against the
original, and for every model still refused the tracer's one-line reason no rule applies.

    python bench/repair_rate.py [--targets tensorrt tensorrt-static@8.2 ...] [--families ocr vad ...]
                                [--split tune|holdout|all] [--limit N] [--timeout 300] [--json FILE] [--table]
                                [--no-answers] [--from-json FILE]

The rate per target counts the models the target rejects before `fix` (outcome "rejects") and, separately, those
without string, sequence or optional tensors (what TensorRT could take at all): repaired = the target accepts
the fixed model and the verification did not fail. Checks run at depth parse (every backend's parser /
importer / frontend; `check --depth build` is measured by bench/check_vs_build.py). Each model runs under a time
limit; a model that runs out is reported as such.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CORPUS = Path(os.environ.get("ONNX_SURGERY_CORPUS", "~/.cache/onnx-surgery/corpus")).expanduser()
TARGETS = [
    "tensorrt",
    "tensorrt-static@8.2",
    "tensorrt-static@8.6",
    "tensorrt-static@10.15",
    "onnxruntime",
    "openvino",
    "tvm",
]


class OutOfTime(Exception):
    pass


def _alarm(signum, frame):
    raise OutOfTime()


def test_values(path: Path) -> dict:
    """A node test's first data set by input name: the answers a user gives when a rule asks for the value of a
    configuration input (pin-config-input's `$ask:value`). Empty for models without one."""
    import onnx
    from onnx import numpy_helper

    data = path.parent / "test_data_set_0"
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


def repair(path: Path, target: str, rules, max_steps: int, answers: dict | None = None) -> dict:
    """One model, one target, through the `fix` use case (surgery.usecases.fix, as the CLI runs it): before,
    steps, after, verification, why still refused, and the steps undone because they broke a promise (a cut,
    beyond the rule's bound, did not cure), counted apart. When the model is still refused and a rule asks for a
    value the model's test data has (`answers`), the user's answers are given and `fix` runs again: those rows say
    which inputs were pinned."""
    from surgery.backends.base import Outcome
    from surgery.diagnose import check_one
    from surgery.model import load_model
    from surgery.rulebook.engine import verify_result
    from surgery.rulebook.tracer import unrepaired
    from surgery.usecases.fix import FixRequest, fix
    from surgery.verify import lost_outputs
    from surgery.workspace import Workspace

    model = load_model(path)
    ws = Workspace(model)
    base = model.base_dir
    before = check_one(ws.current, target, base, depth="parse")
    row = {"target": target, "before": before.outcome.value, "before_reasons": before.reasons()[:2]}
    if before.outcome is not Outcome.REJECTS:
        return row
    request = FixRequest([target], rules, depth="parse", max_steps=max_steps)
    outcome = fix(ws, request, before=[before])
    applied, refused, after, overall = outcome.applied, outcome.refused, outcome.after[0], outcome.overall
    row["repaired_without_answers"] = after.outcome is Outcome.ACCEPTS
    if after.outcome is not Outcome.ACCEPTS and answers:
        request.values = {"value": answers}
        more = fix(ws, request, before=[after])
        if more.applied:
            applied += more.applied
            refused += more.refused
            after = more.after[0]
            overall = verify_result(ws, applied)  # the whole recipe, at the least safe class of both runs
        row["pinned"] = [
            a.proposal.step.params["input"] for a in more.applied if a.proposal.rule.id == "pin-config-input"
        ]
    row.update(
        steps=[f"{a.proposal.rule.id} on {a.proposal.op_type} '{a.proposal.node}'" for a in applied],
        cut=[a.proposal.rule.id for a in applied if a.cut],
        undone={kind: sum(f": {words}" in line for line in refused) for kind, words in UNDONE.items()},
        after=after.outcome.value,
        verification=None if overall is None else overall.status,
        verification_line=None if overall is None else overall.summary(),
        worst=None if overall is None else list(overall.worst()),
        not_applied=refused[:3],
        why=[line for _, line in unrepaired(ws.current, [after], rules)][:3],
        # what the promises are checked against, on the result: outputs lost, approximate steps kept past their bound
        outputs_lost=lost_outputs(model.proto, ws.current),
        beyond_bound_kept=[
            a.proposal.rule.id
            for a in applied
            if a.verification is not None
            and a.verification.bound is not None
            and a.verification.status == "failed"
        ],
    )
    return row


# the steps `fix` undoes because they break a promise, by the words it says them in (surgery.rulebook.engine)
UNDONE = {"cut": "a cut, not a repair", "beyond bound": "beyond its bound", "not cured": "did not cure"}


def _flags(record: dict) -> bool:
    return bool(record.get("has_strings") or record.get("has_sequences_or_optionals"))


def corpus_args(ap: argparse.ArgumentParser, targets: list[str]) -> None:
    """The options that choose corpus models, targets and how `fix` runs (shared with bench/split_rate.py)."""
    ap.add_argument("--targets", nargs="*", default=targets)
    ap.add_argument("--families", nargs="*", default=None)
    ap.add_argument("--split", choices=["tune", "holdout", "all"], default="all")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=100)
    ap.add_argument(
        "--no-answers",
        dest="answers",
        action="store_false",
        help="never answer a rule's question with the model's test data (node tests ship one)",
    )


def repair_record(rec: dict, target: str, rules, args) -> dict:
    """`repair` on one manifest record, answering questions from its test data unless --no-answers."""
    path = CORPUS / rec["path"]
    return repair(path, target, rules, args.max_steps, test_values(path) if args.answers else None)


def corpus_records(args) -> list[dict]:
    """The corpus models `args` choose (families, tune/holdout split, limit), in the manifest's order."""
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    records = [
        r
        for r in (manifest["models"] if isinstance(manifest, dict) else manifest)
        if (args.families is None or r["family"] in args.families)
        and (args.split == "all" or r["split"] == args.split)
    ]
    return records[: args.limit] if args.limit else records


def main() -> None:
    from surgery.backends.probe import use_disk_cache
    from surgery.rulebook import load_rules

    ap = argparse.ArgumentParser()
    corpus_args(ap, TARGETS)
    ap.add_argument("--timeout", type=float, default=300, help="seconds per model and target")
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--table", action="store_true", help="print the per-model table too")
    ap.add_argument("--from-json", help="print the tables of an earlier run's --json file, run nothing")
    args = ap.parse_args()
    if args.from_json:
        report(json.loads(Path(args.from_json).read_text()), args.table)
        return
    use_disk_cache()
    records = corpus_records(args)
    rules = load_rules()
    signal.signal(signal.SIGALRM, _alarm)
    rows = []
    t0 = time.perf_counter()
    for k, rec in enumerate(records):
        for target in args.targets:
            start = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, args.timeout)
            try:
                row = repair_record(rec, target, rules, args)
            except OutOfTime:
                row = {"target": target, "before": "out of time", "error": f"over {args.timeout:.0f} s"}
            except Exception as exc:  # a model this tool refuses: the row says so, the run goes on
                row = {"target": target, "before": "error", "error": f"{type(exc).__name__}: {exc}"[:300]}
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            row.update(
                model=rec["id"],
                family=rec["family"],
                split=rec["split"],
                strings=_flags(rec),
                seconds=round(time.perf_counter() - start, 2),
            )
            rows.append(row)
        print(f"  {k + 1}/{len(records)} models ({time.perf_counter() - t0:.0f} s)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    report(rows, args.table)


def _repaired(row: dict) -> bool:
    """Accepted after `fix` and verified against the original (exact within 1e-6, approximate with its error),
    with no step that changes what the model computes (a cut before an unsupported tail leaves that tail to the
    host: the model loses outputs; counted apart as 'cut'). A pinned configuration input is a repair: the model
    computes the same for the value it is pinned to, and is verified with that value."""
    return row.get("after") == "accepts" and row.get("verification") == "ok" and not _cut(row)


def _cut(row: dict) -> bool:
    if "cut" in row:
        return bool(row["cut"])
    return "removed from the changed model" in (
        row.get("verification_line") or ""
    )  # rows before 'cut' was kept


def _unverified(row: dict) -> bool:
    """Accepted after `fix`, but onnxruntime cannot run one side here (a plugin node, a custom op)."""
    return row.get("after") == "accepts" and row.get("verification") == "skipped"


def _rate(rows: list[dict]) -> str:
    n = sum(map(_repaired, rows))
    return f"{n}/{len(rows)} ({n / len(rows):.0%})" if rows else "-"


def _because(r: dict) -> str:
    if r.get("after") == "accepts":
        pinned = ", ".join(r.get("pinned") or [])
        return f"answered: {pinned}" if pinned else ""
    return (r.get("why") or [r.get("error", "")])[0][:140]


def _undone(rows: list[dict], kind: str) -> int:
    """Steps `fix` undid for breaking a promise, of one kind, summed over the rows (see UNDONE)."""
    return sum((r.get("undone") or {}).get(kind, 0) for r in rows)


def report(rows: list[dict], table: bool) -> None:
    print(
        "\nrepaired = accepted after fix and verified against the original, with every output kept (a step that "
        "loses one is undone; a cut is never a repair); 'plain' = no string, sequence or optional tensors;\n"
        "'answered' = a rule asked for a configuration input's value and the node test's data gave it "
        "(--input-value); 'steps undone' = steps fix undid for breaking a promise: a cut / beyond the rule's "
        "bound / did not cure (counted per model, a model may have several)\n"
    )
    print(
        "| target | models | plain repaired, **held out** | plain repaired, tune | rejected before | repaired "
        "| of which answered | accepted, not verifiable here | steps undone: cut / beyond bound / not cured "
        "| cannot confirm | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    by = defaultdict(list)
    for r in rows:
        kind = "node tests" if r.get("family") == "node-test" else "real models"
        by[(kind, r["target"])].append(r)
    for kind in ("real models", "node tests"):
        for (k, target), rs in by.items():
            if k != kind:
                continue
            rej = [r for r in rs if r["before"] == "rejects"]
            plain = [r for r in rej if not r["strings"]]
            answered = sum(1 for r in plain if _repaired(r) and not r.get("repaired_without_answers"))
            c = Counter(r["before"] for r in rs)
            undone = " / ".join(str(_undone(rej, u)) for u in UNDONE)
            print(
                f"| {target}, {kind} | {len(rs)} | {_rate([r for r in plain if r['split'] == 'holdout'])} | "
                f"{_rate([r for r in plain if r['split'] == 'tune'])} | {len(rej)} | {_rate(rej)} | {answered} | "
                f"{sum(map(_unverified, rej))} | {undone} | {c['cannot confirm']} | "
                f"{c['error'] + c['out of time']} |"
            )
    lost = [r for r in rows if r.get("outputs_lost")]
    past = [r for r in rows if r.get("beyond_bound_kept")]
    print(
        f"\npromises on the results: {len(lost)} row(s) whose fixed model lost an original output"
        + "".join(f"\n  {r['model']} [{r['target']}]: {r['outputs_lost'][0]}" for r in lost[:10])
        + f"; {len(past)} row(s) with an approximate step kept beyond its bound"
        + "".join(f"\n  {r['model']} [{r['target']}]: {', '.join(r['beyond_bound_kept'])}" for r in past[:10])
    )
    why = Counter()
    for r in rows:
        if r.get("before") == "rejects" and not _repaired(r):
            for line in r.get("why", [])[:1]:
                why[
                    (r["target"], line.split(" '")[0] if line.startswith("no rule") else line.split(":")[0])
                ] += 1
    print("\nstill refused after fix, by first reason (target, reason): count")
    for (target, reason), n in why.most_common(40):
        print(f"  {target}: {reason}: {n}")
    if table:
        print("\n| model | family | target | before | steps | after | verification | still refused because |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            if r["before"] in ("accepts", "unavailable"):
                continue
            print(
                f"| {r['model']} | {r['family']} | {r['target']} | {r['before']} | {len(r.get('steps', []))} | "
                f"{r.get('after', '')} | {r.get('verification') or ''} | "
                f"{_because(r)} |"
            )


if __name__ == "__main__":
    main()
