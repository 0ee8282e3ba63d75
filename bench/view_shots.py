"""Screenshots of the Workbench at its default view, as a new user sees it: a real `streamlit run` server per
model, Debian's headless Chromium (never downloaded) at 1600×1000. Prints, per model, the time until the graph
is drawn, the drawn node count and the on-screen font size of node labels (the component's scale × font).

    python bench/view_shots.py MODEL.onnx [MODEL2.onnx …] [--out docs/shots] [--width 1600 --height 1000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from _browser import ARGS, CHROMIUM, start_server, stop_server


def label_px(page) -> float:
    """On-screen size of an operator label: the network's scale times the op nodes' font size."""
    return page.evaluate(
        "() => { const net = globalThis.__onnxSurgeryNetwork; if (!net) return 0;"
        " const op = Object.values(net.body.nodes).find(n => !n.isCluster && n.options.font);"
        " return net.getScale() * (op ? op.options.font.size : 0); }"
    )


def main() -> None:
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path("/tmp/onnx-surgery-shots"))
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1000)
    ap.add_argument("--hover", action="store_true", help="hover the node the view is centred on (tooltip)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        for model in args.models:
            proc, url = start_server(model, upload_limit="4GiB")
            try:
                page = browser.new_page(viewport={"width": args.width, "height": args.height})
                page.set_default_timeout(180_000)
                t = time.perf_counter()
                page.goto(url)
                page.wait_for_selector(".graph-canvas[data-drawn='1']")
                for _ in range(2):  # verdicts come in one target per run
                    page.wait_for_timeout(400)
                    page.wait_for_function(
                        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
                        " && !document.querySelector('[data-testid=\"stSpinner\"]')"
                    )
                page.wait_for_selector(".graph-canvas[data-drawn='1']")
                page.wait_for_timeout(800)
                if args.hover:
                    box = page.locator(".graph-canvas").bounding_box()
                    pos = page.evaluate(
                        "() => { const g = globalThis.__onnxSurgeryGraph; const id = g.data.start || g.order[0];"
                        " const n = g.byId.get(id); return g.network.canvasToDOM({x: n.x, y: n.y}); }"
                    )
                    page.mouse.move(box["x"] + pos["x"] - 2, box["y"] + pos["y"] - 2)
                    page.mouse.move(box["x"] + pos["x"], box["y"] + pos["y"])
                    page.wait_for_timeout(500)
                took = time.perf_counter() - t
                shot = args.out / f"{model.stem}.png"
                page.screenshot(path=str(shot))
                canvas = page.locator(".graph-canvas")
                n = canvas.get_attribute("data-node-count")
                h = canvas.bounding_box()["height"]
                print(
                    f"{model.name}: drawn in {took:.1f} s, {n} nodes, canvas {h:.0f} px high, "
                    f"labels {label_px(page):.1f} px -> {shot}",
                    flush=True,
                )
                page.close()
            finally:
                stop_server(proc)
        browser.close()


if __name__ == "__main__":
    main()
