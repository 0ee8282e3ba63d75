"""How well does the 10.x predictor (tensorrt-static) agree with a real TensorRT parser? Every node-test model
the onnx package generates is checked by both: the predicted verdicts against the errors of TensorRT-RTX 1.7's
live ONNX parser (a 10.x-era onnx-tensorrt that runs without a GPU), called directly, not through our backend.

    python bench/static_vs_rtx.py [--version 10.15] [--limit N] [--batch 150] [--timeout 240] [--list]

The parser runs in subprocesses, one batch of models each, under a time limit; a batch that crashes or times out
is re-run model by model so one bad model costs only itself ("rtx-crash").

A model agrees when both accept it, or both reject it and the nodes the parser names are all predicted rejected
(the parser imports nothing after its first import-time error, so a predicted rejection of a later node cannot
be checked and is not held against the predictor). Disagreements by cause:
  * rtx-lacks-plugin — RTX has no standard plugin library (NonZero, RoiAlign, DeformConv...): counted apart,
    not a predictor fault
  * predicted-reject — the table or a constraint rejects what the parser accepts
  * predicted-accept — the parser rejects what the predictor calls supported
  * wrong-node — both reject, but the parser names a node the predictor accepts
  * rtx-newer-parser — RTX's parser already has an 11.x change (Swish): the 11.1 prediction agrees
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORKER = r"""
import json, re, sys
import tensorrt_rtx as trt
logger = trt.Logger(trt.Logger.ERROR)
builder = trt.Builder(logger)
out = []
for path in json.loads(sys.stdin.read()):
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    ok = parser.parse_from_file(path)  # a path: external weights beside the model are found
    errors = []
    for i in range(parser.num_errors):
        e = parser.get_error(i)
        desc = re.sub(r"\s*cudaError\s*35.*$", "", e.desc().strip(), flags=re.S)
        errors.append({"desc": desc, "node": e.node(), "name": e.node_name(), "op": e.node_operator(),
                       "code": str(e.code()).split(".")[-1], "func": e.func()})
    out.append({"path": path, "ok": bool(ok), "errors": errors})
    print(json.dumps(out[-1]), flush=True)
"""
PLUGIN_WORDS = ("plugin", "Plugin")
# ScatterElements with a reduction is imported through the standard plugin ScatterElements v2 (10.10
# onnxOpImporters.cpp:5436 @ 10.10-GA), which RTX lacks
PLUGIN_BACKED = {("ScatterElements", "Unsupported reduction type")}


def run_batch(paths: list[str], timeout: float) -> dict[str, dict]:
    """Parse `paths` in one subprocess; returns path -> result for the models it finished."""
    try:
        p = subprocess.run(
            [sys.executable, "-c", WORKER],
            input=json.dumps(paths),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        stdout, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as exc:
        stdout, rc = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or ""), -9
    done = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            done[r["path"]] = r
    if rc != 0:
        for path in paths:
            done.setdefault(path, None)
    return done


def live_results(paths: list[str], batch: int, timeout: float) -> dict[str, dict]:
    results: dict[str, dict] = {}
    for i in range(0, len(paths), batch):
        chunk = paths[i : i + batch]
        got = run_batch(chunk, timeout)
        results.update({k: v for k, v in got.items() if v is not None})
        for path in chunk:  # a crashed or timed-out batch: the rest model by model
            if path not in results:
                one = run_batch([path], min(timeout, 60)).get(path)
                results[path] = one or {
                    "path": path,
                    "ok": False,
                    "errors": [],
                    "crash": True,
                }
        print(f"  {min(i + batch, len(paths))}/{len(paths)} parsed", flush=True)
    return results


def classify(model, pred, real) -> str | None:
    """None when the predictor agrees with the parser, else the cause."""
    from surgery.backends.base import Status

    if real.get("crash"):
        return "rtx-crash"
    pred_nodes = {v.index for v in pred.rejected}
    real_nodes = {e["node"] for e in real["errors"] if e["node"] >= 0}
    pred_ok = pred.accepted
    if pred_ok and real["ok"]:
        return None
    ops = {n.op_type for n in model.graph.node}
    plugin_errs = [
        e
        for e in real["errors"]
        if any(w in e["desc"] for w in PLUGIN_WORDS)
        or any(op in ops and text in e["desc"] for op, text in PLUGIN_BACKED)
    ]
    if plugin_errs and all(
        pred.verdicts[e["node"]].status is Status.SUPPORTED
        for e in plugin_errs
        if 0 <= e["node"] < len(pred.verdicts)
    ):
        non_plugin = [e for e in real["errors"] if e not in plugin_errs]
        if not non_plugin and not (pred_nodes - {e["node"] for e in plugin_errs} - {-1}):
            return "rtx-lacks-plugin"
    if not pred_ok and not real["ok"]:
        if real_nodes <= pred_nodes:
            first = min(real_nodes, default=len(model.graph.node))
            if all(i > first for i in pred_nodes - real_nodes) or not real_nodes:
                return None
            return "predicted-reject"
        return "wrong-node"
    return "predicted-reject" if not pred_ok else "predicted-accept"


def cause_of(model, pred, newer, real) -> str | None:
    cause = classify(model, pred, real)
    if (
        cause in ("predicted-reject", "predicted-accept", "wrong-node")
        and classify(model, newer, real) is None
    ):
        return (
            "rtx-newer-parser"  # RTX 1.7's parser has 11.x changes (e.g. Swish): the 11.1 prediction agrees
        )
    return cause


def main() -> None:
    from onnx.backend.test.case.node import collect_testcases

    from surgery.backends.tensorrt_static import make

    ap = argparse.ArgumentParser()
    ap.add_argument("--version", default="10.15")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--batch", type=int, default=150)
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--list", action="store_true", help="print every disagreement")
    ap.add_argument("--json", help="write every model's verdicts here")
    ap.add_argument("--models-dir", help="also compare on every *.onnx here (e.g. /tmp/realmodels)")
    args = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    if args.limit:
        cases = cases[: args.limit]
    static, newer = make(args.version), make("11.1")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        models, paths = {}, []
        for k, case in enumerate(cases):
            m = onnx.ModelProto()
            m.CopyFrom(case.model)
            m.ir_version = min(m.ir_version, 13)
            path = os.path.join(tmp, f"{k:05d}.onnx")
            Path(path).write_bytes(m.SerializeToString())
            models[path] = (case.name, m)
            paths.append(path)
        if args.models_dir:
            from surgery.model import load_model

            for f in sorted(Path(args.models_dir).glob("*.onnx")):
                models[str(f)] = (f.name, load_model(str(f)).proto)
                paths.append(str(f))
        real = live_results(paths, args.batch, args.timeout)
    t_live = time.perf_counter() - t0
    causes: Counter = Counter()
    words = Counter()  # agreeing rejections: does the predicted message carry the parser's words?
    examples = defaultdict(list)
    rows = []
    t1 = time.perf_counter()
    for path in paths:
        name, m = models[path]
        pred = static.check(m)
        r = real[path]
        cause = cause_of(m, pred, newer.check(m), r)
        ops = sorted({n.op_type for n in m.graph.node})
        rows.append({"name": name, "ops": ops, "cause": cause, "real": r, "pred": pred.to_dict()})
        if cause is None:
            by_index = {v.index: v.words for v in pred.rejected}
            for e in r["errors"]:
                if e["node"] in by_index:
                    same = e["desc"].splitlines()[0][:50] in by_index[e["node"]]
                    words["same" if same else "different"] += 1
                    if not same:
                        examples["different-words"].append(
                            f"{name}: parser {e['desc'][:90]!r} | predicted {by_index[e['node']][:90]!r}"
                        )
            continue
        causes[cause] += 1
        rmsg = next(iter([e["desc"] for e in r["errors"]]), "accepted")
        pmsg = next(iter([v.words or v.explanation for v in pred.rejected]), "accepted")
        examples[cause].append(
            f"{name} [{', '.join(ops)}]: parser: {rmsg[:120]!r} | predicted: {pmsg[:90]!r}"
        )
    t_pred = time.perf_counter() - t1
    n = len(paths)
    agree = n - sum(causes.values())
    plugin = causes["rtx-lacks-plugin"]
    print(f"\nnode-test models: {n}; tensorrt-static@{args.version} vs TensorRT-RTX ONNX parser")
    print(f"parser {t_live:.1f} s (subprocess batches of {args.batch}), predictor {t_pred:.2f} s")
    print(f"agree: {agree} ({agree / n:.1%}); RTX lacks plugin: {plugin}")
    judged = n - plugin - causes["rtx-crash"]
    print(
        f"agreement excluding RTX-lacks-plugin and crashes: {agree}/{judged} ({agree / max(judged, 1):.1%})\n"
    )
    n_words = sum(words.values())
    print(
        f"messages of agreeing rejections that carry the parser's words (first 50 characters): "
        f"{words['same']}/{n_words} ({words['same'] / max(n_words, 1):.1%})\n"
    )
    print("| cause | models | examples |")
    print("|---|---|---|")
    for cause, count in causes.most_common():
        if cause == "different-words":
            continue
        print(f"| {cause} | {count} | {'; '.join(x.split(' [')[0] for x in examples[cause][:6])} |")
    if args.list:
        for cause, lines in examples.items():
            print(f"\n## {cause} ({len(lines)})")
            for line in lines:
                print(f"- {line}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
