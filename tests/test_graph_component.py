"""The graph's three elements (app/graph_component.py): a check changes the paint, a click the pick, and the
shape (the big one, with the scripts) stays identical, so Streamlit re-sends it as a reference."""

import sys
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "app"))
from graph_component import PAINTED, parts  # noqa: E402

from surgery.diagnose import check_one  # noqa: E402
from surgery.graph import GraphFacts  # noqa: E402
from surgery.samples import sample_path  # noqa: E402
from surgery.view.draw import paint, structure  # noqa: E402


def test_verdicts_and_a_selection_leave_the_shape_as_it_was():
    model = onnx.load(sample_path("resize_scales_chain"))
    facts = GraphFacts.of(model)
    view = structure(facts)
    unchecked = paint(view, facts).payload()
    report = check_one(model, "tensorrt-static@8.2")
    checked = paint(view, facts, report.by_node(), [report]).payload(selected="/relu/Relu")
    shape0, paint0, pick0 = parts(unchecked, "graph")
    shape1, paint1, pick1 = parts(checked, "graph", report_drawn=True)
    assert shape0 == shape1
    assert not set(PAINTED) & set(shape1["nodes"][0])
    at = [n["id"] for n in shape1["nodes"]].index("/up/Resize")
    assert (paint0["status"][at], paint1["status"][at]) == ("not checked", "rejected")
    assert (
        paint1["start"] == "/up/Resize"
        and paint1["report_drawn"]
        and paint1["layout_id"] == shape1["layout_id"]
    )
    assert (pick0["selected"], pick1["selected"]) == (None, "/relu/Relu")
    # the paint put back on the shape is the payload's nodes
    merged = [{**n, **{f: paint1[f][i] for f in PAINTED}} for i, n in enumerate(shape1["nodes"])]
    assert merged == checked["nodes"]


def test_a_view_is_encoded_once_while_it_lives():
    import gc
    import json

    import graph_component

    model = onnx.load(sample_path("resize_scales_chain"))
    facts = GraphFacts.of(model)
    view = paint(structure(facts), facts)
    shape, painted, layout_id = graph_component._wire(view, "graph", False)
    assert graph_component._wire(view, "graph", False)[0] is shape  # the second run: not encoded again
    assert graph_component._wire(view, "graph", True)[1] != painted  # report_drawn is the paint's
    want_shape, want_paint, _ = parts(view.payload(), "graph")
    assert (json.loads(shape), json.loads(painted), layout_id) == (want_shape, want_paint, view.layout_id())
    mine = [slot for slot in graph_component._WIRE if slot[0] == id(view)]
    assert len(mine) == 2
    del view
    gc.collect()
    assert not set(mine) & set(graph_component._WIRE)  # gone with their view
