"""surgery.workspace: apply/undo/redo, recipe replay bit for bit, export never over the original."""

import onnx
import pytest

from surgery.model import fingerprint
from surgery.workspace import RecipeError, Step, Workspace


@pytest.fixture
def ws(sample_dir):
    return Workspace.open(sample_dir / "training_mode_ops.onnx")


def test_apply_undo_redo(ws):
    original = ws.fingerprint()
    ws.apply(Step("inference_mode"))
    fixed = ws.fingerprint()
    assert fixed != original and ws.can_undo and not ws.can_redo
    ws.undo()
    assert ws.fingerprint() == original and ws.can_redo
    ws.redo()
    assert ws.fingerprint() == fixed
    ws.undo()
    ws.apply(Step("opset_upgrade", {"target": 17}))  # a new step drops the undone one
    assert not ws.can_redo and [s.fix for s in ws.recipe] == ["opset_upgrade"]
    with pytest.raises(IndexError):
        ws.redo()


def test_recipe_replays_bit_for_bit(ws, tmp_path, sample_dir):
    ws.apply(Step("inference_mode"))
    ws.apply(Step("fold_constants"))
    ws.apply(Step("opset_upgrade", {"target": 17}))
    recipe = ws.save_recipe(tmp_path / "r.json")
    fresh = Workspace.open(sample_dir / "training_mode_ops.onnx")
    fresh.load_recipe(recipe)
    assert fresh.fingerprint() == ws.fingerprint()
    assert fingerprint(fresh.current) == fingerprint(ws.current)


def _held(ws):
    """How many model versions the workspace holds (each a whole model, weights in the file included)."""
    return len(ws._states)


@pytest.mark.parametrize("kept", [0, 1, Workspace.KEPT_STATES])
def test_a_few_states_are_held_and_the_rest_replayed_bit_for_bit(sample_dir, kept):
    """A workspace held every state, a model each: a fix of ten steps on a model with its weights in the file
    held eleven copies of them. It holds the original, the current model, the one before it and `kept` others;
    any other state asked for is replayed, the same bytes as when it was applied; undo and redo still work,
    and a state dropped has no facts or fingerprint kept (they hold the model)."""
    from surgery.graph import _FACTS, GraphFacts
    from surgery.rulebook.engine import Fingerprints

    ws = Workspace(Workspace.open(sample_dir / "healthy_cnn.onnx").original, kept_states=kept)
    prints, models = [ws.fingerprint()], [ws.current]
    seen = Fingerprints()
    for target in (14, 15, 16, 17, 18, 19):
        GraphFacts.of(ws.current)  # as the rule engine asks
        seen(ws.current)
        ws.apply(Step("opset_upgrade", {"target": target}))
        prints.append(ws.fingerprint())
        models.append(ws.current)
        assert _held(ws) <= 3 + kept
    assert _held(ws) == 3 + kept and len(set(prints)) == len(prints)
    dropped = [m for m in models if not any(m is h for h in ws._states.values())]
    assert len(dropped) == len(models) - 3 - kept
    assert not any(entry[0] is m for entry in _FACTS.values() for m in dropped)
    assert not any(entry[0] is m for entry in seen._seen.values() for m in dropped)
    for i in (2, 0, 5, 1, 6, 3):
        assert fingerprint(ws.model_at(i)) == prints[i]
        assert _held(ws) <= 3 + kept
    ws.undo()
    ws.undo()
    assert ws.fingerprint() == prints[4]
    ws.redo()
    assert ws.fingerprint() == prints[5] and _held(ws) <= 3 + kept


def test_recipe_for_another_model_is_refused(ws, tmp_path, sample_dir):
    recipe = ws.save_recipe(tmp_path / "r.json")
    other = Workspace.open(sample_dir / "healthy_cnn.onnx")
    with pytest.raises(RecipeError, match="fingerprint"):
        other.load_recipe(recipe)
    (tmp_path / "bad.json").write_text('{"format": "onnx-surgery-recipe/1", "steps": [{"params": {}}]}')
    with pytest.raises(RecipeError, match="step 1: .*'fix'"):
        other.load_recipe(tmp_path / "bad.json", check_original=False)


def test_export_never_overwrites_the_original(tmp_path, sample_dir):
    src = tmp_path / "m.onnx"
    src.write_bytes((sample_dir / "training_mode_ops.onnx").read_bytes())
    before = src.read_bytes()
    ws = Workspace.open(src)
    ws.apply(Step("inference_mode"))
    with pytest.raises(ValueError, match="refusing to overwrite"):
        ws.export(src)
    out = ws.export(tmp_path / "fixed.onnx")
    assert src.read_bytes() == before
    assert fingerprint(onnx.load(str(out))) == ws.fingerprint()


def test_export_keeps_external_data_external(tmp_path):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Dropout", ["y"], ["z"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 64])],
        [numpy_helper.from_array(np.eye(64, dtype=np.float32), "w")],
    )
    m = helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(m, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.bin", size_threshold=0)
    ws = Workspace.open(tmp_path / "m.onnx")
    ws.apply(Step("inference_mode"))
    out = ws.export(tmp_path / "out" / "fixed.onnx")
    assert (tmp_path / "out" / "fixed.onnx.data").exists()
    loaded = onnx.load(str(out))
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.graph.initializer[0]), np.eye(64))


@pytest.mark.parametrize("kept", [0, 2])
def test_after_a_replay_an_undo_replays_nothing(sample_dir, monkeypatch, kept):
    """A recipe replayed (a session restored, `replay`) keeps the state before the last one: an undo right after
    applies no step again, even in a headless workspace; the states held stay within the bound meanwhile."""
    import surgery.workspace as workspace_module

    ws = Workspace.open(sample_dir / "healthy_cnn.onnx")
    for target in (14, 15, 16, 17, 18):
        ws.apply(Step("opset_upgrade", {"target": target}))
    prints = [fingerprint(ws.model_at(i)) for i in range(6)]
    fresh = Workspace(Workspace.open(sample_dir / "healthy_cnn.onnx").original, kept_states=kept)
    held = []
    real = workspace_module.apply_step

    def counted(*args, **kwargs):
        held.append(len(fresh._states))
        return real(*args, **kwargs)

    monkeypatch.setattr(workspace_module, "apply_step", counted)
    fresh.replay(ws.recipe)
    assert len(held) == 5 and max(held) <= 3 + kept
    assert fingerprint(fresh.current) == prints[5]
    fresh.undo()
    assert len(held) == 5 and fingerprint(fresh.current) == prints[4]
