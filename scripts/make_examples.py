#!/usr/bin/env python3
"""Builds the bundled example models under examples/.

Run from the repository root:

    .venv/bin/python scripts/make_examples.py [--out-dir examples]

examples/eyelike_add.onnx: Y = Add(EyeLike(X), X), X and Y float32 [N, N] with N symbolic,
opset 17 (default domain), IR version 8. The model is checked with
onnx.checker.check_model(full_check=True) before it is written. Output is deterministic, so
rerunning it leaves the committed file unchanged.
"""
from __future__ import annotations

import argparse
import os
import sys

import onnx
from onnx import TensorProto, helper

PRODUCER = "fuselab-scripts"


def eyelike_add() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", "N"])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", "N"])
    nodes = [
        helper.make_node("EyeLike", ["X"], ["E"], name="eyelike"),
        helper.make_node("Add", ["E", "X"], ["Y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "eyelike_add", [x], [y])
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8,
        producer_name=PRODUCER,
    )


MODELS = {"eyelike_add.onnx": eyelike_add}


def main(argv: list[str] | None = None) -> int:
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default=os.path.join(repo, "examples"))
    args = ap.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    for filename, build in MODELS.items():
        model = build()
        onnx.checker.check_model(model, full_check=True)
        path = os.path.join(args.out_dir, filename)
        onnx.save(model, path)
        print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(model.graph.node)} nodes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
