"""`onnx-surgery check` and `targets` with the real backends: per-node verdicts in the backends' words,
partitions, summary, exit codes, JSON and SARIF, unavailable targets, the probe cache on disk."""

import importlib.util
import json

import pytest

from surgery.backends import register
from surgery.backends.base import Availability
from surgery.backends.probe import CACHE
from surgery.cli import main
from surgery.diagnose import clear_cache

CPU = [b for b in ("onnxruntime", "openvino", "tvm") if importlib.util.find_spec(b) is not None]
NODE = "/dcn/MMCVModulatedDeformConv2d"


def _check(capsys, *argv) -> tuple[int, str]:
    code = main(["check", *map(str, argv), "--no-cache"])
    return code, capsys.readouterr().out


def test_text_names_each_rejected_node_with_reason_evidence_partitions_and_summary(sample_dir, capsys):
    targets = [x for b in [*CPU, "tensorrt-static@8.6"] for x in ("-t", b)]
    code, out = _check(capsys, sample_dir / "deform_conv_custom.onnx", *targets)
    assert code == 1
    assert (
        "| [ONNXRuntimeError] : 1 : FAIL : Fatal error: mmcv:MMCVModulatedDeformConv2d(-1) is not a " in out
    )
    assert "onnxruntime says:" in out and "why: the CPU provider has no kernel for mmcv::" in out
    assert out.count(f"'{NODE}'") == len(CPU) + 1
    assert "[probe: onnxruntime" in out and "fix: mmcv-deformconv-to-plugin" in out
    assert out.count("partitions: 2 supported region(s), 1 of 5 node(s) fall back") == len(CPU) + 1
    assert (
        out.rstrip().splitlines()[-1].startswith(f"summary: 0 of {len(CPU) + 1} target(s) accept the model")
    )


def test_accepted_model_exits_0_and_all_lists_supported_nodes(sample_dir, capsys):
    code, out = _check(capsys, sample_dir / "healthy_cnn.onnx", "-t", "onnxruntime", "--all")
    assert code == 0 and "summary: 1 of 1 target(s) accept the model" in out
    assert out.count("     ok ") == 10


def test_json_carries_verdicts_and_partitions(sample_dir, capsys):
    code, out = _check(
        capsys, sample_dir / "deform_conv_custom.onnx", "-t", "onnxruntime", "--format", "json"
    )
    (report,) = json.loads(out)["reports"]
    assert code == 1 and report["available"] and report["accepted"] is False
    assert [v["node"] for v in report["verdicts"] if v["status"] == "rejected"] == [NODE]
    assert report["partition"]["engines"] == 2 and report["partition"]["fallback_nodes"] == [NODE]


def test_sarif_has_one_result_per_rejected_node(sample_dir, capsys):
    path = sample_dir / "deform_conv_custom.onnx"
    targets = ["-t", "onnxruntime", "-t", "tensorrt-static@8.2"]
    _, out = _check(capsys, path, *targets, "--format", "json")
    rejected = [
        (v["code"], v["words"] or v["explanation"])
        for r in json.loads(out)["reports"]
        for v in r["verdicts"]
        if v["status"] == "rejected"
    ]
    code, out = _check(capsys, path, *targets, "--format", "sarif")
    sarif = json.loads(out)
    results = sarif["runs"][0]["results"]
    assert code == 1 and sarif["version"] == "2.1.0" and len(results) == len(rejected) == 2
    assert [(r["ruleId"], r["message"]["text"]) for r in results] == rejected  # code and the backend's words
    for r in results:
        (loc,) = r["locations"]
        assert loc["physicalLocation"]["artifactLocation"]["uri"] == str(path)
        assert loc["logicalLocations"][0]["name"] == NODE
    assert {rule["id"] for rule in sarif["runs"][0]["tool"]["driver"]["rules"]} == {c for c, _ in rejected}


class _Absent:
    id = label = "absent"
    version = ""

    def availability(self):
        return Availability(False, "absent not installed (pip install absent)")


def test_an_unavailable_target_is_reported_not_a_crash(sample_dir, capsys):
    register("absent", _Absent)
    code, out = _check(capsys, sample_dir / "healthy_cnn.onnx", "-t", "absent", "-t", "onnxruntime")
    assert code == 0
    assert "[absent]: unavailable — not available here: absent not installed (pip install absent)" in out
    assert "summary: 1 of 2 target(s) accept the model; unavailable: absent" in out


def test_bad_input_and_unknown_target_exit_2(tmp_path, sample_dir, capsys):
    bad = tmp_path / "x.onnx"
    bad.write_bytes(b"not a model")
    assert main(["check", str(bad)]) == 2
    assert main(["check", str(sample_dir / "healthy_cnn.onnx"), "-t", "onnxruntim"]) == 2
    assert "unknown target 'onnxruntim'. Note: available: tensorrt" in capsys.readouterr().err


def test_probe_verdicts_are_kept_on_disk_unless_no_cache(sample_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    CACHE.clear()
    clear_cache()
    model = sample_dir / "deform_conv_custom.onnx"
    main(["check", str(model), "-t", "onnxruntime", "--no-cache"])
    assert not (tmp_path / ".cache" / "onnx-surgery").exists()
    CACHE.clear()
    clear_cache()  # the report cache would answer without probing
    main(["check", str(model), "-t", "onnxruntime", "--format", "json"])
    assert (tmp_path / ".cache" / "onnx-surgery" / "probe-verdicts-v2.jsonl").stat().st_size > 0
    assert CACHE.directory is None  # the library default is restored after the command
    capsys.readouterr()


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_targets_lists_backends_versions_and_availability(fmt, capsys):
    from surgery.backends.tensorrt.records import SUPPORTED_VERSIONS

    assert main(["targets", "--format", fmt]) == 0
    out = capsys.readouterr().out
    if fmt == "json":
        data = json.loads(out)
        ids = {t["id"].split("@")[0] for t in data["targets"]}
        assert {"tensorrt", "tensorrt-static", "onnxruntime", "openvino", "tvm"} <= ids
        assert data["tensorrt_static_versions"] == list(SUPPORTED_VERSIONS)
        assert all(t["reason"] for t in data["targets"])
    else:
        assert ", ".join(SUPPORTED_VERSIONS) in out
        for backend in ("tensorrt ", "onnxruntime", "openvino", "tvm"):
            assert backend in out


def test_nodes_told_the_same_are_listed_under_the_words_and_evidence_said_once(two_quantizers, capsys):
    code, out = _check(capsys, two_quantizers, "-t", "tensorrt-static@10.15")
    assert code == 1
    group = out[out.index("rejected at parse") :]
    assert group.count("parser says (recorded from ") == 1 and "  | false" in group
    assert group.count("why: DynamicQuantizeLinear is listed as not supported (N)") == 1
    assert group.count("evidence: support table: ") == 1
    assert "- DynamicQuantizeLinear 'dql_a'\n" in group and "- DynamicQuantizeLinear 'dql_b'\n" in group


def test_a_node_a_readers_fix_also_fixes_is_shown_that_fix_in_text_and_json(tmp_path, capsys):
    """onnxruntime's dynamic quantization: the DynamicQuantizeLinear has no rule of its own; `check` suggests the
    rule that removes it (its `also_fixes`), at the reader the rule matches, in text and in JSON."""
    import onnx

    from surgery.rulebook import load_rules
    from surgery.rulebook.fixture import fixture
    from surgery.rulebook.loader import BUILTIN_DIR

    rule = next(r for r in load_rules([BUILTIN_DIR]) if r.id == "dynamic-quantization-to-float")
    path = tmp_path / "dynamic_int8.onnx"
    onnx.save(fixture(rule).model, path)
    code, out = _check(capsys, path, "-t", "tensorrt-static@10.15")
    assert code == 1
    lines = {line.split("'")[1]: line for line in out.splitlines() if line.lstrip().startswith("- ")}
    assert lines["DynamicQuantizeLinear#0"].endswith(
        "fix: dynamic-quantization-to-float (at its reader 'mm')"
    )
    assert lines["mm"].endswith("fix: dynamic-quantization-to-float, integer-matmul-conv-to-float")
    code, out = _check(capsys, path, "-t", "tensorrt-static@10.15", "--format", "json")
    verdicts = {v["node"]: v for v in json.loads(out)["reports"][0]["verdicts"]}
    assert verdicts["DynamicQuantizeLinear#0"]["rules"] == ["dynamic-quantization-to-float"]
    assert verdicts["DynamicQuantizeLinear#0"]["rules_at_reader"] == {"dynamic-quantization-to-float": "mm"}
    assert verdicts["mm"]["rules_at_reader"] == {}
