"""inference_mode: Dropout removed (rewired), BatchNormalization training_mode=0 without its extra outputs."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.fixes import FixError, Safety, get_fix
from surgery.samples import build
from surgery.verify import verify

fix = get_fix("inference_mode")


def test_training_mode_sample_becomes_inference_graph():
    #   input -> BatchNormalization(training_mode=1; +running mean/var) -> Relu -> Dropout(ratio, training=1) -> output
    model = build("training_mode_ops")
    out = fix(model)
    onnx.checker.check_model(out, full_check=True)
    assert [n.op_type for n in out.graph.node] == ["BatchNormalization", "Relu", "Identity"]
    bn = out.graph.node[0]
    assert list(bn.output) == ["bn_out"] and bn.name == "/bn/BatchNormalization"
    assert {a.name: a.i for a in bn.attribute}["training_mode"] == 0
    ident = out.graph.node[2]  # Dropout wrote the graph output: an Identity keeps the name
    assert list(ident.input) == ["relu_out"] and list(ident.output) == ["output"]
    # eval-mode BN uses the stored statistics: same as the original's inference, different from training
    report = verify(model, out, safety=Safety.CHANGES_SEMANTICS)
    assert report.status == "ok" and report.outputs[0].max_abs > 0


def test_opset_9_batchnorm_training_outputs_and_inner_dropout():
    #   x -> BatchNormalization (opset 9, 5 outputs = training) -> Dropout -> Relu -> y
    inits = [numpy_helper.from_array(np.ones(2, np.float32), n) for n in ("s", "b", "m", "v")]
    g = helper.make_graph(
        [
            helper.make_node(
                "BatchNormalization", ["x", "s", "b", "m", "v"], ["bn", "rm", "rv", "sm", "sv"], name="bn"
            ),
            helper.make_node("Dropout", ["bn"], ["d"], name="drop"),
            helper.make_node("Relu", ["d"], ["y"], name="relu"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3])],
        inits,
    )
    model = helper.make_model(g, ir_version=7, opset_imports=[helper.make_opsetid("", 9)])
    out = fix(model)
    onnx.checker.check_model(out, full_check=True)
    assert [(n.name, list(n.input), list(n.output)) for n in out.graph.node] == [
        ("bn", ["x", "s", "b", "m", "v"], ["bn"]),
        ("relu", ["bn"], ["y"]),
    ]


def test_refusals():
    out = fix(build("training_mode_ops"))
    with pytest.raises(FixError, match="no Dropout and no BatchNormalization in training mode"):
        fix(out)
    g = helper.make_graph(
        [
            helper.make_node("Dropout", ["x"], ["y", "mask"], name="drop"),
            helper.make_node("Cast", ["mask"], ["mf"], name="cast", to=TensorProto.FLOAT),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("mf", TensorProto.FLOAT, [4]),
        ],
    )
    model = helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(FixError, match="Dropout 'drop' has its mask output in use"):
        fix(model)
