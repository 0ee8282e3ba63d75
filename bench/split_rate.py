"""Where `fix` cannot repair a model, does `split` give a deployable plan? For every corpus model (bench/corpus)
and every target: the target's verdict, `fix` run as bench/repair_rate.py runs it (a repair counts when the
target accepts the fixed model and it is verified), and for every model the target rejects or cannot confirm (a
plugin TensorRT-RTX lacks) and `fix` does not repair, `split` on the original model with onnxruntime as the fallback: whether the plan is verified (every
target part accepted by the target alone and the chained parts reproduce the original on seeded inputs: exit 0),
the share of compute nodes (not constants) on the target, the parts, the crossings and the bytes crossing (from
inferred shapes, else measured in the verification run, marked ~).

    python bench/split_rate.py [--targets tensorrt tvm ...] [--families sklearn ...] [--split tune|holdout|all]
                               [--limit N] [--timeout 300] [--min-nodes 3] [--no-answers] [--repairs FILE]
                               [--json FILE] [--table]

--repairs reads the rows of an earlier `bench/repair_rate.py --json FILE` run instead of running `fix` again.
Each model runs under a time limit per target (for fix, then again for split); one that runs out is reported.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from repair_rate import (  # noqa: E402
    CORPUS,
    OutOfTime,
    _alarm,
    _flags,
    _repaired,
    corpus_args,
    corpus_records,
    repair_record,
)

TARGETS = [
    "tensorrt",
    "tensorrt-static@8.2",
    "tensorrt-static@8.6",
    "tensorrt-static@10.15",
    "openvino",
    "tvm",
]


def split_row(path: Path, target: str, min_nodes: int) -> dict:
    """`split` on one model: the plan's figures, or why there is none."""
    from surgery.model import load_model
    from surgery.split import SplitError, make_plan

    model = load_model(path)
    try:
        plan = make_plan(model, target, min_nodes=min_nodes)
    except SplitError as exc:
        return {"result": "no plan", "why": str(exc)[:300]}
    v = plan.verification
    if plan.ok:
        result = "verified plan"
    elif not plan.accepted:
        result = "a target part refused"
    elif v is not None and v.status == "differs":
        result = "chain differs"
    else:
        result = "not verified"
    refused = [r for p in plan.target_parts if not p.accepted for r in p.check.get("reasons", [])[:1]]
    bytes_, measured = plan.crossing_bytes, False
    if bytes_ is None and plan.measured_crossing_bytes is not None:
        bytes_, measured = plan.measured_crossing_bytes, True
    return {
        "result": result,
        "parts": len(plan.parts),
        "target_parts": len(plan.target_parts),
        "on_target": plan.on_target,
        "compute_nodes": plan.compute_nodes,
        "share": plan.on_target / max(plan.compute_nodes, 1),
        "crossings": len(plan.crossings),
        "crossing_bytes": bytes_,
        "bytes_measured": measured,
        "rounds": plan.rounds,
        "verification": None if v is None else v.summary()[:300],
        "ran_on": None if v is None else sorted(set(v.ran_on)),
        "why": (refused[0] if refused else (v.message if v is not None and not v.ok else ""))[:300],
        # how far each target part was taken alone: "build" (built here) or "parse" (no builder here)
        "target_depths": sorted({p.build.get("depth", "parse") for p in plan.target_parts}),
        "built": all(p.build.get("ok", False) for p in plan.target_parts),
        "builder_moved": any(n.startswith("the builder refused") for n in plan.notes),
    }


def main() -> None:
    from surgery.backends.probe import use_disk_cache
    from surgery.diagnose import clear_cache
    from surgery.rulebook import load_rules

    ap = argparse.ArgumentParser()
    corpus_args(ap, TARGETS)
    ap.add_argument(
        "--timeout", type=float, default=300, help="seconds per model and target, for fix and split"
    )
    ap.add_argument("--min-nodes", type=int, default=3)
    ap.add_argument("--repairs", help="rows of an earlier bench/repair_rate.py --json run")
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--table", action="store_true", help="print the per-model table too")
    args = ap.parse_args()
    use_disk_cache()
    records = corpus_records(args)
    known = {}
    if args.repairs:
        known = {(r["model"], r["target"]): r for r in json.loads(Path(args.repairs).read_text())}
    rules = load_rules()
    signal.signal(signal.SIGALRM, _alarm)
    rows = []
    t0 = time.perf_counter()
    for k, rec in enumerate(records):
        for target in args.targets:
            start = time.perf_counter()
            row = known.get((rec["id"], target))
            signal.setitimer(signal.ITIMER_REAL, args.timeout)
            try:
                if row is None:
                    row = repair_record(rec, target, rules, args)
                row = dict(row)
                if row["before"] in ("rejects", "cannot confirm") and not _repaired(row):
                    signal.setitimer(signal.ITIMER_REAL, args.timeout)
                    row.update(split_row(CORPUS / rec["path"], target, args.min_nodes))
            except OutOfTime:
                row = dict(row or {"before": "?"}, result="out of time", why=f"over {args.timeout:.0f} s")
            except Exception as exc:  # a model this tool refuses: the row says so, the run goes on
                row = dict(row or {"before": "?"}, result="error", why=f"{type(exc).__name__}: {exc}"[:300])
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            row.update(
                target=target,
                model=rec["id"],
                family=rec["family"],
                split=rec["split"],
                nodes=rec["nodes"],
                strings=_flags(rec),
                split_seconds=round(time.perf_counter() - start, 2),
            )
            rows.append(row)
        clear_cache()
        print(f"  {k + 1}/{len(records)} models ({time.perf_counter() - t0:.0f} s)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    report(rows, args.table)


def _bytes(n, measured: bool) -> str:
    if n is None:
        return "?"
    text = f"{n / 1024:.1f} KiB" if n < 1024**2 else f"{n / 1024**2:.1f} MiB"
    return ("~" if measured else "") + text


def report(rows: list[dict], table: bool) -> None:
    print(
        "\n| target | rejected or cannot confirm, not repaired by fix | verified plan | chain differs | target part refused | "
        "not verified | no plan | error / out of time | share on target (median, verified) | crossings "
        "(median) | bytes crossing (median) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    by = defaultdict(list)
    for r in rows:
        if "result" in r:
            by[r["target"]].append(r)
    for target, rs in by.items():
        c = Counter(r["result"] for r in rs)
        ok = [r for r in rs if r["result"] == "verified plan"]
        share = f"{statistics.median(r['share'] for r in ok):.0%}" if ok else "-"
        cross = f"{statistics.median(r['crossings'] for r in ok):g}" if ok else "-"
        sized = [r["crossing_bytes"] for r in ok if r.get("crossing_bytes") is not None]
        size = _bytes(statistics.median(sized), False) if sized else "-"
        print(
            f"| {target} | {len(rs)} | {c['verified plan']} ({c['verified plan'] / max(len(rs), 1):.0%}) | "
            f"{c['chain differs']} | {c['a target part refused']} | {c['not verified']} | {c['no plan']} | "
            f"{c['error'] + c['out of time']} | {share} | {cross} | {size} |"
        )
    why = Counter()
    for r in rows:
        if r.get("result") in ("no plan", "a target part refused", "not verified", "chain differs", "error"):
            line = r.get("why") or ""
            head = line.split(":")[0] if r["result"] == "no plan" else line[:90]
            why[(r["target"], r["result"], head)] += 1
    for target, rs in by.items():
        ok = [r for r in rs if r["result"] == "verified plan"]
        built = [r for r in ok if "build" in (r.get("target_depths") or [])]
        print(
            f"\n{target}: {len(ok)} verified plan(s); target parts built here in {sum(r['built'] for r in built)} of "
            f"{len(built)} that a builder here could build ({len(ok) - len(built)} checked at parse only: no "
            f"builder here); {sum(bool(r.get('builder_moved')) for r in ok)} plan(s) had nodes the builder refused "
            "moved to the fallback"
        )
    print("\nno verified plan, by first reason (target, result, reason): count")
    for (target, result, reason), n in why.most_common(40):
        print(f"  {target}: {result}: {reason}: {n}")
    if table:
        print(
            "\n| model | family | target | nodes | result | parts | on target | crossings | bytes crossing | "
            "why not |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            if "result" not in r:
                continue
            on = f"{r['on_target']}/{r['compute_nodes']} ({r['share']:.0%})" if "share" in r else ""
            print(
                f"| {r['model']} | {r['family']} | {r['target']} | {r['nodes']} | {r['result']} | "
                f"{r.get('parts', '')} | {on} | {r.get('crossings', '')} | "
                f"{_bytes(r.get('crossing_bytes'), r.get('bytes_measured', False)) if 'parts' in r else ''} | "
                f"{(r.get('why') or '')[:120] if r['result'] != 'verified plan' else ''} |"
            )


if __name__ == "__main__":
    main()
