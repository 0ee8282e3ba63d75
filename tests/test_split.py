"""`split`: target parts and fallback parts that chain back to the original function (surgery.split, the CLI)."""

import contextlib
import importlib.util
import json
import tempfile

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import TensorProto, helper

from surgery import isolate
from surgery.cli import main
from surgery.diagnose import check_one
from surgery.ort import make_session
from surgery.split import SplitError, make_plan, run, seeded_feeds, verify_plan

HAS_TRT = (
    importlib.util.find_spec("tensorrt_rtx") is not None or importlib.util.find_spec("tensorrt") is not None
)
live = pytest.mark.skipif(not HAS_TRT, reason="neither tensorrt nor tensorrt_rtx is installed")
# the live parser where it is installed, and the predictor everywhere
TARGETS = [pytest.param("tensorrt", marks=live), "tensorrt-static@10.15"]

STRING_FRONT = """<ir_version: 8, opset_import: ["" : 17, "ai.onnx.ml": 3]>
front (string[N] text) => (float[N,4] y)
  <float[1,4] w = {1.0, -2.0, 3.0, -4.0}, float[4] b = {0.5, 0.25, -0.5, 1.0}, int64[1] one = {1}> {
  [norm] low = StringNormalizer <case_change_action="LOWER", locale="C"> (text)
  [enc] ids = ai.onnx.ml.LabelEncoder <keys_strings=["cat", "dog", "bird"], values_int64s=[1, 2, 3],
                                       default_int64=0> (low)
  [cast] f = Cast <to=1> (ids)
  [unsq] f2 = Unsqueeze (f, one)
  [mm] h = MatMul (f2, w)
  [add] h2 = Add (h, b)
  [relu] y = Relu (h2)
}"""

MIDDLE = """<ir_version: 8, opset_import: ["" : 17, "ai.onnx.ml": 3]>
middle (float[N,4] x) => (float[N,4] y)
  <float[4] w = {1.0, 2.0, 3.0, 4.0}, float[4] b = {0.5, 0.5, 0.5, 0.5}> {
  [r1] a1 = Relu (x)
  [m1] a2 = Mul (a1, w)
  [d1] a3 = Add (a2, b)
  [scaler] s = ai.onnx.ml.Scaler <offset=[0.1, 0.2, 0.3, 0.4], scale=[2.0, 2.0, 2.0, 2.0]> (a3)
  [sg] b1 = Sigmoid (s)
  [m2] b2 = Mul (b1, w)
  [d2] y = Add (b2, b)
}"""

HEALTHY = """<ir_version: 8, opset_import: ["" : 17]>
healthy (float[2,4] x) => (float[2,4] y) <float[4] w = {1.0, 2.0, 3.0, 4.0}> {
  a = Relu (x)
  b = Mul (a, w)
  y = Tanh (b)
}"""


def parse(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model, full_check=True)
    return model


def reference(model, feeds):
    sess = make_session(model)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


@contextlib.contextmanager
def _private_tmp(folder):
    """tempfile's folder pointed at `folder` for the block (what this process writes there; workers have their own)."""
    folder.mkdir()
    old, tempfile.tempdir = tempfile.tempdir, str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = old


@live
def test_string_front_end_goes_to_onnxruntime_and_the_numeric_body_to_the_live_parser(tmp_path):
    model = parse(STRING_FRONT)
    with _private_tmp(tmp_path / "tmp") as tmp:
        plan = make_plan(model, "tensorrt")
    # its TensorRT part was built (a plan is verified only when its parts build), and nothing of it left behind
    assert plan.parts[1].build["depth"] == "build" and plan.parts[1].build["ok"]
    isolate.shutdown()  # an idle worker's folder goes with it
    assert list(tmp.iterdir()) == []
    assert [(p.role, p.backend, p.nodes) for p in plan.parts] == [
        ("fallback", "onnxruntime", ["norm", "enc"]),
        ("target", "tensorrt", ["cast", "unsq", "mm", "add", "relu"]),
    ]
    assert [c.name for c in plan.crossings] == ["ids"] and plan.crossings[0].dtype == "INT64"
    assert plan.parts[1].check["outcome"] == "accepts" and plan.accepted
    v = plan.verification
    assert v.status == "reproduces" and v.outputs[0]["max_abs"] == 0 and v.outputs[0]["mean_rel"] == 0
    assert plan.ok and plan.on_target == 5 and plan.compute_nodes == 7
    plan.save(tmp_path)
    # the part written for TensorRT is accepted by the live parser on its own, read back from its file
    again = check_one(onnx.load(str(tmp_path / plan.parts[1].file)), "tensorrt")
    assert again.outcome.value == "accepts"
    # the chain, loaded from the folder, computes what the original computes: exactly
    feeds = {"text": np.array(["Cat", "DOG", "fish", "bird", "cat"], dtype=object)}
    got = run(tmp_path, feeds)
    assert np.array_equal(got["y"], reference(model, feeds)["y"])


@pytest.mark.parametrize("target", TARGETS)
def test_an_unsupported_node_in_the_middle_gives_three_parts_that_reproduce(target):
    model = parse(MIDDLE)
    plan = make_plan(model, target)
    assert [(p.role, p.nodes) for p in plan.parts] == [
        ("target", ["r1", "m1", "d1"]),
        ("fallback", ["scaler"]),
        ("target", ["sg", "m2", "d2"]),
    ]
    assert [(c.name, c.source, c.targets) for c in plan.crossings] == [("a3", 0, [1]), ("s", 1, [2])]
    assert plan.verification.ok and plan.verification.outputs[0]["max_abs"] == 0
    assert plan.ok
    feeds = seeded_feeds(model, seed=3)
    assert np.array_equal(run(plan, feeds)["y"], reference(model, feeds)["y"])


@pytest.mark.parametrize("target", TARGETS)
def test_a_model_supported_whole_is_one_part(target, tmp_path):
    model = parse(HEALTHY)
    plan = make_plan(model, target)
    assert len(plan.parts) == 1 and plan.parts[0].role == "target" and not plan.crossings
    assert plan.ok and plan.crossing_bytes == 0
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    assert main(["split", str(path), "-t", target, "-o", str(tmp_path / "out")]) == 0
    written = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert [p["file"] for p in written["parts"]] == [f"part0_{target.replace('@', '-')}.onnx"]


def _alternating(pattern: str) -> onnx.ModelProto:
    """A chain of Relu (supported) and Scaler (refused by TensorRT: no importer) nodes: 'T' and 'F' in order."""
    nodes, x = [], "x"
    for k, c in enumerate(pattern):
        if c == "T":
            nodes.append(helper.make_node("Relu", [x], [f"t{k}"], name=f"relu{k}"))
        else:
            nodes.append(
                helper.make_node(
                    "Scaler",
                    [x],
                    [f"t{k}"],
                    name=f"scaler{k}",
                    domain="ai.onnx.ml",
                    offset=[0.5],
                    scale=[1.5],
                )
            )
        x = f"t{k}"
    g = helper.make_graph(
        nodes,
        "alt",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 4])],
    )
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)], ir_version=8
    )


def test_min_nodes_merges_tiny_target_regions_into_the_fallback():
    model = _alternating("TTTFTFTTT")  # a one-node target region between two refused nodes
    loose = make_plan(model, "tensorrt-static@10.15", min_nodes=1)
    assert [p.role for p in loose.parts] == ["target", "fallback", "target", "fallback", "target"]
    assert len(loose.crossings) == 4
    tight = make_plan(model, "tensorrt-static@10.15", min_nodes=3)
    assert [(p.role, len(p.nodes)) for p in tight.parts] == [("target", 3), ("fallback", 3), ("target", 3)]
    assert len(tight.crossings) == 2 and tight.crossing_bytes == 2 * 2 * 4 * 4
    assert tight.on_target == 6 and tight.ok and loose.ok


def test_independent_target_regions_share_one_part_when_no_path_forbids_it():
    #   x -> relu_a -> scaler -> relu_c -> y1 ; x -> relu_b -> y2: relu_b may join either target part
    model = parse(
        """<ir_version: 8, opset_import: ["" : 17, "ai.onnx.ml": 3]>
        g (float[2,4] x) => (float[2,4] y1, float[2,4] y2) {
          [relu_a] a = Relu (x)
          [scaler] s = ai.onnx.ml.Scaler <offset=[0.5], scale=[1.5]> (a)
          [relu_c] y1 = Relu (s)
          [relu_b] y2 = Relu (x)
        }"""
    )
    plan = make_plan(model, "tensorrt-static@10.15", min_nodes=1)
    assert len(plan.parts) == 3 and sorted(len(p.nodes) for p in plan.target_parts) == [1, 2]
    assert plan.ok


@live
def test_unknown_verdicts_fall_back_and_say_so():
    # TensorRT-RTX has no NonZero plugin: the live parser cannot confirm the node, so it goes to the fallback
    model = parse(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[2,4] x) => (float[N,4] y) <float[4] w = {1.0, 2.0, 3.0, 4.0}, int64[2] sh = {-1, 4}> {
          [r1] a = Relu (x)
          [m1] b = Mul (a, w)
          [t1] c = Tanh (b)
          [nz] idx = NonZero (c)
          [cast] f = Cast <to=1> (idx)
          [rs] g2 = Reshape (f, sh)
          [m2] h = Mul (g2, w)
          [y1] y = Sigmoid (h)
        }"""
    )
    plan = make_plan(model, "tensorrt")
    roles = {k: p.role for p in plan.parts for k in p.nodes}
    assert roles["nz"] == "fallback"
    assert any("cannot confirm" in n and "NonZero 'nz'" in n for n in plan.notes), plan.notes
    assert plan.verification.ok


def test_a_split_that_does_not_reproduce_names_the_first_tensor_that_differs():
    model = parse(MIDDLE)
    plan = make_plan(model, "tensorrt-static@10.15")
    first = plan.parts[0].model
    w = next(t for t in first.graph.initializer if t.name == "w")
    w.CopyFrom(onnx.numpy_helper.from_array(np.array([1.0, 2.0, 3.0, 5.0], np.float32), "w"))
    plan._runners.clear()
    v = verify_plan(plan, model)
    assert v.status == "differs" and not v.ok
    assert v.first_difference["tensor"] == "a3" and v.first_difference["part"] == 0
    assert "first tensor that differs: 'a3' from part 0" in v.summary()


def test_external_weights_go_with_the_part_that_reads_them(tmp_path):
    model = parse(MIDDLE)
    big = np.arange(4096, dtype=np.float32).reshape(1024, 4) / 4096
    model.graph.initializer.append(onnx.numpy_helper.from_array(big, "table"))
    # y = Add(b2, b) + the mean of a weight table held in an external file
    model.graph.node[-1].output[0] = "y_pre"
    model.graph.node.extend(
        [
            helper.make_node("ReduceMean", ["table"], ["tm"], keepdims=0),
            helper.make_node("Add", ["y_pre", "tm"], ["y"], name="final"),
        ]
    )
    src = tmp_path / "src"
    src.mkdir()
    onnx.save(model, str(src / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=1024)
    from surgery.model import load_model

    loaded = load_model(src / "m.onnx")
    assert loaded.has_external_data
    plan = make_plan(loaded, "tensorrt-static@10.15")
    assert plan.ok, plan.verification.summary()
    out = tmp_path / "out"
    plan.save(out)
    last = plan.parts[-1]
    assert (out / (last.file + ".data")).exists()
    assert not any(
        (out / (p.file + ".data")).exists() for p in plan.parts[:-1]
    )  # only the part that reads it
    feeds = seeded_feeds(loaded.proto)
    expect = make_session(loaded.proto, src).run(["y"], feeds)[0]
    assert np.array_equal(run(out, feeds)["y"], expect)


def test_cli_writes_the_parts_and_plan_and_prints_json(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(parse(MIDDLE), str(path))
    out = tmp_path / "out"
    assert main(["split", str(path), "-t", "tensorrt-static@10.15", "-o", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    written = json.loads((out / "plan.json").read_text())
    assert printed["parts"] == written["parts"] and written["ok"] is True
    assert [p["backend"] for p in written["parts"]] == [
        "tensorrt-static@10.15",
        "onnxruntime",
        "tensorrt-static@10.15",
    ]
    assert written["crossing_count"] == 2
    assert [c["name"] for c in written["crossings"]] == ["a3", "s"]
    assert written["crossings"][0]["dtype"] == "FLOAT" and written["crossings"][0]["shape"] == ["N", 4]
    assert written["verification"]["status"] == "reproduces"
    for p in written["parts"]:
        onnx.checker.check_model(str(out / p["file"]), full_check=True)
    assert main(["split", str(path), "-t", "tensorrt-static@10.15", "-o", str(out)]) == 2  # never over a plan
    assert "is a folder with files in it" in capsys.readouterr().err
    assert main(["split", str(path), "-t", "tensorrt-static@10.15", "-o", str(tmp_path / "again")]) == 0
    text = capsys.readouterr().out
    assert "crossing tensors (2):" in text and "verification: reproduces" in text


# -- bad input: one clear line naming the node or tensor, exit 2, never a traceback -------------------------------


def test_no_supported_region_is_bad_input(tmp_path, capsys):
    model = parse(
        """<ir_version: 8, opset_import: ["" : 17, "ai.onnx.ml": 3]>
        g (string[N] text) => (int64[N] ids) {
          [enc] ids = ai.onnx.ml.LabelEncoder <keys_strings=["a"], values_int64s=[1], default_int64=0> (text)
        }"""
    )
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    assert main(["split", str(path), "-t", "tensorrt-static@10.15", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no supported region") and "LabelEncoder 'enc'" in err
    assert "Traceback" not in err


def test_a_boundary_tensor_without_a_dtype_is_named(tmp_path, capsys):
    # a custom op nobody can run or type sits between two supported regions
    model = parse(
        """<ir_version: 8, opset_import: ["" : 17, "my.ops": 1]>
        g (float[2,4] x) => (float[2,4] y) {
          [r1] a = Relu (x)
          [r2] a2 = Sigmoid (a)
          [r3] a3 = Tanh (a2)
          [mystery] m = my.ops.Mystery (a3)
          [r4] b = Relu (m)
          [r5] b2 = Sigmoid (b)
          [r6] y = Tanh (b2)
        }"""
    )
    with pytest.raises(SplitError, match=r"tensor 'm' \(output of Mystery 'mystery'\).*no known dtype"):
        make_plan(model, "tensorrt-static@10.15")
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    assert main(["split", str(path), "-t", "tensorrt-static@10.15", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "tensor 'm'" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def _if_model(producer: str) -> onnx.ModelProto:
    """An If whose branches read 'u' from the outer scope; 'u' comes from a node the target refuses."""
    then = helper.make_graph(
        [helper.make_node("Relu", ["u"], ["ty"])],
        "then",
        [],
        [helper.make_tensor_value_info("ty", TensorProto.FLOAT, [2, 4])],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["u"], ["ey"])],
        "else",
        [],
        [helper.make_tensor_value_info("ey", TensorProto.FLOAT, [2, 4])],
    )
    if producer == "scaler":
        make = helper.make_node(
            "Scaler", ["a3"], ["u"], name="prod", domain="ai.onnx.ml", offset=[0.5], scale=[2.0]
        )
    else:
        make = helper.make_node("Mystery", ["a3"], ["u"], name="prod", domain="my.ops")
    nodes = [
        helper.make_node("Relu", ["x"], ["a1"], name="r1"),
        helper.make_node("Sigmoid", ["a1"], ["a2"], name="r2"),
        helper.make_node("Tanh", ["a2"], ["a3"], name="r3"),
        make,
        helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0, name="mx"),
        helper.make_node("Greater", ["mx", "zero"], ["c"], name="gt"),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="branch"),
    ]
    g = helper.make_graph(
        nodes,
        "ifm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [onnx.numpy_helper.from_array(np.array(0.0, np.float32), "zero")],
    )
    opsets = [
        helper.make_opsetid("", 17),
        helper.make_opsetid("ai.onnx.ml", 3),
        helper.make_opsetid("my.ops", 1),
    ]
    return helper.make_model(g, opset_imports=opsets, ir_version=8)


def test_a_subgraph_bearing_node_on_a_boundary(tmp_path, capsys):
    # typed: the tensor its branches read from the other part becomes an input of its part, and the chain works
    plan = make_plan(_if_model("scaler"), "tensorrt-static@10.15", min_nodes=1)
    branch = next(p for p in plan.parts if "branch" in p.nodes)
    assert branch.role == "target" and "u" in branch.inputs
    assert plan.ok, plan.verification.summary()
    # untyped: the If cannot declare it, and the message names the node and the tensor
    model = _if_model("mystery")
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    assert (
        main(
            ["split", str(path), "-t", "tensorrt-static@10.15", "-o", str(tmp_path / "o"), "--min-nodes", "1"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "subgraph-bearing node: If 'branch'" in err and "tensor 'u' (output of Mystery 'prod')" in err
    assert "Traceback" not in err


def test_unknown_target_and_bad_options_are_bad_input(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(parse(HEALTHY), str(path))
    assert main(["split", str(path), "-t", "nosuch", "-o", str(tmp_path / "o")]) == 2
    assert (
        main(
            ["split", str(path), "-t", "tensorrt-static@10.15", "-o", str(tmp_path / "o"), "--fallback", "x"]
        )
        == 2
    )
    assert (
        main(
            ["split", str(path), "-t", "tensorrt-static@10.15", "-o", str(tmp_path / "o"), "--min-nodes", "0"]
        )
        == 2
    )
    assert (
        main(
            [
                "split",
                str(tmp_path / "missing.onnx"),
                "-t",
                "tensorrt-static@10.15",
                "-o",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "Traceback" not in capsys.readouterr().err


def test_the_overview_splits_for_deployment_draws_the_plan_and_offers_the_zip():
    pytest.importorskip("streamlit")
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from surgery.workspace import Workspace

    at = AppTest.from_file(
        str(Path(__file__).resolve().parent.parent / "app" / "main.py"), default_timeout=120
    )
    at.run()
    at.session_state["ws"] = Workspace.open(parse(MIDDLE).SerializeToString(), name="middle.onnx")
    at.session_state["model_name"] = "middle.onnx"
    at.session_state["targets"] = ["tensorrt-static@10.15"]
    at.switch_page("views/overview.py")
    at.run()
    assert not at.exception
    at.button(key="split-tensorrt-static@10.15").click()
    at.run()
    assert not at.exception
    assert any("Deployable" in s.value for s in at.success), [s.value for s in at.success]
    dot = at.get("graphviz_chart")[0].proto.spec
    assert "part 1: onnxruntime" in dot and "#2e9d57" in dot and "#4a78b5" in dot
    crossings = next(d.value for d in at.dataframe if "tensor" in d.value.columns)
    assert list(crossings["tensor"]) == ["a3", "s"]
    assert any("reproduces" in m.value for m in at.markdown)  # the verification line
    assert at.get("download_button"), "the parts and plan are offered as a zip"


def test_the_zip_holds_the_parts_and_the_plan():
    import io
    import zipfile

    plan = make_plan(parse(MIDDLE), "tensorrt-static@10.15")
    names = sorted(zipfile.ZipFile(io.BytesIO(plan.to_zip())).namelist())
    assert names == sorted([p.file for p in plan.parts] + ["plan.json"])


def _scan_over_nothing() -> onnx.ModelProto:
    """A Scan over an axis of length 0 (an audio front end given too few samples): onnxruntime dies of SIGFPE."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["prev", "curr"], ["next"]),
            helper.make_node("Identity", ["next"], ["out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("prev", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("curr", TensorProto.FLOAT, [2, 4]),
        ],
        [
            helper.make_tensor_value_info("next", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4]),
        ],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r1"),
        helper.make_node("Reshape", ["a", "shape"], ["xs"], name="rs"),
        helper.make_node(
            "Scan",
            ["init", "xs"],
            ["last", "outs"],
            body=body,
            num_scan_inputs=1,
            scan_input_axes=[1],
            scan_output_axes=[1],
            name="scan",
        ),
        helper.make_node("Unique", ["last"], ["u"], name="uniq"),
        helper.make_node("Sigmoid", ["u"], ["u1"], name="sg"),
        helper.make_node("Relu", ["u1"], ["u2"], name="r2"),
        helper.make_node("Tanh", ["u2"], ["y"], name="r3"),
    ]
    g = helper.make_graph(
        nodes,
        "scan0",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 0]),
            helper.make_tensor_value_info("init", TensorProto.FLOAT, [2, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M"])],
        [onnx.numpy_helper.from_array(np.array([2, -1, 4], np.int64), "shape")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_seeded_run_that_crashes_onnxruntime_is_a_failed_verification_not_a_dead_process(tmp_path, capsys):
    model = _scan_over_nothing()
    plan = make_plan(model, "tensorrt-static@10.15", min_nodes=1)
    assert plan.verification.status == "failed" and not plan.ok
    assert "SIGFPE" in plan.verification.message, plan.verification.message
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    assert (
        main(
            [
                "split",
                str(path),
                "-t",
                "tensorrt-static@10.15",
                "-o",
                str(tmp_path / "out"),
                "--min-nodes",
                "1",
            ]
        )
        == 1
    )
    assert "verification: failed" in capsys.readouterr().out


def test_inputs_too_large_at_a_size_are_never_drawn(monkeypatch):
    """runnable_feeds counts the elements a size would draw before drawing them: a model whose inputs hold more
    than the feed limit at 16 is drawn at 2 only (an export with 32 KV caches held 5.9 GiB at 512 before)."""
    import surgery.isolate
    from surgery.split import making
    from surgery.verify import RUN_FAILURE

    dims = [f"d{k}" for k in range(7)]  # 16**7 elements at 16: past the limit
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))
    drawn = []
    real = making._feeds_or_none

    def counted(proto, seed, shapes, default_dim=2):
        drawn.append(default_dim)
        return real(proto, seed, shapes, default_dim=default_dim)

    monkeypatch.setattr(making, "_feeds_or_none", counted)
    monkeypatch.setattr(surgery.isolate, "call_isolated", lambda *a, **k: f"{RUN_FAILURE}: as if it failed")
    size, feeds, runs = making.runnable_feeds(model)
    assert drawn == [2] and size == 2 and not runs and feeds["x"].shape == (2,) * 7


def test_seeded_feeds_relate_a_decoders_kv_lengths():
    """A decoder whose mask spans the past and the new tokens (its length a symbol of its own, as torch's dynamo
    exporter writes it): the mask is as long as past + new, else the original does not run and nothing verifies."""
    n = helper.make_node
    ints = helper.make_tensor
    graph = helper.make_graph(
        [
            n("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT),
            n("Unsqueeze", ["ids_f", "one"], ["a"]),
            n("Unsqueeze", ["a", "three"], ["k"]),
            n("Mul", ["k", "e"], ["new"]),
            n("Concat", ["past_key_values.0.key", "new"], ["whole"], axis=2),
            n("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT),
            n("Unsqueeze", ["mf", "one_three"], ["m4"]),
            n("Mul", ["whole", "m4"], ["y"]),
        ],
        "decoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "m"]),
            helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT, ["b", 2, "p", 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 2, "t", 4])],
        [
            ints("one", TensorProto.INT64, [1], [1]),
            ints("three", TensorProto.INT64, [1], [3]),
            ints("one_three", TensorProto.INT64, [2], [1, 3]),
            ints("e", TensorProto.FLOAT, [1, 2, 1, 4], list(range(8))),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = seeded_feeds(model)
    past, new, mask = (feeds[k].shape for k in ("past_key_values.0.key", "input_ids", "attention_mask"))
    assert mask[1] == past[2] + new[1]
    assert make_session(model).run(None, feeds)[0].shape[2] == mask[1]
