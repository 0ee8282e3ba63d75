"""surgery.verify on big models: a change is compared on its changed region, fed the model's own values at the
region's boundary; only a region that passes (exact) or is identical stands, anything else is verified whole."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import surgery.verify as verify_module
from surgery.fixes import Safety
from surgery.verify import changed_region, verify


@pytest.fixture(autouse=True)
def small_region_threshold(monkeypatch):
    # the region path is for big models: here a model of a few nodes counts as one
    monkeypatch.setattr(verify_module, "REGION_FROM_NODES", 4)


def _chain(middle: list, inits=()) -> "helper.ModelProto":
    """x -> Abs -> Add(1) -> [middle: reads 'p', writes 'q'] -> Mul(w) -> Neg -> y: 'p' is never below 1."""
    nodes = [
        helper.make_node("Abs", ["x"], ["a"], name="abs"),
        helper.make_node("Add", ["a", "one"], ["p"], name="plus_one"),
        *middle,
        helper.make_node("Mul", ["q", "w"], ["m"], name="scale"),
        helper.make_node("Neg", ["m"], ["y"], name="neg"),
    ]
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
        [
            numpy_helper.from_array(np.array(1.0, np.float32), "one"),
            numpy_helper.from_array(np.array(3.0, np.float32), "w"),
            *inits,
        ],
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])


def _relu():
    return _chain([helper.make_node("Relu", ["p"], ["q"], name="act")])


def test_region_is_the_rewritten_nodes_with_their_boundary():
    original = _relu()
    changed = _chain([helper.make_node("Identity", ["p"], ["q"], name="act")])
    region = changed_region(original, changed)
    assert [n.op_type for n in region.nodes] == ["Identity"]
    assert region.inputs == ["p"] and region.outputs == ["q"] and region.removed == 1


def test_a_node_reading_a_changed_weight_is_in_the_region():
    original = _relu()
    changed = _relu()
    changed.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.array(3.5, np.float32), "w"))
    region = changed_region(original, changed)
    assert [n.name for n in region.nodes] == ["scale"] and region.outputs == ["m"]


def test_exact_change_is_verified_on_its_region_with_the_models_own_values():
    # Relu -> Identity is exact only where its input is never negative: it is, on the model's own values ('p'
    # >= 1); fed random values at the boundary the two would differ
    r = verify(_relu(), _chain([helper.make_node("Identity", ["p"], ["q"], name="act")]))
    assert r.status == "ok", r.summary()
    assert "compared the changed region, not the whole model" in r.message
    assert [o.name for o in r.outputs] == ["q"]


def test_a_region_that_fails_is_verified_whole():
    changed = _chain([helper.make_node("Mul", ["p", "two"], ["q"], name="act")])
    changed.graph.initializer.append(numpy_helper.from_array(np.array(2.0, np.float32), "two"))
    r = verify(_relu(), changed)
    assert r.status == "failed"
    assert [o.name for o in r.outputs] == ["y"]  # the model's output, not the region's
    assert "changed region" not in r.message


def test_approximate_change_stands_on_its_region_only_when_identical():
    same = _chain([helper.make_node("Max", ["p", "zero"], ["q"], name="act")])
    same.graph.initializer.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero"))
    r = verify(_relu(), same, safety=Safety.APPROXIMATE, bound=1e-6)
    assert r.status == "ok" and "changed region" in r.message and "identical" in r.message
    near = _chain([helper.make_node("Mul", ["p", "k"], ["q"], name="act")])
    near.graph.initializer.append(numpy_helper.from_array(np.array(1.0 + 1e-7, np.float32), "k"))
    r = verify(_relu(), near, safety=Safety.APPROXIMATE, bound=0.5)
    assert r.status == "ok" and [o.name for o in r.outputs] == ["y"] and "changed region" not in r.message


def test_changes_to_inputs_or_outputs_are_verified_whole():
    original = _relu()
    renamed = _relu()
    renamed.graph.output[0].name = "z"
    renamed.graph.node[-1].output[0] = "z"
    assert changed_region(original, renamed) is None
    typed = _relu()
    typed.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    assert changed_region(original, typed) is None
    assert changed_region(original, _relu()) is None  # nothing changed: nothing to compare on a region


def test_small_models_are_verified_whole(monkeypatch):
    monkeypatch.setattr(verify_module, "REGION_FROM_NODES", 5000)
    r = verify(_relu(), _chain([helper.make_node("Identity", ["p"], ["q"], name="act")]))
    assert r.status == "ok" and [o.name for o in r.outputs] == ["y"] and "changed region" not in r.message


def test_summary_names_the_worst_outputs_of_many():
    report = verify_module.VerifyReport(
        "ok",
        "exact",
        [verify_module.OutputError(f"t{i}", i * 1e-9, i * 1e-9, (1,)) for i in range(30)],
    )
    text = report.summary()
    assert "t29:" in text and "t0:" not in text and "10 more output(s)" in text
