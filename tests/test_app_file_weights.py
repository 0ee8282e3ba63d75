"""The app opens a server path with the model's large weights left in its file (surgery.file_weights): the
session's versions refer to them, the fixed model downloads with them inline, split's parts are written with
them, and a file changed on disk stops every page until it is reopened, with the session's steps applied again."""

import sys
from pathlib import Path

import onnx
import pytest
from streamlit.testing.v1 import AppTest

sys.path.insert(0, str(Path(__file__).parent))
from test_file_weights import _model  # noqa: E402

from surgery.model import load_model, model_bytes, save_model  # noqa: E402
from surgery.workspace import Workspace  # noqa: E402

MAIN = str(Path(__file__).resolve().parent.parent / "app" / "main.py")


@pytest.fixture
def opened(tmp_path, monkeypatch):
    path = tmp_path / "model.onnx"
    onnx.save(_model(), str(path))
    monkeypatch.setenv("ONNX_SURGERY_START_MODEL", str(path))
    at = AppTest.from_file(MAIN, default_timeout=90)
    at.run()
    at.session_state["targets"] = ["tensorrt-static@8.2"]
    at.button(key="fix_all").click()
    at.run()
    assert not at.exception, at.exception
    return at, path


def _whole(path, steps):
    ws = Workspace(load_model(path))
    for step in steps:
        ws.apply(step)
    return ws


def test_a_fixed_session_refers_to_the_file_and_downloads_the_model_whole(opened, tmp_path):
    at, path = opened
    ws = at.session_state["ws"]
    assert ws.original.own_file.path == path and ws.recipe
    whole = _whole(path, ws.recipe)
    assert ws.fingerprint() == whole.fingerprint()
    # what "Download model" gives: the bytes the same model loaded whole is written as
    data = model_bytes(ws.current, ws.original.own_file)
    assert data == save_model(whole.current, tmp_path / "whole.onnx").read_bytes()


def test_every_page_renders_the_fixed_model(opened):
    from test_app import PAGES

    at, _ = opened
    for page, title in PAGES.items():
        at.switch_page(page)
        at.run()
        assert not at.exception, (page, at.exception)
        assert at.title[0].value == title


def test_a_file_changed_on_disk_stops_the_pages_until_reopened(opened, tmp_path):
    at, path = opened
    steps = list(at.session_state["ws"].recipe)
    changed = _model()
    changed.graph.initializer[0].raw_data = bytes(len(changed.graph.initializer[0].raw_data))
    onnx.save(changed, str(tmp_path / "new.onnx"))
    (tmp_path / "new.onnx").replace(path)
    at.run()
    assert not at.exception
    assert any("changed on disk after it was opened" in e.value for e in at.error), [
        e.value for e in at.error
    ]
    assert not [b for b in at.button if b.key == "fix_all"]  # no page ran
    at.button(key="reopen_changed").click()
    at.run()
    assert not at.exception and not any("changed on disk" in e.value for e in at.error)
    ws = at.session_state["ws"]
    assert ws.recipe == steps and ws.fingerprint() == _whole(path, steps).fingerprint()


@pytest.mark.browser
@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="Debian's chromium is not installed")
def test_in_a_browser_a_changed_file_is_said_and_reopened(tmp_path):
    from playwright.sync_api import sync_playwright
    from test_browser import settle

    sys.path.insert(0, str(Path(MAIN).parent.parent / "bench"))
    from _browser import ARGS, CHROMIUM, start_server, stop_server

    path = tmp_path / "model.onnx"
    onnx.save(_model(), str(path))
    server, url = start_server(path, {"ONNX_SURGERY_STATE_DIR": str(tmp_path / "sessions")})
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 900})
            page.set_default_timeout(90_000)
            page.goto(url)
            page.wait_for_selector('[data-testid="stApp"]', timeout=60_000)
            settle(page)
            changed = _model()
            changed.graph.initializer[0].raw_data = bytes(len(changed.graph.initializer[0].raw_data))
            onnx.save(changed, str(tmp_path / "new.onnx"))
            (tmp_path / "new.onnx").replace(path)
            page.get_by_role("link", name="Overview").click()  # any rerun of this session
            page.get_by_text("changed on disk after it was opened").wait_for()
            assert page.get_by_role("heading", name="Overview").count() == 0  # the page did not run
            page.get_by_role("button", name="Reopen it as it is now").click()
            page.get_by_role("heading", name="Overview").wait_for()
            assert page.get_by_text("changed on disk").count() == 0
            browser.close()
    finally:
        stop_server(server)


def test_the_download_says_where_external_weights_stay(tmp_path, monkeypatch, opened):
    def download_help(at):
        (button,) = [
            e for e in at.main if getattr(e, "type", "") == "download_button" and "model" in e.proto.label
        ]
        return button.proto.help

    at, _ = opened
    assert download_help(at) == ""  # weights left in the opened file come back inline: nothing to keep beside
    path = tmp_path / "ext" / "m.onnx"
    path.parent.mkdir()
    onnx.save(_model(), str(path), save_as_external_data=True, location="m.weights", size_threshold=0)
    monkeypatch.setenv("ONNX_SURGERY_START_MODEL", str(path))
    at = AppTest.from_file(MAIN, default_timeout=90)
    at.run()
    assert "`m.weights` are not in this file" in download_help(at)


def test_a_reopened_file_keeps_the_steps_that_still_apply_and_says_which_does_not(opened, tmp_path):
    at, path = opened
    steps = list(at.session_state["ws"].recipe)
    changed = _model()
    ln = next(n for n in changed.graph.node if n.op_type == "LayerNormalization")
    ln.op_type, ln.name = "Identity", "was_ln"
    del ln.input[1:]
    del ln.attribute[:]
    onnx.save(changed, str(tmp_path / "new.onnx"))
    (tmp_path / "new.onnx").replace(path)
    at.run()
    at.button(key="reopen_changed").click()
    at.run()
    assert not at.exception
    first = next(
        k for k, s in enumerate(steps, 1) if "ln" in str(s.params)
    )  # the step on the LayerNormalization
    from markdown_shown import shown

    said = [shown(e.value) for e in at.error if "reopened" in e.value]
    assert len(said) == 1 and f"step {first} ({steps[first - 1].fix}) no longer applies" in said[0], said
    assert at.session_state["ws"].recipe == steps[: first - 1]
