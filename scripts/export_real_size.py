#!/usr/bin/env python3
"""Exports issue 16's real-size models to tests/models/real/: GPT-2 small and a 12-layer
Llama-style model, each as a prompt graph and a decode-step graph, with transformers' defaults
(sdpa attention) as a new user gets them.

  gpt2_small.onnx          GPT2LMHeadModel: 12 layers, hidden 768, 12 heads, vocab 50257,
                           1024 positions. input_ids, attention_mask [batch, seq] -> logits
  gpt2_small_decode.onnx   the same model, one step: input_ids [batch, 1], attention_mask
                           [batch, past + 1], past_key_i/past_value_i [batch, 12, past, 64]
                           -> logits [batch, 1, vocab], present_key_i/present_value_i
  llama12.onnx             LlamaForCausalLM: 12 layers, hidden 768, 12 heads, 4 key/value
                           heads, intermediate 2048, vocab 32000, untied head
  llama12_decode.onnx      its decode step (past_key_i [batch, 4, past, 64])
  gpt2_12x128.onnx         GPT2LMHeadModel: 12 layers, hidden 128, 4 heads, vocab 50257 (the
                           12-layer GPT-2 of issue 16's browser comparison; prompt graph only)

Weights are random and do not come from torch: every initializer that is a copy of a torch
parameter (or of its transpose) becomes external data in NAME.onnx.data, marked in its
metadata_props with how scripts/gen_weights.py fills it from a seed (N(0, 0.02²) for matrices
and embeddings, ones for norm weights, zeros for biases). Only the graphs (a few hundred KB) are
committed; CI runs gen_weights.py. Other constants stay inside the file with torch's values.

Run once, by a developer, in the export venv (see scripts/export_models.py; ~2 min per model on
2 cores):

    .venv-export/bin/python scripts/export_real_size.py [--only NAME]
"""
from __future__ import annotations

import argparse
import hashlib
import io
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_weights  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "models" / "real"
OPSET = 17
ALIGN = 64
PAST = 7  # past length of the decode export's example inputs


def gpt2_small():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12,
                                      n_head=12)).eval()


def gpt2_12x128():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=1024, n_embd=128, n_layer=12,
                                      n_head=4)).eval()


def llama12():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048,
                                        num_hidden_layers=12, num_attention_heads=12,
                                        num_key_value_heads=4, max_position_embeddings=2048,
                                        tie_word_embeddings=False)).eval()


class Prompt(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


class Decode(torch.nn.Module):
    """One token with the past as flat tensors: (logits, present_key_0, present_value_0, ...)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, *past):
        from transformers import DynamicCache
        pairs = [(past[2 * i], past[2 * i + 1]) for i in range(len(past) // 2)]
        cache = DynamicCache(ddp_cache_data=pairs, config=self.m.config)
        out = self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache,
                     use_cache=True)
        present = []
        for layer in out.past_key_values.layers:
            present += [layer.keys, layer.values]
        return (out.logits, *present)


def kv_shape(m) -> tuple[int, int, int]:
    c = m.config
    heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    return c.num_hidden_layers, heads, c.hidden_size // c.num_attention_heads


def example(m, decode: bool, batch: int = 2, seq: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    vocab = m.config.vocab_size
    if not decode:
        return {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64),
                "attention_mask": np.ones((batch, seq), np.int64)}
    layers, heads, head = kv_shape(m)
    feeds = {"input_ids": rng.integers(0, vocab, (batch, 1)).astype(np.int64),
             "attention_mask": np.ones((batch, PAST + 1), np.int64)}
    for i in range(layers):
        for kind in ("key", "value"):
            feeds[f"past_{kind}_{i}"] = rng.standard_normal((batch, heads, PAST, head)).astype(
                np.float32)
    return feeds


def export(m, decode: bool) -> onnx.ModelProto:
    feeds = example(m, decode)
    layers = kv_shape(m)[0]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"}}
    outputs = ["logits"]
    axes["logits"] = {0: "batch", 1: "seq"}
    if decode:
        for i in range(layers):
            for kind in ("key", "value"):
                axes[f"past_{kind}_{i}"] = {0: "batch", 2: "past"}
                axes[f"present_{kind}_{i}"] = {0: "batch", 2: "total"}
                outputs.append(f"present_{kind}_{i}")
    else:
        axes["attention_mask"] = {0: "batch", 1: "seq"}
    module = Decode(m) if decode else Prompt(m)
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(torch.from_numpy(v) for v in feeds.values()), buf,
                          input_names=list(feeds), output_names=outputs, dynamic_axes=axes,
                          opset_version=OPSET, do_constant_folding=True, dynamo=False)
    return onnx.load_from_string(buf.getvalue())


def init_kind(name: str, shape: tuple[int, ...]) -> str:
    if len(shape) >= 2:
        return "normal 0.02"
    return "ones" if ("ln" in name or "norm" in name) and name.endswith("weight") else "zeros"


def externalize(model: onnx.ModelProto, m, location: str) -> tuple[int, int]:
    """Moves every initializer equal to a torch parameter (or its transpose) to `location`, with
    gen_weights' fill spec; returns (tensors, bytes)."""
    params: dict[str, str] = {}
    for name, p in m.named_parameters():
        a = p.detach().numpy()
        params.setdefault(hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest(),
                          init_kind(name, a.shape))
        if a.ndim == 2:
            params.setdefault(hashlib.sha1(np.ascontiguousarray(a.T).tobytes()).hexdigest(),
                              init_kind(name, a.shape))
    offset = count = 0
    for t in model.graph.initializer:
        if t.data_type != onnx.TensorProto.FLOAT or not t.raw_data:
            continue
        kind = params.get(hashlib.sha1(t.raw_data).hexdigest())
        if kind is None:
            continue
        offset = -(-offset // ALIGN) * ALIGN
        length = len(t.raw_data)
        t.ClearField("raw_data")
        t.data_location = onnx.TensorProto.EXTERNAL
        del t.external_data[:]
        for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
            t.external_data.add(key=k, value=v)
        t.metadata_props.add(key=gen_weights.KEY, value=kind)
        offset += length
        count += 1
    return count, offset


def ort_check(path: Path, m, decode: bool) -> str:
    feeds = example(m, decode)
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = s.run(None, feeds)
    assert all(np.isfinite(o).all() for o in out), f"{path.name}: non-finite outputs"
    return f"ok ({', '.join(str(list(o.shape)) for o in out[:3])}{', …' if len(out) > 3 else ''})"


MODELS = {"gpt2_small": (gpt2_small, False), "gpt2_small_decode": (gpt2_small, True),
          "llama12": (llama12, False), "llama12_decode": (llama12, True),
          "gpt2_12x128": (gpt2_12x128, False)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (build, decode) in MODELS.items():
        if args.only not in name:
            continue
        m = build()
        model = export(m, decode)
        path = OUT / f"{name}.onnx"
        n, size = externalize(model, m, f"{name}.onnx.data")
        path.write_bytes(model.SerializeToString())
        (OUT / f"{name}.onnx.data").unlink(missing_ok=True)
        gen_weights.generate(path)
        onnx.checker.check_model(str(path))
        print(f"{name}: {len(model.graph.node)} nodes, {n} external tensors ({size / 2**20:.0f} MiB), "
              f"graph file {path.stat().st_size / 1024:.0f} KiB; onnxruntime {ort_check(path, m, decode)}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
