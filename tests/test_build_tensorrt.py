"""TensorRT test builds, for real with TensorRT-RTX where full TensorRT (with a GPU) is absent: ahead-of-time
engines, progress, the builder's refusals with the node named, profiles, the timing cache, reduced precision."""

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.backends.base import BuildOptions
from surgery.backends.build import build_model
from surgery.samples import build

pytestmark = pytest.mark.skipif(
    not (importlib.util.find_spec("tensorrt") or importlib.util.find_spec("tensorrt_rtx")),
    reason="neither tensorrt nor tensorrt_rtx is installed",
)


def _two_batches() -> onnx.ModelProto:
    #   x[n,4] --\
    #             Add "/head/add" --> z      (n and m are independent dynamic dims)
    #   y[m,4] --/
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["z"], name="/head/add")],
        "two_batches",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", 4]),
        ],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_healthy_cnn_builds_an_engine_with_progress(tmp_path):
    seen = []
    r = build_model(
        "tensorrt",
        build("healthy_cnn"),
        BuildOptions(out_dir=str(tmp_path)),
        lambda f, m: seen.append((f, m)),
    )
    assert r.ok, r.error
    assert (
        r.artifact.startswith(str(tmp_path)) and (tmp_path / r.artifact.split("/")[-1]).stat().st_size > 1000
    )
    assert "Engine generation completed" in r.log
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and len(seen) > 10  # monotone, from TensorRT's IProgressMonitor
    assert any("Building engine" in m for _, m in seen)
    if r.label.startswith("TensorRT-RTX"):
        assert "running it needs an NVIDIA GPU with TensorRT-RTX" in r.note and r.latency_ms is None
    else:
        assert r.latency_ms and r.accuracy["probs"]["mean_rel"] < 1e-3


def test_a_dynamic_input_without_profile_is_refused_by_the_builder_then_builds_with_one():
    r = build_model("tensorrt", build("squeeze_dynamic"), BuildOptions())
    assert not r.ok and "no optimization profile has been defined" in r.error
    assert "--profile features:1x1x8:4x1x8:8x1x8" in r.note
    r = build_model(
        "tensorrt",
        build("squeeze_dynamic"),
        BuildOptions(profiles={"features": ((1, 1, 8), (4, 1, 8), (8, 1, 8))}),
    )
    assert r.ok, r.error


def test_a_profile_for_an_input_the_network_lacks_is_refused_before_building(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="the model has no input 'nope'. Note: inputs: input"):
        build_model(
            "tensorrt",
            build("healthy_cnn"),
            BuildOptions(profiles={"nope": ((1,), (1,), (1,))}, out_dir=str(out)),
        )
    assert not out.exists()


def test_a_builder_failure_names_its_node():
    both = {"x": ((2, 4),) * 3, "y": ((3, 4),) * 3}  # 2 rows + 3 rows cannot broadcast
    r = build_model("tensorrt", _two_batches(), BuildOptions(profiles=both))
    assert not r.ok and "broadcast dimensions must be conformable" in r.error and r.node == "/head/add"
    r = build_model(
        "tensorrt", _two_batches(), BuildOptions(profiles={"x": ((3, 4),) * 3, "y": ((3, 4),) * 3})
    )
    assert r.ok, r.error


def test_a_parser_failure_names_its_node():
    r = build_model("tensorrt", build("unique_op"), BuildOptions())
    assert (
        not r.ok and r.node == "/post/Unique" and "checkUnique" in r.error and "While parsing node" in r.log
    )


def test_timing_cache_is_written_then_reused(tmp_path):
    cache = tmp_path / "cache" / "timing.cache"
    first = build_model(
        "tensorrt", build("healthy_cnn"), BuildOptions(timing_cache=str(cache), workspace_mb=64)
    )
    assert first.ok and cache.stat().st_size > 0 and "timing cache created" in first.note
    again = build_model("tensorrt", build("healthy_cnn"), BuildOptions(timing_cache=str(cache)))
    assert again.ok and "timing cache reused" in again.note
    if again.label.startswith("TensorRT-RTX"):
        assert "no-ops" in again.note  # said, not hidden


def test_fp16_engine_through_the_graph_types(tmp_path):
    fp32 = build_model("tensorrt", build("healthy_cnn"), BuildOptions(out_dir=str(tmp_path / "a")))
    fp16 = build_model(
        "tensorrt", build("healthy_cnn"), BuildOptions(precision="fp16", out_dir=str(tmp_path / "b"))
    )
    assert fp16.ok, fp16.error
    if fp16.label.startswith("TensorRT-RTX"):
        assert "converted to fp16" in fp16.note
        # the reason (no weak typing in TensorRT 11) and the graph change that replaces the flag
        assert "removed weakly typed networks" in fp16.note and "casts in the graph" in fp16.note
    assert Path(fp16.artifact).read_bytes() != Path(fp32.artifact).read_bytes()


def test_int8_on_a_strongly_typed_builder_asks_for_a_quantized_model():
    r = build_model("tensorrt", build("healthy_cnn"), BuildOptions(precision="int8"))
    if r.label.startswith("TensorRT-RTX"):
        assert not r.ok and "QuantizeLinear/DequantizeLinear" in r.error
        assert "implicit INT8 calibration" in r.error and "onnx-surgery quantize" in r.error


def test_lowered_graph_keeps_float32_io_and_stays_close(tmp_path):
    from surgery.backends.precision import lower_precision
    from surgery.verify import verify

    lowered = lower_precision(build("healthy_cnn"), "fp16")
    assert [i.type.tensor_type.elem_type for i in lowered.graph.input] == [TensorProto.FLOAT]
    assert [o.type.tensor_type.elem_type for o in lowered.graph.output] == [TensorProto.FLOAT]
    assert {t.data_type for t in lowered.graph.initializer} == {TensorProto.FLOAT16}
    rep = verify(build("healthy_cnn"), lowered, safety="approximate")
    assert rep.status == "ok" and 0 < rep.outputs[0].mean_rel < 1e-2
    assert np.isfinite(numpy_helper.to_array(lowered.graph.initializer[0])).all()


def test_fp16_lowering_reads_external_weights(tmp_path):
    from surgery.model import load_model

    path = tmp_path / "cnn.onnx"
    onnx.save(
        build("healthy_cnn"), str(path), save_as_external_data=True, location="cnn.data", size_threshold=0
    )
    model = load_model(path)
    r = build_model("tensorrt", model.proto, BuildOptions(precision="fp16"), base_dir=str(model.base_dir))
    assert r.ok, r.error
