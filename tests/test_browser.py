"""The main journey in a real browser: Debian's Chromium (headless, never downloaded) driven by Playwright
against a real `streamlit run` server. Open the classic Resize sample with TensorRT 8.2 (predicted), see the
Resize node rejected, click it, apply the fold, see it supported, undo, redo, download, run with onnxruntime."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import onnx
import pytest

from surgery.cli.app_cmd import STREAMLIT_LOOK

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parent.parent
# the README screenshot is refreshed only on request: ONNX_SURGERY_SCREENSHOT=docs/screenshot.png pytest ...
SHOT = os.environ.get("ONNX_SURGERY_SCREENSHOT")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
RED, GREEN = "#d64545", "#2e9d57"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason="Debian's chromium is not installed (apt-get install chromium); scripts/test.sh installs it",
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = _free_port()
    env = dict(os.environ, ONNX_SURGERY_USER_RULES=str(tmp_path_factory.mktemp("rules")))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(ROOT / "app" / "main.py"),
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
            "--server.fileWatcherType",
            "none",
            *STREAMLIT_LOOK,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok":
                break
        except OSError:
            time.sleep(0.2)
    else:
        os.killpg(proc.pid, signal.SIGTERM)
        pytest.fail("streamlit did not start")
    yield url
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        pg = browser.new_page(viewport={"width": 1500, "height": 1000}, accept_downloads=True)
        pg.set_default_timeout(90_000)  # 2 shared cores in CI: a rerun can take a while
        pg.goto(server)
        pg.wait_for_selector('[data-testid="stApp"]', timeout=60_000)
        yield pg
        browser.close()


def settle(page, timeout=60_000):
    """Wait until the script run is over and the graph is drawn."""
    page.wait_for_timeout(300)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout
    )
    page.wait_for_selector(".graph-canvas[data-drawn='1']", timeout=timeout)


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
    box = page.locator(".graph-canvas").bounding_box()
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
    assert "TensorRT 8.2 (predicted) accepts the model" in page.inner_text("body")

    page.locator(".st-key-undo button").click()
    settle(page)
    assert wait_color(page, "/up/Resize", RED) == RED
    page.locator(".st-key-redo button").click()
    settle(page)
    assert wait_color(page, "/up/Resize", GREEN) == GREEN

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


def test_a_bad_upload_shows_the_one_line_message(page, tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"\x00\x01\x02 not an onnx file")
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(bad))
    page.locator(".st-key-open_upload button").click()
    page.get_by_text("broken.onnx: not an ONNX model").first.wait_for(timeout=30_000)
    assert "Traceback" not in page.inner_text("body")
