"""surgery.verify: per-output errors, the exact-fix threshold, and models onnxruntime cannot run."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from surgery.fixes import Safety
from surgery.samples import build
from surgery.verify import mean_relative_error, verify


def _scaled(factor: float):
    #   x -> Mul(w) -> y
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(np.array(factor, np.float32), "w")],
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])


def test_identical_models_verify_with_zero_error():
    r = verify(_scaled(2.0), _scaled(2.0))
    assert r.status == "ok" and r.worst() == (0.0, 0.0)


def test_exact_fix_with_small_error_fails_with_numbers():
    r = verify(_scaled(2.0), _scaled(2.0 * (1 + 1e-4)))
    assert r.status == "failed"
    assert 5e-5 < r.outputs[0].mean_rel < 2e-4
    assert "1e-06" in r.message and "VERIFICATION FAILED" in r.summary()


def test_approximate_fix_reports_but_does_not_fail():
    r = verify(_scaled(2.0), _scaled(2.001), safety=Safety.APPROXIMATE)
    assert r.status == "ok" and r.outputs[0].mean_rel > 1e-4


def test_unrunnable_model_is_skipped_not_crashed():
    r = verify(build("deform_conv_custom"), build("deform_conv_custom"))
    assert r.status == "skipped" and "not verifiable with onnxruntime" in r.message


def test_mean_relative_error_definition():
    a = np.array([1.0, -2.0, 3.0])
    assert mean_relative_error(a, a + 0.2) == np.mean(np.abs([0.2] * 3)) / 2.0
    assert mean_relative_error(np.zeros(3), np.zeros(3)) == 0.0


def test_user_feeds_are_used():
    feeds = {"x": np.full((4, 8), 3.0, np.float32)}
    r = verify(_scaled(2.0), _scaled(3.0), feeds=feeds, safety=Safety.CHANGES_SEMANTICS)
    assert r.outputs[0].max_abs == 3.0
