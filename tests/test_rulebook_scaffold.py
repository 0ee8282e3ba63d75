"""The scaffold writes a rule file that validates, with TODOs the built-in rule tests refuse."""

import pytest

from surgery.rulebook import load_rules
from surgery.rulebook.scaffold import main


def test_scaffold_writes_a_valid_rule_with_todos_and_never_overwrites(tmp_path, capsys):
    assert main(["my-rule", "--op", "Mish", "--primitive", "decompose", "--dir", str(tmp_path)]) == 0
    (rule,) = load_rules([tmp_path])
    assert rule.id == "my-rule" and rule.match["op"] == "Mish" and rule.params == {"node": "$node"}
    assert rule.safety == "exact" and "TODO" in rule.why
    assert main(["my-rule", "--op", "Mish", "--primitive", "decompose", "--dir", str(tmp_path)]) == 2
    assert main(["other", "--op", "Mish", "--primitive", "nope", "--dir", str(tmp_path)]) == 2
    assert "unknown fix primitive 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("primitive", ["fold_constants", "inference_mode", "set_attribute"])
def test_scaffold_for_any_primitive_validates(primitive, tmp_path):
    assert main(["r", "--op", "Relu", "--primitive", primitive, "--dir", str(tmp_path)]) == 0
    assert load_rules([tmp_path])[0].primitive == primitive
