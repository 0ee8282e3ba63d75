"""The smallest model that still fails the same way: what to attach to a bug report (Polygraphy's `debug reduce`,
automatic).

A failure is one refusal of the target: a rejected node's verdict (code, the backend's words, and our
explanation where there are no words), or a model-level error (code and words). A candidate is a set of the
original's nodes cut out as a model of its own (surgery.split.cut): every tensor it reads from outside becomes a
graph input, or an initializer holding its value when the original computes it from constants only. A candidate
still fails when the target rejects the same node with the same code and words (or reports the same model-level
error) — not just any failure.

For a rejected node the search keeps only that node and what it depends on (its ancestors within the
candidate), and, if that still fails:

- bisect: a binary search on how many hops above the node are kept (the nearest ancestors first), then the
  linear pass on what is left;
- linear: the linear pass from the start: each node in turn, nearest the failing node first, is removed
  together with every ancestor that only fed the failing node through it, and stays removed when the candidate
  still fails. It repeats until no single removal keeps the failure (the result is then 1-minimal).

A model-level error is reduced by a binary search on a prefix, then a suffix, of the topological order (bisect),
and the linear pass removing one node at a time from the outputs up.

Every check goes through surgery.diagnose.check_one: the live TensorRT parser runs isolated, as `check` does;
the predictor runs in process. The search stops at `time_limit` seconds and returns the smallest failing model
found so far, saying so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from onnx import ModelProto

from surgery.split.cut import CutError, cut


class ReduceError(Exception):
    """Nothing to reduce, or a node / target that does not exist: the message says which."""


class NothingToReduce(ReduceError):
    """The target does not refuse the model (or the given node)."""


@dataclass
class Failure:
    node: str | None  # node key in the original; None for a model-level error
    op_type: str
    code: str
    words: str  # the backend's words, verbatim
    explanation: str  # ours
    stage: str
    words_from: str = ""
    status: str = "rejected"  # or "unknown": the backend failed, but the verdict stays open (a plugin gap)

    def text(self) -> str:
        return self.words or self.explanation

    def where(self) -> str:
        return f"{self.op_type} '{self.node}'" if self.node else "the model (an error not tied to a node)"


@dataclass
class ReduceResult:
    model: ModelProto
    target: str
    label: str
    failure: Failure
    nodes_before: int
    nodes_after: int
    kept: list[str]  # node keys of the original that the reduced model holds
    inputs: list[str]  # its graph inputs
    folded: list[str]  # constants it holds by value
    mode: str
    checks: int = 0
    seconds: float = 0.0
    minimal: bool = False  # the linear pass finished: removing any one more node loses the failure
    stopped: str = ""  # why the search stopped early ("" when it finished)
    history: list[int] = field(default_factory=list)  # node count after each accepted reduction

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return {
            "target": self.target,
            "label": self.label,
            "failure": asdict(self.failure),
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "kept": self.kept,
            "inputs": self.inputs,
            "folded": self.folded,
            "mode": self.mode,
            "checks": self.checks,
            "seconds": round(self.seconds, 3),
            "minimal": self.minimal,
            "stopped": self.stopped,
            "history": self.history,
        }

    def save(self, path: str | Path, base_dir=None) -> Path:
        """Write the reduced model (external weights loaded into it; beside it when it passes 2 GiB)."""
        from surgery.model import save_model

        return save_model(self.model, path, base_dir)

    def to_bytes(self, base_dir=None) -> bytes:
        from surgery.model import with_weights

        return with_weights(self.model, base_dir).SerializeToString()


class _OutOfTime(Exception):
    pass


def pick_failure(report, facts, node: str | None = None) -> Failure:
    """The refusal to preserve: `node`'s (a key of the original), else the first rejected node in topological
    order, else the first model-level error, else the first node the backend failed on in its own words but
    whose verdict stays open ("cannot confirm": a standard plugin TensorRT-RTX lacks, the same words kept)."""
    from surgery.verdict import Status

    def of(v) -> Failure:
        return Failure(
            v.node, v.op_type, v.code, v.words, v.explanation, v.stage.value, v.words_from, v.status.value
        )

    def failed(v) -> bool:  # refused, or failed in the backend's own words with the verdict left open
        return v.status is Status.REJECTED or (v.status is Status.UNKNOWN and bool(v.words))

    if node is not None:
        v = report.by_node().get(node)
        if v is None:
            raise ReduceError(f"no node '{node}' in the model")
        if not failed(v):
            raise NothingToReduce(
                f"{report.label} does not reject {v.op_type} '{node}' (its verdict: {v.status.value})"
            )
        return of(v)
    pos = facts.position
    rejected = sorted(report.rejected, key=lambda v: pos.get(v.index, len(pos)))
    if rejected:
        return of(rejected[0])
    if report.errors:
        m = report.errors[0]
        return Failure(None, "", m.code, m.words, m.explanation, m.stage.value, m.words_from)
    open_ = sorted((v for v in report.unknown if failed(v)), key=lambda v: pos.get(v.index, len(pos)))
    if open_:
        return of(open_[0])
    raise NothingToReduce(f"{report.label} {report.outcome.value} the model: there is no refusal to reduce")


def reduce_model(
    model,
    target: str,
    *,
    node: str | None = None,
    mode: str = "bisect",
    time_limit: float = 300.0,
    depth=None,
    base_dir=None,
    progress: Callable[[float, str], None] | None = None,
) -> ReduceResult:
    """Reduce `model` (a surgery.model.Model, or a ModelProto with `base_dir`) to a small model `target` still
    refuses the same way. Raises NothingToReduce when the target does not refuse it, ReduceError for a bad
    request, surgery.backends.UnknownBackend for an unknown target."""
    from surgery.diagnose import check_one
    from surgery.graph import GraphFacts, all_inputs
    from surgery.model import Model
    from surgery.verdict import Outcome

    if mode not in ("bisect", "linear"):
        raise ReduceError(f"mode '{mode}': use bisect or linear")
    t0 = time.perf_counter()
    if isinstance(model, Model):
        base_dir, proto = model.base_dir, model.proto
    else:
        proto = model
    report = check_one(proto, target, base_dir, depth=depth)
    if report.outcome is Outcome.UNAVAILABLE:
        raise ReduceError(
            f"target {target} is not available here: " + "; ".join(m.text() for m in report.messages)
        )
    facts = GraphFacts.of(proto)
    failure = pick_failure(report, facts, node)
    graph = proto.graph
    n = len(graph.node)
    r = facts.index[failure.node] if failure.node else None
    pos = facts.position
    values: dict = {}
    types: dict = {}
    typed_once = [False]
    state = {"checks": 0}
    best: dict = {"nodes": list(range(n)), "cut": None}
    history: list[int] = []

    def outputs_of(nodes: set[int]) -> list[str]:
        outs = []
        for i in nodes:
            for o in graph.node[i].output:
                if not o:
                    continue
                readers = facts.consumers.get(o, [])
                if o in facts.graph_outputs or any(j not in nodes for j in readers) or not readers:
                    outs.append(o)
        if (
            r is not None and r in nodes
        ):  # the failing node's outputs stay visible: the parser checks them too
            outs.extend(o for o in graph.node[r].output if o and o not in outs)
        return outs

    def make(nodes: set[int]):
        """The candidate model, typed from inference, else from onnxruntime runs of the original (learned once);
        an output still untyped is declared without a type (a parser takes it), an input is not (None)."""
        for loose in (False, True):
            for attempt in (1, 2):  # the second after learning the types onnxruntime runs give (once)
                try:
                    return cut(
                        proto,
                        facts,
                        sorted(nodes),
                        outputs_of(nodes),
                        fold_all=True,
                        values=values,
                        types=types,
                        base_dir=base_dir,
                        loose_outputs=loose,
                    )
                except CutError as exc:
                    if attempt == 2 or not exc.tensor or typed_once[0]:
                        break
                    typed_once[0] = True
                    _learn(proto, facts, types, base_dir)
        return None

    def same(rep, c) -> bool:
        if r is not None:
            k = [*c.cone, *c.nodes].index(r)
            v = next((v for v in rep.verdicts if v.index == k), None)
            return (
                v is not None
                and v.status.value == failure.status
                and v.code == failure.code
                and v.words == failure.words
                and (failure.words or v.explanation == failure.explanation)
            )
        return any(m.code == failure.code and m.words == failure.words for m in rep.errors)

    def fails(nodes: set[int]) -> bool:
        if time.perf_counter() - t0 > time_limit:
            raise _OutOfTime()
        if not nodes or (r is not None and r not in nodes):
            return False
        c = make(nodes)
        if c is None:
            return False
        state["checks"] += 1
        if progress:
            progress(
                min(0.95, (time.perf_counter() - t0) / max(time_limit, 1e-9)),
                f"check {state['checks']}: {len(nodes)} node(s)",
            )
        try:
            rep = check_one(c.model, target, base_dir, depth=depth)
        except Exception:
            return False
        ok = same(rep, c)
        if ok and len(nodes) <= len(best["nodes"]):
            best["nodes"], best["cut"] = sorted(nodes, key=pos.__getitem__), c
            history.append(len(nodes))
        return ok

    preds = {
        i: {
            facts.producer[x]
            for x in all_inputs(graph.node[i])
            if x in facts.producer and facts.producer[x] != i
        }
        for i in range(n)
    }

    def closure(nodes: set[int]) -> set[int]:
        """The failing node and its ancestors within `nodes`."""
        if r is None:
            return nodes
        keep, stack = {r}, [r]
        while stack:
            for p in preds[stack.pop()]:
                if p in nodes and p not in keep:
                    keep.add(p)
                    stack.append(p)
        return keep

    def distances(nodes: set[int]) -> dict[int, int]:
        dist, frontier = {r: 0}, [r]
        while frontier:
            nxt = []
            for i in frontier:
                for p in preds[i]:
                    if p in nodes and p not in dist:
                        dist[p] = dist[i] + 1
                        nxt.append(p)
            frontier = nxt
        return dist

    minimal = False
    stopped = ""
    current = set(range(n))
    use_closure = r is not None
    try:
        if r is not None:
            cone = closure(current)
            if len(cone) < n and fails(cone):
                current = cone
            elif len(cone) < n:
                use_closure = False  # the failure needs what comes after the node: plain removal only
            if mode == "bisect" and use_closure:
                dist = distances(current)
                lo, hi = 0, max(dist.values())
                while lo < hi:
                    mid = (lo + hi) // 2
                    if fails({i for i, d in dist.items() if d <= mid}):
                        hi = mid
                    else:
                        lo = mid + 1
                current = {i for i, d in dist.items() if d <= hi}
        elif mode == "bisect":
            order = [i for i in facts.order]
            lo, hi = 1, len(order)
            while lo < hi:
                mid = (lo + hi) // 2
                if fails(set(order[:mid])):
                    hi = mid
                else:
                    lo = mid + 1
            end = hi
            lo, hi = 0, end - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if fails(set(order[mid:end])):
                    lo = mid
                else:
                    hi = mid - 1
            current = set(order[lo:end])
        # the linear pass, to a fixpoint
        changed = True
        while changed:
            changed = False
            if use_closure:
                dist = distances(current)
                candidates = sorted((i for i in current if i != r), key=lambda i: (dist.get(i, 0), pos[i]))
            else:
                candidates = sorted((i for i in current if i != r), key=lambda i: -pos[i])
            for i in candidates:
                if i not in current:
                    continue
                trial = closure(current - {i}) if use_closure else current - {i}
                if trial != current and fails(trial):
                    current = trial
                    changed = True
        minimal = True
    except _OutOfTime:
        stopped = f"time limit of {time_limit:g} s reached: this is the smallest failing model found so far"
    if best["cut"] is None:  # nothing smaller failed the same way: the original is the smallest
        c = make(set(range(n)))
        if c is None:
            raise ReduceError("could not cut the model into a failing candidate (untyped tensors)")
        best["cut"], best["nodes"] = c, list(range(n))
    c = best["cut"]
    return ReduceResult(
        model=c.model,
        target=target,
        label=report.label,
        failure=failure,
        nodes_before=n,
        nodes_after=len(c.model.graph.node),
        kept=[facts.keys[i] for i in [*c.cone, *c.nodes]],
        inputs=[vi.name for vi in c.model.graph.input],
        folded=c.folded,
        mode=mode,
        checks=state["checks"],
        seconds=time.perf_counter() - t0,
        minimal=minimal and not stopped,
        stopped=stopped,
        history=history,
    )


def _learn(proto, facts, types: dict, base_dir) -> None:
    """Types for every untyped intermediate tensor, from onnxruntime runs of the original (where it runs)."""
    from surgery.split import isolated_types, seeded_feeds

    untyped = [t for t in facts.producer if not facts.info(t).dtype]
    if not untyped:
        return
    runs = []
    for dim in (2, 3):
        try:
            runs.append((dim, seeded_feeds(proto, default_dim=dim)))
        except ValueError:
            return
    types.update(isolated_types(proto, untyped, runs, base_dir))
