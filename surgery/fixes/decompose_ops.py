"""Standard ONNX operators that some backend or version lacks, decomposed into ops it has (LayerNormalization
with extra outputs, GroupNormalization, AffineGrid, Col2Im, DFT/STFT, Gelu, HardSwish, ...).

Each function is registered with `@decomposition("", op)` (see surgery.fixes.decompose). The ops they emit are
ones TensorRT 8.2 imports (no Reciprocal, Mod, LayerNormalization, Range with float inputs), written for the
model's own opset (ReduceMean's axes are an attribute before opset 18, Unsqueeze's before 13). Values a
decomposition bakes into constants (a DFT basis, a grid) are computed in float64 from the op's definition and
stored in the tensor's type. `Ops` is shared with surgery.fixes.decompose_contrib (onnxruntime's contrib ops).
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper

from surgery.fixes import FixError
from surgery.fixes.decompose import _attrs, decomposition, standard_opset
from surgery.graph import FLOAT_TYPES, INT_TYPES, GraphFacts


def np_type(dtype: int):
    return helper.tensor_dtype_to_np_dtype(dtype)


class Ops:
    """Collects the nodes and initializers of one decomposition. Every new tensor and node gets a fresh name under
    the decomposed node's name; `out=` writes to a name the caller gives (the node's own outputs)."""

    def __init__(self, node: NodeProto, facts: GraphFacts, fresh):
        self.node, self.facts, self._fresh = node, facts, fresh
        self.opset = standard_opset(facts.model)
        self.nodes: list[NodeProto] = []
        self.inits: list[TensorProto] = []
        self._taken: set[str] = set()
        self.label = f"{node.op_type} '{node.name or node.op_type}'"

    def name(self, what: str) -> str:
        base, k = what, 1
        got = self._fresh(base)
        while got in self._taken:
            got, k = self._fresh(f"{base}_{k}"), k + 1
        self._taken.add(got)
        return got

    def const(self, value, dtype=None, what: str = "c") -> str:
        array = np.asarray(value, dtype=np_type(dtype) if dtype is not None else None)
        name = self.name(what)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def op(
        self, op_type: str, inputs: list[str], what: str | None = None, out: str | None = None, **attrs
    ) -> str:
        out = out or self.name(what or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.name(f"{op_type}"), **attrs))
        return out

    def done(self) -> tuple[list[NodeProto], list[TensorProto]]:
        return self.nodes, self.inits

    # -- opset-dependent forms -----------------------------------------------------------------------------------

    def reduce(self, op_type: str, x: str, axes: list[int], keepdims: int = 1, what=None, out=None) -> str:
        """ReduceMean/ReduceSum/...: axes as an input from opset 18 (ReduceSum: 13), an attribute before."""
        since = 13 if op_type == "ReduceSum" else 18
        if self.opset >= since:
            axes_c = self.const(np.array(axes, np.int64), what="axes")
            return self.op(op_type, [x, axes_c], what, out, keepdims=keepdims)
        return self.op(op_type, [x], what, out, axes=list(axes), keepdims=keepdims)

    def unsqueeze(self, x: str, axes: list[int], what=None, out=None) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.const(np.array(axes, np.int64), what="axes")], what, out)
        return self.op("Unsqueeze", [x], what, out, axes=list(axes))

    def reshape(self, x: str, shape: list[int], what=None, out=None) -> str:
        return self.op("Reshape", [x, self.const(np.array(shape, np.int64), what="shape")], what, out)

    def slice(self, x: str, starts, ends, axes, what=None, out=None) -> str:
        ins = [x] + [
            self.const(np.array(v, np.int64), what=w) for v, w in ((starts, "starts"), (ends, "ends"))
        ]
        ins.append(self.const(np.array(axes, np.int64), what="axes"))
        return self.op("Slice", ins, what, out)

    def cast(self, x: str, to: int, what=None, out=None) -> str:
        return self.op("Cast", [x], what or "cast", out, to=to)

    # -- reading the node ----------------------------------------------------------------------------------------

    def input(self, i: int) -> str:
        return self.node.input[i] if i < len(self.node.input) else ""

    def output(self, i: int) -> str:
        """The i-th output's name when the model reads it ('' when absent or unused)."""
        name = self.node.output[i] if i < len(self.node.output) else ""
        if not name:
            return ""
        if name in self.facts.graph_outputs or self.facts.consumers.get(name):
            return name
        return ""

    def dtype(self, tensor: str, default: int = TensorProto.FLOAT) -> int:
        return self.facts.info(tensor).dtype or default

    def constant(self, i: int, what: str) -> np.ndarray:
        """The value of input i, which must be known when the model is built (an initializer, a Constant, or a
        chain of constants, evaluated here)."""
        name = self.input(i)
        if not name:
            raise FixError(f"{self.label} has no {what} input")
        t = self.facts.weights_tensor(name)
        if t is not None:
            return numpy_helper.to_array(t)
        if self.facts.is_constant(name):
            from surgery.fixes.fold_constants import _evaluate

            return np.asarray(_evaluate(self.facts.model, self.facts, [name], {}, None)[name])
        raise FixError(
            f"{self.label}: its {what} ('{name}') is computed at run time; the decomposition needs it constant. "
            "Note: feed a constant (an initializer) for it"
        )

    def refuse(self, why: str, note: str) -> FixError:
        return FixError(f"{self.label}: {why}. Note: {note}")


def _f(value: float, dtype: int) -> np.ndarray:
    return np.array(value, dtype=np_type(dtype))


# -- normalizations ------------------------------------------------------------------------------------------


def normalize(
    b: Ops,
    x: str,
    axes: list[int],
    epsilon: float,
    dtype: int,
    *,
    mean_out: str = "",
    inv_std_out: str = "",
) -> str:
    """(x - mean) / sqrt(var + epsilon) over `axes` (keepdims), in x's type; var is the mean of squared
    deviations (two passes). Mean and 1 / sqrt(var + epsilon) go to mean_out / inv_std_out when given."""
    mean = b.reduce("ReduceMean", x, axes, what="mean", out=mean_out or None)
    d = b.op("Sub", [x, mean], "centered")
    var = b.reduce("ReduceMean", b.op("Mul", [d, d], "squared"), axes, what="variance")
    std = b.op("Sqrt", [b.op("Add", [var, b.const(_f(epsilon, dtype), what="epsilon")], "var_eps")], "std")
    if inv_std_out:
        b.op("Div", [b.const(_f(1.0, dtype), what="one"), std], out=inv_std_out)
    return b.op("Div", [d, std], "normalized")


@decomposition("", "LayerNormalization")
def layer_normalization(node, facts, fresh):
    """LayerNormalization (opset 17): normalized over axes [axis, rank), times Scale plus B, computed in
    stash_type; Mean and InvStdDev outputs when the model reads them."""
    b = Ops(node, facts, fresh)
    a = _attrs(node)
    x = node.input[0]
    axis, eps, stash = a.get("axis", -1), a.get("epsilon", 1e-5), a.get("stash_type", 1)
    rank = facts.info(x).rank
    if axis < 0 and rank is None:
        axes = list(range(axis, 0))  # ReduceMean takes negative axes: no rank needed
    else:
        if rank is None:
            raise b.refuse(
                f"the rank of '{x}' is unknown and axis={axis} counts from the front",
                "freeze the input shapes (or export with a negative axis) first",
            )
        axes = list(range(axis % rank, rank))
    xt = b.dtype(x)
    if xt not in FLOAT_TYPES:
        raise b.refuse(
            f"input '{x}' has type {TensorProto.DataType.Name(xt)}", "LayerNormalization is for floats"
        )
    stash_t = stash if stash in FLOAT_TYPES else TensorProto.FLOAT
    xs = b.cast(x, stash_t, "stashed") if stash_t != xt else x
    norm = normalize(b, xs, axes, eps, stash_t, mean_out=b.output(1), inv_std_out=b.output(2))
    if stash_t != xt:
        norm = b.cast(norm, xt, "normalized_cast")
    bias = b.input(2)
    scaled = b.op("Mul", [norm, node.input[1]], "scaled", None if bias else node.output[0])
    if bias:
        b.op("Add", [scaled, bias], out=node.output[0])
    return b.done()


@decomposition("", "GroupNormalization")
def group_normalization(node, facts, fresh):
    """GroupNormalization: x reshaped to [N, G, -1], normalized over the last axis, back to x's shape. Opset 18
    scales and shifts per group (in the grouped shape); opset 21 per channel."""
    b = Ops(node, facts, fresh)
    a = _attrs(node)
    x, scale, bias = node.input[0], node.input[1], node.input[2]
    groups, eps, stash = a["num_groups"], a.get("epsilon", 1e-5), a.get("stash_type", 1)
    xt = b.dtype(x)
    stash_t = stash if stash in FLOAT_TYPES else TensorProto.FLOAT
    xs = b.cast(x, stash_t, "stashed") if stash_t != xt else x
    grouped = b.reshape(xs, [0, groups, -1], "grouped")
    norm = normalize(b, grouped, [2], eps, stash_t)
    if stash_t != xt:
        norm = b.cast(norm, xt, "normalized_cast")
    per_channel = b.opset >= 21
    if not per_channel:  # opset 18: scale and bias are per group, [G]
        norm = b.op("Mul", [norm, b.reshape(scale, [1, groups, 1], "group_scale")], "scaled")
        norm = b.op("Add", [norm, b.reshape(bias, [1, groups, 1], "group_bias")], "shifted")
        b.op("Reshape", [norm, b.op("Shape", [x], "x_shape")], out=node.output[0])
        return b.done()
    channels = next(
        (d for d in (facts.info(scale).shape or (None,))[:1] if isinstance(d, int)), None
    ) or next((d for d in (facts.info(x).shape or (None, None))[1:2] if isinstance(d, int)), None)
    if channels is None:
        raise b.refuse(
            f"the channel count of '{x}' is unknown (and scale has no static shape)",
            "freeze the input shapes first",
        )
    per_c = b.reshape(norm, [0, channels, -1], "per_channel")
    per_c = b.op("Mul", [per_c, b.reshape(scale, [channels, 1], "channel_scale")], "scaled")
    per_c = b.op("Add", [per_c, b.reshape(bias, [channels, 1], "channel_bias")], "shifted")
    b.op("Reshape", [per_c, b.op("Shape", [x], "x_shape")], out=node.output[0])
    return b.done()


# -- elementwise ---------------------------------------------------------------------------------------------


@decomposition("", "HardSwish")
def hard_swish(node, facts, fresh):
    """HardSwish(x) = x * max(0, min(1, x / 6 + 1/2)) = x * HardSigmoid(x, alpha=1/6, beta=0.5)."""
    b = Ops(node, facts, fresh)
    x = node.input[0]
    gate = b.op("HardSigmoid", [x], "gate", alpha=1.0 / 6.0, beta=0.5)
    b.op("Mul", [x, gate], out=node.output[0])
    return b.done()


@decomposition("", "Reciprocal")
def reciprocal(node, facts, fresh):
    """Reciprocal(x) = 1 / x (a correctly rounded division, as the reciprocal is)."""
    b = Ops(node, facts, fresh)
    x = node.input[0]
    b.op("Div", [b.const(_f(1.0, b.dtype(x)), what="one"), x], out=node.output[0])
    return b.done()


@decomposition("", "Gelu")
def gelu(node, facts, fresh):
    """Gelu (opset 20): x/2 * (1 + erf(x / sqrt 2)); approximate='tanh': x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715
    x^3))), as the op defines it."""
    b = Ops(node, facts, fresh)
    approx = _attrs(node).get("approximate", b"none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    x = node.input[0]
    dt = b.dtype(x)
    if approx == "tanh":
        gelu_tanh(b, x, node.output[0], dt)
    elif approx == "none":
        gelu_erf(b, x, node.output[0], dt)
    else:
        raise b.refuse(f"approximate='{approx}' is not defined", "the op defines 'none' and 'tanh'")
    return b.done()


def gelu_erf(b: Ops, x: str, out: str, dt: int) -> str:
    e = b.op("Erf", [b.op("Mul", [x, b.const(_f(1 / np.sqrt(2.0), dt), what="rsqrt2")], "scaled")], "erf")
    half_x = b.op("Mul", [x, b.const(_f(0.5, dt), what="half")], "half_x")
    return b.op("Mul", [half_x, b.op("Add", [e, b.const(_f(1.0, dt), what="one")], "one_plus")], out=out)


def gelu_tanh(b: Ops, x: str, out: str, dt: int) -> str:
    """x * (1/2 + 1/2 tanh(x * (a + b x^2))), a = sqrt(2/pi), b = 0.044715 a."""
    alpha = np.sqrt(2.0 / np.pi)
    x2 = b.op("Mul", [x, x], "x_squared")
    inner = b.op(
        "Add",
        [
            b.op("Mul", [x2, b.const(_f(alpha * 0.044715, dt), what="beta")]),
            b.const(_f(alpha, dt), what="alpha"),
        ],
    )
    t = b.op("Tanh", [b.op("Mul", [x, inner], "tanh_in")], "tanh")
    half = b.const(_f(0.5, dt), what="half")
    gate = b.op("Add", [b.op("Mul", [t, half], "half_tanh"), half], "gate")
    return b.op("Mul", [x, gate], out=out)


@decomposition("", "Mod")
def mod(node, facts, fresh):
    """Mod with TensorRT's integer Div: r = a - Div(a, b) * b, then r is moved by b where it is non-zero and its
    sign is not the one the op asks for (b's for fmod=0, a's for fmod=1): right whether Div truncates or floors.
    Float fmod=1: a - trunc(a / b) * b (close to C fmod, not exact: a / b rounds)."""
    b = Ops(node, facts, fresh)
    x, y = node.input[0], node.input[1]
    fmod = _attrs(node).get("fmod", 0)
    dt = b.dtype(x, 0)
    if dt == 0:
        raise b.refuse(f"the type of '{x}' is unknown", "run shape inference or give the inputs types")
    if dt in FLOAT_TYPES:
        if not fmod:
            raise b.refuse("fmod=0 on floats is not defined by the op", "set fmod=1 for floats")
        q = b.op("Div", [x, y], "quotient")
        zero = b.const(_f(0, dt), what="zero")
        trunc = b.op(
            "Where",
            [b.op("Less", [q, zero], "negative"), b.op("Ceil", [q], "ceil"), b.op("Floor", [q], "floor")],
            "truncated",
        )
        b.op("Sub", [x, b.op("Mul", [trunc, y], "multiple")], out=node.output[0])
        return b.done()
    if dt not in INT_TYPES:
        raise b.refuse(f"input '{x}' has type {TensorProto.DataType.Name(dt)}", "Mod is for numbers")
    r = b.op("Sub", [x, b.op("Mul", [b.op("Div", [x, y], "quotient"), y], "multiple")], "remainder")
    # r has the wrong sign where r < 0 < want or want < 0 < r (no Sign or Xor: TensorRT 8.0 has neither)
    want = x if fmod else y
    zero = b.const(_f(0, dt), what="zero")
    below = b.op(
        "And", [b.op("Less", [r, zero], "r_neg"), b.op("Greater", [want, zero], "want_pos")], "below"
    )
    above = b.op(
        "And", [b.op("Greater", [r, zero], "r_pos"), b.op("Less", [want, zero], "want_neg")], "above"
    )
    wrong = b.op("Or", [below, above], "wrong_sign")
    moved = b.op("Sub" if fmod else "Add", [r, y], "moved")
    b.op("Where", [wrong, moved, r], out=node.output[0])
    return b.done()


@decomposition("", "Xor")
def xor(node, facts, fresh):
    """Xor(a, b) = Or(And(a, Not(b)), And(Not(a), b)), on booleans (with broadcasting, as Xor's)."""
    b = Ops(node, facts, fresh)
    x, y = node.input[0], node.input[1]
    only_x = b.op("And", [x, b.op("Not", [y], "not_b")], "only_a")
    only_y = b.op("And", [b.op("Not", [x], "not_a"), y], "only_b")
    b.op("Or", [only_x, only_y], out=node.output[0])
    return b.done()


@decomposition("", "Bernoulli")
def bernoulli(node, facts, fresh):
    """Bernoulli(p) as u < p with u = RandomUniformLike(p) on [0, 1): each element is 1 with probability p, the
    same distribution, drawn from another generator (not sample for sample; `seed` is passed on). The draws are
    float32 (p of another type is cast to it)."""
    b = Ops(node, facts, fresh)
    a = _attrs(node)
    x = node.input[0]
    dt = b.dtype(x)
    kw = {"dtype": TensorProto.FLOAT}  # float32 draws: TensorRT's RandomUniformLike has no double
    if "seed" in a:
        kw["seed"] = a["seed"]
    u = b.op("RandomUniformLike", [x], "uniform", low=0.0, high=1.0, **kw)
    p = x if dt == TensorProto.FLOAT else b.cast(x, TensorProto.FLOAT, "p")
    hit = b.op("Less", [u, p], "hit")
    b.cast(hit, a.get("dtype", dt), out=node.output[0])
    return b.done()


# -- grids and images ----------------------------------------------------------------------------------------


def _axis_coords(size: int, align_corners: int) -> np.ndarray:
    """Normalized coordinates of `size` points on [-1, 1]: the corners' centres (align_corners=1) or the
    pixels' centres."""
    i = np.arange(size, dtype=np.float64)
    if align_corners:
        return -1.0 + 2.0 * i / (size - 1) if size > 1 else np.full(size, -1.0)
    return -1.0 + (2.0 * i + 1.0) / size


@decomposition("", "AffineGrid")
def affine_grid(node, facts, fresh):
    """AffineGrid with a constant size: the homogeneous base grid (x, y[, z], 1) is a constant [H*W, 3]; the
    grid is base @ theta^T, [N, H*W, 2] reshaped to [N, H, W, 2] (3-D: [N, D, H, W, 3])."""
    b = Ops(node, facts, fresh)
    size = [int(v) for v in b.constant(1, "size").reshape(-1)]
    align = _attrs(node).get("align_corners", 0)
    spatial = size[2:]
    if len(spatial) not in (2, 3):
        raise b.refuse(f"size {size} is neither 2-D [N, C, H, W] nor 3-D [N, C, D, H, W]", "give such a size")
    if align and 1 in spatial:
        raise b.refuse(
            f"size {size} has a dimension of 1 with align_corners=1, where the op divides by zero",
            "use align_corners=0 or sizes above 1",
        )
    axes = [_axis_coords(s, align) for s in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")  # D, H, W order
    coords = [m.reshape(-1) for m in reversed(mesh)]  # x (W) first, then y, then z
    base = np.stack([*coords, np.ones_like(coords[0])], axis=1)
    dt = b.dtype(node.input[0])
    theta_t = b.op("Transpose", [node.input[0]], "theta_t", perm=[0, 2, 1])
    flat = b.op("MatMul", [b.const(base.astype(np_type(dt)), what="base_grid"), theta_t], "grid_flat")
    b.reshape(flat, [0, *spatial, len(spatial)], out=node.output[0])
    return b.done()


@decomposition("", "Col2Im")
def col2im(node, facts, fresh):
    """Col2Im with constant image and block shapes: the columns reshaped to [N, C*K, L1, L2, ...] go through a
    grouped ConvTranspose (group C) whose one-hot kernel puts column k at block offset k; overlapping blocks are
    summed, as Col2Im sums them. One spatial dimension is done as two (a unit width) for 2-D deconvolution."""
    b = Ops(node, facts, fresh)
    a = _attrs(node)
    image = [int(v) for v in b.constant(1, "image_shape").reshape(-1)]
    block = [int(v) for v in b.constant(2, "block_shape").reshape(-1)]
    n = len(image)
    if len(block) != n:
        raise b.refuse(
            f"image_shape {image} and block_shape {block} differ in rank", "give both the same rank"
        )
    dil = list(a.get("dilations", [1] * n))
    stride = list(a.get("strides", [1] * n))
    pads = list(a.get("pads", [0] * (2 * n)))
    x = node.input[0]
    shape = facts.info(x).shape
    ck = shape[1] if shape is not None and len(shape) == 3 else None
    k = int(np.prod(block))
    if not isinstance(ck, int):
        raise b.refuse(
            f"the channel dimension of '{x}' is not static ({facts.info(x).shape_str()})",
            "freeze the input shapes first",
        )
    if ck % k:
        raise b.refuse(f"its {ck} channels are not a multiple of the block size {k}", "check the block shape")
    c = ck // k
    blocks, extra = [], []
    for d in range(n):
        span = image[d] + pads[d] + pads[n + d] - dil[d] * (block[d] - 1) - 1
        if span < 0:
            raise b.refuse(f"the block does not fit the padded image on axis {d}", "check the shapes")
        blocks.append(span // stride[d] + 1)
        extra.append(span % stride[d])
    one_d = n == 1
    if one_d:  # a unit second axis: TensorRT deconvolves in 2-D or 3-D only
        image, block, dil, stride, blocks = (v + [1] for v in (image, block, dil, stride, blocks))
        extra, pads = extra + [0], [pads[0], 0, pads[1], 0]
    weight = np.zeros([ck, 1, *block], np.float64)
    for ch in range(c):
        for j, offset in enumerate(np.ndindex(*block)):
            weight[(ch * k + j, 0, *offset)] = 1.0
    dt = b.dtype(x)
    grid = b.reshape(x, [0, ck, *blocks], "blocks")
    attrs = {"group": c, "kernel_shape": block, "strides": stride, "dilations": dil, "pads": pads}
    if any(extra):
        attrs["output_padding"] = extra
    w = b.const(weight.astype(np_type(dt)), what="one_hot")
    if not one_d:
        b.op("ConvTranspose", [grid, w], out=node.output[0], **attrs)
        return b.done()
    folded = b.op("ConvTranspose", [grid, w], "image", **attrs)
    b.reshape(folded, [0, c, image[0]], out=node.output[0])
    return b.done()


# -- Fourier transforms --------------------------------------------------------------------------------------


def dft_basis(rows: int, n_fft: int, bins: int, channels: int, inverse: bool = False) -> np.ndarray:
    """[rows, channels, bins, 2] float64: input sample j (real, or real and imaginary part) to output bin k
    (real and imaginary part) of the DFT of length n_fft: X[k] = sum_j x[j] exp(-2 pi i j k / n_fft) (inverse:
    +, divided by n_fft). Samples j >= n_fft are cut (zero rows); fewer rows than n_fft is zero padding."""
    w = np.zeros([rows, channels, bins, 2], np.float64)
    j = np.arange(min(rows, n_fft))[:, None]
    k = np.arange(bins)[None, :]
    theta = 2.0 * np.pi * ((j * k) % n_fft) / n_fft
    cos, sin = np.cos(theta), np.sin(theta)
    sign = 1.0 if inverse else -1.0  # exp(sign i theta) = cos + sign i sin
    n = len(j)
    w[:n, 0, :, 0], w[:n, 0, :, 1] = cos, sign * sin  # real part of x
    if channels == 2:  # imaginary part of x: i * (cos + sign i sin) = -sign sin + i cos
        w[:n, 1, :, 0], w[:n, 1, :, 1] = -sign * sin, cos
    return w / n_fft if inverse else w


@decomposition("", "DFT")
def dft(node, facts, fresh):
    """DFT along a constant axis of static length: one MatMul with the constant DFT matrix, the axis and the
    real/imaginary dim moved last and flattened ([..., n * c] @ [n * c, m * 2]); dft_length pads or cuts, as in
    the op; onesided keeps bins 0..N/2."""
    b = Ops(node, facts, fresh)
    a = _attrs(node)
    x = node.input[0]
    shape = facts.info(x).shape
    if shape is None:
        raise b.refuse(f"the rank of '{x}' is unknown", "freeze the input shapes first")
    r = len(shape)
    if b.opset >= 20:
        axis = int(b.constant(2, "axis").reshape(-1)[0]) if b.input(2) else -2
    else:
        axis = a.get("axis", 1)
    axis %= r
    channels, n = shape[-1], shape[axis]
    if axis == r - 1 or r < 2:
        raise b.refuse(f"axis {axis} is the real/imaginary dimension", "pick a signal axis")
    if channels not in (1, 2) or not isinstance(n, int):
        raise b.refuse(
            f"'{x}' has shape {facts.info(x).shape_str()}; the DFT matrix needs a static signal axis and a last "
            "dimension of 1 (real) or 2 (complex)",
            "freeze the input shapes first",
        )
    n_fft = int(b.constant(1, "dft_length").reshape(-1)[0]) if b.input(1) else n
    inverse, onesided = a.get("inverse", 0), a.get("onesided", 0)
    if onesided and (channels == 2 or inverse):
        raise b.refuse(
            "onesided output of a complex or inverse transform", "only a real forward DFT can be onesided"
        )
    bins = n_fft // 2 + 1 if onesided else n_fft
    basis = dft_basis(n, n_fft, bins, channels, bool(inverse)).reshape(n * channels, bins * 2)
    perm = [i for i in range(r - 1) if i != axis] + [axis, r - 1]
    moved = b.op("Transpose", [x], "moved", perm=perm) if perm != list(range(r)) else x
    flat = b.reshape(moved, [0] * (r - 2) + [n * channels], "flat")
    spectrum = b.op(
        "MatMul", [flat, b.const(basis.astype(np_type(b.dtype(x))), what="dft_matrix")], "spectrum"
    )
    if perm == list(range(r)):
        b.reshape(spectrum, [0] * (r - 2) + [bins, 2], out=node.output[0])
        return b.done()
    back = b.reshape(spectrum, [0] * (r - 2) + [bins, 2], "unflat")
    b.op("Transpose", [back], out=node.output[0], perm=[int(p) for p in np.argsort(perm)])
    return b.done()


@decomposition("", "STFT")
def stft(node, facts, fresh):
    """STFT with a constant frame_step, window and frame_length: a strided Conv whose kernel is the windowed DFT
    basis ([2 * bins, channels, 1, frame_length]), the signal as [B, channels, 1, L]; its [B, 2 * bins, 1, F]
    output becomes [B, F, bins, 2]. The number of frames follows the signal's length at run time."""
    b = Ops(node, facts, fresh)
    x = node.input[0]
    rank = facts.info(x).rank
    shape = facts.info(x).shape
    if rank not in (2, 3) or (rank == 3 and shape[2] not in (1, 2)):
        raise b.refuse(
            f"signal '{x}' has shape {facts.info(x).shape_str()}",
            "the decomposition needs [batch, length] or [batch, length, 1 or 2] with a static last dimension",
        )
    channels = 1 if rank == 2 else shape[2]
    step = int(b.constant(1, "frame_step").reshape(-1)[0])
    window = b.constant(2, "window").astype(np.float64).reshape(-1) if b.input(2) else None
    if b.input(3):
        n_fft = int(b.constant(3, "frame_length").reshape(-1)[0])
    elif window is not None:
        n_fft = len(window)
    else:
        raise b.refuse("it has neither a window nor a frame_length", "give one of them")
    if window is None:
        window = np.ones(n_fft)
    if len(window) != n_fft:
        raise b.refuse(f"its window has {len(window)} samples, frame_length is {n_fft}", "make them agree")
    onesided = _attrs(node).get("onesided", 1)
    if onesided and channels == 2:
        raise b.refuse("onesided output of a complex signal", "set onesided=0 for complex signals")
    bins = n_fft // 2 + 1 if onesided else n_fft
    basis = dft_basis(n_fft, n_fft, bins, channels) * window[:, None, None, None]
    kernel = basis.transpose(2, 3, 1, 0).reshape(bins * 2, channels, 1, n_fft)
    dt = b.dtype(x)
    if rank == 2:
        planes = b.unsqueeze(x, [1, 2], "planes")
    else:
        planes = b.unsqueeze(b.op("Transpose", [x], "channels_first", perm=[0, 2, 1]), [2], "planes")
    w = b.const(kernel.astype(np_type(dt)), what="dft_kernel")
    frames = b.op("Conv", [planes, w], "frames", kernel_shape=[1, n_fft], strides=[1, step])
    split = b.reshape(frames, [0, bins, 2, -1], "bins")
    b.op("Transpose", [split], out=node.output[0], perm=[0, 3, 1, 2])
    return b.done()


# -- indexing ------------------------------------------------------------------------------------------------


@decomposition("", "OneHot")
def one_hot(node, facts, fresh):
    """OneHot with a constant depth: Equal(indices, [0, depth)) along the new axis, Where(on, off). Negative
    indices count from depth; indices outside [-depth, depth) match no position (all off); float indices are
    cast to int64 first, as the op says."""
    b = Ops(node, facts, fresh)
    indices, values = node.input[0], node.input[2]
    depth = int(b.constant(1, "depth").reshape(-1)[0])
    axis = _attrs(node).get("axis", -1)
    rank = facts.info(indices).rank
    if axis != -1 and rank is None:
        raise b.refuse(
            f"the rank of '{indices}' is unknown and axis={axis}",
            "freeze the input shapes first (or use axis=-1)",
        )
    out_rank = (rank or 0) + 1
    axis = -1 if axis == -1 else axis % out_rank
    it = b.dtype(indices, TensorProto.INT64)
    if it not in (TensorProto.INT32, TensorProto.INT64):
        indices, it = b.cast(indices, TensorProto.INT64, "indices_int"), TensorProto.INT64
    trailing = 0 if axis == -1 else out_rank - 1 - axis
    positions = np.arange(depth).reshape([depth] + [1] * trailing)
    wrapped = b.op(
        "Where",
        [
            b.op("Less", [indices, b.const(_f(0, it), what="zero")], "negative"),
            b.op("Add", [indices, b.const(_f(depth, it), what="depth")], "from_end"),
            indices,
        ],
        "wrapped",
    )
    expanded = b.unsqueeze(wrapped, [axis], "expanded")
    hot = b.op("Equal", [expanded, b.const(positions.astype(np_type(it)), what="positions")], "hot")
    off = b.op("Gather", [values, b.const(np.array(0, np.int64), what="off_index")], "off", axis=0)
    on = b.op("Gather", [values, b.const(np.array(1, np.int64), what="on_index")], "on", axis=0)
    b.op("Where", [hot, on, off], out=node.output[0])
    return b.done()


# -- pooling and reductions --------------------------------------------------------------------------------------


@decomposition("", "LpPool")
def lp_pool(node, facts, fresh):
    """LpPool(x; p) = (sum over each window of |x|^p)^(1/p) = (AveragePool(|x|^p) * window size)^(1/p), with
    the pads counted (they add 0) and the node's kernel, strides, pads, auto_pad, ceil_mode and dilations."""
    b = Ops(node, facts, fresh)
    attrs = _attrs(node)
    p = float(attrs.get("p", 2))
    if p <= 0:
        raise b.refuse(f"p = {p:g}", "LpPool needs p > 0")
    kernel = list(attrs["kernel_shape"])
    pool = {k: attrs[k] for k in ("kernel_shape", "strides", "pads", "auto_pad") if k in attrs}
    if attrs.get("ceil_mode") and _ceil_adds_windows(facts.info(node.input[0]).shape, attrs):
        raise b.refuse(
            "ceil_mode=1 adds windows past the input's end",
            "AveragePool divides those windows by their clipped size, so the sum cannot be recovered; export "
            "with ceil_mode=0 or pad the input",
        )
    dilations = attrs.get("dilations")
    if dilations and any(d != 1 for d in dilations):
        if b.opset < 19:
            raise b.refuse(
                f"dilations {list(dilations)} at opset {b.opset}",
                "AveragePool takes dilations from opset 19: upgrade the model's opset first",
            )
        pool["dilations"] = list(dilations)
    x = node.input[0]
    dt = b.dtype(x)
    powered = b.op("Pow", [b.op("Abs", [x], "abs"), b.const(_f(p, dt), what="p")], "powered")
    mean = b.op("AveragePool", [powered], "mean", count_include_pad=1, **pool)
    total = b.op("Mul", [mean, b.const(_f(float(np.prod(kernel)), dt), what="window")], "total")
    b.op("Pow", [total, b.const(_f(1.0 / p, dt), what="inverse_p")], out=node.output[0])
    return b.done()


def _ceil_adds_windows(shape, attrs) -> bool:
    """Whether ceil_mode=1 gives more windows than floor on this input (True when the dims are not known)."""
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or shape is None:
        return True
    spatial = shape[2:]
    if not all(isinstance(d, int) for d in spatial):
        return True
    k = list(attrs["kernel_shape"])
    n = len(k)
    strides = list(attrs.get("strides", [1] * n))
    dil = list(attrs.get("dilations", [1] * n))
    pads = list(attrs.get("pads", [0] * 2 * n))
    for i, size in enumerate(spatial):
        span = size + pads[i] + pads[i + n] - ((k[i] - 1) * dil[i] + 1)
        if span % strides[i]:
            return True
    return False


def _bool_reduce(node, facts, fresh):
    """ReduceMax / ReduceMin over BOOL (opset 20) as the same reduction over 0/1 in INT32, cast back: any / all."""
    b = Ops(node, facts, fresh)
    x = node.input[0]
    if b.dtype(x) != TensorProto.BOOL:
        raise b.refuse(f"its input '{x}' is not BOOL", "only a reduction over BOOL needs this")
    ints = b.cast(x, TensorProto.INT32, "as_int")
    reduced = b.name("reduced")
    b.nodes.append(
        helper.make_node(
            node.op_type, [ints, *node.input[1:]], [reduced], name=b.name(node.op_type), **_attrs(node)
        )
    )
    b.cast(reduced, TensorProto.BOOL, out=node.output[0])
    return b.done()


decomposition("", "ReduceMax")(_bool_reduce)
decomposition("", "ReduceMin")(_bool_reduce)
