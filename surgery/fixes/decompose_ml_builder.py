"""What the classical ML (ai.onnx.ml) decompositions share: a node builder that emits standard ops valid at the
model's ai.onnx opset, attribute reading, and onnxruntime's post transforms and label rules.

The decompositions reproduce what onnxruntime computes (the reference every fix is verified against), including
its quirks, which the functions below name where they matter. Nothing here registers a decomposition; the
families are decompose_ml (linear models, preprocessing, ZipMap), decompose_ml_svm and decompose_ml_trees.

Opsets: the ops emitted exist from ai.onnx opset 7 on (Less, Greater, Not, Cast, Gemm, MatMul, Gather, ArgMax,
Softmax, ...), with the reductions' and Unsqueeze's axes as attributes or inputs as the opset wants. Where and
IsNaN need opset 9, Equal on floats 11; a decomposition that needs them in an older model refuses with a
FixError. A model that imports no ai.onnx opset at all (onnxmltools' XGBoost output) is given
`standard_opset(model)` by the decompose primitive.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper

from surgery.fixes import FixError
from surgery.fixes.decompose import standard_opset
from surgery.graph import GraphFacts

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
POST_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


def attrs(node: NodeProto) -> dict:
    """The node's attributes as Python values; strings decoded, lists as lists."""
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode() for x in v]
        elif isinstance(v, TensorProto):
            v = numpy_helper.to_array(v)
        out[a.name] = v
    return out


def describe(node: NodeProto) -> str:
    return f"{node.op_type} '{node.name or node.output[0]}'"


class Builder:
    """Collects the nodes and constants of one decomposition. Every tensor gets a fresh name under the node's
    name (`<node>/<what>`); the node computing a tensor is named after it. `out=` writes a final output, whose
    name the decomposition keeps."""

    def __init__(self, node: NodeProto, facts: GraphFacts, fresh):
        self.node, self.facts, self._fresh = node, facts, fresh
        self.opset = standard_opset(facts.model)
        self.nodes: list[NodeProto] = []
        self.inits: list[TensorProto] = []
        self._used: set[str] = set()

    # -- names, constants, nodes -------------------------------------------------------------------------------
    def name(self, what: str) -> str:
        name, k = self._fresh(what), 1
        while name in self._used:
            name, k = self._fresh(f"{what}_{k}"), k + 1
        self._used.add(name)
        return name

    def const(self, value, what: str, dtype=None) -> str:
        arr = np.asarray(value, dtype=dtype)
        name = self.name(what)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def op(self, op_type: str, inputs: list[str], what: str = "", out: str | None = None, **kw) -> str:
        target = out or self.name(what or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [target], name=target, **kw))
        return target

    def result(self) -> tuple[list[NodeProto], list[TensorProto]]:
        return self.nodes, self.inits

    # -- facts about the node -----------------------------------------------------------------------------------
    def used(self, k: int) -> bool:
        """Whether output k exists and something reads it (a node or the graph's outputs)."""
        if k >= len(self.node.output) or not self.node.output[k]:
            return False
        name = self.node.output[k]
        return bool(self.facts.consumers.get(name)) or name in self.facts.graph_outputs

    def dtype(self, tensor: str) -> int:
        return self.facts.info(tensor).dtype

    def need(self, version: int, what: str) -> None:
        if self.opset < version:
            raise FixError(
                f"{describe(self.node)}: the decomposition needs {what} (ai.onnx opset {version}); the model "
                f"imports opset {self.opset}. Note: convert the model to opset {version} or later first "
                "(fix opset_upgrade), then decompose"
            )

    # -- version-aware ops ---------------------------------------------------------------------------------------
    def reduce(self, op: str, x: str, axes: list[int], keepdims: int = 1, what: str = "", out=None) -> str:
        axes_as_input = self.opset >= (13 if op == "ReduceSum" else 18)
        if axes_as_input:
            return self.op(
                op, [x, self.const(np.array(axes, np.int64), "axes")], what, out, keepdims=keepdims
            )
        return self.op(op, [x], what, out, axes=axes, keepdims=keepdims)

    def unsqueeze(self, x: str, axes: list[int], what: str = "", out=None) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.const(np.array(axes, np.int64), "axes")], what, out)
        return self.op("Unsqueeze", [x], what, out, axes=axes)

    def reshape(self, x: str, shape: list[int], what: str = "", out=None) -> str:
        return self.op("Reshape", [x, self.const(np.array(shape, np.int64), "shape")], what, out)

    def cast(self, x: str, to: int, what: str = "", out=None) -> str:
        return self.op("Cast", [x], what or "cast", out, to=to)

    def where(self, cond: str, a: str, b: str, what: str = "", out=None) -> str:
        self.need(9, "Where")
        return self.op("Where", [cond, a, b], what, out)

    def softmax(self, x: str, out=None) -> str:
        # opset < 13 flattens to 2-D from `axis`: for the [N, C] scores here axis=1 is the same
        return self.op("Softmax", [x], "softmax", out, axis=-1 if self.opset >= 13 else 1)

    def concat(self, parts: list[str], axis: int, what: str = "", out=None) -> str:
        return self.op("Concat", parts, what or "concat", out, axis=axis)

    # -- inputs --------------------------------------------------------------------------------------------------
    def as_float(self, x: str) -> str:
        """x as float32: onnxruntime's ML kernels convert double and integer inputs to float first."""
        return x if self.dtype(x) == FLOAT else self.cast(x, FLOAT, "as_float")

    def rows(self, x: str, width: int, exact: bool = True, like: str | None = None) -> str:
        """x as [N, F]: the kernels read a 1-D input as one row. `exact`: the op needs F == width (the
        coefficients say so); otherwise (trees) F may be larger than the features used. `like`: the tensor
        whose shape x has (x being its cast)."""
        info = self.facts.info(like or x)
        last = info.shape[-1] if info.shape else None
        if exact and isinstance(last, int) and last != width:
            raise FixError(
                f"{describe(self.node)}: input '{x}' is declared with {last} features, but the op's weights are for "
                f"{width}; onnxruntime would read the weights misaligned. Note: correct the input's declared shape"
            )
        if info.rank == 2:
            return x
        if info.rank == 1:
            return self.reshape(x, [1, -1], "rows")
        if info.rank is None and exact:
            return self.reshape(x, [-1, width], "rows")
        raise FixError(
            f"{describe(self.node)}: input '{x}' has rank {info.rank}; the op reads 1-D or 2-D inputs. Note: "
            "freeze the input shapes first"
        )

    def is_zero(self, x: str) -> str:
        """1.0 where x == 0, else 0.0 (float32), without Equal (float Equal needs opset 11)."""
        less = self.cast(self.op("Less", [x, self.const(np.float32(0), "zero")], "below_zero"), FLOAT)
        more = self.cast(self.op("Greater", [x, self.const(np.float32(0), "zero")], "above_zero"), FLOAT)
        return self.op("Sub", [self.op("Sub", [self.const(np.float32(1), "one"), less]), more], "is_zero")


# -- post transforms (onnxruntime ml_common.h) -------------------------------------------------------------------
def post_transform(b: Builder, scores: str, kind: str, out: str | None = None) -> str:
    """onnxruntime's transform of a row of two or more scores: NONE, LOGISTIC (sigmoid of each), SOFTMAX,
    SOFTMAX_ZERO (softmax that leaves scores within 1e-7 of zero out of the sum), PROBIT (sqrt(2) erfinv(2p - 1)
    in onnxruntime's approximation of erfinv)."""
    if kind == "NONE":
        return b.op("Identity", [scores], "scores", out) if out else scores
    if kind == "LOGISTIC":
        return b.op("Sigmoid", [scores], "logistic", out)
    if kind == "SOFTMAX":
        return b.softmax(scores, out)
    if kind == "SOFTMAX_ZERO":
        return _softmax_zero(b, scores, out)
    if kind == "PROBIT":
        return probit(b, scores, out)
    raise FixError(
        f"{describe(b.node)}: unknown post_transform '{kind}'. Note: known: {', '.join(POST_TRANSFORMS)}"
    )


def _softmax_zero(b: Builder, x: str, out=None) -> str:
    # exp(v - max) for |v| > 1e-7, v * exp(-max) for the others, over the sum of the first kind only
    top = b.reduce("ReduceMax", x, [-1], 1, "max")
    e = b.op("Exp", [b.op("Sub", [x, top], "shifted")], "exp")
    eps = b.const(np.float32(1e-7), "eps")
    big = b.op("Or", [b.op("Greater", [x, eps]), b.op("Less", [x, b.op("Neg", [eps])])], "nonzero")
    small = b.op("Mul", [x, b.op("Exp", [b.op("Neg", [top])])], "scaled_zero")
    num = b.where(big, e, small, "numerator")
    total = b.reduce("ReduceSum", b.where(big, e, b.const(np.float32(0), "zero")), [-1], 1, "sum")
    return b.op("Div", [num, total], "softmax_zero", out)


def probit(b: Builder, p: str, out=None) -> str:
    """sqrt(2) * erfinv(2p - 1), erfinv as onnxruntime approximates it (Winitzki, a = 0.147), in float32
    with the constants rounded as onnxruntime rounds them."""
    f = np.float32
    two_p = b.op("Mul", [p, b.const(f(2), "two")])
    x = b.op("Sub", [two_p, b.const(f(1), "one")], "centered")
    below = b.cast(b.op("Less", [x, b.const(f(0), "zero")]), FLOAT)
    sign = b.op("Sub", [b.const(f(1), "one"), b.op("Mul", [b.const(f(2), "two"), below])], "sign")
    one = b.const(f(1), "one")
    y = b.op("Mul", [b.op("Sub", [one, x]), b.op("Add", [one, x])], "one_minus_x2")
    log = b.op("Log", [y], "log")
    c1 = f(2) / (f(math.pi) * f(0.147))
    v = b.op("Add", [b.const(c1, "c1"), b.op("Mul", [b.const(f(0.5), "half"), log])], "v")
    v2 = b.op("Mul", [b.const(f(1) / f(0.147), "c2"), log], "v2")
    v3 = b.op("Sub", [b.op("Sqrt", [b.op("Sub", [b.op("Mul", [v, v]), v2])]), v], "v3")
    erfinv = b.op("Mul", [sign, b.op("Sqrt", [v3])], "erfinv")
    return b.op("Mul", [erfinv, b.const(f(math.sqrt(2)), "sqrt2")], "probit", out)


def binary_pair(b: Builder, s: str, kind: str, complement: bool, out=None) -> str:
    """The two columns onnxruntime writes for one binary score s ([N, 1]): LOGISTIC gives [sigmoid(-s),
    sigmoid(s)]; otherwise [1 - s, s] when `complement` (the score is a probability), else [-s, s]."""
    if kind == "PROBIT":
        raise FixError(
            f"{describe(b.node)}: post_transform PROBIT on a single binary score leaves onnxruntime's second "
            "column unwritten; there is nothing defined to reproduce. Note: decompose it by hand if the first "
            "column is all you read"
        )
    if kind == "LOGISTIC":
        first, second = b.op("Sigmoid", [b.op("Neg", [s])], "negative"), b.op("Sigmoid", [s], "positive")
    elif complement:
        first, second = b.op("Sub", [b.const(np.float32(1), "one"), s], "negative"), s
    else:
        first, second = b.op("Neg", [s], "negative"), s
    return b.concat([first, second], 1, "pair", out)


# -- labels ----------------------------------------------------------------------------------------------------
def int_labels(b: Builder, a: dict, ints_key: str, strings_key: str, output: int) -> list[int] | None:
    """The integer class labels; None when the label output is unused. String labels cannot be produced by an
    engine: refused with the node named."""
    if a.get(strings_key):
        if b.used(output):
            raise FixError(
                f"{describe(b.node)}: its label output '{b.node.output[output]}' holds strings "
                f"({', '.join(map(repr, a[strings_key][:4]))}{', ...' if len(a[strings_key]) > 4 else ''}), which "
                "TensorRT, OpenVINO and TVM cannot compute. Note: the numeric scores decompose once nothing reads "
                "the label: cut the model before it, or map the class index to its string after the engine"
            )
        return None
    return [int(v) for v in a.get(ints_key) or []]


def label_lookup(b: Builder, index: str, labels: list[int], out: str) -> str:
    """labels[index] (int64); the index itself when the labels are 0..n-1."""
    if labels == list(range(len(labels))):
        return b.op("Identity", [index], "label", out)
    return b.op("Gather", [b.const(np.array(labels, np.int64), "classlabels"), index], "label", out, axis=0)


def pick(b: Builder, cond: str, yes: int, no: int, out: str) -> str:
    """int64 `yes` where cond else `no` (arithmetic, so it works below opset 9)."""
    flag = b.cast(cond, INT64, "flag")
    if (yes, no) == (1, 0):
        return b.op("Identity", [flag], "label", out)
    scaled = b.op("Mul", [flag, b.const(np.int64(yes - no), "step")])
    return b.op("Add", [scaled, b.const(np.int64(no), "base")], "label", out)
