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
    assert ws.original.own_file == path and ws.recipe
    whole = _whole(path, ws.recipe)
    assert ws.fingerprint() == whole.fingerprint()
    # what "Download model" gives: the bytes the same model loaded whole is written as
    data = model_bytes(ws.current, ws.original.own_file)
    assert data == save_model(whole.current, tmp_path / "whole.onnx").read_bytes()


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
