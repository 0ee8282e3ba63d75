"""`reduce`: the smallest model the target still refuses with the same code and message (surgery.reduce, CLI)."""

import importlib.util

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.cli import main
from surgery.diagnose import check_one
from surgery.reduce import NothingToReduce, ReduceError, reduce_model
from surgery.verdict import Status

HAS_TRT = (
    importlib.util.find_spec("tensorrt_rtx") is not None or importlib.util.find_spec("tensorrt") is not None
)
live = pytest.mark.skipif(not HAS_TRT, reason="neither tensorrt nor tensorrt_rtx is installed")
TARGETS = [pytest.param("tensorrt", marks=live), "tensorrt-static@10.15"]


def chain(n: int = 500, bad_at: int = 250) -> onnx.ModelProto:
    """n nodes: Relu / Add / Mul / Sigmoid in turn, with one ai.onnx.ml Scaler (TensorRT has no importer) at
    `bad_at`, and a side branch every 50 nodes that joins the chain again."""
    nodes, x = [], "x"
    inits = [numpy_helper.from_array(np.full([4], 0.5, np.float32), "c")]
    k = 0
    while len(nodes) < n:
        if len(nodes) == bad_at:
            nodes.append(
                helper.make_node(
                    "Scaler",
                    [x],
                    [f"t{k}"],
                    name="the_scaler",
                    domain="ai.onnx.ml",
                    offset=[0.1],
                    scale=[2.0],
                )
            )
        elif len(nodes) % 50 == 49 and len(nodes) + 1 < n and len(nodes) + 1 != bad_at:
            nodes.append(helper.make_node("Neg", [x], [f"side{k}"], name=f"side{k}"))
            nodes.append(helper.make_node("Add", [x, f"side{k}"], [f"t{k}"], name=f"join{k}"))
        else:
            op = ["Relu", "Add", "Mul", "Sigmoid"][k % 4]
            ins = [x] if op in ("Relu", "Sigmoid") else [x, "c"]
            nodes.append(helper.make_node(op, ins, [f"t{k}"], name=f"n{k}"))
        x = f"t{k}"
        k += 1
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 4])],
        inits,
    )
    model = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)], ir_version=8
    )
    onnx.checker.check_model(model)
    return model


def refusal(report, node: str):
    v = report.by_node()[node]
    return v.status, v.code, v.words


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", ["bisect", "linear"])
def test_a_500_node_model_with_one_rejected_node_reduces_to_a_few_nodes(target, mode):
    model = chain()
    assert len(model.graph.node) == 500
    before = check_one(model, target)
    assert [v.node for v in before.rejected] == ["the_scaler"]
    result = reduce_model(model, target, mode=mode, time_limit=120)
    assert result.nodes_before == 500 and result.nodes_after <= 3
    assert "the_scaler" in result.kept and result.minimal and not result.stopped
    after = check_one(result.model, target)
    assert refusal(after, "the_scaler") == refusal(before, "the_scaler")
    assert after.by_node()["the_scaler"].status is Status.REJECTED
    assert result.failure.words == before.by_node()["the_scaler"].words != ""


def test_the_constant_chain_a_refusal_depends_on_is_kept(sample_dir):
    # TensorRT 8.2 refuses a Resize whose scales are computed: folding them into an initializer would lose the
    # refusal, so the Concat that computes them stays, and nothing else does
    from surgery.model import load_model

    model = load_model(sample_dir / "resize_scales_chain.onnx")
    result = reduce_model(model, "tensorrt-static@8.2")
    assert result.nodes_before == 12 and result.kept == ["/up/Concat_1", "/up/Resize"]
    assert (
        result.failure.words
        == 'Assertion failed: scales.is_weights() && "Resize scales must be an initializer!"'
    )
    after = check_one(result.model, "tensorrt-static@8.2")
    assert [(v.node, v.words) for v in after.rejected] == [("/up/Resize", result.failure.words)]
    assert result.inputs == ["conv_out"]  # the Resize's data input; the rest are constants held by value
    assert set(result.folded) >= {"/up/Cast_output_0"}


def test_a_time_limit_returns_the_smallest_failing_model_so_far():
    model = chain(120, 60)
    result = reduce_model(model, "tensorrt-static@10.15", time_limit=0)
    assert "time limit" in result.stopped and not result.minimal
    after = check_one(result.model, "tensorrt-static@10.15")
    assert refusal(after, "the_scaler")[0] is Status.REJECTED


def test_nothing_to_reduce_and_bad_requests():
    model = chain(20, 10)
    with pytest.raises(ReduceError, match="no node 'nope'"):
        reduce_model(model, "tensorrt-static@10.15", node="nope")
    with pytest.raises(NothingToReduce, match="does not reject Relu 'n0'"):
        reduce_model(model, "tensorrt-static@10.15", node="n0")
    del model.graph.node[10]  # the Scaler: the rest is accepted
    model.graph.node[10].input[0] = "t9"
    with pytest.raises(NothingToReduce, match="accepts the model"):
        reduce_model(model, "tensorrt-static@10.15")


@live
def test_cli_reduces_with_the_live_parser_and_keeps_its_words(tmp_path, capsys):
    path, out = tmp_path / "chain.onnx", tmp_path / "small.onnx"
    onnx.save(chain(), str(path))
    assert main(["reduce", str(path), "-t", "tensorrt", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "nodes: 500 -> 1" in text and "Scaler 'the_scaler'" in text
    assert 'Plugin not found, are the plugin name, version, and namespace correct?"' in text
    small = onnx.load(str(out))
    onnx.checker.check_model(small, full_check=True)
    assert [n.name for n in small.graph.node] == ["the_scaler"]


def test_cli_exit_codes(tmp_path, capsys):
    path = tmp_path / "chain.onnx"
    onnx.save(chain(20, 10), str(path))
    assert (
        main(["reduce", str(path), "-t", "tensorrt-static@10.15", "-o", str(tmp_path / "s.onnx"), "--json"])
        == 0
    )
    import json

    d = json.loads(capsys.readouterr().out)
    assert d["nodes_before"] == 20 and d["nodes_after"] == 1 and d["failure"]["node"] == "the_scaler"
    assert main(["reduce", str(path), "-t", "onnxruntime", "-o", str(tmp_path / "s2.onnx")]) == 1
    assert "nothing to reduce" in capsys.readouterr().out
    assert main(["reduce", str(path), "-t", "tensorrt-static@10.15", "-o", str(path)]) == 2
    assert main(["reduce", str(path), "-t", "nosuch", "-o", str(tmp_path / "s3.onnx")]) == 2
    assert (
        main(
            [
                "reduce",
                str(path),
                "-t",
                "tensorrt-static@10.15",
                "-o",
                str(tmp_path / "s4.onnx"),
                "--node",
                "x",
            ]
        )
        == 2
    )
    assert "Traceback" not in capsys.readouterr().err


def test_the_inspector_offers_the_minimal_failing_model_of_a_rejected_node():
    pytest.importorskip("streamlit")
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(
        str(Path(__file__).resolve().parent.parent / "app" / "main.py"), default_timeout=120
    )
    at.run()
    at.button(key="side-lesson-resize_scales_chain").click()  # TensorRT 8.2 rejects its Resize
    at.run()
    for _ in range(3):  # the workbench checks one target per run
        at.run()
    assert not at.exception
    assert at.session_state["selected"] == "/up/Resize"
    key = "reduce-tensorrt-static@8.2-/up/Resize"
    at.button(key=key).click()
    at.run()
    assert not at.exception
    assert any("12 → 2 node(s)" in c.value.replace("\\", "") for c in at.caption), [
        c.value for c in at.caption
    ]
    assert any(b.proto.label == "Download the minimal model" for b in at.get("download_button"))


def test_external_weights_the_failing_node_reads_are_written_into_the_reduced_model(tmp_path):
    from surgery.model import load_model

    table = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(1024, 4), "table")
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Mystery", ["a", "table"], ["m"], name="mystery", domain="my.ops"),
        helper.make_node("Sigmoid", ["m"], ["y"], name="sig"),
    ]
    g = helper.make_graph(
        nodes,
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [table],
    )
    model = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ops", 1)], ir_version=8
    )
    src = tmp_path / "src"
    src.mkdir()
    onnx.save(model, str(src / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=1024)
    out = tmp_path / "small.onnx"
    assert main(["reduce", str(src / "m.onnx"), "-t", "tensorrt-static@10.15", "-o", str(out)]) == 0
    small = onnx.load(str(out))  # no external file beside it: the weight is inside
    assert [n.name for n in small.graph.node] == ["mystery"]
    (w,) = small.graph.initializer
    assert np.array_equal(numpy_helper.to_array(w), numpy_helper.to_array(table))
    assert load_model(out).external == []
