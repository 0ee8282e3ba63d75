"""precision (issue 31): the honest fp16 emulation, the keep-set search, the mixed_precision step and the CLI, on
models shaped like the known fp16 failures (tests/precision_models.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from precision_models import layernorm, residual_stack, softmax

from surgery.backends.precision import lower_precision
from surgery.cli import main
from surgery.emulate import Emulator
from surgery.feeds import seeded_inputs
from surgery.fixes import get_fix
from surgery.ort import run
from surgery.verify import mean_relative_error
from surgery.workspace import Workspace

FP16_MAX = float(np.finfo(np.float16).max)


def past_fp16(model) -> set[str]:
    """Names of the nodes that read or write a float32 value past float16's largest, found here with a plain
    onnxruntime run of the float32 model exposing every tensor (not through surgery.emulate)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    every = [o for n in model.graph.node for o in n.output if o not in {x.name for x in model.graph.output}]
    probe.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in every)
    values = {}
    for seed in range(2):
        for k, v in run(probe, seeded_inputs(model, seed=seed)).items():
            values[k] = max(values.get(k, 0.0), float(np.abs(v).max()))
    return {
        n.name for n in model.graph.node if any(values.get(x, 0.0) > FP16_MAX for x in [*n.input, *n.output])
    }


def numpy_fp16(model, feeds):
    """The float16 model run by onnx's reference evaluator: numpy computes each op in float16 and stores every
    result in float16 (what an fp16 engine does), so overflow shows."""
    with np.errstate(all="ignore"):
        return ReferenceEvaluator(model).run(None, feeds)[0]


def test_layernorm_overflow_shows_in_the_emulation_and_in_numpy_not_in_onnxruntime():
    m = layernorm()
    feeds = seeded_inputs(m)
    ref = run(m, feeds)["y"]
    low = lower_precision(m, "fp16")
    # the trap the issue names: onnxruntime's CPU provider computes these fp16 ops in float32
    assert mean_relative_error(ref, run(low, feeds)["y"]) < 1e-2
    honest = mean_relative_error(ref, numpy_fp16(low, feeds))
    assert honest > 0.5
    emu = Emulator(m, "fp16", [feeds])
    everything = emu.run(emu.candidates, watch=True)
    assert everything.error > 0.5
    assert everything.error == pytest.approx(honest, rel=0.2)
    origins = {emu.nodes[k].key for k in emu.overflow_origins(everything)}
    assert origins and origins <= past_fp16(m)
    assert emu.run([]).error == 0.0  # nothing reduced: the float32 model itself


def test_mixed_precision_without_keep_computes_what_lower_precision_computes():
    m = softmax(logit_scale=1.0)
    feeds = seeded_inputs(m)
    mixed = get_fix("mixed_precision")(m, precision="fp16", keep=[])
    onnx.checker.check_model(mixed, full_check=True)
    np.testing.assert_array_equal(numpy_fp16(mixed, feeds), numpy_fp16(lower_precision(m, "fp16"), feeds))


@pytest.mark.parametrize(
    "build", [layernorm, softmax, residual_stack], ids=["layernorm", "softmax", "residual"]
)
def test_precision_fp16_keeps_a_small_set_within_the_tolerance(build, tmp_path):
    m = build()
    src, out, recipe = tmp_path / "m.onnx", tmp_path / "m.fp16.onnx", tmp_path / "recipe.json"
    onnx.save(m, src)
    tolerance = 0.01
    proc = subprocess.run(
        [sys.executable, "-m", "surgery", "precision", str(src), "--fp16", "-o", str(out)]
        + ["--recipe", str(recipe), "--tolerance", str(tolerance), "--json"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["error_before"] > tolerance  # everything in fp16 fails
    assert d["error_after"] <= tolerance
    kept = {k["key"] for k in d["kept"]}
    # every node whose own output passes 65504 stays float32; the set is a small part of the graph
    outputs_past = {
        n["key"] for n in d["nodes"] if n["max_abs"] > FP16_MAX and n["kept"] and n["reason"] == "overflow"
    }
    assert outputs_past and outputs_past <= kept
    assert len(kept) <= len(m.graph.node) // 2
    assert 0.5 < d["reduced_share"] < 1.0
    # the written model: float16 where not kept, runs in onnxruntime, and numpy's float16 agrees with the emulation
    written = onnx.load(out)
    lowered = {n.name for n in written.graph.node if n.name in {x.name for x in m.graph.node}}
    assert kept <= lowered
    feeds = seeded_inputs(m, seed=0, default_dim=1)
    ref = run(m, feeds)["y"]
    assert np.isfinite(run(written, feeds)["y"]).all()
    assert mean_relative_error(ref, numpy_fp16(written, feeds)) <= 2 * tolerance
    types = {t.name: t.data_type for t in written.graph.initializer}
    assert onnx.TensorProto.FLOAT16 in types.values()
    # the step replays from its recipe to the same model
    ws = Workspace.open(str(src))
    ws.load_recipe(recipe)
    assert [s.fix for s in ws.recipe] == ["mixed_precision"]
    assert set(ws.recipe[0].params["keep"]) == kept
    assert ws.fingerprint() == Workspace.open(str(out)).fingerprint()


def test_overflowing_nodes_are_kept_and_said(tmp_path, capsys):
    m = layernorm()
    src = tmp_path / "ln.onnx"
    onnx.save(m, src)
    assert main(["precision", str(src), "--fp16", "-o", str(tmp_path / "o.onnx")]) == 0
    text = capsys.readouterr().out
    for name in past_fp16(m) - {"proj"}:  # proj reads nothing past the range: only what it writes does
        assert f"{name} [" in text and "overflow" in text
    assert "--layerPrecisions=" in text and "inf/NaN first appears at" in text


def test_bf16_range_is_wide_and_keep_is_honoured(tmp_path, capsys):
    m = layernorm()
    src = tmp_path / "ln.onnx"
    onnx.save(m, src)
    code = main(["precision", str(src), "--bf16", "--keep", "head", "-o", str(tmp_path / "o.onnx"), "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and d["within_tolerance"]
    assert [k["key"] for k in d["kept"] if k["reason"] == "asked"] == ["head"]
    assert not any(k["reason"] == "overflow" for k in d["kept"])  # nothing passes bfloat16's range


def test_int8_excludes_what_breaks_and_the_written_model_agrees(tmp_path, capsys):
    m = softmax(logit_scale=4.0)
    src = tmp_path / "sm.onnx"
    onnx.save(m, src)
    code = main(
        ["precision", str(src), "--int8", "--calib", "random:4", "--tolerance", "0.05"]
        + ["-o", str(tmp_path / "o.onnx"), "--json"]
    )
    d = json.loads(capsys.readouterr().out)
    assert code == (0 if d["within_tolerance"] else 1)
    if d["step"] is not None:
        assert d["step"]["fix"] == "quantize_int8"
        assert d["step"]["params"].get("exclude", []) == d["quantize_exclude"]
        # the emulated INT8 (Q/DQ gated per node) is what quantize --exclude writes
        assert d["int8_as_written_error"] == pytest.approx(d["error_after"], rel=1e-3, abs=1e-6)


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--keep", "nope"], "--keep names no node"),
        (["--tolerance", "-1"], "--tolerance"),
        (["--calib", "random:0"], "random"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, extra, says):
    src = tmp_path / "ln.onnx"
    onnx.save(layernorm(), src)
    out = tmp_path / "o.onnx"
    assert main(["precision", str(src), "--fp16", "-o", str(out), *extra]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and says in err[0]
    assert not out.exists()


def test_output_is_never_the_input(tmp_path):
    src = tmp_path / "ln.onnx"
    onnx.save(layernorm(), src)
    assert main(["precision", str(src), "--fp16", "-o", str(src)]) == 2


@pytest.mark.skipif(
    not __import__("importlib").util.find_spec("tensorrt_rtx"), reason="TensorRT-RTX is not installed"
)
def test_the_mixed_model_builds_strongly_typed_with_tensorrt_rtx(tmp_path):
    """TensorRT-RTX builds strongly typed, as TensorRT 11 does: the casts `precision` writes are what it honours.
    Its ahead-of-time build runs without a GPU (the engine cannot run here)."""
    from surgery.backends.base import BuildOptions
    from surgery.backends.build import build_model

    src = tmp_path / "ln.onnx"
    onnx.save(layernorm(), str(src))
    assert main(["precision", str(src), "--fp16", "-o", str(tmp_path / "mixed.onnx")]) == 0
    mixed = onnx.load(str(tmp_path / "mixed.onnx"))
    assert any(n.op_type == "Cast" for n in mixed.graph.node)
    report = build_model("tensorrt", mixed, BuildOptions(out_dir=str(tmp_path / "engine")))
    assert report.ok, report.error
    assert report.artifact and (tmp_path / "engine").is_dir()
