"""AppTest for the Survey page: it shows a survey's matrix, runs one on a folder under --models-dir with its
progress, and opens a refused model in the workbench with the target that refused it."""

import shutil
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from surgery.usecases.survey import survey  # noqa: E402
from surgery.usecases.survey.cells import final_outcome  # noqa: E402
from surgery.usecases.survey.request import SurveyRequest  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MAIN = str(REPO / "app" / "main.py")
TARGET = "tensorrt-static@10.15"


@pytest.fixture
def zoo(tmp_path, monkeypatch):
    models = tmp_path / "models" / "zoo"
    models.mkdir(parents=True)
    for name in ("healthy_cnn", "unique_op", "squeeze_dynamic"):
        shutil.copy(REPO / "sample_models" / f"{name}.onnx", models / f"{name}.onnx")
    monkeypatch.setenv("ONNX_SURGERY_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("ONNX_SURGERY_SURVEY_CACHE", str(tmp_path / "cache"))
    return models


def _page() -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=90)
    at.run()
    at.switch_page("views/survey.py")
    at.run()
    assert not at.exception, at.exception
    return at


def test_the_survey_page_shows_the_matrix_and_opens_a_refused_model_in_the_workbench(zoo):
    report = survey(SurveyRequest([str(zoo)], ["onnxruntime", TARGET])).report
    at = _page()
    assert at.title[0].value == "Survey"
    at.session_state["survey_report"] = report
    at.run()
    assert not at.exception, at.exception
    matrix = at.dataframe[0].value
    assert list(matrix.columns) == ["model", "nodes", "onnxruntime", TARGET]
    by_name = {m["name"]: m for m in report["models"]}
    for _, row in matrix.iterrows():
        for t in ("onnxruntime", TARGET):
            assert row[t] == final_outcome(by_name[row["model"]]["targets"][t])
    refused = [m for m in report["models"] if final_outcome(m["targets"][TARGET]) == "rejects"]
    assert {m["name"] for m in refused} == {"unique_op.onnx", "squeeze_dynamic.onnx"}
    k = report["models"].index(next(m for m in report["models"] if m["name"] == "unique_op.onnx"))
    at.button(key=f"survey-open-{k}").click()
    at.run()
    assert not at.exception, at.exception
    assert at.session_state["model_name"] == "unique_op.onnx"
    assert at.session_state["targets"] == [TARGET]


def test_a_survey_runs_on_a_folder_under_the_models_folder_only(zoo, tmp_path):
    at = _page()
    at.text_input(key="survey_folder").input(str(tmp_path))  # above the models folder: refused
    at.multiselect(key="survey_targets").set_value([TARGET])
    at.run()
    at.button(key="survey_run").click()
    at.run()
    assert any("refused — only paths under" in e.value for e in at.error)
    assert "survey_report" not in at.session_state
    at.text_input(key="survey_folder").input("zoo")
    at.checkbox(key="survey_fix").check()
    at.run()
    at.button(key="survey_run").click()
    at.run()
    assert not at.exception, at.exception
    report = at.session_state["survey_report"]
    assert report["fix"] and report["targets"] == [TARGET]
    assert sorted(m["name"] for m in report["models"]) == [
        "healthy_cnn.onnx",
        "squeeze_dynamic.onnx",
        "unique_op.onnx",
    ]
    squeeze = next(m for m in report["models"] if m["name"] == "squeeze_dynamic.onnx")["targets"][TARGET]
    assert squeeze["outcome"] == "rejects" and final_outcome(squeeze) == "accepts"
    row = at.dataframe[0].value.set_index("model").loc["squeeze_dynamic.onnx"]
    assert row[TARGET].startswith("rejects → accepts")
