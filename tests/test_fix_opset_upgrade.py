"""opset_upgrade: onnx's version converter, ir_version raised when the opset needs it, clear refusals."""

import onnx
import pytest

from surgery.fixes import FixError, get_fix
from surgery.graph import opset_of
from surgery.samples import build
from surgery.verify import verify

fix = get_fix("opset_upgrade")


def test_resize_sample_upgraded_to_17():
    #   input -> Conv -> Resize(roi, scales chain) -> Relu (opset 11)
    model = build("resize_scales_chain")
    out = fix(model, target=17)
    onnx.checker.check_model(out, full_check=True)
    assert opset_of(out) == 17 and opset_of(model) == 11
    assert out.ir_version >= model.ir_version
    names = [n.name for n in out.graph.node]
    assert [n for n in names if n in {m.name for m in model.graph.node}] == [m.name for m in model.graph.node]
    assert all(names) and len(set(names)) == len(names)  # the converter's new Constants get unique names
    assert verify(model, out).status == "ok"


def test_refusals():
    model = build("resize_scales_chain")
    with pytest.raises(FixError, match="already at opset 11"):
        fix(model, target=11)
    with pytest.raises(FixError, match="onnx's version converter failed"):
        fix(model, target=999)


def test_a_converter_error_without_a_message_is_named_by_its_type(monkeypatch):
    # an exception whose message is empty used to end in an IndexError (first line of nothing)
    class ConverterCrash(RuntimeError):
        pass

    def crash(model, target):
        raise ConverterCrash("")

    monkeypatch.setattr(onnx.version_converter, "convert_version", crash)
    with pytest.raises(FixError, match="version converter failed: ConverterCrash"):
        fix(build("resize_scales_chain"), target=17)
