"""Layout quality of the graph view, engine against engine, on what the app draws (the same boxes, sizes and
edges): edge crossings, total edge length, overlapping boxes, edge segments through boxes, and time.

Engines: `builtin` (surgery.layout's own Sugiyama), `dot` (Graphviz, where installed), `igraph` (python-igraph's
layout_sugiyama, where installed; nodes as points spread by the widest box), `elk` (elkjs's layered algorithm
run by node, with --elk DIR naming a folder where `npm install elkjs` was run).

    python bench/layout_quality.py [MODEL.onnx …] [--corpus] [--elk DIR] [--whole] [--engines builtin dot …]

Without models: the sample models. --corpus adds the real models in ~/.cache/onnx-surgery/corpus (by family,
up to 2k nodes). --whole lays out every node even where the app would collapse the graph into groups.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from surgery.layout import Layout, dot_available, layered, quality  # noqa: E402

CORPUS = Path.home() / ".cache" / "onnx-surgery" / "corpus"
ELK_JS = """
const ELK = require(process.argv[1] + '/node_modules/elkjs/lib/elk.bundled.js');
const g = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const elk = new ELK();
const t = Date.now();
elk.layout({ id: 'root', layoutOptions: { 'elk.algorithm': 'layered', 'elk.direction': 'DOWN',
  'elk.spacing.nodeNode': '28', 'elk.layered.spacing.nodeNodeBetweenLayers': '46',
  'elk.edgeRouting': 'POLYLINE' },
  children: g.nodes.map(([id, w, h]) => ({ id, width: w, height: h })),
  edges: g.edges.map(([a, b], i) => ({ id: 'e' + i, sources: [a], targets: [b] })) })
 .then((r) => { process.stdout.write(JSON.stringify({ ms: Date.now() - t,
   nodes: r.children.map((n) => [n.id, n.x + n.width / 2, n.y + n.height / 2]),
   edges: r.edges.map((e) => { const s = e.sections[0]; return [s.startPoint, ...(s.bendPoints || []), s.endPoint]
     .map((p) => [p.x, p.y]); }) })); });
"""


def elk_layout(sizes, edges, elk_dir: str) -> Layout:
    ids = {v: f"n{i}" for i, v in enumerate(sizes)}
    back = {n: v for v, n in ids.items()}
    graph = {
        "nodes": [[ids[v], w, h] for v, (w, h) in sizes.items()],
        "edges": [[ids[a], ids[b]] for a, b in edges],
    }
    t = time.perf_counter()
    out = subprocess.run(
        ["node", "-e", ELK_JS, elk_dir], input=json.dumps(graph).encode(), capture_output=True, check=True
    )
    took = time.perf_counter() - t
    r = json.loads(out.stdout)
    pos = {back[i]: (x, y) for i, x, y in r["nodes"]}
    routes = [[tuple(p) for p in e] for e in r["edges"]]
    lay = Layout(pos, routes, curved=False, engine="elk")
    lay.seconds = r["ms"] / 1000 if r["ms"] else took
    return lay


def igraph_layout(sizes, edges) -> Layout:
    import igraph

    ids = list(sizes)
    num = {v: i for i, v in enumerate(ids)}
    g = igraph.Graph(n=len(ids), edges=[(num[a], num[b]) for a, b in edges], directed=True)
    t = time.perf_counter()
    lay = g.layout_sugiyama(hgap=1, vgap=1, maxiter=100)
    took = time.perf_counter() - t
    step_x = max(w for w, _ in sizes.values()) + 28
    step_y = max(h for _, h in sizes.values()) + 46
    pos = {v: (lay.coords[num[v]][0] * step_x, lay.coords[num[v]][1] * step_y) for v in ids}
    # routes: straight from bottom to top (igraph's dummy vertices are not returned by this call)
    routes = [
        [(pos[a][0], pos[a][1] + sizes[a][1] / 2), (pos[b][0], pos[b][1] - sizes[b][1] / 2)] for a, b in edges
    ]
    out = Layout(pos, routes, curved=False, engine="igraph")
    out.seconds = took
    return out


def models(args) -> list[tuple[str, Path]]:
    out = [(p.stem, p) for p in args.models]
    if not args.models:
        out += [(p.stem, p) for p in sorted((ROOT / "sample_models").glob("*.onnx"))]
    if args.corpus and (CORPUS / "manifest.json").exists():
        manifest = json.loads((CORPUS / "manifest.json").read_text())
        picked: dict[str, dict] = {}
        for m in sorted(manifest["models"], key=lambda m: -m["nodes"]):
            if m["nodes"] <= 2000 and m["family"] not in picked:
                picked[m["family"]] = m
        out += [(m["id"], CORPUS / m["path"]) for m in picked.values()]
    return out


def main() -> None:
    import onnx

    from surgery.graph import GraphFacts
    from surgery.view.draw import structure

    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--corpus", action="store_true")
    ap.add_argument("--elk", help="a folder with node_modules/elkjs (npm install elkjs)")
    ap.add_argument("--whole", action="store_true", help="every node, never collapsed")
    ap.add_argument("--engines", nargs="*", help="only these (builtin, dot, igraph, elk)")
    args = ap.parse_args()
    engines = ["builtin"]
    if dot_available():
        engines.append("dot")
    try:
        import igraph  # noqa: F401

        engines.append("igraph")
    except ImportError:
        pass
    if args.elk and shutil.which("node"):
        engines.append("elk")
    if args.engines:
        engines = [e for e in engines if e in args.engines]
    rows = []
    for name, path in models(args):
        model = onnx.load(str(path), load_external_data=False)
        facts = GraphFacts.of(model)
        view = structure(facts, engine="builtin", collapse_over=10**9 if args.whole else 1500)
        sizes = {n.id: (n.w, n.h) for n in view.nodes}
        edges = list(view.edges)
        for engine in engines:
            try:
                if engine == "elk":
                    lay = elk_layout(sizes, edges, args.elk)
                elif engine == "igraph":
                    lay = igraph_layout(sizes, edges)
                else:
                    lay = layered(
                        sizes, edges, engine=engine, anchors={n.id for n in view.nodes if n.kind == "input"}
                    )
                q = quality(lay, sizes, edges)
            except Exception as exc:  # e.g. dot past its time limit
                q = {"error": type(exc).__name__}
            rows.append((name, len(model.graph.node), len(sizes), engine, q))
            print(rows[-1], flush=True)
    print(
        "\n| model | nodes | boxes drawn | engine | crossings | edge length px | overlaps | edges through boxes | s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, n, boxes, engine, q in rows:
        if "error" in q:
            print(f"| {name} | {n} | {boxes} | {engine} | {q['error']} | | | | |")
            continue
        print(
            f"| {name} | {n} | {boxes} | {engine} | {q['crossings']} | {q['length']:,} | {q['overlaps']} |"
            f" {q['through']} | {q['seconds']:.2f} |"
        )


if __name__ == "__main__":
    main()
