"""Do the fusions onnxsim and onnxslim make beyond constant folding change what TensorRT says? For each real model
of the corpus: our fold, onnxsim and onnxslim, each in a child process (a peer that crashes or hangs costs one
model), then every output checked with the TensorRT targets at depth parse (the predictor at several versions and
the live TensorRT-RTX parser). A verdict that a peer's output changes against ours (the model accepted, or fewer nodes
refused) is a fusion some TensorRT version needs: a rule to add (issue 30, item 3). A model is compared only where
the peer left fewer nodes than we did (elsewhere there is no fusion of theirs to judge).

    python bench/fusion_verdicts.py [--targets tensorrt-static@8.6 ...] [--models ID ...] [--limit N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fold_vs_peers import corpus_models  # noqa: E402

TARGETS = ["tensorrt-static@8.6", "tensorrt-static@10.15", "tensorrt-static@11.5", "tensorrt"]
PEERS = ("onnxsim", "onnxslim")
TIME_LIMIT_S = 300

# the child: one tool on one model, the output saved where the parent says (weights beside it past 1.5 GiB)
CHILD = r"""
import sys, warnings
sys.path.insert(0, sys.argv[4])
import onnx
from fold_vs_peers import TOOLS
tool, src, dst = sys.argv[1:4]
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    out = TOOLS[tool](onnx.load(src))
big = out.ByteSize() > 1.5 * 2**30
onnx.save(out, dst, save_as_external_data=big, location=dst.rsplit("/", 1)[-1] + ".data" if big else None)
"""


def run_tool(tool: str, src: Path, dst: Path) -> str | None:
    """None when `tool` wrote its output to `dst`, else why not (its last words, a timeout, a crash)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, tool, str(src), str(dst), str(Path(__file__).resolve().parent)],
            capture_output=True,
            text=True,
            timeout=TIME_LIMIT_S,
        )
    except subprocess.TimeoutExpired:
        return f"over {TIME_LIMIT_S} s"
    if done.returncode != 0 or not dst.exists():
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return (lines[-1] if lines else f"exit status {done.returncode}")[:160]
    return None


def verdicts(path: Path, targets: list[str]) -> dict[str, dict]:
    """Per target: whether it accepts, and the op types of the nodes it refuses (with their counts)."""
    from surgery.diagnose import check_model
    from surgery.model import load_model

    model = load_model(str(path))
    out = {}
    for r in check_model(model.proto, targets, model.base_dir, depth="parse", remember=False):
        refused = Counter(v.op_type for v in r.rejected)
        out[r.backend] = {"outcome": r.outcome.value, "refused": dict(refused), "nodes": len(r.verdicts)}
    return out


def better(theirs: dict, ours: dict) -> bool:
    """The peer's output fares better on this target: accepted where ours is not, or fewer nodes refused."""
    if theirs["outcome"] == "accepts" and ours["outcome"] != "accepts":
        return True
    return sum(theirs["refused"].values()) < sum(ours["refused"].values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", nargs="*", default=TARGETS)
    ap.add_argument("--models", nargs="*", default=None, help="corpus ids (default: every real model)")
    ap.add_argument("--limit", type=int, default=None, help="a sample of N models (fixed seed)")
    ap.add_argument("--json", default=None, help="write every row here")
    args = ap.parse_args()
    models = corpus_models(None, None, args.models)
    ids = sorted(models)
    if args.limit and args.limit < len(ids):
        ids = sorted(random.Random(0).sample(ids, args.limit))
    print(f"{len(ids)} models; targets {', '.join(args.targets)}; peers {', '.join(PEERS)}", flush=True)
    rows, t0 = [], time.perf_counter()
    for k, mid in enumerate(ids, 1):
        with tempfile.TemporaryDirectory(prefix="fusion-verdicts-") as tmp:
            outs, failed = {}, {}
            for tool in ("onnx-surgery", *PEERS):
                dst = Path(tmp) / tool / "model.onnx"
                dst.parent.mkdir()
                why = run_tool(tool, models[mid], dst)
                if why is None:
                    outs[tool] = dst
                else:
                    failed[tool] = why
            if "onnx-surgery" not in outs:
                print(f"[{k}/{len(ids)}] {mid}: our fold failed: {failed['onnx-surgery']}", flush=True)
                rows.append({"model": mid, "failed": failed})
                continue
            import onnx

            nodes = {t: len(onnx.load(str(p), load_external_data=False).graph.node) for t, p in outs.items()}
            fused = [p for p in PEERS if p in outs and nodes[p] < nodes["onnx-surgery"]]
            said = {t: verdicts(outs[t], args.targets) for t in ("onnx-surgery", *fused)}
        ours = said["onnx-surgery"]
        changes = {
            p: [t for t in args.targets if t in said[p] and better(said[p][t], ours[t])] for p in fused
        }
        worse = {p: [t for t in args.targets if t in said[p] and better(ours[t], said[p][t])] for p in fused}
        rows.append(
            {
                "model": mid,
                "nodes": nodes,
                "failed": failed,
                "verdicts": said,
                "better": changes,
                "worse": worse,
            }
        )
        note = "; ".join(
            [f"{p} better on {', '.join(c)}" for p, c in changes.items() if c]
            + [f"{p} worse on {', '.join(c)}" for p, c in worse.items() if c]
        )
        note = note or "no verdict changes"
        if args.json:  # after every model: a run stopped early keeps what it measured
            Path(args.json).write_text(json.dumps(rows, indent=1))
        print(
            f"[{k}/{len(ids)}] {mid}: nodes {nodes}; peers with fewer nodes: {', '.join(fused) or 'none'}; {note}"
            + (f"; failed: {failed}" if failed else ""),
            flush=True,
        )
    compared = [r for r in rows if r.get("verdicts") and len(r["verdicts"]) > 1]
    changed = [r for r in compared if any(r["better"].values())]
    harmed = [r for r in compared if any(r["worse"].values())]
    print(
        f"\n{len(rows)} models in {time.perf_counter() - t0:.0f} s; a peer left fewer nodes on {len(compared)}; "
        f"a peer's output fares better with a TensorRT target on {len(changed)}"
        f"{' (' + ', '.join(r['model'] for r in changed) + ')' if changed else ''}, worse on {len(harmed)}"
        f"{' (' + ', '.join(r['model'] for r in harmed) + ')' if harmed else ''}"
    )
    if changed:
        print(
            "\n| model | peer | target | ours: outcome, refused | peer's: outcome, refused |\n|---|---|---|---|---|"
        )
        for r in changed:
            for peer, targets in r["better"].items():
                for t in targets:
                    o, p = r["verdicts"]["onnx-surgery"][t], r["verdicts"][peer][t]
                    print(
                        f"| {r['model']} | {peer} | {t} | {o['outcome']}, {o['refused']} | {p['outcome']}, {p['refused']} |"
                    )


if __name__ == "__main__":
    main()
