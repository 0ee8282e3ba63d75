"""fold_constants' fast paths give what the general path gives: a body where only Constant nodes fold is
rewritten without onnxruntime, and dropping nodes deletes them in place instead of copying the graph."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import surgery.fixes.fold_constants as fc
from surgery.fixes import get_fix


def _branch(name: str, scale: float) -> onnx.GraphProto:
    # Constant nodes read by a node that reads an outer input too (stays), one unread (goes), one a body output
    c = numpy_helper.from_array(np.full((2,), scale, np.float32), f"{name}_c")
    d = numpy_helper.from_array(np.ones((2,), np.float32), f"{name}_d")
    u = numpy_helper.from_array(np.zeros((1,), np.float32), f"{name}_unused")
    nodes = [
        helper.make_node("Constant", [], [f"{name}_c"], value=c),
        helper.make_node("Constant", [], [f"{name}_d"], value=d),
        helper.make_node("Constant", [], [f"{name}_unused"], value=u),
        helper.make_node("Mul", ["x", f"{name}_c"], [f"{name}_y"]),
    ]
    outs = [
        helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [2]),
        helper.make_tensor_value_info(f"{name}_d", TensorProto.FLOAT, [2]),
    ]
    return helper.make_graph(nodes, name, [], outs)


def _model() -> onnx.ModelProto:
    node = helper.make_node(
        "If", ["cond"], ["y", "d"], then_branch=_branch("then", 2.0), else_branch=_branch("else", 3.0)
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [2]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_constant_only_bodies_match_the_general_path(monkeypatch):
    model = _model()
    fast = get_fix("fold_constants")(model)
    branch = fast.graph.node[0].attribute[0].g
    assert [n.op_type for n in branch.node] == ["Mul"]
    assert sorted(t.name for t in branch.initializer) in (["then_c", "then_d"], ["else_c", "else_d"])
    monkeypatch.setattr(fc, "_only_constants_fold", lambda holder, dynamic=(): False)
    slow = get_fix("fold_constants")(model)
    assert fast.SerializeToString() == slow.SerializeToString()


def test_a_body_with_a_longer_chain_takes_the_general_path():
    branch = _branch("then", 2.0)
    branch.node.append(helper.make_node("Neg", ["then_c"], ["then_neg"]))
    assert not fc._only_constants_fold(branch, {"x"})
    assert fc._only_constants_fold(_branch("else", 3.0), {"x"})
    # an outer name not known to be dynamic may be an outer constant: the general path decides
    assert not fc._only_constants_fold(_branch("else", 3.0))


@pytest.mark.parametrize("keep", [[0, 2, 3, 6], [1, 2, 3, 4, 5, 6], [], [3, 1, 0]])
def test_keep_nodes(keep):
    nodes = [helper.make_node("Relu", [f"x{i}"], [f"x{i + 1}"], name=f"n{i}") for i in range(7)]
    graph = helper.make_graph(nodes, "g", [], [])
    fc._keep_nodes(graph, keep)
    assert [n.name for n in graph.node] == [f"n{i}" for i in keep]
