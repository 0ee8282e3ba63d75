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


def _renamed(out_name: str):
    #   x -> Mul(w=2) -> <out_name>
    m = _scaled(2.0)
    m.graph.node[0].output[0] = out_name
    m.graph.output[0].name = out_name
    return m


def test_renamed_output_is_matched_by_position_and_reported():
    r = verify(_scaled(2.0), _renamed("y2"))
    assert r.status == "ok" and r.outputs[0].changed_name == "y2"
    assert "output 'y' renamed to 'y2'" in r.message


def test_removed_output_fails_an_exact_fix():
    #   x -> Mul(w) -> y ; x -> Neg -> z   (the changed model drops z)
    both = _scaled(2.0)
    both.graph.node.append(helper.make_node("Neg", ["x"], ["z"]))
    both.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 8]))
    r = verify(both, _scaled(2.0))
    assert r.status == "failed" and "output 'z' removed" in r.message
    assert verify(both, _scaled(2.0), safety=Safety.CHANGES_SEMANTICS).status == "ok"


def test_integer_outputs_must_match_exactly():
    #   x(int32) -> Add(c) -> y
    def model(c):
        g = helper.make_graph(
            [helper.make_node("Add", ["x", "c"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.INT32, [1000])],
            [helper.make_tensor_value_info("y", TensorProto.INT32, [1000])],
            [numpy_helper.from_array(np.array(c, np.int32), "c")],
        )
        return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])

    feeds = {"x": np.arange(1000, dtype=np.int32) * 100000}
    r = verify(model(0), model(1), feeds=feeds)
    assert r.status == "failed" and r.outputs[0].mean_rel < 1e-6  # tiny, but an integer result changed


def test_nan_in_the_same_place_is_equal():
    a = np.array([1.0, np.nan, np.inf])
    assert mean_relative_error(a, a.copy()) == 0.0
    assert mean_relative_error(a, np.array([1.0, 2.0, np.inf])) == np.inf


def test_symbolic_dims_follow_the_frozen_model():
    #   x[batch, 8] -> Mul(w) -> y ; changed: x[3, 8]
    dyn, frozen = _scaled(2.0), _scaled(2.0)
    dyn.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    r = verify(dyn, frozen)
    assert r.status == "ok" and r.feeds == {"x": [4, 8]}
    dyn_only = verify(dyn, dyn)
    assert dyn_only.feeds == {"x": [1, 8]}  # symbolic dims default to 1
    assert verify(dyn, dyn, dims={"batch": 5}).feeds == {"x": [5, 8]}


def test_plugin_node_is_skipped_with_the_reason():
    from surgery.fixes import get_fix

    model = build("deform_conv_custom")
    swapped = get_fix("plugin_swap")(
        model, node="/dcn/MMCVModulatedDeformConv2d", plugin="ModulatedDeformConv2d"
    )
    r = verify(model, swapped, safety=Safety.CHANGES_SEMANTICS)
    assert r.status == "skipped" and r.message.startswith("not verifiable with onnxruntime: ")
    assert "not verified" in r.summary()


def _conv_over_time(kernel: int):
    """[1, 1, T] through a Conv with a `kernel`-wide window: onnxruntime fails at run time while T < kernel."""
    w = numpy_helper.from_array(np.ones((1, 1, kernel), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="c")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, None])],
        [w],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_free_dims_grow_until_the_original_runs():
    m = _conv_over_time(400)  # one STFT window of samples: length 1 and 16 fail, 512 runs
    r = verify(m, m)
    assert r.status == "ok", r.message
    assert r.feeds["x"] == [1, 1, 512]
    assert verify(m, m, dims={"T": 1}).status == "skipped"  # a size the caller gives is kept


def test_a_free_dim_that_never_helps_stops_at_the_limit():
    m = _conv_over_time(100_000)  # no size up to 16000 samples runs it
    r = verify(m, m)
    assert r.status == "skipped" and "original model does not run" in r.message
    assert "Non-zero status code" in r.message  # the smallest size's failure, in onnxruntime's words


def test_all_zero_outputs_are_called_out():
    """A comparison of zeros with zeros reads 'max abs 0': the report says it shows little."""
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "z"], ["y"], name="m")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.zeros(4, np.float32), "z")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    r = verify(m, m)
    assert r.status == "ok" and "all zero on these inputs" in r.summary()
    assert "all zero" not in verify(build("healthy_cnn"), build("healthy_cnn")).summary()


def test_a_kernel_crash_is_a_skipped_verification_not_a_dead_process(monkeypatch):
    """Random inputs can crash an onnxruntime kernel (SIGFPE: wespeaker's front end at length 16): the runs happen
    in a worker, so the crash is a skipped verification that says so, and the next one works."""
    import surgery.verify

    m = build("healthy_cnn")
    # the worker's function replaced by one that dies with SIGFPE (the model bytes, feeds and folder it gets
    # are ignored): what a kernel crash looks like from here
    monkeypatch.setattr(surgery.verify, "RUN_IN_WORKER", "surgery.isolate:crash_for_test")
    r = verify(m, m)
    assert r.status == "skipped" and "onnxruntime crashed: signal 8 (SIGFPE)" in r.message, r.message
    monkeypatch.undo()
    assert verify(m, m).status == "ok"
