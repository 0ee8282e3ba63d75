"""Folding shape arithmetic on partly dynamic shapes (surgery.shape_values): the elements known before the model
runs fold through Div/Cast/Mul/..., the dynamic ones stay computed, and the dims a Reshape gets from them reach
the next Shape in the same round."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import GraphProto, TensorProto, helper, numpy_helper

from surgery.fixes import get_fix


def _i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _shuffle(nodes, inits, x, k, groups=2):
    """A channel shuffle as torch exports it: Reshape(x, [batch, groups, C/groups, H, W]), Transpose,
    Reshape(., [batch, -1, H, W]); C/groups computed as Cast(Div(Gather(Shape(x), 1), groups))."""
    p = f"s{k}_"
    inits += [_i64(p + "i0", 0), _i64(p + "i1", 1), _i64(p + "i2", 2), _i64(p + "i3", 3), _i64(p + "ax", [0])]
    inits += [_i64(p + "g", groups), _i64(p + "m1", [-1])]
    nodes += [
        helper.make_node("Shape", [x], [p + "shape"]),
        helper.make_node("Gather", [p + "shape", p + "i0"], [p + "n"]),
        helper.make_node("Gather", [p + "shape", p + "i1"], [p + "c"]),
        helper.make_node("Gather", [p + "shape", p + "i2"], [p + "h"]),
        helper.make_node("Gather", [p + "shape", p + "i3"], [p + "w"]),
        helper.make_node("Div", [p + "c", p + "g"], [p + "cg"]),
        helper.make_node("Cast", [p + "cg"], [p + "cg64"], to=TensorProto.INT64),
        helper.make_node("Unsqueeze", [p + "n", p + "ax"], [p + "n1"]),
        helper.make_node("Unsqueeze", [p + "g", p + "ax"], [p + "g1"]),
        helper.make_node("Unsqueeze", [p + "cg64", p + "ax"], [p + "cg1"]),
        helper.make_node("Unsqueeze", [p + "h", p + "ax"], [p + "h1"]),
        helper.make_node("Unsqueeze", [p + "w", p + "ax"], [p + "w1"]),
        helper.make_node("Concat", [p + "n1", p + "g1", p + "cg1", p + "h1", p + "w1"], [p + "t5"], axis=0),
        helper.make_node("Reshape", [x, p + "t5"], [p + "r5"]),
        helper.make_node("Transpose", [p + "r5"], [p + "tr"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Concat", [p + "n1", p + "m1", p + "h1", p + "w1"], [p + "t4"], axis=0),
        helper.make_node("Reshape", [p + "tr", p + "t4"], [p + "out"]),
    ]
    return p + "out"


def _model(levels=3):
    nodes, inits = [], []
    x = "x"
    for k in range(levels):
        y = _shuffle(nodes, inits, x, k)
        nodes.append(helper.make_node("Relu", [y], [f"relu{k}"]))
        x = f"relu{k}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    return _batch_model(nodes, inits, "shuffles")


def _batch_model(nodes, inits, name):
    """x [batch, 8, 4, 4] -> nodes -> y, at opset 13."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(model, batch):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(batch).standard_normal((batch, 8, 4, 4)).astype(np.float32)
    return sess.run(None, {"x": x})[0]


def test_chained_shuffles_fold_their_static_dims_and_keep_the_batch():
    model = _model(levels=3)
    out = get_fix("fold_constants")(model)
    ops = [n.op_type for n in out.graph.node]
    # every Div/Cast of a static channel count folds, in every level (each level's channel count is read from
    # the shape the previous level's Reshape gives); the batch stays computed: one Shape->Gather per level
    assert "Div" not in ops and "Cast" not in ops
    assert ops.count("Shape") == 3 and ops.count("Gather") == 3
    for batch in (1, 2, 5):  # the batch was not frozen
        np.testing.assert_array_equal(_run(model, batch), _run(out, batch))


def test_a_dynamic_element_stays_computed_through_arithmetic():
    # Reshape(x, [Div(batch*8, 2), -1]): the batch element is computed (dynamic), the -1 stays -1
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"]),
        helper.make_node("Mul", ["n", "eight"], ["n8"]),
        helper.make_node("Div", ["n8", "two"], ["n4"]),
        helper.make_node("Unsqueeze", ["n4", "ax"], ["n41"]),
        helper.make_node("Concat", ["n41", "m1"], ["t"], axis=0),
        helper.make_node("Reshape", ["x", "t"], ["y"]),
    ]
    inits = [_i64("i0", 0), _i64("eight", 8), _i64("two", 2), _i64("ax", [0]), _i64("m1", [-1])]
    model = _batch_model(nodes, inits, "dyn")
    out = get_fix("fold_constants")(model)
    assert [n.op_type for n in out.graph.node] == [n.op_type for n in model.graph.node]
    for batch in (1, 3):
        np.testing.assert_array_equal(_run(model, batch), _run(out, batch))


def test_facts_see_the_shapes_partial_values_give():
    from surgery.fixes.fold_constants import _facts

    facts = _facts(_model(levels=2))
    # the second level's Reshape output: [batch, 8, 4, 4] although onnx's data propagation stops at the Div
    assert facts.info("s1_out").shape == ("batch", 8, 4, 4)
    assert facts.info("s1_r5").shape == ("batch", 2, 4, 4, 4)


def test_torch_expand_sizes_fold_where_the_dims_are_static():
    # torch's expand(x.size(0), -1): Where(Equal(sizes, -1), 1, sizes) with sizes = [Shape(Slice(w, 0, seq))[0],
    # -1]; the Slice keeps w's static dim 0 (1) although its end is the dynamic seq, and a dim is never -1: the
    # target folds to [1, 1] and the Expand of a constant folds with it
    w = numpy_helper.from_array(np.arange(16, dtype=np.int64).reshape(1, 16), "w")
    nodes = [
        helper.make_node("Shape", ["ids"], ["s"]),
        helper.make_node("Gather", ["s", "i1"], ["seq"]),
        helper.make_node("Unsqueeze", ["seq", "ax"], ["seq1"]),
        helper.make_node("Slice", ["w", "zero1", "seq1", "one1", "one1"], ["pos"]),
        helper.make_node("Shape", ["pos"], ["ps"]),
        helper.make_node("Gather", ["ps", "i0"], ["b"]),
        helper.make_node("Unsqueeze", ["b", "ax"], ["b1"]),
        helper.make_node("Concat", ["b1", "m1"], ["sizes"], axis=0),
        helper.make_node("Equal", ["sizes", "m1m1"], ["eq"]),
        helper.make_node("Where", ["eq", "ones", "sizes"], ["target"]),
        helper.make_node("Expand", ["w", "target"], ["wx"]),
        helper.make_node("Add", ["ids", "wx"], ["y"]),
    ]
    inits = [w, _i64("i0", 0), _i64("i1", 1), _i64("ax", [0]), _i64("zero1", [0]), _i64("one1", [1])]
    inits += [_i64("m1", [-1]), _i64("m1m1", [-1, -1]), _i64("ones", [1, 1])]
    graph = helper.make_graph(
        nodes,
        "expand",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    out = get_fix("fold_constants")(model)
    assert [n.op_type for n in out.graph.node] == ["Add"]
    ids = np.arange(48, dtype=np.int64).reshape(3, 16)
    run = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"ids": ids}
        )[0]
        for m in (model, out)
    ]
    np.testing.assert_array_equal(*run)


def test_an_unnamed_dim_cancels_in_a_reshape_minus_one():
    # Reshape(t, [Shape(t)[0], -1]) with t's dim 0 dynamic and unnamed: the -1 is 8*4 (t is [?, 8, 4]), so the
    # Shape of the result gives its dim 1 statically and the Div on it folds
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"]),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
        helper.make_node("Concat", ["n1", "m1"], ["t"], axis=0),
        helper.make_node("Reshape", ["x", "t"], ["r"]),
        helper.make_node("Shape", ["r"], ["rs"]),
        helper.make_node("Gather", ["rs", "i1"], ["c"]),
        helper.make_node("Div", ["c", "two"], ["h"]),
        helper.make_node("Unsqueeze", ["h", "ax"], ["h1"]),
        helper.make_node("Concat", ["n1", "h1", "m1"], ["t2"], axis=0),
        helper.make_node("Reshape", ["r", "t2"], ["y"]),
    ]
    inits = [_i64("i0", 0), _i64("i1", 1), _i64("ax", [0]), _i64("m1", [-1]), _i64("two", 2)]
    graph = helper.make_graph(
        nodes,
        "cancel",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 8, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    out = get_fix("fold_constants")(model)
    ops = [n.op_type for n in out.graph.node]
    assert "Div" not in ops and ops.count("Shape") == 1
    x = np.random.default_rng(0).standard_normal((3, 8, 4)).astype(np.float32)
    run = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        for m in (model, out)
    ]
    np.testing.assert_array_equal(*run)


def test_inlined_if_renames_what_its_nested_bodies_read():
    # If(True) whose branch computes t and holds an If (on a run-time condition) whose bodies read t: inlining
    # the outer If renames t, and the nested bodies must read the new name (they read the old one before)
    inner = helper.make_node(
        "If",
        ["c"],
        ["u"],
        then_branch=_one_node_body("Identity", "t", "ut", "it"),
        else_branch=_one_node_body("Neg", "t", "ue", "ie"),
    )
    branch = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["t"]), inner],
        "then",
        [],
        [helper.make_tensor_value_info("u", TensorProto.FLOAT, [2])],
    )
    other = _one_node_body("Identity", "x", "v", "else")
    nodes = [helper.make_node("If", ["yes"], ["y"], then_branch=branch, else_branch=other)]
    graph = helper.make_graph(
        nodes,
        "nested",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array(True), "yes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    out = get_fix("fold_constants")(model)
    assert "If" in [n.op_type for n in out.graph.node] and len(out.graph.node) == 2
    x = np.array([1.0, -2.0], dtype=np.float32)
    for c in (True, False):
        run = [
            ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
                None, {"x": x, "c": np.array(c)}
            )[0]
            for m in (model, out)
        ]
        np.testing.assert_array_equal(*run)


def test_python_shapes_agree_with_onnx_inference():
    from onnx import defs
    from onnx.shape_inference import infer_node_outputs

    from surgery.shape_values import _FAST, _from_array

    consts = {"ax": np.array([0, -1], dtype=np.int64), "ax1": np.array([1], dtype=np.int64)}
    shapes = {"a": (2, 1, 3, 4), "b": (3, 4, 5), "c": (2, 1, 3, 4), "m": (4, 6), "n": (5, 6), "s": (1, 3, 1)}
    cases = [
        helper.make_node("Unsqueeze", ["b", "ax"], ["o"]),
        helper.make_node("Squeeze", ["s", "ax"], ["o"]),
        helper.make_node("Squeeze", ["a", "ax1"], ["o"]),
        helper.make_node("Concat", ["a", "c"], ["o"], axis=-1),
        helper.make_node("ReduceMean", ["a"], ["o"], axes=[1, 3], keepdims=0),
        helper.make_node("ReduceSum", ["a", "ax1"], ["o"]),
        helper.make_node("MatMul", ["a", "b"], ["o"]),
        helper.make_node("Gemm", ["m", "n"], ["o"], transB=1),
        helper.make_node("Transpose", ["a"], ["o"], perm=[3, 0, 2, 1]),
        helper.make_node("Add", ["a", "s"], ["o"]),
        helper.make_node("Gather", ["b", "ax"], ["o"], axis=1),
    ]

    def get(name):
        return _from_array(consts[name], TensorProto.INT64) if name in consts else None

    for node in cases:
        opset = 13 if node.op_type != "ReduceMean" else 11
        types = {
            x: helper.make_tensor_type_proto(
                TensorProto.INT64 if x in consts else TensorProto.FLOAT,
                list(consts[x].shape) if x in consts else list(shapes[x]),
            )
            for x in node.input
        }
        data = {x: numpy_helper.from_array(consts[x], x) for x in node.input if x in consts}
        want = infer_node_outputs(defs.get_schema(node.op_type, opset, ""), node, types, data)["o"]
        want = tuple(d.dim_value for d in want.tensor_type.shape.dim)
        shape_of = {**shapes, **{k: v.shape for k, v in consts.items()}}.get
        assert _FAST[node.op_type](node, shape_of, get) == want, node.op_type


def _one_node_body(op: str, x: str, y: str, name: str) -> GraphProto:
    """A body of one node, y = op(x), its output a float vector of 2."""
    return helper.make_graph(
        [helper.make_node(op, [x], [y])], name, [], [helper.make_tensor_value_info(y, TensorProto.FLOAT, [2])]
    )


def test_refine_reads_no_small_weight_beside_an_activation(monkeypatch):
    """An Add of an activation and a small bias has no partial value: refine stops at the activation and never
    converts the bias (a transformer stack holds thousands of such biases)."""
    import surgery.shape_values as sv
    from surgery.fixes.fold_constants import _facts

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    bias = numpy_helper.from_array(np.arange(4, dtype=np.float32), "bias")
    nodes = [
        helper.make_node("Relu", ["x"], ["h"]),
        helper.make_node("Add", ["h", "bias"], ["a"]),
        helper.make_node("Shape", ["a"], ["s"]),
        helper.make_node("Reshape", ["a", "s"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], [bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    read = []
    real = sv.numpy_helper.to_array
    monkeypatch.setattr(sv.numpy_helper, "to_array", lambda t, *a: read.append(t.name) or real(t, *a))
    sv.refine(_facts(model))
    assert "bias" not in read


def test_refine_reads_only_the_nodes_it_may_learn_from():
    """refine looks at the ops with a value rule or a shape from partial values, and at the readers of what it
    learnt; a long run of other ops (a transformer's MatMul/Add/Relu) is never read from the proto (50k nodes:
    reading each one's fields was most of a pass)."""
    import dataclasses
    import types

    import surgery.shape_values as sv
    from surgery.fixes.fold_constants import _facts

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Relu", [f"h{k}" if k else "x"], [f"h{k + 1}"]) for k in range(40)]
    nodes += [helper.make_node("Shape", ["h40"], ["s"]), helper.make_node("Reshape", ["h40", "s"], ["y"])]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)]
    )
    facts = _facts(model)
    read = []

    class Nodes(list):
        def __getitem__(self, i):
            read.append(i)
            return list.__getitem__(self, i)

    fake = types.SimpleNamespace(
        graph=types.SimpleNamespace(node=Nodes(model.graph.node)), opset_import=model.opset_import
    )
    sv.refine(dataclasses.replace(facts, model=fake))
    assert len(read) <= 4, read
