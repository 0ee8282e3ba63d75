"""The one home of small graph facts other modules used to compute each their own way (surgery.graph)."""

import onnx
from onnx import helper

from surgery.graph import opset_of


def test_opset_of_reads_the_default_domain_under_either_name_and_none_when_absent():
    graph = helper.make_graph([], "g", [], [])
    assert opset_of(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])) == 13
    assert opset_of(helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx", 17)])) == 17
    ml_only = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 3)])
    assert opset_of(ml_only) is None and opset_of(ml_only, "ai.onnx.ml") == 3
    assert isinstance(ml_only, onnx.ModelProto)
