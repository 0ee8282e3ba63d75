"""tensorrt-static: versioned, cited support data; each lesson's node rejected in that version's words."""

import json

import pytest
from onnx import TensorProto, helper

from surgery.backends import get_backend
from surgery.backends.base import Status
from surgery.backends.tensorrt_static import CONSTRAINTS, DATA, SUPPORTED_VERSIONS, _vt, resolve_version
from surgery.samples import build, lessons


@pytest.mark.parametrize("lesson", [x for x in lessons() if x.node], ids=lambda x: x.name)
def test_each_lesson_backend_rejects_the_lessons_node(lesson):
    r = get_backend(lesson.backend).check(build(lesson.name))
    rejected = {v.node: v for v in r.rejected}
    assert lesson.node in rejected, r.to_dict()
    v = rejected[lesson.node]
    assert v.evidence.source == "support table" and "TensorRT" in v.evidence.detail
    if lesson.rule:
        assert lesson.rule in v.rules or any(lesson.rule.split("-")[0] in x for x in v.rules), v.rules
    assert r.accepted is False


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_every_version_loads_and_accepts_the_healthy_cnn(version):
    r = get_backend(f"tensorrt-static@{version}").check(build("healthy_cnn"))
    assert (
        r.accepted and len(r.verdicts) == 10 and get_backend(f"tensorrt-static@{version}").availability().ok
    )


@pytest.mark.parametrize(
    ("version", "resize_ok", "topk_ok"),
    [
        ("8.0", False, False),
        ("8.2", False, False),
        ("8.4", True, False),
        ("8.6", True, False),
        ("9.3", True, True),
        ("10.15", True, True),
        ("11", True, True),
    ],
)
def test_version_changes(version, resize_ok, topk_ok):
    b = get_backend(f"tensorrt-static@{version}")
    assert b.check(build("resize_scales_chain")).accepted is resize_ok
    assert b.check(build("topk_computed_k")).accepted is topk_ok


def test_exact_parser_texts():
    r = get_backend("tensorrt-static@8.2").check(build("resize_scales_chain"))
    assert r.rejected[0].message.startswith(
        'Assertion failed: scales.is_weights() && "Resize scales must be an initializer!"'
    )
    r = get_backend("tensorrt-static@10.15").check(build("unique_op"))
    assert r.rejected[0].message == "false (checkUnique)" and r.rejected[0].code == "UNSUPPORTED_NODE"
    r = get_backend("tensorrt-static@8.6").check(build("unique_op"))  # no static checkers before 9.3
    assert r.rejected[0].message.startswith('Assertion failed: creator && "Plugin not found')


def _custom(op: str, domain: str = "") -> object:
    g = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], name="n", domain=domain)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(g, ir_version=8, opset_imports=opsets)


def test_plugin_named_op_is_found_from_the_version_that_ships_the_plugin():
    m = _custom("ModulatedDeformConv2d")
    assert get_backend("tensorrt-static@8.6").check(m).verdicts[0].status is Status.SUPPORTED
    assert get_backend("tensorrt-static@8.5").check(m).verdicts[0].status is Status.REJECTED
    other = get_backend("tensorrt-static@10.15").check(_custom("MyFancyOp", "com.example")).verdicts[0]
    assert other.status is Status.REJECTED and "Plugin not found" in other.message


def test_every_fact_has_a_source():
    data = json.loads(DATA.read_text())
    for version, entry in data["versions"].items():
        assert entry["source"].startswith("onnx/onnx-tensorrt"), version
        assert entry["max_opset"] >= 13 and entry["ops"]
    for c in CONSTRAINTS:
        assert c.source and c.message and _vt(c.since) <= _vt(c.until), c.id


def test_version_aliases_and_unknown_versions():
    assert resolve_version("10") == "10.15" and resolve_version("11") == "11.1"
    with pytest.raises(ValueError, match="no support data for TensorRT 7.5"):
        resolve_version("7.5")


def test_opset_above_the_versions_range_is_a_model_message():
    m = build("healthy_cnn")
    m.opset_import[0].version = 17
    r = get_backend("tensorrt-static@8.2").check(m)
    assert any("opset 17" in x for x in r.messages)
