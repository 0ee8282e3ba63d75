"""Graph → what the app draws: a layered layout computed here (surgery.layout; the browser only paints), node
labels and hover texts, shapes on edges, colours by verdict, constants and graph inputs drawn small beside each
reader, big graphs collapsed into labelled groups (by name scope, else by ranges of the topological order) that
open in place, focus windows, search.

Pure data in, pure data out: `build_view` gives a `View`; `View.payload()` is what the graph component reads.
The layout does not depend on verdicts: `structure()` lays out once, `paint()` colours it for one report.

Scopes (the `scope` argument, and the id of a group node after its ``group:`` prefix):
- ``/a/b``: the nodes named ``/a/b/...``;
- ``level:/a``: the nodes directly in ``/a`` (no deeper scope); ``level:`` is the top level;
- ``range:P-Q``: the nodes at topological positions P..Q (used where scopes alone would give too many groups);
- ``block:P-Q``: for graphs without scopes, the nodes at positions P..Q that compute from the inputs, with the
  constant-only nodes (weights, shapes) they read.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field

from onnx import ModelProto

from surgery.graph import GraphFacts, TensorInfo, all_inputs
from surgery.layout import layered
from surgery.model import gc_paused
from surgery.verdict import Status, Verdict, said_line, speaker

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
MIN_GROUPS, MAX_GROUPS = 6, 60
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


def status_of(verdict: Verdict | None) -> str:
    if verdict is None:
        return "not checked"
    return {Status.SUPPORTED: "supported", Status.REJECTED: "rejected"}.get(verdict.status, "unknown")


def _memo(facts: GraphFacts, key: str, make):
    """Per-model-version facts the view derives once (names, op types, constant-only nodes): kept on the
    GraphFacts object, which the app caches per model version."""
    memo = facts.__dict__.setdefault("_view_memo", {})
    if key not in memo:
        memo[key] = make()
    return memo[key]


def _constant_nodes(facts: GraphFacts) -> frozenset[int]:
    """Nodes whose every output is computable from constants only (weights, shape arithmetic on weights)."""

    def make():
        outs: dict[int, int] = defaultdict(int)
        const: dict[int, int] = defaultdict(int)
        for t, i in facts.producer.items():
            outs[i] += 1
            if t in facts.constant:
                const[i] += 1
        return frozenset(i for i, n in outs.items() if const[i] == n)

    return _memo(facts, "constant_nodes", make)


def _parts(name: str) -> list[str]:
    return [p for p in name.split("/") if p]


def _scope(name: str, depth: int) -> str:
    """The first `depth` scope parts of a node name ("" when the name has no scope that deep)."""
    parts = _parts(name)
    return "/" + "/".join(parts[:depth]) if len(parts) > depth else ""


def _names(facts: GraphFacts) -> list[str]:
    """Node names (the key where a node has none). A key is the name itself unless the name is empty or
    repeated (then it is Op#index): only those nodes' names are read from the model."""

    def make():
        nodes = facts.model.graph.node
        return [(nodes[i].name or k) if "#" in k else k for i, k in enumerate(facts.keys)]

    return _memo(facts, "names", make)


def _head(name: str) -> str:
    """`name` with its last part replaced by 'x' (a name ending in '/' stays as it is): `_scope` gives the same
    for both at every depth."""
    head, _, leaf = name.rpartition("/")
    return f"{head}/x" if leaf else name


def _scopes(facts: GraphFacts, depth: int) -> list[str]:
    """`_scope(name, depth)` of every node, computed once per model version and depth."""

    # A node's scope depends only on its name without the last part (and whether that part is empty): nodes of
    # one layer share it, so each distinct one is split once (100k nodes: ~0.25 -> ~0.05 s a depth).
    def make():
        # "/enc/layer.3/Add_1" -> "/enc/layer.3/x", "/enc/" -> "/enc/": the same parts, but for the last one
        heads = _memo(facts, "heads", lambda: [_head(n) for n in _names(facts)])
        seen: dict[str, str] = {}
        out = []
        for head in heads:
            s = seen.get(head)
            if s is None:
                s = seen[head] = _scope(head, depth)
            out.append(s)
        return out

    return _memo(facts, f"scopes{depth}", make)


def _scope_at(facts: GraphFacts, i: int, depth: int) -> str:
    return _scopes(facts, depth)[i]


def scope_members(facts: GraphFacts, scope: str) -> list[int]:
    """Indices (topological order) of the nodes in `scope` (see the module docstring for the forms)."""
    if scope.startswith("range:"):
        a, _, b = scope[6:].partition("-")
        return facts.order[int(a) : int(b) + 1]
    if scope.startswith("block:"):
        a, _, b = scope[6:].partition("-")
        return _block_members(facts, int(a), int(b))
    names = _names(facts)
    if scope.startswith("level:"):
        base = scope[6:]
        depth = len(_parts(base))
        return [
            i
            for i in facts.order
            if (not base or names[i].startswith(base + "/")) and not _scope_at(facts, i, depth + 1)
        ]
    return [i for i in facts.order if names[i].startswith(scope + "/")]


def scope_label(scope: str) -> str:
    if scope.startswith("level:"):
        return (scope[6:] or "top level") + " (directly)"
    if scope.startswith(("range:", "block:")):
        a, _, b = scope[6:].partition("-")
        return f"nodes {int(a) + 1}–{int(b) + 1} in topological order"
    return scope


def neighbourhood(facts: GraphFacts, center: int, hops: int) -> set[int]:
    """Nodes within `hops` edges (either direction) of `center`."""
    graph = facts.model.graph
    seen, frontier = {center}, deque([(center, 0)])
    while frontier:
        i, d = frontier.popleft()
        if d == hops:
            continue
        near = [facts.producer[x] for x in all_inputs(graph.node[i]) if x in facts.producer]
        for o in graph.node[i].output:
            near += facts.consumers.get(o, [])
        for j in near:
            if j not in seen:
                seen.add(j)
                frontier.append((j, d + 1))
    return seen


def search_index(facts: GraphFacts) -> list[tuple[str, str, str]]:
    """(key, key and name lower-cased, op type lower-cased) of every node, once per model version (100k nodes:
    ~0.15 s; the app builds it in the background after the first drawing)."""
    return _memo(
        facts,
        "search",
        lambda: [
            (k, f"{k}\n{name}".lower(), op.lower())
            for k, name, op in zip(facts.keys, _names(facts), facts.ops)
        ],
    )


SEARCHES_KEPT = 16


def search(facts: GraphFacts, text: str, limit: int = 50) -> list[str]:
    """Node keys whose name, key or op type contains `text` (case-insensitive); exact op-type matches first.
    The last few answers are kept per model version: the app asks again on every rerun while the text stays in
    the search box (a scan of 100k names is ~0.05 s)."""
    t = text.strip().lower()
    if not t:
        return []
    recent = _memo(facts, "search_hits", dict)
    if (t, limit) not in recent:
        exact, hits = [], []
        for k, names, op in search_index(facts):
            if op == t:
                exact.append(k)
            elif t in names or t in op:
                hits.append(k)
            if len(exact) >= limit:
                break
        while len(recent) >= SEARCHES_KEPT:
            recent.pop(next(iter(recent)))
        recent[(t, limit)] = (exact + hits)[:limit]
    return list(recent[(t, limit)])


def _rejected_in_order(verdicts: dict[str, Verdict], facts: GraphFacts) -> list[str]:
    """The keys of the main graph's rejected nodes and those the target cannot confirm (red and amber: what needs a
    look), in topological order (read from the verdicts: a model with few or no verdicts costs nothing however
    many nodes it has)."""
    bad = [k for k, v in verdicts.items() if k in facts.index and status_of(v) in ("rejected", "unknown")]
    if not bad:
        return []
    pos, index = facts.position, facts.index
    return sorted(bad, key=lambda k: pos[index[k]])


def next_rejected(verdicts: dict[str, Verdict], facts: GraphFacts, current: str | None) -> str | None:
    """The next rejected (or cannot-confirm) node after `current` in topological order (wrapping around), or None
    if none is."""
    bad = _rejected_in_order(verdicts, facts)
    if not bad or current not in facts.index:
        return bad[0] if bad else None
    pos, index = facts.position, facts.index
    after = [k for k in bad if pos[index[k]] > pos[index[current]]]
    return (after or bad)[0]


def constant_value(facts: GraphFacts, tensor: str, limit: int = 64):
    """The value of `tensor` when it is an initializer or a Constant node's output with at most `limit`
    elements (a numpy array), else None. External data is not read."""
    from onnx import numpy_helper

    t = facts.weights_tensor(tensor)
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


def groups_of(facts: GraphFacts, members: list[int], scope: str | None) -> list[tuple[str, str, list[int]]]:
    """Split `members` (topological order) into (scope id, label, members) groups: by the first name-scope
    depth below `scope` that gives at least MIN_GROUPS groups; runs of consecutive groups (or plain runs of the
    topological order, for flat names) are merged into `range:` groups when there would be more than
    MAX_GROUPS."""
    base = scope if scope and not scope.startswith(("range:", "level:", "block:")) else ""
    depth0 = len(_parts(base))
    groups: dict[str, list[int]] = {}
    for depth in range(depth0 + 1, depth0 + 6):
        groups = defaultdict(list)
        here, above = _scopes(facts, depth), _scopes(facts, depth - 1) if depth > 1 else None
        for i in members:
            groups[here[i] or f"level:{above[i] if above else ''}"].append(i)
        if len(groups) >= MIN_GROUPS:
            break
    if MIN_GROUPS <= len(groups) <= MAX_GROUPS:
        return [(g, scope_label(g) if g.startswith("level:") else g, ms) for g, ms in groups.items()]
    if len(groups) < MIN_GROUPS:  # no scopes to group by: blocks of the structure
        return structural_groups(facts, members)
    # too many (or too few) scopes: cut the topological order into runs, at scope changes where possible
    pos = facts.position
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
        if first == last:
            span = first
        else:  # "/encoder/layer.0 … layer.47": the last one without the path they share
            a, b = first.split("/"), last.split("/")
            k = 0
            while k < min(len(a), len(b)) - 1 and a[k] == b[k]:
                k += 1
            span = f"{first} … {'/'.join(b[k:])}"
        out.append((f"range:{pos[run[0]]}-{pos[run[-1]]}", span, run))
    return out


def _constant_only(facts: GraphFacts, i: int) -> bool:
    return i in _constant_nodes(facts)


def _first_reader(facts: GraphFacts, i: int, pos: dict[int, int]) -> int | None:
    readers = [j for o in facts.model.graph.node[i].output for j in facts.consumers.get(o, [])]
    return min(readers, key=pos.__getitem__) if readers else None


def _block_members(facts: GraphFacts, a: int, b: int) -> list[int]:
    """``block:A-B``: the nodes at topological positions A..B that compute from the inputs, plus the nodes that
    compute only from constants (weights, shapes) and are first read there."""
    pos = facts.position
    main = {i for i in facts.order[a : b + 1] if not _constant_only(facts, i)}
    out = []
    for i in facts.order:
        if i in main:
            out.append(i)
        elif _constant_only(facts, i):
            r = i
            while r is not None and _constant_only(facts, r):  # up the constant chain to who reads it
                r = _first_reader(facts, r, pos)
            if r in main:
                out.append(i)
    return out


def structural_groups(facts: GraphFacts, members: list[int]) -> list[tuple[str, str, list[int]]]:
    """Groups for a graph without name scopes: the topological order of the nodes that compute from the inputs
    cut into runs of about len/MAX_GROUPS nodes, each cut where the fewest tensors cross it (the ends of
    blocks: a residual Add, a Concat, a transition), and each constant-only node (weights, shapes) in the group
    of the node that reads it. Ids are ``block:A-B`` (topological positions)."""
    pos = facts.position
    constant = _constant_nodes(facts)
    main = [i for i in members if i not in constant] or list(members)
    m = len(main)
    at = {i: k for k, i in enumerate(main)}
    diff = [0] * (m + 1)
    graph = facts.model.graph
    for k, i in enumerate(main):
        for o in graph.node[i].output:
            last = max((at[j] for j in facts.consumers.get(o, []) if j in at), default=k)
            if last > k:
                diff[k] += 1
                diff[last] -= 1
    live, acc = [], 0
    for k in range(m):
        acc += diff[k]
        live.append(acc)
    target = max(2, -(-m // MAX_GROUPS))
    cuts, start = [], 0
    while m - start > target * 1.5:
        lo, hi = start + max(1, int(target * 0.6)), min(m - 2, start + int(target * 1.6))
        if lo > hi:
            break
        c = min(range(lo, hi + 1), key=lambda k: (live[k], abs(k - start - target)))
        cuts.append(c)
        start = c + 1
    bounds = [0, *[c + 1 for c in cuts], m]
    runs = [main[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
    owner = {i: r for r, run in enumerate(runs) for i in run}
    extra: dict[int, list[int]] = defaultdict(list)
    for i in members:
        if i in owner:
            continue
        r = i
        while r is not None and r not in owner and _constant_only(facts, r):
            r = _first_reader(facts, r, pos)
        extra[owner.get(r, len(runs) - 1)].append(i)
    out = []
    for r, run in enumerate(runs):
        a, b = pos[run[0]], pos[run[-1]]
        ms = sorted(run + extra.get(r, []), key=pos.__getitem__)
        out.append((f"block:{a}-{b}", f"block {r + 1}/{len(runs)} · nodes {a + 1}–{b + 1}", ms))
    return out


def _dim(d) -> str:
    if (
        d is None
        or (isinstance(d, int) and d < 0)
        or (isinstance(d, str) and (not d or d.startswith("unk__")))
    ):
        return "?"
    return str(d)


EDGE_LABEL_CHARS = 36


# the names torch's exporter makes up for a dim it cannot name ("Reshapeoutput_0_dim_2",
# "LayerNormalizationoutput_0_dim_1"): numbered, as inference's unk__3, not chosen by anyone
_EXPORTER_NUMBERED = re.compile(r"[A-Za-z]+output_\d+_dim_\d+")
LONG_NAME_CHARS = 12


def _edge_dim(d) -> str:
    """A dim for "×"-joined text: an expression (symbolic inference's "floor(h/2 - 1/2) + 1") in parentheses,
    so that "16×(floor(h/2 - 1/2) + 1)" cannot be read as "16×floor(…) + 1"; a name the exporter numbered, "?"."""
    if isinstance(d, str) and _EXPORTER_NUMBERED.fullmatch(d):
        return "?"
    text = _dim(d)
    return f"({text})" if isinstance(d, str) and any(c in text for c in " +*/()") else text


def tensor_label(info: TensorInfo) -> str:
    """A tensor's dtype and shape as an edge shows it: "1×3×224×224" for float32, "int64 4" otherwise; "" when
    nothing is known. Dims that inference or the exporter only numbered (unk__0, Addoutput_0_dim_1) or that are
    negative show as "?"; a label longer than EDGE_LABEL_CHARS shows its expression dims as "(…)", then its
    names longer than LONG_NAME_CHARS as "…" (the hover text writes them out)."""
    if info.shape is None:
        return "" if not info.dtype else info.dtype_name.lower()
    parts = [_edge_dim(d) for d in info.shape]
    dims = "×".join(parts) or "scalar"
    if len(dims) > EDGE_LABEL_CHARS:
        parts = ["(…)" if p.startswith("(") else p for p in parts]
        dims = "×".join(parts)
    if len(dims) > EDGE_LABEL_CHARS:
        dims = "×".join("…" if len(p) > LONG_NAME_CHARS else p for p in parts)
    if info.dtype_name in ("FLOAT", "?"):
        return dims
    return f"{info.dtype_name.lower()} {dims}"


def shape_text(info: TensorInfo) -> str:
    """ "[1, 3, ?, ?]": the shape as the hover text shows it ("?" for dims inference only numbered)."""
    return "?" if info.shape is None else "[" + ", ".join(_dim(d) for d in info.shape) + "]"


def _typed(facts: GraphFacts, tensor: str) -> str:
    info = facts.info(tensor)
    weights = " (weights)" if tensor in facts.initializers else ""
    return f"  {tensor}  {info.dtype_name.lower()} {shape_text(info)}{weights}"


def node_info(facts: GraphFacts, i: int) -> str:
    """The hover text of one node before verdicts: op and name, domain, inputs and outputs with dtypes and
    shapes (plain text)."""
    node, key = facts.model.graph.node[i], facts.keys[i]
    lines = [f"{node.op_type}  ·  {node.name or key}", f"domain: {node.domain or 'ai.onnx'}"]
    ins = [x for x in node.input if x]
    if ins:
        lines.append("inputs:")
        lines += [_typed(facts, x) for x in ins]
    lines.append("outputs:")
    lines += [_typed(facts, o) for o in node.output if o]
    return "\n".join(lines)


def verdict_line(label: str, v: Verdict | None, backend: str = "") -> str:
    """One report's verdict on a node in one line: the backend's words quoted, our explanation after `why:`
    (`backend`: the report's backend id, which says whose words they are)."""
    if v is None:
        return f"{label}: no verdict"
    status = "cannot confirm" if v.status == Status.UNKNOWN else v.status.value
    at = f" at {v.stage.value}" if v.status != Status.SUPPORTED else ""
    said = said_line(
        speaker(backend, v.stage),
        v.words,
        v.explanation if v.status != Status.SUPPORTED else "",
        v.words_from,
    )
    return f"{label}: {status}{at}" + (f" — {said}" if said else "")


def _constant_label(facts: GraphFacts, node) -> str:
    value = constant_value(facts, node.output[0], limit=4) if node.output else None
    if value is not None:
        if value.ndim == 0:
            text = f"{value.item():.4g}" if value.dtype.kind == "f" else str(value.item())
        else:
            text = (
                "["
                + ", ".join(f"{v:.4g}" if value.dtype.kind == "f" else str(v) for v in value.ravel())
                + "]"
            )
        if len(text) <= 18:
            return text
    info = facts.info(node.output[0]) if node.output else None
    if info is not None and info.shape is not None:
        return "⟨" + "×".join(str(d) for d in info.shape) + "⟩" if info.shape else "scalar"
    return "const"


def _is_small(node) -> bool:
    """Constant nodes are drawn as small boxes beside each reader instead of as operators."""
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx")


def _count(n: int) -> str:
    return "1 node" if n == 1 else f"{n} nodes"


def _group_label(label: str, members: list[int], facts: GraphFacts) -> str:
    """Its name, node count and top op types (of the nodes that compute from the inputs, where there are)."""
    constant = _constant_nodes(facts)
    main = [i for i in members if i not in constant] or members
    op_of = facts.ops
    ops = Counter(op_of[i] for i in main)
    top = ", ".join(f"{op} {n}" for op, n in ops.most_common(3))
    name = label if len(label) <= 34 else "…" + label[-33:]
    return f"{name}\n{_count(len(members))} · {top}"


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
        text = _group_label(label, members, facts)
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
                info=f"group {label}\n{_count(len(members))} — click to open",
                members=list(members),
                order=min(pos_of[i] for i in members),
            )
        )
        for i in members:
            drawn[i] = f"group:{gid}"
    small = {i for i in singles if _is_small(graph.node[i])}
    for i in singles - small:
        node, key = graph.node[i], facts.keys[i]
        label = node.op_type if len(node.op_type) < 24 else node.op_type[:22] + "…"
        w, h = box_size("op", label)
        units.append(
            ViewNode(key, label, "", 0, 0, COLORS["not checked"], ref=key, w=w, h=h, order=pos_of[i])
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
        labels = [_constant_label(facts, graph.node[i]) for i in cs]
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


def previous_rejected(verdicts: dict[str, Verdict], facts: GraphFacts, current: str | None) -> str | None:
    """The rejected (or cannot-confirm) node before `current` in topological order (wrapping around), or None if
    none is."""
    bad = _rejected_in_order(verdicts, facts)
    if not bad or current not in facts.index:
        return bad[-1] if bad else None
    pos, index = facts.position, facts.index
    before = [k for k in bad if pos[index[k]] < pos[index[current]]]
    return (before or bad)[-1]


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
