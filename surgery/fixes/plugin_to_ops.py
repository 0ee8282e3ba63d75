"""A node of one of TensorRT's standard plugins that TensorRT 11.0 removed, written back as the ONNX ops that
compute the same thing (the plugin's CUDA kernel at NVIDIA/TensorRT tag v10.16, the last that ships it):

  * LReLU_TRT(negSlope)  -> LeakyRelu(alpha=negSlope)   (plugin/common/kernels/lReLU.cu: x > 0 ? x : x * slope)
  * Clip_TRT(clipMin, clipMax) -> Clip(x, min, max)     (plugin/clipPlugin/clip.cu: min(max(x, lo), hi), a NaN
    becomes clipMin there and stays NaN in Clip)
  * Normalize_TRT(weights, acrossSpatial, channelShared, eps) on NCHW
        -> x / Sqrt(ReduceSum(x * x) + eps) * scale     (plugin/common/kernels/normalizeLayer.cu): the sum over C
    (acrossSpatial 0) or over C, H, W (acrossSpatial 1); scale the one weight (channelShared 1) or one per
    channel. acrossSpatial 1 with per-channel weights is refused: that kernel divides by the weights
    (scalChannelKernel), which no other form does.
  * CustomGeluPluginDynamic(type_id, bias?) -> the kernel's tanh approximation in its own order
        (plugin/geluPlugin/geluKernel.cu: in = x (+ bias along the last axis); y = in * (A + A * tanh(in * (C * in
    * in + B))), A = 0.5, B = sqrt(2/pi), C = 0.044715 * sqrt(2/pi), float32 constants)
"""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import copy_model, find_node, fresh_name, replace_node, used_names
from surgery.graph import opset_of

PLUGINS = ("LReLU_TRT", "Clip_TRT", "Normalize_TRT", "CustomGeluPluginDynamic")
GELU_A, GELU_B, GELU_C = 0.5, 0.7978845608028654, 0.035677408136300125  # geluKernel.cu @ v10.16


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _dtype(model: ModelProto, name: str) -> int:
    for vi in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        if vi.name == name and vi.type.tensor_type.elem_type:
            return vi.type.tensor_type.elem_type
    return TensorProto.FLOAT


def _rank(model: ModelProto, name: str) -> int | None:
    for vi in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        if vi.name == name and vi.type.tensor_type.HasField("shape"):
            return len(vi.type.tensor_type.shape.dim)
    return None


def _channels(model: ModelProto, name: str) -> int | None:
    for vi in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        if vi.name == name and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            return dims[1].dim_value if len(dims) > 1 and dims[1].HasField("dim_value") else None
    return None


def _float(attrs: dict, name: str, node: str) -> float:
    if name not in attrs:
        raise FixError(f"node '{node}' has no '{name}' attribute (the plugin requires it)")
    return float(attrs[name])


@register(
    "plugin_to_ops",
    safety=Safety.EXACT,
    summary="Write a node of a standard TensorRT plugin that 11.0 removed (LReLU_TRT, Clip_TRT, Normalize_TRT, "
    "CustomGeluPluginDynamic) as the ONNX ops that compute the same.",
    params={"node": "node key (str) of the plugin node"},
)
def plugin_to_ops(model: ModelProto, node: str) -> ModelProto:
    out = copy_model(model)
    g = out.graph
    i = find_node(out, node)
    n = g.node[i]
    if n.op_type not in PLUGINS or len(n.input) < 1 or len(n.output) != 1:
        raise FixError(
            f"node '{node}' is {n.op_type}, not one of {', '.join(PLUGINS)} with one input and output"
        )
    a, x, y, name = _attrs(n), n.input[0], n.output[0], n.name or n.op_type
    used = used_names(out)
    opset = opset_of(out) or 13
    dtype = _dtype(out, x)
    np_type = helper.tensor_dtype_to_np_dtype(dtype)

    def const(base: str, value) -> str:
        t = numpy_helper.from_array(np.asarray(value, dtype=np_type), fresh_name(out, f"{name}/{base}", used))
        g.initializer.append(t)
        return t.name

    def tensor(base: str) -> str:
        return fresh_name(out, f"{name}/{base}", used)

    if n.op_type == "LReLU_TRT":
        new = [helper.make_node("LeakyRelu", [x], [y], name=name, alpha=_float(a, "negSlope", node))]
    elif n.op_type == "Clip_TRT":
        lo, hi = _float(a, "clipMin", node), _float(a, "clipMax", node)
        if opset >= 11:
            new = [helper.make_node("Clip", [x, const("min", lo), const("max", hi)], [y], name=name)]
        else:
            new = [helper.make_node("Clip", [x], [y], name=name, min=lo, max=hi)]
    elif n.op_type == "CustomGeluPluginDynamic":
        new = _gelu(a, x, y, name, const, tensor)
    else:
        new = _normalize(out, n, a, x, y, name, opset, const, tensor, node)
    replace_node(g, i, new)
    return out


def _normalize(model, n, a, x, y, name, opset, const, tensor, node):
    weights = [float(w) for w in a.get("weights", [])]
    across, shared = int(a.get("acrossSpatial", 0)), int(a.get("channelShared", 0))
    eps = float(a.get("eps", 0.0))
    rank = _rank(model, x)
    if rank != 4:
        raise FixError(f"Normalize_TRT '{node}' needs a known NCHW (rank-4) input, its input has rank {rank}")
    if not weights:
        raise FixError(f"Normalize_TRT '{node}' has no weights")
    channels = _channels(model, x)
    if not shared and len(weights) != channels:
        raise FixError(
            f"Normalize_TRT '{node}' has {len(weights)} weights for {channels if channels else 'an unknown count of'} "
            "channels (one per channel is needed without channelShared)"
        )
    if across and not shared:
        raise FixError(
            f"Normalize_TRT '{node}' normalizes across C, H, W with one weight per channel, which the plugin's "
            "kernel divides by (scalChannelKernel) where every other form multiplies: not rewritten"
        )
    axes = [1, 2, 3] if across else [1]
    sq, summed, plus, root, normed = (tensor(s) for s in ("square", "sum", "plus_eps", "norm", "normed"))
    nodes = [helper.make_node("Mul", [x, x], [sq], name=f"{name}/square")]
    if opset >= 13:
        nodes.append(
            helper.make_node("ReduceSum", [sq, const("axes", axes)], [summed], name=f"{name}/sum", keepdims=1)
        )
        # the axes are INT64 whatever the data type
        model.graph.initializer[-1].CopyFrom(
            numpy_helper.from_array(np.asarray(axes, np.int64), model.graph.initializer[-1].name)
        )
    else:
        nodes.append(helper.make_node("ReduceSum", [sq], [summed], name=f"{name}/sum", axes=axes, keepdims=1))
    scale = np.asarray(weights[:1] if shared else weights).reshape((-1, 1, 1))
    nodes += [
        helper.make_node("Add", [summed, const("eps", eps)], [plus], name=f"{name}/plus_eps"),
        helper.make_node("Sqrt", [plus], [root], name=f"{name}/sqrt"),
        helper.make_node("Div", [x, root], [normed], name=f"{name}/div"),
        helper.make_node("Mul", [normed, const("scale", scale)], [y], name=name),
    ]
    return nodes


def _gelu(a, x, y, name, const, tensor):
    """in * (A + A * tanh(in * (C * in * in + B))), each product in the kernel's order (left to right)."""
    nodes = []
    src = x
    bias = [float(b) for b in a.get("bias", [])]
    if bias:  # geluBiasKernel: bias[it] over the last axis
        src = tensor("biased")
        nodes.append(helper.make_node("Add", [x, const("bias", bias)], [src], name=f"{name}/bias"))
    c_in, c_in_in, inner, arg, th, a_th, cdf = (
        tensor(s) for s in ("c_in", "c_in_in", "inner", "arg", "tanh", "a_tanh", "cdf")
    )
    nodes += [
        helper.make_node("Mul", [const("C", GELU_C), src], [c_in], name=f"{name}/c_in"),
        helper.make_node("Mul", [c_in, src], [c_in_in], name=f"{name}/c_in_in"),
        helper.make_node("Add", [c_in_in, const("B", GELU_B)], [inner], name=f"{name}/plus_b"),
        helper.make_node("Mul", [src, inner], [arg], name=f"{name}/arg"),
        helper.make_node("Tanh", [arg], [th], name=f"{name}/tanh"),
        helper.make_node("Mul", [const("A", GELU_A), th], [a_th], name=f"{name}/a_tanh"),
        helper.make_node("Add", [const("A2", GELU_A), a_th], [cdf], name=f"{name}/cdf"),
        helper.make_node("Mul", [src, cdf], [y], name=name),
    ]
    return nodes
