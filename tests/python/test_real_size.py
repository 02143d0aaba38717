"""Issue 16's real-size models (tests/models/real/, weights from scripts/gen_weights.py): GPT-2 small,
a 12-layer GPT-2 of hidden size 128 and a 12-layer Llama with transformers' default (sdpa)
attention fuse every layer, fuselab's parity
check runs at 1 x 16, the optimized model is saved with external data, and onnxruntime (CPU) runs it
within 1e-4 of the original.

Run from the repository root (after scripts/gen_weights.py):

    FUSELAB_BIN=$PWD/target/release/fuselab .venv/bin/python -m pytest -q tests/python/test_real_size.py
"""
from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import REPO

REAL = REPO / "tests" / "models" / "real"

# model: (fused ops, vocabulary)
CASES = {
    "gpt2_small": ({"MultiHeadAttention": 12, "SkipLayerNormalization": 25, "FastGelu": 12}, 50257),
    "gpt2_12x128": ({"MultiHeadAttention": 12, "SkipLayerNormalization": 25, "FastGelu": 12}, 50257),
    "llama12": ({"MultiHeadAttention": 12, "RotaryEmbedding": 24, "SkipSimplifiedLayerNormalization": 24,
                 "SimplifiedLayerNormalization": 1, "QuickGelu": 12}, 32000),
}


@pytest.mark.parametrize("stem", list(CASES))
def test_real_size_model_fuses_every_layer_and_runs_in_onnxruntime(fuselab, tmp_path, stem):
    src = REAL / f"{stem}.onnx"
    if not (REAL / f"{stem}.onnx.data").is_file():
        pytest.fail(f"{src.name}.data is missing: run scripts/gen_weights.py", pytrace=False)
    want, vocab = CASES[stem]
    out = tmp_path / "opt.onnx"
    r = fuselab.ok("optimize", src, "-o", out, "--external-data", "--dim", "batch=1", "--dim", "seq=16")
    assert "parity: max |diff|" in r.stdout and " ok" in r.stdout, r.describe()
    assert (tmp_path / "opt.onnx.data").is_file()
    ops = collections.Counter(n.op_type for n in onnx.load(str(out), load_external_data=False).graph.node)
    for op, n in want.items():
        assert ops[op] == n, (op, ops)
    assert ops["Softmax"] == 0 and ops["IsNaN"] == 0, ops
    a = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    mask = np.ones((2, 9), np.int64)
    mask[1, :3] = 0  # left padding
    feeds = {"input_ids": rng.integers(0, vocab, (2, 9)).astype(np.int64), "attention_mask": mask}
    for w, g in zip(a.run(None, feeds), b.run(None, feeds)):
        assert float(np.abs(w - g).max()) <= 1e-4
    # pytest keeps the last runs' folders: without this each run leaves ~0.6 GB per model.
    del b
    (tmp_path / "opt.onnx.data").unlink()
