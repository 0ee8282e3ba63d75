"""surgery.wire and what graph.py builds on it: the light copy written part by part, and the inferred value infos
read out of inference's serialized result, each compared with what onnx's own parser and public functions give."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery import graph
from surgery.samples import build
from surgery.wire import entries, payloads, repeated, varint


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 16383, 16384, 2**21, 2**35])
def test_varint_is_protobufs(n):
    t = TensorProto(dims=[n])  # field 1, an int64 (wire type 0): its tag, then the varint itself
    assert t.SerializeToString() == varint(1 << 3) + varint(n)


def test_entries_and_payloads_pick_fields_out_of_protobufs_serialization():
    g = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], [f"y{i}"], name=f"r{i}", doc_string="d" * (i * 60))
            for i in range(5)
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y4", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.arange(300, dtype=np.int64), "w")],
        value_info=[helper.make_tensor_value_info("y0", TensorProto.FLOAT, ["n", 3])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    data = model.SerializeToString()
    (graph_bytes,) = payloads(data, 7)
    assert onnx.GraphProto.FromString(bytes(graph_bytes)) == g
    typed = onnx.GraphProto.FromString(b"".join(entries(graph_bytes, {11, 12, 13})))
    assert list(typed.input) == list(g.input) and list(typed.output) == list(g.output)
    assert list(typed.value_info) == list(g.value_info) and not typed.node and not typed.initializer
    nodes = onnx.GraphProto.FromString(repeated(1, (n.SerializeToString() for n in g.node)))
    assert list(nodes.node) == list(g.node)  # lengths of one and of two bytes among them
    with pytest.raises(ValueError, match="runs past the end"):
        entries(data[:-3], {7})


def _old_light_copy(model, inputs=None):
    """The light copy as it was made before it was written part by part: a new message, extended field by field."""
    light = onnx.ModelProto(ir_version=model.ir_version)
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    g = light.graph
    g.name = model.graph.name
    g.node.extend(model.graph.node)
    g.input.extend(inputs if inputs is not None else model.graph.input)
    g.output.extend(model.graph.output)
    g.value_info.extend(model.graph.value_info)
    for t in model.graph.initializer:
        if graph._kept_whole(t):
            g.initializer.append(t)
        else:
            g.initializer.add(name=t.name, data_type=t.data_type, dims=t.dims)
    return light


@pytest.mark.parametrize("sample", ["resize_scales_chain", "if_branch_shapes", "squeeze_dynamic"])
def test_light_copy_and_inferred_types_are_what_onnx_gives(sample):
    model = build(sample)
    big = numpy_helper.from_array(np.ones((3, 100), np.float32), "big_unused")  # over the floats kept whole
    model.graph.initializer.append(big)
    light = graph.light_copy(model)
    assert light == _old_light_copy(model)
    assert [t.HasField("raw_data") or len(t.float_data) > 0 for t in light.graph.initializer][-1] is False
    inputs = [
        helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, None)
        for vi in model.graph.input
    ]
    assert graph.light_copy(model, inputs) == _old_light_copy(model, inputs)
    inferred = onnx.shape_inference.infer_shapes(_old_light_copy(model), False, False, False).graph
    assert graph.inferred_types(model) == graph._types_only(inferred)


def test_a_failing_inference_keeps_the_declared_types_and_says_why(monkeypatch):
    model = build("resize_scales_chain")
    data, error = graph.typed_values(b"\x0a\xff\xff")  # what onnx cannot parse: its error, no types
    assert data == b"" and error.startswith("shape inference failed: Unable to parse proto")

    def refuse(light, data_prop):
        raise RuntimeError("[ShapeInferenceError] no")

    monkeypatch.setattr(graph, "_inferred_bytes", refuse)
    with pytest.raises(graph.InferenceFailed, match=r"^shape inference failed: \[ShapeInferenceError\] no"):
        graph.inferred_types(model)
    graph.GraphFacts.forget(model)
    facts = graph.GraphFacts.of(model)
    assert facts.shape_inference_error == "shape inference failed: [ShapeInferenceError] no"
    assert facts.info(model.graph.input[0].name).dtype == model.graph.input[0].type.tensor_type.elem_type
