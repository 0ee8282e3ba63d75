"""Into subgraphs and functions: the TensorRT predictor checks If/Loop/Scan bodies and local functions with the
same node checks as the main graph, fold_constants folds inside them (outer constants are constants there, a
loop-carried value is not; a body that cannot fold is skipped and said so), the rule engine proposes and the
tracer explains body nodes, verification feeds a bool condition both ways, and `fix` repairs a computed Resize
scales chain inside an If branch and inside a local function for TensorRT 8.2, replayed bit for bit."""

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from surgery.backends.tensorrt.predictor import make
from surgery.cli import main
from surgery.fixes import FixError
from surgery.fixes.fold_constants import FoldSkipped, fold_constants
from surgery.graph import GraphFacts, find_node, iter_scopes
from surgery.model import fingerprint, load_model
from surgery.ort import make_session
from surgery.rulebook import load_rules, propose
from surgery.rulebook.tracer import explain, unrepaired
from surgery.verdict import Status
from surgery.verify import verify
from surgery.workspace import Workspace

SCALES_WORDS = 'Assertion failed: scales.is_weights() && "Resize scales must be an initializer!"'


def _const(name, value):
    return h.make_node("Constant", [], [name], name=name + "/Constant", value=nh.from_array(value, name))


def _chain(prefix, two=None):
    """The classic computed scales, Concat(Constant[1,1], Cast(Concat(Unsqueeze(2), Unsqueeze(2)))); `two`: an
    outer tensor to read the 2 from instead of a Constant of the body's own."""
    nodes = [] if two else [_const(f"{prefix}/two", np.array(2, np.int64))]
    two = two or f"{prefix}/two"
    nodes += [
        _const(f"{prefix}/ones", np.array([1.0, 1.0], np.float32)),
        h.make_node("Unsqueeze", [two], [f"{prefix}/u0"], name=f"{prefix}/Unsqueeze", axes=[0]),
        h.make_node("Unsqueeze", [two], [f"{prefix}/u1"], name=f"{prefix}/Unsqueeze_1", axes=[0]),
        h.make_node(
            "Concat", [f"{prefix}/u0", f"{prefix}/u1"], [f"{prefix}/hw"], name=f"{prefix}/Concat", axis=0
        ),
        h.make_node("Cast", [f"{prefix}/hw"], [f"{prefix}/hwf"], name=f"{prefix}/Cast", to=T.FLOAT),
        h.make_node(
            "Concat",
            [f"{prefix}/ones", f"{prefix}/hwf"],
            [f"{prefix}/scales"],
            name=f"{prefix}/Concat_1",
            axis=0,
        ),
    ]
    return nodes, f"{prefix}/scales"


def resize_in_if() -> onnx.ModelProto:
    """y = If(c): then Resize(x, scales computed in the branch from the outer Constant 'two'), else
    -Resize(x, an outer initializer). The condition is a graph input: known at run time only."""
    chain, scales = _chain("/then", two="two")
    then = h.make_graph(
        [*chain, h.make_node("Resize", ["x", "roi", scales], ["t_out"], name="/then/Resize", mode="nearest")],
        "then",
        [],
        [h.make_tensor_value_info("t_out", T.FLOAT, [1, 3, 16, 16])],
    )
    other = h.make_graph(
        [
            h.make_node("Resize", ["x", "roi", "scales_init"], ["e_r"], name="/else/Resize", mode="nearest"),
            h.make_node("Neg", ["e_r"], ["e_out"], name="/else/Neg"),
        ],
        "else",
        [],
        [h.make_tensor_value_info("e_out", T.FLOAT, [1, 3, 16, 16])],
    )
    g = h.make_graph(
        [
            _const("two", np.array(2, np.int64)),
            h.make_node("If", ["c"], ["y"], name="/if/If", then_branch=then, else_branch=other),
        ],
        "resize_in_if",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8]), h.make_tensor_value_info("c", T.BOOL, [])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 3, 16, 16])],
        [
            nh.from_array(np.array([], np.float32), "roi"),
            nh.from_array(np.array([1, 1, 2, 2], np.float32), "scales_init"),
        ],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 11)], ir_version=7)


def resize_in_function() -> onnx.ModelProto:
    """y = local.Upsample2(x), the function computing its Resize scales with the classic chain."""
    chain, scales = _chain("/up")
    fn = h.make_function(
        "local",
        "Upsample2",
        ["a"],
        ["b"],
        [
            *chain,
            _const("/up/roi", np.array([], np.float32)),
            h.make_node("Resize", ["a", "/up/roi", scales], ["b"], name="/up/Resize", mode="nearest"),
        ],
        [h.make_opsetid("", 11)],
    )
    g = h.make_graph(
        [h.make_node("Upsample2", ["x"], ["y"], name="/up/Upsample2", domain="local")],
        "resize_in_function",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 3, 16, 16])],
    )
    opsets = [h.make_opsetid("", 11), h.make_opsetid("local", 1)]
    return h.make_model(g, opset_imports=opsets, ir_version=8, functions=[fn])


def resize_in_loop() -> onnx.ModelProto:
    """A Loop whose body resizes by scales computed from the loop-carried value 's' (1 -> 2 -> 4 ...), next to a
    chain of the body's own constants (foldable)."""
    chain, const_scales = _chain("/body")
    body = h.make_graph(
        [
            *chain,
            h.make_node("Identity", ["cond_in"], ["cond_out"], name="/body/cond"),
            h.make_node(
                "Concat", ["ones2", "s", "s"], ["/body/carried_scales"], name="/body/Concat_s", axis=0
            ),
            h.make_node("Add", ["s", "s"], ["s_next"], name="/body/Add"),
            h.make_node(
                "Resize",
                ["x", "roi", "/body/carried_scales"],
                ["r"],
                name="/body/Resize_carried",
                mode="nearest",
            ),
            h.make_node(
                "Resize", ["x", "roi", const_scales], ["r2"], name="/body/Resize_const", mode="nearest"
            ),
            h.make_node("ReduceSum", ["r"], ["rs"], name="/body/ReduceSum", keepdims=0),
            h.make_node("ReduceSum", ["r2"], ["rs2"], name="/body/ReduceSum_2", keepdims=0),
            h.make_node("Add", ["rs", "rs2"], ["scan_out"], name="/body/Add_out"),
        ],
        "body",
        [
            h.make_tensor_value_info("i", T.INT64, []),
            h.make_tensor_value_info("cond_in", T.BOOL, []),
            h.make_tensor_value_info("s", T.FLOAT, [1]),
        ],
        [
            h.make_tensor_value_info("cond_out", T.BOOL, []),
            h.make_tensor_value_info("s_next", T.FLOAT, [1]),
            h.make_tensor_value_info("scan_out", T.FLOAT, []),
        ],
    )
    g = h.make_graph(
        [h.make_node("Loop", ["trips", "", "s0"], ["s_final", "sums"], name="/loop/Loop", body=body)],
        "resize_in_loop",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 1, 2, 2])],
        [h.make_tensor_value_info("sums", T.FLOAT, [2])],
        [
            nh.from_array(np.array(2, np.int64), "trips"),
            nh.from_array(np.array([1.0], np.float32), "s0"),
            nh.from_array(np.array([1.0, 1.0], np.float32), "ones2"),
            nh.from_array(np.array([], np.float32), "roi"),
        ],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 11)], ir_version=7)


def _run(model, **feeds):
    sess = make_session(model, None)
    return sess.run(None, feeds)[0]


X = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)


def _same_both_ways(a, b):
    for c in (True, False):
        np.testing.assert_array_equal(_run(a, x=X, c=np.array(c)), _run(b, x=X, c=np.array(c)))


def _body(model, node_index, name):
    return next(a.g for a in model.graph.node[node_index].attribute if a.name == name)


# -- verdicts --------------------------------------------------------------------------------------------------


def test_predictor_refuses_a_computed_resize_scales_chain_inside_an_if_branch():
    model = resize_in_if()
    v = next(v for v in make("8.2").check(model).verdicts if v.op_type == "If")
    assert v.status is Status.REJECTED and v.code == "UNSUPPORTED_NODE"
    assert v.words == SCALES_WORDS and "resize-scales-initializer" in v.checks
    assert "in its body, Resize '/then/Resize': the scales input '/then/scales' is computed" in v.explanation
    assert make("8.4").check(model).accepted  # the check is gone from 8.4


def test_predictor_reads_outer_weights_as_weights_inside_a_body():
    """The else branch's Resize reads an outer initializer: a weight to the parser, as in the main graph."""
    model = resize_in_if()
    then = _body(model, 1, "then_branch")
    del then.node[:-1]  # the then branch's Resize now reads scales from the outer scope
    then.node[0].input[2] = "scales_init"
    assert make("8.2").check(model).accepted


def test_predictor_checks_a_local_functions_body_where_the_version_imports_it():
    model = resize_in_function()
    # 8.2 has no importer for a local function: it looks for a plugin
    v = make("8.2").check(model).verdicts[0]
    assert v.status is Status.REJECTED and "Plugin not found" in v.words
    assert make("10.0").check(model).accepted
    # from 10.0 the body is imported with the same checks: a MaxPool whose indices are read inside it is refused
    fn = model.functions[0]
    fn.node.extend(
        [
            h.make_node(
                "MaxPool", ["b"], ["/up/pooled", "/up/indices"], name="/up/MaxPool", kernel_shape=[1, 1]
            ),
            h.make_node("Cast", ["/up/indices"], ["/up/indices_f"], name="/up/Cast_indices", to=T.FLOAT),
            h.make_node("Add", ["/up/pooled", "/up/indices_f"], ["c"], name="/up/Add"),
        ]
    )
    fn.output[0] = "c"
    v = make("10.0").check(model).verdicts[0]
    assert v.status is Status.REJECTED and "maxpool-indices" in v.checks, v
    assert "in its body, MaxPool '/up/MaxPool'" in v.explanation


def test_predictor_binds_a_functions_inputs_to_what_the_caller_passes():
    """Inside the function, the scales are its formal input: a weight when the caller passes an initializer."""
    fn = h.make_function(
        "local",
        "Up",
        ["a", "sc"],
        ["b"],
        [h.make_node("Resize", ["a", "", "sc"], ["b"], name="/f/Resize")],
        [],
    )
    fn.opset_import.extend([h.make_opsetid("", 11)])
    fn.node[0].input[1] = "roi_f"
    fn.node.insert(0, _const("roi_f", np.array([], np.float32)))
    g = h.make_graph(
        [h.make_node("Up", ["x", "scales_init"], ["y"], name="call", domain="local")],
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
        [h.make_tensor_value_info("y", T.FLOAT, None)],
        [nh.from_array(np.array([1, 1, 2, 2], np.float32), "scales_init")],
    )
    model = h.make_model(
        g, opset_imports=[h.make_opsetid("", 11), h.make_opsetid("local", 1)], functions=[fn]
    )
    facts = GraphFacts.of(model)
    from surgery.graph import function_facts

    inside = function_facts(facts, fn, call=model.graph.node[0])
    assert inside.is_weights("sc") and inside.is_constant("sc")
    assert not function_facts(facts, fn).is_constant("sc")  # for every call: a run-time value


def test_predictor_refuses_a_loop_body_resize_whose_scales_are_loop_carried():
    v = make("8.2").check(resize_in_loop()).verdicts[0]
    assert v.status is Status.REJECTED and v.words == SCALES_WORDS
    assert "in its body, Resize '/body/Resize_carried'" in v.explanation


# -- facts and folding in bodies ---------------------------------------------------------------------------------


def test_body_facts_see_outer_constants_and_not_loop_carried_values():
    facts = GraphFacts.of(resize_in_loop())
    (body,) = list(iter_scopes(facts))
    assert body.path == "/loop/Loop/body/"
    assert body.is_weights("roi") and body.is_constant("ones2")  # outer initializers
    assert body.is_constant("/body/scales")  # the body's own chain
    assert not body.is_constant("s") and not body.is_constant("/body/carried_scales")  # loop-carried
    scope, index = find_node(facts, "/loop/Loop/body//body/Resize_const")
    assert scope.model.graph.node[index].name == "/body/Resize_const"


def test_fold_in_an_if_branch_reads_outer_constants_and_keeps_both_branches():
    model = resize_in_if()
    for params in ({}, {"tensors": ["/then/scales"]}):
        fixed = fold_constants(model, **params)
        onnx.checker.check_model(fixed, full_check=True)
        then = _body(fixed, len(fixed.graph.node) - 1, "then_branch")
        assert [n.op_type for n in then.node] == ["Resize"]
        assert [t.name for t in then.initializer] == ["/then/scales"]
        assert nh.to_array(then.initializer[0]).tolist() == [1, 1, 2, 2]
        assert "two" not in {n.output[0] for n in fixed.graph.node}  # the outer Constant only the chain read
        _same_both_ways(model, fixed)
        assert make("8.2").check(fixed).accepted


def test_fold_in_a_local_function_makes_constant_nodes():
    model = resize_in_function()
    for params in ({}, {"tensors": ["/up/scales"]}):
        fixed = fold_constants(model, **params)
        onnx.checker.check_model(fixed, full_check=True)
        fn = fixed.functions[0]
        assert [n.op_type for n in fn.node] == ["Constant", "Constant", "Resize"]
        assert fn.node[-1].input[2] == "/up/scales"
        np.testing.assert_array_equal(_run(model, x=X), _run(fixed, x=X))


def test_fold_in_a_loop_body_folds_its_constants_but_never_a_loop_carried_value():
    model = resize_in_loop()
    fixed = fold_constants(model)
    onnx.checker.check_model(fixed, full_check=True)
    body = _body(fixed, 0, "body")
    assert "/body/scales" in {t.name for t in body.initializer}
    assert "/body/Concat_s" in {n.name for n in body.node}  # reads 's': stays
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    np.testing.assert_array_equal(_run(model, x=x), _run(fixed, x=x))
    with pytest.raises(
        FixError, match="folding inside /loop/Loop/body: tensor '/body/carried_scales' is not"
    ):
        fold_constants(model, tensors=["/body/carried_scales"])


def test_a_body_that_cannot_fold_is_skipped_and_said_so_or_refused():
    model = resize_in_if()
    other = _body(model, 1, "else_branch")
    # a constant chain onnxruntime cannot evaluate (6 values into shape [4]) feeding the else branch's output
    other.node.insert(0, _const("/else/six", np.arange(6, dtype=np.float32)))
    other.node.insert(1, _const("/else/shape", np.array([4], np.int64)))
    other.node.insert(
        2, h.make_node("Reshape", ["/else/six", "/else/shape"], ["/else/bad"], name="/else/Reshape")
    )
    other.node.insert(3, h.make_node("ReduceSum", ["/else/bad"], ["/else/sum"], name="/else/Sum", keepdims=0))
    other.node[-1].input.append("/else/sum")  # Neg(e_r) becomes Sum(e_r, the constant): a run-time reader
    other.node[-1].op_type = "Sum"
    with pytest.warns(FoldSkipped, match=r"folding skipped in /if/If/else_branch: could not evaluate"):
        fixed = fold_constants(model)
    assert _body(fixed, len(fixed.graph.node) - 1, "else_branch") == other  # left as it was
    assert [n.op_type for n in _body(fixed, len(fixed.graph.node) - 1, "then_branch").node] == ["Resize"]
    with pytest.raises(FixError, match="folding inside /if/If/else_branch: could not evaluate"):
        fold_constants(model, body_errors="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fold_constants(model, bodies=False)  # the main graph only: nothing to skip


# -- rules, tracer, verification, fix --------------------------------------------------------------------------


def test_rules_are_proposed_on_body_nodes_with_their_owner():
    rules = load_rules()
    found = [
        p
        for p in propose(resize_in_if(), rules, ["tensorrt-static@8.2"])
        if p.rule.id == "fold-resize-scales"
    ]
    assert [(p.node, p.owners) for p in found] == [("/if/If/then_branch//then/Resize", ("/if/If",))]
    assert found[0].step.params == {"tensors": ["/then/scales"]}
    found = [p for p in propose(resize_in_function(), rules, ["tensorrt-static@10.0"]) if p.owners]
    assert [(p.rule.id, p.node, p.owners) for p in found] == [
        ("fold-resize-scales", "local::Upsample2//up/Resize", ("/up/Upsample2",))
    ]


def test_tracer_explains_body_nodes_and_why_nothing_repaired_a_loop_body():
    model = resize_in_loop()
    rules = {r.id: r for r in load_rules()}
    lines = explain(model, rules["fold-resize-scales"], "/loop/Loop/body//body/Resize_carried")
    assert "✗ input 2 '/body/carried_scales' is not foldable (constants and static shapes)" in lines
    assert "✓ input 2 '/body/scales' is foldable (constants and static shapes)" in explain(
        model, rules["fold-resize-scales"], "/loop/Loop/body//body/Resize_const"
    )
    fixed = fold_constants(model)
    report = make("8.2").check(fixed)
    said = [line for _, line in unrepaired(fixed, [report], list(rules.values()))]
    assert any(
        "fold-resize-scales does not match Resize '/loop/Loop/body//body/Resize_carried': input 2 "
        "'/body/carried_scales' is not foldable" in line
        for line in said
    ), said
    assert not any("Resize_const" in line for line in said)  # the body node the verdict names, not the others


def test_verify_feeds_a_bool_condition_both_ways():
    model = resize_in_if()
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    _body(wrong, 1, "else_branch").node[1].op_type = "Identity"  # only the else branch differs
    for seed in range(4):  # whatever the seed draws for c, the else branch runs too
        report = verify(model, wrong, seed=seed)
        assert report.status == "failed" and "c=false" in report.message, report.summary()
    report = verify(model, fold_constants(model))
    assert report.ok and report.worst() == (0.0, 0.0)
    assert "bool inputs fed both ways (c=true; c=false) as well as seeded" in report.summary()


@pytest.mark.parametrize(
    "build, rules_applied",
    [
        (resize_in_if, ["fold-resize-scales"]),
        (resize_in_function, ["inline-local-functions", "fold-resize-scales"]),
    ],
)
def test_fix_repairs_the_chain_for_tensorrt_8_2_verified_and_replayed(build, rules_applied, tmp_path, capsys):
    src, out, recipe = tmp_path / "m.onnx", tmp_path / "fixed.onnx", tmp_path / "m.recipe.json"
    onnx.save(build(), str(src))
    code = main(["fix", str(src), "-t", "tensorrt-static@8.2", "-o", str(out), "--recipe", str(recipe)])
    text = capsys.readouterr().out
    before, after = text.split("\nsteps:\n")[0], text.split("\nafter (")[1]
    assert code == 0, text
    assert "[tensorrt-static@8.2]: rejects" in before
    words = SCALES_WORDS if build is resize_in_if else 'creator && "Plugin not found'
    assert words in before
    assert "[tensorrt-static@8.2]: accepts (checked to parse)" in after
    for rule in rules_applied:
        assert f"applied {rule} on" in text
    assert "not verified" not in text and "VERIFICATION FAILED" not in text
    assert "original vs fixed: verified (exact" in text
    if build is resize_in_if:
        assert "bool inputs fed both ways (c=true; c=false)" in text.split("original vs fixed:")[1]
    fixed = onnx.load(str(out))
    onnx.checker.check_model(fixed, full_check=True)
    ws = Workspace(load_model(str(src)))
    replayed = ws.load_recipe(str(recipe))
    assert fingerprint(replayed) == fingerprint(fixed)
    if build is resize_in_if:
        _same_both_ways(build(), fixed)
    else:
        np.testing.assert_array_equal(_run(build(), x=X), _run(fixed, x=X))


def test_proposals_for_one_node_inside_a_body_or_outside_are_those_a_run_over_every_node_gives_it():
    from surgery.rulebook import load_rules, propose
    from surgery.rulebook.loader import BUILTIN_DIR

    rules = load_rules([BUILTIN_DIR])
    model = resize_in_if()
    every = propose(model, rules, ["tensorrt-static@8.2"])
    body = [p.node for p in every if p.node not in {n.name for n in model.graph.node}]
    assert body, "no proposal inside the If branch"
    for key in {*body, *(n.name for n in model.graph.node)}:
        mine = propose(model, rules, ["tensorrt-static@8.2"], only={key})
        assert [str(p) for p in mine] == [str(p) for p in every if p.node == key], key


def nested_ifs(depth: int) -> onnx.ModelProto:
    """`depth` Ifs, each in the then branch of the one before, all on a run-time condition; every body folds a
    chain of its own (Mul of two Constants) into what it adds to the input."""

    def body(level: int) -> onnx.GraphProto:
        p = f"b{level}"
        nodes = [
            _const(f"{p}/c", np.full(4, level + 1, np.float32)),
            h.make_node("Mul", [f"{p}/c", f"{p}/c"], [f"{p}/sq"], name=f"{p}/Mul"),
            h.make_node("Add", ["x", f"{p}/sq"], [f"{p}/y"], name=f"{p}/Add"),
        ]
        out = f"{p}/y"
        if level < depth:
            inner = body(level + 1)
            nodes.append(
                h.make_node("If", ["cond"], [f"{p}/z"], name=f"{p}/If", then_branch=inner, else_branch=inner)
            )
            nodes.append(h.make_node("Add", [f"{p}/y", f"{p}/z"], [f"{p}/out"], name=f"{p}/Add2"))
            out = f"{p}/out"
        return h.make_graph(nodes, p, [], [h.make_tensor_value_info(out, T.FLOAT, [4])])

    top = body(1)
    graph = h.make_graph(
        [h.make_node("If", ["cond"], ["y"], name="If", then_branch=top, else_branch=top)],
        "nested",
        [h.make_tensor_value_info("x", T.FLOAT, [4]), h.make_tensor_value_info("cond", T.BOOL, [])],
        [h.make_tensor_value_info("y", T.FLOAT, [4])],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_a_fold_walks_each_nested_body_a_bounded_number_of_times(monkeypatch):
    """A body's outer reads walk every body under it, and each enclosing scope's facts, each round's reads
    and each sweep for dead nodes asked for them again: at 4 levels each copy of the deepest body was walked
    149 times in one fold (silero VAD's ~30 nested Ifs took 3.4x onnxsim's time). Read-only stretches share one
    walk per body object (graph.reads_memo), a copy takes its original's reads, the model's own bodies' reads
    are kept while the bodies fold one by one (dropped where one is edited), and a sweep reuses its round's."""
    import surgery.graph as graph

    walks: dict[str, int] = {}
    walk = graph._outer_reads

    def counted(g):
        walks[g.name] = walks.get(g.name, 0) + 1
        return walk(g)

    monkeypatch.setattr(graph, "_outer_reads", counted)
    model = nested_ifs(4)
    folded = fold_constants(model)
    assert not [n for g in _all_graphs(folded.graph) for n in g.node if n.op_type == "Mul"]
    feeds = {"x": np.arange(4, dtype=np.float32)}
    for cond in (True, False):
        want = _run(model, **feeds, cond=np.array(cond))
        assert all(np.array_equal(a, b) for a, b in zip(want, _run(folded, **feeds, cond=np.array(cond))))
    assert walks["b4"] <= 16 * 20, walks  # 16 copies of b4 (then and else at each level); main: 2384


def test_reads_memo_walks_a_body_once_and_only_while_open(monkeypatch):
    import surgery.graph as graph

    node = nested_ifs(2).graph.node[0]
    walks = []
    walk = graph._outer_reads
    monkeypatch.setattr(graph, "_outer_reads", lambda g: walks.append(g.name) or walk(g))
    with graph.reads_memo():
        first = graph.all_inputs(node)
        assert graph.all_inputs(node) == first
    assert walks.count("b1") == 2  # then and else branch: two objects
    graph.all_inputs(node)
    assert walks.count("b1") == 4  # closed: walked again (an edit since would be seen)


def _all_graphs(g):
    yield g
    for n in g.node:
        for a in n.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                yield from _all_graphs(sub)


def test_sibling_branches_share_one_shape_inference_and_both_fold(monkeypatch):
    """A branch's Shape needs the whole model's shape inference (the body declares no types); folding the then
    branch edits only it, so the else branch folds with the same inference: one run, not one per branch (silero
    VAD ran it 4 times over its whole model). Both Shapes still fold, and the outputs stay the same."""
    import surgery.fixes.fold_constants as fc

    def branch(name, op):
        return h.make_graph(
            [h.make_node(op, ["x"], [f"{name}_r"]), h.make_node("Shape", [f"{name}_r"], [f"{name}_s"])],
            name,
            [],
            [h.make_tensor_value_info(f"{name}_s", T.INT64, None)],
        )

    node = h.make_node(
        "If", ["cond"], ["y"], name="if", then_branch=branch("t", "Relu"), else_branch=branch("e", "Sigmoid")
    )
    graph = h.make_graph(
        [node],
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [2, 3]), h.make_tensor_value_info("cond", T.BOOL, [])],
        [h.make_tensor_value_info("y", T.INT64, None)],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    runs = []
    typed = fc._typed
    monkeypatch.setattr(fc, "_typed", lambda m: runs.append(1) or typed(m))
    folded = fold_constants(model)
    assert not [n for g in _all_graphs(folded.graph) for n in g.node if n.op_type == "Shape"]
    assert len(runs) == 1
    x = np.ones((2, 3), dtype=np.float32)
    for cond in (True, False):
        assert np.array_equal(
            _run(model, x=x, cond=np.array(cond))[0], _run(folded, x=x, cond=np.array(cond))[0]
        )
