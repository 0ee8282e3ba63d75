"""Making a plan: nodes placed by the target's verdicts (surgery.split.regions), parts cut with the constants they
read (surgery.split.cut), every target part checked alone and built where its builder runs here, refused nodes
moved to the fallback and the plan made again (at most MAX_ROUNDS times), then verified."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import ModelProto

from surgery.split.checking import seeded_feeds, verify_plan
from surgery.split.cut import CutError, cut, describe_tensor, type_text, typed
from surgery.split.plan import (
    DEFAULT_MIN_NODES,
    FALLBACKS,
    MAX_ROUNDS,
    Part,
    Plan,
    SplitError,
    Tensor,
    Verification,
    nbytes,
)
from surgery.split.regions import FALLBACK, TARGET, constant_nodes, group

# -- making a plan -----------------------------------------------------------------------------------------------


def _file_name(k: int, backend: str) -> str:
    return f"part{k}_{backend.replace('@', '-')}.onnx"


def make_plan(
    model,
    target: str,
    *,
    fallback: str = "onnxruntime",
    min_nodes: int = DEFAULT_MIN_NODES,
    depth=None,
    base_dir=None,
    source: str = "",
    seed: int = 0,
    shapes: dict[str, list[int]] | None = None,
    verify: bool = True,
    progress: Callable[[float, str], None] | None = None,
    keep_off: frozenset[str] = frozenset(),
    original=None,
    _built_rounds: int = 0,
) -> Plan:
    """A deployment plan for `model` (a surgery.model.Model, or a ModelProto with `base_dir`) on `target` with
    `fallback` for the rest. Where the target's builder runs here (TensorRT-RTX builds ahead of time on the
    CPU), every target part is built at the shapes of the verification run: a part the builder refuses goes to
    the fallback (the node it names, else the whole part) and the plan is made again, with the builder's words in
    its notes. `keep_off`: node keys that go to the fallback whatever the target says. `original`: the
    surgery.model.Model a ModelProto's weights come from, where they stay in its file (the app's current
    version). Raises SplitError for what cannot be split (message names the node or tensor),
    surgery.backends.UnknownBackend for a target id that does not exist."""
    from surgery.backends import get_backend
    from surgery.diagnose import check_one
    from surgery.graph import GraphFacts, cycle_nodes
    from surgery.model import Model
    from surgery.verdict import Outcome, Status

    t0 = time.perf_counter()

    def say(fraction: float, message: str) -> None:
        if progress:
            progress(fraction, message)

    original = original or (model if isinstance(model, Model) else None)  # the Model the weights come from
    original = original if original is not None and original.own_file is not None else None
    if isinstance(model, Model):
        base_dir, source, proto = model.base_dir, source or model.source, model.proto
    else:
        proto = model
    if fallback not in FALLBACKS:
        raise SplitError(
            f"fallback '{fallback}' cannot run parts here. Note: use one of {', '.join(FALLBACKS)}"
        )
    fb = get_backend(fallback)
    if not fb.availability().ok:
        raise SplitError(f"fallback {fallback} is not available here: {fb.availability().reason}")
    if min_nodes < 1:
        raise SplitError(f"--min-nodes must be at least 1 (got {min_nodes})")
    say(0.05, f"checking with {target}")
    report = check_one(proto, target, base_dir, depth=depth)
    if report.outcome is Outcome.UNAVAILABLE:
        reason = "; ".join(m.text() for m in report.messages)
        raise SplitError(f"target {target} is not available here: {reason}")
    facts = GraphFacts.of(proto)
    unknown = sorted(set(shapes or {}) - set(facts.graph_inputs) - {""})
    if unknown:
        raise SplitError(
            f"--input-shape names {', '.join(map(repr, unknown))}, which the model does not take. Note: its inputs "
            f"are {', '.join(facts.graph_inputs)}"
        )
    cyclic = cycle_nodes(facts)
    if cyclic:
        raise SplitError(
            f"the graph has a cycle (through node '{facts.keys[cyclic[0]]}'): ONNX graphs are acyclic, and no "
            "backend imports this one"
        )
    graph = proto.graph
    consts = constant_nodes(facts)
    status = {v.index: v.status for v in report.verdicts}
    kinds = {
        i: TARGET if status.get(i) is Status.SUPPORTED and facts.keys[i] not in keep_off else FALLBACK
        for i in range(len(graph.node))
        if i not in consts
    }
    compute = len(kinds)
    notes: list[str] = []
    second = _second_look(proto, facts, report, kinds, target, base_dir, depth)
    second = [i for i in second if facts.keys[i] not in keep_off]
    if second:
        for i in second:
            kinds[i] = TARGET
            status[i] = Status.SUPPORTED
        notes.append(
            f"{len(second)} node(s) the whole-model check left without a verdict were checked again without the "
            "nodes it refused, and are supported: "
            + ", ".join(facts.keys[i] for i in second[:5])
            + (" …" if len(second) > 5 else "")
        )
    if status and not any(s is Status.SUPPORTED for s in status.values()):
        raise SplitError(
            f"no supported region: {report.label} supports none of the {len(graph.node)} node(s); "
            + "; ".join(report.reasons()[:2])
        )
    if not any(k == TARGET for k in kinds.values()):
        raise SplitError(
            f"no supported region: {report.label} supports only constant nodes of this model; every one of its "
            f"{compute} compute node(s) would fall back"
        )
    unknown = [v for v in report.unknown if v.index in kinds and kinds[v.index] == FALLBACK]
    if unknown:
        notes.append(
            f"{len(unknown)} node(s) without a verdict ({report.label} cannot confirm them) go to the fallback: "
            + ", ".join(f"{v.op_type} '{v.node}'" for v in unknown[:5])
            + (" …" if len(unknown) > 5 else "")
        )
    rejected_consts = {
        v.index for v in report.verdicts if v.index in consts and v.status is not Status.SUPPORTED
    }
    fold: set[str] = set()
    sized = None  # (free dim size, feeds, the original runs on them)
    problems: list[str] = []  # why a run with onnxruntime could not type a tensor
    types: dict[str, onnx.TypeProto] = {}
    values: dict = {}
    rounds = 0
    while True:
        rounds += 1
        say(0.1 + 0.1 * rounds, f"grouping, round {rounds}")
        groups = group(facts, kinds, min_nodes)
        if not any(k == TARGET for k in kinds.values()):
            raise SplitError(
                f"no supported region: {report.label} refused every node it supports in the whole model when it "
                "checked them in parts of their own; " + "; ".join(notes[-1:])
            )
        if not any(g.kind == TARGET for g in groups):
            raise SplitError(
                f"no supported region of at least {min_nodes} compute node(s): {report.label} supports "
                f"{sum(k == TARGET for k in kinds.values())} scattered node(s), each region smaller than "
                f"--min-nodes {min_nodes}. Note: lower --min-nodes to keep smaller regions on the target"
            )
        owner = {i: k for k, g in enumerate(groups) for i in g.nodes}
        part_in: list[list[str]] = [[] for _ in groups]
        part_out: list[list[str]] = [[] for _ in groups]
        readers: dict[str, list[int]] = {}
        inside: dict[str, int] = {}  # tensor read only inside a subgraph -> the node that reads it
        from surgery.graph import all_inputs

        for k, g in enumerate(groups):
            for i in g.nodes:
                node = graph.node[i]
                direct = set(node.input)
                for x in all_inputs(node):
                    if not x or facts.is_constant(x):
                        continue
                    p = facts.producer.get(x)
                    if p is not None and owner.get(p) == k:
                        continue
                    if x not in part_in[k]:
                        part_in[k].append(x)
                    if x not in direct:
                        inside.setdefault(x, i)
                    if p is not None:
                        readers.setdefault(x, [])
                        if k not in readers[x]:
                            readers[x].append(k)
                        src = owner[p]
                        if x not in part_out[src]:
                            part_out[src].append(x)
        for o in facts.graph_outputs:
            p = facts.producer.get(o)
            if p is None and o in facts.graph_inputs:
                continue  # an input passed straight through: the chain hands it on
            k = (
                owner.get(p, len(groups) - 1) if p is not None else len(groups) - 1
            )  # a constant output: the last part computes it too
            if o not in part_out[k]:
                part_out[k].append(o)
        boundary = list(
            dict.fromkeys([x for ins in part_in for x in ins] + [o for outs in part_out for o in outs])
        )
        untyped = [
            t for t in boundary if not facts.info(t).dtype and t not in types and t not in facts.graph_inputs
        ]
        if untyped:
            if sized is None:
                sized = runnable_feeds(proto, seed, shapes, base_dir)
            if sized[1] is not None:
                runs = [sized[:2]]
                other = _feeds_or_none(proto, seed, shapes, default_dim=sized[0] + 1)
                if other is not None:
                    runs.append((sized[0] + 1, other))
                types.update(isolated_types(proto, untyped, runs, base_dir, problems))
        say(0.2 + 0.1 * rounds, f"cutting {len(groups)} part(s)")
        parts: list[Part] = []
        cuts = []
        for k, g in enumerate(groups):
            backend = target if g.kind == TARGET else fallback
            part_fold = set(fold)
            if g.kind == TARGET:  # a constant the target refuses to compute is handed over as a value
                for x in {x for i in g.nodes for x in all_inputs(graph.node[i])}:
                    if facts.is_constant(x) and set(facts.constant_producers(x)) & rejected_consts:
                        part_fold.add(x)
            try:
                c = cut(
                    proto,
                    facts,
                    g.nodes,
                    part_out[k],
                    fold=part_fold,
                    values=values,
                    types=types,
                    base_dir=base_dir,
                    name=f"{graph.name or 'graph'}_part{k}",
                )
            except CutError as exc:
                why = problems[-1] if problems else ""
                if not why and sized is not None and not sized[2]:
                    why = "the original does not run on onnxruntime here"
                raise SplitError(
                    _boundary_message(exc, facts, groups, k, inside, target, fallback)
                    + (f" ({why})" if why else "")
                ) from None
            parts.append(
                Part(
                    k,
                    g.kind,
                    backend,
                    _file_name(k, backend),
                    [facts.keys[i] for i in c.nodes],
                    c.inputs,
                    list(part_out[k]),
                    c.folded,
                    model=c.model,
                )
            )
            cuts.append(c)
        # every part checked alone by its backend; nodes a target part refuses there go back to the fallback
        moved, more_fold = [], set()
        for n, part in enumerate(parts):
            say(0.3 + 0.4 * n / max(len(parts), 1), f"checking part {part.index} with {part.backend}")
            r = check_one(part.model, part.backend, base_dir, depth=depth if part.role == TARGET else None)
            part.check = {
                "backend": r.backend,
                "label": r.label,
                "outcome": r.outcome.value,
                "reasons": r.reasons()[:3],
                "seconds": round(r.seconds, 3),
            }
            if part.role != TARGET:
                continue
            c = cuts[n]
            for v in r.verdicts:
                if v.status is Status.SUPPORTED or v.index < 0:
                    continue
                i = c.original_index(v.index)
                if i in kinds:
                    moved.append(i)
                else:  # a copied constant node the target refuses alone: hand its value over instead
                    more_fold.update(o for o in graph.node[i].output if o)
        if (moved or more_fold - fold) and rounds < MAX_ROUNDS:
            for i in moved:
                kinds[i] = FALLBACK
            fold |= more_fold
            notes.append(
                f"round {rounds}: {len(moved)} node(s) the target refused in a part of their own went to the "
                "fallback"
                + (f": {', '.join(facts.keys[i] for i in moved[:5])}" if moved else "")
                + (f"; {len(more_fold)} constant(s) handed over by value" if more_fold else "")
            )
            continue
        break

    def tensor(name: str, source: int | None, targets: list[int]) -> Tensor:
        try:
            vi = typed(facts, name, types)
        except CutError:
            return Tensor(name, "?", None, None, source, targets)
        dtype, shape = type_text(vi)
        return Tensor(name, dtype, shape, nbytes(vi.type.tensor_type.elem_type, shape), source, targets)

    owner_part = {o: p.index for p in parts for o in p.outputs}
    crossings = [
        tensor(x, owner_part.get(x), sorted(readers.get(x, [])))
        for p in parts
        for x in p.outputs
        if x in readers
    ]
    inputs = [tensor(x, None, [p.index for p in parts if x in p.inputs]) for x in facts.graph_inputs]
    plan = Plan(
        source=source,
        target=target,
        target_label=report.label,
        fallback=fallback,
        min_nodes=min_nodes,
        parts=parts,
        inputs=inputs,
        outputs=list(facts.graph_outputs),
        crossings=crossings,
        nodes=len(graph.node),
        compute_nodes=compute,
        rounds=rounds,
        notes=notes,
        base_dir=None if base_dir is None else Path(base_dir),
        original=original,
    )
    if verify:
        say(0.75, "running the chain against the original")
        if sized is None:
            sized = runnable_feeds(proto, seed, shapes, base_dir)
        plan.verification = verify_isolated(plan, proto, feeds=sized[1], seed=seed, shapes=shapes)
    say(0.9, f"building the target parts with {target}")
    refused = build_target_parts(plan, target, base_dir)
    if refused and _built_rounds < MAX_ROUNDS:
        again = make_plan(
            model,
            target,
            fallback=fallback,
            min_nodes=min_nodes,
            depth=depth,
            base_dir=base_dir,
            source=source,
            seed=seed,
            shapes=shapes,
            verify=verify,
            progress=progress,
            keep_off=keep_off | refused.keys(),
            original=original,
            _built_rounds=_built_rounds + 1,
        )
        words = sorted(set(refused.values()))
        again.notes.insert(
            0,
            f"the builder refused {len(refused)} node(s) in a target part ({', '.join(sorted(refused)[:5])}"
            f"{' …' if len(refused) > 5 else ''}), which went to the fallback; it said: {'; '.join(words)[:400]}",
        )
        again.seconds = time.perf_counter() - t0
        return again
    plan.seconds = time.perf_counter() - t0
    say(1.0, "done")
    return plan


def build_target_parts(plan: Plan, target: str, base_dir) -> dict[str, str]:
    """Build every target part where the target's builder runs here, at the shapes its inputs had in the
    verification run (a profile of that one shape for each dynamic input), and record the result in
    `part.build`. Returns the nodes that should go to the fallback, with the builder's words: the node the
    builder names where it names one in the part, else every node of the part."""
    from surgery.backends import get_backend
    from surgery.backends.base import BuildOptions
    from surgery.backends.build import build_model
    from surgery.graph import tensor_info_from_type

    backend = get_backend(target)
    builds = getattr(backend, "builds_in_check", False) and backend.availability().ok
    if not builds or target.startswith("tensorrt-static"):
        why = f"{target} has no builder on this machine: its parts were checked at parse only"
        for part in plan.target_parts:
            part.build = {"depth": "parse", "why": why}
        return {}
    v = plan.verification
    seen = dict((v.feeds if v is not None else {}) or {})
    seen.update({c.name: c.measured_shape for c in plan.crossings if c.measured_shape is not None})
    refused: dict[str, str] = {}
    for part in plan.target_parts:
        profiles, missing = {}, []
        for vi in part.model.graph.input:
            info = tensor_info_from_type(vi.name, vi.type)
            if vi.name in part.inputs and info.is_dynamic:
                shape = seen.get(vi.name)
                if shape is None:
                    missing.append(vi.name)
                else:
                    profiles[vi.name] = (tuple(shape),) * 3
        if missing:
            part.build = {
                "depth": "parse",
                "why": f"not built: no shape known for its dynamic input(s) {', '.join(missing)} (the plan's "
                "verification did not run); give --input-shape",
            }
            continue
        # whether the part builds; its engine is not kept (it was left in a temp folder of its own, per part)
        opts = BuildOptions(measure=False, artifact=False, profiles=profiles)
        r = build_model(target, part.model, opts, base_dir=base_dir)
        part.build = {
            "depth": "build",
            "ok": r.ok,
            "builder": r.label,
            "words": r.error,
            "profiles": {k: list(lo) for k, (lo, _, _) in profiles.items()},
        }
        if r.ok:
            continue
        named = [r.node] if r.node in part.nodes else []  # the builder names a node by its name (its key)
        for key in named or part.nodes:
            refused[key] = first_words(r.error)
    return refused


def first_words(text: str) -> str:
    from surgery.text import telling_line

    return telling_line(text, 200)


def _numeric(facts, tensor: str) -> bool:
    """A typed tensor of numbers or booleans: what an accelerator can take at a boundary."""
    dtype = facts.info(tensor).dtype
    return bool(dtype) and dtype != onnx.TensorProto.STRING


def _second_look(proto, facts, report, kinds: dict[int, str], target: str, base_dir, depth) -> list[int]:
    """Nodes without a verdict (the parser stopped at an error not tied to a node, e.g. a string graph input it
    cannot import; or a node fed by a refused one), checked again in a model of the nodes it did not refuse and
    that read and write only numeric tensors. Returns the ones it supports there. A verdict of 'unknown' for a
    reason that holds there too (a plugin TensorRT-RTX lacks) stays unknown, and the node falls back."""
    from surgery.diagnose import check_one
    from surgery.graph import all_inputs
    from surgery.verdict import Status

    graph = proto.graph
    status = {v.index: v.status for v in report.verdicts}
    unknown = [i for i in kinds if status.get(i) is Status.UNKNOWN]
    if not unknown:
        return []

    def clean(i: int) -> bool:
        node = graph.node[i]
        ins = [x for x in all_inputs(node) if x and not facts.is_constant(x)]
        return all(_numeric(facts, x) for x in [*ins, *(o for o in node.output if o)])

    keep = [i for i in kinds if status.get(i) is not Status.REJECTED and clean(i)]
    if not any(i in set(keep) for i in unknown):
        return []
    kept = set(keep)
    outs = []
    for i in keep:
        for o in graph.node[i].output:
            if o and (o in facts.graph_outputs or any(j not in kept for j in facts.consumers.get(o, []))):
                outs.append(o)
    try:
        c = cut(proto, facts, keep, outs or [graph.node[keep[-1]].output[0]], base_dir=base_dir)
        again = check_one(c.model, target, base_dir, depth=depth)
    except Exception:  # a second look is a bonus: without it those nodes fall back
        return []
    found = []
    for v in again.verdicts:
        if v.index >= 0 and v.status is Status.SUPPORTED:
            i = c.original_index(v.index)
            if status.get(i) is Status.UNKNOWN and i in kinds:
                found.append(i)
    pos = facts.position
    return sorted(found, key=pos.__getitem__)


def runnable_feeds(
    model: ModelProto, seed: int = 0, shapes=None, base_dir=None
) -> tuple[int, dict | None, bool]:
    """(size, feeds, the original runs on them): seeded inputs whose symbolic dims nobody gave take the first of
    2 and surgery.verify's larger FREE_DIM_SIZES (16, 512, 16000: an audio front end needs a window of samples)
    at which onnxruntime runs the original (in a child process: a size that crashes it is passed over), within
    its FEED_LIMIT; the first size's feeds when none runs, None when inputs cannot be made (an input without a
    shape)."""
    from surgery.isolate import BackendCrash, call_isolated
    from surgery.verify import FEED_LIMIT, FREE_DIM_SIZES, RUN_FAILURE

    first = None
    tried: list = []
    for size in (2, *(d for d in FREE_DIM_SIZES if d > 2)):
        if tried and _elements_at(model, shapes, size) > FEED_LIMIT:
            break  # too large to draw: counted before any input is made (32 KV caches at 512 are gigabytes)
        feeds = _feeds_or_none(model, seed, shapes, default_dim=size)
        if feeds is None:
            return size, None, False
        dims = {k: np.shape(v) for k, v in feeds.items()}
        if tried and (dims in tried or max(map(np.prod, dims.values()), default=0) > FEED_LIMIT):
            break
        tried.append(dims)
        first = first or (size, feeds, False)
        try:
            error = call_isolated("surgery.split.making:_runs", model, feeds, base_dir, timeout=RUN_TIMEOUT_S)
        except BackendCrash:
            continue  # onnxruntime died at this size (SIGFPE on an empty scan, ...): try a larger one
        if not error:
            return size, feeds, True
        if RUN_FAILURE not in error:
            break
    return first


def _elements_at(model: ModelProto, shapes, size: int) -> int:
    """How many elements the seeded inputs hold, all of them together, when every dim nobody gave is `size` (an
    upper bound of what seeded_feeds draws: it may relate some lengths)."""
    given = shapes or {}
    inits = {t.name for t in model.graph.initializer}
    total = 0
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if vi.name in given:
            dims = list(given[vi.name])
        else:
            dims = [d.dim_value if d.HasField("dim_value") else size for d in vi.type.tensor_type.shape.dim]
        total += int(np.prod(dims, dtype=np.int64)) if dims else 1
    return total


def _runs(model: ModelProto, feeds: dict, base_dir=None) -> str:
    """Empty when onnxruntime runs `model` on `feeds`, else its error (called in a child process)."""
    from surgery.ort import make_session

    try:
        sess = make_session(model, base_dir)
        wanted = {i.name for i in sess.get_inputs()}
        sess.run(None, {k: v for k, v in feeds.items() if k in wanted})
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        return str(exc) or type(exc).__name__
    return ""


# Runs on seeded inputs can crash onnxruntime itself (an integer division by a random zero is SIGFPE): they run in
# a child process (surgery.isolate), and a crash is reported, never the caller's death.
RUN_TIMEOUT_S = 600.0


def isolated_types(model: ModelProto, tensors: list[str], runs, base_dir=None, problems=None) -> dict:
    """surgery.split.cut.learn_types in a child process ({} where that crashes; the crash is appended to
    `problems`)."""
    from surgery.isolate import BackendCrash, call_isolated

    try:
        return call_isolated(
            "surgery.split.cut:learn_types", model, tensors, runs, base_dir, timeout=RUN_TIMEOUT_S
        )
    except BackendCrash as exc:
        if problems is not None:
            problems.append(f"the run with onnxruntime crashed ({exc})")
        return {}


def verify_isolated(plan: Plan, original: ModelProto, **kwargs) -> Verification:
    """verify_plan in a child process: a run that crashes or runs out of time is a failed verification."""
    import dataclasses

    from surgery.isolate import BackendCrash, call_isolated

    try:
        v, measured = call_isolated(
            "surgery.split.making:_verify_and_measure",
            dataclasses.replace(plan, _runners={}),
            original,
            kwargs,
            timeout=RUN_TIMEOUT_S,
        )
    except BackendCrash as exc:
        feeds = kwargs.get("feeds") or {}
        return Verification(
            "failed",
            kwargs.get("seed", 0),
            {k: list(np.shape(v)) for k, v in feeds.items()},
            message=f"running the original or the chain on seeded inputs: {exc}",
        )
    for c in plan.crossings:
        c.measured_bytes, c.measured_shape = measured.get(c.name, (None, None))
    return v


def _verify_and_measure(plan: Plan, original: ModelProto, kwargs: dict) -> tuple[Verification, dict]:
    v = verify_plan(plan, original, **kwargs)
    return v, {c.name: (c.measured_bytes, c.measured_shape) for c in plan.crossings}


def _feeds_or_none(proto, seed, shapes, default_dim: int = 2):
    try:
        return seeded_feeds(proto, seed=seed, shapes=shapes, default_dim=default_dim)
    except ValueError:
        return None


def _boundary_message(exc: CutError, facts, groups, k: int, inside: dict, target: str, fallback: str) -> str:
    where = f"part {k} ({target if groups[k].kind == TARGET else fallback})"
    if exc.tensor and exc.tensor in inside:
        i = inside[exc.tensor]
        node = facts.model.graph.node[i]
        return (
            f"cannot split at a subgraph-bearing node: {node.op_type} '{facts.keys[i]}' reads "
            f"{describe_tensor(facts, exc.tensor)} inside its subgraph, from another part, and that tensor has no "
            f"known dtype, so {where} cannot declare it as an input. Note: give the model's shapes (onnx shape "
            "inference must type it), or keep the node and its producer on one backend"
        )
    if exc.tensor:
        readers = [facts.keys[i] for i in facts.consumers.get(exc.tensor, [])][:3]
        return (
            f"cannot split: {describe_tensor(facts, exc.tensor)} crosses into or out of {where} (read by "
            f"{', '.join(readers) or 'a graph output'}) but has no known dtype: neither shape inference nor a run "
            "with onnxruntime types it. Note: a part's inputs and outputs must be typed tensors (a sequence, map or "
            "optional cannot cross between backends)"
        )
    return f"cannot split {where}: {exc}"
