"""Group the compute nodes of a model into parts, each run by one backend, in an order that can execute.

Every node is `target` (the target's verdict is supported), `fallback` (rejected or unknown: the safe choice for
a node nobody could confirm) or a constant (computed from constants only: not a part of any region, copied or
folded into each part that reads it, see surgery.split.cut).

First grouping, as surgery.partition does for supported regions, here for both kinds: a node's level is the
largest number of target/fallback changes on a path reaching it, and nodes of one kind are grouped by level and
by direct edges. Every group is convex (no path leaves it and comes back) and edges between groups go up in
level, so the groups form a DAG. Then parts of one kind are merged while the DAG stays acyclic: two parts can
merge unless a path from one to the other passes through a third. Pairs joined by an edge merge first (one
crossing fewer each), then independent ones (one engine fewer). Finally a target part with fewer than
`min_nodes` compute nodes goes back to the fallback and the merging runs again, so the plan does not bounce
between backends for every node (TF-TRT's minimum_segment_size).
"""

from __future__ import annotations

from dataclasses import dataclass

from surgery.graph import GraphFacts, all_inputs

TARGET, FALLBACK = "target", "fallback"
MERGE_INDEPENDENT_UP_TO = 200  # parts: above this only parts joined by an edge are merged (cost is cubic)


@dataclass
class Group:
    kind: str  # TARGET or FALLBACK
    nodes: list[int]  # original node indices, topological order


def constant_nodes(facts: GraphFacts) -> set[int]:
    """Nodes whose every output is a constant: they belong to no part."""
    g = facts.model.graph
    out = set()
    for i, node in enumerate(g.node):
        outs = [o for o in node.output if o]
        if outs and all(o in facts.constant for o in outs):
            out.add(i)
    return out


def _producers(facts: GraphFacts, i: int, skip: set[int]) -> set[int]:
    g = facts.model.graph
    out = set()
    for x in all_inputs(g.node[i]):
        p = facts.producer.get(x)
        if p is not None and p != i and p not in skip and not facts.is_constant(x):
            out.add(p)
    return out


def group(facts: GraphFacts, kinds: dict[int, str], min_nodes: int = 1) -> list[Group]:
    """Parts for the nodes in `kinds` (index -> TARGET/FALLBACK; constants left out), in execution order."""
    order = [i for i in facts.order if i in kinds]
    skip = set(range(len(facts.model.graph.node))) - set(kinds)
    preds = {i: _producers(facts, i, skip) for i in order}
    level = {}
    for i in order:
        level[i] = max((level[p] + (kinds[p] != kinds[i]) for p in preds[i]), default=0)
    parent = {i: i for i in order}

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for i in order:
        for p in preds[i]:
            if kinds[p] == kinds[i] and level[p] == level[i]:
                parent[find(p)] = find(i)
    members: dict[int, list[int]] = {}
    for i in order:
        members.setdefault(find(i), []).append(i)
    parts = [Group(kinds[root], nodes) for root, nodes in members.items()]
    while True:
        parts = _merge(parts, preds, facts)
        small = [p for p in parts if p.kind == TARGET and len(p.nodes) < min_nodes]
        if not small:
            break
        for p in small:
            p.kind = FALLBACK
    return parts


def _dag(parts: list[Group], preds: dict[int, set[int]]) -> tuple[list[set[int]], list[int]]:
    """Parent parts of each part, and a topological order of the parts (ties: earliest node first)."""
    owner = {i: k for k, p in enumerate(parts) for i in p.nodes}
    parents = [set() for _ in parts]
    for k, p in enumerate(parts):
        for i in p.nodes:
            for q in preds[i]:
                if owner[q] != k:
                    parents[k].add(owner[q])
    import heapq

    first = [min(p.nodes) for p in parts]
    children = [set() for _ in parts]
    for k, ps in enumerate(parents):
        for q in ps:
            children[q].add(k)
    indeg = [len(ps) for ps in parents]
    ready = [(first[k], k) for k in range(len(parts)) if not indeg[k]]
    heapq.heapify(ready)
    topo = []
    while ready:
        _, k = heapq.heappop(ready)
        topo.append(k)
        for c in children[k]:
            indeg[c] -= 1
            if not indeg[c]:
                heapq.heappush(ready, (first[c], c))
    if len(topo) != len(parts):  # cannot happen for groups made by levels; a bug if it does
        raise RuntimeError("parts form a cycle")
    return parents, topo


def _merge(parts: list[Group], preds: dict[int, set[int]], facts: GraphFacts) -> list[Group]:
    """Merge parts of one kind while the part graph stays acyclic; returns them in execution order."""
    pos = facts.position
    while True:
        parents, topo = _dag(parts, preds)
        pair = _mergeable(parts, parents, topo)
        if pair is None:
            return [parts[k] for k in topo]
        a, b = pair
        merged = Group(parts[a].kind, sorted(parts[a].nodes + parts[b].nodes, key=pos.__getitem__))
        parts = [p for k, p in enumerate(parts) if k not in (a, b)] + [merged]


def _mergeable(parts: list[Group], parents: list[set[int]], topo: list[int]) -> tuple[int, int] | None:
    """Two parts of one kind with no third part on a path between them: joined by an edge first."""
    n = len(parts)
    anc = [0] * n  # bitsets of strict ancestors
    for k in topo:
        for q in parents[k]:
            anc[k] |= anc[q] | (1 << q)
    desc = [0] * n
    children = [set() for _ in parts]
    for k, ps in enumerate(parents):
        for q in ps:
            children[q].add(k)
    for k in reversed(topo):
        for c in children[k]:
            desc[k] |= desc[c] | (1 << c)

    def can(a: int, b: int) -> bool:
        if parts[a].kind != parts[b].kind:
            return False
        return not (desc[a] & anc[b]) and not (desc[b] & anc[a])

    pair = next(((q, k) for k in topo for q in sorted(parents[k]) if can(q, k)), None)
    if pair is None and n <= MERGE_INDEPENDENT_UP_TO:
        rank = {k: r for r, k in enumerate(topo)}
        pair = next(
            (
                (a, b)
                for a in topo
                for b in topo
                if rank[a] < rank[b] and not (desc[a] >> b) & 1 and can(a, b)
            ),
            None,
        )
    return pair
