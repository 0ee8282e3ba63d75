"""A model's large float weights left in its own file (surgery.file_weights, issue 30): `fix` and `replay` hold
every version of the model without a copy of them, give the same models and the same fingerprints as a model
loaded whole, and never write the user's file."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery import file_weights
from surgery.cli import main
from surgery.model import ModelLoadError, load_model, private_copy, with_weights
from surgery.ort import run
from surgery.workspace import Step, Workspace, apply_step


def _model(opset: int = 17) -> onnx.ModelProto:
    """Conv (a 144 KiB float weight, a small bias) -> LayerNormalization, beside a 80 KiB int64 Gather index and
    a Mul of two large float constants feeding a MatMul (a constant subgraph to fold)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((64, 64, 3, 3)).astype(np.float32), "conv.w"),
        numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "conv.b"),
        numpy_helper.from_array(np.ones(8, np.float32), "ln.scale"),
        numpy_helper.from_array(np.zeros(8, np.float32), "ln.bias"),
        numpy_helper.from_array((np.arange(10_000) % 64).astype(np.int64), "idx"),
        numpy_helper.from_array(rng.standard_normal((8, 4096)).astype(np.float32), "m.a"),
        numpy_helper.from_array(np.full((8, 4096), 0.5, np.float32), "m.b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("LayerNormalization", ["c", "ln.scale", "ln.bias"], ["ln"], axis=-1, name="ln"),
        helper.make_node("Mul", ["m.a", "m.b"], ["m"], name="mul"),
        helper.make_node("MatMul", ["ln", "m"], ["y"], name="matmul"),
        helper.make_node("Gather", ["y", "idx"], ["z"], axis=3, name="gather"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", opset)])


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "model.onnx"  # the name private_copy also gives its copy
    onnx.save(_model(), str(p))
    return p


def _locations(proto):
    return {
        t.name: {e.key: e.value for e in t.external_data}.get("location")
        for t in proto.graph.initializer
        if t.data_location == TensorProto.EXTERNAL
    }


def test_large_float_weights_stay_in_the_file_and_the_model_is_the_same(path):
    whole = load_model(path)
    light = load_model(path, weights_in_file=True)
    assert _locations(light.proto) == {"conv.w": "model.onnx", "m.a": "model.onnx", "m.b": "model.onnx"}
    assert light.external == [] and not light.has_external_data  # its file only: nothing to write beside
    assert light.proto.ByteSize() < whole.proto.ByteSize() / 5
    assert light.own_file.path == path and whole.own_file is None
    assert light.fingerprint() == whole.fingerprint()
    assert with_weights(light.proto, light.base_dir) == whole.proto
    x = {"x": np.random.default_rng(1).standard_normal((1, 64, 8, 8)).astype(np.float32)}
    np.testing.assert_array_equal(run(light.proto, x, light.base_dir)["z"], run(whole.proto, x)["z"])


def test_a_changed_model_keeps_the_fingerprint_it_has_when_loaded_whole(path, tmp_path):
    results = []
    for kw in ({}, {"weights_in_file": True}):
        ws = Workspace(load_model(path, **kw), kept_states=0)
        ws.apply(Step("fold_constants"))  # reads m.a and m.b, writes their product inline
        ws.apply(Step("int64_to_int32"))  # reads idx, inline
        ws.apply(Step("mixed_precision", {"precision": "fp16", "keep": ["ln"]}))  # reads every weight in
        tensor = next(t for t in ws.model_at(2).graph.initializer if t.name == "conv.w")
        assert (tensor.data_location == TensorProto.EXTERNAL) == bool(kw)
        out = ws.export(tmp_path / f"out{len(results)}.onnx")
        results.append((ws.fingerprint(), out.read_bytes()))
    assert results[0] == results[1]  # the same fingerprint, the same file, byte for byte


def test_a_copy_for_a_backend_never_writes_the_model_file(path):
    before = path.read_bytes()
    light = load_model(path, weights_in_file=True)
    with private_copy(light.proto, light.base_dir) as copy:
        copy = Path(copy)
        assert copy.name == "model1.onnx"  # model.onnx is the user's file linked in: it holds the weights
        assert (copy.parent / "model.onnx").samefile(path)
        assert _locations(onnx.load(copy, load_external_data=False))["conv.w"] == "model.onnx"
    assert path.read_bytes() == before


def test_fix_and_replay_agree_with_a_model_loaded_whole(path, tmp_path, capsys):
    out, recipe = tmp_path / "fixed.onnx", tmp_path / "recipe.json"
    code = main(["fix", str(path), "-t", "tensorrt-static@8.2", "-o", str(out), "--recipe", str(recipe)])
    assert code == 0, capsys.readouterr().out
    data = json.loads(recipe.read_text())
    assert [s["fix"] for s in data["steps"]]  # something was applied
    assert data["original"]["fingerprint"] == load_model(path).fingerprint()
    assert data["result_fingerprint"] == load_model(out).fingerprint()
    whole = Workspace.open(path.read_bytes())  # as the app opens an upload: no file, weights inline
    whole.load_recipe(recipe)
    assert whole.fingerprint() == data["result_fingerprint"]
    assert main(["replay", str(path), str(recipe), "-o", str(tmp_path / "again.onnx")]) == 0
    assert (tmp_path / "again.onnx").read_bytes() == out.read_bytes()


def test_a_file_whose_tensors_are_already_external_is_parsed_as_it_is(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(_model(), str(p), save_as_external_data=True, location="m.bin", size_threshold=0)
    assert file_weights.strip(p.read_bytes()) is None
    model = load_model(p, weights_in_file=True)
    assert model.own_file is None and set(_locations(model.proto).values()) == {"m.bin"}


def test_a_file_changed_after_it_was_read_is_never_written_from(path, tmp_path):
    out = tmp_path / "fixed.onnx"
    ws = Workspace(load_model(path, weights_in_file=True), kept_states=0)
    ws.apply(Step("fold_constants"))
    changed = _model()
    changed.graph.initializer[0].raw_data = bytes(len(changed.graph.initializer[0].raw_data))
    onnx.save(changed, str(tmp_path / "new.onnx"))
    (tmp_path / "new.onnx").replace(path)  # as an exporter writing the model again
    with pytest.raises(ModelLoadError, match="changed on disk"):
        ws.export(out)
    assert not out.exists()


def test_split_writes_the_same_parts_as_from_a_model_loaded_whole(path, tmp_path):
    from surgery.split import make_plan

    assert (
        main(["split", str(path), "-t", "tensorrt-static@8.2", "--min-nodes", "1", "-o", str(tmp_path / "a")])
        == 0
    )
    make_plan(load_model(path), "tensorrt-static@8.2", min_nodes=1).save(tmp_path / "b")
    parts = sorted(p.name for p in (tmp_path / "b").glob("*.onnx"))
    assert len(parts) == 3 and sorted(p.name for p in (tmp_path / "a").iterdir()) == [*parts, "plan.json"]
    for name in parts:  # every weight inline, as in the original: nothing beside the parts
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_survey_fixes_the_model_with_its_weights_in_the_file(path, tmp_path):
    out = tmp_path / "survey"
    argv = ["survey", str(path.parent), "-t", "tensorrt-static@8.2", "--fix", "-o", str(out), "--no-cache"]
    assert main(argv) == 0  # refused before, accepted after its fix
    (model,) = json.loads((out / "report.json").read_text())["models"]
    fixed = model["targets"]["tensorrt-static@8.2"]["fix"]
    assert fixed["repaired"] and fixed["steps"] and fixed["verification"] == "ok"


def test_a_link_from_another_folder_is_read_whole_and_one_beside_its_file_is_not(path, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    far, near = tmp_path / "elsewhere" / "m.onnx", tmp_path / "alias.onnx"
    far.symlink_to(path)
    near.symlink_to(path.name)
    # onnxruntime refuses external data that resolves out of the model's folder: the far link's weights are parsed
    assert load_model(far, weights_in_file=True).own_file is None
    light = load_model(near, weights_in_file=True)
    assert light.own_file.path == path and set(_locations(light.proto).values()) == {"model.onnx"}
    x = {"x": np.ones((1, 64, 8, 8), np.float32)}
    np.testing.assert_array_equal(
        run(light.proto, x, light.base_dir)["z"], run(load_model(path).proto, x)["z"]
    )


def test_two_checkpoints_of_one_graph_differ_as_held(tmp_path):
    """Caches key on a model's serialization (a check's report, a probe's verdict): two files with one graph and
    one layout but other weights must not share it."""
    held = []
    for k in range(2):
        model = _model()
        model.graph.initializer[0].raw_data = bytes([k]) * len(model.graph.initializer[0].raw_data)
        (tmp_path / f"epoch{k}").mkdir()
        onnx.save(model, str(tmp_path / f"epoch{k}" / "model.onnx"))
        held.append(load_model(tmp_path / f"epoch{k}" / "model.onnx", weights_in_file=True).proto)
    assert _locations(held[0]) == _locations(held[1])
    assert held[0].SerializeToString() != held[1].SerializeToString()


def test_upgrade_fix_writes_what_a_model_loaded_whole_gives(path, tmp_path):
    from surgery.model import save_model
    from surgery.rulebook import load_rules
    from surgery.usecases.upgrade import target_id, upgrade

    out = tmp_path / "upgraded.onnx"
    argv = ["upgrade", str(path), "--from", "10.15", "--to", "8.2", "--fix", "-o", str(out)]
    assert main(argv) == 0  # LayerNormalization, newly refused by 8.2, decomposed
    ws = Workspace(load_model(path), kept_states=0)
    upgrade(ws, target_id("10.15"), target_id("8.2"), load_rules(None), fix=True)
    assert ws.recipe and out.read_bytes() == save_model(ws.current, tmp_path / "whole.onnx").read_bytes()


def test_a_model_saved_after_its_external_data_was_read_in_keeps_its_bytes(tmp_path):
    """onnx.load reads external data in and writes each tensor's data_location as DEFAULT, which onnx.save keeps:
    such a file's weights stay in it too, and the model is still the one loaded whole, byte for byte."""
    from surgery.model import model_bytes, save_model

    onnx.save(_model(), str(tmp_path / "ext.onnx"), save_as_external_data=True, location="w.bin")
    path = tmp_path / "model.onnx"
    onnx.save(onnx.load(str(tmp_path / "ext.onnx")), str(path))
    whole, light = load_model(path), load_model(path, weights_in_file=True)
    assert whole.proto.graph.initializer[0].HasField("data_location")  # written, as DEFAULT
    assert set(_locations(light.proto)) == {"conv.w", "m.a", "m.b"}
    assert light.fingerprint() == whole.fingerprint()
    ws = Workspace(light, kept_states=0)
    ws.apply(Step("int64_to_int32"))
    expected = save_model(apply_step(whole.proto, ws.recipe[0]), tmp_path / "whole.onnx").read_bytes()
    assert ws.export(tmp_path / "light.onnx").read_bytes() == expected
    assert model_bytes(ws.current, light.own_file) == expected
    assert ws.fingerprint() == load_model(tmp_path / "whole.onnx").fingerprint()


def test_fix_refuses_in_one_line_when_the_file_changes_while_it_runs(path, tmp_path, monkeypatch, capsys):
    import importlib

    use_case = importlib.import_module(
        "surgery.usecases.fix"
    )  # the module (the package names a function fix)
    real = use_case.fix

    def then_rewritten(*args, **kwargs):  # as an exporter writing the model again while the fix runs
        outcome = real(*args, **kwargs)
        onnx.save(_model(), str(tmp_path / "new.onnx"))
        (tmp_path / "new.onnx").replace(path)
        return outcome

    monkeypatch.setattr(use_case, "fix", then_rewritten)
    out = tmp_path / "fixed.onnx"
    assert main(["fix", str(path), "-t", "tensorrt-static@8.2", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "changed on disk" in err[0] and not out.exists()


def test_a_weight_a_step_moved_into_a_subgraph_is_written_inline_too(path, tmp_path):
    from surgery.model import has_external_data, model_bytes, save_model

    light = load_model(path, weights_in_file=True)
    moved = onnx.ModelProto()
    moved.CopyFrom(light.proto)
    branch = helper.make_graph(
        [], "b", [], [helper.make_tensor_value_info("conv.w", TensorProto.FLOAT, None)]
    )
    branch.initializer.append(moved.graph.initializer[0])  # still a reference into the model's file
    moved.graph.node.append(
        helper.make_node("If", ["cond"], ["o"], then_branch=branch, else_branch=branch, name="if")
    )
    for data in (
        model_bytes(moved, light.own_file),
        save_model(moved, tmp_path / "out.onnx", light.base_dir, own_file=light.own_file).read_bytes(),
    ):
        written = onnx.ModelProto.FromString(data)
        assert not has_external_data(written)
        body = written.graph.node[-1].attribute[0].g.initializer[0]
        assert body.raw_data == _model().graph.initializer[0].raw_data


def test_a_session_saved_with_the_model_whole_resumes_with_its_weights_in_the_file(path, tmp_path):
    """Sessions saved before the app left weights in the file (or by a caller that loads it whole) resume."""
    from surgery import sessions

    ws = Workspace(load_model(path))
    ws.apply(Step("fold_constants"))
    sid, root = sessions.new_id(), tmp_path / "sessions"
    sessions.save(ws, sid, name="model.onnx", root=root)
    back = sessions.load(sid, root)
    assert back.warning is None and back.workspace.original.own_file is not None
    assert back.workspace.fingerprint() == ws.fingerprint() and back.workspace.recipe == ws.recipe


def test_a_step_that_reads_every_weight_in_gives_the_model_loaded_whole(path, tmp_path):
    """onnxruntime's quantizer keeps float weights as it reads them: read back in from the file, each must have the
    form the file gives it (onnx's loader writes a data_location the file did not have)."""
    got = []
    for kw in ({}, {"weights_in_file": True}):
        ws = Workspace(load_model(path, **kw), kept_states=0)
        ws.apply(Step("quantize_int8", {"calib": "random:2"}))
        got.append((ws.fingerprint(), ws.export(tmp_path / f"q{len(got)}.onnx").read_bytes()))
    assert got[0] == got[1]
