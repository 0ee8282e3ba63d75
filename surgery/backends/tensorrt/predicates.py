"""The tests a check record names (`test:` in data/checks.yaml), one function each in TESTS: each returns None
when the node passes, else the values its words and explanation need ({"detail": ...} at least)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper

from surgery.graph import DTYPE_NAMES, GraphFacts, opset_of

# -- the tests the records name ------------------------------------------------------------------------------------


def build_time_constant(facts: GraphFacts, name: str) -> bool:
    """Weights, or computable from constants only (what 10.x resolves by folding its shape tensors)."""
    return facts.is_weights(name) or facts.is_constant(name)


def attr(node: NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return default


def parser_node_name(node: NodeProto) -> str:
    """The name the parser prints: the node's name, else node_of_<first output> (checked with TensorRT-RTX)."""
    return node.name or f"node_of_{node.output[0] if node.output else ''}"


def dtype_of(facts: GraphFacts, name: str) -> str:
    """ONNX type name of a tensor ('' when unknown)."""
    if not name:
        return ""
    t = facts.dtype(name)  # not info(): its shape is not needed (240k a check at 50k nodes)
    return DTYPE_NAMES.get(t, "") if t else ""  # a dict, not DataType.Name (a Python call)


def _trt_dtype(onnx_name: str) -> str:
    """The TensorRT spelling the parser prints in its messages (getTrtDtypeName)."""
    return {"DOUBLE": "FLOAT", "FLOAT16": "HALF", "BFLOAT16": "BF16"}.get(onnx_name, onnx_name)


def input_at(node: NodeProto, index: int) -> str:
    return node.input[index] if len(node.input) > index else ""


def t_scales_computed(node, facts):
    idx = 1 if node.op_type == "Upsample" or opset_of(facts.model) == 10 else 2
    x = input_at(node, idx)
    if x and not facts.is_weights(x):
        return {"detail": f"'{x}' is computed by the graph", "input": x}
    return None


def t_input_computed(node, facts, index):
    x = input_at(node, index)
    if x and not facts.is_weights(x):
        return {"detail": f"'{x}' (input {index}) is computed by the graph", "input": x}
    return None


def t_input_not_build_constant(node, facts, index, dtypes=None):
    x = input_at(node, index)
    if x and not build_time_constant(facts, x) and (dtypes is None or dtype_of(facts, x) in dtypes):
        where = "a graph input" if x in facts.graph_inputs else "computed at run time"
        return {"detail": f"'{x}' (input {index}) is {where}", "input": x}
    return None


def t_uint8_not_from_quantize(node, facts):
    x = input_at(node, 0)
    p = facts.producer_of(x) if x else None
    if dtype_of(facts, x) == "UINT8" and (p is None or p.op_type != "QuantizeLinear"):
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
    has_axes = input_at(node, 1) or attr(node, "axes") is not None
    info = facts.info(node.input[0])
    if not has_axes and (info.shape is None or info.is_dynamic):
        return {"detail": f"'{node.input[0]}' has the dynamic shape {info.shape_str()}"}
    return None


def int64_out_of_int32(facts: GraphFacts, node: NodeProto):
    """(input index, name, first values) of INT64 constants of `node` with values outside the INT32 range."""
    beyond = facts.weights_beyond_int32_names
    if beyond.isdisjoint(node.input):
        return
    for k, x in enumerate(node.input):
        if x in beyond:
            yield k, x, numpy_helper.to_array(facts.weights_tensor(x)).reshape(-1)[:4].tolist()


def t_int64_data_out_of_int32(node, facts):
    """INT64 constants outside the INT32 range that carry data (a Slice bound of INT64_MAX is harmless)."""
    for k, x, values in int64_out_of_int32(facts, node):
        if node.op_type == "Slice" and k in (1, 2):
            continue
        return {"detail": f"'{x}' = {values}", "input": x}
    return None


def t_constant_true(node, facts, index):
    t = facts.initializers.get(input_at(node, index))
    if t is not None and bool(numpy_helper.to_array(t).reshape(-1)[0]):
        return {"detail": f"input '{node.input[index]}' is True"}
    return None


def t_attr_not_in(node, facts, name, allowed, default):
    v = attr(node, name, default)
    return None if v in allowed else {"detail": f"{name}={v!r}", "value": v}


def t_attr_present(node, facts, name):
    return {"detail": f"{name} is set"} if attr(node, name) is not None else None


def t_pool_dilations(node, facts):
    d = attr(node, "dilations")
    return {"detail": f"dilations {d}"} if d and any(x != 1 for x in d) else None


def t_extra_outputs_used(node, facts):
    """Outputs after the first that something reads (unread ones pass: checked with TensorRT-RTX 1.7.1)."""
    extra = [o for o in node.output[1:] if o and (o in facts.graph_outputs or facts.consumers.get(o))]
    return {"detail": f"outputs {extra} are used"} if extra else None


def t_more_than_one_output(node, facts):
    n = len([o for o in node.output if o])
    return {"detail": f"{n} outputs"} if n > 1 else None


def t_lp_p(node, facts):
    p = attr(node, "p")  # the parser reads no ONNX default for LpPool: a missing p fails (observed in RTX)
    if node.op_type == "LpNormalization" and p is None:
        p = 2
    return None if p in (1, 2) else {"detail": f"p={p}"}


def t_resize_axes_not_iota(node, facts):
    axes = attr(node, "axes")
    rank = facts.info(node.input[0]).rank
    if axes is None or not input_at(node, 2) or rank is None:
        return None
    norm = [a % rank for a in axes]
    if norm == list(range(rank)):
        return None
    return {"detail": f"axes={list(axes)} with a scales input on a rank-{rank} input"}


def t_input_dtype_in(node, facts, index, dtypes):
    t = dtype_of(facts, input_at(node, index))
    if t in dtypes:
        rank = facts.info(node.input[index]).rank
        return {
            "detail": f"input type {t}",
            "trt_type": _trt_dtype(t),
            "rank": rank if rank is not None else "?",
        }
    return None


def t_input_dtype_not_in(node, facts, index, dtypes):
    t = dtype_of(facts, input_at(node, index))
    if t and t not in dtypes:
        return {"detail": f"input type {t}", "trt_type": _trt_dtype(t)}
    return None


def t_input_rank_not(node, facts, index, rank):
    got = facts.info(input_at(node, index)).rank
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
            if any(input_at(n, k) == t for k in SHAPE_INPUTS_AT_BUILD.get(n.op_type, ())):
                return n
            for o in n.output:
                info = facts.info(o) if o else None
                if (
                    info is not None
                    and o not in seen
                    and dtype_of(facts, o) not in ("", "STRING")
                    and info.rank is not None
                    and info.rank <= 1
                ):
                    seen.add(o)
                    todo.append(o)
    return None


def t_float_input_as_shape(node, facts):
    for k in SHAPE_TENSOR_INPUTS.get(node.op_type, ()):
        x = input_at(node, k)
        if x in facts.graph_inputs and dtype_of(facts, x) in ("FLOAT", "FLOAT16", "DOUBLE", "BFLOAT16"):
            return {"detail": f"graph input '{x}' is {dtype_of(facts, x)}", "input": x}
    return None


def t_range_float_computed(node, facts):
    if dtype_of(facts, node.input[0]) not in ("FLOAT", "DOUBLE"):
        return None
    computed = [x for x in node.input[:3] if x and not build_time_constant(facts, x)]
    return {"detail": f"float inputs {computed} are computed at run time"} if computed else None


def t_mod_float_without_fmod(node, facts):
    t = dtype_of(facts, node.input[0])
    if attr(node, "fmod", 0) == 0 and t in ("FLOAT", "FLOAT16", "BFLOAT16", "DOUBLE"):
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
        t = dtype_of(facts, x)
        if t in LOW_PRECISION and x not in facts.initializers:
            return {"detail": f"'{x}' is {t}", "tensor": x, "trt_type": LOW_PRECISION[t]}
    return None


def t_makes_low_precision(node, facts):
    if node.op_type in MAKES_LOW:
        return None
    for o in node.output:
        t = dtype_of(facts, o)
        if t in LOW_PRECISION:
            return {"detail": f"'{o}' is {t}", "tensor": o, "trt_type": LOW_PRECISION[t]}
    return None


def t_nonzero_zero_point(node, facts):
    z = input_at(node, 2)
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
    if input_at(node, 3) and attr(node, "is_causal", 0):
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
    x = input_at(node, index)
    if x in facts.graph_inputs and facts.info(x).shape is None:
        w = facts.info(input_at(node, 1)).rank
        return {
            "detail": f"graph input '{x}' has no shape",
            "input": x,
            "kernel_rank": w if w is not None else "?",
        }
    return None


TESTS: dict[str, Callable[..., dict | None]] = {
    name[2:]: fn for name, fn in globals().items() if name.startswith("t_") and callable(fn)
}
