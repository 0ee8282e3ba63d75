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


def transformer_stack(n_nodes: int, hidden: int = 16, heads: int = 2) -> ModelProto:
    """Encoder blocks shaped like a torch export (opset 17, dynamic batch and sequence): shape arithmetic from
    Shape/Gather/Concat feeding Reshape, attention with Softmax, LayerNormalization, an Erf GELU, and a Squeeze
    without axes on the dynamic batch (what TensorRT 8.6 - 10.x refuses). About 40 nodes a block."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    head = hidden // heads

    def w(name, shape, scale=0.1):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def c(name, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    def node(op, ins, outs, name, **attrs):
        nodes.append(helper.make_node(op, ins, outs, name=name, **attrs))
        return outs[0]

    c("i0", [0])
    c("i1", [1])
    c("heads", [heads])
    c("hd", [head])
    c("hidden", [hidden])
    c("unsq_axis", [1])
    x = "input"
    b = 0
    while len(nodes) < n_nodes:
        s = f"/encoder/layer.{b}"
        shape = node("Shape", [x], [f"{s}/Shape_output_0"], f"{s}/Shape")
        batch = node("Gather", [shape, "i0"], [f"{s}/Gather_output_0"], f"{s}/Gather", axis=0)
        seq = node("Gather", [shape, "i1"], [f"{s}/Gather_1_output_0"], f"{s}/Gather_1", axis=0)
        split = node("Concat", [batch, seq, "heads", "hd"], [f"{s}/Concat_output_0"], f"{s}/Concat", axis=0)
        merge = node("Concat", [batch, seq, "hidden"], [f"{s}/Concat_1_output_0"], f"{s}/Concat_1", axis=0)
        qkv = []
        for name in ("query", "key", "value"):
            t = node(
                "MatMul",
                [x, w(f"{s}/{name}.weight", (hidden, hidden))],
                [f"{s}/{name}/MatMul_output_0"],
                f"{s}/{name}/MatMul",
            )
            t = node(
                "Add", [t, w(f"{s}/{name}.bias", (hidden,))], [f"{s}/{name}/Add_output_0"], f"{s}/{name}/Add"
            )
            t = node("Reshape", [t, split], [f"{s}/{name}/Reshape_output_0"], f"{s}/{name}/Reshape")
            perm = [0, 2, 3, 1] if name == "key" else [0, 2, 1, 3]
            qkv.append(
                node("Transpose", [t], [f"{s}/{name}/Transpose_output_0"], f"{s}/{name}/Transpose", perm=perm)
            )
        q, k, v = qkv
        sc = node("MatMul", [q, k], [f"{s}/attn/MatMul_output_0"], f"{s}/attn/MatMul")
        sc = node(
            "Div",
            [sc, c(f"{s}/attn/scale", np.float32(head**0.5), np.float32)],
            [f"{s}/attn/Div_output_0"],
            f"{s}/attn/Div",
        )
        p = node("Softmax", [sc], [f"{s}/attn/Softmax_output_0"], f"{s}/attn/Softmax", axis=-1)
        ctx = node("MatMul", [p, v], [f"{s}/attn/MatMul_1_output_0"], f"{s}/attn/MatMul_1")
        ctx = node(
            "Transpose", [ctx], [f"{s}/attn/Transpose_output_0"], f"{s}/attn/Transpose", perm=[0, 2, 1, 3]
        )
        ctx = node("Reshape", [ctx, merge], [f"{s}/attn/Reshape_output_0"], f"{s}/attn/Reshape")
        o = node(
            "MatMul",
            [ctx, w(f"{s}/output.weight", (hidden, hidden))],
            [f"{s}/output/MatMul_output_0"],
            f"{s}/output/MatMul",
        )
        o = node("Add", [o, x], [f"{s}/output/Add_output_0"], f"{s}/output/Add")
        ln = node(
            "LayerNormalization",
            [o, w(f"{s}/ln.weight", (hidden,)), w(f"{s}/ln.bias", (hidden,))],
            [f"{s}/ln/LayerNormalization_output_0"],
            f"{s}/ln/LayerNormalization",
            axis=-1,
        )
        h = node(
            "MatMul",
            [ln, w(f"{s}/ffn.weight", (hidden, 2 * hidden))],
            [f"{s}/ffn/MatMul_output_0"],
            f"{s}/ffn/MatMul",
        )
        e = node(
            "Div",
            [h, c(f"{s}/ffn/sqrt2", np.float32(2**0.5), np.float32)],
            [f"{s}/ffn/Div_output_0"],
            f"{s}/ffn/Div",
        )
        e = node("Erf", [e], [f"{s}/ffn/Erf_output_0"], f"{s}/ffn/Erf")
        e = node(
            "Add",
            [e, c(f"{s}/ffn/one", np.float32(1.0), np.float32)],
            [f"{s}/ffn/Add_output_0"],
            f"{s}/ffn/Add",
        )
        h = node("Mul", [h, e], [f"{s}/ffn/Mul_output_0"], f"{s}/ffn/Mul")
        h = node(
            "Mul",
            [h, c(f"{s}/ffn/half", np.float32(0.5), np.float32)],
            [f"{s}/ffn/Mul_1_output_0"],
            f"{s}/ffn/Mul_1",
        )
        h = node(
            "MatMul",
            [h, w(f"{s}/ffn2.weight", (2 * hidden, hidden))],
            [f"{s}/ffn2/MatMul_output_0"],
            f"{s}/ffn2/MatMul",
        )
        u = node("Unsqueeze", [h, "unsq_axis"], [f"{s}/Unsqueeze_output_0"], f"{s}/Unsqueeze")
        x = node("Squeeze", [u], [f"{s}/Squeeze_output_0"], f"{s}/Squeeze")  # no axes: on a dynamic batch
        b += 1
    g = helper.make_graph(
        nodes,
        "transformer_stack",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", "sequence", hidden])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", "sequence", hidden])],
        inits,
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])
