"""Models with known fp16 trouble, built with onnx.helper and random weights scaled to the magnitudes real
checkpoints reach (tests/test_precision.py and bench/precision.py). Deterministic: each takes a seed.

- layernorm: a hand-written LayerNorm after a projection whose outputs reach a few hundred (T5-style
  activations): the squared deviations pass 65504;
- softmax: attention scores with logits in the tens, softmax written as Exp / ReduceSum / Div (no max
  subtraction): exp(>11.1) passes 65504;
- vit_block: a pre-norm transformer block (hand-written LayerNorm, attention with max-subtracted softmax, GELU
  MLP, residuals) whose attention logits pass 65504 before the softmax (Swin / ViT with large logits);
- residual_stack: residual blocks whose stream grows past 65504 (large residual sums), RMS-normalized at the end.
"""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

OPSET = 18


def _f(name: str, a) -> object:
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def _axes(name: str = "axes_last"):
    return numpy_helper.from_array(np.array([-1], np.int64), name)


def _model(nodes, inits, inputs, outputs, name) -> ModelProto:
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=9)


def _layernorm(p: str, x: str, d: int, nodes: list, inits: list) -> str:
    """Hand-written LayerNorm over the last axis (ReduceMean, Sub, Mul, ReduceMean, Add eps, Sqrt, Div)."""
    inits += [_f(f"{p}.eps", [1e-5]), _f(f"{p}.gamma", np.ones(d)), _f(f"{p}.beta", np.zeros(d))]
    nodes += [
        helper.make_node("ReduceMean", [x, "axes_last"], [f"{p}/mu"], name=f"{p}/mean"),
        helper.make_node("Sub", [x, f"{p}/mu"], [f"{p}/xc"], name=f"{p}/sub"),
        helper.make_node("Mul", [f"{p}/xc", f"{p}/xc"], [f"{p}/sq"], name=f"{p}/square"),
        helper.make_node("ReduceMean", [f"{p}/sq", "axes_last"], [f"{p}/var"], name=f"{p}/var"),
        helper.make_node("Add", [f"{p}/var", f"{p}.eps"], [f"{p}/ve"], name=f"{p}/add_eps"),
        helper.make_node("Sqrt", [f"{p}/ve"], [f"{p}/sd"], name=f"{p}/sqrt"),
        helper.make_node("Div", [f"{p}/xc", f"{p}/sd"], [f"{p}/n"], name=f"{p}/div"),
        helper.make_node("Mul", [f"{p}/n", f"{p}.gamma"], [f"{p}/g"], name=f"{p}/gamma"),
        helper.make_node("Add", [f"{p}/g", f"{p}.beta"], [f"{p}/out"], name=f"{p}/beta"),
    ]
    return f"{p}/out"


def layernorm(d: int = 64, tokens: int = 8, scale: float = 400.0, seed: int = 0) -> ModelProto:
    rng = np.random.default_rng(seed)
    nodes: list = [helper.make_node("MatMul", ["x", "W"], ["h"], name="proj")]
    inits = [_f("W", rng.standard_normal((d, d)) * scale / np.sqrt(d)), _axes()]
    y = _layernorm("ln", "h", d, nodes, inits)
    nodes.append(helper.make_node("MatMul", [y, "W2"], ["y"], name="head"))
    inits.append(_f("W2", rng.standard_normal((d, 16)) / np.sqrt(d)))
    return _model(
        nodes,
        inits,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [tokens, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [tokens, 16])],
        "layernorm_overflow",
    )


def softmax(d: int = 32, tokens: int = 16, logit_scale: float = 8.0, seed: int = 1) -> ModelProto:
    """Logits with a standard deviation of about `logit_scale` (tens at the extremes: past exp's fp16 range of
    11.1, within float32's 88)."""
    rng = np.random.default_rng(seed)
    w = lambda s: rng.standard_normal((d, d)) * s / np.sqrt(d)  # noqa: E731
    sq = np.sqrt(logit_scale)  # q.k / sqrt(d) of two N(0, sq^2) vectors has a standard deviation of sq^2
    nodes = [
        helper.make_node("MatMul", ["x", "Wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["x", "Wk"], ["k"], name="k_proj"),
        helper.make_node("MatMul", ["x", "Wv"], ["v"], name="v_proj"),
        helper.make_node("Transpose", ["k"], ["kt"], name="k_t", perm=[1, 0]),
        helper.make_node("MatMul", ["q", "kt"], ["s0"], name="scores"),
        helper.make_node("Div", ["s0", "sqrtd"], ["s"], name="scale"),
        helper.make_node("Exp", ["s"], ["e"], name="softmax/exp"),
        helper.make_node("ReduceSum", ["e", "axes_last"], ["z"], name="softmax/sum"),
        helper.make_node("Div", ["e", "z"], ["p"], name="softmax/div"),
        helper.make_node("MatMul", ["p", "v"], ["y"], name="attn_v"),
    ]
    inits = [_f("Wq", w(sq)), _f("Wk", w(sq)), _f("Wv", w(1.0)), _f("sqrtd", [np.sqrt(d)]), _axes()]
    return _model(
        nodes,
        inits,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [tokens, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [tokens, d])],
        "softmax_overflow",
    )


def vit_block(d: int = 64, tokens: int = 32, heads: int = 4, depth: int = 2, seed: int = 2) -> ModelProto:
    """`depth` pre-norm blocks; the query/key projections are scaled so that the scores q.k (before 1/sqrt(d))
    reach 1e5-1e6, as in ViT/Swin checkpoints whose attention logits grow large."""
    rng = np.random.default_rng(seed)
    hd = d // heads
    nodes: list = []
    inits: list = [
        _axes(),
        numpy_helper.from_array(np.array([tokens, heads, hd], np.int64), "shape_split"),
        numpy_helper.from_array(np.array([tokens, d], np.int64), "shape_merge"),
        _f("inv_sqrt_hd", [1 / np.sqrt(hd)]),
        _f("half", [0.5]),
        _f("one", [1.0]),
        _f("gelu_c", [0.044715]),
        _f("gelu_k", [np.sqrt(2 / np.pi)]),
    ]
    x = "x"
    for b in range(depth):
        p = f"block{b}"
        h = _layernorm(f"{p}/ln1", x, d, nodes, inits)
        for t, s in (("q", 100.0), ("k", 100.0), ("v", 1.0)):
            inits.append(_f(f"{p}.W{t}", rng.standard_normal((d, d)) * s / np.sqrt(d)))
            nodes += [
                helper.make_node("MatMul", [h, f"{p}.W{t}"], [f"{p}/{t}"], name=f"{p}/{t}_proj"),
                helper.make_node(
                    "Reshape", [f"{p}/{t}", "shape_split"], [f"{p}/{t}r"], name=f"{p}/{t}_split"
                ),
                helper.make_node(
                    "Transpose",
                    [f"{p}/{t}r"],
                    [f"{p}/{t}h"],
                    name=f"{p}/{t}_heads",
                    perm=[1, 2, 0] if t == "k" else [1, 0, 2],
                ),
            ]
        nodes += [
            helper.make_node("MatMul", [f"{p}/qh", f"{p}/kh"], [f"{p}/qk"], name=f"{p}/scores"),
            helper.make_node("Mul", [f"{p}/qk", "inv_sqrt_hd"], [f"{p}/s"], name=f"{p}/scale"),
            helper.make_node("ReduceMax", [f"{p}/s", "axes_last"], [f"{p}/m"], name=f"{p}/softmax/max"),
            helper.make_node("Sub", [f"{p}/s", f"{p}/m"], [f"{p}/sm"], name=f"{p}/softmax/sub"),
            helper.make_node("Exp", [f"{p}/sm"], [f"{p}/e"], name=f"{p}/softmax/exp"),
            helper.make_node("ReduceSum", [f"{p}/e", "axes_last"], [f"{p}/z"], name=f"{p}/softmax/sum"),
            helper.make_node("Div", [f"{p}/e", f"{p}/z"], [f"{p}/pr"], name=f"{p}/softmax/div"),
            helper.make_node("MatMul", [f"{p}/pr", f"{p}/vh"], [f"{p}/ah"], name=f"{p}/attn_v"),
            helper.make_node("Transpose", [f"{p}/ah"], [f"{p}/at"], name=f"{p}/merge_heads", perm=[1, 0, 2]),
            helper.make_node("Reshape", [f"{p}/at", "shape_merge"], [f"{p}/a"], name=f"{p}/merge"),
            helper.make_node("Add", [x, f"{p}/a"], [f"{p}/r1"], name=f"{p}/residual1"),
        ]
        h2 = _layernorm(f"{p}/ln2", f"{p}/r1", d, nodes, inits)
        inits += [
            _f(f"{p}.W1", rng.standard_normal((d, 4 * d)) / np.sqrt(d)),
            _f(f"{p}.W2", rng.standard_normal((4 * d, d)) / np.sqrt(4 * d)),
        ]
        u = f"{p}/mlp"
        nodes += [
            helper.make_node("MatMul", [h2, f"{p}.W1"], [f"{u}/h"], name=f"{u}/fc1"),
            helper.make_node("Mul", [f"{u}/h", f"{u}/h"], [f"{u}/h2"], name=f"{u}/gelu/sq"),
            helper.make_node("Mul", [f"{u}/h2", f"{u}/h"], [f"{u}/h3"], name=f"{u}/gelu/cube"),
            helper.make_node("Mul", [f"{u}/h3", "gelu_c"], [f"{u}/c3"], name=f"{u}/gelu/c3"),
            helper.make_node("Add", [f"{u}/h", f"{u}/c3"], [f"{u}/in"], name=f"{u}/gelu/inner"),
            helper.make_node("Mul", [f"{u}/in", "gelu_k"], [f"{u}/ik"], name=f"{u}/gelu/k"),
            helper.make_node("Tanh", [f"{u}/ik"], [f"{u}/t"], name=f"{u}/gelu/tanh"),
            helper.make_node("Add", [f"{u}/t", "one"], [f"{u}/t1"], name=f"{u}/gelu/plus1"),
            helper.make_node("Mul", [f"{u}/h", f"{u}/t1"], [f"{u}/ht"], name=f"{u}/gelu/mul"),
            helper.make_node("Mul", [f"{u}/ht", "half"], [f"{u}/g"], name=f"{u}/gelu/half"),
            helper.make_node("MatMul", [f"{u}/g", f"{p}.W2"], [f"{u}/o"], name=f"{u}/fc2"),
            helper.make_node("Add", [f"{p}/r1", f"{u}/o"], [f"{p}/out"], name=f"{p}/residual2"),
        ]
        x = f"{p}/out"
    nodes.append(helper.make_node("Identity", [x], ["y"], name="output"))
    return _model(
        nodes,
        inits,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [tokens, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [tokens, d])],
        "vit_large_logits",
    )


def residual_stack(
    d: int = 64, tokens: int = 8, blocks: int = 8, gain: float = 4.0, seed: int = 3
) -> ModelProto:
    """Residual blocks x + relu(x W) with W scaled by `gain`: the stream grows ~(1 + gain/2) per block, past
    65504 after a few blocks; an RMS norm at the end brings the output back to unit scale."""
    rng = np.random.default_rng(seed)
    nodes: list = []
    inits: list = [_axes(), _f("eps", [1e-6])]
    x = "x"
    for b in range(blocks):
        p = f"res{b}"
        inits.append(_f(f"{p}.W", rng.standard_normal((d, d)) * gain / np.sqrt(d)))
        nodes += [
            helper.make_node("MatMul", [x, f"{p}.W"], [f"{p}/h"], name=f"{p}/fc"),
            helper.make_node("Relu", [f"{p}/h"], [f"{p}/a"], name=f"{p}/relu"),
            helper.make_node("Add", [x, f"{p}/a"], [f"{p}/out"], name=f"{p}/add"),
        ]
        x = f"{p}/out"
    nodes += [
        helper.make_node("Mul", [x, x], ["sq"], name="rms/square"),
        helper.make_node("ReduceMean", ["sq", "axes_last"], ["ms"], name="rms/mean"),
        helper.make_node("Add", ["ms", "eps"], ["mse"], name="rms/add_eps"),
        helper.make_node("Sqrt", ["mse"], ["rms"], name="rms/sqrt"),
        helper.make_node("Div", [x, "rms"], ["y"], name="rms/div"),
    ]
    return _model(
        nodes,
        inits,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [tokens, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [tokens, d])],
        "residual_large_sums",
    )


CORPUS = {
    "layernorm": layernorm,
    "softmax": softmax,
    "vit_block": vit_block,
    "residual_stack": residual_stack,
}
