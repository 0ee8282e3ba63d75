"""surgery.layout: layered layouts (dot where installed, the builtin engine always) and the figures that say how
good one is: crossings, total edge length, overlapping boxes, edges through boxes."""

import pytest

from surgery.layout import Layout, dot_available, layered, polyline, quality

ENGINES = ["builtin", pytest.param("dot", marks=pytest.mark.skipif(not dot_available(), reason="no dot"))]


def diamond_ladder(n: int):
    """A chain of diamonds (a -> b, a -> c, b -> d, c -> d, …) with a skip edge over each, and a lone constant
    feeding the last node: crossings are avoidable, long edges must go around boxes."""
    sizes, edges = {"in": (60, 26)}, []
    prev = "in"
    for k in range(n):
        a, b, c, d = (f"{x}{k}" for x in "abcd")
        for v in (a, b, c, d):
            sizes[v] = (90 + 10 * (k % 3), 32)
        edges += [(prev, a), (a, b), (a, c), (b, d), (c, d), (prev, d)]
        prev = d
    sizes["k"] = (40, 22)
    edges.append(("k", prev))
    return sizes, edges


@pytest.mark.parametrize("engine", ENGINES)
def test_a_layered_layout_has_no_overlaps_and_edges_go_down_around_boxes(engine):
    sizes, edges = diamond_ladder(12)
    lay = layered(sizes, edges, engine=engine, anchors={"in"})
    assert lay.engine == engine and set(lay.pos) == set(sizes) and len(lay.routes) == len(edges)
    q = quality(lay, sizes, edges)
    assert q["overlaps"] == 0 and q["through"] == 0, q
    assert q["crossings"] <= 2, q
    for (a, b), route in zip(edges, lay.routes):
        ya, yb = lay.pos[a][1], lay.pos[b][1]
        assert ya < yb, (a, b)
        # a route leaves the bottom of its source and ends on the top of its target
        assert route[0][1] == pytest.approx(ya + sizes[a][1] / 2, abs=3)
        assert route[-1][1] == pytest.approx(yb - sizes[b][1] / 2, abs=3)
    # the lone constant sits just above what reads it, not at the top of the graph
    assert lay.pos["k"][1] >= lay.pos["c11"][1] > lay.pos["a0"][1]


def test_the_builtin_engine_lays_out_10k_boxes_in_about_a_second():
    sizes, edges = diamond_ladder(2500)
    lay = layered(sizes, edges, engine="builtin")
    assert len(lay.pos) == 10_002 and lay.seconds < 5


def test_cycles_are_laid_out_rather_than_refused():
    sizes = {v: (50, 30) for v in "abc"}
    lay = layered(sizes, [("a", "b"), ("b", "c"), ("c", "a")], engine="builtin")
    assert len(lay.routes) == 3 and len({p for p in lay.pos.values()}) == 3


def test_quality_counts_what_it_says():
    sizes = {v: (40, 20) for v in "abcde"}
    lay = Layout(
        {"a": (0, 0), "b": (100, 0), "c": (0, 100), "d": (100, 100), "e": (50, 50)},
        [[(0, 10), (100, 90)], [(100, 10), (0, 90)]],
    )
    q = quality(lay, sizes, [("a", "d"), ("b", "c")])
    assert q["crossings"] == 1 and q["through"] == 2 and q["overlaps"] == 0  # both edges pass through e
    assert q["length"] == round(2 * (100**2 + 80**2) ** 0.5)
    lay.pos["e"] = (10, 5)
    assert quality(lay, sizes, [])["overlaps"] == 1
    curved = polyline([(0, 0), (0, 10), (10, 20), (10, 30)], True, steps=4)
    assert curved[0] == (0, 0) and curved[-1] == pytest.approx((10, 30)) and len(curved) == 5


def test_a_densely_joined_graph_is_laid_out_by_the_builtin_engine_without_waiting_for_dot():
    """Few boxes, many long edges (every layer reads every earlier one, as DenseNet's concatenations): dot's
    work is the dummies, not the boxes. Such a graph goes to the builtin engine at once; a chain of as many boxes
    still goes to dot."""
    import time

    from surgery.layout import DOT_MAX_WORK, dot_work

    sizes, edges, prev = {"in": (80.0, 30.0)}, [], "in"
    for b in range(3):  # 3 dense blocks of 24 layers: 145 boxes (dot: ~12 s, bench/dot_cost.py)
        members = [prev]
        for i in range(24):
            conv, cat = f"b{b}conv{i}", f"b{b}cat{i}"
            sizes[conv] = sizes[cat] = (90.0, 30.0)
            edges += [(members[-1], conv), (conv, cat), *((m, cat) for m in members)]
            members.append(cat)
        prev = members[-1]
    assert len(sizes) < DOT_MAX_WORK < dot_work(sizes, edges)
    t = time.perf_counter()
    assert layered(sizes, edges).engine == "builtin"
    assert time.perf_counter() - t < 2.0
    ids = list(sizes)
    chain = list(zip(ids, ids[1:]))
    assert dot_work(sizes, chain) == len(sizes)
    if dot_available():
        assert layered(sizes, chain).engine == "dot"


def test_a_tensor_read_all_along_the_graph_is_one_trunk_with_its_readers_branching_off():
    """A source read by every 20th node of a 400-node chain (a transformer's attention mask, read in every
    layer): its long edges share one line of dummies, so the layout costs the chain, not chain x readers, and
    each route keeps only the points where it bends."""
    from surgery.layout import _straightened

    n = 400
    sizes = {"in": (60, 26), "hub": (70, 32), **{f"n{k}": (80, 32) for k in range(n)}}
    edges = [("in", "hub"), ("in", "n0")] + [(f"n{k}", f"n{k + 1}") for k in range(n - 1)]
    readers = [f"n{k}" for k in range(20, n, 20)]
    edges += [("hub", r) for r in readers]
    lay = layered(sizes, edges, engine="builtin", anchors={"in"})
    q = quality(lay, sizes, edges)
    assert q["overlaps"] == 0 and q["through"] == 0, q
    hub = [r for (a, _), r in zip(edges, lay.routes) if a == "hub"]
    for (_, b), route in zip([e for e in edges if e[0] == "hub"], hub):
        assert route[0][1] == pytest.approx(lay.pos["hub"][1] + 16, abs=3)
        assert route[-1] == pytest.approx((lay.pos[b][0], lay.pos[b][1] - 16), abs=3)
    # one trunk: every hub route runs through the same x at each y its neighbour route passes
    longest = hub[-1]
    for route in hub[:-1]:
        for (x1, y1), (x2, y2) in zip(route[1:-2], route[2:-1]):
            along = [p for p in longest if y1 <= p[1] <= y2]
            assert all(abs(x1 + (x2 - x1) * (p[1] - y1) / (y2 - y1) - p[0]) < 1.5 for p in along)
    assert sum(len(r) for r in lay.routes) < 3 * len(edges) + 200
    # straightening drops only points within half a pixel of the line that replaces them
    wavy = [(0.0, 0.0), (0.3, 10.0), (-0.2, 20.0), (0.1, 30.0), (5.0, 40.0), (10.0, 50.0), (15.0, 60.0)]
    assert _straightened(wavy) == [(0.0, 0.0), (0.1, 30.0), (15.0, 60.0)]
