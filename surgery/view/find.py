"""Finding nodes in the drawn graph: the search index and search, the neighbourhood of a node, and the next or
previous node a target refuses (or cannot confirm) in topological order."""

from __future__ import annotations

from collections import deque

from surgery.graph import GraphFacts, all_inputs
from surgery.verdict import Verdict
from surgery.view.groups import memo, node_names
from surgery.view.labels import status_of


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
    return memo(
        facts,
        "search",
        lambda: [
            (k, f"{k}\n{name}".lower(), op.lower())
            for k, name, op in zip(facts.keys, node_names(facts), facts.ops)
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
    recent = memo(facts, "search_hits", dict)
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


def previous_rejected(verdicts: dict[str, Verdict], facts: GraphFacts, current: str | None) -> str | None:
    """The rejected (or cannot-confirm) node before `current` in topological order (wrapping around), or None if
    none is."""
    bad = _rejected_in_order(verdicts, facts)
    if not bad or current not in facts.index:
        return bad[-1] if bad else None
    pos, index = facts.position, facts.index
    before = [k for k in bad if pos[index[k]] < pos[index[current]]]
    return (before or bad)[-1]
