"""The app as a user meets it, on big models: a real `streamlit run` server, Debian's headless Chromium (never
downloaded) at 1600×1000.

- server up: from starting the server (as `onnx-surgery app MODEL` does) until it answers;
- open: from the page request until the graph is drawn, read from the page's own clock (a model over 20k nodes
  is drawn first, collapsed, and checked on request; a smaller one's checks start once it is drawn). The page is
  requested as soon as the server answers; with `--late S`, S seconds later, as a person who opens the address
  `onnx-surgery app` prints: the server reads the start model ahead, once it answers (surgery/cli/serve.py);
- search + focus: type a node's name in the search box, Enter (selects the first match), turn Focus on, until
  the focus window around that node is drawn (a model under 200 nodes is drawn whole: the search alone); once
  right after the drawing, once more (another node) with the page idle, 3 s after Focus was turned off;
- a click: a node of the whole graph clicked (3 s after the page is idle) until the inspector shows it, and the
  bytes the page received for it (the drawing is not sent again: only the inspector's new content);
- the server's peak memory (VmHWM of the streamlit process) when the graph is drawn and after the checks, against
  the weights' size, for a model whose weights are in an external file (opening reads no weights; onnxruntime's
  check creates a session, which does: the app runs it in a worker process, whose peak is the last column), and
  for one whose weights are in the model file itself (the server holds the parsed model; the worker reads the
  file, so no copy of it is made in the server).

Beside Netron (issue 30): each model whose weights are in an external file (the generated one, `--external-gib`,
and those `--models` names: by default the 1B Llama-shaped export in ~/.cache/onnx-surgery/big/llama-1b, when
built) is opened in Netron too (pip `netron` run from `--netron-path` by its own Python server, in the same
Chromium, until its first node is drawn, on the page's clock), interleaved with the app's opens (the order
alternates from one repeat to the next), with a 40-node model opened in the app in each round for the memory
floor. With `--returning`, as a person who has opened each tool before: the browser keeps each tool's cache
(Streamlit serves its hashed bundles as immutable; a browser keeps them per address, and `onnx-surgery app` takes
one port), so each tool's pages open in one browser context and its servers take one port, after one open of
each not counted. Without it, every open is a first visit (a new context: nothing cached). Printed beside the
figures: the app's open time against 1.5x Netron's (medians), `check`'s (the CLI in a new process, at
onnxruntime and tensorrt-static@10.15, verdict cache off) against the same, and the server's memory
growth (its peak when drawn, less the 40-node server's) against 2x the graph file (the .onnx without its external
data); and how much of the weight files was read by the time the graph was drawn (page cache dropped first,
resident pages counted after: bench/llm_scale.py). Under the table, Streamlit's own floor beside Netron: a page
with one component drawn on its first frame and nothing else (FLOOR_PAGE), opened in each round as the app is.

The machine's load average is printed with the figures: on a shared 2-core machine a busy neighbour doubles them.
Each model is opened `--repeat` times (a new server each time); the table gives the median and the range.

    python bench/app_open.py [--sizes 10000 100000] [--external-gib 2] [--embedded-gib 0.5] [--repeat 3] [--late 0]
        [--models PATH ...] [--netron-path DIR] [--returning]

(`--sizes --embedded-gib 0`: the beside-Netron rows alone; `--external-gib 0 --models` too: the 1B export alone.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _browser import ARGS, CHROMIUM, free_port, serve, start_server, stop_server  # noqa: E402
from _models import transformer_stack  # noqa: E402
from _procs import children, peak_mib  # noqa: E402

BIG = Path("~/.cache/onnx-surgery/big/llama-1b/model.onnx").expanduser()  # bench/corpus/export_big.py's
NETRON = Path("~/.cache/onnx-surgery/netron").expanduser()  # pip install --target DIR netron


def peak_rss_mib(pid: int) -> float:
    return peak_mib(pid) or 0.0


def workers_peak_rss_mib(pid: int) -> float:
    """The highest peak RSS among the server's worker processes still alive (its pooled workers: shape
    inference, onnxruntime's checks)."""
    return max([0.0, *(peak_mib(k) or 0.0 for k in children(pid))])


def external_model(folder: Path, gib: float):
    """11 nodes (MatMul/Add pairs and a Relu) whose weights, `gib` GiB in all, are in one external file."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    n_weights = 5
    rows = int(gib * 1024**3 / 4 / n_weights / 1024)
    nodes, x = [], "x"
    data = folder / "weights.bin"
    offset, big = 0, []
    chunk = np.full((1024 * 1024,), 0.001, np.float32).tobytes()
    with open(data, "wb") as f:  # written a chunk at a time: never the whole weights in memory
        for k in range(n_weights):
            size = 1024 * rows * 4
            written = 0
            while written < size:
                part = chunk[: min(len(chunk), size - written)]
                f.write(part)
                written += len(part)
            t = TensorProto(name=f"W{k}", data_type=TensorProto.FLOAT)
            t.dims[:] = [1024, rows] if k % 2 == 0 else [rows, 1024]
            t.data_location = TensorProto.EXTERNAL
            for key, value in (("location", data.name), ("offset", str(offset)), ("length", str(size))):
                e = t.external_data.add()
                e.key, e.value = key, value
            offset += size
            big.append(t)
    for k in range(n_weights):
        nodes.append(helper.make_node("MatMul", [x, f"W{k}"], [f"m{k}"], name=f"/layer{k}/MatMul"))
        nodes.append(helper.make_node("Add", [f"m{k}", f"m{k}"], [f"a{k}"], name=f"/layer{k}/Add"))
        x = f"a{k}"
    nodes.append(helper.make_node("Relu", [x], ["y"], name="/out/Relu"))
    last = 1024 if n_weights % 2 == 0 else rows
    g = helper.make_graph(
        nodes,
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, last])],
        big,
    )
    model = helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "external.onnx"
    onnx.save(model, path)
    return path, offset


def embedded_model(folder: Path, gib: float):
    """The same 11 nodes with their weights, `gib` GiB in all, in the model file itself (under protobuf's 2 GiB)."""
    import onnx

    sub = folder / "embedded"
    sub.mkdir(exist_ok=True)
    external, size = external_model(sub, gib)
    model = onnx.load(external)  # the weights read in
    path = folder / "embedded.onnx"
    onnx.save(model, path)
    for f in sub.iterdir():
        f.unlink()
    return path, size


# The page's own clock: the time of the first frame with the graph drawn, in ms from the page request
# (performance.now() counts from the navigation's start). Playwright's waits poll at up to 0.5 s steps: a time
# read from them lands up to that much late (70 nodes: 1.9-2.0 s read from the wait, 1.63-1.67 s in the page).
DRAWN_CLOCK = """(() => {
  const poll = () => {
    const g = globalThis.__onnxSurgeryGraph;  // the graph component's state (app/static/graph.js)
    if (g && g.el.getAttribute('data-drawn') === '1') { globalThis.__benchDrawnAt = performance.now(); return; }
    requestAnimationFrame(poll);
  };
  requestAnimationFrame(poll);
})();"""


def search_and_focus(page, key: str) -> float:
    """Seconds from typing `key` in the search box (Enter selects the first match) and turning Focus on until the
    focus window around it is drawn."""
    box = page.locator(".st-key-search input")
    t = time.perf_counter()
    box.fill(key)
    box.press("Enter")
    page.wait_for_function(
        "(key) => { const g = globalThis.__onnxSurgeryGraph; return g && g.selected === key; }", arg=key
    )
    page.locator(".st-key-focus label").click()
    page.wait_for_function(
        "(key) => { const g = globalThis.__onnxSurgeryGraph; return g && g.selected === key"
        " && g.data.nodes.length < 200 && g.byId.has(key); }",
        arg=key,
    )
    return time.perf_counter() - t


# the bytes of every websocket message the page receives (installed before the page connects)
WS_BYTES = """(() => { globalThis.__wsBytes = 0; const W = window.WebSocket;
  window.WebSocket = function (...a) { const ws = new W(...a);
    ws.addEventListener('message', (e) => { globalThis.__wsBytes += e.data.byteLength || e.data.size || 0; });
    return ws; };
  window.WebSocket.prototype = W.prototype; Object.assign(window.WebSocket, W); })();"""


def click_and_time(page) -> tuple[float, int] | None:
    """Seconds from a click on a node of the whole graph (one not selected, brought into view first) until the
    inspector shows it, and the bytes the page received meanwhile (until the page is idle again); None when the
    drawing has groups only (a click opens a group: a new drawing)."""
    ref = page.evaluate(
        "() => { const g = globalThis.__onnxSurgeryGraph; const n = g.data.nodes.find((n) => n.kind === 'op'"
        " && n.ref && n.ref !== g.selected); if (!n) return null; const net = globalThis.__onnxSurgeryNetwork;"
        " net.focus(n.id, {scale: 1.0}); return n.ref; }"
    )
    if ref is None:
        return None
    time.sleep(0.5)
    at = page.evaluate(
        "(ref) => { const g = globalThis.__onnxSurgeryGraph; const n = g.data.nodes.find((n) => n.ref === ref);"
        " const p = globalThis.__onnxSurgeryNetwork.canvasToDOM({x: n.x, y: n.y}); const b ="
        " g.el.getBoundingClientRect(); globalThis.__wsBytes = 0; return [b.left + p.x, b.top + p.y]; }",
        ref,
    )
    t = time.perf_counter()
    page.mouse.click(*at)
    page.locator(".st-key-inspector-pane h3", has_text=ref).first.wait_for()
    took = time.perf_counter() - t
    time.sleep(1.0)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')")
    return took, page.evaluate("() => globalThis.__wsBytes")


def open_and_time(
    browser,
    model: Path,
    search_for: tuple[str, str] | None,
    big: bool = False,
    late: float = 0.0,
    on_drawn=None,
    context=None,
    port: int | None = None,
):
    """The figures of one open (see main's table). `on_drawn(server process)` is called once the graph is drawn,
    before the checks are waited for (bench/llm_scale.py reads which weights were read by then). `context`: the
    browser context to open the page in (a returning user's, its cache kept; default a new one), `port`: the
    server's (default a free one)."""
    started = time.perf_counter()
    proc, url = start_server(model, upload_limit="4GiB", port=port)
    up = (
        time.perf_counter() - started
    )  # until the server answers: where `onnx-surgery app` prints its address
    try:
        page = context.new_page() if context else browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(600_000)
        page.add_init_script(DRAWN_CLOCK)
        page.add_init_script(WS_BYTES)
        time.sleep(late)
        t = time.perf_counter()
        page.goto(url)
        page.locator(".wb-title b", has_text=model.name).wait_for()
        page.wait_for_function("() => globalThis.__benchDrawnAt !== undefined")
        opened = page.evaluate("() => globalThis.__benchDrawnAt") / 1000
        print(f"  drawn at {opened:.2f} s on the page's clock ({time.perf_counter() - t:.2f} s by the wait)")
        rss_drawn = peak_rss_mib(proc.pid)
        if on_drawn is not None:
            on_drawn(proc)
        # verdicts come in one target per run, with a rerun between: done when each default target's banner is
        # shown (a model over 20k nodes is checked on request: none)
        if not big:
            for target in ("TensorRT 10.15 (predicted)", "onnxruntime"):
                page.locator('[data-testid="stAlert"]', has_text=target).first.wait_for()
        checked = time.perf_counter() - t
        drawn = page.locator(".graph-canvas").get_attribute("data-node-count")
        # right after the drawing (the page may still be loading Streamlit's widget scripts, the server preparing
        # the big model's search index and fixes), then again once the page is idle (3 s later, as a person who
        # looks at the graph first)
        found = found_idle = clicked = None
        if search_for:
            found = search_and_focus(page, search_for[0])
            focused = page.evaluate("() => globalThis.__onnxSurgeryGraph.layoutId")
            page.locator(".st-key-focus label").click()  # Focus off: the whole graph again
            page.wait_for_function("(id) => globalThis.__onnxSurgeryGraph.layoutId !== id", arg=focused)
            time.sleep(3)
            found_idle = search_and_focus(page, search_for[1])
            focused = page.evaluate("() => globalThis.__onnxSurgeryGraph.layoutId")
            page.locator(".st-key-focus label").click()
            page.wait_for_function("(id) => globalThis.__onnxSurgeryGraph.layoutId !== id", arg=focused)
        time.sleep(3)  # the page idle, as a person who looks at the graph first
        clicked = click_and_time(page)
        page.close()
        return (
            opened,
            up,
            checked,
            int(drawn),
            found,
            found_idle,
            clicked,
            rss_drawn,
            peak_rss_mib(proc.pid),
            workers_peak_rss_mib(proc.pid),
        )
    finally:
        stop_server(proc)


# Netron replaces window.eval with one that throws, which Playwright's page functions use: the time goes into an
# attribute, read through locators (they run in Playwright's own world)
NETRON_DRAWN = """(() => {
  const poll = () => {
    if (document.querySelector('#canvas g.node')) {
      document.documentElement.setAttribute('data-bench-drawn', String(performance.now()));
      return;
    }
    requestAnimationFrame(poll);
  };
  requestAnimationFrame(poll);
})();"""


def open_in_netron(
    browser, model: Path, netron_path: Path, weights: list[Path], context=None, port: int | None = None
) -> tuple[float, int, float, int]:
    """Netron opening `model` (its own server, `netron.start`; the consent cookie set, so the model opens at
    once): (seconds from the page request until its first node is drawn, on the page's clock; boxes drawn;
    the server's RSS MiB then; bytes of `weights` read by then). `context`, `port`: as open_and_time's."""
    import subprocess
    import urllib.request

    from _page_cache import drop_from_cache, resident_bytes

    port = port or free_port()
    code = f"import netron; netron.start({str(model)!r}, ('127.0.0.1', {port}), browse=False); netron.wait()"
    env = {**os.environ, "PYTHONPATH": str(netron_path)}
    server = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        for _ in range(300):
            try:
                urllib.request.urlopen(url, timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        drop_from_cache(weights)
        own = context is None
        if own:
            context = browser.new_context(viewport={"width": 1600, "height": 1000})
        context.add_cookies([{"name": "consent", "value": str(int(time.time() * 1000)), "url": url}])
        page = context.new_page()
        page.set_default_timeout(300_000)
        page.add_init_script(NETRON_DRAWN)
        page.goto(url)
        page.locator("html[data-bench-drawn]").wait_for(state="attached")
        opened = float(page.locator("html").get_attribute("data-bench-drawn")) / 1000
        boxes = page.locator("#canvas g.node").count()
        read = resident_bytes(weights)
        rss = peak_rss_mib(server.pid)
        page.close()
        if own:
            context.close()
        print(f"  Netron drew {boxes} boxes at {opened:.2f} s on the page's clock")
        return opened, boxes, rss, read
    finally:
        server.kill()
        server.wait()


# Streamlit's own floor: a page holding one component that marks itself drawn on its first frame (no graph, no
# widgets), served by `streamlit run` and timed on the page's clock as the app is: what any Streamlit page costs
# before it draws anything of its own. The app's open is this plus its drawing and its page's widgets.
FLOOR_JS = """export default function ({ parentElement }) {
  const el = parentElement.querySelector('div');
  requestAnimationFrame(() => { el.setAttribute('data-drawn', '1'); globalThis.__onnxSurgeryGraph = { el }; });
}"""
FLOOR_PAGE = f"""import streamlit as st
st.set_page_config(page_title="floor", layout="wide")
st.components.v2.component("bench_floor", html="<div>drawn</div>", js={FLOOR_JS!r})(key="floor")
"""


def open_streamlit_floor(browser, folder: Path, context=None, port: int | None = None) -> float:
    """Seconds from the page request until FLOOR_PAGE's component is drawn, on the page's clock. `context`,
    `port`: as open_and_time's."""
    script = folder / "streamlit_floor.py"
    script.write_text(FLOOR_PAGE)
    port = port or free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", str(script), "--server.port", str(port)]
    cmd += ["--server.address", "127.0.0.1", "--server.headless", "true"]
    cmd += ["--browser.gatherUsageStats", "false"]
    server, url = serve(cmd, dict(os.environ), port)
    try:
        page = context.new_page() if context else browser.new_page(viewport={"width": 1600, "height": 1000})
        page.add_init_script(DRAWN_CLOCK)
        page.goto(url)
        page.wait_for_function("() => globalThis.__benchDrawnAt !== undefined")
        opened = page.evaluate("() => globalThis.__benchDrawnAt") / 1000
        page.close()
        print(f"  Streamlit's floor page drawn at {opened:.2f} s on the page's clock")
        return opened
    finally:
        stop_server(server)


# `check` beside Netron (issue 30: "the app and `check` on a 2 GiB model within 1.5x Netron's open time"): the CLI
# in a new process, as a person or CI runs it, the verdict cache off (each run does the work)
CHECK_TARGETS = ("onnxruntime", "tensorrt-static@10.15")


def check_seconds(model: Path, target: str) -> float:
    """Wall seconds of `onnx-surgery check MODEL -t TARGET --no-cache`, from its start to its exit."""
    import subprocess

    t = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "surgery", "check", str(model), "-t", target, "--no-cache"],
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - t
    if done.returncode not in (0, 1):  # 1: the target rejects something; anything else is the bench's problem
        raise RuntimeError(f"check -t {target} {model}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    print(f"  check -t {target} {model.name}: {took:.2f} s (exit {done.returncode})", flush=True)
    return took


def weight_files(model: Path) -> list[Path]:
    """The external data files `model` names (read from its initializers' `location`, no weight read)."""
    import onnx

    proto = onnx.load(model, load_external_data=False)
    names = {
        e.value
        for t in proto.graph.initializer
        if t.data_location == onnx.TensorProto.EXTERNAL
        for e in t.external_data
        if e.key == "location"
    }
    return sorted(model.parent / n for n in names)


def beside_netron(
    browser,
    models: list[Path],
    floor: Path,
    repeat: int,
    late: float,
    netron_path: Path,
    returning: bool = False,
):
    """Each of `models` opened `repeat` times in the app and in Netron, interleaved (the order alternating), and
    the 40-node `floor` in the app once a round: the rows of the beside-Netron table. `returning`: as a person
    who has opened each tool before: each tool's pages open in one browser context (its HTTP cache kept) and
    each tool's servers take one port (the cache is per address), after one open of each tool not counted."""
    from _page_cache import drop_from_cache, resident_bytes

    app = {m: [] for m in models}
    net = {m: [] for m in models}
    checks = {m: [] for m in models}  # seconds of `check` at each of CHECK_TARGETS
    base = []
    size = {"width": 1600, "height": 1000}
    kept = {"context": None, "port": None}
    kept_netron = dict(kept)
    kept_floor = dict(kept)
    streamlit_floor = []
    folder = floor.parent  # the run's temporary folder
    if returning:
        kept = {"context": browser.new_context(viewport=size), "port": free_port()}
        kept_netron = {"context": browser.new_context(viewport=size), "port": free_port()}
        kept_floor = {"context": browser.new_context(viewport=size), "port": free_port()}
        open_and_time(browser, floor, None, late=late, **kept)  # fills the cache: not counted
        open_in_netron(browser, models[0], netron_path, weight_files(models[0]), **kept_netron)
        open_streamlit_floor(browser, folder, **kept_floor)
    for r in range(repeat):
        base.append(open_and_time(browser, floor, None, late=late, **kept)[-3])  # its rss_drawn
        streamlit_floor.append(open_streamlit_floor(browser, folder, **kept_floor))
        for m in models:
            weights = weight_files(m)
            seen = {}

            def read_when_drawn(_proc, weights=weights, seen=seen):
                seen["read"] = resident_bytes(weights)

            def in_app(m=m, weights=weights, seen=seen):
                drop_from_cache(weights)
                got = open_and_time(browser, m, None, late=late, on_drawn=read_when_drawn, **kept)
                app[m].append(
                    (got[0], got[-3], got[3], seen["read"], got[-4])
                )  # opened, rss_drawn, boxes, read, click
                print(f"  app {m.name}: {app[m][-1]}", flush=True)

            def in_netron(m=m, weights=weights):
                net[m].append(open_in_netron(browser, m, netron_path, weights, **kept_netron))

            for run in (in_app, in_netron) if r % 2 == 0 else (in_netron, in_app):
                run()
            checks[m].append(tuple(check_seconds(m, target) for target in CHECK_TARGETS))
    for ctx in (kept["context"], kept_netron["context"], kept_floor["context"]):
        if ctx is not None:
            ctx.close()
    rows = []
    floor_mib = statistics.median(base)
    for m in models:
        graph = m.stat().st_size
        weights = sum(f.stat().st_size for f in weight_files(m))
        a_open = statistics.median(x[0] for x in app[m])
        n_open = statistics.median(x[0] for x in net[m])
        growth = statistics.median(x[1] for x in app[m]) - floor_mib
        rows.append(
            f"| {m.name if m.parent.name.startswith('tmp') else f'{m.parent.name}/{m.name}'} | {graph / 2**20:.1f} MiB | {weights / 2**30:.2f} GiB |"
            f" {spread([x[0] for x in app[m]])} | {spread([x[0] for x in net[m]])} |"
            f" {a_open / n_open:.2f}x {'✓' if a_open <= 1.5 * n_open else '✗'} |"
            f" {app[m][0][2]} / {net[m][0][1]} |"
            f" {growth:.1f} MiB = {growth * 2**20 / graph:.1f}x the graph {'✓' if growth * 2**20 <= 2 * graph else '✗'} |"
            f" {max(x[1] for x in app[m]):.0f} / {max(x[2] for x in net[m]):.0f} |"
            f" {max(x[3] for x in app[m]) / 2**20:.0f} / {max(x[3] for x in net[m]) / 2**20:.0f} MiB |"
            f" {click_cells([x[4] for x in app[m]])} |"
            + "".join(
                f" {spread([c[k] for c in checks[m]])}"
                f" ({statistics.median(c[k] for c in checks[m]) / n_open:.2f}x"
                f" {'✓' if statistics.median(c[k] for c in checks[m]) <= 1.5 * n_open else '✗'}) |"
                for k in range(len(CHECK_TARGETS))
            )
        )
    who = (
        "a returning user (each tool's browser cache kept)"
        if returning
        else "a first visit (cold browser cache)"
    )
    head = (
        f"\nBeside Netron, as {who}:\n"
        f"\n| model (weights external) | graph file | weights | app: open until drawn s | Netron s |"
        f" app / Netron (goal: within 1.5x) | boxes app / Netron | app server growth when drawn over the 40-node"
        f" model's {floor_mib:.0f} MiB (goal: within 2x the graph file) | server peak MiB app / Netron |"
        f" weights read by the drawing app / Netron | app: a node clicked until the inspector shows it s |"
        f" bytes the click brought |"
        + "".join(f" `check -t {t}` s (x Netron; goal within 1.5x) |" for t in CHECK_TARGETS)
        + "\n|"
        + "---|" * (12 + len(CHECK_TARGETS))
    )
    first_netron = statistics.median(x[0] for x in net[models[0]])
    floor_open = statistics.median(streamlit_floor)
    tail = (
        f"\nStreamlit's floor (a page with one component drawn on its first frame, nothing else: FLOOR_PAGE):"
        f" {spread(streamlit_floor)} s, {floor_open / first_netron:.2f}x Netron's open of {models[0].name}"
        f" (the goal, 1.5x Netron, leaves {1.5 * first_netron - floor_open:+.2f} s above it for the app's own page)"
    )
    return [head, *rows, tail]


def main() -> None:

    import onnx
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--sizes", type=int, nargs="*", default=[40, 10000, 100000], help="40: the floor (page + first run)"
    )
    ap.add_argument("--external-gib", type=float, default=2.0, help="0 to skip")
    ap.add_argument("--embedded-gib", type=float, default=0.5, help="weights in the model file; 0 to skip")
    ap.add_argument("--repeat", type=int, default=3, help="opens of each model (median and range reported)")
    ap.add_argument(
        "--late", type=float, default=0.0, help="request the page this many s after the server answers"
    )
    ap.add_argument(
        "--models",
        type=Path,
        nargs="*",
        default=[BIG] if BIG.exists() else [],
        help="models with external weights to open beside Netron (default: the 1B export, when built)",
    )
    ap.add_argument(
        "--netron-path", type=Path, default=NETRON, help="where `pip install --target` put netron"
    )
    ap.add_argument(
        "--returning",
        action="store_true",
        help="beside Netron: each tool opened as by a person who has opened it before (browser cache kept)",
    )
    args = ap.parse_args()
    with_netron = (args.netron_path / "netron").exists()
    if not with_netron:
        print(f"{args.netron_path}: no netron there; the app alone", flush=True)
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    if args.late:
        print(f"each page requested {args.late:g} s after its server answers", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        # warm-up, not reported: the first server after a code change compiles every module's bytecode and reads
        # the packages from disk (+2-5 s here), which a user's running server has long done
        warm = Path(tmp) / "warm_up.onnx"
        onnx.save(transformer_stack(40), warm)
        open_and_time(browser, warm, None)
        for size in args.sizes:
            model = transformer_stack(size)
            path = Path(tmp) / f"transformer_{size}.onnx"
            onnx.save(model, path)
            softmax = [n.name for n in model.graph.node if n.op_type == "Softmax"]
            targets = (softmax[len(softmax) // 2], softmax[-1])  # two nodes far apart: one search each
            big = len(model.graph.node) > 20_000
            runs = repeated(args.repeat, open_and_time, browser, path, targets, big, args.late)
            note = "checked on request (over 20k nodes)" if len(model.graph.node) > 20_000 else ""
            name = f"transformer stack, {len(model.graph.node):,} nodes"
            rows.append((name, *runs, note))
        beside = []
        if args.external_gib:
            path, size = external_model(Path(tmp), args.external_gib)
            if with_netron:
                beside.append(path)
            else:
                runs = repeated(args.repeat, open_and_time, browser, path, None, False, args.late)
                rows.append(("11 nodes + external weights", *runs, f"{size / 1024**3:.2f} GiB of weights"))
        beside += [m.resolve() for m in args.models] if with_netron else []
        netron_rows = (
            beside_netron(browser, beside, warm, args.repeat, args.late, args.netron_path, args.returning)
            if beside
            else []
        )
        if args.embedded_gib:
            path, size = embedded_model(Path(tmp), args.embedded_gib)
            runs = repeated(args.repeat, open_and_time, browser, path, None, False, args.late)
            rows.append(("11 nodes, weights in the file", *runs, f"{size / 1024**3:.2f} GiB of weights"))
        browser.close()
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print("\n".join(netron_rows))
    print(
        "\n| model | server up s | open until drawn s | until verdicts in s | boxes drawn | search + focus s |"
        " the same, page idle | a node clicked until the inspector shows it s | bytes the click brought |"
        " server peak RSS MiB when drawn | after checks | its workers' | note |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, opened, up, checked, drawn, found, found_idle, clicked, rss_drawn, rss, workers, note in rows:
        print(
            f"| {name} | {spread(up)} | {spread(opened)} | {spread(checked)} | {drawn[0]} | {spread(found)} |"
            f" {spread(found_idle)} | {click_cells(clicked)} |"
            f" {max(rss_drawn):.0f} | {max(rss):.0f} | {max(workers):.0f} | {note} |"
        )
    if args.repeat > 1:
        print(
            f"\n(seconds: median [min-max] of {args.repeat} opens, each with a new server; memory: the highest)"
        )


def click_cells(clicks: list) -> str:
    """The click's two table cells: seconds (median [range]) and the most bytes one click brought."""
    got = [c for c in clicks if c is not None]
    if not got:
        return "- | -"
    return f"{spread([c[0] for c in got])} | {max(c[1] for c in got):,}"


def repeated(n: int, run, *args) -> list[list]:
    """`run(*args)` n times: each of its figures as the list of the n values."""
    results = []
    for _ in range(n):
        results.append(run(*args))
        print(results[-1], flush=True)
    return [list(column) for column in zip(*results)]


def spread(values: list) -> str:
    if values[0] is None:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


if __name__ == "__main__":
    main()
