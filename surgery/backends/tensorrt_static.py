"""Predicted TensorRT parser verdicts for a chosen TensorRT version, from versioned, cited support data.

Two layers, both data-driven:
  * the operator table of that version (surgery/backends/data/tensorrt_support.json, made from onnx-tensorrt's
    docs/operators.md per branch by scripts/build_trt_support.py);
  * the parser's constraint checks (`CONSTRAINTS` below): each names the versions it applies to, the message
    that version's parser prints, its error code and function, and where the fact comes from.
Messages read like the parser of that version: ≥ 9.3 has static checkers that report every unsupported node
(desc `false`, func check<Op>); older parsers stop at the first error in the importer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper

from surgery.backends.base import Availability, BuildOptions, BuildReport, Evidence, Report, Status, Verdict
from surgery.graph import GraphFacts, opset_of

DATA = Path(__file__).resolve().parent / "data" / "tensorrt_support.json"
ERRORS = "shared/reference/tensorrt-parser-errors.md"
PLUGIN_MSG = 'creator && "Plugin not found, are the plugin name, version, and namespace correct?"'
PLUGIN_README = "NVIDIA/TensorRT plugin/README.md"
# Standard plugins the fallback importer finds by op type (standard plugin library loaded): first version, source.
STANDARD_PLUGINS = {
    "ModulatedDeformConv2d": (
        "8.6",
        "NVIDIA/TensorRT release/8.6 plugin/modulatedDeformConvPlugin; the 10.10 DeformConv importer creates it "
        f"(importerUtils.cpp:1255) — {ERRORS} §1b",
    ),
    "ROIAlign_TRT": (
        "8.5",
        f"{PLUGIN_README} @ release/8.5 (roiAlignPlugin); RoiAlign importer onnxOpImporters.cpp:5196 @ 10.10 — "
        f"{ERRORS} §1b",
    ),
    "InstanceNormalization_TRT": (
        "8.0",
        f"{PLUGIN_README} @ release/8.0 (instanceNormalizationPlugin); importerUtils.cpp:1381 @ 10.10 — "
        f"{ERRORS} §1b",
    ),
    "EfficientNMS_TRT": ("8.0", f"{PLUGIN_README} @ release/8.0 (efficientNMSPlugin)"),
    "BatchedNMS_TRT": ("8.0", f"{PLUGIN_README} @ release/8.0 (batchedNMSPlugin)"),
    "BatchedNMSDynamic_TRT": ("8.0", f"{PLUGIN_README} @ release/8.0 (batchedNMSPlugin)"),
    "MultilevelCropAndResize_TRT": ("8.0", f"{PLUGIN_README} @ release/8.0 (multilevelCropAndResizePlugin)"),
    "PyramidROIAlign_TRT": ("8.0", f"{PLUGIN_README} @ release/8.0 (pyramidROIAlignPlugin)"),
    "GridAnchor_TRT": ("8.0", f"{PLUGIN_README} @ release/8.0 (gridAnchorPlugin)"),
    "ResizeNearest_TRT": ("8.0", f"{PLUGIN_README} @ release/8.0 (resizeNearestPlugin)"),
    "Region_TRT": ("8.0", f"{PLUGIN_README} @ release/8.0 (regionPlugin)"),
    "Reorg_TRT": ("8.0", f"{PLUGIN_README} @ release/8.0 (reorgPlugin)"),
    "NMS_TRT": ("8.0", f"{PLUGIN_README} @ release/8.0 (nmsPlugin)"),
}
RTX = "TensorRT-RTX 1.7.1 parser, observed by bench/static_vs_rtx.py"
MSGS = "shared/reference/tensorrt-parser-messages-10.10.txt"
CHECKERS = "onnxOpCheckers.cpp @ 10.10-GA (commit 3b9c961)"
IMPORTERS = "onnxOpImporters.cpp @ 10.10-GA (commit 3b9c961)"


def _vt(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


@cache
def support_data() -> dict:
    return json.loads(DATA.read_text())


SUPPORTED_VERSIONS = sorted(json.loads(DATA.read_text())["versions"], key=_vt)
ALIASES = {"8": "8.6", "9": "9.3", "10": "10.15", "11": "11.1"}


def resolve_version(version: str) -> str:
    v = ALIASES.get(version, version)
    if v not in SUPPORTED_VERSIONS:
        raise ValueError(
            f"no support data for TensorRT {version}. Note: available: {', '.join(SUPPORTED_VERSIONS)}"
        )
    return v


@dataclass(frozen=True)
class Constraint:
    """One check of the parser: applies to versions in [since, until], returns a problem or None."""

    id: str
    ops: tuple[str, ...]
    since: str
    until: str
    code: str
    func: str
    message: str
    source: str
    check: Callable[[NodeProto, GraphFacts], str | None]  # returns the detail when the constraint is broken
    rules: tuple[str, ...] = ()

    def applies(self, version: str) -> bool:
        return _vt(self.since) <= _vt(version) <= _vt(self.until)


def _weights(facts: GraphFacts, name: str) -> bool:
    """What TensorRT's parser takes as weights: an initializer or the output of a Constant node."""
    if not name or name in facts.initializers:
        return True
    p = facts.producer_of(name)
    return p is not None and p.op_type == "Constant"


def _build_time_constant(facts: GraphFacts, name: str) -> bool:
    """Weights, or computable from constants only (what 10.x resolves by folding its shape tensors)."""
    return _weights(facts, name) or facts.is_constant(name)


def _attr(node: NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return default


def _node_name(node: NodeProto) -> str:
    """The name the parser prints: the node's name, else node_of_<first output> (checked with TensorRT-RTX)."""
    return node.name or f"node_of_{node.output[0] if node.output else ''}"


def _dtype(facts: GraphFacts, name: str) -> str:
    """ONNX type name of a tensor ('' when unknown)."""
    if not name:
        return ""
    t = facts.info(name).dtype
    return TensorProto.DataType.Name(t) if t else ""


def _trt_dtype(onnx_name: str) -> str:
    """The TensorRT spelling the parser prints in its messages (getTrtDtypeName)."""
    return {"DOUBLE": "FLOAT", "FLOAT16": "HALF", "BFLOAT16": "BF16"}.get(onnx_name, onnx_name)


def _resize_scales(node, facts):
    idx = 1 if node.op_type == "Upsample" or opset_of(facts.model) == 10 else 2
    if len(node.input) > idx and node.input[idx] and not _weights(facts, node.input[idx]):
        return f"scales '{node.input[idx]}' is computed by the graph"
    return None


def _input_must_be_weights(index: int):
    def check(node, facts):
        if len(node.input) > index and node.input[index] and not _weights(facts, node.input[index]):
            return f"input {index} '{node.input[index]}' is computed by the graph"
        return None

    return check


def _squeeze_dynamic(node, facts):
    has_axes = (len(node.input) > 1 and node.input[1]) or _attr(node, "axes") is not None
    info = facts.info(node.input[0])
    if not has_axes and (info.shape is None or info.is_dynamic):
        return f"input '{node.input[0]}' has shape {info.shape_str()}"
    return None


_I32 = np.iinfo(np.int32)


def _int64_out_of_range(facts: GraphFacts, node: NodeProto):
    """(input index, name, values) of INT64 constants of `node` outside the INT32 range."""
    for k, x in enumerate(node.input):
        t = facts.initializers.get(x)
        if t is None:
            p = facts.producer_of(x) if x else None
            t = _constant_value(p) if p is not None and p.op_type == "Constant" else None
        if t is None or t.data_type != TensorProto.INT64 or t.data_location == TensorProto.EXTERNAL:
            continue
        a = numpy_helper.to_array(t)
        if a.size and (a.max() > _I32.max or a.min() < _I32.min):
            yield k, x, a.reshape(-1)[:4].tolist()


def _constant_value(node: NodeProto) -> TensorProto | None:
    for a in node.attribute:
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
            return a.t
    return None


def _int64_data(node, facts):
    """INT64 constants outside the INT32 range that carry data (a Slice bound of INT64_MAX is harmless)."""
    for k, x, values in _int64_out_of_range(facts, node):
        if node.op_type == "Slice" and k in (1, 2):
            continue
        return f"'{x}' = {values} is clamped to the INT32 range, changing results"
    return None


def _dropout_training(node, facts):
    if len(node.input) > 2 and node.input[2]:
        t = facts.initializers.get(node.input[2])
        if t is not None and bool(numpy_helper.to_array(t).reshape(-1)[0]):
            return f"training_mode input '{node.input[2]}' is True"
    return None


def _dropout_training_runtime(node, facts):
    x = node.input[2] if len(node.input) > 2 else ""
    return f"training_mode input '{x}' is computed at run time" if x and not _weights(facts, x) else None


def _bn_training(node, facts):
    return "training_mode=1" if _attr(node, "training_mode", 0) else None


def _pool_dilations(node, facts):
    d = _attr(node, "dilations")
    return f"dilations {d}" if d and any(x != 1 for x in d) else None


def _attr_is(name: str, allowed: tuple, default):
    def check(node, facts):
        v = _attr(node, name, default)
        return None if v in allowed else f"{name}={v!r}"

    return check


def _if_ranks(node, facts):
    branches = {a.name: a.g for a in node.attribute if a.name in ("then_branch", "else_branch")}
    if len(branches) != 2:
        return None
    then_out, else_out = branches["then_branch"].output, branches["else_branch"].output
    for a, b in zip(then_out, else_out):
        ra = len(a.type.tensor_type.shape.dim) if a.type.tensor_type.HasField("shape") else None
        rb = len(b.type.tensor_type.shape.dim) if b.type.tensor_type.HasField("shape") else None
        if ra is not None and rb is not None and ra != rb:
            return f"branch outputs '{a.name}' (rank {ra}) and '{b.name}' (rank {rb})"
    return None


def _unshaped_input(node, facts):
    for x in node.input:
        if x in facts.graph_inputs and facts.info(x).shape is None:
            return f"graph input '{x}' has no shape"
    return None


def _extra_outputs(node, facts):
    """Outputs after the first that something reads (unread ones pass: checked with TensorRT-RTX 1.7.1)."""
    extra = [o for o in node.output[1:] if o and (o in facts.graph_outputs or facts.consumers.get(o))]
    return f"outputs {extra} are used" if extra else None


def _attention_outputs(node, facts):
    n = len([o for o in node.output if o])
    return f"{n} outputs" if n > 1 else None


def _lp_p(node, facts):
    p = _attr(node, "p")  # the parser reads no ONNX default for LpPool: a missing p fails (observed in RTX)
    if node.op_type == "LpNormalization" and p is None:
        p = 2
    return None if p in (1, 2) else f"p={p}"


def _resize_axes(node, facts):
    axes = _attr(node, "axes")
    rank = facts.info(node.input[0]).rank
    scales = len(node.input) > 2 and node.input[2]
    if axes is None or not scales or rank is None:
        return None
    norm = [a % rank for a in axes]
    return None if norm == list(range(rank)) else f"axes={list(axes)} with a scales input (rank {rank})"


def _scatter_reduction(node, facts):
    r = _attr(node, "reduction", "none")
    return None if r == "none" else f"reduction={r!r}"


def _mod_float(node, facts):
    t = _dtype(facts, node.input[0])
    if _attr(node, "fmod", 0) == 0 and t and t not in ("INT32", "INT64"):
        return f"The current input type is {_trt_dtype(t)}."
    return None


def _clip_type(node, facts):
    t = _dtype(facts, node.input[0])
    if t and t not in ("FLOAT", "FLOAT16", "BFLOAT16", "DOUBLE", "INT32", "INT64"):
        return f"The current input type is {_trt_dtype(t)}."
    return None


def _range_type(node, facts):
    t = _dtype(facts, node.input[0])
    return f"input type {t}" if t in ("FLOAT16", "BFLOAT16") else None


def _range_float_runtime(node, facts):
    if _dtype(facts, node.input[0]) not in ("FLOAT", "DOUBLE"):
        return None
    computed = [x for x in node.input[:3] if x and not _build_time_constant(facts, x)]
    return f"float inputs {computed} are not initializers" if computed else None


def _attention_mask_causal(node, facts):
    has_mask = len(node.input) > 3 and node.input[3]
    return "attn_mask with is_causal=1" if has_mask and _attr(node, "is_causal", 0) else None


def _attention_kv_shapes(node, facts):
    k, v = facts.info(node.input[1]).shape, facts.info(node.input[2]).shape
    if k is not None and v is not None and len(k) == len(v) and k != v:
        return f"K {list(k)} vs V {list(v)}"
    return None


def _celu_half(node, facts):
    t = _dtype(facts, node.input[0])
    return f"input type {t}" if t in ("FLOAT16", "BFLOAT16") else None


# inputs that TensorRT takes as shape tensors: a float network input cannot be one
SHAPE_TENSOR_INPUTS = {
    "Resize": (2, 3),
    "Upsample": (1,),
    "Range": (0, 1, 2),
    "OneHot": (1,),
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "ConstantOfShape": (0,),
}


def _float_network_shape_input(node, facts):
    for k in SHAPE_TENSOR_INPUTS.get(node.op_type, ()):
        x = node.input[k] if len(node.input) > k else ""
        if x in facts.graph_inputs and _dtype(facts, x) in ("FLOAT", "FLOAT16", "DOUBLE", "BFLOAT16"):
            return f"Network input {x} is a shape tensor and must have type Int32 or Int64. Type is Float."
    return None


CONSTRAINTS = [
    Constraint(
        "resize-scales-initializer",
        ("Resize", "Upsample"),
        "7.0",
        "8.2",
        "UNSUPPORTED_NODE",
        "importResize",
        'Assertion failed: scales.is_weights() && "Resize scales must be an initializer!"',
        f"onnx-tensorrt builtin_op_importers.cpp @ 8.2-GA (line 3526); gone from 8.4-GA — {ERRORS} row 4",
        _resize_scales,
        ("fold-resize-scales",),
    ),
    Constraint(
        "topk-k-initializer",
        ("TopK",),
        "8.0",
        "8.6",
        "UNSUPPORTED_NODE",
        "importTopK",
        "This version of TensorRT only supports input K as an initializer. Try applying constant folding on "
        "the model using Polygraphy: https://github.com/NVIDIA/TensorRT/tree/master/tools/Polygraphy/"
        "examples/cli/surgeon/02_folding_constants",
        f"onnx-tensorrt importTopK ≤ 8.6, docs/operators.md 8.2–8.6 TopK row — {ERRORS} row 6",
        _input_must_be_weights(1),
        ("fold-topk-k",),
    ),
    Constraint(
        "clip-min-max-initializer",
        ("Clip",),
        "7.0",
        "8.0",
        "UNSUPPORTED_NODE",
        "importClip",
        'Assertion failed: inputs.at(1).is_weights() && "Clip min value must be an initializer!"',
        f"docs/operators.md 7.x–8.0 Clip row; {ERRORS} row 7",
        _input_must_be_weights(1),
        ("fold-shape-chains",),
    ),
    Constraint(
        "conv-weights-initializer",
        ("Conv", "ConvTranspose"),
        "7.0",
        "8.4",
        "UNSUPPORTED_NODE",
        "importConv",
        'Assertion failed: inputs.at(1).is_weights() && "The weights tensor is required to '
        'be an initializer for the Conv operator."',
        "docs/operators.md 7.x–8.4 Conv row: Weights `W` must be an initializer",
        _input_must_be_weights(1),
    ),
    Constraint(
        "squeeze-dynamic",
        ("Squeeze",),
        "8.6",
        "10.15",
        "UNSUPPORTED_NODE_DYNAMIC",
        "importSqueeze",
        "Assertion failed: !isDynamic(shape): Cannot infer squeeze dimensions from a dynamic shape! Please "
        "re-export your model with the Squeeze axes input set.",
        f"onnx-tensorrt onnxOpImporters.cpp:5894 @ 10.10-GA — {ERRORS} row 8; not in 11.x: TensorRT-RTX 1.7.1, "
        "whose parser carries the 11.0 changes (Swish), squeezes [batch, 1, 8] without axes",
        _squeeze_dynamic,
        ("squeeze-explicit-axes",),
    ),
    Constraint(
        "int64-clamped",
        (),
        "7.0",
        "8.6",
        "UNSUPPORTED_NODE_DATATYPE",
        "convertToTensor",
        "Your ONNX model has been generated with INT64 weights, while TensorRT does not natively support "
        "INT64. Attempting to cast down to INT32. One or more weights outside the range of INT32 was clamped",
        f"onnx2trt_utils.cpp:373 @ 8.6-GA; docs 5.x–8.6 INT64 note — {ERRORS} row 13",
        _int64_data,
        ("int64-initializers-to-int32",),
    ),
    Constraint(
        "dropout-training-input",
        ("Dropout",),
        "7.0",
        "11.1",
        "UNSUPPORTED_NODE",
        "importDropout",
        "Assertion failed: inputs.at(2).is_weights(): This Version of TensorRT only supports the training_mode "
        "input as an initializer.",
        f"docs/operators.md 10.15 Dropout row ('`is_training` must be an initializer'); text: {RTX}",
        _dropout_training_runtime,
        ("inference-mode", "dropout-training-mode"),
    ),
    Constraint(
        "dropout-training",
        ("Dropout",),
        "7.0",
        "11.1",
        "UNSUPPORTED_NODE",
        "importDropout",
        "Assertion failed: !trainingMode[0]: TensorRT does not support the Dropout operator in training mode.",
        f"docs/operators.md 10.15 Dropout row; TensorRT-RTX 1.7 parser text — {ERRORS} row 21",
        _dropout_training,
        ("inference-mode", "dropout-training-mode"),
    ),
    Constraint(
        "batchnorm-training",
        ("BatchNormalization",),
        "9.3",
        "11.1",
        "UNSUPPORTED_NODE",
        "checkBatchNormalization",
        '!isTraining && "This version of TensorRT does not support training_mode == 1 in BatchNormalization."',
        f"{CHECKERS} line 193 ({MSGS}); same text from TensorRT-RTX 1.7.1 — {ERRORS} row 21",
        _bn_training,
        ("inference-mode",),
    ),
    Constraint(
        "batchnorm-one-output",
        ("BatchNormalization",),
        "9.3",
        "11.1",
        "UNSUPPORTED_NODE",
        "emptyOutputChecker",
        "This version of TensorRT doesn't support mode than 1 outputs for BatchNormalization nodes!",
        f"{RTX} (a training-mode export's running mean/var outputs)",
        _extra_outputs,
        ("inference-mode",),
    ),
    Constraint(
        "batchnorm-training-importer",
        ("BatchNormalization",),
        "7.0",
        "9.2",
        "UNSUPPORTED_NODE",
        "importBatchNormalization",
        "This version of TensorRT does not support training_mode == 1 in BatchNormalization.",
        f"text of the 10.10 checker ({MSGS}); the pre-9.3 importer's own words are not in the reference notes",
        _bn_training,
        ("inference-mode",),
    ),
    Constraint(
        "pool-dilations",
        ("MaxPool", "AveragePool", "LpPool"),
        "7.0",
        "11.1",
        "UNSUPPORTED_NODE",
        "poolingCheckHelper",
        '(dilations[i] == 1) && "This version of TensorRT does not support dilations other than 1."',
        f"onnxOpCheckers.cpp @ 10.10-GA; docs/operators.md MaxPool/AveragePool/LpPool rows — {ERRORS} row 18",
        _pool_dilations,
    ),
    Constraint(
        "resize-antialias",
        ("Resize",),
        "9.0",
        "11.1",
        "UNSUPPORTED_NODE_ATTR",
        "checkResize",
        '(antialias == 0) && "Antialiasing is not supported currently."',
        f"onnxOpCheckers.cpp @ 10.10-GA; docs 10.15 Resize row — {ERRORS} row 19",
        _attr_is("antialias", (0,), 0),
    ),
    Constraint(
        "resize-keep-aspect-ratio",
        ("Resize",),
        "9.0",
        "11.1",
        "UNSUPPORTED_NODE_ATTR",
        "checkResize",
        '(keep_aspect_ratio_policy == "stretch") && "Only `stretch` is supported currently as '
        '`keep_aspect_ratio_policy`."',
        f"{CHECKERS} line 630 ({MSGS}); docs 10.15 Resize row — {ERRORS} row 19",
        _attr_is("keep_aspect_ratio_policy", ("stretch",), "stretch"),
    ),
    Constraint(
        "resize-transformation-mode",
        ("Resize",),
        "9.3",
        "11.1",
        "UNSUPPORTED_NODE",
        "checkResize",
        '(transformationMode == "align_corners" || transformationMode == "tf_half_pixel_for_nn" || '
        'transformationMode == "pytorch_half_pixel" || transformationMode == "half_pixel" || '
        'transformationMode == "asymmetric") && "TensorRT only supports half_pixel, pytorch_half_pixel, '
        'tf_half_pixel_for_nn, asymmetric and " "align_corners transformation modes!"',
        f"{CHECKERS} line 617 ({MSGS}); docs 10.15 Resize row",
        _attr_is(
            "coordinate_transformation_mode",
            ("align_corners", "tf_half_pixel_for_nn", "pytorch_half_pixel", "half_pixel", "asymmetric"),
            "half_pixel",
        ),
    ),
    Constraint(
        "resize-axes-iota",
        ("Resize",),
        "10.0",
        "11.1",
        "UNSUPPORTED_NODE",
        "importResize",
        "Assertion failed: !axesInterlacingNeeded: Currently, `axes` attribute is supported with `scales` "
        "tensor only when it's trivial i.e. it's an iota vector of same length as input rank.",
        f"{IMPORTERS} line 4894 ({MSGS}); docs 10.15 Resize row",
        _resize_axes,
    ),
    Constraint(
        "range-type",
        ("Range",),
        "9.0",
        "11.1",
        "UNSUPPORTED_NODE",
        "importRange",
        "Assertion failed: (isInt32 || isInt64 || isFp32): This version of TensorRT only supports int32, int64, "
        "and float input types for Range!",
        f"{IMPORTERS} line 4460 ({MSGS})",
        _range_type,
    ),
    Constraint(
        "float-network-input-shape-tensor",
        tuple(SHAPE_TENSOR_INPUTS),
        "9.0",
        "11.1",
        "INVALID_NODE",
        "parseNode",
        "Invalid Node - {node}\nITensor::getDimensions: Error Code 4: API Usage Error",
        f"{RTX}; ≤ 8.6: 'network input that is shape tensor must have type Int32' — {ERRORS} row 12",
        _float_network_shape_input,
    ),
    Constraint(
        "float-network-input-shape-tensor-8",
        tuple(SHAPE_TENSOR_INPUTS),
        "7.0",
        "8.6",
        "INVALID_NODE",
        "parseNode",
        "network input that is shape tensor must have type Int32",
        f"TensorRT validation ≤ 8.6 — {ERRORS} row 12",
        _float_network_shape_input,
    ),
    Constraint(
        "range-float-initializers",
        ("Range",),
        "7.0",
        "8.2",
        "UNSUPPORTED_NODE",
        "importRange",
        "Floating point inputs are only supported if `start`, `limit`, and `delta` inputs are initializers",
        "docs/operators.md 8.0-GA and 8.2-GA Range row (gone from 8.4-GA; 10.x takes float Range inputs computed "
        f"in the graph: {RTX})",
        _range_float_runtime,
    ),
    Constraint(
        "clip-type",
        ("Clip",),
        "9.0",
        "11.1",
        "UNSUPPORTED_NODE",
        "importClip",
        "Assertion failed: (type == DataType::kFLOAT || type == DataType::kHALF || type == DataType::kBF16 || "
        "type == DataType::kINT32 || type == DataType::kINT64): This version of TensorRT only supports "
        "floating-point, INT32, or INT64 inputs for Clip!",
        f"{IMPORTERS} line 647 ({MSGS})",
        _clip_type,
    ),
    Constraint(
        "mod-fmod-float",
        ("Mod",),
        "8.5",
        "11.1",
        "UNSUPPORTED_NODE_DATATYPE",
        "importMod",
        "Assertion failed: (input0->getType() == DataType::kINT32 || input0->getType() == DataType::kINT64): "
        "The fmod attribute is set to 0. Inputs cannot be of floating point types.",
        f"{IMPORTERS} line 3916 ({MSGS})",
        _mod_float,
    ),
    Constraint(
        "scatternd-reduction",
        ("ScatterND",),
        "8.2",
        "11.1",
        "UNSUPPORTED_NODE_ATTR",
        "importScatterND",
        'Assertion failed: mode == "none": ScatterND with reduction is not supported.',
        f"{IMPORTERS} line 5427 ({MSGS}); docs 10.15 ScatterND row — {ERRORS} row 20",
        _scatter_reduction,
    ),
    Constraint(
        "lp-p",
        ("LpPool", "LpNormalization"),
        "9.3",
        "11.1",
        "UNSUPPORTED_NODE",
        "checkLpPool",
        '(p == 1 || p == 2) && "Only L1 and L2 normalization are supported."',
        f"{CHECKERS} lines 481/490 ({MSGS})",
        _lp_p,
    ),
    Constraint(
        "layernorm-one-output",
        ("LayerNormalization",),
        "9.3",
        "11.1",
        "UNSUPPORTED_NODE",
        "emptyOutputChecker",
        "This version of TensorRT doesn't support mode than 1 outputs for LayerNormalization nodes!",
        f"docs 10.15 LayerNormalization row ('Only the first output `Y` is supported'); text: {RTX}",
        _extra_outputs,
    ),
    Constraint(
        "maxpool-indices",
        ("MaxPool",),
        "9.3",
        "11.1",
        "UNSUPPORTED_NODE",
        "emptyOutputChecker",
        "This version of TensorRT doesn't support mode than 1 outputs for MaxPool nodes!",
        f"docs 10.15 MaxPool row ('`Indices` output tensor unsupported'); text: {RTX}",
        _extra_outputs,
    ),
    Constraint(
        "attention-one-output",
        ("Attention",),
        "10.15",
        "11.1",
        "INVALID_NODE",
        "importAttention",
        "Assertion failed: node.output().size() == 1: TensorRT only supports Attention nodes with one output.",
        f"docs 10.15 Attention row (present_key, present_value, qk_matmul_output unsupported); text: {RTX}",
        _attention_outputs,
    ),
    Constraint(
        "attention-softcap",
        ("Attention",),
        "10.15",
        "11.1",
        "UNSUPPORTED_NODE",
        "checkAttention",
        'softcap == 0.0 && "Setting softcap is not supported in TensorRT Attention."',
        f"docs 10.15 Attention row (`softcap` unsupported); text: {RTX}",
        lambda node, facts: None if not _attr(node, "softcap", 0.0) else f"softcap={_attr(node, 'softcap')}",
    ),
    Constraint(
        "attention-softmax-precision",
        ("Attention",),
        "10.15",
        "11.1",
        "UNSUPPORTED_NODE",
        "checkAttention",
        '!hasSoftmaxPrecision && "Setting softmax precision is not supported in TensorRT Attention."',
        f"{RTX}",
        lambda node, facts: (
            "softmax_precision is set" if _attr(node, "softmax_precision") is not None else None
        ),
    ),
    Constraint(
        "attention-mask-with-causal",
        ("Attention",),
        "10.15",
        "11.1",
        "INVALID_NODE",
        "parseNode",
        "Invalid Node - {node}\nIAttention::setMask: Error Code 3: API Usage Error (Parameter check failed, "
        "condition: mAttentionOutputLayer.getParams().causalKind == CausalMaskKind::kNONE. Option mask cannot "
        "be used together with CausalMaskKind other than kNONE.)",
        f"{RTX}",
        _attention_mask_causal,
    ),
    Constraint(
        "attention-kv-shapes",
        ("Attention",),
        "10.15",
        "11.1",
        "INVALID_NODE",
        "parseNode",
        "Invalid Node - {node}\nITensor::getDimensions: Error Code 3: API Usage Error ({node}_AttentionInput: "
        "Key and Value must have the same shape)",
        f"{RTX}",
        _attention_kv_shapes,
    ),
    Constraint(
        "tensorscatter-mode",
        ("TensorScatter",),
        "10.15",
        "11.1",
        "UNSUPPORTED_NODE",
        "importTensorScatter",
        'Assertion failed: mode == "linear": Only linear mode is supported for now, got {detail}',
        f"{RTX}",
        lambda node, facts: None if _attr(node, "mode", "linear") == "linear" else _attr(node, "mode"),
    ),
    Constraint(
        "tensorscatter-rank",
        ("TensorScatter",),
        "10.15",
        "11.1",
        "UNSUPPORTED_NODE",
        "importTensorScatter",
        "Assertion failed: cacheDims == 4: The past_cache tensor is required to be 4D, got {detail}D.",
        f"docs 10.15 TensorScatter row ('`past_cache` and `update` must be 4D'); text: {RTX}",
        lambda node, facts: (
            None if facts.info(node.input[0]).rank in (None, 4) else facts.info(node.input[0]).rank
        ),
    ),
    Constraint(
        "celu-half",
        ("Celu",),
        "10.15",
        "11.1",
        "UNSUPPORTED_NODE",
        "importCelu",
        "Assertion failed: (firstTensor->getDimensions().nbDims == secondTensor->getDimensions().nbDims): The "
        "rank of operands should be the same adding inputs.",
        f"{RTX} (FP16/BF16 Celu fails in the importer although the table lists FP16, BF16)",
        _celu_half,
    ),
    Constraint(
        "if-branch-ranks",
        ("If",),
        "8.0",
        "11.1",
        "INVALID_NODE",
        "importIf",
        "Invalid Node - {node}\nIIfConditionalOutputLayer inputs must have the same shape.",
        f"docs/operators.md 10.15 If row (same rank); TensorRT IIfConditional validation — {ERRORS} row 10",
        _if_ranks,
        ("fold-constant-if",),
    ),
    Constraint(
        "unshaped-input",
        (),
        "7.0",
        "11.1",
        "INVALID_GRAPH",
        "importInput",
        "Input has no shape (rank unknown): TensorRT needs the rank of every network input.",
        f"ModelImporter.cpp importInput (rank required); builder profiles — {ERRORS} row 29",
        _unshaped_input,
        ("freeze-unshaped-input",),
    ),
]
CONSTRAINT_BY_ID = {c.id: c for c in CONSTRAINTS}
STATIC_FUNCS = ("check", "emptyOutputChecker", "poolingCheckHelper")
# the parser runs a node's static checkers, then its input-type check, then its importer: the first problem is the
# one it reports (check() walks the constraints in that order)
# ops whose table restriction on a constant input is checked by a dedicated constraint above
DEDICATED_CONST = {"TopK", "Clip", "Conv", "ConvTranspose", "Dropout", "Resize", "Upsample"}
# (op, input, since): table restrictions the real parser does not enforce (checked with TensorRT-RTX 1.7.1)
RTX_ACCEPTS = {("CumSum", "axis", "10.10")}

# The parser's own words for a table restriction "`<input>` must be an initializer / a build-time constant",
# by op family and version range: (ops, since, until, code, func, message, source)
CONST_INPUT_TEXTS = [
    (
        ("Squeeze", "Unsqueeze"),
        "10.10",
        "11.1",
        "INVALID_NODE",
        "parseNode",
        "Invalid Node - {node}\nITensor::getDimensions: Error Code 4: Shape Error ({lower} axis is not a constant)",
        f"{RTX}; docs 10.10+ {{op}} row — {ERRORS} row 9",
    ),
    (
        (
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
            "ReduceMax",
            "ReduceMean",
            "ReduceMin",
            "ReduceProd",
            "ReduceSum",
            "ReduceSumSquare",
        ),
        "10.15",
        "11.1",
        "UNSUPPORTED_NODE",
        "getReduceAxisMask",
        "Assertion failed: resolvedWeights(axesWeights): Axis input must resolve to a build-time constant (an "
        "initializer or a constant-foldable subgraph)!",
        f"{RTX} (the 10.10 text differs); docs 10.15 {{op}} row",
    ),
    (
        (
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
            "ReduceMax",
            "ReduceMean",
            "ReduceMin",
            "ReduceProd",
            "ReduceSum",
            "ReduceSumSquare",
        ),
        "7.0",
        "10.14",
        "UNSUPPORTED_NODE",
        "parseReduce",
        "Assertion failed: inputAxes.is_weights(): Axis input must be an initializer!",
        f"importerUtils.cpp:1649 @ 10.10-GA ({MSGS}); docs {{op}} row — {ERRORS} row 7",
    ),
    (
        ("STFT",),
        "10.15",
        "11.1",
        "UNSUPPORTED_NODE",
        "getStftScalarInitializer",
        "Assertion failed: input.is_weights(): frame_step must be an initializer!",
        f"{RTX}; docs 10.15 STFT row",
    ),
    (
        ("STFT",),
        "10.10",
        "10.14",
        "UNSUPPORTED_NODE",
        "importSTFT",
        "Assertion failed: inputs.at(1).is_weights(): FrameStep must be an initializer!",
        f"{IMPORTERS} line 5981 ({MSGS}); docs 10.10+ STFT row",
    ),
    (
        ("CumSum",),
        "7.0",
        "11.1",
        "UNSUPPORTED_NODE",
        "importCumSum",
        "Assertion failed: inputs.at(1).is_weights(): Axis input for CumSum must be an initializer!",
        f"onnx-tensorrt docs/faq.md; docs {{op}} row — {ERRORS} row 7",
    ),
]
ML_DOMAIN = "ai.onnx.ml"
# N-listed ops with no static checker, so they reach the plugin fallback (TensorRT-RTX 1.7.1 answers DFT so)
N_WITHOUT_CHECKER = {"DFT"}
# rules (rules/*.yaml) that repair an op the table marks N
N_OP_RULES = {
    "Unique": ("split-before-unsupported-tail",),
    "Compress": ("compress-constant-condition",),
    "CenterCropPad": ("center-crop-pad-decompose",),
    "BitShift": ("bitshift-decompose",),
}
# graph-input and Cast types: a table's header list (with its 'limited support' note) names what TensorRT takes
# ops that take UINT8 inputs although their table row does not list UINT8 (checked with TensorRT-RTX 1.7.1)
UINT8_OK_OPS = {"Cast", "CastLike", "Identity", "Constant", "Shape", "Size", "Equal", "QuantizeLinear"}


ELEMENTWISE = {
    "Add": "SUM",
    "Sub": "SUB",
    "Mul": "PROD",
    "Div": "DIV",
    "Max": "MAX",
    "Min": "MIN",
    "Pow": "POW",
    "Greater": "GREATER",
    "Less": "LESS",
}


def _schema_inputs(op: str, opset: int, domain: str = "") -> list[str]:
    try:
        return [i.name for i in onnx.defs.get_schema(op, opset, domain).inputs]
    except Exception:
        return []


class TensorRTStaticBackend:
    def __init__(self, version: str):
        self.version = resolve_version(version)
        self.id = f"tensorrt-static@{version}"
        self.data = support_data()["versions"][self.version]
        self.label = f"TensorRT {version} (predicted)"
        self.static_checkers = _vt(self.version) >= (9, 3)  # 9.3 added builtin_op_static_checkers.cpp
        self.types = set(self.data["data_types"])

    def availability(self) -> Availability:
        note = f"; {self.data['note']}" if self.data["note"] else ""
        return Availability(True, f"support table {self.data['source']}{note}")

    def _evidence(self, extra: str = "") -> Evidence:
        return Evidence("support table", f"{self.data['source']} @ TensorRT {self.version}" + extra)

    def _applies(self, since: str, until: str) -> bool:
        return _vt(since) <= _vt(self.version) <= _vt(until)

    def _plugin_fallback(self, node: NodeProto) -> tuple[Status, str, str, str] | None:
        """None when a standard plugin of this version imports the node, else the fallback's rejection."""
        found = STANDARD_PLUGINS.get(node.op_type)
        if found and _vt(self.version) >= _vt(found[0]):
            return None
        func = "checkFallbackPluginImporter" if self.static_checkers else "importFallbackPluginImporter"
        code = "INVALID_NODE" if self.static_checkers else "UNSUPPORTED_NODE"
        prefix = "" if self.static_checkers else "Assertion failed: "
        return Status.REJECTED, code, f"{prefix}{PLUGIN_MSG} ({func})", func

    def _const_input(self, node: NodeProto, facts: GraphFacts, row: dict):
        """A table restriction '`x` must be an initializer / build-time constant' that the node breaks."""
        if node.op_type in DEDICATED_CONST or not row.get("const_inputs"):
            return None
        names = _schema_inputs(node.op_type, opset_of(facts.model) or 13)
        for rule in row["const_inputs"]:
            if rule["input"] not in names:
                continue  # an attribute in this opset (e.g. Reduce axes before opset 18)
            if any(
                (op, name) == (node.op_type, rule["input"]) and _vt(self.version) >= _vt(since)
                for op, name, since in RTX_ACCEPTS
            ):
                continue
            k = names.index(rule["input"])
            x = node.input[k] if len(node.input) > k else ""
            if not x:
                continue
            strict = rule["kind"] == "initializer" and _vt(self.version) < (10, 0)
            ok = _weights(facts, x) if strict else _build_time_constant(facts, x)
            if ok:
                continue
            detail = f"input '{x}' is computed at run time; table: {node.op_type} {rule['text']}"
            for ops, since, until, code, func, msg, source in CONST_INPUT_TEXTS:
                if node.op_type in ops and self._applies(since, until):
                    text = msg.format(node=_node_name(node), lower=node.op_type.lower())
                    return code, f"{text} ({func}; {detail})", source.format(op=node.op_type)
            return (
                "UNSUPPORTED_NODE",
                f"{node.op_type}: {rule['text']} ({detail})",
                f"docs/operators.md {node.op_type} row @ {self.data['table']}",
            )
        return None

    def _types(self, node: NodeProto, facts: GraphFacts, row: dict):
        """Data types the parser refuses on this node: Cast targets, UINT8 inputs and intermediates."""
        if node.op_type == "Cast":
            to = TensorProto.DataType.Name(_attr(node, "to", 0))
            if to not in self.types:
                if self.static_checkers:
                    text = (
                        'convertDtype(onnxType, &newType) && "Unsupported data type for the Cast operator!"'
                    )
                    return "INVALID_NODE", f"{text} (checkCast; to={to})", f"{CHECKERS} line 207 ({MSGS})"
                return (
                    "UNSUPPORTED_NODE",
                    f"Assertion failed: Unsupported cast! (importCast; to={to})",
                    f"docs/operators.md data types @ {self.data['table']}",
                )
        if "UINT8" in self.types:
            uint8_in = [x for x in node.input if x and _dtype(facts, x) == "UINT8"]
            if uint8_in and node.op_type not in UINT8_OK_OPS and "UINT8" not in row.get("types", ""):
                if node.op_type in ELEMENTWISE and _vt(self.version) >= (10, 15):
                    name = _node_name(node)
                    return (
                        "INVALID_NODE",
                        f"Invalid Node - {name}\nITensor::getDimensions: Error Code 4: API Usage Error ({name}: "
                        f"ElementWiseOperation {ELEMENTWISE[node.op_type]} requires inputs with type kFLOAT, "
                        "kHALF, kBF16, kFP8, or kINT8, kINT32, or kINT64. But type is UInt8.) (parseNode)",
                        f"{RTX}; docs: UINT8 is only supported as network input or output tensor types",
                    )
                return (
                    "UNSUPPORTED_NODE",
                    "Assertion failed: status.is_success(): Found unsupported input type of UINT8 "
                    f"(checkNotInvalidType; input '{uint8_in[0]}')",
                    f"importerUtils.cpp:40 @ 10.10-GA ({MSGS}); docs: UINT8 is only supported as network "
                    "input or output tensor types",
                )
            out8 = [
                o for o in node.output if o and _dtype(facts, o) == "UINT8" and o not in facts.graph_outputs
            ]
            if out8 and node.op_type != "Constant" and _vt(self.version) >= (10, 0):
                return (
                    "UNSUPPORTED_NODE",
                    "Assertion failed: legalUINT8: TensorRT does not support UINT8 types for intermediate "
                    f"tensors! (parseNode; output '{out8[0]}')",
                    f"ModelImporter.cpp:304 @ 10.10-GA ({MSGS}); docs: UINT8 only as network input/output",
                )
        return None

    def _verdict_for(
        self, node: NodeProto, facts: GraphFacts
    ) -> tuple[Status, str, str, tuple[str, ...], str]:
        """(status, code, message, rules, source)"""
        domain = node.domain or ""
        ops = self.data["ops"]
        # the importer map is keyed by op type alone: a standard op name in another domain is imported as the
        # standard op (checked with TensorRT-RTX 1.7.1: com.example::Relu parses); ai.onnx.ml ops have no importer
        if domain == ML_DOMAIN or node.op_type not in ops:
            found = self._plugin_fallback(node)
            rules = {
                ML_DOMAIN: ("ml-scaler-decompose",) if node.op_type == "Scaler" else (),
                "mmcv": ("mmcv-deformconv-to-plugin",),
            }.get(domain, ())
            if node.op_type == "DeformConv":  # no DeformConv importer before 10.2: its plugin is 8.6+
                rules = ("deformconv-to-plugin",)
            if found is None:
                since, source = STANDARD_PLUGINS[node.op_type]
                return (
                    Status.SUPPORTED,
                    "",
                    f"imported by the standard plugin {node.op_type} (TensorRT ≥ {since})",
                    (),
                    source,
                )
            status, code, message, func = found
            return status, code, message, rules, f"ModelImporter.cpp: no importer for {node.op_type} → {func}"
        row = ops[node.op_type]
        if not row["supported"]:
            rules = N_OP_RULES
            if self.static_checkers and node.op_type not in N_WITHOUT_CHECKER:
                return (
                    Status.REJECTED,
                    "UNSUPPORTED_NODE",
                    f"false (check{node.op_type})",
                    rules.get(node.op_type, ()),
                    f"N in the table; onnxOpCheckers.cpp STATIC_CHECK(false) for N-listed ops — {ERRORS} row 3",
                )
            status, code, message, func = self._plugin_fallback(node) or (Status.REJECTED, "", "", "")
            return (
                status,
                code,
                message,
                rules.get(node.op_type, ()),
                f"N in the table: no importer, plugin fallback ({func}) — {ERRORS} row 1",
            )
        inner = self._subgraph_problem(node) if node.op_type in ("If", "Loop", "Scan") else None
        if inner:
            return inner
        for static in (True, False):
            broken = []  # static checkers report every problem of a node; an importer stops at its first
            for c in CONSTRAINTS:
                if c.func.startswith(STATIC_FUNCS) is not static:
                    continue
                if (not c.ops or node.op_type in c.ops) and c.applies(self.version):
                    detail = c.check(node, facts)
                    if detail:
                        text = c.message.format(node=_node_name(node), detail=detail)
                        broken.append((c, f"{text} ({c.func}; {detail})"))
                        if not static:
                            break
            if broken:
                c = broken[0][0]
                rules = tuple(dict.fromkeys(r for b, _ in broken for r in b.rules))
                return Status.REJECTED, c.code, "\n".join(m for _, m in broken), rules, c.source
            found = self._types(node, facts, row) if static else self._const_input(node, facts, row)
            if found:
                code, message, source = found
                return Status.REJECTED, code, message, (), source
        if _vt(self.version) < (9, 0) and any(True for _ in _int64_out_of_range(facts, node)):
            return (
                Status.SUPPORTED,
                "",
                "supported; note: INT64 bounds beyond INT32 are clamped to INT32 when cast down, which does "
                "not change a Slice's result (the parser logs 'One or more weights outside the range of INT32 "
                "was clamped' as a warning)",
                ("int64-slice-bounds",) if node.op_type == "Slice" else (),
                CONSTRAINT_BY_ID["int64-clamped"].source,
            )
        return Status.SUPPORTED, "", "", (), ""

    def _subgraph_problem(self, node: NodeProto):
        """The static checkers recurse into If/Loop/Scan bodies: an op there without importer rejects the node."""
        for a in node.attribute:
            graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            for g in graphs:
                for n in g.node:
                    row = self.data["ops"].get(n.op_type)
                    if n.domain == ML_DOMAIN or row is None:
                        found = self._plugin_fallback(n)
                        if found:
                            return (
                                found[0],
                                found[1],
                                f"{found[2]} (in the body: {n.op_type})",
                                (),
                                found[3],
                            )
                    elif not row["supported"]:
                        if self.static_checkers:
                            return (
                                Status.REJECTED,
                                "UNSUPPORTED_NODE",
                                f"false (check{n.op_type}; in the body of {node.op_type})",
                                (),
                                f"N in the table; static checkers recurse into subgraphs ({RTX})",
                            )
                        found = self._plugin_fallback(n)
                        return (found[0], found[1], f"{found[2]} (in the body: {n.op_type})", (), found[3])
                    if n.op_type in ("If", "Loop", "Scan"):
                        deeper = self._subgraph_problem(n)
                        if deeper:
                            return deeper
        return None

    def _model_level(self, model: ModelProto, facts: GraphFacts) -> tuple[list[str], list[str], dict]:
        """(blockers, warnings, node index -> (code, message, rules, source)) for what is not one node's fault."""
        blockers, warnings, per_node = [], [], {}
        opset = opset_of(model) or 0
        if opset > self.data["max_opset"]:
            warnings.append(
                f"warning: the model uses opset {opset}; the TensorRT {self.version} table covers opsets "
                f"{self.data['min_opset']}–{self.data['max_opset']} (newer op versions may not import; the "
                "parser itself does not refuse the opset number)"
            )
        for x in facts.graph_inputs:
            info = facts.info(x)
            dtype = _dtype(facts, x)
            problem = None
            if info.shape is None:
                c = CONSTRAINT_BY_ID["unshaped-input"]
                problem = (
                    c.code,
                    f"Input {x} has no shape (rank unknown): TensorRT needs the rank of every network input. "
                    "(importInput)",
                    c.rules,
                    c.source,
                )
            elif dtype and dtype not in self.types:
                problem = (
                    "UNSUPPORTED_NODE",
                    'Assertion failed: convertDtype(onnxDtype.elem_type(), &trtDtype) && "Failed to convert '
                    f'ONNX date type to TensorRT data type." (importInput; input {x} is {dtype})',
                    (),
                    f"ModelImporter.cpp:421 @ 10.10-GA ({MSGS}); data types of docs/operators.md @ "
                    f"{self.data['table']}: {', '.join(sorted(self.types))}",
                )
            if problem:
                blockers.append(f"error: {problem[1]}")
                if (
                    info.shape is None
                ):  # a type problem is the input's alone; a missing rank stops its consumers
                    for i in facts.consumers.get(x, []):
                        per_node.setdefault(i, problem)
        return blockers, warnings, per_node

    def check(self, model: ModelProto, base_dir: str | None = None) -> Report:
        t0 = time.perf_counter()
        facts = GraphFacts.of(model)
        report = Report(self.id, self.label, self.version)
        blockers, warnings, per_node = self._model_level(model, facts)
        for i, (key, node) in enumerate(zip(facts.keys, model.graph.node)):
            status, code, message, rules, source = self._verdict_for(node, facts)
            if (
                i in per_node and status is not Status.REJECTED
            ):  # the node's own problem is the more useful one
                code, message, rules, source = per_node[i]
                status = Status.REJECTED
            evidence = self._evidence(f"; {source}" if source else "")
            report.verdicts.append(
                Verdict(key, i, node.op_type, status, message, code, evidence, tuple(rules))
            )
        report.messages = blockers + warnings
        report.accepted = not report.rejected and not blockers
        report.seconds = time.perf_counter() - t0
        return report

    def build(self, model: ModelProto, options: BuildOptions, progress=None, base_dir=None) -> BuildReport:
        return BuildReport(
            self.id, False, error="a predicted target cannot build; use the `tensorrt` backend"
        )


def make(version: str) -> TensorRTStaticBackend:
    return TensorRTStaticBackend(version)
