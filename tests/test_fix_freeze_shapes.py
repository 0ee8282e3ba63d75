"""freeze_shapes: fixed input shapes (by input or by symbolic dim), inference again, then folding."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.fixes import FixError, Safety, get_fix
from surgery.graph import GraphFacts
from surgery.samples import build
from surgery.verify import verify

freeze = get_fix("freeze_shapes")


def test_unshaped_input_frozen_to_an_image_shape():
    #   image[?] -> Conv(w[4,3,3,3], pads=1) -> Relu -> output[?]
    model = build("dynamic_input_unshaped")
    out = freeze(model, shapes={"image": [1, 3, 32, 32]})
    onnx.checker.check_model(out, full_check=True)
    facts = GraphFacts.of(out)
    assert facts.info("image").shape == (1, 3, 32, 32)
    assert facts.info("output").shape == (1, 4, 32, 32)
    feeds = {"image": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    assert verify(model, out, feeds=feeds, safety=Safety.CHANGES_SEMANTICS).worst() == (0.0, 0.0)
    assert verify(model, out, safety=Safety.CHANGES_SEMANTICS).status == "ok"  # inputs from the frozen model


def _batch_reshape():
    #   x[batch, 6] -> Shape -> Gather(0) -> Unsqueeze -> Concat(.., [2, 3]) -> Reshape(x, ..) -> y[batch, 2, 3]
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["b"], name="gather", axis=0),
        helper.make_node("Concat", ["b", "rest"], ["shp"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "shp"], ["y"], name="reshape"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, 3])],
        [
            numpy_helper.from_array(np.array([0], np.int64), "zero"),
            numpy_helper.from_array(np.array([2, 3], np.int64), "rest"),
        ],
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


def test_symbolic_dim_by_name_then_the_shape_chain_folds():
    model = _batch_reshape()
    out = freeze(model, dims={"batch": 4})
    onnx.checker.check_model(out, full_check=True)
    assert [n.name for n in out.graph.node] == ["reshape"]
    shp = next(t for t in out.graph.initializer if t.name == "shp")
    assert numpy_helper.to_array(shp).tolist() == [4, 2, 3]
    assert GraphFacts.of(out).info("y").shape == (4, 2, 3)
    assert verify(model, out, safety=Safety.CHANGES_SEMANTICS).status == "ok"
    no_fold = freeze(model, dims={"batch": 4}, fold=False)
    assert len(no_fold.graph.node) == 4


def test_refusals():
    model = _batch_reshape()
    with pytest.raises(FixError, match="needs `shapes`"):
        freeze(model)
    with pytest.raises(FixError, match=r"no graph input 'z'. Note: inputs are \['x'\]"):
        freeze(model, shapes={"z": [1]})
    with pytest.raises(FixError, match="has rank 2; the new shape"):
        freeze(model, shapes={"x": [1, 2, 3]})
    with pytest.raises(FixError, match="dim 1 is fixed at 6; cannot freeze it to 5"):
        freeze(model, shapes={"x": [1, 5]})
    with pytest.raises(FixError, match=r"no input uses the symbolic dim\(s\) \['seq'\]"):
        freeze(model, dims={"seq": 3})
    with pytest.raises(FixError, match="shape inference fails with the frozen shapes.*Conv"):
        freeze(build("dynamic_input_unshaped"), shapes={"image": [1, 3, 8]})  # Conv2d wants rank 4
