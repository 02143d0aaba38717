"""com.microsoft MultiHeadAttention and GroupQueryAttention on fuselab's reference backend
against onnxruntime (CPU).

Each test builds a one-node model with onnx.helper (the helpers of test_fused_ops.py), feeds it
seeded random inputs, runs it in onnxruntime and in `fuselab run`, and requires every output the
node names (present_key / present_value included) to match in dtype, shape and values within
test_fused_ops.MAX_ABS_DIFF.

Run from the repository root:

    FUSELAB_BIN=$PWD/target/release/fuselab .venv/bin/python -m pytest -q \
        tests/python/test_ms_attention.py
"""
from __future__ import annotations

import numpy as np
import pytest

import onnx
from onnx import TensorProto, helper
from test_fused_ops import MS, compare, fuselab_run, model, ort_run

F32, I32 = TensorProto.FLOAT, TensorProto.INT32


def run_both(fuselab, tmp_path, node, inputs, feeds, outputs, what):
    m = model(node, inputs, [(o, F32) for o in outputs], 14)
    want = ort_run(m, feeds)
    got = fuselab_run(fuselab, m, feeds, tmp_path)
    compare(got, want, what)


# ---------------------------------------------------------------------------------------------
# MultiHeadAttention: B=2, S=3, num_heads=2, head size 4 (value head size 4)

B, S, N, D = 2, 3, 2, 4
H = N * D

MHA_CASES = {
    "plain": {},
    "bias": {"bias": True},
    "padding_mask": {"mask": [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], "kv": 5},
    "attention_bias": {"attention_bias": True},
    "causal": {"attrs": {"unidirectional": 1}, "kv": 3},
    "past": {"past": 2, "bias": True},
    "past_causal_mask": {
        "past": 2,
        "attrs": {"unidirectional": 1},
        "mask": [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]],
    },
    "scale_filter": {
        "attrs": {"scale": 0.2, "mask_filter_value": -1e9},
        "mask": [[1, 0, 1, 0], [1, 1, 1, 0]],
        "kv": 4,
    },
}


@pytest.mark.parametrize("case", list(MHA_CASES), ids=str)
def test_multi_head_attention(fuselab, tmp_path, case):
    c = MHA_CASES[case]
    rng = np.random.default_rng(5)
    past = c.get("past", 0)
    kv = c.get("kv", S)
    total = past + kv
    feeds = {
        "q": rng.standard_normal((B, S, H)).astype(np.float32),
        "k": rng.standard_normal((B, kv, H)).astype(np.float32),
        "v": rng.standard_normal((B, kv, H)).astype(np.float32),
    }
    names = ["q", "k", "v", "", "", "", "", ""]
    if c.get("bias"):
        feeds["bias"] = rng.standard_normal(3 * H).astype(np.float32)
        names[3] = "bias"
    if "mask" in c:
        feeds["mask"] = np.array(c["mask"], dtype=np.int32)
        names[4] = "mask"
    if c.get("attention_bias"):
        feeds["ab"] = rng.standard_normal((1, N, S, total)).astype(np.float32)
        names[5] = "ab"
    outputs = ["y"]
    if past:
        feeds["pk"] = rng.standard_normal((B, N, past, D)).astype(np.float32)
        feeds["pv"] = rng.standard_normal((B, N, past, D)).astype(np.float32)
        names[6], names[7] = "pk", "pv"
        outputs += ["present_k", "present_v"]
    while names[-1] == "":
        names.pop()
    inputs = [(n, I32 if n == "mask" else F32, feeds[n].shape) for n in names if n]
    node = helper.make_node(
        "MultiHeadAttention", names, outputs, domain=MS, num_heads=N, **c.get("attrs", {})
    )
    run_both(fuselab, tmp_path, node, inputs, feeds, outputs, f"MultiHeadAttention {case}")


# ---------------------------------------------------------------------------------------------
# GroupQueryAttention: num_heads=4, kv_num_heads=2, head size 8

GQ, GKV, GD = 4, 2, 8

GQA_CASES = {
    # (batch, new tokens, past buffer length, seqlens_k, total_sequence_length, attributes)
    "prompt": (2, 4, 0, [3, 3], 4, {}),
    "prompt_softcap_scale": (2, 4, 0, [3, 3], 4, {"softcap": 2.0, "scale": 0.5}),
    "prompt_window": (1, 5, 0, [4], 5, {"local_window_size": 2}),
    "decode": (2, 1, 3, [3, 3], 4, {}),
    "decode_window": (2, 1, 5, [5, 5], 6, {"local_window_size": 2}),
    "continue_prompt": (1, 3, 2, [4], 5, {}),
    # attention_bias (input 10) is added after the softcap.
    "prompt_bias_softcap": (1, 3, 0, [2], 3, {"softcap": 1.0, "attention_bias": True}),
}


@pytest.mark.parametrize("case", list(GQA_CASES), ids=str)
def test_group_query_attention(fuselab, tmp_path, case):
    b, s, past, seqlens, total, attrs = GQA_CASES[case]
    attrs = dict(attrs)
    with_bias = attrs.pop("attention_bias", False)
    rng = np.random.default_rng(9)
    feeds = {
        "q": rng.standard_normal((b, s, GQ * GD)).astype(np.float32),
        "k": rng.standard_normal((b, s, GKV * GD)).astype(np.float32),
        "v": rng.standard_normal((b, s, GKV * GD)).astype(np.float32),
        "pk": rng.standard_normal((b, GKV, past, GD)).astype(np.float32),
        "pv": rng.standard_normal((b, GKV, past, GD)).astype(np.float32),
        "seqlens_k": np.array(seqlens, dtype=np.int32),
        "total": np.array(total, dtype=np.int32),
    }
    names = ["q", "k", "v", "pk", "pv", "seqlens_k", "total"]
    if with_bias:
        feeds["ab"] = rng.standard_normal((1, GQ, s, total)).astype(np.float32)
        names += ["", "", "", "ab"]
    inputs = [
        (n, I32 if n in ("seqlens_k", "total") else F32, feeds[n].shape) for n in names if n
    ]
    outputs = ["y", "present_k", "present_v"]
    node = helper.make_node(
        "GroupQueryAttention",
        names,
        outputs,
        domain=MS,
        num_heads=GQ,
        kv_num_heads=GKV,
        **attrs,
    )
    run_both(fuselab, tmp_path, node, inputs, feeds, outputs, f"GroupQueryAttention {case}")


def test_group_query_attention_rotary_is_refused(fuselab, tmp_path):
    node = helper.make_node(
        "GroupQueryAttention",
        ["q", "k", "v", "", "", "seqlens_k", "total"],
        ["y"],
        domain=MS,
        num_heads=GQ,
        kv_num_heads=GKV,
        do_rotary=1,
    )
    inputs = [
        ("q", F32, (1, 2, GQ * GD)),
        ("k", F32, (1, 2, GKV * GD)),
        ("v", F32, (1, 2, GKV * GD)),
        ("seqlens_k", I32, (1,)),
        ("total", I32, ()),
    ]
    m = model(node, inputs, [("y", F32)], 14)
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    feeds = {
        "q": np.zeros((1, 2, GQ * GD), np.float32),
        "k": np.zeros((1, 2, GKV * GD), np.float32),
        "v": np.zeros((1, 2, GKV * GD), np.float32),
        "seqlens_k": np.array([1], np.int32),
        "total": np.array(2, np.int32),
    }
    args = ["run", path]
    for name, arr in feeds.items():
        f = tmp_path / f"in_{name}.npy"
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    r = fuselab(*args, "--out", tmp_path / "out")
    assert r.returncode != 0
    assert "do_rotary=1 is not supported" in r.stderr + r.stdout
