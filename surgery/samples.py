"""The teaching models: one small model per failure class, built deterministically with onnx.helper, each with
its lesson (what fails, where, in the backend's words, why, and which rule fixes it).

`sample_models/build.py` writes them to `sample_models/`; the app and the tests read them from there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from surgery import resources

IR_VERSION = 8  # onnxruntime, TensorRT 8.x and 10.x parsers all accept it
OPSET = 13  # TensorRT 8.2 supports opsets up to 13

SAMPLES_DIR = resources.SAMPLES_DIR  # sample_models/ in a checkout, the package's copy when installed


@dataclass(frozen=True)
class Lesson:
    name: str  # file stem in sample_models/
    title: str
    backend: str  # the target that rejects it, as a `check --target` id
    why: str
    fix: str  # what to do, in words
    rule: str | None  # id of the built-in rule that fixes it
    node: str | None  # name of the node that fails
    depth: str = "parse"  # the check depth at which the backend refuses (build: the builder, not the parser)


def _init(name: str, array) -> T:
    return nh.from_array(np.asarray(array), name)


def _const(name: str, array) -> onnx.NodeProto:
    return h.make_node("Constant", [], [name], name=name, value=nh.from_array(np.asarray(array), name))


def _model(
    graph: onnx.GraphProto, opset: int = OPSET, extra_opsets=(), ir: int = IR_VERSION, check: bool = True
) -> onnx.ModelProto:
    m = h.make_model(
        graph,
        opset_imports=[h.make_opsetid("", opset), *extra_opsets],
        producer_name="onnx-surgery-samples",
        ir_version=ir,
    )
    if check:  # onnx.checker demands a shape field on graph I/O; real exports without one exist, and so do we
        onnx.checker.check_model(m)
    return m


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def healthy_cnn() -> onnx.ModelProto:
    r = _rng(0)
    f = np.float32
    inits = [
        _init("conv1.weight", (r.standard_normal((8, 3, 3, 3)) * 0.2).astype(f)),
        _init("conv1.bias", np.zeros(8, f)),
        _init("bn1.scale", np.ones(8, f)),
        _init("bn1.bias", np.zeros(8, f)),
        _init("bn1.mean", (r.standard_normal(8) * 0.1).astype(f)),
        _init("bn1.var", np.ones(8, f)),
        _init("conv2.weight", (r.standard_normal((16, 8, 3, 3)) * 0.1).astype(f)),
        _init("conv2.bias", np.zeros(16, f)),
        _init("fc.weight", (r.standard_normal((10, 16)) * 0.2).astype(f)),
        _init("fc.bias", np.zeros(10, f)),
    ]
    nodes = [
        h.make_node(
            "Conv",
            ["input", "conv1.weight", "conv1.bias"],
            ["/conv1/Conv_output_0"],
            name="/conv1/Conv",
            pads=[1, 1, 1, 1],
        ),
        h.make_node(
            "BatchNormalization",
            ["/conv1/Conv_output_0", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"],
            ["/bn1/BatchNormalization_output_0"],
            name="/bn1/BatchNormalization",
        ),
        h.make_node(
            "Relu", ["/bn1/BatchNormalization_output_0"], ["/relu1/Relu_output_0"], name="/relu1/Relu"
        ),
        h.make_node(
            "MaxPool",
            ["/relu1/Relu_output_0"],
            ["/pool1/MaxPool_output_0"],
            name="/pool1/MaxPool",
            kernel_shape=[2, 2],
            strides=[2, 2],
        ),
        h.make_node(
            "Conv",
            ["/pool1/MaxPool_output_0", "conv2.weight", "conv2.bias"],
            ["/conv2/Conv_output_0"],
            name="/conv2/Conv",
            pads=[1, 1, 1, 1],
        ),
        h.make_node("Relu", ["/conv2/Conv_output_0"], ["/relu2/Relu_output_0"], name="/relu2/Relu"),
        h.make_node(
            "GlobalAveragePool",
            ["/relu2/Relu_output_0"],
            ["/gap/GlobalAveragePool_output_0"],
            name="/gap/GlobalAveragePool",
        ),
        h.make_node(
            "Flatten",
            ["/gap/GlobalAveragePool_output_0"],
            ["/flatten/Flatten_output_0"],
            name="/flatten/Flatten",
        ),
        h.make_node(
            "Gemm",
            ["/flatten/Flatten_output_0", "fc.weight", "fc.bias"],
            ["/fc/Gemm_output_0"],
            name="/fc/Gemm",
            transB=1,
        ),
        h.make_node("Softmax", ["/fc/Gemm_output_0"], ["probs"], name="/softmax/Softmax", axis=1),
    ]
    g = h.make_graph(
        nodes,
        "healthy_cnn",
        [h.make_tensor_value_info("input", T.FLOAT, [1, 3, 32, 32])],
        [h.make_tensor_value_info("probs", T.FLOAT, [1, 10])],
        inits,
    )
    return _model(g)


def resize_scales_chain() -> onnx.ModelProto:
    """An old PyTorch export of F.interpolate(scale_factor=2): Resize(X, roi, scales=Concat(Constant,
    Cast(Unsqueeze(...)))). TensorRT <= 8.2 needs scales to be an initializer."""
    r = _rng(1)
    f = np.float32
    #   input -> Conv -> Resize(roi, scales) -> Relu -> output
    #                      scales = Concat(Constant[1,1], Cast(Concat(Unsqueeze(h2), Unsqueeze(w2))))
    nodes = [
        h.make_node("Conv", ["input", "conv.weight"], ["conv_out"], name="/conv/Conv", pads=[1, 1, 1, 1]),
        _const("/up/Constant_output_0", np.array([1.0, 1.0], f)),
        _const("/up/Constant_1_output_0", np.array(2, np.int64)),
        _const("/up/Constant_2_output_0", np.array(2, np.int64)),
        h.make_node(
            "Unsqueeze",
            ["/up/Constant_1_output_0"],
            ["/up/Unsqueeze_output_0"],
            name="/up/Unsqueeze",
            axes=[0],
        ),
        h.make_node(
            "Unsqueeze",
            ["/up/Constant_2_output_0"],
            ["/up/Unsqueeze_1_output_0"],
            name="/up/Unsqueeze_1",
            axes=[0],
        ),
        h.make_node(
            "Concat",
            ["/up/Unsqueeze_output_0", "/up/Unsqueeze_1_output_0"],
            ["/up/Concat_output_0"],
            name="/up/Concat",
            axis=0,
        ),
        h.make_node("Cast", ["/up/Concat_output_0"], ["/up/Cast_output_0"], name="/up/Cast", to=T.FLOAT),
        h.make_node(
            "Concat",
            ["/up/Constant_output_0", "/up/Cast_output_0"],
            ["/up/Concat_1_output_0"],
            name="/up/Concat_1",
            axis=0,
        ),
        _const("/up/Constant_3_output_0", np.array([], f)),
        h.make_node(
            "Resize",
            ["conv_out", "/up/Constant_3_output_0", "/up/Concat_1_output_0"],
            ["up_out"],
            name="/up/Resize",
            mode="nearest",
        ),
        h.make_node("Relu", ["up_out"], ["output"], name="/relu/Relu"),
    ]
    g = h.make_graph(
        nodes,
        "resize_scales_chain",
        [h.make_tensor_value_info("input", T.FLOAT, [1, 3, 16, 16])],
        [h.make_tensor_value_info("output", T.FLOAT, [1, 4, 32, 32])],
        [_init("conv.weight", (r.standard_normal((4, 3, 3, 3)) * 0.2).astype(f))],
    )
    return _model(g, opset=11)


def deform_conv_custom() -> onnx.ModelProto:
    """mmcv's export of ModulatedDeformConv2d: a custom-domain op TensorRT has no importer for."""
    r = _rng(2)
    f = np.float32
    nodes = [
        h.make_node(
            "Conv", ["input", "offset.weight"], ["offset_mask"], name="/offset/Conv", pads=[1, 1, 1, 1]
        ),
        h.make_node(
            "Split", ["offset_mask", "split_sizes"], ["offset", "mask_logits"], name="/offset/Split", axis=1
        ),
        h.make_node("Sigmoid", ["mask_logits"], ["mask"], name="/mask/Sigmoid"),
        h.make_node(
            "MMCVModulatedDeformConv2d",
            ["input", "offset", "mask", "dcn.weight", "dcn.bias"],
            ["dcn_out"],
            name="/dcn/MMCVModulatedDeformConv2d",
            domain="mmcv",
            stride=[1, 1],
            padding=[1, 1],
            dilation=[1, 1],
            groups=1,
            deform_groups=1,
        ),
        h.make_node("Relu", ["dcn_out"], ["output"], name="/relu/Relu"),
    ]
    g = h.make_graph(
        nodes,
        "deform_conv_custom",
        [h.make_tensor_value_info("input", T.FLOAT, [1, 4, 8, 8])],
        [h.make_tensor_value_info("output", T.FLOAT, [1, 4, 8, 8])],
        [
            _init("offset.weight", (r.standard_normal((27, 4, 3, 3)) * 0.05).astype(f)),
            _init("dcn.weight", (r.standard_normal((4, 4, 3, 3)) * 0.2).astype(f)),
            _init("dcn.bias", np.zeros(4, f)),
            _init("split_sizes", np.array([18, 9])),
        ],
        value_info=[h.make_tensor_value_info("dcn_out", T.FLOAT, [1, 4, 8, 8])],
    )
    return _model(g, extra_opsets=[h.make_opsetid("mmcv", 1)])


def topk_computed_k() -> onnx.ModelProto:
    """TopK whose K is computed from the input's shape (k = dim(x, 1) // 2). TensorRT <= 8.6 needs K constant."""
    nodes = [
        h.make_node("Shape", ["scores"], ["/topk/Shape_output_0"], name="/topk/Shape"),
        h.make_node(
            "Slice", ["/topk/Shape_output_0", "starts", "ends"], ["/topk/Slice_output_0"], name="/topk/Slice"
        ),
        h.make_node("Div", ["/topk/Slice_output_0", "two"], ["k"], name="/topk/Div"),
        h.make_node("TopK", ["scores", "k"], ["values", "indices"], name="/topk/TopK", axis=1),
    ]
    g = h.make_graph(
        nodes,
        "topk_computed_k",
        [h.make_tensor_value_info("scores", T.FLOAT, [1, 16])],
        [
            h.make_tensor_value_info("values", T.FLOAT, [1, 8]),
            h.make_tensor_value_info("indices", T.INT64, [1, 8]),
        ],
        [_init("starts", np.array([1])), _init("ends", np.array([2])), _init("two", np.array([2]))],
    )
    return _model(g)


def squeeze_dynamic() -> onnx.ModelProto:
    """Squeeze without axes on an input with a dynamic batch: TensorRT cannot tell which dims to drop."""
    nodes = [
        h.make_node("Squeeze", ["features"], ["squeezed"], name="/head/Squeeze"),
        h.make_node("Relu", ["squeezed"], ["output"], name="/head/Relu"),
    ]
    g = h.make_graph(
        nodes,
        "squeeze_dynamic",
        [h.make_tensor_value_info("features", T.FLOAT, ["batch", 1, 8])],
        [h.make_tensor_value_info("output", T.FLOAT, ["batch", 8])],
    )
    return _model(g)


def int64_out_of_range() -> onnx.ModelProto:
    """INT64 initializers outside the INT32 range: TensorRT < 9 casts them down and clamps."""
    big = np.iinfo(np.int64).max
    nodes = [
        h.make_node("Slice", ["input", "starts", "ends", "axes"], ["sliced"], name="/slice/Slice"),
        h.make_node("Add", ["ids", "offset"], ["shifted"], name="/ids/Add"),
        h.make_node("Relu", ["sliced"], ["output"], name="/relu/Relu"),
    ]
    g = h.make_graph(
        nodes,
        "int64_out_of_range",
        [
            h.make_tensor_value_info("input", T.FLOAT, [1, 8]),
            h.make_tensor_value_info("ids", T.INT64, [1, 4]),
        ],
        [
            h.make_tensor_value_info("output", T.FLOAT, [1, 7]),
            h.make_tensor_value_info("shifted", T.INT64, [1, 4]),
        ],
        [
            _init("starts", np.array([1])),
            _init("ends", np.array([big])),
            _init("axes", np.array([1])),
            _init("offset", np.array([5_000_000_000], np.int64)),
        ],
    )
    return _model(g)


def ml_scaler() -> onnx.ModelProto:
    """An ai.onnx.ml Scaler (from an sklearn conversion) in front of a small MLP."""
    r = _rng(3)
    f = np.float32
    nodes = [
        h.make_node(
            "Scaler",
            ["features"],
            ["scaled"],
            name="/prep/Scaler",
            domain="ai.onnx.ml",
            offset=[0.5, -1.0, 2.0, 0.0],
            scale=[2.0, 0.5, 1.0, 4.0],
        ),
        h.make_node("Cast", ["scaled"], ["scaled_f"], name="/prep/Cast", to=T.FLOAT),
        h.make_node("MatMul", ["scaled_f", "w"], ["mm"], name="/fc/MatMul"),
        h.make_node("Relu", ["mm"], ["output"], name="/fc/Relu"),
    ]
    g = h.make_graph(
        nodes,
        "ml_scaler",
        [h.make_tensor_value_info("features", T.FLOAT, [2, 4])],
        [h.make_tensor_value_info("output", T.FLOAT, [2, 3])],
        [_init("w", r.standard_normal((4, 3)).astype(f))],
    )
    return _model(g, extra_opsets=[h.make_opsetid("ai.onnx.ml", 3)])


def training_mode_ops() -> onnx.ModelProto:
    """An export left in training mode: Dropout(training_mode=True) and BatchNormalization(training_mode=1)."""
    r = _rng(4)
    f = np.float32
    nodes = [
        h.make_node(
            "BatchNormalization",
            ["input", "bn.scale", "bn.bias", "bn.mean", "bn.var"],
            ["bn_out", "bn_running_mean", "bn_running_var"],
            name="/bn/BatchNormalization",
            training_mode=1,
        ),
        h.make_node("Relu", ["bn_out"], ["relu_out"], name="/relu/Relu"),
        h.make_node("Dropout", ["relu_out", "ratio", "training"], ["output"], name="/drop/Dropout"),
    ]
    g = h.make_graph(
        nodes,
        "training_mode_ops",
        [h.make_tensor_value_info("input", T.FLOAT, [2, 4, 6, 6])],
        [h.make_tensor_value_info("output", T.FLOAT, [2, 4, 6, 6])],
        [
            _init("bn.scale", np.ones(4, f)),
            _init("bn.bias", np.zeros(4, f)),
            _init("bn.mean", (r.standard_normal(4) * 0.1).astype(f)),
            _init("bn.var", np.ones(4, f)),
            _init("ratio", np.array(0.1, f)),
            _init("training", np.array(True)),
        ],
    )
    return _model(g, opset=15)


def unique_op() -> onnx.ModelProto:
    """Unique: a standard op TensorRT does not implement at all."""
    nodes = [
        h.make_node("Relu", ["input"], ["relu_out"], name="/pre/Relu"),
        h.make_node("Unique", ["relu_out"], ["uniq"], name="/post/Unique", sorted=1),
    ]
    g = h.make_graph(
        nodes,
        "unique_op",
        [h.make_tensor_value_info("input", T.FLOAT, [16])],
        [h.make_tensor_value_info("uniq", T.FLOAT, ["n_unique"])],
    )
    return _model(g)


def if_branch_shapes() -> onnx.ModelProto:
    """If whose branches give different shapes; its condition is computed from constants."""
    then_g = h.make_graph(
        [h.make_node("Identity", ["x_sum"], ["then_out"], name="/if/then/Identity")],
        "then_branch",
        [],
        [h.make_tensor_value_info("then_out", T.FLOAT, [1, 4])],
    )
    else_g = h.make_graph(
        [h.make_node("Reshape", ["x_sum", "flat_shape"], ["else_out"], name="/if/else/Reshape")],
        "else_branch",
        [],
        [h.make_tensor_value_info("else_out", T.FLOAT, [4])],
    )
    nodes = [
        h.make_node("ReduceSum", ["input", "axes"], ["x_sum"], name="/pre/ReduceSum", keepdims=0),
        h.make_node("Greater", ["threshold", "zero"], ["cond"], name="/if/Greater"),
        h.make_node("If", ["cond"], ["if_out"], name="/if/If", then_branch=then_g, else_branch=else_g),
        h.make_node("Relu", ["if_out"], ["output"], name="/post/Relu"),
    ]
    g = h.make_graph(
        nodes,
        "if_branch_shapes",
        [h.make_tensor_value_info("input", T.FLOAT, [1, 4, 3])],
        [h.make_tensor_value_info("output", T.FLOAT, [1, 4])],
        [
            _init("axes", np.array([2])),
            _init("flat_shape", np.array([4])),
            _init("threshold", np.array(1.0, np.float32)),
            _init("zero", np.array(0.0, np.float32)),
        ],
    )
    return _model(g)


def dynamic_input_unshaped() -> onnx.ModelProto:
    """A dynamic input with no fixed shape at all (rank unknown): no backend can plan memory for it."""
    r = _rng(5)
    f = np.float32
    nodes = [
        h.make_node("Conv", ["image", "w"], ["conv_out"], name="/conv/Conv", pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["conv_out"], ["output"], name="/relu/Relu"),
    ]
    g = h.make_graph(
        nodes,
        "dynamic_input_unshaped",
        [h.make_tensor_value_info("image", T.FLOAT, None)],
        [h.make_tensor_value_info("output", T.FLOAT, None)],
        [_init("w", (r.standard_normal((4, 3, 3, 3)) * 0.2).astype(f))],
    )
    return _model(g, check=False)


SAMPLES: dict[str, tuple[Callable[[], onnx.ModelProto], Lesson]] = {}


def _lesson(builder: Callable[[], onnx.ModelProto], **kw) -> None:
    lesson = Lesson(name=builder.__name__, **kw)
    SAMPLES[lesson.name] = (builder, lesson)


_lesson(
    healthy_cnn,
    title="A healthy CNN",
    backend="tensorrt-static@10.15",
    why="Conv, BatchNormalization, Relu, pooling and Gemm are supported "
    "everywhere; a good model to learn the views on.",
    fix="Nothing to fix.",
    rule=None,
    node=None,
)
_lesson(
    resize_scales_chain,
    title="Resize scales computed by a Concat(Constant, Cast(Unsqueeze(...))) chain",
    backend="tensorrt-static@8.2",
    why="TensorRT 8.2 and older build the Resize layer's scale factors at build time, so the scales input must "
    "be a constant tensor (an initializer); an old PyTorch export computes it with a chain of small ops.",
    fix="Fold the chain that computes the scales into one constant. Exact: the values are the same.",
    rule="fold-resize-scales",
    node="/up/Resize",
)
_lesson(
    deform_conv_custom,
    title="A custom-domain deformable convolution (mmcv)",
    backend="tensorrt-static@10.15",
    why="TensorRT has no importer for mmcv::MMCVModulatedDeformConv2d, so the parser looks for a plugin with the "
    "same name and finds none.",
    fix="Rename the node to TensorRT's ModulatedDeformConv2d plugin (version 1) with the attribute names the "
    "plugin expects. The plugin computes the same function; onnxruntime cannot run it, so the check is the "
    "TensorRT build.",
    rule="mmcv-deformconv-to-plugin",
    node="/dcn/MMCVModulatedDeformConv2d",
)
_lesson(
    topk_computed_k,
    title="TopK with K computed from the input shape",
    backend="tensorrt-static@8.6",
    why="TensorRT 8.6 and older need K at build time; the export computes it from Shape(x).",
    fix="The input shape is static, so Shape(x) and everything after it fold to a constant K.",
    rule="fold-topk-k",
    node="/topk/TopK",
)
_lesson(
    squeeze_dynamic,
    title="Squeeze without axes on a dynamic input",
    backend="tensorrt-static@10.15",
    why="Without axes, Squeeze drops every dimension of size 1; with a dynamic batch TensorRT cannot know at "
    "build time which ones those are.",
    fix="Write the axes out: the static dims of size 1 (here axis 1).",
    rule="squeeze-explicit-axes",
    node="/head/Squeeze",
)
_lesson(
    int64_out_of_range,
    title="INT64 initializers outside the INT32 range",
    backend="tensorrt-static@8.6",
    why="TensorRT before 9 runs integer math in INT32 and clamps INT64 constants; a Slice end of INT64_MAX is "
    "harmless, but an offset of 5e9 silently changes the result.",
    fix="Cast INT64 constants to INT32 where the values fit (clamp Slice ends to the dimension); refuse and show "
    "the values that do not fit.",
    rule="int64-initializers-to-int32",
    node="/ids/Add",
)
_lesson(
    ml_scaler,
    title="An ai.onnx.ml op (Scaler) from an sklearn conversion",
    backend="tensorrt-static@10.15",
    why="TensorRT implements no ai.onnx.ml operator; the parser falls back to a plugin that does not exist.",
    fix="Decompose Scaler into (x - offset) * scale: exact.",
    rule="ml-scaler-decompose",
    node="/prep/Scaler",
)
_lesson(
    training_mode_ops,
    title="Dropout and BatchNormalization left in training mode",
    backend="tensorrt-static@10.15",
    why="The model was exported from a module in train() mode; inference engines run only inference semantics.",
    fix="Set BatchNormalization training_mode=0 and remove Dropout: the inference-mode model (changes "
    "semantics on purpose).",
    rule="inference-mode",
    node="/bn/BatchNormalization",
)
_lesson(
    unique_op,
    title="Unique: a standard op TensorRT does not implement",
    backend="tensorrt-static@10.15",
    why="Unique's output size depends on the data; TensorRT lists it as not supported.",
    fix="Cut the model before Unique: the engine runs the rest, Unique runs in the host code or onnxruntime.",
    rule="split-before-unsupported-tail",
    node="/post/Unique",
)
_lesson(
    if_branch_shapes,
    title="If whose branches give different shapes",
    backend="tensorrt-static@10.15",
    why="The parser takes the If, but TensorRT's builder needs both branches of a conditional to produce tensors "
    "of the same rank unless the condition is known at build time; here the condition is a constant folded from "
    "a shape, so only one branch can ever run.",
    fix="Fold the constant condition and inline the branch that runs.",
    rule="fold-constant-if",
    node="/if/If",
    depth="build",
)
_lesson(
    dynamic_input_unshaped,
    title="A dynamic input with no shape at all",
    backend="tensorrt-static@10.15",
    why="The export dropped the input's shape. TensorRT then imports the input as a scalar (rank 0), and the Conv "
    "that reads it finds no spatial dims.",
    fix="Freeze the input to the shape it is used with ([1, 3, 32, 32]), then infer shapes again.",
    rule="freeze-unshaped-input",
    node="/conv/Conv",
)


def lessons() -> list[Lesson]:
    return [lesson for _, lesson in SAMPLES.values()]


def build(name: str) -> onnx.ModelProto:
    return SAMPLES[name][0]()


def sample_path(name: str) -> Path:
    """Path of a built sample; builds it into sample_models/ if the file is missing."""
    path = SAMPLES_DIR / f"{name}.onnx"
    if name not in SAMPLES:
        raise KeyError(f"no sample named '{name}'. Note: samples are {', '.join(SAMPLES)}")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(build(name), str(path))
    return path


DEFAULT_SAMPLE = "healthy_cnn"
