"""Real models nobody here wrote: every .onnx file shipped inside the installed packages (onnx's model-zoo
'light' models — ResNet-50, DenseNet-121, Inception, ... with weights stripped; its PyTorch exports;
onnxruntime's sample datasets) loads, inspects, and gets graph facts."""

import importlib.util
from pathlib import Path

import pytest

from surgery.cli import main
from surgery.graph import GraphFacts
from surgery.inspect import inspect_model
from surgery.model import load_model


def shipped_models() -> list[Path]:
    found = []
    for pkg in ("onnx", "onnxruntime"):
        spec = importlib.util.find_spec(pkg)
        if spec and spec.submodule_search_locations:
            for root in spec.submodule_search_locations:
                found += sorted(Path(root).rglob("*.onnx"))
    return found


MODELS = shipped_models()


def test_packages_ship_models():
    assert len(MODELS) > 100  # onnx ships ~150, onnxruntime 3


@pytest.mark.parametrize("path", MODELS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_model_loads_inspects_and_has_facts(path):
    model = load_model(path)
    report = inspect_model(model)
    assert report.nodes == sum(report.op_histogram.values())
    facts = GraphFacts.of(model.proto)
    assert len(facts.order) == len(model.proto.graph.node)


def test_cli_inspect_on_model_zoo_resnet50(capsys):
    resnet = next(p for p in MODELS if p.name == "light_resnet50.onnx")
    assert main(["inspect", str(resnet)]) == 0
    out = capsys.readouterr().out
    assert "53  Conv" in out and "producer   onnx-caffe2" in out
