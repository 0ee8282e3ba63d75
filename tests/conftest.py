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
        yield
