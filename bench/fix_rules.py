"""The built-in rules end to end, as `onnx-surgery fix` runs them: per model and target, the nodes rejected
before and after, the steps applied (and refused), the worst error of the fixed model against the original,
and the time (rules to a fixpoint, each step verified with onnxruntime).

    python bench/fix_rules.py [--models-dir DIR] [--targets tensorrt-static@8.2,tensorrt-static@10.15]

Models: every teaching sample (with its lesson's target) and every .onnx in --models-dir with each target.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from surgery.diagnose import check_model
from surgery.model import load_model
from surgery.rulebook import load_rules
from surgery.samples import lessons, sample_path
from surgery.usecases.fix import FixRequest, fix
from surgery.workspace import Workspace

VALUES = {"dynamic_input_unshaped": {"shape": [1, 3, 32, 32]}}


def one(path: Path, target: str, rules, values) -> str:
    ws = Workspace(load_model(path))
    base = ws.original.base_dir
    before = check_model(ws.current, [target], base)[0]
    t0 = time.perf_counter()
    outcome = fix(ws, FixRequest([target], rules, values=values or {}), before=[before])
    applied, refused, after = outcome.applied, outcome.refused, outcome.after[0]
    seconds = time.perf_counter() - t0
    worst = "-"
    if applied:
        report = outcome.overall
        worst = (
            report.summary()
            if report.status == "skipped"
            else "max abs {:.3g}, mean rel {:.3g}".format(*report.worst())
        )
    steps = ", ".join(a.proposal.rule.id for a in applied) or "-"
    return (
        f"| {path.stem} | {target} | {len(before.rejected)} → {len(after.rejected)} | {steps} | "
        f"{len(refused)} | {worst[:60]} | {seconds:.2f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models-dir", type=Path)
    ap.add_argument("--targets", default="tensorrt-static@8.2,tensorrt-static@8.6,tensorrt-static@10.15")
    args = ap.parse_args()
    rules = load_rules()
    print("| model | target | rejected before → after | steps | refused | original vs fixed | s |")
    print("|---|---|---|---|---|---|---|")
    for lesson in lessons():
        print(one(sample_path(lesson.name), lesson.backend, rules, VALUES.get(lesson.name)))
    if args.models_dir:
        for path in sorted(args.models_dir.glob("*.onnx")):
            for target in args.targets.split(","):
                print(one(path, target, rules, None), flush=True)


if __name__ == "__main__":
    main()
