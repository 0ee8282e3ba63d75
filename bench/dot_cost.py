"""When the graph view asks Graphviz's dot for a layout, and when its own layered engine: dot's time against the
work surgery.layout.dot_work counts (boxes + a dummy per layer a long edge crosses), on what the app draws first
for each real model of the corpus (~/.cache/onnx-surgery/corpus, bench/corpus/build.py) and each sample.

The corpus has one model whose layout dot cannot do in time (DenseNet-121: 619 boxes, over 60 s), so the tuning
part also holds a generated series: DenseNet-style blocks of k layers, each concatenating every earlier output,
whose work grows with k. The corpus's own split (its manifest's `split`, fixed by a salted hash of each model's
id; the samples, which this project wrote, and the generated series tune only): the tuning part picks the largest work bound under which every layout took at
most --budget seconds; the held-out part reports how that bound does on models it was not picked on (a slow dot
let through, a fast one sent to the builtin engine).

    python bench/dot_cost.py [--budget 1.0] [--timeout 60] [--json FILE] [--rows FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import surgery.layout as layout  # noqa: E402

CORPUS = Path.home() / ".cache" / "onnx-surgery" / "corpus"


def models() -> list[tuple[str, Path, str]]:
    """(name, path, "tune" or "holdout")."""
    out = [(f"sample/{p.stem}", p, "tune") for p in sorted((ROOT / "sample_models").glob("*.onnx"))]
    if (CORPUS / "manifest.json").exists():
        manifest = json.loads((CORPUS / "manifest.json").read_text())
        out += [(m["id"], CORPUS / m["path"], m["split"]) for m in manifest["models"]]
    return out


def first_drawing(path: Path):
    """(boxes, edges, anchors) of what the app draws first for the model at `path`."""
    import onnx

    from surgery.graph import GraphFacts
    from surgery.view.draw import structure

    model = onnx.load(str(path), load_external_data=False)
    view = structure(GraphFacts.of(model), engine="builtin")
    sizes = {n.id: (n.w, n.h) for n in view.nodes}
    return sizes, list(view.edges), {n.id for n in view.nodes if n.kind == "input"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=1.0, help="seconds a first layout may take")
    ap.add_argument("--timeout", type=float, default=60.0, help="dot's limit in this sweep")
    ap.add_argument("--json", type=Path, help="write the rows and the bound here")
    ap.add_argument("--rows", type=Path, help="the rows of an earlier --json run: no layout is timed again")
    args = ap.parse_args()
    layout.DOT_TIMEOUT_S = args.timeout
    rows = json.loads(args.rows.read_text())["rows"] if args.rows else sweep()
    report(rows, args.budget, args.json)


def dense_blocks(blocks: int, k: int):
    """(boxes, edges, anchors): `blocks` blocks of k layers, each layer's concatenation reading every earlier
    output of its block, as DenseNet's are drawn."""
    sizes, edges, prev = {"in": (80.0, 30.0)}, [], "in"
    for b in range(blocks):
        members = [prev]
        for i in range(k):
            conv, cat = f"b{b}conv{i}", f"b{b}cat{i}"
            sizes[conv] = sizes[cat] = (90.0, 30.0)
            edges += [(members[-1], conv), (conv, cat), *((m, cat) for m in members)]
            members.append(cat)
        prev = members[-1]
    return sizes, edges, {"in"}


def timed(name: str, split: str, sizes, edges, anchors) -> dict:
    edges = [(a, b) for a, b in edges if a in sizes and b in sizes and a != b]
    work = layout.dot_work(sizes, edges, anchors)
    t = time.perf_counter()
    try:
        layout._dot(sizes, edges, 28, 46)
        took = time.perf_counter() - t
    except subprocess.TimeoutExpired:
        took = float("inf")
    print(f"{name}: {len(sizes)} boxes, work {work}, dot {took:.2f} s", flush=True)
    return {
        "model": name,
        "split": split,
        "boxes": len(sizes),
        "edges": len(edges),
        "work": work,
        "dot_s": took,
    }


def sweep() -> list[dict]:
    rows = []
    for blocks, k in ((2, 6), (2, 10), (3, 10), (4, 12), (2, 16), (3, 16), (4, 16), (2, 24), (3, 24)):
        rows.append(timed(f"generated/dense-{blocks}x{k}", "tune", *dense_blocks(blocks, k)))
    found = models()
    for k, (name, path, split) in enumerate(found, 1):
        try:
            drawn = first_drawing(path)
        except Exception as exc:  # a model the view cannot read is not a layout to time
            print(f"[{k}/{len(found)}] {name}: skipped ({type(exc).__name__})", flush=True)
            continue
        rows.append(timed(f"[{k}/{len(found)}] {name}", split, *drawn))
        rows[-1]["model"] = name
    return rows


def report(rows: list[dict], budget: float, out: Path | None) -> None:
    tuning = [r for r in rows if r["split"] == "tune"]
    held = [r for r in rows if r["split"] != "tune"]
    # the largest bound under which every tuning layout kept to the budget
    slow = [r["work"] for r in tuning if r["dot_s"] > budget]
    bound = min(slow) - 1 if slow else max(r["work"] for r in tuning)
    for label, part in (("tuning", tuning), ("held-out", held)):
        let_through = [r for r in part if r["work"] <= bound and r["dot_s"] > budget]
        sent_away = [r for r in part if r["work"] > bound and r["dot_s"] <= budget]
        print(
            f"{label}: {len(part)} models; {sum(r['dot_s'] > budget for r in part)} with dot over "
            f"{budget:g} s; with work <= {bound}: {len(let_through)} slow ones let through "
            f"{[(r['model'], round(r['dot_s'], 2)) for r in let_through]}, {len(sent_away)} fast ones sent to "
            f"the builtin engine {[(r['model'], r['work'], round(r['dot_s'], 2)) for r in sent_away]}"
        )
    print("\n| model | boxes | edges | work | dot s |\n|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: -r["work"])[:25]:
        print(f"| {r['model']} | {r['boxes']} | {r['edges']} | {r['work']} | {r['dot_s']:.2f} |")
    print(f"\nbound picked on the tuning half: DOT_MAX_WORK = {bound}")
    if out:
        out.write_text(json.dumps({"bound": bound, "budget": budget, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
