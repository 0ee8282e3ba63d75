"""Test builds on the real backends (TensorRT-RTX for the TensorRT path): artifacts, accuracy, failures in the
builder's words with the node named, profiles, the timing cache, reduced precision."""

import importlib.util
import json

import pytest

from surgery.backends.base import BuildOptions
from surgery.build import build_model
from surgery.cli import main
from surgery.samples import build

HAVE = {
    b: importlib.util.find_spec(m) is not None
    for b, m in (("openvino", "openvino"), ("tvm", "tvm"), ("tensorrt", "tensorrt_rtx"))
}
CPU = ["onnxruntime"] + [b for b in ("openvino", "tvm") if HAVE[b]]
needs_trt = pytest.mark.skipif(not HAVE["tensorrt"], reason="tensorrt_rtx not installed")


@pytest.mark.parametrize("backend", CPU)
def test_cpu_backends_build_run_and_match_onnxruntime(backend, tmp_path):
    r = build_model(backend, build("healthy_cnn"), BuildOptions(runs=5, out_dir=str(tmp_path)))
    assert r.ok, r.error
    assert r.artifact and (tmp_path / r.artifact.split("/")[-1]).stat().st_size > 0
    assert r.latency_ms["median"] > 0 and r.latency_ms["p90"] >= r.latency_ms["median"]
    assert r.accuracy["probs"]["mean_rel"] < 1e-6


@pytest.mark.parametrize("backend", CPU)
def test_cpu_backends_report_failures_in_their_words(backend):
    r = build_model(backend, build("deform_conv_custom"), BuildOptions(runs=1))
    assert not r.ok and "MMCVModulatedDeformConv2d" in r.error


@pytest.mark.skipif(not HAVE["openvino"], reason="openvino not installed")
def test_openvino_fp16_hint_stays_within_fp16_error():
    r = build_model("openvino", build("healthy_cnn"), BuildOptions(precision="fp16", runs=2))
    assert r.ok and 0 < r.accuracy["probs"]["mean_rel"] < 1e-2


@needs_trt
def test_tensorrt_builds_ahead_of_time_and_says_why_it_cannot_run(tmp_path):
    progress = []
    r = build_model(
        "tensorrt",
        build("healthy_cnn"),
        BuildOptions(out_dir=str(tmp_path)),
        progress=lambda f, m: progress.append(m),
    )
    assert r.ok and (tmp_path / "model.engine").stat().st_size > 1000
    if "TensorRT-RTX" in r.note:
        assert "needs an NVIDIA GPU" in r.note and r.latency_ms is None
    assert any("Building engine" in m or "tensorrt:" in m for m in progress) and len(progress) > 5


@needs_trt
def test_dynamic_input_needs_a_profile(tmp_path):
    r = build_model("tensorrt", build("squeeze_dynamic"), BuildOptions())
    assert not r.ok and "no optimization profile has been defined" in r.error
    r = build_model(
        "tensorrt",
        build("squeeze_dynamic"),
        BuildOptions(profiles={"features": ((1, 1, 8), (4, 1, 8), (8, 1, 8))}),
    )
    assert r.ok, r.error


@needs_trt
def test_a_failed_build_names_its_node():
    r = build_model("tensorrt", build("unique_op"), BuildOptions())
    assert not r.ok and r.node == "/post/Unique" and "checkUnique" in r.error


@needs_trt
def test_timing_cache_is_written_then_reused(tmp_path):
    cache = tmp_path / "timing.cache"
    first = build_model("tensorrt", build("healthy_cnn"), BuildOptions(timing_cache=str(cache)))
    assert first.ok and cache.stat().st_size > 0 and "created" in first.note
    again = build_model("tensorrt", build("healthy_cnn"), BuildOptions(timing_cache=str(cache)))
    assert again.ok and "reused" in again.note


@needs_trt
def test_fp16_on_a_strongly_typed_builder_lowers_the_graph():
    from surgery.build.precision import lower_precision
    from surgery.verify import verify

    r = build_model("tensorrt", build("healthy_cnn"), BuildOptions(precision="fp16"))
    assert r.ok, r.error
    lowered = lower_precision(build("healthy_cnn"), "fp16")
    rep = verify(build("healthy_cnn"), lowered, safety="approximate")  # onnxruntime runs the fp16 graph too
    assert rep.status == "ok" and rep.outputs[0].mean_rel < 1e-2


def test_cli_build_table_and_json(sample_dir, capsys):
    assert main(["build", str(sample_dir / "healthy_cnn.onnx"), "-b", "onnxruntime", "--runs", "3"]) == 0
    assert "onnxruntime  yes" in capsys.readouterr().out
    assert main(["build", str(sample_dir / "deform_conv_custom.onnx"), "-b", "onnxruntime", "--json"]) == 1
    (report,) = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and "not a registered function/op" in report["error"]
    assert main(["build", str(sample_dir / "healthy_cnn.onnx"), "--profile", "bad"]) == 2
