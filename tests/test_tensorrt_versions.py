"""TensorRT 10.16 and 11.0-11.5 in the predictor (one fact that changed at each version), and the standard plugin
library as data (surgery/backends/tensorrt/data/plugins.json): the fallback importer finds a node named after a
plugin the version ships, refuses it after the plugin's removal, and the live backend reads the same data."""

import json

import onnx.parser
import pytest
from onnx import TensorProto, helper

from surgery.backends.tensorrt.predictor import make
from surgery.backends.tensorrt.records import (
    PLUGINS_PATH,
    SUPPORTED_VERSIONS,
    plugin_data,
    resolve_version,
    support_data,
)
from surgery.verdict import Status

F = TensorProto.FLOAT


def _one(op, domain="", **attrs):
    #   x ─▶ op ─▶ y
    n = helper.make_node(op, ["x"], ["y"], name="n", domain=domain, **attrs)
    g = helper.make_graph(
        [n],
        "g",
        [helper.make_tensor_value_info("x", F, [1, 4])],
        [helper.make_tensor_value_info("y", F, [1, 4])],
    )
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(g, ir_version=8, opset_imports=opsets)


def _status(version, model):
    return make(version).check(model).by_node()["n"].status


def test_the_new_versions_are_targets_with_a_cited_source():
    for v in ("10.16", "11.2", "11.3", "11.4", "11.5"):
        assert v in SUPPORTED_VERSIONS
        entry = support_data()["versions"][v]
        assert "CHANGELOG.md" in entry["source"] and entry["note"], v
        assert make(v).availability().ok
    for v in ("11.2", "11.3", "11.4", "11.5"):  # released after the newest tag read: their release page
        assert f"releases/tag/v{v}" in support_data()["versions"][v]["source"]
    assert resolve_version("10") == "10.16" and resolve_version("11") == "11.5"


def test_10_16_adds_distcollective():
    m = _one("DistCollective")
    assert _status("10.15", m) is Status.REJECTED
    assert _status("10.16", m) is Status.SUPPORTED and _status("11.0", m) is Status.SUPPORTED


def test_11_0_adds_swish_and_removes_the_leaky_relu_plugin():
    assert (
        _status("10.16", _one("Swish")) is Status.REJECTED
        and _status("11.0", _one("Swish")) is Status.SUPPORTED
    )
    lrelu = _one("LReLU_TRT", negSlope=0.1)
    assert _status("10.15", lrelu) is Status.SUPPORTED and _status("10.16", lrelu) is Status.SUPPORTED
    v = make("11.0").check(lrelu).by_node()["n"]
    assert v.status is Status.REJECTED and "Plugin not found" in v.words
    assert "removed from TensorRT's plugin library after 10.16" in v.explanation


DFT = """<ir_version: 8, opset_import: ["" : 20]>
g (float[1,16,1] x) => (float[1,16,2] y) {
  [n] y = DFT (x)
}"""
GRID5 = """<ir_version: 8, opset_import: ["" : 20]>
g (float[1,2,4,4,4] x, float[1,3,3,3,3] grid) => (float[1,2,3,3,3] y) {
  [n] y = GridSample <mode = "linear"> (x, grid)
}"""
GRID4 = """<ir_version: 8, opset_import: ["" : 20]>
g (float[1,2,4,4] x, float[1,3,3,2] grid) => (float[1,2,3,3] y) {
  [n] y = GridSample <mode = "linear"> (x, grid)
}"""


@pytest.mark.parametrize("text", [DFT, GRID5], ids=["DFT", "5-D GridSample"])
def test_11_2_adds_dft_and_5d_gridsample(text):
    m = onnx.parser.parse_model(text)
    assert [_status(v, m) for v in ("11.1", "11.2")] == [Status.REJECTED, Status.SUPPORTED]


def test_a_4d_gridsample_stays_accepted_and_the_5d_one_says_why():
    assert _status("10.15", onnx.parser.parse_model(GRID4)) is Status.SUPPORTED
    v = make("10.15").check(onnx.parser.parse_model(GRID5)).by_node()["n"]
    assert "rank 5" in v.explanation and "4D" in v.explanation


@pytest.mark.parametrize("version", ["11.3", "11.4"])
def test_11_3_and_11_4_change_no_operator_so_they_predict_as_11_2(version):
    # their release notes name parser API changes only (refitting); Squeeze without axes waits for 11.5
    for text in (DFT, GRID5):
        m = onnx.parser.parse_model(text)
        assert _status(version, m) is _status("11.2", m)
    m = onnx.parser.parse_model(
        '<ir_version: 8, opset_import: ["" : 13]>\ng (float[N,1,8] x) => (float[N,8] y) {\n  [n] y = Squeeze (x)\n}'
    )
    assert _status(version, m) is Status.REJECTED


def test_11_5_squeezes_without_axes_and_takes_opset_25():
    m = onnx.parser.parse_model(
        '<ir_version: 8, opset_import: ["" : 13]>\ng (float[N,1,8] x) => (float[N,8] y) {\n  [n] y = Squeeze (x)\n}'
    )
    assert _status("11.4", m) is Status.REJECTED and _status("11.5", m) is Status.SUPPORTED
    assert make("11.4").table["max_opset"] == 24 and make("11.5").table["max_opset"] == 25


# -- the standard plugin library as data ---------------------------------------------------------------------


def test_every_plugin_entry_names_its_source_and_the_versions_that_ship_it():
    data = plugin_data()
    assert "shared/" not in PLUGINS_PATH.read_text()
    read = data["read"]
    for e in data["plugins"]:
        assert e["name"] and e["version"].isdigit() and e["namespace"] == "", e
        assert e["interface"] in ("V2", "V3"), e
        assert e["shipped"] and set(e["shipped"]) <= set(SUPPORTED_VERSIONS), e
        assert f"plugin/{e['folder']}/" in e["source"] and "NVIDIA/TensorRT" in e["source"], e
        assert all(read[v]["commit"] for v in e["shipped"] if v in read)
    for v, entry in data["not_read"].items():  # versions past the newest branch read say why
        assert entry["same_as"] in read and "releases/tag" in entry["why"], v


def test_the_11_0_removals_of_the_changelog_are_gone_from_11_0():
    # NVIDIA/TensorRT CHANGELOG.md 11.0 GA: "Removed deprecated plugins: batchTile, clip, coordConvAC,
    # cropAndResize, gelu, leakyRelu, normalize, ..., split, nms, and proposal"
    removed = {"BatchTilePlugin_TRT", "Clip_TRT", "CoordConvAC", "CustomGeluPluginDynamic", "LReLU_TRT"}
    removed |= {"Normalize_TRT", "SpecialSlice_TRT", "Split", "NMS_TRT", "NMSDynamic_TRT", "Proposal"}
    by_name = {}
    for e in plugin_data()["plugins"]:
        by_name.setdefault(e["name"], set()).update(e["shipped"])
    for name in removed:
        assert "10.16" in by_name[name] and "11.0" not in by_name[name], name
    assert "11.0" in by_name["CropAndResizeDynamic"]  # version 2 (V3) stays


def test_a_v2_plugin_still_imports_on_11_x():
    # the V2 plugin interfaces are deprecated, not removed, in 11.x: GridAnchor_TRT (V2) still ships
    grid = next(e for e in plugin_data()["plugins"] if e["name"] == "GridAnchor_TRT")
    assert grid["interface"] == "V2" and "11.0" in grid["shipped"]
    assert _status("11.5", _one("GridAnchor_TRT")) is Status.SUPPORTED


def test_the_node_asks_for_plugin_version_1_unless_it_says_otherwise():
    # 11.0 ships CropAndResizeDynamic as version 2 only; the fallback importer's default version is "1"
    assert _status("10.16", _one("CropAndResizeDynamic")) is Status.SUPPORTED
    v = make("11.0").check(_one("CropAndResizeDynamic")).by_node()["n"]
    assert v.status is Status.REJECTED and "plugin version 2" in v.explanation
    assert _status("11.0", _one("CropAndResizeDynamic", plugin_version="2")) is Status.SUPPORTED
    assert _status("11.0", _one("CropAndResizeDynamic", plugin_version="2", plugin_namespace="x")) is (
        Status.REJECTED
    )


def test_the_live_backend_and_plugin_swap_read_the_same_data():
    from surgery.backends.tensorrt import worker as tensorrt_worker
    from surgery.backends.tensorrt.live import TensorRTBackend
    from surgery.fixes import FixError, get_fix

    assert not hasattr(tensorrt_worker, "STANDARD_PLUGIN_NAMES")  # the hand-written lists are gone
    b = TensorRTBackend.__new__(TensorRTBackend)
    b.flavour = "TensorRT-RTX"
    words = 'creator && "Plugin not found, are the plugin name, version, and namespace correct?"'
    assert "LReLU_TRT" in (b._rtx_caveat("LReLU_TRT", words) or "")
    assert b._rtx_caveat("MyFancyOp", words) is None
    assert "ROIAlign_TRT" in (b._rtx_caveat("RoiAlign", words) or "")
    swap = get_fix("plugin_swap")
    with pytest.raises(FixError, match="has no version 7"):
        swap(_one("Relu"), node="n", plugin="ModulatedDeformConv2d", version="7")
    out = swap(_one("Relu"), node="n", plugin="ModulatedDeformConv2d", version="2")
    assert out.graph.node[0].op_type == "ModulatedDeformConv2d"
    json.dumps(plugin_data())  # plain data
