"""Generated models shared by the benchmarks (deterministic, onnx.helper, ir_version set)."""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper


def blocks(n_nodes: int, custom_every: int = 0) -> ModelProto:
    """Conv/Relu/Add blocks (a few distinct signatures) with torch-style scoped names; optionally one custom op
    every `custom_every` blocks."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "input"
    for b in range(max(n_nodes // 3, 1)):
        s = f"/layer{b // 50}/block{b % 50}"
        w = f"{s}.weight"
        inits.append(
            numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.05).astype(np.float32), w)
        )
        relu = "Relu" if b % 2 else "Sigmoid"
        op, domain = (
            ("FancyAct", "com.example")
            if custom_every and b % custom_every == custom_every - 1
            else (relu, "")
        )
        nodes += [
            helper.make_node("Conv", [x, w], [f"{s}/c"], name=f"{s}/Conv", pads=[1, 1, 1, 1]),
            helper.make_node(op, [f"{s}/c"], [f"{s}/a"], name=f"{s}/{op}", domain=domain),
            helper.make_node("Add", [f"{s}/a", x], [f"{s}/o"], name=f"{s}/Add"),
        ]
        x = f"{s}/o"
    g = helper.make_graph(
        nodes,
        "blocks",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 8, 16, 16])],
        inits,
    )
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid("com.example", 1)] if custom_every else [])
    return helper.make_model(g, ir_version=8, opset_imports=opsets)


def constant_chain(mib: int = 64, ops: int = 200) -> ModelProto:
    """A large constant (mib MiB) pushed through `ops` elementwise ops before it meets the input."""
    n = mib * 1024 * 1024 // 4
    c = numpy_helper.from_array(np.linspace(0, 1, n, dtype=np.float32).reshape(-1, 1024), "c")
    nodes, t = [], "c"
    for k in range(ops):
        op = ("Mul", "Add", "Relu", "Sqrt")[k % 4]
        ins = [t] if op in ("Relu", "Sqrt") else [t, f"k{k % 2}"]
        nodes.append(helper.make_node(op, ins, [f"t{k}"], name=f"/chain/{op}_{k}"))
        t = f"t{k}"
    nodes.append(helper.make_node("Add", ["x", t], ["y"], name="/out/Add"))
    inits = [
        c,
        numpy_helper.from_array(np.array(1.0001, np.float32), "k0"),
        numpy_helper.from_array(np.array(0.5, np.float32), "k1"),
    ]
    shape = [n // 1024, 1024]
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        inits,
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])
