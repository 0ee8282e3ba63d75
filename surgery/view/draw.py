"""Graph → what the app draws: a layered layout computed here (surgery.layout; the browser only paints), node
labels and hover texts, shapes on edges, colours by verdict, constants and graph inputs drawn small beside each
reader, big graphs collapsed into labelled groups (surgery.view.groups) that open in place, focus windows, and
the before/after drawing of a step (`diff_view`).

Pure data in, pure data out: `build_view` gives a `View`; `View.payload()` is what the graph component reads.
The layout does not depend on verdicts: `structure()` lays out once, `paint()` colours it for one report."""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from onnx import ModelProto

from surgery.graph import GraphFacts, all_inputs
from surgery.layout import layered
from surgery.model import gc_paused
from surgery.verdict import Verdict
from surgery.view.find import neighbourhood
from surgery.view.groups import groups_of, scope_label, scope_members
from surgery.view.labels import (
    constant_label,
    count_text,
    group_label,
    is_small,
    node_info,
    shape_text,
    status_of,
    tensor_label,
    verdict_line,
)

COLORS = {
    "supported": "#2e9d57",
    "rejected": "#d64545",
    "unknown": "#e0a526",
    "not checked": "#8d99a6",
    "io": "#dfe6ee",
    "constant": "#e4e9ef",
}
LEGEND = [
    ("supported", "accepted by the backend"),
    ("rejected", "rejected — click for the backend's words"),
    ("unknown", "no verdict (e.g. needs a plugin this backend lacks)"),
    ("not checked", "no backend selected"),
]
WORST_FIRST = ("rejected", "unknown", "supported", "not checked")
COLLAPSE_OVER = 1500  # a selection with more nodes opens collapsed into groups
SHAPES_BELOW = 3000  # edges show their tensor's shape by default below this many drawn nodes
# Box sizes in canvas pixels for the component's fonts (op 14 px, constant 11 px, input/output 12 px): the layout
# reserves them, so labels never overlap. A character of the label font is at most ~0.6 em wide.
FONT = {"op": 14, "group": 14, "constant": 11, "input": 12, "output": 12}
HEIGHT = {"op": 32, "group": 58, "constant": 22, "input": 26, "output": 26}


def box_size(kind: str, label: str) -> tuple[float, float]:
    lines = label.split("\n")
    em = FONT[kind] * 0.6
    widest = max(len(x) for x in lines)
    return max(48.0 if kind == "op" else 24.0, widest * em + 22), float(HEIGHT[kind])


@dataclass
class ViewNode:
    id: str
    label: str
    title: str  # plain text, shown on hover (never HTML)
    x: float
    y: float
    color: str
    shape: str = "box"
    size: int = 14
    kind: str = "op"  # op | constant | input | output | group
    status: str = "not checked"
    ref: str = ""  # what a click selects: a node key, "group:<scope>", or "" (nothing)
    w: float = 0.0
    h: float = 0.0
    badge: str = ""  # groups: "3 rejected" / "2 unknown"
    info: str = ""  # the hover text before verdicts (name, op, domain, typed inputs and outputs)
    members: list[int] = field(default_factory=list)  # groups: node indices (not sent to the browser)
    order: int = 0  # topological position of the node (or of a group's first member)
    diff: str = ""  # in a comparison: "removed" (only before), "added" (only after), "" (in both)


@dataclass
class View:
    nodes: list[ViewNode] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)
    routes: list[list[tuple[float, float]]] = field(default_factory=list)  # one per edge
    edge_labels: list[str] = field(default_factory=list)  # one per edge: the tensor's dtype and shape, or ""
    curved: bool = False  # routes are Bézier control points (dot) rather than polylines
    collapsed: bool = False
    total_nodes: int = 0
    note: str = ""
    start: str | None = None  # where the first view is centred: the first rejected node, else the inputs
    engine: str = ""
    layout_seconds: float = 0.0
    opened: str | None = None  # the group opened in place, if any
    inner_groups: set[str] = field(default_factory=set)  # groups drawn inside the opened one (a big one)
    frame: tuple[float, float, float, float] | None = None  # the area the first view shows (default: all)

    def layout_id(self) -> str:
        h = hashlib.sha1()
        for n in self.nodes:
            h.update(f"{n.id}|{n.x:.0f}|{n.y:.0f};".encode())
        return h.hexdigest()[:16]

    def payload(self, selected: str | None = None, shapes: bool | None = None) -> dict:
        if shapes is None:
            shapes = len(self.nodes) < SHAPES_BELOW
        keys = ("id", "label", "title", "x", "y", "color", "kind", "status", "ref", "w", "h", "badge", "diff")
        return {
            "nodes": [{k: getattr(n, k) for k in keys} for n in self.nodes],
            "edges": [
                {"from": a, "to": b, "pts": [round(c, 1) for p in r for c in p], "label": lab}
                for (a, b), r, lab in zip(self.edges, self.routes, self.edge_labels)
            ],
            "curved": self.curved,
            "shapes": bool(shapes),
            "selected": selected,
            "start": self.start,
            "layout_id": self.layout_id(),
            "collapsed": self.collapsed,
            "frame": self.frame,
            "legend": [{"status": s, "color": COLORS[s], "text": t} for s, t in LEGEND],
        }

    def side(self, which: str) -> View:
        """One side of a comparison, at the same positions as the overlay (so the two sides line up): "before"
        leaves out what the step added, "after" what it removed."""
        drop = "added" if which == "before" else "removed"
        keep = [n for n in self.nodes if n.diff != drop]
        ids = {n.id for n in keep}
        picked = [k for k, (a, b) in enumerate(self.edges) if a in ids and b in ids]
        out = View(**{**self.__dict__})
        out.nodes = keep
        out.edges = [self.edges[k] for k in picked]
        out.routes = [self.routes[k] for k in picked]
        out.edge_labels = [self.edge_labels[k] for k in picked]
        out.start = self.start if self.start in ids else next((n.id for n in keep if n.diff), None)
        out.frame = (
            (
                min(n.x - n.w / 2 for n in self.nodes),
                min(n.y - n.h / 2 for n in self.nodes),
                max(n.x + n.w / 2 for n in self.nodes),
                max(n.y + n.h / 2 for n in self.nodes),
            )
            if self.nodes
            else None
        )
        return out

    def counts(self) -> dict[str, int]:
        """How many drawn operator nodes (or groups) have each status."""
        out: dict[str, int] = defaultdict(int)
        for n in self.nodes:
            if n.kind in ("op", "group"):
                out[n.status] += 1
        return dict(out)


def _draw(
    facts: GraphFacts,
    singles: set[int],
    groups: list[tuple[str, str, list[int]]],
    *,
    note: str = "",
    engine: str = "auto",
) -> View:
    """Lay out `singles` (node indices, drawn one by one) and `groups` (drawn one box each)."""
    graph = facts.model.graph
    pos_of = facts.position
    drawn: dict[int, str] = {}  # node index -> drawn id (its own box or its group's)
    view = View(total_nodes=len(graph.node), note=note, collapsed=bool(groups))
    units: list[ViewNode] = []
    for gid, label, members in groups:
        text = group_label(label, members, facts)
        w, h = box_size("group", text)
        units.append(
            ViewNode(
                f"group:{gid}",
                text,
                "",
                0,
                0,
                COLORS["not checked"],
                kind="group",
                ref=f"group:{gid}",
                w=w,
                h=h,
                info=f"group {label}\n{count_text(len(members))} — click to open",
                members=list(members),
                order=min(pos_of[i] for i in members),
            )
        )
        for i in members:
            drawn[i] = f"group:{gid}"
    small = {i for i in singles if is_small(graph.node[i])}
    for i in singles - small:
        node, key = graph.node[i], facts.keys[i]
        label = node.op_type if len(node.op_type) < 24 else node.op_type[:22] + "…"
        w, h = box_size("op", label)
        # the hover text before verdicts, once per layout: not again for every target each paint colours it by
        units.append(
            ViewNode(
                key,
                label,
                "",
                0,
                0,
                COLORS["not checked"],
                ref=key,
                w=w,
                h=h,
                info=node_info(facts, i),
                order=pos_of[i],
            )
        )
        drawn[i] = key
    by_id = {u.id: u for u in units}
    edges: dict[tuple[str, str], str] = {}
    extra: list[ViewNode] = []

    def add_edge(a: str, b: str, label: str) -> None:
        if a != b and (a, b) not in edges:
            edges[(a, b)] = label

    # small things get a copy beside each reader, no long edges: a reader's Constant inputs share one compact
    # box (their values or shapes), each graph input gets its own
    consts: dict[str, list[int]] = defaultdict(list)
    for i in sorted(small, key=pos_of.__getitem__):
        node = graph.node[i]
        for r in dict.fromkeys(
            drawn[j] for o in node.output for j in facts.consumers.get(o, []) if j in drawn
        ):
            consts[r].append(i)
    for r, cs in consts.items():
        labels = [constant_label(facts, graph.node[i]) for i in cs]
        label = " · ".join(labels)
        if len(label) > 22:
            label = labels[0] if len(cs) == 1 else f"{len(cs)} constants"
        w, h = box_size("constant", label)
        nid = f"const:{facts.keys[cs[0]]}@{r}"
        info = "\n".join(
            f"Constant {facts.keys[i]}: {tensor_label(facts.info(graph.node[i].output[0])) or '?'} = {lab}"
            for i, lab in zip(cs, labels)
        )
        extra.append(
            ViewNode(
                nid,
                label,
                "",
                0,
                0,
                COLORS["constant"],
                kind="constant",
                ref=facts.keys[cs[0]],
                w=w,
                h=h,
                info=info,
                order=by_id[r].order,
            )
        )
        add_edge(nid, r, "")
    for name in facts.graph_inputs:
        readers = dict.fromkeys(drawn[j] for j in facts.consumers.get(name, []) if j in drawn)
        info = facts.info(name)
        label = name if len(name) <= 24 else name[:23] + "…"
        for r in readers:
            w, h = box_size("input", label)
            nid = f"input:{name}@{r}"
            extra.append(
                ViewNode(
                    nid,
                    label,
                    "",
                    0,
                    0,
                    COLORS["io"],
                    kind="input",
                    w=w,
                    h=h,
                    info=f"graph input {name}\n  {info.dtype_name.lower()} {shape_text(info)}",
                    order=by_id[r].order,
                )
            )
            add_edge(nid, r, tensor_label(info))
    producer, seen = facts.producer, set()
    reads = facts.consumers.items()  # every read, subgraphs' outer reads included
    # a window reads few of the model's tensors: only those, in the same order (at 100k nodes the whole walk is
    # ~0.05 s of a 10-node focus window)
    if len(drawn) * 4 < len(graph.node):
        wanted = {x for i in drawn for x in all_inputs(graph.node[i])}
        reads = ((x, facts.consumers[x]) for x in facts.consumers if x in wanted)
    for x, readers in reads:
        p = producer.get(x)
        if p is None or p in small:
            continue
        a = drawn.get(p)
        if a is None:
            continue
        grouped = a.startswith("group:")
        label = None
        for i in readers:
            b = drawn.get(i)
            if b is None or b == a or i in small or (a, b) in seen:
                continue
            seen.add((a, b))
            if label is None:
                label = "" if grouped else tensor_label(facts.info(x))
            add_edge(a, b, label)
    for name in facts.graph_outputs:
        p = facts.producer.get(name)
        if p is not None and p in drawn:
            info = facts.info(name)
            label = name if len(name) <= 24 else name[:23] + "…"
            w, h = box_size("output", label)
            extra.append(
                ViewNode(
                    f"output:{name}",
                    label,
                    "",
                    0,
                    0,
                    COLORS["io"],
                    kind="output",
                    w=w,
                    h=h,
                    info=f"graph output {name}\n  {info.dtype_name.lower()} {shape_text(info)}",
                    order=by_id[drawn[p]].order,
                )
            )
            add_edge(drawn[p], f"output:{name}", tensor_label(info))
    rank = {"input": 0, "constant": 1, "op": 2, "group": 2, "output": 3}
    everything = sorted(units + extra, key=lambda n: (n.order, rank[n.kind]))
    sizes = {n.id: (n.w, n.h) for n in everything}
    edge_list = list(edges)
    anchors = {n.id for n in everything if n.kind == "input"}
    lay = layered(sizes, edge_list, engine=engine, anchors=anchors)
    for n in everything:
        n.x, n.y = lay.pos[n.id]
    view.nodes = everything
    view.edges = edge_list
    view.routes = lay.routes
    view.edge_labels = [edges[e] for e in edge_list]
    view.curved, view.engine, view.layout_seconds = lay.curved, lay.engine, lay.seconds
    return view


def structure(
    facts: GraphFacts,
    *,
    focus: str | None = None,
    hops: int = 3,
    scope: str | None = None,
    context: str | None = None,
    collapse_over: int = COLLAPSE_OVER,
    engine: str = "auto",
) -> View:
    """The layout of what is drawn, before any verdict: the whole graph, the `hops`-neighbourhood of `focus`,
    or the nodes in `scope`. A selection of more than `collapse_over` nodes is collapsed into groups. With
    `context` (the scope `scope` was opened from, "" for the whole graph), `scope` opens in place: its nodes are
    drawn among the other groups of `context`."""
    with gc_paused():
        return _window(facts, focus, hops, scope, context, collapse_over, engine)


def _window(facts, focus, hops, scope, context, collapse_over, engine) -> View:
    """`structure`, with the cycle collector as the caller left it."""
    n_total = len(facts.model.graph.node)
    if focus is not None and focus in facts.index:
        keep = neighbourhood(facts, facts.index[focus], hops)
        return _draw(
            facts,
            keep,
            [],
            note=f"{len(keep)} of {n_total} nodes within {hops} hops of {focus}",
            engine=engine,
        )
    if scope:
        members = scope_members(facts, scope)
        if context is not None:
            outer = scope_members(facts, context) if context else facts.order
            siblings = [g for g in groups_of(facts, outer, context or None) if g[0] != scope]
            inside = set(members)
            if len(members) > collapse_over:
                opened = groups_of(facts, members, scope)
                view = _draw(facts, set(), siblings + opened, engine=engine)
                view.inner_groups = {g for g, _, _ in opened}
                view.note = (
                    f"{scope_label(scope)}: {len(members)} nodes in {len(opened)} groups, opened in place"
                )
            else:
                view = _draw(facts, inside, siblings, engine=engine)
                view.note = f"{len(members)} of {n_total} nodes: {scope_label(scope)}, opened in place"
            view.opened = scope
            return view
        if len(members) > collapse_over:
            return _collapsed(facts, members, scope, engine)
        return _draw(
            facts,
            set(members),
            [],
            note=f"{len(members)} of {n_total} nodes: {scope_label(scope)}",
            engine=engine,
        )
    if n_total > collapse_over:
        return _collapsed(facts, facts.order, None, engine)
    return _draw(facts, set(range(n_total)), [], engine=engine)


def _collapsed(facts: GraphFacts, members: list[int], scope: str | None, engine: str) -> View:
    groups = groups_of(facts, members, scope)
    inside = f" of {scope_label(scope)}" if scope else ""
    return _draw(
        facts,
        set(),
        groups,
        note=f"{len(members)} nodes{inside} collapsed into {len(groups)} groups; click a group to open it",
        engine=engine,
    )


def paint(view: View, facts: GraphFacts, verdicts: dict[str, Verdict] | None = None, reports=()) -> View:
    """Colour `view` by `verdicts` (the chosen report's, by node key) and write every node's hover text with
    each report's verdict in one line (`reports`: Report objects, or (label, verdicts-by-key) pairs). Returns a
    painted copy; the layout is shared."""
    from copy import copy

    verdicts = verdicts or {}
    pairs = [(r, r.by_node()) if hasattr(r, "by_node") else r for r in reports]
    pairs = [(getattr(r, "label", r), getattr(r, "backend", ""), by) for r, by in pairs]
    out = copy(view)
    out.nodes = []
    first_bad: tuple[int, str] | None = None
    for n in view.nodes:
        m = copy(n)
        if n.kind == "op":
            v = verdicts.get(n.ref)
            m.status = status_of(v)
            m.color = COLORS[m.status]
            i = facts.index.get(n.ref)
            info = n.info or (node_info(facts, i) if i is not None else n.ref)
            lines = [verdict_line(label, by.get(n.ref), backend) for label, backend, by in pairs]
            m.title = "\n".join([info, *lines])
            if m.status == "rejected" and (first_bad is None or n.order < first_bad[0]):
                first_bad = (n.order, n.id)
        elif n.kind == "group":
            statuses = Counter(status_of(verdicts.get(facts.keys[i])) for i in n.members)
            m.status = next(s for s in WORST_FIRST if statuses.get(s))
            m.color = COLORS[m.status]
            bad = [f"{statuses[s]} {s}" for s in ("rejected", "unknown") if statuses.get(s)]
            m.badge = ", ".join(bad)
            m.title = n.info + ("\n" + m.badge if m.badge else "")
            if statuses.get("rejected") and (first_bad is None or n.order < first_bad[0]):
                first_bad = (n.order, n.id)
        else:
            m.title = n.info
        out.nodes.append(m)
    out.start = first_bad[1] if first_bad else None
    return out


def build_view(
    model: ModelProto,
    verdicts: dict[str, Verdict] | None = None,
    *,
    facts: GraphFacts | None = None,
    focus: str | None = None,
    hops: int = 3,
    scope: str | None = None,
    context: str | None = None,
    collapse_over: int = COLLAPSE_OVER,
    reports=(),
    engine: str = "auto",
) -> View:
    """The drawing of `model`: whole, around `focus` (n hops), inside `scope` (in place within `context`);
    collapsed into groups when the selection has more than `collapse_over` nodes (a focus window never is);
    coloured by `verdicts`, hover texts with every report's verdict."""
    facts = facts or GraphFacts.of(model, infer=False)
    view = structure(
        facts,
        focus=focus,
        hops=hops,
        scope=scope,
        context=context,
        collapse_over=collapse_over,
        engine=engine,
    )
    return paint(view, facts, verdicts, reports)


def _signature(facts: GraphFacts, i: int) -> tuple:
    node = facts.model.graph.node[i]
    attrs = tuple(sorted((a.name, a.SerializeToString(deterministic=True)) for a in node.attribute))
    return (node.op_type, node.domain, tuple(node.input), tuple(node.output), attrs)


def diff_view(
    before: GraphFacts,
    after: GraphFacts,
    verdicts: dict[str, Verdict] | None = None,
    *,
    hops: int = 2,
    reports=(),
    engine: str = "auto",
) -> View:
    """Before and after one or more steps, overlaid: the nodes a step removed ("removed", drawn struck out in
    red), the nodes it added or changed ("added", outlined), and what is around them (`hops` edges away, in
    both models), laid out together. Colours and hover texts follow `verdicts` / `reports` (of the after model;
    removed nodes keep their key's verdict where the before model had one)."""
    sig_b = {k: _signature(before, i) for i, k in enumerate(before.keys)}
    sig_a = {k: _signature(after, i) for i, k in enumerate(after.keys)}
    removed = {k for k in sig_b if sig_a.get(k) != sig_b[k]}
    added = {k for k in sig_a if sig_b.get(k) != sig_a[k]}
    near_b: set[int] = set()
    for k in removed:
        near_b |= neighbourhood(before, before.index[k], hops)
    near_a: set[int] = set()
    for k in added:
        near_a |= neighbourhood(after, after.index[k], hops)
    for k in {before.keys[i] for i in near_b} & set(after.index):  # the same context on both sides
        near_a |= {after.index[k]}
    for k in {after.keys[i] for i in near_a} & set(before.index):
        near_b |= {before.index[k]}
    view_a = _draw(after, near_a, [], engine="builtin")  # only for its boxes: laid out again below
    view_b = _draw(before, near_b, [], engine="builtin")
    nodes: dict[str, ViewNode] = {}
    for n in view_b.nodes:
        if n.kind == "op" and n.ref in removed:
            n.diff = "removed"
            n.id = f"removed:{n.id}"
            nodes[n.id] = n
    for n in view_a.nodes:
        if n.kind == "op" and n.ref in added:
            n.diff = "added"
        nodes.setdefault(n.id, n)
    for n in view_b.nodes:  # what only the before model draws beside them (e.g. the constants folded away)
        if n.id not in nodes and n.diff != "removed":
            n.diff = "removed" if n.ref in removed else ""
            nodes[n.id] = n
    rename = {n.id[len("removed:") :]: n.id for n in nodes.values() if n.diff == "removed" and n.kind == "op"}
    edges: dict[tuple[str, str], str] = {}
    for (a, b), lab in zip(view_a.edges, view_a.edge_labels):
        edges.setdefault((a, b), lab)
    for (a, b), lab in zip(view_b.edges, view_b.edge_labels):
        a2, b2 = rename.get(a, a), rename.get(b, b)
        if a2 in nodes and b2 in nodes:
            edges.setdefault((a2, b2), lab)
    ordered = sorted(nodes.values(), key=lambda n: (n.order, n.diff != "removed"))
    sizes = {n.id: (n.w, n.h) for n in ordered}
    edge_list = [e for e in edges if e[0] in sizes and e[1] in sizes]
    lay = layered(sizes, edge_list, engine=engine, anchors={n.id for n in ordered if n.kind == "input"})
    for n in ordered:
        n.x, n.y = lay.pos[n.id]
    view = View(
        nodes=ordered,
        edges=edge_list,
        routes=lay.routes,
        edge_labels=[edges[e] for e in edge_list],
        curved=lay.curved,
        total_nodes=len(after.model.graph.node),
        note=f"{len(removed)} node(s) removed, {len(added)} added or changed; {hops} hops around them",
        engine=lay.engine,
        layout_seconds=lay.seconds,
    )
    painted = paint(view, after, verdicts, reports)
    for n in painted.nodes:  # removed nodes: their hover text from the before model
        if n.diff == "removed" and n.kind == "op" and n.ref in before.index:
            n.title = "removed by the step\n" + node_info(before, before.index[n.ref])
            n.status, n.color = "not checked", COLORS["not checked"]
        elif n.diff == "added":
            n.title = "added or changed by the step\n" + n.title
    changed = [n for n in painted.nodes if n.diff and n.kind == "op"]
    painted.start = changed[0].id if changed else painted.start
    return painted
