"""plugin_swap: one node or a closed region becomes one plugin node with TensorRT's attribute names."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.fixes import FixError, Safety, get_fix
from surgery.samples import build
from surgery.verify import verify

swap = get_fix("plugin_swap")
DCN = "/dcn/MMCVModulatedDeformConv2d"
TRT_NAMES = {
    "stride": "$stride",
    "padding": "$padding",
    "dilation": "$dilation",
    "group": "$groups",
    "deformable_group": "$deform_groups",
}


def test_mmcv_deform_conv_becomes_the_tensorrt_plugin_node():
    #   input -> Conv -> Split -> (offset, Sigmoid(mask)) -> mmcv::MMCVModulatedDeformConv2d -> Relu
    model = build("deform_conv_custom")
    out = swap(model, node=DCN, plugin="ModulatedDeformConv2d", version="1", attributes=TRT_NAMES)
    node = next(n for n in out.graph.node if n.op_type == "ModulatedDeformConv2d")
    old = next(n for n in model.graph.node if n.name == DCN)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    old_attrs = {a.name: helper.get_attribute_value(a) for a in old.attribute}
    assert node.name == DCN and node.domain == ""
    assert list(node.input) == list(old.input) and list(node.output) == list(old.output)
    assert attrs["plugin_version"] == b"1" and attrs["plugin_namespace"] == b""
    assert attrs["group"] == old_attrs["groups"] and attrs["deformable_group"] == old_attrs["deform_groups"]
    assert attrs["stride"] == old_attrs["stride"] and "groups" not in attrs
    assert [o.domain for o in out.graph.node] == [""] * len(out.graph.node)
    assert "mmcv" not in {o.domain for o in out.opset_import}  # unused domain dropped
    # a plugin op in the default domain is what TensorRT's importer wants, and the only thing onnx rejects
    with pytest.raises(onnx.checker.ValidationError, match="No Op registered for ModulatedDeformConv2d"):
        onnx.checker.check_model(out)
    report = verify(model, out, safety=Safety.CHANGES_SEMANTICS)
    assert report.status == "skipped" and "not verifiable with onnxruntime" in report.message


def _chain():
    #   x -> Relu(r1) -> a -> Neg(n1) -> b -> Exp(e1) -> y
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r1"),
        helper.make_node("Neg", ["a"], ["b"], name="n1"),
        helper.make_node("Exp", ["b"], ["y"], name="e1"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


def test_region_between_tensors_becomes_one_node():
    out = swap(
        _chain(), inputs=["x"], outputs=["b"], plugin="MyPlugin", namespace="ns", attributes={"alpha": 0.5}
    )
    assert [(n.op_type, list(n.input), list(n.output)) for n in out.graph.node] == [
        ("MyPlugin", ["x"], ["b"]),
        ("Exp", ["b"], ["y"]),
    ]
    attrs = {a.name: helper.get_attribute_value(a) for a in out.graph.node[0].attribute}
    assert attrs == {"plugin_version": b"1", "plugin_namespace": b"ns", "alpha": 0.5}
    with pytest.raises(onnx.checker.ValidationError, match="No Op registered for MyPlugin"):
        onnx.checker.check_model(out)


def test_custom_domain_is_declared():
    out = swap(_chain(), node="n1", plugin="P", domain="trt.plugins")
    assert any(o.domain == "trt.plugins" for o in out.opset_import)
    onnx.checker.check_model(out, full_check=True)  # a declared custom domain passes the checker


def test_refusals():
    model = build("deform_conv_custom")
    with pytest.raises(FixError, match="attribute 'kernel' .* is not on the old node. Note: it has"):
        swap(model, node=DCN, plugin="P", attributes={"k": "$kernel"})
    with pytest.raises(FixError, match="no node 'nope'"):
        swap(model, node="nope", plugin="P")
    with pytest.raises(FixError, match="needs `node`, or both `inputs` and `outputs`"):
        swap(model, plugin="P")
    # a region whose inner tensor is read outside it: one plugin node could not produce it
    m = _chain()
    m.graph.node.append(helper.make_node("Abs", ["a"], ["z"], name="abs"))
    m.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3]))
    with pytest.raises(FixError, match=r"also feeds \['a'\] outside it"):
        swap(m, inputs=["x"], outputs=["b"], plugin="P")
    with pytest.raises(FixError, match="reached from outside the region"):
        swap(_with_second_input(), inputs=["a"], outputs=["y"], plugin="P")


def _with_second_input():
    #   x -> Relu -> a ; Add(a, w_in) -> y   (w_in is a graph input outside the region)
    m = _chain()
    del m.graph.node[1:]
    m.graph.node.append(helper.make_node("Add", ["a", "w_in"], ["y"], name="add"))
    m.graph.input.append(helper.make_tensor_value_info("w_in", TensorProto.FLOAT, [2, 3]))
    m.graph.initializer.append(numpy_helper.from_array(np.zeros((1,), np.float32), "unused"))
    return m
