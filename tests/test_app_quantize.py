"""AppTest for the Test build page's "INT8 (calibrate)" option: it quantizes the current model (random or
uploaded .npz calibration), builds it at int8 next to its float32 original at fp16 and fp32, and shows the
error distribution; a calibration file that does not fit the model is one message naming the input."""

import io
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("streamlit")
from markdown_shown import shown  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

MAIN = str(Path(__file__).resolve().parent.parent / "app" / "main.py")


def build_page() -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    at.switch_page("views/build.py")
    at.run()
    assert not at.exception, at.exception
    at.multiselect(key="build_backends").set_value(["onnxruntime"])
    at.number_input(key="build_runs").set_value(2)
    at.selectbox(key="build_precision").set_value("INT8 (calibrate)")
    at.run()
    return at


def npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_int8_calibrate_with_random_data_builds_int8_next_to_fp16_and_fp32():
    at = build_page()
    assert any("accuracy figures mean little" in w.value for w in at.warning)
    at.number_input(key="calib_samples").set_value(8)
    at.button(key="build_go").click()
    at.run()
    assert not at.exception, at.exception
    assert any("Quantized to INT8 on 8 random samples" in m.value for m in at.success)
    df = at.dataframe[0].value
    assert list(df.index) == ["onnxruntime int8", "onnxruntime fp16", "onnxruntime fp32"]
    int8 = df.loc["onnxruntime int8"]
    assert 0 < int8["worst mean rel error"] <= int8["p99 rel error"] <= int8["max rel error"] < 0.1
    assert df.loc["onnxruntime fp32", "max rel error"] < 1e-5
    assert at.session_state["ws"].recipe == []  # the workspace's model is not changed


def test_int8_calibrate_with_an_uploaded_npz_and_one_that_does_not_fit():
    at = build_page()
    at.radio(key="calib_source").set_value("upload .npz")
    at.run()
    rng = np.random.default_rng(0)
    at.file_uploader(key="calib_npz").set_value(
        ("calib.npz", npz(input=rng.random((4, 1, 3, 32, 32)).astype(np.float32)), "application/octet-stream")
    )
    at.run()
    at.button(key="build_go").click()
    at.run()
    assert not at.exception, at.exception
    assert any("Quantized to INT8 on calib.npz" in m.value for m in at.success)
    assert len(at.dataframe[0].value) == 3
    at.file_uploader(key="calib_npz").set_value(
        ("bad.npz", npz(image=np.zeros((1, 3, 32, 32), np.float32)), "application/octet-stream")
    )
    at.run()
    at.button(key="build_go").click()
    at.run()
    assert not at.exception, at.exception
    errors = [shown(e.value) for e in at.error]
    assert any("bad.npz: no array for input 'input'" in e for e in errors), errors
    assert not at.session_state["build_results"]  # nothing was built
