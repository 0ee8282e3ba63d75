"""`onnx-surgery fix` on every teaching sample: the lesson's target accepts the written model, the numbers are
shown, the input is never touched; --dry-run writes nothing; a broken rule file or target is exit 2."""

import onnx
import onnx.parser
import pytest

from surgery.cli import main
from surgery.samples import lessons, sample_path

LESSONS = {x.name: x for x in lessons()}
# what a sample needs beyond --target, and the samples whose lesson is an honest refusal (exit 1)
EXTRA = {"dynamic_input_unshaped": ["--input-shape", "image:1x3x32x32"]}
REFUSED = {"int64_out_of_range": "'offset' = [5000000000]"}
# the samples whose lesson is a cut (the host runs the tail): undone without --allow-cut, exit 1 either way
CUT = {"unique_op": "output 'uniq' is gone"}


@pytest.mark.parametrize("name", sorted(LESSONS))
def test_fix_makes_the_lessons_target_accept_each_sample(name, tmp_path, capsys):
    lesson = LESSONS[name]
    src = sample_path(name)
    original = src.read_bytes()
    out = tmp_path / f"{name}.fixed.onnx"
    depth = ["--depth", lesson.depth]
    code = main(["fix", str(src), "--target", lesson.backend, "-o", str(out), *depth, *EXTRA.get(name, [])])
    text = capsys.readouterr().out
    assert src.read_bytes() == original and out.exists()
    before, after = text.split("\nsteps:\n")[0], text.split("\nafter (")[1]
    if name in REFUSED:
        assert code == 1 and REFUSED[name] in text and "not applied:" in text
        return
    if name in CUT:
        assert code == 1 and "a cut, not a repair, undone" in text and CUT[name] in text
        assert f"[{lesson.backend}]: rejects" in after and f"applied {lesson.rule} on" not in text
        code = main(["fix", str(src), "-t", lesson.backend, "-o", str(out), *depth, "--allow-cut"])
        text = capsys.readouterr().out
        assert code == 1 and f"applied {lesson.rule} on" in text and f"cut: {CUT[name]}" in text
        assert (
            "the host must now run: Unique '/post/Unique'" in text and "cut the model (--allow-cut)" in text
        )
        assert f"[{lesson.backend}]: accepts" in text.split("\nafter (")[1]
        return
    assert code == 0, text
    assert f"[{lesson.backend}]: accepts (checked to {lesson.depth}) — 0 of" in after
    if lesson.rule:
        assert f"[{lesson.backend}]: rejects" in before and f"applied {lesson.rule} on" in text
        assert "max abs" in text or "not verifiable with onnxruntime" in text
        if lesson.rule != "mmcv-deformconv-to-plugin":  # a plugin node is no ONNX op
            onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    else:
        assert "(no rule applies)" in text


def test_dry_run_writes_nothing_and_a_value_the_rule_needs_is_named(tmp_path, capsys):
    src = sample_path("dynamic_input_unshaped")
    code = main(["fix", str(src), "-t", "tensorrt-static@10.15", "--dry-run", "-o", str(tmp_path / "o.onnx")])
    text = capsys.readouterr().out
    assert code == 1 and "needs a value for 'shape'" in text and "--input-shape" in text
    assert "dry run: nothing written" in text and not (tmp_path / "o.onnx").exists()


def test_broken_rule_file_bad_target_and_bad_shape_are_exit_2(tmp_path, capsys):
    src = str(sample_path("resize_scales_chain"))
    (tmp_path / "bad.yaml").write_text(
        "id: x\ntitle: t\nwhat: w\nwhy: y\nmatch: {op: Resize}\nfix: {primitive: nope}\nsafety: exact\n"
    )
    assert main(["fix", src, "--rules", str(tmp_path), "--dry-run"]) == 2
    assert "bad.yaml:6: field 'fix.primitive': unknown primitive 'nope'" in capsys.readouterr().err
    assert main(["fix", src, "-t", "tensorrt-static@7.5", "--dry-run"]) == 2
    assert main(["fix", src, "--input-shape", "x:1x2.5", "--dry-run"]) == 2  # (1xA: a dim named A, dynamic)
    assert "expected NAME:1x3x224x224" in capsys.readouterr().err
    assert main(["fix", src]) == 2  # no -o and no --dry-run


def test_rules_folder_from_the_environment(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ONNX_SURGERY_RULES", str(tmp_path))  # an empty folder: no rules at all
    src = str(sample_path("resize_scales_chain"))
    assert main(["fix", src, "-t", "tensorrt-static@8.2", "--dry-run"]) == 1
    assert f"rules: 0 from {tmp_path}" in capsys.readouterr().out


def test_a_still_rejected_node_says_why_its_suggested_rule_did_not_match(tmp_path, capsys):
    model = onnx.parser.parse_model(
        """\
<ir_version: 8, opset_import: ["" : 13]>
k_from_a_dynamic_dim (float[n,8] x) => (float[n,m] v, int64[n,m] i) <int64[1] zero = {0}, int64[1] one = {1}> {
  [shape] s = Shape (x)
  [slice] k = Slice (s, zero, one)
  [topk] v, i = TopK (x, k)
}
"""
    )
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    assert main(["fix", str(path), "-t", "tensorrt-static@8.6", "--dry-run"]) == 1
    out = capsys.readouterr().out
    assert "fold-topk-k does not match TopK 'topk': input 1 'k' is not foldable" in out
    assert "fold-resize-scales does not match" not in out  # a rule for another op is no near miss
    assert "inline-local-functions does not match" not in out  # nor is a rule for any op


def test_an_op_no_rule_is_meant_for_says_so(tmp_path, capsys):
    model = onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 13]>
g (float[4,4] x) => (int64[2,N] i) {
  [nz] i = NonZero (x)
}
"""
    )
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    assert main(["fix", str(path), "-t", "tensorrt-static@8.2", "--dry-run"]) == 1
    out = capsys.readouterr().out
    assert "no rule answers NonZero 'nz'" in out and "inline-local-functions" not in out, out


def test_only_rejected_leaves_nodes_the_target_accepts_alone(capsys):
    src = str(sample_path("resize_scales_chain"))
    # TensorRT 10.15 reads computed Resize scales: the fold is exact but not needed, so --only-rejected skips it
    assert main(["fix", src, "-t", "tensorrt-static@10.15", "--dry-run"]) == 0
    assert "applied fold-resize-scales" in capsys.readouterr().out
    assert main(["fix", src, "-t", "tensorrt-static@10.15", "--dry-run", "--only-rejected"]) == 0
    assert "(no rule applies)" in capsys.readouterr().out
    assert main(["fix", src, "-t", "tensorrt-static@8.2", "--dry-run", "--only-rejected"]) == 0
    assert "applied fold-resize-scales" in capsys.readouterr().out


def test_input_shape_by_name_or_for_every_input(capsys):
    src = str(sample_path("dynamic_input_unshaped"))
    assert main(["fix", src, "-t", "tensorrt-static@10.15", "--dry-run", "--input-shape", "1x3x32x32"]) == 0
    assert (
        main(["fix", src, "-t", "tensorrt-static@10.15", "--dry-run", "--input-shape", "other:1x3x32x32"])
        == 1
    )
    assert "needs a value for 'shape of image'" in capsys.readouterr().out
