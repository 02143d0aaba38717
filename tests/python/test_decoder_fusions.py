"""The decoder fusions with onnxruntime as the client, on our Llama / Qwen / Phi / Qwen3 / Gemma3 /
Phi-3 exports: `rotary`
(rotate-half RoPE → com.microsoft.RotaryEmbedding; q and k of both layers, Phi's partial rotary on
its sliced q/k) and `multi_head_attention` (the attention of every Llama/Qwen/Phi layer →
com.microsoft.MultiHeadAttention, its mask as attention_bias). onnxruntime (CPU) runs the optimized
model within 1e-4 of the original at several batch × seq sizes, left padding included (the rotary
caches are the model's own per-token tables and the mask keeps its meaning, so nothing assumes right
padding). What the anchors fuse on the same files is tests/python/test_anchors.py.

Run from the repository root:

    FUSELAB_BIN=$PWD/target/release/fuselab .venv/bin/python -m pytest -q tests/python/test_decoder_fusions.py
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import REPO, optimized_ops

# llama_gqa_tiny_sdpa: transformers' default attention (Q and Kᵀ each scaled by √scale, the
# Where(IsNaN(P), 0, P) guard after the Softmax).
# qwen3_tiny / gemma3_tiny: a per-head RMSNorm of q and k, before (Qwen3) or after (Gemma3) the
# head Transpose; the query is normed on [B, S, N, D] and merged back by one Reshape. phi3_tiny: q,
# k, v sliced from one qkv_proj, the rotary written as the partial form with an empty pass part.
# gpt_neox_tiny_dynamo: q, k, v cut from the transposed per-head qkv by one Split (`head_split`),
# partial rotary on 4 of 16 channels.
DECODERS = ["llama_gqa_tiny", "llama_gqa_tiny_dynamo", "llama_gqa_tiny_int4", "llama_gqa_tiny_sdpa",
            "qwen2_tiny", "phi_tiny", "qwen3_tiny", "gemma3_tiny", "phi3_tiny",
            "gpt_neox_tiny_dynamo"]

# The other fusions of the newer families, exactly: (plain RMS norms, residual + RMS norms, MLP
# activation op, its count). Qwen3: 5 + 4 q/k norms; Gemma3: four norms a layer (input,
# post-attention, pre- and post-feed-forward) + the final one and the 4 q/k norms, its MLP
# gelu-tanh (FastGelu); SiLU is QuickGelu(alpha 1).
FAMILY_FUSIONS = {
    "qwen3_tiny": (5, 4, "QuickGelu", 2),
    "gemma3_tiny": (9, 4, "FastGelu", 2),
    "phi3_tiny": (1, 4, "QuickGelu", 2),
}


@pytest.mark.parametrize("stem", list(FAMILY_FUSIONS))
def test_norms_and_activations_of_the_newer_families(fuselab, tmp_path, stem):
    plain, skip, act, n = FAMILY_FUSIONS[stem]
    ops = optimized_ops(fuselab, REPO / "tests" / "models" / "zoo" / f"{stem}.onnx", tmp_path / "out.onnx")
    assert ops["SimplifiedLayerNormalization"] == plain, ops
    assert ops["SkipSimplifiedLayerNormalization"] == skip, ops
    assert ops[act] == n, ops
    for op in ("Pow", "Sqrt", "ReduceMean", "Sigmoid", "Tanh", "Softmax"):
        assert ops[op] == 0, (op, ops)


@pytest.mark.parametrize("stem", DECODERS)
def test_rotary_and_attention_fuse_and_run_in_onnxruntime(fuselab, tmp_path, stem):
    src = REPO / "tests" / "models" / "zoo" / f"{stem}.onnx"
    out = tmp_path / "out.onnx"
    ops = optimized_ops(fuselab, src, out)
    assert ops["RotaryEmbedding"] == 4, ops
    assert ops["Neg"] == 0, ops
    # Phi's partial rotary (q = Concat(rotated, pass-through)) moves onto the 3-D projection with
    # rotary_embedding_dim, like the full rotary of Llama/Qwen.
    assert ops["MultiHeadAttention"] == 2 and ops["Softmax"] == 0, ops
    a = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    names = {i.name for i in a.get_inputs()}
    rng = np.random.default_rng(11)
    for batch, seq in [(2, 7), (1, 1), (3, 12)]:
        mask = np.ones((batch, seq), np.int64)
        if batch > 1 and seq > 2:
            mask[1, :2] = 0  # left padding
        feeds = {"input_ids": rng.integers(0, 100, (batch, seq)).astype(np.int64), "attention_mask": mask}
        feeds = {k: v for k, v in feeds.items() if k in names}
        for w, g in zip(a.run(None, feeds), b.run(None, feeds)):
            assert float(np.abs(w - g).max()) <= 1e-4, (batch, seq)


def assert_onnxruntime_agrees(src, out, seed: int) -> None:
    """onnxruntime runs `out` within 1e-4 of `src` at three batch x seq sizes, the second row
    left-padded by two positions; token ids below 1000, an encoder-decoder's decoder tokens two
    fewer than its input's."""
    a = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    names = {i.name for i in a.get_inputs()}
    rng = np.random.default_rng(seed)
    for batch, seq in [(2, 7), (1, 1), (3, 12)]:
        mask = np.ones((batch, seq), np.int64)
        if batch > 1 and seq > 2:
            mask[1, :2] = 0  # left padding
        feeds = {"input_ids": rng.integers(0, 1000, (batch, seq)).astype(np.int64),
                 "attention_mask": mask,
                 "decoder_input_ids": rng.integers(0, 1000, (batch, max(1, seq - 2))).astype(np.int64)}
        feeds = {k: v for k, v in feeds.items() if k in names}
        for w, g in zip(a.run(None, feeds), b.run(None, feeds), strict=True):
            assert float(np.abs(w - g).max()) <= 1e-4, (batch, seq)


@pytest.mark.parametrize("stem", ["gptj_tiny", "gptj_tiny_dynamo", "codegen_tiny"])
def test_gptj_interleaved_rotary_runs_in_onnxruntime(fuselab, tmp_path, stem):
    """GPT-J's "rotate every two" on the first 8 channels of each 16-channel head (before the
    head transpose): q and k of both layers become RotaryEmbedding with interleaved = 1 on the
    3-D view, rotary_embedding_dim 8, the attention after it MultiHeadAttention, and
    onnxruntime runs the saved model within 1e-4 of the
    original (left padding included: the caches are the model's own gathered rows). The same
    for GPT-J through the dynamo exporter (the rows repeated by Expand, gathered by GatherND)
    and for CodeGen (the same rotary, q/k/v split from one projection)."""
    src = REPO / "tests" / "models" / "zoo" / f"{stem}.onnx"
    out = tmp_path / "out.onnx"
    ops = optimized_ops(fuselab, src, out)
    assert ops["RotaryEmbedding"] == 4 and ops["Neg"] == 0 and ops["Tile"] == 0, ops
    assert ops["FastGelu"] == 2 and ops["SkipLayerNormalization"] == 2, ops
    assert ops["MultiHeadAttention"] == 2 and ops["Softmax"] == 0, ops
    ropes = [n for n in onnx.load(str(out)).graph.node if n.op_type == "RotaryEmbedding"]
    for n in ropes:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert attrs == {"interleaved": 1, "num_heads": 4, "rotary_embedding_dim": 8}, attrs
    assert_onnxruntime_agrees(src, out, 13)


def test_bloom_fuses_its_norms_and_factored_gelu_and_runs_in_onnxruntime(fuselab, tmp_path):
    """BLOOM (ALiBi, no fused attention op takes it): its heads are folded into the batch and
    divided back out, which shape inference follows (`4*batch`), so every residual Add + LayerNorm
    fuses, and its factored tanh GELU is FastGelu with the bias absorbed; onnxruntime runs the
    saved model within 1e-4 of the original, left padding included."""
    src = REPO / "tests" / "models" / "zoo" / "bloom_tiny.onnx"
    out = tmp_path / "out.onnx"
    ops = optimized_ops(fuselab, src, out)
    assert ops["SkipLayerNormalization"] == 4 and ops["FastGelu"] == 2, ops
    assert ops["Tanh"] == 0 and ops["LayerNormalization"] == 2, ops
    assert_onnxruntime_agrees(src, out, 19)


def test_t5_fuses_all_six_attentions_and_runs_in_onnxruntime(fuselab, tmp_path):
    """The whole T5: encoder self-attention (position bias + padding mask), decoder
    self-attention (position bias + causal mask: attention_bias and unidirectional) and
    cross-attention (padding mask) are all MultiHeadAttention; onnxruntime runs the saved model
    within 1e-4 of the original, left padding included."""
    src = REPO / "tests" / "models" / "zoo" / "t5_tiny.onnx"
    out = tmp_path / "out.onnx"
    ops = optimized_ops(fuselab, src, out)
    assert ops["MultiHeadAttention"] == 6 and ops["Softmax"] == 0, ops
    assert ops["SkipSimplifiedLayerNormalization"] == 10, ops
    causal = [n for n in onnx.load(str(out)).graph.node if n.op_type == "MultiHeadAttention"
              and any(a.name == "unidirectional" and a.i == 1 for a in n.attribute)]
    assert len(causal) == 2
    assert_onnxruntime_agrees(src, out, 23)


# torch's dynamo exporter at opset 23 (scripts/export_zoo.py, `*_op23`) writes the norms as the
# standard RMSNormalization / LayerNormalization and the rotary as the standard RotaryEmbedding on
# the 4-D heads, its caches the per-token tables [1, seq, r/2]; onnxruntime refuses those caches at
# any batch but 1. `rotary_standard` reads them as onnxruntime's op over cache rows, and the
# attention after it fuses as on the opset-20 export: the stem -> (the export of the same seeded
# weights that onnxruntime runs at every batch, the exact fused counts).
OPSET23 = {
    "llama_gqa_tiny_op23": ("llama_gqa_tiny_dynamo", {
        "RotaryEmbedding": 4, "MultiHeadAttention": 2, "RMSNormalization": 1,
        "SkipSimplifiedLayerNormalization": 4, "QuickGelu": 2, "Softmax": 0}),
    "phi_tiny_op23": ("phi_tiny", {
        "RotaryEmbedding": 4, "MultiHeadAttention": 2, "SkipLayerNormalization": 2,
        "FastGelu": 2, "Softmax": 0}),
    "gpt2_tiny_op23": ("gpt2_tiny_dynamo", {
        "MultiHeadAttention": 2, "SkipLayerNormalization": 5, "FastGelu": 2, "Softmax": 0}),
}


@pytest.mark.parametrize("stem", list(OPSET23))
def test_opset23_exports_fuse_and_run_in_onnxruntime_at_every_batch(fuselab, tmp_path, stem):
    twin, want = OPSET23[stem]
    src = REPO / "tests" / "models" / "zoo" / f"{stem}.onnx"
    out = tmp_path / "out.onnx"
    ops = optimized_ops(fuselab, src, out)
    assert {k: ops[k] for k in want} == want, ops
    for n in onnx.load(str(out)).graph.node:
        if n.op_type == "RotaryEmbedding":
            assert n.domain == "com.microsoft", n
    fused = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    orig = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    same = ort.InferenceSession(str(REPO / "tests" / "models" / "zoo" / f"{twin}.onnx"),
                                providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(17)
    for batch, seq in [(1, 9), (2, 7), (1, 1), (3, 12)]:
        mask = np.ones((batch, seq), np.int64)
        if batch > 1 and seq > 2:
            mask[1, :2] = 0  # left padding
        feeds = {"input_ids": rng.integers(0, 1000, (batch, seq)).astype(np.int64),
                 "attention_mask": mask}
        got = fused.run(None, feeds)[0]
        # The twin export: every kept position (a left-padded query row is a masked one, whose
        # value no exporter agrees on).
        kept = mask.astype(bool)
        assert float(np.abs(got - same.run(None, feeds)[0])[kept].max()) <= 1e-4, (batch, seq)
        if batch == 1 or stem == "gpt2_tiny_op23":
            assert float(np.abs(got - orig.run(None, feeds)[0]).max()) <= 1e-4, (batch, seq)


# float16 exports (onnxruntime's float16 converter, keep_io_types: float32 logits out, every float
# op inside in float16, the rotary tables included): q and k of both layers fuse into float16
# RotaryEmbedding (its caches float16, as onnxruntime's one type T requires), the attention into
# MultiHeadAttention (the causal + padding mask proved: unidirectional, key_padding_mask, F =
# -65504 as the lowest float32), the norms and the activation as on the float32 files: (plain RMS
# norms, residual + RMS norms, MultiHeadAttention). Qwen3's sdpa mask (-inf, behind the
# Where(IsNaN(P), 0, P) guard) fuses with the lowest float32 as filter, and a query row whose keys
# are all masked is zeroed after the op, as the guard zeroes it.
# llama_gqa_tiny_dynamo_fp16: the dynamo export's mask reads attention_mask by GatherND of
# [batch, key] coordinates, which the prover follows.
# llama_gqa_tiny_fp16_int4: the float16 Llama's MatMuls 4-bit (MatMulNBits with float16 scales);
# the same fusions around them.
FP16_DECODERS = {"llama_gqa_tiny_fp16": (1, 4, 2), "qwen3_tiny_fp16": (5, 4, 2),
                 "llama_gqa_tiny_dynamo_fp16": (1, 4, 2), "llama_gqa_tiny_fp16_int4": (1, 4, 2)}
HALF_TOLERANCE = 2e-2  # fuselab's parity tolerance for a model that computes in float16


@pytest.mark.parametrize("stem", list(FP16_DECODERS))
def test_float16_decoders_fuse_rotary_and_run_in_onnxruntime(fuselab, tmp_path, stem):
    plain, skip, mha = FP16_DECODERS[stem]
    src = REPO / "tests" / "models" / "zoo" / f"{stem}.onnx"
    out = tmp_path / "out.onnx"
    ops = optimized_ops(fuselab, src, out)
    assert ops["RotaryEmbedding"] == 4 and ops["Neg"] == 0, ops
    assert ops["MultiHeadAttention"] == mha and ops["Softmax"] == 2 - mha, ops
    assert ops["SimplifiedLayerNormalization"] == plain, ops
    assert ops["SkipSimplifiedLayerNormalization"] == skip, ops
    assert ops["QuickGelu"] == 2, ops
    assert ops["MatMulNBits"] == (15 if stem.endswith("_int4") else 0), ops
    a = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(11)
    worst = {True: 0.0, False: 0.0}  # on kept / on left-padded query positions
    for batch, seq in [(2, 7), (1, 1), (3, 12)]:
        mask = np.ones((batch, seq), np.int64)
        if batch > 1 and seq > 2:
            mask[1, :2] = 0  # left padding
        feeds = {"input_ids": rng.integers(0, 100, (batch, seq)).astype(np.int64), "attention_mask": mask}
        for w, g in zip(a.run(None, feeds), b.run(None, feeds)):
            d = np.abs(w - g).max(axis=-1)
            for kept in (True, False):
                rows = d[(mask != 0) == kept]
                worst[kept] = max(worst[kept], float(rows.max()) if rows.size else 0.0)
    print(f"{stem}: max |onnxruntime(optimized) - onnxruntime(original)| = {worst[True]:.3g} on kept "
          f"positions, {worst[False]:.3g} on left-padded ones")
    # A left-padded query sees only masked keys: onnxruntime computes the original's Add + Softmax
    # in float32 (weights by score), the fused op rounds that row uniform as float16 does
    # (docs/fused-ops.md); elsewhere the two differ by float16 rounding.
    assert worst[True] <= 2e-3, worst
    assert worst[False] <= HALF_TOLERANCE, worst


# Decode steps (transformers' sdpa path with a DynamicCache of past keys/values): GPT-2's
# attention becomes one MultiHeadAttention per layer that reads the cache as past_key/past_value
# and writes present_key/present_value, causal after the cache; the grouped-query Llama's keeps
# its Concats (the present outputs, 2 key/value heads) and its repeat to 4 heads, and its mask,
# proved [B, 1, S, past + S], goes in as attention_bias. onnxruntime runs each saved step against
# the original: left padding, one new token and several, an empty cache (stem: cached key/value
# heads, whether the op writes the present outputs, max |diff|). The float16 GPT-2 step
# (onnxruntime's converter, keep_io_types) writes them through the Casts back to float32; the
# float16 Llama's -inf mask behind the NaN guard goes in as a float16 attention_bias. The
# Llama step exported with one new token groups the query heads instead of repeating the cache
# (torch's sdpa with enable_gqa); `grouped_query_heads` makes it the repeated form. It runs at one
# new token only (its parity run retries at seq = 1 when no size is given).
DECODE_STEPS = {"gpt2_tiny_decode": (4, True, 1e-4), "llama_gqa_tiny_decode": (2, False, 1e-4),
                "gpt2_tiny_decode_fp16": (4, True, 2e-3),
                "llama_gqa_tiny_decode_fp16": (2, False, 2e-3),
                "llama_gqa_tiny_decode1": (2, False, 1e-4),
                "llama_gqa_tiny_decode_dynamo": (2, False, 1e-4),
                "llama_gqa_tiny_decode1_dynamo": (2, False, 1e-4)}
ONE_TOKEN = {"llama_gqa_tiny_decode1", "llama_gqa_tiny_decode1_dynamo"}
# How each step's parity run is sized when no size is given (what optimize says; none: the
# defaults work). The dynamo exports' mask has a dim of its own (total) that their outputs do
# not name (they say past + seq, or past + 1 for the one-token trace): the run retries with
# total at that sum.
RESIZED = {"llama_gqa_tiny_decode1": "checked with seq=1",
           "llama_gqa_tiny_decode_dynamo": "checked with total=16 (past + seq, as the outputs declare)",
           "llama_gqa_tiny_decode1_dynamo": "checked with total=9 (past + 1, as the outputs declare)"}


@pytest.mark.parametrize("stem", list(DECODE_STEPS))
def test_decode_step_attention_runs_in_onnxruntime(fuselab, tmp_path, stem):
    kv_heads, writes_presents, tol = DECODE_STEPS[stem]
    src = REPO / "tests" / "models" / "zoo" / f"{stem}.onnx"
    out = tmp_path / "out.onnx"
    one = stem in ONE_TOKEN
    # No sizes given: where the original does not run at the defaults, parity runs again at
    # other sizes, and says which.
    said = fuselab.ok("optimize", src, "-o", out).stdout
    assert ("checked with" in said) == (stem in RESIZED), said
    assert stem not in RESIZED or RESIZED[stem] in said, said
    m = onnx.load(str(out))
    mhas = [n for n in m.graph.node if n.op_type == "MultiHeadAttention"]
    assert len(mhas) == 2 and not any(n.op_type == "Softmax" for n in m.graph.node)
    cast_to = {n.input[0]: n.output[0] for n in m.graph.node if n.op_type == "Cast"}
    outputs = {o.name for o in m.graph.output}
    presents = sorted(o if o in outputs else cast_to[o] for n in mhas for o in n.output[1:])
    assert presents == (["present_key_0", "present_key_1", "present_value_0", "present_value_1"]
                        if writes_presents else []), presents
    a = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(12)
    for batch, seq, past in [(2, 3, 5), (1, 1, 9), (3, 2, 4), (2, 4, 0)]:
        seq = 1 if one else seq
        mask = np.ones((batch, past + seq), np.int64)
        if batch > 1:
            mask[1, :3] = 0  # left padding
        feeds = {"input_ids": rng.integers(0, 1000, (batch, seq)).astype(np.int64),
                 "attention_mask": mask}
        for i in range(2):
            for kind in ("key", "value"):
                feeds[f"past_{kind}_{i}"] = rng.standard_normal(
                    (batch, kv_heads, past, 16)).astype(np.float32)
        for w, g in zip(a.run(None, feeds), b.run(None, feeds), strict=True):
            d = float(np.abs(w - g).max())
            assert w.shape == g.shape and d <= tol, (batch, seq, past, d)
