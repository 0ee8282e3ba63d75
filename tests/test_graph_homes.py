"""The one home of small graph facts other modules used to compute each their own way (surgery.graph)."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from surgery.graph import GraphFacts, beyond_int32, folds_through, opset_of


def test_opset_of_reads_the_default_domain_under_either_name_and_none_when_absent():
    graph = helper.make_graph([], "g", [], [])
    assert opset_of(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])) == 13
    assert opset_of(helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx", 17)])) == 17
    ml_only = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 3)])
    assert opset_of(ml_only) is None and opset_of(ml_only, "ai.onnx.ml") == 3


WEIGHTS = """<ir_version: 8, opset_import: ["" : 13, "my" : 1]>
g (float[2] x) => (float[2] y) <float[2] w = {1.0, 2.0}> {
  c = Constant <value = float[2] {3.0, 4.0}> ()
  f = Constant <value_float = 5.0> ()
  m = my.Constant <value = float[2] {6.0, 7.0}> ()
  a = Add (x, w)
  b = Add (a, c)
  d = Add (b, f)
  y = Add (d, m)
}"""


def test_weights_tensor_is_the_initializer_or_the_constant_nodes_value_and_agrees_with_is_weights():
    facts = GraphFacts.of(onnx.parser.parse_model(WEIGHTS))
    assert numpy_helper.to_array(facts.weights_tensor("w")).tolist() == [1.0, 2.0]
    assert numpy_helper.to_array(facts.weights_tensor("c")).tolist() == [3.0, 4.0]
    assert facts.weights_tensor("f") is None and facts.is_weights("f")  # a weight, but not in `value` form
    assert facts.weights_tensor("m") is None and not facts.is_weights("m")  # a custom op named Constant
    assert facts.weights_tensor("a") is None and facts.weights_tensor("x") is None
    assert facts.weights_tensor("") is None


def test_beyond_int32_lists_the_int64_values_int32_cannot_hold_and_reads_nothing_else():
    big = numpy_helper.from_array(np.array([1, 2**31, -(2**31) - 1, 2**31 - 1], np.int64), "t")
    assert beyond_int32(big).tolist() == [2**31, -(2**31) - 1]
    assert beyond_int32(numpy_helper.from_array(np.array([5, -5], np.int64), "s")).size == 0
    assert beyond_int32(numpy_helper.from_array(np.array([2.0**40], np.float64), "f")).size == 0
    external = numpy_helper.from_array(np.array([2**40], np.int64), "e")
    external.data_location = TensorProto.EXTERNAL
    assert beyond_int32(external).size == 0


def test_folds_through_standard_deterministic_ops_only():
    assert folds_through(helper.make_node("Add", ["a", "b"], ["c"]))
    assert folds_through(helper.make_node("Add", ["a", "b"], ["c"], domain="ai.onnx"))
    assert not folds_through(helper.make_node("RandomNormalLike", ["a"], ["c"]))
    assert not folds_through(helper.make_node("RandomNormalLike", ["a"], ["c"], domain="ai.onnx"))
    assert not folds_through(helper.make_node("Add", ["a", "b"], ["c"], domain="my"))
