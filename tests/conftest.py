"""Shared fixtures: the teaching samples and the onnx package's generated node-test models."""

import warnings
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_models"


@cache
def node_test_models() -> list:
    """Every node-test model the onnx wheel's generators produce: (name, ModelProto). ~1.9k, ~6 s to build."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [(case.name, case.model) for case in collect_testcases(None)]


@pytest.fixture(scope="session")
def onnx_node_tests() -> list:
    return node_test_models()


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    return SAMPLES


@pytest.fixture(scope="session", autouse=True)
def _sessions_in_a_temporary_folder(tmp_path_factory):
    """The app saves its sessions (surgery.sessions): never in the user's ~/.onnx-surgery during tests. A test
    that looks at them sets ONNX_SURGERY_STATE_DIR itself."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ONNX_SURGERY_STATE_DIR", str(tmp_path_factory.mktemp("sessions")))
        # the parsed-rules cache (surgery.rulebook.loader) and TVM's tuning records: not the user's either
        mp.setenv("ONNX_SURGERY_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="session", autouse=True)
def _temporary_files_in_the_sessions_folder(tmp_path_factory):
    """What the code under test writes to the system's temp folder (and what its servers and workers write
    there) goes to a folder pytest removes with its others, not to /tmp, run after run. Ray's sockets keep a short
    folder of their own (a socket's path has at most 107 bytes; pytest's folders under xdist are longer)."""
    import shutil
    import tempfile

    folder = tmp_path_factory.mktemp("tmp")
    ray = tempfile.mkdtemp(prefix="onnx-surgery-tests-ray-")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(folder))
        mp.setenv("RAY_TMPDIR", ray)
        mp.setattr(tempfile, "tempdir", str(folder))
        yield
    shutil.rmtree(ray, ignore_errors=True)


@pytest.fixture
def two_quantizers(tmp_path) -> Path:
    """A file with two DynamicQuantizeLinear nodes (N in TensorRT 10.15's operator table, whose parser says only
    "false") and a Relu every target accepts."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    outs = [helper.make_tensor_value_info(n, TensorProto.UINT8, [1, 8]) for n in ("q1", "q2")]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q1", "s1", "z1"], name="dql_a"),
        helper.make_node("DynamicQuantizeLinear", ["r"], ["q2", "s2", "z2"], name="dql_b"),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], outs), opset_imports=[helper.make_opsetid("", 13)]
    )
    path = tmp_path / "two_quantizers.onnx"
    onnx.save(model, path)
    return path
