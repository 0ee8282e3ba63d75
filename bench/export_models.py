"""Export real torchvision / transformers models with random weights (no hub access) into a folder, for the
benchmarks and for trying the app on models nobody here wrote.

    python bench/export_models.py OUT_DIR [--only NAME ...]

Needs torch, torchvision and transformers (not project dependencies; e.g. in a separate venv:
`pip install torch==2.14.1 torchvision==0.29.1 transformers`). Each model is exported with the legacy
TorchScript exporter at a fixed opset (what most models in the wild were made with) and, where it works, with
the dynamo exporter. Prints one line per model: nodes, op types, seconds.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path


def _vision(name: str, **kw):
    import torchvision

    return getattr(torchvision.models, name)(weights=None, **kw).eval()


def _detection():
    import torchvision

    return torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=5
    ).eval()


def _hidden_states(model):
    """Call a transformers model with keyword input_ids and return its last hidden state (a plain tensor)."""
    import torch

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, input_ids):
            return self.inner(input_ids=input_ids, use_cache=False).last_hidden_state

    return Wrap().eval()


def _bert():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512)
    return _hidden_states(BertModel(cfg).eval())


def _gpt2():
    from transformers import GPT2Config, GPT2Model

    return _hidden_states(GPT2Model(GPT2Config(n_embd=128, n_layer=4, n_head=4)).eval())


def _upsample_net():
    """A small decoder that upsamples with a size computed from the input (the Resize-from-Shape pattern)."""
    import torch
    import torch.nn.functional as F

    class Up(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x):
            y = self.conv(x)
            h, w = y.shape[2], y.shape[3]
            return F.interpolate(y, size=(h * 2, w * 2), mode="nearest")

    return Up().eval()


MODELS = {
    # name: (factory, input shapes, opset, dynamic batch)
    "resnet50": (lambda: _vision("resnet50"), {"input": (1, 3, 224, 224)}, 13, True),
    "mobilenet_v3_small": (lambda: _vision("mobilenet_v3_small"), {"input": (1, 3, 224, 224)}, 13, True),
    "deeplabv3_mobilenet": (
        lambda: _vision_seg(),
        {"input": (1, 3, 256, 256)},
        11,
        False,
    ),
    "fasterrcnn_mobilenet_320": (_detection, {"input": (3, 320, 320)}, 11, False),
    "bert_small_random": (_bert, {"input_ids": (1, 32)}, 14, True),
    "gpt2_small_random": (_gpt2, {"input_ids": (1, 32)}, 14, True),
    "upsample_from_shape": (_upsample_net, {"input": (1, 3, 32, 32)}, 11, True),
}


def _vision_seg():
    import torchvision

    return torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=4, aux_loss=False
    ).eval()


def export(name: str, out: Path) -> Path:
    import torch

    factory, shapes, opset, dynamic = MODELS[name]
    model = factory()
    torch.manual_seed(0)
    args = []
    for inp, shape in shapes.items():
        if inp == "input_ids":
            args.append(torch.randint(0, 1000, shape))
        else:
            args.append(torch.randn(*shape))
    if name.startswith("fasterrcnn"):
        args = [[args[0]]]
    path = out / f"{name}.onnx"
    dyn = {k: {0: "batch"} for k in shapes} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(
                model,
                tuple(args),
                str(path),
                input_names=list(shapes),
                opset_version=opset,
                dynamic_axes=dyn,
                dynamo=False,
            )
        except Exception as exc:  # some models only export with the dynamo exporter (opset 18+)
            print(f"{name:28s} legacy exporter failed ({type(exc).__name__}); trying the dynamo exporter")
            torch.onnx.export(
                model, tuple(args), str(path), input_names=list(shapes), opset_version=18, dynamo=True
            )
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import onnx

    for name in args.only or MODELS:
        t = time.perf_counter()
        try:
            path = export(name, args.out)
        except Exception as exc:  # one model failing to export must not stop the others
            print(f"{name:28s} export failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            continue
        m = onnx.load(str(path), load_external_data=False)
        ops = sorted({n.op_type for n in m.graph.node})
        print(
            f"{name:28s} {len(m.graph.node):6d} nodes  {time.perf_counter() - t:6.1f} s  {', '.join(ops)[:120]}"
        )


if __name__ == "__main__":
    main()
