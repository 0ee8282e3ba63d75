"""Fold constant subgraphs into initializers.

A tensor is foldable when it is computed only from constants (initializers, Constant nodes), or from the
shape of a tensor whose shape is fully static after shape inference (Shape/Size). Whole-graph mode folds
every foldable tensor that a non-foldable node (or a graph output) reads; `tensors=[...]` folds only the
chains behind those tensors — the classic case: the Concat(Constant, Cast(Unsqueeze(...))) feeding Resize's
scales becomes one initializer and nothing else changes. An If whose condition folds is replaced by the branch
that runs. All values are computed in one onnxruntime session.
"""

from __future__ import annotations

import dataclasses
import warnings
from contextlib import contextmanager

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper, numpy_helper

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import add_initializer
from surgery.graph import (
    GraphFacts,
    _standard_ops_without_bodies,
    all_inputs,
    constant_tensor,
    copied_reads,
    folds_through,
    light_copy,
    reads_memo,
)
from surgery.model import copy_into, copy_message
from surgery.text import first_line

# Ops whose outputs are never folded, constant or not: a QuantizeLinear/DequantizeLinear pair is how a QDQ model
# says which tensors run quantized. Folding a DequantizeLinear of INT8 weights writes them back as float32, and
# TensorRT then builds that layer unquantized (its explicit quantization reads the weights' DequantizeLinear);
# onnxruntime no longer fuses it into an integer kernel either. onnx-graphsurgeon's fold_constants keeps the same
# three ops (NO_FOLD_OPS in onnx_graphsurgeon/ir/graph.py, 0.6.1).
NO_FOLD_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})


def _foldable(model: ModelProto, facts: GraphFacts) -> tuple[set[str], dict[str, np.ndarray]]:
    """Foldable tensors, and the values of those known from shapes (surgery.shape_values): a Shape of a static
    shape, and every shape-arithmetic tensor whose elements are all known although it reads a partly dynamic
    shape (Div(Gather(Shape(x), 1), 2) with x's dim 1 static). A dynamic dim is never known: what reads it
    stays computed. Nothing a NO_FOLD_OPS node computes folds, nor what is computed from it (its shape does)."""
    from surgery.shape_values import refine

    graph = model.graph
    # the constants (graph.folds_through), then what shapes add to them; a body's include the outer constants
    # it reads
    const = set(facts.constant)
    known: dict[str, np.ndarray] = {}
    values = facts.__dict__.get("shape_values")
    if values is None and not any(op in ("Shape", "Size") for op in facts.ops):
        values = {}  # every partial value starts at a Shape or Size: without one, nothing is known beyond constants
    for i in facts.order:
        node = graph.node[i]
        if not folds_through(node):
            continue
        ins = all_inputs(node)
        if node.op_type == "Constant" or (ins and all(x in const for x in ins)):
            const.update(o for o in node.output if o)
        elif len(node.output) == 1 and node.op_type in _SHAPE_VALUE_OPS:
            if values is None:
                values = refine(facts)[0]
            v = values.get(node.output[0])
            if v is not None and v.known:
                known[node.output[0]] = v.array()
                const.add(node.output[0])
    if NO_FOLD_OPS.intersection(facts.ops):
        kept = _quantization_kept(graph, facts)
        const -= kept
        known = {t: v for t, v in known.items() if t not in kept}
    return const, known


def _quantization_kept(graph: onnx.GraphProto, facts: GraphFacts) -> set[str]:
    """The tensors a NO_FOLD_OPS node computes and every tensor computed from one (a Shape or Size of one reads
    only its shape: not)."""
    kept: set[str] = set()
    for i in facts.order:
        node = graph.node[i]
        if node.domain in ("", "ai.onnx") and node.op_type in ("Shape", "Size"):
            continue
        if (node.domain in ("", "ai.onnx") and node.op_type in NO_FOLD_OPS) or any(
            x in kept for x in all_inputs(node)
        ):
            kept.update(o for o in node.output if o)
    return kept


def _shape_value_ops() -> frozenset[str]:
    from surgery.shape_values import _RULES

    return frozenset(_RULES)


_SHAPE_VALUE_OPS = _shape_value_ops()


def _evaluate(
    model: ModelProto,
    facts: GraphFacts,
    targets: list[str],
    known: dict[str, np.ndarray],
    base_dir: str | None,
) -> dict[str, np.ndarray]:
    """Compute `targets` with one onnxruntime session over their constant cones. A target already `known` (a
    shape value) is returned as it is, and the session holds only what the others read. (A Constant's tensor
    never comes here: `_fold_once` writes it as the initializer as it is.)"""
    graph = model.graph
    values = {t: known[t] for t in targets if t in known}
    rest = [t for t in targets if t not in known]
    if not rest:
        return values
    need: set[int] = set()
    stack = list(rest)
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
    used = {x for n in nodes for x in all_inputs(n)} | set(rest)
    inits = [t for t in graph.initializer if t.name in used]
    for name, value in known.items():
        if name in used:
            inits.append(numpy_helper.from_array(value, name))
    outputs = []
    for t in rest:
        dtype = facts.info(t).dtype
        # an untyped output lets onnxruntime infer it; a guessed type would be a type error
        outputs.append(
            helper.make_tensor_value_info(t, dtype, None) if dtype else helper.make_empty_tensor_value_info(t)
        )
    sub = helper.make_graph(nodes, "fold", [], outputs, inits)
    sub_model = helper.make_model(sub, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    sub_model.functions.extend(model.functions)
    from surgery.ort import make_session

    try:
        sess = make_session(sub_model, base_dir)
        names = [o.name for o in sess.get_outputs()]
        values.update(zip(names, sess.run(names, {})))
    except Exception as exc:
        raise FixError(
            f"could not evaluate the constant subgraph: {first_line(str(exc)) or type(exc).__name__}"
        ) from None
    return values


def _held_tensor(graph: onnx.GraphProto, facts: GraphFacts, name: str) -> TensorProto | None:
    """The tensor a Constant node holds in its `value`, where `name` is that node's output and the tensor is
    in the file (not external data: that is read where the model's folder is known, by onnxruntime)."""
    i = facts.producer.get(name)
    if i is None:
        return None
    node = graph.node[i]
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
        return None
    tensor = constant_tensor(node)
    if tensor is None or tensor.data_location == TensorProto.EXTERNAL:
        return None
    if tensor.data_type != TensorProto.STRING:
        try:
            helper.tensor_dtype_to_np_dtype(tensor.data_type)
        except KeyError:  # no element type numpy knows (undefined): onnxruntime says what is wrong with it
            return None
    return tensor


def _tensor_nbytes(tensor: TensorProto) -> int:
    """The bytes `tensor`'s values take as an array (its strings' bytes for a string tensor)."""
    if tensor.data_type == TensorProto.STRING:
        return sum(len(x) for x in tensor.string_data)
    n = 1
    for d in tensor.dims:
        n *= d
    return n * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


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
        _rename_in_bodies(m, rename)  # what the node's own bodies read of the branch is renamed too
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
    # names read from a subgraph (an outer read, by name): those keep their Identity. Computed once: asking each
    # node again for each branch node walks every body once per branch node
    implicit: set[str] = set()
    for n in [*graph.node, *new_nodes]:
        if n.domain not in ("", "ai.onnx") or n.op_type not in _standard_ops_without_bodies():
            implicit.update(set(all_inputs(n)) - set(n.input))
    kept = []
    for m in new_nodes:
        if (
            m.op_type == "Identity"
            and not m.domain
            and m.output[0] not in graph_outputs
            and m.output[0] not in implicit
        ):
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


def _rename_in_bodies(node: onnx.NodeProto, rename: dict[str, str]) -> None:
    """Rename, inside the node's subgraphs (nested ones too), the names they read from outside (`rename`: old ->
    new). A name a subgraph defines itself is its own (ONNX forbids shadowing; kept as is all the same)."""
    if node.op_type in _standard_ops_without_bodies() and node.domain in ("", "ai.onnx"):
        return
    for attr in node.attribute:
        for g in (attr.g,) if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
            local = {vi.name for vi in g.input} | {t.name for t in g.initializer}
            local.update(o for n in g.node for o in n.output if o)
            inner = {k: v for k, v in rename.items() if k not in local}
            if not inner:
                continue
            for n in g.node:
                for k, x in enumerate(n.input):
                    if x in inner:
                        n.input[k] = inner[x]
                _rename_in_bodies(n, inner)
            for vi in g.output:
                if vi.name in inner:
                    vi.name = inner[vi.name]


def _keep_nodes(graph: onnx.GraphProto, keep: list[int]) -> None:
    """Keep the nodes at `keep`, in that order. Dropping nodes deletes them in place, a run of neighbours at a
    time, from the end (each node copied is ~7 µs, a whole graph's worth each round); a new order copies."""
    if all(a < b for a, b in zip(keep, keep[1:])):
        kept = set(keep)
        runs: list[list[int]] = []  # [start, end) of each run of dropped nodes
        for i in range(len(graph.node)):
            if i in kept:
                continue
            if runs and runs[-1][1] == i:
                runs[-1][1] = i + 1
            else:
                runs.append([i, i + 1])
        for start, end in reversed(runs):
            del graph.node[start:end]
        return
    kept_nodes = [onnx.NodeProto() for _ in keep]
    for m, i in zip(kept_nodes, keep):
        m.CopyFrom(graph.node[i])
    del graph.node[:]
    graph.node.extend(kept_nodes)


def _remove_dead(
    graph: onnx.GraphProto, removable: set[int], reads: list[list[str]] | None = None
) -> list[list[str]]:
    """Drop removable nodes nobody reads any more (transitively, in one backward sweep), then initializers
    nobody reads. `reads`: each node's `all_inputs`, where the caller has them for these very nodes. Returns
    those of the nodes left."""
    nodes = graph.node
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    # each node's reads once: a node holding a body reads through every body nested in it (a walk of them all)
    if reads is None:
        reads = [all_inputs(n) for n in nodes]
    alive = [i not in removable for i in range(len(nodes))]
    stack = [o.name for o in graph.output]
    for i in range(len(nodes)):
        if alive[i]:
            stack.extend(reads[i])
    seen: set[str] = set()
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        i = producer.get(t)
        if i is not None and not alive[i]:
            alive[i] = True
            stack.extend(reads[i])
    keep = [i for i in range(len(nodes)) if alive[i]]
    if len(keep) != len(nodes):
        _keep_nodes(graph, keep)
    read = {o.name for o in graph.output} | {x for i in keep for x in reads[i]}
    unused = [k for k, t in enumerate(graph.initializer) if t.name not in read]
    gone = {graph.initializer[k].name for k in unused}
    for k in reversed(unused):
        del graph.initializer[k]
    # before IR 4 initializers are listed as graph inputs too: an initializer that goes takes its input along
    stale = [k for k, vi in enumerate(graph.input) if vi.name in gone and vi.name not in read]
    for k in reversed(stale):
        del graph.input[k]
    return [reads[i] for i in keep]


@register(
    "fold_constants",
    safety=Safety.EXACT,
    summary="Fold constant subgraphs (and shapes of statically shaped tensors) into initializers, in If/Loop/Scan "
    "bodies and local functions too.",
    params={
        "tensors": "list of tensor names: fold only the constant chains computing these, each into one "
        "initializer, nothing else changes (default: the whole graph); a name computed inside an If/Loop/Scan "
        "body or a local function is folded there",
        "size_threshold": "int, bytes: a folded value larger than this is not materialised; its producers "
        "stay (default: no limit)",
        "max_bytes": "int, bytes: refuse (FixError naming the tensor and its reader) when a value to fold is "
        "larger than this, before computing it where its shape is known (default: no limit)",
        "inline_if": "bool: replace an If whose condition folds by the nodes of the branch that runs, "
        "names prefixed with the If's name (default true; whole-graph mode only)",
        "bodies": "bool: whole-graph mode also folds inside If/Loop/Scan bodies and model-local functions: a body "
        "tensor computed only from the body's constants and the outer scope's constants folds into a body "
        "initializer (a function's: a Constant node); one that reads a loop-carried value, a scan slice, a "
        "function input or a run-time outer tensor does not (default true)",
        "body_errors": "'skip' or 'raise': when folding inside one body fails (onnxruntime cannot evaluate its "
        "constants, max_bytes), 'skip' leaves that body as it was and says so (a FoldSkipped warning; "
        "onnx-graphsurgeon's error_ok), 'raise' refuses the whole fix (default 'skip'; whole-graph mode)",
        "base_dir": "str: folder of the model's external data, read only for folded tensors (the "
        "workspace sets it)",
    },
)
def fold_constants(
    model: ModelProto,
    tensors=None,
    size_threshold=None,
    inline_if=True,
    base_dir=None,
    max_bytes=None,
    bodies=True,
    body_errors="skip",
):
    if body_errors not in ("skip", "raise"):
        raise FixError(f"body_errors must be 'skip' or 'raise', got {body_errors!r}")
    out = copy_message(model)
    limit = _check_limit(max_bytes)
    options = (size_threshold, inline_if, base_dir, limit)
    if tensors is not None:
        tensors = list(tensors)
        where = _scopes_of(out, tensors)
        main = [t for t in tensors if where.get(t) is None]
        if main or not where:
            _fold_once(out, main, size_threshold, inline_if, base_dir, limit)
        for path, names in _group(where).items():
            _fold_in(out, path, names, options, raise_errors=True)
        if where:  # an outer Constant only the folded chain read goes with it
            _remove_dead(out.graph, {i for i, n in enumerate(out.graph.node) if n.op_type == "Constant"})
        _toposort_in_place(out.graph)
        return out
    # a round can expose more: an inlined If's branch, or a Shape whose input became static once a computed
    # Reshape target folded. Without Shape, Size or If left, one round is the fixpoint.
    for _ in range(8):
        news: dict = {}
        changed = _fold_once(out, tensors, size_threshold, inline_if, base_dir, limit, news=news)
        if not changed or not news.get("more", True):
            break
        if not any(n.op_type in ("Shape", "Size", "If") and not n.domain for n in out.graph.node):
            break
    _toposort_in_place(out.graph)
    if bodies:
        skipped, done = [], set()
        # the outer reads of every body of `out`, walked once here and kept while the bodies fold one by one:
        # each body's fold builds its enclosing scopes' facts, which read them all again (silero VAD: ~30
        # nested Ifs). A body's fold drops the entries of the graphs it edits (_fold_in).
        live: dict = {}
        kept: dict = {}  # the last whole-model shape inference, and the bodies edited since (_kept_typed)
        with reads_memo(live):
            for n in out.graph.node:
                all_inputs(n)
        # outer bodies first; a fold may inline an If inside a body (or drop one): the bodies under the body
        # just folded are listed again (only those: a fold changes nothing outside its body)
        pending = _body_paths(out)
        k = 0
        while k < len(pending):
            path = pending[k]
            k += 1
            if path in done:
                continue
            done.add(path)
            why = _fold_in(
                out, path, None, options, raise_errors=body_errors == "raise", live=live, kept=kept
            )
            if why:
                skipped.append(f"{path}: {why}")
            end = k
            while end < len(pending) and pending[end].startswith(path + "/"):
                end += 1
            pending[k:end] = _paths_under(_resolve(out, path).node, path + "/")
        if done:  # what the bodies read of the outer scope may be gone
            _remove_dead(out.graph, {i for i, n in enumerate(out.graph.node) if n.op_type == "Constant"})
        if skipped:
            warnings.warn(
                FoldSkipped("folding skipped in " + "; ".join(skipped) + " (left as they were)"), stacklevel=2
            )
    return out


class FoldSkipped(UserWarning):
    """Folding inside a body failed and that body was left as it was (body_errors='skip')."""


# -- bodies: If/Loop/Scan subgraphs and model-local functions ------------------------------------------------------
# A body is named by its path: 'If_key/then_branch' (nested: 'If_key/then_branch/Loop_key/body'), a function by
# 'domain::name' ('name' in the default domain). Tensor names are unique across scopes (ONNX forbids shadowing),
# so a tensor names its body.


def _function_name(f: onnx.FunctionProto) -> str:
    return f"{f.domain}::{f.name}" if f.domain else f.name


def _body_paths(model: ModelProto) -> list[str]:
    """Every body's path, outer bodies before the bodies inside them, then the local functions (and theirs)."""

    out = _paths_under(model.graph.node, "")
    for f in model.functions:
        out.append(_function_name(f))
        out.extend(_paths_under(f.node, _function_name(f) + "/"))
    return out


def _paths_under(nodes, prefix: str) -> list[str]:
    """The paths of the bodies these nodes hold, and of the bodies inside those (outer first), under `prefix`."""
    from surgery.graph import bodies as node_bodies
    from surgery.graph import node_keys

    out: list[str] = []
    nodes = list(nodes)
    for key, node in zip(node_keys(nodes), nodes):
        for name, body in node_bodies(node):
            path = f"{prefix}{key}/{name}"
            out.append(path)
            out.extend(_paths_under(body.node, path + "/"))
    return out


def _scopes_of(model: ModelProto, tensors: list[str]) -> dict[str, str]:
    """tensor -> the path of the body that computes it, for the tensors computed in a body (not the main graph)."""
    wanted, where = set(tensors), {}
    main = {o for n in model.graph.node for o in n.output} | {t.name for t in model.graph.initializer}
    for path in _body_paths(model):
        holder = _resolve(model, path)
        nodes = holder.node
        for n in nodes:
            for o in n.output:
                if o in wanted and o not in main and o not in where:
                    where[o] = path
    return where


def _group(where: dict[str, str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for t, path in where.items():
        groups.setdefault(path, []).append(t)
    return groups


def _resolve(model: ModelProto, path: str, chain: list | None = None):
    """The GraphProto (or FunctionProto) at `path`, in `model` itself (to be edited in place). `chain`: gets
    the bodies on the way, outermost first, the one at `path` last (the main graph left out)."""
    from surgery.graph import bodies as node_bodies
    from surgery.graph import node_keys

    functions = {_function_name(f): f for f in model.functions}
    holder, rest = model.graph, path
    for name in sorted(functions, key=len, reverse=True):
        if path == name or path.startswith(name + "/"):
            holder, rest = functions[name], path[len(name) + 1 :]
            if chain is not None:
                chain.append(holder)
            break
    else:
        if path in functions:
            if chain is not None:
                chain.append(functions[path])
            return functions[path]
    while rest:
        nodes = list(holder.node)
        for key, node in sorted(zip(node_keys(nodes), nodes), key=lambda kn: -len(kn[0])):
            if rest.startswith(key + "/"):
                tail = rest[len(key) + 1 :]
                for name, body in sorted(node_bodies(node), key=lambda nb: -len(nb[0])):
                    if tail == name or tail.startswith(name + "/"):
                        holder, rest = body, tail[len(name) + 1 :]
                        if chain is not None:
                            chain.append(holder)
                        break
                else:
                    continue
                break
        else:
            raise FixError(f"no body '{path}' in the model")
    return holder


def _scope_facts(model: ModelProto, path: str, typed_model: ModelProto | None) -> GraphFacts:
    """The facts of the body at `path`, its outer scopes' facts computed on the way (with the types of
    `typed_model`, the model after shape inference, where given)."""
    from surgery.graph import body_facts, function_facts

    main = GraphFacts.of(model, infer=False)
    if typed_model is not None:
        import dataclasses

        main = dataclasses.replace(main, typed=typed_model.graph)
    functions = {_function_name(f): f for f in model.functions}
    facts, rest = main, path
    for name in sorted(functions, key=len, reverse=True):
        if path == name or path.startswith(name + "/"):
            facts, rest = function_facts(main, functions[name], path=name + "/"), path[len(name) + 1 :]
            break
    while rest:
        for index, key in sorted(enumerate(facts.keys), key=lambda ik: -len(ik[1])):
            if rest.startswith(key + "/"):
                from surgery.graph import bodies as node_bodies

                tail = rest[len(key) + 1 :]
                names = sorted(
                    (n for n, _ in node_bodies(facts.model.graph.node[index])), key=len, reverse=True
                )
                name = next((n for n in names if tail == n or tail.startswith(n + "/")), None)
                if name is None:
                    continue
                facts, rest = body_facts(facts, index, name), tail[len(name) + 1 :]
                break
        else:
            raise FixError(f"no body '{path}' in the model")
    return facts


def _fold_in(
    model: ModelProto,
    path: str,
    tensors,
    options,
    *,
    raise_errors: bool,
    live: dict | None = None,
    kept: dict | None = None,
) -> str:
    """Fold inside the body at `path` (whole body, or the chains of `tensors`), writing the result into `model`;
    '' when done, else why it was skipped (raised as FixError with raise_errors). `live`: the outer reads kept
    for `model`'s bodies (graph.reads_memo), brought up to date here when the body changes. `kept`: the shape
    inference of `model` last run by a body's fold and the bodies edited since (_kept_typed), kept up to date
    here."""
    size_threshold, inline_if, base_dir, limit = options
    chain: list = []
    holder = _resolve(model, path, chain)
    is_function = isinstance(holder, onnx.FunctionProto)
    if tensors is None and not holder.node:
        return ""
    # nothing is edited until the first round: the bodies' outer reads are walked once for all the scopes' facts
    # (those of `model` kept from before; the copies' only for this stretch)
    memo: dict = {} if live is None else dict(live)
    with reads_memo(memo):
        if tensors is None and _only_constants_fold(holder, _never_constant(model, path)):
            with _editing(holder, chain, live):
                _constants_to_initializers(holder)
            _edited(kept, path)
            return ""
        typed = None
        if any(n.op_type in ("Shape", "Size") for n in holder.node):
            typed = _kept_typed(model, path, kept)
            if typed is None:
                typed = _typed(model)
                if kept is not None and typed is not None:
                    kept.update(model=typed, edited=[])
        try:
            facts = _scope_facts(model, path, typed)
        except Exception as exc:  # noqa: BLE001 - as below
            return _body_failed(path, exc, raise_errors)
    try:
        work = ModelProto()
        work.CopyFrom(facts.model)  # the body as a graph, with the outer tensors' types
        with reads_memo(memo):  # the first round reads `work` as it was copied: its bodies' reads are known
            copied_reads(facts.model.graph, work.graph)
        for _ in range(1 if tensors is not None else 8):
            news: dict = {}
            changed = _fold_once(
                work, tensors, size_threshold, inline_if, base_dir, limit, facts=facts, news=news, memo=memo
            )
            memo = None  # the round edited `work`
            if not changed or not news.get("more", True):
                break
            facts = _refresh(facts, work)
        _toposort_in_place(work.graph)
    except Exception as exc:  # noqa: BLE001 - a body that cannot fold is skipped (or refused) whole
        return _body_failed(path, exc, raise_errors)
    with _editing(holder, chain, live):
        if is_function:  # a function has no initializers: what folded becomes Constant nodes at its start
            consts = [
                helper.make_node("Constant", [], [t.name], name=f"{t.name}/Constant", value=t)
                for t in work.graph.initializer
            ]
            del holder.node[:]
            holder.node.extend(consts + list(work.graph.node))
        else:
            del holder.node[:]
            holder.node.extend(work.graph.node)
            del holder.initializer[:]
            holder.initializer.extend(work.graph.initializer)
    _edited(kept, path)
    return ""


def _kept_typed(model: ModelProto, path: str, kept: dict | None) -> ModelProto | None:
    """The kept shape inference of `model` where it still holds for the body at `path`: no body edited since it
    ran is that body, one around it or one inside it (a fold edits only its own body, keeps its outputs' names
    and types, and leaves the node indices of every other graph as they were; the types of a sibling subtree's
    tensors are what they were). Silero VAD's two If branches then share one inference instead of running the
    whole model's each. A local function's edit or body is never matched (a call's types read its body)."""
    if not kept or kept.get("model") is None:
        return None
    functions = [_function_name(f) for f in model.functions]

    def in_function(p: str) -> bool:
        return any(p == f or p.startswith(f + "/") for f in functions)

    if in_function(path):
        return None
    for e in kept["edited"]:
        if in_function(e) or e == path or path.startswith(e + "/") or e.startswith(path + "/"):
            return None
    return kept["model"]


def _edited(kept: dict | None, path: str) -> None:
    """Note that the body at `path` was written (whether or not it changed: the kept inference is then not
    trusted for it, nor for the bodies around or inside it)."""
    if kept is not None and kept.get("model") is not None:
        kept["edited"].append(path)


@contextmanager
def _editing(holder, chain: list, live: dict | None):
    """Around an edit of the body `holder` (`chain`: the graphs that hold it, outermost first, itself last): the
    kept outer reads of it, of what holds it and of the bodies in it are dropped before, and walked again after
    (what holds it reads through it; its old bodies go, the new ones are walked once)."""
    from surgery.graph import forget_reads, graphs_under, outer_reads

    if live is None:
        yield
        return
    graphs = [g for g in chain if isinstance(g, onnx.GraphProto)]
    forget_reads(live, graphs + graphs_under(holder.node))
    yield
    with reads_memo(live):
        for g in reversed(graphs):  # innermost first: each walk finds the one inside it done
            outer_reads(g)


def _body_failed(path: str, exc: Exception, raise_errors: bool) -> str:
    """Why folding inside the body at `path` failed (raised as FixError with raise_errors)."""
    why = first_line(str(exc)) or type(exc).__name__
    if raise_errors:
        raise FixError(f"folding inside {path}: {why}") from None
    return why


def _never_constant(model: ModelProto, path: str = "") -> set[str]:
    """Names that are never constant in the scopes around the body at `path`: the main graph's inputs that are
    not initializers and what custom or random ops compute, and, in each enclosing body (folded already: outer
    bodies fold first), its inputs and what any node other than a Constant computes there. A constant there
    that a body reads is folded into an initializer when its scope folds (the node holding the body reads it),
    so a name still computed is a run-time value (or one a size threshold kept: not folding it is never
    wrong)."""
    inits = {t.name for t in model.graph.initializer}
    out = {vi.name for vi in model.graph.input if vi.name not in inits}
    for n in model.graph.node:
        if not folds_through(n):
            out.update(n.output)
    if not path or any(path == f or path.startswith(f + "/") for f in map(_function_name, model.functions)):
        return out
    from surgery.graph import bodies as node_bodies
    from surgery.graph import node_keys

    holder, rest = model.graph, path
    while True:  # the enclosing bodies, outermost first, as _resolve walks them
        nodes = list(holder.node)
        step = None
        for key, node in sorted(zip(node_keys(nodes), nodes), key=lambda kn: -len(kn[0])):
            if rest.startswith(key + "/"):
                tail = rest[len(key) + 1 :]
                for name, body in sorted(node_bodies(node), key=lambda nb: -len(nb[0])):
                    if tail == name or tail.startswith(name + "/"):
                        step = body, tail[len(name) + 1 :]
                        break
            if step:
                break
        if step is None:
            return out
        holder, rest = step
        if not rest:  # `holder` is the body itself: its own names are its own to fold
            return out
        local = {t.name for t in holder.initializer}
        out.update(vi.name for vi in holder.input if vi.name not in local)
        for n in holder.node:
            if n.op_type != "Constant" or n.domain not in ("", "ai.onnx"):
                out.update(o for o in n.output if o)


def _only_constants_fold(holder, dynamic: set[str] = frozenset()) -> bool:
    """Whether the only nodes of a graph body that fold are Constant nodes holding a `value` tensor, seen from
    the body alone (without its outer scope's facts, which cost more than the rest): a longer chain to fold
    starts at a Shape/Size, an If, or a node that reads only constants and outer names other than `dynamic`
    (those may be outer constants). Many bodies are like this (TorchScript exports put each literal in a
    Constant node)."""
    if isinstance(holder, onnx.FunctionProto):
        return False
    local, weights = {vi.name for vi in holder.input}, {t.name for t in holder.initializer}
    for n in holder.node:
        if n.op_type == "Constant" and not n.domain:
            if constant_tensor(n) is None:
                return False  # value_float, value_ints, ...: onnxruntime computes those
            weights.update(n.output)
        else:
            local.update(o for o in n.output if o)
    for n in holder.node:
        if not folds_through(n) or n.op_type == "Constant":
            continue
        if n.op_type in ("Shape", "Size", "If"):
            return False
        ins = all_inputs(n)
        if ins and all(x in weights or (x not in local and x not in dynamic) for x in ins):
            return False
    return True


def _constants_to_initializers(graph: onnx.GraphProto) -> None:
    """What a whole-body fold makes of a body where only Constant nodes fold (_only_constants_fold), without
    onnxruntime: each Constant that is read becomes an initializer of its name, an unread one goes."""
    read = {o.name for o in graph.output} | {x for n in graph.node for x in all_inputs(n)}
    drop = []
    for i, n in enumerate(graph.node):
        if n.op_type == "Constant" and not n.domain:
            if n.output[0] in read:
                t = graph.initializer.add()
                t.CopyFrom(constant_tensor(n))
                t.name = n.output[0]
            drop.append(i)
    if drop:
        gone = set(drop)
        _keep_nodes(graph, [i for i in range(len(graph.node)) if i not in gone])


def _refresh(facts: GraphFacts, work: ModelProto) -> GraphFacts:
    """The facts of a body after a round changed it (same scope, same outer facts)."""
    from surgery.graph import scope_facts

    if facts.parent is None:  # a function folded as a graph of its own: formal inputs are its inputs
        return GraphFacts.of(work, infer=False)
    with reads_memo():  # no edit while the facts are built: the body's nested bodies are walked once
        return scope_facts(facts.parent, work.graph, path=facts.path, typed=facts.typed)


def _typed(model: ModelProto) -> ModelProto | None:
    """The model after shape inference with data propagation (bodies' value_info filled), or None."""
    try:
        return onnx.shape_inference.infer_shapes(
            light_copy(model), check_type=False, strict_mode=False, data_prop=True
        )
    except Exception:
        return None


def _outer_values(facts: GraphFacts, base_dir) -> dict[str, np.ndarray]:
    """The values of the outer constants a body reads, by the body's names for them (computed in the outer scope
    where they are not weights there)."""
    out: dict[str, np.ndarray] = {}
    parent = facts.parent
    pending = []
    for x, o in facts.free.items():
        if x not in facts.constant:
            continue
        t = facts.initializers.get(x)
        if t is not None:
            out[x] = numpy_helper.to_array(t, base_dir) if base_dir else numpy_helper.to_array(t)
        else:
            pending.append((x, o))
    if pending:
        known = _outer_values(parent, base_dir) if parent.parent is not None else {}
        _, more = _foldable(parent.model, parent)
        values = _evaluate(parent.model, parent, [o for _, o in pending], {**known, **more}, base_dir)
        out.update({x: values[o] for x, o in pending})
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
    copy (surgery.graph.light_copy), so the model is not serialised whole. Then the partial values of shape
    tensors (surgery.shape_values.refine) tell what onnx's data propagation does not follow (Div, Cast, ...):
    the dims of Reshape/Expand/ConstantOfShape outputs, and of every node after them; the facts take those
    shapes (the model is not changed)."""
    if not any(n.op_type in ("Shape", "Size") and not n.domain for n in model.graph.node):
        return GraphFacts.of(model, infer=False)
    from surgery.shape_values import refine

    try:
        inferred = onnx.shape_inference.infer_shapes(
            light_copy(model), check_type=False, strict_mode=False, data_prop=True
        )
    except Exception:
        return GraphFacts.of(model)
    facts = GraphFacts.of(inferred, infer=False)
    values, better = refine(facts)
    if better:
        from surgery.shape_values import BetterShapes

        facts = dataclasses.replace(facts, tensors=BetterShapes(facts.tensors, better))
    facts.__dict__["shape_values"] = values  # read by _foldable
    return facts


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


def _fold_once(
    model: ModelProto,
    tensors,
    size_threshold,
    inline_if,
    base_dir,
    limit=None,
    facts=None,
    news=None,
    memo: dict | None = None,
) -> bool:
    """One round on `model.graph`; `facts`: the facts of a body (scope_facts), whose outer constants are
    read as values and never folded into the body (they are the outer scope's to fold). `news`, a dict: its
    "more" says whether another round may find more: an If was inlined, or a value onnxruntime computed is one
    shape inference reads (a small initializer) and the shape values of this round did not know it. Otherwise
    the next round's facts are this round's (the shapes follow from the same values) and it would fold
    nothing. `memo`: the outer reads known of `model`'s bodies (graph.reads_memo), unedited since."""
    # up to the first edit below the model is only read: each body's outer reads are walked once
    with reads_memo(memo):
        graph = model.graph
        facts = _facts(model) if facts is None else facts
        const, known = _foldable(model, facts)
        if facts.parent is not None:
            known.update(_outer_values(facts, base_dir))
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
        cond_targets = [
            graph.node[i].input[0] for i in ifs if graph.node[i].input[0] not in facts.initializers
        ]
        targets = [t for t in targets if t not in facts.free]
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
        # a Constant's tensor becomes the initializer as it is; the rest is computed
        held = {t: tensor for t in eval_targets if (tensor := _held_tensor(graph, facts, t)) is not None}
        rest = [t for t in eval_targets if t not in held]
        values = _evaluate(model, facts, rest, known, base_dir) if rest else {}
        values.update((t, numpy_helper.to_array(held[t])) for t in cond_targets if t in held)

        def nbytes(t: str) -> int:
            return _tensor_nbytes(held[t]) if t in held else int(np.asarray(values[t]).nbytes)

        if limit is not None:
            for t in targets:
                if nbytes(t) > limit:
                    raise _too_big(facts, t, nbytes(t), limit)
        branches = []  # (the If's outputs, which branch runs)
        for i in ifs:
            cond_name = graph.node[i].input[0]
            cond = (
                values[cond_name]
                if cond_name in values
                else numpy_helper.to_array(facts.initializers[cond_name])
            )
            branches.append((list(graph.node[i].output), bool(np.asarray(cond).reshape(-1)[0])))
        # foldable nodes, and Shape nodes of partly dynamic tensors, go once nobody reads them any more
        removable = {
            i
            for i, n in enumerate(graph.node)
            if all(o in const for o in n.output if o) or (n.op_type == "Shape" and not n.domain)
        }
        if news is not None:
            from surgery.graph import INFER_KEEP_ELEMENTS, INFER_KEEP_FLOATS

            shape_values = facts.__dict__.get("shape_values") or {}

            def unseen(t: str) -> bool:
                """A value inference reads (1-D, small) that no fact of this round held."""
                if t in held:  # a Constant's: inference read it already
                    return False
                v = np.asarray(values[t])
                p = facts.producer_of(t)
                return (
                    v.ndim <= 1
                    and v.size <= (INFER_KEEP_FLOATS if v.dtype.kind in "fc" else INFER_KEEP_ELEMENTS)
                    and t not in known
                    and not (t in shape_values and shape_values[t].known)
                    and not (p is not None and p.op_type == "Constant")
                )

            news["more"] = bool(branches) or any(unseen(t) for t in targets)
        # the nodes' reads, for the sweeps below: what they read does not change until an If is inlined
        reads = [all_inputs(n) for n in graph.node]
    changed = False
    existing = {t.name for t in graph.initializer}
    for t in targets:
        if size_threshold is not None and nbytes(t) > size_threshold:
            continue
        if t not in existing:
            if t in held:
                tensor = graph.initializer.add()
                copy_into(tensor, held[t])
                tensor.name = t
            else:
                add_initializer(graph, values[t], t)
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
        reads = [reads[i] for i in keep]
    reads = _remove_dead(graph, removable, reads)
    changed = changed or len(graph.node) != before
    for if_outputs, taken in branches:  # node indices moved: find each If again by its outputs
        j = next(j for j, n in enumerate(graph.node) if n.op_type == "If" and list(n.output) == if_outputs)
        _inline_if(graph, j, taken)
        changed = True
        reads = None  # the branch's nodes replace the If: read again
    if changed:
        _remove_dead(graph, {i for i, n in enumerate(graph.node) if n.op_type == "Constant"}, reads)
    return changed
