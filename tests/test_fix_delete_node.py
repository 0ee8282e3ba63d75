"""delete_node: a node whose first input and output agree in dtype and shape is removed and rewired."""

import onnx
import pytest

from surgery.fixes import FixError, Safety, get_fix
from surgery.samples import build
from surgery.verify import verify

fix = get_fix("delete_node")


def test_inner_relu_is_rewired():
    #   input -> Conv -> BatchNormalization -> Relu(relu1) -> MaxPool -> ... -> Softmax -> probs
    model = build("healthy_cnn")
    key = "/relu1/Relu"
    out = fix(model, node=key)
    onnx.checker.check_model(out, full_check=True)
    assert key not in [n.name for n in out.graph.node]
    assert len(out.graph.node) == len(model.graph.node) - 1
    assert verify(model, out, safety=Safety.CHANGES_SEMANTICS).status == "ok"


def test_output_producer_becomes_identity():
    model = build("resize_scales_chain")
    out = fix(model, node="/relu/Relu")
    onnx.checker.check_model(out, full_check=True)
    last = out.graph.node[-1]
    assert (last.op_type, list(last.input), list(last.output)) == ("Identity", ["up_out"], ["output"])


def test_refusals():
    model = build("resize_scales_chain")
    with pytest.raises(FixError, match=r"cannot tell whether '/up/Resize' \(Resize\) keeps the shape"):
        fix(model, node="/up/Resize")  # the scales chain is not folded: the output shape is unknown
    folded = get_fix("fold_constants")(model)
    with pytest.raises(FixError, match=r"'/up/Resize' turns shape \[1, 4, 16, 16\] into \[1, 4, 32, 32\]"):
        fix(folded, node="/up/Resize")
    with pytest.raises(FixError, match="'/up/Cast' turns INT64 into FLOAT"):
        fix(model, node="/up/Cast")
    with pytest.raises(FixError, match="no node 'nope' in the model. Note: nodes are /conv/Conv"):
        fix(model, node="nope")
