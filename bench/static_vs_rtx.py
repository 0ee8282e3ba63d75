"""How well does the 10.x predictor (tensorrt-static) agree with a real TensorRT parser? Every node-test model
the onnx package generates is checked by both: the predicted verdict of its nodes against TensorRT-RTX's live
parser (a 10.x-era ONNX parser that runs without a GPU).

    python bench/static_vs_rtx.py [--version 10.15] [--limit N] [--list]

A model "agrees" when both say accepted, or both reject the same nodes. Disagreements are grouped by cause:
  * rtx-lacks-plugin — RTX has no standard plugin library (NonZero, RoiAlign, DeformConv...): not a predictor fault
  * predicted-reject — the table or a constraint rejects what the parser accepts
  * predicted-accept — the parser rejects what the table calls supported (types, attributes, shapes the docs
    do not list)
"""

from __future__ import annotations

import argparse
import warnings
from collections import Counter, defaultdict

import onnx

from surgery.backends import get_backend
from surgery.backends.base import Status


def main() -> None:
    from onnx.backend.test.case.node import collect_testcases

    ap = argparse.ArgumentParser()
    ap.add_argument("--version", default="10.15")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--list", action="store_true", help="print every disagreement")
    args = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    if args.limit:
        cases = cases[: args.limit]
    static, live = get_backend(f"tensorrt-static@{args.version}"), get_backend("tensorrt")
    causes: Counter = Counter()
    examples = defaultdict(list)
    agree = 0
    for k, case in enumerate(cases):
        m = onnx.ModelProto()
        m.CopyFrom(case.model)
        m.ir_version = min(m.ir_version, 10)
        p = static.check(m)
        try:
            r = live.check(m)
        except Exception as exc:  # a parser crash is a disagreement of its own kind
            causes["rtx-crash"] += 1
            examples["rtx-crash"].append(f"{case.name}: {exc}")
            continue
        pred = {v.node for v in p.rejected}
        real = {v.node for v in r.rejected}
        plugin = {v.node for v in r.verdicts if v.status is Status.UNKNOWN and "plugin" in v.message}
        if pred == real and not plugin:
            agree += 1
            continue
        if plugin and pred <= plugin | real:
            cause = "rtx-lacks-plugin"
        elif pred - real:
            cause = "predicted-reject"
        else:
            cause = "predicted-accept"
        causes[cause] += 1
        ops = sorted({n.op_type for n in m.graph.node})
        msg = next(iter([v.message for v in r.rejected] or [v.message for v in p.rejected] or [""]))
        examples[cause].append(f"{case.name} [{', '.join(ops)}]: {msg[:110]}")
        if (k + 1) % 200 == 0:
            print(f"  {k + 1}/{len(cases)} checked", flush=True)
    n = len(cases)
    print(f"\nnode-test models: {n}; predictor tensorrt-static@{args.version} vs {live.label}")
    print(
        f"agree: {agree} ({agree / n:.1%}); agree or RTX-lacks-plugin: "
        f"{agree + causes['rtx-lacks-plugin']} ({(agree + causes['rtx-lacks-plugin']) / n:.1%})\n"
    )
    print("| cause | models | examples |")
    print("|---|---|---|")
    for cause, count in causes.most_common():
        print(f"| {cause} | {count} | {'; '.join(x.split(' [')[0] for x in examples[cause][:6])} |")
    if args.list:
        for cause, lines in examples.items():
            print(f"\n## {cause}")
            for line in lines:
                print(f"- {line}")


if __name__ == "__main__":
    main()
