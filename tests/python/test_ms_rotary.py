"""com.microsoft RotaryEmbedding on fuselab's reference backend against onnxruntime (CPU).

Each case builds a one-node model with onnx.helper (as test_fused_ops.py does: com.microsoft
imported at version 1, the default domain at opset 14), feeds it a seeded random input, cos/sin
caches of random angles and integer position ids, runs it in onnxruntime and in `fuselab run`,
and requires the output to match in dtype, shape and values within test_fused_ops.MAX_ABS_DIFF.
The cases cover 3-D and 4-D input, per-token position ids and a start offset, interleaved and
half-split pairs, and a partial rotation (rotary_embedding_dim with num_heads); three of them
again in float16.

Run from the repository root:

    FUSELAB_BIN=$PWD/target/release/fuselab .venv/bin/python -m pytest -q \
        tests/python/test_ms_rotary.py
"""
from __future__ import annotations

import numpy as np
import pytest

from onnx import TensorProto, helper
from test_fused_ops import F32, MS, compare, fuselab_run, model, ort_run

I64 = TensorProto.INT64

# (id, input shape, max positions, cache width, position ids shape, attributes)
CASES = [
    ("3d_ids", (2, 3, 16), 8, 8, (2, 3), {}),
    ("3d_start", (2, 3, 16), 8, 8, (1,), {}),
    ("3d_two_heads", (1, 4, 16), 6, 4, (1, 4), {"num_heads": 2}),
    ("4d_ids", (2, 2, 3, 8), 6, 4, (2, 3), {}),
    ("4d_start", (1, 3, 2, 8), 5, 4, (1,), {}),
    ("3d_partial", (1, 3, 16), 5, 2, (1, 3), {"num_heads": 2, "rotary_embedding_dim": 4}),
    ("4d_partial", (2, 2, 3, 8), 7, 2, (2, 3), {"num_heads": 2, "rotary_embedding_dim": 4}),
]


def seq_len(shape) -> int:
    return shape[2] if len(shape) == 4 else shape[1]


@pytest.mark.parametrize("interleaved", [0, 1], ids=["halves", "interleaved"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_ms_rotary_embedding_matches_onnxruntime(fuselab, tmp_path, case, interleaved):
    name, x_shape, max_pos, width, pos_shape, attrs = case
    rng = np.random.default_rng(len(name) * 7 + interleaved)
    angles = rng.uniform(-np.pi, np.pi, (max_pos, width))
    seq = seq_len(x_shape)
    if pos_shape == (1,):
        pos = np.array([max_pos - seq], dtype=np.int64)
    else:
        pos = rng.integers(0, max_pos, pos_shape, dtype=np.int64)
    feeds = {
        "input": rng.standard_normal(x_shape).astype(np.float32),
        "position_ids": pos,
        "cos_cache": np.cos(angles).astype(np.float32),
        "sin_cache": np.sin(angles).astype(np.float32),
    }
    inputs = [
        ("input", F32, x_shape),
        ("position_ids", I64, pos_shape),
        ("cos_cache", F32, (max_pos, width)),
        ("sin_cache", F32, (max_pos, width)),
    ]
    node = helper.make_node(
        "RotaryEmbedding", [n for n, _, _ in inputs], ["output"], domain=MS,
        interleaved=interleaved, **attrs,
    )
    m = model(node, inputs, [("output", F32)], 14)
    want = ort_run(m, feeds)
    got = fuselab_run(fuselab, m, feeds, tmp_path)
    compare(got, want, f"RotaryEmbedding {name} interleaved={interleaved}")


F16 = TensorProto.FLOAT16


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in ("4d_start", "4d_ids", "3d_two_heads")],
                         ids=lambda c: c[0])
def test_ms_rotary_embedding_float16_matches_onnxruntime(fuselab, tmp_path, case):
    """float16 input and caches (what `rotary` writes for a float16 decoder): fuselab computes in
    float32 and rounds each output once; onnxruntime's CPU kernel rounds the two products and
    their sum to float16 one by one. So they agree within float16 rounding of the terms, not the
    float32 bound."""
    name, x_shape, max_pos, width, pos_shape, attrs = case
    rng = np.random.default_rng(len(name) * 11)
    angles = rng.uniform(-np.pi, np.pi, (max_pos, width))
    seq = seq_len(x_shape)
    pos = (np.array([max_pos - seq], dtype=np.int64) if pos_shape == (1,)
           else rng.integers(0, max_pos, pos_shape, dtype=np.int64))
    feeds = {
        "input": rng.standard_normal(x_shape).astype(np.float16),
        "position_ids": pos,
        "cos_cache": np.cos(angles).astype(np.float16),
        "sin_cache": np.sin(angles).astype(np.float16),
    }
    inputs = [
        ("input", F16, x_shape),
        ("position_ids", I64, pos_shape),
        ("cos_cache", F16, (max_pos, width)),
        ("sin_cache", F16, (max_pos, width)),
    ]
    node = helper.make_node("RotaryEmbedding", [n for n, _, _ in inputs], ["output"], domain=MS, **attrs)
    m = model(node, inputs, [("output", F16)], 14)
    want = ort_run(m, feeds)["output"]
    got = fuselab_run(fuselab, m, feeds, tmp_path)["output"]
    assert got.dtype == np.float16 and got.shape == want.shape
    w = want.astype(np.float64)
    err = np.abs(got.astype(np.float64) - w)
    print(f"RotaryEmbedding float16 {name}: max |fuselab - onnxruntime| = {err.max():.3g}")
    # A per-op rounding of the products is up to half an ulp of |x|·|cos| each, which the sum
    # may leave large next to a small result: bounded by the largest |x| of the row.
    row = np.abs(feeds["input"].astype(np.float64)).max(axis=-1, keepdims=True)
    assert np.all(err <= 2.0 ** -9 * row + 2.0 ** -10 * np.abs(w)), err.max()


def test_ms_rotary_embedding_refuses_packed_batching(fuselab, tmp_path):
    inputs = [
        ("input", F32, (1, 2, 8)),
        ("position_ids", I64, (1,)),
        ("cos_cache", F32, (4, 4)),
        ("sin_cache", F32, (4, 4)),
    ]
    node = helper.make_node(
        "RotaryEmbedding", [n for n, _, _ in inputs], ["output"], domain=MS, is_packed_batching=1
    )
    m = model(node, inputs, [("output", F32)], 14)
    feeds = {
        "input": np.zeros((1, 2, 8), np.float32),
        "position_ids": np.zeros((1,), np.int64),
        "cos_cache": np.ones((4, 4), np.float32),
        "sin_cache": np.zeros((4, 4), np.float32),
    }
    with pytest.raises(AssertionError, match="is_packed_batching"):
        fuselab_run(fuselab, m, feeds, tmp_path)
