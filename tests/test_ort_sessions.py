"""onnxruntime sessions made to compare models run without the CPU memory arena; a timed build keeps it.

The arena kept what a run allocated after its session was gone: split's verification (the original, then the
parts) peaked at 9.5 GiB on a 1B fp16 export instead of 5.2 (docs/benchmarks.md, "Models at 1B size")."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

import surgery.ort
from surgery.backends.base import BuildOptions
from surgery.backends.onnxruntime import build as ort_build
from surgery.ort import make_session


def _model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_comparison_session_runs_without_the_arena():
    sess = make_session(_model())
    assert sess.get_session_options().enable_cpu_mem_arena is False


def test_the_arena_can_be_asked_for():
    sess = make_session(_model(), enable_cpu_mem_arena=True)
    assert sess.get_session_options().enable_cpu_mem_arena is True


def test_a_build_times_the_deployed_configuration(tmp_path, monkeypatch):
    seen = []

    def spy(*args, **kwargs):
        sess = make_session(*args, **kwargs)
        seen.append(sess.get_session_options().enable_cpu_mem_arena)
        return sess

    monkeypatch.setattr(surgery.ort, "make_session", spy)
    report = ort_build.build(_model().SerializeToString(), BuildOptions(out_dir=str(tmp_path), runs=1))
    assert report.ok, report.error
    # the engine timed is the deployed configuration; the reference it is compared with (surgery.ort.run) is not
    assert seen == [True, False]


def test_a_model_past_protobufs_limit_in_memory_runs_from_a_private_file(monkeypatch):
    """Weights over 2 GiB held in memory (onnxruntime's quantizer leaves a 1B model so) cannot be one message: the
    session reads a private file with the weights beside it. Serializing is made to fail here to reach that path
    (a real one needs 2 GiB in memory)."""
    import numpy as np
    from onnx import numpy_helper

    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    monkeypatch.setattr(surgery.ort, "_serialized", lambda _model: None)
    written = []
    real = surgery.ort.save_model
    monkeypatch.setattr(surgery.ort, "save_model", lambda *a, **k: written.append(a[1]) or real(*a, **k))
    sess = make_session(model)
    (out,) = sess.run(None, {"x": np.ones((2, 3), np.float32)})
    assert written and not written[0].parent.exists()  # the private folder is gone once the session exists
    assert (out == np.arange(6).reshape(2, 3) + 1).all()
