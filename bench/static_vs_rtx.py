"""How well does the TensorRT predictor (tensorrt-static) agree with a real TensorRT parser and builder?

    python bench/static_vs_rtx.py [--version 10.15] [--build] [--corpus] [--limit N] [--list] [--json FILE]

Models: every node-test model the onnx package generates, split by a fixed seed into a tuning part and a
held-out part (`split_of`: a third held out), and with --corpus the real models of the corpus
(bench/corpus/build.py; its manifest's own tune/holdout split).

The live side is TensorRT-RTX through the same worker the `tensorrt` backend uses (surgery.backends.tensorrt.worker):
every node gets a verdict (the parser is re-run on what is left after each refusal). With --build, models the
parser accepts are built as well (no optimization profile, as `onnx-surgery build` does without --profile).
The predictor is called on the same models at depth parse, and at depth build for the build comparison.

A model agrees at parse when the predictor refuses exactly the nodes the parser refuses — an extra predicted
refusal is a disagreement — and both agree on a model-level error. Nodes the live side cannot judge are left
out of that comparison: those TensorRT-RTX refuses only for want of a standard plugin (full TensorRT has it),
and those fed by a refused node or never reached. A model whose only difference is such a node counts as
`not-judged-live`, apart from the agreement figure. At build, a model the parser accepts agrees when the predictor's build-depth outcome (refuses or not)
equals the real builder's. Disagreements are listed with --list, by cause:
  predicted-reject  the predictor refuses a node (or the model) the parser accepts
  predicted-accept  the parser refuses a node the predictor accepts
  both              some of each
The 11.1 prediction is shown beside: TensorRT-RTX 1.7's parser already carries 11.x changes (e.g. Swish).
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
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SPLIT_SALT = "onnx-surgery-node-tests-v1"
CORPUS = Path(os.environ.get("ONNX_SURGERY_CORPUS", "~/.cache/onnx-surgery/corpus")).expanduser()

WORKER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from surgery.backends.tensorrt.worker import build_error, check, import_trt
build = sys.argv[2] == "1"
trt, flavour = import_trt()

for path in json.loads(sys.stdin.read()):
    data = open(path, "rb").read()
    base = str(__import__("pathlib").Path(path).parent)
    out = check(data, base)
    if build and out["accepted"]:
        out["build_error"] = build_error(trt, data, base + "/model.onnx")
    out["path"] = path
    print("RESULT " + json.dumps(out), flush=True)
"""


def split_of(name: str) -> str:
    """The fixed split of the node tests: a third held out, by a salted hash of the test's name."""
    return (
        "holdout" if int(hashlib.sha1(f"{name}:{SPLIT_SALT}".encode()).hexdigest(), 16) % 3 == 0 else "tune"
    )


def run_batch(paths: list[str], build: bool, timeout: float) -> dict[str, dict | None]:
    try:
        p = subprocess.run(
            [sys.executable, "-c", WORKER, str(ROOT), "1" if build else "0"],
            input=json.dumps(paths),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        stdout = p.stdout
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
    done: dict[str, dict | None] = {}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            r["verdicts"] = {int(k): v for k, v in r["verdicts"].items()}
            done[r["path"]] = r
    return done


def live_results(paths: list[str], build: bool, batch: int, timeout: float) -> dict[str, dict]:
    results: dict[str, dict] = {}
    for i in range(0, len(paths), batch):
        chunk = paths[i : i + batch]
        results.update(run_batch(chunk, build, timeout))
        for (
            path
        ) in chunk:  # a crashed or timed-out batch: the rest one by one, so a bad model costs only itself
            if path not in results:
                results[path] = run_batch([path], build, min(timeout, 120)).get(path) or {"crash": True}
        print(f"  {min(i + batch, len(paths))}/{len(paths)} checked live", flush=True)
    return results


def _judgeable(model: onnx.ModelProto, live: dict) -> tuple[set[int], set[int], set[int]]:
    """(refused, accepted, left out) node indices on the live side; plugin-only refusals and nodes fed by a
    refused node are left out."""
    from surgery.backends.tensorrt.live import TensorRTBackend

    caveat = TensorRTBackend()._rtx_caveat
    refused, accepted, out = set(), set(), set()
    for i, node in enumerate(model.graph.node):
        v = live["verdicts"].get(i)
        if v is None or v["status"] == "unknown":
            out.add(i)
        elif v["status"] == "rejected":
            (out if caveat(node.op_type, v["words"]) else refused).add(i)
        else:
            accepted.add(i)
    return refused, accepted, out


def classify_parse(model, pred, live) -> str | None:
    """None when the predictor refuses exactly what the parser refuses (see the module docstring)."""
    from surgery.verdict import Stage

    if live.get("crash"):
        return "rtx-crash"
    refused, accepted, out = _judgeable(model, live)
    pred_refused = {v.index for v in pred.rejected if v.stage is Stage.PARSE}
    live_model_error = bool(live["messages"])
    pred_model_error = any(m.stage is Stage.PARSE for m in pred.errors)
    extra = (pred_refused - refused) - out
    missed = refused - pred_refused
    if not extra and not missed and live_model_error == pred_model_error:
        if (pred_refused & out) and not refused:
            return "not-judged-live"
        return None
    if not missed and not live_model_error:
        return "predicted-reject"
    if not extra and not pred_model_error:
        return "predicted-accept"
    return "both"


def classify_build(live, pred_build) -> str | None:
    """For a model the parser accepts: does the predicted build outcome match the real builder's?"""
    from surgery.verdict import Outcome

    real_fails = live.get("build_error") is not None
    pred_fails = pred_build.outcome is Outcome.REJECTS
    if real_fails == pred_fails:
        return None
    return "predicted-reject" if pred_fails else "predicted-accept"


def node_test_models(tmp: Path, limit: int) -> list[tuple[str, str, str, str]]:
    """(name, path, part, split) for every node-test model."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    out = []
    for k, case in enumerate(cases[:limit] if limit else cases):
        m = onnx.ModelProto()
        m.CopyFrom(case.model)
        m.ir_version = min(m.ir_version, 13)
        d = tmp / f"{k:05d}"
        d.mkdir()
        (d / "model.onnx").write_bytes(m.SerializeToString())
        out.append((case.name, str(d / "model.onnx"), "node tests", split_of(case.name)))
    return out


def corpus_models() -> list[tuple[str, str, str, str]]:
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    records = manifest["models"] if isinstance(manifest, dict) else manifest
    return [
        (r["id"], str(CORPUS / r["path"]), "real models", r["split"])
        for r in records
        if r["family"] != "node-test"
    ]


def main() -> None:
    from surgery.backends.tensorrt.predictor import make
    from surgery.model import load_model
    from surgery.verdict import Stage

    ap = argparse.ArgumentParser()
    ap.add_argument("--version", default="10.15")
    ap.add_argument("--build", action="store_true", help="also build what the parser accepts")
    ap.add_argument("--corpus", action="store_true", help="also the real models of the corpus")
    ap.add_argument("--no-node-tests", action="store_true")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--list", action="store_true", help="print every disagreement")
    ap.add_argument("--json", help="write every model's outcome here")
    args = ap.parse_args()
    static, newer = make(args.version), make("11.1")
    t0 = time.perf_counter()
    tmpdir = tempfile.TemporaryDirectory()
    models = [] if args.no_node_tests else node_test_models(Path(tmpdir.name), args.limit)
    if args.corpus:
        models += corpus_models()
    live = live_results([m[1] for m in models], args.build, args.batch, args.timeout)
    t_live = time.perf_counter() - t0
    counts: dict[tuple, Counter] = defaultdict(Counter)
    examples: dict[str, list[str]] = defaultdict(list)
    rows = []
    for name, path, part, split in models:
        try:
            m = load_model(path).proto
        except Exception as exc:  # a corpus file this tool refuses: say so, do not stop the run
            examples["load-error"].append(f"{name}: {exc}")
            continue
        r = live[path]
        pred = static.check(m)
        cause = classify_parse(m, pred, r)
        if (
            cause in ("predicted-reject", "predicted-accept", "both")
            and classify_parse(m, newer.check(m), r) is None
        ):
            cause = "rtx-newer-parser"
        counts[(part, split, "parse")][cause or "agree"] += 1
        row = {"name": name, "part": part, "split": split, "parse": cause}
        if cause:
            live_words = [v["words"].splitlines()[0] for v in r.get("verdicts", {}).values() if v["words"]][
                :1
            ]
            pred_words = [(v.words or v.explanation).splitlines()[0] for v in pred.rejected][:1]
            examples[f"parse {cause}"].append(
                f"[{split}] {name}: parser: {(live_words or ['accepts'])[0][:110]!r} | "
                f"predicted: {(pred_words or ['accepts'])[0][:110]!r}"
            )
        if args.build and r.get("accepted"):
            built = classify_build(r, static.check(m, depth=Stage.BUILD))
            counts[(part, split, "build")][built or "agree"] += 1
            row["build"] = built
            if built:
                examples[f"build {built}"].append(
                    f"[{split}] {name}: builder: {str(r.get('build_error'))[:160]!r}"
                )
        rows.append(row)
    tmpdir.cleanup()
    print(
        f"\ntensorrt-static@{args.version} vs {static.label.split(' (')[0]} predictor against the TensorRT-RTX parser"
    )
    print(
        f"live side {t_live:.0f} s for {len(models)} models ({'parse and build' if args.build else 'parse'})\n"
    )
    print(
        "| models | split | stage | models | agree | agreement | not-judged-live (apart) | rtx-newer-parser |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (part, split, stage), c in sorted(counts.items()):
        apart = c["not-judged-live"] + c["rtx-crash"]
        judged = sum(c.values()) - apart
        print(
            f"| {part} | {split} | {stage} | {sum(c.values())} | {c['agree']} | "
            f"{c['agree'] / max(judged, 1):.1%} | {c['not-judged-live']} | {c['rtx-newer-parser']} |"
        )
    print("\ndisagreements by cause:")
    for key, lines in sorted(examples.items()):
        print(f"  {key}: {len(lines)}")
    if args.list:
        for key, lines in sorted(examples.items()):
            print(f"\n## {key} ({len(lines)})")
            for line in lines:
                print(f"- {line}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
