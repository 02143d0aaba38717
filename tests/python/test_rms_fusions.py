"""The `rms_norm` fusion (decomposed RMS norm → SimplifiedLayerNormalization, or RMSNormalization
at opset 23) and `skip_layer_norm` on its output (→ com.microsoft.SkipSimplifiedLayerNormalization)
with onnxruntime as the client: `fuselab optimize` writes the fused model, onnxruntime (CPU) runs
original and optimized on the same inputs, and the outputs agree (float32 within 1e-5, float16
within 2e-2). On the Llama/Qwen exports every norm fuses: the first one plain, the other four with
their residual Add, as onnxruntime's transformers optimizer finds them.

Run from the repository root:

    FUSELAB_BIN=$PWD/target/release/fuselab .venv/bin/python -m pytest -q tests/python/test_rms_fusions.py
"""
from __future__ import annotations


import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import REPO, optimized_ops

HIDDEN = 16
SHAPE = [2, 5, HIDDEN]


def rms(nodes, inits, x, tag, np_dtype, inverse="div_one", opset=17):
    """Appends the decomposed RMS norm of `x` (cast to float32 and back for float16); returns y."""
    f16 = np_dtype == np.float16
    xf = x
    if f16:
        nodes.append(helper.make_node("Cast", [x], [f"{tag}_xf"], to=TensorProto.FLOAT))
        xf = f"{tag}_xf"
    inits += [
        numpy_helper.from_array(np.array(2.0, np.float32), f"{tag}_two"),
        numpy_helper.from_array(np.array(1e-6, np.float32), f"{tag}_eps"),
        numpy_helper.from_array(np.array(1.0, np.float32), f"{tag}_one"),
        numpy_helper.from_array(
            np.random.default_rng(len(tag)).standard_normal(HIDDEN).astype(np_dtype), f"{tag}_w"),
    ]
    nodes.append(helper.make_node("Pow", [xf, f"{tag}_two"], [f"{tag}_sq"]))
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.array([-1], np.int64), f"{tag}_axes"))
        nodes.append(helper.make_node("ReduceMean", [f"{tag}_sq", f"{tag}_axes"], [f"{tag}_ms"]))
    else:
        nodes.append(helper.make_node("ReduceMean", [f"{tag}_sq"], [f"{tag}_ms"], axes=[-1]))
    nodes.append(helper.make_node("Add", [f"{tag}_ms", f"{tag}_eps"], [f"{tag}_ve"]))
    nodes.append(helper.make_node("Sqrt", [f"{tag}_ve"], [f"{tag}_rms"]))
    if inverse == "div_one":
        nodes.append(helper.make_node("Div", [f"{tag}_one", f"{tag}_rms"], [f"{tag}_r"]))
    else:
        nodes.append(helper.make_node("Reciprocal", [f"{tag}_rms"], [f"{tag}_r"]))
    nodes.append(helper.make_node("Mul", [xf, f"{tag}_r"], [f"{tag}_n"]))
    n = f"{tag}_n"
    if f16:
        nodes.append(helper.make_node("Cast", [n], [f"{tag}_nh"], to=TensorProto.FLOAT16))
        n = f"{tag}_nh"
    nodes.append(helper.make_node("Mul", [f"{tag}_w", n], [f"{tag}_y"]))
    return f"{tag}_y"


def decoder(np_dtype, inverse="div_one", opset=17):
    """Two pre-norm residual blocks and a final norm: y = norm(h2), h2 = h1 + sigmoid(norm(h1)),
    h1 = x + tanh(norm(x)); h2 is an output too."""
    elem = TensorProto.FLOAT16 if np_dtype == np.float16 else TensorProto.FLOAT
    nodes, inits = [], []
    n0 = rms(nodes, inits, "x", "n0", np_dtype, inverse, opset)
    nodes += [helper.make_node("Tanh", [n0], ["f"]), helper.make_node("Add", ["x", "f"], ["h1"])]
    n1 = rms(nodes, inits, "h1", "n1", np_dtype, inverse, opset)
    nodes += [helper.make_node("Sigmoid", [n1], ["g"]), helper.make_node("Add", ["h1", "g"], ["h2"])]
    n2 = rms(nodes, inits, "h2", "n2", np_dtype, inverse, opset)
    g = helper.make_graph(
        nodes, "decoder", [helper.make_tensor_value_info("x", elem, SHAPE)],
        [helper.make_tensor_value_info(n2, elem, None), helper.make_tensor_value_info("h2", elem, None)],
        inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10 if opset >= 21 else 8
    return m


def run(path, feeds):
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


CASES = [
    # id, dtype, inverse, opset, plain norm op, tolerance
    ("f32_legacy", np.float32, "div_one", 17, "SimplifiedLayerNormalization", 1e-5),
    ("f32_dynamo", np.float32, "reciprocal", 18, "SimplifiedLayerNormalization", 1e-5),
    ("f16_sandwich", np.float16, "div_one", 17, "SimplifiedLayerNormalization", 2e-2),
    ("f32_opset23", np.float32, "div_one", 23, "RMSNormalization", 1e-5),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_fused_rms_norms_run_in_onnxruntime(fuselab, tmp_path, case):
    _, np_dtype, inverse, opset, plain, tol = case
    src = tmp_path / "in.onnx"
    onnx.save(decoder(np_dtype, inverse, opset), str(src))
    out = tmp_path / "out.onnx"
    ops = optimized_ops(fuselab, src, out)
    assert ops == {plain: 1, "SkipSimplifiedLayerNormalization": 2, "Tanh": 1, "Sigmoid": 1}, ops
    feeds = {"x": np.random.default_rng(3).standard_normal(SHAPE).astype(np_dtype)}
    want, got = run(src, feeds), run(out, feeds)
    for w, g in zip(want, got):
        assert w.dtype == g.dtype
        d = float(np.abs(w.astype(np.float64) - g.astype(np.float64)).max())
        assert d <= tol, d


DECODERS = ["llama_gqa_tiny", "llama_gqa_tiny_dynamo", "llama_gqa_tiny_int4", "qwen2_tiny"]


@pytest.mark.parametrize("stem", DECODERS)
def test_every_norm_of_the_decoder_exports_fuses(fuselab, tmp_path, stem):
    src = REPO / "tests" / "models" / "zoo" / f"{stem}.onnx"
    out = tmp_path / "out.onnx"
    ops = optimized_ops(fuselab, src, out)
    # Two layers: the first norm reads the embeddings (no residual Add before it); the other four
    # (post-attention, next layer's input, post-attention, final) follow a residual Add.
    assert ops["SimplifiedLayerNormalization"] == 1, ops
    assert ops["SkipSimplifiedLayerNormalization"] == 4, ops
    for op in ("Pow", "Sqrt", "ReduceMean"):
        assert ops[op] == 0, (op, ops)
    rng = np.random.default_rng(7)
    feeds = {"input_ids": rng.integers(0, 100, (2, 7)).astype(np.int64),
             "attention_mask": np.array([[1] * 7, [0, 0, 1, 1, 1, 1, 1]], np.int64)}
    want, got = run(src, feeds), run(out, feeds)
    for w, g in zip(want, got):
        assert float(np.abs(w - g).max()) <= 1e-4
