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
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper

from surgery.backends.base import Availability, BuildOptions, BuildReport, Evidence, Report, Status, Verdict
from surgery.graph import GraphFacts, opset_of

DATA = Path(__file__).resolve().parent / "data" / "tensorrt_support.json"
ERRORS = "shared/reference/tensorrt-parser-errors.md"
PLUGIN_MSG = 'creator && "Plugin not found, are the plugin name, version, and namespace correct?"'
# Standard plugins the parser's fallback importer finds by op type (plugin library loaded), with the first
# TensorRT version that ships each. Source: NVIDIA/TensorRT plugin/README.md and CHANGELOG.md per release.
STANDARD_PLUGINS = {
    "ModulatedDeformConv2d": "8.6",
    "EfficientNMS_TRT": "8.0",
    "BatchedNMS_TRT": "8.0",
    "BatchedNMSDynamic_TRT": "8.0",
    "ROIAlign_TRT": "8.5",
    "MultilevelCropAndResize_TRT": "8.0",
    "PyramidROIAlign_TRT": "8.0",
    "GridAnchor_TRT": "8.0",
    "InstanceNormalization_TRT": "8.0",
    "ScatterND": "8.0",
    "Proposal": "8.0",
    "ResizeNearest_TRT": "8.0",
    "Region_TRT": "8.0",
    "Reorg_TRT": "8.0",
    "NMS_TRT": "8.0",
}


def _vt(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


@cache
def support_data() -> dict:
    return json.loads(DATA.read_text())


SUPPORTED_VERSIONS = sorted(json.loads(DATA.read_text())["versions"], key=_vt)
ALIASES = {"9": "9.3", "10": "10.15", "11": "11.1", "11.0": "11.1"}


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


def _attr(node: NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return default


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


def _int64_data(node, facts):
    """INT64 constants outside the INT32 range that carry data (a Slice bound of INT64_MAX is harmless)."""
    i32 = np.iinfo(np.int32)
    for k, x in enumerate(node.input):
        t = facts.initializers.get(x)
        if t is None or t.data_type != TensorProto.INT64 or t.data_location == TensorProto.EXTERNAL:
            continue
        a = numpy_helper.to_array(t)
        if a.size and (a.max() > i32.max or a.min() < i32.min):
            if node.op_type == "Slice" and k in (1, 2):
                continue
            return f"'{x}' = {a.reshape(-1)[:4].tolist()} is clamped to the INT32 range, changing results"
    return None


def _dropout_training(node, facts):
    if len(node.input) > 2 and node.input[2]:
        t = facts.initializers.get(node.input[2])
        if t is None or bool(numpy_helper.to_array(t).reshape(-1)[0]):
            return f"training_mode input '{node.input[2]}' is not a constant False"
    return None


def _bn_training(node, facts):
    return "training_mode=1" if _attr(node, "training_mode", 0) else None


def _pool_dilations(node, facts):
    d = _attr(node, "dilations")
    return f"dilations {d}" if d and any(x != 1 for x in d) else None


def _resize_antialias(node, facts):
    return "antialias=1" if _attr(node, "antialias", 0) else None


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
        "11.1",
        "UNSUPPORTED_NODE_DYNAMIC",
        "importSqueeze",
        "Assertion failed: !isDynamic(shape): Cannot infer squeeze dimensions from a dynamic shape! Please "
        "re-export your model with the Squeeze axes input set.",
        f"onnx-tensorrt onnxOpImporters.cpp:5894 @ 10.10-GA — {ERRORS} row 8",
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
        "dropout-training",
        ("Dropout",),
        "7.0",
        "11.1",
        "UNSUPPORTED_NODE",
        "importDropout",
        "Assertion failed: !trainingMode[0]: TensorRT does not support the Dropout operator in training mode.",
        f"docs/operators.md 10.15 Dropout row; TensorRT-RTX 1.7 parser text — {ERRORS} row 21",
        _dropout_training,
        ("dropout-training-mode", "inference-mode"),
    ),
    Constraint(
        "batchnorm-training",
        ("BatchNormalization",),
        "7.0",
        "11.1",
        "UNSUPPORTED_NODE",
        "checkBatchNormalization",
        "This version of TensorRT does not support training_mode == 1 in BatchNormalization.",
        f"onnxOpCheckers.cpp @ 10.10-GA — {ERRORS} row 21",
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
        f"onnxOpCheckers.cpp @ 10.10-GA — {ERRORS} row 18",
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
        _resize_antialias,
    ),
    Constraint(
        "if-branch-ranks",
        ("If",),
        "8.0",
        "11.1",
        "INVALID_NODE",
        "importIf",
        "Invalid Node - If\nIIfConditionalOutputLayer inputs must have the same shape.",
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
STANDARD_DOMAINS = ("", "ai.onnx")


class TensorRTStaticBackend:
    def __init__(self, version: str):
        self.version = resolve_version(version)
        self.id = f"tensorrt-static@{version}"
        self.data = support_data()["versions"][self.version]
        self.label = f"TensorRT {version} (predicted)"
        self.static_checkers = _vt(self.version) >= (9, 3)  # 9.3 added builtin_op_static_checkers.cpp

    def availability(self) -> Availability:
        note = f"; {self.data['note']}" if self.data["note"] else ""
        return Availability(True, f"support table {self.data['source']}{note}")

    def _evidence(self, extra: str = "") -> Evidence:
        return Evidence("support table", f"{self.data['source']} @ TensorRT {self.version}" + extra)

    def _plugin_fallback(self, node: NodeProto) -> tuple[Status, str, str] | None:
        since = STANDARD_PLUGINS.get(node.op_type)
        if since and _vt(self.version) >= _vt(since):
            return None
        func = "checkFallbackPluginImporter" if self.static_checkers else "importFallbackPluginImporter"
        code = "INVALID_NODE" if self.static_checkers else "UNSUPPORTED_NODE"
        prefix = "" if self.static_checkers else "Assertion failed: "
        return Status.REJECTED, code, f"{prefix}{PLUGIN_MSG} ({func})"

    def _verdict_for(
        self, node: NodeProto, facts: GraphFacts
    ) -> tuple[Status, str, str, tuple[str, ...], str]:
        """(status, code, message, rules, source)"""
        domain = node.domain or ""
        ops = self.data["ops"]
        if domain not in STANDARD_DOMAINS or node.op_type not in ops:
            found = self._plugin_fallback(node)
            rules = {
                "ai.onnx.ml": ("ml-scaler-decompose",) if node.op_type == "Scaler" else (),
                "mmcv": ("mmcv-deformconv-to-plugin",),
            }.get(domain, ())
            if node.op_type == "DeformConv":
                rules = ("deformconv-to-plugin",)
            if found is None:
                return (
                    Status.SUPPORTED,
                    "",
                    "imported through the standard plugin library",
                    (),
                    "plugin README",
                )
            return (*found, rules, "ModelImporter.cpp: no importer registered → FallbackPluginImporter")
        row = ops[node.op_type]
        if not row["supported"]:
            rules = {
                "Compress": ("compress-constant-condition",),
                "CenterCropPad": ("center-crop-pad-decompose",),
                "BitShift": ("bitshift-decompose",),
                "Unique": ("split-before-unsupported-tail",),
            }
            if self.static_checkers:
                return (
                    Status.REJECTED,
                    "UNSUPPORTED_NODE",
                    f"false (check{node.op_type})",
                    rules.get(node.op_type, ()),
                    "onnxOpCheckers.cpp STATIC_CHECK(false) for N-listed ops",
                )
            found = self._plugin_fallback(node)
            return (*found, rules.get(node.op_type, ()), "N in the table: no importer, plugin fallback")
        for c in CONSTRAINTS:
            if (not c.ops or node.op_type in c.ops) and c.applies(self.version):
                detail = c.check(node, facts)
                if detail:
                    return Status.REJECTED, c.code, f"{c.message} ({c.func}; {detail})", c.rules, c.source
        return Status.SUPPORTED, "", "", (), ""

    def check(self, model: ModelProto, base_dir: str | None = None) -> Report:
        t0 = time.perf_counter()
        facts = GraphFacts.of(model)
        report = Report(self.id, self.label, self.version)
        for i, (key, node) in enumerate(zip(facts.keys, model.graph.node)):
            status, code, message, rules, source = self._verdict_for(node, facts)
            evidence = self._evidence(f"; {source}" if source else "")
            report.verdicts.append(
                Verdict(key, i, node.op_type, status, message, code, evidence, tuple(rules))
            )
        opset = opset_of(model) or 0
        if opset > self.data["max_opset"]:
            report.messages.append(
                f"the model uses opset {opset}; TensorRT {self.version}'s table covers opsets up to "
                f"{self.data['max_opset']} (newer op versions may not import)"
            )
        report.accepted = not report.rejected
        report.seconds = time.perf_counter() - t0
        return report

    def build(self, model: ModelProto, options: BuildOptions, progress=None) -> BuildReport:
        return BuildReport(
            self.id, False, error="a predicted target cannot build; use the `tensorrt` backend"
        )


def make(version: str) -> TensorRTStaticBackend:
    return TensorRTStaticBackend(version)
