"""What `check` costs over the backend's own call, as a user meets it: a fresh process per model and backend, for
`onnx-surgery check MODEL -t BACKEND --no-cache` and for the backend's own minimal call on the same file
(onnxruntime: an InferenceSession; OpenVINO: read_model + compile_model on CPU; TVM: the Relax ONNX frontend +
compile for llvm), interleaved model by model. Goal (issue 30): the sum of ours within 1.3x the sum of theirs.

A third call, the floor, is the backend's own call in a process that also reads the model's graph with the onnx
package (`import onnx` and `onnx.load` without external data), as any tool that names the nodes must: on a model
that takes onnxruntime 0.4 s, importing onnx alone costs 0.2 s more, which no change of ours can remove.

    python bench/check_overhead.py [--backends onnxruntime openvino tvm] [--limit N] [--families ...]
                                   [--baseline DIR]

It ends with the import time of one check (`python -X importtime`): all of it, and our modules' own share.

`--baseline DIR`: also time the check of another checkout (DIR holds its `surgery` package, e.g. a `git archive`
of main), right after ours on each model: a before/after comparison in one run, under the same load.

Models: the real models of the corpus (~/.cache/onnx-surgery/corpus, built by bench/corpus/build.py; node tests
are left out), or a sample of N of them by a fixed seed. Each call has a 300 s limit; a call that fails counts
with the time it took (both sides pay it). Wall seconds: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

CORPUS = Path.home() / ".cache" / "onnx-surgery" / "corpus"
GOAL = 1.3
OWN = {
    "onnxruntime": (
        "import sys, onnxruntime as ort\n"
        "ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])"
    ),
    "openvino": "import sys, openvino as ov\ncore = ov.Core()\ncore.compile_model(core.read_model(sys.argv[1]), 'CPU')",
    "tvm": (
        "import sys, onnx, tvm\nfrom tvm.relax.frontend.onnx import from_onnx\n"
        "tvm.compile(from_onnx(onnx.load(sys.argv[1])), target='llvm')"
    ),
}


def floor(backend: str) -> str:
    """The backend's own call, after reading the graph with onnx (the least a checker that names nodes does)."""
    return "import sys, onnx\nonnx.load(sys.argv[1], load_external_data=False)\n" + OWN[backend]


# As installed from a wheel, every module is byte-compiled; a machine that sets PYTHONDONTWRITEBYTECODE (this one
# does) would recompile our modules on every call (0.06-0.1 s) while the peers' came byte-compiled with them.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str], checkout: str | None = None) -> tuple[float, int]:
    """Wall seconds and exit code of `cmd`; `checkout`: run it with that checkout's `surgery` (its folder is both
    the working directory, which `python -m` puts first on sys.path, and PYTHONPATH, which the workers inherit)."""
    env = ENV if checkout is None else dict(ENV, PYTHONPATH=checkout)
    t = time.perf_counter()
    try:
        rc = subprocess.run(cmd, capture_output=True, timeout=300, env=env, cwd=checkout).returncode
    except subprocess.TimeoutExpired:
        rc = -9
    return time.perf_counter() - t, rc


def import_ms(cmd: list[str]) -> tuple[float, float]:
    """Milliseconds that `cmd` (a Python command line) spends importing: our modules (`surgery.*`, their own
    time) and everything, from `-X importtime` (one run: its figures move by ~20%)."""
    err = subprocess.run(
        [cmd[0], "-X", "importtime", *cmd[1:]], capture_output=True, text=True, env=ENV, timeout=300
    ).stderr
    ours = everything = 0
    for line in err.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            own, total, name = line[len("import time:") :].split("|")
            everything += int(own)
            ours += int(own) if name.strip().startswith("surgery") else 0
    return ours / 1000, everything / 1000


def models(families: list[str] | None, limit: int | None) -> list[Path]:
    manifest = json.loads((CORPUS / "manifest.json").read_text())["models"]
    found = [
        CORPUS / m["path"]
        for m in manifest
        if m["family"] != "node-test"
        and (not families or m["family"] in families)
        and (CORPUS / m["path"]).exists()
    ]
    found.sort()
    if limit and limit < len(found):
        found = sorted(random.Random(0).sample(found, limit))
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backends", nargs="*", default=["onnxruntime"])
    ap.add_argument("--limit", type=int, default=None, help="a sample of N models (fixed seed)")
    ap.add_argument("--families", nargs="*", default=None)
    ap.add_argument("--baseline", default=None, help="another checkout's folder: its check timed beside ours")
    args = ap.parse_args()
    base_dir = os.path.abspath(args.baseline) if args.baseline else None
    paths = models(args.families, args.limit)
    print(f"{len(paths)} models, backends {', '.join(args.backends)}", flush=True)
    rows = []
    for path in paths:
        for backend in args.backends:
            check = [sys.executable, "-m", "surgery", "check", str(path), "-t", backend, "--no-cache"]
            ours, rc_ours = timed(check)
            base, rc_base = timed(check, base_dir) if base_dir else (0.0, 0)
            own, rc_own = timed([sys.executable, "-c", OWN[backend], str(path)])
            least, _ = timed([sys.executable, "-c", floor(backend), str(path)])
            rows.append((path.stem, backend, ours, rc_ours, own, rc_own, least, base, rc_base))
            before = f"  base {base:6.2f} s (exit {rc_base})" if base_dir else ""
            print(
                f"  {path.stem[:40]:40s} {backend:12s} ours {ours:6.2f} s (exit {rc_ours}){before}  own {own:6.2f} s "
                f"(exit {rc_own})  floor {least:6.2f} s  {ours / own:5.2f}x",
                flush=True,
            )
    head = "| baseline s | baseline ratio " if base_dir else ""
    print(
        f"\n| backend | models | ours s | backend's own s | floor s (own + onnx reading the graph) | ratio {head}| goal |"
    )
    print("|---|---|---|---|---|---|" + ("---|---|" if base_dir else "") + "---|")
    for backend in args.backends:
        mine = [r for r in rows if r[1] == backend]
        ours, own, least = sum(r[2] for r in mine), sum(r[4] for r in mine), sum(r[6] for r in mine)
        base = sum(r[7] for r in mine)
        ratio = ours / own if own else float("nan")
        before = f"| {base:.1f} | {base / own:.2f}x " if base_dir and own else ""
        print(
            f"| {backend} | {len(mine)} | {ours:.1f} | {own:.1f} | {least:.1f} ({least / own:.2f}x) | {ratio:.2f}x "
            f"{before}| {'✓' if ratio <= GOAL else '✗'} (≤ {GOAL}x) |"
        )
    if base_dir:
        changed = [r for r in rows if r[3] != r[8]]
        print("exit codes that differ from the baseline's: " + (", ".join(r[0] for r in changed) or "none"))
    first = [sys.executable, "-m", "surgery", "check", str(paths[0]), "-t", args.backends[0], "--no-cache"]
    ours_ms, all_ms = import_ms(first)
    print(
        f"\nimports of one check ({paths[0].stem}, {args.backends[0]}): {all_ms:.0f} ms, of which our modules "
        f"{ours_ms:.0f} ms (`python -X importtime`)"
    )
    worst = sorted(rows, key=lambda r: r[2] / r[4] if r[4] else 0, reverse=True)[:5]
    print("\nlargest ratios: " + "; ".join(f"{r[0]} ({r[1]}) {r[2]:.2f} vs {r[4]:.2f} s" for r in worst))


if __name__ == "__main__":
    main()
