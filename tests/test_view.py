"""surgery.view: what the app draws — layered positions, verdict colours, small constants and inputs beside
each consumer, collapsed groups with drill-down, focus windows, search, next rejected."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.backends.base import Evidence, Status, Verdict
from surgery.diagnose import check_one
from surgery.graph import GraphFacts
from surgery.samples import sample_path
from surgery.view import (
    COLORS,
    build_view,
    constant_value,
    groups_of,
    neighbourhood,
    next_rejected,
    scope_members,
    search,
)


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
    # no scopes to name them by: each group says where it is in the topological order and what it holds
    assert groups[0].label.startswith("nodes 1–") and "nodes · Relu" in groups[0].label


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
    bad = ["/stage2/block1/Mul", "/stage0/block4/Add"]
    verdicts = {k: _verdict(k, Status.REJECTED) for k in bad}
    assert next_rejected(verdicts, facts, None) == "/stage0/block4/Add"
    assert next_rejected(verdicts, facts, "/stage0/block4/Add") == "/stage2/block1/Mul"
    assert next_rejected(verdicts, facts, "/stage2/block1/Mul") == "/stage0/block4/Add"  # wraps around
    assert next_rejected({}, facts, None) is None


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
