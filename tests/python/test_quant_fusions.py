"""The quantized MatMul fusions with onnxruntime as the client: `matmul_nbits` (blocked
DequantizeLinear of a constant weight → MatMul → com.microsoft.MatMulNBits, the weight repacked)
and `dynamic_quantize_matmul` (quantize_dynamic's DynamicQuantizeLinear → MatMulInteger → Cast →
Mul [→ Add] → com.microsoft.DynamicQuantizeMatMul). `fuselab optimize` writes the fused model,
onnxruntime (CPU) runs original and optimized on the same inputs, and the outputs agree.

The QDQ originals run at ORT_ENABLE_BASIC: at ORT_ENABLE_ALL onnxruntime fuses DequantizeLinear →
MatMul into its own MatMulNBits with accuracy_level 4 (activations quantized to int8), which
moves llama_gqa_tiny_int4_qdq's logits by 5e-3 from the DequantizeLinear → MatMul it replaces;
the fused model states no accuracy_level (0: float32 products), the QDQ graph's math.

Run from the repository root:

    FUSELAB_BIN=$PWD/target/release/fuselab .venv/bin/python -m pytest -q \
        tests/python/test_quant_fusions.py
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import REPO, optimized_ops

ZOO = REPO / "tests" / "models" / "zoo"
N = 24
CODES = {  # element type -> (low, high)
    TensorProto.INT4: (-8, 7), TensorProto.UINT4: (0, 15),
    TensorProto.INT8: (-128, 127), TensorProto.UINT8: (0, 255),
}


def run(path, feeds, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    s = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def qdq_matmul(wtype: int, zero_point: bool, k: int, block: int, np_dtype) -> onnx.ModelProto:
    """y = MatMul(a, DequantizeLinear(w_q [k, N], scale [ceil(k / block), N], zp?)), opset 21."""
    rng = np.random.default_rng(k + wtype)
    lo, hi = CODES[wtype]
    nb = -(-k // block)
    elem = TensorProto.FLOAT16 if np_dtype == np.float16 else TensorProto.FLOAT
    inits = [
        helper.make_tensor("w_q", wtype, [k, N], rng.integers(lo, hi + 1, k * N).tolist()),
        numpy_helper.from_array((0.01 + 0.02 * rng.random((nb, N))).astype(np_dtype), "scale"),
    ]
    ins = ["w_q", "scale"]
    if zero_point:
        inits.append(helper.make_tensor("zp", wtype, [nb, N],
                                        rng.integers(lo, hi + 1, nb * N).tolist()))
        ins.append("zp")
    nodes = [
        helper.make_node("DequantizeLinear", ins, ["w"], axis=0, block_size=block),
        helper.make_node("MatMul", ["a", "w"], ["y"]),
    ]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("a", elem, [2, 5, k])],
                          [helper.make_tensor_value_info("y", elem, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


CASES = [
    # id, weight type, zero point, K, block, activations' dtype, tolerance relative to max |y|
    # (measured: 0 in float32, the same products in the same order; one float16 ulp)
    ("int4_sym", TensorProto.INT4, False, 64, 32, np.float32, 1e-6),
    ("int4_zp_partial_block", TensorProto.INT4, True, 48, 32, np.float32, 1e-6),
    ("uint4", TensorProto.UINT4, False, 64, 16, np.float32, 1e-6),
    ("uint4_zp_partial_block", TensorProto.UINT4, True, 80, 64, np.float32, 1e-6),
    ("int8_sym", TensorProto.INT8, False, 64, 32, np.float32, 1e-6),
    ("uint8_zp", TensorProto.UINT8, True, 96, 32, np.float32, 1e-6),
    ("int4_f16", TensorProto.INT4, True, 64, 32, np.float16, 2e-3),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_fused_matmul_nbits_runs_in_onnxruntime(fuselab, tmp_path, case):
    _, wtype, zero_point, k, block, np_dtype, tol = case
    src = tmp_path / "in.onnx"
    onnx.save(qdq_matmul(wtype, zero_point, k, block, np_dtype), str(src))
    out = tmp_path / "out.onnx"
    ops = optimized_ops(fuselab, src, out)
    assert ops == {"MatMulNBits": 1}, ops
    feeds = {"a": np.random.default_rng(3).standard_normal((2, 5, k)).astype(np_dtype)}
    want = run(src, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)[0]
    got = run(out, feeds)[0]
    assert want.dtype == got.dtype and want.shape == got.shape
    scale = max(1.0, float(np.abs(want).max()))
    d = float(np.abs(want.astype(np.float64) - got.astype(np.float64)).max())
    assert d <= tol * scale, (d, scale)


TEXT = {"input_ids": np.random.default_rng(7).integers(0, 1000, (2, 7)).astype(np.int64),
        "attention_mask": np.array([[1] * 7, [0, 0, 1, 1, 1, 1, 1]], np.int64)}


def test_llama_qdq_fuses_like_its_matmulnbits_twin(fuselab, tmp_path):
    src = ZOO / "llama_gqa_tiny_int4_qdq.onnx"
    out = tmp_path / "out.onnx"
    ops = optimized_ops(fuselab, src, out)
    twin = optimized_ops(fuselab, ZOO / "llama_gqa_tiny_int4.onnx", tmp_path / "twin.onnx")
    assert ops == twin, (ops, twin)
    for op, n in [("MatMulNBits", 15), ("MultiHeadAttention", 2), ("RotaryEmbedding", 4),
                  ("SimplifiedLayerNormalization", 1), ("SkipSimplifiedLayerNormalization", 4),
                  ("QuickGelu", 2), ("DequantizeLinear", 0), ("MatMul", 0)]:
        assert ops[op] == n, (op, ops)
    want = run(src, TEXT, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)[0]
    got = run(out, TEXT)[0]
    assert float(np.abs(want - got).max()) <= 1e-4


def test_bert_int8_fuses_every_matmulinteger(fuselab, tmp_path):
    src = ZOO / "bert_tiny_int8.onnx"
    before = onnx.load(str(src))
    n_mmi = sum(n.op_type == "MatMulInteger" for n in before.graph.node)
    assert n_mmi == 13
    out = tmp_path / "out.onnx"
    ops = optimized_ops(fuselab, src, out)
    assert ops["DynamicQuantizeMatMul"] == n_mmi, ops
    for op in ("MatMulInteger", "DynamicQuantizeLinear"):
        assert ops[op] == 0, (op, ops)
    rng = np.random.default_rng(5)
    feeds = {"input_ids": rng.integers(0, 1000, (2, 8)).astype(np.int64),
             "attention_mask": np.array([[1] * 8, [1] * 6 + [0, 0]], np.int64),
             "token_type_ids": np.array([[0] * 4 + [1] * 4] * 2, np.int64)}
    want, got = run(src, feeds), run(out, feeds)
    for w, g in zip(want, got, strict=True):
        # Same quantization of the same A, same integer products: only float rounding of the
        # ops around them may differ, and a rounding flip in a later DynamicQuantizeLinear moves
        # an output by one activation step.
        assert float(np.abs(w - g).max()) <= 1e-2 * float(np.abs(w).max())
