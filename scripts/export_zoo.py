"""The model zoo of tests/models/zoo/: small random-weight exports for the real-model table
(tests/python/test_models.py). Run through `scripts/export_models.py --zoo` (same venv, see its
docstring); this module holds the builders and checks.

Every config is built in code and every weight comes from `torch.manual_seed(0)` (or, for the
derived files, from the committed float file they are made from): nothing is downloaded.

Files (tests/models/zoo/):
  llama_gqa_tiny.onnx        LlamaForCausalLM, 2 layers, hidden 64, 4 query heads sharing 2
                             key/value heads (grouped-query attention), SwiGLU MLP 128, RMSNorm,
                             rotary positions; logits [batch, seq, 1000]
  qwen2_tiny.onnx            Qwen2ForCausalLM, same sizes (GQA 4/2, q/k/v biases)
  phi_tiny.onnx              PhiForCausalLM, 2 layers, hidden 64, 4 heads, partial rotary (half
                             of each head), parallel attention + GELU MLP
  distilbert_tiny.onnx       DistilBertModel, 2 layers, dim 64, 4 heads, FFN 128
  vit_tiny.onnx              ViTForImageClassification, 32 x 32 images, 8 x 8 patches, 2 layers,
                             hidden 64, 4 heads, 10 classes
  whisper_encoder_tiny.onnx  WhisperModel's encoder, 80 mel bins, 128 frames (64 positions after
                             the stride-2 conv), 2 layers, d_model 64, 4 heads
  gpt2_tiny_dynamo.onnx      tests/models' GPT-2 module through the dynamo exporter
                             (torch.onnx.export(..., dynamo=True), opset 20)
  llama_gqa_tiny_dynamo.onnx the Llama above through the dynamo exporter
  bert_tiny_int8.onnx        tests/models/bert_tiny_op17.onnx through
                             onnxruntime.quantization.quantize_dynamic (int8 weights,
                             DynamicQuantizeLinear + MatMulInteger)
  llama_gqa_tiny_int4.onnx   llama_gqa_tiny.onnx through MatMulNBitsQuantizer (4-bit symmetric,
                             block 32: com.microsoft.MatMulNBits)
  llama_gqa_tiny_int4_qdq.onnx  the same quantization in QDQ form (quant_format=QuantFormat.QDQ):
                             DequantizeLinear(int4 weight, block 32) -> MatMul, opset 21
  gpt2_tiny_fp16.onnx        tests/models/gpt2_tiny_op17.onnx through
                             onnxruntime.transformers.float16.convert_float_to_float16
                             (keep_io_types=True: int64 ids in, float32 logits out, fp16 inside)
  llama_gqa_tiny_fp16.onnx   llama_gqa_tiny.onnx through the same float16 conversion: every
                             float Cast of the export now casts float16 to float16, so the
                             rotary tables (Cos/Sin) and the RMSNorms compute in float16
  llama_gqa_tiny_fp16_int4.onnx
                             llama_gqa_tiny_fp16.onnx through the 4-bit quantizer above
                             (MatMulNBits with float16 scales)
  llama_gqa_tiny_dynamo_fp16.onnx
                             llama_gqa_tiny_dynamo.onnx through the same float16 conversion
                             (its mask reads attention_mask by GatherND)
  qwen3_tiny_fp16.onnx       qwen3_tiny.onnx through the same float16 conversion
  gpt2_tiny_decode_fp16.onnx, llama_gqa_tiny_decode_fp16.onnx
                             the decode steps below through the same float16 conversion (the
                             cache in and out stays float32: present = Cast(Concat(Cast(past),
                             new))), nodes sorted topologically after it
  qwen3_tiny.onnx            Qwen3ForCausalLM, transformers' default (sdpa) attention, GQA 4/2,
                             head_dim 16: the per-head q_norm / k_norm RMSNorm before the head
                             Transpose
  gemma3_tiny.onnx           Gemma3ForCausalLM (text), sdpa, GQA 4/2, head_dim 16: (1 + w)
                             RMSNorms around attention and MLP, per-head q/k norm after the head
                             Transpose, gelu-tanh GeGLU MLP, embedding scale, layer 0 with a
                             sliding window of 4 (its mask), layer 1 full attention
  phi3_tiny.onnx             Phi3ForCausalLM, sdpa, GQA 4/2: fused qkv_proj (Slices) and
                             gate_up_proj, its rotary written as the partial form with an empty
                             pass part
  gpt2_tiny_decode.onnx      tests/models' GPT-2 (sdpa, transformers' default) as a decode step:
                             input_ids [batch, seq] after past_key_i/past_value_i [batch, 4,
                             past, 16] (a DynamicCache), attention_mask [batch, total]; logits
                             and present_key_i/present_value_i [batch, 4, total, 16]. Exported
                             with 3 new tokens after 5 cached (several new tokens, so nothing is
                             traced for one)
  llama_gqa_tiny_decode.onnx the sdpa Llama above (GQA 4/2) as the same decode step (past and
                             present [batch, 2, past/total, 16])
  llama_gqa_tiny_decode1.onnx
                             the same step exported with one new token: torch writes sdpa's
                             grouped-query attention for that shape by grouping the query heads
                             (Reshape [batch, 4, 2, 16] -> [batch, 2, 2, 16]) instead of
                             repeating the cache, so the graph runs for seq = 1 only
  gptj_tiny.onnx             GPTJForCausalLM, sdpa, 2 layers, hidden 64, 4 heads of 16:
                             interleaved ("rotate every two") rotary on the first 8 channels of
                             each head (rotary_dim 8), sin/cos rows gathered from one table,
                             applied on [batch, seq, heads, head] before the head transpose
  codegen_tiny.onnx          CodeGenForCausalLM, 2 layers, hidden 64, 4 heads of 16: GPT-J's
                             interleaved rotary on the first 8 channels, q/k/v from one qkv_proj
  gptj_tiny_dynamo.onnx      gptj_tiny through the dynamo exporter: repeat_interleave of the
                             sin/cos rows as Expand, the rows gathered by GatherND
  llama_gqa_tiny_decode_dynamo.onnx
                             llama_gqa_tiny_decode through the dynamo exporter (the mask's total
                             is its own dim: torch does not tie it to past + seq, which the
                             present outputs declare)
  llama_gqa_tiny_decode1_dynamo.onnx
                             the same step through the dynamo exporter with one new token (seq
                             static at 1; outputs [batch, 2, past + 1, 16])
  llama_gqa_tiny_op23.onnx, phi_tiny_op23.onnx, gpt2_tiny_op23.onnx
                             the Llama, Phi and GPT-2 through the dynamo exporter at opset 23:
                             RMSNormalization / LayerNormalization and the standard
                             RotaryEmbedding written by the exporter, its caches [1, seq, r/2],
                             which onnxruntime runs at batch 1 only (so Llama and Phi are
                             checked against torch there)
  vit_tiny_op23.onnx, whisper_encoder_tiny_op23.onnx
                             the ViT and the Whisper encoder through the dynamo exporter at
                             opset 23: the standard Gelu (opset 20) after each bias Add
  bloom_tiny.onnx            BloomForCausalLM, 2 layers, hidden 64, 4 heads: ALiBi biases, the
                             heads folded into the batch (batch * 4 rows) and divided back out,
                             BLOOM's factored tanh GELU
  gpt_neox_tiny_dynamo.onnx  GPTNeoXForCausalLM (sdpa) through the dynamo exporter: the packed
                             per-head qkv cut by one Split of the transposed heads, partial
                             rotary (4 of 16 channels), parallel residual
  t5_encoder_tiny.onnx       T5EncoderModel (eager: T5 has no sdpa), d_model 64, 4 heads of 16,
                             gated-gelu FFN 128: RMSNorm without mean, unscaled scores plus the
                             relative position bias plus the padding mask
  t5_tiny.onnx               T5ForConditionalGeneration, the same sizes as t5_encoder_tiny with a
                             2-layer decoder: its self-attention adds the relative position bias
                             and the causal mask; logits for decoder_input_ids [batch, dseq]
  graphs/mobilenet_v3_small.onnx, graphs/resnet18.onnx
                             torchvision's full architectures (random init), [batch, 3, 224, 224]
                             -> logits [batch, 1000]. Their weights (10 and 47 MB) are not
                             committed: each Conv/Gemm weight and bias is replaced by a
                             ConstantOfShape of its shape, the format of the onnx wheel's light
                             models, and scripts/fetch_models.py fills them with seeded values
                             into tests/data/models/torchvision/ (batch norm is folded into the
                             convs by the exporter, so there is nothing else to fill). The
                             full-weight export is checked against torch before stripping.
  graphs/mobilenet_v3_small_dynamo.onnx, graphs/resnet18_dynamo.onnx
                             the same two through the dynamo exporter (opset 20; batch norm
                             folded by its optimizer too), stripped and filled the same way

Checks: onnx.checker (full) on every file; onnxruntime vs torch (max |diff| <= 1e-4) on seeded
inputs at two or three shapes for the exports; for the derived files, onnxruntime on the derived
vs on the float file, reported and bounded by what the conversion itself costs (stated below).

The derived files (int8, int4, fp16) are made and checked by scripts/zoo_derived.py, which needs
no torch and can remake one of them alone.
"""
from __future__ import annotations

import inspect
import io
import tempfile
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import torch

import export_models as em
from export_real_size import Decode as DecodeStep  # the real-size decode exports' module
from zoo_derived import ZOO, describe, export_derived, histogram_line, max_abs, ort_run, \
    save_checked, table_row

GRAPHS = ZOO / "graphs"
OPSET_LEGACY = 17
OPSET_DYNAMO = 20
OPSET_STANDARD = 23  # ai.onnx Attention, RotaryEmbedding and RMSNormalization
IMAGE = 32  # ViT input side
MEL_BINS, FRAMES = 80, 128  # Whisper encoder input


# ---------------------------------------------------------------------------------------------
# modules (each returns plain tensors)


class CausalLmLogits(torch.nn.Module):
    """A transformers causal LM -> logits only (no cache)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                      return_dict=True).logits


class LastHidden(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask,
                      return_dict=True).last_hidden_state


class ImageLogits(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, pixel_values):
        return self.m(pixel_values=pixel_values, return_dict=True).logits


class EncoderHidden(torch.nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_features):
        return self.encoder(input_features=input_features, return_dict=True).last_hidden_state


class Seq2SeqLogits(torch.nn.Module):
    """An encoder-decoder LM -> logits for the decoder tokens (no cache)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        return self.m(input_ids=input_ids, attention_mask=attention_mask,
                      decoder_input_ids=decoder_input_ids, use_cache=False,
                      return_dict=True).logits


def text_config(**extra) -> dict:
    return dict(vocab_size=em.VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=128, use_cache=False,
                attn_implementation="eager", **extra)


def build_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(**text_config(num_key_value_heads=2, tie_word_embeddings=False))
    return CausalLmLogits(LlamaForCausalLM(cfg)).eval()


def build_llama_sdpa():
    """The Llama above with transformers' default attention (torch's scaled_dot_product_attention:
    Q and Kᵀ scaled by √scale each, Where(IsNaN(P), 0, P) after the Softmax)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(**{**text_config(num_key_value_heads=2, tie_word_embeddings=False),
                         "attn_implementation": "sdpa"})
    return CausalLmLogits(LlamaForCausalLM(cfg)).eval()


def build_gpt2_sdpa():
    """tests/models' GPT-2 with transformers' default (sdpa) attention."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=em.VOCAB, n_positions=128, n_embd=64, n_layer=2, n_head=4,
                     bos_token_id=em.VOCAB - 1, eos_token_id=em.VOCAB - 1, use_cache=False,
                     attn_implementation="sdpa")
    return CausalLmLogits(GPT2LMHeadModel(cfg)).eval()


def build_gpt2_decode():
    return DecodeStep(build_gpt2_sdpa().m).eval()


def build_llama_decode():
    return DecodeStep(build_llama_sdpa().m).eval()


def build_qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    cfg = Qwen2Config(**text_config(num_key_value_heads=2, tie_word_embeddings=False,
                                    use_sliding_window=False))
    return CausalLmLogits(Qwen2ForCausalLM(cfg)).eval()


def build_phi():
    from transformers import PhiConfig, PhiForCausalLM
    torch.manual_seed(0)
    cfg = PhiConfig(**text_config(partial_rotary_factor=0.5))
    return CausalLmLogits(PhiForCausalLM(cfg)).eval()


def sdpa_config(**extra) -> dict:
    """text_config with transformers' default attention (sdpa), as a user's export gets it."""
    return {**text_config(**extra), "attn_implementation": "sdpa"}


def build_qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(0)
    cfg = Qwen3Config(**sdpa_config(num_key_value_heads=2, head_dim=16, tie_word_embeddings=False))
    return CausalLmLogits(Qwen3ForCausalLM(cfg)).eval()


def build_gemma3():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    torch.manual_seed(0)
    cfg = Gemma3TextConfig(**sdpa_config(
        num_key_value_heads=2, head_dim=16, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"]))
    return CausalLmLogits(Gemma3ForCausalLM(cfg)).eval()


def build_phi3():
    from transformers import Phi3Config, Phi3ForCausalLM
    torch.manual_seed(0)
    # Token ids inside the small vocabulary (the defaults are Phi-3's, ~32k).
    cfg = Phi3Config(**sdpa_config(num_key_value_heads=2, pad_token_id=0, bos_token_id=1,
                                   eos_token_id=2, tie_word_embeddings=False))
    return CausalLmLogits(Phi3ForCausalLM(cfg)).eval()


def build_gptj():
    """GPT-J: interleaved ("rotate every two") rotary on the first 8 of each head's 16 channels,
    its sin/cos rows gathered from one table by position, applied before the head transpose."""
    from transformers import GPTJConfig, GPTJForCausalLM
    torch.manual_seed(0)
    cfg = GPTJConfig(vocab_size=em.VOCAB, n_positions=128, n_embd=64, n_layer=2, n_head=4,
                     rotary_dim=8, bos_token_id=em.VOCAB - 1, eos_token_id=em.VOCAB - 1,
                     use_cache=False, attn_implementation="sdpa", tie_word_embeddings=False)
    return CausalLmLogits(GPTJForCausalLM(cfg)).eval()


def build_codegen():
    """CodeGen: GPT-J's interleaved partial rotary (rotary_dim 8 of 16-channel heads) with q, k and
    v from one fused qkv_proj, split per group of heads; GELU-new MLP; eager attention."""
    from transformers import CodeGenConfig, CodeGenForCausalLM
    torch.manual_seed(0)
    cfg = CodeGenConfig(vocab_size=em.VOCAB, n_positions=128, n_ctx=128, n_embd=64, n_layer=2,
                        n_head=4, rotary_dim=8, bos_token_id=em.VOCAB - 1,
                        eos_token_id=em.VOCAB - 1, use_cache=False, tie_word_embeddings=False)
    return CausalLmLogits(CodeGenForCausalLM(cfg)).eval()


def build_bloom():
    """BLOOM: ALiBi position biases (no rotary), heads folded into the batch for the baddbmm
    and divided back out (batch * heads // heads), its tanh GELU written as
    x * 0.5 * (1 + tanh(0.79788456 * x * (1 + 0.044715 * x * x)))."""
    from transformers import BloomConfig, BloomForCausalLM
    torch.manual_seed(0)
    cfg = BloomConfig(vocab_size=em.VOCAB, hidden_size=64, n_layer=2, n_head=4, use_cache=False,
                      attn_implementation="eager", bos_token_id=1, eos_token_id=2)
    return CausalLmLogits(BloomForCausalLM(cfg)).eval()


def build_gpt_neox():
    """GPT-NeoX (Pythia): one packed qkv projection laid out per head ([.., heads, 3 * 16]),
    partial rotary on a quarter of each head, parallel attention and MLP residuals, sdpa."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
    torch.manual_seed(0)
    cfg = GPTNeoXConfig(**sdpa_config(rotary_pct=0.25, tie_word_embeddings=False))
    return CausalLmLogits(GPTNeoXForCausalLM(cfg)).eval()


def build_t5():
    """The whole T5 (encoder and decoder): the decoder's self-attention adds the relative position
    bias and the causal mask, its cross-attention the encoder's padding mask."""
    from transformers import T5Config, T5ForConditionalGeneration
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=em.VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                   decoder_start_token_id=0, attn_implementation="eager")
    return Seq2SeqLogits(T5ForConditionalGeneration(cfg)).eval()


def build_t5_encoder():
    from transformers import T5Config, T5EncoderModel
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=em.VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                   feed_forward_proj="gated-gelu", attn_implementation="eager")
    return LastHidden(T5EncoderModel(cfg)).eval()


def build_distilbert():
    from transformers import DistilBertConfig, DistilBertModel
    torch.manual_seed(0)
    cfg = DistilBertConfig(vocab_size=em.VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                           max_position_embeddings=128, attn_implementation="eager")
    return LastHidden(DistilBertModel(cfg)).eval()


def build_vit():
    from transformers import ViTConfig, ViTForImageClassification
    torch.manual_seed(0)
    cfg = ViTConfig(image_size=IMAGE, patch_size=8, num_channels=3, hidden_size=64,
                    num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                    num_labels=10, attn_implementation="eager")
    return ImageLogits(ViTForImageClassification(cfg)).eval()


def build_whisper_encoder():
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    torch.manual_seed(0)
    # Token ids inside the small vocabulary (the defaults are GPT-2's, ~50k); the decoder is
    # not built.
    cfg = WhisperConfig(vocab_size=em.VOCAB, num_mel_bins=MEL_BINS, d_model=64,
                        encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128,
                        max_source_positions=FRAMES // 2, pad_token_id=0, bos_token_id=1,
                        eos_token_id=2, decoder_start_token_id=3, attn_implementation="eager")
    return EncoderHidden(WhisperEncoder(cfg)).eval()


def build_torchvision(name: str) -> Callable[[], torch.nn.Module]:
    """torchvision's architecture with its random init, except that the classifier's Linear
    layers get He-normal weights (torchvision draws them from N(0, 0.01^2), which leaves
    MobileNetV3-small's logits at ~1e-9, too small for the check against torch to mean
    anything) and batch norms get non-trivial statistics (their init, mean 0 and variance 1,
    would fold away to nothing)."""
    def build():
        import torchvision
        torch.manual_seed(0)
        m = getattr(torchvision.models, name)(weights=None)
        for mod in m.modules():
            if isinstance(mod, torch.nn.Linear):
                torch.nn.init.kaiming_normal_(mod.weight, nonlinearity="relu")
            elif isinstance(mod, torch.nn.BatchNorm2d):
                torch.nn.init.uniform_(mod.weight, 0.8, 1.2)
                torch.nn.init.normal_(mod.bias, 0.0, 0.1)
                mod.running_mean.normal_(0.0, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
        return m.eval()
    return build


# ---------------------------------------------------------------------------------------------
# inputs

TEXT = ["input_ids", "attention_mask"]


def text_feeds(batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    return em.sample_inputs(TEXT, seed=seed, batch=batch, seq=seq)


LAYERS = 2  # text_config's


def seq2seq_feeds(batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    """text_feeds plus decoder tokens: the first five of the input's (fewer for a shorter input)."""
    feeds = text_feeds(batch, seq, seed)
    feeds["decoder_input_ids"] = feeds["input_ids"][:, :5].copy()
    return feeds


def decode_feeds(kv_heads: int, head: int) -> Callable[[int, int, int], dict[str, np.ndarray]]:
    """A decode step's inputs: seq new tokens after past = seq + 2 cached ones (a mask of ones
    over past + seq, the cache random)."""
    def make(batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
        past = seq + 2
        rng = np.random.default_rng(seed)
        feeds = {"input_ids": rng.integers(0, em.VOCAB, (batch, seq)).astype(np.int64),
                 "attention_mask": np.ones((batch, past + seq), np.int64)}
        for i in range(LAYERS):
            for kind in ("key", "value"):
                feeds[f"past_{kind}_{i}"] = rng.standard_normal(
                    (batch, kv_heads, past, head)).astype(np.float32)
        return feeds
    return make


def decode_outputs() -> list[str]:
    return ["logits"] + [f"present_{k}_{i}" for i in range(LAYERS) for k in ("key", "value")]


def decode_axes(one_token: bool = False) -> dict:
    """The decode step's dynamic axes; `one_token`: seq is not one of them (traced at 1)."""
    seq = {} if one_token else {1: "seq"}
    axes = {"input_ids": {0: "batch", **seq}, "attention_mask": {0: "batch", 1: "total"},
            "logits": {0: "batch", **seq}}
    for i in range(LAYERS):
        for kind in ("key", "value"):
            axes[f"past_{kind}_{i}"] = {0: "batch", 2: "past"}
            axes[f"present_{kind}_{i}"] = {0: "batch", 2: "total"}
    return axes


DECODE_SHAPES = [(2, 3), (1, 1), (3, 2)]
# Traced with one new token: torch writes sdpa's grouped-query heads for that shape only.
DECODE_ONE_SHAPES = [(2, 1), (1, 1), (3, 1)]


def image_feeds(side: int) -> Callable[[int, int, int], dict[str, np.ndarray]]:
    def make(batch: int, _seq: int, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {"pixel_values": rng.standard_normal((batch, 3, side, side)).astype(np.float32)}
    return make


def mel_feeds(batch: int, _seq: int, seed: int) -> dict[str, np.ndarray]:
    """Log-mel-like features: Whisper's are clamped log10 energies scaled to about [-1, 1]."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, (batch, MEL_BINS, FRAMES)).astype(np.float32)
    return {"input_features": x}


# ---------------------------------------------------------------------------------------------
# exporters and checks


def export_legacy(module, feeds: dict[str, np.ndarray], outputs: list[str],
                  axes: dict[str, dict[int, str]], path: Path) -> onnx.ModelProto:
    """torch.onnx.export(dynamo=False) at OPSET_LEGACY, weights inside the file."""
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, buf, input_names=list(feeds), output_names=outputs,
                          dynamic_axes=axes, opset_version=OPSET_LEGACY,
                          do_constant_folding=True, dynamo=False)
    return save_checked(onnx.load_from_string(buf.getvalue()), path)


def export_dynamo(module, feeds: dict[str, np.ndarray], outputs: list[str],
                  axes: dict[str, dict[int, str]], path: Path,
                  opset: int = OPSET_DYNAMO) -> onnx.ModelProto:
    """torch.onnx.export(dynamo=True) at `opset` with the same dynamic axes, optimized by the
    exporter (its default), weights inside the file."""
    dims: dict[str, torch.export.Dim] = {}
    specs = []
    for name in feeds:
        spec = {}
        for axis, label in axes.get(name, {}).items():
            if label not in dims:
                dims[label] = torch.export.Dim(label, min=2, max=128) if label == "seq" \
                    else torch.export.Dim(label)
            spec[axis] = dims[label]
        specs.append(spec)
    # Positional (a module's own argument names need not be the input names); the inputs taken
    # by a `*past` parameter (the decode step's cache) go in one tuple, as torch.export wants.
    params = list(inspect.signature(module.forward).parameters.values())
    named = [p for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        specs = specs[:len(named)] + [tuple(specs[len(named):])]
    shapes = tuple(specs)
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, args, input_names=list(feeds), output_names=outputs,
                                    dynamic_shapes=shapes, opset_version=opset,
                                    dynamo=True, optimize=True, verbose=False)
    return save_checked(program.model_proto, path)


def export_dynamo_standard(module, feeds: dict[str, np.ndarray], outputs: list[str],
                           axes: dict[str, dict[int, str]], path: Path) -> onnx.ModelProto:
    """export_dynamo at OPSET_STANDARD, where sdpa is written as the standard Attention."""
    return export_dynamo(module, feeds, outputs, axes, path, OPSET_STANDARD)


def check_vs_torch(module, path: Path, make_feeds, shapes: list[tuple[int, int]]) -> float:
    """max |onnxruntime - torch| over `shapes` ((batch, seq) pairs), each <= em.TOL; returns the
    first shape's."""
    first = None
    for batch, seq in shapes:
        feeds = make_feeds(batch, seq, 1)
        with torch.no_grad():
            want = module(*(torch.from_numpy(v) for v in feeds.values()))
        want = [want] if isinstance(want, torch.Tensor) else list(want)
        d = max_abs(ort_run(path, feeds), [w.numpy() for w in want],
                    f"{path.name} (batch {batch}, seq {seq})")
        assert d <= em.TOL, f"{path.name} (batch {batch}, seq {seq}): max |ORT - torch| = {d:.3g}"
        first = d if first is None else first
    return first


def strip_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """The graph with every float initializer a Conv or Gemm reads as weight or bias replaced by
    ConstantOfShape(<name>__SHAPE) (value 0.02): the onnx wheel's light-model format, which
    scripts/fetch_models.py fills with seeded values."""
    g = model.graph
    weights = {n.input[i] for n in g.node if n.op_type in ("Conv", "Gemm")
               for i in (1, 2) if i < len(n.input)}
    keep, stubs = [], []
    for t in g.initializer:
        if t.name in weights and t.data_type == onnx.TensorProto.FLOAT:
            shape_name = f"{t.name}__SHAPE"
            keep.append(onnx.numpy_helper.from_array(np.array(t.dims, dtype=np.int64), shape_name))
            stubs.append(onnx.helper.make_node(
                "ConstantOfShape", [shape_name], [t.name], name=f"{t.name}__fill",
                value=onnx.helper.make_tensor("value", onnx.TensorProto.FLOAT, [1], [0.02])))
        else:
            keep.append(t)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep)
    nodes = list(out.graph.node)
    del out.graph.node[:]
    out.graph.node.extend(stubs + nodes)
    onnx.checker.check_model(out, full_check=True)
    return out


# ---------------------------------------------------------------------------------------------
# the zoo

TEXT_AXES = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
TEXT_SHAPES = [(em.BATCH, em.SEQ), (3, 5), (1, 128)]
# torch's opset-23 exports write the rotary as the standard RotaryEmbedding with [1, seq, r/2]
# caches, which onnxruntime runs at batch 1 only (the spec wants [batch, seq, r/2]): checked there.
ONE_ROW_SHAPES = [(1, em.SEQ), (1, 5), (1, 128)]


def lm_axes(out: str) -> dict:
    return {**TEXT_AXES, out: {0: "batch", 1: "seq"}}


# name -> (builder, make_feeds, outputs, dynamic axes, shapes checked, exporter)
EXPORTS = {
    "llama_gqa_tiny": (build_llama, text_feeds, ["logits"], lm_axes("logits"), TEXT_SHAPES,
                       export_legacy),
    "gpt2_tiny_sdpa": (build_gpt2_sdpa, text_feeds, ["logits"], lm_axes("logits"), TEXT_SHAPES,
                       export_legacy),
    "llama_gqa_tiny_sdpa": (build_llama_sdpa, text_feeds, ["logits"], lm_axes("logits"),
                            TEXT_SHAPES, export_legacy),
    "qwen2_tiny": (build_qwen2, text_feeds, ["logits"], lm_axes("logits"), TEXT_SHAPES,
                   export_legacy),
    "phi_tiny": (build_phi, text_feeds, ["logits"], lm_axes("logits"), TEXT_SHAPES,
                 export_legacy),
    "qwen3_tiny": (build_qwen3, text_feeds, ["logits"], lm_axes("logits"), TEXT_SHAPES,
                   export_legacy),
    "gemma3_tiny": (build_gemma3, text_feeds, ["logits"], lm_axes("logits"), TEXT_SHAPES,
                    export_legacy),
    "phi3_tiny": (build_phi3, text_feeds, ["logits"], lm_axes("logits"), TEXT_SHAPES,
                  export_legacy),
    "gptj_tiny": (build_gptj, text_feeds, ["logits"], lm_axes("logits"), TEXT_SHAPES,
                  export_legacy),
    "codegen_tiny": (build_codegen, text_feeds, ["logits"], lm_axes("logits"), TEXT_SHAPES,
                     export_legacy),
    "gptj_tiny_dynamo": (build_gptj, text_feeds, ["logits"], lm_axes("logits"), TEXT_SHAPES,
                         export_dynamo),
    "gpt2_tiny_decode": (build_gpt2_decode, decode_feeds(4, 16), decode_outputs(),
                         decode_axes(), DECODE_SHAPES, export_legacy),
    "llama_gqa_tiny_decode": (build_llama_decode, decode_feeds(2, 16), decode_outputs(),
                              decode_axes(), DECODE_SHAPES, export_legacy),
    "llama_gqa_tiny_decode1": (build_llama_decode, decode_feeds(2, 16), decode_outputs(),
                               decode_axes(), DECODE_ONE_SHAPES, export_legacy),
    "llama_gqa_tiny_decode_dynamo": (build_llama_decode, decode_feeds(2, 16), decode_outputs(),
                                     decode_axes(), DECODE_SHAPES, export_dynamo),
    "llama_gqa_tiny_decode1_dynamo": (build_llama_decode, decode_feeds(2, 16), decode_outputs(),
                                      decode_axes(one_token=True), DECODE_ONE_SHAPES,
                                      export_dynamo),
    "t5_encoder_tiny": (build_t5_encoder, text_feeds, ["last_hidden_state"],
                        lm_axes("last_hidden_state"), TEXT_SHAPES, export_legacy),
    "distilbert_tiny": (build_distilbert, text_feeds, ["last_hidden_state"],
                        lm_axes("last_hidden_state"), TEXT_SHAPES, export_legacy),
    "vit_tiny": (build_vit, image_feeds(IMAGE), ["logits"],
                 {"pixel_values": {0: "batch"}, "logits": {0: "batch"}},
                 [(2, 0), (1, 0), (3, 0)], export_legacy),
    "whisper_encoder_tiny": (build_whisper_encoder, mel_feeds, ["last_hidden_state"],
                             {"input_features": {0: "batch"}, "last_hidden_state": {0: "batch"}},
                             [(2, 0), (1, 0)], export_legacy),
    "vit_tiny_op23": (build_vit, image_feeds(IMAGE), ["logits"],
                      {"pixel_values": {0: "batch"}, "logits": {0: "batch"}},
                      [(2, 0), (1, 0), (3, 0)], export_dynamo_standard),
    "whisper_encoder_tiny_op23": (build_whisper_encoder, mel_feeds, ["last_hidden_state"],
                                  {"input_features": {0: "batch"},
                                   "last_hidden_state": {0: "batch"}},
                                  [(2, 0), (1, 0)], export_dynamo_standard),
    "gpt2_tiny_dynamo": (em.build_gpt2, text_feeds, ["logits"], lm_axes("logits"), TEXT_SHAPES,
                         export_dynamo),
    "llama_gqa_tiny_dynamo": (build_llama, text_feeds, ["logits"], lm_axes("logits"),
                              TEXT_SHAPES, export_dynamo),
    "llama_gqa_tiny_op23": (build_llama, text_feeds, ["logits"], lm_axes("logits"),
                            ONE_ROW_SHAPES, export_dynamo_standard),
    "phi_tiny_op23": (build_phi, text_feeds, ["logits"], lm_axes("logits"), ONE_ROW_SHAPES,
                      export_dynamo_standard),
    "gpt2_tiny_op23": (em.build_gpt2, text_feeds, ["logits"], lm_axes("logits"), TEXT_SHAPES,
                       export_dynamo_standard),
    "bloom_tiny": (build_bloom, text_feeds, ["logits"], lm_axes("logits"), TEXT_SHAPES,
                   export_legacy),
    "gpt_neox_tiny_dynamo": (build_gpt_neox, text_feeds, ["logits"], lm_axes("logits"),
                             TEXT_SHAPES, export_dynamo),
    "t5_tiny": (build_t5, seq2seq_feeds, ["logits"],
                {**TEXT_AXES, "decoder_input_ids": {0: "batch", 1: "dseq"},
                 "logits": {0: "batch", 1: "dseq"}}, TEXT_SHAPES, export_legacy),
    "graphs/mobilenet_v3_small": (build_torchvision("mobilenet_v3_small"), image_feeds(224),
                                  ["logits"], {"pixel_values": {0: "batch"},
                                               "logits": {0: "batch"}},
                                  [(1, 0), (2, 0)], export_legacy),
    "graphs/resnet18": (build_torchvision("resnet18"), image_feeds(224), ["logits"],
                        {"pixel_values": {0: "batch"}, "logits": {0: "batch"}},
                        [(1, 0), (2, 0)], export_legacy),
    "graphs/mobilenet_v3_small_dynamo": (build_torchvision("mobilenet_v3_small"),
                                         image_feeds(224), ["logits"],
                                         {"pixel_values": {0: "batch"}, "logits": {0: "batch"}},
                                         [(1, 0), (2, 0)], export_dynamo),
    "graphs/resnet18_dynamo": (build_torchvision("resnet18"), image_feeds(224), ["logits"],
                               {"pixel_values": {0: "batch"}, "logits": {0: "batch"}},
                               [(1, 0), (2, 0)], export_dynamo),
}


def export_all(only: set[str] | None) -> list[dict]:
    rows = []
    for name, (build, make_feeds, outputs, axes, shapes, exporter) in EXPORTS.items():
        if only and name not in only:
            continue
        module = build()
        path = ZOO / f"{name}.onnx"
        with tempfile.TemporaryDirectory() as tmp:
            # A stripped file is checked against torch with its full weights first.
            full = Path(tmp) / "full.onnx" if name.startswith("graphs/") else path
            model = exporter(module, make_feeds(*shapes[0], 0), outputs, axes, full)
            diff = check_vs_torch(module, full, make_feeds, shapes)
            if full != path:
                model = save_checked(strip_weights(model), path)
        row = describe(path, model) | {"check": f"max \\|ORT - torch\\| {diff:.2e}"}
        rows.append(row)
        print(f"{path.relative_to(em.REPO)}: {row['bytes']:,} bytes, {row['nodes']} nodes, "
              f"{row['check']}")
    rows += export_derived(only)
    return rows


# ---------------------------------------------------------------------------------------------
# README and VERSIONS


def write_readme(rows: list[dict], command: str) -> None:
    """tests/models/zoo/README.md and VERSIONS.txt (a partial export, --only, updates the README's
    rows instead: zoo_derived.update_readme)."""
    v = em.versions()
    (ZOO / "VERSIONS.txt").write_text(
        "".join(f"{k} {val}\n" for k, val in v.items())
        + f"torchvision {_torchvision_version()}\ndate {em.datetime.date.today().isoformat()}\n"
        + f"command {command}\n")
    md = [
        "# tests/models/zoo",
        "",
        "Small random-weight exports for the real-model table (`tests/python/test_models.py`, "
        "`docs/models.md`), made by `scripts/export_models.py --zoo` (builders and checks in "
        "`scripts/export_zoo.py`, whose docstring describes each file). No hub download: configs "
        "are built in code, weights come from `torch.manual_seed(0)`; the int8, int4 and fp16 "
        "files are made from committed float files by onnxruntime's own tools. Regenerate with:",
        "",
        "```",
        "python3 -m venv .venv-export",
        ".venv-export/bin/pip install torch torchvision transformers onnx==1.23.2 "
        "onnxruntime==1.32.0 numpy onnxscript",
        command,
        "```",
        "",
        "A derived file alone, without torch: `.venv/bin/python scripts/zoo_derived.py NAME` "
        "(the int4 files need `pip install onnx-ir`), which rewrites its row and histogram line "
        "here.",
        "",
        f"Made with torch {v['torch']}, torchvision {_torchvision_version()}, transformers "
        f"{v['transformers']}, onnx {v['onnx']}, onnxruntime {v['onnxruntime']} (see "
        "`VERSIONS.txt`). Legacy exports use `torch.onnx.export(..., dynamo=False)` at opset "
        f"{OPSET_LEGACY}, eager attention (the `*_sdpa` files, Qwen3, Gemma3 and Phi-3: sdpa, "
        "transformers' default), no key/value cache; the `*_dynamo` files use "
        f"`dynamo=True` at opset {OPSET_DYNAMO}. Checked: `onnx.checker.check_model(full_check="
        "True)` on each file; onnxruntime (CPU) vs torch on seeded inputs at two or three shapes "
        "(text: batch 2 seq 8 with two padded positions, batch 3 seq 5, batch 1 seq 128), max "
        "|diff| <= 1e-4; each derived file vs its float source in onnxruntime, within what the "
        "conversion costs.",
        "",
        "`graphs/` holds torchvision's MobileNetV3-small and ResNet-18 without their weights "
        "(10 and 47 MB): every Conv/Gemm weight and bias is a `ConstantOfShape` of its shape, "
        "as in the onnx wheel's light models. `scripts/fetch_models.py` fills them with seeded "
        "values into `tests/data/models/torchvision/`, which is what the tests run. The full-"
        "weight export was checked against torch before stripping.",
        "",
        "| file | bytes | nodes | opsets | inputs | outputs | check |",
        "|---|---:|---:|---|---|---|---|",
    ]
    md += [table_row(r) for r in rows]
    md += ["", "## Op histograms", ""]
    for r in rows:
        md += [histogram_line(r), ""]
    (ZOO / "README.md").write_text("\n".join(md).rstrip() + "\n")


def _torchvision_version() -> str:
    import torchvision
    return torchvision.__version__
