"""Issue 15's second anchor: onnxscript's `optimize_for_ort` (0.7.2, pinned; the fusions the torch
exporter's toolchain applies for onnxruntime) on the same file. On every committed transformer
export fuselab fuses each op it fuses at least as often (some compared as families, below), and
its graph has at most as many nodes.

Run from the repository root:

    FUSELAB_BIN=$PWD/target/release/fuselab .venv/bin/python -m pytest -q tests/python/test_onnxscript_anchor.py
"""
from __future__ import annotations

import collections

import onnx
import pytest

from conftest import REPO

MODELS = ["tests/models/gpt2_tiny.onnx", "tests/models/bert_tiny.onnx"] + [
    f"tests/models/zoo/{m}.onnx"
    for m in ["bert_tiny_int8", "distilbert_tiny", "gpt2_tiny_dynamo", "gpt2_tiny_fp16", "llama_gqa_tiny",
              "llama_gqa_tiny_dynamo", "llama_gqa_tiny_int4", "llama_gqa_tiny_int4_qdq", "phi_tiny",
              "qwen2_tiny", "vit_tiny", "whisper_encoder_tiny"]
]

# Compared as families: our position-embedding Add + norm is a Skip form where theirs may stay a
# plain norm, and where a quantized projection (DynamicQuantizeMatMul) takes the bias in, the Gelu
# after it has no bias left to be a BiasGelu.
FAMILIES = {
    "norms": ("SkipLayerNormalization", "LayerNormalization"),
    "simplified norms": ("SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization"),
    "gelus": ("Gelu", "BiasGelu"),
}
FUSED = ["FastGelu", "QuickGelu", "Attention", "MultiHeadAttention", "GroupQueryAttention",
         "RotaryEmbedding", "EmbedLayerNormalization", "MatMulNBits", "DynamicQuantizeMatMul", "FusedConv",
         "BiasAdd", "BiasSplitGelu"]


@pytest.mark.parametrize("rel", MODELS)
def test_at_least_what_onnxscripts_optimize_for_ort_fuses(fuselab, tmp_path, rel):
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    src = REPO / rel
    theirs_model, _ = optimize_for_ort(ir.load(src))
    theirs = collections.Counter(n.op_type for n in theirs_model.graph)
    out = tmp_path / "out.onnx"
    fuselab.ok("optimize", src, "-o", out, "--no-parity")
    ours_graph = onnx.load(str(out)).graph
    ours = collections.Counter(n.op_type for n in ours_graph.node)
    for family, ops in FAMILIES.items():
        assert sum(ours[o] for o in ops) >= sum(theirs[o] for o in ops), (family, ours, theirs)
    in_family = {op for ops in FAMILIES.values() for op in ops}
    for op in FUSED:
        if op not in in_family:
            assert ours[op] >= theirs[op], (op, ours[op], theirs[op])
    assert len(ours_graph.node) <= len(theirs_model.graph), (len(ours_graph.node), len(theirs_model.graph))
