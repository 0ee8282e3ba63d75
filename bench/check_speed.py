"""Check time per backend on generated models of ~100, ~2k and ~20k nodes, and backend calls vs nodes
(probing deduplicated by signature). Goal: all CPU backends together <= 5 s on the 2k-node model.

    python bench/check_speed.py [--sizes 100 2000 20000] [--backends ...]
"""

from __future__ import annotations

import argparse
import time

from _models import blocks

from surgery.backends import get_backend
from surgery.backends.probe import CACHE


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[100, 2000, 20000])
    ap.add_argument(
        "--backends",
        nargs="*",
        default=["tensorrt-static@10.15", "onnxruntime", "openvino", "tvm", "tensorrt"],
    )
    args = ap.parse_args()
    rows = []
    for size in args.sizes:
        model = blocks(size, custom_every=25)
        n = len(model.graph.node)
        cpu_total = 0.0
        for b in args.backends:
            CACHE._store.clear()
            backend = get_backend(b)
            t = time.perf_counter()
            r = backend.check(model)
            sec = time.perf_counter() - t
            if b in ("onnxruntime", "openvino", "tvm"):
                cpu_total += sec
            rows.append((n, b, sec, r.backend_calls, len(r.rejected)))
            print(
                f"  {n:6d} nodes  {b:22s} {sec:7.2f} s  {r.backend_calls:4d} calls  {len(r.rejected)} rejected",
                flush=True,
            )
        rows.append((n, "CPU backends together", cpu_total, None, None))
    print("\n| nodes | backend | seconds | backend calls | calls per node | rejected |")
    print("|---|---|---|---|---|---|")
    for n, b, sec, calls, rej in rows:
        per = f"{calls / n:.4f}" if calls else "-"
        print(
            f"| {n} | {b} | {sec:.2f} | {calls if calls is not None else '-'} | {per} | "
            f"{rej if rej is not None else '-'} |"
        )


if __name__ == "__main__":
    main()
