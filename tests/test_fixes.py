"""Fix primitives: structure after the fix, numerical equality, onnx.checker, and clear refusals."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.fixes import FixError, Safety, all_fixes, get_fix
from surgery.graph import GraphFacts
from surgery.samples import build
from surgery.verify import verify


def ops(model):
    return [n.op_type for n in model.graph.node]


def checked(model):
    onnx.checker.check_model(model, full_check=True)
    return model


def test_registry_lists_every_primitive_with_documented_params():
    fixes = all_fixes()
    assert {
        "fold_constants",
        "plugin_swap",
        "freeze_shapes",
        "int64_to_int32",
        "explicit_squeeze_axes",
        "inference_mode",
        "decompose",
        "opset_upgrade",
        "extract_subgraph",
        "delete_node",
    } <= set(fixes)
    for fix in fixes.values():
        assert fix.summary and all(desc for desc in fix.params.values())
    with pytest.raises(FixError, match="unknown parameter"):
        get_fix("fold_constants")(build("healthy_cnn"), nope=1)


def test_fold_only_the_resize_scales_chain():
    # input -> Conv -> Resize(roi, scales=Concat(Const, Cast(Concat(Unsqueeze(c), Unsqueeze(c))))) -> Relu
    model = build("resize_scales_chain")
    out = checked(get_fix("fold_constants")(model, tensors=["/up/Concat_1_output_0"]))
    assert ops(out) == ["Conv", "Constant", "Resize", "Relu"]  # the roi Constant is not part of the chain
    scales = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}["/up/Concat_1_output_0"]
    np.testing.assert_array_equal(scales, [1, 1, 2, 2])
    assert verify(model, out).status == "ok"
    assert model.graph.node[1].op_type == "Constant"  # the input model is untouched


def test_fold_refuses_a_tensor_that_depends_on_an_input():
    with pytest.raises(FixError, match="not computed only from constants"):
        get_fix("fold_constants")(build("resize_scales_chain"), tensors=["conv_out"])


def test_fold_uses_static_shapes_for_topk_k():
    # scores[1,16] -> Shape -> Slice -> Div(2) -> k ; TopK(scores, k)
    model = build("topk_computed_k")
    out = checked(get_fix("fold_constants")(model))
    assert ops(out) == ["TopK"]
    k = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}["k"]
    assert k.tolist() == [8]
    assert verify(model, out).status == "ok"


def test_fold_keeps_dynamic_shapes_dynamic():
    # Shape of a dynamic tensor is not folded
    model = build("squeeze_dynamic")
    g = model.graph
    g.node.insert(0, helper.make_node("Shape", ["features"], ["s"]))
    g.output.append(helper.make_tensor_value_info("s", TensorProto.INT64, [3]))
    out = get_fix("fold_constants")(model)
    assert "Shape" in ops(out)


def test_fold_inlines_if_with_constant_condition():
    model = build("if_branch_shapes")
    out = checked(get_fix("fold_constants")(model))
    assert "If" not in ops(out) and "Greater" not in ops(out)
    assert verify(model, out).status == "ok"


def test_fold_size_threshold_keeps_big_results_unfolded():
    #   Constant c[256x256] -> Add(c, c) -> Add(x, .)
    c = numpy_helper.from_array(np.ones((256, 256), np.float32), "c")
    g = helper.make_graph(
        [helper.make_node("Add", ["c", "c"], ["cc"]), helper.make_node("Add", ["x", "cc"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 256])],
        [c],
    )
    m = helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])
    assert len(get_fix("fold_constants")(m, size_threshold=1024).graph.node) == 2
    assert len(get_fix("fold_constants")(m).graph.node) == 1


def test_plugin_swap_maps_attributes():
    model = build("deform_conv_custom")
    out = get_fix("plugin_swap")(
        model,
        node="/dcn/MMCVModulatedDeformConv2d",
        plugin="ModulatedDeformConv2d",
        attributes={"stride": "$stride", "group": "$groups", "deformable_group": "$deform_groups"},
    )
    node = next(n for n in out.graph.node if n.op_type == "ModulatedDeformConv2d")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["plugin_version"] == b"1" and attrs["plugin_namespace"] == b"" and attrs["group"] == 1
    assert list(node.input) == ["input", "offset", "mask", "dcn.weight", "dcn.bias"] and node.domain == ""
    assert "mmcv" not in {o.domain for o in out.opset_import}
    with pytest.raises(FixError, match="'nope' .* not on the old node"):
        get_fix("plugin_swap")(
            model, node="/dcn/MMCVModulatedDeformConv2d", plugin="P", attributes={"a": "$nope"}
        )


def test_freeze_shapes_gives_the_unshaped_input_a_shape():
    model = build("dynamic_input_unshaped")
    out = checked(get_fix("freeze_shapes")(model, shapes={"image": [1, 3, 32, 32]}))
    assert GraphFacts.of(out).info("output").shape == (1, 4, 32, 32)
    assert verify(model, out, safety=Safety.CHANGES_SEMANTICS).status == "ok"
    with pytest.raises(FixError, match="no graph input 'nope'"):
        get_fix("freeze_shapes")(model, shapes={"nope": [1]})


def test_freeze_symbolic_dim_by_name():
    out = get_fix("freeze_shapes")(build("squeeze_dynamic"), dims={"batch": 4})
    assert GraphFacts.of(out).info("features").shape == (4, 1, 8)


def test_int64_refuses_data_values_and_fixes_slice_bounds():
    model = build("int64_out_of_range")
    with pytest.raises(FixError, match=r"'offset' = \[5000000000\] \(read by Add '/ids/Add'\)"):
        get_fix("int64_to_int32")(model)
    out = checked(get_fix("int64_to_int32")(model, only_slice_bounds=True))
    ends = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}["ends"]
    assert ends.tolist() == [8]
    assert verify(model, out).status == "ok"


def test_explicit_squeeze_axes_uses_static_ones_only():
    model = build("squeeze_dynamic")
    out = checked(get_fix("explicit_squeeze_axes")(model, node="/head/Squeeze"))
    sq = out.graph.node[0]
    axes = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}[sq.input[1]]
    assert axes.tolist() == [1]
    assert verify(model, out, safety=Safety.APPROXIMATE, dims={"batch": 3}).status == "ok"
    with pytest.raises(FixError, match="already has axes"):
        get_fix("explicit_squeeze_axes")(out, node="/head/Squeeze")


def test_inference_mode_removes_dropout_and_training_bn():
    model = build("training_mode_ops")
    out = checked(get_fix("inference_mode")(model))
    assert ops(out) == ["BatchNormalization", "Relu", "Identity"]  # the Dropout fed a graph output
    bn = out.graph.node[0]
    assert len(bn.output) == 1 and helper.get_attribute_value(bn.attribute[0]) == 0
    with pytest.raises(FixError, match="no Dropout"):
        get_fix("inference_mode")(out)


@pytest.mark.parametrize("builder", ["scaler", "compress", "center_crop_pad", "bitshift", "mish"])
def test_decompositions_are_exact(builder):
    model, node = DECOMPOSABLE[builder]()
    out = checked(get_fix("decompose")(model, node=node))
    assert node not in [n.name for n in out.graph.node]
    report = verify(model, out)
    assert report.status == "ok", report.summary()


def _one_node(node, inputs, outputs, inits=(), opset=18, extra=()):
    g = helper.make_graph([node], "g", inputs, outputs, list(inits))
    return helper.make_model(
        g, ir_version=8 if opset < 19 else 9, opset_imports=[helper.make_opsetid("", opset), *extra]
    )


DECOMPOSABLE = {
    "scaler": lambda: (build("ml_scaler"), "/prep/Scaler"),
    "compress": lambda: (
        _one_node(
            helper.make_node("Compress", ["x", "c"], ["y"], name="cmp", axis=1),
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
            [numpy_helper.from_array(np.array([1, 0, 1, 1, 0], bool), "c")],
        ),
        "cmp",
    ),
    "center_crop_pad": lambda: (
        _one_node(
            helper.make_node("CenterCropPad", ["x", "s"], ["y"], name="ccp"),
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [7, 4, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 7, 3])],
            [numpy_helper.from_array(np.array([4, 7, 3], np.int64), "s")],
        ),
        "ccp",
    ),
    "bitshift": lambda: (
        _one_node(
            helper.make_node("BitShift", ["x", "k"], ["y"], name="shl", direction="LEFT"),
            [helper.make_tensor_value_info("x", TensorProto.UINT32, [6])],
            [helper.make_tensor_value_info("y", TensorProto.UINT32, [6])],
            [numpy_helper.from_array(np.array([3], np.uint32), "k")],
        ),
        "shl",
    ),
    "mish": lambda: (
        _one_node(
            helper.make_node("Mish", ["x"], ["y"], name="mish"),
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
        ),
        "mish",
    ),
}


def test_decompose_refuses_unknown_op():
    with pytest.raises(FixError, match="no decomposition for Relu"):
        get_fix("decompose")(build("healthy_cnn"), node="/relu1/Relu")


def test_extract_and_delete_and_opset_upgrade():
    model = build("unique_op")
    out = checked(get_fix("extract_subgraph")(model, inputs=["input"], outputs=["relu_out"]))
    assert ops(out) == ["Relu"] and [o.name for o in out.graph.output] == ["relu_out"]
    assert verify(model, out, safety=Safety.CHANGES_SEMANTICS).outputs[0].max_abs == 0
    with pytest.raises(FixError, match="changes? (the )?(type|shape)|would change"):
        get_fix("delete_node")(build("healthy_cnn"), node="/flatten/Flatten")
    up = checked(get_fix("opset_upgrade")(build("healthy_cnn"), target=17))
    assert next(o.version for o in up.opset_import if o.domain == "") == 17
    assert verify(build("healthy_cnn"), up).status == "ok"
    with pytest.raises(FixError, match="no node 'nope'"):
        get_fix("delete_node")(model, node="nope")


def test_fold_picks_static_dims_out_of_a_partly_dynamic_shape():
    #   x[batch, 4] -> Shape -> Gather(1) -> Concat([-1], .) -> Reshape(x, .)   : the 4 is known, the batch is not
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "one"], ["d"], name="gather", axis=0),
        helper.make_node("Concat", ["minus1", "d"], ["shp"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "shp"], ["y"], name="reshape"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(np.array([1]), "one"), numpy_helper.from_array(np.array([-1]), "minus1")],
    )
    m = helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])
    out = checked(get_fix("fold_constants")(m))
    assert ops(out) == ["Reshape"]
    shp = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}["shp"]
    assert shp.tolist() == [-1, 4]
    assert verify(m, out, dims={"batch": 3}).status == "ok"
