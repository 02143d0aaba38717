"""Issue 15's encoders and the float16 GPT-2 with onnxruntime as the client: what fuses on our ViT,
Whisper-encoder, DistilBERT, T5-encoder, int8 BERT and fp16 GPT-2 exports (exact counts), that onnxruntime (CPU) runs each optimized
model within the model's bound of the original at several batch sizes (text: left and right
padding). What the anchors fuse on the same files is tests/python/test_anchors.py.

Run from the repository root:

    FUSELAB_BIN=$PWD/target/release/fuselab .venv/bin/python -m pytest -q tests/python/test_encoder_fusions.py
"""
from __future__ import annotations


import numpy as np
import onnxruntime as ort
import pytest

from conftest import REPO, fuselab_outputs, optimized_ops

ZOO = REPO / "tests" / "models" / "zoo"

# stem: (fused ops expected, onnxruntime's model_type, |optimized - original| bound in onnxruntime)
CASES = {
    # Attention through the scaled query projection (Whisper's q·0.125 folds into `scale`); the
    # position embeddings [S, H] are a SkipLayerNormalization's skip.
    "whisper_encoder_tiny": ({"Attention": 2, "SkipLayerNormalization": 5, "BiasGelu": 2, "Gelu": 2},
                             "bert", 1e-4),
    "vit_tiny": ({"Attention": 2, "SkipLayerNormalization": 5, "BiasGelu": 2}, "vit", 1e-4),
    # torch's dynamo exporter at opset 23: the standard Gelu (opset 20) after each bias Add, and
    # (ViT) an all-zero mask Where(Expand(all true), 0, lowest) added to the scores, which
    # `identity` removes, so the attention is a maskless Attention as on the legacy export.
    "vit_tiny_op23": ({"Attention": 2, "SkipLayerNormalization": 5, "BiasGelu": 2, "Where": 0},
                      "vit", 1e-4),
    "whisper_encoder_tiny_op23": ({"Attention": 2, "SkipLayerNormalization": 5, "BiasGelu": 2,
                                   "Gelu": 2}, "bert", 1e-4),
    # float16: causal attention with F = -65504, emitted as mask_filter_value = the lowest float32
    # (see PADDED_QUERY_ROWS).
    "gpt2_tiny_fp16": ({"Attention": 2, "FastGelu": 2, "SkipLayerNormalization": 5, "MultiHeadAttention": 0},
                       "gpt2", 2e-3),
    # torch dynamo's GPT-2 merges the heads straight to [B*S, H] rows: the MultiHeadAttention's
    # [B, S, H] output feeds that Reshape. (onnxruntime's optimizer as model_type "gpt2" crashes on
    # this export, whose lm_head Gemm has no bias; "bert" runs its norm and Gelu fusions.)
    "gpt2_tiny_dynamo": ({"MultiHeadAttention": 2, "SkipLayerNormalization": 5, "FastGelu": 2}, "bert", 1e-4),
    # transformers' default (sdpa) attention: Q and Kᵀ each scaled by √scale, Where(IsNaN(P), 0, P)
    # after the Softmax; the causal + padding mask is an attention_bias of MultiHeadAttention.
    "gpt2_tiny_sdpa": ({"MultiHeadAttention": 2, "SkipLayerNormalization": 5, "FastGelu": 2,
                        "IsNaN": 0}, "gpt2", 1e-4),
    # The position ids are a Slice of a [1, 128] buffer to the input's length: their rows are
    # min(seq, 128), which is seq wherever the embedding Add runs, so the embedding norm is a
    # SkipLayerNormalization and the padding mask is provably [batch, seq] against the scores.
    "distilbert_tiny": ({"Attention": 2, "SkipLayerNormalization": 5, "BiasGelu": 2}, "bert", 1e-4),
    # T5: unscaled scores plus the relative position bias [1, N, S, S] (attention_bias) plus the
    # padding mask (proved: key_padding_mask); RMS norms without mean subtraction; gated-gelu.
    "t5_encoder_tiny": ({"MultiHeadAttention": 2, "SimplifiedLayerNormalization": 1,
                         "SkipSimplifiedLayerNormalization": 4, "FastGelu": 2}, "t5", 1e-4),
    # int8: the projections are DynamicQuantizeMatMul, so the attention is a MultiHeadAttention on
    # their outputs (Attention takes float weights).
    "bert_tiny_int8": ({"MultiHeadAttention": 2, "SkipLayerNormalization": 5, "DynamicQuantizeMatMul": 13,
                        "Gelu": 2}, "bert", 1e-2),
}


# onnxruntime's CPU runs the original fp16 GPT-2's Add(scores, mask) + Softmax in float32 (it
# inserts Casts around ops it has no float16 kernel for), so a left-padded query, whose keys are
# all masked, weights them by score there. In float16 each masked score rounds to -65504, a
# uniform row: the ONNX semantics, which fuselab's reference backend (rounding each op to float16)
# and the fused op follow. On those rows the fused model is compared with fuselab's run of the
# original at the model's bound, and with onnxruntime's original at the fp16 bound.
PADDED_QUERY_ROWS = {"gpt2_tiny_fp16": 2e-2}


def feeds_for(session: ort.InferenceSession, batch: int, seq: int, rng: np.random.Generator) -> dict:
    feeds = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) else {"batch": batch, "seq": seq}.get(d, batch) for d in i.shape]
        if i.name == "attention_mask":
            m = np.ones(shape, np.int64)
            if batch > 1 and seq > 3:
                m[0, :2] = 0  # left padding
                m[1, -2:] = 0  # right padding
            feeds[i.name] = m
        elif i.name == "token_type_ids":
            feeds[i.name] = np.zeros(shape, np.int64)
        elif "int" in i.type:
            feeds[i.name] = rng.integers(0, 100, shape).astype(np.int64)
        else:
            dt = np.float16 if "float16" in i.type else np.float32
            feeds[i.name] = rng.standard_normal(shape).astype(dt)
    return feeds


@pytest.mark.parametrize("stem", list(CASES))
def test_encoder_fusions_run_in_onnxruntime(fuselab, tmp_path, stem):
    want, _, bound = CASES[stem]
    src = ZOO / f"{stem}.onnx"
    out = tmp_path / "out.onnx"
    ops = optimized_ops(fuselab, src, out)
    for op, n in want.items():
        assert ops[op] == n, (op, ops)
    assert ops["Softmax"] == 0, ops
    a = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for batch, seq in [(2, 7), (1, 1), (3, 12)]:
        feeds = feeds_for(a, batch, seq, rng)
        padded = None
        if stem in PADDED_QUERY_ROWS:
            # [B, S] True where the query is padding (its row of the output is [..., vocab]).
            padded = feeds["attention_mask"] == 0
            dims = {"batch": batch, "seq": seq}
            ref = fuselab_outputs(fuselab, src, feeds, dims, tmp_path / f"ref_{batch}x{seq}")
        for o, w, g in zip(a.get_outputs(), a.run(None, feeds), b.run(None, feeds)):
            d = np.abs(w.astype(np.float64) - g.astype(np.float64))
            if padded is None:
                assert float(d.max()) <= bound, (batch, seq, float(d.max()))
                continue
            assert float(d[~padded].max()) <= bound, (batch, seq, "kept rows", float(d[~padded].max()))
            if padded.any():
                assert float(d[padded].max()) <= PADDED_QUERY_ROWS[stem], (batch, seq, float(d[padded].max()))
            r = np.abs(ref[o.name].astype(np.float64) - g.astype(np.float64)).max()
            assert float(r) <= bound, (batch, seq, "fuselab's run of the original", float(r))


def test_a_nan_guard_that_does_not_zero_is_not_fused(fuselab, tmp_path):
    """sdpa's guard is Where(IsNaN(P), 0, P); with any other fill value the NaN rows keep a value
    the fused op does not compute, so attention must stay unfused and the report says why."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(str(ZOO / "gpt2_tiny_sdpa.onnx"))
    prod = {o: n for n in m.graph.node for o in n.output}
    changed = 0
    for n in m.graph.node:
        if n.op_type == "Where" and n.input[0] in prod and prod[n.input[0]].op_type == "IsNaN":
            fill = prod[n.input[1]]
            assert fill.op_type == "Constant"
            fill.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array([0.5], np.float32)))
            changed += 1
    assert changed == 2
    src, out = tmp_path / "guard_half.onnx", tmp_path / "out.onnx"
    onnx.save(m, str(src))
    r = fuselab.ok("optimize", src, "-o", out)
    assert "are not Where(IsNaN(p), 0, p)" in r.stdout, r.describe()
    ops = optimized_ops(fuselab, src, out)
    assert ops["MultiHeadAttention"] == 0 and ops["Attention"] == 0 and ops["Softmax"] == 2, ops
