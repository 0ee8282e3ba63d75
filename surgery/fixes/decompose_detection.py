"""Detection ops that TensorRT before 8.5 has no importer for (GridSample, RoiAlign), decomposed into ops the
8.0-8.4 parsers take: Gather/GatherElements on a flattened input, Floor, Clip, Where, Mul/Add.

Both follow onnxruntime's CPU kernels step by step (the order of the float operations too), so the fixed model
computes what onnxruntime computes for the original: GridSample's coordinates are denormalized, rounded (nearest:
half to even, as std::nearbyint) or floored (linear), and each corner pixel is read through the padding mode
(zeros: 0 outside, border: clamped index, reflection: the index reflected at the borders); RoiAlign samples a
fixed sampling_ratio x sampling_ratio grid per bin with the kernel's clamping, and averages, or takes the maximum
of the weighted corner values as onnxruntime's max mode does. What needs data-dependent sizes (RoiAlign with
sampling_ratio 0) or other shapes (5-D GridSample, cubic) is refused, naming the node.

The registered decompositions are used through the `decompose` primitive (rules gridsample-decompose,
roialign-decompose); importing this module registers them (surgery.fixes loads it).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from surgery.fixes.decompose import _attrs, decomposition
from surgery.fixes.decompose_ops import FLOAT_TYPES, Ops, _f

I64 = TensorProto.INT64


def _text(value, default: str) -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def _static_hw(b: Ops, x: str, what: str) -> tuple[int, int]:
    """(H, W) of a 4-D input whose spatial dims are static; refuses otherwise."""
    info = b.facts.info(x)
    if info.shape is None:
        raise b.refuse(f"the rank of {what} '{x}' is unknown", "freeze the input shapes first")
    if len(info.shape) != 4:
        raise b.refuse(
            f"{what} '{x}' is {len(info.shape)}-D ({info.shape_str()}); the decomposition is for 4-D [N, C, H, W]",
            "only 4-D inputs are decomposed",
        )
    h, w = info.shape[2], info.shape[3]
    if not (isinstance(h, int) and isinstance(w, int)):
        raise b.refuse(
            f"the spatial dims of {what} '{x}' are not static ({info.shape_str()}); the flattened indices need H "
            "and W",
            "freeze the input shapes first",
        )
    dt = b.dtype(x)
    if dt not in FLOAT_TYPES:
        raise b.refuse(
            f"{what} '{x}' has type {TensorProto.DataType.Name(dt)}", "the op is for float tensors"
        )
    return h, w


def _not_outside(b: Ops, v: str, low: float, high: float, dt: int, what: str) -> str:
    """Not(v < low or v > high): the parsers before 8.5 have Less/Greater/Not/Or (no GreaterOrEqual)."""
    below = b.op("Less", [v, b.const(_f(low, dt), what="low")], f"{what}_below")
    above = b.op("Greater", [v, b.const(_f(high, dt), what="high")], f"{what}_above")
    return b.op("Not", [b.op("Or", [below, above], f"{what}_outside")], f"{what}_inside")


def _clip(b: Ops, v: str, low: float, high: float, dt: int, what: str) -> str:
    """Clip with constant bounds (initializers, as the 8.0 table asks; attributes before opset 11)."""
    if b.opset < 11:
        return b.op("Clip", [v], what, min=float(low), max=float(high))
    return b.op("Clip", [v, b.const(_f(low, dt), what="min"), b.const(_f(high, dt), what="max")], what)


def _round_half_even(b: Ops, v: str, dt: int) -> str:
    """Round to nearest, ties to even (std::nearbyint), from Floor: the 8.0 parser has no Round. f = floor(v),
    d = v - f; up when d > 1/2, or d = 1/2 and f is odd."""
    f = b.op("Floor", [v], "floor")
    d = b.op("Sub", [v, f], "fraction")
    half, two = b.const(_f(0.5, dt), what="half"), b.const(_f(2.0, dt), what="two")
    odd = b.op(
        "Equal",
        [
            b.op("Sub", [f, b.op("Mul", [b.op("Floor", [b.op("Div", [f, two])]), two])], "parity"),
            b.const(_f(1.0, dt)),
        ],
        "odd",
    )
    tie_up = b.op("And", [b.op("Equal", [d, half], "tie"), odd], "tie_up")
    up = b.op("Or", [b.op("Greater", [d, half], "over_half"), tie_up], "up")
    return b.op("Where", [up, b.op("Add", [f, b.const(_f(1.0, dt), what="one")], "ceil"), f], "rounded")


def _reflect_index(b: Ops, c: str, size: int, align_corners: int, dt: int, what: str) -> str:
    """An integer-valued coordinate reflected into [0, size), as onnxruntime's GsReflect does to a pixel index:
    borders -0.5 and size - 0.5 (align_corners 0: period 2 * size, m -> 2 * size - 1 - m past the end) or 0 and
    size - 1 (align_corners 1: period 2 * (size - 1), m -> 2 * (size - 1) - m)."""
    period = 2 * size if not align_corners else 2 * (size - 1)
    last = 2 * size - 1 if not align_corners else 2 * (size - 1)
    p = b.const(_f(period, dt), what="period")
    m = b.op("Sub", [c, b.op("Mul", [b.op("Floor", [b.op("Div", [c, p])]), p])], f"{what}_mod")
    m = _clip(b, m, 0, period - 1, dt, f"{what}_mod_clipped")  # float rounding of c / p for huge c
    back = b.op("Sub", [b.const(_f(last, dt), what="last"), m], f"{what}_back")
    past = b.op("Greater", [m, b.const(_f(size - 1, dt), what="size_minus_one")], f"{what}_past")
    return b.op("Where", [past, back, m], f"{what}_reflected")


@decomposition("", "GridSample")
def grid_sample(node, facts, fresh):
    """GridSample on a 4-D input with static H and W (opset 16 names bilinear/nearest, opset 20 linear/nearest;
    padding zeros, border or reflection; both align_corners): the input flattened to [N, C, H*W]; per output
    point the corner pixels' flat indices y * W + x (Floor of the denormalized grid, or round half to even for
    nearest) read by GatherElements; bilinear weights combined as onnxruntime does,
    dy2 * (dx2 * p11 + dx1 * p12) + dy1 * (dx2 * p21 + dx1 * p22)."""
    b = Ops(node, facts, fresh)
    a = _attrs(node)
    x, grid = node.input[0], node.input[1]
    mode = _text(a.get("mode"), "bilinear")
    padding = _text(a.get("padding_mode"), "zeros")
    align = int(a.get("align_corners", 0))
    if mode not in ("bilinear", "linear", "nearest"):
        raise b.refuse(f"mode '{mode}' is not decomposed", "only bilinear/linear and nearest are")
    if padding not in ("zeros", "border", "reflection"):
        raise b.refuse(f"padding_mode '{padding}' is unknown", "use zeros, border or reflection")
    h, w = _static_hw(b, x, "input")
    grid_rank = facts.info(grid).rank
    if grid_rank not in (None, 4):
        raise b.refuse(
            f"grid '{grid}' is {grid_rank}-D", "the grid of a 4-D GridSample is [N, H_out, W_out, 2]"
        )
    if padding == "reflection" and align and (h == 1 or w == 1):
        raise b.refuse(
            "reflection with align_corners=1 on a dimension of size 1 has no reflection range",
            "use border padding (the same values there)",
        )
    dt = b.dtype(x)
    c = lambda v, what="c": b.const(_f(v, dt), what=what)  # noqa: E731

    def coordinate(k: int, size: int, what: str) -> str:
        g = b.op("Gather", [grid, b.const(np.array(k, np.int64), what="component")], f"g{what}", axis=3)
        g = b.unsqueeze(b.op("Flatten", [g], f"g{what}_flat", axis=1), [1])  # [N, 1, H_out * W_out]
        plus_one = b.op("Add", [g, c(1.0, "one")], f"g{what}_plus_one")
        if align:  # [-1, 1] -> [0, size - 1]
            return b.op(
                "Mul", [b.op("Div", [plus_one, c(2.0, "two")]), c(size - 1.0, "size_minus_one")], what
            )
        scaled = b.op("Sub", [b.op("Mul", [plus_one, c(float(size), "size")]), c(1.0, "one")])
        return b.op("Div", [scaled, c(2.0, "two")], what)  # [-1, 1] -> [-0.5, size - 0.5]

    ix, iy = coordinate(0, w, "x"), coordinate(1, h, "y")
    shape_x = b.op("Shape", [x], "x_shape")
    flat = b.reshape(x, [0, 0, h * w], "flat")  # [N, C, H * W]
    channels = facts.info(x).shape[1]
    if isinstance(channels, int):
        spread = b.const(np.array([1, channels, 1], np.int64), what="spread")
    else:
        spread = b.op(
            "Concat",
            [
                b.const(np.array([1], np.int64)),
                b.slice(shape_x, [1], [2], [0], "channels"),
                b.const(np.array([1], np.int64)),
            ],
            "spread",
            axis=0,
        )

    def pixel(yy: str, xx: str, what: str) -> str:
        """[N, C, L]: the input at integer-valued coordinates (yy, xx) [N, 1, L], through the padding mode."""
        inside = None
        if padding == "zeros":
            inside = b.op(
                "And",
                [
                    _not_outside(b, yy, 0, h - 1, dt, f"{what}_y"),
                    _not_outside(b, xx, 0, w - 1, dt, f"{what}_x"),
                ],
                f"{what}_inside",
            )
        if padding == "reflection":
            yy = _reflect_index(b, yy, h, align, dt, f"{what}_y")
            xx = _reflect_index(b, xx, w, align, dt, f"{what}_x")
        else:  # border clamps; zeros clamps too, to read a valid pixel that Where then drops
            yy, xx = (
                _clip(b, yy, 0, h - 1, dt, f"{what}_y_clamped"),
                _clip(b, xx, 0, w - 1, dt, f"{what}_x_clamped"),
            )
        row = b.op("Mul", [b.cast(yy, I64, f"{what}_y_index"), b.const(np.array(w, np.int64), what="width")])
        index = b.op("Add", [row, b.cast(xx, I64, f"{what}_x_index")], f"{what}_index")
        index = b.op("Expand", [index, spread], f"{what}_index_per_channel")
        value = b.op("GatherElements", [flat, index], f"{what}_value", axis=2)
        if inside is None:
            return value
        return b.op("Where", [inside, value, c(0.0, "zero")], f"{what}_padded")

    if mode == "nearest":
        value = pixel(_round_half_even(b, iy, dt), _round_half_even(b, ix, dt), "nearest")
    else:
        x1, y1 = b.op("Floor", [ix], "x1"), b.op("Floor", [iy], "y1")
        x2, y2 = b.op("Add", [x1, c(1.0, "one")], "x2"), b.op("Add", [y1, c(1.0, "one")], "y2")
        dx2, dx1 = b.op("Sub", [x2, ix], "dx2"), b.op("Sub", [ix, x1], "dx1")
        dy2, dy1 = b.op("Sub", [y2, iy], "dy2"), b.op("Sub", [iy, y1], "dy1")
        p11, p12 = pixel(y1, x1, "p11"), pixel(y1, x2, "p12")
        p21, p22 = pixel(y2, x1, "p21"), pixel(y2, x2, "p22")
        top = b.op("Add", [b.op("Mul", [dx2, p11]), b.op("Mul", [dx1, p12])], "top")
        bottom = b.op("Add", [b.op("Mul", [dx2, p21]), b.op("Mul", [dx1, p22])], "bottom")
        value = b.op("Add", [b.op("Mul", [dy2, top]), b.op("Mul", [dy1, bottom])], "blended")
    out_shape = b.op(
        "Concat",
        [
            b.slice(shape_x, [0], [2], [0], "batch_channels"),
            b.slice(b.op("Shape", [grid], "grid_shape"), [1], [3], [0], "out_hw"),
        ],
        "out_shape",
        axis=0,
    )
    b.op("Reshape", [value, out_shape], out=node.output[0])
    return b.done()


@decomposition("", "RoiAlign")
def roi_align(node, facts, fresh):
    """RoiAlign with sampling_ratio > 0 on a 4-D input (opset 10, whose boxes are output_half_pixel, and opset
    16's coordinate_transformation_mode): per roi the sample coordinates of the [output_height * s,
    output_width * s] grid, clamped and floored as onnxruntime's pre-calculation does (samples outside
    [-1, size] weigh 0); the input as [N * H * W, C] rows read with Gather at b * H * W + y * W + x; avg: the
    weighted corners summed over each bin's s * s samples, divided by s * s; max: the maximum over the bin of each
    weighted corner value (onnxruntime's max mode). H and W are constants when static, else read with Shape (a
    torchvision detector's feature maps follow its data-dependent resize)."""
    b = Ops(node, facts, fresh)
    a = _attrs(node)
    x, rois, batch = node.input[0], node.input[1], node.input[2]
    mode = _text(a.get("mode"), "avg")
    ratio = int(a.get("sampling_ratio", 0))
    ph, pw = int(a.get("output_height", 1)), int(a.get("output_width", 1))
    scale = float(a.get("spatial_scale", 1.0))
    ctm = _text(
        a.get("coordinate_transformation_mode"), "half_pixel" if b.opset >= 16 else "output_half_pixel"
    )
    if ratio <= 0:
        raise b.refuse(
            f"sampling_ratio is {ratio}: adaptive sampling takes ceil(roi size / output size) samples per bin, a "
            "count that depends on each box at run time",
            "only a fixed sampling_ratio > 0 is decomposed (torchvision's MultiScaleRoIAlign uses 2)",
        )
    if mode not in ("avg", "max"):
        raise b.refuse(f"mode '{mode}' is unknown", "use avg or max")
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise b.refuse(
            f"coordinate_transformation_mode '{ctm}' is unknown", "use half_pixel or output_half_pixel"
        )
    info = facts.info(x)
    if info.rank != 4:
        raise b.refuse(
            f"input '{x}' has shape {info.shape_str()}; RoiAlign's input is 4-D [N, C, H, W]",
            "freeze the input shapes first",
        )
    dt = b.dtype(x)
    if dt not in FLOAT_TYPES:
        raise b.refuse(
            f"input '{x}' has type {TensorProto.DataType.Name(dt)}", "RoiAlign is for float tensors"
        )
    c = lambda v, what="c": b.const(_f(v, dt), what=what)  # noqa: E731
    half_pixel = ctm == "half_pixel"
    one = c(1.0, "one")
    h, w = info.shape[2], info.shape[3]
    if isinstance(h, int) and isinstance(w, int):
        sizes = {
            "y": (c(float(h), "height"), c(h - 1.0, "last_row")),
            "x": (c(float(w), "width"), c(w - 1.0, "last_col")),
        }
        width = b.const(np.array(w, np.int64), what="width")
        plane = b.const(np.array(h * w, np.int64), what="plane")
    else:  # [1]-shaped sizes read at run time
        shape = b.op("Shape", [x], "x_shape")
        hi, width = (
            b.op("Gather", [shape, b.const(np.array([k], np.int64), what="axis")], n, axis=0)
            for k, n in ((2, "h"), (3, "w"))
        )
        plane = b.op("Mul", [hi, width], "plane")
        sizes = {}
        for n, d in (("y", hi), ("x", width)):
            f = b.cast(d, dt, f"{n}_size")
            sizes[n] = (f, b.op("Sub", [f, one], f"{n}_last"))

    def side(k_start: int, k_end: int, bins: int, what: str) -> tuple[str, str, str, str]:
        """(low index [R, K] int64, high index, low weight l [R, K], inside [R, K]) along one axis, K = bins *
        ratio sample positions per roi: start + p * bin + (i + 0.5) * bin / ratio."""
        size, last = sizes[what]
        pick = lambda k: b.op("Gather", [rois, b.const(np.array([k], np.int64), what="corner")], axis=1)  # noqa: E731
        start = b.op("Mul", [pick(k_start), c(scale, "spatial_scale")], f"{what}_start_scaled")
        end = b.op("Mul", [pick(k_end), c(scale, "spatial_scale")], f"{what}_end_scaled")
        if half_pixel:
            start = b.op("Sub", [start, c(0.5, "half")], f"{what}_start")
            end = b.op("Sub", [end, c(0.5, "half")], f"{what}_end")
        length = b.op("Sub", [end, start], f"{what}_length")
        if not half_pixel:  # malformed rois are forced to 1 x 1, as the kernel does
            length = b.op("Max", [length, one], f"{what}_length_at_least_one")
        bin_size = b.op("Div", [length, c(float(bins), "bins")], f"{what}_bin")  # [R, 1]
        p = np.repeat(np.arange(bins), ratio).reshape(1, -1)
        i = np.tile(np.arange(ratio) + 0.5, bins).reshape(1, -1)
        at = b.op("Add", [start, b.op("Mul", [c(p, "bin_of_sample"), bin_size])], f"{what}_bin_start")
        step = b.op("Div", [b.op("Mul", [c(i, "sample_of_bin"), bin_size]), c(float(ratio), "ratio")])
        v = b.op("Add", [at, step], f"{what}_sample")  # [R, K]
        below = b.op("Less", [v, c(-1.0, "minus_one")], f"{what}_below")
        inside = b.op(
            "Not", [b.op("Or", [below, b.op("Greater", [v, size], f"{what}_above")])], f"{what}_inside"
        )
        v = b.op("Min", [b.op("Max", [v, c(0.0, "zero")]), last], f"{what}_clamped")
        low = b.op("Floor", [v], f"{what}_low")
        high = b.op("Min", [b.op("Add", [low, one]), last], f"{what}_high")
        frac = b.op("Sub", [v, low], f"{what}_frac")
        return b.cast(low, I64, f"{what}_low_index"), b.cast(high, I64, f"{what}_high_index"), frac, inside

    y_low, y_high, ly, y_in = side(1, 3, ph, "y")
    x_low, x_high, lx, x_in = side(0, 2, pw, "x")
    # [R, Ky, 1] and [R, 1, Kx] broadcast to [R, Ky, Kx]
    ly, y_in = b.unsqueeze(ly, [2], "ly"), b.unsqueeze(y_in, [2], "y_inside")
    lx, x_in = b.unsqueeze(lx, [1], "lx"), b.unsqueeze(x_in, [1], "x_inside")
    hy = b.op("Sub", [one, ly], "hy")
    hx = b.op("Sub", [one, lx], "hx")
    inside = b.op("And", [y_in, x_in], "inside")
    zero = c(0.0, "zero")
    weights = [
        b.op("Where", [inside, b.op("Mul", [wy, wx]), zero], f"w{k}")
        for k, (wy, wx) in enumerate(((hy, hx), (hy, lx), (ly, hx), (ly, lx)), 1)
    ]
    batch64 = batch if b.dtype(batch, I64) == I64 else b.cast(batch, I64, "batch_index")
    base = b.unsqueeze(b.op("Mul", [batch64, plane]), [1, 2], "base")
    rows = [
        b.unsqueeze(b.op("Mul", [yy, width]), [2], f"row_{n}") for yy, n in ((y_low, "low"), (y_high, "high"))
    ]
    cols = [b.unsqueeze(xx, [1], f"col_{n}") for xx, n in ((x_low, "low"), (x_high, "high"))]
    table = b.op("Flatten", [b.op("Transpose", [x], "channels_last", perm=[0, 2, 3, 1])], "pixels", axis=3)
    terms = []
    for k, (r, col) in enumerate(
        ((rows[0], cols[0]), (rows[0], cols[1]), (rows[1], cols[0]), (rows[1], cols[1]))
    ):
        index = b.op("Add", [b.op("Add", [base, r]), col], f"index{k + 1}")  # [R, Ky, Kx]
        value = b.op("Gather", [table, index], f"corner{k + 1}", axis=0)  # [R, Ky, Kx, C]
        terms.append(b.op("Mul", [b.unsqueeze(weights[k], [3], f"w{k + 1}_c"), value], f"weighted{k + 1}"))
    if mode == "avg":
        samples = b.op(
            "Add", [b.op("Add", [b.op("Add", [terms[0], terms[1]]), terms[2]]), terms[3]], "samples"
        )
    else:
        samples = b.op("Max", terms, "samples")
    # [R, ph, s, pw, s, C], C given (not -1: with no rois the size is 0 and -1 could be anything)
    channels = info.shape[1]
    if isinstance(channels, int):
        bins = b.reshape(samples, [0, ph, ratio, pw, ratio, channels], "bins")
    else:
        grid = b.const(np.array([0, ph, ratio, pw, ratio], np.int64), what="bins_shape")
        c_dim = b.op("Gather", [b.op("Shape", [x], "x_shape"), b.const(np.array([1], np.int64))], "c", axis=0)
        bins = b.op("Reshape", [samples, b.op("Concat", [grid, c_dim], "bins_shape", axis=0)], "bins")
    if mode == "avg":
        pooled = b.op(
            "Div", [b.reduce("ReduceSum", bins, [2, 4], keepdims=0), c(float(ratio * ratio), "count")]
        )
    else:
        pooled = b.reduce("ReduceMax", bins, [2, 4], keepdims=0)
    b.op("Transpose", [pooled], out=node.output[0], perm=[0, 3, 1, 2])
    return b.done()
