"""Constant folding against Polygraphy, onnxsim and onnxslim on the same models in one run: nodes left and
time (wall and CPU, the median of up to 3 runs in process, model already loaded, each tool warmed up on a small
sample first so that no tool's imports are timed), and our time as a ratio of the fastest peer.

    python bench/fold_vs_peers.py [--models-dir DIR] [--quick]
    python bench/fold_vs_peers.py --corpus [--split tune] [--family detection] [--models ID,ID] [--json FILE]

Models: the teaching samples, a generated 64 MiB constant chain through 200 ops, and every .onnx in
--models-dir (e.g. what bench/export_models.py writes: torchvision / transformers exports). --corpus runs the
real models of the corpus instead (~/.cache/onnx-surgery/corpus, bench/corpus/README.md; its node tests are left
out: one op each, nothing to fold).
Goals (issue 30): nodes left <= Polygraphy's on every model, and our time <= 0.5x the fastest peer's where any
tool takes >= 0.05 s. The last column names what onnxsim/onnxslim removed beyond our output by fusing or
eliminating ops rather than folding (their op counts compared with ours).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
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

    # error_ok=False: a failed pass (onnx_graphsurgeon missing, onnxruntime refusing the model) fails the cell
    # instead of returning the model unfolded, which would look like a fast run that folded nothing
    return fold_constants(onnx.ModelProto.FromString(model.SerializeToString()), error_ok=False)


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


CORPUS = Path(os.environ.get("ONNX_SURGERY_CORPUS", "~/.cache/onnx-surgery/corpus")).expanduser()
SLOW_S = 0.05  # the time goal counts where some tool takes at least this long
REPEAT_BUDGET_S = 3.0  # runs after the first stop once this much was spent on the model


# op types whose count a peer lowers by fusing or eliminating, not by folding: a name for each pattern, matched
# on the difference of op counts (ours -> the peer's), fewest assumptions first
SHAPE_OPS = ("Shape", "Gather", "Concat", "Unsqueeze", "Squeeze", "Slice", "Cast", "ConstantOfShape", "Range")


def fusions(ours: dict[str, int], theirs: dict[str, int]) -> str:
    """Which patterns a peer fused or eliminated beyond our output, named from the op counts, then the counts
    themselves (the evidence): 'Conv+BN, shape chains (-3 BatchNormalization, -4 Shape, ...)'."""
    delta = {op: theirs.get(op, 0) - ours.get(op, 0) for op in set(ours) | set(theirs)}
    delta = {op: d for op, d in delta.items() if d}
    less = {op for op, d in delta.items() if d < 0}
    more = {op for op, d in delta.items() if d > 0}
    names = []
    if "BatchNormalization" in less:
        names.append("Conv+BN" if ours.get("Conv") else "BN into Mul/Add")
    if "Gemm" in more and "MatMul" in less:
        names.append("MatMul+Add into Gemm")
    if more & {"LayerNormalization", "SkipLayerNormalization"} or {"ReduceMean", "Pow", "Sqrt"} <= less:
        names.append("LayerNorm pattern")
    if more & {"Gelu", "FastGelu", "BiasGelu"} or "Erf" in less:
        names.append("GELU pattern")
    if more & {"Attention", "MultiHeadAttention"}:
        names.append("attention")
    if less & set(SHAPE_OPS):
        names.append("shape chains (Shape->Gather->Concat ...)")
    if less & {"Identity", "Dropout"}:
        names.append("Identity/Dropout dropped")
    if less & {"Reshape", "Transpose", "Flatten"}:
        names.append("Reshape/Transpose merged")
    if less & {"Add", "Mul", "Sub", "Div"} and "Conv" in ours and not names:
        names.append("Add/Mul into Conv weights")
    counts = ", ".join(f"{d:+d} {op}" for op, d in sorted(delta.items(), key=lambda od: (od[1], od[0]))[:6])
    more_counts = " ..." if len(delta) > 6 else ""
    return f"{', '.join(names) or 'other'} ({counts}{more_counts})"


def fold_one(tool: str, path: str, repeat: int) -> str:
    """Load the model, fold it up to `repeat` times with `tool`: 'RESULT nodes wall cpu {op: count}' (median
    seconds)."""
    model = onnx.load(path)
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = TOOLS[tool](model)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
        if sum(walls) > REPEAT_BUDGET_S:
            break
    ops: dict[str, int] = {}
    for n in out.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    return (
        f"RESULT {len(out.graph.node)} {statistics.median(walls)} {statistics.median(cpus)} {json.dumps(ops)}"
    )


def serve(tool: str, repeat: int) -> None:
    """Child process: warm the tool up on a small sample (its imports, onnxruntime's first session), then fold
    each model path read from stdin, answering one RESULT or ERROR line each (tools print on stdout too)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        TOOLS[tool](build("resize_scales_chain"))
    for line in sys.stdin:
        try:
            answer = fold_one(tool, line.strip(), repeat)
        except Exception as exc:  # noqa: BLE001 - the cell says the tool failed
            answer = "ERROR " + (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:60]
        print("\n" + answer, flush=True)


class Worker:
    """One tool in its own process, kept for the whole run (its start and imports paid once) and started again
    after a crash or a timeout: a peer that dies (Polygraphy exits on some models) costs only its cell."""

    def __init__(self, tool: str, repeat: int, cwd: Path):
        self.tool, self.repeat, self.proc, self.cwd = tool, repeat, None, cwd

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--serve",
                self.tool,
                "--repeat",
                str(self.repeat),
            ],
            # in the run's own folder: a peer killed at its time limit leaves its temporary files there (Polygraphy's
            # uuid-named .data files, onnxruntime's sym_shape_infer_temp.onnx), not in the caller's folder
            cwd=self.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # a failure is an ERROR line, a crash its exit status
            text=True,
        )
        # a thread reads the answers into a queue, so that waiting for one can time out (select on a buffered
        # pipe would miss a line already read into the buffer)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True).start()

    @staticmethod
    def _read(stream, lines: queue.Queue) -> None:
        for line in stream:
            lines.put(line)
        lines.put("")  # the process ended

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def measure(self, path: Path, limit: float) -> dict:
        """{'nodes', 'wall', 'cpu', 'ops'} on success, {'error'} otherwise."""
        if self.proc is None:
            self.start()
        self.proc.stdin.write(f"{path}\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + limit
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                self.stop()
                return {"error": f"timeout (> {limit:.0f} s)"}
            if not line:
                code = self.proc.wait()
                self.proc = None
                return {"error": f"fails (exit {code})"}
            if line.startswith("ERROR "):
                return {"error": f"fails ({line[6:].strip()[:40]})"}
            if line.startswith("RESULT "):
                _, nodes, wall, cpu, ops = line.split(" ", 4)
                return {"nodes": int(nodes), "wall": float(wall), "cpu": float(cpu), "ops": json.loads(ops)}


def corpus_models(split: str | None, family: str | None, ids: list[str] | None = None) -> dict[str, Path]:
    """The corpus's real models (node tests left out), by id; `ids`: only these, in this order."""
    manifest = json.loads((CORPUS / "manifest.json").read_text())["models"]
    found = {
        m["id"]: CORPUS / m["path"]
        for m in manifest
        if m.get("family") != "node-test"
        and (split is None or m.get("split") == split)
        and (family is None or m.get("family") == family)
        and (CORPUS / m["path"]).exists()
    }
    if ids is None:
        return found
    missing = [i for i in ids if i not in found]
    if missing:
        raise SystemExit(f"not in the corpus (or filtered out): {', '.join(missing)}")
    return {i: found[i] for i in ids}


def row(name: str, nodes: int, results: dict[str, dict]) -> tuple[str, dict]:
    """One table line, and the goal verdicts behind it."""
    cells = []
    for tool in TOOLS:
        r = results[tool]
        cells.append(r["error"] if "error" in r else f"{r['nodes']} / {r['wall']:.3f} / {r['cpu']:.3f}")
    ours, poly = results["onnx-surgery"], results["polygraphy"]
    verdict: dict = {}
    if "nodes" in ours and "nodes" in poly:
        verdict["nodes_ok"] = ours["nodes"] <= poly["nodes"]
    peers = {k: r for k, r in results.items() if k != "onnx-surgery" and "wall" in r}
    if "wall" in ours and peers:
        fastest = min(peers, key=lambda k: peers[k]["wall"])
        verdict["ratio"] = ours["wall"] / peers[fastest]["wall"]
        verdict["cpu_ratio"] = ours["cpu"] / max(peers[fastest]["cpu"], 1e-9)
        verdict["fastest"] = fastest
        if max([ours["wall"]] + [r["wall"] for r in peers.values()]) >= SLOW_S:
            verdict["time_ok"] = verdict["ratio"] <= 0.5
    nodes_cell = {True: "yes", False: "**no**"}.get(verdict.get("nodes_ok"), "-")
    if "ratio" in verdict:
        ratio = f"{verdict['ratio']:.2f}x ({verdict['cpu_ratio']:.2f}x) {verdict['fastest']}"
        time_cell = {True: "yes", False: "**no**"}.get(verdict.get("time_ok"), "(fast)")
    else:
        ratio, time_cell = "-", "-"
    fused = []
    if "ops" in ours:
        for peer in ("onnxsim", "onnxslim"):
            if "ops" in results[peer] and results[peer]["nodes"] < ours["nodes"]:
                fused.append(f"{peer}: {fusions(ours['ops'], results[peer]['ops'])}")
    line = (
        f"| {name} | {nodes} | "
        + " | ".join(cells)
        + f" | {nodes_cell} | {ratio} | {time_cell} | {'; '.join(fused) or '-'} |"
    )
    return line, verdict


def summary(verdicts: list[dict]) -> str:
    compared = [v for v in verdicts if "nodes_ok" in v]
    timed = [v for v in verdicts if "time_ok" in v]
    ratios = sorted(v["ratio"] for v in timed)
    median = f"{statistics.median(ratios):.2f}x" if ratios else "-"
    return (
        f"nodes <= Polygraphy on {sum(v['nodes_ok'] for v in compared)} of {len(compared)} models (where "
        f"Polygraphy finished); time <= 0.5x the fastest peer on {sum(v['time_ok'] for v in timed)} of "
        f"{len(timed)} models where a tool takes >= {SLOW_S} s (median ratio {median})"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models-dir", type=Path)
    ap.add_argument("--corpus", action="store_true", help="the corpus's real models instead of the samples")
    ap.add_argument("--split", help="with --corpus: only this split (tune, holdout)")
    ap.add_argument("--family", help="with --corpus: only this family")
    ap.add_argument("--models", help="with --corpus: only these model ids, comma-separated")
    ap.add_argument("--json", type=Path, help="write every measurement here too")
    ap.add_argument("--quick", action="store_true", help="one run each, no constant chain")
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=3, help=argparse.SUPPRESS)
    ap.add_argument(
        "--limit", type=float, default=TIME_LIMIT_S, help="seconds per tool and model (all repeats)"
    )
    args = ap.parse_args()
    if args.serve:
        return serve(args.serve, args.repeat)
    work = Path(tempfile.mkdtemp(prefix="fold-bench-"))
    models = {}
    if args.corpus:
        ids = [i.strip() for i in args.models.split(",") if i.strip()] if args.models else None
        models = corpus_models(args.split, args.family, ids)
    else:
        for name in SAMPLES:
            onnx.save(build(name), str(work / f"{name}.onnx"))
            models[name] = work / f"{name}.onnx"
        if not args.quick:
            onnx.save(constant_chain(), str(work / "constant_chain_64MiB.onnx"))
            models["constant_chain_64MiB"] = work / "constant_chain_64MiB.onnx"
    if args.models_dir:
        models.update({p.stem: p for p in sorted(args.models_dir.glob("*.onnx"))})
    elif not args.corpus:
        print(
            "note: no --models-dir: real CNN/transformer exports skipped (bench/export_models.py writes them)"
        )
    repeat = 1 if args.quick else 3
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        "| model | nodes | "
        + " | ".join(f"{t} nodes / wall s / CPU s" for t in TOOLS)
        + " | nodes <= polygraphy | ours / fastest peer, wall (CPU) | time goal | beyond folding |"
    )
    print("|---|---|" + "---|" * len(TOOLS) + "---|---|---|---|")
    verdicts, records = [], []
    workers = {tool: Worker(tool, repeat, work) for tool in TOOLS}
    for name, path in models.items():
        n = len(onnx.load(str(path), load_external_data=False).graph.node)
        results = {tool: workers[tool].measure(path, args.limit) for tool in TOOLS}
        line, verdict = row(name, n, results)
        verdicts.append(verdict)
        records.append({"model": name, "nodes": n, "results": results, "verdict": verdict})
        print(line, flush=True)
        if args.json:
            args.json.write_text(json.dumps(records, indent=1))
    for w in workers.values():
        w.stop()
    shutil.rmtree(work, ignore_errors=True)
    print(summary(verdicts))
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
