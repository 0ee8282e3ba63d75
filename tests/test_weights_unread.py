"""Weights in an external file are read only where they are needed, and once (issues 28 and 30): checking against
a predictor opens no weight file; saving a model beside its weights copies them from file to file without
loading them into memory. bench/llm_scale.py measures the same on a 1B model."""

import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.model import has_external_data, load_model, save_model, with_weights

_opened: list[str] | None = None  # paths opened by Python code while a test listens


def _listen(event, args):
    if _opened is not None and event == "open" and isinstance(args[0], str | bytes):
        _opened.append(str(args[0]))


sys.addaudithook(_listen)  # hooks cannot be removed: this one records only while _opened is a list


@pytest.fixture
def opened():
    global _opened
    _opened = []
    yield _opened
    _opened = None


@pytest.fixture
def big_external(tmp_path):
    """MatMul -> Add -> MatMul with 4 MiB of weights in `weights.bin`; the second MatMul's weight is stored at
    the same range as the first's (a tied weight, as an LLM's embedding and head)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1024, 1024)).astype(np.float32)
    b = rng.standard_normal((1, 1024)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm0"),
            helper.make_node("Add", ["h", "b"], ["a"], name="add"),
            helper.make_node("MatMul", ["a", "w_tied"], ["y"], name="mm1"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1024])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path / "src" / "m.onnx"
    path.parent.mkdir()
    onnx.save(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    saved = onnx.load(str(path), load_external_data=False)
    tied = onnx.TensorProto()
    tied.CopyFrom(saved.graph.initializer[0])
    tied.name = "w_tied"
    saved.graph.initializer.append(tied)
    onnx.save(saved, str(path))
    return path, w, b


def test_checking_against_the_predictor_opens_no_weight_file(big_external, opened, capsys):
    from surgery.cli import main

    path, *_ = big_external
    assert main(["check", str(path), "-t", "tensorrt-static@10.15"]) == 0
    assert str(path) in opened  # the graph is read
    assert not [p for p in opened if p.endswith("weights.bin")], opened


def test_a_model_saved_beside_its_weights_copies_them_file_to_file(
    big_external, opened, tmp_path, monkeypatch
):
    import onnx.external_data_helper as helper_module

    import surgery.model

    def refuse(*_a, **_k):
        raise AssertionError("the weights were loaded into memory")

    path, w, b = big_external
    m = load_model(path)
    monkeypatch.setattr(helper_module, "load_external_data_for_model", refuse)
    monkeypatch.setattr(surgery.model, "with_weights", refuse)
    extra = numpy_helper.from_array(np.full((64, 64), 2.0, np.float32), "extra")  # made by a fix: in memory
    extra2 = numpy_helper.from_array(np.full((32, 64), 3.0, np.float32), "extra2")  # after it in the file
    proto = onnx.ModelProto()
    proto.CopyFrom(m.proto)
    proto.graph.initializer.extend([extra, extra2])
    out = save_model(proto, tmp_path / "out" / "fixed.onnx", m.base_dir, external=True)
    monkeypatch.undo()

    assert [p for p in opened if p.endswith("weights.bin")] == [str(path.parent.resolve() / "weights.bin")]
    assert m.proto == load_model(path).proto  # the model given is not changed
    saved = load_model(out)
    assert [f.location for f in saved.external] == ["fixed.onnx.data"]
    data = (tmp_path / "out" / "fixed.onnx.data").stat().st_size
    assert data == w.nbytes + b.nbytes + 64 * 64 * 4 + 32 * 64 * 4  # the tied range is copied once
    full = with_weights(saved.proto, saved.base_dir)
    assert not has_external_data(full)
    got = {t.name: numpy_helper.to_array(t) for t in full.graph.initializer}
    np.testing.assert_array_equal(got["w"], w)
    np.testing.assert_array_equal(got["w_tied"], w)
    np.testing.assert_array_equal(got["b"], b)
    np.testing.assert_array_equal(got["extra"], 2.0)
    np.testing.assert_array_equal(got["extra2"], 3.0)
    assert not any(
        p.name.startswith(("fixed", "weights")) for p in path.parent.iterdir() if p.name != "weights.bin"
    )


def test_weights_held_in_memory_are_written_beside_at_their_own_offsets(tmp_path):
    """Every weight in memory (as onnxruntime's quantizer leaves a model): each lands at its own range of the
    .data file, and the file stays (the offsets once did not advance: every tensor read the first's bytes, and a
    model with no external weight before lost its .data file)."""
    values = {f"w{k}": np.full((16, 32), float(k), np.float32) for k in range(3)}
    graph = helper.make_graph(
        [helper.make_node("Sum", ["x", *values], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 32])],
        [numpy_helper.from_array(v, k) for k, v in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    out = save_model(model, tmp_path / "m.onnx", external=True)
    assert (tmp_path / "m.onnx.data").stat().st_size == sum(v.nbytes for v in values.values())
    got = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(out)).graph.initializer}
    for name, value in values.items():
        np.testing.assert_array_equal(got[name], value)


def test_saving_in_one_file_still_reads_the_weights_in(big_external, tmp_path):
    path, w, _ = big_external
    m = load_model(path)
    out = save_model(m.proto, tmp_path / "inline.onnx", m.base_dir, external=False)
    inline = onnx.load(str(out), load_external_data=False)
    assert not has_external_data(inline) and not (tmp_path / "inline.onnx.data").exists()
    np.testing.assert_array_equal(numpy_helper.to_array(inline.graph.initializer[2]), w)
