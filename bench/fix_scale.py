"""How long does `fix` take on a big model, and how much memory, at every target that applies steps to it? A
generated transformer stack (bench/_models.py: opset 17, dynamic batch and sequence, a LayerNormalization and a
Squeeze without axes per block) at 10k, 50k and 100k nodes, fixed by the CLI in a child process for each target
(wall time, CPU time and peak resident memory of that process and what it runs: on a busy machine the CPU time
is the steadier figure), then the written recipe replayed on the original and compared bit for bit.

    python bench/fix_scale.py [--sizes 10000 50000 100000] [--targets tensorrt-static@8.2 ...] [--timeout 600]
    python bench/fix_scale.py --sizes --models FILE.onnx ... --targets tensorrt-static@8.6   # real models too
    python bench/fix_scale.py --sizes --models FILE.onnx --split ...   # and `split` of each, a row beside

A real model's fix may take several steps, each a version of the model (its weights too, when they are in the
file): `--models` puts such rows beside the stacks, with the same columns.

The targets, and what they change on the stack: tensorrt-static@8.2 decomposes every LayerNormalization (no
importer before 8.6: one step on every node); @8.6 and @10.15 give every Squeeze without axes its axes (one step);
onnxruntime runs the model as it is (no step: the floor, what checking alone costs).

Goals (issue 30): 50k nodes <= 30 s and 100k <= 60 s at every target (other sizes: pro rata, 0.6 s per 1k
nodes); peak memory <= 3x the model's size in memory. The model's size is what loading it adds to a process
(`load_model`, resident memory after minus before); the fix's memory is its peak less the peak of the same
command on a 200-node stack (the interpreter, onnx, onnxruntime: what any fix costs). Beside it, what onnxruntime
alone needs for the same file: a process that makes its session (as the check and the verification make theirs)
and runs it once on seeded inputs, its peak less the same on the 200-node stack, also as a multiple of the
model: a fix that checks or verifies on onnxruntime holds at least that; and the same for the fixed model (the
file the fix wrote), which verification runs too: the fix's memory over the larger of the two is its own cost. Beside the peak, which process it was:
the command's own and its largest worker's (verification, checks), each sampled every 50 ms. The machine's load
is printed with the figures: on a shared 2-core machine a busy neighbour doubles them.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from _models import transformer_stack  # noqa: E402
from _procs import children, peak_mib  # noqa: E402

TARGETS = ["tensorrt-static@8.2", "tensorrt-static@8.6", "tensorrt-static@10.15", "onnxruntime"]
MEMORY_GOAL = 3.0  # x the model's size in memory


def time_goal(nodes: int) -> float:
    return {50000: 30.0, 100000: 60.0}.get(nodes, nodes * 0.6 / 1000)


# The kernel's peak resident memory of a process (ru_maxrss) counts, for a child started by fork or vfork, its
# parent's resident pages at the start: read from this process, which holds the generated and loaded models, a
# fix's peak was at least this bench's own. The fix runs under a small launcher, whose children's peak is the
# fix's and its workers'.
LAUNCHER = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[2:])\n"
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
    "sys.exit(code)\n"
)


def run_fix(
    src: Path, target: str, out: Path, recipe: Path, timeout: float
) -> tuple[float, float, float, str, int]:
    """Wall seconds, CPU seconds and peak MiB (the fix and every process it waited for), stdout, exit status
    (None: timed out)."""
    argv = ["fix", str(src), "-t", target, "-o", str(out), "--recipe", str(recipe)]
    return run_cli(argv, out.with_suffix(".peak"), timeout)


def run_split(src: Path, target: str, folder: Path, timeout: float) -> tuple[float, float, float, str, int]:
    """As run_fix, for `split` into `folder`."""
    return run_cli(["split", str(src), "-t", target, "-o", str(folder)], folder.with_suffix(".peak"), timeout)


PROCESS_PEAKS: dict[str, dict[int, float]] = {}  # run_cli's last run: {"own": {pid: MiB}, "workers": {...}}


def _sample_peaks(launcher: int, done: threading.Event) -> None:
    """Every 50 ms until `done`: the peak (VmHWM) of the command's own process (the launcher's child) and of each
    process it started (its workers: verification, shape inference, checks), by pid, into PROCESS_PEAKS."""
    own: dict[int, float] = {}
    workers: dict[int, float] = {}
    PROCESS_PEAKS.update(own=own, workers=workers)
    while not done.is_set():
        for pid in children(launcher):
            stack, into = [pid], own
            while stack:
                q = stack.pop()
                hwm = peak_mib(q)
                if hwm is not None:
                    into[q] = max(into.get(q, 0.0), hwm)
                stack += children(q)
                into = workers
        done.wait(0.05)


def run_cli(argv: list[str], peak_file: Path, timeout: float) -> tuple[float, float, float, str, int]:
    """The CLI with `argv` under the launcher: wall seconds, CPU seconds, peak MiB, stdout, exit status (None:
    timed out). The peaks of its own process and of its workers, sampled, go to PROCESS_PEAKS."""
    cmd = [sys.executable, "-c", LAUNCHER, str(peak_file), sys.executable, "-m", "surgery.cli", *argv]
    with tempfile.TemporaryFile("w+") as log:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        done = threading.Event()
        sampler = threading.Thread(target=_sample_peaks, args=(p.pid, done), daemon=True)
        sampler.start()
        timer = threading.Timer(timeout, lambda: os.killpg(p.pid, signal.SIGKILL))
        timer.start()
        _, status, usage = os.wait4(p.pid, 0)
        done.set()
        sampler.join()
        seconds = time.perf_counter() - t0
        timed_out = not timer.is_alive()
        timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        text = log.read()
    cpu = usage.ru_utime + usage.ru_stime
    peak = int(peak_file.read_text()) / 1024 if peak_file.exists() else float("nan")  # killed: unknown
    return seconds, cpu, peak, text, None if timed_out else p.returncode


def split_peaks() -> str:
    """The last run's peaks: its own process / its largest worker, MiB."""
    own = max(PROCESS_PEAKS.get("own", {}).values(), default=float("nan"))
    workers = max(PROCESS_PEAKS.get("workers", {}).values(), default=0.0)
    return f"{own:.0f} / {workers:.0f}"


def model_mib(src: Path) -> float:
    """What loading the model adds to a process's resident memory, in MiB."""
    code = (
        "import sys\nfrom surgery.model import load_model\n"
        "import os\ndef rss():\n    return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')\n"
        "a = rss(); m = load_model(sys.argv[1]); b = rss(); print((b - a) / 2**20)"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, str(src)], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return float(p.stdout.strip())


def backend_mib(src: Path) -> float:
    """Peak MiB of a process that makes onnxruntime's session for `src` and runs it once on seeded inputs."""
    # the options surgery.ort.make_session uses to compare models (no arena, no graph optimizations), not
    # make_session itself: it takes the model in memory, which would count in this figure
    code = (
        "import sys, onnx, onnxruntime as ort\nfrom surgery.feeds import seeded_inputs\n"
        "m = onnx.load(sys.argv[1], load_external_data=False)\nfeeds = seeded_inputs(m)\ndel m\n"
        "so = ort.SessionOptions()\nso.enable_cpu_mem_arena = False\n"
        "so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL\n"
        "s = ort.InferenceSession(sys.argv[1], so, providers=['CPUExecutionProvider'])\ns.run(None, feeds)\n"
        "print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, str(src)], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return int(p.stdout.strip()) / 1024


def main() -> None:
    import onnx

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[10000, 50000, 100000])
    ap.add_argument("--targets", nargs="*", default=TARGETS)
    ap.add_argument(
        "--models", nargs="*", type=Path, default=[], help="model files to fix too, at each target"
    )
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a fix may take (default 600)")
    ap.add_argument(
        "--no-replay", action="store_true", help="skip replaying the recipe (saves a load and a replay)"
    )
    ap.add_argument(
        "--split", action="store_true", help="also split each model at each target (a row per split)"
    )
    args = ap.parse_args()
    for path in args.models:
        if not path.is_file():
            ap.error(f"{path}: not a model file")
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(
        "| nodes (model) | target | steps | fix s | cpu s | goal s | peak MiB | base MiB | model MiB | memory x model (goal <= 3) "
        "| its own process / its largest worker MiB (sampled) | onnxruntime alone MiB (x model) "
        "| onnxruntime alone on the fixed model MiB (x model) | fix / the larger of those two | after | replay bit for bit |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        tiny = Path(tmp) / "base.onnx"
        onnx.save(transformer_stack(200), str(tiny))
        base = {
            t: run_fix(tiny, t, Path(tmp) / "base.fixed.onnx", Path(tmp) / "base.json", args.timeout)[2]
            for t in args.targets
        }
        floor = backend_mib(tiny)
        sources = []
        for n in args.sizes:
            src = Path(tmp) / f"m{n}.onnx"
            onnx.save(transformer_stack(n), str(src))
            sources.append(src)
        for src in [*sources, *args.models]:
            nodes = len(onnx.load(str(src), load_external_data=False).graph.node)
            label = str(nodes) if src in sources else f"{src.stem}: {nodes}"
            size = model_mib(src)
            alone = backend_mib(src) - floor
            backend = f"{alone:.0f} ({alone / size:.1f}x)" if size > 0 else f"{alone:.0f}"
            for target in args.targets:
                out, recipe = (
                    Path(tmp) / f"{src.stem}.{target}{ext}" for ext in (".fixed.onnx", ".recipe.json")
                )
                seconds, cpu, peak, text, rc = run_fix(src, target, out, recipe, args.timeout)
                goal = time_goal(nodes) if src in sources else None  # the goals are the stacks'
                if rc is None:
                    print(
                        f"| {label} | {target} | ? | > {args.timeout:.0f} (stopped) | {cpu:.0f} | {'-' if goal is None else f'{goal:.0f} ✗'} | {peak:.0f} | "
                        f"{base[target]:.0f} | {size:.0f} | ? | {split_peaks()} | {backend} | - | - | - | - |",
                        flush=True,
                    )
                    continue
                steps = len(re.findall(r"^  \d+\. applied", text, re.M))
                after = re.search(
                    rf"\[{re.escape(target)}\]: (\w[\w ]*?) \(checked", text.split("after (")[-1]
                )
                same = "-"
                if not args.no_replay and out.exists():
                    from surgery.model import load_model
                    from surgery.workspace import Workspace

                    ws = Workspace(load_model(src))
                    ws.load_recipe(str(recipe))
                    same = (
                        "yes"
                        if ws.fingerprint() == Workspace(load_model(out)).original.fingerprint()
                        else "NO"
                    )
                times = (peak - base[target]) / size if size > 0 else float("nan")
                # verification runs both models on onnxruntime: the larger run is what the fix cannot go below
                fixed_alone = backend_mib(out) - floor if out.exists() else float("nan")
                fixed = f"{fixed_alone:.0f} ({fixed_alone / size:.1f}x)" if size > 0 else f"{fixed_alone:.0f}"
                over = (peak - base[target]) / max(alone, fixed_alone) if out.exists() else float("nan")
                print(
                    f"| {label} | {target} | {steps} | {seconds:.1f} | {cpu:.1f} | {'-' if goal is None else f'{goal:.0f} ' + ('✓' if seconds <= goal else '✗')} "
                    f"| {peak:.0f} | {base[target]:.0f} | {size:.0f} | {times:.1f} "
                    f"{'✓' if times <= MEMORY_GOAL else '✗'} | {split_peaks()} | {backend} | {fixed} | {over:.2f} "
                    f"| {after.group(1) if after else f'exit {rc}'} | {same} |",
                    flush=True,
                )
                if args.split:
                    split_row(src, label, target, size, base[target], backend, Path(tmp), args.timeout)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def split_row(src, label, target, size, base, backend, tmp: Path, timeout: float) -> None:
    """A row for `split` of `src` at `target`: its parts in the steps column, its memory less the fix's base (a
    split of the 200-node stack may stop before it imports what any split of a real model does)."""
    folder = tmp / f"{src.stem}.{target}.split"
    seconds, cpu, peak, text, rc = run_split(src, target, folder, timeout)
    parts = len(list(folder.glob("*.onnx"))) if folder.is_dir() else 0
    times = (peak - base) / size if size > 0 else float("nan")
    done = f"{parts} parts" if rc == 0 else "stopped" if rc is None else f"exit {rc}"
    print(
        f"| {label} | split {target} | {done} | {seconds:.1f} | {cpu:.1f} | - | {peak:.0f} | {base:.0f} | {size:.0f} "
        f"| {times:.1f} {'✓' if times <= MEMORY_GOAL else '✗'} | {split_peaks()} | {backend} | - | - | - | - |",
        flush=True,
    )


if __name__ == "__main__":
    main()
