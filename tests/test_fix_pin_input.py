"""--input-value / pin_input: a configuration input becomes a constant, the folding rules fold what it feeds, and
the result is verified against the original fed the same value."""

import onnx
import onnx.parser
import pytest

from surgery.cli import main
from surgery.fixes import FixError, get_fix

#   x[1,8], k (a graph input) -> Add(k, 0) -> TopK(x, k) -> v, i
MODEL = """\
<ir_version: 8, opset_import: ["" : 13]>
g (float[1,8] x, int64[1] k) => (float[1,N] v, int64[1,N] i) <int64[1] zero = {0}> {
  kk = Add (k, zero)
  [topk] v, i = TopK (x, kk)
}
"""


def test_the_cli_pins_the_input_folds_what_it_feeds_and_verifies_with_the_same_value(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model(MODEL), str(src))
    out = tmp_path / "fixed.onnx"
    code = main(["fix", str(src), "-t", "tensorrt-static@8.6", "--input-value", "k=3", "-o", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "pinned input 'k' to 3" in text and "applied fold-topk-k" in text
    assert "original vs fixed: verified (exact" in text  # the original ran with k = 3
    fixed = onnx.load(str(out))
    assert [i.name for i in fixed.graph.input] == ["x"] and [n.op_type for n in fixed.graph.node] == ["TopK"]


def test_bad_values_are_one_line_errors(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model(MODEL), str(src))
    assert main(["fix", str(src), "--input-value", "q=3", "--dry-run"]) == 2
    assert (
        "--input-value q: the model has no graph input 'q'. Note: its inputs are x, k"
        in capsys.readouterr().err
    )
    assert main(["fix", str(src), "--input-value", "k=[1, 2]", "--dry-run"]) == 2
    assert "input 'k' has shape [1]; the value [1, 2] has shape [2]" in capsys.readouterr().err
    assert main(["fix", str(src), "--input-value", "k", "--dry-run"]) == 2
    assert "expected NAME=VALUE" in capsys.readouterr().err


def test_the_primitive_refuses_a_value_of_the_wrong_kind():
    model = onnx.parser.parse_model(MODEL)
    with pytest.raises(FixError, match=r"input 'k' is int64; 'abc' is not a value of that type"):
        get_fix("pin_input")(model, input="k", value="abc")
    pinned = get_fix("pin_input")(model, input="k", value=[3])
    assert pinned.graph.initializer[-1].name == "k" and "k" not in [i.name for i in pinned.graph.input]


def test_a_pin_the_rule_asked_for_is_verified_with_the_answer():
    """pin-config-input applied with the user's answer: its own step and the overall check feed the original
    that value (with a random K the original would return other columns, or fail)."""
    from surgery.rulebook import load_rules, run_rules, verify_result
    from surgery.workspace import Workspace

    direct = MODEL.replace("kk = Add (k, zero)", "").replace("TopK (x, kk)", "TopK (x, k)")
    ws = Workspace.open(onnx.parser.parse_model(direct).SerializeToString())
    rules = [r for r in load_rules() if r.id == "pin-config-input"]
    applied, _ = run_rules(ws, rules, ["tensorrt-static@8.6"], values={"value": {"k": [3]}})
    assert [a.proposal.rule.id for a in applied] == ["pin-config-input"]
    step = applied[0].verification
    assert step.status == "ok" and step.worst() == (0.0, 0.0), step.summary()  # a changes-semantics step
    overall = verify_result(ws, applied)  # never fails on numbers: they must be zero because k was fed 3
    assert overall.worst() == (0.0, 0.0) and overall.feeds["k"] == [1], overall.summary()
