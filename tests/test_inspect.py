"""`inspect` on the samples, on every onnx node-test model, and through the CLI."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.cli import main
from surgery.graph import GraphFacts
from surgery.inspect import inspect_model
from surgery.model import load_model
from surgery.samples import SAMPLES, build, lessons


@pytest.mark.parametrize("name", list(SAMPLES))
def test_every_sample_loads_and_inspects(sample_dir, name):
    model = load_model(sample_dir / f"{name}.onnx")
    report = inspect_model(model)
    assert report.nodes == sum(report.op_histogram.values()) > 0
    assert report.inputs and report.outputs


@pytest.mark.parametrize("name", list(SAMPLES))
def test_committed_samples_match_the_builder(sample_dir, name):
    """sample_models/build.py is deterministic and the committed files are what it builds."""
    assert (sample_dir / f"{name}.onnx").read_bytes() == build(name).SerializeToString()


def test_lessons_name_real_nodes():
    for lesson in lessons():
        if lesson.node:
            names = [n.name for n in build(lesson.name).graph.node]
            assert lesson.node in names, lesson.name


def test_inspect_reports_custom_ops_dynamic_dims_and_subgraphs(sample_dir):
    r = inspect_model(load_model(sample_dir / "deform_conv_custom.onnx"))
    assert r.custom_ops == ["mmcv::MMCVModulatedDeformConv2d"] and r.opsets["mmcv"] == 1
    r = inspect_model(load_model(sample_dir / "squeeze_dynamic.onnx"))
    assert r.inputs[0].shape == ["batch", 1, 8] and r.inputs[0].dynamic
    r = inspect_model(load_model(sample_dir / "if_branch_shapes.onnx"))
    assert r.subgraphs == 2 and r.nodes == r.nodes_main_graph + 2
    r = inspect_model(load_model(sample_dir / "ml_scaler.onnx"))
    assert r.domains["ai.onnx.ml"] == 1 and not r.custom_ops


def test_initializer_bytes_counted_without_reading_external_data(tmp_path):
    w = np.zeros((256, 256), np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
        [numpy_helper.from_array(w, "w")],
    )
    m = helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(m, str(tmp_path / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    r = inspect_model(load_model(tmp_path / "m.onnx"))
    assert r.initializer_bytes == w.nbytes and r.external_files == [
        {"location": "w.bin", "bytes": w.nbytes, "tensors": 1}
    ]


def test_every_onnx_node_test_model_loads_inspects_and_has_facts(onnx_node_tests):
    assert len(onnx_node_tests) > 1000
    failures = []
    for name, proto in onnx_node_tests:
        try:
            inspect_model(load_model(proto.SerializeToString(), name=name))
            GraphFacts.of(proto)
        except Exception as exc:  # collect them all, then report
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    assert not failures, "\n".join(failures[:20])


def test_cli_inspect_text_and_json(sample_dir, capsys):
    assert main(["inspect", str(sample_dir / "resize_scales_chain.onnx")]) == 0
    out = capsys.readouterr().out
    assert "Resize" in out and "opsets: ai.onnx 11" in out and "input: FLOAT [1, 3, 16, 16]" in out
    assert main(["inspect", "--json", str(sample_dir / "resize_scales_chain.onnx")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["op_histogram"]["Constant"] == 4 and data["ir_version"] == 8


def test_cli_inspect_bad_input_exits_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01garbage")
    assert main(["inspect", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err


def test_lesson_page_is_current(sample_dir):
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_samples", sample_dir / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (sample_dir / "README.md").read_text() == mod.lessons_markdown(), (
        "run python sample_models/build.py"
    )
