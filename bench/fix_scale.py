"""How long does `fix` take on a big model, and how much memory? A generated transformer stack (bench/_models.py:
opset 17, dynamic batch and sequence, a Squeeze without axes per block, which TensorRT 8.6 refuses) at 10k and
50k nodes, fixed for tensorrt-static@8.6 by the CLI in a child process (wall time and peak resident memory of
that process), then the written recipe replayed on the original and compared bit for bit.

    python bench/fix_scale.py [--sizes 10000 50000] [--target tensorrt-static@8.6]

Goal (issue): at most 30 s at 50k nodes. The machine's load is printed with the figures: on a shared 2-core
machine a busy neighbour doubles them.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from _models import transformer_stack  # noqa: E402


def main() -> None:
    import onnx

    from surgery.model import load_model
    from surgery.workspace import Workspace

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[10000, 50000])
    ap.add_argument("--target", default="tensorrt-static@8.6")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| nodes | steps | fix s | peak MiB | after | replay bit for bit |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            src, out, recipe = (Path(tmp) / f"m{n}{ext}" for ext in (".onnx", ".fixed.onnx", ".recipe.json"))
            onnx.save(transformer_stack(n), str(src))
            nodes = len(onnx.load(str(src), load_external_data=False).graph.node)
            cmd = [sys.executable, "-m", "surgery.cli", "fix", str(src), "-t", args.target, "-o", str(out)]
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            t0 = time.perf_counter()
            p = subprocess.run([*cmd, "--recipe", str(recipe)], capture_output=True, text=True, cwd=ROOT)
            seconds = time.perf_counter() - t0
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            steps = len(re.findall(r"^  \d+\. applied", p.stdout, re.M))
            after = re.search(
                rf"\[{re.escape(args.target)}\]: (\w[\w ]*?) \(checked", p.stdout.split("after (")[-1]
            )
            ws = Workspace(load_model(src))
            ws.load_recipe(str(recipe))
            same = ws.fingerprint() == Workspace(load_model(out)).original.fingerprint()
            peak_mib = max(peak, before) / 1024  # ru_maxrss is the largest child so far (KiB on Linux)
            print(
                f"| {nodes} | {steps} | {seconds:.1f} | {peak_mib:.0f} | {after.group(1) if after else p.returncode} "
                f"| {'yes' if same else 'NO'} |",
                flush=True,
            )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
