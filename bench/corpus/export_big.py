"""A 1B-parameter LLM export with its weights in an external file (issues 28 and 30: models at 1B size), for
bench/llm_scale.py. Llama-3.2-1B's shape (hidden 2048, 16 layers, 32 heads, 8 key/value heads, intermediate 8192,
vocabulary 128256, tied embeddings, llama3 rope scaling) built from a transformers config object with random fp16
weights (nothing is downloaded), exported by torch's dynamo exporter at opset 18 with KV-cache inputs
(`past_key_values.{i}.key/value`, outputs `present.*`), as export_llm.py writes its tiny ones. Runs inside the
corpus's `llm` venv (see build.py), once:

    ~/.cache/onnx-surgery/venv-llm/bin/python bench/corpus/export_big.py [--out DIR]

Writes DIR/llama-1b/model.onnx (the graph, about 1 MB) and model.onnx.data (2.5 GB of fp16 weights) and
DIR/llama-1b/source.json (what made it). DIR defaults to ${ONNX_SURGERY_BIG:-~/.cache/onnx-surgery/big}; a model
already there is kept. On the 2-core dev machine: 7 min (2.7 CPU min), 3.1 GiB peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import warnings
from importlib.metadata import version
from pathlib import Path

import torch

SEED = 0
DEFAULT_OUT = Path(os.environ.get("ONNX_SURGERY_BIG", "~/.cache/onnx-surgery/big")).expanduser()
# meta-llama/Llama-3.2-1B's config.json, as numbers (no hub access)
LLAMA_1B = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "tie_word_embeddings": True,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
}
PAST = 4  # positions in the example KV cache


def build(folder: Path) -> dict:
    import transformers as T

    # the corpus's wrapper: input_ids, attention_mask, past.* -> logits, present.*
    from export_llm import CausalLM

    torch.manual_seed(SEED)
    cfg = T.LlamaConfig(**LLAMA_1B, architectures=["LlamaForCausalLM"], attn_implementation="sdpa")
    torch.set_default_dtype(torch.float16)  # made in fp16: 2.5 GB, never the fp32 5 GB
    inner = T.LlamaForCausalLM(cfg).eval()
    torch.set_default_dtype(torch.float32)
    params = sum(p.numel() for p in inner.parameters())  # tied: the embedding counted once
    model = CausalLM(inner, kv=True).eval()

    g = torch.Generator().manual_seed(SEED)
    seq, layers, kv, hd = 3, cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim
    inputs = [
        torch.randint(0, cfg.vocab_size, (2, seq), generator=g),
        torch.ones(2, seq + PAST, dtype=torch.long),
    ]
    names, outs = ["input_ids", "attention_mask"], ["logits"]
    for i in range(layers):
        for kind in ("key", "value"):
            inputs.append(torch.randn(2, kv, PAST, hd, generator=g).half())
            names.append(f"past_key_values.{i}.{kind}")
            outs.append(f"present.{i}.{kind}")
    named = {v: torch.export.Dim(v) for v in ("batch_size", "sequence_length", "past_sequence_length")}
    past = {0: named["batch_size"], 2: named["past_sequence_length"]}
    shapes = (
        {0: named["batch_size"], 1: named["sequence_length"]},
        {0: named["batch_size"], 1: torch.export.Dim.AUTO},
        tuple(past for _ in names[2:]),
    )
    with torch.no_grad():
        prog = torch.onnx.export(
            model,
            tuple(inputs),
            dynamo=True,
            opset_version=18,
            input_names=names,
            output_names=outs,
            dynamic_shapes=shapes,
            optimize=True,
        )
    part = folder.with_name(
        folder.name + ".part"
    )  # renamed when complete: an interrupted run leaves no model
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    prog.save(str(part / "model.onnx"), external_data=True)  # the weights in model.onnx.data beside it
    del prog
    shutil.rmtree(folder, ignore_errors=True)
    part.rename(folder)
    return {
        "source": (
            f"export:torch=={torch.__version__.split('+')[0]} transformers=={version('transformers')} "
            "Llama-3.2-1B config, random fp16 weights, dynamo exporter opset 18, KV cache"
        ),
        "parameters": params,
        "config": LLAMA_1B,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    folder = args.out / "llama-1b"
    if (folder / "model.onnx").exists() and (folder / "model.onnx.data").exists():
        print(f"{folder}: already there")
        return 0
    warnings.filterwarnings("ignore")
    torch.set_num_threads(2)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    t = time.time()
    facts = build(folder)
    facts["bytes"] = {p.name: p.stat().st_size for p in sorted(folder.glob("model.onnx*"))}
    (folder / "source.json").write_text(json.dumps(facts, indent=1))
    print(
        f"{folder}: {facts['parameters'] / 1e9:.2f}B parameters, {facts['bytes']} in {time.time() - t:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
