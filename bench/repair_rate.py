"""How many real models does `fix` repair? For every corpus model (bench/corpus/build.py) and every target: the
verdict before, the steps `fix` applies, the verdict after, the verification of the fixed model against the
original, and for every model still refused the tracer's one-line reason no rule applies.

    python bench/repair_rate.py [--targets tensorrt tensorrt-static@8.2 ...] [--families ocr vad ...]
                                [--split tune|holdout|all] [--limit N] [--timeout 300] [--workers N] [--no-cache]
                                [--json FILE] [--table] [--no-answers] [--from-json FILE]

One pipeline: the models go through `onnx-surgery survey --fix --depth parse` (surgery.usecases.survey: each cell
isolated with its time limit, cached, so a re-run with nothing changed reads its cells back); this bench turns
the survey's cells into its rows and tables.

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


def row_of(cell: dict, target: str) -> dict:
    """A survey cell (`onnx-surgery survey --fix --depth parse`, surgery.usecases.survey) as this bench's row:
    the verdict before, the steps `fix` applied, the verdict after, the verification of the fixed model against
    the original, why it is still refused, and the steps undone because they broke a promise (a cut, beyond the
    rule's bound, did not cure), counted apart. When a rule asked for a value the model's test data has, `fix`
    ran again with the answers: those rows say which inputs were pinned."""
    if cell["outcome"] == "error":
        before = "out of time" if cell.get("timed_out") else "error"
        return {"target": target, "before": before, "error": cell.get("error", "")[:300]}
    row = {
        "target": target,
        "before": cell["outcome"],
        "before_reasons": [r["reason"] for r in cell["reasons"]][:2],
    }
    fixed = cell.get("fix")
    if fixed is None:  # `fix` runs only where the target rejects the model
        return row
    row["repaired_without_answers"] = fixed["repaired_without_answers"]
    if fixed["pinned"]:
        row["pinned"] = fixed["pinned"]
    kinds = Counter(u["kind"] for u in fixed["undone"])
    row.update(
        steps=[f"{s['rule']} on {s['op_type']} '{s['nodes'][0]}'" for s in fixed["steps"]],
        cut=fixed["cut"],
        undone={kind: kinds[k] for kind, k in UNDONE_KINDS.items()},
        after=fixed["outcome"],
        verification=fixed["verification"],
        verification_line=fixed["verification_line"],
        worst=fixed["worst"],
        not_applied=fixed["not_applied"][:3],
        why=fixed["why"][:3],
        outputs_lost=fixed["outputs_lost"],
        beyond_bound_kept=fixed["beyond_bound_kept"],
    )
    return row


def repair(path: Path, target: str, rules, max_steps: int, answers: bool = False) -> dict:
    """One model, one target, in this process: the survey's own cell function (surgery.usecases.survey), as a
    row. `rules`: the default rules (the cell loads them itself)."""
    from surgery.usecases.survey.cells import survey_cell

    return row_of(survey_cell(str(path), target, "parse", True, None, max_steps, answers)["cell"], target)


# the steps `fix` undoes because they break a promise, by the words it says them in (surgery.rulebook.engine)
UNDONE = {"cut": "a cut, not a repair", "beyond bound": "beyond its bound", "not cured": "did not cure"}
UNDONE_KINDS = {"cut": "cut", "beyond bound": "beyond-bound", "not cured": "did-not-cure"}  # StepRefused.kind


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
    return repair(CORPUS / rec["path"], target, rules, args.max_steps, args.answers)


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
    """The corpus through `onnx-surgery survey --fix --depth parse` (one pipeline: its cells are cached, so a re-run
    with nothing changed reads them back), then this bench's tables."""
    from surgery.usecases.survey import survey
    from surgery.usecases.survey.request import SurveyRequest

    ap = argparse.ArgumentParser()
    corpus_args(ap, TARGETS)
    ap.add_argument("--timeout", type=float, default=300, help="seconds per model and target")
    ap.add_argument("--workers", type=int, default=1, help="cells at once")
    ap.add_argument(
        "--no-cache", action="store_true", help="compute every cell (the survey cache is not read)"
    )
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--table", action="store_true", help="print the per-model table too")
    ap.add_argument("--from-json", help="print the tables of an earlier run's --json file, run nothing")
    args = ap.parse_args()
    if args.from_json:
        report(json.loads(Path(args.from_json).read_text()), args.table)
        return
    records = corpus_records(args)
    request = SurveyRequest(
        [str(CORPUS / rec["path"]) for rec in records],
        list(args.targets),
        fix=True,
        depth="parse",
        workers=args.workers,
        timeout=args.timeout,
        use_cache=not args.no_cache,
        max_steps=args.max_steps,
        answers=args.answers,
    )
    last = [0.0]

    def progress(p) -> None:
        if time.monotonic() - last[0] > 10 or p.done == p.total:
            last[0] = time.monotonic()
            print(f"  {p.line()}", flush=True)

    result = survey(request, progress=progress)
    cells = {m["path"]: m["targets"] for m in result.report["models"]}
    rows = []
    for rec in records:
        done = cells[str((CORPUS / rec["path"]).resolve())]
        for target in args.targets:
            cell = done[target]
            row = row_of(cell, target)
            row.update(
                model=rec["id"],
                family=rec["family"],
                split=rec["split"],
                strings=_flags(rec),
                seconds=cell.get("seconds", 0.0),
            )
            rows.append(row)
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


# families with rows of their own in the table (the rest are "real models")
KINDS = {"node-test": "node tests", "llm": "LLM-era exports"}


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
        kind = KINDS.get(r.get("family"), "real models")
        by[(kind, r["target"])].append(r)
    for kind in ("real models", *KINDS.values()):
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
