"""Verification's onnxruntime worker hands the serialized model to onnxruntime as it came (no Python copy of it
beside onnxruntime's), and what makes it runnable travels as bytes merged into it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery import ort
from surgery.verify import Safety, run_first, verify

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from worker_memory import grows  # noqa: E402  (a fresh process's growth: onnxruntime's own call, the worker's)


def _convs(layers: int = 32, channels: int = 128, ir: int | None = None) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, weights, prev = [], [], "x"
    for i in range(layers):
        w = (rng.random((channels, channels, 3, 3), dtype=np.float32) - 0.5) * 0.05
        weights.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        prev = f"c{i}"
    graph = helper.make_graph(
        nodes,
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 8, 8])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    if ir is not None:
        model.ir_version = ir
    return model


def test_the_worker_needs_no_more_memory_than_onnxruntimes_own_call(tmp_path):
    """18 MiB of Conv weights inline: parsed in the worker and serialized again for onnxruntime, the worker grew
    by 83 MiB where onnxruntime's own call on the same bytes grows by 37."""
    path = tmp_path / "convs.onnx"
    onnx.save(_convs(), path)
    floor, worker = grows(path, "onnxruntime"), grows(path, "worker")
    assert worker <= 1.25 * floor + 4, (worker, floor)


def test_a_model_above_onnxruntimes_ir_runs_in_the_worker_with_its_patch():
    model = _convs(layers=2, channels=8, ir=ort.max_ir_version() + 1)
    data = model.SerializeToString()
    sets = [{"x": np.ones((1, 8, 8, 8), np.float32)}]
    with pytest.raises(Exception, match="(?i)ir version"):
        run_first(data, sets)  # onnxruntime's own answer without it
    k, out = run_first(data, sets, None, ort.runnable_patch(model))
    assert k == 0 and out["c1"].shape == (1, 8, 8, 8)
    assert ort.runnable_patch(_convs(layers=1, channels=8)) == b""  # a runnable model is sent as it is


def test_a_model_above_onnxruntimes_ir_is_verified_against_itself():
    model = _convs(layers=2, channels=8, ir=ort.max_ir_version() + 1)
    report = verify(model, model, safety=Safety.EXACT)
    assert report.ok and report.outputs, report.summary()


def test_a_model_without_external_data_runs_with_a_folder_given(tmp_path):
    model = _convs(layers=1, channels=8)
    out = ort.run_serialized(
        model.SerializeToString(), {"x": np.ones((1, 8, 8, 8), np.float32)}, str(tmp_path)
    )
    assert out["c0"].shape == (1, 8, 8, 8)
