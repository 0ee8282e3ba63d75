"""How a big graph is grouped for drawing: name scopes (``/a/b``, ``level:/a``), ranges of the topological order
(``range:P-Q``) and, for graphs without scopes, blocks that compute from the inputs with the constant-only nodes
they read (``block:P-Q``). Derived facts are kept on the GraphFacts object (`memo`), which the app caches per
model version."""

from __future__ import annotations

from collections import defaultdict

from surgery.graph import GraphFacts

MIN_GROUPS, MAX_GROUPS = 6, 60


def memo(facts: GraphFacts, key: str, make):
    """Per-model-version facts the view derives once (names, op types, constant-only nodes): kept on the
    GraphFacts object, which the app caches per model version."""
    memo = facts.__dict__.setdefault("_view_memo", {})
    if key not in memo:
        memo[key] = make()
    return memo[key]


def constant_nodes(facts: GraphFacts) -> frozenset[int]:
    """Nodes whose every output is computable from constants only (weights, shape arithmetic on weights)."""

    def make():
        outs: dict[int, int] = defaultdict(int)
        const: dict[int, int] = defaultdict(int)
        for t, i in facts.producer.items():
            outs[i] += 1
            if t in facts.constant:
                const[i] += 1
        return frozenset(i for i, n in outs.items() if const[i] == n)

    return memo(facts, "constant_nodes", make)


def _parts(name: str) -> list[str]:
    return [p for p in name.split("/") if p]


def _scope(name: str, depth: int) -> str:
    """The first `depth` scope parts of a node name ("" when the name has no scope that deep)."""
    parts = _parts(name)
    return "/" + "/".join(parts[:depth]) if len(parts) > depth else ""


def node_names(facts: GraphFacts) -> list[str]:
    """Node names (the key where a node has none). A key is the name itself unless the name is empty or
    repeated (then it is Op#index): only those nodes' names are read from the model."""

    def make():
        nodes = facts.model.graph.node
        return [(nodes[i].name or k) if "#" in k else k for i, k in enumerate(facts.keys)]

    return memo(facts, "names", make)


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
        heads = memo(facts, "heads", lambda: [_head(n) for n in node_names(facts)])
        seen: dict[str, str] = {}
        out = []
        for head in heads:
            s = seen.get(head)
            if s is None:
                s = seen[head] = _scope(head, depth)
            out.append(s)
        return out

    return memo(facts, f"scopes{depth}", make)


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
    names = node_names(facts)
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
    return i in constant_nodes(facts)


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
    constant = constant_nodes(facts)
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
