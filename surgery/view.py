"""Graph → what the app draws: layered positions computed here (the browser only paints), colours by verdict,
constants and graph inputs drawn small beside each consumer (no long edges), big graphs collapsed by name
scope with drill-down, focus windows, search.

Pure data in, pure data out: the app turns a `View` into the graph component's payload.

Scopes (the `scope` argument, and the id of a group node after its ``group:`` prefix):
- ``/a/b``: the nodes named ``/a/b/...``;
- ``level:/a``: the nodes directly in ``/a`` (no deeper scope); ``level:`` is the top level;
- ``range:P-Q``: the nodes at topological positions P..Q (used where scopes alone would give too many groups).
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
WORST_FIRST = ("rejected", "unknown", "supported", "not checked")
DX, DY = 190, 85  # spacing between nodes in a layer / between layers
SMALL_DX, SMALL_DY = 105, 22  # where a constant / input copy sits, left of and above its consumer
COLLAPSE_OVER = 1500  # a selection with more nodes opens collapsed by name scope
MIN_GROUPS, MAX_GROUPS = 6, 60


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
    ref: str = ""  # what a click selects: a node key, "group:<scope>", or "" (nothing)


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

    def counts(self) -> dict[str, int]:
        """How many drawn operator nodes (or groups) have each status."""
        out: dict[str, int] = defaultdict(int)
        for n in self.nodes:
            if n.kind in ("op", "group"):
                out[n.status] += 1
        return dict(out)


def status_of(verdict: Verdict | None) -> str:
    if verdict is None:
        return "not checked"
    return {Status.SUPPORTED: "supported", Status.REJECTED: "rejected"}.get(verdict.status, "unknown")


def _parts(name: str) -> list[str]:
    return [p for p in name.split("/") if p]


def _scope(name: str, depth: int) -> str:
    """The first `depth` scope parts of a node name ("" when the name has no scope that deep)."""
    parts = _parts(name)
    return "/" + "/".join(parts[:depth]) if len(parts) > depth else ""


def _names(facts: GraphFacts) -> list[str]:
    return [n.name or k for n, k in zip(facts.model.graph.node, facts.keys)]


def scope_members(facts: GraphFacts, scope: str) -> list[int]:
    """Indices (topological order) of the nodes in `scope` (see the module docstring for the forms)."""
    if scope.startswith("range:"):
        a, _, b = scope[6:].partition("-")
        return facts.order[int(a) : int(b) + 1]
    names = _names(facts)
    if scope.startswith("level:"):
        base = scope[6:]
        depth = len(_parts(base))
        return [
            i
            for i in facts.order
            if (not base or names[i].startswith(base + "/")) and not _scope(names[i], depth + 1)
        ]
    return [i for i in facts.order if names[i].startswith(scope + "/")]


def scope_label(scope: str) -> str:
    if scope.startswith("level:"):
        return (scope[6:] or "top level") + " (directly)"
    if scope.startswith("range:"):
        return "nodes " + scope[6:].replace("-", "–") + " in topological order"
    return scope


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
    """Node keys whose name, key or op type contains `text` (case-insensitive); exact op-type matches first."""
    t = text.strip().lower()
    if not t:
        return []
    nodes = facts.model.graph.node
    hits = [
        k
        for k, n in zip(facts.keys, nodes)
        if t in k.lower() or t in n.name.lower() or t in n.op_type.lower()
    ]
    exact = [k for k in hits if nodes[facts.index[k]].op_type.lower() == t]
    return list(dict.fromkeys(exact + hits))[:limit]


def next_rejected(verdicts: dict[str, Verdict], facts: GraphFacts, current: str | None) -> str | None:
    """The next rejected node after `current` in topological order (wrapping around), or None if none is."""
    bad = [facts.keys[i] for i in facts.order if status_of(verdicts.get(facts.keys[i])) == "rejected"]
    if not bad:
        return None
    if current not in facts.index:
        return bad[0]
    pos = {facts.keys[i]: p for p, i in enumerate(facts.order)}
    after = [k for k in bad if pos[k] > pos[current]]
    return (after or bad)[0]


def constant_value(facts: GraphFacts, tensor: str, limit: int = 64):
    """The value of `tensor` when it is an initializer or a Constant node's output with at most `limit`
    elements (a numpy array), else None. External data is not read."""
    from onnx import numpy_helper

    from surgery.graph import constant_tensor

    t = facts.initializers.get(tensor)
    if t is None:
        producer = facts.producer_of(tensor)
        if producer is None or producer.op_type != "Constant":
            return None
        t = constant_tensor(producer)
    if t is None or t.data_location == 1:  # EXTERNAL
        return None
    n = 1
    for d in t.dims:
        n *= d
    if n > limit:
        return None
    try:
        return numpy_helper.to_array(t)
    except Exception:  # an odd encoding: no preview rather than a broken inspector
        return None


def _title(node, key: str, verdicts: dict[str, Verdict]) -> str:
    v = verdicts.get(key)
    text = f"{node.op_type} {key}"
    if v is not None and v.reason():
        text += f"\n{v.status.value}: {v.reason()}"
    return text


def _is_small(node) -> bool:
    """Constant nodes are drawn as small dots beside each consumer instead of in a layer of their own."""
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx")


def _place(facts: GraphFacts, ops: set[int]) -> dict[int, tuple[float, float]]:
    """Longest-path layers (top to bottom); in each layer nodes sit near the mean x of their parents."""
    graph = facts.model.graph
    parents: dict[int, list[int]] = {}
    layer: dict[int, int] = {}
    for i in facts.order:
        if i not in ops:
            continue
        ps = [facts.producer[x] for x in _all_inputs(graph.node[i]) if x in facts.producer]
        ps = [p for p in dict.fromkeys(ps) if p in layer]
        parents[i] = ps
        layer[i] = 1 + max((layer[p] for p in ps), default=0)
    by_layer: dict[int, list[int]] = defaultdict(list)
    for i in facts.order:
        if i in layer:
            by_layer[layer[i]].append(i)
    pos: dict[int, tuple[float, float]] = {}
    for depth, members in sorted(by_layer.items()):
        wanted = []
        for k, i in enumerate(members):
            xs = [pos[p][0] for p in parents[i] if p in pos]
            default = (k - (len(members) - 1) / 2) * DX
            wanted.append((sum(xs) / len(xs) if xs else default, k, i))
        wanted.sort()
        xs = []
        for w, _k, _i in wanted:  # keep at least DX apart, then recentre on the wanted mean
            xs.append(w if not xs else max(w, xs[-1] + DX))
        shift = sum(w for w, _, _ in wanted) / len(wanted) - sum(xs) / len(xs)
        for x, (_w, _k, i) in zip(xs, wanted):
            pos[i] = (x + shift, depth * DY)
    return pos


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
    """The drawing of `model`: whole, around `focus` (n hops), inside `scope`; collapsed by scopes when the
    selection has more than `collapse_over` nodes (a focus window is never collapsed)."""
    facts = facts or GraphFacts.of(model, infer=False)
    verdicts = verdicts or {}
    graph = model.graph
    n_total = len(graph.node)
    note = ""
    if focus is not None and focus in facts.index:
        keep = neighbourhood(facts, facts.index[focus], hops)
        note = f"{len(keep)} of {n_total} nodes within {hops} hops of {focus}"
    elif scope:
        members = scope_members(facts, scope)
        if len(members) > collapse_over:
            return _collapsed(facts, verdicts, members, scope)
        keep = set(members)
        note = f"{len(keep)} of {n_total} nodes: {scope_label(scope)}"
    elif n_total > collapse_over:
        return _collapsed(facts, verdicts, facts.order, None)
    else:
        keep = set(range(n_total))
    small = {i for i in keep if _is_small(graph.node[i])}
    pos = _place(facts, keep - small)
    view = View(total_nodes=n_total, note=note)
    for i, (x, y) in pos.items():
        node, key = graph.node[i], facts.keys[i]
        status = status_of(verdicts.get(key))
        label = node.op_type if len(node.op_type) < 24 else node.op_type[:22] + "…"
        view.nodes.append(
            ViewNode(key, label, _title(node, key, verdicts), x, y, COLORS[status], status=status, ref=key)
        )
    # Small things (constants, graph inputs) get a copy beside each drawn consumer: no long edges
    beside: dict[int, int] = defaultdict(int)

    def put_small(vid: str, label: str, title: str, reader: int, kind: str, ref: str) -> str:
        cx, cy = pos[reader]
        k = beside[reader]
        beside[reader] += 1
        node_id = f"{vid}@{facts.keys[reader]}"
        color, shape, size = (
            (COLORS["constant"], "dot", 6) if kind == "constant" else (COLORS["io"], "box", 10)
        )
        view.nodes.append(
            ViewNode(
                node_id,
                label,
                title,
                cx - SMALL_DX,
                cy - DY / 2 + k * SMALL_DY,
                color,
                shape,
                size,
                kind,
                ref=ref,
            )
        )
        return node_id

    for i in sorted(small):
        node, key = graph.node[i], facts.keys[i]
        readers = dict.fromkeys(j for o in node.output for j in facts.consumers.get(o, []) if j in pos)
        for j in readers:
            nid = put_small(f"const:{key}", "const", _title(node, key, verdicts), j, "constant", key)
            view.edges.append((nid, facts.keys[j]))
    for name in facts.graph_inputs:
        readers = dict.fromkeys(j for j in facts.consumers.get(name, []) if j in pos)
        info = facts.info(name)
        title = f"graph input {name}: {info.dtype_name} {info.shape_str()}"
        for j in readers:
            nid = put_small(f"input:{name}", name[:24], title, j, "input", "")
            view.edges.append((nid, facts.keys[j]))
    for i in pos:
        for x in dict.fromkeys(_all_inputs(graph.node[i])):
            p = facts.producer.get(x)
            if p is not None and p in pos:
                view.edges.append((facts.keys[p], facts.keys[i]))
    for name in facts.graph_outputs:
        p = facts.producer.get(name)
        if p is not None and p in pos:
            x, y = pos[p]
            view.nodes.append(
                ViewNode(
                    f"output:{name}",
                    name[:24],
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


def groups_of(facts: GraphFacts, members: list[int], scope: str | None) -> list[tuple[str, str, list[int]]]:
    """Split `members` (topological order) into (scope id, label, members) groups: by the first name-scope
    depth below `scope` that gives at least MIN_GROUPS groups; runs of consecutive groups (or plain runs of the
    topological order, for flat names) are merged into `range:` groups when there would be more than
    MAX_GROUPS."""
    names = _names(facts)
    base = scope if scope and not scope.startswith(("range:", "level:")) else ""
    depth0 = len(_parts(base))
    groups: dict[str, list[int]] = {}
    for depth in range(depth0 + 1, depth0 + 6):
        groups = defaultdict(list)
        for i in members:
            groups[
                _scope(names[i], depth) or f"level:{_scope(names[i], depth - 1) if depth > 1 else ''}"
            ].append(i)
        if len(groups) >= MIN_GROUPS:
            break
    if MIN_GROUPS <= len(groups) <= MAX_GROUPS:
        return [(g, scope_label(g) if g.startswith("level:") else g, ms) for g, ms in groups.items()]
    # too many (or too few) scopes: cut the topological order into runs, at scope changes where possible
    pos = {i: p for p, i in enumerate(facts.order)}
    group_of = {i: g for g, ms in groups.items() for i in ms}
    target = max(1, -(-len(members) // MAX_GROUPS))
    runs: list[list[int]] = [[]]
    for i in members:
        run = runs[-1]
        if run and len(run) >= target and (len(groups) < MIN_GROUPS or group_of[i] != group_of[run[-1]]):
            runs.append(run := [])
        run.append(i)
    out = []
    for run in runs:
        first, last = group_of[run[0]], group_of[run[-1]]
        span = first if first == last else f"{first} … {last}"
        if len(groups) < MIN_GROUPS:
            span = f"{names[run[0]]} … {names[run[-1]]}"
        out.append((f"range:{pos[run[0]]}-{pos[run[-1]]}", span, run))
    return out


def _collapsed(
    facts: GraphFacts, verdicts: dict[str, Verdict], members: list[int], scope: str | None
) -> View:
    """One box per group, coloured by its worst verdict, laid out row by row in topological order."""
    graph = facts.model.graph
    groups = groups_of(facts, members, scope)
    inside = f" of {scope_label(scope)}" if scope else ""
    view = View(
        total_nodes=len(graph.node),
        collapsed=True,
        note=f"{len(members)} nodes{inside} collapsed into {len(groups)} groups; click a group to open it",
    )
    group_of: dict[int, str] = {}
    cols = min(8, max(1, round(len(groups) ** 0.5)))
    for k, (gid, label, ms) in enumerate(groups):
        statuses = [status_of(verdicts.get(facts.keys[i])) for i in ms]
        worst = next(s for s in WORST_FIRST if s in statuses)
        rejected = statuses.count("rejected")
        text = f"{label}\n{len(ms)} nodes" + (f", {rejected} rejected" if rejected else "")
        view.nodes.append(
            ViewNode(
                f"group:{gid}",
                text,
                text,
                (k % cols) * DX * 1.5,
                (k // cols) * DY * 1.4,
                COLORS[worst],
                "box",
                18,
                "group",
                worst,
                ref=f"group:{gid}",
            )
        )
        for i in ms:
            group_of[i] = gid
    edges = set()
    for i in members:
        for x in _all_inputs(graph.node[i]):
            p = facts.producer.get(x)
            if p is not None and p in group_of and group_of[p] != group_of[i]:
                edges.add((f"group:{group_of[p]}", f"group:{group_of[i]}"))
    view.edges = sorted(edges)
    return view
