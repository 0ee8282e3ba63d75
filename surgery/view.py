"""Graph → what the app draws: layered positions computed here (the browser only paints), colours by verdict,
Constant nodes drawn small beside their consumer, big graphs collapsed by name scope, focus windows, search.

Pure data in, pure data out: the app turns a `View` into the graph component's payload.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import asdict, dataclass, field

from onnx import ModelProto

from surgery.backends.base import Status, Verdict
from surgery.graph import GraphFacts, _all_inputs

COLORS = {
    "supported": "#2e9d57",
    "rejected": "#d64545",
    "unknown": "#e0a526",
    "not checked": "#8d99a6",
    "io": "#dfe6ee",
    "constant": "#c9d3de",
}
LEGEND = [
    ("supported", "accepted by the backend"),
    ("rejected", "rejected — click for the backend's words"),
    ("unknown", "no verdict (e.g. needs a plugin this backend lacks)"),
    ("not checked", "no backend selected"),
]
DX, DY = 190, 85  # spacing between nodes in a layer / between layers
COLLAPSE_OVER = 1500  # graphs with more nodes open collapsed by name scope


@dataclass
class ViewNode:
    id: str
    label: str
    title: str
    x: float
    y: float
    color: str
    shape: str = "box"
    size: int = 14
    kind: str = "op"  # op | constant | input | output | group
    status: str = "not checked"


@dataclass
class View:
    nodes: list[ViewNode] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)
    collapsed: bool = False
    total_nodes: int = 0
    note: str = ""

    def payload(self, selected: str | None = None) -> dict:
        return {
            "nodes": [asdict(n) for n in self.nodes],
            "edges": [{"from": a, "to": b} for a, b in self.edges],
            "selected": selected,
            "legend": [{"status": s, "color": COLORS[s], "text": t} for s, t in LEGEND],
        }


def status_of(verdict: Verdict | None) -> str:
    if verdict is None:
        return "not checked"
    return {Status.SUPPORTED: "supported", Status.REJECTED: "rejected"}.get(verdict.status, "unknown")


def _layers(facts: GraphFacts, keep: set[int]) -> dict[int, int]:
    """Longest-path layer of every kept node (inputs at 0)."""
    layer: dict[int, int] = {}
    for i in facts.order:
        if i not in keep:
            continue
        deps = [facts.producer[x] for x in _all_inputs(facts.model.graph.node[i]) if x in facts.producer]
        layer[i] = 1 + max((layer[d] for d in deps if d in layer), default=0)
    return layer


def _scope(name: str, depth: int) -> str:
    parts = [p for p in name.split("/") if p]
    return "/" + "/".join(parts[:depth]) if len(parts) > depth else ""


def neighbourhood(facts: GraphFacts, center: int, hops: int) -> set[int]:
    """Nodes within `hops` edges (either direction) of `center`."""
    graph = facts.model.graph
    seen, frontier = {center}, deque([(center, 0)])
    while frontier:
        i, d = frontier.popleft()
        if d == hops:
            continue
        near = [facts.producer[x] for x in _all_inputs(graph.node[i]) if x in facts.producer]
        for o in graph.node[i].output:
            near += facts.consumers.get(o, [])
        for j in near:
            if j not in seen:
                seen.add(j)
                frontier.append((j, d + 1))
    return seen


def search(facts: GraphFacts, text: str, limit: int = 50) -> list[str]:
    """Node keys whose name, key or op type contains `text` (case-insensitive)."""
    t = text.strip().lower()
    if not t:
        return []
    return [
        k for k, n in zip(facts.keys, facts.model.graph.node) if t in k.lower() or t in n.op_type.lower()
    ][:limit]


def _title(node, key: str, verdicts: dict[str, Verdict]) -> str:
    v = verdicts.get(key)
    text = f"{node.op_type} {key}"
    if v is not None and v.message:
        text += f"\n{v.status.value}: {v.message[:300]}"
    return text


def build_view(
    model: ModelProto,
    verdicts: dict[str, Verdict] | None = None,
    *,
    facts: GraphFacts | None = None,
    focus: str | None = None,
    hops: int = 3,
    scope: str | None = None,
    collapse_over: int = COLLAPSE_OVER,
) -> View:
    """The drawing of `model`: whole, around `focus` (n hops), inside `scope`, or collapsed by scopes."""
    facts = facts or GraphFacts.of(model, infer=False)
    verdicts = verdicts or {}
    graph = model.graph
    n_total = len(graph.node)
    constants = {i for i, n in enumerate(graph.node) if n.op_type == "Constant"}
    keep = set(range(n_total))
    note = ""
    if focus is not None and focus in facts.index:
        keep = neighbourhood(facts, facts.index[focus], hops)
        note = f"{len(keep)} of {n_total} nodes within {hops} hops of {focus}"
    elif scope:
        keep = {i for i, k in enumerate(facts.keys) if (graph.node[i].name or k).startswith(scope)}
        note = f"{len(keep)} nodes in scope {scope}"
    elif n_total > collapse_over:
        return _collapsed(facts, verdicts, n_total)
    # Constants are drawn beside their first consumer, not in a layer of their own
    ops = keep - constants
    layer = _layers(facts, ops)
    by_layer: dict[int, list[int]] = defaultdict(list)
    for i in facts.order:
        if i in layer:
            by_layer[layer[i]].append(i)
    view = View(total_nodes=n_total, note=note)
    pos: dict[int, tuple[float, float]] = {}
    for depth, members in sorted(by_layer.items()):
        width = (len(members) - 1) * DX
        for k, i in enumerate(members):
            pos[i] = (k * DX - width / 2, depth * DY)
    for i, (x, y) in pos.items():
        node, key = graph.node[i], facts.keys[i]
        status = status_of(verdicts.get(key))
        label = node.op_type if len(node.op_type) < 24 else node.op_type[:22] + "…"
        view.nodes.append(
            ViewNode(key, label, _title(node, key, verdicts), x, y, COLORS[status], status=status)
        )
    for i in keep & constants:
        node, key = graph.node[i], facts.keys[i]
        readers = [j for o in node.output for j in facts.consumers.get(o, []) if j in pos]
        if not readers:
            continue
        cx, cy = pos[readers[0]]
        view.nodes.append(
            ViewNode(
                key,
                "const",
                _title(node, key, verdicts),
                cx - 95,
                cy - 38,
                COLORS["constant"],
                "dot",
                6,
                "constant",
                status_of(verdicts.get(key)),
            )
        )
        pos[i] = (cx - 95, cy - 38)
    drawn = set(pos)
    for i in drawn:
        for x in dict.fromkeys(_all_inputs(graph.node[i])):
            p = facts.producer.get(x)
            if p is not None and p in drawn:
                view.edges.append((facts.keys[p], facts.keys[i]))
    # graph inputs and outputs, small, above their first reader / below their producer
    for name in facts.graph_inputs:
        readers = [j for j in facts.consumers.get(name, []) if j in pos]
        if readers:
            x, y = pos[readers[0]]
            view.nodes.append(
                ViewNode(
                    f"input:{name}",
                    name,
                    f"graph input {name}",
                    x,
                    y - DY * 0.8,
                    COLORS["io"],
                    "ellipse",
                    10,
                    "input",
                )
            )
            view.edges += [(f"input:{name}", facts.keys[j]) for j in readers]
    for name in facts.graph_outputs:
        p = facts.producer.get(name)
        if p is not None and p in pos:
            x, y = pos[p]
            view.nodes.append(
                ViewNode(
                    f"output:{name}",
                    name,
                    f"graph output {name}",
                    x,
                    y + DY * 0.8,
                    COLORS["io"],
                    "ellipse",
                    10,
                    "output",
                )
            )
            view.edges.append((facts.keys[p], f"output:{name}"))
    return view


def _collapsed(facts: GraphFacts, verdicts: dict[str, Verdict], n_total: int) -> View:
    """One box per name scope (the depth that gives a readable number of groups), coloured by its worst verdict."""
    graph = facts.model.graph
    names = [graph.node[i].name or k for i, k in enumerate(facts.keys)]
    depth, groups = 1, {}
    for depth in range(1, 6):
        groups = defaultdict(list)
        for i, name in enumerate(names):
            groups[_scope(name, depth) or "(top level)"].append(i)
        if len(groups) >= 12:
            break
    if len(groups) > 400:  # flat names: chunk the topological order instead
        groups = defaultdict(list)
        for k, i in enumerate(facts.order):
            groups[f"#nodes {k // 250 * 250}–{k // 250 * 250 + 249}"].append(i)
    group_of = {i: g for g, members in groups.items() for i in members}
    order_pos = {i: p for p, i in enumerate(facts.order)}
    ranked = sorted(groups, key=lambda g: min(order_pos[i] for i in groups[g]))
    view = View(
        total_nodes=n_total,
        collapsed=True,
        note=f"{n_total} nodes collapsed into {len(groups)} groups; click a group to open it",
    )
    cols = max(1, int(len(ranked) ** 0.5))
    for k, g in enumerate(ranked):
        members = groups[g]
        statuses = {status_of(verdicts.get(facts.keys[i])) for i in members}
        worst = next((s for s in ("rejected", "unknown", "supported") if s in statuses), "not checked")
        rejected = sum(status_of(verdicts.get(facts.keys[i])) == "rejected" for i in members)
        label = f"{g}\n{len(members)} nodes" + (f", {rejected} rejected" if rejected else "")
        view.nodes.append(
            ViewNode(
                f"group:{g}",
                label,
                label,
                (k % cols) * DX * 1.4,
                (k // cols) * DY * 1.5,
                COLORS[worst],
                "box",
                18,
                "group",
                worst,
            )
        )
    edges = set()
    for i, node in enumerate(graph.node):
        for x in _all_inputs(node):
            p = facts.producer.get(x)
            if p is not None and group_of[p] != group_of[i]:
                edges.add((f"group:{group_of[p]}", f"group:{group_of[i]}"))
    view.edges = sorted(edges)
    return view
