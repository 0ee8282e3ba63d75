"""The exports engineers bring in 2026 (issue 28): small LLMs, a Whisper encoder and a ViT built from transformers
config objects with random weights (nothing is downloaded), through torch's dynamo exporter at opset 18 and 23
and the legacy (TorchScript) exporter, with and without KV-cache inputs (past_key_values.*), a dynamic batch;
onnxruntime-genai's model builder (int4 MatMulNBits, fp32, fp16: GroupQueryAttention,
SkipSimplifiedLayerNormalization, com.microsoft RotaryEmbedding) from a locally saved config, weights and a
tokenizer made here; onnxruntime quantize_dynamic / quantize_static (QDQ and QOperator); uint8-image-input
preprocessing models. Runs inside the corpus's `llm` venv (see build.py):

    python export_llm.py OUT_DIR CANDIDATES_JSON [--only FAMILY ...]

Writes OUT_DIR/<group>/<name>.onnx (skipping files already there) and a JSON list of candidates like
export_torch.py; every model is of the family "llm".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import subprocess
import sys
import time
import traceback
import warnings
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch

SEED = 0
FAMILY = "llm"
LAYERS, HIDDEN, HEADS, KV_HEADS, VOCAB = 2, 64, 4, 2, 256
PAST = 4  # positions in the example KV cache


# --- transformers models from config objects -----------------------------------------------------------------


def config(arch: str, attn: str = "sdpa"):
    import transformers as T

    common = {"vocab_size": VOCAB, "attn_implementation": attn}
    dec = {
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "max_position_embeddings": 128,
        **common,
    }
    if arch == "llama":
        return T.LlamaConfig(**dec, architectures=["LlamaForCausalLM"])
    if arch == "qwen2":
        return T.Qwen2Config(**dec, architectures=["Qwen2ForCausalLM"])
    if arch == "gemma":
        return T.GemmaConfig(**dec, head_dim=HIDDEN // HEADS, architectures=["GemmaForCausalLM"])
    if arch == "gpt2":
        return T.GPT2Config(n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=128, **common)
    if arch == "vit":
        return T.ViTConfig(
            hidden_size=HIDDEN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            intermediate_size=2 * HIDDEN,
            image_size=32,
            patch_size=8,
            attn_implementation=attn,
        )
    if arch == "whisper":
        return T.WhisperConfig(
            d_model=HIDDEN,
            encoder_layers=LAYERS,
            decoder_layers=LAYERS,
            encoder_attention_heads=HEADS,
            decoder_attention_heads=HEADS,
            encoder_ffn_dim=2 * HIDDEN,
            decoder_ffn_dim=2 * HIDDEN,
            num_mel_bins=80,
            max_source_positions=50,
            attn_implementation=attn,
        )
    raise ValueError(arch)


def causal_lm(arch: str, attn: str = "sdpa"):
    import transformers as T

    torch.manual_seed(SEED)
    cfg = config(arch, attn)
    if arch == "gpt2":
        return T.GPT2LMHeadModel(cfg).eval()
    return T.AutoModelForCausalLM.from_config(cfg).eval()


class CausalLM(torch.nn.Module):
    """input_ids, attention_mask (and past_key_values.{i}.key / .value flat) -> logits (and present.*), the
    interface onnxruntime-genai and optimum write."""

    def __init__(self, inner, kv: bool):
        super().__init__()
        self.inner, self.kv = inner, kv

    def forward(self, input_ids, attention_mask, *past):
        kw = {"use_cache": self.kv}
        if self.kv:
            from transformers import DynamicCache

            cache = DynamicCache(config=self.inner.config)
            for i in range(len(past) // 2):
                cache.update(past[2 * i], past[2 * i + 1], i)
            kw["past_key_values"] = cache
        out = self.inner(input_ids=input_ids, attention_mask=attention_mask, return_dict=True, **kw)
        if not self.kv:
            return out.logits
        presents = []
        for layer in out.past_key_values.layers:
            presents += [layer.keys, layer.values]
        return (out.logits, *presents)


class Encoder(torch.nn.Module):
    def __init__(self, inner, name):
        super().__init__()
        self.inner, self.name = inner, name

    def forward(self, x):
        return self.inner(**{self.name: x}, return_dict=True).last_hidden_state


def encoder(arch: str, attn: str = "sdpa"):
    import transformers as T

    torch.manual_seed(SEED)
    if arch == "vit":
        return Encoder(T.ViTModel(config("vit", attn)).eval(), "pixel_values")
    return Encoder(T.WhisperModel(config("whisper", attn)).get_encoder().eval(), "input_features")


def kv_heads(arch: str) -> tuple[int, int]:
    return (HEADS, HIDDEN // HEADS) if arch == "gpt2" else (KV_HEADS, HIDDEN // HEADS)


def lm_inputs(arch: str, kv: bool):
    """Example inputs (batch 2: a batch of 1 would be specialised by torch.export), names and dynamic axes."""
    g = torch.Generator().manual_seed(SEED)
    seq = 3
    total = seq + (PAST if kv else 0)
    inputs = [torch.randint(0, VOCAB, (2, seq), generator=g), torch.ones(2, total, dtype=torch.long)]
    names = ["input_ids", "attention_mask"]
    dyn = {
        "input_ids": {0: "batch_size", 1: "sequence_length"},
        "attention_mask": {0: "batch_size", 1: "total_length"},
    }
    outs = ["logits"]
    dyn["logits"] = {0: "batch_size", 1: "sequence_length"}
    if kv:
        h, d = kv_heads(arch)
        for i in range(LAYERS):
            for kind in ("key", "value"):
                inputs.append(torch.randn(2, h, PAST, d, generator=g))
                names.append(f"past_key_values.{i}.{kind}")
                dyn[names[-1]] = {0: "batch_size", 2: "past_sequence_length"}
                outs.append(f"present.{i}.{kind}")
                dyn[outs[-1]] = {0: "batch_size", 2: "total_length"}
    return tuple(inputs), names, outs, dyn


def export_torch(model, inputs, names, outs, dyn, path: Path, exporter: str, opset: int) -> None:
    with torch.no_grad():
        model(*inputs)
    if exporter == "dynamo":
        # torch.export's own form: batch, sequence and past lengths named (one past length for every key and
        # value, as optimum and onnxruntime-genai write them), the total length derived (past + sequence)
        named = {v: torch.export.Dim(v) for v in ("batch_size", "sequence_length", "past_sequence_length")}
        shapes = [{a: named.get(v, torch.export.Dim.AUTO) for a, v in dyn[n].items()} for n in names]
        if len(shapes) > 2 and names[2].startswith("past_"):  # forward(input_ids, attention_mask, *past)
            shapes = shapes[:2] + [tuple(shapes[2:])]
        prog = torch.onnx.export(
            model,
            inputs,
            dynamo=True,
            opset_version=opset,
            input_names=names,
            output_names=outs,
            dynamic_shapes=tuple(shapes),
            optimize=True,
        )
        prog.save(str(path), external_data=False)
    else:
        torch.onnx.export(
            model,
            inputs,
            str(path),
            dynamo=False,
            opset_version=opset,
            input_names=names,
            output_names=outs,
            dynamic_axes=dyn,
            do_constant_folding=True,
        )


def export_lm(arch: str, kv: bool, exporter: str, opset: int, path: Path) -> None:
    # the legacy exporter cannot trace sdpa's enable_gqa; eager attention is what it is used with
    model = CausalLM(causal_lm(arch, "sdpa" if exporter == "dynamo" else "eager"), kv).eval()
    inputs, names, outs, dyn = lm_inputs(arch, kv)
    export_torch(model, inputs, names, outs, dyn, path, exporter, opset)


def export_encoder(arch: str, exporter: str, opset: int, path: Path) -> None:
    model = encoder(arch, "sdpa" if exporter == "dynamo" else "eager")
    g = torch.Generator().manual_seed(SEED)
    x = torch.rand(2, 3, 32, 32, generator=g) if arch == "vit" else torch.rand(2, 80, 100, generator=g)
    name = "pixel_values" if arch == "vit" else "input_features"
    dyn = {name: {0: "batch_size"}, "last_hidden_state": {0: "batch_size"}}
    export_torch(model, (x,), [name], ["last_hidden_state"], dyn, path, exporter, opset)


# --- uint8 image inputs ---------------------------------------------------------------------------------------


class Uint8Vit(torch.nn.Module):
    """uint8 NHWC image -> Transpose -> Cast -> /255, (x - mean) / std -> ViT: preprocessing inside the model."""

    def __init__(self, order: str):
        super().__init__()
        self.vit, self.order = encoder("vit", "eager"), order
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def forward(self, image):
        if self.order == "transpose-cast":
            x = image.permute(0, 3, 1, 2).float()
        elif self.order == "cast-transpose":
            x = image.float().permute(0, 3, 1, 2)
        else:  # BGR -> RGB by a flip of the uint8 channels, then transpose and cast
            x = image.flip(-1).permute(0, 3, 1, 2).float()
        return self.vit((x / 255.0 - self.mean) / self.std)


class Uint8Conv(torch.nn.Module):
    """uint8 NCHW image -> Cast -> (x - 127.5) / 127.5 -> Conv -> ReLU -> global pool: a small CNN preprocessor."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(SEED)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, image):
        x = (image.float() - 127.5) / 127.5
        return torch.relu(self.conv(x)).mean(dim=(2, 3))


def export_uint8(kind: str, exporter: str, opset: int, path: Path) -> None:
    g = torch.Generator().manual_seed(SEED)
    if kind == "conv":
        model, x = Uint8Conv().eval(), torch.randint(0, 256, (2, 3, 32, 32), generator=g, dtype=torch.uint8)
    else:
        model, x = (
            Uint8Vit(kind).eval(),
            torch.randint(0, 256, (2, 32, 32, 3), generator=g, dtype=torch.uint8),
        )
    dyn = {"image": {0: "batch_size"}, "output": {0: "batch_size"}}
    export_torch(model, (x,), ["image"], ["output"], dyn, path, exporter, opset)


# --- onnxruntime quantization ---------------------------------------------------------------------------------


class RandomReader:
    """A seeded calibration reader: a few random batches of one float input."""

    def __init__(self, name: str, shape: tuple[int, ...], n: int = 4):
        rng = np.random.default_rng(SEED)
        self.batches = iter([{name: rng.random(shape, dtype=np.float32)} for _ in range(n)])

    def get_next(self):
        return next(self.batches, None)


def quantize(base: str, mode: str, out_dir: Path, path: Path) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    src = out_dir / JOBS[base][0] / f"{base}.onnx"
    if not src.exists():
        run_job(base, out_dir, src)
    if mode.startswith("dynamic"):
        wt = QuantType.QUInt8 if mode == "dynamic-uint8" else QuantType.QInt8
        quantize_dynamic(str(src), str(path), weight_type=wt, op_types_to_quantize=["MatMul", "Gather"])
        return
    pre = path.with_suffix(".pre.onnx")
    quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
    name, shape = ("pixel_values", (1, 3, 32, 32)) if "vit" in base else ("input_features", (1, 80, 100))
    fmt = QuantFormat.QOperator if mode == "qoperator" else QuantFormat.QDQ
    quantize_static(
        str(pre),
        str(path),
        RandomReader(name, shape),
        quant_format=fmt,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        per_channel=mode == "qdq",
    )
    pre.unlink()


# --- onnxruntime-genai's model builder ------------------------------------------------------------------------


def _tokenizer(folder: Path) -> None:
    """A word-level tokenizer of VOCAB made-up words, saved beside the config (the builder reads one)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(str(folder))


def genai(arch: str, precision: str, ep: str, out_dir: Path, path: Path) -> None:
    """Save a random-weight model with its config and tokenizer, run the builder on that folder, copy model.onnx
    (its weights moved inside it when the builder wrote them beside)."""
    import onnx

    work = out_dir / "_genai" / f"{arch}-{precision}-{ep}"
    hf_dir = out_dir / "_genai" / f"hf-{arch}"
    if not (hf_dir / "config.json").exists():
        causal_lm(arch).save_pretrained(str(hf_dir))
        _tokenizer(hf_dir)
    shutil.rmtree(work, ignore_errors=True)
    cmd = [
        sys.executable, "-m", "onnxruntime_genai.models.builder",
        "-i", str(hf_dir), "-o", str(work), "-p", precision, "-e", ep, "-c", str(out_dir / "_genai" / "cache"),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-600:])
    model = onnx.load(str(work / "model.onnx"))  # external data, if any, read in
    onnx.save(model, str(path))
    shutil.rmtree(work, ignore_errors=True)


# --- the list ---------------------------------------------------------------------------------------------------

# name -> (group folder, kind, args)
JOBS: dict[str, tuple] = {}
for _arch in ("llama", "qwen2", "gemma", "gpt2"):
    for _kv in (False, True):
        _tag = "kv" if _kv else "nokv"
        for _opset in (18, 23):
            JOBS[f"{_arch}_{_tag}_dynamo_op{_opset}"] = ("dynamo", "lm", (_arch, _kv, "dynamo", _opset))
        JOBS[f"{_arch}_{_tag}_legacy_op17"] = ("legacy", "lm", (_arch, _kv, "legacy", 17))
for _arch in ("vit", "whisper"):
    for _exp, _opset in (("dynamo", 18), ("dynamo", 23), ("legacy", 17)):
        JOBS[f"{_arch}_encoder_{_exp}_op{_opset}"] = (_exp, "encoder", (_arch, _exp, _opset))
for _kind, _exp, _opset in (
    ("transpose-cast", "legacy", 17),
    ("transpose-cast", "dynamo", 18),
    ("cast-transpose", "dynamo", 23),
    ("flip-transpose-cast", "legacy", 17),
    ("conv", "legacy", 17),
    ("conv", "dynamo", 18),
):
    JOBS[f"uint8_{_kind}_{_exp}_op{_opset}"] = ("uint8", "uint8", (_kind, _exp, _opset))
for _base, _mode in (
    ("llama_nokv_legacy_op17", "dynamic-int8"),
    ("gpt2_nokv_legacy_op17", "dynamic-uint8"),
    ("qwen2_kv_legacy_op17", "dynamic-int8"),
    ("vit_encoder_legacy_op17", "qdq"),
    ("vit_encoder_legacy_op17", "qoperator"),
    ("whisper_encoder_legacy_op17", "qdq"),
    ("whisper_encoder_legacy_op17", "qoperator"),
):
    JOBS[f"{_base}_{_mode}"] = ("quantized", "quantize", (_base, _mode))
for _arch in ("llama", "qwen2", "gemma"):
    for _prec, _ep in (("int4", "cpu"), ("fp32", "cpu"), ("fp16", "cuda"), ("int4", "cuda")):
        JOBS[f"{_arch}_genai_{_prec}_{_ep}"] = ("genai", "genai", (_arch, _prec, _ep))


def run_job(name: str, out_dir: Path, path: Path) -> None:
    _, kind, a = JOBS[name]
    if kind == "lm":
        export_lm(*a, path)
    elif kind == "encoder":
        export_encoder(*a, path)
    elif kind == "uint8":
        export_uint8(*a, path)
    elif kind == "quantize":
        quantize(*a, out_dir, path)
    else:
        genai(*a, out_dir, path)


def source_of(name: str) -> str:
    """The manifest's source string: what made the model, with pinned versions."""
    group, kind, a = JOBS[name]
    t = f"torch=={torch.__version__.split('+')[0]} transformers=={version('transformers')}"
    if kind == "quantize":
        return f"quantize:onnxruntime=={version('onnxruntime')} {a[1]} of {a[0]} ({t})"
    if kind == "genai":
        return (
            f"genai-builder:onnxruntime-genai=={version('onnxruntime-genai')} {a[0]} -p {a[1]} -e {a[2]} "
            f"({t}, random weights)"
        )
    return f"export:{t} {name} {group} exporter, random weights"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("candidates", type=Path)
    ap.add_argument("--only", nargs="+", default=None, help="families (this script writes only 'llm')")
    args = ap.parse_args()
    cache = args.out_dir.parent.parent
    warnings.filterwarnings("ignore")
    torch.set_num_threads(2)
    records = []
    if args.only is not None and FAMILY not in args.only:
        args.candidates.write_text("[]")
        return 0
    for i, name in enumerate(JOBS, 1):
        group = JOBS[name][0]
        path = args.out_dir / group / f"{name}.onnx"
        rec = {"id": f"{FAMILY}/{group}/{name}", "family": FAMILY, "source": source_of(name)}
        if path.exists():
            records.append({**rec, "path": str(path.relative_to(cache))})
            continue
        t = time.time()
        print(f"[llm {i}/{len(JOBS)}] {name} ...", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(".part.onnx")  # renamed when complete, so an interrupted run leaves no model
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                run_job(name, args.out_dir, part)
            part.rename(path)
        except Exception as e:  # noqa: BLE001 - one failed export is recorded, not fatal
            traceback.print_exc(limit=3)
            part.unlink(missing_ok=True)
            records.append({**rec, "error": f"{JOBS[name][1]} failed: {type(e).__name__}: {e}"[:500]})
            print(f"[llm {i}/{len(JOBS)}] {name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        size = path.stat().st_size
        print(f"[llm {i}/{len(JOBS)}] {name}: {size / 1e6:.2f} MB in {time.time() - t:.0f} s", flush=True)
        records.append({**rec, "path": str(path.relative_to(cache))})
    shutil.rmtree(args.out_dir / "_genai" / "cache", ignore_errors=True)
    args.candidates.write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
