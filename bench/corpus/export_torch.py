"""torchvision and transformers models built from code with random weights (nothing is downloaded), exported
to ONNX, plus onnxruntime-quantized variants. Runs inside the corpus's `torch` venv (see build.py):

    python export_torch.py OUT_DIR CANDIDATES_JSON [--only FAMILY ...]

Most models go through the TorchScript exporter (torch.onnx.export(..., dynamo=False)) at a fixed opset, some
at several opsets where the graphs differ (LayerNormalization from 17, Split/Squeeze inputs from 13,
HardSwish from 14); a few through the dynamo exporter (model-local functions). Writes
OUT_DIR/<family>/<name>.onnx (skipping files already there) and a JSON list of candidates like export_ml.py.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
import traceback
import warnings
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch

SEED = 0


def _seeded(fn):
    """Build a model with a fixed seed, in eval mode."""
    torch.manual_seed(SEED)
    return fn().eval()


# --- torchvision ------------------------------------------------------------------------------------------


def tv(name: str, **kw):
    import torchvision

    return lambda: getattr(torchvision.models, name)(weights=None, **kw)


def seg(name: str, **kw):
    import torchvision

    return lambda: getattr(torchvision.models.segmentation, name)(
        weights=None, weights_backbone=None, num_classes=5, **kw
    )


def det(name: str, **kw):
    import torchvision

    return lambda: getattr(torchvision.models.detection, name)(weights=None, weights_backbone=None, **kw)


class SegOut(torch.nn.Module):
    """Segmentation models return a dict; export its 'out' tensor."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)["out"]


class DetOut(torch.nn.Module):
    """Detection models take a list of images and return a list of dicts; export one image's tensors."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        out = self.inner([x])[0]
        return tuple(out[k] for k in sorted(out))


class Deform(torch.nn.Module):
    """A conv predicting offsets, then torchvision.ops.DeformConv2d."""

    def __init__(self):
        super().__init__()
        import torchvision

        self.offset = torch.nn.Conv2d(8, 2 * 3 * 3, 3, padding=1)
        self.deform = torchvision.ops.DeformConv2d(8, 16, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.deform(x, self.offset(x)))


def _deform_conv_symbolic(
    g, x, w, offset, mask, bias, sh, sw, ph, pw, dh, dw, groups, offset_groups, use_mask
):
    """torchvision::deform_conv2d as ONNX DeformConv (opset 19), the mapping users register themselves."""
    from torch.onnx import symbolic_helper as sym

    sh, sw, ph, pw, dh, dw, groups, offset_groups = (
        sym._get_const(v, "i", "int") for v in (sh, sw, ph, pw, dh, dw, groups, offset_groups)
    )
    inputs = [x, w, offset, bias] + ([mask] if sym._get_const(use_mask, "b", "use_mask") else [])
    return g.op(
        "DeformConv",
        *inputs,
        strides_i=[sh, sw],
        pads_i=[ph, pw, ph, pw],
        dilations_i=[dh, dw],
        group_i=groups,
        offset_group_i=offset_groups,
    )


def _function_modules(model) -> set[type]:
    """The module classes that export_modules_as_functions turns into model-local functions."""
    import torchvision

    names = {"BasicBlock", "LayerNorm"}
    found = {type(m) for m in model.modules() if type(m).__name__ in names}
    return found or {torchvision.models.resnet.BasicBlock}


# --- transformers -----------------------------------------------------------------------------------------


class Hidden(torch.nn.Module):
    """Call a transformers model with keyword tensors and return its first output as a plain tensor."""

    def __init__(self, inner, *names):
        super().__init__()
        self.inner, self.names = inner, names

    def forward(self, *args):
        out = self.inner(**dict(zip(self.names, args)), return_dict=True)
        return out[0]


def hf(kind: str):
    import transformers as T

    tiny = {"attn_implementation": "eager"}
    if kind == "bert":
        cfg = T.BertConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, **tiny
        )
        return lambda: Hidden(T.BertModel(cfg), "input_ids", "attention_mask")
    if kind == "distilbert":
        cfg = T.DistilBertConfig(dim=64, n_layers=2, n_heads=4, hidden_dim=128, **tiny)
        return lambda: Hidden(T.DistilBertModel(cfg), "input_ids", "attention_mask")
    if kind == "gpt2":
        cfg = T.GPT2Config(n_embd=64, n_layer=2, n_head=4, use_cache=False, **tiny)
        return lambda: Hidden(T.GPT2Model(cfg), "input_ids", "attention_mask")
    if kind == "t5":
        cfg = T.T5Config(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, use_cache=False, **tiny)
        return lambda: Hidden(T.T5Model(cfg), "input_ids", "decoder_input_ids")
    if kind == "bart":
        cfg = T.BartConfig(
            d_model=64,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            use_cache=False,
            **tiny,
        )
        return lambda: Hidden(T.BartModel(cfg), "input_ids", "decoder_input_ids")
    if kind == "vit":
        cfg = T.ViTConfig(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            image_size=64,
            **tiny,
        )
        return lambda: Hidden(T.ViTModel(cfg), "pixel_values")
    if kind == "whisper-encoder":
        cfg = T.WhisperConfig(
            d_model=64,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            num_mel_bins=80,
            max_source_positions=100,
            **tiny,
        )
        return lambda: Hidden(T.WhisperModel(cfg).get_encoder(), "input_features")
    raise ValueError(kind)


def encoder():
    """torch.nn.TransformerEncoder (transformers' models do not survive export_modules_as_functions)."""
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, norm_first=True)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def ids(*shape):
    return torch.randint(0, 500, shape, generator=torch.Generator().manual_seed(SEED))


def img(*shape):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(SEED))


TEXT = (ids(1, 16), torch.ones(1, 16, dtype=torch.long))
DYN_TEXT = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}

# name -> (family, builder, wrapper, inputs, input names, dynamic axes or None, opset, exporter)
IMAGE = (img(1, 3, 224, 224),)
DYN_IMG = {"x": {0: "batch"}}
MODELS = {
    "resnet18_op11": ("classification", tv("resnet18"), None, IMAGE, ["x"], DYN_IMG, 11, "torchscript"),
    "resnet18_op17": ("classification", tv("resnet18"), None, IMAGE, ["x"], DYN_IMG, 17, "torchscript"),
    "mobilenet_v3_small_op11": ("classification", tv("mobilenet_v3_small"), None, IMAGE, ["x"], None, 11, "torchscript"),
    "mobilenet_v3_small_op17": ("classification", tv("mobilenet_v3_small"), None, IMAGE, ["x"], DYN_IMG, 17, "torchscript"),
    "densenet121_op13": ("classification", tv("densenet121"), None, IMAGE, ["x"], DYN_IMG, 13, "torchscript"),
    "efficientnet_b0_op13": ("classification", tv("efficientnet_b0"), None, IMAGE, ["x"], DYN_IMG, 13, "torchscript"),
    "squeezenet1_1_op11": ("classification", tv("squeezenet1_1"), None, IMAGE, ["x"], None, 11, "torchscript"),
    "shufflenet_v2_x0_5_op13": ("classification", tv("shufflenet_v2_x0_5"), None, IMAGE, ["x"], DYN_IMG, 13, "torchscript"),
    "convnext_tiny_op17": ("classification", tv("convnext_tiny"), None, IMAGE, ["x"], DYN_IMG, 17, "torchscript"),
    "swin_t_op17": ("classification", tv("swin_t"), None, IMAGE, ["x"], None, 17, "torchscript"),
    "resnet18_op17_functions": ("classification", tv("resnet18"), None, IMAGE, ["x"], None, 17, "torchscript-functions"),
    "resnet18_dynamo": ("classification", tv("resnet18"), None, IMAGE, ["x"], None, 18, "dynamo"),
    "mobilenet_v3_small_dynamo": ("classification", tv("mobilenet_v3_small"), None, IMAGE, ["x"], None, 18, "dynamo"),
    "deeplabv3_mobilenet_v3_large_op13": ("segmentation", seg("deeplabv3_mobilenet_v3_large"), SegOut, (img(1, 3, 256, 256),), ["x"], None, 13, "torchscript"),
    "fcn_resnet50_op11": ("segmentation", seg("fcn_resnet50"), SegOut, (img(1, 3, 256, 256),), ["x"], None, 11, "torchscript"),
    "lraspp_mobilenet_v3_large_op17": ("segmentation", seg("lraspp_mobilenet_v3_large"), SegOut, (img(1, 3, 256, 256),), ["x"], DYN_IMG, 17, "torchscript"),
    "fasterrcnn_mobilenet_v3_large_320_fpn_op11": ("detection", det("fasterrcnn_mobilenet_v3_large_320_fpn", num_classes=5), DetOut, (img(3, 320, 320),), ["image"], None, 11, "torchscript"),
    "maskrcnn_resnet50_fpn_op11": ("detection", det("maskrcnn_resnet50_fpn", num_classes=5), DetOut, (img(3, 320, 320),), ["image"], None, 11, "torchscript"),
    "retinanet_resnet50_fpn_op11": ("detection", det("retinanet_resnet50_fpn", num_classes=5), DetOut, (img(3, 320, 320),), ["image"], None, 11, "torchscript"),
    "ssdlite320_mobilenet_v3_large_op13": ("detection", det("ssdlite320_mobilenet_v3_large", num_classes=5), DetOut, (img(3, 320, 320),), ["image"], None, 13, "torchscript"),
    "keypointrcnn_resnet50_fpn_op11": ("detection", det("keypointrcnn_resnet50_fpn", num_classes=2, num_keypoints=5), DetOut, (img(3, 320, 320),), ["image"], None, 11, "torchscript"),
    "deform_conv2d_op17_fallthrough": ("custom-op", Deform, None, (img(1, 8, 16, 16),), ["x"], None, 17, "torchscript-fallthrough"),
    "deform_conv2d_op19": ("custom-op", Deform, None, (img(1, 8, 16, 16),), ["x"], None, 19, "torchscript-deformconv"),
    "bert_op11": ("transformer", hf("bert"), None, TEXT, ["input_ids", "attention_mask"], DYN_TEXT, 11, "torchscript"),
    "bert_op13": ("transformer", hf("bert"), None, TEXT, ["input_ids", "attention_mask"], DYN_TEXT, 13, "torchscript"),
    "bert_op17": ("transformer", hf("bert"), None, TEXT, ["input_ids", "attention_mask"], DYN_TEXT, 17, "torchscript"),
    "torch_encoder_op17_functions": ("transformer", encoder, None, (img(1, 16, 64),), ["x"], None, 17, "torchscript-functions"),
    "bert_dynamo": ("transformer", hf("bert"), None, TEXT, ["input_ids", "attention_mask"], None, 18, "dynamo"),
    "distilbert_op11": ("transformer", hf("distilbert"), None, TEXT, ["input_ids", "attention_mask"], DYN_TEXT, 11, "torchscript"),
    "gpt2_op13": ("transformer", hf("gpt2"), None, TEXT, ["input_ids", "attention_mask"], DYN_TEXT, 13, "torchscript"),
    "gpt2_op17": ("transformer", hf("gpt2"), None, TEXT, ["input_ids", "attention_mask"], DYN_TEXT, 17, "torchscript"),
    "gpt2_dynamo": ("transformer", hf("gpt2"), None, TEXT, ["input_ids", "attention_mask"], None, 18, "dynamo"),
    "t5_op13": ("transformer", hf("t5"), None, (ids(1, 12), ids(1, 6)), ["input_ids", "decoder_input_ids"], None, 13, "torchscript"),
    "bart_op14": ("transformer", hf("bart"), None, (ids(1, 12), ids(1, 6)), ["input_ids", "decoder_input_ids"], None, 14, "torchscript"),
    "vit_op17": ("transformer", hf("vit"), None, (img(1, 3, 64, 64),), ["pixel_values"], {"pixel_values": {0: "b"}}, 17, "torchscript"),
    "vit_dynamo": ("transformer", hf("vit"), None, (img(1, 3, 64, 64),), ["pixel_values"], None, 18, "dynamo"),
    "whisper_encoder_op17": ("transformer", hf("whisper-encoder"), None, (img(1, 80, 200),), ["input_features"], None, 17, "torchscript"),
}  # fmt: skip


def export(name: str, path: Path) -> None:
    """Export one model to path."""
    family, build, wrap, inputs, names, dyn, opset, exporter = MODELS[name]
    model = _seeded(build)
    if wrap is not None:
        model = wrap(model).eval()
    n_out = 1
    with torch.no_grad():
        out = model(*inputs)
        if isinstance(out, tuple):
            n_out = len(out)
    outputs = [f"output_{i}" for i in range(n_out)]
    if exporter == "dynamo":
        prog = torch.onnx.export(
            model, inputs, dynamo=True, opset_version=opset, input_names=names, output_names=outputs
        )
        prog.save(str(path), external_data=False)
    else:
        kw = {}
        if exporter == "torchscript-fallthrough":
            kw["operator_export_type"] = torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH
        if exporter == "torchscript-functions":
            kw["export_modules_as_functions"] = _function_modules(model)
        if exporter == "torchscript-deformconv":
            torch.onnx.register_custom_op_symbolic("torchvision::deform_conv2d", _deform_conv_symbolic, 19)
        torch.onnx.export(
            model,
            inputs,
            str(path),
            dynamo=False,
            opset_version=opset,
            input_names=names,
            output_names=outputs,
            dynamic_axes=dyn,
            do_constant_folding=True,
            **kw,
        )


# --- quantized (onnxruntime.quantization) ------------------------------------------------------------------


class RandomReader:
    """A seeded calibration reader: a few random batches for one image input."""

    def __init__(self, name: str, shape: tuple[int, ...], n: int = 4):
        rng = np.random.default_rng(SEED)
        self.batches = iter([{name: rng.random(shape, dtype=np.float32)} for _ in range(n)])

    def get_next(self):
        return next(self.batches, None)


# name -> (base model exported above, mode)
QUANTIZED = {
    "bert_op13_dynamic_int8": ("bert_op13", "dynamic"),
    "gpt2_op13_dynamic_int8": ("gpt2_op13", "dynamic"),
    "resnet18_op17_static_qoperator": ("resnet18_op17", "qoperator"),
    "resnet18_op17_static_qdq": ("resnet18_op17", "qdq"),
    "mobilenet_v3_small_op17_static_qdq": ("mobilenet_v3_small_op17", "qdq"),
}


def quantize(name: str, out_dir: Path, path: Path) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    base, mode = QUANTIZED[name]
    src = out_dir / MODELS[base][0] / f"{base}.onnx"
    if not src.exists():
        src.parent.mkdir(parents=True, exist_ok=True)
        export(base, src)
    if mode == "dynamic":
        quantize_dynamic(str(src), str(path), weight_type=QuantType.QInt8)
    else:
        pre = path.with_suffix(".pre.onnx")
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        fmt = QuantFormat.QOperator if mode == "qoperator" else QuantFormat.QDQ
        quantize_static(
            str(pre),
            str(path),
            RandomReader("x", (1, 3, 224, 224)),
            quant_format=fmt,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=mode == "qdq",
        )
        pre.unlink()


# --- onnxruntime transformer optimizer: fused com.microsoft ops --------------------------------------------

# name -> (base model exported above, model_type for onnxruntime.transformers.optimizer)
FUSED = {
    "bert_op13_ort_fused": ("bert_op13", "bert"),
    "gpt2_op17_ort_fused": ("gpt2_op17", "gpt2"),  # from opset 13 it emits LayerNormalization, invalid there
}


def fuse(name: str, out_dir: Path, path: Path) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    base, model_type = FUSED[name]
    src = out_dir / MODELS[base][0] / f"{base}.onnx"
    if not src.exists():
        src.parent.mkdir(parents=True, exist_ok=True)
        export(base, src)
    opt = optimize_model(str(src), model_type=model_type, num_heads=4, hidden_size=64, opt_level=1)
    opt.save_model_to_file(str(path))


def source_of(name: str, kind: str) -> str:
    """The manifest's source string: what made the model, with pinned versions."""
    t = f"torch=={torch.__version__.split('+')[0]}"
    ort = f"onnxruntime=={version('onnxruntime')}"
    if kind == "quantize":
        base, mode = QUANTIZED[name]
        return f"quantize:{ort} {mode} of {base} ({t})"
    if kind == "fuse":
        base, model_type = FUSED[name]
        return f"optimize:{ort} transformers.optimizer model_type={model_type} of {base} ({t})"
    family, _, _, _, _, _, opset, exporter = MODELS[name]
    lib = "transformers" if family == "transformer" and not name.startswith("torch_") else "torchvision"
    return f"export:{t} {lib}=={version(lib)} {name} opset {opset} {exporter}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("candidates", type=Path)
    ap.add_argument("--only", nargs="+", default=None)
    args = ap.parse_args()
    cache = args.out_dir.parent.parent
    warnings.filterwarnings("ignore")
    torch.set_num_threads(2)

    jobs = [(n, spec[0], "export") for n, spec in MODELS.items()]
    jobs += [(n, "quantized", "quantize") for n in QUANTIZED]
    jobs += [(n, "custom-op", "fuse") for n in FUSED]
    jobs = [j for j in jobs if args.only is None or j[1] in args.only]
    records = []
    for i, (name, family, kind) in enumerate(jobs, 1):
        path = args.out_dir / family / f"{name}.onnx"
        rec = {"id": f"{family}/{name}", "family": family, "source": source_of(name, kind)}
        if path.exists():
            records.append({**rec, "path": str(path.relative_to(cache))})
            continue
        t = time.time()
        print(f"[torch {i}/{len(jobs)}] {kind} {name} ...", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(".part.onnx")  # renamed when complete, so an interrupted run leaves no model
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                if kind == "export":
                    export(name, part)
                elif kind == "quantize":
                    quantize(name, args.out_dir, part)
                else:
                    fuse(name, args.out_dir, part)
            part.rename(path)
        except Exception as e:  # noqa: BLE001 - one failed export is recorded, not fatal
            traceback.print_exc(limit=3)
            part.unlink(missing_ok=True)
            records.append({**rec, "error": f"{kind} failed: {type(e).__name__}: {e}"[:500]})
            print(f"[torch {i}/{len(jobs)}] {name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        size = path.stat().st_size
        print(f"[torch {i}/{len(jobs)}] {name}: {size / 1e6:.1f} MB in {time.time() - t:.0f} s", flush=True)
        records.append({**rec, "path": str(path.relative_to(cache))})
    args.candidates.write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
