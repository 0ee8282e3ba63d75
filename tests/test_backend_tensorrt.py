"""The live TensorRT backend, through TensorRT-RTX (a real parser, no GPU needed). Tests that need full
TensorRT or a GPU are skipped with the reason."""

import importlib.util

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.backends import get_backend
from surgery.isolate import BackendCrash
from surgery.samples import build
from surgery.verdict import Status, is_live, where_said

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("tensorrt_rtx") is None and importlib.util.find_spec("tensorrt") is None,
    reason="neither tensorrt nor tensorrt_rtx is installed (pip install 'onnx-surgery[tensorrt-rtx]')",
)


@pytest.fixture(scope="module")
def trt():
    return get_backend("tensorrt")


def statuses(report):
    return {v.node: v.status for v in report.verdicts}


def test_availability_names_the_module(trt):
    a = trt.availability()
    assert a.ok and ("TensorRT-RTX" in a.reason or "TensorRT" in a.reason)


def test_healthy_and_resize_samples_are_accepted(trt):
    for name in ("healthy_cnn", "resize_scales_chain"):
        r = trt.check(build(name))
        assert r.accepted and not r.rejected and len(r.verdicts) == len(build(name).graph.node)


def test_custom_op_rejected_by_plugin_fallback_in_the_parsers_words(trt):
    r = trt.check(build("deform_conv_custom"))
    (v,) = r.rejected
    assert v.node == "/dcn/MMCVModulatedDeformConv2d" and v.code == "INVALID_NODE"
    assert v.words == 'creator && "Plugin not found, are the plugin name, version, and namespace correct?"'
    # the parser's function is where the words come from; our explanation is the predictor's for that check
    assert v.words_from == "live, in checkFallbackPluginImporter" and where_said(v.words_from).startswith(
        "in "
    )
    assert "checkFallbackPluginImporter" not in v.explanation and "plugin" in v.explanation
    assert v.evidence.source == "live parser"
    assert all(s is Status.SUPPORTED for k, s in statuses(r).items() if k != v.node)


def test_unsupported_standard_op_gets_the_static_checkers_false(trt):
    r = trt.check(build("unique_op"))
    (v,) = r.rejected
    assert v.node == "/post/Unique" and v.code == "UNSUPPORTED_NODE" and v.words == "false"
    assert statuses(r)["/pre/Relu"] is Status.SUPPORTED


def test_two_independent_failures_both_named_and_the_rest_supported(trt):
    #   x -> Relu -> Unique -> u        (fails: no TensorRT Unique)
    #   x -> Sigmoid -> com.x::Foo -> f (fails: no plugin Foo)
    #   x -> Tanh -> t
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Unique", ["r"], ["u"], name="uniq"),
        helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
        helper.make_node("Foo", ["s"], ["f"], name="foo", domain="com.x"),
        helper.make_node("Tanh", ["x"], ["t"], name="tanh"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
        [
            helper.make_tensor_value_info("u", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("f", TensorProto.FLOAT, [8]),
            helper.make_tensor_value_info("t", TensorProto.FLOAT, [8]),
        ],
    )
    m = helper.make_model(
        g, ir_version=8, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.x", 1)]
    )
    r = trt.check(m)
    got = statuses(r)
    assert got["uniq"] is Status.REJECTED and got["foo"] is Status.REJECTED
    assert got["relu"] is got["sig"] is got["tanh"] is Status.SUPPORTED
    assert r.accepted is False


def test_rtx_says_when_a_plugin_is_missing_rather_than_blaming_tensorrt(trt):
    if trt.flavour != "TensorRT-RTX":
        pytest.skip("full TensorRT has the standard plugins")
    #   x -> NonZero -> idx (full TensorRT 10 imports NonZero through a standard plugin)
    g = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["idx"], name="nz")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info("idx", TensorProto.INT64, [2, None])],
    )
    r = trt.check(helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)]))
    (v,) = r.verdicts
    assert v.status is Status.UNKNOWN and "TensorRT-RTX has no NonZero plugin" in v.explanation
    assert "plugin" in v.words and is_live(v.words_from)  # RTX's own words stay, apart from ours


def test_verdicts_agree_with_the_whole_model_outcome(trt, onnx_node_tests):
    picked = [
        (n, m)
        for n, m in onnx_node_tests
        if n.startswith(
            (
                "test_relu",
                "test_unique",
                "test_topk",
                "test_resize_upsample_scales_nearest",
                "test_det",
                "test_gather_0",
                "test_bitshift",
            )
        )
    ]
    assert len(picked) >= 8
    for name, proto in picked:
        m = onnx.ModelProto()
        m.CopyFrom(proto)
        m.ir_version = min(m.ir_version, 10)
        r = trt.check(m)
        assert (not r.rejected and not r.errors) == bool(r.accepted), (name, r.to_dict())


def test_a_crash_becomes_a_backend_crash_not_a_dead_caller(monkeypatch, trt):
    from surgery.backends.tensorrt import live as mod

    # 3000 chained Relus take the parser far longer than 1 ms, even in a warm worker process
    nodes = [helper.make_node("Relu", [f"t{k}"], [f"t{k + 1}"], name=f"r{k}") for k in range(3000)]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("t3000", TensorProto.FLOAT, [4])],
    )
    slow = helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])
    monkeypatch.setattr(mod, "TIMEOUT_S", 0.001)
    with pytest.raises(BackendCrash, match="timed out.*TensorRT"):
        trt.check(slow)
    from surgery.diagnose import check_one, clear_cache

    clear_cache()
    r = check_one(slow, "tensorrt")
    assert r.accepted is False and all(v.status is Status.UNKNOWN for v in r.verdicts)
    assert "timed out" in r.messages[0].explanation and r.outcome.value == "cannot confirm"
    clear_cache()


def test_external_data_is_read_from_the_models_folder(trt, tmp_path):
    w = numpy_helper.from_array(np.eye(16, dtype=np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [w],
    )
    m = helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(m, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.bin", size_threshold=0)
    proto = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    assert trt.check(proto, str(tmp_path)).accepted
