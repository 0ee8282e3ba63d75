"""What a step would do without doing it (surgery.preview, `fix --preview`), the lessons walked through by the
library (surgery.usecases.lesson.walk_through), and a step that records the node it acted on (recipes and sessions, old
sessions included)."""

import json

import onnx

from surgery import sessions
from surgery.cli import main
from surgery.model import fingerprint
from surgery.preview import preview_step
from surgery.rulebook import apply, load_rules, propose
from surgery.usecases.lesson import walk_through
from surgery.workspace import Step, Workspace, read_recipe


def test_preview_step_names_what_the_fold_removes_and_the_verdict_change_and_never_changes_the_model(
    sample_dir,
):
    model = onnx.load(str(sample_dir / "resize_scales_chain.onnx"))
    fp = fingerprint(model)
    step = Step("fold_constants", {"tensors": ["/up/Concat_1_output_0"]})
    shown = preview_step(model, step, ["tensorrt-static@8.2"])
    assert shown.refused is None and shown.added == []
    assert "/up/Concat_1" in shown.removed and "/up/Resize" not in shown.removed
    assert shown.verdict_lines() == ["TensorRT 8.2 (predicted): 1 → 0 rejected node(s)"]
    assert fingerprint(model) == fp


def test_preview_step_of_a_fix_that_refuses_is_its_words():
    model = onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 13]>
        g (float[2] x) => (float[2] y) { y = Relu (x) }"""
    )
    shown = preview_step(model, Step("delete_node", {"node": "nope"}), ["onnxruntime"])
    assert shown.removed == [] and shown.verdicts == []
    assert shown.verdict_lines()[0].startswith("the fix refuses: ") and "nope" in shown.verdict_lines()[0]


def test_fix_preview_prints_the_step_and_the_change_and_writes_nothing(sample_dir, tmp_path, capsys):
    src = sample_dir / "resize_scales_chain.onnx"
    code = main(
        ["fix", str(src), "-t", "tensorrt-static@8.2", "--preview", "--recipe", str(tmp_path / "r.json")]
    )
    out = capsys.readouterr().out
    assert code == 1  # as `check` on the model as it is: still rejected
    assert "fold-resize-scales on Resize '/up/Resize' [exact]: fold_constants(" in out
    assert "removes 8 node(s): /up/Cast, /up/Concat, /up/Concat_1" in out and "adds 0 node(s)" in out
    assert "TensorRT 8.2 (predicted): 1 → 0 rejected node(s)" in out
    assert "preview: nothing applied, nothing written" in out and "after" not in out
    assert not list(tmp_path.iterdir())


def test_a_walkthrough_applies_the_lessons_rule_and_the_node_turns_supported():
    w = walk_through("resize_scales_chain")
    assert w.error is None and w.verdict.node == "/up/Resize"
    assert w.proposal.rule.id == "fold-resize-scales" and w.applied.verification.ok
    assert len(w.before.rejected) == 1 and not w.after.rejected


def test_an_applied_step_records_its_node_in_the_recipe_and_the_session(sample_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ONNX_SURGERY_STATE_DIR", str(tmp_path / "state"))
    ws = Workspace.open(sample_dir / "resize_scales_chain.onnx")
    rules = [r for r in load_rules() if r.id == "fold-resize-scales"]
    (p,) = propose(ws.current, rules, ["tensorrt-static@8.2"])
    apply(ws, p)
    assert ws.steps[0].node == "/up/Resize"
    assert ws.steps[0] == Step(ws.steps[0].fix, ws.steps[0].params, ws.steps[0].rule, ws.steps[0].note)
    ws.save_recipe(tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["steps"][0]["node"] == "/up/Resize"
    assert read_recipe(str(tmp_path / "r.json"))[0][0].node == "/up/Resize"
    sid = sessions.new_id()
    sessions.save(ws, sid, name="m.onnx")
    assert sessions.load(sid).workspace.steps[0].node == "/up/Resize"


def test_a_session_saved_with_its_nodes_beside_the_recipe_still_gives_each_step_its_node(
    sample_dir, tmp_path
):
    root = tmp_path / "state"
    ws = Workspace.open(sample_dir / "training_mode_ops.onnx")
    ws.apply(Step("inference_mode"))
    ws.apply(Step("fold_constants"))
    sid = sessions.new_id()
    path = sessions.save(ws, sid, name="m.onnx", root=root).path
    state = json.loads(path.read_text())  # as the app wrote it before steps recorded their node
    state["extra"] = {"selected": "x", "step_nodes": ["/bn/BatchNormalization", None]}
    path.write_text(json.dumps(state))
    back = sessions.load(sid, root)
    assert [s.node for s in back.workspace.steps] == ["/bn/BatchNormalization", None]
    assert back.extra == {"selected": "x"}
    assert back.workspace.fingerprint() == ws.fingerprint()
