"""fix stays linear in the node count: a rule applied to many nodes makes one copy of the model, infers its
shapes once and scans its names once, however many nodes it rewrites (bench/fix_scale.py times it; this counts
the passes, which a quadratic regression multiplies)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import surgery.fixes._util as util
import surgery.graph as graph
from surgery.fixes import get_fix
from surgery.fixes._util import NameIndex, used_names
from surgery.rulebook.loader import BUILTIN_DIR, load_rules
from surgery.usecases.fix import FixRequest, fix
from surgery.workspace import Workspace


def layer_norm_stack(n: int, *, read_mean: bool = False) -> onnx.ModelProto:
    """x -> (LayerNormalization -> Relu) x n -> y, opset 17, a dynamic batch; with `read_mean`, every
    LayerNormalization's Mean output is added to the output of the next block."""
    nodes, inits, x = [], [], "x"
    inits.append(numpy_helper.from_array(np.linspace(0.5, 1.5, 8, dtype=np.float32), "scale"))
    inits.append(numpy_helper.from_array(np.linspace(-0.1, 0.1, 8, dtype=np.float32), "bias"))
    mean = None
    for k in range(n):
        outs = [f"ln{k}"] + ([f"mean{k}"] if read_mean else [])
        nodes.append(
            helper.make_node("LayerNormalization", [x, "scale", "bias"], outs, name=f"/b{k}/ln", axis=-1)
        )
        nodes.append(helper.make_node("Relu", [f"ln{k}"], [f"r{k}"], name=f"/b{k}/relu"))
        x = f"r{k}"
        if mean is not None:
            nodes.append(helper.make_node("Add", [x, mean], [f"a{k}"], name=f"/b{k}/add"))
            x = f"a{k}"
        mean = f"mean{k}" if read_mean else None
    g = helper.make_graph(
        nodes,
        "stack",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 8])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", 4, 8])],
        inits,
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


_ORIGINALS = (graph._infer, NameIndex.__init__, util.used_names)


def _fix_counting(monkeypatch, model: onnx.ModelProto) -> tuple[dict[str, int], Workspace]:
    calls = {"infer": 0, "names": 0}
    infer, index_init, names = _ORIGINALS

    def counted_infer(m):
        calls["infer"] += 1
        return infer(m)

    def counted_index(self, m):
        calls["names"] += 1
        index_init(self, m)

    def counted_names(m):
        calls["names"] += 1
        return names(m)

    monkeypatch.setattr(graph, "_infer", counted_infer)
    monkeypatch.setattr(NameIndex, "__init__", counted_index)
    monkeypatch.setattr(util, "used_names", counted_names)
    ws = Workspace.open(model.SerializeToString())
    rules = [r for r in load_rules([BUILTIN_DIR]) if r.id == "layernorm-decompose"]
    fix(ws, FixRequest(["tensorrt-static@8.2"], rules))
    return calls, ws


def test_fixing_many_layernorms_infers_shapes_and_scans_names_as_often_as_fixing_few(monkeypatch):
    few, ws_few = _fix_counting(monkeypatch, layer_norm_stack(2))
    many, ws_many = _fix_counting(monkeypatch, layer_norm_stack(16))
    for ws in (ws_few, ws_many):
        assert len(ws.recipe) == 1  # one step for every LayerNormalization
        assert not any(n.op_type == "LayerNormalization" for n in ws.current.graph.node)
    assert few["names"] == many["names"] == 1  # one name index for the whole step
    assert few["infer"] == many["infer"]  # not once per node


@pytest.mark.parametrize("read_mean", [False, True])
def test_a_batch_is_the_single_calls_from_the_last_node_to_the_first(read_mean):
    model = layer_norm_stack(5, read_mean=read_mean)
    keys = [n.name for n in model.graph.node if n.op_type == "LayerNormalization"]
    decompose = get_fix("decompose")
    one_by_one = model
    for key in reversed(keys):
        one_by_one = decompose(one_by_one, node=key)
    batch = decompose(model, node=keys)
    assert batch.SerializeToString() == one_by_one.SerializeToString()
    assert decompose(model, node=list(reversed(keys))).SerializeToString() == batch.SerializeToString()


def test_the_name_index_follows_the_graph_as_nodes_are_replaced():
    model = layer_norm_stack(3, read_mean=True)
    index = NameIndex(model)
    assert {n for n in used_names(model)} == {n for n in index._count}
    old = model.graph.node[0]
    new = [helper.make_node("Identity", ["x"], ["ln0"], name="/b0/ln/Identity")]
    index.replaced(old, new)
    assert "/b0/ln" not in index and "mean0" not in index  # given back: nothing carries them now
    assert "ln0" in index and "/b0/ln/Identity" in index
    assert index.fresh("/b0/ln/Identity") == "/b0/ln/Identity_1"
    assert index.fresh("/b0/ln/Identity", reserve=False) == "/b0/ln/Identity_2"
    assert index.fresh("/b0/ln/Identity", reserve=False) == "/b0/ln/Identity_2"


def test_a_fix_serializes_each_model_version_once_for_its_fingerprint(monkeypatch):
    """The run's states and the checks' cache keys are fingerprints: one serialization per model version (the
    model as given, the model after the step), however often the loop and the checks ask."""
    import surgery.model as model_mod

    made = []
    plain = model_mod.fingerprint

    def counted(m):
        made.append(plain(m))
        return made[-1]

    monkeypatch.setattr(model_mod, "fingerprint", counted)
    ws = Workspace.open(layer_norm_stack(3).SerializeToString())
    rules = [r for r in load_rules([BUILTIN_DIR]) if r.id == "layernorm-decompose"]
    outcome = fix(ws, FixRequest(["tensorrt-static@8.2"], rules))
    assert len(ws.recipe) == 1 and outcome.after[0].outcome.value == "accepts"
    assert len(made) == len(set(made)) == 2  # before and after the one step, each once


def test_feed_sets_find_each_models_input_kinds_once(monkeypatch):
    """Verification draws inputs at every free-dim size; what each input means (a pass over the whole graph) is
    found once per model, not once per size."""
    import surgery.feeds as feeds
    from surgery.verify import _feed_sets

    calls = []
    plain = feeds.input_kinds
    monkeypatch.setattr(feeds, "input_kinds", lambda m: calls.append(m) or plain(m))
    model = layer_norm_stack(2)
    changed = get_fix("decompose")(model, node="/b0/ln")
    sets = _feed_sets(model, changed, 0, {})
    assert [s.arrays["x"].shape[0] for s in sets] == [1, 16, 512, 16000]  # every size drawn
    assert len(calls) == 1 and calls[0] is model


def test_squeeze_axes_probe_converts_only_the_tensors_asked():
    from surgery.fixes.explicit_axes import _probe_shapes
    from surgery.samples import build

    model = build("squeeze_dynamic")
    every = _probe_shapes(model)
    name = sorted(every)[0]
    assert len(every) > 1 and _probe_shapes(model, {name, "no such tensor"}) == {name: every[name]}


def test_facts_of_a_model_without_bodies_keep_the_inferred_types_not_the_inferred_nodes():
    """The inferred model's nodes are a copy of the graph (three times its value infos in memory): a model
    without bodies keeps only the types, the same ones; a model with bodies keeps the inferred graph to look
    into them."""
    model = layer_norm_stack(3)
    facts = graph.GraphFacts._build(model, True)
    inferred, _ = graph._infer(model)
    whole = graph.GraphFacts._declared(model).with_shapes(inferred.graph)
    assert facts.typed is None and whole.typed is not None
    assert dict(facts.tensors.items()) == dict(whole.tensors.items())
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"])], "b", [], [helper.make_tensor_value_info("t", 1, None)]
    )
    model.graph.input.append(cond)
    model.graph.node.append(
        helper.make_node("If", ["c"], ["z"], then_branch=branch, else_branch=branch, name="if")
    )
    assert graph.GraphFacts._build(model, True).typed is not None


def test_run_first_merges_the_patch_as_if_joined():
    """Region verification sends the original and the patch of extra outputs apart (no joined copy of the
    model): merged in the worker, they run as the joined bytes do."""
    from onnx import GraphProto

    from surgery.verify import run_first

    model = layer_norm_stack(2)
    patch = onnx.ModelProto(graph=GraphProto(output=[helper.make_empty_tensor_value_info("ln0")]))
    sets = [{"x": np.ones((2, 4, 8), np.float32)}]
    data, extra = model.SerializeToString(), patch.SerializeToString()
    k, merged = run_first(data, sets, None, extra)
    _, joined = run_first(data + extra, sets)
    assert k == 0 and set(merged) == set(joined) == {"r1", "ln0"}
    assert all(np.array_equal(merged[n], joined[n]) for n in joined)
