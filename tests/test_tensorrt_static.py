"""tensorrt-static: versioned, cited support data; each lesson's node rejected in that version's words."""

import json
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.backends.tensorrt.predictor import make
from surgery.backends.tensorrt.records import (
    SUPPORTED_VERSIONS,
    TABLES_PATH,
    load_checks,
    resolve_version,
    support_data,
)
from surgery.rulebook import load_rules
from surgery.rulebook.matcher import Context
from surgery.rulebook.suggest import rules_for
from surgery.samples import SAMPLES, build, lessons
from surgery.usecases.lesson import failure
from surgery.verdict import Stage, Status

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in extra_opsets]
    return helper.make_model(g, ir_version=8, opset_imports=ops)


def _vi(name, dtype=F, shape=(1, 3, 8, 8)):
    return helper.make_tensor_value_info(name, dtype, list(shape) if shape is not None else None)


def _one(op, domain="", dtype=F, **attrs):
    #   x ─▶ op ─▶ y
    n = helper.make_node(op, ["x"], ["y"], name="n", domain=domain, **attrs)
    return _model(
        [n], [_vi("x", dtype, [4])], [_vi("y", dtype, [4])], extra_opsets=[domain] if domain else []
    )


def _verdict(version, model, node="n"):
    return make(version).check(model).by_node()[node]


# -- the lessons ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lesson", [x for x in lessons() if x.backend.startswith("tensorrt-static")], ids=str)
def test_each_lesson_backend_refuses_the_lessons_node_and_its_rule_is_suggested(lesson):
    model = build(lesson.name)
    r = make(lesson.backend.split("@")[1]).check(model, depth=Stage(lesson.depth))
    if lesson.node is None:  # healthy_cnn
        assert r.accepted and lesson.rule is None, r.to_dict()
        return
    v = {x.node: x for x in r.rejected}[lesson.node]
    assert v.evidence.source == "support table" and f"@ TensorRT {r.version}" in v.evidence.detail
    assert v.explanation and (v.words_from if v.words else True)
    rules = load_rules()
    assert lesson.rule in rules_for(Context(model), v, r.backend, rules)
    # every other refused node gets a rule too (training_mode_ops: its Dropout gets dropout-training-mode)
    assert all(rules_for(Context(model), x, r.backend, rules) for x in r.rejected), [
        x.node for x in r.rejected
    ]
    assert r.accepted is False and failure(lesson).words == v.words


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_every_version_loads_and_accepts_the_healthy_cnn(version):
    b = make(version)
    r = b.check(build("healthy_cnn"))
    assert b.availability().ok and b.id == f"tensorrt-static@{version}"
    assert b.label == f"TensorRT {version} (predicted)"
    assert r.accepted and len(r.verdicts) == len(build("healthy_cnn").graph.node)
    assert all(v.status is Status.SUPPORTED for v in r.verdicts)


@pytest.mark.parametrize(
    ("version", "resize_ok", "topk_ok"),
    [
        ("8.0", False, False),
        ("8.2", False, False),
        ("8.4", True, False),
        ("8.6", True, False),
        ("9", True, True),
        ("10.0", True, True),
        ("10.15", True, True),
        ("11", True, True),
    ],
)
def test_version_changes(version, resize_ok, topk_ok):
    b = make(version)
    assert b.check(build("resize_scales_chain")).accepted is resize_ok
    assert b.check(build("topk_computed_k")).accepted is topk_ok


def test_squeeze_without_axes_on_a_dynamic_input_from_8_6_until_11_5():
    m = build("squeeze_dynamic")
    versions = ("8.5", "8.6", "10.15", "11.1", "11.4", "11.5")
    assert [make(v).check(m).accepted for v in versions] == [True, False, False, False, False, True]


def test_version_strings_and_unknown_versions():
    assert [resolve_version(v) for v in ("8.2", "9", "10", "10.15", "11", "11.1")] == [
        "8.2",
        "9.3",
        "10.16",
        "10.15",
        "11.5",
        "11.1",
    ]
    assert make("11").id == "tensorrt-static@11" and make("11").version == "11.5"
    with pytest.raises(ValueError, match=r"no support data for TensorRT 7\.5\. Note: available: 8\.0, 8\.2"):
        resolve_version("7.5")


def test_versions_without_a_table_say_which_table_they_use():
    data = json.loads(TABLES_PATH.read_text())["versions"]
    assert {"8.0", "8.2", "8.4", "8.5", "8.6", "9.0", "9.3", "10.0", "10.15", "11.1"} <= set(data)
    assert all(f"10.{m}" in data for m in range(16))
    assert data["10.12"]["table"] == "10.10-GA" and "10.10" in data["10.12"]["note"]
    assert data["11.1"]["table"] == "10.15" and "Swish" in data["11.1"]["added_ops"]
    assert "Swish" not in make("10.15").table["ops"] and "Swish" in make("11.1").table["ops"]


def test_each_distinct_table_is_stored_once_with_its_upstream_source():
    data = support_data()
    used = {v["table"] for v in data["versions"].values()}
    assert used == set(data["tables"])
    for tag, table in data["tables"].items():
        assert "onnx/onnx-tensorrt docs/operators.md" in table["upstream"], tag
        assert table["max_opset"] >= 13 and table["ops"] and table["data_types"], tag
    for version, entry in data["versions"].items():
        assert entry["source"].startswith("onnx/onnx-tensorrt docs/operators.md"), version
        assert all("CHANGELOG" in row["source"] for row in entry["added_ops"].values()), version
    assert all(c.source for c in load_checks())


def test_the_tables_regenerate_from_the_repository_alone(tmp_path):
    before = TABLES_PATH.read_bytes()
    root = TABLES_PATH.parents[4]
    out = subprocess.run(
        [sys.executable, str(root / "scripts" / "build_trt_support.py")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert TABLES_PATH.read_bytes() == before


# -- messages pinned where the parser's text is known -----------------------------------------------------------


def test_words_change_with_the_version_and_say_where_they_come_from():
    r = make("8.2").check(build("resize_scales_chain"))
    v = r.rejected[0]
    assert v.words == 'Assertion failed: scales.is_weights() && "Resize scales must be an initializer!"'
    assert "builtin_op_importers.cpp @ 8.2-GA" in v.words_from and "scales" in v.explanation
    new = make("10.15").check(build("unique_op")).rejected[0]
    assert new.words == "false" and new.code == "UNSUPPORTED_NODE" and new.checks == ("table-unsupported",)
    assert new.words_from.startswith("recorded from TensorRT-RTX") and "not supported (N)" in new.explanation
    old = (
        make("8.6").check(build("unique_op")).rejected[0]
    )  # no static checkers before 9.3: the plugin fallback
    assert (
        old.words.startswith('Assertion failed: creator && "Plugin not found') and "8.6-GA" in old.words_from
    )
    assert _verdict("10.15", _one("Cast", to=TensorProto.FLOAT8E4M3FN)).status is Status.SUPPORTED


def test_resize_attributes_by_version():
    #   x, roi, scales ─▶ Resize(keep_aspect_ratio_policy=not_larger) ─▶ y
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    n = helper.make_node(
        "Resize", ["x", "", "scales"], ["y"], name="n", keep_aspect_ratio_policy="not_larger"
    )
    m = _model([n], [_vi("x")], [_vi("y", shape=None)], [scales], opset=18)
    v = _verdict("10.15", m)
    assert v.code == "UNSUPPORTED_NODE_ATTR" and "Only `stretch` is supported currently" in v.words
    assert _verdict("8.6", m).status is Status.SUPPORTED  # no checkResize before 9.x


# -- plugins and custom ops -----------------------------------------------------------------------------------


def test_plugin_named_op_is_found_from_the_version_that_ships_the_plugin():
    m = _one("ModulatedDeformConv2d")
    assert _verdict("8.6", m).status is Status.SUPPORTED and _verdict("10.15", m).status is Status.SUPPORTED
    v = _verdict("8.5", m)
    assert v.status is Status.REJECTED and v.code == "UNSUPPORTED_NODE"
    assert v.words.startswith('Assertion failed: creator && "Plugin not found')
    other = _verdict("10.15", _one("MyFancyOp", "com.example"))
    assert other.status is Status.REJECTED and other.code == "INVALID_NODE"
    assert (
        other.words == 'creator && "Plugin not found, are the plugin name, version, and namespace correct?"'
    )
    assert "com.example::MyFancyOp" in other.explanation


def test_standard_op_name_in_another_domain_is_imported_as_the_standard_op():
    assert _verdict("10.15", _one("Relu", "com.example")).status is Status.SUPPORTED
    ml = _verdict("10.15", _one("Scaler", "ai.onnx.ml"))
    assert ml.status is Status.REJECTED and "Plugin not found" in ml.words


# -- constraints ------------------------------------------------------------------------------------------------


def _slice_or_add(op):
    #   x(int64) ─▶ Slice(0, INT64_MAX)   or   x(int64) ─▶ Add(2**40)
    big = np.iinfo(np.int64).max
    if op == "Slice":
        inits = [numpy_helper.from_array(np.array([v], np.int64), k) for k, v in (("s", 0), ("e", big))]
        n = helper.make_node("Slice", ["x", "s", "e"], ["y"], name="n")
    else:
        inits = [numpy_helper.from_array(np.array([2**40], np.int64), "c")]
        n = helper.make_node("Add", ["x", "c"], ["y"], name="n")
    return _model([n], [_vi("x", TensorProto.INT64, [4])], [_vi("y", TensorProto.INT64, [4])], inits)


def test_int64_beyond_int32_matters_only_where_clamping_changes_results():
    s = _verdict("8.6", _slice_or_add("Slice"))
    assert s.status is Status.SUPPORTED and "clamped" in s.explanation and "Slice" in s.explanation
    a = _verdict("8.6", _slice_or_add("Add"))
    assert a.status is Status.REJECTED and a.stage is Stage.RUN and a.checks == ("int64-clamped",)
    assert _verdict("10.15", _slice_or_add("Add")).status is Status.SUPPORTED


def test_reduce_axes_must_be_constant_per_the_table():
    #   x, axes(graph input or initializer) ─▶ ReduceSum ─▶ y
    def reduce(axes_is_input):
        n = helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="n")
        axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
        ins = [_vi("x"), _vi("axes", TensorProto.INT64, [1])] if axes_is_input else [_vi("x")]
        return _model([n], ins, [_vi("y", shape=None)], [] if axes_is_input else [axes], opset=18)

    v = _verdict("10.15", reduce(True))
    assert v.status is Status.REJECTED and "Axis input must resolve to a build-time constant" in v.words
    assert _verdict("10.10", reduce(True)).words.startswith(
        "Assertion failed: inputAxes.is_weights(): Axis input must be an initializer!"
    )
    assert _verdict("10.15", reduce(False)).status is Status.SUPPORTED


def test_uint8_intermediate_and_unsupported_input_types():
    #   x ─▶ Cast(to=uint8) ─▶ Cast(to=float) ─▶ y
    nodes = [
        helper.make_node("Cast", ["x"], ["u"], name="to_u8", to=TensorProto.UINT8),
        helper.make_node("Cast", ["u"], ["y"], name="back", to=F),
    ]
    m = _model(nodes, [_vi("x", shape=[4])], [_vi("y", shape=[4])])
    v = make("10.15").check(m).by_node()["to_u8"]
    assert v.status is Status.REJECTED and "UINT8 types for intermediate tensors" in v.words
    r = make("10.15").check(_one("Relu", dtype=TensorProto.INT16))
    assert r.accepted is False and any("Failed to convert ONNX date type" in m.words for m in r.errors)
    assert r.by_node()["n"].status is Status.SUPPORTED  # the input is at fault, not the Relu


def test_model_level_messages_opset_warns_unshaped_input_blocks():
    m = build("healthy_cnn")
    m.opset_import[0].version = 19
    r = make("8.2").check(m)
    assert any("opset 19" in x.explanation and x.level == "warning" for x in r.messages) and r.accepted
    r = make("10.15").check(build("dynamic_input_unshaped"))
    assert r.accepted is False and any("no shape" in x.explanation for x in r.messages)
    assert r.by_node()["/conv/Conv"].checks == ("unshaped-input-conv",)


def test_control_flow_body_with_an_unsupported_op_rejects_the_control_flow_node():
    #   cond ─▶ If(then: Unique(x) ─▶ t, else: Identity(x) ─▶ e) ─▶ y
    def branch(op, out):
        return helper.make_graph(
            [helper.make_node(op, ["x"], [out])], op, [], [helper.make_tensor_value_info(out, F, [4])]
        )

    n = helper.make_node(
        "If", ["c"], ["y"], name="n", then_branch=branch("Unique", "t"), else_branch=branch("Identity", "e")
    )
    m = _model([n], [_vi("c", TensorProto.BOOL, []), _vi("x", shape=[4])], [_vi("y", shape=[4])])
    v = _verdict("10.15", m)
    assert v.status is Status.REJECTED and v.words == "false" and v.checks == ("table-unsupported",)
    assert v.explanation.startswith("in its body, Unique")


# -- against a real 10.x-era parser ---------------------------------------------------------------------------

WORKER = """
import sys, tensorrt_rtx as trt
logger = trt.Logger(trt.Logger.ERROR)
net = trt.Builder(logger).create_network(0)
parser = trt.OnnxParser(net, logger)
ok = parser.parse(open(sys.argv[1], "rb").read())
print("OK" if ok else parser.get_error(0).desc().splitlines()[0])
"""


@pytest.mark.parametrize("name", ["unique_op", "squeeze_dynamic", "training_mode_ops", "healthy_cnn"])
def test_prediction_matches_the_tensorrt_rtx_parser(name, tmp_path):
    pytest.importorskip("tensorrt_rtx")
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(build(name).SerializeToString())
    out = subprocess.run(
        [sys.executable, "-c", WORKER, str(path)], capture_output=True, text=True, timeout=120
    )
    live = out.stdout.strip().splitlines()[-1]
    # RTX 1.7's parser has the 11.0 changes (Swish) and squeezes without axes as 11.5 does
    r = make("11.5").check(build(name))
    if live == "OK":
        assert r.accepted
    else:
        assert not r.accepted and any(live in v.words for v in r.rejected), (live, r.to_dict())


def test_qdq_zero_points_and_uint8_dequantize_as_tensorrt_rtx_builds_them():
    import onnx.parser

    def verdicts(text):
        r = make("10.15").check(onnx.parser.parse_model(text), depth=Stage.BUILD)
        return {k: v for k, v in r.by_node().items() if v.status is Status.REJECTED}

    head = '<ir_version: 8, opset_import: ["" : 13]>\n'
    # a zero point folded from constants builds (TensorRT-RTX 1.7.1); one read from a graph input does not
    folded = (
        head
        + """g (float[6] x, float s) => (float[6] y) <int8 z0 = {0}> {
        [a] z = Identity (z0)
        [n] q = QuantizeLinear (x, s, z)
        [m] y = DequantizeLinear (q, s, z)
    }"""
    )
    assert verdicts(folded) == {}
    bad = verdicts(
        folded.replace("(float[6] x, float s)", "(float[6] x, float s, int8 z)").replace(
            "[a] z = Identity (z0)", ""
        )
    )
    assert set(bad) == {"n", "m"} and all(v.stage is Stage.BUILD for v in bad.values())
    assert "IQuantizeLayer/IDequantizeLayer n has `zero_point`" in bad["n"].words
    fp8 = (
        head.replace('"" : 13', '"" : 19').replace("ir_version: 8", "ir_version: 9")
        + """g (float[6] x, float s, float8e4m3fn z) => (float[6] y) {
        [n] q = QuantizeLinear (x, s, z)
        [m] y = DequantizeLinear (q, s, z)
    }"""
    )
    assert verdicts(fp8) == {}  # an FP8 zero point from a graph input builds (the onnx node tests)
    # UINT8 dequantizes right behind a QuantizeLinear, not from an initializer
    q_dq = (
        head
        + """g (float[4] f) => (float[4] y) <float s = {0.5}, uint8 z = {0}> {
        [q] u = QuantizeLinear (f, s, z)
        [n] y = DequantizeLinear (u, s, z)
    }"""
    )
    assert verdicts(q_dq) == {}
    weights = (
        head
        + """g (float[4] f) => (float[4] y) <uint8[4] w = {1, 2, 3, 4}, float s = {0.5}, uint8 z = {0}> {
        [n] d = DequantizeLinear (w, s, z)
        [m] y = Add (d, f)
    }"""
    )
    assert set(verdicts(weights)) == {"n"} and "dq-uint8-outside-qdq" in verdicts(weights)["n"].checks


def test_the_checks_a_node_gets_are_chosen_once_per_op_type_and_are_those_that_apply():
    """_checks_for memoizes, per (static, op type), the per-node checks that look at the op: the same list for
    every node of that type, and exactly the checks the full scan over checks.yaml picks."""
    from surgery.backends.tensorrt.predictor import STATIC_FUNCS, TensorRTStaticBackend

    backend = TensorRTStaticBackend("10.15")
    for op in ("Squeeze", "Resize", "Conv", "LayerNormalization", "NoSuchOp"):
        for static in (True, False):
            want = [
                c
                for c in backend.checks
                if c.test not in ("table", "model")
                and c.func.startswith(STATIC_FUNCS) is static
                and (not c.ops or op in c.ops)
            ]
            got = backend._checks_for(static, op)
            assert got == want
            assert backend._checks_for(static, op) is got  # chosen once


def test_an_int64_constant_read_by_many_nodes_is_read_once_and_flags_each(monkeypatch):
    #   x(int64) ─▶ Add(c) ─▶ Add(c) ─▶ Add(c) ─▶ y      c = [2**40]
    import surgery.graph

    reads = []
    real = surgery.graph.beyond_int32
    monkeypatch.setattr(surgery.graph, "beyond_int32", lambda t: reads.append(t.name) or real(t))
    c = numpy_helper.from_array(np.array([2**40], np.int64), "c")
    names = ["x", "a0", "a1", "y"]
    nodes = [helper.make_node("Add", [names[k], "c"], [names[k + 1]], name=f"n{k}") for k in range(3)]
    model = _model(nodes, [_vi("x", TensorProto.INT64, [4])], [_vi("y", TensorProto.INT64, [4])], [c])
    report = make("8.6").check(model)
    assert [v.checks for v in report.verdicts] == [("int64-clamped",)] * 3
    assert reads.count("c") == 1


def test_int64_weights_are_looked_up_once_per_weight_not_per_input(monkeypatch):
    #   x(int64) ─▶ Add(c) ─▶ Add(k) ─▶ Add(c) ─▶ ... ─▶ y      c = [2**40] (beyond INT32), k = Constant [1]
    from surgery.graph import GraphFacts

    asked = []
    real = GraphFacts.weights_beyond_int32
    monkeypatch.setattr(GraphFacts, "weights_beyond_int32", lambda f, x: asked.append(x) or real(f, x))
    c = numpy_helper.from_array(np.array([2**40], np.int64), "c")
    k = helper.make_node(
        "Constant", [], ["k"], name="k", value=numpy_helper.from_array(np.array([1], np.int64))
    )
    names = ["x", *(f"a{i}" for i in range(39)), "y"]
    adds = [helper.make_node("Add", [names[i], "ck"[i % 2]], [names[i + 1]], name=f"n{i}") for i in range(40)]
    model = _model([k, *adds], [_vi("x", TensorProto.INT64, [4])], [_vi("y", TensorProto.INT64, [4])], [c])
    report = make("8.6").check(model)
    flagged = [v.node for v in report.verdicts if v.checks == ("int64-clamped",)]
    assert flagged == [f"n{i}" for i in range(0, 40, 2)]  # the ones reading c, each flagged as before
    assert sorted(asked) == ["c", "k"]  # was every input of every node: 80 lookups


def test_int64_inputs_found_from_the_weights_are_those_found_input_by_input():
    # the names found once per facts must be exactly the inputs the per-input question flags, on real models
    from surgery.backends.tensorrt.predicates import int64_out_of_int32
    from surgery.graph import GraphFacts

    big = numpy_helper.from_array(np.array([2**40, 3], np.int64))
    nodes = [
        helper.make_node("Constant", [], ["k"], value=big),  # a Constant's value: a weight
        helper.make_node(
            "Constant", [], ["z"], domain="com.x", value=big
        ),  # not a standard Constant: not one
        helper.make_node("Add", ["x", "k"], ["a"], name="n0"),
        helper.make_node("Add", ["a", "z"], ["b"], name="n1"),
        helper.make_node("Add", ["b", "c"], ["y"], name="n2"),
    ]
    c = numpy_helper.from_array(np.array([-(2**40)], np.int64), "c")
    model = _model(
        nodes,
        [_vi("x", TensorProto.INT64, [2])],
        [_vi("y", TensorProto.INT64, [2])],
        [c],
        extra_opsets=["com.x"],
    )
    for m in [model, *(build(s) for s in SAMPLES)]:
        facts = GraphFacts.of(m)
        for node in m.graph.node:
            want = [
                (i, x, numpy_helper.to_array(facts.weights_tensor(x)).reshape(-1)[:4].tolist())
                for i, x in enumerate(node.input)
                if facts.weights_beyond_int32(x).size
            ]
            assert list(int64_out_of_int32(facts, node)) == want
    facts = GraphFacts.of(model)
    assert [list(int64_out_of_int32(facts, n)) for n in model.graph.node[2:]] == [
        [(1, "k", [2**40, 3])],
        [],
        [(1, "c", [-(2**40)])],
    ]
