"""decompose_detection: GridSample and RoiAlign for TensorRT before 8.5, checked against onnxruntime on random
inputs (grids far outside the image, nearest on exact half-pixel ties, rois partly outside and malformed); the
decomposed models use only ops the TensorRT 8.2 table imports; what is not decomposed is refused in one line
naming the node, the model untouched. nms-fold-scalar-inputs: the `fix` loop folds every computed scalar input."""

import itertools

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import TensorProto, helper

from surgery.backends import get_backend
from surgery.cli import main
from surgery.fixes import FixError, get_fix
from surgery.ort import make_session
from surgery.verdict import Stage

fix = get_fix("decompose")
X_SHAPE, GRID_SHAPE = (2, 3, 5, 7), (2, 4, 6, 2)


def _rel(want, got) -> float:
    return float(np.abs(want - got).sum() / max(np.abs(want).sum(), 1e-12))


def _run(model, feeds):
    return make_session(model).run(None, feeds)[0]


def _static_82_rejected(model) -> list[str]:
    return [v.node for v in get_backend("tensorrt-static@8.2").check(model, depth=Stage.PARSE).rejected]


# -- GridSample ------------------------------------------------------------------------------------------------


def grid_sample(opset, mode, padding, align, x_shape=X_SHAPE, grid_shape=GRID_SHAPE):
    #   x[N,C,H,W], grid[N,Ho,Wo,2] -> GridSample(mode, padding_mode, align_corners) -> y[N,C,Ho,Wo]
    node = helper.make_node(
        "GridSample", ["x", "grid"], ["y"], name="gs", mode=mode, padding_mode=padding, align_corners=align
    )
    out_shape = list(x_shape[:2]) + list(grid_shape[1:-1])
    g = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
            helper.make_tensor_value_info("grid", TensorProto.FLOAT, list(grid_shape)),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
    )
    return helper.make_model(g, ir_version=9, opset_imports=[helper.make_opsetid("", opset)])


def _ties(rng, align) -> np.ndarray:
    """A grid whose denormalized coordinates are k + 0.5: round half to even and half away from zero differ."""
    k = rng.integers(-12, 12, GRID_SHAPE)
    size = np.array([X_SHAPE[3], X_SHAPE[2]])  # x is W, y is H
    if align:  # x = (g + 1) / 2 * (size - 1)
        return ((k + 0.5) * 2 / (size - 1) - 1).astype(np.float32)
    return (((k + 0.5) * 2 + 1) / size - 1).astype(np.float32)  # x = ((g + 1) * size - 1) / 2


CASES = list(itertools.product([16, 20], ["linear", "nearest"], ["zeros", "border", "reflection"], [0, 1]))


@pytest.mark.parametrize("opset, mode, padding, align", CASES)
def test_grid_sample_matches_onnxruntime(opset, mode, padding, align):
    if mode == "linear" and opset == 16:
        mode = "bilinear"
    model = grid_sample(opset, mode, padding, align)
    out = fix(model, node="gs")
    onnx.checker.check_model(out, full_check=True)
    assert "GridSample" not in {n.op_type for n in out.graph.node}
    assert {"GatherElements", "Floor"} <= {n.op_type for n in out.graph.node}
    for seed in range(4):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(X_SHAPE).astype(np.float32)
        grid = rng.uniform(-3, 3, GRID_SHAPE).astype(np.float32)  # most points outside [-1, 1]
        if mode == "nearest" and seed % 2:
            grid = _ties(rng, align)
        want, got = _run(model, {"x": x, "grid": grid}), _run(out, {"x": x, "grid": grid})
        assert _rel(want, got) <= 1e-6, (seed, _rel(want, got))


def test_nearest_ties_are_rounded_to_even_as_onnxruntime_does():
    #   the tie grid really has ties: rounding them away from zero gives other pixels than onnxruntime's
    rng = np.random.default_rng(1)
    grid = _ties(rng, 0)
    x_coord = ((grid[..., 0].astype(np.float64) + 1) * X_SHAPE[3] - 1) / 2
    assert np.any(np.floor(x_coord + 0.5) != np.round(x_coord))
    model = grid_sample(16, "nearest", "border", 0)
    x = rng.standard_normal(X_SHAPE).astype(np.float32)
    np.testing.assert_array_equal(
        _run(fix(model, node="gs"), {"x": x, "grid": grid}), _run(model, {"x": x, "grid": grid})
    )


@pytest.mark.parametrize(
    "mode, padding", [("nearest", "reflection"), ("linear", "zeros"), ("linear", "border")]
)
def test_grid_sample_decomposition_uses_only_ops_tensorrt_8_2_imports(mode, padding):
    model = grid_sample(20, mode, padding, 1)
    assert _static_82_rejected(model) == ["gs"]
    assert _static_82_rejected(fix(model, node="gs")) == []


def test_grid_sample_with_an_empty_batch():
    model = grid_sample(16, "bilinear", "zeros", 0, ("n", 3, 5, 7), ("n", 4, 6, 2))
    feeds = {"x": np.zeros((0, 3, 5, 7), np.float32), "grid": np.zeros((0, 4, 6, 2), np.float32)}
    assert _run(fix(model, node="gs"), feeds).shape == (0, 3, 4, 6)


def test_grid_sample_refusals_name_the_node_and_leave_the_model():
    cases = [
        (grid_sample(20, "linear", "zeros", 0, (1, 2, 4, 4, 4), (1, 3, 3, 3, 3)), "is 5-D"),
        (grid_sample(16, "bicubic", "zeros", 0), "mode 'bicubic' is not decomposed"),
        (grid_sample(20, "cubic", "zeros", 0), "mode 'cubic' is not decomposed"),
        (
            grid_sample(16, "bilinear", "zeros", 0, (1, 3, "h", "w")),
            "spatial dims of input 'x' are not static",
        ),
        (grid_sample(16, "bilinear", "reflection", 1, (1, 3, 1, 7)), "no reflection range"),
    ]
    for model, words in cases:
        before = model.SerializeToString()
        with pytest.raises(FixError) as err:
            fix(model, node="gs")
        assert str(err.value).startswith("GridSample 'gs': ") and words in str(err.value), str(err.value)
        assert "\n" not in str(err.value) and model.SerializeToString() == before


# -- RoiAlign --------------------------------------------------------------------------------------------------


def roi_align(opset, mode="avg", ctm=None, ratio=2, x_shape=(2, 3, 10, 12), rois=6, ph=3, pw=4):
    #   x[N,C,H,W], rois[R,4], batch_indices[R] -> RoiAlign(ph x pw bins, sampling_ratio) -> y[R,C,ph,pw]
    attrs = dict(mode=mode, output_height=ph, output_width=pw, sampling_ratio=ratio, spatial_scale=0.5)
    if ctm:
        attrs["coordinate_transformation_mode"] = ctm
    g = helper.make_graph(
        [helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], name="ra", **attrs)],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
            helper.make_tensor_value_info("rois", TensorProto.FLOAT, [rois, 4]),
            helper.make_tensor_value_info("bi", TensorProto.INT64, [rois]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rois, x_shape[1], ph, pw])],
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", opset)])


def _roi_feeds(seed, x_shape=(2, 3, 10, 12), r=6):
    rng = np.random.default_rng(seed)
    start = rng.uniform(-6, 30, (r, 2))
    end = start + rng.uniform(-2, 14, (r, 2))  # some boxes malformed (end < start), some outside the image
    return {
        "x": rng.standard_normal(x_shape).astype(np.float32),
        "rois": np.concatenate([start, end], 1).astype(np.float32),
        "bi": rng.integers(0, x_shape[0], r).astype(np.int64),
    }


RA_CASES = [
    (10, "avg", None, 2),
    (10, "max", None, 1),
    (16, "avg", None, 2),
    (16, "avg", "output_half_pixel", 3),
    (16, "max", "half_pixel", 2),
    (16, "max", "output_half_pixel", 1),
]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("opset, mode, ctm, ratio", RA_CASES)
def test_roi_align_matches_onnxruntime(opset, mode, ctm, ratio):
    model = roi_align(opset, mode, ctm, ratio)
    out = fix(model, node="ra")
    onnx.checker.check_model(out, full_check=True)
    assert "RoiAlign" not in {n.op_type for n in out.graph.node}
    for seed in range(4):
        feeds = _roi_feeds(seed)
        want, got = _run(model, feeds), _run(out, feeds)
        assert _rel(want, got) <= 1e-6, (seed, _rel(want, got))


def test_roi_align_with_feature_map_dims_known_only_at_run_time():
    #   torchvision's detectors resize by data: the feature map reaching RoiAlign is [?, 3, h, w]
    model = roi_align(11, x_shape=("n", 3, "h", "w"))
    out = fix(model, node="ra")
    assert "Shape" in {n.op_type for n in out.graph.node}
    for seed, shape in ((0, (2, 3, 10, 12)), (1, (1, 3, 7, 20))):
        feeds = _roi_feeds(seed, shape)
        assert _rel(_run(model, feeds), _run(out, feeds)) <= 1e-6
    assert _static_82_rejected(model) == ["ra"] and _static_82_rejected(out) == []


@pytest.mark.parametrize("channels", [3, "c"])
def test_roi_align_with_no_rois(channels):
    #   a detector with no proposals left calls RoiAlign on [0, 4] rois: the output is [0, C, ph, pw]
    model = roi_align(16, x_shape=(2, channels, 10, 12), rois="r")
    feeds = _roi_feeds(0) | {"rois": np.zeros((0, 4), np.float32), "bi": np.zeros(0, np.int64)}
    got = _run(fix(model, node="ra"), feeds)
    assert got.shape == (0, 3, 3, 4) == _run(model, feeds).shape


def test_roi_align_refusals_name_the_node_and_leave_the_model():
    for model, words in [
        (roi_align(16, ratio=0), "sampling_ratio is 0: adaptive sampling"),
        (roi_align(16, x_shape=(2, 3, 10)), "RoiAlign's input is 4-D"),
    ]:
        before = model.SerializeToString()
        with pytest.raises(FixError) as err:
            fix(model, node="ra")
        assert str(err.value).startswith("RoiAlign 'ra': ") and words in str(err.value), str(err.value)
        assert "\n" not in str(err.value) and model.SerializeToString() == before


# -- NonMaxSuppression -------------------------------------------------------------------------------------------

NMS = """<ir_version: 8, opset_import: ["" : 11]>
nms_all_computed (float[1,10,4] boxes, float[1,2,10] scores) => (int64[?,3] sel)
    <int64[1] one = {1}, float[1] iou = {0.5}, float[1] st = {0.1}, float[1] two = {2.0}> {
  s = Shape (boxes)
  m = Gather <axis = 0> (s, one)
  iou2 = Div (iou, two)
  st2 = Mul (st, two)
  [nms] sel = NonMaxSuppression (boxes, scores, m, iou2, st2)
}"""


def test_fix_folds_each_computed_nms_scalar_for_tensorrt_8_2(tmp_path, capsys):
    src, out = tmp_path / "nms.onnx", tmp_path / "fixed.onnx"
    onnx.save(onnx.parser.parse_model(NMS), str(src))
    code = main(["fix", str(src), "-t", "tensorrt-static@8.2", "-o", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert text.count("applied nms-fold-scalar-inputs") == 3, text
    fixed = onnx.load(str(out))
    inits = {t.name for t in fixed.graph.initializer}
    nms = next(n for n in fixed.graph.node if n.op_type == "NonMaxSuppression")
    assert all(x in inits for x in nms.input[2:])
    assert "rejects" not in text.split("\nafter (")[1]
