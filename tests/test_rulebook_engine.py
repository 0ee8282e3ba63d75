"""The rule engine: proposals in node order with the concrete step; apply verifies and re-checks; an exact fix
that changes results is undone; the fixpoint loop stops, and stops loops; the tracer explains near-misses."""

import onnx.parser
import pytest

from surgery.fixes import FixError
from surgery.rulebook import apply, explain, load_rule_text, load_rules, propose, run_rules
from surgery.rulebook.loader import BUILTIN_DIR
from surgery.samples import build
from surgery.workspace import Step, Workspace

RULES = {r.id: r for r in load_rules([BUILTIN_DIR])}

# x -> Resize(antialias=1) "down1" -> Resize(antialias=1) "down2" -> y
TWO_DOWNSCALES = """\
<ir_version: 9, opset_import: ["" : 18]>
g (float[1,1,8,8] x) => (float[1,1,2,2] y) <float[4] s = {1.0, 1.0, 0.5, 0.5}> {
  [down1] h = Resize <antialias = 1, mode = "linear"> (x, , s)
  [down2] y = Resize <antialias = 1, mode = "linear"> (h, , s)
}
"""


def _rule(id, attr_from, attr_to, safety="changes-semantics"):
    return load_rule_text(
        f"""\
id: {id}
title: t
what: w
why: y
match: {{op: Resize, attrs: {{antialias: {{eq: {attr_from}}}}}}}
fix: {{primitive: set_attribute, params: {{node: $node, name: antialias, value: {attr_to}}}}}
safety: {safety}
""",
        f"{id}.yaml",
    )


def test_proposals_carry_the_concrete_step_its_words_and_safety_in_node_order():
    model = onnx.parser.parse_model(TWO_DOWNSCALES)
    found = propose(model, [RULES["resize-antialias-off"]], ["tensorrt-static@10.15"])
    assert [p.node for p in found] == ["down1", "down2"]
    p = found[0]
    assert p.step == Step(
        "set_attribute", {"node": "down1", "name": "antialias", "value": 0}, rule=p.rule.id, note=p.rule.title
    )
    assert p.safety == "changes-semantics" and "antialias" in p.description
    assert (
        propose(model, [RULES["resize-antialias-off"]], ["tensorrt-static@8.6"]) == []
    )  # not for this version
    assert propose(model, [RULES["resize-antialias-off"]], ["onnxruntime"]) == []


def test_apply_verifies_and_checks_the_targets_before_and_after():
    ws = Workspace.open(build("resize_scales_chain").SerializeToString())
    (p,) = propose(ws.current, [RULES["fold-resize-scales"]])
    done = apply(ws, p, targets=["tensorrt-static@8.2"])
    assert done.verification.status == "ok" and done.verification.worst() == (0.0, 0.0)
    assert [len(r.rejected) for r in done.before] == [1] and [len(r.rejected) for r in done.after] == [0]
    assert ws.recipe[-1].rule == "fold-resize-scales"
    ws.undo()
    assert apply(ws, p, verify=False).verification is None


def test_an_exact_rule_that_changes_results_is_undone_with_the_numbers():
    ws = Workspace.open(onnx.parser.parse_model(TWO_DOWNSCALES).SerializeToString())
    liar = _rule("claims-exact", 1, 0, safety="exact")
    (p, _) = propose(ws.current, [liar])
    with pytest.raises(
        FixError,
        match=r"claims-exact: an exact fix changed the results, undone: VERIFICATION FAILED .*max abs",
    ):
        apply(ws, p)
    assert ws.recipe == [] and not ws.can_redo


def test_run_rules_reaches_a_fixpoint_and_stops():
    ws = Workspace.open(onnx.parser.parse_model(TWO_DOWNSCALES).SerializeToString())
    applied, refused = run_rules(ws, [RULES["resize-antialias-off"]], ["tensorrt-static@10.15"])
    assert [a.proposal.nodes for a in applied] == [("down1", "down2")] and refused == []  # one batched step
    assert run_rules(ws, [RULES["resize-antialias-off"]], ["tensorrt-static@10.15"]) == ([], [])


def test_run_rules_stops_two_rules_that_undo_each_other():
    ws = Workspace.open(onnx.parser.parse_model(TWO_DOWNSCALES).SerializeToString())
    applied, refused = run_rules(ws, [_rule("turn-off", 1, 0), _rule("turn-on", 0, 1)])
    # four possible models (each node on or off): every one is visited at most once, then it stops
    assert 1 <= len(applied) <= 3
    assert any("would bring back an earlier model (loop)" in line for line in refused)
    applied, refused = run_rules(
        Workspace.open(onnx.parser.parse_model(TWO_DOWNSCALES).SerializeToString()),
        [_rule("turn-off", 1, 0)],
        max_rounds=1,
    )
    assert len(applied) == 1 and "stopped after 1 steps" in refused[-1]


def test_a_rule_that_needs_a_value_says_which_and_how_to_give_it():
    model = build("dynamic_input_unshaped")
    rule = RULES["freeze-unshaped-input"]
    (p,) = propose(model, [rule])
    assert p.step is None and p.needs == "shape"
    ws = Workspace.open(model.SerializeToString())
    applied, refused = run_rules(ws, [rule])
    assert applied == [] and "needs a value for 'shape'" in refused[0] and "--input-shape" in refused[0]
    applied, _ = run_rules(ws, [rule], values={"shape": [1, 3, 32, 32]})
    assert [a.proposal.node for a in applied] == ["/conv/Conv"]


def test_tracer_explains_a_near_miss_condition_by_condition():
    rule = RULES["fold-resize-scales"]
    lines = explain(build("resize_scales_chain"), rule, "/up/Resize")
    assert lines and all(line.startswith("✓") for line in lines)
    ws = Workspace.open(build("resize_scales_chain").SerializeToString())
    ws.apply(Step("fold_constants", {"tensors": ["/up/Concat_1_output_0"]}))
    lines = explain(ws.current, rule, "/up/Resize")
    assert [line for line in lines if line.startswith("✗")] == [
        "✗ input 2 '/up/Concat_1_output_0' is a weight (initializer or Constant output)"
    ]
    assert explain(ws.current, rule, "/relu/Relu")[0] == "✗ op is Relu, not Resize"
    assert explain(ws.current, rule, "nope")[0].startswith("✗ no node 'nope'")
    slice_rule = RULES["int64-slice-bounds"]
    assert explain(ws.current, slice_rule, "/up/Resize", targets=["tensorrt-static@10.15"])[0] == (
        "✗ the rule is for tensorrt-static <9; asked: tensorrt-static@10.15"
    )


def test_produced_by_and_rank_conditions():
    rule = load_rule_text(
        """\
id: chain
title: t
what: w
why: y
match:
  op: Resize
  inputs:
    0: {rank: 4}
    2: {produced_by: [Concat, [Constant, Cast]]}
fix: {primitive: fold_constants, params: {tensors: ["$input[2]"]}}
safety: exact
""",
        "chain.yaml",
    )
    model = build("resize_scales_chain")
    assert [p.node for p in propose(model, [rule])] == ["/up/Resize"]
    lines = explain(model, rule, "/up/Resize")
    assert any("has rank 4" in line for line in lines) and any("produced by Concat" in line for line in lines)
    folded = Workspace.open(model.SerializeToString())
    folded.apply(propose(model, [rule])[0].step)
    assert any(
        line.startswith("✗") and "produced by no node" in line
        for line in explain(folded.current, rule, "/up/Resize")
    )


@pytest.mark.parametrize(
    "condition", sorted(__import__("surgery.rulebook.schema").rulebook.schema.INPUT_CONDITIONS)
)
def test_every_documented_input_condition_is_evaluated_and_explained(condition):
    values = {"dtype": "FLOAT", "rank": 4, "produced_by": ["Concat"], "readers": ["Resize"], "position": [2]}
    values["producer_not"] = ["Concat"]
    rule = load_rule_text(
        f"""\
id: c
title: t
what: w
why: y
match: {{op: Resize, inputs: {{2: {{{condition}: {__import__("json").dumps(values.get(condition, True))}}}}}}}
fix: {{primitive: fold_constants}}
safety: exact
""",
        "c.yaml",
    )
    lines = explain(build("resize_scales_chain"), rule, "/up/Resize")
    assert len(lines) == 2 and "input 2" in lines[1], lines  # the op, then this condition with its reason


def test_any_input_names_the_input_that_matched_and_asks_per_input():
    from onnx import TensorProto, helper

    # W (initializer) @ x (graph input without a shape): the unshaped input is input 1, not input 0
    w = helper.make_tensor("W", TensorProto.FLOAT, [2, 3], [1.0] * 6)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["W", "x"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    model = helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])
    rule = RULES["freeze-unshaped-input"]
    (p,) = propose(model, [rule], values={"shape": {"x": [3, 4]}})
    assert p.step.params == {"shapes": {"x": [3, 4]}}
    (p,) = propose(model, [rule], values={"shape": {"image": [3, 4]}})
    assert p.step is None and p.needs == "shape of x"


# x -> Abs -> LeakyRelu "a" (inputs >= 0: alpha does not matter)
#   -> LeakyRelu "b" (inputs of both signs: alpha matters)
#   -> Abs -> LeakyRelu "c" (inputs >= 0)
THREE_LEAKY = """\
<ir_version: 8, opset_import: ["" : 13]>
g (float[64] x) => (float[64] ya, float[64] yb, float[64] yc) {
  p = Abs (x)
  [a] ya = LeakyRelu <alpha = 0.01> (p)
  [b] yb = LeakyRelu <alpha = 0.01> (x)
  q = Abs (x)
  [c] yc = LeakyRelu <alpha = 0.01> (q)
}
"""
ALPHA = load_rule_text(
    """\
id: leaky-alpha
title: t
what: w
why: y
match: {op: LeakyRelu, attrs: {alpha: {ne: 0.5}}}
fix: {primitive: set_attribute, params: {node: $node, name: alpha, value: 0.5}}
safety: exact
""",
    "leaky-alpha.yaml",
)


def test_a_rule_on_many_nodes_is_one_step_and_a_failing_batch_is_halved_to_the_node_that_breaks_it():
    ws = Workspace.open(onnx.parser.parse_model(THREE_LEAKY).SerializeToString())
    applied, refused = run_rules(ws, [ALPHA], None)
    changed = {k for a in applied for k in (a.proposal.nodes or (a.proposal.node,))}
    assert changed == {"a", "c"}  # 'b' changes the numbers: an exact rule may not touch it
    assert any(
        line.startswith("leaky-alpha on 'b': leaky-alpha: an exact fix changed the results")
        for line in refused
    )
    assert len(ws.recipe) < 3 or all(a.verification.ok for a in applied)
    replay = Workspace.open(onnx.parser.parse_model(THREE_LEAKY).SerializeToString())
    for step in ws.recipe:
        replay.apply(step)
    assert replay.fingerprint() == ws.fingerprint()  # the recipe replays bit for bit


def test_a_batch_of_folds_is_one_fold_call_and_replays():
    #   three Convs whose weights come from ConstantOfShape: one step folds all three weight tensors
    model = onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 13]>
        g (float[1,2,5,5] x) => (float[1,2,5,5] y) <int64[4] s = {2, 2, 1, 1}> {
          w1 = ConstantOfShape <value = float[1] {0.5}> (s)
          w2 = ConstantOfShape <value = float[1] {0.25}> (s)
          w3 = ConstantOfShape <value = float[1] {2.0}> (s)
          [c1] h1 = Conv (x, w1)
          [c2] h2 = Conv (h1, w2)
          [c3] y = Conv (h2, w3)
        }"""
    )
    ws = Workspace.open(model.SerializeToString())
    applied, _ = run_rules(ws, [RULES["fold-computed-weights"]], ["tensorrt-static@8.2"])
    assert len(applied) == 1 and applied[0].proposal.nodes == ("c1", "c2", "c3")
    assert ws.recipe[0].params["tensors"] == ["w1", "w2", "w3"] and applied[0].verification.ok
    assert [n.op_type for n in ws.current.graph.node] == ["Conv", "Conv", "Conv"]


def test_any_input_position_leaves_the_data_input_out():
    """pin-config-input asks for a Slice's bounds, never for the token ids it slices (input 0)."""
    from onnx import parser

    from surgery.rulebook.loader import load_rules

    (rule,) = [r for r in load_rules() if r.id == "pin-config-input"]
    ids_and_bounds = parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 13]>
        g (int64[8] ids, int64[1] start) => (int64[N] y) <int64[1] e = {4}> {
          [s] y = Slice (ids, start, e)
        }"""
    )
    (p,) = propose(ids_and_bounds, [rule], values={"value": {"start": [1], "ids": [0] * 8}})
    assert p.step.params == {"input": "start", "value": [1]}


def test_a_rule_that_changes_nothing_is_tried_once(monkeypatch):
    """A primitive that hands the model back unchanged: one attempt per node, refused as 'changed nothing'."""
    import surgery.fixes as fixes

    fixes._load_all()
    noop = fixes.FixPrimitive(
        "noop", lambda model, node: model, fixes.Safety.EXACT, "nothing", {"node": "n"}, None
    )
    monkeypatch.setitem(fixes._REGISTRY, "noop", noop)
    rule = load_rule_text(
        "id: same-again\ntitle: t\nwhat: w\nwhy: y\nmatch: {op: Resize}\n"
        "fix: {primitive: noop, params: {node: $node}}\nsafety: exact\n",
        "same-again.yaml",
    )
    ws = Workspace.open(onnx.parser.parse_model(TWO_DOWNSCALES).SerializeToString())
    applied, refused = run_rules(ws, [rule], max_rounds=50)
    assert applied == [] and ws.recipe == []
    assert refused and all(line.endswith("changed nothing") for line in refused), refused
    assert not any("stopped after" in line for line in refused)


def test_proposals_for_one_node_are_those_a_run_over_every_node_gives_it():
    # the app asks for the selected node only (propose(only=...)): the same proposals, steps and words
    from surgery.samples import SAMPLES

    rules = list(RULES.values())
    for name in SAMPLES:
        model = build(name)
        every = propose(model, rules, values={"shape": [1, 3, 8, 8]})
        for key in {p.node for p in every} | {model.graph.node[0].name or "?"}:
            mine = propose(model, rules, values={"shape": [1, 3, 8, 8]}, only={key})
            assert [str(p) for p in mine] == [str(p) for p in every if p.node == key], (name, key)


def test_matching_reads_outcomes_without_writing_reasons(monkeypatch):
    # matching a 50k-node model wrote a reason for every condition of every rule; matches() reads outcomes
    # alone, and must agree with the explained outcomes on every rule's example and near miss
    from surgery.graph import TensorInfo
    from surgery.rulebook.fixture import fixture
    from surgery.rulebook.matcher import Context, explain_node, matches

    models = []
    for rule in load_rules():
        if rule.example.get("graph"):
            fx = fixture(rule)
            models += [fx.model] + ([fx.near_miss] if fx.near_miss is not None else [])
    rules = load_rules()
    pairs = 0
    for model in models:
        ctx = Context(model)
        for node in model.graph.node:
            for rule in rules:
                said = explain_node(ctx, rule, node)
                assert all(why for _, why in said)
                assert matches(ctx, rule, node) == all(ok for ok, _ in said)
                pairs += 1
    assert pairs > 1000

    def no_text(self):
        raise AssertionError("a reason was written while matching")

    monkeypatch.setattr(TensorInfo, "shape_str", no_text)
    dyn = load_rule_text(
        "id: t\ntitle: t\nwhat: t.\nwhy: t.\ntargets: {tensorrt-static: '*'}\nanswers: [x]\n"
        "match:\n  op: Relu\n  inputs:\n    0: {dynamic: false, rank: 4}\n"
        "fix:\n  primitive: fold_constants\n  params: {tensors: ['$input[0]']}\nsafety: exact\n"
    )
    model = onnx.parser.parse_model(
        '<ir_version: 8, opset_import: ["" : 13]>\ng (float[n,3] x) => (float[n,3] y) { y = Relu (x) }'
    )
    assert not matches(Context(model), dyn, model.graph.node[0])


def test_the_next_rounds_matching_runs_while_the_step_is_verified_and_is_used(monkeypatch):
    import threading
    import time

    import surgery.rulebook.engine as engine
    from surgery import isolate

    calls = []
    real, real_verify = engine.propose, engine._verify
    looked_ahead = threading.Event()

    def propose_and_note(model, *args, **kwargs):
        beside = [t for t in threading.enumerate() if t.name == "onnx-surgery-beside" and t.is_alive()]
        calls.append(bool(beside))
        if len(calls) > 1:
            looked_ahead.set()
        return real(model, *args, **kwargs)

    def verify_until_the_look_ahead(*args, **kwargs):
        # a small model's verification can end before the look-ahead starts (a busy machine): it stays until the
        # look-ahead has begun, so that the order is the engine's, not the scheduler's; a look-ahead made only
        # after the verification never comes, and the wait ends after 60 s. It stays as a verification does,
        # waiting on an isolated worker: the engine looks ahead once the verification waits on one (Beside's
        # in_worker), and a verification whose own worker call was over before the engine asked (a loaded machine)
        # would otherwise hold it until the 60 s were up, the look-ahead then made after it (seen in CI)
        report = real_verify(*args, **kwargs)
        deadline = time.monotonic() + 60
        while not looked_ahead.is_set() and time.monotonic() < deadline:
            isolate.call_isolated("time:sleep", 0.2)
        return report

    monkeypatch.setattr(engine, "propose", propose_and_note)
    monkeypatch.setattr(engine, "_verify", verify_until_the_look_ahead)
    ws = Workspace.open(onnx.parser.parse_model(TWO_DOWNSCALES).SerializeToString())
    applied, refused = run_rules(ws, [RULES["resize-antialias-off"]], ["tensorrt-static@10.15"])
    assert len(applied) == 1 and applied[0].verification.status in ("ok", "failed")
    # the first round's matching, then the fixpoint's, made during the step's verification and not made again
    assert calls == [False, True]


def test_a_failure_beside_the_verification_undoes_the_step_and_stops_the_verification(monkeypatch):
    import time

    import surgery.rulebook.engine as engine
    from surgery import isolate

    def slow_verification(*args, **kwargs):
        isolate.call_isolated("time:sleep", 60)  # a verification waiting on its worker

    def boom(model):
        raise RuntimeError("the check beside it failed")

    monkeypatch.setattr(engine, "_verify", slow_verification)
    ws = Workspace.open(build("resize_scales_chain").SerializeToString())
    (p,) = propose(ws.current, [RULES["fold-resize-scales"]])
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="beside it failed"):
        apply(ws, p, meanwhile=boom)
    assert time.monotonic() - started < 20  # the worker was stopped, its 60 s not waited for
    assert ws.recipe == [] and not ws.can_redo and not isolate._busy


def test_rules_that_need_a_graph_input_are_matched_only_on_the_nodes_that_read_one(monkeypatch):
    """Matching skips a rule whose conditions ask for a graph input on nodes that read none; what it proposes is
    the same as matching every rule on every node (where the rule matches, and where it cannot)."""
    import surgery.rulebook.engine as engine
    from surgery.rulebook.matcher import needs_graph_input

    assert {r for r in RULES if needs_graph_input(RULES[r])} == {
        "freeze-unshaped-input",
        "pin-config-input",
        "uint8-input-cast-first",
    }
    rules = list(RULES.values())
    model = build("dynamic_input_unshaped")  # its Conv reads the unshaped input; its other nodes do not
    checked = []
    real = engine.matches

    def counting(ctx, rule, node):
        checked.append((rule.id, node.name))
        return real(ctx, rule, node)

    monkeypatch.setattr(engine, "matches", counting)
    filtered = [(p.rule.id, p.node) for p in propose(model, rules, None)]
    asked = {n for r, n in checked if r == "freeze-unshaped-input"}
    monkeypatch.setattr(engine, "needs_graph_input", lambda rule: False)
    assert [(p.rule.id, p.node) for p in propose(model, rules, None)] == filtered
    assert ("freeze-unshaped-input", "/conv/Conv") in filtered
    assert asked == {n.name for n in model.graph.node if model.graph.input[0].name in n.input}
    assert len(asked) < len(model.graph.node)
