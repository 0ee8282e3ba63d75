"""surgery.model: loading from path/bytes, external data, and one typed error per class of bad input."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.model import LoadErrorKind, ModelLoadError, fingerprint, load_model


def _matmul_model(weight: np.ndarray, ir_version: int = 8) -> onnx.ModelProto:
    #   x[1,K] -> MatMul(w[K,N]) -> y[1,N]
    k, n = weight.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(weight, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=ir_version)


@pytest.fixture
def external_model(tmp_path):
    """A model whose weight lives in `weights.bin` beside it."""
    model = _matmul_model(np.arange(64 * 32, dtype=np.float32).reshape(64, 32))
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    return path


def _set_location(path, location):
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
    onnx.save(m, str(path))


def test_loads_from_path_and_bytes_with_same_fingerprint(tmp_path):
    model = _matmul_model(np.ones((4, 2), np.float32))
    path = tmp_path / "a.onnx"
    onnx.save(model, str(path))
    from_path = load_model(path)
    from_bytes = load_model(path.read_bytes(), name="a.onnx")
    assert from_path.fingerprint() == from_bytes.fingerprint() == fingerprint(model)
    assert from_path.base_dir == tmp_path and from_bytes.base_dir is None


def test_external_data_is_validated_not_read(external_model):
    m = load_model(external_model)
    assert m.has_external_data and m.external[0].location == "weights.bin"
    assert m.external_bytes == 64 * 32 * 4
    # the weight stays on disk: the proto holds a reference, no bytes
    (w,) = m.proto.graph.initializer
    assert w.data_location == TensorProto.EXTERNAL and not w.raw_data


def test_empty_file(tmp_path):
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    with pytest.raises(ModelLoadError, match=r"empty \(0 bytes\)") as e:
        load_model(p)
    assert e.value.kind is LoadErrorKind.EMPTY


@pytest.mark.parametrize(
    "data", [b"\x89PNG\r\n\x1a\n" + bytes(100), b"hello, this is a text file\n", b"\xff" * 40]
)
def test_not_a_protobuf(tmp_path, data):
    p = tmp_path / "x.onnx"
    p.write_bytes(data)
    with pytest.raises(ModelLoadError, match="not a protobuf") as e:
        load_model(p)
    assert e.value.kind is LoadErrorKind.NOT_PROTOBUF


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.99])
def test_truncated(tmp_path, keep):
    data = _matmul_model(np.ones((16, 16), np.float32)).SerializeToString()
    p = tmp_path / "cut.onnx"
    p.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ModelLoadError, match="truncated") as e:
        load_model(p)
    assert e.value.kind is LoadErrorKind.TRUNCATED


def test_protobuf_that_is_not_a_model(tmp_path):
    tensor = numpy_helper.from_array(np.ones((3, 3), np.float32), "t")
    p = tmp_path / "tensor.pb"
    p.write_bytes(tensor.SerializeToString())
    with pytest.raises(ModelLoadError, match="not an ONNX ModelProto.*TensorProto") as e:
        load_model(p)
    assert e.value.kind is LoadErrorKind.NOT_MODEL


def test_model_without_graph(tmp_path):
    m = onnx.ModelProto(ir_version=8)
    m.opset_import.add(version=13)
    p = tmp_path / "nograph.onnx"
    p.write_bytes(m.SerializeToString())
    with pytest.raises(ModelLoadError, match="has no graph") as e:
        load_model(p)
    assert e.value.kind is LoadErrorKind.NO_GRAPH


def test_external_file_missing(external_model):
    (external_model.parent / "weights.bin").unlink()
    with pytest.raises(ModelLoadError, match="'weights.bin'.*missing") as e:
        load_model(external_model)
    assert e.value.kind is LoadErrorKind.EXTERNAL_MISSING


def test_external_file_too_short(external_model):
    w = external_model.parent / "weights.bin"
    w.write_bytes(w.read_bytes()[:100])
    with pytest.raises(ModelLoadError, match="truncated") as e:
        load_model(external_model)
    assert e.value.kind is LoadErrorKind.EXTERNAL_MISSING


def test_external_data_from_bytes_names_the_problem(external_model):
    with pytest.raises(ModelLoadError, match="open it from its path") as e:
        load_model(external_model.read_bytes())
    assert e.value.kind is LoadErrorKind.EXTERNAL_MISSING


@pytest.mark.parametrize("location", ["/etc/passwd", "../secret.bin", "sub/../../secret.bin"])
def test_external_location_escaping_folder_is_refused_before_reading(external_model, location):
    (external_model.parent.parent / "secret.bin").write_bytes(bytes(1 << 14))
    _set_location(external_model, location)
    with pytest.raises(ModelLoadError, match="refused") as e:
        load_model(external_model)
    assert e.value.kind is LoadErrorKind.EXTERNAL_UNSAFE


def test_external_symlink_leading_out_is_refused(external_model, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "weights.bin"
    os.replace(external_model.parent / "weights.bin", outside)
    os.symlink(outside, external_model.parent / "weights.bin")
    with pytest.raises(ModelLoadError, match="link that leads out") as e:
        load_model(external_model)
    assert e.value.kind is LoadErrorKind.EXTERNAL_UNSAFE


def test_size_limit(external_model):
    with pytest.raises(ModelLoadError, match="over the limit") as e:
        load_model(external_model, max_bytes=1000)  # the .onnx is small; weights.bin is 8 KiB
    assert e.value.kind is LoadErrorKind.TOO_LARGE
    assert load_model(external_model, max_bytes=1 << 20).external_bytes == 8192


def test_missing_path(tmp_path):
    with pytest.raises(ModelLoadError, match="no such file"):
        load_model(tmp_path / "nope.onnx")


def test_newer_ir_version_is_kept_and_lowered_only_for_running(tmp_path):
    from surgery import ort

    model = _matmul_model(np.ones((4, 2), np.float32), ir_version=ort.max_ir_version() + 1)
    p = tmp_path / "new.onnx"
    p.write_bytes(model.SerializeToString())
    loaded = load_model(p)
    assert loaded.proto.ir_version == ort.max_ir_version() + 1  # the model keeps its own
    run_copy = ort.runnable_copy(loaded.proto)
    assert run_copy.ir_version == ort.max_ir_version()
    out = ort.run(loaded.proto, {"x": np.ones((1, 4), np.float32)})
    np.testing.assert_allclose(out["y"], np.full((1, 2), 4.0))
    assert loaded.proto.ir_version == ort.max_ir_version() + 1


def test_ir_not_lowered_when_a_dtype_needs_it():
    from surgery import ort

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT4E2M1, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT4E2M1, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=11)
    model.ir_version = max(ort.max_ir_version() + 1, 11)
    ir, why = ort.runnable_ir(model)
    if ort.max_ir_version() < 11:
        assert ir == model.ir_version and "need IR 11" in why
    else:
        assert ir == ort.max_ir_version()


def test_checks_and_builds_write_nothing_beside_the_model(tmp_path):
    """A model with external weights, checked and built on every backend: its folder is unchanged afterwards
    (copies go to private temporary folders; onnxruntime and TensorRT read the weights in place)."""
    import importlib.util

    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    from surgery.backends.base import BuildOptions
    from surgery.backends.build import build_model
    from surgery.diagnose import check_one, clear_cache

    #   x + w (w in weights.bin beside the model) -> y
    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        "g",
        [helper.make_tensor_value_info("x", 1, [4096])],
        [helper.make_tensor_value_info("y", 1, [4096])],
        [w],
    )
    path = tmp_path / "m.onnx"
    onnx.save(
        helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)]),
        str(path),
        save_as_external_data=True,
        location="weights.bin",
        size_threshold=0,
    )
    before = sorted(p.name for p in tmp_path.iterdir())
    model = load_model(path)
    backends = [
        b
        for b, m in (
            ("onnxruntime", "onnxruntime"),
            ("openvino", "openvino"),
            ("tvm", "tvm"),
            ("tensorrt", "tensorrt_rtx"),
        )
        if importlib.util.find_spec(m)
    ]
    for b in backends:
        clear_cache()
        assert check_one(model.proto, b, model.base_dir, depth="build").outcome.value == "accepts", b
        out = tmp_path.parent / f"out-{b}"
        assert build_model(
            b, model.proto, BuildOptions(runs=1, warmup=0, out_dir=str(out)), base_dir=model.base_dir
        ).ok
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_dead_worker_leaves_no_temporary_files():
    import glob

    from surgery.isolate import BackendCrash, call_isolated

    with pytest.raises(BackendCrash, match="crashed") as caught:
        call_isolated("surgery.isolate:leave_a_temp_file_and_crash", timeout=60)
    left = [line for line in caught.value.detail.splitlines() if line.endswith(".onnx")]
    assert left and not any(glob.glob(p) for p in left)  # its folder went with the worker


def test_save_model_reads_the_external_weights_in_and_writes_them_in_the_file_or_beside_it(
    external_model, tmp_path
):
    from surgery.model import has_external_data, save_model, with_weights

    m = load_model(external_model)
    assert with_weights(m.proto, None) is m.proto  # no folder: nothing is read
    full = with_weights(m.proto, m.base_dir)
    assert not has_external_data(full) and has_external_data(m.proto)  # a copy; the model is unchanged
    inline = save_model(m.proto, tmp_path / "out" / "inline.onnx", m.base_dir)
    assert not (tmp_path / "out" / "inline.onnx.data").exists()
    assert not has_external_data(onnx.load(str(inline), load_external_data=False))
    beside = tmp_path / "out" / "beside.onnx"
    (tmp_path / "out" / "beside.onnx.data").write_bytes(b"stale" * 1000)  # replaced, not appended to
    save_model(m.proto, beside, m.base_dir, external=True)
    again = load_model(beside)
    assert again.has_external_data and again.external_bytes == 64 * 32 * 4
    assert (tmp_path / "out" / "beside.onnx.data").stat().st_size == 64 * 32 * 4
    assert fingerprint(with_weights(again.proto, again.base_dir)) == fingerprint(full)


def test_the_collector_comes_back_on_when_threads_pausing_it_overlap():
    """Two threads inside gc_paused() at once (a session's drawing and the background work): the collector
    stays off until the last one leaves, then is on again, whichever leaves first."""
    import gc
    import threading

    from surgery.model import gc_paused

    assert gc.isenabled()
    inside, leave = threading.Event(), threading.Event()

    def other():
        with gc_paused():
            inside.set()
            leave.wait(5)

    t = threading.Thread(target=other)
    with gc_paused():
        t.start()
        assert inside.wait(5)
    assert not gc.isenabled()  # the other thread is still inside
    leave.set()
    t.join(5)
    assert gc.isenabled()
