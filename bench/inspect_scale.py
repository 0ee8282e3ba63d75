"""Load + inspect time and peak memory on big models, against the peers on the same files in one run.

    python bench/inspect_scale.py [--nodes 50000] [--weights-gib 1.0] [--keep DIR]

Models (generated here, deterministic):
  * `wide_50k`: a 50k-node graph (Conv/Relu/Add blocks with small weights, scoped names like a torch export);
  * `weights_1gib`: a small graph whose initializers hold >= 1 GiB of external data in one file.
Each tool runs in its own fresh process; peak memory is that process's max RSS (os.wait4).
Tools: `onnx-surgery inspect`, `onnx.load` (the usual first line of a script), `polygraphy inspect model`.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_wide(path: Path, n_nodes: int) -> None:
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "input"
    blocks = n_nodes // 3
    for b in range(blocks):
        scope = f"/layer{b // 100}/block{b % 100}"
        w = f"{scope}.weight"
        inits.append(numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), w))
        nodes += [
            helper.make_node("Conv", [x, w], [f"{scope}/conv"], name=f"{scope}/Conv"),
            helper.make_node("Relu", [f"{scope}/conv"], [f"{scope}/relu"], name=f"{scope}/Relu"),
            helper.make_node("Add", [f"{scope}/relu", x], [f"{scope}/add"], name=f"{scope}/Add"),
        ]
        x = f"{scope}/add"
    graph = helper.make_graph(
        nodes,
        "wide",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 4, 8, 8])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", 4, 8, 8])],
        inits,
    )
    onnx.save(helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def make_heavy(path: Path, gib: float) -> None:
    """Initializers written straight into one external file, 4 MiB at a time (never all in memory)."""
    chunk = 1024 * 1024  # floats per tensor: 4 MiB
    count = int(gib * 1024**3 / (chunk * 4)) + 1
    data = path.with_suffix(".onnx.data")
    inits, nodes = [], []
    x = "input"
    block = np.arange(chunk, dtype=np.float32) * 1e-6
    with open(data, "wb") as f:
        for i in range(count):
            offset = f.tell()
            f.write(block.tobytes())
            t = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[1024, 1024])
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", data.name), ("offset", str(offset)), ("length", str(chunk * 4))):
                t.external_data.add(key=k, value=v)
            inits.append(t)
            nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"h{i}"], name=f"/fc{i}/MatMul"))
            x = f"h{i}"
    graph = helper.make_graph(
        nodes,
        "heavy",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1024])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 1024])],
        inits,
    )
    onnx.save(helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 13)]), str(path))


# A bare interpreter forks and execs the tool, then reports the child's max RSS: forking from this (large)
# process would start the child's high-water mark at our own size.
_LAUNCHER = (
    "import os, sys, time\n"
    "t = time.perf_counter(); pid = os.fork()\n"
    "if pid == 0:\n"
    "    fd = os.open(os.devnull, os.O_WRONLY); os.dup2(fd, 1); os.dup2(fd, 2); os.execvp(sys.argv[1], sys.argv[1:])\n"
    "_, status, ru = os.wait4(pid, 0)\n"
    "print(time.perf_counter() - t, ru.ru_maxrss, os.waitstatus_to_exitcode(status))\n"
)


def measure(cmd: list[str]) -> tuple[float, float, int]:
    """(seconds, peak RSS MiB, exit code) of one fresh process."""
    out = subprocess.run(
        [sys.executable, "-S", "-c", _LAUNCHER, *cmd], capture_output=True, text=True, check=True
    )
    sec, kib, code = out.stdout.split()
    return float(sec), int(kib) / 1024, int(code)


TOOLS = {
    "onnx-surgery inspect": lambda p: [sys.executable, "-m", "surgery", "inspect", str(p)],
    "onnx.load": lambda p: [sys.executable, "-c", f"import onnx; onnx.load({str(p)!r})"],
    "polygraphy inspect model": lambda p: [
        shutil.which("polygraphy") or "polygraphy",
        "inspect",
        "model",
        str(p),
    ],
    "python (baseline)": lambda p: [sys.executable, "-c", "import onnx"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=50_000)
    ap.add_argument("--weights-gib", type=float, default=1.0)
    ap.add_argument("--keep", type=Path, help="folder to keep the generated models in")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="inspect-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    models = {
        f"wide_{args.nodes // 1000}k": work / "wide.onnx",
        f"weights_{args.weights_gib:g}gib": work / "heavy.onnx",
    }
    wide, heavy = models.values()
    print(f"generating models in {work} ...", flush=True)
    if not wide.exists():
        make_wide(wide, args.nodes)
    if not heavy.exists():
        make_heavy(heavy, args.weights_gib)
    ext = heavy.with_suffix(".onnx.data").stat().st_size
    print(f"  {wide.name}: {wide.stat().st_size / 1e6:.1f} MB, {args.nodes} nodes")
    print(f"  {heavy.name}: {heavy.stat().st_size / 1e3:.1f} kB + {ext / 1024**3:.2f} GiB external data\n")

    rows = []
    for model_name, path in models.items():
        for tool, cmd in TOOLS.items():
            runs = [measure(cmd(path)) for _ in range(3)]
            sec = sorted(r[0] for r in runs)[1]
            rss = max(r[1] for r in runs)
            rows.append((model_name, tool, sec, rss, runs[0][2]))
            print(f"  {model_name:16s} {tool:26s} {sec:7.2f} s {rss:8.0f} MiB  exit {runs[0][2]}", flush=True)

    print(
        "\n| model | tool | seconds (median of 3) | peak RSS MiB | time vs onnx-surgery | memory vs onnx-surgery |"
    )
    print("|---|---|---|---|---|---|")
    for model_name in models:
        ours = next(r for r in rows if r[0] == model_name and r[1] == "onnx-surgery inspect")
        for r in rows:
            if r[0] == model_name:
                ok = "" if r[4] == 0 else f" (exit {r[4]})"
                print(
                    f"| {model_name} | {r[1]}{ok} | {r[2]:.2f} | {r[3]:.0f} | {r[2] / ours[2]:.2f}x | "
                    f"{r[3] / ours[3]:.2f}x |"
                )
    print(
        f"\nexternal data: {ext / 1024**2:.0f} MiB; onnx-surgery inspect peak RSS on it: "
        f"{next(r[3] for r in rows if r[0] == list(models)[1] and r[1] == 'onnx-surgery inspect'):.0f} MiB"
    )
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
