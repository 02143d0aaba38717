"""The gated activations with onnxruntime as the client: `quick_gelu` (x·sigmoid(α·x) →
com.microsoft.QuickGelu, SiLU at α = 1), `hard_swish` (x·HardSigmoid(x, 1/6, 0.5) → HardSwish)
and `hard_swish_clip` (x·Clip(x + 3, 0, 6)/6 → HardSwish, or x·HardSigmoid below opset 14).
`fuselab optimize` writes the fused model; onnxruntime (CPU) runs original and optimized on the
same input and the outputs agree within 1e-6. On the Llama/Qwen exports the SiLU of each MLP fuses.

Run from the repository root:

    FUSELAB_BIN=$PWD/target/release/fuselab .venv/bin/python -m pytest -q tests/python/test_activation_fusions.py
"""
from __future__ import annotations


import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import REPO, optimized_ops

SHAPE = [2, 5, 16]


def model(kind: str):
    inits, nodes = [], []
    if kind == "silu":
        nodes += [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["s", "x"], ["y"])]
    elif kind == "quick_gelu":
        inits.append(numpy_helper.from_array(np.array(1.702, np.float32), "alpha"))
        nodes += [helper.make_node("Mul", ["x", "alpha"], ["u"]), helper.make_node("Sigmoid", ["u"], ["s"]),
                  helper.make_node("Mul", ["x", "s"], ["y"])]
    else:
        nodes += [helper.make_node("HardSigmoid", ["x"], ["s"], alpha=1 / 6, beta=0.5),
                  helper.make_node("Mul", ["x", "s"], ["y"])]
    g = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def run(path, feeds):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("kind,op", [("silu", "QuickGelu"), ("quick_gelu", "QuickGelu"), ("hard_swish", "HardSwish")])
def test_fused_activation_runs_in_onnxruntime(fuselab, tmp_path, kind, op):
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model(kind), str(src))
    ops = optimized_ops(fuselab, src, out)
    assert ops == {op: 1}, ops
    feeds = {"x": (np.random.default_rng(5).standard_normal(SHAPE) * 4).astype(np.float32)}
    want, got = run(src, feeds), run(out, feeds)
    assert float(np.abs(want[0] - got[0]).max()) <= 1e-6


@pytest.mark.parametrize("stem", ["llama_gqa_tiny", "llama_gqa_tiny_dynamo", "qwen2_tiny"])
def test_the_swiglu_gate_of_every_layer_fuses(fuselab, tmp_path, stem):
    out = tmp_path / "out.onnx"
    ops = optimized_ops(fuselab, REPO / "tests" / "models" / "zoo" / f"{stem}.onnx", out)
    assert ops["QuickGelu"] == 2 and ops["Sigmoid"] == 0, ops


def relu6_hard_swish(opset: int, order: str):
    """`x · Clip(x + 3, 0, 6) / 6` as paddle2onnx writes it ("mul_div") or with the division
    first ("div_mul")."""
    c = {k: numpy_helper.from_array(np.array(v, np.float32), k)
         for k, v in {"three": 3.0, "lo": 0.0, "hi": 6.0, "six": 6.0}.items()}
    nodes = [helper.make_node("Add", ["x", "three"], ["u"]),
             helper.make_node("Clip", ["u", "lo", "hi"], ["r"])]
    if order == "mul_div":
        nodes += [helper.make_node("Mul", ["x", "r"], ["m"]), helper.make_node("Div", ["m", "six"], ["y"])]
    else:
        nodes += [helper.make_node("Div", ["r", "six"], ["d"]), helper.make_node("Mul", ["d", "x"], ["y"])]
    g = helper.make_graph(nodes, "relu6_hard_swish",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(c.values()))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    return m


@pytest.mark.parametrize("order", ["mul_div", "div_mul"])
@pytest.mark.parametrize("opset,want", [(12, {"HardSigmoid": 1, "Mul": 1}), (17, {"HardSwish": 1})])
def test_relu6_hard_swish_runs_in_onnxruntime(fuselab, tmp_path, order, opset, want):
    # hard_swish_clip: HardSwish at opset 17; below 14, where ONNX has no HardSwish and the
    # import is not raised, x · HardSigmoid(x, 1/6, 0.5).
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(relu6_hard_swish(opset, order), str(src))
    ops = optimized_ops(fuselab, src, out)
    assert dict(ops) == want, ops
    assert [o.version for o in onnx.load(str(out)).opset_import if o.domain in ("", "ai.onnx")] == [opset]
    x = np.linspace(-8, 8, int(np.prod(SHAPE)), dtype=np.float32).reshape(SHAPE)
    want_y = run(src, {"x": x})[0]
    got = run(out, {"x": x})[0]
    assert float(np.abs(want_y - got).max()) <= 1e-6
