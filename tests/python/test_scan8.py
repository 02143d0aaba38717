"""Scan at opset 8 (batched, with sequence_lens and directions) on fuselab's reference backend
against onnxruntime (CPU): a running-sum body with a state and two scan outputs, for full and
ragged sequence lengths, both directions.

Run from the repository root:

    FUSELAB_BIN=$PWD/target/release/fuselab .venv/bin/python -m pytest -q tests/python/test_scan8.py
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnx import TensorProto, helper
from test_fused_ops import compare, fuselab_run, ort_run

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def scan8_model(directions: list[int] | None, with_lens: bool):
    # State s [2]; scan input x [2]; outputs: s + x (the new state), s + x and x * 2 per step.
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x"], ["s_out"]),
            helper.make_node("Identity", ["s_out"], ["y"]),
            helper.make_node("Add", ["x", "x"], ["z"]),
        ],
        "body",
        [helper.make_tensor_value_info("s_in", F32, [2]), helper.make_tensor_value_info("x", F32, [2])],
        [
            helper.make_tensor_value_info("s_out", F32, [2]),
            helper.make_tensor_value_info("y", F32, [2]),
            helper.make_tensor_value_info("z", F32, [2]),
        ],
    )
    attrs = {"body": body, "num_scan_inputs": 1}
    if directions is not None:
        attrs["directions"] = directions
    node = helper.make_node("Scan", ["L" if with_lens else "", "S0", "X"], ["S", "Y", "Z"], **attrs)
    inputs = [
        helper.make_tensor_value_info("S0", F32, [3, 2]),
        helper.make_tensor_value_info("X", F32, [3, 4, 2]),
    ]
    if with_lens:
        inputs.insert(0, helper.make_tensor_value_info("L", I64, [3]))
    g = helper.make_graph(
        [node], "scan8", inputs, [helper.make_tensor_value_info(n, F32, None) for n in "SYZ"]
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 8)])
    m.ir_version = 4
    return m


@pytest.mark.parametrize("directions", [None, [0], [1]], ids=["default", "forward", "reverse"])
@pytest.mark.parametrize("lens", [None, [4, 1, 3], [2, 4, 1]], ids=["full", "ragged", "ragged2"])
def test_scan8_matches_onnxruntime(fuselab, tmp_path, directions, lens):
    rng = np.random.default_rng(8)
    feeds = {
        "S0": rng.standard_normal((3, 2)).astype(np.float32),
        "X": rng.standard_normal((3, 4, 2)).astype(np.float32),
    }
    if lens is not None:
        feeds["L"] = np.array(lens, dtype=np.int64)
    m = scan8_model(directions, lens is not None)
    want = ort_run(m, feeds)
    got = fuselab_run(fuselab, m, feeds, tmp_path)
    compare(got, want, f"Scan-8 directions={directions} lens={lens}")


def test_scan8_empty_sequence_is_refused_like_onnxruntime(fuselab, tmp_path):
    """onnxruntime refuses a sequence length of 0 ("Invalid entries in sequence_lens"); so does
    fuselab, naming the value and the allowed range."""
    feeds = {
        "L": np.array([0, 4, 2], dtype=np.int64),
        "S0": np.zeros((3, 2), np.float32),
        "X": np.ones((3, 4, 2), np.float32),
    }
    m = scan8_model(None, True)
    with pytest.raises(Exception, match="sequence_lens"):
        ort_run(m, feeds)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    args = ["run", path]
    for name, arr in feeds.items():
        np.save(tmp_path / f"{name}.npy", arr)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    r = fuselab(*args, "--out", tmp_path / "out")
    assert r.returncode != 0 and "sequence_lens holds 0, outside 1..=4" in r.stderr, r.stderr
