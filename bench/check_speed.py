"""Check time per backend on generated models of ~100, ~2k and ~20k nodes (Conv/Relu|Sigmoid/Add blocks, a few
distinct signatures, one custom op every 25 blocks), and backend calls vs nodes (probing deduplicated by
signature). Goal: all CPU backends together <= 5 s on the 2k-node model.

Each backend is warmed once on a tiny model (its worker process imports openvino / tvm once per session; that
start-up is printed apart), then every size is checked with empty verdict caches. `--models-dir` adds real
models (*.onnx) to the table.

    python bench/check_speed.py [--sizes 100 2000 20000] [--backends ...] [--models-dir /tmp/realmodels]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _models import blocks  # noqa: E402

from surgery.backends import get_backend  # noqa: E402
from surgery.backends.probe import CACHE, signature  # noqa: E402
from surgery.graph import GraphFacts  # noqa: E402

CPU = ("onnxruntime", "openvino", "tvm")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[100, 2000, 20000])
    ap.add_argument(
        "--backends", nargs="*", default=["onnxruntime", "openvino", "tvm", "tensorrt-static@10.15"]
    )
    ap.add_argument("--models-dir", default=None)
    args = ap.parse_args()

    print("warm-up (worker start + backend import, once per process):")
    for b in args.backends:
        t = time.perf_counter()
        get_backend(b).check(blocks(3))
        print(f"  {b:22s} {time.perf_counter() - t:6.2f} s", flush=True)

    models = [(f"blocks x{size}", blocks(size, custom_every=25), None) for size in args.sizes]
    if args.models_dir:
        import onnx

        for path in sorted(Path(args.models_dir).glob("*.onnx")):
            models.append((path.stem, onnx.load(str(path), load_external_data=False), str(path.parent)))

    rows = []
    for name, model, base_dir in models:
        n = len(model.graph.node)
        facts = GraphFacts.of(model)
        sigs = len({signature(facts, i) for i in range(n)})
        cpu_total = 0.0
        for b in args.backends:
            CACHE.clear()
            t = time.perf_counter()
            try:
                r = get_backend(b).check(model, base_dir)
                calls, rej, note = r.backend_calls, len(r.rejected), ""
            except Exception as exc:  # a benchmark row, not a crash
                calls, rej, note = 0, 0, f"{type(exc).__name__}: {str(exc)[:60]}"
            sec = time.perf_counter() - t
            if b in CPU:
                cpu_total += sec
            rows.append((name, n, sigs, b, sec, calls, rej, note))
            print(
                f"  {name:24s} {n:6d} nodes {b:22s} {sec:7.2f} s {calls:4d} calls {rej:5d} rejected {note}",
                flush=True,
            )
        rows.append((name, n, sigs, "CPU backends together", cpu_total, None, None, ""))

    print("\n| model | nodes | distinct signatures | backend | seconds | backend calls | rejected |")
    print("|---|---|---|---|---|---|---|")
    for name, n, sigs, b, sec, calls, rej, note in rows:
        c = "-" if calls is None else calls
        r = "-" if rej is None else rej
        print(f"| {name} | {n} | {sigs} | {b} | {sec:.2f} | {c} | {r}{' ' + note if note else ''} |")


if __name__ == "__main__":
    main()
