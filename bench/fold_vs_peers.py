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
import subprocess
import sys
import tempfile
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


TIME_LIMIT_S = 300
# every teaching sample that onnxruntime can evaluate constants for (custom-op samples included: their
# constant parts fold, the custom node stays)
SAMPLES = (
    "healthy_cnn",
    "resize_scales_chain",
    "topk_computed_k",
    "if_branch_shapes",
    "squeeze_dynamic",
    "int64_out_of_range",
    "ml_scaler",
    "training_mode_ops",
    "deform_conv_custom",
    "unique_op",
    "dynamic_input_unshaped",
)
TOOLS = {"onnx-surgery": ours, "polygraphy": polygraphy, "onnxsim": onnxsim, "onnxslim": onnxslim}


def run_one(tool: str, path: str, repeat: int) -> None:
    """Child process: load the model, fold it `repeat` times with `tool`, print nodes and median seconds."""
    model = onnx.load(path)
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = TOOLS[tool](model)
        times.append(time.perf_counter() - t)
    print(f"RESULT {len(out.graph.node)} {statistics.median(times)}")


def measure(tool: str, path: Path, repeat: int, limit: float = TIME_LIMIT_S) -> tuple[str, float | None]:
    """Each tool in its own process: a peer that crashes (Polygraphy exits on some models) costs only its cell."""
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--one", tool, str(path), "--repeat", str(repeat)],
            capture_output=True,
            text=True,
            timeout=limit,
        )
    except subprocess.TimeoutExpired:
        return f"timeout (> {limit:.0f} s)", None
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return f"fails ({tail[:40]})", None
    _, nodes, sec = line.split()
    return nodes, float(sec)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models-dir", type=Path)
    ap.add_argument("--quick", action="store_true", help="one run each, no constant chain")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=3, help=argparse.SUPPRESS)
    ap.add_argument(
        "--limit", type=float, default=TIME_LIMIT_S, help="seconds per tool and model (all repeats)"
    )
    args = ap.parse_args()
    if args.one:
        return run_one(args.one[0], args.one[1], args.repeat)
    work = Path(tempfile.mkdtemp(prefix="fold-bench-"))
    models = {}
    for name in SAMPLES:
        onnx.save(build(name), str(work / f"{name}.onnx"))
        models[name] = work / f"{name}.onnx"
    if not args.quick:
        onnx.save(constant_chain(), str(work / "constant_chain_64MiB.onnx"))
        models["constant_chain_64MiB"] = work / "constant_chain_64MiB.onnx"
    if args.models_dir:
        models.update({p.stem: p for p in sorted(args.models_dir.glob("*.onnx"))})
    else:
        print(
            "note: no --models-dir: real CNN/transformer exports skipped (bench/export_models.py writes them)"
        )
    try:
        import torch  # noqa: F401
    except ImportError:
        print("note: torch is not importable here: no fresh exports; only models already in --models-dir run")
    repeat = 1 if args.quick else 3
    print("| model | nodes | " + " | ".join(f"{t} nodes | {t} s" for t in TOOLS) + " | ours / fastest peer |")
    print("|---|---|" + "---|---|" * len(TOOLS) + "---|")
    for name, path in models.items():
        n = len(onnx.load(str(path), load_external_data=False).graph.node)
        cells, times = [], {}
        for tool in TOOLS:
            nodes, sec = measure(tool, path, repeat, args.limit)
            cells += [nodes, "-" if sec is None else f"{sec:.3f}"]
            if sec is not None:
                times[tool] = sec
        peers = [t for k, t in times.items() if k != "onnx-surgery"]
        ratio = f"{times['onnx-surgery'] / min(peers):.2f}x" if peers and "onnx-surgery" in times else "-"
        print(f"| {name} | {n} | " + " | ".join(cells) + f" | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
