"""The main journey in a real browser: Debian's Chromium (headless, never downloaded) driven by Playwright
against a real `streamlit run` server. Open the classic Resize sample with TensorRT 8.2 (predicted), see the
Resize node rejected, click it, apply the fold, see it supported, undo, redo, download, run with onnxruntime."""

import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from _browser import ARGS, CHROMIUM, start_server, stop_server  # noqa: E402  (Chromium's flags, the server)

# the README screenshot is refreshed only on request: ONNX_SURGERY_SCREENSHOT=docs/screenshot.png pytest ...
SHOT = os.environ.get("ONNX_SURGERY_SCREENSHOT")
RED, GREEN = "#d64545", "#2e9d57"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason="Debian's chromium is not installed (apt-get install chromium); scripts/test.sh installs it",
    ),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    try:
        proc, url = start_server(
            env_extra={"ONNX_SURGERY_USER_RULES": str(tmp_path_factory.mktemp("rules"))}, upload_limit="3MiB"
        )
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield url
    stop_server(proc)


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        pg = browser.new_page(viewport={"width": 1600, "height": 1000}, accept_downloads=True)
        pg.set_default_timeout(90_000)  # 2 shared cores in CI: a rerun can take a while
        pg.goto(server)
        pg.wait_for_selector('[data-testid="stApp"]', timeout=60_000)
        yield pg
        browser.close()


def settle(page, timeout=60_000):
    """Wait until the script run is over and the graph is drawn."""
    idle = (
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
        " && !document.querySelector('[data-testid=\"stSpinner\"]')"
    )
    for _ in range(2):  # verdicts come in one target per run: idle twice in a row
        page.wait_for_timeout(300)
        page.wait_for_function(idle, timeout=timeout)
    page.wait_for_selector(".graph-canvas[data-drawn='1']", timeout=timeout)


def box_of(locator, timeout_s: float = 30) -> dict:
    """The element's box once it is laid out: a rerun may detach and redraw it for a moment (None meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while (box := locator.bounding_box()) is None and time.monotonic() < deadline:
        locator.page.wait_for_timeout(200)
    assert box is not None, "the element was never laid out"
    return box


def node_color(page, node_id):
    return page.evaluate(
        "(id) => { const net = globalThis.__onnxSurgeryNetwork; const n = net &&"
        " net.body.nodes[id]; return n ? n.options.color.background : null; }",
        node_id,
    )


def wait_color(page, node_id, color, timeout=60_000):
    page.wait_for_function(
        "([id, c]) => { const net = globalThis.__onnxSurgeryNetwork; const n = net && net.body &&"
        " net.body.nodes[id]; return n && n.options.color.background === c; }",
        arg=[node_id, color],
        timeout=timeout,
    )
    return node_color(page, node_id)


def click_node(page, node_id):
    box = box_of(page.locator(".graph-canvas"))
    pos = page.evaluate(
        "(id) => { const net = globalThis.__onnxSurgeryNetwork; net.focus(id, {scale: 1.0});"
        " return net.canvasToDOM(net.getPositions([id])[id]); }",
        node_id,
    )
    page.wait_for_timeout(300)
    pos = page.evaluate(
        "(id) => { const net = globalThis.__onnxSurgeryNetwork;"
        " return net.canvasToDOM(net.getPositions([id])[id]); }",
        node_id,
    )
    page.mouse.click(box["x"] + pos["x"], box["y"] + pos["y"])


def open_lesson(page, name):
    """Open lesson `name` from the sidebar (its Lessons open by themselves only on the start model)."""
    lesson = page.locator(f".st-key-side-lesson-{name} button")
    if not lesson.is_visible():
        page.locator('[data-testid="stSidebar"] summary', has_text="Lessons").click()
    lesson.click()


def choose(page, key, option):
    """Pick `option` in the selectbox `key` (again if a rerun closed the list before the click)."""
    for _ in range(5):
        settle(page)
        page.locator(f".st-key-{key}").click()
        item = page.get_by_role("option", name=option)
        try:
            item.wait_for(timeout=5_000)
            item.click()
            break
        except Exception:  # the list closed under a rerun: open it again
            page.keyboard.press("Escape")
    settle(page)


def test_the_classic_resize_journey(page, tmp_path):
    settle(page)
    # open the lesson: the classic Resize sample, with TensorRT 8.2 (predicted) as the target
    page.locator(".st-key-side-lesson-resize_scales_chain button").click()
    settle(page)
    assert wait_color(page, "/up/Resize", RED) == RED
    page.locator('[data-testid="stCode"]', has_text="Resize scales must be an initializer!").first.wait_for()
    page.screenshot(path=SHOT or str(tmp_path / "screenshot.png"))

    # a constant is a small dot beside its consumer; clicking it selects the Constant node
    dot = page.evaluate(
        "() => globalThis.__onnxSurgeryNetwork.body.data.nodes.getIds().find(i => i.startsWith('const:'))"
    )
    click_node(page, dot)
    settle(page)
    page.locator("h3", has_text="Constant").first.wait_for()
    # click the red node in the graph: the inspector follows and offers the fold
    click_node(page, "/relu/Relu")
    settle(page)
    page.locator("h3", has_text="/relu/Relu").first.wait_for()
    click_node(page, "/up/Resize")
    settle(page)
    page.locator("h3", has_text="/up/Resize").first.wait_for()
    page.locator(".st-key-apply-fold-resize-scales button").click()
    settle(page)
    assert wait_color(page, "/up/Resize", GREEN) == GREEN
    page.get_by_text("verified (exact").first.wait_for()
    page.get_by_text("TensorRT 8.2 (predicted) accepts the model").first.wait_for()

    # the step as a reviewer sees it: before and after overlaid, removed nodes struck out in red
    choose(page, "compare", "step 1: fold_constants (before → after)")
    page.wait_for_function("() => (globalThis.__onnxSurgeryGraph.struck || []).length >= 3")
    struck = graph_state(page, "g.struck.map(n => n.ref)")
    assert {"/up/Concat", "/up/Concat_1", "/up/Cast"} <= set(struck)
    if SHOT:
        page.screenshot(path=str(Path(SHOT).with_name("diff.png")))
    page.locator(".st-key-compare_side label").click()  # side by side: before left, after right
    settle(page)
    assert page.locator(".graph-canvas").count() == 2
    page.locator(".st-key-compare_side label").click()
    settle(page)
    choose(page, "compare", "—")

    page.locator(".st-key-undo button").click()
    settle(page)
    assert wait_color(page, "/up/Resize", RED) == RED
    page.locator(".st-key-redo button").click()
    settle(page)
    assert wait_color(page, "/up/Resize", GREEN) == GREEN

    settle(page)
    with page.expect_download() as dl:
        page.locator(".st-key-download_model button").click()
    path = tmp_path / "fixed.onnx"
    dl.value.save_as(str(path))
    model = onnx.load(str(path))
    assert "Concat" not in [n.op_type for n in model.graph.node]
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (out,) = sess.run(None, {"input": np.ones((1, 3, 16, 16), np.float32)})
    assert out.shape == (1, 4, 32, 32)


# every websocket message the page receives, by size (installed before the page connects)
WS_SIZES = """(() => { globalThis.__wsIn = []; const W = window.WebSocket;
  window.WebSocket = function (...a) { const ws = new W(...a);
    ws.addEventListener('message', (e) => globalThis.__wsIn.push(e.data.byteLength || e.data.size || 0));
    return ws; };
  window.WebSocket.prototype = W.prototype; Object.assign(window.WebSocket, W); })();"""


# counts vis-network's setOptions calls that set groups (each goes over every node) on the graph's network
GROUP_SETS = """(() => { globalThis.__groupSets = 0; let net;
  Object.defineProperty(globalThis, '__onnxSurgeryNetwork', { configurable: true, get: () => net, set: (v) => {
    net = v; const own = v.setOptions.bind(v);
    v.setOptions = (o) => { if (o && o.groups) globalThis.__groupSets += 1; return own(o); }; } }); })();"""


def test_a_click_selects_without_the_drawing_sent_again(server, page):
    pg = page.context.browser.new_page(viewport={"width": 1600, "height": 1000})
    pg.set_default_timeout(90_000)
    try:
        pg.add_init_script(WS_SIZES)
        pg.add_init_script(GROUP_SETS)
        pg.goto(server)
        settle(pg)
        pg.evaluate("() => { globalThis.__wsIn = []; }")
        pg.locator(".st-key-side-lesson-resize_scales_chain button").click()
        settle(pg)
        pg.locator("h3", has_text="/up/Resize").first.wait_for()  # the lesson selects its node
        assert pg.evaluate("() => globalThis.__onnxSurgeryNetwork.getSelectedNodes()") == ["/up/Resize"]
        # every target checked (each check recolours: the drawing is sent again then, as it should be)
        pg.wait_for_function("() => !globalThis.__onnxSurgeryGraph.data.report_drawn")
        settle(pg)
        # the verdicts recoloured the drawing with the styles it was built with (none added to vis-network)
        assert node_color(pg, "/up/Resize") == RED
        assert pg.evaluate("() => globalThis.__groupSets") == 0
        # the drawing's shape (with its scripts: the largest message) came once; each check sent its paint
        sizes = pg.evaluate("() => globalThis.__wsIn")
        drawing = max(sizes)
        assert len([n for n in sizes if n > drawing / 2]) == 1, sizes
        pg.evaluate("() => { globalThis.__wsIn = []; }")
        click_node(pg, "/relu/Relu")
        pg.locator("h3", has_text="/relu/Relu").first.wait_for()
        settle(pg)
        assert pg.evaluate("() => globalThis.__onnxSurgeryGraph.selected") == "/relu/Relu"
        assert pg.evaluate("() => globalThis.__onnxSurgeryNetwork.getSelectedNodes()") == ["/relu/Relu"]
        # the inspector's new content came, the drawing (identical but for the selection) did not
        sizes = pg.evaluate("() => globalThis.__wsIn")
        assert drawing > 300_000 and sum(sizes) < drawing / 5, (drawing, sizes)
        # a click on the background keeps the selection, in the graph as in the inspector
        box = box_of(pg.locator(".graph-canvas"))
        pg.mouse.click(box["x"] + 6, box["y"] + box["height"] - 40)
        settle(pg)
        assert pg.evaluate("() => globalThis.__onnxSurgeryNetwork.getSelectedNodes()") == ["/relu/Relu"]
        pg.locator("h3", has_text="/relu/Relu").first.wait_for()
    finally:
        pg.close()


def test_a_step_that_fixes_an_input_shape_shows_the_new_shapes_on_the_same_drawing(page):
    """The dynamic_input_unshaped lesson: freezing the input's shape keeps every box where it was (the same
    layout, the viewport stays), and the edges below it carry the new shapes."""
    settle(page)
    open_lesson(page, "dynamic_input_unshaped")
    settle(page)
    layout = graph_state(page, "g.layoutId")
    assert not graph_state(page, "g.edges.some(e => e.label.startsWith('1×3×32×32'))")
    click_node(page, "/conv/Conv")
    settle(page)
    ask = page.locator(".st-key-ask-freeze-unshaped-input input")
    ask.fill("1x3x32x32")
    ask.press("Enter")
    settle(page)
    page.locator(".st-key-apply-freeze-unshaped-input button").click()
    settle(page)
    page.get_by_text("Recipe").first.wait_for()
    page.wait_for_function(
        "() => globalThis.__onnxSurgeryGraph.edges.some(e => e.label.startsWith('1×3×32×32'))", timeout=60_000
    )
    assert graph_state(page, "g.layoutId") == layout


def test_a_bad_upload_shows_the_one_line_message(page, tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"\x00\x01\x02 not an onnx file")
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(bad))
    page.get_by_text("broken.onnx: not an ONNX model").first.wait_for(timeout=30_000)
    assert "Traceback" not in page.inner_text("body")


def _weights_model(nbytes: int):
    """x[1, n] * w[n] -> y, its file about `nbytes` long (w is the bulk)."""
    from onnx import TensorProto, helper, numpy_helper

    n = nbytes // 4 - 64
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(np.ones(n, np.float32), "w")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_the_upload_limit_is_the_one_the_server_was_given_in_binary_units(page, tmp_path):
    """The server runs with --upload-limit 3MiB: a file just under 3 MiB (over 3 MB, where Streamlit's own check
    in the browser counts decimal MB) opens; one just over is refused in one line, the open model kept."""
    page.get_by_text("Limit 3.0 MiB (3,145,728 bytes) per .onnx file").first.wait_for()
    under = tmp_path / "under_3mib.onnx"
    onnx.save(_weights_model((3 << 20) - 4096), str(under))
    assert 3_000_000 < under.stat().st_size < 3 << 20
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(under))
    page.get_by_text("Model: under_3mib.onnx").first.wait_for(timeout=60_000)
    settle(page)  # the next file chosen while this one's run is still going could be taken by no run
    over = tmp_path / "over_3mib.onnx"
    onnx.save(_weights_model((3 << 20) + 65536), str(over))
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(over))
    page.get_by_text("is over this server's upload limit of 3.0 MiB").first.wait_for(timeout=60_000)
    body = page.inner_text("body")
    assert "Model: under_3mib.onnx" in body and "Traceback" not in body


def test_a_long_model_name_wraps_between_its_words_and_stays_text(page, tmp_path):
    """The sidebar names the open model: a long file name wraps after '_', '.' or '-', never inside a word, and
    a '$' in it is a dollar, not Markdown maths."""
    from onnx import TensorProto, helper

    name = "a_long_detection_model_$x$_exported-for-the-sidebar_v2.0_op17.onnx"
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
    )
    upload(page, helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / name)
    shown = page.locator(".wb-model b")
    assert shown.inner_text().replace("\n", "") == name
    assert page.locator('[data-testid="stSidebar"] .katex').count() == 0
    # where each line of the name ends: the character before every wrap
    before_wraps = shown.evaluate(
        """(el) => { const text = el.textContent, r = document.createRange(), out = []; let top = null, k = 0;
        for (const node of el.childNodes) { if (node.nodeType !== 3) continue;
          for (let i = 0; i < node.length; i++, k++) { r.setStart(node, i); r.setEnd(node, i + 1);
            const t = Math.round(r.getBoundingClientRect().top);
            if (top !== null && t > top + 2) out.push(text[k - 1]); top = t; } }
        return out; }"""
    )
    assert before_wraps, "the name fits on one line: the test shows nothing"
    assert set(before_wraps) <= set("_.-"), before_wraps


def test_the_canvas_ends_above_the_window_bottom_and_keeps_its_zoom(page, tmp_path):
    """The canvas takes the page's height below where it starts, and follows when what is above it grows after
    it was sized (a caption, a wrapped row): it ends above the window's bottom, with the zoom it had (vis-network
    scales the view with the canvas's size; the first view's readable labels would shrink), the zoom shown the
    zoom drawn, and the same part of the graph at its top left (the first view starts at the inputs)."""
    upload(page, generated(150), tmp_path / "bottom600.onnx")
    page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollTo(0, 0)")
    scale = page.evaluate("() => globalThis.__onnxSurgeryNetwork.getScale()")
    assert scale >= 1.0, scale
    corner = "() => globalThis.__onnxSurgeryNetwork.DOMtoCanvas({x: 0, y: 0})"  # what the view starts with
    top_left = page.evaluate(corner)
    page.evaluate(
        """() => { const host = document.querySelector('.st-key-graph');
        const grown = document.createElement('div'); grown.id = 'grown-above'; grown.style.height = '150px';
        host.parentNode.insertBefore(grown, host); }"""
    )
    try:
        # the canvas re-sizes within 0.5 s of a change above it: given up to 5 s on a busy machine
        deadline = time.monotonic() + 5
        while True:
            time.sleep(0.25)
            box = page.locator(".graph-root").bounding_box()
            if box["y"] + box["height"] <= 1000 or time.monotonic() > deadline:
                break
        assert box["height"] >= 460
        assert box["y"] + box["height"] <= 1000, box
        now = page.evaluate("() => globalThis.__onnxSurgeryNetwork.getScale()")
        assert now == pytest.approx(scale, abs=1e-3)
        assert page.evaluate(corner) == pytest.approx(top_left, abs=1)
        assert float(page.locator(".graph-canvas").get_attribute("data-scale")) == pytest.approx(
            now, abs=1e-3
        )
    finally:
        page.evaluate("() => document.getElementById('grown-above').remove()")


# -- the graph at real size ----------------------------------------------------------------------------------


def generated(blocks: int, flat: bool = False, custom_in: str | None = None) -> onnx.ModelProto:
    """`blocks` blocks of Relu -> Add(const) -> Mul (4 nodes each, scoped /stageS/blockB/ unless `flat`); the
    Relu of block `custom_in` becomes a custom op that every target rejects."""
    from onnx import helper
    from test_view import scoped_chain

    model = scoped_chain(blocks, flat=flat)
    if custom_in:
        node = next(n for n in model.graph.node if n.name == custom_in)
        node.op_type, node.domain = "FancyAct", "com.example"
        model.opset_import.append(helper.make_opsetid("com.example", 1))
    return model


def upload(page, model, path):
    """Choose a file in the sidebar's uploader: the model opens without another click."""
    onnx.save(model, path)
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(path))
    page.locator(".wb-title b", has_text=path.name).wait_for()
    settle(page)
    page.wait_for_function(
        "(name) => { const g = globalThis.__onnxSurgeryGraph; return g && g.el.isConnected &&"
        " g.data.nodes.length > 0 && document.querySelector('.wb-title b').textContent === name; }",
        arg=path.name,
    )


def graph_state(page, expr):
    return page.evaluate(f"() => {{ const g = globalThis.__onnxSurgeryGraph; return {expr}; }}")


def hover_node(page, node_id):
    """Move the mouse over a node where it is drawn now (no zooming or panning first)."""
    page.locator(".graph-root").scroll_into_view_if_needed()
    box = box_of(page.locator(".graph-canvas"))
    pos = page.evaluate(
        "(id) => { const net = globalThis.__onnxSurgeryNetwork;"
        " return net.canvasToDOM(net.getPositions([id])[id]); }",
        node_id,
    )
    assert 0 < pos["x"] < box["width"] and 0 < pos["y"] < box["height"], f"{node_id} is not in view"
    page.mouse.move(box["x"] + pos["x"] - 3, box["y"] + pos["y"] - 2)
    page.mouse.move(box["x"] + pos["x"], box["y"] + pos["y"])


@pytest.mark.parametrize("flat", [False, True], ids=["with scopes", "without scopes"])
def test_a_600_node_model_opens_readable_with_tooltips(page, tmp_path, flat):
    model = generated(150, flat=flat, custom_in=None if flat else "/stage9/block4/Relu")
    upload(page, model, tmp_path / ("flat600.onnx" if flat else "scoped600.onnx"))
    canvas = page.locator(".graph-canvas")
    assert int(canvas.get_attribute("data-node-count")) > 600  # drawn whole, not collapsed
    # the canvas takes the page's height; labels are readable at the default zoom (scale x the op font)
    assert box_of(canvas)["height"] >= 600
    label_px = graph_state(page, "g.network.getScale() * g.network.body.nodes[g.order[0]].options.font.size")
    assert label_px >= 11, label_px
    assert float(canvas.get_attribute("data-label-px")) >= 11
    # centred on the first rejected node, else on the graph's inputs (the top of the graph)
    first = "/stage9/block4/Relu" if not flat else "n0_Relu"
    # verdicts come in after the first draw, one target at a time: wait for the last one
    page.locator('[data-testid="stAlert"]', has_text="onnxruntime").first.wait_for()
    settle(page)
    # the checks started when the graph reported its drawing (the app waits for it, a few seconds at most)
    assert graph_state(
        page, "!!globalThis.__onnxSurgeryDrawn && globalThis.__onnxSurgeryDrawn.has(g.layoutId)"
    )
    hover_node(page, first)
    tip = page.locator(".graph-tooltip")
    tip.wait_for(state="visible", timeout=10_000)
    text = tip.inner_text()
    assert ("FancyAct" if not flat else "Relu") in text and first in text
    if not flat:  # every target's verdict in one line, the backend's words as its words
        assert re.search(r"rejected at parse — parser says( \([a-z ]+\))?: “", text) and "onnxruntime" in text
    # a node's output: its dtype and shape
    after = "/stage9/block3/Add" if not flat else "n0_Add"
    hover_node(page, after)
    page.locator(".graph-tooltip", has_text=after).wait_for(state="visible", timeout=10_000)
    text = tip.inner_text()
    assert "Add" in text and "outputs:" in text
    assert text.split("outputs:")[1].splitlines()[1].strip().endswith("float [1, 4]"), text
    # edges carry the inferred shape
    assert graph_state(page, "g.edges.some(e => e.label === '1×4')")
    if not flat:  # n selects the next rejected node; Fit shows the whole graph; the minimap follows
        page.locator(".graph-root").press("n")
        page.wait_for_function(
            "() => globalThis.__onnxSurgeryGraph.selected === '/stage9/block4/Relu'", timeout=60_000
        )
        settle(page)
        page.locator(".graph-root").scroll_into_view_if_needed()
        page.locator('.graph-tools [data-act="fit"]').click()
        assert float(page.locator(".graph-canvas").get_attribute("data-scale")) < 0.5
        assert graph_state(page, "!!g.minimapMap")


def branches(k: int = 4, n: int = 400) -> onnx.ModelProto:
    """A Split into `k` branches of `n` nodes each (scopes /b0 .. /bK; Relu in the first, Abs in the others), then a
    Concat: collapsed, the branches' groups stand side by side, one short line of top ops each (about 820 units
    across for the default k and n)."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Split", ["x"], [f"s{b}" for b in range(k)], name="/split/Split", axis=1)]
    for b in range(k):
        op = "Relu" if b == 0 else "Abs"
        nodes += [
            helper.make_node(op, [f"b{b}_{j - 1}" if j else f"s{b}"], [f"b{b}_{j}"], name=f"/b{b}/l{j}/{op}")
            for j in range(n)
        ]
    nodes.append(
        helper.make_node("Concat", [f"b{b}_{n - 1}" for b in range(k)], ["y"], name="/merge/Concat", axis=1)
    )
    graph = helper.make_graph(
        nodes,
        "branches",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2 * k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2 * k])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_collapsed_view_that_fits_with_readable_labels_opens_whole(page, tmp_path):
    """A collapsed view has groups, inputs and outputs (12 px and up), no 11 px constants: where it fits at a zoom
    that keeps its smallest label at 11 px on screen, the first view shows all of it (Mask R-CNN's and
    RetinaNet's were cut at 100% by a few pixels)."""
    upload(page, branches(), tmp_path / "branches.onnx")
    fit = graph_state(
        page,
        "(() => { let x0 = 1e9, y0 = 1e9, x1 = -1e9, y1 = -1e9; for (const n of g.data.nodes) {"
        " x0 = Math.min(x0, n.x - n.w / 2); x1 = Math.max(x1, n.x + n.w / 2);"
        " y0 = Math.min(y0, n.y - n.h / 2); y1 = Math.max(y1, n.y + n.h / 2); }"
        " return Math.min(g.el.clientWidth / (x1 - x0 + 60), g.el.clientHeight / (y1 - y0 + 60)); })()",
    )
    assert 11 / 12 <= fit < 1, f"the test model should fit only below 100% here (fit {fit:.3f})"
    assert graph_state(page, "g.data.collapsed")
    outside = graph_state(
        page,
        "g.data.nodes.filter(n => { const net = globalThis.__onnxSurgeryNetwork;"
        " const a = net.canvasToDOM({x: n.x - n.w / 2, y: n.y - n.h / 2}),"
        " b = net.canvasToDOM({x: n.x + n.w / 2, y: n.y + n.h / 2});"
        " return a.x < 0 || a.y < 0 || b.x > g.el.clientWidth || b.y > g.el.clientHeight; }).map(n => n.id)",
    )
    assert not outside
    assert float(page.locator(".graph-canvas").get_attribute("data-scale")) * 12 >= 11


def fan_out() -> onnx.ModelProto:
    """A Split whose three outputs (three shapes) leave from one point, each to a Relu, and a Concat after."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])
    sizes = helper.make_tensor("sizes", TensorProto.INT64, [3], [1, 2, 3])
    nodes = [helper.make_node("Split", ["x", "sizes"], ["a", "b", "c"], name="split", axis=1)]
    nodes += [helper.make_node("Relu", [t], [t + "_r"], name=f"relu_{t}") for t in "abc"]
    nodes.append(helper.make_node("Concat", ["a_r", "b_r", "c_r"], ["y"], name="concat", axis=1))
    graph = helper.make_graph(nodes, "fan_out", [x], [y], [sizes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_edge_labels_at_a_fan_out_neither_overlap_each_other_nor_nodes(page, tmp_path):
    upload(page, fan_out(), tmp_path / "fan_out.onnx")
    page.wait_for_function("() => !!globalThis.__onnxSurgeryGraph.labelSpots")
    spots = graph_state(page, "g.labelSpots")
    boxes = graph_state(
        page, "g.data.nodes.map(n => [n.x - n.w / 2, n.y - n.h / 2, n.x + n.w / 2, n.y + n.h / 2])"
    )
    # every shape leaving the Split is written, once
    assert {"1×1", "1×2", "1×3"} <= {x["text"] for x in spots}, spots
    rects = [(x["x"], x["y"], x["x"] + x["w"], x["y"] + 10) for x in spots]

    def meet(r, q):
        return r[0] < q[2] and q[0] < r[2] and r[1] < q[3] and q[1] < r[3]

    assert not [(r, q) for i, r in enumerate(rects) for q in rects[i + 1 :] if meet(r, q)]
    assert not [(r, q) for r in rects for q in boxes if meet(r, q)]


def test_a_collapsed_group_shows_its_name_and_rejected_count_and_opens_in_one_click(page, tmp_path):
    model = generated(500, custom_in="/stage7/block2/Relu")  # 2000 nodes: opens collapsed
    upload(page, model, tmp_path / "big2000.onnx")
    page.wait_for_function(  # verdicts come in after the first draw
        "() => { const n = globalThis.__onnxSurgeryGraph.byId.get('group:/stage7'); return n && n.badge; }"
    )
    settle(page)
    group = graph_state(page, "g.byId.get('group:/stage7')")
    assert group["label"].splitlines()[0] == "/stage7"
    assert group["label"].splitlines()[1].startswith("40 nodes · ")
    assert group["badge"] == "1 rejected" and group["status"] == "rejected"
    label_px = graph_state(page, "g.network.getScale() * 14")
    assert label_px >= 11, label_px
    # the first view is centred on the rejected group: one click anywhere on it opens it in place
    box = page.locator(".graph-canvas").bounding_box()
    pos = page.evaluate(
        "() => { const net = globalThis.__onnxSurgeryNetwork; const n = globalThis.__onnxSurgeryGraph"
        ".byId.get('group:/stage7'); return net.canvasToDOM({x: n.x + n.w / 2 - 12, y: n.y + n.h / 2 - 6}); }"
    )
    assert 0 < pos["x"] < box["width"] and 0 < pos["y"] < box["height"]
    page.mouse.click(box["x"] + pos["x"], box["y"] + pos["y"])
    page.wait_for_function(
        "() => { const g = globalThis.__onnxSurgeryGraph; return g && g.byId.has('/stage7/block2/FancyAct'.replace('FancyAct','Relu')); }",
        timeout=60_000,
    )
    settle(page)
    assert graph_state(page, "g.byId.has('group:/stage6') && g.byId.has('group:/stage8')")  # opened in place
    page.get_by_role("button", name="Whole graph").wait_for()


def test_a_cut_is_shown_undone_and_taken_only_when_asked(page, tmp_path):
    """The unique_op lesson: cutting before the Unique loses the output 'uniq'. Apply is undone and said on the
    rule's card; "Take the cut" applies it."""
    settle(page)
    open_lesson(page, "unique_op")
    settle(page)
    wait_color(page, "/post/Unique", RED)
    click_node(page, "/post/Unique")
    settle(page)
    page.locator(".st-key-apply-split-before-unsupported-tail button").click()
    settle(page)
    warning = page.locator('[data-testid="stAlert"]', has_text="this step is a cut")
    warning.first.wait_for()
    assert "output 'uniq' is gone" in warning.first.inner_text()
    warning.first.scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / "cut.png"))
    page.locator(".st-key-cut-split-before-unsupported-tail button").click()
    settle(page)
    page.locator("text=split-before-unsupported-tail").first.wait_for()
    page.get_by_text("Recipe").first.wait_for()


def test_a_rule_is_applied_to_all_its_matches_in_one_click(page, tmp_path):
    """Three Resize nodes with computed scales under TensorRT 8.2: the rule's card offers all three (the default);
    one Apply makes one recipe step and every Resize turns green."""
    from test_app import three_resizes

    settle(page)
    # its targets: TensorRT 8.2 (predicted) and onnxruntime; they stay for the next model
    open_lesson(page, "resize_scales_chain")
    settle(page)
    path = three_resizes(tmp_path / "three_resizes.onnx")
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(path)
    settle(page)
    for node in ("resize5", "resize6", "resize7"):
        wait_color(page, node, RED)
    click_node(page, "resize6")
    settle(page)
    page.get_by_text("all 3 nodes it matches (one step)").first.wait_for()
    page.locator(".st-key-apply-fold-resize-scales button").click()
    settle(page)
    for node in ("resize5", "resize6", "resize7"):
        wait_color(page, node, GREEN)
    page.get_by_text("fold-resize-scales on 3 Resize nodes").first.wait_for()
    page.get_by_text("✓ verified (exact, seed 0)").first.wait_for()  # the step's own numbers, in the history
    page.screenshot(path=str(tmp_path / "all_matches.png"))


def add_target(page, name):
    """Add `name` to the sidebar's Targets (type it in the multiselect, Enter)."""
    field = page.locator(".st-key-targets input").first
    field.click()
    field.fill(name)
    page.get_by_role("option", name=name).first.click()
    page.keyboard.press("Escape")
    settle(page)


def test_with_four_targets_the_first_apply_is_on_screen_beside_the_graph(page, tmp_path):
    """Four targets: their banners are a line each, the node's verdicts a line per target, and the rule's Apply
    is in the window (1600x1000) without scrolling the page; the inspector scrolls on its own."""
    settle(page)
    open_lesson(page, "resize_scales_chain")
    settle(page)
    for name in ("tensorrt-static@10.15", "openvino"):
        add_target(page, name)
    pane = page.locator(".st-key-inspector-pane")
    pane.get_by_text("OpenVINO 20").first.wait_for()
    for label in ("TensorRT 8.2 (predicted) rejects", "TensorRT 10.15 (predicted) accepts", "onnxruntime 1"):
        pane.get_by_text(label).first.wait_for()  # a line per target while the node is inspected
    apply = page.locator(".st-key-apply-fold-resize-scales button").first
    apply.wait_for()
    assert page.evaluate("() => window.scrollY") == 0
    box = box_of(apply)
    assert box["y"] > 0 and box["y"] + box["height"] <= 1000, box
    graph = box_of(page.locator(".graph-canvas"))
    assert graph["x"] + graph["width"] <= box["x"], (graph, box)  # side by side
    page.screenshot(path=str(tmp_path / "four_targets.png"))


def test_the_drawing_stays_on_screen_while_a_check_comes_in(page, tmp_path):
    """A rerun (a target's check coming in) updates the drawing in place: the canvas is never taken off the page
    while the script computes the next view (an empty slot blanked it until then: ~2 s on a 1B export)."""
    # 2000 nodes: the next view takes the rerun a moment to make, in which an empty slot shows nothing
    upload(page, generated(500, custom_in="/stage7/block2/Relu"), tmp_path / "stays.onnx")
    # every animation frame from here on: is the drawing's canvas on the page and laid out?
    page.evaluate(
        "() => { const el = globalThis.__onnxSurgeryGraph.el; globalThis.__hiddenFrames = 0;"
        " globalThis.__watching = true; (function tick() {"
        " if (!el.isConnected || el.getClientRects().length === 0) globalThis.__hiddenFrames++;"
        " if (globalThis.__watching) requestAnimationFrame(tick); })(); }"
    )
    add_target(page, "tensorrt-static@8.6")  # a target no other test of this page adds
    page.locator(".st-key-inspector-pane").get_by_text("TensorRT 8.6 (predicted)").first.wait_for()
    settle(page)
    assert page.evaluate("() => { globalThis.__watching = false; return globalThis.__hiddenFrames; }") == 0
