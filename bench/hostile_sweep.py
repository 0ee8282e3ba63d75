"""Hostile input on every command, as a user's shell runs it: each hostile model (garbage, a folder, a FIFO, a
cycle, names that are not UTF-8, external data that lies, ...) through every command (inspect, check, fix,
replay, split, reduce, quantize, build, precision, upgrade, survey), plus the hostile arguments of tests/test_hostile.py (outputs that are
the input or a hard link to it, recipes that are folders, FIFOs or /proc files, bombs, counts that make no
sense). Every run is a fresh `python -m surgery` process with a private TMPDIR and a time limit.

A run is counted as
- traceback: "Traceback" on stderr;        - hang: still running after --timeout seconds;
- overwritten: an input file (model, recipe, calibration, their hard links) changed or disappeared;
- not one line: exit 2 without exactly one stderr line "error: ...";
- bad JSON: a --json / --format json run whose stdout does not parse;
- temp left: files left in its private TMPDIR.
The goal is 0 in every column.

    python bench/hostile_sweep.py [--commands fix split ...] [--workers 2] [--timeout 120]

The hostile inputs themselves live in tests/test_hostile.py (one home): this sweep runs them through every
command where the tests run each through the command it is about.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from test_hostile import (  # noqa: E402  (the hostile inputs: one home)
    WRITES,
    _model_and_link,
    _recipes,
    make_external_model,
    make_non_utf8_model,
)

T = "tensorrt-static@10.15"
# {m}: the model, {o}: a file to write, {d}: a folder to write, {r}: a recipe made on the healthy sample
COMMANDS = {
    "inspect": [["inspect", "{m}"], ["inspect", "{m}", "--json"]],
    "check": [["check", "{m}", "-t", T, "--format", "json"], ["check", "{m}", "-t", "onnxruntime"]],
    "fix": [["fix", "{m}", "-t", "tensorrt-static@8.2", "-o", "{o}", "--recipe", "{o}.json"]],
    "replay": [["replay", "{m}", "{r}", "-o", "{o}"]],
    "split": [["split", "{m}", "-t", T, "-o", "{d}", "--json"]],
    "reduce": [["reduce", "{m}", "-t", "tensorrt-static@8.2", "-o", "{o}", "--time-limit", "30"]],
    "quantize": [["quantize", "{m}", "-o", "{o}", "--calib", "random:2"]],
    "build": [["build", "{m}", "--backend", "onnxruntime", "--out", "{d}", "--runs", "1", "--json"]],
    "precision": [["precision", "{m}", "--fp16", "-o", "{o}", "--json"]],
    "upgrade": [["upgrade", "{m}", "--from", "10.15", "--to", "11.5", "--fix", "-o", "{o}"]],
    "survey": [["survey", "{m}", "-t", T, "-o", "{d}", "--no-cache", "--format", "json"]],
}


def _bytes(folder: Path, name: str, data: bytes) -> str:
    (folder / name).write_bytes(data)
    return str(folder / name)


def _text_model(folder: Path, name: str, text: str) -> str:
    path = folder / name
    onnx.save(onnx.parser.parse_model(text), str(path))
    return str(path)


def _no_nodes(folder: Path) -> str:
    g = helper.make_graph([], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], [])
    path = folder / "empty_graph.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def hostile_models(folder: Path) -> dict[str, str]:
    """name -> path of each hostile model, made in `folder`."""
    healthy = folder / "healthy.onnx"
    healthy.write_bytes((ROOT / "sample_models" / "healthy_cnn.onnx").read_bytes())
    (folder / "a_folder.onnx").mkdir()
    os.mkfifo(folder / "fifo.onnx")
    os.symlink(healthy, folder / "link.onnx")
    ext = folder / "ext"
    ext.mkdir()
    lying = folder / "ext_lies"
    lying.mkdir()
    return {
        "garbage": _bytes(folder, "garbage.onnx", b"\x00\x01 not a model" * 10),
        "empty-file": _bytes(folder, "empty.onnx", b""),
        "truncated": _bytes(folder, "truncated.onnx", healthy.read_bytes()[:700]),
        "folder": str(folder / "a_folder.onnx"),
        "fifo": str(folder / "fifo.onnx"),
        "symlink": str(folder / "link.onnx"),
        "missing": str(folder / "missing.onnx"),
        "non-utf8-names": make_non_utf8_model(folder),
        "external-data": make_external_model(ext),
        "external-offset-negative": make_external_model(lying, offset="-64"),
        "cycle": _text_model(
            folder,
            "cycle.onnx",
            """<ir_version: 8, opset_import: ["" : 17]>
g (float[2] x) => (float[2] y) {
  a = Add (x, y)
  y = Relu (a)
}""",
        ),
        "huge-dim": _text_model(
            folder,
            "huge_dim.onnx",
            """<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 2000000000] x) => (float[1, 2000000000] y) {
  y = Relu (x)
}""",
        ),
        "unknown-domain": _text_model(
            folder,
            "unknown_domain.onnx",
            """<ir_version: 8, opset_import: ["" : 17, "my.domain" : 1]>
g (float[2] x) => (float[2] y) {
  y = my.domain.Mystery (x)
}""",
        ),
        "no-nodes": _no_nodes(folder),
    }


@dataclass
class Run:
    name: str
    argv: list[str]
    inputs: list[Path] = field(default_factory=list)


@dataclass
class Result:
    run: Run
    code: int | None
    seconds: float
    problems: list[str]


def _digest(p: Path) -> str | None:
    try:
        if p.is_file():
            return hashlib.sha256(p.read_bytes()).hexdigest()
        return "dir" if p.is_dir() else None
    except OSError:
        return None


def execute(run: Run, timeout: float) -> Result:
    before = {p: _digest(p) for p in run.inputs}
    with tempfile.TemporaryDirectory(prefix="hostile-tmp-") as tmp:
        env = dict(os.environ, TMPDIR=tmp, ONNX_SURGERY_STATE_DIR=str(Path(tmp) / "state"))
        t0 = time.perf_counter()
        try:
            p = subprocess.run(
                [sys.executable, "-m", "surgery", *run.argv],
                capture_output=True,
                timeout=timeout,
                env=env,
                stdin=subprocess.DEVNULL,
            )
            code, out, err = p.returncode, p.stdout, p.stderr.decode(errors="replace")
        except subprocess.TimeoutExpired:
            return Result(run, None, time.perf_counter() - t0, ["hang"])
        seconds = time.perf_counter() - t0
        # onnxruntime 1.32 keeps a 51-byte telemetry session id (".ses": a number and a UUID) in the temp folder
        # whenever it starts, disable_telemetry_events() or not: its own file, not a copy of anything of ours
        left = [
            q for q in Path(tmp).rglob("*") if q.is_file() and "state" not in q.parts and q.name != ".ses"
        ]
    problems = []
    if "Traceback" in err:
        problems.append("traceback")
    lines = err.strip().splitlines()
    if code == 2 and not (len(lines) == 1 and lines[0].startswith("error: ")):
        problems.append("not one line")
    if any(_digest(q) != d for q, d in before.items()):
        problems.append("overwritten")
    if code in (0, 1) and ("--json" in run.argv or "json" in run.argv):
        try:
            json.loads(out)
        except ValueError:
            problems.append("bad JSON")
    if left:
        problems.append("temp left")
    return Result(run, code, seconds, problems)


def plan(work: Path, commands: list[str]) -> list[Run]:
    runs = []
    models_dir = work / "models"
    models_dir.mkdir()
    models = hostile_models(models_dir)
    recipe = work / "healthy.recipe.json"
    subprocess.run(
        [sys.executable, "-m", "surgery", "fix", str(models_dir / "healthy.onnx"), "-t", "onnxruntime"]
        + ["-o", str(work / "healthy.fixed.onnx"), "--recipe", str(recipe)],
        capture_output=True,
        check=False,
    )
    originals = [Path(p) for p in models.values()] + [recipe]
    for cmd in commands:
        for k, template in enumerate(COMMANDS[cmd]):
            for label, model in models.items():
                out = work / "out" / f"{cmd}{k}-{label}"
                out.parent.mkdir(exist_ok=True)
                argv = [a.format(m=model, o=f"{out}.onnx", d=out, r=recipe) for a in template]
                runs.append(Run(f"{cmd}: {label}", argv, originals))
    # the argument cases of tests/test_hostile.py (outputs over inputs, hostile recipes), each in its own folder
    for k, (argv, _) in enumerate(WRITES):
        if argv[0] not in commands:
            continue
        d = work / f"writes{k}"
        d.mkdir()
        m = _model_and_link(d)
        runs.append(
            Run(
                f"{argv[0]}: {' '.join(argv[2:])[:48]}",
                [a.format(m=m, d=d) for a in argv],
                [m, d / "hard.onnx"],
            )
        )
    if "replay" in commands:
        d = work / "recipes"
        d.mkdir()
        m = _model_and_link(d)
        _recipes(d)
        for r in sorted(p for p in d.iterdir() if p.suffix in (".json", ".yaml")):
            runs.append(
                Run(f"replay: recipe {r.name}", ["replay", str(m), str(r), "-o", str(d / "out.onnx")], [m, r])
            )
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commands", nargs="*", default=list(COMMANDS), choices=list(COMMANDS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hostile-sweep-") as work:
        runs = plan(Path(work), args.commands)
        print(f"{len(runs)} runs over {', '.join(args.commands)} ({args.workers} at a time)", flush=True)
        results: list[Result] = []
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.workers) as pool:
            for n, r in enumerate(pool.map(lambda run: execute(run, args.timeout), runs), 1):
                results.append(r)
                if r.problems:
                    print(f"  {', '.join(r.problems)}: {r.run.name} (exit {r.code})", flush=True)
                if n % 20 == 0:
                    print(f"  {n}/{len(runs)} runs, {time.perf_counter() - t0:.0f} s", flush=True)
    kinds = ["traceback", "hang", "overwritten", "not one line", "bad JSON", "temp left"]
    print(f"\n| command | runs | exit 0/1/2/other | {' | '.join(kinds)} | slowest |")
    print("|---|---|---|" + "---|" * len(kinds) + "---|")
    for cmd in args.commands:
        mine = [r for r in results if r.run.name.startswith(cmd + ":")]
        if not mine:
            continue
        codes = [sum(r.code == c for r in mine) for c in (0, 1, 2)]
        other = len(mine) - sum(codes)
        counts = [sum(k in r.problems for r in mine) for k in kinds]
        slow = max(r.seconds for r in mine)
        print(
            f"| {cmd} | {len(mine)} | {'/'.join(map(str, codes))}/{other} | {' | '.join(map(str, counts))} | {slow:.1f} s |"
        )
    bad = sum(bool(r.problems) for r in results)
    print(f"\n{len(results)} runs, {bad} with a problem, {time.perf_counter() - t0:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
