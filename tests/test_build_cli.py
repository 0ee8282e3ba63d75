"""`onnx-surgery build`: the results table, JSON, exit codes (0 all built, 1 any failed, 2 bad input)."""

import importlib.util
import json

import pytest

from surgery.cli import main

HAVE_TRT = bool(importlib.util.find_spec("tensorrt") or importlib.util.find_spec("tensorrt_rtx"))


def test_table_shows_each_backend_with_numbers_and_artifact(sample_dir, capsys, tmp_path):
    argv = [
        "build",
        str(sample_dir / "healthy_cnn.onnx"),
        "-b",
        "onnxruntime",
        "--runs",
        "3",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["backend", "ok", "build", "s", "median", "ms", "p90", "ms"]
    assert out.splitlines()[1].split()[:2] == ["onnxruntime", "yes"]
    assert "accuracy probs: max abs" in out and f"artifact: {tmp_path}/model.ort-optimized.onnx" in out


def test_json_and_exit_1_when_a_build_fails(sample_dir, capsys):
    assert main(["build", str(sample_dir / "deform_conv_custom.onnx"), "-b", "onnxruntime", "--json"]) == 1
    (report,) = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and "not a registered function/op" in report["error"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--profile", "bad"], "expected INPUT:MIN:OPT:MAX"),
        (["--profile", "input:1x3:1xa:1x3"], "non-negative integers"),
        (["--profile", "nope:1:1:1"], "no input 'nope'. Note: inputs: input"),
        (["--profile", "input:1x3x32x32:1x3x32x32:1x3x32"], "same rank"),
        (
            ["--profile", "input:1x3x32x32:2x3x32x32:4x3x32x32"],
            "error: profile for 'input' (1x3x32x32:2x3x32x32:4x3x32x32) contradicts the model: input 'input' is "
            "1x3x32x32, static 1 at axis 0, and the profile gives 1/2/4 (min/opt/max) there",
        ),
        (["--profile", "input:1x3x32:1x3x32:1x3x32"], "has rank 3, but input 'input' is 1x3x32x32 (rank 4)"),
        (["--tune-trials", "-1"], "--tune-trials must be 0 (untuned) or more"),
        (["-b", "tensorflow"], "no builder for tensorflow. Note: available: tensorrt"),
        (["--runs", "0"], "--runs must be at least 1"),
    ],
)
def test_bad_input_exits_2_and_says_what_would_work(sample_dir, capsys, tmp_path, extra, message):
    out = tmp_path / "out"
    assert main(["build", str(sample_dir / "healthy_cnn.onnx"), "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()  # nothing written


@pytest.mark.skipif(not HAVE_TRT, reason="neither tensorrt nor tensorrt_rtx is installed")
def test_tensorrt_refusal_suggests_a_profile_and_the_profile_builds(sample_dir, capsys):
    model = str(sample_dir / "squeeze_dynamic.onnx")
    assert main(["build", model, "-b", "tensorrt"]) == 1
    out = capsys.readouterr().out
    assert "no optimization profile has been defined" in out and "--profile features:1x1x8:4x1x8:8x1x8" in out
    assert (
        main(
            ["build", model, "-b", "tensorrt", "-b", "onnxruntime", "--profile", "features:1x1x8:4x1x8:8x1x8"]
        )
        == 0
    )


def test_all_builds_every_backend_installed_here(sample_dir, capsys):
    from surgery.cli.build_cmd import available_backends

    assert main(["build", str(sample_dir / "healthy_cnn.onnx"), "-b", "all", "--runs", "1", "--json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert [r["backend"] for r in reports] == available_backends() and "onnxruntime" in available_backends()
    assert all(r["ok"] and r["artifact"] for r in reports)


def test_a_profile_times_each_backend_at_min_opt_and_max(sample_dir, capsys):
    profile = "features:1x1x8:2x1x8:4x1x8"
    argv = ["build", str(sample_dir / "squeeze_dynamic.onnx"), "--profile", profile, "--runs", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[-6:] == ["min", "ms", "opt", "ms", "max", "ms"]
    assert "at min (features 1x1x8): median" in out and "at max (features 4x1x8): median" in out


def test_an_fp16_build_says_what_an_fp16_engine_computes_and_offers_precision(tmp_path, capsys, sample_dir):
    """onnxruntime's CPU provider computes the LayerNorm's squares in fp32 (its own fp16 error is small); the
    emulation stores every intermediate in fp16, finds the overflow, and the build offers `precision`."""
    import re

    import onnx
    from precision_models import layernorm  # tests/ is on the path (pytest's rootdir conftest)

    src = tmp_path / "ln.onnx"
    onnx.save(layernorm(), str(src))
    main(
        ["build", str(src), "--backend", "onnxruntime", "--fp16", "--out", str(tmp_path / "b"), "--runs", "1"]
    )
    out = capsys.readouterr().out
    measured = float(re.search(r"accuracy y: max abs \S+, mean rel (\S+)", out).group(1).rstrip(","))
    emulated = re.search(r"emulated fp16 engine .*: worst mean rel error (\S+); inf/NaN first at (\S+)", out)
    assert measured < 0.01 and float(emulated.group(1)) > 0.5, out
    assert f"next: onnx-surgery precision {src} --fp16 -o OUT" in out
    main(
        ["build", str(sample_dir / "healthy_cnn.onnx"), "--backend", "onnxruntime", "--fp16"]
        + ["--out", str(tmp_path / "c"), "--runs", "1"]
    )
    out = capsys.readouterr().out
    assert "emulated fp16 engine" in out and "next: onnx-surgery precision" not in out
