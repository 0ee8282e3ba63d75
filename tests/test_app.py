"""AppTest for every page: it renders without an exception and shows what the page is for."""

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

MAIN = str(Path(__file__).resolve().parent.parent / "app" / "main.py")


def run_page(page: str | None = None, **state) -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.run()
    for k, v in state.items():
        at.session_state[k] = v
    if page:
        at.switch_page(page)
        at.run()
    assert not at.exception, at.exception
    return at


def test_workbench_opens_on_the_healthy_sample_with_lessons_listed():
    at = run_page()
    assert at.session_state["model_name"] == "healthy_cnn.onnx"
    assert any("accepts the model" in s.value for s in at.success)
    lesson_buttons = [b for b in at.button if b.key and b.key.startswith("side-lesson-")]
    assert len(lesson_buttons) >= 8


def test_selecting_a_node_shows_the_inspector():
    at = run_page()
    at.session_state["selected"] = "/conv1/Conv"
    at.run()
    assert not at.exception
    assert any("Conv" in h.value and "/conv1/Conv" in h.value for h in at.subheader)


def test_server_paths_only_under_the_models_folder_and_bad_files_get_one_line(tmp_path, monkeypatch):
    models = tmp_path / "models"
    models.mkdir()
    (models / "broken.onnx").write_bytes(b"\x00\x01 definitely not onnx")
    (tmp_path / "outside.onnx").write_bytes(b"x")
    monkeypatch.setenv("ONNX_SURGERY_MODELS_DIR", str(models))
    at = run_page()
    at.text_input(key="server_path").input(str(tmp_path / "outside.onnx"))
    at.run()
    at.button(key="open_path").click()
    at.run()
    errors = [e.value for e in at.error]
    assert any("refused — only files under" in e for e in errors), errors
    at.text_input(key="server_path").input(str(models / "broken.onnx"))
    at.run()
    at.button(key="open_path").click()
    at.run()
    errors = [e.value for e in at.error]
    assert any("broken.onnx: not an ONNX model" in e and "\n" not in e for e in errors), errors
    assert at.session_state["model_name"] == "healthy_cnn.onnx"  # the open model is kept


def test_lesson_button_opens_the_broken_model_with_its_node_selected():
    at = run_page()
    at.button(key="side-lesson-ml_scaler").click()
    at.run()
    assert not at.exception
    assert at.session_state["model_name"] == "ml_scaler.onnx"
    assert at.session_state["selected"] == "/prep/Scaler"


@pytest.mark.parametrize(
    "page", ["pages/overview.py", "pages/lessons.py", "pages/rules.py", "pages/backends.py", "pages/build.py"]
)
def test_every_page_renders(page):
    at = run_page(page)
    assert at.title[0].value in {"Overview", "Lessons", "Rules", "Backends", "Test build"}


def test_build_page_builds_on_onnxruntime_and_shows_numbers():
    at = run_page("pages/build.py")
    at.multiselect(key="build_backends").set_value(["onnxruntime"])
    at.number_input(key="build_runs").set_value(3)
    at.button(key="build_go").click()
    at.run()
    assert not at.exception
    assert any("onnxruntime" in s.value and "built" in s.value for s in at.success)
    assert at.dataframe[0].value.loc["onnxruntime", "worst mean rel error"] < 1e-6


def test_apply_undo_redo_through_the_workbench():
    at = run_page()
    at.session_state["targets"] = ["onnxruntime"]
    at.button(key="side-lesson-ml_scaler").click()
    at.run()
    apply = [b for b in at.button if b.key == "apply-ml-scaler-decompose"]
    assert apply, [b.key for b in at.button]
    at.toggle(key="preview-ml-scaler-decompose").set_value(True)
    at.run()
    assert any("removes 1 node(s): `/prep/Scaler`" in m.value for m in at.markdown)
    assert any("1 → 0 rejected" in c.value for c in at.caption)
    apply = [b for b in at.button if b.key == "apply-ml-scaler-decompose"]
    apply[0].click()
    at.run()
    assert not at.exception
    ws = at.session_state["ws"]
    assert [s.rule for s in ws.recipe] == ["ml-scaler-decompose"]
    assert any("verified" in s.value for s in at.success)
    at.button(key="undo").click()
    at.run()
    assert at.session_state["ws"].cursor == 0
    at.button(key="redo").click()
    at.run()
    assert at.session_state["ws"].cursor == 1
