"""plugin_to_ops: a node of a standard plugin TensorRT 11.0 removed becomes ONNX ops computing what the plugin's
CUDA kernel computes (NVIDIA/TensorRT v10.16). onnxruntime cannot run the plugin node, so each kernel's formula,
written here in numpy as the kernel reads, is checked against onnxruntime running the new ops."""

import numpy as np
import onnx.parser
import onnxruntime as ort
import pytest

from surgery.backends.tensorrt.predictor import make
from surgery.fixes import FixError, get_fix
from surgery.verdict import Status

to_ops = get_fix("plugin_to_ops")
RNG = np.random.default_rng(0)


def _run(model, x):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def _model(shape, node):
    dims = ",".join(str(d) for d in shape)
    return onnx.parser.parse_model(
        f'<ir_version: 8, opset_import: ["" : 17]>\ng (float[{dims}] x) => (float[{dims}] y) {{\n  [n] y = {node} (x)\n}}'
    )


def test_lrelu_plugin_is_leaky_relu_as_the_kernel_computes_it():
    m = _model((2, 50), "LReLU_TRT <negSlope = 0.2>")
    x = RNG.uniform(-5, 5, (2, 50)).astype(np.float32)
    x[0, :3] = [0.0, -0.0, 1e-30]
    kernel = np.where(x > 0, x, x * np.float32(0.2))  # lReLU.cu: input > 0 ? input : input * negativeSlope
    out = to_ops(m, node="n")
    assert [n.op_type for n in out.graph.node] == ["LeakyRelu"]
    np.testing.assert_array_equal(_run(out, x), kernel)
    assert make("11.5").check(m).by_node()["n"].status is Status.REJECTED
    assert make("11.5").check(out).accepted


def test_clip_plugin_is_clip_on_every_number():
    m = _model((4, 25), "Clip_TRT <clipMin = -1.5, clipMax = 0.75>")
    x = RNG.uniform(-4, 4, (4, 25)).astype(np.float32)
    x[0, :2] = [-1.5, 0.75]
    t = np.where(x > np.float32(-1.5), x, np.float32(-1.5))  # clip.cu
    kernel = np.where(t < np.float32(0.75), t, np.float32(0.75))
    out = to_ops(m, node="n")
    np.testing.assert_array_equal(_run(out, x), kernel)
    assert make("11.5").check(out).accepted


def _normalize_kernel(x, weights, across, shared, eps):
    """normalizeLayer.cu: x / sqrt(sum of squares + eps), times the weight (per channel or the one)."""
    axes = (1, 2, 3) if across else (1,)
    normed = x / np.sqrt((x * x).sum(axis=axes, keepdims=True) + np.float32(eps))
    scale = np.float32(weights[0]) if shared else np.asarray(weights, np.float32).reshape(1, -1, 1, 1)
    return normed * scale


@pytest.mark.parametrize(("across", "shared"), [(0, 0), (0, 1), (1, 1)])
def test_normalize_plugin_as_the_kernel_computes_it(across, shared):
    weights = [20.0, 10.0, 5.0] if not shared else [7.0]
    w = ", ".join(str(v) for v in weights)
    node = (
        f"Normalize_TRT <weights = [{w}], nbWeights = {len(weights)}, acrossSpatial = {across}, "
        f"channelShared = {shared}, eps = 0.0001>"
    )
    m = _model((2, 3, 4, 5), node)
    x = RNG.normal(0, 2, (2, 3, 4, 5)).astype(np.float32)
    out = to_ops(m, node="n")
    got = _run(out, x)
    np.testing.assert_allclose(got, _normalize_kernel(x, weights, across, shared, 1e-4), rtol=1e-6, atol=1e-6)
    assert make("11.5").check(out).accepted


def test_normalize_across_spatial_with_per_channel_weights_is_refused():
    node = "Normalize_TRT <weights = [1.0, 2.0, 3.0], nbWeights = 3, acrossSpatial = 1, channelShared = 0, eps = 0.0001>"
    with pytest.raises(FixError, match="divides by"):
        to_ops(_model((1, 3, 2, 2), node), node="n")
    bad = "Normalize_TRT <weights = [1.0, 2.0], nbWeights = 2, acrossSpatial = 0, channelShared = 0, eps = 0.0001>"
    with pytest.raises(FixError, match="2 weights for 3"):
        to_ops(_model((1, 3, 2, 2), bad), node="n")


def test_other_nodes_are_refused():
    with pytest.raises(FixError, match="not one of"):
        to_ops(_model((1, 4), "Relu"), node="n")
    with pytest.raises(FixError, match="negSlope"):
        to_ops(_model((1, 4), "LReLU_TRT"), node="n")


@pytest.mark.parametrize("bias", [None, [0.5, -0.25, 1.0, 0.0]])
def test_gelu_plugin_is_the_kernels_tanh_approximation(bias):
    attrs = "type_id = 0" + (f", bias = [{', '.join(map(str, bias))}]" if bias else "")
    m = _model((3, 4), f"CustomGeluPluginDynamic <{attrs}>")
    x = RNG.uniform(-6, 6, (3, 4)).astype(np.float32)
    f = np.float32
    a, b, c = f(0.5), f(0.7978845608028654), f(0.035677408136300125)  # geluKernel.cu @ v10.16
    inp = x + np.asarray(bias, np.float32) if bias else x
    kernel = inp * (a + a * np.tanh(inp * (c * inp * inp + b)))  # as the kernel reads, left to right
    out = to_ops(m, node="n")
    np.testing.assert_allclose(_run(out, x), kernel, rtol=2e-6, atol=1e-6)  # tanh's last bit may differ
    exact_gelu = 0.5 * inp * (1 + np.tanh(np.sqrt(2 / np.pi) * (inp + 0.044715 * inp**3)))
    np.testing.assert_allclose(_run(out, x), exact_gelu, rtol=1e-5, atol=1e-6)  # ONNX Gelu(approximate=tanh)
    assert make("11.5").check(m).by_node()["n"].status is Status.REJECTED
    assert make("11.5").check(out).accepted
