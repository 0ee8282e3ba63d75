"""Text from models and rules is shown as text: never Markdown maths ($…$ in `$stride`/`$padding`), emphasis or
HTML. The mmcv DeformConv rule maps attributes to `$stride`, `$padding`, …: its fix card, the recipe history and
the Lessons walk-through must show those dollars as dollars."""

import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

MAIN = str(Path(__file__).resolve().parent.parent / "app" / "main.py")
BARE_DOLLAR = re.compile(r"(?<!\\)\$")
CODE_SPAN = re.compile(r"`[^`]*`")


def texts(at) -> list[str]:
    return [m.value for m in at.markdown] + [c.value for c in at.caption]


def assert_no_maths(at, must_show: str) -> None:
    shown = texts(at)
    bare = [t for t in shown if BARE_DOLLAR.search(CODE_SPAN.sub("", t))]  # a code span shows '$' as typed
    assert not bare, bare
    assert any(must_show in t for t in shown), shown


def test_fix_card_and_recipe_show_rule_dollars_as_text():
    at = AppTest.from_file(MAIN, default_timeout=90)
    at.run()
    at.button(key="side-lesson-deform_conv_custom").click()
    at.run()
    at.session_state["targets"] = ["tensorrt-static@10.15"]
    at.session_state["selected"] = "/dcn/MMCVModulatedDeformConv2d"
    at.run()
    assert not at.exception
    assert_no_maths(at, r"\$stride")  # the fix card's step line
    at.button(key="apply-mmcv-deformconv-to-plugin").click()
    at.run()
    assert not at.exception
    assert [s.rule for s in at.session_state["ws"].recipe] == ["mmcv-deformconv-to-plugin"]
    recipe = [m.value for m in at.markdown if m.value.startswith("1. ")]
    assert recipe and r"\$padding" in recipe[0], recipe
    assert_no_maths(at, r"\$padding")


def test_lessons_walkthrough_shows_rule_dollars_as_text():
    at = AppTest.from_file(MAIN, default_timeout=90)
    at.run()
    at.switch_page("views/lessons.py")
    at.run()
    at.button(key="walk-deform_conv_custom").click()
    at.run()
    assert not at.exception
    assert_no_maths(at, r"\$stride")


def test_names_from_the_model_are_not_markdown(tmp_path, monkeypatch):
    import onnx
    from onnx import TensorProto, helper

    name = "$x_1$ *emph* <b>html</b>"
    g = helper.make_graph(
        [helper.make_node("Relu", [name], ["$y$"], name="/a/$stride$_Relu")],
        "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("$y$", TensorProto.FLOAT, [1, 2])],
    )
    path = tmp_path / "dollars.onnx"
    onnx.save(helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)]), path)
    monkeypatch.setenv("ONNX_SURGERY_START_MODEL", str(path))
    at = AppTest.from_file(MAIN, default_timeout=90)
    at.run()
    at.session_state["selected"] = "/a/$stride$_Relu"
    at.text_input(key="search").input("relu")
    at.run()
    assert not at.exception
    assert at.session_state["selected"] == "/a/$stride$_Relu"  # Enter selects the first match
    assert_no_maths(at, r"\$x\_1\$")  # the inspector's input line
    assert not [t for t in texts(at) if "<b>html" in t], [t for t in texts(at) if "<b>" in t]


def test_error_codes_show_without_escape_backslashes():
    """Inside backticks Markdown escapes are printed as typed: a code reads UNSUPPORTED_NODE, not UNSUPPORTED\\_NODE."""
    at = AppTest.from_file(MAIN, default_timeout=90)
    at.run()
    at.button(key="side-lesson-resize_scales_chain").click()
    at.run()
    at.session_state["targets"] = ["tensorrt-static@8.2"]
    at.session_state["selected"] = "/up/Resize"
    at.run()
    assert not at.exception
    coded = [m.value for m in at.markdown if "UNSUPPORTED" in m.value]
    assert coded and all("`UNSUPPORTED_NODE`" in t for t in coded), coded


def test_the_rules_page_shows_a_users_rule_text_as_text(tmp_path, monkeypatch):
    """A user's rule file is text from outside: its title, what, why and safety note show '$k$' and '<b>' as
    typed (the built-in rules' `$node` parameters too)."""
    rule = (Path(__file__).resolve().parent.parent / "rules" / "bitshift-decompose.yaml").read_text()
    rule = rule.replace("id: bitshift-decompose", "id: my-shift")
    rule = rule.replace("title: BitShift by a constant", "title: Shift by $k$ <b>bold</b>")
    rule = rule.replace("what: Replaces", "what: $2^k$ *times* <i>x</i>. Replaces")
    mine = tmp_path / "rules"
    mine.mkdir()
    (mine / "my-shift.yaml").write_text(rule)
    monkeypatch.setenv("ONNX_SURGERY_USER_RULES", str(mine))
    at = AppTest.from_file(MAIN, default_timeout=90)
    at.run()
    at.switch_page("views/rules.py")
    at.run()
    assert not at.exception
    labels = [e.label for e in at.expander]
    assert any(r"Shift by \$k\$ \<b\>bold\</b\>" in x for x in labels), labels
    assert not [x for x in labels if BARE_DOLLAR.search(x) or "<b>" in x]
    assert_no_maths(at, r"\$2^k\$ \*times\* \<i\>x\</i\>")


def test_a_bad_files_name_in_its_message_is_text(tmp_path, monkeypatch):
    models = tmp_path / "models"
    models.mkdir()
    bad = models / "$x$_*b*.onnx"
    bad.write_bytes(b"\x00\x01 not onnx")
    monkeypatch.setenv("ONNX_SURGERY_MODELS_DIR", str(models))
    at = AppTest.from_file(MAIN, default_timeout=90)
    at.run()
    at.text_input(key="server_path").input(str(bad))
    at.run()
    at.button(key="open_path").click()
    at.run()
    errors = [e.value for e in at.error]
    assert any(r"\$x\$\_\*b\*\.onnx: not an ONNX model" in e for e in errors), errors
    assert not [e for e in errors if BARE_DOLLAR.search(e)]
