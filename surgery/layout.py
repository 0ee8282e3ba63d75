"""Layered (Sugiyama) layout of a directed graph whose nodes are boxes of known size: positions and edge routes,
top to bottom, plus the figures that say how good a layout is.

Two engines:
- ``dot``: Graphviz's dot (network-simplex ranking, crossing minimisation, splines that go around nodes), used
  when the `dot` program is installed (Debian: ``apt-get install graphviz``) and the graph's work (`dot_work`:
  boxes, and a dummy per layer each long edge crosses) is small enough for it to finish within about a second
  (0.4 s for a 1.7k-node chain, but over a minute for DenseNet-121's 619 densely joined boxes, or for 10k nodes);
- ``builtin``: this module's own, linear-ish in the graph's size: layers by longest path (sources pulled down
  next to their first reader), long edges split by dummy nodes, barycentre sweeps against crossings, and
  x coordinates by isotonic regression (each node as near the mean of its neighbours as the boxes' widths
  allow). Every graph gets a layout, whatever is installed.

`quality()` measures a layout: edge crossings, total edge length, overlapping boxes, edges through boxes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections import defaultdict
from dataclasses import dataclass, field

Point = tuple[float, float]
# Above this much work (dot_work: boxes + long edges' dummies) the builtin engine lays out: dot's time grows
# faster than the work (generated dense blocks: 0.78 s at 4,585, 1.54 s at 6,113, 5.8 s at 9,897), and
# `python bench/dot_cost.py` picks 6,112 as the largest bound under which every tuning layout kept to 1 s
# (DenseNet-121's first drawing: 619 boxes, 23,635 work, dot past 60 s; every held-out corpus model under 1 s).
DOT_MAX_WORK = 6000
DOT_TIMEOUT_S = 3.0  # were the bound wrong for some graph: the builtin engine after this long


@dataclass
class Layout:
    """Box centres, and for every edge (in the order given) a route: points from the source's bottom to the
    target's top. `curved` routes are cubic Bézier control points (p0, c1, c2, p1, c1, c2, p2, …)."""

    pos: dict[str, Point] = field(default_factory=dict)
    routes: list[list[Point]] = field(default_factory=list)
    curved: bool = False
    engine: str = "builtin"
    seconds: float = 0.0


def dot_available() -> bool:
    """Whether Graphviz's dot can be used (ONNX_SURGERY_LAYOUT=builtin turns it off, e.g. to test without it)."""
    return os.environ.get("ONNX_SURGERY_LAYOUT") != "builtin" and shutil.which("dot") is not None


def layered(
    sizes: dict[str, tuple[float, float]],
    edges: list[tuple[str, str]],
    *,
    engine: str = "auto",
    anchors: set[str] | None = None,
    gap_x: float = 28,
    gap_y: float = 46,
) -> Layout:
    """Lay out the boxes `sizes` (id -> (width, height), in the order of a topological sort where there is one)
    joined by `edges`. `engine`: "auto" (dot where installed and the work small enough, else builtin), "dot" or
    "builtin". `anchors`: the boxes that start the graph (its inputs); the rest of what has no input is
    placed next to its readers."""
    t = time.perf_counter()
    edges = [(a, b) for a, b in edges if a in sizes and b in sizes and a != b]
    out = None
    if engine == "dot" or (
        engine == "auto"
        and len(sizes) <= DOT_MAX_WORK  # the work is at least the boxes: no need to count it past them
        and dot_available()
        and dot_work(sizes, edges, anchors) <= DOT_MAX_WORK
    ):
        try:
            out = _dot(sizes, edges, gap_x, gap_y)
        except (OSError, subprocess.SubprocessError, ValueError):
            if engine == "dot":
                raise
    if out is None:
        out = _builtin(sizes, edges, gap_x, gap_y, anchors)
    out.seconds = time.perf_counter() - t
    return out


def dot_work(
    sizes: dict[str, tuple[float, float]], edges: list[tuple[str, str]], anchors: set[str] | None = None
) -> int:
    """What dot's crossing reduction works on, as the builtin layering counts it: the boxes, and a dummy node
    for every layer a long edge crosses. A densely connected graph (DenseNet's concatenations of every earlier
    layer) has few boxes and many dummies: 619 boxes, and dot ran past 8 s."""
    ids, succ, pred, rank = _ranked(sizes, edges)
    layer = _layers(ids, succ, pred, anchors)
    return len(ids) + sum(abs(layer[b] - layer[a]) - 1 for a, b in edges if abs(layer[b] - layer[a]) > 1)


def _ranked(sizes, edges):
    """(ids in a topological order, successors, predecessors, each id's rank in that order); an edge against the
    order (a cycle) is taken reversed."""
    ids = _topological(list(sizes), edges)
    rank = {v: i for i, v in enumerate(ids)}
    succ: dict[str, list[str]] = defaultdict(list)
    pred: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        if rank[a] > rank[b]:  # a back edge (a cycle): lay it out reversed
            a, b = b, a
        succ[a].append(b)
        pred[b].append(a)
    return ids, succ, pred, rank


# -- builtin ---------------------------------------------------------------------------------------------------


def _layers(
    ids: list[str], succ: dict[str, list[str]], pred: dict[str, list[str]], anchors: set[str] | None
) -> dict[str, int]:
    """Longest path from the `anchors` (the graph's inputs; all sources when None); everything not reachable
    from them (constants, and what is computed from constants only) as late as its readers allow, so that a
    weight sits just above what reads it, not at the top of the graph."""
    if anchors:
        reach = set()
        stack = [v for v in ids if v in anchors]
        while stack:
            v = stack.pop()
            if v not in reach:
                reach.add(v)
                stack.extend(succ[v])
    else:
        reach = {v for v in ids if not pred[v]}
        stack = list(reach)
        while stack:
            v = stack.pop()
            for s in succ[v]:
                if s not in reach:
                    reach.add(s)
                    stack.append(s)
        reach -= {v for v in ids if not pred[v] and succ[v]}  # lone sources still sit by their readers
    layer: dict[str, int] = {}
    for v in ids:  # ids are in topological order
        if v in reach:
            layer[v] = 1 + max((layer[p] for p in pred[v] if p in reach), default=-1)
    for v in reversed(ids):
        if v not in reach:
            layer[v] = min((layer[s] for s in succ[v]), default=0) - 1 if succ[v] else 0
    for v in ids:  # every source (an input's copy too) just above its first reader
        if not pred[v] and succ[v]:
            layer[v] = min(layer[s] for s in succ[v]) - 1
    low = min(layer.values(), default=0)
    return {v: d - low for v, d in layer.items()}


def _topological(ids: list[str], edges: list[tuple[str, str]]) -> list[str]:
    """`ids` in a topological order of `edges` (Kahn's, the given order breaking ties); nodes on a cycle follow
    in the given order (their edges against it are then laid out reversed)."""
    import heapq

    at = {v: i for i, v in enumerate(ids)}
    indeg = dict.fromkeys(ids, 0)
    out: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        out[a].append(b)
        indeg[b] += 1
    ready = [at[v] for v in ids if indeg[v] == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        v = ids[heapq.heappop(ready)]
        order.append(v)
        for w in out[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(ready, at[w])
    if len(order) < len(ids):
        placed = set(order)
        order += [v for v in ids if v not in placed]
    return order


def _isotonic(want: list[float], widths: list[float], gap: float) -> list[float]:
    """x positions in the given order, each box at least `gap` from the next, as near `want` as possible
    (least squares): pool-adjacent-violators on the offsets."""
    n = len(want)
    offset = [0.0] * n
    for i in range(1, n):
        offset[i] = offset[i - 1] + (widths[i - 1] + widths[i]) / 2 + gap
    target = [w - o for w, o in zip(want, offset)]
    blocks: list[list[float]] = []  # [mean, count]
    for v in target:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, c2 = blocks.pop()
            m1, c1 = blocks[-1]
            blocks[-1] = [(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2]
    out: list[float] = []
    for m, c in blocks:
        out += [m] * int(c)
    return [y + o for y, o in zip(out, offset)]


def _builtin(sizes, edges, gap_x, gap_y, anchors=None) -> Layout:
    ids, succ, pred, rank = _ranked(sizes, edges)
    layer = _layers(ids, succ, pred, anchors)
    # long edges become chains of dummy nodes, one per layer crossed; the long edges of one source share one
    # chain (a trunk down to its last reader, each reader branching off it): a tensor read all along the graph
    # (a transformer's attention mask, its rotary tables: read in every layer) is one line, not one per reader,
    # and the dummies are a few per source, not a few per edge (a 1B Llama export, 1,361 boxes: 86k dummies,
    # 3-4 s of layout, before)
    width = {v: sizes[v][0] for v in ids}
    chains: list[list[str]] = []
    trunks: dict[str, list[str]] = defaultdict(list)  # source -> its dummies, one a layer from the next down
    dummies: list[str] = []
    up: dict[str, list[str]] = defaultdict(list)
    down: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        if rank[a] > rank[b]:
            a, b = b, a
        trunk, need = trunks[a], layer[b] - layer[a] - 1
        while len(trunk) < need:
            d = f"\0{len(dummies)}"
            layer[d], width[d] = layer[a] + 1 + len(trunk), 6.0
            last = trunk[-1] if trunk else a
            down[last].append(d)
            up[d].append(last)
            trunk.append(d)
            dummies.append(d)
        chain = [a, *trunk[:need], b]
        down[chain[-2]].append(b)
        up[b].append(chain[-2])
        chains.append(chain)
    rows: dict[int, list[str]] = defaultdict(list)
    for v in ids:
        rows[layer[v]].append(v)
    for d in dummies:
        rows[layer[d]].append(d)
    depths = sorted(rows)
    order = {v: i for r in rows.values() for i, v in enumerate(r)}

    def sweep(rng, nbrs):
        for depth in rng:
            row = rows[depth]
            if len(row) == 1:
                continue
            keyed = []
            for i, v in enumerate(row):
                ps = [order[u] for u in nbrs[v]]
                keyed.append((sum(ps) / len(ps) if ps else order[v], i, v))
            keyed.sort()
            rows[depth] = [v for _, _, v in keyed]
            for i, v in enumerate(rows[depth]):
                order[v] = i

    rounds = 4 if len(order) < 4000 else 1  # big graphs: fewer sweeps (each costs ~0.3 s per 10k boxes)
    for _ in range(rounds):  # barycentre sweeps, down then up
        sweep(depths[1:], up)
        sweep(depths[-2::-1], down)
    sweep(depths[1:], up)
    # x: start packed and centred, then pull every node towards its neighbours' mean, keeping the order
    x: dict[str, float] = {}
    for depth in depths:
        row = rows[depth]
        if len(row) == 1:
            x[row[0]] = 0.0
            continue
        xs = _isotonic([0.0] * len(row), [width[v] for v in row], gap_x)
        x.update(zip(row, xs))

    def place(rng, nbrs, other):
        for depth in rng:
            row = rows[depth]
            if len(row) == 1:  # a chain: straight under (or over) its neighbours
                v = row[0]
                ns = nbrs[v] or other[v]
                if ns:
                    x[v] = sum(x[u] for u in ns) / len(ns)
                continue
            want = []
            for v in row:
                ns = nbrs[v] or other[v]
                want.append(sum(x[u] for u in ns) / len(ns) if ns else x[v])
            x.update(zip(row, _isotonic(want, [width[v] for v in row], gap_x)))

    for _ in range(3 if rounds > 1 else 1):
        place(depths[1:], up, down)
        place(depths[-2::-1], down, up)
    place(depths[1:], up, down)
    # y: each layer as tall as its tallest box
    y: dict[int, float] = {}
    top = 0.0
    for depth in depths:
        h = max((sizes[v][1] if v in sizes else 0.0) for v in rows[depth])
        y[depth] = top + h / 2
        top += h + gap_y
    pos = {v: (x[v], y[layer[v]]) for v in ids}
    routes = []
    for (a, b), chain in zip(edges, chains):
        s, t = chain[0], chain[-1]
        pts = [(x[s], y[layer[s]] + sizes[s][1] / 2)]
        pts += [(x[v], y[layer[v]]) for v in chain[1:-1]]
        pts.append((x[t], y[layer[t]] - sizes[t][1] / 2))
        if len(pts) > 3:
            pts = _straightened(pts)
        if rank[a] > rank[b]:
            pts.reverse()
        routes.append(pts)
    return Layout(pos, routes, curved=False, engine="builtin")


def _straightened(pts: list[Point], tol: float = 0.5) -> list[Point]:
    """The route `pts` (y strictly increasing) without the points that lie within `tol` px of the straight line
    that replaces them: a long edge's dummies mostly stand in a straight line, and each point is payload sent to
    the browser and drawn. One pass: from the last point kept, the slopes that pass within `tol` of every point
    since (an interval, narrowed at each point); a point outside it ends the stretch at the point before."""
    out = [pts[0]]
    x0, y0 = pts[0]
    lo, hi = -float("inf"), float("inf")
    for k in range(1, len(pts)):
        x1, y1 = pts[k]
        if not lo <= (x1 - x0) / (y1 - y0) <= hi:
            out.append(pts[k - 1])
            x0, y0 = pts[k - 1]
            lo, hi = -float("inf"), float("inf")
        lo, hi = max(lo, (x1 - tol - x0) / (y1 - y0)), min(hi, (x1 + tol - x0) / (y1 - y0))
    out.append(pts[-1])
    return out


# -- dot -------------------------------------------------------------------------------------------------------


def _dot(sizes, edges, gap_x, gap_y) -> Layout:
    ids = list(sizes)
    num = {v: i for i, v in enumerate(ids)}
    lines = [
        "digraph G {",
        f"graph [rankdir=TB, nodesep={gap_x / 72:.3f}, ranksep={gap_y / 72:.3f}, splines=true];",
        'node [shape=box, fixedsize=true, label=""];',
        "edge [arrowhead=none];",
    ]
    for v, (w, h) in sizes.items():
        lines.append(f"n{num[v]} [width={w / 72:.3f}, height={h / 72:.3f}];")
    for a, b in edges:
        lines.append(f"n{num[a]} -> n{num[b]};")
    lines.append("}")
    done = subprocess.run(
        ["dot", "-Tplain"],
        input="\n".join(lines).encode(),
        capture_output=True,
        timeout=DOT_TIMEOUT_S,
        check=True,
    )
    pos: dict[str, Point] = {}
    pending: dict[tuple[int, int], list[list[Point]]] = defaultdict(list)
    height = 0.0
    for line in done.stdout.decode().splitlines():
        f = line.split()
        if not f:
            continue
        if f[0] == "graph":
            height = float(f[3])
        elif f[0] == "node":
            pos[ids[int(f[1][1:])]] = (float(f[2]) * 72, (height - float(f[3])) * 72)
        elif f[0] == "edge":
            n = int(f[3])
            pts = [(float(f[4 + 2 * k]) * 72, (height - float(f[5 + 2 * k])) * 72) for k in range(n)]
            pending[(int(f[1][1:]), int(f[2][1:]))].append(pts)
    if len(pos) != len(sizes):
        raise ValueError("dot left out nodes")
    routes = []
    for a, b in edges:
        got = pending.get((num[a], num[b]))
        if got:
            routes.append(got.pop(0))
        else:  # dot drew it reversed (a cycle)
            back = pending.get((num[b], num[a]))
            pts = back.pop(0)[::-1] if back else [pos[a], pos[b]]
            if len(pts) == 2:
                pts = [pts[0], pts[0], pts[1], pts[1]]
            routes.append(pts)
    return Layout(pos, routes, curved=True, engine="dot")


# -- quality ---------------------------------------------------------------------------------------------------


def polyline(route: list[Point], curved: bool, steps: int = 6) -> list[Point]:
    """A route as straight segments (Bézier pieces sampled)."""
    if not curved or len(route) < 4:
        return route
    out = [route[0]]
    for k in range(0, len(route) - 3, 3):
        p0, p1, p2, p3 = route[k : k + 4]
        for s in range(1, steps + 1):
            t = s / steps
            u = 1 - t
            out.append(
                (
                    u**3 * p0[0] + 3 * u * u * t * p1[0] + 3 * u * t * t * p2[0] + t**3 * p3[0],
                    u**3 * p0[1] + 3 * u * u * t * p1[1] + 3 * u * t * t * p2[1] + t**3 * p3[1],
                )
            )
    return out


def _cross(p, q, r, s) -> bool:
    def orient(a, b, c):
        v = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
        return (v > 1e-9) - (v < -1e-9)

    return orient(p, q, r) * orient(p, q, s) < 0 and orient(r, s, p) * orient(r, s, q) < 0


def _seg_box(p, q, box, shrink=2.0) -> bool:
    """Whether segment p-q passes through the box (x0, y0, x1, y1), shrunk a little (touching ends do not)."""
    x0, y0, x1, y1 = box[0] + shrink, box[1] + shrink, box[2] - shrink, box[3] - shrink
    t0, t1 = 0.0, 1.0
    dx, dy = q[0] - p[0], q[1] - p[1]
    for d, lo, hi, s in ((dx, x0, x1, p[0]), (dy, y0, y1, p[1])):
        if abs(d) < 1e-12:
            if s < lo or s > hi:
                return False
            continue
        a, b = (lo - s) / d, (hi - s) / d
        if a > b:
            a, b = b, a
        t0, t1 = max(t0, a), min(t1, b)
        if t0 > t1:
            return False
    return True


def _buckets(items, key, cell):
    grid = defaultdict(list)
    for it in items:
        x0, y0, x1, y1 = key(it)
        for gx in range(int(x0 // cell), int(x1 // cell) + 1):
            for gy in range(int(y0 // cell), int(y1 // cell) + 1):
                grid[(gx, gy)].append(it)
    return grid


def quality(layout: Layout, sizes: dict[str, tuple[float, float]], edges: list[tuple[str, str]]) -> dict:
    """Edge crossings, total edge length (px), pairs of overlapping boxes, and edge segments that pass through
    a box that is neither of their ends."""
    boxes = {
        v: (x - sizes[v][0] / 2, y - sizes[v][1] / 2, x + sizes[v][0] / 2, y + sizes[v][1] / 2)
        for v, (x, y) in layout.pos.items()
    }
    segs = []
    length = 0.0
    for k, ((a, b), route) in enumerate(zip(edges, layout.routes)):
        pts = polyline(route, layout.curved)
        for p, q in zip(pts, pts[1:]):
            segs.append((k, a, b, p, q))
            length += ((q[0] - p[0]) ** 2 + (q[1] - p[1]) ** 2) ** 0.5
    cell = 200.0

    def seg_box(s):
        p, q = s[3], s[4]
        return min(p[0], q[0]), min(p[1], q[1]), max(p[0], q[0]), max(p[1], q[1])

    grid = _buckets(segs, seg_box, cell)
    crossings = set()
    for bucket in grid.values():
        for i in range(len(bucket)):
            k1, a1, b1, p1, q1 = bucket[i]
            for j in range(i + 1, len(bucket)):
                k2, a2, b2, p2, q2 = bucket[j]
                if k1 == k2 or {a1, b1} & {a2, b2}:
                    continue
                if _cross(p1, q1, p2, q2):
                    crossings.add((min(k1, k2), max(k1, k2)))
    box_grid = _buckets(list(boxes.items()), lambda it: it[1], cell)
    overlaps = set()
    for bucket in box_grid.values():
        for i in range(len(bucket)):
            for j in range(i + 1, len(bucket)):
                (u, A), (v, B) = bucket[i], bucket[j]
                if A[0] < B[2] - 1 and B[0] < A[2] - 1 and A[1] < B[3] - 1 and B[1] < A[3] - 1:
                    overlaps.add((min(u, v), max(u, v)))
    through = set()
    for (gx, gy), bucket in grid.items():
        for v, box in box_grid.get((gx, gy), []):
            for k, a, b, p, q in bucket:
                if v != a and v != b and _seg_box(p, q, box):
                    through.add((k, v))
    return {
        "crossings": len(crossings),
        "length": round(length),
        "overlaps": len(overlaps),
        "through": len(through),
        "seconds": round(layout.seconds, 3),
        "engine": layout.engine,
    }
