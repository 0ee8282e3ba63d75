"""deform_conv: ONNX DeformConv and torchvision::deform_conv2d become ONNX DeformConv or TensorRT's
ModulatedDeformConv2d plugin (inputs x, offset, mask, weight, bias). A numpy reference of modulated deformable
convolution, checked against onnxruntime's DeformConv, checks the plugin node's inputs and attributes."""

import numpy as np
import onnx.parser
import pytest
from onnx import helper, numpy_helper

from surgery.fixes import FixError, get_fix
from surgery.ort import make_session

RNG = np.random.default_rng(0)
X = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
W = (RNG.standard_normal((6, 2, 3, 3)) * 0.3).astype(np.float32)  # group 2
B = RNG.standard_normal(6).astype(np.float32)
OFFSET = (RNG.standard_normal((1, 2 * 2 * 9, 6, 6)) * 0.7).astype(np.float32)  # offset_group 2
MASK = RNG.random((1, 2 * 9, 6, 6)).astype(np.float32)


def reference(x, w, offset, mask, b, stride, pad, dil, group, og):
    """Modulated deformable convolution, NCHW, by its definition (bilinear sampling, zero outside)."""
    n_, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    oh = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n_, m, oh, ow), np.float64)

    def sample(img, y, xx):
        y0, x0 = int(np.floor(y)), int(np.floor(xx))
        v = 0.0
        for yy, xw in ((y0, x0), (y0, x0 + 1), (y0 + 1, x0), (y0 + 1, x0 + 1)):
            if 0 <= yy < h and 0 <= xw < wd:
                v += img[yy, xw] * (1 - abs(y - yy)) * (1 - abs(xx - xw))
        return v

    for ni in range(n_):
        for mo in range(m):
            g = mo // (m // group)
            for oy in range(oh):
                for ox in range(ow):
                    acc = 0.0
                    for ci in range(cg):
                        cin = g * cg + ci
                        d = cin // (c // og)
                        for i in range(kh):
                            for j in range(kw):
                                k = i * kw + j
                                dy = offset[ni, d * 2 * kh * kw + 2 * k, oy, ox]
                                dx = offset[ni, d * 2 * kh * kw + 2 * k + 1, oy, ox]
                                y = oy * stride[0] - pad[0] + i * dil[0] + dy
                                xx = ox * stride[1] - pad[1] + j * dil[1] + dx
                                val = sample(x[ni, cin], y, xx) * mask[ni, d * kh * kw + k, oy, ox]
                                acc += w[mo, ci, i, j] * val
                    out[ni, mo, oy, ox] = acc + (b[mo] if b is not None else 0.0)
    return out.astype(np.float32)


def _onnx_model(mask=True):
    #   x, w, offset, b[, mask] -> DeformConv(group 2, offset_group 2, pads 1) -> y
    ins = ["x", "w", "offset", "b"] + (["mask"] if mask else [])
    node = helper.make_node(
        "DeformConv", ins, ["y"], name="dcn", group=2, offset_group=2, pads=[1, 1, 1, 1], kernel_shape=[3, 3]
    )
    vi = lambda n, a: helper.make_tensor_value_info(n, 1, list(a.shape))  # noqa: E731
    inputs = [vi("x", X), vi("offset", OFFSET)] + ([vi("mask", MASK)] if mask else [])
    inits = [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")]
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", 1, [1, 6, 6, 6])], inits)
    return helper.make_model(g, ir_version=9, opset_imports=[helper.make_opsetid("", 19)])


def _plugin_reference(model, feeds):
    """Run a model whose one ModulatedDeformConv2d node is evaluated with the reference, reading the plugin's
    inputs (x, offset, mask, weight, bias) and attributes as TensorRT documents them."""
    values = dict(feeds) | {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "ModulatedDeformConv2d":
            a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
            x, off, mask, w = (values[k] for k in n.input[:4])
            b = values[n.input[4]] if len(n.input) > 4 else None
            values[n.output[0]] = reference(
                x,
                w,
                off,
                mask,
                b,
                a["stride"],
                a["padding"],
                a["dilation"],
                a["group"],
                a["deformable_group"],
            )
        else:  # the mask-of-ones subgraph: run it in onnxruntime
            inits = [t for t in model.graph.initializer if t.name in n.input]
            sub = helper.make_model(
                helper.make_graph(
                    [n],
                    "one",
                    [
                        helper.make_tensor_value_info(
                            x, helper.np_dtype_to_tensor_dtype(values[x].dtype), list(values[x].shape)
                        )
                        for x in n.input
                        if x and x not in {t.name for t in model.graph.initializer}
                    ],
                    [helper.make_empty_tensor_value_info(o) for o in n.output],
                    inits,
                ),
                ir_version=9,
                opset_imports=[helper.make_opsetid("", 19)],
            )
            sess = make_session(sub)
            got = sess.run(None, {i.name: values[i.name] for i in sess.get_inputs()})
            values.update(zip(n.output, got))
    return values[model.graph.output[0].name]


def test_the_reference_agrees_with_onnxruntime_deform_conv():
    got = make_session(_onnx_model()).run(None, {"x": X, "offset": OFFSET, "mask": MASK})[0]
    want = reference(X, W, OFFSET, MASK, B, [1, 1], [1, 1], [1, 1], 2, 2)
    assert np.abs(got - want).max() < 1e-4


@pytest.mark.parametrize("mask", [True, False])
def test_onnx_deform_conv_becomes_the_plugin_with_its_input_order_and_a_mask(mask):
    model = _onnx_model(mask)
    out = get_fix("deform_conv")(model, node="dcn", form="plugin")
    plugin = next(n for n in out.graph.node if n.op_type == "ModulatedDeformConv2d")
    assert list(plugin.input)[:2] == ["x", "offset"] and list(plugin.input)[3:] == ["w", "b"]
    feeds = {"x": X, "offset": OFFSET} | ({"mask": MASK} if mask else {})
    want = make_session(model).run(None, feeds)[0]
    assert np.abs(_plugin_reference(out, feeds) - want).max() < 1e-4


def test_torchvision_fallthrough_form_becomes_onnx_deform_conv_exactly():
    #   the export torch.onnx makes with ONNX_FALLTHROUGH: scalars as Constant inputs, a dummy mask, use_mask 0
    text = """<ir_version: 9, opset_import: ["" : 19, "torchvision" : 1]>
    g (float[1,4,6,6] x, float[1,36,6,6] offset) => (float[1,6,6,6] y) {
      one = Constant <value = int64 {1}> ()
      two = Constant <value = int64 {2}> ()
      no = Constant <value = bool {0}> ()
      m = Constant <value = float[1] {1.0}> ()
      [dcn] y = torchvision.deform_conv2d (x, w, offset, m, b, one, one, one, one, one, one, two, two, no)
    }"""
    model = onnx.parser.parse_model(text)
    model.graph.initializer.extend([numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")])
    out = get_fix("deform_conv")(model, node="dcn", form="onnx")
    assert [n.op_type for n in out.graph.node] == ["DeformConv"] and {o.domain for o in out.opset_import} == {
        ""
    }
    got = make_session(out).run(None, {"x": X, "offset": OFFSET})[0]
    want = reference(X, W, OFFSET, np.ones_like(MASK), B, [1, 1], [1, 1], [1, 1], 2, 2)
    assert np.abs(got - want).max() < 1e-4


def test_refusals_name_the_node_and_leave_the_model():
    model = _onnx_model()
    for a in model.graph.node[0].attribute:
        if a.name == "pads":
            a.ints[:] = [1, 1, 0, 0]
    before = model.SerializeToString()
    with pytest.raises(FixError, match=r"deform_conv 'dcn': pads \[1, 1, 0, 0\] are not symmetric"):
        get_fix("deform_conv")(model, node="dcn", form="plugin")
    assert model.SerializeToString() == before
    low = _onnx_model()
    low.opset_import[0].version = 18
    with pytest.raises(FixError, match="ONNX DeformConv needs opset 19; the model is at opset 18"):
        get_fix("deform_conv")(low, node="dcn", form="onnx")
