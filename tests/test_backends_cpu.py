"""onnxruntime, OpenVINO and TVM as targets, for real: verdicts name the right nodes in the backend's words,
and agree with the whole-model outcome; probing is deduplicated; a crash becomes a verdict; partitions."""

import importlib.util
import signal

import onnx
import pytest
from onnx import TensorProto, helper

from surgery.backends import get_backend, list_backends
from surgery.backends.base import Status
from surgery.backends.isolate import BackendCrash, call_isolated
from surgery.backends.probe import CACHE, isolate, signature
from surgery.graph import GraphFacts
from surgery.partition import partition
from surgery.samples import build

CPU = [
    b for b in ("onnxruntime", "openvino", "tvm") if importlib.util.find_spec(b.replace("-", "_")) is not None
]


def rejected(report):
    return {v.node: v.message for v in report.rejected}


@pytest.mark.parametrize("backend", CPU)
def test_custom_op_is_rejected_by_name_and_the_rest_supported(backend):
    r = get_backend(backend).check(build("deform_conv_custom"))
    assert list(rejected(r)) == ["/dcn/MMCVModulatedDeformConv2d"] and r.accepted is False
    assert "MMCVModulatedDeformConv2d" in r.rejected[0].message
    assert sum(v.status is Status.SUPPORTED for v in r.verdicts) == 4


@pytest.mark.parametrize("backend", CPU)
def test_healthy_cnn_accepted(backend):
    r = get_backend(backend).check(build("healthy_cnn"))
    assert r.accepted and not r.rejected and len(r.verdicts) == 10


def test_backend_specific_reasons():
    if "openvino" in CPU:
        r = get_backend("openvino").check(build("training_mode_ops"))
        assert rejected(r) == {"/drop/Dropout": rejected(r)["/drop/Dropout"]}
        assert "Training mode is not supported for Dropout" in rejected(r)["/drop/Dropout"]
        assert (
            "ai.onnx.ml.Scaler" in rejected(get_backend("openvino").check(build("ml_scaler")))["/prep/Scaler"]
        )
    if "tvm" in CPU:
        assert (
            "not supported for frontend ONNX: Scaler"
            in rejected(get_backend("tvm").check(build("ml_scaler")))["/prep/Scaler"]
        )
    r = get_backend("onnxruntime").check(build("deform_conv_custom"))
    assert "mmcv:MMCVModulatedDeformConv2d(-1) is not a registered function/op" in r.rejected[0].message


@pytest.mark.skipif("tvm" not in CPU, reason="apache-tvm not installed")
def test_tvm_does_not_pass_a_custom_domain_op_named_like_a_standard_one():
    #   x -> com.example::Relu -> y   (TVM's frontend ignores domains and would import a standard Relu)
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="fake_relu", domain="com.example")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    m = helper.make_model(
        g, ir_version=8, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)]
    )
    r = get_backend("tvm").check(m)
    assert "fake_relu" in rejected(r) and "ignores op domains" in rejected(r)["fake_relu"]
    assert get_backend("onnxruntime").check(m).rejected


@pytest.mark.parametrize("backend", CPU)
def test_per_node_verdicts_agree_with_the_whole_model_outcome(backend, onnx_node_tests):
    prefixes = (
        "test_relu",
        "test_unique_sorted",
        "test_det_2d",
        "test_bitshift_left_uint8",
        "test_gather_0",
        "test_resize_upsample_scales_nearest",
        "test_dft",
        "test_col2im",
        "test_mish",
        "test_stft",
    )
    picked = [(n, m) for n, m in onnx_node_tests if n.startswith(prefixes)][:14]
    b = get_backend(backend)
    for name, proto in picked:
        m = onnx.ModelProto()
        m.CopyFrom(proto)
        m.ir_version = min(m.ir_version, 10)
        r = b.check(m)
        assert (not r.rejected and not r.messages) == bool(r.accepted), (backend, name, r.to_dict())


def test_probing_is_deduplicated_by_signature():
    #   20 identical (x -> Relu -> com.x::Foo) chains: onnxruntime probes 2 signatures, not 40 nodes
    nodes, outputs = [], []
    for k in range(20):
        nodes += [
            helper.make_node("Relu", ["x"], [f"r{k}"], name=f"relu{k}"),
            helper.make_node("Foo", [f"r{k}"], [f"f{k}"], name=f"foo{k}", domain="com.x"),
        ]
        outputs.append(helper.make_tensor_value_info(f"f{k}", TensorProto.FLOAT, [3]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])], outputs)
    m = helper.make_model(
        g, ir_version=8, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.x", 1)]
    )
    facts = GraphFacts.of(m)
    assert len({signature(facts, i) for i in range(40)}) == 2
    assert isolate(facts, 1).graph.node[0].op_type == "Foo"
    CACHE.clear()
    r = get_backend("onnxruntime").check(m)
    # Foo has no kernel: its probe is refused, so the whole-model session is skipped; Relu is probed once
    assert len(r.rejected) == 20 and r.backend_calls == 2
    r = get_backend("onnxruntime").check(m)
    assert r.backend_calls == 0 and len(r.rejected) == 20  # every signature cached


def test_a_crash_in_an_isolated_call_is_reported_not_fatal():
    with pytest.raises(BackendCrash, match=r"signal 11 \(SIGSEGV\)"):
        call_isolated("surgery.backends.isolate:crash_for_test", signal.SIGSEGV)
    with pytest.raises(BackendCrash, match="timed out after 0.5 s"):
        call_isolated("time:sleep", 5, timeout=0.5)
    with pytest.raises(BackendCrash, match="ZeroDivisionError"):
        call_isolated("operator:truediv", 1, 0)
    assert call_isolated("operator:add", 2, 3) == 5


def test_partitions_count_regions_and_crossing_tensors():
    r = get_backend("tensorrt-static@10.15").check(build("deform_conv_custom"))
    p = partition(build("deform_conv_custom"), r)
    assert p.engines == 2 and p.fallback_nodes == 1
    assert set(p.crossing_tensors) == {"offset", "mask", "dcn_out"}
    assert p.crossing_bytes == 4 * (18 * 8 * 8 + 9 * 8 * 8 + 4 * 8 * 8)  # float32, shapes from inference
    assert "2 supported region(s), 1 of 5 node(s) fall back" in p.summary()


def test_targets_list_every_backend_with_a_reason():
    rows = {bid.split("@")[0]: a for bid, _, _, a in list_backends()}
    assert set(rows) == {"tensorrt", "tensorrt-static", "onnxruntime", "openvino", "tvm"}
    assert all(a.reason for a in rows.values())
