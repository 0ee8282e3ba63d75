"""Mixed precision written into the graph: every float32 node computes in float16 (or bfloat16) except the nodes
named in `keep`, which stay float32, with a Cast wherever a tensor crosses between the two. Strongly typed
builders (TensorRT 11, TensorRT-RTX) honour exactly these types: the builders lower a whole model with it (keep
empty), the `mixed_precision` fix primitive and `onnx-surgery precision` keep the nodes that need float32.

Graph inputs and outputs stay float32, weights read by a reduced node are stored in the reduced type (a float32
copy stays where a kept node reads them too), inputs ONNX fixes to float32 (Resize/Upsample scales) keep it. A
node with a subgraph (If, Loop, Scan) and the nodes whose outputs a subgraph reads stay float32: a body's types
are its own.
"""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper, shape_inference

TARGETS = {"fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}
# (op_type, input index) whose type ONNX fixes to float32
FIXED_FLOAT32 = {("Resize", 1), ("Resize", 2), ("Upsample", 1)}
BODY_OPS = {"If", "Loop", "Scan", "SequenceMap"}


def lowered_tensor(t: TensorProto, to: int, name: str) -> TensorProto:
    """`t` (float32) stored as float16 / bfloat16 under `name`."""
    a = numpy_helper.to_array(t).astype(np.float32)
    if to == TensorProto.FLOAT16:
        return numpy_helper.from_array(a.astype(np.float16), name)
    return helper.make_tensor(name, TensorProto.BFLOAT16, a.shape, a.reshape(-1).tolist())


def float_tensors(model: ModelProto) -> set[str]:
    """Names of the top-level graph's float32 tensors (declared or inferred by onnx's shape inference)."""
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is a help here: declared types still count
        inferred = model
    g = inferred.graph
    out = {t.name for t in g.initializer if t.data_type == TensorProto.FLOAT}
    for vi in [*g.input, *g.output, *g.value_info]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            out.add(vi.name)
    for n in g.node:  # Constant outputs inference may leave untyped in a graph that does not fully infer
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and a.t.data_type == TensorProto.FLOAT:
                    out.add(n.output[0])
    return out


def fixed_float32_nodes(model: ModelProto) -> set[int]:
    """Indices of nodes that stay float32 whatever is asked: nodes with a subgraph, and the producers of the
    outer tensors a subgraph reads."""
    from surgery.graph import outer_reads

    g = model.graph
    producer = {o: i for i, n in enumerate(g.node) for o in n.output if o}
    fixed = set()
    for i, n in enumerate(g.node):
        bodies = [a.g for a in n.attribute if a.type == 5] + [s for a in n.attribute for s in a.graphs]
        if n.op_type in BODY_OPS or bodies:
            fixed.add(i)
            for b in bodies:
                fixed.update(producer[x] for x in outer_reads(b) if x in producer)
    return fixed


def mixed_precision_model(model: ModelProto, precision: str, keep=(), base_dir=None) -> ModelProto:
    from surgery.graph import node_keys

    if precision not in TARGETS:
        raise ValueError(f"precision must be one of {sorted(TARGETS)}, got {precision!r}")
    to = TARGETS[precision]
    from surgery.model import with_weights

    out = ModelProto()
    out.CopyFrom(with_weights(model, base_dir))  # weights read in as their files hold them
    g = out.graph
    keys = node_keys(g.node)
    index = {k: i for i, k in enumerate(keys)}
    unknown = [k for k in keep if k not in index]
    if unknown:
        raise ValueError(f"keep names no node {', '.join(map(repr, unknown[:5]))} of the model")
    floats = float_tensors(out)
    kept = {index[k] for k in keep} | fixed_float32_nodes(out)
    reduced = {
        i
        for i, n in enumerate(g.node)
        if i not in kept and any(x in floats for x in [*n.input, *n.output] if x)
    }
    # graph outputs a reduced node writes: the node writes NAME__fp16, a Cast at the end gives NAME in float32
    out_names = {o.name for o in g.output if o.name in floats}
    tail = []
    for i in sorted(reduced):
        n = g.node[i]
        for k, o in enumerate(n.output):
            if o in out_names:
                low = f"{o}__{precision}"
                n.output[k] = low
                floats.add(low)
                for m in g.node:
                    for j, x in enumerate(m.input):
                        if x == o:
                            m.input[j] = low
                tail.append(helper.make_node("Cast", [low], [o], name=f"{o}/Cast_fp32", to=TensorProto.FLOAT))
    producer = {o: i for i, n in enumerate(g.node) for o in n.output if o}
    inits = {t.name: t for t in g.initializer}
    low_inits: dict[str, str] = {}
    casts: dict[tuple[str, int], str] = {}
    nodes = []

    def cast(x: str, target: int) -> str:
        key = (x, target)
        if key not in casts:
            tag = precision if target == to else "fp32"
            casts[key] = name = f"{x}__{tag}"
            nodes.append(helper.make_node("Cast", [x], [name], name=f"{x}/Cast_{tag}", to=target))
        return casts[key]

    for i, n in enumerate(g.node):
        low_node = i in reduced
        for j, x in enumerate(n.input):
            if not x or x not in floats:
                continue
            want_low = low_node and (n.op_type, j) not in FIXED_FLOAT32
            is_low = producer.get(x) in reduced
            if want_low and x in inits:
                if x not in low_inits:
                    low_inits[x] = f"{x}__{precision}"
                    g.initializer.append(lowered_tensor(inits[x], to, low_inits[x]))
                n.input[j] = low_inits[x]
            elif want_low and not is_low:
                n.input[j] = cast(x, to)
            elif not want_low and is_low:
                n.input[j] = cast(x, TensorProto.FLOAT)
        if low_node:
            for a in n.attribute:
                if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                    a.i = to
                constant = n.op_type in ("Constant", "ConstantOfShape") and a.name == "value"
                if constant and a.t.data_type == TensorProto.FLOAT:
                    a.t.CopyFrom(lowered_tensor(a.t, to, a.t.name))
        nodes.append(n)
    used = {x for n in nodes + tail for x in n.input}
    survivors = [t for t in g.initializer if t.name in used or t.name not in low_inits]
    del g.initializer[:]
    g.initializer.extend(survivors)
    copies = []  # copies: the graph's own nodes are cleared below
    for n in nodes + tail:
        c = type(n)()
        c.CopyFrom(n)
        copies.append(c)
    del g.node[:]
    g.node.extend(copies)
    del g.value_info[:]  # types changed: let a builder infer them again
    return out
