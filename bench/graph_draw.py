"""Time to first draw of the graph view in headless Chromium (Debian's, never downloaded), and peak JS heap,
for graphs of 1k, 10k and 50k nodes (generated transformer stacks, or Conv blocks with --blocks) — drawn whole
(positions and edge routes from surgery.view) and as the app opens big models (collapsed into groups). The page
holds exactly the component's HTML, CSS and JS (app/graph_component.py, app/static/graph.js).

    python bench/graph_draw.py [--sizes 1000 10000 50000] [--blocks]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _browser import ARGS as BROWSER_ARGS
from _browser import CHROMIUM
from _models import blocks, transformer_stack

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "app"))
from graph_component import CSS, HTML, _vis_source, js_body, parts  # noqa: E402

from surgery.graph import GraphFacts  # noqa: E402
from surgery.view.draw import build_view  # noqa: E402

ARGS = [*BROWSER_ARGS, "--enable-precise-memory-info"]


def page_html(payload: dict) -> str:
    body = js_body().replace("export default function (component)", "function draw(component)")
    shape, paint, _ = parts(payload, "graph")  # as the app sends them: the paint's element first here
    return (
        f"<!doctype html><html><head><style>body {{ margin: 0 }} {CSS}</style></head><body>"
        f"<div id='root' style='width:1200px'>{HTML}</div>"
        f"<script>{_vis_source()}</script><script>{body}\n"
        f"const t0 = performance.now(); const el = document.getElementById('root');"
        f"globalThis.__onnxSurgeryParts = {{pick: {{}}, paint: {{graph: {json.dumps(paint)}}}}};"
        f"draw({{data: {json.dumps(shape)}, setStateValue: () => {{}}, parentElement: el}});"
        f"globalThis.__onnxSurgeryNetwork.once('afterDrawing', () => {{ window.__drawn = performance.now() - t0; }});"
        f"requestAnimationFrame(() => requestAnimationFrame(() => {{ window.__drawn ??= performance.now() - t0; }}));"
        f"</script></body></html>"
    )


def measure(browser, html: str) -> tuple[float, float, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".html", delete=False) as f:
        f.write(html)
    page = browser.new_page()
    t = time.perf_counter()
    page.goto(f"file://{f.name}")
    page.wait_for_function("() => window.__drawn !== undefined", timeout=600_000)
    wall = time.perf_counter() - t
    drawn = page.evaluate("window.__drawn") / 1000
    heap = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : 0") / 2**20
    page.close()
    Path(f.name).unlink()
    return drawn, wall, heap


def main() -> None:
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[1000, 10000, 50000])
    ap.add_argument("--repeat", type=int, default=3, help="draws per row; the median is reported")
    ap.add_argument("--blocks", action="store_true", help="Conv blocks instead of transformer stacks")
    args = ap.parse_args()
    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        for size in args.sizes:
            model = blocks(size) if args.blocks else transformer_stack(size)
            facts = GraphFacts.of(model, infer=False)
            for mode in ("whole, laid out in Python", "collapsed into groups (as the app opens it)"):
                t = time.perf_counter()
                view = build_view(
                    model, facts=facts, collapse_over=10**9 if mode.startswith("whole") else 1500
                )
                layout = time.perf_counter() - t
                payload = view.payload()
                try:
                    html = page_html(payload)
                    runs = sorted(measure(browser, html) for _ in range(args.repeat))
                    drawn, wall, _ = runs[len(runs) // 2]
                    heap = max(r[2] for r in runs)
                    note = f"{view.engine} layout"
                    rows.append(
                        (len(model.graph.node), mode, len(payload["nodes"]), layout, drawn, heap, note)
                    )
                except Exception as exc:  # e.g. "Maximum call stack size exceeded"
                    rows.append(
                        (
                            len(model.graph.node),
                            mode,
                            len(payload["nodes"]),
                            layout,
                            None,
                            None,
                            type(exc).__name__,
                        )
                    )
                print(rows[-1], flush=True)
        browser.close()
    print(
        "\n| model nodes | drawing | drawn nodes | layout in Python s | first draw s | JS heap MiB | note |"
    )
    print("|---|---|---|---|---|---|---|")
    for size, mode, n, layout, drawn, heap, note in rows:
        f = lambda v, d=2: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
        print(f"| {size} | {mode} | {n or '-'} | {f(layout)} | {f(drawn)} | {f(heap, 0)} | {note} |")


if __name__ == "__main__":
    main()
