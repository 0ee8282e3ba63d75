"""AppTest for the app side of split and reduce: Overview's 'Split for deployment' on a sample a target rejects
(the parts with their backends, the verification, the zip), the one-line message when there is no plan, and the
Workbench inspector's 'Minimal failing model' (a smaller model the target refuses with the same words)."""

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from surgery.diagnose import check_one  # noqa: E402
from surgery.samples import build  # noqa: E402
from surgery.verdict import Status  # noqa: E402

MAIN = str(Path(__file__).resolve().parent.parent / "app" / "main.py")
TRT = "tensorrt-static@10.15"


def open_lesson(name: str, page: str | None = None) -> AppTest:
    """The app with a lesson's sample open (its target and onnxruntime checked), on `page`."""
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    at.button(key=f"side-lesson-{name}").click()
    at.run()
    for _ in range(3):  # the workbench checks one target per run
        at.run()
    if page:
        at.switch_page(page)
        at.run()
    assert not at.exception, at.exception
    assert at.session_state["model_name"] == f"{name}.onnx"
    return at


def frame(at: AppTest, column: str):
    """The one table on the page with `column` (AppTest does not expose a dataframe's key)."""
    (found,) = [d.value for d in at.dataframe if column in d.value.columns]
    return found


def plain(text: str) -> str:
    """Text as shown: md_escape's backslashes removed."""
    return text.replace("\\", "")


def test_split_on_a_rejected_sample_shows_parts_backends_verification_and_a_zip_that_runs():
    at = open_lesson("ml_scaler", "views/overview.py")  # TensorRT 10.15 has no ai.onnx.ml Scaler
    assert not at.get("graphviz_chart"), "no plan before the button is pressed"
    at.button(key=f"split-{TRT}").click()
    at.run()
    assert not at.exception, at.exception
    assert any(
        "Deployable" in plain(s.value) and "TensorRT 10.15 (predicted)" in plain(s.value) for s in at.success
    ), [s.value for s in at.success]
    parts = frame(at, "alone")
    assert list(parts["runs on"]) == ["onnxruntime", TRT]
    assert list(parts["role"]) == ["fallback", "target"]
    assert list(parts["nodes"]) == [1, 3]
    assert list(parts["alone"]) == ["accepts", "accepts"]
    dot = at.get("graphviz_chart")[0].proto.spec
    assert "part 0: onnxruntime" in dot and f"part 1: {TRT}" in dot
    # the verification: its line and its numbers
    shown = [plain(m.value) for m in at.markdown]
    assert any("reproduces (seed 0): output: max abs 0, mean rel 0" in m for m in shown), shown
    numbers = frame(at, "mean rel")
    assert list(numbers["output"]) == ["output"] and bool(numbers["ok"].all())
    assert float(numbers["max abs"].max()) == 0.0
    # the download: a deferred zip, made from the plan the page shows
    (button,) = [b for b in at.get("download_button") if b.proto.label == "Download parts and plan (zip)"]
    assert button.proto.HasField("deferred_file_id")
    (plan,) = at.session_state["splits"].values()
    archive = zipfile.ZipFile(io.BytesIO(plan.to_zip()))
    assert sorted(archive.namelist()) == sorted(
        ["plan.json", "part0_onnxruntime.onnx", f"part1_{TRT.replace('@', '-')}.onnx"]
    )
    written = json.loads(archive.read("plan.json"))
    assert [(p["backend"], p["file"]) for p in written["parts"]] == [(p.backend, p.file) for p in plan.parts]
    assert written["source"] == at.session_state["model_name"]  # which model it splits, as the CLI says
    assert written["verification"]["status"] == "reproduces"
    # the parts, run one after the other from the zip, give the original's output
    import onnxruntime as ort

    def run(model_bytes, feeds):
        sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {n: feeds[n] for n in names})))

    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    feeds = {"features": x}
    for p in written["parts"]:
        feeds.update(run(archive.read(p["file"]), feeds))
    want = run(build("ml_scaler").SerializeToString(), {"features": x})["output"]
    np.testing.assert_allclose(feeds["output"], want, rtol=1e-6)


def test_no_plan_is_one_line_in_the_apps_words_and_a_smaller_target_part_gives_one():
    at = open_lesson("squeeze_dynamic", "views/overview.py")  # TensorRT keeps one Relu: below 3 nodes
    at.button(key=f"split-{TRT}").click()
    at.run()
    assert not at.exception, at.exception
    errors = [plain(e.value) for e in at.error if "No plan" in e.value]
    assert len(errors) == 1, [e.value for e in at.error]
    assert "\n" not in errors[0] and "--min-nodes" not in errors[0], errors[0]
    assert "smaller than 3 (Smallest target part); lower it" in errors[0], errors[0]
    assert not at.get("graphviz_chart") and not at.get("download_button")
    at.number_input(key=f"split-min-{TRT}").set_value(1)
    at.run()
    at.button(key=f"split-{TRT}").click()
    at.run()
    assert not at.exception, at.exception
    assert not any("No plan" in e.value for e in at.error)
    parts = frame(at, "alone")
    assert list(parts["runs on"]) == ["onnxruntime", TRT]


def test_minimal_failing_model_is_smaller_and_refused_with_the_same_words():
    node = "/dcn/MMCVModulatedDeformConv2d"
    at = open_lesson("deform_conv_custom")  # TensorRT 10.15 and onnxruntime both refuse the mmcv op
    assert at.session_state["selected"] == node
    buttons = {b.key: plain(b.label) for b in at.button if b.key and b.key.startswith("reduce-")}
    assert set(buttons) == {f"reduce-{TRT}-{node}", f"reduce-onnxruntime-{node}"}, buttons
    assert buttons[f"reduce-{TRT}-{node}"] == "Reduce for TensorRT 10.15 (predicted)"
    assert not any(b.proto.label == "Download the minimal model" for b in at.get("download_button"))
    at.button(key=f"reduce-{TRT}-{node}").click()
    at.run()
    assert not at.exception, at.exception
    captions = [plain(c.value) for c in at.caption]
    assert any(
        "5 → 1 node(s)" in c
        and f"still refuses MMCVModulatedDeformConv2d '{node}' (INVALID_NODE, same words)" in c
        for c in captions
    ), captions
    downloads = [b for b in at.get("download_button") if b.proto.label == "Download the minimal model"]
    assert len(downloads) == 1, "one download: onnxruntime's reduction was not asked for"
    (result,) = at.session_state["reduced"].values()
    reduced = onnx.load_from_string(result.to_bytes())
    original = build("deform_conv_custom")
    assert 0 < len(reduced.graph.node) < len(original.graph.node)
    before = check_one(original, TRT).by_node()[node]
    after = check_one(reduced, TRT)
    (refused,) = [v for v in after.verdicts if v.status is Status.REJECTED]
    assert refused.op_type == "MMCVModulatedDeformConv2d"
    assert (refused.code, refused.words, refused.stage) == (before.code, before.words, before.stage)


def test_a_node_name_in_the_reduce_caption_is_not_markdown(tmp_path, monkeypatch):
    """A rejected node named with dollars, stars and a tag: the reduce caption shows it as text (md_escape),
    never as maths, emphasis or HTML."""
    name = "/prep/$s$ *Scaler* <b>x</b>"
    model = build("ml_scaler")
    model.graph.node[0].name = name
    path = tmp_path / "named.onnx"
    onnx.save(model, path)
    monkeypatch.setenv("ONNX_SURGERY_START_MODEL", str(path))
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    at.session_state["selected"] = name
    for _ in range(3):
        at.run()
    at.button(key=f"reduce-{TRT}-{name}").click()
    at.run()
    assert not at.exception, at.exception
    (caption,) = [c.value for c in at.caption if "still refuses Scaler" in c.value]
    assert r"\$s\$ \*Scaler\* \<b\>x\</b\>" in caption, caption
