"""Probing: one-node models keep constant values and inferred types; signatures tell apart what decides a verdict
and nothing else; a model with many nodes and few signatures costs few backend calls; the disk cache."""

import signal

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.backends.probe import CACHE, VerdictCache, isolate, probe_nodes, signature
from surgery.graph import GraphFacts
from surgery.isolate import call_isolated


def _resize_model(scales_from: str = "initializer") -> onnx.ModelProto:
    #   x[1,3,4,4] ─────────────────────────────┐
    #   scales (initializer | Constant | Concat of two constants) ─> Resize -> y[1,3,8,8]
    nodes, inits = [], []
    if scales_from == "initializer":
        inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"))
    elif scales_from == "constant":
        nodes.append(
            helper.make_node(
                "Constant",
                [],
                ["scales"],
                name="c",
                value=numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32)),
            )
        )
    else:
        inits += [
            numpy_helper.from_array(np.array([1, 1], np.float32), "a"),
            numpy_helper.from_array(np.array([2, 2], np.float32), "b"),
        ]
        nodes.append(helper.make_node("Concat", ["a", "b"], ["scales"], name="cat", axis=0))
    nodes.append(helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", mode="nearest"))
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("scales_from", ["initializer", "constant", "computed"])
def test_isolated_node_keeps_constant_values_and_inferred_types(scales_from):
    m = _resize_model(scales_from)
    facts = GraphFacts.of(m)
    probe = isolate(facts, len(m.graph.node) - 1)
    onnx.checker.check_model(probe, full_check=True)
    assert [n.op_type for n in probe.graph.node] == ["Resize"]
    assert [i.name for i in probe.graph.input] == ["x"]
    (scales,) = probe.graph.initializer
    assert numpy_helper.to_array(scales).tolist() == [1, 1, 2, 2]
    (y,) = probe.graph.output
    assert [d.dim_value for d in y.type.tensor_type.shape.dim] == [1, 3, 8, 8]  # from shape inference


def _topk(k: int, dtype=TensorProto.FLOAT, rank: int = 2) -> onnx.ModelProto:
    shape = [4] * rank
    g = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk")],
        "g",
        [helper.make_tensor_value_info("x", dtype, shape)],
        [
            helper.make_tensor_value_info("v", dtype, None),
            helper.make_tensor_value_info("i", TensorProto.INT64, None),
        ],
        [numpy_helper.from_array(np.array([k], np.int64), "k")],
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])


def test_signature_tells_apart_what_decides_a_verdict():
    sig = lambda m: signature(GraphFacts.of(m), 0)  # noqa: E731
    assert sig(_topk(2)) == sig(_topk(2))
    assert sig(_topk(2)) != sig(_topk(3))  # a small constant input counts by value
    assert sig(_topk(2)) != sig(_topk(2, TensorProto.FLOAT16))  # dtype
    assert sig(_topk(2)) != sig(_topk(2, rank=3))  # rank
    m = _topk(2)
    m.opset_import[0].version = 11
    assert sig(m) != sig(_topk(2))  # opset


def _chains(n: int) -> onnx.ModelProto:
    #   n identical chains: x -> Relu -> com.x::Foo -> f_k
    nodes, outputs = [], []
    for k in range(n):
        nodes += [
            helper.make_node("Relu", ["x"], [f"r{k}"], name=f"relu{k}"),
            helper.make_node("Foo", [f"r{k}"], [f"f{k}"], name=f"foo{k}", domain="com.x"),
        ]
        outputs.append(helper.make_tensor_value_info(f"f{k}", TensorProto.FLOAT, [3]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])], outputs)
    return helper.make_model(
        g, ir_version=8, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.x", 1)]
    )


def test_probing_asks_once_per_signature_and_caches_across_models():
    asked = []

    def ask(model):
        asked.append(model.graph.node[0].op_type)
        return (model.graph.node[0].domain == "", "no Foo here")

    CACHE.clear()
    verdicts, calls = probe_nodes(GraphFacts.of(_chains(300)), ask, ("test-backend", "1"))
    assert calls == 2 and sorted(asked) == ["Foo", "Relu"]
    assert sum(ok for ok, _ in verdicts.values()) == 300 and len(verdicts) == 600
    _, calls = probe_nodes(GraphFacts.of(_chains(7)), ask, ("test-backend", "1"))
    assert calls == 0 and len(asked) == 2  # another model with the same layers
    _, calls = probe_nodes(GraphFacts.of(_chains(7)), ask, ("test-backend", "2"))
    assert calls == 2  # another backend version asks again


def test_probing_in_one_batch():
    CACHE.clear()
    batches = []

    def ask_many(models):
        batches.append(len(models))
        return [(True, "")] * len(models)

    _, calls = probe_nodes(GraphFacts.of(_chains(50)), None, ("batch", "1"), ask_many=ask_many)
    assert batches == [2] and calls == 2


def test_a_probe_that_crashes_the_backend_is_a_refusal_in_the_crash_words():
    def ask(model):
        if model.graph.node[0].op_type == "Foo":
            call_isolated("surgery.isolate:crash_for_test", signal.SIGSEGV)
        return (True, "")

    CACHE.clear()
    verdicts, _ = probe_nodes(GraphFacts.of(_chains(3)), ask, ("crashy", "1"))
    assert verdicts[1] == (False, "backend crashed: signal 11 (SIGSEGV)") and verdicts[0] == (True, "")


def test_disk_cache_survives_a_new_process_and_stays_small(tmp_path):
    first = VerdictCache(tmp_path)
    first.put(("b", "1", ("sig",)), (False, "nope", ("n", "x")))
    second = VerdictCache(tmp_path)  # what a new process sees
    assert second.get(("b", "1", ("sig",))) == (False, "nope", ("n", "x"))
    assert second.get(("b", "2", ("sig",))) is None
    small = VerdictCache(tmp_path / "small", max_entries=10)
    for k in range(25):
        small.put(("b", "1", k), (True, "", ()))
    lines = small.path.read_text().splitlines()
    assert len(lines) <= 10 and VerdictCache(tmp_path / "small").get(("b", "1", 24)) == (True, "", ())


def test_a_refusal_about_a_guessed_input_is_unknown_unless_it_repeats_the_whole_model_error():
    #   x[2,3] -> Shape -> s ; (x, s) -> Reshape -> y     (s is computed from shapes: alone it is a plain input)
    from surgery.backends.probe import judge
    from surgery.verdict import Status

    g = helper.make_graph(
        [
            helper.make_node("Shape", ["x"], ["s"], name="shape"),
            helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    facts = GraphFacts.of(helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)]))
    status, why = judge(facts, 1, (False, "shape must be static"))
    assert status is Status.UNKNOWN and "input 's' is computed from tensor shapes" in why
    status, why = judge(facts, 1, (False, "shape must be static"), whole_error="shape must be static")
    assert status is Status.REJECTED and "as in the whole model" in why
    assert judge(facts, 0, (False, "no Shape here"))[0] is Status.REJECTED
    assert judge(facts, 1, (True, "")) == (Status.SUPPORTED, "")


# -- the cache never changes a verdict ------------------------------------------------------------------------------


def _relu_model(out_dtype=TensorProto.FLOAT, name="relu"):
    #   x(float[2,3]) -> Relu -> y (declared with out_dtype);  x -> com.x::Foo -> z (refused: nodes are probed)
    g = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["y"], name=name),
            helper.make_node("Foo", ["x"], ["z"], name="foo", domain="com.x"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("y", out_dtype, [2, 3]),
            helper.make_tensor_value_info("z", 1, [2, 3]),
        ],
    )
    ops = [helper.make_opsetid("", 13), helper.make_opsetid("com.x", 1)]
    return helper.make_model(g, ir_version=8, opset_imports=ops)


def _dropout_model(outputs):
    #   x -> Dropout -> outputs (["y", "m"], ["y", ""], ...): which slots are empty is part of the node
    g = helper.make_graph(
        [
            helper.make_node("Dropout", ["x"], outputs, name="drop"),
            helper.make_node("Foo", ["x"], ["z"], name="foo", domain="com.x"),  # refused: the model is probed
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info(o, TensorProto.FLOAT if o != "m" else TensorProto.BOOL, [2, 3])
            for o in outputs
            if o
        ]
        + [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
    )
    ops = [helper.make_opsetid("", 13), helper.make_opsetid("com.x", 1)]
    return helper.make_model(g, ir_version=8, opset_imports=ops)


def _external_model(tmp_path, offset):
    #   x + w (w: 64 floats in w.bin at `offset`), next to a refused custom op so that nodes are probed
    (tmp_path / "w.bin").write_bytes(np.arange(64, dtype=np.float32).tobytes())
    w = numpy_helper.from_array(np.zeros(64, np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "w.bin"), ("offset", str(offset)), ("length", "256")):
        w.external_data.add(key=k, value=v)
    g = helper.make_graph(
        [
            helper.make_node("Add", ["x", "w"], ["y"], name="add"),
            helper.make_node("Foo", ["y"], ["z"], name="foo", domain="com.x"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [64])],
        [w],
    )
    ops = [helper.make_opsetid("", 13), helper.make_opsetid("com.x", 1)]
    return helper.make_model(g, ir_version=8, opset_imports=ops)


def test_signature_holds_declared_outputs_empty_slots_and_external_data_fields(tmp_path):
    def sig(model, i=0):
        return signature(GraphFacts.of(model), i)

    assert sig(_relu_model(TensorProto.FLOAT)) != sig(_relu_model(TensorProto.INT64))
    assert sig(_relu_model(name="a")) == sig(_relu_model(name="b"))  # names are not part of it
    assert sig(_dropout_model(["y", "m"])) != sig(_dropout_model(["y", ""]))
    assert sig(_external_model(tmp_path, 0)) != sig(_external_model(tmp_path, 4))


def test_checking_other_models_first_never_changes_a_verdict(tmp_path):
    """A model checked cold, then after a run of models that share its layers' op types but differ in what the
    old cache key left out, gives every verdict the same, with and without the cache."""
    from surgery.diagnose import check_one, clear_cache

    first = _relu_model(TensorProto.INT64)  # onnxruntime refuses the Relu's declared output, naming the node
    others = [
        _relu_model(TensorProto.FLOAT),
        _relu_model(TensorProto.INT64, name="other_relu"),  # the same refusal, in words naming its own node
        _dropout_model(["y", "m"]),
        _dropout_model(["y", ""]),
        _external_model(tmp_path, 4),  # 4 + 256 bytes run past the end of w.bin
        _external_model(tmp_path, 0),
    ]

    def verdicts(model, base=None):
        clear_cache()  # the report cache: every check below asks the probe cache
        return [
            (v.node, v.status, v.code, v.words, v.explanation)
            for v in check_one(model, "onnxruntime", base).verdicts
        ]

    CACHE.clear()
    cold = {k: verdicts(m, str(tmp_path)) for k, m in enumerate([first, *others])}
    for k, m in enumerate([first, *others]):  # every model again, in another order, the cache warm
        assert verdicts(m, str(tmp_path)) == cold[k], k
    for k, m in reversed(list(enumerate([first, *others]))):
        CACHE.clear()
        assert verdicts(m, str(tmp_path)) == cold[k], k
    status = {k: [v[1].value for v in vs] for k, vs in cold.items()}
    assert status[0][0] == "rejected" and status[1][0] == "supported"  # the declared output type decides
    assert "(relu)" in cold[0][0][3] and "(other_relu)" in cold[2][0][3]  # each in words naming its own node
    assert status[5][0] == "rejected" and status[6][0] == "supported"  # the external-data offset decides
