"""Constant folding against Polygraphy, onnxsim and onnxslim on the same models in one run: nodes left and
time (median of 3, in process, model already loaded), and our time as a ratio of the fastest peer.

    python bench/fold_vs_peers.py [--models-dir DIR] [--quick]

Models: the teaching samples, a generated 64 MiB constant chain through 200 ops, and every .onnx in
--models-dir (e.g. what bench/export_models.py writes: torchvision / transformers exports).
Goal: as few nodes as the best of them, in <= 0.5x the time of the fastest.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from pathlib import Path

import onnx
from _models import constant_chain

from surgery.fixes import get_fix
from surgery.samples import build


def ours(model):
    return get_fix("fold_constants")(model)


def polygraphy(model):
    from polygraphy.backend.onnx import fold_constants

    return fold_constants(onnx.ModelProto.FromString(model.SerializeToString()))


def onnxsim(model):
    import onnxsim as sim

    out, ok = sim.simplify(model)
    return out


def onnxslim(model):
    import onnxslim as slim

    return slim.slim(onnx.ModelProto.FromString(model.SerializeToString()))


TOOLS = {"onnx-surgery": ours, "polygraphy": polygraphy, "onnxsim": onnxsim, "onnxslim": onnxslim}


def timed(fn, model, repeat):
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn(model)
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models-dir", type=Path)
    ap.add_argument("--quick", action="store_true", help="one run each, no constant chain")
    args = ap.parse_args()
    models = {name: build(name) for name in ("resize_scales_chain", "topk_computed_k", "if_branch_shapes")}
    if not args.quick:
        models["constant_chain_64MiB"] = constant_chain()
    if args.models_dir:
        for p in sorted(args.models_dir.glob("*.onnx")):
            models[p.stem] = onnx.load(str(p))
    repeat = 1 if args.quick else 3
    print("| model | nodes | " + " | ".join(f"{t} nodes | {t} s" for t in TOOLS) + " | ours / fastest peer |")
    print("|---|---|" + "---|---|" * len(TOOLS) + "---|")
    for name, model in models.items():
        cells, times = [], {}
        for tool, fn in TOOLS.items():
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    sec, out = timed(fn, model, repeat)
                cells += [str(len(out.graph.node)), f"{sec:.3f}"]
                times[tool] = sec
            except Exception as exc:  # a peer that fails on a model is reported, not fatal
                cells += [f"fails ({type(exc).__name__})", "-"]
        peers = [t for k, t in times.items() if k != "onnx-surgery"]
        ratio = f"{times['onnx-surgery'] / min(peers):.2f}x" if peers and "onnx-surgery" in times else "-"
        print(f"| {name} | {len(model.graph.node)} | " + " | ".join(cells) + f" | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
