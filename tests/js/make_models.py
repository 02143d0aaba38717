"""Models the page tests build instead of committing them (tests/js/page_models.test.mjs).

  make_models.py unsupported SRC OUT   SRC (a transformer the optimizer fuses) with two ops of
                                       a made-up domain appended, which no backend has kernels
                                       for, after its output: the page must still show
                                       graphs and fusions, and compares the output (partial
                                       parity).
  make_models.py unsupported_input SRC OUT
                                       the same two ops on SRC's first input instead: every
                                       output needs them, so parity cannot check anything.
  make_models.py layers N OUT          a transformer-like stack of at least N nodes (pre-norm
                                       blocks: LayerNorm, Q/K/V MatMuls, Shape-fed Reshapes,
                                       masked softmax attention, Tanh MLP, residual Adds) with
                                       tiny weights, shared by every block: a big graph in a
                                       small file.
  make_models.py residual OUT          a ResNet basic block, x [batch, 8, 16, 16]: Conv →
                                       BatchNormalization → Relu → Conv → BatchNormalization →
                                       Add(x) → Relu, seeded weights (the residual Add that
                                       onnxruntime's FusedConv takes as Z), then a 1x1 Conv
                                       without a bias → Relu.
  make_models.py strip SRC OUT         SRC's graph with every external-data initializer made
                                       a graph input (same name, type and shape): a real
                                       model's graph (tests/models/real, whose .data files are
                                       not in the repository) for timing the page's layout.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def unsupported(src, out):
    m = onnx.load(src)
    g = m.graph
    last = g.output[0].name
    g.node.append(helper.make_node("Scramble", [last], ["scrambled"], name="scramble", domain="com.example"))
    g.node.append(helper.make_node("Unscramble", ["scrambled"], ["unscrambled"], name="unscramble", domain="com.example"))
    g.output.append(helper.make_tensor_value_info("unscrambled", TensorProto.FLOAT, None))
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    onnx.save(m, out)


def unsupported_input(src, out):
    m = onnx.load(src)
    g = m.graph
    x = g.input[0]
    for n in g.node:
        n.input[:] = ["unscrambled" if i == x.name else i for i in n.input]
    g.node.insert(0, helper.make_node("Unscramble", ["scrambled"], ["unscrambled"], name="unscramble", domain="com.example"))
    g.node.insert(0, helper.make_node("Scramble", [x.name], ["scrambled"], name="scramble", domain="com.example"))
    # The graph still knows the value's type and shape, so the passes after it can fuse.
    g.value_info.append(helper.make_value_info("unscrambled", x.type))
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    onnx.save(m, out)


def layers(n, out):
    d = 4
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((d, d)).astype(np.float32) * 0.1, "W"),
        numpy_helper.from_array(np.zeros(d, np.float32) + 0.1, "B"),
        numpy_helper.from_array(np.ones(d, np.float32), "gamma"),
        numpy_helper.from_array(np.zeros(d, np.float32), "beta"),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
    ]
    nodes = []

    def op(op_type, ins, **attrs):
        name = f"/layers.{len(nodes) // 24}/{op_type}_{len(nodes)}"
        nodes.append(helper.make_node(op_type, ins, [name + "_out"], name=name, **attrs))
        return name + "_out"

    h = "hidden"
    while len(nodes) < n:
        ln = op("LayerNormalization", [h, "gamma", "beta"], axis=-1)
        q, k, v = (op("MatMul", [ln, "W"]) for _ in range(3))
        shape = op("Shape", [ln])
        qr, kr, vr = (op("Reshape", [x, shape]) for x in (q, k, v))
        scores = op("Add", [op("Div", [op("MatMul", [qr, op("Transpose", [kr], perm=[0, 2, 1])]), "two"]), "mask"])
        ctx = op("MatMul", [op("Softmax", [scores], axis=-1), vr])
        r1 = op("Add", [op("Add", [op("MatMul", [ctx, "W"]), "B"]), h])
        ln2 = op("LayerNormalization", [r1, "gamma", "beta"], axis=-1)
        mlp = op("Add", [op("MatMul", [op("Tanh", [op("Add", [op("MatMul", [ln2, "W"]), "B"])]), "W"]), "B"])
        h = op("Add", [mlp, r1])
    nodes.append(helper.make_node("Identity", [h], ["out"], name="/final/Identity"))
    graph = helper.make_graph(
        nodes, "layers",
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "seq", d]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["seq", "seq"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "seq", d])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, out)


def residual(out):
    rng = np.random.default_rng(5)
    c = 8
    inits, nodes = [], []

    def const(name, a):
        inits.append(numpy_helper.from_array(a.astype(np.float32), name))
        return name

    def conv_bn(x, i, relu):
        w = const(f"w{i}", rng.normal(0, 0.2, (c, c, 3, 3)))
        nodes.append(helper.make_node("Conv", [x, w], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]))
        bn = [const(f"{k}{i}", v) for k, v in [("scale", rng.uniform(0.5, 1.5, c)), ("shift", rng.normal(0, 0.1, c)),
                                                ("mean", rng.normal(0, 0.1, c)), ("var", rng.uniform(0.5, 1.5, c))]]
        nodes.append(helper.make_node("BatchNormalization", [f"c{i}", *bn], [f"n{i}"], name=f"bn{i}"))
        if relu:
            nodes.append(helper.make_node("Relu", [f"n{i}"], [f"r{i}"], name=f"relu{i}"))
            return f"r{i}"
        return f"n{i}"

    h = conv_bn("x", 1, True)
    t = conv_bn(h, 2, False)
    nodes.append(helper.make_node("Add", [t, "x"], ["sum"], name="residual"))
    nodes.append(helper.make_node("Relu", ["sum"], ["block"], name="relu_block"))
    # A Conv without a bias, then Relu: its FusedConv has two inputs.
    w3 = const("w3", rng.normal(0, 0.2, (c, c, 1, 1)))
    nodes.append(helper.make_node("Conv", ["block", w3], ["c3"], name="conv3"))
    nodes.append(helper.make_node("Relu", ["c3"], ["y"], name="relu_out"))
    shape = ["batch", c, 16, 16]
    g = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    # IR 8 (onnx 1.13+): onnxruntime-web 1.31 reads up to IR 13, and the onnx wheel writes 14.
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), out)


def strip(src, out):
    m = onnx.load(src, load_external_data=False)
    g = m.graph
    keep = []
    for t in g.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            keep.append(t)
    del g.initializer[:]
    g.initializer.extend(keep)
    onnx.save(m, out)


if __name__ == "__main__":
    if sys.argv[1] == "unsupported":
        unsupported(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "unsupported_input":
        unsupported_input(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "strip":
        strip(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "residual":
        residual(sys.argv[2])
    elif sys.argv[1] == "layers":
        layers(int(sys.argv[2]), sys.argv[3])
    else:
        sys.exit(__doc__)
