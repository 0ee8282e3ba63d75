"""inline_functions: calls of model-local functions become their bodies (exact); the predictor imports local
functions from TensorRT 10 on and takes them for custom ops before."""

import onnx.parser
import pytest

from surgery.backends.tensorrt.predictor import make
from surgery.fixes import FixError, get_fix
from surgery.verdict import Status
from surgery.verify import verify

#   x -> local.Swishish (a local function: Mul(a, Sigmoid(a))) -> y ; x -> local.Double -> z
MODEL = """\
<ir_version: 8, opset_import: ["" : 17, "local" : 1]>
g (float[2,4] x) => (float[2,4] y, float[2,4] z) {
  [call] y = local.Swishish (x)
  [twice] z = local.Double (x)
}
<domain: "local", opset_import: ["" : 17]>
Swishish (a) => (b) {
  s = Sigmoid (a)
  b = Mul (a, s)
}
<domain: "local", opset_import: ["" : 17]>
Double (a) => (b) {
  b = Add (a, a)
}
"""


def test_every_function_or_the_named_ones_are_inlined_exactly():
    model = onnx.parser.parse_model(MODEL)
    inline = get_fix("inline_functions")
    out = inline(model)
    assert sorted(n.op_type for n in out.graph.node) == ["Add", "Mul", "Sigmoid"] and not out.functions
    assert verify(model, out).ok
    some = inline(model, functions=["local::Double"])
    assert sorted(n.op_type for n in some.graph.node) == ["Add", "Swishish"]
    assert verify(model, some).ok


def test_refusals_name_what_is_missing():
    model = onnx.parser.parse_model(MODEL)
    with pytest.raises(
        FixError, match=r"no local function 'local::Nope'\. Note: the model's local functions are"
    ):
        get_fix("inline_functions")(model, functions=["local::Nope"])
    plain = get_fix("inline_functions")(model)
    with pytest.raises(FixError, match="the model has no local functions to inline"):
        get_fix("inline_functions")(plain)


def test_the_predictor_imports_local_functions_from_tensorrt_10():
    model = onnx.parser.parse_model(MODEL)
    assert make("10.15").check(model).accepted
    old = make("8.6").check(model).by_node()["call"]
    assert old.status is Status.REJECTED and old.checks == ("plugin-fallback-importer",)
