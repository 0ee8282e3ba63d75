"""The work survives a restarted server, in a real browser (Debian's Chromium, never downloaded, driven by
Playwright against a real `streamlit run`): apply a fix, kill the server, start it again on the same state
folder, reload the URL: the step and its verification are there."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_browser import settle

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from _browser import ARGS, CHROMIUM, free_port, start_server, stop_server  # noqa: E402

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason="Debian's chromium is not installed (apt-get install chromium); scripts/test.sh installs it",
    ),
]


def start(port: int, state: Path, rules: Path) -> subprocess.Popen:
    env = {"ONNX_SURGERY_STATE_DIR": str(state), "ONNX_SURGERY_USER_RULES": str(rules)}
    try:
        return start_server(env_extra=env, port=port)[0]
    except RuntimeError as exc:
        pytest.fail(str(exc))


def new_page(browser):
    """A page at 1600x1000 that waits up to 90 s (2 shared cores in CI)."""
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.set_default_timeout(90_000)
    return page


def test_a_fix_survives_killing_the_server_and_reloading(tmp_path):
    from playwright.sync_api import sync_playwright

    port, state, rules = free_port(), tmp_path / "sessions", tmp_path / "rules"
    server = start(port, state, rules)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            page = new_page(browser)
            page.goto(f"http://127.0.0.1:{port}")
            page.wait_for_selector('[data-testid="stApp"]', timeout=60_000)
            settle(page)
            page.locator(".st-key-side-lesson-ml_scaler button").click()
            settle(page)
            page.locator(".st-key-apply-ml-scaler-decompose button").click()
            settle(page)
            page.get_by_text("ml-scaler-decompose on").first.wait_for()
            verified = page.locator('[data-testid="stAlert"]', has_text="verified").first.inner_text()
            page.wait_for_function("() => new URLSearchParams(location.search).get('session')")
            url = page.url
            sid = url.split("session=")[1].split("&")[0]
            assert (state / sid / "state.json").is_file()

            stop_server(server, signal.SIGKILL)  # no goodbye: what is on disk is all there is
            server = start(port, state, rules)
            page.goto(url)
            page.wait_for_selector('[data-testid="stApp"]', timeout=60_000)
            settle(page)
            page.locator(".wb-title b", has_text="ml_scaler.onnx").wait_for()
            page.get_by_text("[rule ml-scaler-decompose]").first.wait_for()
            assert page.locator('[data-testid="stAlert"]', has_text="verified").first.inner_text() == verified
            page.wait_for_function(  # the graph drawn is the fixed model: the Scaler is gone
                "() => { const net = globalThis.__onnxSurgeryNetwork; return net && net.body &&"
                " !net.body.nodes['/prep/Scaler'] && net.body.nodes['/fc/MatMul']; }"
            )
            assert page.locator(".st-key-undo button").is_enabled()
            assert f"session={sid}" in page.url
            assert "Traceback" not in page.inner_text("body")
            browser.close()
    finally:
        stop_server(server, signal.SIGTERM)


def test_the_start_model_is_read_ahead_and_drawn_when_the_page_is_opened(tmp_path):
    """`onnx-surgery app MODEL`'s server reads MODEL once it answers (Streamlit's `_on_server_start` hook,
    surgery/cli/serve.py): a page opened a moment later shows that model, drawn collapsed, with no error."""
    import time

    import onnx
    from playwright.sync_api import sync_playwright
    from streamlit.web import bootstrap
    from test_view import scoped_chain

    assert callable(getattr(bootstrap, "_on_server_start", None)), "Streamlit's server-start hook is gone"
    path = tmp_path / "start.onnx"
    onnx.save(scoped_chain(500), path)
    server, url = start_server(path)
    try:
        time.sleep(1.0)  # as a person opening the printed address: the model is read by then
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            page = new_page(browser)
            page.goto(url)
            page.locator(".wb-title b", has_text="start.onnx").wait_for()
            page.get_by_text("2000 nodes collapsed into").first.wait_for()
            page.wait_for_function(  # drawn on screen (app/static/graph.js marks it)
                "() => { const g = globalThis.__onnxSurgeryGraph; return g && g.el.getAttribute('data-drawn') === '1'"
                " && g.data.nodes.length > 10; }"
            )
            assert "Traceback" not in page.inner_text("body")
            browser.close()
    finally:
        stop_server(server)


def test_two_tabs_applying_on_one_session_lose_nothing(tmp_path):
    """Two tabs on one session URL, both on the lesson before its fix. Tab A applies the fix; tab B, which read the
    session before that, applies it too: B is told another tab saved the session, and A's step is still on disk
    (B's work, which no longer applies on top of A's, is kept as a session of its own)."""
    import json

    from playwright.sync_api import sync_playwright

    port, state, rules = free_port(), tmp_path / "sessions", tmp_path / "rules"
    server = start(port, state, rules)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            a = new_page(browser)
            a.goto(f"http://127.0.0.1:{port}")
            a.wait_for_selector('[data-testid="stApp"]', timeout=60_000)
            settle(a)
            a.locator(".st-key-side-lesson-ml_scaler button").click()
            settle(a)
            a.wait_for_function("() => new URLSearchParams(location.search).get('session')")
            sid = a.url.split("session=")[1].split("&")[0]
            b = new_page(browser)
            b.goto(a.url)
            b.wait_for_selector('[data-testid="stApp"]', timeout=60_000)
            settle(b)
            b.locator(".st-key-apply-ml-scaler-decompose button").wait_for()

            a.locator(".st-key-apply-ml-scaler-decompose button").click()
            settle(a)
            a.get_by_text("ml-scaler-decompose on").first.wait_for()
            b.locator(".st-key-apply-ml-scaler-decompose button").click()
            settle(b)
            b.get_by_text("another tab").first.wait_for()
            saved = json.loads((state / sid / "state.json").read_text())
            assert [s["rule"] for s in saved["recipe"]["steps"]] == ["ml-scaler-decompose"]
            folders = [d for d in state.iterdir() if (d / "state.json").is_file()]
            assert len(folders) == 2  # A's session and the one B's work was kept in
            for page in (a, b):
                assert "Traceback" not in page.inner_text("body")
            b.screenshot(path=str(tmp_path / "tab_b.png"))
            browser.close()
    finally:
        stop_server(server, signal.SIGTERM)


def test_a_page_address_that_is_a_fresh_servers_first_request_opens_that_page_in_the_apps_navigation(
    tmp_path,
):
    """A reload of the Test build page after the server restarted: the first request a new server sees is a page's
    address. It opens that page, with the app's navigation (Streamlit once served a folder named pages/ as its own
    multipage app there, its sidebar listing the files: main, backends, build, ...)."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    server = start(port, tmp_path / "sessions", tmp_path / "rules")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            page = new_page(browser)
            page.goto(f"http://127.0.0.1:{port}/build")
            page.get_by_role("heading", name="Test build").wait_for()
            nav = page.locator('[data-testid="stSidebarNav"]')
            nav.get_by_text("Workbench").wait_for()
            links = nav.locator("a").all_inner_texts()
            assert any("Test build" in t for t in links), links
            assert not any(t.strip() in ("main", "build", "workbench") for t in links), links
            browser.close()
    finally:
        stop_server(server)
