"""Partitioning: regions are connected and closed (no path leaves a region and comes back), fallback nodes,
boundaries, crossing tensors and their bytes."""

import onnx
from onnx import TensorProto, helper

from surgery.backends import get_backend
from surgery.graph import node_keys
from surgery.partition import partition
from surgery.samples import build
from surgery.verdict import Report, Status, Verdict


def _model(edges: list[tuple[str, list[str]]], shape=(2, 4)) -> onnx.ModelProto:
    """Nodes named n with inputs ins (node names, or "x"); each node is an Add/Identity of its inputs."""
    nodes = []
    for name, ins in edges:
        op = "Add" if len(ins) == 2 else "Identity"
        nodes.append(helper.make_node(op, ins, [name], name=name))
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info(edges[-1][0], TensorProto.FLOAT, list(shape))],
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])


def _report(model, refused=(), unknown=()) -> Report:
    r = Report("t", "t", "1")
    for i, (k, n) in enumerate(zip(node_keys(model.graph.node), model.graph.node)):
        s = Status.REJECTED if k in refused else Status.UNKNOWN if k in unknown else Status.SUPPORTED
        r.verdicts.append(Verdict(k, i, n.op_type, s))
    return r


def test_a_region_is_never_split_around_a_path_that_leaves_and_returns():
    #   x -> a -> b(refused) -> c = Add(a, b) -> d
    #   a and c are both supported and a feeds c directly, but merging them would make a cycle through b
    m = _model([("a", ["x"]), ("b", ["a"]), ("c", ["a", "b"]), ("d", ["c"])])
    p = partition(m, _report(m, refused={"b"}))
    assert [(r.supported, r.nodes) for r in p.regions] == [(True, ["a"]), (False, ["b"]), (True, ["c", "d"])]
    assert p.engines == 2 and p.fallback == ["b"]
    assert sorted(p.crossing_tensors) == ["a", "b"]
    assert p.crossing_bytes == 2 * 2 * 4 * 4  # two float32 [2, 4] tensors
    assert p.regions[2].inputs == ["a", "b"] and p.regions[2].outputs == ["d"]


def test_independent_supported_branches_stay_connected_regions():
    #   x -> a -> b ;  x -> u(refused) -> v ;  w = Add(b, v)    (file order interleaves the branches)
    m = _model([("a", ["x"]), ("u", ["x"]), ("b", ["a"]), ("v", ["u"]), ("w", ["b", "v"])])
    p = partition(m, _report(m, refused={"u"}))
    regions = [(r.supported, sorted(r.nodes)) for r in p.regions]
    assert (False, ["u"]) in regions and (True, ["v", "w"]) in regions and (True, ["a", "b"]) in regions
    assert p.engines == 2 and sorted(p.crossing_tensors) == ["b", "u"]


def test_all_supported_is_one_region_with_nothing_crossing():
    m = _model([("a", ["x"]), ("b", ["a"]), ("c", ["a", "b"])])
    p = partition(m, _report(m))
    assert p.engines == 1 and p.fallback_nodes == 0 and p.crossings == [] and p.crossing_bytes == 0
    assert p.summary().startswith("1 supported region(s), 0 of 3 node(s) fall back; 0 tensor(s) cross")


def test_unknown_falls_back_and_dynamic_shapes_leave_bytes_unknown():
    m = _model([("a", ["x"]), ("b", ["a"]), ("c", ["b"])], shape=("N", 4))
    p = partition(m, _report(m, unknown={"b"}))
    assert p.unknown_nodes == ["b"] and p.fallback == ["b"] and p.crossing_bytes is None
    assert "1 without a verdict" in p.summary() and "size unknown" in p.summary()


def test_partition_of_a_real_verdict():
    model = build("deform_conv_custom")
    p = partition(model, get_backend("tensorrt-static@10.15").check(model))
    assert p.engines == 2 and p.fallback == ["/dcn/MMCVModulatedDeformConv2d"]
    assert set(p.crossing_tensors) == {"offset", "mask", "dcn_out"}
    assert p.crossing_bytes == 4 * (18 * 8 * 8 + 9 * 8 * 8 + 4 * 8 * 8)  # float32, shapes from inference
    assert p.to_dict()["regions"][1]["inputs"] == ["input", "offset", "mask"]
