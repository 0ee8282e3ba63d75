"""Does `check --depth build` accept exactly the models `build` builds? For every corpus model and every backend
that builds here: the check's outcome at build depth and the build's result, and the models where they differ.

    python bench/check_vs_build.py [--backends onnxruntime openvino tvm tensorrt] [--families ...]
                                   [--max-nodes 3000] [--timeout 300] [--limit N]

Models over --max-nodes are left out for TVM (its Relax build of a large model takes minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CORPUS = Path(os.environ.get("ONNX_SURGERY_CORPUS", "~/.cache/onnx-surgery/corpus")).expanduser()


def main() -> None:
    from surgery.backends.base import BuildOptions
    from surgery.backends.build import build_model
    from surgery.diagnose import check_one, clear_cache
    from surgery.model import load_model
    from surgery.verdict import Outcome

    ap = argparse.ArgumentParser()
    ap.add_argument("--backends", nargs="*", default=["onnxruntime", "openvino", "tvm", "tensorrt"])
    ap.add_argument("--families", nargs="*", default=None)
    ap.add_argument("--max-nodes", type=int, default=3000)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--limit", type=int, default=0)
    args = ap.parse_args()
    records = [
        r
        for r in json.loads((CORPUS / "manifest.json").read_text())["models"]
        if r["family"] != "node-test" and (args.families is None or r["family"] in args.families)
    ]
    records = records[: args.limit] if args.limit else records
    counts: dict[str, Counter] = {b: Counter() for b in args.backends}
    differ = []
    t0 = time.perf_counter()
    for k, r in enumerate(records):
        try:
            model = load_model(CORPUS / r["path"])
        except Exception as exc:  # a model this tool refuses to load is no comparison
            print(f"  skip {r['id']}: {exc}")
            continue
        for b in args.backends:
            if b == "tvm" and r["nodes"] > args.max_nodes:
                counts[b]["left out (size)"] += 1
                continue
            clear_cache()
            report = check_one(model.proto, b, model.base_dir, depth="build")
            built = build_model(
                b, model.proto, BuildOptions(measure=False, timeout_s=args.timeout), base_dir=model.base_dir
            )
            checked = report.outcome is Outcome.ACCEPTS
            counts[b]["same" if checked == built.ok else "differ"] += 1
            counts[b]["built" if built.ok else "refused"] += 1
            if checked != built.ok:
                differ.append(
                    f"{b} {r['id']}: check {report.outcome.value}, build {'ok' if built.ok else built.error[:120]}"
                )
        print(f"  {k + 1}/{len(records)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    print("\n| backend | models | built | refused | check = build | differ | left out |")
    print("|---|---|---|---|---|---|---|")
    for b, c in counts.items():
        n = c["same"] + c["differ"]
        print(
            f"| {b} | {n} | {c['built']} | {c['refused']} | {c['same']} | {c['differ']} | {c['left out (size)']} |"
        )
    for line in differ:
        print(f"- {line}")


if __name__ == "__main__":
    main()
