"""Test builds on the CPU backends (onnxruntime, OpenVINO, TVM), for real: artifacts, latency, accuracy against
onnxruntime's fp32 reference, failures in each backend's own words."""

import importlib.util
import json
import re
from pathlib import Path

import onnx
import pytest

from surgery.backends.base import BuildOptions
from surgery.backends.build import build_model
from surgery.samples import build

CPU = ["onnxruntime"] + [b for b in ("openvino", "tvm") if importlib.util.find_spec(b)]
needs_openvino = pytest.mark.skipif(not importlib.util.find_spec("openvino"), reason="openvino not installed")


@pytest.mark.parametrize("backend", CPU)
def test_healthy_cnn_builds_runs_and_matches_onnxruntime(backend, tmp_path):
    options = BuildOptions(runs=5, warmup=1, out_dir=str(tmp_path))
    r = build_model(backend, build("healthy_cnn"), options)
    assert r.ok, r.error
    assert r.artifact.startswith(str(tmp_path)) and (tmp_path / r.artifact.split("/")[-1]).stat().st_size > 0
    assert r.latency_ms["runs"] == 5 and 0 < r.latency_ms["median"] <= r.latency_ms["p90"]
    assert set(r.accuracy) == {"probs"} and r.accuracy["probs"]["mean_rel"] < 1e-6
    assert r.build_seconds > 0 and r.log and r.label


@pytest.mark.parametrize("backend", CPU)
def test_failures_come_in_the_backends_words(backend):
    r = build_model(backend, build("deform_conv_custom"), BuildOptions(runs=1))
    assert not r.ok and "MMCVModulatedDeformConv2d" in r.error and r.artifact is None


def test_onnxruntime_artifact_is_the_optimized_model():
    r = build_model("onnxruntime", build("healthy_cnn"), BuildOptions(runs=1))
    optimized = onnx.load(r.artifact)
    assert len(optimized.graph.node) < len(build("healthy_cnn").graph.node)
    assert f"-> {len(optimized.graph.node)} after ORT_ENABLE_ALL" in r.log


@needs_openvino
def test_openvino_fp16_hint_shows_fp16_error_against_the_fp32_reference():
    import openvino as ov

    r = build_model("openvino", build("healthy_cnn"), BuildOptions(precision="fp16", runs=2))
    caps = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    if "FP16" not in caps:  # the plugin runs what this CPU computes: bf16 where it has it, else fp32
        granted = "bf16" if "BF16" in caps else "fp32"
        assert r.ok and r.precision == granted and "this CPU computes no fp16" in r.note
        assert f"runs the model in {granted}" in r.note
        error = r.accuracy["probs"]["mean_rel"]
        assert error < 1e-6 if granted == "fp32" else 1e-6 < error < 1e-2
        return
    assert r.ok and r.precision == "fp16" and 1e-6 < r.accuracy["probs"]["mean_rel"] < 1e-2


def test_onnxruntime_fp16_is_measured_against_the_fp32_original():
    r = build_model("onnxruntime", build("healthy_cnn"), BuildOptions(precision="fp16", runs=2))
    assert r.ok and "converted to fp16" in r.note
    assert 1e-6 < r.accuracy["probs"]["mean_rel"] < 1e-2  # not 0: the reference is not the fp16 graph


def test_an_unmeasurable_build_stands_and_a_profile_shape_makes_it_measurable():
    model = build("dynamic_input_unshaped")  # input 'image' has no shape at all
    r = build_model("onnxruntime", model, BuildOptions(runs=1))
    assert r.ok and r.accuracy is None and "not measured" in r.note and "'image' has no shape" in r.note
    shape = (1, 3, 8, 8)
    r = build_model(
        "onnxruntime", model, BuildOptions(runs=1, profiles={"image": (shape, (2, 3, 8, 8), (2, 3, 8, 8))})
    )
    assert r.ok and r.accuracy["output"]["mean_rel"] < 1e-6


def test_options_are_not_modified_and_bad_backends_or_profiles_are_refused():
    options = BuildOptions(runs=1)
    assert build_model("onnxruntime", build("healthy_cnn"), options).ok and options.out_dir is None
    r = build_model("tensorrt-static@8.2", build("healthy_cnn"), options)
    assert not r.ok and "builders exist for" in r.error
    with pytest.raises(ValueError, match="expected \\(min, opt, max\\) shapes"):
        build_model("onnxruntime", build("healthy_cnn"), BuildOptions(profiles={"input": ((1, 3),)}))


def _external(tmp_path):
    from surgery.model import load_model

    path = tmp_path / "cnn.onnx"
    onnx.save(
        build("healthy_cnn"), str(path), save_as_external_data=True, location="cnn.data", size_threshold=0
    )
    return load_model(path)


@pytest.mark.parametrize("backend", CPU)
def test_external_weights_are_read_from_base_dir(backend, tmp_path):
    model = _external(tmp_path)
    r = build_model(backend, model.proto, BuildOptions(runs=1), base_dir=str(model.base_dir))
    assert r.ok and r.accuracy["probs"]["mean_rel"] < 1e-6, r.error or r.note


def test_a_failure_naming_a_node_sets_node():
    # onnxruntime's CPU provider has no bfloat16 Conv: "... in node (/conv1/Conv) is invalid"
    r = build_model("onnxruntime", build("healthy_cnn"), BuildOptions(precision="bf16"))
    assert not r.ok and "bfloat16" in r.error and r.node == "/conv1/Conv"


def test_random_outputs_are_flagged():
    r = build_model(
        "onnxruntime", build("training_mode_ops"), BuildOptions(runs=2)
    )  # Dropout in training mode
    assert r.ok and "change from run to run" in r.note
    assert (
        "change from run to run"
        not in build_model("onnxruntime", build("healthy_cnn"), BuildOptions(runs=2)).note
    )


@pytest.mark.skipif("tvm" not in CPU, reason="tvm not installed")
def test_a_build_past_its_time_limit_is_a_failed_report():
    r = build_model("tvm", build("healthy_cnn"), BuildOptions(timeout_s=0.05))
    assert not r.ok and "timed out after 0.05 s" in r.error  # runs last: it kills the worker


def test_a_backend_object_builds_a_model_with_external_weights(tmp_path):
    """Building through the backend (as the registry hands it out) finds weights beside the model."""
    import onnx

    from surgery.backends import get_backend
    from surgery.backends.base import BuildOptions
    from surgery.samples import build as build_sample

    onnx.save(
        build_sample("healthy_cnn"),
        str(tmp_path / "m.onnx"),
        save_as_external_data=True,
        location="m.bin",
        size_threshold=0,
    )
    proto = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    report = get_backend("onnxruntime").build(proto, BuildOptions(runs=2), base_dir=str(tmp_path))
    assert report.ok, report.error


def _dynamic_batch() -> onnx.ModelProto:
    #   x[batch,3,8,8] -> Conv(4x3x3x3) -> Relu -> GlobalAveragePool -> Flatten -> y[batch,4]
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    g = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("GlobalAveragePool", ["r"], ["p"]),
            helper.make_node("Flatten", ["p"], ["y"]),
        ],
        "dynamic_batch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


BATCH_1_2_4 = {"x": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))}


@pytest.mark.parametrize("backend", ["onnxruntime"] + (["openvino"] if "openvino" in CPU else []))
def test_a_dynamic_batch_model_is_timed_at_min_opt_and_max(backend):
    r = build_model(backend, _dynamic_batch(), BuildOptions(runs=2, warmup=0, profiles=BATCH_1_2_4))
    assert r.ok, r.error
    points = r.latency_points
    assert [points[p]["shapes"]["x"] for p in ("min", "opt", "max")] == ["1x3x8x8", "2x3x8x8", "4x3x8x8"]
    for entry in points.values():  # each batch size ran and matched onnxruntime fp32
        assert entry["median"] > 0 and entry["runs"] == 2 and entry["worst_mean_rel"] < 1e-5, entry
    assert points["opt"]["median"] == r.latency_ms["median"]


@needs_openvino
def test_openvino_compiles_with_bounded_partial_shapes():
    r = build_model("openvino", _dynamic_batch(), BuildOptions(runs=1, warmup=0, profiles=BATCH_1_2_4))
    assert r.ok and "x [1..4,3,8,8]" in r.log, r.log


@pytest.mark.parametrize(
    "profile, message",
    [
        (
            {"x": ((1, 4, 8, 8),) * 3},
            "input 'x' is batchx3x8x8, static 3 at axis 1, and the profile gives 4/4/4",
        ),
        ({"nope": ((1,),) * 3}, "the model has no input 'nope'. Note: inputs: x"),
        ({"x": ((1, 3, 8),) * 3}, "has rank 3, but input 'x' is batchx3x8x8 (rank 4)"),
        ({"x": ((4, 3, 8, 8), (2, 3, 8, 8), (1, 3, 8, 8))}, "at axis 0, min <= opt <= max does not hold"),
    ],
)
def test_a_profile_that_contradicts_the_model_is_refused_before_anything_is_written(
    profile, message, tmp_path
):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=re.escape(message)):
        build_model("onnxruntime", _dynamic_batch(), BuildOptions(profiles=profile, out_dir=str(out)))
    assert not out.exists()


@pytest.mark.skipif("tvm" not in CPU, reason="tvm not installed")
def test_tvm_targets_this_cpu_and_a_second_tuned_build_reuses_the_database(tmp_path):
    seen = []
    options = BuildOptions(runs=2, warmup=0, tune_trials=2, tune_dir=str(tmp_path / "db"))
    model = _dynamic_batch()
    model.graph.input[0].type.tensor_type.shape.dim[
        0
    ].dim_value = 1  # static: MetaSchedule tunes static shapes
    first = build_model("tvm", model, options, lambda f, m: seen.append(m))
    assert first.ok, first.error
    t = first.tuning
    assert t["trials_run"] >= 2 and t["tasks_reused"] == 0 and t["tasks"] >= 2
    assert first.latency_ms["median"] > 0 and t["untuned_ms"]["median"] > 0
    assert first.accuracy["y"]["mean_rel"] < 1e-5
    assert any(m.startswith("tvm: tuning, ") and "trials" in m for m in seen)  # progress per batch of trials
    assert t["trials_failed"] < t["trials_run"]
    records = (tmp_path / "db" / "database_tuning_record.json").read_text().splitlines()
    assert any(json.loads(line)[1][1][0] < 1 for line in records)  # a measured time, not MetaSchedule's 1e10
    assert first.tuning["untuned_ms"] != first.latency_ms
    assert "-mcpu=" in first.label or "generic CPU" in first.log
    second = build_model("tvm", model, options)
    assert second.ok and second.tuning["trials_run"] == 0, second.tuning
    assert second.tuning["tasks_reused"] == t["tasks"]
    assert f"{t['tasks']} reused from {tmp_path / 'db'}, 0 new trial(s)" in second.log
    assert second.artifact and Path(second.artifact).stat().st_size == Path(first.artifact).stat().st_size


def test_timing_stops_at_its_budget_after_a_few_runs_and_says_so():
    import time

    from surgery.backends.measure import MIN_TIMED_RUNS, latency

    slow = latency(lambda: time.sleep(0.05), runs=20, warmup=3, budget_s=0.2)
    assert MIN_TIMED_RUNS <= slow["runs"] < 20 and slow["budget_s"] == 0.2
    assert slow["median"] >= 50
    exact = latency(lambda: time.sleep(0.005), runs=12, warmup=1, budget_s=None)
    assert exact["runs"] == 12 and "budget_s" not in exact  # --runs N: N runs, whatever they take
    fast = latency(lambda: None, runs=20, warmup=3, budget_s=5.0)
    assert fast["runs"] == 20 and "budget_s" not in fast  # the budget never stops a fast engine early


def test_timing_tells_its_progress_run_by_run():
    import time

    from surgery.backends.measure import latency

    seen = []
    latency(
        lambda: time.sleep(0.26), runs=4, warmup=1, budget_s=None, progress=lambda f, m: seen.append((f, m))
    )
    assert seen[0] == (0.0, "warming up (1 run(s))")
    assert [m for _, m in seen[1:]] == [f"run {k} of 4" for k in range(1, 5)]  # runs 0.26 s apart: each told
    assert [f for f, _ in seen] == sorted(f for f, _ in seen) and seen[-1][0] == 1.0
    seen.clear()
    latency(
        lambda: time.sleep(0.05), runs=20, warmup=0, budget_s=0.3, progress=lambda f, m: seen.append((f, m))
    )
    last_fraction, last = seen[-1]
    assert last.startswith("run ") and " of up to 20, " in last and last.endswith(" of 0.3 s")
    assert last_fraction >= 0.99  # the budget is spent: the bar is full though fewer than 20 ran
    seen.clear()
    latency(lambda: None, runs=1000, warmup=0, budget_s=None, progress=lambda f, m: seen.append((f, m)))
    assert len(seen) <= 4 and seen[-1] == (
        1.0,
        "run 1000 of 1000",
    )  # fast runs: told now and then, and the last


def test_the_build_reports_its_timing_run_by_run(sample_dir):
    seen = []
    model = onnx.load(sample_dir / "healthy_cnn.onnx")
    report = build_model(
        "onnxruntime", model, BuildOptions(runs=5, warmup=1), lambda f, m: seen.append((f, m))
    )
    assert report.ok and report.latency_ms["runs"] == 5
    timing = [(f, m) for f, m in seen if m.startswith("onnxruntime: timing, ")]
    assert timing and timing[-1][1].startswith("onnxruntime: timing, run 5 of up to 5, "), seen
    assert all(0.6 <= f <= 1.0 for f, _ in timing)


@pytest.mark.parametrize("flag", [["--time-budget", "0"], ["--time-budget", "nan"], ["--runs", "0"]])
def test_a_timing_budget_or_run_count_that_makes_no_sense_is_refused(flag, sample_dir, tmp_path, capsys):
    from surgery.cli import main

    model = str(sample_dir / "healthy_cnn.onnx")
    assert main(["build", model, "--backend", "onnxruntime", "--out", str(tmp_path / "b"), *flag]) == 2
    assert "--time-budget above 0" in capsys.readouterr().err


def test_the_build_use_case_ladders_a_qdq_model_unless_a_precision_is_asked(sample_dir):
    """surgery.usecases.build (the CLI's build and the app's Test build): a calibrated model is built at int8,
    fp16 and fp32 against its float32 original; the same Q/DQ model at an asked precision is built once."""
    from surgery.backends.base import BuildOptions
    from surgery.usecases.build import BuildRequest, build

    model = onnx.load(sample_dir / "healthy_cnn.onnx")
    options = BuildOptions(runs=2, time_budget_s=None)
    calibrated = build(model, BuildRequest(["onnxruntime"], options, calibration="random:2"))
    assert calibrated.quantized is not None and calibrated.ok
    assert [r.precision for r in calibrated.reports] == ["int8", "fp16", "fp32"]
    asked = build(calibrated.quantized, BuildRequest(["onnxruntime"], options))
    assert len(asked.reports) == 1 and asked.ok
    laddered = build(calibrated.quantized, BuildRequest(["onnxruntime"], options, precision_asked=False))
    assert [r.precision for r in laddered.reports] == ["int8", "fp16", "fp32"]
