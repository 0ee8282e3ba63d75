"""Deformable convolution in the form a backend imports.

Three spellings of the same function reach users:
  * ONNX DeformConv (opset 19): inputs (X, W, offset, B?, mask?), attributes strides, pads, dilations, group,
    offset_group;
  * torchvision::deform_conv2d, as torch.onnx exports it with ONNX_FALLTHROUGH: inputs (input, weight, offset,
    mask, bias, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, offset_groups, use_mask), the
    scalars as constants (an export that gives them as attributes of the same names is read too);
  * TensorRT's ModulatedDeformConv2d plugin (TensorRT 8.6+, NVIDIA/TensorRT plugin/modulatedDeformConvPlugin):
    inputs (x, offset, mask, weight, bias?), attributes stride[2], padding[2], dilation[2], group,
    deformable_group. It needs a mask: a deformable convolution without one gets a mask of ones.

`deform_conv` rewrites one node from the first two spellings into ONNX DeformConv (`form: onnx`) or the plugin
(`form: plugin`). A value the target form cannot hold (asymmetric pads for the plugin's 2-value padding, a scalar
that is not a constant) is a FixError naming the node, and the model is left as it was.
"""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, NodeProto, helper, numpy_helper

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import NameIndex, copy_model, find_node, replace_node
from surgery.graph import GraphFacts, opset_of
from surgery.text import first_line

TORCHVISION_INPUTS = ("input", "weight", "offset", "mask", "bias")
TORCHVISION_SCALARS = (
    "stride_h",
    "stride_w",
    "pad_h",
    "pad_w",
    "dilation_h",
    "dilation_w",
    "groups",
    "offset_groups",
    "use_mask",
)


def _attrs(node: NodeProto) -> dict:
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _scalar(facts: GraphFacts, node: NodeProto, name: str, index: int) -> int:
    """A torchvision scalar argument: a constant input (or an attribute of the same name)."""
    attrs = _attrs(node)
    if name in attrs:
        return int(attrs[name])
    x = node.input[index] if len(node.input) > index else ""
    t = facts.weights_tensor(x)
    if t is None:
        raise FixError(
            f"deform_conv2d '{node.name}': its {name} (input {index}, '{x}') is not a constant. Note: fold constants "
            "first"
        )
    return int(np.asarray(numpy_helper.to_array(t)).reshape(-1)[0])


def _read(node: NodeProto, facts: GraphFacts) -> dict:
    """The node as plain facts: tensors (x, w, offset, bias, mask or '') and the convolution's parameters."""
    domain = node.domain or ""
    if node.op_type == "DeformConv" and domain in ("", "ai.onnx"):
        a = _attrs(node)
        ins = list(node.input) + [""] * (5 - len(node.input))
        rank = 2
        return {
            "x": ins[0],
            "w": ins[1],
            "offset": ins[2],
            "bias": ins[3],
            "mask": ins[4],
            "strides": list(a.get("strides", [1] * rank)),
            "pads": list(a.get("pads", [0] * 2 * rank)),
            "dilations": list(a.get("dilations", [1] * rank)),
            "group": int(a.get("group", 1)),
            "offset_group": int(a.get("offset_group", 1)),
        }
    if node.op_type == "deform_conv2d" and domain == "torchvision":
        n = len(TORCHVISION_INPUTS)
        s = {name: _scalar(facts, node, name, n + k) for k, name in enumerate(TORCHVISION_SCALARS)}
        ins = list(node.input) + [""] * (n - len(node.input))
        return {
            "x": ins[0],
            "w": ins[1],
            "offset": ins[2],
            "bias": ins[4],
            "mask": ins[3] if s["use_mask"] else "",
            "strides": [s["stride_h"], s["stride_w"]],
            "pads": [s["pad_h"], s["pad_w"], s["pad_h"], s["pad_w"]],
            "dilations": [s["dilation_h"], s["dilation_w"]],
            "group": s["groups"],
            "offset_group": s["offset_groups"],
        }
    raise FixError(
        f"node '{node.name}' is {domain + '::' if domain else ''}{node.op_type}, not a deformable convolution. "
        "Note: deform_conv takes ONNX DeformConv or torchvision::deform_conv2d"
    )


def _kernel(facts: GraphFacts, w: str, node: NodeProto) -> list[int]:
    shape = facts.info(w).shape
    if shape is None or len(shape) != 4 or not all(isinstance(d, int) for d in shape[2:]):
        raise FixError(
            f"deform_conv '{node.name}': the kernel size of weight '{w}' is not known. Note: infer shapes"
        )
    return [int(shape[2]), int(shape[3])]


def _ones_mask(d: dict, kernel: list[int], node: NodeProto, out: ModelProto, fresh) -> tuple[list, list, str]:
    """A mask of ones shaped [N, offset_group * kh * kw, H_out, W_out], taken from the offset's shape."""
    shape, head, tail, middle, dims, mask = (
        fresh(k) for k in ("offset_shape", "n", "hw", "k", "mask_shape", "mask")
    )
    k = d["offset_group"] * kernel[0] * kernel[1]
    inits = [
        numpy_helper.from_array(np.array([0], np.int64), fresh("zero")),
        numpy_helper.from_array(np.array([1], np.int64), fresh("one")),
        numpy_helper.from_array(np.array([2], np.int64), fresh("two")),
        numpy_helper.from_array(np.array([4], np.int64), fresh("four")),
        numpy_helper.from_array(np.array([k], np.int64), middle),
    ]
    zero, one, two, four = (t.name for t in inits[:4])
    nodes = [
        helper.make_node("Shape", [d["offset"]], [shape], name=f"{node.name}/mask/Shape"),
        helper.make_node("Slice", [shape, zero, one], [head], name=f"{node.name}/mask/Slice_n"),
        helper.make_node("Slice", [shape, two, four], [tail], name=f"{node.name}/mask/Slice_hw"),
        helper.make_node("Concat", [head, middle, tail], [dims], name=f"{node.name}/mask/Concat", axis=0),
        helper.make_node(
            "ConstantOfShape",
            [dims],
            [mask],
            name=f"{node.name}/mask/Ones",
            value=numpy_helper.from_array(np.array([1.0], np.float32)),
        ),
    ]
    return nodes, inits, mask


@register(
    "deform_conv",
    safety=Safety.CHANGES_SEMANTICS,
    summary="Rewrite a deformable convolution (ONNX DeformConv, torchvision::deform_conv2d) as ONNX DeformConv "
    "or TensorRT's ModulatedDeformConv2d plugin.",
    params={
        "node": "node key (str) of the DeformConv or torchvision::deform_conv2d node",
        "form": "'plugin' (TensorRT's ModulatedDeformConv2d, plugin_version `version`) or 'onnx' (DeformConv, "
        "opset 19)",
        "version": "str: the plugin_version (default '1'; TensorRT 10.11+ also has '2')",
        "upgrade_opset": "bool: for form 'onnx', convert a model below opset 19 to 19 first (onnx's version "
        "converter) instead of refusing (default false)",
    },
)
def deform_conv(model: ModelProto, node: str, form: str = "plugin", version: str = "1", upgrade_opset=False):
    if form not in ("plugin", "onnx"):
        raise FixError(f"form '{form}' is not known. Note: forms are plugin, onnx")
    src = model  # read here (its facts are kept per model version); the edits go to a copy of it
    if form == "onnx" and (opset_of(src) or 0) < 19:
        if not upgrade_opset:
            raise FixError(
                f"ONNX DeformConv needs opset 19; the model is at opset {opset_of(src) or 0}. Note: set upgrade_opset, or "
                "use form plugin"
            )
        src = _upgraded(src, node)  # a new model: the converter does not edit its input
    facts = GraphFacts.of(src)
    i = find_node(src, node)
    n = src.graph.node[i]
    out = copy_model(src)
    d = _read(n, facts)
    kernel = _kernel(facts, d["w"], n)
    name = n.name or "deform_conv"

    names: list[NameIndex] = []  # one scan of the graph for every name this call makes

    def fresh(what: str) -> str:
        if not names:
            names.append(NameIndex(out))
        return names[0].fresh(f"{name}/{what}", reserve=False)  # taken once the caller adds its node

    nodes, inits = [], []
    if form == "onnx":
        ins = [d["x"], d["w"], d["offset"], d["bias"], d["mask"]]
        while ins and not ins[-1]:
            ins.pop()
        new = helper.make_node(
            "DeformConv",
            ins,
            [n.output[0]],
            name=name,
            strides=d["strides"],
            pads=d["pads"],
            dilations=d["dilations"],
            group=d["group"],
            offset_group=d["offset_group"],
            kernel_shape=kernel,
        )
        domain = n.domain
        replace_node(out.graph, i, [new])
        _drop_unread_constants(out)
        _drop_unused_domain(out, domain)
        return out
    p = d["pads"]
    if len(p) != 4 or p[0] != p[2] or p[1] != p[3]:
        raise FixError(
            f"deform_conv '{name}': pads {p} are not symmetric; the ModulatedDeformConv2d plugin takes one padding "
            "per axis. Note: pad the input explicitly first, or keep the node"
        )
    mask = d["mask"]
    if not mask:
        nodes, inits, mask = _ones_mask(d, kernel, n, out, fresh)
    ins = [d["x"], d["offset"], mask, d["w"]] + ([d["bias"]] if d["bias"] else [])
    plugin = helper.make_node(
        "ModulatedDeformConv2d",
        ins,
        [n.output[0]],
        name=name,
        stride=d["strides"],
        padding=[p[0], p[1]],
        dilation=d["dilations"],
        group=d["group"],
        deformable_group=d["offset_group"],
        plugin_version=str(version),
        plugin_namespace="",
    )
    domain = n.domain
    replace_node(out.graph, i, [*nodes, plugin])
    out.graph.initializer.extend(inits)
    _drop_unread_constants(out)
    _drop_unused_domain(out, domain)
    return out


def _drop_unread_constants(model: ModelProto) -> None:
    """Constant nodes nobody reads any more (torchvision's scalar arguments) go."""
    read = {x for n in model.graph.node for x in n.input} | {o.name for o in model.graph.output}
    keep = [
        n for n in model.graph.node if not (n.op_type == "Constant" and not any(o in read for o in n.output))
    ]
    if len(keep) != len(model.graph.node):
        kept = [type(n)() for n in keep]
        for a, b in zip(kept, keep):
            a.CopyFrom(b)
        del model.graph.node[:]
        model.graph.node.extend(kept)


def _drop_unused_domain(model: ModelProto, domain: str) -> None:
    if domain in ("", "ai.onnx") or any(m.domain == domain for m in model.graph.node):
        return
    kept = [o for o in model.opset_import if o.domain != domain]
    del model.opset_import[:]
    model.opset_import.extend(kept)


def _upgraded(model: ModelProto, node: str) -> ModelProto:
    """The model at opset 19 (onnx's version converter), custom-domain nodes left as they are."""
    from onnx import version_converter

    try:
        return version_converter.convert_version(model, 19)
    except Exception as exc:  # the converter refuses some custom-domain graphs: say so
        raise FixError(
            f"deform_conv '{node}': onnx's version converter could not bring the model to opset 19 "
            f"({first_line(str(exc), 200) or type(exc).__name__}). Note: use form plugin"
        ) from None
