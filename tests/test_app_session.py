"""AppTest: the work survives a new Streamlit session (a reload, a second tab, a restarted server): the session
id in the URL restores the model, its steps and the last verification by replaying the recipe."""

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from markdown_shown import shown  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from surgery import sessions  # noqa: E402

MAIN = str(Path(__file__).resolve().parent.parent / "app" / "main.py")


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNX_SURGERY_STATE_DIR", str(tmp_path / "sessions"))
    return tmp_path / "sessions"


def fresh(session: str | None = None) -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=60)
    if session is not None:
        at.query_params["session"] = session
    at.run()
    assert not at.exception, at.exception
    return at


def test_an_applied_fix_is_restored_in_a_new_session_from_the_url(state_dir):
    at = fresh()
    assert "session" not in at.query_params  # the default sample, untouched: nothing saved
    assert not state_dir.exists()
    at.button(key="side-lesson-ml_scaler").click()
    at.run()
    at.button(key="apply-ml-scaler-decompose").click()
    at.run()
    assert not at.exception, at.exception
    ws = at.session_state["ws"]
    assert [s.rule for s in ws.recipe] == ["ml-scaler-decompose"]
    sid = at.query_params["session"]
    sid = sid[0] if isinstance(sid, list) else sid
    assert sessions.valid_id(sid) and (state_dir / sid / "state.json").is_file()
    verified = [s.value for s in at.success if "verified" in s.value]
    assert verified

    again = fresh(sid)  # a new Streamlit session with the same URL
    back = again.session_state["ws"]
    assert back.fingerprint() == ws.fingerprint() and back is not ws
    assert [s.rule for s in back.recipe] == ["ml-scaler-decompose"]
    assert again.session_state["model_name"] == "ml_scaler.onnx"
    assert list(again.session_state["targets"]) == list(at.session_state["targets"])
    assert [s.value for s in again.success if "verified" in s.value] == verified
    numbers = [c.value for c in at.caption if c.value.startswith("✓ ")]
    assert (
        numbers and [c.value for c in again.caption if c.value.startswith("✓ ")] == numbers
    )  # each step's own
    assert any("1. " in m.value and "decompose" in m.value.lower() for m in again.markdown)

    again.button(key="undo").click()  # undo is saved too: a third session finds it undone, redo possible
    again.run()
    third = fresh(sid)
    ws3 = third.session_state["ws"]
    assert ws3.cursor == 0 and ws3.can_redo
    third.button(key="redo").click()
    third.run()
    assert third.session_state["ws"].fingerprint() == ws.fingerprint()


def test_a_session_that_cannot_be_restored_is_one_line_and_the_app_opens(state_dir):
    at = fresh("../../etc/passwd")
    assert at.session_state["model_name"] == "healthy_cnn.onnx"
    assert [shown(e.value) for e in at.error] == ["'../../etc/passwd': not a session id"]
    assert "session" not in at.query_params
    gone = sessions.new_id()
    at = fresh(gone)
    assert any("not found" in e.value and "\n" not in e.value for e in at.error)


def test_the_sidebar_reopens_a_recent_session(state_dir):
    at = fresh()
    at.button(key="side-lesson-ml_scaler").click()
    at.run()
    at.button(key="apply-ml-scaler-decompose").click()
    at.run()
    first = at.session_state["session_id"]
    at.button(key="side-lesson-resize_scales_chain").click()  # another model: another session
    at.run()
    assert at.session_state["session_id"] != first
    reopen = at.button(key=f"session-{first}")
    assert "ml_scaler.onnx · 1 step(s)" in shown(reopen.label)
    reopen.click()
    at.run()
    assert not at.exception, at.exception
    assert at.session_state["model_name"] == "ml_scaler.onnx"
    assert at.session_state["ws"].cursor == 1 and at.session_state["session_id"] == first


def test_an_uploaded_model_is_restored_from_its_copy_and_a_stale_path_is_refused(
    state_dir, tmp_path, monkeypatch
):
    from surgery.samples import sample_path
    from surgery.workspace import Step, Workspace

    data = sample_path("training_mode_ops").read_bytes()
    ws = Workspace.open(data, name="mine.onnx")
    ws.apply(Step("inference_mode"))
    sid = sessions.new_id()
    sessions.save(ws, sid, name="mine.onnx", targets=["onnxruntime"], upload=data)
    at = fresh(sid)
    assert at.session_state["model_name"] == "mine.onnx"
    assert at.session_state["ws"].fingerprint() == ws.fingerprint()
    assert list(at.session_state["targets"]) == ["onnxruntime"]

    src = tmp_path / "m.onnx"
    src.write_bytes(data)
    monkeypatch.setenv("ONNX_SURGERY_MODELS_DIR", str(tmp_path))  # a server path the app may open
    on_disk = Workspace.open(src)
    on_disk.apply(Step("inference_mode"))
    stale = sessions.new_id()
    sessions.save(on_disk, stale, name="m.onnx")
    src.write_bytes(sample_path("healthy_cnn").read_bytes())  # another model at that path since
    at = fresh(stale)
    assert at.session_state["model_name"] == "healthy_cnn.onnx"
    assert any("stale:" in e.value and "\n" not in e.value for e in at.error), [e.value for e in at.error]


def _sid(at) -> str:
    sid = at.query_params["session"]
    return sid[0] if isinstance(sid, list) else sid


def test_two_tabs_on_one_session_lose_nothing(state_dir):
    """Tab A and another writer (tab B, here the library a tab calls) share a session. B saves a step after A read
    it; A's Apply is not written over B's: A is told, reloads B's step and applies its own after it. B, now behind,
    is refused in turn. An undo in A after B saved again reloads B's work and says the undo was not saved."""
    from surgery.workspace import Step

    a = fresh()
    a.button(key="side-lesson-ml_scaler").click()
    a.run()
    sid = _sid(a)
    b = sessions.load(sid)
    b.workspace.apply(Step("fold_constants", rule="by-tab-b"))
    b_rev = sessions.save(
        b.workspace, sid, name="ml_scaler.onnx", sample="ml_scaler", expect=b.revision
    ).revision

    a.button(key="apply-ml-scaler-decompose").click()
    a.run()
    assert not a.exception, a.exception
    told = [shown(e.value) for e in a.warning]
    assert any("its 1 step(s) are kept and this tab's 1 step(s) applied after them" in t for t in told), told
    on_disk = sessions.load(sid)
    assert [s.rule for s in on_disk.workspace.recipe] == ["by-tab-b", "ml-scaler-decompose"]
    assert a.session_state["ws"].fingerprint() == on_disk.workspace.fingerprint()
    with pytest.raises(sessions.SessionConflict):  # B is behind now: told, not written over A
        sessions.save(b.workspace, sid, name="ml_scaler.onnx", sample="ml_scaler", expect=b_rev)

    c = sessions.load(sid)  # B again, up to date: it undoes its own first step's successor
    c.workspace.undo()
    sessions.save(c.workspace, sid, name="ml_scaler.onnx", sample="ml_scaler", expect=c.revision)
    a.button(key="undo").click()
    a.run()
    assert not a.exception, a.exception
    assert any("was not saved" in shown(e.value) for e in a.warning)
    assert a.session_state["ws"].cursor == 1 == sessions.load(sid).workspace.cursor


def test_the_colouring_chosen_survives_a_reload(state_dir):
    at = fresh()
    at.button(key="side-lesson-resize_scales_chain").click()
    at.run()
    options = at.selectbox(key="color_by").options
    assert len(options) >= 2
    at.selectbox(key="color_by").set_value(options[1])
    at.run()
    again = fresh(_sid(at))
    assert again.selectbox(key="color_by").value == options[1]
