"""The `conv_activation` fusion (Conv [+ residual Add] + activation → com.microsoft.FusedConv)
with onnxruntime as the client: `fuselab optimize` writes the fused model, onnxruntime (CPU) runs
original and optimized on the same input, and the outputs agree within 1e-5 (1e-4 on the
torchvision exports). How the counts compare with onnxruntime's own session optimizer is
tests/python/test_anchors.py.

Run from the repository root:

    FUSELAB_BIN=$PWD/target/release/fuselab .venv/bin/python -m pytest -q tests/python/test_conv_fusions.py
"""
from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[2]
F32 = TensorProto.FLOAT


def conv_model(act: str, attrs: dict, bounds: list[float], residual: bool, opset: int = 17):
    rng = np.random.default_rng(len(act))
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t"], pads=[1, 1, 1, 1])]
    inputs = [helper.make_tensor_value_info("x", F32, [2, 3, 5, 5])]
    t = "t"
    if residual:
        inputs.append(helper.make_tensor_value_info("z", F32, [2, 4, 5, 5]))
        nodes.append(helper.make_node("Add", ["t", "z"], ["s"]))
        t = "s"
    names = [t]
    for i, v in enumerate(bounds):
        inits.append(numpy_helper.from_array(np.array(v, np.float32), f"bound{i}"))
        names.append(f"bound{i}")
    nodes.append(helper.make_node(act, names, ["y"], **attrs))
    g = helper.make_graph(nodes, "conv_act", inputs, [helper.make_tensor_value_info("y", F32, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


CASES = [
    ("relu", "Relu", {}, [], False, 17),
    ("leaky", "LeakyRelu", {"alpha": 0.3}, [], False, 17),
    ("hardsigmoid", "HardSigmoid", {"alpha": 0.25}, [], False, 17),
    ("clip11", "Clip", {}, [-0.5, 0.5], False, 17),
    ("clip6", "Clip", {"min": 0.0, "max": 6.0}, [], False, 10),
    ("sigmoid_z", "Sigmoid", {}, [], True, 17),
    ("relu_z", "Relu", {}, [], True, 17),
]


def run(path, feeds):
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_fused_conv_runs_in_onnxruntime(fuselab, tmp_path, case):
    name, act, attrs, bounds, residual, opset = case
    src = tmp_path / "in.onnx"
    onnx.save(conv_model(act, attrs, bounds, residual, opset), str(src))
    out = tmp_path / "out.onnx"
    fuselab.ok("optimize", src, "-o", out)
    ops = collections.Counter(n.op_type for n in onnx.load(str(out)).graph.node)
    assert ops == {"FusedConv": 1}, ops
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((2, 3, 5, 5)).astype(np.float32)}
    if residual:
        feeds["z"] = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    want, got = run(src, feeds), run(out, feeds)
    d = float(np.abs(want[0] - got[0]).max())
    print(f"{name}: max |fused - original| in onnxruntime = {d:.3g}")
    assert d <= 1e-5, name


@pytest.mark.parametrize("stem", ["torchvision/mobilenet_v3_small", "torchvision/resnet18",
                                  # the same through torch's dynamo exporter
                                  "torchvision/mobilenet_v3_small_dynamo",
                                  "torchvision/resnet18_dynamo",
                                  # IR 3: weights listed as graph inputs, read as constants
                                  "onnx_light/resnet50", "onnx_light/densenet121",
                                  "onnx_light/inception_v2"])
def test_cnn_fusions_run_in_onnxruntime(fuselab, tmp_path, stem):
    """The counts against onnxruntime's session optimizer are tests/python/test_anchors.py."""
    src = REPO / "tests/data/models" / f"{stem}.onnx"
    stem = Path(stem).name
    if not src.exists():
        pytest.fail(f"{src} is missing: run scripts/setup.sh (scripts/fetch_models.py)")
    local = tmp_path / f"{stem}.onnx"
    local.write_bytes(src.read_bytes())
    out = tmp_path / f"{stem}.fused.onnx"
    fuselab.ok("optimize", local, "-o", out, "--dim", "batch=1")
    saved = onnx.load(str(out))
    assert sum(n.op_type == "FusedConv" for n in saved.graph.node) > 0
    # The IR is kept; under IR 3 every initializer (the folded ones too) is listed as an input.
    assert saved.ir_version == onnx.load(str(local)).ir_version
    onnx.checker.check_model(saved)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    name = ort.InferenceSession(str(local), providers=["CPUExecutionProvider"]).get_inputs()[0].name
    d = float(np.abs(run(local, {name: x})[0] - run(out, {name: x})[0]).max())
    assert d <= 1e-4, d


@pytest.mark.parametrize("stem", ["inception_v2", "resnet50"])
def test_float16_cnn_folds_its_norms_and_runs_in_onnxruntime(fuselab, tmp_path, stem):
    """An IR 3 CNN through onnxruntime's fp16 converter (keep_io_types): every BatchNormalization
    and Caffe2's Mul/Add after it fold into float16 Convs, the graph has no more nodes than
    onnxruntime's own session optimizer leaves, and onnxruntime runs it within the float16
    tolerance of the original (onnxruntime's own folding of the same file moves resnet50's output
    by 1.5e-2)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    src = REPO / "tests/data/models/onnx_light" / f"{stem}.onnx"
    if not src.exists():
        pytest.fail(f"{src} is missing: run scripts/setup.sh (scripts/fetch_models.py)")
    half = tmp_path / f"{stem}_fp16.onnx"
    onnx.save(convert_float_to_float16(onnx.load(str(src)), keep_io_types=True), str(half))
    out = tmp_path / f"{stem}_fp16.fused.onnx"
    fuselab.ok("optimize", half, "-o", out)
    saved = onnx.load(str(out))
    onnx.checker.check_model(saved)
    ops = collections.Counter(n.op_type for n in saved.graph.node)
    assert ops["BatchNormalization"] == 0, ops
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "ort.onnx")
    ort.InferenceSession(str(half), so, providers=["CPUExecutionProvider"])
    theirs = len(onnx.load(str(tmp_path / "ort.onnx")).graph.node)
    assert len(saved.graph.node) <= theirs, (len(saved.graph.node), theirs)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    name = ort.InferenceSession(str(half), providers=["CPUExecutionProvider"]).get_inputs()[0].name
    d = float(np.abs(run(half, {name: x})[0] - run(out, {name: x})[0]).max())
    assert d <= 2e-2, d
