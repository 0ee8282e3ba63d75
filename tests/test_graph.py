"""surgery.graph: keys, producers/consumers, topological order, inferred types, constants, subgraphs."""

import onnx
from onnx import TensorProto, helper

from surgery.graph import GraphFacts, count_nodes, iter_subgraphs, node_keys
from surgery.samples import build


def test_resize_sample_constant_cone_is_the_scales_chain():
    facts = GraphFacts.of(build("resize_scales_chain"))
    resize = facts.node("/up/Resize")
    scales = resize.input[2]
    assert facts.is_constant(scales)
    assert not facts.is_constant(resize.input[0])  # the data path depends on the input
    cone = [facts.keys[i] for i in facts.constant_producers(scales)]
    assert cone[-1] == "/up/Concat_1" and "/up/Cast" in cone and "/up/Unsqueeze" in cone
    assert "/conv/Conv" not in cone
    # topological: every producer comes before its consumers
    pos = {i: p for p, i in enumerate(facts.order)}
    for i, node in enumerate(facts.model.graph.node):
        for x in node.input:
            if x in facts.producer:
                assert pos[facts.producer[x]] < pos[i]


def test_inferred_types_keep_symbolic_dims():
    facts = GraphFacts.of(build("squeeze_dynamic"))
    info = facts.info("features")
    assert info.shape == ("batch", 1, 8) and info.is_dynamic and info.dtype_name == "FLOAT"
    assert facts.consumers_of("features")[0].op_type == "Squeeze"


def test_random_ops_and_custom_ops_are_not_constant():
    #   Constant c -> RandomNormalLike -> r ;  c -> com.x::Foo -> f ; c -> Relu -> k
    nodes = [
        helper.make_node(
            "Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.FLOAT, [2], [1, 2])
        ),
        helper.make_node("RandomNormalLike", ["c"], ["r"]),
        helper.make_node("Foo", ["c"], ["f"], domain="com.x"),
        helper.make_node("Relu", ["c"], ["k"]),
    ]
    g = helper.make_graph(
        nodes, "g", [], [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "rfk"]
    )
    facts = GraphFacts.of(helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)]))
    assert facts.is_constant("k") and not facts.is_constant("r") and not facts.is_constant("f")


def test_initializer_that_is_also_an_input_is_not_constant():
    g = helper.make_graph(
        [helper.make_node("Relu", ["w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("w", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [helper.make_tensor("w", TensorProto.FLOAT, [1], [1.0])],
    )
    facts = GraphFacts.of(helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)]))
    assert not facts.is_constant("y")


def test_node_keys_disambiguate_empty_and_duplicate_names():
    nodes = [
        helper.make_node("Relu", ["a"], ["b"], name="r"),
        helper.make_node("Relu", ["b"], ["c"], name="r"),
        helper.make_node("Relu", ["c"], ["d"]),
        helper.make_node("Relu", ["d"], ["e"], name="last"),
    ]
    assert node_keys(nodes) == ["Relu#0", "Relu#1", "Relu#2", "last"]


def test_subgraphs_and_outer_scope_reads():
    model = build("if_branch_shapes")
    subs = list(iter_subgraphs(model.graph))
    assert sorted(s.path for s in subs) == ["/if/If/else_branch", "/if/If/then_branch"]
    assert count_nodes(model) == len(model.graph.node) + 2
    facts = GraphFacts.of(model)
    # the If reads x_sum from the outer scope inside its branches: it is a consumer of x_sum
    assert "/if/If" in [facts.keys[i] for i in facts.consumers["x_sum"]]


def test_inconsistent_model_keeps_declared_types():
    # Reshape to a shape that cannot hold the data: facts still come back, with the declared I/O types
    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [7])],
        [helper.make_tensor("s", TensorProto.INT64, [1], [7])],
    )
    m = helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])
    facts = GraphFacts.of(m)
    assert facts.info("x").shape == (2, 3)
    assert facts.info("y").shape == (7,)
    onnx.checker.check_model(m)
