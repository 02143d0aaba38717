"""Quantized matrix products and convolutions on fuselab's reference backend against onnxruntime
(CPU): com.microsoft MatMulNBits, DynamicQuantizeMatMul and FusedConv, ai.onnx ConvInteger and
QLinearConv.

Each test builds a one-node model with onnx.helper (weights, scales and zero points as seeded
random initializers, the float input fed), runs it in onnxruntime and in `fuselab run`, and
requires the output to match in dtype, shape and values: within TOL·max(1, max |onnxruntime|)
for float outputs, exactly for the integer outputs of ConvInteger, and within one quantization
step for QLinearConv (onnxruntime's requantization rounds in float32, fuselab's in float64).

MatMulNBits packs its weights here from random codes the way the contract describes (codes of
`bits` bits, low bits first, block after block along K, the last block padded), so each case
also checks the packing: K is chosen both a multiple of the block size and not.

Run from the repository root:

    FUSELAB_BIN=$PWD/target/release/fuselab .venv/bin/python -m pytest -q \
        tests/python/test_ms_quant.py
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from conftest import Fuselab

MS = "com.microsoft"
TOL = 1e-4
F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def model(node, inputs, outputs, inits, opset: int = 17) -> onnx.ModelProto:
    """inputs: (name, elem type, shape); outputs: (name, elem type); inits: name -> array."""
    g = helper.make_graph(
        [node],
        f"q_{node.op_type}",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits.items()],
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
    )
    m.ir_version = 8
    return m


def ort_run(m: onnx.ModelProto, feeds) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def fuselab_cli(fuselab: Fuselab, m: onnx.ModelProto, feeds, work: Path):
    work.mkdir(parents=True, exist_ok=True)
    path = work / "model.onnx"
    onnx.save(m, str(path))
    args: list[str | Path] = ["run", path]
    for name, arr in feeds.items():
        f = work / f"in_{name}.npy"
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    return fuselab(*args, "--out", work / "out")


def fuselab_run(fuselab: Fuselab, m: onnx.ModelProto, feeds, work: Path) -> dict[str, np.ndarray]:
    r = fuselab_cli(fuselab, m, feeds, work)
    assert r.returncode == 0, r.describe()
    return {o.name: np.load(work / "out" / f"{o.name}.npy") for o in m.graph.output}


def compare(fuselab, tmp_path, m, feeds, what, tol=TOL, exact=False, steps=0):
    want = ort_run(m, feeds)
    got = fuselab_run(fuselab, m, feeds, tmp_path)
    for name, w in want.items():
        g = got[name]
        assert g.dtype == w.dtype, f"{what} {name}: dtype {g.dtype} != onnxruntime's {w.dtype}"
        assert g.shape == w.shape, f"{what} {name}: shape {g.shape} != onnxruntime's {w.shape}"
        d = np.abs(g.astype(np.float64) - w.astype(np.float64))
        worst = float(d.max()) if d.size else 0.0
        print(f"{what} {name}: max |fuselab - onnxruntime| = {worst:.3g}")
        if exact:
            assert worst == 0, f"{what} {name}: differs by {worst}"
        elif steps:
            assert worst <= steps, f"{what} {name}: differs by {worst} steps"
        else:
            bound = tol * max(1.0, float(np.abs(w.astype(np.float64)).max()) if w.size else 1.0)
            assert worst <= bound, f"{what} {name}: max abs diff {worst} > {bound}"


# ---------------------------------------------------------------------------------------------
# MatMulNBits


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """[rows, n] codes of `bits` bits -> [rows, ceil(n·bits/8)] bytes, low bits first."""
    rows, n = codes.shape
    per = 8 // bits
    padded = np.zeros((rows, -(-n // per) * per), np.uint32)
    padded[:, :n] = codes
    out = np.zeros((rows, padded.shape[1] // per), np.uint32)
    for j in range(per):
        out |= padded[:, j::per] << (j * bits)
    return out.astype(np.uint8)


def nbits_case(k, n, block, bits, zp, bias, a_shape, elem=F32, seed=0):
    rng = np.random.default_rng(seed)
    nb = -(-k // block)
    codes = rng.integers(0, 1 << bits, size=(n, nb * block), dtype=np.uint32)
    b = pack(codes.reshape(n * nb, block), bits).reshape(n, nb, block * bits // 8)
    fl = np.float32 if elem == F32 else np.float16
    inits = {"B": b, "scales": (rng.random((n, nb)) * 0.1 + 0.01).astype(fl)}
    names = ["A", "B", "scales"]
    if zp == "packed":
        zcodes = rng.integers(0, 1 << bits, size=(n, nb), dtype=np.uint32)
        inits["zp"] = pack(zcodes, bits)
        names.append("zp")
    elif zp == "float":
        inits["zp"] = (rng.random((n, nb)) * (1 << bits)).astype(fl)
        names.append("zp")
    if bias:
        inits["bias"] = rng.standard_normal(n).astype(fl)
        names += [""] * (5 - len(names)) + ["bias"]
    node = helper.make_node(
        "MatMulNBits", names, ["Y"], domain=MS, K=k, N=n, bits=bits, block_size=block
    )
    m = model(node, [("A", elem, a_shape)], [("Y", elem)], inits)
    feeds = {"A": rng.standard_normal(a_shape).astype(fl)}
    return m, feeds


NBITS = [
    # (K, N, block, bits, zero points, bias, A shape)
    (64, 48, 32, 4, None, False, (3, 64)),
    (64, 48, 16, 4, "packed", True, (2, 5, 64)),
    (40, 7, 16, 4, None, True, (4, 40)),
    (40, 7, 32, 4, "packed", False, (1, 3, 40)),
    (72, 33, 32, 4, "packed", True, (72,)),
    (50, 9, 16, 4, "float", False, (2, 50)),
    (64, 16, 32, 8, None, True, (3, 64)),
    (40, 10, 16, 8, "packed", False, (2, 40)),
    (40, 10, 32, 8, None, True, (2, 40)),
    (96, 5, 64, 4, "float", True, (3, 96)),
]
# onnxruntime's CPU kernel refuses 8-bit weights with float zero points (fuselab takes them).


@pytest.mark.parametrize("case", NBITS, ids=lambda c: "k{}_n{}_b{}_{}bit_zp-{}_{}_{}".format(
    c[0], c[1], c[2], c[3], c[4], "bias" if c[5] else "nobias", "x".join(map(str, c[6]))))
def test_matmul_nbits(fuselab, tmp_path, case):
    m, feeds = nbits_case(*case)
    compare(fuselab, tmp_path, m, feeds, f"MatMulNBits {case}")


def test_matmul_nbits_float16(fuselab, tmp_path):
    m, feeds = nbits_case(64, 24, 32, 4, "packed", True, (3, 64), elem=F16, seed=2)
    # onnxruntime's float16 path rounds inside; one float16 step of the larger values.
    compare(fuselab, tmp_path, m, feeds, "MatMulNBits float16", tol=2e-3)


def test_matmul_nbits_two_bits_is_refused(fuselab, tmp_path):
    m, feeds = nbits_case(64, 8, 32, 4, None, False, (2, 64))
    for a in m.graph.node[0].attribute:
        if a.name == "bits":
            a.i = 2
    r = fuselab_cli(fuselab, m, feeds, tmp_path)
    assert r.returncode != 0, r.describe()
    assert "'bits' 2" in r.stderr, r.describe()


# ---------------------------------------------------------------------------------------------
# DynamicQuantizeMatMul

DQMM = [
    # (B type, b_scale per column, b_zero_point: None / "scalar" / "column", bias, A shape)
    (np.int8, False, None, False, (4, 32)),
    (np.int8, True, "column", True, (2, 3, 32)),
    (np.uint8, False, "scalar", True, (5, 32)),
    (np.uint8, True, "column", False, (1, 32)),
]


@pytest.mark.parametrize("case", DQMM, ids=lambda c: "{}_{}_zp-{}_{}_{}".format(
    np.dtype(c[0]).name, "col" if c[1] else "scalar", c[2], "bias" if c[3] else "nobias",
    "x".join(map(str, c[4]))))
def test_dynamic_quantize_matmul(fuselab, tmp_path, case):
    bt, per_col, zp, bias, a_shape = case
    rng = np.random.default_rng(7)
    k, n = a_shape[-1], 12
    info = np.iinfo(bt)
    inits = {
        "B": rng.integers(info.min, info.max + 1, size=(k, n)).astype(bt),
        "b_scale": (rng.random(n if per_col else ()) * 0.05 + 0.01).astype(np.float32),
    }
    names = ["A", "B", "b_scale"]
    if zp:
        shape = (n,) if zp == "column" else ()
        lo, hi = (0, 255) if bt == np.uint8 else (-20, 20)
        inits["b_zero_point"] = rng.integers(lo, hi + 1, size=shape).astype(bt)
        names.append("b_zero_point")
    if bias:
        inits["bias"] = rng.standard_normal(n).astype(np.float32)
        names += [""] * (4 - len(names)) + ["bias"]
    node = helper.make_node("DynamicQuantizeMatMul", names, ["Y"], domain=MS)
    m = model(node, [("A", F32, a_shape)], [("Y", F32)], inits)
    feeds = {"A": rng.standard_normal(a_shape).astype(np.float32)}
    compare(fuselab, tmp_path, m, feeds, f"DynamicQuantizeMatMul {case}")


# ---------------------------------------------------------------------------------------------
# FusedConv

ACTS = [
    (None, None),
    ("Relu", None),
    ("Tanh", None),
    ("Sigmoid", None),
    ("LeakyRelu", [0.1]),
    ("Clip", [-0.5, 0.7]),
    ("HardSigmoid", [0.3, 0.4]),
]


@pytest.mark.parametrize("act", ACTS, ids=lambda a: a[0] or "none")
@pytest.mark.parametrize("z", [False, True], ids=["no_z", "z"])
def test_fused_conv(fuselab, tmp_path, act, z):
    name, params = act
    rng = np.random.default_rng(11)
    x_shape, w_shape = (2, 4, 9, 8), (6, 2, 3, 3)
    attrs = {"group": 2, "pads": [1, 0, 1, 2], "strides": [1, 2]}
    if name:
        attrs["activation"] = name
    if params:
        attrs["activation_params"] = params
    inits = {
        "W": rng.standard_normal(w_shape).astype(np.float32) * 0.3,
        "B": rng.standard_normal(6).astype(np.float32),
    }
    inputs = [("X", F32, x_shape)]
    names = ["X", "W", "B"]
    feeds = {"X": rng.standard_normal(x_shape).astype(np.float32)}
    if z:
        # Y: [2, 6, 9, 4] (H: 9 + 2 - 3 + 1; W: floor((8 + 2 - 3) / 2) + 1).
        inputs.append(("Z", F32, (2, 6, 9, 4)))
        names.append("Z")
        feeds["Z"] = rng.standard_normal((2, 6, 9, 4)).astype(np.float32)
    node = helper.make_node("FusedConv", names, ["Y"], domain=MS, **attrs)
    m = model(node, inputs, [("Y", F32)], inits)
    compare(fuselab, tmp_path, m, feeds, f"FusedConv {name} z={z}")


# ---------------------------------------------------------------------------------------------
# ConvInteger and QLinearConv


@pytest.mark.parametrize("w_type", [np.uint8, np.int8], ids=["w_uint8", "w_int8"])
def test_conv_integer(fuselab, tmp_path, w_type):
    rng = np.random.default_rng(5)
    info = np.iinfo(w_type)
    inits = {
        "W": rng.integers(info.min, info.max + 1, size=(4, 3, 3, 3)).astype(w_type),
        "x_zp": np.array(130, np.uint8),
        "w_zp": np.array(3, w_type),
    }
    node = helper.make_node(
        "ConvInteger", ["X", "W", "x_zp", "w_zp"], ["Y"], pads=[1, 1, 1, 1], strides=[2, 1]
    )
    x_shape = (1, 3, 7, 6)
    m = model(node, [("X", TensorProto.UINT8, x_shape)], [("Y", TensorProto.INT32)], inits)
    feeds = {"X": rng.integers(0, 256, size=x_shape).astype(np.uint8)}
    try:
        ort_run(m, feeds)
    except Exception as e:  # onnxruntime's CPU kernel takes some type pairs only
        pytest.skip(f"onnxruntime refuses ConvInteger x uint8, w {np.dtype(w_type).name}: {e}")
    compare(fuselab, tmp_path, m, feeds, "ConvInteger", exact=True)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_qlinear_conv(fuselab, tmp_path, per_channel):
    rng = np.random.default_rng(9)
    m_out = 4
    inits = {
        "x_scale": np.array(0.02, np.float32),
        "x_zp": np.array(120, np.uint8),
        "W": rng.integers(-100, 101, size=(m_out, 3, 3, 3)).astype(np.int8),
        "w_scale": (rng.random(m_out if per_channel else ()) * 0.01 + 0.005).astype(np.float32),
        "w_zp": np.zeros(m_out if per_channel else (), np.int8),
        "y_scale": np.array(0.05, np.float32),
        "y_zp": np.array(128, np.uint8),
        "B": rng.integers(-500, 501, size=m_out).astype(np.int32),
    }
    names = ["X", "x_scale", "x_zp", "W", "w_scale", "w_zp", "y_scale", "y_zp", "B"]
    node = helper.make_node("QLinearConv", names, ["Y"], pads=[1, 1, 1, 1])
    x_shape = (1, 3, 6, 5)
    m = model(node, [("X", TensorProto.UINT8, x_shape)], [("Y", TensorProto.UINT8)], inits)
    feeds = {"X": rng.integers(0, 256, size=x_shape).astype(np.uint8)}
    compare(fuselab, tmp_path, m, feeds, "QLinearConv", steps=1)
