"""Quantized operators (QOperator form, integer ops) rewritten into the Q/DQ form TensorRT imports.

Each function is registered with `@decomposition(domain, op)` (see surgery.fixes.decompose).

QOperator ops (QLinearConv, QLinearMatMul and onnxruntime's QLinearAdd, QLinearMul, QLinearGlobalAveragePool,
QLinearLeakyRelu, QLinearSigmoid, QLinearConcat, QGemm) become DequantizeLinear on each quantized input, the float
op, and QuantizeLinear with the output's scale and zero point: the form onnxruntime's own QDQ quantizer writes and
TensorRT imports. The integer bias of QLinearConv / QGemm (int32, scale = input scale x weight scale) is folded
into a float constant, because TensorRT's DequantizeLinear does not take INT32. The float op rounds differently
from the integer kernel, so an output can move by one quantization step (the rules say how often).

ConvInteger / MatMulInteger become Cast to float, minus the zero points, the float op and a Cast back to INT32:
exact while every accumulation stays within float32's exact integers (2^24), which the decomposition checks from
the weights and refuses otherwise.

onnxruntime's DynamicQuantizeLSTM becomes the standard LSTM with its constant weights dequantized (approximate: the
original rounds X and the hidden state to 8 bits at each step). The multi-node patterns of quantized models (Q/DQ
zero points, dequantized constants, dynamic quantization, 4-bit padding) are primitives of surgery.fixes.quantized.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from surgery.fixes.decompose import _attrs, decomposition
from surgery.fixes.decompose_ops import Ops, np_type

MS = "com.microsoft"
EIGHT_BIT = (TensorProto.UINT8, TensorProto.INT8)
EXACT_INTEGERS = 2**24  # float32 represents every integer up to this magnitude


class Quant(Ops):
    """Ops with the Q/DQ pieces of a quantized op."""

    def maybe_constant(self, i: int) -> np.ndarray | None:
        """Input i's value when it is known at build time, else None (absent inputs: None)."""
        name = self.input(i)
        if not name or not (name in self.facts.initializers or self.facts.is_constant(name)):
            return None
        return self.constant(i, f"input {i}")

    def quant_type(self, x_index: int, zp_index: int | None = None) -> int:
        """The 8-bit type of input x_index: inferred, else its zero point's (the ops require the same type)."""
        x = self.input(x_index)
        t = self.dtype(x, 0)
        if t not in EIGHT_BIT and zp_index is not None and self.input(zp_index):
            t = self.dtype(self.input(zp_index), 0)
        if t not in EIGHT_BIT:
            raise self.refuse(
                f"input '{x}' has type {TensorProto.DataType.Name(t) if t else 'unknown'}",
                "the quantized ops take UINT8 or INT8 (run shape inference, or give the zero point, if the type "
                "is not known)",
            )
        return t

    def per_axis(self, scale: str, what: str) -> bool:
        """Whether a scale is a 1-D tensor of more than one element (per-axis), from its shape."""
        shape = self.facts.info(scale).shape
        if shape is None:
            value = self.maybe_constant(list(self.node.input).index(scale))
            if value is None:
                raise self.refuse(f"the shape of {what} '{scale}' is unknown", "give it a static shape")
            shape = value.shape
        if len(shape) == 0 or (len(shape) == 1 and shape[0] == 1):
            return False
        if len(shape) != 1:
            raise self.refuse(
                f"{what} '{scale}' has shape {list(shape)}", "a scalar or a 1-D tensor is expected"
            )
        if self.opset < 13:
            raise self.refuse(
                f"{what} '{scale}' is per-axis and DequantizeLinear has no axis before opset 13",
                "upgrade the model to opset 13 or newer first (opset_upgrade)",
            )
        return True

    def zero_point_like(self, zp_index: int, scale: str, x_type: int, what: str) -> str:
        """A zero point shaped like its scale, as DequantizeLinear needs: the input itself, a zero constant when it
        is absent, or a constant repeated when a scalar zero point goes with a per-axis scale."""
        zp = self.input(zp_index)
        scale_shape = self.facts.info(scale).shape
        if not zp:
            n = scale_shape[0] if scale_shape and len(scale_shape) == 1 else None
            return self.const(np.zeros([n] if n else [], np_type(x_type)), what=f"{what}_zero_point")
        zp_shape = self.facts.info(zp).shape
        if scale_shape is not None and zp_shape is not None and tuple(zp_shape) == tuple(scale_shape):
            return zp
        value = self.maybe_constant(zp_index)
        if value is None:
            raise self.refuse(
                f"{what} zero point '{zp}' has another shape than its scale and is computed at run time",
                "give it as a constant",
            )
        if scale_shape is None or len(scale_shape) != 1 or not isinstance(scale_shape[0], int):
            return zp
        if value.size not in (1, scale_shape[0]):
            raise self.refuse(
                f"{what} zero point '{zp}' has {value.size} values for {scale_shape[0]} scales",
                "give one zero point per scale",
            )
        return self.const(
            np.broadcast_to(value.reshape(-1), [scale_shape[0]]).astype(value.dtype),
            what=f"{what}_zero_point",
        )

    def dequantize(
        self, x_index: int, s_index: int, zp_index: int | None, what: str, axis: int | None = None
    ) -> str:
        x, s = self.input(x_index), self.input(s_index)
        x_type = self.quant_type(x_index, zp_index)
        attrs = {}
        if axis is not None and self.per_axis(s, f"{what} scale"):
            attrs["axis"] = axis
            zp = self.zero_point_like(zp_index, s, x_type, what) if zp_index is not None else ""
        else:
            zp = self.input(zp_index) if zp_index is not None else ""
        return self.op("DequantizeLinear", [x, s] + ([zp] if zp else []), f"{what}_dequantized", **attrs)

    def quantize(self, y: str, s_index: int, zp_index: int, like: tuple[int, int | None]) -> str:
        """QuantizeLinear to the node's output with its scale and zero point; without a zero point the output has
        the type of input `like` (x index, its zero point index), with an explicit zero (QuantizeLinear alone would
        make UINT8)."""
        zp = self.input(zp_index)
        if not zp:
            zp = self.const(np.zeros([], np_type(self.quant_type(*like))), what="y_zero_point")
        return self.op("QuantizeLinear", [y, self.input(s_index), zp], out=self.node.output[0])

    def scalar(self, i: int, what: str) -> float | None:
        value = self.maybe_constant(i)
        if value is None:
            return None
        if value.size != 1:
            raise self.refuse(
                f"{what} '{self.input(i)}' has {value.size} values", "the op takes a scalar here"
            )
        return value.reshape(-1)[0]


def _bias(
    b: Quant, bias_index: int, xs_index: int, ws_index: int, alpha: float = 1.0, what: str = "bias"
) -> str:
    """An int32 bias quantized with scale alpha * x_scale * w_scale (zero point 0), as float32: B * scale, the
    scale computed in float32 as DequantizeLinear would take it; folded when the scales are constants."""
    bias = b.input(bias_index)
    xs, ws = b.maybe_constant(xs_index), b.maybe_constant(ws_index)
    values = b.maybe_constant(bias_index)
    if values is not None and xs is not None and ws is not None:
        scale = np.float32(alpha) * xs.astype(np.float32).reshape(-1) * ws.astype(np.float32).reshape(-1)
        if scale.size == 1:
            scale = scale.reshape([])
        folded = values.astype(np.float32) * scale.astype(np.float32)
        return b.const(folded.astype(np.float32), what=f"{what}_float")
    scale = b.op("Mul", [b.input(xs_index), b.input(ws_index)], f"{what}_scale")
    if alpha != 1.0:
        scale = b.op("Mul", [scale, b.const(np.float32(alpha), what="alpha")], f"{what}_scale_alpha")
    return b.op("Mul", [b.cast(bias, TensorProto.FLOAT, f"{what}_cast"), scale], f"{what}_float")


@decomposition("", "QLinearConv")
def qlinear_conv(node, facts, fresh):
    """QLinearConv: DequantizeLinear(x), DequantizeLinear(w) (per output channel when w_scale is 1-D), Conv with
    the int32 bias as float (B * x_scale * w_scale), QuantizeLinear(y_scale, y_zero_point)."""
    b = Quant(node, facts, fresh)
    x = b.dequantize(0, 1, 2, "x")
    w = b.dequantize(3, 4, 5, "w", axis=0)
    ins = [x, w] + ([_bias(b, 8, 1, 4)] if b.input(8) else [])
    y = b.op("Conv", ins, "conv", **_attrs(node))
    b.quantize(y, 6, 7, (0, 2))
    return b.done()


@decomposition("", "QLinearMatMul")
def qlinear_matmul(node, facts, fresh):
    """QLinearMatMul: DequantizeLinear(a) (per row when a_scale is 1-D), DequantizeLinear(b) (per column when
    b_scale is 1-D), MatMul, QuantizeLinear(y_scale, y_zero_point)."""
    b = Quant(node, facts, fresh)
    a = b.dequantize(0, 1, 2, "a", axis=-2)
    w = b.dequantize(3, 4, 5, "b", axis=-1)
    y = b.op("MatMul", [a, w], "matmul")
    b.quantize(y, 6, 7, (0, 2))
    return b.done()


def _binary(node, facts, fresh, op: str):
    b = Quant(node, facts, fresh)
    a = b.dequantize(0, 1, 2, "a")
    c = b.dequantize(3, 4, 5, "b")
    y = b.op(op, [a, c], op.lower())
    b.quantize(y, 6, 7, (0, 2))
    return b.done()


@decomposition(MS, "QLinearAdd")
def qlinear_add(node, facts, fresh):
    """com.microsoft QLinearAdd: DequantizeLinear(A), DequantizeLinear(B), Add, QuantizeLinear(C_scale, C_zp)."""
    return _binary(node, facts, fresh, "Add")


@decomposition(MS, "QLinearMul")
def qlinear_mul(node, facts, fresh):
    """com.microsoft QLinearMul: DequantizeLinear(A), DequantizeLinear(B), Mul, QuantizeLinear(C_scale, C_zp)."""
    return _binary(node, facts, fresh, "Mul")


def _unary(node, facts, fresh, make):
    b = Quant(node, facts, fresh)
    x = b.dequantize(0, 1, 2, "x")
    y = make(b, x)
    b.quantize(y, 3, 4, (0, 2))
    return b.done()


@decomposition(MS, "QLinearGlobalAveragePool")
def qlinear_global_average_pool(node, facts, fresh):
    """com.microsoft QLinearGlobalAveragePool: DequantizeLinear, GlobalAveragePool (channels_last=1: ReduceMean
    over the spatial axes 1 .. rank-2), QuantizeLinear."""
    channels_last = _attrs(node).get("channels_last", 0)

    def pool(b: Quant, x: str) -> str:
        if not channels_last:
            return b.op("GlobalAveragePool", [x], "pooled")
        rank = facts.info(node.input[0]).rank
        if rank is None:
            raise b.refuse(f"the rank of '{node.input[0]}' is unknown", "give the input a static rank")
        return b.reduce("ReduceMean", x, list(range(1, rank - 1)), keepdims=1, what="pooled")

    return _unary(node, facts, fresh, pool)


@decomposition(MS, "QLinearLeakyRelu")
def qlinear_leaky_relu(node, facts, fresh):
    """com.microsoft QLinearLeakyRelu: DequantizeLinear, LeakyRelu(alpha), QuantizeLinear."""
    alpha = _attrs(node).get("alpha", 0.01)
    return _unary(node, facts, fresh, lambda b, x: b.op("LeakyRelu", [x], "leaky_relu", alpha=alpha))


@decomposition(MS, "QLinearSigmoid")
def qlinear_sigmoid(node, facts, fresh):
    """com.microsoft QLinearSigmoid: DequantizeLinear, Sigmoid, QuantizeLinear."""
    return _unary(node, facts, fresh, lambda b, x: b.op("Sigmoid", [x], "sigmoid"))


@decomposition(MS, "QLinearConcat")
def qlinear_concat(node, facts, fresh):
    """com.microsoft QLinearConcat(Y_scale, Y_zp, X1, X1_scale, X1_zp, ...): DequantizeLinear of each input,
    Concat(axis), QuantizeLinear(Y_scale, Y_zp)."""
    b = Quant(node, facts, fresh)
    if (len(node.input) - 2) % 3 or len(node.input) < 5:
        raise b.refuse(
            f"it has {len(node.input)} inputs",
            "QLinearConcat takes Y_scale, Y_zero_point, then (X, scale, zp) triples",
        )
    parts = [b.dequantize(i, i + 1, i + 2, f"x{(i - 2) // 3}") for i in range(2, len(node.input), 3)]
    y = b.op("Concat", parts, "concat", axis=_attrs(node)["axis"])
    b.quantize(y, 0, 1, (2, 4))
    return b.done()


@decomposition(MS, "QGemm")
def qgemm(node, facts, fresh):
    """com.microsoft QGemm: DequantizeLinear(A), DequantizeLinear(B) (per column of B' when b_scale is 1-D), Gemm
    (alpha, transA, transB) with the int32 C as float (C * alpha * a_scale * b_scale), then QuantizeLinear when
    y_scale is given (else the float result is the output)."""
    b = Quant(node, facts, fresh)
    a = _attrs(node)
    alpha, trans_a, trans_b = a.get("alpha", 1.0), a.get("transA", 0), a.get("transB", 0)
    x = b.dequantize(0, 1, 2, "a")
    w = b.dequantize(3, 4, 5, "b", axis=0 if trans_b else 1)
    ins = [x, w] + ([_bias(b, 6, 1, 4, alpha, "c")] if b.input(6) else [])
    quantized = bool(b.input(7))
    out = None if quantized else node.output[0]
    y = b.op("Gemm", ins, "gemm", out, alpha=float(alpha), beta=1.0, transA=trans_a, transB=trans_b)
    if quantized:
        b.quantize(y, 7, 8, (0, 2))
    return b.done()


# -- integer ops: float arithmetic on exact integers ---------------------------------------------------------------


def _integer_range(dtype: int) -> tuple[int, int]:
    info = np.iinfo(np_type(dtype))
    return int(info.min), int(info.max)


def _centered(b: Quant, x_index: int, zp_index: int, what: str, axis_shape: list[int] | None = None) -> str:
    """Cast(x) - Cast(zero point) as float32: exact (small integers). `axis_shape` reshapes a 1-D zero point so it
    broadcasts along its axis (per row of A, per output channel of W)."""
    x = b.cast(b.input(x_index), TensorProto.FLOAT, f"{what}_float")
    zp = b.input(zp_index)
    if not zp:
        return x
    value = b.maybe_constant(zp_index)
    if value is not None:
        if value.size > 1 and axis_shape is not None:
            value = value.reshape(axis_shape)
        if not np.any(value):
            return x
        return b.op(
            "Sub", [x, b.const(value.astype(np.float32), what=f"{what}_zero_point")], f"{what}_centered"
        )
    z = b.cast(zp, TensorProto.FLOAT, f"{what}_zero_point_float")
    if axis_shape is not None and b.facts.info(zp).rank == 1:
        z = b.reshape(z, axis_shape, f"{what}_zero_point_axis")
    return b.op("Sub", [x, z], f"{what}_centered")


def _weight_range(
    b: Quant, w_index: int, zp_index: int, axis_shape: list[int]
) -> tuple[np.ndarray | None, int]:
    """(W - zero point) as float32 when both are constants (else None), and a bound on |W - zero point| from the
    type when W is computed."""
    lo, hi = _integer_range(b.quant_type(w_index, zp_index))
    zp = b.maybe_constant(zp_index) if b.input(zp_index) else np.zeros([], np.int64)
    w = b.maybe_constant(w_index)
    if w is not None and zp is not None:
        z = zp.astype(np.int64).reshape(axis_shape if zp.size > 1 else [])
        return (w.astype(np.int64) - z).astype(np.float32), 0
    if zp is None:
        return None, hi - lo
    z = zp.astype(np.int64)
    return None, int(np.max(np.maximum(np.abs(hi - z), np.abs(lo - z))))


def _x_bound(b: Quant, x_index: int, zp_index: int) -> int:
    lo, hi = _integer_range(b.quant_type(x_index, zp_index))
    zp = b.maybe_constant(zp_index) if b.input(zp_index) else np.zeros([])
    if zp is None:
        return hi - lo
    z = zp.astype(np.int64)
    return int(np.max(np.maximum(np.abs(hi - z), np.abs(lo - z))))


def _check_exact(b: Quant, bound: float) -> None:
    if bound >= EXACT_INTEGERS:
        raise b.refuse(
            f"its accumulations can reach {int(bound)}, beyond the integers float32 holds exactly (2^24 = "
            f"{EXACT_INTEGERS}), so the float op could round",
            "keep the integer op, or quantize it in the Q/DQ form (the rounding then is the requantization's)",
        )


@decomposition("", "ConvInteger")
def conv_integer(node, facts, fresh):
    """ConvInteger: Conv on Cast(x) - x_zero_point and W - w_zero_point (folded when constant) in float32, Cast
    to INT32. Exact: every product and partial sum is an integer below 2^24 (checked from the weights)."""
    b = Quant(node, facts, fresh)
    w_name = node.input[1]
    w_rank = facts.info(w_name).rank
    if w_rank is None:
        w_value = b.maybe_constant(1)
        w_rank = w_value.ndim if w_value is not None else None
    if w_rank is None:
        raise b.refuse(f"the rank of the weights '{w_name}' is unknown", "give the weights a static shape")
    axis_shape = [-1] + [1] * (w_rank - 1)
    x_bound = _x_bound(b, 0, 2)
    folded, w_bound = _weight_range(b, 1, 3, axis_shape)
    if folded is not None:
        per_channel = np.abs(folded.astype(np.float64)).reshape(folded.shape[0], -1).sum(axis=1)
        _check_exact(b, float(per_channel.max(initial=0)) * x_bound)
        w = b.const(folded, what="w_centered")
    else:
        shape = facts.info(w_name).shape
        if shape is None or not all(isinstance(d, int) for d in shape[1:]):
            raise b.refuse(
                f"the shape of the weights '{w_name}' is not static", "give the weights a static shape"
            )
        _check_exact(b, float(np.prod(shape[1:])) * w_bound * x_bound)
        w = _centered(b, 1, 3, "w", axis_shape)
    x = _centered(b, 0, 2, "x")
    y = b.op("Conv", [x, w], "conv", **_attrs(node))
    b.cast(y, TensorProto.INT32, out=node.output[0])
    return b.done()


@decomposition("", "MatMulInteger")
def matmul_integer(node, facts, fresh):
    """MatMulInteger: MatMul on Cast(A) - a_zero_point (per row when 1-D) and B - b_zero_point (per column; folded
    when constant) in float32, Cast to INT32. Exact while every sum stays below 2^24 (checked)."""
    b = Quant(node, facts, fresh)
    x_bound = _x_bound(b, 0, 2)
    folded, w_bound = _weight_range(b, 1, 3, [-1])
    if folded is not None:
        columns = np.abs(folded.astype(np.float64))
        _check_exact(b, float(columns.sum(axis=-2).max(initial=0)) * x_bound)
        w = b.const(folded, what="b_centered")
    else:
        shape = facts.info(node.input[1]).shape
        k = shape[-2] if shape is not None and len(shape) >= 2 else None
        if not isinstance(k, int):
            raise b.refuse(f"the inner dimension of '{node.input[1]}' is not static", "give B a static shape")
        _check_exact(b, float(k) * w_bound * x_bound)
        w = _centered(b, 1, 3, "b", [-1])
    x = _centered(b, 0, 2, "a", [-1, 1])
    y = b.op("MatMul", [x, w], "matmul")
    b.cast(y, TensorProto.INT32, out=node.output[0])
    return b.done()


@decomposition(MS, "DynamicQuantizeLSTM")
def dynamic_quantize_lstm(node, facts, fresh):
    """com.microsoft DynamicQuantizeLSTM: the standard LSTM with its constant weights dequantized, (W - zero point)
    * scale per direction (or per gate column), and transposed to LSTM's [num_directions, 4*hidden, input] layout.
    The original quantizes X and the hidden state to 8 bits at each step; the float LSTM does not (approximate)."""
    b = Quant(node, facts, fresh)
    weights = []
    for w_i, s_i, z_i, what in ((1, 8, 9, "W"), (2, 10, 11, "R")):
        w, s, z = (
            b.constant(w_i, what),
            b.constant(s_i, f"{what}_scale"),
            b.constant(z_i, f"{what}_zero_point"),
        )
        per = [w.shape[0], 1, -1] if s.ndim == 2 else [w.shape[0], 1, 1]
        floats = (w.astype(np.int64) - z.astype(np.int64).reshape(per)).astype(np.float32)
        floats = floats * s.astype(np.float32).reshape(per)
        weights.append(b.const(np.ascontiguousarray(floats.transpose(0, 2, 1)), what=f"{what}_float"))
    ins = [b.input(0), *weights, *(b.input(k) for k in range(3, 8))]
    while ins and not ins[-1]:
        ins.pop()
    b.nodes.append(helper.make_node("LSTM", ins, list(node.output), name=b.name("LSTM"), **_attrs(node)))
    return b.done()
