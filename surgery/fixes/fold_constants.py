"""Fold constant subgraphs into initializers.

A tensor is foldable when it is computed only from constants (initializers, Constant nodes), or from the
shape of a tensor whose shape is fully static after shape inference (Shape/Size). Whole-graph mode folds
every foldable tensor that a non-foldable node (or a graph output) reads; `tensors=[...]` folds only the
chains behind those tensors — the classic case: the Concat(Constant, Cast(Unsqueeze(...))) feeding Resize's
scales becomes one initializer and nothing else changes. An If whose condition folds is replaced by the branch
that runs. All values are computed in one onnxruntime session.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper, numpy_helper

from surgery.backends.base import first_line
from surgery.fixes import FixError, Safety, register
from surgery.graph import NONDETERMINISTIC_OPS, GraphFacts, all_inputs, light_copy

STANDARD = ("", "ai.onnx")


def _foldable(model: ModelProto, facts: GraphFacts) -> tuple[set[str], dict[str, np.ndarray]]:
    """Foldable tensors, and the values of Shape/Size outputs known from static shapes."""
    graph = model.graph
    # before IR 4 every initializer is also listed as an input: they are constants all the same
    inputs = {vi.name for vi in graph.input} if model.ir_version >= 4 else set()
    const = {name for name in facts.initializers if name not in inputs}
    known: dict[str, np.ndarray] = {}
    partial: dict[str, list[int | None]] = {}  # Shape outputs of tensors with some dynamic dims
    for i in facts.order:
        node = graph.node[i]
        if node.domain not in STANDARD or node.op_type in NONDETERMINISTIC_OPS:
            continue
        ins = all_inputs(node)
        if node.op_type == "Constant" or (ins and all(x in const for x in ins)):
            const.update(o for o in node.output if o)
        elif node.op_type in ("Gather", "Slice") and node.input[0] in partial:
            value = _index_partial(node, partial[node.input[0]], facts)
            if value is not None:
                known[node.output[0]] = value
                const.add(node.output[0])
        elif (
            node.op_type == "Shape"
            and node.input
            and facts.info(node.input[0]).shape is not None
            and (facts.info(node.input[0]).is_dynamic)
        ):
            # a partly dynamic shape: its static entries can still be picked out by Gather/Slice
            dims = [d if isinstance(d, int) else None for d in facts.info(node.input[0]).shape]
            attrs = {a.name: a.i for a in node.attribute}
            partial[node.output[0]] = dims[attrs.get("start", 0) : attrs.get("end", len(dims))]
        elif node.op_type in ("Shape", "Size") and node.input:
            info = facts.info(node.input[0])
            if info.shape is not None and not info.is_dynamic:
                dims = np.array(info.shape, dtype=np.int64)
                if node.op_type == "Size":
                    known[node.output[0]] = np.array(int(np.prod(dims)), dtype=np.int64)
                else:
                    attrs = {a.name: a.i for a in node.attribute}
                    start, end = attrs.get("start", 0), attrs.get("end", len(dims))
                    known[node.output[0]] = dims[slice(start, end if end != 0 or "end" in attrs else None)]
                const.add(node.output[0])
    return const, known


def _index_partial(node, dims: list[int | None], facts: GraphFacts) -> np.ndarray | None:
    """Gather or Slice with constant indices on a partly known shape: the value, if every picked dim is static."""

    def const(k):
        if len(node.input) <= k or not node.input[k]:
            return None
        t = facts.initializers.get(node.input[k])
        return None if t is None else numpy_helper.to_array(t)

    if node.op_type == "Gather":
        idx = const(1)
        if idx is None:
            return None
        picked = [dims[int(i)] for i in np.asarray(idx).reshape(-1)]
        if any(d is None for d in picked):
            return None
        return np.array(picked, dtype=np.int64).reshape(np.asarray(idx).shape)
    starts, ends = const(1), const(2)
    axes, steps = const(3), const(4)
    if starts is None or ends is None or (len(node.input) > 3 and node.input[3] and axes is None):
        return None
    if (axes is not None and list(axes.reshape(-1)) not in ([0], [-1])) or (
        steps is not None and steps.size and int(steps.reshape(-1)[0]) != 1
    ):
        return None
    s0, e0 = int(starts.reshape(-1)[0]), int(ends.reshape(-1)[0])
    picked = dims[slice(s0, e0)]
    if any(d is None for d in picked):
        return None
    return np.array(picked, dtype=np.int64)


def _evaluate(
    model: ModelProto,
    facts: GraphFacts,
    targets: list[str],
    known: dict[str, np.ndarray],
    base_dir: str | None,
) -> dict[str, np.ndarray]:
    """Compute `targets` with one onnxruntime session over their constant cones."""
    graph = model.graph
    need: set[int] = set()
    stack = [t for t in targets if t not in known]
    seen: set[str] = set()
    while stack:
        t = stack.pop()
        if t in seen or t in known:
            continue
        seen.add(t)
        i = facts.producer.get(t)
        if i is None or i in need:
            continue
        need.add(i)
        stack.extend(x for x in all_inputs(graph.node[i]) if x)
    nodes = [graph.node[i] for i in facts.order if i in need]
    used = {x for n in nodes for x in all_inputs(n)} | set(targets)
    inits = [t for t in graph.initializer if t.name in used]
    for name, value in known.items():
        if name in used:
            inits.append(numpy_helper.from_array(value, name))
    outputs = []
    for t in targets:
        dtype = facts.info(t).dtype
        if not dtype and t in known:
            dtype = TensorProto.INT64
        # an untyped output lets onnxruntime infer it; a guessed type would be a type error
        outputs.append(
            helper.make_tensor_value_info(t, dtype, None) if dtype else helper.make_empty_tensor_value_info(t)
        )
    sub = helper.make_graph(nodes, "fold", [], outputs, inits)
    sub_model = helper.make_model(sub, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    sub_model.functions.extend(model.functions)
    from surgery.ort import make_session

    direct = [t for t in targets if t in known]
    values = {t: known[t] for t in direct}
    if len(direct) == len(targets):
        return values
    try:
        sess = make_session(sub_model, base_dir)
        names = [o.name for o in sess.get_outputs()]
        values.update(zip(names, sess.run(names, {})))
    except Exception as exc:
        raise FixError(
            f"could not evaluate the constant subgraph: {first_line(str(exc)) or type(exc).__name__}"
        ) from None
    return values


def _inline_if(graph: onnx.GraphProto, index: int, branch_true: bool) -> None:
    """Replace the If node at `index` by the nodes of the branch that runs; its outputs keep their names."""
    node = graph.node[index]
    branch = next(a.g for a in node.attribute if a.name == ("then_branch" if branch_true else "else_branch"))
    prefix = f"{node.name or 'If'}/{'then' if branch_true else 'else'}/"
    local = {t.name for t in branch.initializer} | {o for n in branch.node for o in n.output if o}
    rename = {name: prefix + name for name in local}
    for out, b_out in zip(node.output, branch.output):
        rename[b_out.name] = out
    new_nodes = []
    for n in branch.node:
        m = onnx.NodeProto()
        m.CopyFrom(n)
        m.name = prefix + (n.name or n.op_type)
        m.input[:] = [rename.get(x, x) for x in n.input]
        m.output[:] = [rename.get(x, x) for x in n.output]
        new_nodes.append(m)
    for b_out, out in zip(branch.output, node.output):
        if b_out.name not in local:  # the branch returns an outer tensor or an initializer as is
            new_nodes.append(
                helper.make_node(
                    "Identity", [rename.get(b_out.name, b_out.name)], [out], name=prefix + "Identity_" + out
                )
            )
    # an Identity the branch used only to name its output is dropped: its readers read the source directly
    graph_outputs = {o.name for o in graph.output}
    kept = []
    for m in new_nodes:
        implicit = any(
            m.output[0] in all_inputs(n) and m.output[0] not in n.input for n in graph.node
        )  # read from a subgraph by name: keep the name
        if m.op_type == "Identity" and not m.domain and m.output[0] not in graph_outputs and not implicit:
            for n in graph.node:
                for k, x in enumerate(n.input):
                    if x == m.output[0]:
                        n.input[k] = m.input[0]
            for other in new_nodes:
                for k, x in enumerate(other.input):
                    if x == m.output[0]:
                        other.input[k] = m.input[0]
            continue
        kept.append(m)
    new_nodes = kept
    for t in branch.initializer:
        c = TensorProto()
        c.CopyFrom(t)
        c.name = rename[t.name]
        graph.initializer.append(c)
    del graph.node[index]
    for k, m in enumerate(new_nodes):
        graph.node.insert(index + k, m)


def _keep_nodes(graph: onnx.GraphProto, keep: list[int]) -> None:
    kept = [onnx.NodeProto() for _ in keep]
    for m, i in zip(kept, keep):
        m.CopyFrom(graph.node[i])
    del graph.node[:]
    graph.node.extend(kept)


def _inputs(node: onnx.NodeProto) -> list[str]:
    """The node's inputs, with what its subgraphs read from outside (the slow path only for subgraph owners)."""
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return all_inputs(node)
    return [x for x in node.input if x]


def _remove_dead(graph: onnx.GraphProto, removable: set[int]) -> None:
    """Drop removable nodes nobody reads any more (transitively, in one backward sweep), then initializers
    nobody reads."""
    nodes = graph.node
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    alive = [i not in removable for i in range(len(nodes))]
    stack = [o.name for o in graph.output]
    for i, n in enumerate(nodes):
        if alive[i]:
            stack.extend(_inputs(n))
    seen: set[str] = set()
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        i = producer.get(t)
        if i is not None and not alive[i]:
            alive[i] = True
            stack.extend(_inputs(nodes[i]))
    keep = [i for i in range(len(nodes)) if alive[i]]
    if len(keep) != len(nodes):
        _keep_nodes(graph, keep)
    read = {o.name for o in graph.output} | {x for n in graph.node for x in _inputs(n)}
    unused = [k for k, t in enumerate(graph.initializer) if t.name not in read]
    gone = {graph.initializer[k].name for k in unused}
    for k in reversed(unused):
        del graph.initializer[k]
    # before IR 4 initializers are listed as graph inputs too: an initializer that goes takes its input along
    stale = [k for k, vi in enumerate(graph.input) if vi.name in gone and vi.name not in read]
    for k in reversed(stale):
        del graph.input[k]


@register(
    "fold_constants",
    safety=Safety.EXACT,
    summary="Fold constant subgraphs (and shapes of statically shaped tensors) into initializers.",
    params={
        "tensors": "list of tensor names: fold only the constant chains computing these, each into one "
        "initializer, nothing else changes (default: the whole graph)",
        "size_threshold": "int, bytes: a folded value larger than this is not materialised; its producers "
        "stay (default: no limit)",
        "max_bytes": "int, bytes: refuse (FixError naming the tensor and its reader) when a value to fold is "
        "larger than this, before computing it where its shape is known (default: no limit)",
        "inline_if": "bool: replace an If whose condition folds by the nodes of the branch that runs, "
        "names prefixed with the If's name (default true; whole-graph mode only)",
        "base_dir": "str: folder of the model's external data, read only for folded tensors (the "
        "workspace sets it)",
    },
)
def fold_constants(
    model: ModelProto, tensors=None, size_threshold=None, inline_if=True, base_dir=None, max_bytes=None
):
    out = ModelProto()
    out.CopyFrom(model)
    limit = _check_limit(max_bytes)
    # a round can expose more: an inlined If's branch, or a Shape whose input became static once a computed
    # Reshape target folded. Without Shape, Size or If left, one round is the fixpoint.
    for _ in range(8):
        changed = _fold_once(out, tensors, size_threshold, inline_if, base_dir, limit)
        if not changed or tensors is not None:
            break
        if not any(n.op_type in ("Shape", "Size", "If") and not n.domain for n in out.graph.node):
            break
    _toposort_in_place(out.graph)
    return out


def _toposort_in_place(graph: onnx.GraphProto) -> None:
    """Stable topological order (file order among ready nodes); a no-op on a sorted graph."""
    from surgery.graph import _toposort

    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    order = _toposort(graph, producer)
    if order != list(range(len(graph.node))):
        _keep_nodes(graph, order)


def _facts(model: ModelProto) -> GraphFacts:
    """Graph facts for folding. Shape inference runs only when a Shape or Size may fold, with data propagation
    (a Reshape target built by Concat from a dynamic batch and constants still gives static dims), on a light
    copy (surgery.graph.light_copy), so the model is not serialised whole."""
    if not any(n.op_type in ("Shape", "Size") and not n.domain for n in model.graph.node):
        return GraphFacts.of(model, infer=False)
    try:
        inferred = onnx.shape_inference.infer_shapes(
            light_copy(model), check_type=False, strict_mode=False, data_prop=True
        )
    except Exception:
        return GraphFacts.of(model)
    return GraphFacts.of(inferred, infer=False)


def _check_limit(max_bytes) -> int | None:
    if max_bytes is None:
        return None
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise FixError(f"max_bytes must be a number of bytes (an integer >= 0), got {max_bytes!r}")
    return max_bytes


def _too_big(facts: GraphFacts, tensor: str, nbytes: int, limit: int) -> FixError:
    readers = ", ".join(f"{n.op_type} '{n.name}'" for n in facts.consumers_of(tensor)[:2]) or "a graph output"
    return FixError(
        f"folding '{tensor}' (read by {readers}) would make a constant of {nbytes:,} bytes, over max_bytes="
        f"{limit:,}. Note: raise max_bytes, or keep the tensor computed"
    )


def _fold_once(model: ModelProto, tensors, size_threshold, inline_if, base_dir, limit=None) -> bool:
    graph = model.graph
    facts = _facts(model)
    const, known = _foldable(model, facts)
    outputs = {o.name for o in graph.output}
    if tensors is not None:
        missing = [t for t in tensors if t not in const]
        if missing:
            t = missing[0]
            producer = facts.producer_of(t)
            who = (
                f"produced by {producer.op_type} '{producer.name}'"
                if producer is not None
                else "a graph input"
            )
            raise FixError(
                f"tensor '{t}' is not computed only from constants ({who} depends on a graph input or a "
                "dynamic shape). Note: freeze the input shapes first, or fold another tensor"
            )
        targets = [t for t in tensors if t not in facts.initializers]
    else:
        targets = []
        for i in facts.order:
            node = graph.node[i]
            if all(o in const for o in node.output if o):
                continue  # a foldable node: its outputs are folded only where a non-foldable reader needs them
            for x in all_inputs(node):
                if x in const and x not in facts.initializers and x not in targets:
                    targets.append(x)
        targets += [o for o in outputs if o in const and o not in facts.initializers and o not in targets]
    # If nodes whose condition folds
    ifs = [
        i
        for i in facts.order
        if graph.node[i].op_type == "If"
        and graph.node[i].input[0] in const
        and inline_if
        and all(o not in const for o in graph.node[i].output)
    ]
    cond_targets = [graph.node[i].input[0] for i in ifs if graph.node[i].input[0] not in facts.initializers]
    eval_targets = list(dict.fromkeys(targets + cond_targets))
    if not eval_targets and not ifs:
        return False
    if limit is not None:  # refuse before computing what the shapes already show is too big
        for t in targets:
            info = facts.info(t)
            numel = info.numel()
            if numel is not None and info.dtype:
                nbytes = numel * helper.tensor_dtype_to_np_dtype(info.dtype).itemsize
                if nbytes > limit:
                    raise _too_big(facts, t, nbytes, limit)
    values = _evaluate(model, facts, eval_targets, known, base_dir) if eval_targets else {}
    if limit is not None:
        for t in targets:
            if np.asarray(values[t]).nbytes > limit:
                raise _too_big(facts, t, int(np.asarray(values[t]).nbytes), limit)
    branches = []  # (the If's outputs, which branch runs)
    for i in ifs:
        cond_name = graph.node[i].input[0]
        cond = (
            values[cond_name] if cond_name in values else numpy_helper.to_array(facts.initializers[cond_name])
        )
        branches.append((list(graph.node[i].output), bool(np.asarray(cond).reshape(-1)[0])))
    # foldable nodes, and Shape nodes of partly dynamic tensors, go once nobody reads them any more
    removable = {
        i
        for i, n in enumerate(graph.node)
        if all(o in const for o in n.output if o) or (n.op_type == "Shape" and not n.domain)
    }
    changed = False
    existing = {t.name for t in graph.initializer}
    for t in targets:
        value = values[t]
        if size_threshold is not None and value.nbytes > size_threshold:
            continue
        if t not in existing:
            graph.initializer.append(numpy_helper.from_array(np.asarray(value), t))
            changed = True
    # a folded tensor is now an initializer: its producer has nothing left to do
    folded = {t.name for t in graph.initializer}
    keep = [
        i for i, n in enumerate(graph.node) if not (n.output and all(o in folded or not o for o in n.output))
    ]
    before = len(graph.node)
    if len(keep) != before:
        new_index = {old: new for new, old in enumerate(keep)}
        removable = {new_index[i] for i in removable if i in new_index}
        _keep_nodes(graph, keep)
    _remove_dead(graph, removable)
    changed = changed or len(graph.node) != before
    for if_outputs, taken in branches:  # node indices moved: find each If again by its outputs
        j = next(j for j, n in enumerate(graph.node) if n.op_type == "If" and list(n.output) == if_outputs)
        _inline_if(graph, j, taken)
        changed = True
    if changed:
        _remove_dead(graph, {i for i, n in enumerate(graph.node) if n.op_type == "Constant"})
    return changed
