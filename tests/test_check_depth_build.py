"""`check --depth build` accepts a model exactly when `build` builds it, for every backend that builds here
(issue: check and build must give one answer). The samples cover parse refusals, build-only refusals (an If
whose branches differ in rank, a dynamic input without a profile) and healthy models."""

import importlib.util

import pytest

from surgery.backends.base import BuildOptions
from surgery.backends.build import build_model
from surgery.diagnose import check_one, clear_cache
from surgery.samples import SAMPLES, build
from surgery.verdict import Outcome

BACKENDS = [
    b
    for b, module in (
        ("onnxruntime", "onnxruntime"),
        ("openvino", "openvino"),
        ("tvm", "tvm"),
        ("tensorrt", "tensorrt_rtx"),
    )
    if importlib.util.find_spec(module) is not None
]
# TVM compiles and TensorRT builds take seconds each: a slice that holds every kind of outcome
SLOW = {"tvm", "tensorrt"}
SLICE = ["healthy_cnn", "if_branch_shapes", "squeeze_dynamic", "unique_op", "int64_out_of_range", "ml_scaler"]


@pytest.mark.parametrize(
    ("backend", "name"),
    [(b, n) for b in BACKENDS for n in (SLICE if b in SLOW else sorted(SAMPLES))],
)
def test_check_at_build_depth_accepts_exactly_what_build_builds(backend, name, tmp_path):
    model = build(name)
    clear_cache()
    report = check_one(model, backend, depth="build")
    built = build_model(backend, model, BuildOptions(measure=False, out_dir=str(tmp_path)))
    accepted = report.outcome is Outcome.ACCEPTS
    assert accepted == built.ok, (report.reasons(), built.error)
    if not built.ok:  # the builder's words reach the check
        words = [m.words for m in report.messages] + [v.words for v in report.verdicts]
        assert report.outcome is not Outcome.ACCEPTS and any(words), report.to_dict()


SHAPE_INPUT_TESTS = ["test_slice", "test_top_k", "test_cumsum_1d", "test_hannwindow", "test_loop11"]


@pytest.mark.skipif("tensorrt" not in BACKENDS, reason="tensorrt_rtx is not installed")
@pytest.mark.parametrize("name", [*SHAPE_INPUT_TESTS, "test_center_crop_pad_crop_expanded", "test_relu"])
def test_the_predictor_knows_integer_inputs_read_as_shapes_need_a_profile(onnx_node_tests, name, tmp_path):
    """An INT64 graph input the builder reads as a shape (Slice bounds, TopK's K, a window size, a trip count;
    directly or through shape arithmetic) needs an optimization profile: the predicted build refusal is the real
    builder's, and a model with no such input is predicted to build."""
    model = dict(onnx_node_tests)[name]
    built = build_model("tensorrt", model, BuildOptions(measure=False, out_dir=str(tmp_path)))
    predicted = check_one(model, "tensorrt-static@10.15", depth="build")
    profile = [m for m in predicted.messages if "optimization profile" in m.explanation]
    assert bool(profile) == (not built.ok and "no optimization profile" in built.error), built.error
    assert built.ok == (predicted.outcome is Outcome.ACCEPTS), (predicted.reasons(), built.error)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "onnxruntime"])
def test_a_check_at_build_depth_keeps_no_artifact(backend, tmp_path, monkeypatch):
    """The check asks whether the model builds: nothing is exported (TVM's export_library links a library with the
    system compiler, seconds of a check), and its scratch folder goes."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    clear_cache()
    assert check_one(build("healthy_cnn"), backend, depth="build").outcome is Outcome.ACCEPTS
    assert not any(p.name.startswith(f"onnx-surgery-{backend}") for p in tmp_path.iterdir())
    built = build_model(backend, build("healthy_cnn"), BuildOptions(measure=False, artifact=False))
    assert built.ok and built.artifact is None


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b in ("tvm", "openvino")])
@pytest.mark.parametrize("name", ["healthy_cnn", "if_branch_shapes", "squeeze_dynamic"])
def test_tvm_and_openvino_check_at_build_depth_in_one_call(backend, name):
    """The model is converted once: the check's worker call compiles what converted, as build compiles it,
    instead of a second call that serializes and converts it again (a QDQ MobileNet on TVM: 43 s where TVM's own
    import + compile took 20 s)."""
    clear_cache()
    report = check_one(build(name), backend, depth="build")
    assert report.backend_calls == 1
    built = build_model(backend, build(name), BuildOptions(measure=False))
    assert (report.outcome is Outcome.ACCEPTS) == built.ok
