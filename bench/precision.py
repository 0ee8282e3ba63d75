"""`precision` on models with known fp16 trouble (tests/precision_models.py: hand-written LayerNorm, softmax
without max subtraction, ViT blocks with large attention logits, residual stacks with large sums), next to NVIDIA
ModelOpt's ONNX AutoCast.

Per model: the fp16 error with everything reduced and after `precision` (surgery.emulate), the nodes kept in
float32, the share of the compute left in fp16, the time taken; then both written models (ours and AutoCast's)
judged the same way, independently of the emulation: onnx's reference evaluator runs them in numpy, which stores
every float16 result in float16 (mean relative error of the worst output against float32, seeded inputs).

ModelOpt is not a dependency (nvidia-modelopt[onnx] pins its own onnx and pulls onnxruntime-gpu and torch): give
an interpreter where it is installed with --modelopt-python (e.g. a venv made with
`python -m venv v && v/bin/pip install "nvidia-modelopt[onnx]"`); it runs AutoCast on the CPU.

    python bench/precision.py [--modelopt-python PATH] [--tolerance 0.01]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from precision_models import CORPUS  # noqa: E402

from surgery.feeds import seeded_inputs
from surgery.ort import run  # noqa: E402
from surgery.usecases.precision import PrecisionRequest, search  # noqa: E402
from surgery.verify import mean_relative_error  # noqa: E402
from surgery.workspace import apply_step  # noqa: E402

AUTOCAST = """
import sys, onnx
from modelopt.onnx.autocast import convert_to_mixed_precision
m = convert_to_mixed_precision(sys.argv[1], low_precision_type="fp16", keep_io_types=True)
onnx.save(m, sys.argv[2])
"""


def numpy_fp16_error(original, mixed, seeds=(0, 1)) -> float:
    """Worst output's mean relative error of `mixed` run by onnx.reference (numpy float16) against float32."""
    from onnx.reference import ReferenceEvaluator

    worst = 0.0
    ev = ReferenceEvaluator(mixed)
    names = [o.name for o in original.graph.output]
    for seed in seeds:
        feeds = seeded_inputs(original, seed=seed, default_dim=1)
        ref = run(original, feeds)
        with np.errstate(all="ignore"):
            got = dict(zip([o.name for o in mixed.graph.output], ev.run(None, feeds)))
        for n in names:
            worst = max(worst, mean_relative_error(ref[n], np.asarray(got[n], np.float32)))
    return worst


def kept_fp32(original, mixed) -> int:
    """How many of the original's float nodes still write float32 in `mixed` (by node name)."""
    inferred = onnx.shape_inference.infer_shapes(mixed)
    types = {
        vi.name: vi.type.tensor_type.elem_type
        for vi in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]
    }
    names = {n.name for n in original.graph.node}
    kept = 0
    for n in inferred.graph.node:
        if n.name in names and any(types.get(o) == onnx.TensorProto.FLOAT for o in n.output):
            kept += 1
    return kept


def autocast(python: str, model, tmp: Path):
    src, out = tmp / "in.onnx", tmp / "autocast.onnx"
    onnx.save(model, src)
    started = time.perf_counter()
    proc = subprocess.run([python, "-c", AUTOCAST, str(src), str(out)], capture_output=True, text=True)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        return None, took, (proc.stderr.strip().splitlines() or ["failed"])[-1][:100]
    return onnx.load(out), took, ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modelopt-python", help="an interpreter with nvidia-modelopt[onnx] installed")
    ap.add_argument("--tolerance", type=float, default=0.01)
    args = ap.parse_args()
    head = (
        f"{'model':16s} {'nodes':>5s} | {'all-fp16':>9s} {'after':>9s} {'kept':>4s} {'fp16 share':>10s} "
        f"{'time':>6s} {'numpy':>9s} | {'AutoCast':>9s} {'kept':>4s} {'time':>6s}"
    )
    print(head)
    print("-" * len(head))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, build in CORPUS.items():
            m = build()
            o = search(m, PrecisionRequest("fp16", tolerance=args.tolerance))
            ours = apply_step(m, o.step)
            ours_np = numpy_fp16_error(m, ours)
            line = (
                f"{name:16s} {len(m.graph.node):5d} | {o.before.error:9.3g} {o.after.error:9.3g} "
                f"{len(o.kept):4d} {o.reduced_share:10.1%} {o.seconds:5.2f}s {ours_np:9.3g} |"
            )
            if args.modelopt_python:
                ac, took, why = autocast(args.modelopt_python, m, tmp)
                if ac is None:
                    line += f" AutoCast failed: {why}"
                else:
                    line += f" {numpy_fp16_error(m, ac):9.3g} {kept_fp32(m, ac):4d} {took:5.2f}s"
            else:
                line += " (no --modelopt-python)"
            print(line, flush=True)
    print(
        "\nall-fp16 / after: surgery.emulate (every intermediate rounded to fp16); numpy / AutoCast: the written "
        "model run by onnx.reference in numpy float16; errors: worst output's mean relative error; "
        f"tolerance {args.tolerance:g}. AutoCast's time includes starting its interpreter."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
