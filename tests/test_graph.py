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


# -- the facts are the same as the plain algorithm's -------------------------------------------------------------
# `GraphFacts._build` is tuned for 100k-node models (one pass over the nodes, file order taken as the topological
# order when it is one, float weights left out of shape inference). The reference below is the plain version it
# replaced, kept here: every field must come out equal, order of dict keys and lists included.


def _reference_all_inputs(node):
    names = [x for x in node.input if x]
    for attr in node.attribute:
        subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for sub in subs:
            local = {i.name for i in sub.input} | {t.name for t in sub.initializer}
            for n in sub.node:
                local.update(o for o in n.output if o)
            for n in sub.node:
                names.extend(x for x in _reference_all_inputs(n) if x and x not in local)
            names.extend(o.name for o in sub.output if o.name not in local)
    return names


def _reference_facts(model):
    import heapq
    from collections import defaultdict

    from surgery.graph import NONDETERMINISTIC_OPS, TensorInfo, constant_tensor, tensor_info_from_type

    graph = model.graph
    keep = []  # the light copy as it was: every initializer up to 4096 elements whole, float or not
    for t in graph.initializer:
        numel = 1
        for d in t.dims:
            numel *= d
        if numel <= 4096 and t.data_location != TensorProto.EXTERNAL:
            keep.append(t)
        else:
            stub = TensorProto(name=t.name, data_type=t.data_type)
            stub.dims.extend(t.dims)
            keep.append(stub)
    light = onnx.ModelProto()
    light.CopyFrom(model)
    del light.graph.initializer[:]
    light.graph.initializer.extend(keep)
    try:
        g = onnx.shape_inference.infer_shapes(
            light, check_type=False, strict_mode=False, data_prop=False
        ).graph
    except Exception:
        g = graph
    producer, consumers = {}, defaultdict(list)
    for i, node in enumerate(graph.node):
        for out in node.output:
            if out:
                producer[out] = i
        for x in _reference_all_inputs(node):
            consumers[x].append(i)
    tensors = {
        vi.name: tensor_info_from_type(vi.name, vi.type) for vi in [*g.input, *g.value_info, *g.output]
    }
    for t in graph.initializer:
        tensors.setdefault(t.name, TensorInfo(t.name, t.data_type, tuple(t.dims)))
    for node in graph.node:
        if node.op_type == "Constant" and not node.domain:
            t = constant_tensor(node)
            if t is not None and node.output:
                tensors.setdefault(node.output[0], TensorInfo(node.output[0], t.data_type, tuple(t.dims)))
    n = len(graph.node)
    indeg, users = [0] * n, [[] for _ in range(n)]
    for i, node in enumerate(graph.node):
        deps = {producer[x] for x in _reference_all_inputs(node) if x in producer and producer[x] != i}
        indeg[i] = len(deps)
        for d in deps:
            users[d].append(i)
    ready = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    order += [i for i in range(n) if i not in set(order)]
    inits = {t.name for t in graph.initializer}
    real_inputs = {vi.name for vi in graph.input} if model.ir_version >= 4 else set()
    constant = {name for name in inits if name not in real_inputs}
    for i in order:
        node = graph.node[i]
        if (node.op_type in NONDETERMINISTIC_OPS and not node.domain) or node.domain not in ("", "ai.onnx"):
            continue
        ins = _reference_all_inputs(node)
        if node.op_type == "Constant" or (ins and all(x in constant for x in ins)):
            constant.update(o for o in node.output if o)
    return {
        "keys": node_keys(graph.node),
        "producer": producer,
        "consumers": dict(consumers),
        "graph_inputs": [vi.name for vi in graph.input if vi.name not in inits],
        "tensors": tensors,
        "constant": constant,
        "order": order,
    }


def _assert_same_facts(model):
    facts = GraphFacts.of(model)
    ref = _reference_facts(model)
    for name, want in ref.items():
        got = getattr(facts, name)
        assert got == want, name
        if isinstance(want, dict):
            assert list(got) == list(want), f"{name}: key order"
            assert all(list(got[k]) == list(v) for k, v in want.items() if isinstance(v, list)), name
    assert facts.index == {k: i for i, k in enumerate(ref["keys"])}
    assert list(facts.tensors.items()) == list(ref["tensors"].items())
    ops = [n.op_type for n in model.graph.node]
    assert facts.ops == ops  # kept from the declared pass, carried into the facts with shapes
    assert GraphFacts.of(model, infer=False).ops == ops
    return facts


def _opset(*extra):
    return [helper.make_opsetid("", 17), *extra]


def _nested_subgraph_model():
    # a Loop whose body holds an If whose branches read tensors of the main graph (two levels out), a model
    # function, a custom op, a random op, a Constant, empty and repeated names, an optional input left empty
    then_g = helper.make_graph(
        [helper.make_node("Add", ["x_sum", "w_outer"], ["t_out"], name="then_add")],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["loop_x"], ["e_out"], name="")],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, None)],
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("If", ["cond_in"], ["if_out"], then_branch=then_g, else_branch=else_g),
            helper.make_node("Add", ["if_out", "x_sum"], ["loop_x"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("carry", TensorProto.FLOAT, [2]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("loop_x", TensorProto.FLOAT, [2]),
        ],
    )
    fn = helper.make_function(
        "local", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])], _opset()
    )
    nodes = [
        helper.make_node(
            "Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.FLOAT, [2], [1, 2])
        ),
        helper.make_node("Add", ["x", "c"], ["x_sum"], name="dup"),
        helper.make_node("Loop", ["trips", "", "x_sum"], ["loop_y"], name="dup", body=body),
        helper.make_node("Twice", ["loop_y"], ["twice"], domain="local"),
        helper.make_node("Foo", ["c"], ["foo"], domain="com.x"),
        helper.make_node("RandomNormalLike", ["c"], ["rnd"]),
        helper.make_node("Mul", ["c", "w_outer"], ["cw"]),
        helper.make_node("Clip", ["twice", "", "cw"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "foo", "rnd")],
        [
            helper.make_tensor("trips", TensorProto.INT64, [], [3]),
            helper.make_tensor("w_outer", TensorProto.FLOAT, [2], [0.5, 0.25]),
        ],
    )
    opsets = _opset(helper.make_opsetid("local", 1), helper.make_opsetid("com.x", 1))
    return helper.make_model(g, ir_version=8, opset_imports=opsets, functions=[fn])


def test_facts_equal_the_plain_algorithm_on_every_sample():
    from surgery.samples import SAMPLES

    for name in SAMPLES:
        _assert_same_facts(build(name))


def test_facts_equal_the_plain_algorithm_with_subgraphs_functions_and_custom_ops():
    facts = _assert_same_facts(_nested_subgraph_model())
    loop = facts.keys.index("Loop#2")
    assert loop in facts.consumers["w_outer"]  # read two levels down, inside the If in the Loop's body
    assert facts.is_constant("cw") and not facts.is_constant("foo") and not facts.is_constant("rnd")


def test_facts_equal_the_plain_algorithm_out_of_order_in_cycles_and_with_two_producers():
    model = _nested_subgraph_model()
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(reversed(nodes))  # consumers before producers: the order has to be computed
    facts = _assert_same_facts(model)
    assert facts.order != list(range(len(nodes)))
    #   a -> b -> a (a cycle), then a second producer of 't' after its reader
    cyc = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["t"], name="first"),
            helper.make_node("Add", ["p", "x"], ["q"], name="a"),
            helper.make_node("Relu", ["q"], ["p"], name="b"),
            helper.make_node("Relu", ["t"], ["u"], name="reader"),
            helper.make_node("Relu", ["x"], ["t"], name="second"),
        ],
        "cyc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("u", TensorProto.FLOAT, [1])],
    )
    facts = _assert_same_facts(helper.make_model(cyc, ir_version=8, opset_imports=_opset()))
    assert facts.order[-2:] == [1, 2]  # the cycle last
    #   a node that reads the name it writes (a one-node cycle) is no reason to sort: its reader is its producer
    own = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["y"], name="first"),
            helper.make_node("Add", ["z", "y"], ["z"], name="self"),
            helper.make_node("Relu", ["z"], ["u"], name="last"),
        ],
        "own",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("u", TensorProto.FLOAT, [1])],
    )
    assert _assert_same_facts(helper.make_model(own, ir_version=8, opset_imports=_opset())).order == [0, 1, 2]


def test_float_values_shape_inference_reads_still_reach_it():
    # Resize's float scales, Range's float scalars and OneHot's float depth are read as values by shape
    # inference; a float weight (256 elements) is not: the light copy may leave it out, the facts are the same
    import numpy as np
    from onnx import numpy_helper

    inits = [
        numpy_helper.from_array(np.array([1, 1, 2, 3], np.float32), "scales"),
        numpy_helper.from_array(np.array(0.0, np.float32), "start"),
        numpy_helper.from_array(np.array(5.0, np.float32), "limit"),
        numpy_helper.from_array(np.array(1.0, np.float32), "delta"),
        numpy_helper.from_array(np.array(4.0, np.float32), "depth"),
        numpy_helper.from_array(np.array([0.0, 1.0], np.float32), "onoff"),
        numpy_helper.from_array(np.ones((16, 16), np.float32), "w"),
        numpy_helper.from_array(np.array([0, 2, 1], np.int64), "idx"),
    ]
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["up"], mode="nearest"),
        helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
        helper.make_node("OneHot", ["idx", "depth", "onoff"], ["hot"]),
        helper.make_node("MatMul", ["m", "w"], ["mm"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4]),
            helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 16]),
        ],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("up", "r", "hot", "mm")],
        inits,
    )
    facts = _assert_same_facts(helper.make_model(g, ir_version=8, opset_imports=_opset()))
    assert facts.info("up").shape == (1, 3, 8, 12)
    assert (
        facts.info("r").shape == (5,)
        and facts.info("hot").shape == (3, 4)
        and facts.info("mm").shape == (2, 16)
    )


def test_facts_of_a_generated_transformer_stack_equal_the_plain_algorithm():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from _models import transformer_stack

    _assert_same_facts(transformer_stack(2000))


def test_shapes_inferred_in_a_worker_equal_those_inferred_here_and_are_remembered():
    from surgery.graph import infer_in_worker
    from surgery.samples import SAMPLES

    for name in list(SAMPLES)[:6]:
        model = build(name)
        here = GraphFacts._build(model, True)  # not GraphFacts.of: nothing remembered yet
        declared = GraphFacts.of(model, infer=False)
        assert not declared.inferred
        there = infer_in_worker(declared)
        assert there.inferred and list(there.tensors.items()) == list(here.tensors.items()), name
        assert there.shape_inference_error == here.shape_inference_error
        assert GraphFacts.of(model) is there  # the app's background inference serves later callers
        assert there.producer is declared.producer  # only the types were added


def test_worker_inference_of_inconsistent_and_nested_models_equals_inference_here():
    from surgery.graph import infer_in_worker

    reshape = helper.make_graph(  # Reshape to a shape that cannot hold the data: declared types stay
        [helper.make_node("Reshape", ["x", "s"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [7])],
        [helper.make_tensor("s", TensorProto.INT64, [1], [7])],
    )
    for model in (helper.make_model(reshape, opset_imports=_opset()), _nested_subgraph_model()):
        here, there = GraphFacts._build(model, True), infer_in_worker(GraphFacts.of(model, infer=False))
        assert list(there.tensors.items()) == list(here.tensors.items())
        assert there.shape_inference_error == here.shape_inference_error


def test_facts_are_kept_per_model_object_until_an_edit_changes_its_stamp_or_they_are_forgotten():
    from surgery.graph import edit_stamp

    model = build("resize_scales_chain")
    first = GraphFacts.of(model)
    assert GraphFacts.of(model) is first  # asked again: the same facts, the model not serialized to know it
    before = edit_stamp(model)
    relu = next(n for n in model.graph.node if n.op_type == "Relu")
    model.graph.node.append(helper.make_node("Relu", [relu.output[0]], ["again"], name="again"))
    assert edit_stamp(model) != before
    second = GraphFacts.of(model)  # a node more: noticed
    assert second is not first and "again" in second.index
    model.graph.node[0].op_type = "Identity"  # an edit no count shows is said by the one who made it
    GraphFacts.forget(model)
    third = GraphFacts.of(model)
    assert third is not second and third.ops[0] == "Identity"


def test_dtype_and_get_read_what_info_reads_for_every_tensor_of_every_sample():
    """GraphFacts.dtype and TensorTable.get are fast paths of info(): the same answers, typed by inference or
    declared, for initializers, Constant outputs, unknown names, and facts whose table was replaced (a ChainMap
    of probed shapes, as explicit_squeeze_axes makes)."""
    import dataclasses
    from collections import ChainMap

    from surgery.graph import TensorInfo
    from surgery.samples import SAMPLES

    for name in SAMPLES:
        model = build(name)
        for facts in (GraphFacts.of(model), GraphFacts.of(model, infer=False)):
            names = {x for n in model.graph.node for x in (*n.input, *n.output) if x} | {"not-a-tensor"}
            for x in names:
                assert facts.dtype(x) == facts.info(x).dtype, (name, x)
                spelled_out = facts.tensors[x] if x in facts.tensors else None  # noqa: SIM401 - what get() means
                assert facts.tensors.get(x) == spelled_out, (name, x)
            probe = {x: TensorInfo(x, TensorProto.DOUBLE, (1,)) for x in list(names)[:2]}
            other = dataclasses.replace(facts, tensors=ChainMap(probe, facts.tensors))
            assert all(other.dtype(x) == other.info(x).dtype for x in names)
