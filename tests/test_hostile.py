"""Hostile inputs (issue 13): each ends in one line that names the file and what is wrong, and exit code 2 from the
CLI; never a traceback, never a hang. Every hostile input is made here by a generator function (no binary blobs)."""

import json
import os
import signal

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.cli import main


def _refused(capsys, argv: list[str], *words: str) -> str:
    """Run the CLI; it must exit 2 with exactly one line on stderr holding every one of `words`."""
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.fixture
def no_hang():
    """Fail the test (rather than hang the run) when it takes over 60 s: a FIFO opened for reading blocks."""

    def stop(*_):
        raise TimeoutError("hung for 60 s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


# --- generators ---------------------------------------------------------------------------------------------


def make_external_model(folder, **entries) -> str:
    """x[1,4] @ w[4,2] -> y, with w in weights.bin beside the model; `entries` overwrite its external-data keys
    (location, offset, length) with the given text as is."""
    w = numpy_helper.from_array(np.ones((4, 2), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    path = folder / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    if entries:
        m = onnx.load(str(path), load_external_data=False)
        (tensor,) = m.graph.initializer
        have = {e.key: e for e in tensor.external_data}
        for key, value in entries.items():
            (have[key] if key in have else tensor.external_data.add(key=key)).value = value
        path.write_bytes(m.SerializeToString())
    return str(path)


def make_non_utf8_model(folder) -> str:
    """Relu 'NA\\xff\\xfeX' -> dom::'OP\\xc3X' 'n2': a node name and an op type that are not UTF-8 (ONNX is proto2,
    whose parser does not check; protobuf hands such fields over as bytes). Placeholders of the same length are
    swapped in the serialized bytes, so every length prefix stays right."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["y"], name="NAMEX"),
            helper.make_node("OPQX", ["y"], ["z"], name="n2", domain="dom"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("dom", 1)]
    data = helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()
    path = folder / "names.onnx"
    path.write_bytes(data.replace(b"NAMEX", b"NA\xff\xfeX").replace(b"OPQX", b"OP\xc3X"))
    return str(path)


# --- 1. external data: offsets and lengths that are not byte counts, a NUL in the location -------------------


@pytest.mark.parametrize(
    "entries, words",
    [
        ({"offset": "abc"}, ["offset as 'abc'", "not a byte count"]),
        ({"offset": "-64"}, ["offset as '-64'", "not a byte count"]),
        ({"length": "1e3"}, ["length as '1e3'", "not a byte count"]),
        ({"length": "9" * 5000}, ["length as '9999", "not a byte count"]),  # int() itself would refuse it
        ({"location": "weights.bin\x00.txt"}, ["holds a NUL byte", "'weights.bin\\x00.txt'"]),
    ],
)
def test_external_data_fields_that_make_no_sense_are_refused_at_load(tmp_path, capsys, entries, words):
    path = make_external_model(tmp_path, **entries)
    _refused(capsys, ["inspect", path], path, "tensor 'w'", *words)


def test_fix_refuses_a_negative_offset_before_writing_anything(tmp_path, capsys):
    path = make_external_model(tmp_path, offset="-8")
    out = tmp_path / "out.onnx"
    _refused(capsys, ["fix", path, "-o", str(out)], path, "offset as '-8'")
    assert not out.exists()


# --- 6. a directory, a FIFO or a device given as the model (a FIFO is never opened for reading) --------------


def make_fifo(path) -> str:
    os.mkfifo(path)
    return str(path)


def test_a_directory_given_as_the_model_says_so(tmp_path, capsys):
    _refused(capsys, ["inspect", str(tmp_path)], str(tmp_path), "is a directory, not an ONNX model file")


def test_a_fifo_given_as_the_model_is_refused_without_waiting_for_a_writer(tmp_path, capsys, no_hang):
    fifo = make_fifo(tmp_path / "m.onnx")
    for command in (["inspect", fifo], ["check", fifo], ["fix", fifo, "--dry-run"]):
        _refused(capsys, command, fifo, "is not a regular file (a named pipe, FIFO)")
    _refused(capsys, ["inspect", "/dev/null"], "/dev/null", "is not a regular file (a character device)")


def test_external_data_that_is_a_directory_or_a_fifo_is_not_called_missing(tmp_path, capsys, no_hang):
    path = make_external_model(tmp_path)
    (tmp_path / "weights.bin").unlink()
    make_fifo(tmp_path / "weights.bin")
    _refused(capsys, ["inspect", path], path, "'weights.bin'", "is not a regular file (a named pipe, FIFO)")
    (tmp_path / "weights.bin").unlink()
    (tmp_path / "weights.bin").mkdir()
    _refused(capsys, ["inspect", path], path, "'weights.bin'", "is a directory")


# --- 2. names and op types that are not UTF-8: JSON output writes them with \xNN escapes ---------------------


def test_names_that_are_not_utf8_are_written_as_escapes_in_json(tmp_path, capsys):
    path = make_non_utf8_model(tmp_path)
    assert main(["inspect", path, "--json"]) == 0
    ops = json.loads(capsys.readouterr().out)["op_histogram"]
    assert ops == {"Relu": 1, "dom::OP\\xc3X": 1}
    assert main(["check", path, "--format", "json", "--no-cache"]) == 1  # no kernel for dom::OP\xc3X
    (report,) = json.loads(capsys.readouterr().out)["reports"]
    assert [(v["node"], v["status"]) for v in report["verdicts"]] == [
        ("NA\\xff\\xfeX", "supported"),
        ("n2", "rejected"),
    ]
    assert main(["check", path, "--format", "sarif", "--no-cache"]) == 1
    (result,) = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    assert result["properties"]["opType"] == "OP\\xc3X"


def test_names_that_are_not_utf8_are_written_as_escapes_in_text(tmp_path, capsys):
    path = make_non_utf8_model(tmp_path)
    assert main(["check", path, "-t", "onnxruntime", "--all", "--no-cache"]) == 1
    out = capsys.readouterr().out
    # as the JSON writes it, not Python's repr of the bytes
    assert "'NA\\xff\\xfeX'" in out and "b'NA" not in out, out


def test_a_split_plan_of_a_model_with_names_that_are_not_utf8_is_json(tmp_path, capsys):
    path = make_non_utf8_model(tmp_path)
    out = tmp_path / "parts"
    code = main(["split", path, "-t", "onnxruntime", "-o", str(out), "--min-nodes", "1", "--json"])
    printed = capsys.readouterr().out
    assert code in (0, 1), printed
    plan = json.loads(printed)
    assert json.loads((out / "plan.json").read_text()) == plan

    def strings(v):
        if isinstance(v, dict):
            return [x for k, w in v.items() for x in [k, *strings(w)]]
        return (
            [x for w in v for x in strings(w)] if isinstance(v, list) else [v] if isinstance(v, str) else []
        )

    names = strings(plan)
    assert "NA\\xff\\xfeX" in names  # the node's name, escaped as everywhere else in the JSON output
    assert not any(x.startswith("b'NA") for x in names)  # not Python's repr of the bytes


# --- 3. backend chatter on stdout (onnxruntime's 'EP Error' banner) never lands in the JSON ------------------


class _Chatty:
    """onnxruntime, behind a banner printed on stdout the two ways a backend can: Python's print() (as
    onnxruntime's 'EP Error' fallback does) and a native write to file descriptor 1."""

    id = "chatty"

    def __init__(self):
        from surgery.backends import get_backend

        self.inner = get_backend("onnxruntime")
        self.label, self.version = "chatty " + self.inner.label, self.inner.version

    def availability(self):
        return self.inner.availability()

    def check(self, model, base_dir=None, depth=None):
        print("*************** EP Error ***************")
        os.write(1, b"EP Error from native code\n")
        return self.inner.check(model, base_dir, depth=depth)


def test_check_json_stdout_parses_when_a_backend_prints(sample_dir, capfd):
    from surgery.backends import register
    from surgery.diagnose import clear_cache

    register("chatty", _Chatty)
    for fmt in ("json", "sarif"):
        clear_cache()  # the backend runs (and prints) each time
        code = main(
            ["check", str(sample_dir / "healthy_cnn.onnx"), "-t", "chatty", "--format", fmt, "--no-cache"]
        )
        out, err = capfd.readouterr()
        assert code == 0 and "EP Error" not in out and json.loads(out)
        assert "EP Error ****" in err and "EP Error from native code" in err  # moved, not lost


# --- 4, 5. rule files: anchors and aliases, encodings other than UTF-8, numbers too long to read --------------


def rule_with_params(params: str) -> str:
    """The loader tests' valid rule, with `params` (YAML lines under fix.params, indented 4) added to its fix."""
    from test_rulebook_loader import GOOD

    fix = "fix:\n  primitive: fold_constants\n"
    assert fix in GOOD
    return GOOD.replace(fix, fix + "  params:\n" + params)


def alias_bomb(levels: int = 9) -> str:
    """Ten times more list items per level, each level one line: 10**9 items from under 1 KiB."""
    lines = ["    tensors: &l0 [x, x, x, x, x, x, x, x, x, x]\n"]
    for k in range(1, levels):
        lines.append(f"    l{k}: &l{k} [" + ", ".join([f"*l{k - 1}"] * 10) + "]\n")
    return rule_with_params("".join(lines))


def self_reference() -> str:
    return rule_with_params("    tensors: &me [*me]\n")


def rules_folder(tmp_path, name: str, content: str | bytes):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "r.yaml").write_bytes(content if isinstance(content, bytes) else content.encode())
    return folder


@pytest.mark.parametrize(
    "name, content, words",
    [
        ("bomb", alias_bomb(), [":10: YAML anchors and aliases (&l0) are not allowed"]),
        ("cycle", self_reference(), [":10: YAML anchors and aliases (&me) are not allowed"]),
        ("utf16", rule_with_params("").encode("utf-16"), [":1: the file is UTF-16 text", "save it as UTF-8"]),
        ("utf32", rule_with_params("").encode("utf-32"), [":1: the file is UTF-32 text"]),
        (
            "latin1",
            rule_with_params("").replace("because", "weil \u00e4").encode("latin-1"),
            [":4: not UTF-8 text (byte 0xe4 at offset"],
        ),
        (
            "bigint",
            rule_with_params("    max_bytes: " + "1" * 100_000 + "\n"),
            [":10: cannot read this value: an integer 100000 characters long"],
        ),
        (
            "bighex",  # converts without complaint, and fails later when anything prints it
            rule_with_params("    max_bytes: 0x" + "f" * 100_000 + "\n"),
            [":10: cannot read this value: an integer 100002 characters long"],
        ),
    ],
)
def test_hostile_rule_files_are_refused_in_one_line_naming_the_file(
    sample_dir, tmp_path, capsys, no_hang, name, content, words
):
    folder = rules_folder(tmp_path, name, content)
    model = str(sample_dir / "healthy_cnn.onnx")
    _refused(capsys, ["fix", model, "--dry-run", "--rules", str(folder)], str(folder / "r.yaml"), *words)


def test_a_fifo_or_a_folder_among_the_rules_is_refused_unread(sample_dir, tmp_path, capsys, no_hang):
    model = str(sample_dir / "healthy_cnn.onnx")
    make_fifo(tmp_path / "r.yaml")
    _refused(capsys, ["fix", model, "--dry-run", "--rules", str(tmp_path)], "r.yaml:1: is not a regular file")
    os.unlink(tmp_path / "r.yaml")
    (tmp_path / "r.yaml").mkdir()
    _refused(capsys, ["fix", model, "--dry-run", "--rules", str(tmp_path)], "r.yaml:1: is a directory")


def test_saved_rules_write_shared_values_out_rather_than_as_aliases(tmp_path):
    import yaml

    from surgery.rulebook.save import _NoAliases

    shared = ["$input[1]"]
    text = yaml.dump({"a": shared, "b": shared}, Dumper=_NoAliases)
    assert "&" not in text and "*" not in text


# --- 8. fix: a step that could not be verified says so in its label; --require-verified makes that exit 1 -------


def make_unrunnable_resize_chain(sample_dir, folder) -> str:
    """The Resize lesson (its scales computed by a chain an exact fold removes) with a custom op onnxruntime
    does not know after its output: no step on it can be run, so none can be verified."""
    model = onnx.load(str(sample_dir / "resize_scales_chain.onnx"))
    out = model.graph.output[0]
    model.graph.node.append(
        helper.make_node("Mystery", [out.name], ["mystery_out"], domain="acme", name="mystery")
    )
    model.graph.output.append(
        helper.make_tensor_value_info("mystery_out", out.type.tensor_type.elem_type, None)
    )
    model.opset_import.append(helper.make_opsetid("acme", 1))
    path = folder / "unrunnable.onnx"
    onnx.save(model, str(path))
    return str(path)


def test_an_exact_step_that_could_not_be_verified_is_not_labelled_exact_alone(sample_dir, tmp_path, capsys):
    path = make_unrunnable_resize_chain(sample_dir, tmp_path)
    main(["fix", path, "-t", "tensorrt-static@8.2", "--dry-run"])
    out = capsys.readouterr().out
    steps = [line for line in out.splitlines() if "applied fold-resize-scales" in line]
    assert steps and all("[exact, not verified]" in line for line in steps), out
    assert "[exact]" not in out


def test_require_verified_exits_1_where_a_step_was_not_verified(sample_dir, capsys):
    model = str(
        sample_dir / "deform_conv_custom.onnx"
    )  # its plugin swap is accepted, onnxruntime cannot run it
    argv = ["fix", model, "-t", "tensorrt-static@10.15", "--dry-run"]
    assert main(argv) == 0
    assert "[changes-semantics, not verified]" in capsys.readouterr().out
    assert main([*argv, "--require-verified"]) == 1
    out = capsys.readouterr().out
    assert "--require-verified: not verified: 1 of 1 step(s) and the fixed model against the original" in out
    # a verified fix passes the flag
    argv = ["fix", str(sample_dir / "resize_scales_chain.onnx"), "-t", "tensorrt-static@8.2", "--dry-run"]
    assert main([*argv, "--require-verified"]) == 0


# --- 7. a backend worker that dies leaves nothing in the model's folder, nor the private copy behind ----------


def write_beside_the_copy_and_crash(path: str) -> None:
    """Run in the worker in place of OpenVINO's converter: check the private copy (a 0700 folder of its own, the
    external weights reachable in it), leave a file there as a converter might, then die of SIGSEGV."""
    from pathlib import Path

    folder = Path(path).parent
    assert folder.stat().st_mode & 0o777 == 0o700, oct(folder.stat().st_mode)
    assert (folder / "weights.bin").read_bytes(), "the external weights are not reachable"
    (folder / "model.onnx.tmp").write_bytes(b"half written")
    os.kill(os.getpid(), signal.SIGSEGV)


def test_a_worker_crash_during_check_leaves_the_model_folder_as_it_was(tmp_path, capsys, monkeypatch):
    pytest.importorskip("openvino")
    import surgery.backends.openvino.check as ov
    from surgery.diagnose import clear_cache
    from surgery.isolate import call_isolated

    copies = []

    def crashing(func, path, *args, **kwargs):
        copies.append(os.path.dirname(path))
        here = os.path.dirname(os.path.abspath(__file__))
        return call_isolated(
            f"{__name__}:write_beside_the_copy_and_crash", path, env={"PYTHONPATH": here}, **kwargs
        )

    monkeypatch.setattr(ov, "call_isolated", crashing)
    clear_cache()
    folder = tmp_path / "user"
    folder.mkdir()
    model = make_external_model(folder)
    before = sorted(p.name for p in folder.iterdir())
    assert main(["check", model, "-t", "openvino", "--format", "json", "--no-cache"]) == 3
    (report,) = json.loads(capsys.readouterr().out)["reports"]
    assert {v["explanation"] for v in report["verdicts"]} == {"backend crashed: signal 11 (SIGSEGV)"}
    assert sorted(p.name for p in folder.iterdir()) == before == ["m.onnx", "weights.bin"]
    assert copies and not any(os.path.exists(c) for c in copies)  # the private copy went with the check


# --- what a command writes (issue 25): never an input, never through a link, never a folder, FIFO or device ------


def _model_and_link(tmp_path):
    from surgery.samples import sample_path

    model = tmp_path / "m.onnx"
    model.write_bytes(sample_path("resize_scales_chain").read_bytes())
    os.link(model, tmp_path / "hard.onnx")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    return model


T82 = ["-t", "tensorrt-static@8.2"]
WRITES = [
    (["fix", "{m}", *T82, "-o", "{d}/hard.onnx"], "a hard link to) the input"),
    (["fix", "{m}", *T82, "-o", "{d}/out.onnx", "--recipe", "{m}"], "is the input"),
    (["fix", "{m}", *T82, "-o", "{d}/out.onnx", "--recipe", "{d}/hard.onnx"], "a hard link to) the input"),
    (["fix", "{m}", *T82, "-o", "{d}/out.onnx", "--recipe", "{d}/folder"], "is a folder"),
    (["fix", "{m}", *T82, "-o", "{d}/out.onnx", "--recipe", "{d}/hard.onnx/r.json"], "is not a folder"),
    (["fix", "{m}", *T82, "-o", "{d}/out.onnx", "--recipe", "/proc/self/status"], "nothing can be written"),
    (["fix", "{m}", *T82, "-o", "{d}/out.onnx", "--recipe", "{d}/fifo"], "not a regular file"),
    (["fix", "{m}", *T82, "-o", "{d}/out.onnx", "--recipe", "{d}/out.onnx"], "is also -o"),
    (["quantize", "{m}", "-o", "{d}/hard.onnx", "--calib", "random:2"], "a hard link to) the input"),
    (["quantize", "{m}", "-o", "{d}/q.onnx", "--calib", "random:2", "--recipe", "{m}"], "is the input"),
    (["reduce", "{m}", *T82, "-o", "{d}/hard.onnx"], "a hard link to) the input"),
    (["reduce", "{m}", *T82, "-o", "{d}/folder"], "is a folder"),
    (["split", "{m}", *T82, "-o", "{d}/hard.onnx"], "is a file"),
    (["split", "{m}", *T82, "-o", "{d}/full"], "a folder with files in it"),
    (["split", "{m}", *T82, "-o", "{d}"], "a folder with files in it"),
]


@pytest.mark.parametrize("argv, words", WRITES, ids=[f"{a[0]}-{k}" for k, (a, _) in enumerate(WRITES)])
def test_no_command_writes_over_its_input_or_through_a_link(argv, words, tmp_path, capsys, no_hang):
    model = _model_and_link(tmp_path)
    before = model.read_bytes()
    listing = sorted(p.name for p in tmp_path.iterdir())
    _refused(capsys, [a.format(m=model, d=tmp_path) for a in argv], words)
    assert model.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == listing


def test_an_output_that_is_a_hard_link_to_another_file_is_replaced_not_written_through(tmp_path, capsys):
    model = _model_and_link(tmp_path)
    other = tmp_path / "other.bin"
    other.write_bytes(b"keep me")
    os.link(other, tmp_path / "out.onnx")
    assert (
        main(
            ["fix", str(model), *T82, "-o", str(tmp_path / "out.onnx"), "--recipe", str(tmp_path / "r.json")]
        )
        == 0
    )
    assert other.read_bytes() == b"keep me"  # the name was replaced, the other file kept
    assert (
        onnx.load(tmp_path / "out.onnx").graph.node and json.loads((tmp_path / "r.json").read_text())["steps"]
    )
    capsys.readouterr()


TOPK = """<ir_version: 8, opset_import: ["" : 13]>
g (float[10] x, int64[1] k) => (float[N] v, int64[N] i) {
  v, i = TopK (x, k)
}"""


@pytest.mark.parametrize(
    "value, words",
    [
        ("k=NaN", "not a finite number"),
        ("k=2.5", "is not a whole number"),
        ("k=99999999999999999999999", "is outside [-9223372036854775808, 9223372036854775807]"),
        ("k=" + "[" * 5000 + "1" + "]" * 5000, "nested 5000 deep"),
        ("k=true", "not a finite number"),
    ],
    ids=["nan", "fraction", "overflow", "deep", "bool"],
)
def test_a_pinned_value_the_input_cannot_hold_is_refused_in_one_line(value, words, tmp_path, capsys):
    import onnx.parser

    src = tmp_path / "topk.onnx"
    onnx.save(onnx.parser.parse_model(TOPK), src)
    _refused(capsys, ["fix", str(src), *T82, "-o", str(tmp_path / "o.onnx"), "--input-value", value], words)
    assert not (tmp_path / "o.onnx").exists()


def _cycle(tmp_path):
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
        helper.make_node("Relu", ["a"], ["b"], name="n2"),
        helper.make_node("Neg", ["a"], ["y"], name="n3"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    path = tmp_path / "cycle.onnx"
    onnx.save(helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_a_graph_with_a_cycle_is_refused_by_the_predictor_and_not_split(tmp_path, capsys):
    src = _cycle(tmp_path)
    assert main(["check", str(src), "-t", "tensorrt-static@10.15"]) == 1
    out = capsys.readouterr().out
    assert "Failed to sort the model topologically" in out and "the graph has a cycle (through n1)" in out
    _refused(
        capsys, ["split", str(src), "-t", "tensorrt-static@10.15", "-o", str(tmp_path / "p")], "has a cycle"
    )


@pytest.mark.parametrize(
    "argv, words",
    [
        (["quantize", "{m}", "-o", "{d}/q.onnx", "--calib", "random:1000000000"], "at most random:10000"),
        (["reduce", "{m}", *T82, "-o", "{d}/r.onnx", "--time-limit", "nan"], "--time-limit nan"),
        (["reduce", "{m}", *T82, "-o", "{d}/r.onnx", "--time-limit", "-1"], "above 0"),
    ],
    ids=["random-huge", "time-nan", "time-negative"],
)
def test_counts_and_limits_that_make_no_sense_are_refused(argv, words, tmp_path, capsys):
    model = _model_and_link(tmp_path)
    _refused(capsys, [a.format(m=model, d=tmp_path) for a in argv], words)


def test_calibration_data_with_nan_or_inf_is_refused(tmp_path, capsys):
    from surgery.samples import sample_path

    src = sample_path("healthy_cnn")
    model = onnx.load(src)
    name = model.graph.input[0].name
    shape = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    data = np.random.default_rng(0).standard_normal([2, *shape[1:]]).astype(np.float32)
    data[1, 0, 0, 0] = np.inf
    np.savez(tmp_path / "calib.npz", **{name: data})
    _refused(
        capsys,
        ["quantize", str(src), "-o", str(tmp_path / "q.onnx"), "--calib", str(tmp_path / "calib.npz")],
        "NaN or infinite",
    )
    assert not (tmp_path / "q.onnx").exists()


@pytest.mark.parametrize("typed", ["abc", "NaN", "-1x3x32x32", "[" * 100 + "1" + "]" * 100])
def test_the_apps_answer_box_says_what_is_wrong_in_one_line(typed):
    pytest.importorskip("streamlit")
    from test_app import run_page

    at = run_page()
    at.button(key="side-lesson-dynamic_input_unshaped").click()
    at.run()
    at.session_state["selected"] = "/conv/Conv"
    at.run()
    at.text_input(key="ask-freeze-unshaped-input").input(typed)
    at.run()
    assert not at.exception
    assert any("is not a shape" in e.value or "negative" in e.value for e in at.error), [
        e.value for e in at.error
    ]
    assert not [b for b in at.button if b.key == "apply-freeze-unshaped-input"]  # nothing to apply yet
    assert at.session_state["ws"].recipe == []


@pytest.mark.parametrize(
    "shape, words",
    [
        ("nope:1x3x8x8", "names 'nope', which the model does not take"),
        ("X:1x2000000000", "2,000,000,000 elements"),
    ],
    ids=["no-such-input", "huge"],
)
def test_split_refuses_a_shape_it_cannot_use(shape, words, tmp_path, capsys):
    model = _model_and_link(tmp_path)
    argv = ["split", str(model), *T82, "-o", str(tmp_path / "plan"), "--input-shape", shape]
    _refused(capsys, argv, words)
    assert not (tmp_path / "plan").exists()


# --- replay (issue 25): recipes replay from the CLI, a hostile recipe is one line -------------------------------


def test_replay_gives_the_fixed_model_bit_for_bit_and_refuses_another_model(tmp_path, capsys):
    model = _model_and_link(tmp_path)
    recipe = tmp_path / "r.json"
    assert main(["fix", str(model), *T82, "-o", str(tmp_path / "f1.onnx"), "--recipe", str(recipe)]) == 0
    capsys.readouterr()
    assert main(["replay", str(model), str(recipe), "-o", str(tmp_path / "f2.onnx"), *T82]) == 0
    out = capsys.readouterr().out
    assert "the recipe's result, bit for bit" in out and "accepts" in out
    assert (tmp_path / "f1.onnx").read_bytes() == (tmp_path / "f2.onnx").read_bytes()
    from surgery.samples import sample_path

    other = sample_path("healthy_cnn")
    _refused(capsys, ["replay", str(other), str(recipe), "-o", str(tmp_path / "f3.onnx")], "made for a model")
    assert not (tmp_path / "f3.onnx").exists()


def _recipes(d):
    (d / "deep.json").write_text(
        '{"format": "onnx-surgery-recipe/1", "steps": ' + "[" * 5000 + "]" * 5000 + "}"
    )
    (d / "utf16.json").write_bytes('{"format": 1}'.encode("utf-16"))
    (d / "alias.yaml").write_text("format: onnx-surgery-recipe/1\na: &a [1, 2]\nsteps: *a\n")
    (d / "steps.json").write_text('{"format": "onnx-surgery-recipe/1", "steps": 5}')
    (d / "step.json").write_text('{"format": "onnx-surgery-recipe/1", "steps": [{"fix": ["x"]}]}')
    (d / "many.json").write_text(
        '{"format": "onnx-surgery-recipe/1", "steps": ['
        + ",".join(['{"fix": "inference_mode"}'] * 10001)
        + "]}"
    )


@pytest.mark.parametrize(
    "name, words",
    [
        ("folder", "is a directory"),
        ("fifo", "not a regular file"),
        ("/proc/self/status", "not an onnx-surgery recipe"),
        ("deep.json", "nested deeper than 32"),
        ("utf16.json", "not UTF-8"),
        ("alias.yaml", "anchors and aliases"),
        ("steps.json", "'steps' must be a list"),
        ("step.json", "step 1:"),
        ("many.json", "at most 10,000"),
        ("missing.json", "no such file"),
    ],
)
def test_a_hostile_recipe_is_one_line_and_writes_nothing(name, words, tmp_path, capsys, no_hang):
    model = _model_and_link(tmp_path)
    _recipes(tmp_path)
    recipe = name if name.startswith("/") else str(tmp_path / name)
    _refused(capsys, ["replay", str(model), recipe, "-o", str(tmp_path / "out.onnx")], words)
    assert not (tmp_path / "out.onnx").exists()


def test_outputs_in_folders_that_do_not_exist_yet_are_written_there(tmp_path, capsys):
    model = _model_and_link(tmp_path)
    out, recipe = tmp_path / "new" / "f.onnx", tmp_path / "other" / "deep" / "r.json"
    assert main(["fix", str(model), *T82, "-o", str(out), "--recipe", str(recipe)]) == 0
    assert out.exists() and recipe.exists()
    capsys.readouterr()


def _shared_dim_model(folder) -> str:
    """a[N, 3] + b[N, 3] -> y: two inputs that share the symbolic batch dim N."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"], name="add")],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 3]) for n in ("a", "b")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
    )
    path = folder / "shared.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return str(path)


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt"])
@pytest.mark.parametrize(
    "profiles, words",
    [
        (["a:1x3:4x3:8x3", "b:2x3:4x3:16x3"], "dim 'N' is 2/4/16 (min/opt/max) at axis 0 of 'b' but 1/4/8"),
        (["a:1x3:4x3:8x3", "a:2x3:4x3:8x3"], "input 'a' has a profile already"),
    ],
    ids=["shared-dim-contradicts", "duplicate"],
)
def test_profiles_that_contradict_each_other_are_refused_on_every_target(
    profiles, words, target, tmp_path, capsys
):
    model = _shared_dim_model(tmp_path)
    argv = ["build", model, "--backend", target, "--out", str(tmp_path / "out")]
    for p in profiles:
        argv += ["--profile", p]
    _refused(capsys, argv, words)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("size", ["2XB", "-5MiB", "0", "GiB", "1e9"])
def test_an_upload_limit_that_is_not_a_size_is_refused_before_the_server_starts(size, capsys):
    _refused(capsys, ["app", f"--upload-limit={size}"], f"--upload-limit '{size}'")


def test_upload_limits_count_the_units_users_write():
    from surgery.specs import parse_size

    assert parse_size("2MB") == 2_000_000 < parse_size("2MiB") == 2 * 1024**2 == parse_size("2")
    assert parse_size("1.5 GiB") == 3 << 29 and parse_size("500mb") == 500 * 10**6


def test_quantize_refuses_what_its_quantizer_cannot_read_before_any_work(tmp_path, capsys):
    cyclic = tmp_path / "cycle.onnx"
    onnx.save(
        onnx.parser.parse_model(
            '<ir_version: 8, opset_import: ["" : 17]>\ng (float[2] x) => (float[2] y) {\n  a = Add (x, y)\n'
            "  y = Relu (a)\n}"
        ),
        str(cyclic),
    )
    for model, words in (
        (cyclic, "has a cycle (through node"),
        (make_non_utf8_model(tmp_path), "is not UTF-8 text"),
    ):
        _refused(
            capsys, ["quantize", str(model), "-o", str(tmp_path / "q.onnx"), "--calib", "random:2"], words
        )
        assert not (tmp_path / "q.onnx").exists()


def test_a_declared_input_too_big_to_generate_is_refused_not_drawn(tmp_path, capsys):
    """1x2,000,000,000 floats (8 GB) hung quantize and build while numpy drew them: refused in one line."""
    huge = tmp_path / "huge.onnx"
    onnx.save(
        onnx.parser.parse_model(
            '<ir_version: 8, opset_import: ["" : 17]>\n'
            "g (float[1, 2000000000] x) => (float[1, 2000000000] y) {\n  y = Relu (x)\n}"
        ),
        str(huge),
    )
    words = "input 'x' is 1x2000000000: 2,000,000,000 elements"
    _refused(capsys, ["quantize", str(huge), "-o", str(tmp_path / "q.onnx"), "--calib", "random:2"], words)
    assert (
        main(["build", str(huge), "--backend", "onnxruntime", "--out", str(tmp_path / "b"), "--runs", "1"])
        == 0
    )
    assert "built, but not measured" in capsys.readouterr().out


def test_an_unknown_lesson_is_refused_before_the_server_starts(capsys):
    _refused(capsys, ["app", "--lesson", "nope"], "--lesson 'nope': no such lesson", "resize_scales_chain")


def test_names_that_are_not_utf8_are_refused_by_precision_and_escaped_by_survey(tmp_path, capsys):
    model = make_non_utf8_model(tmp_path)
    _refused(capsys, ["precision", model, "--fp16", "-o", str(tmp_path / "p.onnx")], "is not UTF-8 text")
    argv = ["survey", model, "-t", "tensorrt-static@10.15", "-o", str(tmp_path / "s"), "--no-cache"]
    assert main([*argv, "--format", "json"]) in (0, 1)
    report = json.loads(capsys.readouterr().out)
    cell = report["models"][0]["targets"]["tensorrt-static@10.15"]
    assert "OP\\xc3X" in cell["reasons"][0]["op_types"]  # the op type, its byte escaped
    assert (tmp_path / "s" / "report.html").read_text().count("OP\\xc3X") >= 1


@pytest.mark.parametrize(
    "command", ["inspect", "check", "fix", "build", "quantize", "precision", "upgrade", "split"]
)
def test_every_command_that_reads_a_model_takes_the_same_size_limit(command, tmp_path, capsys):
    from surgery.samples import sample_path

    extra = {
        "fix": ["-o", str(tmp_path / "o.onnx")],
        "build": ["--out", str(tmp_path / "b")],
        "quantize": ["-o", str(tmp_path / "q.onnx"), "--calib", "random:2"],
        "precision": ["--fp16", "-o", str(tmp_path / "p.onnx")],
        "upgrade": ["--from", "10.15", "--to", "11.5"],
        "split": ["-t", "tensorrt-static@10.15", "-o", str(tmp_path / "s")],
    }.get(command, [])
    model = str(sample_path("healthy_cnn"))
    _refused(capsys, [command, model, "--max-bytes", "100", *extra], "over the limit of 100 B (100 bytes)")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
