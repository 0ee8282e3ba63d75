"""AppTest for the Precision page: it finds the nodes that break fp16 on the current model (a hand-written
LayerNorm whose squares pass 65504), shows them with the per-node table, and applies the step through the
workspace, undone like any fix."""

from pathlib import Path

import onnx
import pytest

pytest.importorskip("streamlit")
from precision_models import layernorm  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

MAIN = str(Path(__file__).resolve().parent.parent / "app" / "main.py")


@pytest.fixture
def page(tmp_path, monkeypatch):
    src = tmp_path / "ln.onnx"
    onnx.save(layernorm(), src)
    monkeypatch.setenv("ONNX_SURGERY_START_MODEL", str(src))
    monkeypatch.setenv("ONNX_SURGERY_STATE_DIR", str(tmp_path / "sessions"))
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    at.switch_page("views/precision.py")
    at.run()
    assert not at.exception, at.exception
    return at


def test_precision_page_finds_the_overflow_and_applies_the_step_with_undo(page):
    at = page
    ws = at.session_state["ws"]
    assert not ws.recipe
    at.button(key="precision-run").click()
    at.run()
    assert not at.exception, at.exception
    assert any("within" in s.value and "not within" not in s.value for s in at.success)
    kept = at.dataframe[1].value  # outputs, kept, every node
    assert "ln/square" in list(kept["node"]) and set(kept["why"]) <= {"overflow", "sensitivity", "inf/NaN"}
    nodes = at.dataframe[2].value
    assert len(nodes) > len(kept)
    at.button(key="precision-apply").click()
    at.run()
    assert not at.exception, at.exception
    ws = at.session_state["ws"]
    assert [s.fix for s in ws.recipe] == ["mixed_precision"]
    assert "ln/square" in ws.recipe[0].params["keep"]
    assert any("applied" in s.value for s in at.success)
    at.switch_page("views/workbench.py")  # undone like any fix, where the recipe is
    at.run()
    at.button(key="undo").click()
    at.run()
    assert not at.exception, at.exception
    assert not at.session_state["ws"].recipe


def test_inputs_that_cannot_be_used_are_one_message(page):
    at = page
    at.text_input(key="precision-calib").set_value("random:0")
    at.button(key="precision-run").click()
    at.run()
    assert not at.exception, at.exception
    assert len(at.error) >= 1 and any("random" in e.value for e in at.error)


def test_the_search_colours_the_workbench_graph(page):
    """After a search, the workbench can colour the graph by it: the kept nodes red (rejected-coloured, each with
    why and its numbers in its tooltip), the reduced ones green."""
    from surgery.view.labels import status_of

    at = page
    at.button(key="precision-run").click()
    at.run()
    outcome = at.session_state["precision_outcome"][1]
    kept = {k.key for k in outcome.kept}
    at.switch_page("views/workbench.py")
    at.run()
    label = "fp16 emulation: kept in float32"
    assert label in at.selectbox(key="color_by").options
    at.selectbox(key="color_by").set_value(label)
    at.run()
    assert not at.exception, at.exception
    from markdown_shown import shown

    said = [shown(c.value) for c in at.caption if "emulation (the Precision page)" in shown(c.value)]
    assert said and f"{len(kept)} node(s) kept in float32 (red)" in said[0], said
    from surgery.usecases.precision import colouring

    by = colouring(outcome).by_node()
    assert {k for k, v in by.items() if status_of(v) == "rejected"} == kept
    assert "ln/square" in kept and "kept in float32 (overflow)" in by["ln/square"].explanation
