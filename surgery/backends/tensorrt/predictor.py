"""Predicted TensorRT parser verdicts for a chosen TensorRT version, from versioned, cited data in this repo:

  * the operator table of that version (data/tensorrt_support.json, made from onnx-tensorrt's docs/operators.md
    per branch by scripts/build_trt_support.py; each distinct table stored once);
  * the parser's checks (data/checks.yaml): one keyword record per check with its ops, versions, stage,
    error code, function, our explanation, the source of the fact, a fixture, and the parser's exact words where
    they are known: recorded from a real TensorRT-RTX run on the fixture (data/recorded-tensorrt-rtx.json,
    by scripts/record_trt_words.py) or as they stand in the parser's source at a tag.

The tests a record names are the functions in TESTS below: each returns None when the node passes, else the
values its words and explanation need ({"detail": ...} at least). Parsers from 9.3 run static checkers that
report every problem of a node; importers stop at their first problem.
"""

from __future__ import annotations

import json
import string
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import onnx
import yaml
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper

from surgery.backends.base import (
    Availability,
    BuildOptions,
    BuildReport,
    Evidence,
    Message,
    Report,
    Stage,
    Status,
    Verdict,
)
from surgery.graph import BODY_OPS, GraphFacts, beyond_int32, cycle_nodes, opset_of

DATA_DIR = Path(__file__).resolve().parent / "data"
TABLES_PATH = DATA_DIR / "tensorrt_support.json"
CHECKS_PATH = DATA_DIR / "checks.yaml"
RECORDED_PATH = DATA_DIR / "recorded-tensorrt-rtx.json"
PLUGINS_PATH = DATA_DIR / "plugins.json"
VERSIONS_PATH = DATA_DIR / "versions.json"
ML_DOMAIN = "ai.onnx.ml"


@cache
def version_facts() -> dict:
    """Cut-offs and op lists beside the tables (data/versions.json, each with its source)."""
    return json.loads(VERSIONS_PATH.read_text())


LOCAL_FUNCTIONS_SINCE = version_facts()["local_functions_since"]["version"]
N_WITHOUT_CHECKER = set(version_facts()["no_static_checker"]["ops"])
UINT8_OK_OPS = set(version_facts()["uint8_input_ops"]["ops"])
UINT8_OUTPUT_OK_OPS = set(version_facts()["uint8_output_ops"]["ops"])
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
STATIC_FUNCS = ("check", "emptyOutputChecker", "poolingCheckHelper")
# ops whose table restriction on a constant input has a dedicated check of its own in checks.yaml
DEDICATED_CONST = {"TopK", "Clip", "Conv", "ConvTranspose", "Dropout", "Resize", "Upsample"}


def _vt(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


@cache
@cache
def support_data() -> dict:
    return json.loads(TABLES_PATH.read_text())


SUPPORTED_VERSIONS = sorted(support_data()["versions"], key=_vt)
# a major version alone is its newest minor version with data
ALIASES = {
    major: [v for v in SUPPORTED_VERSIONS if v.split(".")[0] == major][-1] for major in ("8", "9", "10", "11")
}


def resolve_version(version: str) -> str:
    v = ALIASES.get(version, version)
    if v not in SUPPORTED_VERSIONS:
        raise ValueError(
            f"no support data for TensorRT {version}. Note: available: {', '.join(SUPPORTED_VERSIONS)}"
        )
    return v


def nearest_version(version: str) -> str:
    """The newest version with support data at or before `version` (a live TensorRT's "10.13.0.35"), else the
    newest of all (TensorRT-RTX numbers its releases apart: its parser follows the newest onnx-tensorrt)."""
    try:
        major_minor = tuple(int(x) for x in str(version).split(".")[:2])
    except ValueError:
        return SUPPORTED_VERSIONS[-1]
    older = [v for v in SUPPORTED_VERSIONS if _vt(v) <= major_minor]
    return older[-1] if older and major_minor >= (8, 0) else SUPPORTED_VERSIONS[-1]


def version_table(version: str) -> dict:
    """The operator table a version uses, with the ops its changelog adds."""
    entry = support_data()["versions"][version]
    table = support_data()["tables"][entry["table"]]
    return {**table, **entry, "ops": {**table["ops"], **entry["added_ops"]}}


# -- the standard plugin library (data/plugins.json) ----------------------------------------------------


@cache
def plugin_data() -> dict:
    return json.loads(PLUGINS_PATH.read_text())


def shipped(entry: dict, version: str) -> bool:
    """Whether the TensorRT `version` ships this standard plugin creator."""
    return version in entry["shipped"]


def standard_plugin(name: str, plugin_version: str, namespace: str, version: str) -> dict | None:
    """The standard plugin creator the fallback importer finds for a node of op type `name` on TensorRT `version`
    (the node's plugin_version / plugin_namespace attributes, defaults "1" and ""), else None."""
    for e in plugin_data()["plugins"]:
        if (e["name"], e["version"], e["namespace"]) == (name, plugin_version, namespace) and shipped(
            e, version
        ):
            return e
    return None


def plugin_history(name: str) -> list[dict]:
    """Every version of the standard plugin creator `name` the data knows (empty: not a standard plugin)."""
    return [e for e in plugin_data()["plugins"] if e["name"] == name]


def standard_plugin_names(version: str | None = None) -> set[str]:
    """Creator names of the standard plugin library: of `version`, or of any version."""
    return {e["name"] for e in plugin_data()["plugins"] if version is None or shipped(e, version)}


def plugin_importers() -> dict[str, str]:
    """Standard ops whose importer creates a standard plugin: op type -> plugin creator name."""
    return {op: row["plugin"] for op, row in plugin_data()["importers"].items()}


def removed_after(name: str, version: str) -> tuple[str, dict] | None:
    """(the last version that shipped it, its entry) when `name` is a standard plugin that `version` no longer
    ships but an older version did."""
    older = [(v, e) for e in plugin_history(name) for v in e["shipped"] if _vt(v) < _vt(version)]
    if not older or any(shipped(e, version) for e in plugin_history(name)):
        return None
    return max(older, key=lambda x: _vt(x[0]))


# -- the check records -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Words:
    """The backend's exact text for a version range, as a template over the check's values, and where from."""

    since: str
    until: str
    template: str
    source: str  # where the text was recorded or stands


@dataclass(frozen=True)
class Check:
    id: str
    ops: tuple[str, ...]
    since: str
    until: str
    stage: str
    code: str
    func: str
    test: str
    args: dict
    explanation: str
    words: tuple[Words, ...]
    source: str
    fixture: str
    unshape: tuple[str, ...] = ()
    reproduces_on_rtx: bool = False
    fixture_versions: tuple[str, str] | None = (
        None  # where the fixture is refused, when narrower than versions
    )

    def applies(self, version: str) -> bool:
        return _vt(self.since) <= _vt(version) <= _vt(self.until)

    def words_for(self, version: str) -> Words | None:
        return next((w for w in self.words if _vt(w.since) <= _vt(version) <= _vt(w.until)), None)


def _range(text: str) -> tuple[str, str]:
    lo, _, hi = str(text).partition("-")
    return lo.strip(), (hi or lo).strip()


@cache
def recorded_words() -> dict:
    return json.loads(RECORDED_PATH.read_text()) if RECORDED_PATH.exists() else {"words": {}}


@cache
def load_checks() -> tuple[Check, ...]:
    recorded = recorded_words()
    with_what = recorded.get("recorded_with", "TensorRT-RTX")
    on = recorded.get("recorded_on", "")
    out = []
    for rec in yaml.safe_load(CHECKS_PATH.read_text()):
        words = []
        for w in rec.get("words") or []:
            lo, hi = _range(w["versions"])
            if w.get("recorded"):
                got = recorded["words"].get(rec["id"])
                if got is None:
                    continue  # not recorded (yet): our explanation only
                what = "builder" if w["recorded"] == "builder" else "parser"
                source = f"recorded from {with_what}'s {what} on this check's fixture, {on}"
                words.append(Words(lo, hi, w.get("template") or _escape(got["text"]), source))
            else:  # not from a run: say so, so that it reads apart from recorded words
                words.append(Words(lo, hi, w["text"], f"as written in the parser's source, {w['from']}"))
        lo, hi = _range(rec["versions"])
        out.append(
            Check(
                rec["id"],
                tuple(rec.get("ops") or ()),
                lo,
                hi,
                rec["stage"],
                rec["code"],
                rec["func"],
                rec["test"],
                dict(rec.get("args") or {}),
                rec["explanation"],
                tuple(words),
                rec["source"],
                rec["fixture"],
                tuple(rec.get("unshape") or ()),
                bool(rec.get("reproduces_on_rtx")),
                _range(rec["fixture_versions"]) if rec.get("fixture_versions") else None,
            )
        )
    return tuple(out)


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


@cache
def check_by_id() -> dict[str, Check]:
    return {c.id: c for c in load_checks()}


def fixture_model(check: Check) -> ModelProto:
    """The check's fixture as a model (ONNX text format; `unshape` inputs lose their declared shape)."""
    model = onnx.parser.parse_model(check.fixture)
    for vi in model.graph.input:
        if vi.name in check.unshape:
            vi.type.tensor_type.ClearField("shape")
    return model


class _Blank(dict):
    def __missing__(self, key: str) -> str:
        return "?"


def _fill(template: str, values: dict, *, strict: bool) -> str:
    """The template with the values; strict: '' when a value the template needs is missing."""
    try:
        return template.format_map(values if strict else _Blank(values))
    except (KeyError, IndexError, ValueError):
        return ""


def _needs(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f}


# -- the tests the records name ------------------------------------------------------------------------------------


def _build_time_constant(facts: GraphFacts, name: str) -> bool:
    """Weights, or computable from constants only (what 10.x resolves by folding its shape tensors)."""
    return facts.is_weights(name) or facts.is_constant(name)


def _attr(node: NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return default


def parser_node_name(node: NodeProto) -> str:
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


def _input(node: NodeProto, index: int) -> str:
    return node.input[index] if len(node.input) > index else ""


def t_scales_computed(node, facts):
    idx = 1 if node.op_type == "Upsample" or opset_of(facts.model) == 10 else 2
    x = _input(node, idx)
    if x and not facts.is_weights(x):
        return {"detail": f"'{x}' is computed by the graph", "input": x}
    return None


def t_input_computed(node, facts, index):
    x = _input(node, index)
    if x and not facts.is_weights(x):
        return {"detail": f"'{x}' (input {index}) is computed by the graph", "input": x}
    return None


def t_input_not_build_constant(node, facts, index, dtypes=None):
    x = _input(node, index)
    if x and not _build_time_constant(facts, x) and (dtypes is None or _dtype(facts, x) in dtypes):
        where = "a graph input" if x in facts.graph_inputs else "computed at run time"
        return {"detail": f"'{x}' (input {index}) is {where}", "input": x}
    return None


def t_uint8_not_from_quantize(node, facts):
    x = _input(node, 0)
    p = facts.producer_of(x) if x else None
    if _dtype(facts, x) == "UINT8" and (p is None or p.op_type != "QuantizeLinear"):
        where = (
            "a graph input"
            if x in facts.graph_inputs
            else "an initializer"
            if x in facts.initializers
            else ""
        )
        return {"detail": f"'{x}' is UINT8" + (f" ({where})" if where else ""), "input": x}
    return None


def t_squeeze_without_axes_dynamic(node, facts):
    has_axes = _input(node, 1) or _attr(node, "axes") is not None
    info = facts.info(node.input[0])
    if not has_axes and (info.shape is None or info.is_dynamic):
        return {"detail": f"'{node.input[0]}' has the dynamic shape {info.shape_str()}"}
    return None


def int64_out_of_int32(facts: GraphFacts, node: NodeProto):
    """(input index, name, first values) of INT64 constants of `node` with values outside the INT32 range."""
    for k, x in enumerate(node.input):
        t = facts.weights_tensor(x)
        if t is not None and beyond_int32(t).size:
            yield k, x, numpy_helper.to_array(t).reshape(-1)[:4].tolist()


def t_int64_data_out_of_int32(node, facts):
    """INT64 constants outside the INT32 range that carry data (a Slice bound of INT64_MAX is harmless)."""
    for k, x, values in int64_out_of_int32(facts, node):
        if node.op_type == "Slice" and k in (1, 2):
            continue
        return {"detail": f"'{x}' = {values}", "input": x}
    return None


def t_constant_true(node, facts, index):
    t = facts.initializers.get(_input(node, index))
    if t is not None and bool(numpy_helper.to_array(t).reshape(-1)[0]):
        return {"detail": f"input '{node.input[index]}' is True"}
    return None


def t_attr_not_in(node, facts, name, allowed, default):
    v = _attr(node, name, default)
    return None if v in allowed else {"detail": f"{name}={v!r}", "value": v}


def t_attr_present(node, facts, name):
    return {"detail": f"{name} is set"} if _attr(node, name) is not None else None


def t_pool_dilations(node, facts):
    d = _attr(node, "dilations")
    return {"detail": f"dilations {d}"} if d and any(x != 1 for x in d) else None


def t_extra_outputs_used(node, facts):
    """Outputs after the first that something reads (unread ones pass: checked with TensorRT-RTX 1.7.1)."""
    extra = [o for o in node.output[1:] if o and (o in facts.graph_outputs or facts.consumers.get(o))]
    return {"detail": f"outputs {extra} are used"} if extra else None


def t_more_than_one_output(node, facts):
    n = len([o for o in node.output if o])
    return {"detail": f"{n} outputs"} if n > 1 else None


def t_lp_p(node, facts):
    p = _attr(node, "p")  # the parser reads no ONNX default for LpPool: a missing p fails (observed in RTX)
    if node.op_type == "LpNormalization" and p is None:
        p = 2
    return None if p in (1, 2) else {"detail": f"p={p}"}


def t_resize_axes_not_iota(node, facts):
    axes = _attr(node, "axes")
    rank = facts.info(node.input[0]).rank
    if axes is None or not _input(node, 2) or rank is None:
        return None
    norm = [a % rank for a in axes]
    if norm == list(range(rank)):
        return None
    return {"detail": f"axes={list(axes)} with a scales input on a rank-{rank} input"}


def t_input_dtype_in(node, facts, index, dtypes):
    t = _dtype(facts, _input(node, index))
    if t in dtypes:
        rank = facts.info(node.input[index]).rank
        return {
            "detail": f"input type {t}",
            "trt_type": _trt_dtype(t),
            "rank": rank if rank is not None else "?",
        }
    return None


def t_input_dtype_not_in(node, facts, index, dtypes):
    t = _dtype(facts, _input(node, index))
    if t and t not in dtypes:
        return {"detail": f"input type {t}", "trt_type": _trt_dtype(t)}
    return None


def t_input_rank_not(node, facts, index, rank):
    got = facts.info(_input(node, index)).rank
    if got is not None and got != rank:
        return {"detail": f"input {index} has rank {got}", "rank": got}
    return None


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
# Inputs the builder also takes as shape tensors: an INT32/INT64 graph input reaching one needs an optimization
# profile ("Network has dynamic or shape inputs, but no optimization profile has been defined", TensorRT-RTX
# 1.7.1 on the onnx node tests of these ops).
SHAPE_INPUTS_AT_BUILD = {
    **SHAPE_TENSOR_INPUTS,
    "Slice": (1, 2, 3, 4),
    "Pad": (1, 3),
    "TopK": (1,),
    "Split": (1,),
    "CumSum": (1,),
    "Loop": (0,),
    "HannWindow": (0,),
    "HammingWindow": (0,),
    "BlackmanWindow": (0,),
}
SHAPE_PATH_LIMIT = 64  # tensors followed from one input: shape arithmetic is short


def shape_tensor_reader(facts: GraphFacts, name: str) -> NodeProto | None:
    """The node that reads `name` (an INT32/INT64 graph input), or a small tensor computed from it, as a shape:
    its value is needed when the engine is built. Follows Cast/Concat/Gather/arithmetic on rank ≤ 1 tensors of
    any type (a window size cast to float, divided and rounded, then cast back, is still one: TensorRT-RTX 1.7.1
    on the expanded window-function and Range node tests); None when no such reader is found."""
    seen, todo = {name}, [name]
    while todo and len(seen) <= SHAPE_PATH_LIMIT:
        t = todo.pop()
        for n in facts.consumers_of(t):
            if any(_input(n, k) == t for k in SHAPE_INPUTS_AT_BUILD.get(n.op_type, ())):
                return n
            for o in n.output:
                info = facts.info(o) if o else None
                if (
                    info is not None
                    and o not in seen
                    and _dtype(facts, o) not in ("", "STRING")
                    and info.rank is not None
                    and info.rank <= 1
                ):
                    seen.add(o)
                    todo.append(o)
    return None


def t_float_input_as_shape(node, facts):
    for k in SHAPE_TENSOR_INPUTS.get(node.op_type, ()):
        x = _input(node, k)
        if x in facts.graph_inputs and _dtype(facts, x) in ("FLOAT", "FLOAT16", "DOUBLE", "BFLOAT16"):
            return {"detail": f"graph input '{x}' is {_dtype(facts, x)}", "input": x}
    return None


def t_range_float_computed(node, facts):
    if _dtype(facts, node.input[0]) not in ("FLOAT", "DOUBLE"):
        return None
    computed = [x for x in node.input[:3] if x and not _build_time_constant(facts, x)]
    return {"detail": f"float inputs {computed} are computed at run time"} if computed else None


def t_mod_float_without_fmod(node, facts):
    t = _dtype(facts, node.input[0])
    if _attr(node, "fmod", 0) == 0 and t in ("FLOAT", "FLOAT16", "BFLOAT16", "DOUBLE"):
        return {"detail": f"fmod=0 on {t}", "trt_type": _trt_dtype(t)}
    return None


LOW_PRECISION = {"FLOAT8E4M3FN": "FP8", "INT4": "Int4", "UINT4": "UInt4", "FLOAT4E2M1": "FP4"}
# ONNX ops whose TensorRT layer may read / make FP8, INT4, FP4 tensors (Shuffle: the reshaping ops)
SHUFFLE_OPS = {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze"}
READS_LOW = {"DequantizeLinear", "Concat", "Shape", "Identity", *SHUFFLE_OPS}
MAKES_LOW = {"QuantizeLinear", "Constant", "Concat", "Identity", *SHUFFLE_OPS}


def t_reads_low_precision(node, facts):
    if node.op_type in READS_LOW:
        return None
    # a Q/DQ's zero point (input 2) is read by the Q/DQ layer itself, which takes FP8 (TensorRT-RTX 1.7.1)
    ins = node.input[:2] if node.op_type in ("QuantizeLinear", "DequantizeLinear") else node.input
    for x in ins:
        t = _dtype(facts, x)
        if t in LOW_PRECISION and x not in facts.initializers:
            return {"detail": f"'{x}' is {t}", "tensor": x, "trt_type": LOW_PRECISION[t]}
    return None


def t_makes_low_precision(node, facts):
    if node.op_type in MAKES_LOW:
        return None
    for o in node.output:
        t = _dtype(facts, o)
        if t in LOW_PRECISION:
            return {"detail": f"'{o}' is {t}", "tensor": o, "trt_type": LOW_PRECISION[t]}
    return None


def t_nonzero_zero_point(node, facts):
    z = _input(node, 2)
    t = facts.weights_tensor(z)
    if t is None or t.data_location == TensorProto.EXTERNAL:
        return None
    values = numpy_helper.to_array(t)
    if values.size and np.any(values.astype(np.float64) != 0):
        return {"detail": f"zero point '{z}' = {values.reshape(-1)[:4].tolist()}"}
    return None


def t_domain_is(node, facts, domain):
    return {"detail": f"domain {domain}"} if (node.domain or "") == domain else None


def t_attention_mask_and_causal(node, facts):
    if _input(node, 3) and _attr(node, "is_causal", 0):
        return {"detail": "attn_mask with is_causal=1"}
    return None


def t_attention_kv_shapes(node, facts):
    k, v = facts.info(node.input[1]).shape, facts.info(node.input[2]).shape
    if k is not None and v is not None and len(k) == len(v) and k != v:
        return {"detail": f"K {list(k)} vs V {list(v)}"}
    return None


def _dims(shape) -> str | None:
    """How TensorRT prints a static shape ("[1,4]"); None when a dim is not known."""
    if shape is None or any(not isinstance(d, int) for d in shape):
        return None
    return "[" + ",".join(str(d) for d in shape) + "]"


def t_if_branch_ranks(node, facts):
    branches = {a.name: a.g for a in node.attribute if a.name in ("then_branch", "else_branch")}
    if len(branches) != 2:
        return None
    from surgery.graph import tensor_info_from_type

    for a, b in zip(branches["then_branch"].output, branches["else_branch"].output):
        sa, sb = tensor_info_from_type(a.name, a.type).shape, tensor_info_from_type(b.name, b.type).shape
        if sa is not None and sb is not None and len(sa) != len(sb):
            values = {
                "detail": f"branch outputs '{a.name}' (rank {len(sa)}) and '{b.name}' (rank {len(sb)}) differ"
            }
            if _dims(sa) and _dims(sb):
                values.update(dims_then=_dims(sa), dims_else=_dims(sb))
            return values
    return None


def t_unshaped_graph_input(node, facts, index):
    x = _input(node, index)
    if x in facts.graph_inputs and facts.info(x).shape is None:
        w = facts.info(_input(node, 1)).rank
        return {
            "detail": f"graph input '{x}' has no shape",
            "input": x,
            "kernel_rank": w if w is not None else "?",
        }
    return None


TESTS: dict[str, Callable[..., dict | None]] = {
    name[2:]: fn for name, fn in globals().items() if name.startswith("t_") and callable(fn)
}


# -- the predictor ---------------------------------------------------------------------------------------------


@dataclass
class Problem:
    """A check that failed on a node, with the values its words and explanation are filled with."""

    check: Check
    values: dict


def _schema_inputs(op: str, opset: int, domain: str = "") -> list[str]:
    try:
        return [i.name for i in onnx.defs.get_schema(op, opset, domain).inputs]
    except Exception:  # no schema: no named inputs
        return []


class TensorRTStaticBackend:
    default_depth = Stage.PARSE
    builds_in_check = False  # build-stage checks are predicted by check() itself

    def __init__(self, version: str):
        self.version = resolve_version(version)
        self.id = f"tensorrt-static@{version}"
        self.table = version_table(self.version)
        self.label = f"TensorRT {version} (predicted)"
        self.static_checkers = _vt(self.version) >= _vt(version_facts()["static_checkers_since"]["version"])
        self.types = set(self.table["data_types"])
        self.checks = [c for c in load_checks() if c.applies(self.version)]
        self._by_id = {c.id: c for c in self.checks}

    def availability(self) -> Availability:
        note = f"; {self.table['note']}" if self.table["note"] else ""
        return Availability(True, f"support table {self.table['source']}{note}")

    def _evidence(self, extra: str = "") -> Evidence:
        return Evidence("support table", f"{self.table['source']} @ TensorRT {self.version}" + extra)

    def _problem(self, check_id: str, node: NodeProto, **values) -> Problem | None:
        check = self._by_id.get(check_id)
        return None if check is None else Problem(check, values)

    # -- the op is not in the table, or is listed N ----------------------------------------------------------------

    def _plugin_of(self, node: NodeProto) -> dict | None:
        """The standard plugin creator of this version that the fallback importer finds for the node."""
        version, namespace = _attr(node, "plugin_version", "1"), _attr(node, "plugin_namespace", "")
        return standard_plugin(node.op_type, str(version), str(namespace), self.version)

    def _fallback(self, node: NodeProto) -> Problem | None:
        """None when a standard plugin of this version imports the node, else the fallback's refusal (saying
        when the plugin of that name was removed, or which versions of it this TensorRT ships)."""
        if self._plugin_of(node) is not None:
            return None
        check_id = "plugin-fallback" if self.static_checkers else "plugin-fallback-importer"
        problem = self._problem(check_id, node)
        if problem is None:
            return None
        gone = removed_after(node.op_type, self.version)
        here = [e["version"] for e in plugin_history(node.op_type) if shipped(e, self.version)]
        if gone:
            last, e = gone
            problem.values["note"] = (
                f"the standard plugin {e['name']} (version {e['version']}, {e['interface']}) was removed from "
                f"TensorRT's plugin library after {last}; {e['source']}"
            )
        elif here:
            asked = _attr(node, "plugin_version", "1")
            problem.values["note"] = (
                f"TensorRT {self.version} ships {node.op_type} as plugin version {', '.join(here)}, and the node asks "
                f'for version {asked} (its plugin_version attribute, default "1")'
            )
        return problem

    def _table_problem(self, node: NodeProto) -> Problem | None:
        domain = node.domain or ""
        ops = self.table["ops"]
        # the importer map is keyed by op type alone: a standard op name in another domain is imported as the
        # standard op (checked with TensorRT-RTX 1.7.1: com.example::Relu parses); ai.onnx.ml ops have no importer
        if domain == ML_DOMAIN or node.op_type not in ops:
            return self._fallback(node)
        if not ops[node.op_type]["supported"]:
            if self.static_checkers and node.op_type not in N_WITHOUT_CHECKER:
                return self._problem("table-unsupported", node)
            return self._fallback(node)
        return None

    def _local_function(self, node: NodeProto, facts: GraphFacts) -> onnx.FunctionProto | None:
        """The model-local function this node calls, when this version imports it through its body."""
        if _vt(self.version) < _vt(LOCAL_FUNCTIONS_SINCE):
            return None
        return facts.functions.get((node.domain or "", node.op_type))

    def _body_problem(
        self, node: NodeProto, facts: GraphFacts | None = None
    ) -> tuple[list[Problem], NodeProto] | None:
        """The parser imports If/Loop/Scan bodies, and local functions' bodies, with the same importers and the
        same checks: the first body node it refuses refuses the node (with every problem of that body node, and
        the body node at fault, deepest first). A body reads the outer scope: an outer initializer or Constant is
        a weight there too, and a local function's formal input is what the caller passes."""
        from surgery.graph import bodies, function_facts, scope_facts

        scopes = []
        function = self._local_function(node, facts) if facts is not None else None
        if function is not None:
            scopes.append(function_facts(facts, function, call=node))
        for name, body in bodies(node):
            if facts is None:
                scopes.append((name, body))
                continue
            index = next((i for i, n in enumerate(facts.model.graph.node) if n is node), None)
            if index is not None:
                from surgery.graph import body_facts

                scopes.append(body_facts(facts, index, name))
            else:
                scopes.append(scope_facts(facts, body, path=f"{name}/"))
        for scope in scopes:
            if isinstance(scope, tuple):  # no facts to check against: importers only
                for n in scope[1].node:
                    found = self._table_problem(n)
                    if found:
                        return [found], n
                    deeper = self._body_problem(n) if n.op_type in BODY_OPS else None
                    if deeper:
                        return deeper
                continue
            for i in scope.order:
                n = scope.model.graph.node[i]
                problems, inner = self._problems(n, scope)
                if problems:
                    return problems, inner if inner is not None else n
        return None

    # -- types and constant inputs the table asks for ---------------------------------------------------------

    def _types(self, node: NodeProto, facts: GraphFacts, row: dict) -> Problem | None:
        """Data types the parser refuses on this node: Cast targets, UINT8 inputs and intermediates."""
        if node.op_type == "Cast":
            to = TensorProto.DataType.Name(_attr(node, "to", 0))
            if to not in self.types:
                check_id = (
                    "cast-unsupported-type" if self.static_checkers else "cast-unsupported-type-importer"
                )
                return self._problem(check_id, node, to=to)
        if "UINT8" not in self.types:
            return None
        uint8_in = [x for x in node.input if x and _dtype(facts, x) == "UINT8"]
        if uint8_in and node.op_type not in UINT8_OK_OPS and "UINT8" not in row.get("types", ""):
            if node.op_type in ELEMENTWISE and "uint8-elementwise" in self._by_id:
                return self._problem(
                    "uint8-elementwise", node, input=uint8_in[0], operation=ELEMENTWISE[node.op_type]
                )
            return self._problem("uint8-input", node, input=uint8_in[0])
        out8 = [o for o in node.output if o and _dtype(facts, o) == "UINT8" and o not in facts.graph_outputs]
        if out8 and node.op_type not in UINT8_OUTPUT_OK_OPS:
            return self._problem("uint8-intermediate", node, output=out8[0])
        return None

    def _const_input(self, node: NodeProto, facts: GraphFacts, row: dict) -> Problem | None:
        """A table restriction '`x` must be an initializer / build-time constant' that the node breaks."""
        if not row.get("const_inputs") or node.op_type in DEDICATED_CONST:
            return None
        names = _schema_inputs(node.op_type, opset_of(facts.model) or 13)
        family = [c for c in load_checks() if c.id.startswith("const-input-") and node.op_type in c.ops]
        for rule in row["const_inputs"]:
            if rule["input"] not in names:
                continue  # an attribute in this opset (e.g. Reduce axes before opset 18)
            x = _input(node, names.index(rule["input"]))
            if not x:
                continue
            applying = [c for c in family if c.applies(self.version)]
            strict = rule["kind"] == "initializer" and (
                _vt(self.version) < _vt(version_facts()["initializer_inputs_strict_before"]["version"])
                or any(c.args.get("strict") for c in applying)
            )
            if facts.is_weights(x) if strict else _build_time_constant(facts, x):
                continue
            values = {
                "input": x,
                "table_text": rule["text"],
                "detail": f"input '{x}' is computed at run time",
            }
            if applying:
                return Problem(applying[0], values)
            if family and _vt(self.version) > max(_vt(c.until) for c in family):
                continue  # newer than every version known to refuse it (CumSum: TensorRT-RTX takes a computed axis)
            return self._problem("const-input", node, **values)
        return None

    # -- one node ----------------------------------------------------------------------------------------------

    def _problems(self, node: NodeProto, facts: GraphFacts) -> tuple[list[Problem], NodeProto | None]:
        """What the parser of this version refuses on the node (the first importer problem, every static one),
        and the body node at fault when it is inside an If/Loop/Scan body."""
        if self._local_function(node, facts) is not None:
            inner = self._body_problem(node, facts)
            return inner if inner else ([], None)
        found = self._table_problem(node)
        if found:
            return [found], None
        if node.op_type not in self.table["ops"] or (node.domain or "") == ML_DOMAIN:
            return [], None  # a standard plugin of this version imports it
        if node.op_type in BODY_OPS:
            inner = self._body_problem(node, facts)
            if inner:
                return inner
        row = self.table["ops"][node.op_type]
        for static in (True, False):
            broken = []  # static checkers report every problem of a node; an importer stops at its first
            for c in self.checks:
                if c.test in ("table", "model") or c.func.startswith(STATIC_FUNCS) is not static:
                    continue
                if c.ops and node.op_type not in c.ops:
                    continue
                values = TESTS[c.test](node, facts, **c.args)
                if values:
                    broken.append(Problem(c, values))
                    if not static:
                        break
            if broken:
                return broken, None
            found = self._types(node, facts, row) if static else self._const_input(node, facts, row)
            if found:
                return [found], None
        return [], None

    def _verdict(
        self, index: int, key: str, node: NodeProto, facts: GraphFacts, depth: Stage, report
    ) -> Verdict:
        problems, inner = self._problems(node, facts)
        deferred = [p for p in problems if p.check.stage == "build" and depth is Stage.PARSE]
        problems = [p for p in problems if p not in deferred]
        for p in deferred:  # the parser accepts; the builder will refuse: say so without refusing at parse
            words, source, explanation = self._texts(p, node, inner)
            report.messages.append(
                Message(
                    "warning",
                    words=words,
                    explanation=f"{node.op_type} '{key}': {explanation} (check with --depth build)",
                    code=p.check.code,
                    stage=Stage.BUILD,
                    words_from=source,
                )
            )
        if not problems:
            note = ""
            plugin = self._plugin_of(node) if node.op_type not in self.table["ops"] else None
            if plugin is not None:
                first, last = plugin["shipped"][0], plugin["shipped"][-1]
                note = (
                    f"imported by the standard plugin {plugin['name']} version {plugin['version']} "
                    f"({plugin['interface']}; shipped in TensorRT {first} to {last}; {plugin['source']})"
                )
            if (
                _vt(self.version) < _vt(version_facts()["int64_slice_clamped_before"]["version"])
                and node.op_type == "Slice"
                and any(int64_out_of_int32(facts, node))
            ):
                note = (
                    "INT64 bounds beyond INT32 are clamped to INT32 when cast down, which does not change a "
                    "Slice's result (the parser only warns)"
                )
            return Verdict(
                key, index, node.op_type, Status.SUPPORTED, explanation=note, evidence=self._evidence()
            )
        texts = [self._texts(p, node, inner) for p in problems]
        first = problems[0].check
        words = "\n".join(dict.fromkeys(w for w, _, _ in texts if w))
        sources = list(dict.fromkeys(s for w, s, _ in texts if w))
        return Verdict(
            key,
            index,
            node.op_type,
            Status.REJECTED,
            first.code,
            words=words,
            explanation="; ".join(dict.fromkeys(e for _, _, e in texts)),
            stage=Stage(first.stage),
            evidence=self._evidence("; " + "; ".join(dict.fromkeys(p.check.source for p in problems))),
            words_from="; ".join(sources),
            checks=tuple(dict.fromkeys(p.check.id for p in problems)),
            inputs=tuple(dict.fromkeys(x for p in problems if isinstance(x := p.values.get("input"), str))),
        )

    def _texts(self, problem: Problem, node: NodeProto, inner: NodeProto | None) -> tuple[str, str, str]:
        """(the parser's words or '', where they come from, our explanation) for a problem on `node`."""
        at = inner if inner is not None else node
        values = {
            "node": parser_node_name(at),
            "op": at.op_type,
            "lower": at.op_type.lower(),
            "domain": f"{at.domain}::" if at.domain not in ("", "ai.onnx") else "",
            "version": self.version,
            "detail": "",
            **problem.values,
        }
        explanation = _fill(problem.check.explanation, values, strict=False)
        if problem.values.get("note"):
            explanation += f" ({problem.values['note']})"
        if inner is not None:
            explanation = f"in its body, {inner.op_type} '{parser_node_name(inner)}': {explanation}"
        w = problem.check.words_for(self.version)
        words = _fill(w.template, values, strict=True) if w else ""
        if w and not words:
            missing = sorted(_needs(w.template) - set(values))
            explanation += f" (the parser's words need {', '.join(missing)}, not known here)"
        return words, (w.source if words else ""), explanation

    # -- the model ---------------------------------------------------------------------------------------------

    def _model_level(self, model: ModelProto, facts: GraphFacts, depth: Stage) -> list[Message]:
        out = []
        opset = opset_of(model) or 0
        if opset > self.table["max_opset"]:
            out.append(
                Message(
                    "warning",
                    explanation=f"the model uses opset {opset}; the TensorRT {self.version} table covers opsets "
                    f"{self.table['min_opset']}–{self.table['max_opset']} (newer op versions may not import; the "
                    "parser itself does not refuse the opset number)",
                )
            )
        kinds = {vi.name: vi.type.WhichOneof("value") for vi in model.graph.input}
        needs_profile = []
        for x in facts.graph_inputs:
            info = facts.info(x)
            if kinds.get(x) == "tensor_type" and info.shape is not None and info.is_dynamic:
                needs_profile.append((x, f"has dynamic dims {info.shape_str()}"))
            elif _dtype(facts, x) in ("INT32", "INT64") and (reader := shape_tensor_reader(facts, x)):
                needs_profile.append((x, f"is a shape tensor (read as a shape by {reader.op_type})"))
        if needs_profile and depth is not Stage.PARSE:
            x, why = needs_profile[0]
            out.append(self._message("dynamic-input-without-profile", Stage.BUILD, input=x, why=why))
        cyclic = cycle_nodes(facts)
        if cyclic:
            out.append(self._message("graph-cycle", Stage.PARSE, node=facts.keys[cyclic[0]]))
        for t in model.graph.initializer:
            if t.data_type in (TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT4E2M1):
                count = int(np.prod(t.dims)) if t.dims else 1
                if count % 2:
                    out.append(
                        self._message("four-bit-odd-initializer", Stage.PARSE, input=t.name, count=count)
                    )
        for x in facts.graph_inputs:
            info, dtype = facts.info(x), _dtype(facts, x)
            kind = kinds.get(x)
            if kind != "tensor_type":
                out.append(
                    self._message(
                        "input-dtype", Stage.PARSE, input=x, dtype=f"a {kind.removesuffix('_type')}"
                    )
                )
                continue
            if info.shape is None:
                out.append(
                    Message(
                        "warning",
                        explanation=f"graph input '{x}' has no shape: TensorRT imports it as a scalar (rank 0), "
                        "so nodes that need a rank fail (TensorRT-RTX 1.7.1)",
                    )
                )
            elif dtype and dtype not in self.types:
                out.append(self._message("input-dtype", Stage.PARSE, input=x, dtype=dtype))
        return [m for m in out if m is not None]

    def _message(self, check_id: str, stage: Stage, **values) -> Message | None:
        """A model-level error of a check record, in the parser's words where they are known."""
        check = self._by_id.get(check_id)
        if check is None:
            return None
        values = {"version": self.version, **values}
        w = check.words_for(self.version)
        words = _fill(w.template, values, strict=True) if w else ""
        return Message(
            "error",
            words=words,
            explanation=_fill(check.explanation, values, strict=False),
            code=check.code,
            stage=stage,
            words_from=w.source if w and words else "",
        )

    def check(self, model: ModelProto, base_dir: str | None = None, depth: Stage = Stage.PARSE) -> Report:
        t0 = time.perf_counter()
        facts = GraphFacts.of(model)
        report = Report(self.id, self.label, self.version, depth=Stage(depth))
        report.messages = self._model_level(model, facts, Stage(depth))
        for i, (key, node) in enumerate(zip(facts.keys, model.graph.node)):
            report.verdicts.append(self._verdict(i, key, node, facts, Stage(depth), report))
        report.accepted = not report.rejected and not report.errors
        report.seconds = time.perf_counter() - t0
        return report

    def build(self, model: ModelProto, options: BuildOptions, progress=None, base_dir=None) -> BuildReport:
        return BuildReport(
            self.id, False, error="a predicted target cannot build; use the `tensorrt` backend"
        )


def make(version: str) -> TensorRTStaticBackend:
    return TensorRTStaticBackend(version)
