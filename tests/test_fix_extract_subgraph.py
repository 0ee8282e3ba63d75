"""extract_subgraph: the part between tensors becomes the model (e.g. cut before an unsupported tail)."""

import onnx
import pytest

from surgery.fixes import FixError, Safety, get_fix
from surgery.samples import build
from surgery.verify import verify

fix = get_fix("extract_subgraph")


def test_cut_before_the_unsupported_tail():
    #   input -> Conv -> Split -> offset, Sigmoid(mask) -> mmcv::MMCVModulatedDeformConv2d -> Relu -> output
    #   keep input .. (offset, mask): the part every backend runs
    model = build("deform_conv_custom")
    out = fix(model, inputs=["input"], outputs=["offset", "mask"])
    onnx.checker.check_model(out, full_check=True)
    assert [n.name for n in out.graph.node] == ["/offset/Conv", "/offset/Split", "/mask/Sigmoid"]
    assert [o.name for o in out.graph.output] == ["offset", "mask"]
    assert {t.name for t in out.graph.initializer} == {"offset.weight", "split_sizes"}
    assert list(out.opset_import) == list(model.opset_import) and out.ir_version == model.ir_version
    report = verify(model, out, safety=Safety.CHANGES_SEMANTICS)  # compared on the original's inner tensors
    assert report.status == "ok" and report.worst() == (0.0, 0.0)


def test_refusals():
    model = build("deform_conv_custom")
    with pytest.raises(FixError, match="no tensor 'nope'"):
        fix(model, inputs=["input"], outputs=["nope"])
    with pytest.raises(FixError, match="'input' is reached from outside the region"):
        fix(model, inputs=["mask"], outputs=["output"])
