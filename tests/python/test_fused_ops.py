"""The fused transformer ops on fuselab's reference backend against onnxruntime (CPU).

Each test builds a one-node model with onnx.helper (com.microsoft imported at version 1, the
default domain at opset 14 for the com.microsoft ops and 17 for ai.onnx LayerNormalization), feeds
it seeded random inputs, runs it in onnxruntime and in `fuselab run`, and requires every output
the node names (the optional mean / inv_std_var / input_skip_bias_sum included) to match in
dtype, shape and values within MAX_ABS_DIFF.

onnxruntime registers its pre-17 LayerNormalization in the default domain (its contrib schema
"LayerNormalization", version 1 there), not in com.microsoft: a com.microsoft LayerNormalization
fails to load ("not a registered function/op"). The com.microsoft spelling fuselab also accepts is
therefore checked against onnxruntime running the same node in the default domain at opset 14.

Run from the repository root:

    FUSELAB_BIN=$PWD/target/release/fuselab .venv/bin/python -m pytest -q \
        tests/python/test_fused_ops.py
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from conftest import Fuselab, fuselab_outputs

MS = "com.microsoft"
MAX_ABS_DIFF = 1e-4
F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE
NP = {F32: np.float32, F64: np.float64}


def model(node: onnx.NodeProto, inputs, outputs, opset: int) -> onnx.ModelProto:
    """inputs: (name, elem type, shape); outputs: (name, elem type)."""
    g = helper.make_graph(
        [node],
        f"fused_{node.op_type}",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
    )
    m.ir_version = 8
    return m


def feeds_for(inputs, seed: int, scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: np.asarray(scale * rng.standard_normal(s), dtype=NP[t]) for n, t, s in inputs}


def ort_run(m: onnx.ModelProto, feeds) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def fuselab_run(fuselab: Fuselab, m: onnx.ModelProto, feeds, work: Path) -> dict[str, np.ndarray]:
    work.mkdir(parents=True, exist_ok=True)
    path = work / "model.onnx"
    onnx.save(m, str(path))
    return fuselab_outputs(fuselab, path, feeds, {}, work)


def compare(got: dict, want: dict, what: str) -> float:
    assert set(got) == set(want), what
    worst = 0.0
    for name, w in want.items():
        g = got[name]
        assert g.dtype == w.dtype, f"{what} {name}: dtype {g.dtype} != onnxruntime's {w.dtype}"
        assert g.shape == w.shape, f"{what} {name}: shape {g.shape} != onnxruntime's {w.shape}"
        d = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))) if w.size else 0.0
        print(f"{what} {name}: max |fuselab - onnxruntime| = {d:.3g}")
        assert d <= MAX_ABS_DIFF, f"{what} {name}: max abs diff {d} > {MAX_ABS_DIFF}"
        worst = max(worst, d)
    return worst


def check(fuselab, tmp_path, m, inputs, what, seed=0, scale=1.0, ort_model=None):
    feeds = feeds_for(inputs, seed, scale)
    want = ort_run(ort_model or m, feeds)
    got = fuselab_run(fuselab, m, feeds, tmp_path)
    return compare(got, want, what)


# ---------------------------------------------------------------------------------------------
# SkipLayerNormalization

SLN_SHAPES = [
    ((2, 5, 16), (2, 5, 16)),
    ((2, 5, 16), (1, 5, 16)),
    ((2, 5, 16), (5, 16)),
    ((7, 16), (7, 16)),
]


@pytest.mark.parametrize("shapes", SLN_SHAPES, ids=lambda s: f"{s[0]}+{s[1]}")
@pytest.mark.parametrize("beta", [True, False], ids=["beta", "no_beta"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_skip_layer_norm_all_outputs(fuselab, tmp_path, shapes, beta, bias):
    x_shape, skip_shape = shapes
    h = x_shape[-1]
    inputs = [("input", F32, x_shape), ("skip", F32, skip_shape), ("gamma", F32, (h,))]
    names = ["input", "skip", "gamma", "beta" if beta else "", "bias" if bias else ""]
    if beta:
        inputs.append(("beta", F32, (h,)))
    if bias:
        inputs.append(("bias", F32, (h,)))
    while names[-1] == "":
        names.pop()
    outs = ["output", "mean", "inv_std_var", "input_skip_bias_sum"]
    node = helper.make_node("SkipLayerNormalization", names, outs, domain=MS, epsilon=1e-5)
    m = model(node, inputs, [(o, F32) for o in outs], 14)
    check(fuselab, tmp_path, m, inputs, f"SkipLayerNormalization {shapes}")


@pytest.mark.parametrize(
    "outs",
    [
        ["output"],
        ["output", "", "", "input_skip_bias_sum"],
        ["output", "mean"],
        ["output", "", "inv_std_var"],
    ],
    ids=["output_only", "output_and_sum", "output_and_mean", "output_and_inv_std_var"],
)
def test_skip_layer_norm_some_outputs_default_epsilon(fuselab, tmp_path, outs):
    inputs = [("input", F32, (3, 4, 32)), ("skip", F32, (3, 4, 32)), ("gamma", F32, (32,)),
              ("beta", F32, (32,)), ("bias", F32, (32,))]
    node = helper.make_node("SkipLayerNormalization", [n for n, _, _ in inputs], outs, domain=MS)
    m = model(node, inputs, [(o, F32) for o in outs if o], 14)
    check(fuselab, tmp_path, m, inputs, f"SkipLayerNormalization {outs}", seed=3)


def test_skip_layer_norm_rejects_unsupported_skip_shape(fuselab, tmp_path):
    # onnxruntime refuses a skip broadcast over seq; so must fuselab, with a message.
    inputs = [("input", F32, (2, 5, 16)), ("skip", F32, (2, 1, 16)), ("gamma", F32, (16,))]
    node = helper.make_node(
        "SkipLayerNormalization", ["input", "skip", "gamma"], ["output"], domain=MS
    )
    m = model(node, inputs, [("output", F32)], 14)
    feeds = feeds_for(inputs, 0)
    with pytest.raises(Exception):
        ort_run(m, feeds)
    tmp_path.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(tmp_path / "model.onnx"))
    args: list[str | Path] = ["run", tmp_path / "model.onnx", "--out", tmp_path / "out"]
    for name, arr in feeds.items():
        np.save(tmp_path / f"{name}.npy", arr)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    r = fuselab(*args)
    assert r.returncode != 0, r.describe()
    assert "SkipLayerNormalization" in r.stderr, r.describe()
    assert "skip of shape [2, 1, 16]" in r.stderr, r.describe()


# ---------------------------------------------------------------------------------------------
# LayerNormalization


def ln_case(domain: str, elem: int, x_shape, axis: int, bias: bool, scale_shape=None, stash=None):
    norm = tuple(x_shape[axis:])
    scale_shape = scale_shape or norm
    inputs = [("X", elem, x_shape), ("Scale", elem, scale_shape)]
    if bias:
        inputs.append(("B", elem, scale_shape))
    attrs = {"axis": axis, "epsilon": 1e-5}
    if stash is not None:
        attrs["stash_type"] = stash
    node = helper.make_node(
        "LayerNormalization", [n for n, _, _ in inputs], ["Y", "Mean", "InvStdDev"], domain=domain,
        **attrs,
    )
    stat = F64 if stash == 11 else F32
    return node, inputs, [("Y", elem), ("Mean", stat), ("InvStdDev", stat)]


LN_CASES = [
    # (x shape, axis, bias, scale shape)
    ((2, 5, 16), -1, True, None),
    ((2, 5, 16), -1, False, None),
    ((2, 5, 16), 1, True, None),
    ((2, 5, 16), 0, True, None),
    ((2, 5, 16), 1, True, (16,)),  # Scale/B broadcast to the normalized shape [5, 16]
    ((6, 32), -1, True, None),
]


def ln_id(c) -> str:
    return f"{c[0]}_axis{c[1]}_{'B' if c[2] else 'noB'}_{c[3]}"


@pytest.mark.parametrize("case", LN_CASES, ids=ln_id)
@pytest.mark.parametrize("elem", [F32, F64], ids=["f32", "f64"])
def test_layer_norm_opset17(fuselab, tmp_path, case, elem):
    x_shape, axis, bias, scale_shape = case
    node, inputs, outs = ln_case("", elem, x_shape, axis, bias, scale_shape)
    m = model(node, inputs, outs, 17)
    check(fuselab, tmp_path, m, inputs, f"LayerNormalization-17 {case}", seed=5)


@pytest.mark.parametrize("stash", [None, 11], ids=["stash_default", "stash_f64"])
@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_norm_default_domain_opset14(fuselab, tmp_path, stash, axis):
    # onnxruntime's contrib LayerNormalization (default domain, before opset 17).
    node, inputs, outs = ln_case("", F32, (2, 5, 16), axis, True, stash=stash)
    m = model(node, inputs, outs, 14)
    check(fuselab, tmp_path, m, inputs, f"LayerNormalization-14 axis {axis} stash {stash}", seed=6)


# ---------------------------------------------------------------------------------------------
# Gelu, FastGelu, BiasGelu


@pytest.mark.parametrize("shape", [(2, 5, 16), (7,), ()], ids=str)
def test_gelu(fuselab, tmp_path, shape):
    inputs = [("X", F32, shape)]
    node = helper.make_node("Gelu", ["X"], ["Y"], domain=MS)
    m = model(node, inputs, [("Y", F32)], 14)
    check(fuselab, tmp_path, m, inputs, f"Gelu {shape}", seed=8, scale=3.0)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("elem", [F32, F64], ids=["f32", "f64"])
def test_fast_gelu(fuselab, tmp_path, bias, elem):
    inputs = [("X", elem, (2, 5, 16))]
    if bias:
        inputs.append(("bias", elem, (16,)))
    node = helper.make_node("FastGelu", [n for n, _, _ in inputs], ["Y"], domain=MS)
    m = model(node, inputs, [("Y", elem)], 14)
    check(fuselab, tmp_path, m, inputs, f"FastGelu bias={bias}", seed=9, scale=3.0)


@pytest.mark.parametrize("shape", [(2, 5, 16), (4, 32)], ids=str)
def test_bias_gelu(fuselab, tmp_path, shape):
    inputs = [("A", F32, shape), ("B", F32, (shape[-1],))]
    node = helper.make_node("BiasGelu", ["A", "B"], ["C"], domain=MS)
    m = model(node, inputs, [("C", F32)], 14)
    check(fuselab, tmp_path, m, inputs, f"BiasGelu {shape}", seed=10, scale=3.0)


# ---------------------------------------------------------------------------------------------
# Attention (the raw 2-D mask_index the `attention` fusion emits)

ATTENTION_MASKS = {
    "no_mask": None,
    "right_padding": [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]],
    "left_padding": [[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]],
    "fully_masked_row": [[0, 0, 0, 0, 0], [1, 0, 1, 0, 1]],
}


@pytest.mark.parametrize("mask", list(ATTENTION_MASKS), ids=str)
@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"scale": 0.3, "mask_filter_value": float(np.finfo(np.float32).min)},
        {"unidirectional": 1, "mask_filter_value": float(np.finfo(np.float32).min)},
        # Padded keys get -10000 added, later keys the lowest float (not -10000).
        {"unidirectional": 1},
    ],
    ids=["defaults", "scale_and_filter", "causal", "causal_default_filter"],
)
def test_attention(fuselab, tmp_path, mask, attrs):
    rng = np.random.default_rng(11)
    feeds = {
        "X": rng.standard_normal((2, 5, 16)).astype(np.float32),
        "W": (0.5 * rng.standard_normal((16, 48))).astype(np.float32),
        "B": rng.standard_normal(48).astype(np.float32),
    }
    inputs = [("X", F32, (2, 5, 16)), ("W", F32, (16, 48)), ("B", F32, (48,))]
    if ATTENTION_MASKS[mask] is not None:
        feeds["M"] = np.array(ATTENTION_MASKS[mask], dtype=np.int32)
        inputs.append(("M", TensorProto.INT32, (2, 5)))
    node = helper.make_node(
        "Attention", [n for n, _, _ in inputs], ["Y"], domain=MS, num_heads=4, **attrs
    )
    m = model(node, inputs, [("Y", F32)], 14)
    want = ort_run(m, feeds)
    got = fuselab_run(fuselab, m, feeds, tmp_path)
    compare(got, want, f"Attention {mask} {attrs}")
# EmbedLayerNormalization

I32 = TensorProto.INT32
ELN_B, ELN_S, ELN_H, ELN_V, ELN_P, ELN_G = 2, 5, 16, 11, 7, 2


def eln_case(segment: bool, mask: bool, position_ids, outs):
    """A one-node EmbedLayerNormalization model and seeded feeds (ids inside their tables)."""
    rng = np.random.default_rng(12)
    b, s, h = ELN_B, ELN_S, ELN_H
    feeds = {
        "input_ids": rng.integers(0, ELN_V, (b, s)).astype(np.int32),
        "word_embedding": rng.standard_normal((ELN_V, h)).astype(np.float32),
        "position_embedding": rng.standard_normal((ELN_P, h)).astype(np.float32),
        "gamma": rng.standard_normal(h).astype(np.float32),
        "beta": rng.standard_normal(h).astype(np.float32),
    }
    if segment:
        feeds["segment_ids"] = rng.integers(0, ELN_G, (b, s)).astype(np.int32)
        feeds["segment_embedding"] = rng.standard_normal((ELN_G, h)).astype(np.float32)
    if mask:
        # A right-padded row and a non-contiguous row with a 2 (counted as onnxruntime counts).
        feeds["mask"] = np.array([[1, 1, 1, 0, 0], [1, 0, 2, 1, 1]], dtype=np.int32)
    if position_ids is not None:
        feeds["position_ids"] = np.asarray(position_ids, dtype=np.int32)
    names = ["input_ids", "segment_ids", "word_embedding", "position_embedding",
             "segment_embedding", "gamma", "beta", "mask", "position_ids"]
    names = [n if n in feeds else "" for n in names]
    while names[-1] == "":
        names.pop()
    node = helper.make_node("EmbedLayerNormalization", names, outs, domain=MS, epsilon=1e-5)
    inputs = [(n, I32 if a.dtype == np.int32 else F32, a.shape) for n, a in feeds.items()]
    types = {"output": F32, "mask_index": I32, "embedding_sum": F32}
    m = model(node, inputs, [(o, types[o]) for o in outs if o], 14)
    return m, feeds


ELN_CASES = [
    # (segment, mask, position_ids, outputs)
    (True, False, None, ["output", "mask_index", "embedding_sum"]),
    (False, False, None, ["output", "mask_index", "embedding_sum"]),
    (True, True, None, ["output", "mask_index"]),
    (True, False, [[6, 0, 3, 3, 1]], ["output", "mask_index", "embedding_sum"]),
    (False, True, [[0, 1, 2, 3, 4], [6, 5, 4, 3, 2]], ["output", "mask_index", "embedding_sum"]),
]


def eln_id(c) -> str:
    seg, mask, pids, outs = c
    p = "no_pids" if pids is None else f"pids{np.asarray(pids).shape[0]}xS"
    return f"{'seg' if seg else 'noseg'}_{'mask' if mask else 'nomask'}_{p}_{len(outs)}out"


@pytest.mark.parametrize("case", ELN_CASES, ids=eln_id)
def test_embed_layer_norm(fuselab, tmp_path, case):
    m, feeds = eln_case(*case)
    want = ort_run(m, feeds)
    got = fuselab_run(fuselab, m, feeds, tmp_path)
    compare(got, want, f"EmbedLayerNormalization {eln_id(case)}")
    if case[1]:
        assert got["mask_index"].tolist() == want["mask_index"].tolist() == [3, 3]


@pytest.mark.parametrize(
    "bad",
    [("input_ids", 0, 1, ELN_V), ("input_ids", 1, 4, -1), ("segment_ids", 1, 0, ELN_G),
     ("position_ids", 0, 2, ELN_P)],
    ids=["word_id_past_table", "negative_word_id", "segment_id_past_table", "position_past_table"],
)
def test_embed_layer_norm_rejects_ids_outside_tables(fuselab, tmp_path, bad):
    # onnxruntime fails ("input index out of range"); fuselab must fail too, naming the id.
    name, b, s, value = bad
    m, feeds = eln_case(True, False, [[0, 1, 2, 3, 4]] if name == "position_ids" else None,
                        ["output", "mask_index"])
    feeds[name][b, s] = value
    with pytest.raises(Exception, match="out of range"):
        ort_run(m, feeds)
    tmp_path.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(tmp_path / "model.onnx"))
    args: list[str | Path] = ["run", tmp_path / "model.onnx", "--out", tmp_path / "out"]
    for n, arr in feeds.items():
        np.save(tmp_path / f"{n}.npy", arr)
        args += ["--input", f"{n}={tmp_path / f'{n}.npy'}"]
    r = fuselab(*args)
    assert r.returncode != 0, r.describe()
    assert f"{name}[{b}, {s}] = {value} is out of range" in r.stderr, r.describe()


# ---------------------------------------------------------------------------------------------
# FusedGemm (Gemm + activation, the `gemm_activation` fusion)


@pytest.mark.parametrize("activation", ["Relu", "Tanh", "Sigmoid"])
@pytest.mark.parametrize("trans_b", [0, 1], ids=["B", "Bt"])
def test_fused_gemm(fuselab, tmp_path, activation, trans_b):
    b_shape = (6, 8) if trans_b else (8, 6)
    inputs = [("A", F32, (3, 8)), ("B", F32, b_shape), ("C", F32, (6,))]
    node = helper.make_node("FusedGemm", ["A", "B", "C"], ["Y"], domain=MS,
                            activation=activation, transB=trans_b, alpha=0.7, beta=1.3)
    m = model(node, inputs, [("Y", F32)], 14)
    check(fuselab, tmp_path, m, inputs, f"FusedGemm {activation} transB={trans_b}", seed=12,
          scale=2.0)


# ---------------------------------------------------------------------------------------------
# FusedMatMul (an op fuselab runs but no fusion writes). BiasAdd has no CPU kernel in
# onnxruntime ("Could not find an implementation for BiasAdd(1)"): its unit tests are in glu.rs.

FMM_CASES = [
    # (A shape, B shape, attributes)
    ((3, 4), (4, 5), {}),
    ((4, 3), (4, 5), {"transA": 1, "alpha": 0.5}),
    ((2, 3, 4), (5, 4), {"transB": 1}),
    ((3, 2, 4), (2, 4, 5), {"transBatchA": 1}),
    ((2, 3, 4, 5), (3, 4, 5, 6), {"transBatchA": 1, "alpha": 2.0}),
    ((2, 3, 4, 5), (3, 4, 2, 6), {"transBatchA": 1, "transA": 1}),
    ((3, 4, 2, 5), (5, 3, 4, 6), {"transBatchB": 1}),
    ((3, 4, 2, 5), (2, 3, 4, 5), {"transBatchB": 1, "transB": 1}),
]


@pytest.mark.parametrize("case", FMM_CASES, ids=lambda c: f"{c[0]}x{c[1]}{sorted(c[2].items())}")
def test_fused_matmul(fuselab, tmp_path, case):
    a_shape, b_shape, attrs = case
    inputs = [("A", F32, a_shape), ("B", F32, b_shape)]
    node = helper.make_node("FusedMatMul", ["A", "B"], ["Y"], domain=MS, **attrs)
    m = model(node, inputs, [("Y", F32)], 14)
    check(fuselab, tmp_path, m, inputs, f"FusedMatMul {case}")

