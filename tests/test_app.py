"""AppTest for every page: it renders without an exception and shows what the page is for."""

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from markdown_shown import shown  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

MAIN = str(Path(__file__).resolve().parent.parent / "app" / "main.py")


def run_page(page: str | None = None, **state) -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.run()
    for k, v in state.items():
        at.session_state[k] = v
    if page:
        at.switch_page(page)
        at.run()
    assert not at.exception, at.exception
    return at


def test_workbench_opens_on_the_healthy_sample_with_lessons_listed():
    at = run_page()
    assert at.session_state["model_name"] == "healthy_cnn.onnx"
    assert any("accepts the model" in s.value for s in at.success)
    lesson_buttons = [b for b in at.button if b.key and b.key.startswith("side-lesson-")]
    assert len(lesson_buttons) >= 8


def test_selecting_a_node_shows_the_inspector():
    at = run_page()
    at.session_state["selected"] = "/conv1/Conv"
    at.run()
    assert not at.exception
    assert any("Conv" in h.value and "/conv1/Conv" in h.value for h in at.subheader)


def test_server_paths_only_under_the_models_folder_and_bad_files_get_one_line(tmp_path, monkeypatch):
    models = tmp_path / "models"
    models.mkdir()
    (models / "broken.onnx").write_bytes(b"\x00\x01 definitely not onnx")
    (tmp_path / "outside.onnx").write_bytes(b"x")
    monkeypatch.setenv("ONNX_SURGERY_MODELS_DIR", str(models))
    at = run_page()
    at.text_input(key="server_path").input(str(tmp_path / "outside.onnx"))
    at.run()
    at.button(key="open_path").click()
    at.run()
    errors = [shown(e.value) for e in at.error]
    assert any("refused — only files under" in e for e in errors), errors
    at.text_input(key="server_path").input(str(models / "broken.onnx"))
    at.run()
    at.button(key="open_path").click()
    at.run()
    errors = [shown(e.value) for e in at.error]
    assert any("broken.onnx: not an ONNX model" in e and "\n" not in e for e in errors), errors
    assert at.session_state["model_name"] == "healthy_cnn.onnx"  # the open model is kept


def test_lesson_button_opens_the_broken_model_with_its_node_selected():
    at = run_page()
    at.button(key="side-lesson-ml_scaler").click()
    at.run()
    assert not at.exception
    assert at.session_state["model_name"] == "ml_scaler.onnx"
    assert at.session_state["selected"] == "/prep/Scaler"


PAGES = {
    "views/overview.py": "Overview",
    "views/lessons.py": "Lessons",
    "views/rules.py": "Rules",
    "views/backends.py": "Backends",
    "views/build.py": "Test build",
    "views/precision.py": "Precision",
    "views/survey.py": "Survey",
}


@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_renders(page):
    at = run_page(page)
    assert at.title[0].value == PAGES[page]


def test_build_page_builds_on_onnxruntime_and_shows_numbers():
    at = run_page("views/build.py")
    at.multiselect(key="build_backends").set_value(["onnxruntime"])
    at.number_input(key="build_runs").set_value(3)
    at.button(key="build_go").click()
    at.run()
    assert not at.exception
    assert any("onnxruntime" in s.value and "built" in s.value for s in at.success)
    assert at.dataframe[0].value.loc["onnxruntime", "worst mean rel error"] < 1e-6
    assert at.dataframe[0].value.loc["onnxruntime", "timed runs"] <= 3
    # the engine to download lies in the session's own folder; the next Build empties it, leaving nothing behind
    first = Path(at.session_state["build_artifacts"])
    assert [p.name for p in first.iterdir()] == ["model.ort-optimized.onnx"]
    at.button(key="build_go").click()
    at.run()
    assert not first.exists() and Path(at.session_state["build_artifacts"]).is_dir()
    at.selectbox(key="build_precision").set_value("fp16")
    at.run()
    assert not at.exception, at.exception  # fp16 offers the Precision page (st.page_link) beside the build


def test_apply_undo_redo_through_the_workbench():
    at = run_page()
    at.session_state["targets"] = ["onnxruntime"]
    at.button(key="side-lesson-ml_scaler").click()
    at.run()
    apply = [b for b in at.button if b.key == "apply-ml-scaler-decompose"]
    assert apply, [b.key for b in at.button]
    at.toggle(key="preview-ml-scaler-decompose").set_value(True)
    at.run()
    assert any("removes 1 node(s): `/prep/Scaler`" in m.value for m in at.markdown)
    assert any("1 → 0 rejected" in c.value for c in at.caption)
    apply = [b for b in at.button if b.key == "apply-ml-scaler-decompose"]
    apply[0].click()
    at.run()
    assert not at.exception
    ws = at.session_state["ws"]
    assert [s.rule for s in ws.recipe] == ["ml-scaler-decompose"]
    assert any("verified" in s.value for s in at.success)
    step_line = [shown(c.value) for c in at.caption if shown(c.value).startswith("✓ ")]
    assert step_line and "mean rel" in step_line[0], step_line  # the step's own numbers, under it
    at.button(key="undo").click()
    at.run()
    assert at.session_state["ws"].cursor == 0
    at.button(key="redo").click()
    at.run()
    assert at.session_state["ws"].cursor == 1


def test_next_rejected_selects_the_node_the_target_rejects():
    at = run_page()
    at.button(key="side-lesson-resize_scales_chain").click()
    at.run()
    at.session_state["selected"] = None
    at.run()
    at.button(key="next_rejected").click()
    at.run()
    assert at.session_state["selected"] == "/up/Resize"
    assert any("Resize scales must be an initializer" in c.value for c in at.code)


def test_a_start_model_spoiled_after_the_command_checked_it_is_said_in_one_line(tmp_path, monkeypatch):
    """`onnx-surgery app MODEL` refuses a bad file before the server starts; a file spoiled since is said on the
    page (the default sample opens instead), not dropped silently."""
    path = tmp_path / "spoiled.onnx"
    path.write_bytes(b"\x00\x01 definitely not onnx")
    monkeypatch.setenv("ONNX_SURGERY_START_MODEL", str(path))
    at = run_page()
    errors = [shown(e.value) for e in at.error]
    assert any("spoiled.onnx: not an ONNX model" in e and "\n" not in e for e in errors), errors
    assert at.session_state["model_name"] == "healthy_cnn.onnx"


def test_a_big_model_opens_collapsed_and_its_groups_open(tmp_path, monkeypatch):
    import onnx
    from test_view import scoped_chain

    path = tmp_path / "big.onnx"
    onnx.save(scoped_chain(500), path)  # 2000 nodes in 50 stages
    monkeypatch.setenv("ONNX_SURGERY_START_MODEL", str(path))
    at = run_page(targets=["tensorrt-static@10.15"])
    assert at.session_state["model_name"] == "big.onnx"
    assert any("2000 nodes collapsed into" in c.value for c in at.caption), [c.value for c in at.caption]
    at.session_state["scopes"] = ["/stage3"]
    at.run()
    assert any("40 of 2000 nodes: /stage3" in c.value for c in at.caption), [c.value for c in at.caption]
    at.button(key="unscope").click()
    at.run()
    assert any("collapsed into" in c.value for c in at.caption)


def test_a_model_with_heavy_weights_is_checked_by_onnxruntime_in_a_worker(tmp_path, monkeypatch):
    """Over CHECK_IN_WORKER_OVER bytes of weights, onnxruntime's check (a session holds every weight) runs in a
    worker process: the verdicts come in while this process's own check would fail."""
    import onnx
    from test_browser import generated

    from surgery.backends.onnxruntime.check import OnnxRuntimeBackend

    path = tmp_path / "heavy.onnx"
    onnx.save(generated(3, custom_in="/stage0/block1/Relu"), path)  # a model no other test checks
    monkeypatch.setenv("ONNX_SURGERY_START_MODEL", str(path))
    monkeypatch.syspath_prepend(str(Path(MAIN).parent))
    import checks  # the module the pages import

    monkeypatch.setattr(checks, "CHECK_IN_WORKER_OVER", 0)

    def not_here(*args, **kwargs):
        raise AssertionError("checked in the server")

    monkeypatch.setattr(OnnxRuntimeBackend, "check", not_here)
    from surgery import isolate

    sent, real = [], isolate.call_isolated

    def recorded(target, source, *args, **kwargs):
        if target == "surgery.diagnose:checked_here":
            sent.append(source)
        return real(target, source, *args, **kwargs)

    monkeypatch.setattr(isolate, "call_isolated", recorded)
    at = run_page(targets=["onnxruntime"])
    assert at.session_state["model_name"] == "heavy.onnx"
    assert any("onnxruntime" in e.value and "rejects 1 of 12 node(s)" in e.value for e in at.error), [
        e.value for e in at.error
    ]
    # the file as it was read: the worker reads it, the server sends no copy of the model
    assert sent == [str(path.resolve())]


def test_in_a_browser_the_checks_wait_for_the_drawing_or_a_few_seconds(tmp_path, monkeypatch):
    """Draw first: a page in a browser starts its checks when the graph reports its drawing (their reruns would
    hold it up); without a report, after CHECKS_WAIT_FOR_DRAWING_S."""
    import time

    import onnx
    from test_browser import generated

    path = tmp_path / "waits.onnx"
    onnx.save(generated(2), path)  # a model no other test checks
    monkeypatch.setenv("ONNX_SURGERY_START_MODEL", str(path))
    monkeypatch.syspath_prepend(str(Path(MAIN).parent))
    import checks

    monkeypatch.setattr(checks, "browser_attached", lambda: True)  # AppTest has no browser: as if it had one
    monkeypatch.setattr(checks, "CHECKS_WAIT_FOR_DRAWING_S", 1.0)
    at = run_page(targets=["tensorrt-static@10.15"])
    at.run()
    assert not at.success and not at.error  # no verdicts: the drawing was not reported
    time.sleep(1.2)
    at.run()
    at.run()
    assert any("accepts the model" in m.value for m in at.success), [m.value for m in at.success]


def test_a_lesson_is_walked_through_to_the_numbers():
    at = run_page("views/lessons.py")
    at.button(key="walk-resize_scales_chain").click()
    at.run()
    assert not at.exception
    steps = [m.value for m in at.markdown if m.value.startswith("**")]
    assert any(s.startswith("**2. The red node** `/up/Resize`") for s in steps)
    assert any("rejected at parse" in m.value for m in at.markdown)
    assert any("Resize scales must be an initializer!" in c.value for c in at.code)  # the parser's words
    assert any(s.startswith("**4. It turns supported**") for s in steps)
    assert any(s.value.startswith("verified (exact") for s in at.success)


def test_overview_shows_reasons_and_partitions():
    at = run_page()
    at.button(key="side-lesson-resize_scales_chain").click()
    at.run()
    at.switch_page("views/overview.py")
    at.run()
    assert not at.exception
    assert any("Resize scales must be an initializer" in e.label for e in at.expander)
    # each reason once on the page: in its expander with its nodes, not also under the outcome banner
    assert not [c.value for c in at.caption if "Resize scales must be an initializer" in c.value]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["nodes falling back"] == "1"
    assert int(metrics["engines (supported regions)"]) >= 1


def test_a_rule_that_asks_for_a_shape_gets_it_from_the_inspector():
    at = run_page()
    at.button(key="side-lesson-dynamic_input_unshaped").click()
    at.run()
    at.session_state["selected"] = "/conv/Conv"
    at.run()
    at.text_input(key="ask-freeze-unshaped-input").input("1x3x32x32")
    at.run()
    at.button(key="apply-freeze-unshaped-input").click()
    at.run()
    assert not at.exception
    ws = at.session_state["ws"]
    assert [s.rule for s in ws.recipe] == ["freeze-unshaped-input"]
    dims = [d.dim_value for d in ws.current.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, 32, 32]


def test_save_as_rule_writes_to_the_user_folder_and_the_rules_page_lists_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNX_SURGERY_USER_RULES", str(tmp_path / "mine"))
    at = run_page(targets=["tensorrt-static@10.15"])
    at.button(key="side-lesson-ml_scaler").click()
    at.run()
    at.button(key="apply-ml-scaler-decompose").click()
    at.run()
    at.toggle(key="save_rule-1").set_value(True)  # the draft first: what it would write and match, unwritten
    at.run()
    assert not at.exception, at.exception
    said = [shown(c.value) for c in at.caption]
    assert "decompose-scaler.yaml: matches 1 node(s) here: /prep/Scaler" in said, said
    assert any("title: Decompose Scaler into standard ops" in c.value for c in at.code)
    assert not (tmp_path / "mine").exists()
    at.button(key="save_rule_now-1").click()
    at.run()
    assert not at.exception
    saved = list((tmp_path / "mine").glob("*.y*ml"))
    assert len(saved) == 1
    at.switch_page("views/rules.py")
    at.run()
    assert any(e.label.startswith("⭐ ") for e in at.expander)


def test_backends_page_says_which_backends_run_here():
    at = run_page("views/backends.py")
    table = at.dataframe[0].value
    row = table[table["target"] == "onnxruntime"].iloc[0]
    assert row["available"] == "yes"
    assert (table["details"].str.len() > 0).all()


def test_search_selects_a_node_and_focus_draws_its_neighbourhood():
    at = run_page()
    at.button(key="side-lesson-resize_scales_chain").click()
    at.run()
    at.session_state["selected"] = None
    at.run()
    at.text_input(key="search").input("unsqueeze")
    at.run()
    hits = at.selectbox(key="search_hit")
    assert len(hits.options) == 2 and all("Unsqueeze" in o for o in hits.options)
    hits.set_value(hits.options[0])
    at.run()
    assert at.session_state["selected"] == hits.options[0]
    at.toggle(key="focus").set_value(True)
    at.run()
    at.number_input(key="hops").set_value(1)
    at.run()
    assert any(f"within 1 hops of {hits.options[0]}" in c.value for c in at.caption), [
        c.value for c in at.caption
    ]


def test_a_refused_node_without_a_fix_says_why_no_rule_applies():
    #   TopK whose K is computed from a dynamic dim: fold-topk-k is meant for it but cannot fold K
    import onnx.parser

    at = run_page(targets=["tensorrt-static@8.6"])
    model = onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 13]>
        g (float[n,8] x) => (float[n,m] v, int64[n,m] i) <int64[1] zero = {0}, int64[1] one = {1}> {
          [shape] s = Shape (x)
          [slice] k = Slice (s, zero, one)
          [topk] v, i = TopK (x, k)
        }"""
    )
    from surgery.workspace import Workspace

    at.session_state["ws"] = Workspace.open(model.SerializeToString(), name="k.onnx")
    at.session_state["model_name"] = "k.onnx"
    at.session_state["selected"] = "topk"
    at.run()
    assert not at.exception
    lines = [c.value.replace("\\", "") for c in at.caption]  # captions are Markdown-escaped
    assert any("No rule matches this node" in x for x in lines), lines
    assert any("fold-topk-k does not match TopK" in x and "not foldable" in x for x in lines), lines


def test_a_big_model_is_drawn_with_declared_types_and_the_inspector_waits_for_inferred_shapes(monkeypatch):
    import sys

    at = run_page()
    graph_facts = sys.modules["graph_facts"]  # the app's module, as the running app imported it
    monkeypatch.setattr(graph_facts, "SHAPES_LATER_OVER", 3)  # every lesson model counts as big
    at.button(key="side-lesson-resize_scales_chain").click()
    at.run()
    assert not at.exception
    fp = at.session_state["_fp_memo"][1]
    declared = graph_facts._declared_facts(fp, None)
    started = graph_facts._background(fp, None, None)[0]  # started once the page was drawn
    inferred = started.result(timeout=60)
    assert inferred.producer is declared.producer  # the shapes were added to the declared facts
    assert not declared.inferred and inferred.inferred
    only_inferred = [
        t for t, info in inferred.tensors.items() if info.shape is not None and declared.info(t).shape is None
    ]
    assert only_inferred, "the lesson model declares every shape: nothing to tell the two apart"
    node = next(n for n in inferred.model.graph.node if only_inferred[0] in n.output)
    key = inferred.keys[list(inferred.model.graph.node).index(node)]
    at.session_state["selected"] = key
    at.run()
    shown = " ".join(m.value for m in at.markdown)
    assert inferred.info(only_inferred[0]).shape_str() in shown, shown[-2000:]


def test_a_selection_in_a_big_model_does_not_wait_for_its_shapes(monkeypatch):
    """While a big model's shapes are inferred, selecting a node shows it at once with the declared types and says
    the fixes come with the shapes; once they are in, a rerun shows the inferred shapes and the fixes."""
    import sys
    import threading

    import surgery.graph

    at = run_page()
    graph_facts = sys.modules["graph_facts"]
    monkeypatch.setattr(graph_facts, "SHAPES_LATER_OVER", 3)  # every lesson model counts as big
    graph_facts._background.clear()  # no shapes left from another test's run of the same lesson
    release, real = threading.Event(), surgery.graph.infer_in_worker

    def slow(facts, **kw):
        assert release.wait(60)
        return real(facts, **kw)

    monkeypatch.setattr(surgery.graph, "infer_in_worker", slow)
    at.button(key="side-lesson-resize_scales_chain").click()
    at.run()
    assert not at.exception
    fp = at.session_state["_fp_memo"][1]
    shapes = graph_facts._background(fp, None, None)[0]
    declared = graph_facts._declared_facts(fp, None)
    key = next(k for k in declared.keys if declared.node(k).op_type == "Resize")
    at.session_state["selected"] = key
    at.run(timeout=10)  # would time out waiting for the shapes
    assert not at.exception and not shapes.done()
    captions = " ".join(c.value for c in at.caption)
    assert "Fixes are proposed once the shapes" in captions and "Inferring the shapes" in captions, captions
    assert not any(b.key and b.key.startswith("apply-") for b in at.button)
    release.set()
    shapes.result(timeout=60)
    graph_facts._background(fp, None, None)[1].result(timeout=60)
    at.run()
    assert not at.exception
    captions = " ".join(c.value for c in at.caption)
    assert "Fixes are proposed once the shapes" not in captions and "Inferring the shapes" not in captions
    assert any(b.key and b.key.startswith("apply-") for b in at.button), "the fixes came with the shapes"


def test_build_page_offers_a_tvm_trial_budget_and_shows_untuned_and_tuned(monkeypatch, tmp_path):
    pytest.importorskip("tvm")
    monkeypatch.setenv("ONNX_SURGERY_CACHE", str(tmp_path))  # the tuning database goes here, not ~/.cache
    at = run_page("views/build.py")
    at.multiselect(key="build_backends").set_value(["tvm"])
    at.run()
    at.number_input(key="build_runs").set_value(2)
    at.number_input(key="build_tune_trials").set_value(2)
    at.button(key="build_go").click()
    at.run()
    assert not at.exception
    assert any(c.value.startswith("Tuning: untuned ") for c in at.caption), [c.value for c in at.caption]
    row = at.dataframe[0].value.loc["tvm"]
    assert row["median ms"] > 0 and row["untuned median ms"] > 0
    assert (tmp_path / "tvm-tuning" / "database_tuning_record.json").exists()


def test_a_big_model_edited_in_the_app_gets_the_shapes_of_the_edited_model(monkeypatch):
    import sys
    import time

    at = run_page()
    graph_facts = sys.modules["graph_facts"]
    monkeypatch.setattr(graph_facts, "SHAPES_LATER_OVER", 3)  # every lesson model counts as big
    at.session_state["targets"] = ["onnxruntime"]
    at.button(key="side-lesson-ml_scaler").click()
    at.run()
    # the fixes are proposed once the background shapes are in (a worker of low priority)
    for _ in range(120):
        if any(b.key == "apply-ml-scaler-decompose" for b in at.button):
            break
        time.sleep(0.25)
        at.run()
    at.button(key="apply-ml-scaler-decompose").click()
    at.run()
    assert not at.exception, at.exception
    ws = at.session_state["ws"]
    assert [s.rule for s in ws.recipe] == ["ml-scaler-decompose"]
    fp = at.session_state["_fp_memo"][1]
    assert fp == ws.fingerprint()  # the edited model's
    started = graph_facts._background(fp, None, None)[0]
    inferred = started.result(timeout=60)
    assert inferred.inferred and inferred.model is ws.current
    # tensors only the edit made have inferred shapes: the worker inferred the edited model, not the file
    before = {o for n in ws.original.proto.graph.node for o in n.output}
    made = [o for n in ws.current.graph.node for o in n.output if o and o not in before]
    assert made and all(inferred.info(o).shape is not None for o in made), made


def test_the_shape_worker_reads_a_file_only_for_the_unedited_model_read_from_it(tmp_path, monkeypatch):
    import sys

    from surgery.samples import sample_path
    from surgery.workspace import Workspace

    run_page()
    graph_facts = sys.modules["graph_facts"]
    path = sample_path("resize_scales_chain")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "upload.onnx").write_bytes(b"not this one")  # an upload's name that is also a file here
    uploaded = Workspace.open(path.read_bytes(), name="upload.onnx")
    monkeypatch.setattr(graph_facts, "workspace", lambda: uploaded)
    assert graph_facts._unedited_path() is None  # an upload is never read back from a path
    opened = Workspace.open(path)
    monkeypatch.setattr(graph_facts, "workspace", lambda: opened)
    assert graph_facts._unedited_path() == str(path)
    copy = tmp_path / "m.onnx"
    copy.write_bytes(path.read_bytes())
    changed = Workspace.open(copy)
    monkeypatch.setattr(graph_facts, "workspace", lambda: changed)
    copy.write_bytes(path.read_bytes() + b"\0")  # the file changed since it was read
    assert graph_facts._unedited_path() is None


def test_the_banner_shows_a_parsers_bare_words_beside_our_explanation(two_quantizers, monkeypatch):
    """TensorRT's parser says only "false" for an op its table lists as N: the banner quotes it (recorded, not
    this run's) and says why in our words, once for the two nodes it was said of."""
    monkeypatch.setenv("ONNX_SURGERY_START_MODEL", str(two_quantizers))
    monkeypatch.setenv(
        "ONNX_SURGERY_TARGETS", "tensorrt-static@10.15,onnxruntime"
    )  # the predictor's recorded words
    at = run_page()
    for _ in range(4):  # each target is checked in a run of its own
        if any("TensorRT 10.15" in e.value for e in at.error):
            break
        at.run()
    lines = [c.value.replace("\\", "") for c in at.caption]  # captions are Markdown-escaped
    said = [x for x in lines if x.startswith("DynamicQuantizeLinear ×2 ('dql_a', 'dql_b') — ")]
    assert len(said) == 1, lines
    assert (
        "parser says (recorded): “false” — why: DynamicQuantizeLinear is listed as not supported (N)"
        in said[0]
    )


def test_a_node_fixed_with_its_reader_says_so_and_leads_to_the_fix(tmp_path, monkeypatch):
    """onnxruntime's dynamic quantization: the DynamicQuantizeLinear has no rule of its own; the inspector says
    which rule fixes it with its reader (the rule's `also_fixes`) and a button selects that reader, whose fix
    card has the rule."""
    import onnx

    from surgery.rulebook import load_rules
    from surgery.rulebook.fixture import fixture
    from surgery.rulebook.loader import BUILTIN_DIR

    rule = next(r for r in load_rules([BUILTIN_DIR]) if r.id == "dynamic-quantization-to-float")
    fx = fixture(rule)
    path = tmp_path / "dynamic_int8.onnx"
    onnx.save(fx.model, path)
    monkeypatch.setenv("ONNX_SURGERY_START_MODEL", str(path))
    at = AppTest.from_file(MAIN, default_timeout=90)
    at.run()
    at.session_state["targets"] = ["tensorrt-static@10.15"]
    at.run()
    dql = next(n.name or f"DynamicQuantizeLinear#{i}" for i, n in enumerate(fx.model.graph.node))
    at.session_state["selected"] = dql
    at.run()
    assert not at.exception
    said = [shown(c.value) for c in at.caption if "Fixed with its reader" in c.value]
    assert said and "`dynamic-quantization-to-float` applies at MatMulInteger `mm`" in said[0], said
    at.button(key="select-reader-dynamic-quantization-to-float").click()
    at.run()
    assert at.session_state["selected"] == fx.node
    assert any(b.key == "apply-dynamic-quantization-to-float" for b in at.button)


@pytest.mark.parametrize(
    "big, in_worker",
    [(False, False), (True, False), (False, True)],
    ids=["inferred-first", "declared-first", "worker"],
)
def test_the_start_model_read_ahead_by_the_server_is_what_the_first_page_shows(
    big, in_worker, tmp_path, monkeypatch
):
    """`onnx-surgery app MODEL`'s server reads the model, its facts and its first drawing while the browser loads
    the page: the first session shows them without reading or laying out again (a model drawn with its shapes,
    one drawn first with its declared types, and one whose graph file is big enough for its shapes to be
    inferred in a worker process: never in the server); the next session reads its own copy."""
    import onnx
    from test_view import scoped_chain

    import surgery.view.draw

    model = scoped_chain(500)
    model.doc_string = f"read ahead, {'big' if big else 'small'}"  # no cache of another test knows it
    path = tmp_path / "ahead.onnx"
    onnx.save(model, path)
    monkeypatch.setenv("ONNX_SURGERY_START_MODEL", str(path))
    monkeypatch.syspath_prepend(str(Path(MAIN).parent))
    import graph_facts
    import opening

    import surgery.graph

    if big:
        monkeypatch.setattr(graph_facts, "SHAPES_LATER_OVER", 100)
    if in_worker:
        monkeypatch.setattr(graph_facts, "SHAPES_LATER_OVER", 10_000)
        monkeypatch.setattr(graph_facts, "INFER_IN_WORKER_OVER", 0)

        def not_here(model):
            raise AssertionError("shapes inferred in the server")

        monkeypatch.setattr(surgery.graph, "_infer", not_here)
    graph_facts.read_ahead(str(path))
    ahead = graph_facts._AHEAD[path.resolve()].result()
    assert ahead.facts.inferred is not big
    if in_worker:
        assert ahead.facts.typed is None and ahead.facts.shape_inference_error is None

    laid_out, real_structure = [], surgery.view.draw.structure

    def structure(facts, **kwargs):
        laid_out.append(kwargs)
        return real_structure(facts, **kwargs)

    def read_again(*args, **kwargs):
        raise AssertionError("the start model was read again")

    monkeypatch.setattr(surgery.view.draw, "structure", structure)
    real_load = opening.load_model
    monkeypatch.setattr(opening, "load_model", read_again)
    at = run_page(targets=["tensorrt-static@10.15"])
    assert at.session_state["ws"].original is ahead.model
    assert any("2000 nodes collapsed into" in c.value for c in at.caption), [c.value for c in at.caption]
    assert not [k for k in laid_out if not k.get("focus") and not k.get("scope")], laid_out

    monkeypatch.setattr(opening, "load_model", real_load)
    second = run_page(targets=["tensorrt-static@10.15"])
    assert second.session_state["ws"].original is not ahead.model
    assert second.session_state["ws"].original.content_hash == ahead.model.content_hash


def test_a_start_model_changed_after_it_was_read_ahead_is_read_again(tmp_path, monkeypatch):
    import onnx
    from test_view import scoped_chain

    path = tmp_path / "changed.onnx"
    onnx.save(scoped_chain(500), path)
    monkeypatch.setenv("ONNX_SURGERY_START_MODEL", str(path))
    monkeypatch.syspath_prepend(str(Path(MAIN).parent))
    import graph_facts

    graph_facts.read_ahead(str(path))
    graph_facts._AHEAD[path.resolve()].result()
    onnx.save(scoped_chain(510), path)  # rewritten since: 2040 nodes
    at = run_page(targets=["tensorrt-static@10.15"])
    assert any("2040 nodes collapsed into" in c.value for c in at.caption), [c.value for c in at.caption]


def test_fix_all_runs_the_fix_use_case_and_shows_its_summary():
    at = run_page()
    at.session_state["targets"] = ["tensorrt-static@8.2"]
    at.button(key="side-lesson-resize_scales_chain").click()
    at.run()
    at.session_state["targets"] = ["tensorrt-static@8.2"]
    at.button(key="fix_all").click()
    at.run()
    assert not at.exception
    ws = at.session_state["ws"]
    assert [s.rule for s in ws.recipe] == ["fold-resize-scales"]
    said = [shown(c.value) for c in at.caption]
    assert "1 step(s) applied" in said
    assert any("rejects → accepts (1 → 0 refused)" in line for line in said), said
    at.button(key="undo").click()
    at.run()
    assert at.session_state["ws"].cursor == 0


def test_a_node_refused_for_its_body_offers_the_fix_that_applies_there(tmp_path, monkeypatch):
    import sys

    import onnx

    sys.path.insert(0, str(Path(__file__).parent))
    from test_subgraph_fold import resize_in_if

    src = tmp_path / "rif.onnx"
    onnx.save(resize_in_if(), src)
    monkeypatch.setenv("ONNX_SURGERY_START_MODEL", str(src))
    at = run_page()
    at.session_state["targets"] = ["tensorrt-static@8.2"]
    at.session_state["selected"] = "/if/If"
    at.run()
    assert not at.exception
    assert any("Refused for what is in its body" in shown(c.value) for c in at.caption)
    at.button(key="apply-fold-resize-scales").click()
    at.run()
    assert not at.exception
    assert [s.rule for s in at.session_state["ws"].recipe] == ["fold-resize-scales"]


def test_the_cut_lesson_is_walked_through_as_a_cut():
    at = run_page("views/lessons.py")
    at.button(key="walk-unique_op").click()
    at.run()
    assert not at.exception
    said = [shown(w.value) for w in at.warning]
    assert any(
        "A **cut**, not a repair: output 'uniq' is gone" in w and "Unique '/post/Unique'" in w for w in said
    ), said


THREE_RESIZES = """<ir_version: 8, opset_import: ["" : 13]>
g (float[1,1,4,4] x) => (float[1,1,32,32] y) {
  one = Constant <value = float[2] {1.0, 1.0}> ()
  two = Constant <value = float[2] {2.0, 2.0}> ()
  s1 = Concat <axis = 0> (one, two)
  s2 = Concat <axis = 0> (one, two)
  s3 = Concat <axis = 0> (one, two)
  r1 = Resize <mode = "nearest"> (x, , s1)
  r2 = Resize <mode = "nearest"> (r1, , s2)
  y = Resize <mode = "nearest"> (r2, , s3)
}"""


def three_resizes(path) -> str:
    """Three Resize nodes whose scales the graph computes (TensorRT 8.2 refuses each): one rule, three matches."""
    import onnx

    m = onnx.parser.parse_model(THREE_RESIZES)
    for i, n in enumerate(m.graph.node):
        n.name = f"{n.op_type.lower()}{i}"
    onnx.save(m, str(path))
    return str(path)


@pytest.mark.parametrize("scope", ["all", "this node"])
def test_a_rule_is_applied_to_all_its_matches_in_one_step_or_to_the_node_alone(scope, tmp_path, monkeypatch):
    monkeypatch.setenv("ONNX_SURGERY_START_MODEL", three_resizes(tmp_path / "three.onnx"))
    at = run_page(targets=["tensorrt-static@8.2"], selected="resize6")
    at.run()
    choice = at.radio(key="scope-fold-resize-scales")
    assert choice.options[0] == "all 3 nodes it matches (one step)" and choice.value == choice.options[0]
    if scope != "all":
        choice.set_value("this node")
        at.run()
    at.button(key="apply-fold-resize-scales").click()
    at.run()
    assert not at.exception, at.exception
    (step,) = at.session_state["ws"].recipe
    folded = step.params["tensors"]
    assert sorted(folded) == (["s1", "s2", "s3"] if scope == "all" else ["s2"])
    for _ in range(3):  # the edited model is drawn first and checked in the runs after
        said = [shown(m.value) for m in at.markdown if "TensorRT 8.2 (predicted)" in shown(m.value)]
        if any("the model" in m or "node(s)" in m for m in said):
            break
        at.run()
    # all three fixed by one step, or two still refused (a line per target: the node is inspected)
    assert any(("accepts the model" if scope == "all" else "rejects 2 of") in m for m in said), said


def test_colour_by_the_changes_from_one_target_to_another():
    """Two TensorRT versions as targets: 'A → B' colours what changes, as `upgrade --from A --to B` lists it
    (squeeze_dynamic: TensorRT 11.5 takes the Squeeze without axes that 10.15 refuses)."""
    at = run_page()
    at.selectbox(key="sample_pick").set_value("squeeze_dynamic")
    at.run()
    at.button(key="open_sample").click()
    at.run()
    at.session_state["targets"] = ["tensorrt-static@10.15", "tensorrt-static@11.5"]
    at.run()
    pair = "tensorrt-static@10.15 → tensorrt-static@11.5"
    assert pair in at.selectbox(key="color_by").options
    at.selectbox(key="color_by").set_value(pair)
    at.run()
    assert not at.exception, at.exception
    said = [shown(c.value) for c in at.caption if "newly refused" in c.value]
    assert said and "0 node(s) newly refused (red), 1 newly accepted (green)" in said[0], said
    assert f"{pair.split(' → ')[1]} → {pair.split(' → ')[0]}" not in at.selectbox(key="color_by").options
    at.selectbox(key="color_by").set_value(pair.split(" → ")[1])  # one target: its own verdicts again
    at.run()
    assert not [c for c in at.caption if "newly refused" in c.value]


def test_the_server_can_open_on_a_lesson(monkeypatch):
    """`onnx-surgery app --lesson resize_scales_chain` (scripts/app.sh): the teaching case, its target, its node."""
    monkeypatch.setenv("ONNX_SURGERY_START_LESSON", "resize_scales_chain")
    at = run_page()
    assert at.session_state["model_name"] == "resize_scales_chain.onnx"
    assert at.session_state["selected"] == "/up/Resize"
    assert "tensorrt-static@8.2" in at.session_state["targets"]
    assert any("rejects 1 of 12 node(s)" in shown(m.value) for m in at.markdown)


def test_a_new_session_checks_with_the_live_parser_where_it_runs(monkeypatch):
    """The live parser is a default target where it runs here (its own words beside the predictor's), and
    `onnx-surgery app -t` (ONNX_SURGERY_TARGETS) replaces the defaults."""
    monkeypatch.syspath_prepend(str(Path(MAIN).parent))
    import checks

    monkeypatch.delenv("ONNX_SURGERY_TARGETS", raising=False)
    at = run_page()
    live = checks.live_parser_runs()
    assert ("tensorrt" in at.session_state["targets"]) == live
    assert at.session_state["targets"][live:] == checks.DEFAULT_TARGETS
    monkeypatch.setenv("ONNX_SURGERY_TARGETS", "openvino,tensorrt-static@8.6")
    assert run_page().session_state["targets"] == ["openvino", "tensorrt-static@8.6"]
