"""surgery.view: what the app draws — layered positions, verdict colours, small constants and inputs beside
each consumer, collapsed groups with drill-down, focus windows, search, next rejected."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.diagnose import check_one
from surgery.graph import GraphFacts
from surgery.samples import sample_path
from surgery.verdict import Evidence, Status, Verdict
from surgery.view.draw import COLORS, build_view
from surgery.view.find import neighbourhood, next_rejected, search
from surgery.view.groups import groups_of, scope_members
from surgery.view.labels import constant_value


def _verdict(key, status):
    return Verdict(key, 0, "X", status, "because", evidence=Evidence("test"))


def scoped_chain(blocks: int, flat: bool = False, shared_input: bool = False) -> onnx.ModelProto:
    """`blocks` blocks of Relu -> Add(const) -> Mul(x or input), torch-style names /stageS/blockB/Op."""
    nodes, x = [], "input"
    for b in range(blocks):
        s = f"n{b}_" if flat else f"/stage{b // 10}/block{b % 10}/"
        nodes += [
            helper.make_node("Relu", [x], [f"{s}r"], name=f"{s}Relu"),
            helper.make_node(
                "Constant", [], [f"{s}k"], name=f"{s}Constant", value=numpy_helper.from_array(np.float32(0.5))
            ),
            helper.make_node("Add", [f"{s}r", f"{s}k"], [f"{s}a"], name=f"{s}Add"),
            helper.make_node(
                "Mul", [f"{s}a", "input" if shared_input else f"{s}a"], [f"{s}o"], name=f"{s}Mul"
            ),
        ]
        x = f"{s}o"
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 4])],
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])


def test_layers_go_down_and_every_edge_points_down():
    model = scoped_chain(5)
    view = build_view(model)
    y = {n.id: n.y for n in view.nodes if n.kind == "op"}
    assert len(y) == 15  # Constants are not laid out as layers
    edges = [(a, b) for a, b in view.edges if a in y and b in y]
    assert edges and all(y[a] < y[b] for a, b in edges)
    ids = [n.id for n in view.nodes]
    assert len(ids) == len(set(ids))
    assert {a for e in view.edges for a in e} <= set(ids)


def test_colours_follow_the_verdicts_of_the_chosen_backend():
    model = onnx.load(sample_path("resize_scales_chain"))
    report = check_one(model, "tensorrt-static@8.2")
    view = build_view(model, report.by_node())
    by_id = {n.id: n for n in view.nodes}
    assert by_id["/up/Resize"].status == "rejected"
    assert by_id["/up/Resize"].color == COLORS["rejected"]
    assert by_id["/relu/Relu"].color == COLORS["supported"]
    unchecked = build_view(model)
    assert {n.status for n in unchecked.nodes if n.kind == "op"} == {"not checked"}
    assert view.counts()["rejected"] == 1


def test_constants_and_a_shared_input_are_drawn_small_beside_each_consumer():
    model = scoped_chain(6, shared_input=True)
    view = build_view(model)
    pos = {n.id: (n.x, n.y) for n in view.nodes}
    small = [n for n in view.nodes if n.kind in ("constant", "input")]
    # one input copy per reader (the first Relu and the six Muls), one constant per Add
    assert sum(n.kind == "input" for n in small) == 7
    assert sum(n.kind == "constant" for n in small) == 6
    for n in small:
        (target,) = [b for a, b in view.edges if a == n.id]
        tx, ty = pos[target]
        assert abs(n.x - tx) < 150 and abs(n.y - ty) < 100, (n.id, target)  # no long edges
    const = next(n for n in small if n.kind == "constant")
    assert const.ref.endswith("/Constant")  # a click on the dot selects the Constant node


def test_a_big_graph_opens_collapsed_by_scope_and_drills_down_to_its_nodes():
    model = scoped_chain(200)  # 800 nodes, scopes /stage0 .. /stage19
    view = build_view(model, collapse_over=300)
    groups = [n for n in view.nodes if n.kind == "group"]
    assert view.collapsed and len(groups) == 20
    assert groups[0].id == "group:/stage0" and groups[0].label.splitlines()[0] == "/stage0"
    assert (
        groups[0].label.splitlines()[1] == "40 nodes · Relu 10, Add 10, Mul 10"
    )  # count, top ops (not weights)
    assert {n.kind for n in view.nodes} == {"group", "input", "output"}
    assert ("group:/stage0", "group:/stage1") in view.edges
    inner = build_view(model, scope="/stage3", collapse_over=300)
    assert not inner.collapsed
    assert {n.id for n in inner.nodes if n.kind == "op"} == {
        f"/stage3/block{b}/{op}" for b in range(10) for op in ("Relu", "Add", "Mul")
    }


def test_groups_carry_the_worst_verdict_and_the_rejected_count():
    model = scoped_chain(200)
    facts = GraphFacts.of(model, infer=False)
    verdicts = {k: _verdict(k, Status.SUPPORTED) for k in facts.keys}
    verdicts["/stage7/block2/Add"] = _verdict("/stage7/block2/Add", Status.REJECTED)
    verdicts["/stage9/block0/Mul"] = _verdict("/stage9/block0/Mul", Status.UNKNOWN)
    view = build_view(model, verdicts, facts=facts, collapse_over=300)
    by_id = {n.id: n for n in view.nodes}
    assert by_id["group:/stage7"].status == "rejected" and by_id["group:/stage7"].badge == "1 rejected"
    assert by_id["group:/stage9"].status == "unknown" and by_id["group:/stage9"].badge == "1 unknown"
    assert by_id["group:/stage0"].status == "supported" and by_id["group:/stage0"].badge == ""
    assert by_id["group:/stage7"].color == COLORS["rejected"]
    assert view.start == "group:/stage7"  # the first view is centred on the first rejected group


def test_too_many_scopes_become_ranges_and_flat_names_still_collapse():
    model = scoped_chain(900)  # 90 stages: more than a readable number of groups
    facts = GraphFacts.of(model, infer=False)
    groups = groups_of(facts, facts.order, None)
    assert 6 <= len(groups) <= 60
    assert all(g.startswith("range:") for g, _, _ in groups)
    assert sum(len(ms) for _, _, ms in groups) == len(model.graph.node)
    first, label, members = groups[0]
    assert label.startswith("/stage0")
    assert sorted(scope_members(facts, first)) == sorted(members)
    flat = scoped_chain(600, flat=True)
    view = build_view(flat, collapse_over=500)
    groups = [n for n in view.nodes if n.kind == "group"]
    assert view.collapsed and 6 <= len(groups) <= 60
    # no scopes to name them by: each group says which block it is, where it is in the topological order (a
    # model whose weights are Constant nodes first starts at 837, DenseNet-121's) and what it holds
    first = groups[0].label.splitlines()[0]
    assert first.startswith(f"block 1/{len(groups)} · nodes 1–"), first
    assert groups[-1].label.startswith(f"block {len(groups)}/{len(groups)} · nodes ")
    assert "nodes · Relu" in groups[0].label


def test_focus_window_holds_the_nodes_within_n_hops():
    model = scoped_chain(50)
    facts = GraphFacts.of(model, infer=False)
    center = "/stage2/block5/Add"
    near = neighbourhood(facts, facts.index[center], 1)
    assert {facts.keys[i] for i in near} == {
        center,
        "/stage2/block5/Relu",
        "/stage2/block5/Constant",
        "/stage2/block5/Mul",
    }
    view = build_view(model, facts=facts, focus=center, hops=2)
    ops = {n.id for n in view.nodes if n.kind == "op"}
    assert center in ops and "/stage2/block4/Mul" in ops and "/stage0/block0/Relu" not in ops
    assert "within 2 hops" in view.note
    # a focus window is never collapsed, even in a big graph
    assert not build_view(model, facts=facts, focus=center, hops=2, collapse_over=10).collapsed


def test_search_by_name_or_op_and_next_rejected_in_order():
    model = scoped_chain(30)
    facts = GraphFacts.of(model, infer=False)
    assert search(facts, "add")[0].endswith("/Add")
    assert len(search(facts, "Add")) == 30
    assert search(facts, "/stage1/block3/") == [
        f"/stage1/block3/{op}" for op in ("Relu", "Constant", "Add", "Mul")
    ]
    assert search(facts, "  ") == []
    kept = search(facts, "add")
    kept.clear()  # a caller's edit never reaches the answer kept for the next rerun
    assert len(search(facts, "ADD ")) == 30
    for q in range(20):  # more queries than are kept
        search(facts, f"block{q}/")
    assert search(facts, "/stage1/block3/")[0] == "/stage1/block3/Relu" and len(search(facts, "add")) == 30
    bad = ["/stage2/block1/Mul", "/stage0/block4/Add"]
    verdicts = {k: _verdict(k, Status.REJECTED) for k in bad}
    assert next_rejected(verdicts, facts, None) == "/stage0/block4/Add"
    assert next_rejected(verdicts, facts, "/stage0/block4/Add") == "/stage2/block1/Mul"
    assert next_rejected(verdicts, facts, "/stage2/block1/Mul") == "/stage0/block4/Add"  # wraps around
    assert next_rejected({}, facts, None) is None
    amber = {**verdicts, "/stage1/block0/Relu": _verdict("/stage1/block0/Relu", Status.UNKNOWN)}
    amber["/stage0/block0/Relu"] = _verdict("/stage0/block0/Relu", Status.SUPPORTED)
    assert (
        next_rejected(amber, facts, "/stage0/block4/Add") == "/stage1/block0/Relu"
    )  # cannot confirm: a stop
    assert next_rejected(amber, facts, None) == "/stage0/block4/Add"  # a supported node is not


def test_constant_values_preview_small_tensors_only():
    big = scoped_chain(1)
    big.graph.initializer.append(numpy_helper.from_array(np.zeros(1000, np.float32), "w"))
    f2 = GraphFacts.of(big, infer=False)
    assert constant_value(f2, "w") is None
    assert constant_value(f2, "/stage0/block0/k") == pytest.approx(0.5)
    assert constant_value(f2, "input") is None


def test_payload_is_what_the_component_reads():
    model = scoped_chain(2)
    payload = build_view(model).payload(selected="/stage0/block0/Add")
    assert payload["selected"] == "/stage0/block0/Add"
    assert {"id", "label", "x", "y", "color", "ref", "kind", "status"} <= set(payload["nodes"][0])
    assert [x["status"] for x in payload["legend"]] == ["supported", "rejected", "unknown", "not checked"]


def test_tooltips_name_the_node_its_typed_inputs_and_outputs_and_every_verdict_in_one_line():
    model = onnx.load(sample_path("resize_scales_chain"))
    reports = [check_one(model, "tensorrt-static@8.2"), check_one(model, "onnxruntime")]
    facts = GraphFacts.of(model)
    view = build_view(model, reports[0].by_node(), facts=facts, reports=reports)
    resize = next(n for n in view.nodes if n.id == "/up/Resize")
    lines = resize.title.splitlines()
    assert lines[0] == "Resize  ·  /up/Resize" and lines[1] == "domain: ai.onnx"
    assert lines[lines.index("outputs:") + 1] == "  up_out  float [?, ?, ?, ?]"  # what inference knows
    conv = next(n for n in view.nodes if n.id == "/conv/Conv").title.splitlines()
    assert conv[conv.index("outputs:") + 1].endswith("float [1, 4, 16, 16]")
    trt = next(x for x in lines if x.startswith("TensorRT 8.2 (predicted): "))
    # the parser's words quoted (as written in its source: the predictor's are not from this run), then ours
    assert trt.startswith("TensorRT 8.2 (predicted): rejected at parse — parser says (from its source): “")
    words, _, why = trt.partition("” — why: ")
    assert "Resize scales must be an initializer!" in words and "is computed by the graph" in why
    assert any(x.startswith("onnxruntime") and ": supported" in x for x in lines)
    assert view.start == "/up/Resize"  # the first view is centred on the first rejected node
    # edges carry the inferred dtype and shape of their tensor
    labels = dict(zip(view.edges, view.edge_labels))
    assert labels[("/conv/Conv", "/up/Resize")] == "1×4×16×16"


def test_dims_only_numbered_by_inference_show_as_question_marks():
    from surgery.graph import TensorInfo
    from surgery.view.labels import tensor_label

    assert tensor_label(TensorInfo("t", TensorProto.FLOAT, (1, "unk__3", -1, "batch"))) == "1×?×?×batch"
    assert tensor_label(TensorInfo("t", TensorProto.INT64, (4,))) == "int64 4"
    assert tensor_label(TensorInfo("t", TensorProto.FLOAT, ())) == "scalar"
    assert tensor_label(TensorInfo("t", 0, None)) == ""
    # expression dims in parentheses (not "16×floor(h/2) + 1"); written out while the label stays short
    assert (
        tensor_label(TensorInfo("t", TensorProto.FLOAT, ("b", 16, "floor(h/2) + 1")))
        == "b×16×(floor(h/2) + 1)"
    )
    long = ("batch", 16, "floor(height/2 - 1/2) + 1", "floor(width/2 - 1/2) + 1")
    assert tensor_label(TensorInfo("t", TensorProto.FLOAT, long)) == "batch×16×(…)×(…)"
    # torch's exporter numbers the dims it cannot name: "?" as inference's; a chosen name stays until too long
    torch = ("Reshapeoutput_0_dim_0", 256, "LayerNormalizationoutput_0_dim_1")
    assert tensor_label(TensorInfo("t", TensorProto.FLOAT, torch)) == "?×256×?"
    named = ("batch_size", "sequence_length_with_past", "num_attention_heads", 64)
    assert len("×".join(map(str, named))) > 36
    assert tensor_label(TensorInfo("t", TensorProto.FLOAT, named)) == "batch_size×…×…×64"


def test_a_readers_constants_share_one_compact_box_that_never_overlaps():
    from surgery.layout import Layout, quality

    model = onnx.load(sample_path("resize_scales_chain"))
    view = build_view(model)
    consts = [n for n in view.nodes if n.kind == "constant"]
    assert consts and all(len(n.label) <= 22 for n in consts)
    sizes = {n.id: (n.w, n.h) for n in view.nodes}
    lay = Layout({n.id: (n.x, n.y) for n in view.nodes}, view.routes, view.curved)
    q = quality(lay, sizes, view.edges)
    assert q["overlaps"] == 0 and q["through"] == 0, q


def test_a_group_opens_in_place_among_the_others():
    model = scoped_chain(200)  # 20 stages of 40 nodes
    facts = GraphFacts.of(model, infer=False)
    view = build_view(model, facts=facts, scope="/stage3", context="", collapse_over=300)
    groups = {n.id for n in view.nodes if n.kind == "group"}
    ops = {n.id for n in view.nodes if n.kind == "op"}
    assert "group:/stage2" in groups and "group:/stage4" in groups and "group:/stage3" not in groups
    assert "/stage3/block0/Relu" in ops and len(ops) == 30
    assert ("group:/stage2", "/stage3/block0/Relu") in view.edges  # wired to its neighbours
    assert view.opened == "/stage3" and "opened in place" in view.note


def test_search_is_fast_on_a_big_graph_and_previous_rejected_wraps():
    from surgery.view.find import previous_rejected

    model = scoped_chain(30)
    facts = GraphFacts.of(model, infer=False)
    bad = ["/stage2/block1/Mul", "/stage0/block4/Add"]
    verdicts = {k: _verdict(k, Status.REJECTED) for k in bad}
    assert previous_rejected(verdicts, facts, "/stage2/block1/Mul") == "/stage0/block4/Add"
    assert previous_rejected(verdicts, facts, "/stage0/block4/Add") == "/stage2/block1/Mul"
    assert previous_rejected(verdicts, facts, None) == "/stage2/block1/Mul"


def test_diff_overlays_removed_and_added_nodes_around_a_step():
    from surgery.rulebook import apply, load_rules, propose
    from surgery.view.draw import diff_view
    from surgery.workspace import Workspace

    ws = Workspace.open(sample_path("resize_scales_chain"))
    before = ws.current
    (p,) = [p for p in propose(before, load_rules(), ["tensorrt-static@8.2"]) if p.step]
    apply(ws, p, check=False)
    view = diff_view(GraphFacts.of(before), GraphFacts.of(ws.current))
    removed = {n.ref for n in view.nodes if n.diff == "removed" and n.kind == "op"}
    assert {"/up/Concat", "/up/Concat_1", "/up/Cast"} <= removed
    assert "/up/Resize" in {n.id for n in view.nodes if n.diff == ""}
    assert ("removed:/up/Concat_1", "/up/Resize") in view.edges  # what fed it before
    assert view.start.startswith("removed:") and "removed" in view.note
    assert "removed by the step" in next(
        n.title for n in view.nodes if n.diff == "removed" and n.kind == "op"
    )
    # side by side: the same places, each side without what the other alone has
    left, right = view.side("before"), view.side("after")
    assert {n.id for n in left.nodes} == {n.id for n in view.nodes}  # a fold only removes
    assert not any(n.diff == "removed" for n in right.nodes) and "/up/Resize" in {n.id for n in right.nodes}
    pos = {n.id: (n.x, n.y) for n in view.nodes}
    assert all(pos[n.id] == (n.x, n.y) for n in right.nodes)
    assert all(a in pos and b in pos for a, b in right.edges) and len(right.routes) == len(right.edges)


def test_a_compared_step_draws_no_node_without_an_edge():
    """The before/after overlay of a fold (the Resize lesson's step) draws what changed and its neighbours, each
    tied to the drawing: no graph input or constant left hanging on its own."""
    from surgery.rulebook import load_rules, propose
    from surgery.samples import sample_path
    from surgery.view.draw import diff_view
    from surgery.workspace import Workspace

    ws = Workspace.open(sample_path("resize_scales_chain"))
    (fold,) = [
        p
        for p in propose(ws.current, load_rules(), ["tensorrt-static@8.2"])
        if p.rule.id == "fold-resize-scales"
    ]
    ws.apply(fold.step)
    payload = diff_view(GraphFacts.of(ws.model_at(0)), GraphFacts.of(ws.current)).payload()
    tied = {e["from"] for e in payload["edges"]} | {e["to"] for e in payload["edges"]}
    assert payload["nodes"] and [n["id"] for n in payload["nodes"] if n["id"] not in tied] == []
