"""`onnx-surgery upgrade MODEL --from T1 --to T2`: node-by-node changes between two targets (surgery.usecases.upgrade),
on a model with a plugin TensorRT 11.0 removed and on a model an older version refuses; --fix applies the rules
that answer the new refusals."""

import json

import onnx
import pytest
from onnx import TensorProto, helper

from surgery.backends.tensorrt.predictor import make
from surgery.cli import main
from surgery.rulebook import load_rules
from surgery.samples import build
from surgery.usecases.upgrade import compare, target_id
from surgery.verdict import Status

F = TensorProto.FLOAT


def _lrelu_model():
    #   x ─▶ Relu(relu) ─▶ a ─▶ LReLU_TRT(lrelu, negSlope 0.1) ─▶ y
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("LReLU_TRT", ["a"], ["y"], name="lrelu", negSlope=0.1),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [1, 8])],
        [helper.make_tensor_value_info("y", F, [1, 8])],
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def lrelu_path(tmp_path):
    path = tmp_path / "lrelu.onnx"
    onnx.save(_lrelu_model(), str(path))
    return path


def test_a_removed_plugin_is_newly_refused_with_the_new_words_and_its_rule():
    out = compare(_lrelu_model(), "tensorrt-static@10.15", "tensorrt-static@11.0", load_rules())
    assert [(c.node, c.before, c.after) for c in out.changes] == [("lrelu", "accepted", "rejected")]
    c = out.changes[0]
    new = make("11.0").check(_lrelu_model()).by_node()["lrelu"]
    assert c.words == new.words and "Plugin not found" in c.words
    assert c.rules == ["lrelu-plugin-to-leakyrelu"] and out.newly_refused == [c]
    # the plugin still ships in 10.16: nothing changes there
    assert compare(_lrelu_model(), target_id("10.15"), target_id("10.16"), load_rules()).changes == []


def test_cli_json_has_the_issue_shape_and_exit_1_when_something_is_newly_refused(lrelu_path, capsys):
    assert main(["upgrade", str(lrelu_path), "--from", "10.15", "--to", "11", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"from", "to", "changes"}
    assert data["from"] == "tensorrt-static@10.15" and data["to"] == "tensorrt-static@11"
    (change,) = data["changes"]
    assert set(change) == {"node", "op_type", "before", "after", "words", "rules"}
    assert (
        change["before"] == "accepted" and change["after"] == "rejected" and change["op_type"] == "LReLU_TRT"
    )
    assert main(["upgrade", str(lrelu_path), "--from", "10.15", "--to", "10.16"]) == 0
    assert "no node changes its verdict" in capsys.readouterr().out


def test_a_model_an_older_version_refuses_is_newly_accepted_on_the_newer(tmp_path, capsys):
    path = tmp_path / "resize.onnx"
    onnx.save(build("resize_scales_chain"), str(path))
    assert make("8.2").check(build("resize_scales_chain")).accepted is False
    assert main(["upgrade", str(path), "--from", "8.2", "--to", "10.15", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["changes"] and all(
        c["before"] == "rejected" and c["after"] == "accepted" for c in data["changes"]
    )
    assert all(c["words"] == "" and c["rules"] == [] for c in data["changes"])
    # the other way round it is newly refused, with the old version's words and a rule that answers it
    assert main(["upgrade", str(path), "--from", "10.15", "--to", "8.2", "--json"]) == 1
    back = json.loads(capsys.readouterr().out)["changes"]
    assert back and all(c["after"] == "rejected" and c["words"] and c["rules"] for c in back)


def test_fix_applies_the_rules_that_answer_the_new_refusals(lrelu_path, tmp_path, capsys):
    out = tmp_path / "lrelu.11.onnx"
    assert main(["upgrade", str(lrelu_path), "--from", "10.15", "--to", "11.5", "--fix", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "newly refused: LReLU_TRT 'lrelu'" in text and "lrelu-plugin-to-leakyrelu" in text
    fixed = onnx.load(str(out))
    assert [n.op_type for n in fixed.graph.node] == ["Relu", "LeakyRelu"]
    assert make("11.5").check(fixed).accepted
    assert make("11.5").check(fixed).by_node()["lrelu"].status is Status.SUPPORTED


def test_bad_input_is_one_line_and_exit_2(lrelu_path, tmp_path, capsys):
    assert main(["upgrade", str(lrelu_path), "--from", "10.15", "--to", "12.0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and "12.0" in err
    assert main(["upgrade", str(lrelu_path), "--from", "10.15", "--to", "11", "--fix"]) == 2
    assert "-o" in capsys.readouterr().err
    assert main(["upgrade", str(tmp_path / "missing.onnx"), "--from", "10.15", "--to", "11"]) == 2
