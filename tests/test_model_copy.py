"""surgery.model.copy_message: a copy through the wire form (weights held as numbers) is the same message as
protobuf's CopyFrom makes, and a fold of such a model writes the same bytes either way."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import surgery.model
from surgery.fixes import get_fix
from surgery.model import copy_into, copy_message


def numbers_tensor(name: str, n: int, seed: int = 0) -> TensorProto:
    values = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    return helper.make_tensor(name, TensorProto.FLOAT, [n], values.tolist())  # float_data, as Paddle writes


def paddle_like(n_constants: int = 4, size: int = 50_000) -> onnx.ModelProto:
    """Weights as float_data Constants (what PP-OCR's exports hold), over the copy's threshold together."""
    nodes, x = [], "x"
    for i in range(n_constants):
        nodes.append(helper.make_node("Constant", [], [f"w{i}"], value=numbers_tensor(f"w{i}", size, seed=i)))
        nodes.append(helper.make_node("Add", [x, f"w{i}"], [f"y{i}"]))
        x = f"y{i}"
    # a constant chain to fold besides: Shape of a Constant feeding a Reshape
    nodes.append(helper.make_node("Shape", ["w0"], ["s"]))
    nodes.append(helper.make_node("Reshape", [x, "s"], ["out"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [size])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("n", [10, 64, 5000])
def test_a_tensor_copies_to_the_same_message_and_leaves_its_source(n):
    t = numbers_tensor("t", n)
    before = t.SerializeToString()
    c = copy_message(t)
    assert c.SerializeToString() == before
    c.float_data[0] = 123.0
    c.name = "other"
    assert t.SerializeToString() == before


def test_a_model_of_number_weights_copies_to_the_same_message():
    m = paddle_like()
    before = m.SerializeToString()
    c = copy_message(m)
    assert c.SerializeToString() == before
    c.graph.node[0].attribute[0].t.float_data[0] = 7.0
    assert m.SerializeToString() == before
    raw = helper.make_model(
        helper.make_graph(
            [helper.make_node("Identity", ["w"], ["y"])],
            "g",
            [],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
            [onnx.numpy_helper.from_array(np.ones(3, np.float32), "w")],
        )
    )
    assert copy_message(raw).SerializeToString() == raw.SerializeToString()


def test_a_fold_of_number_weights_writes_what_a_field_by_field_copy_writes(monkeypatch):
    m = paddle_like()
    fold = get_fix("fold_constants")
    through_wire = fold(m).SerializeToString()
    monkeypatch.setattr(surgery.model, "_COPY_THROUGH_WIRE", {})  # every copy by CopyFrom
    assert fold(m).SerializeToString() == through_wire
    folded = onnx.ModelProto.FromString(through_wire)
    assert {t.name for t in folded.graph.initializer} >= {
        "w1",
        "w2",
        "w3",
    }  # the Constants became initializers
    assert all(n.op_type != "Constant" for n in folded.graph.node)


def test_copy_into_fills_an_empty_message_of_the_source_type():
    t = numbers_tensor("t", 1000)
    target = TensorProto()
    copy_into(target, t)
    assert target == t
