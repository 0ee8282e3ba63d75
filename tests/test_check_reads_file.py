"""`check` hands onnxruntime the file it read, not a serialization of it, only while that file is still the one
read; a one-shot check keeps no report and computes no fingerprint."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery import diagnose
from surgery.backends.onnxruntime.check import OnnxRuntimeBackend
from surgery.model import load_model
from surgery.verdict import Outcome

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from _page_cache import drop_from_cache, resident_bytes  # noqa: E402  (mincore: what of a file was read)


def _model(op: str = "Relu", ir: int = 8) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node(op, ["m"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=ir)


def test_file_as_read_is_the_path_until_the_file_changes(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    model = load_model(path)
    assert model.file_as_read() == str(path)
    onnx.save(_model("Sigmoid"), path)  # another model under the same name: the file is not the one read
    os.utime(path, ns=(1, 1))
    assert model.file_as_read() is None
    assert load_model(_model().SerializeToString()).file_as_read() is None  # from bytes: no file


def test_a_changed_file_is_not_what_onnxruntime_reads(tmp_path):
    """The model read has a node onnxruntime refuses; the file is then replaced by a healthy one. The check is on
    the model read (refused), not on what the file holds now."""
    path = tmp_path / "m.onnx"
    onnx.save(_model("NoSuchOp"), path)
    model = load_model(path)
    onnx.save(_model(), path)
    os.utime(path, ns=(1, 1))
    [report] = diagnose.check_model(
        model.proto, ["onnxruntime"], model.base_dir, path=model.file_as_read(), remember=False
    )
    assert report.outcome is not Outcome.ACCEPTS


def test_the_session_reads_the_file_with_its_external_data(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path, save_as_external_data=True, size_threshold=0, location="m.data")
    model = load_model(path)
    report = OnnxRuntimeBackend().check(model.proto, str(model.base_dir), path=model.file_as_read())
    assert report.accepted, report.messages
    # the path names the model read: a refused node in it is refused through the path too
    bad = tmp_path / "bad.onnx"
    onnx.save(_model("NoSuchOp"), bad)
    refused = load_model(bad)
    assert not OnnxRuntimeBackend().check(refused.proto, str(tmp_path), path=refused.file_as_read()).accepted


def test_one_shot_check_keeps_nothing(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    model = load_model(path)
    diagnose.clear_cache()
    fingerprints = []
    monkeypatch.setattr(diagnose, "fingerprint", lambda proto: fingerprints.append(1) or "x")
    [report] = diagnose.check_model(model.proto, ["onnxruntime"], model.base_dir, remember=False)
    assert report.accepted and not diagnose._CACHE and not fingerprints
    diagnose.check_model(model.proto, ["onnxruntime"], model.base_dir)
    assert fingerprints and diagnose._CACHE
    diagnose.clear_cache()


def test_openvino_reads_the_file_in_place(tmp_path):
    import pytest

    pytest.importorskip("openvino")
    from surgery.backends.openvino.check import OpenVINOBackend

    good, bad = tmp_path / "good.onnx", tmp_path / "bad.onnx"
    onnx.save(_model(), good, save_as_external_data=True, size_threshold=0, location="good.data")
    onnx.save(_model("NoSuchOp"), bad)
    for path, ok in ((good, True), (bad, False)):
        model = load_model(path)
        report = OpenVINOBackend().check(model.proto, str(tmp_path), path=model.file_as_read())
        assert report.accepted is ok
        assert [v.status.value for v in report.verdicts] == [
            v.status.value for v in OpenVINOBackend().check(model.proto, str(tmp_path)).verdicts
        ]


def test_tvm_reads_the_file_in_place_and_says_what_it_says_from_bytes(tmp_path, monkeypatch):
    """Given the unedited file's path, TVM's worker parses the file (with its external data): the parent sends a
    path, not the model's serialization, and the verdicts are those of the serialized model."""
    import pytest

    pytest.importorskip("tvm")
    from surgery.backends.tvm import check as tvm_check

    sent = []
    real = tvm_check.call_isolated
    monkeypatch.setattr(
        tvm_check, "call_isolated", lambda func, *args, **kw: sent.append(args[0]) or real(func, *args, **kw)
    )
    good, bad = tmp_path / "good.onnx", tmp_path / "bad.onnx"
    onnx.save(_model(), good, save_as_external_data=True, size_threshold=0, location="good.data")
    onnx.save(_model("NoSuchOp"), bad)
    for path, ok in ((good, True), (bad, False)):
        model = load_model(path)
        sent.clear()
        report = tvm_check.TVMBackend().check(model.proto, str(tmp_path), path=model.file_as_read())
        assert report.accepted is ok and sent[0] == str(path)
        from_bytes = tvm_check.TVMBackend().check(model.proto, str(tmp_path))
        assert isinstance(sent[-1], bytes | list)
        assert [(v.status, v.words) for v in report.verdicts] == [
            (v.status, v.words) for v in from_bytes.verdicts
        ]


def test_the_check_reads_no_weight_of_a_model_whose_weights_are_in_a_file(tmp_path):
    """Session creation prepacks a MatMul's constant fp32 weights (reads them all); the check's session does not
    prepack, so its answer costs no weight read (an 11-node model with 2 GiB of them: 3.9 s before)."""
    w = numpy_helper.from_array(np.ones((1024, 1024), np.float32), "w")  # 4 MiB
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1024])],
        [w],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), path, save_as_external_data=True, size_threshold=0, location="m.data")
    data = [tmp_path / "m.data"]
    model = load_model(path)
    drop_from_cache(data)
    if resident_bytes(data) > 0:
        pytest.skip("this file system keeps the file in the page cache: nothing to count reads with")
    report = OnnxRuntimeBackend().check(model.proto, str(model.base_dir), path=model.file_as_read())
    assert report.accepted, report.messages
    assert resident_bytes(data) == 0
    # the same session with onnxruntime's default (prepacking) reads them: the count sees a read
    from surgery.ort import make_session

    make_session(model.proto, model.base_dir, path=model.file_as_read())
    assert resident_bytes(data) > 0
