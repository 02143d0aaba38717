#!/usr/bin/env python3
"""One decode step (1 new token after PAST cached ones) of the real-size decoders: fuselab's
optimized graph against onnxruntime on the original, in one run (issue 16, item 4).

Run from the repository root after `cargo build --release --bin fuselab` and `bash setup.sh`
(which writes tests/models/real/*.data):

    .venv/bin/python benches/decode_step.py [--past 127] [--runs 20] [--warmup 3] [--threads N]

onnxruntime: one session (CPU EP, ORT_ENABLE_ALL, N intra-op threads) fed input_ids [1, 1],
attention_mask ones [1, PAST + 1] and the past keys/values drawn from N(0, 1). fuselab:
`fuselab bench MODEL --dim batch=1 --dim seq=1 --dim past=PAST --dim total=PAST+1` (its own
seeded inputs of the same shapes; the latency does not depend on the values).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ort_timing import session, time_ms  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["gpt2_small_decode", "llama12_decode"]
ELEM = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.INT64: np.int64}


def feeds(path: str, past: int, rng: np.random.Generator) -> dict:
    dims = {"batch": 1, "seq": 1, "past": past, "total": past + 1}
    out = {}
    for vi in onnx.load(path, load_external_data=False).graph.input:
        shape = [d.dim_value or dims[d.dim_param] for d in vi.type.tensor_type.shape.dim]
        dtype = ELEM[vi.type.tensor_type.elem_type]
        if vi.name == "attention_mask":
            out[vi.name] = np.ones(shape, dtype)
        elif dtype == np.int64:
            out[vi.name] = rng.integers(0, 1000, shape, dtype=dtype)
        else:
            out[vi.name] = rng.standard_normal(shape).astype(dtype)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--past", type=int, default=127)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "fuselab"))
    a = ap.parse_args()
    rows = []
    for m in a.models.split(","):
        path = os.path.join(REPO, "tests", "models", "real", f"{m}.onnx")
        if not os.path.exists(path + ".data"):
            raise SystemExit(f"{path}.data is missing: run `bash setup.sh`")
        sess = session(path, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, a.threads)
        f = feeds(path, a.past, np.random.default_rng(0))
        o = time_ms(lambda: sess.run(None, f), a.runs, a.warmup)
        del sess
        argv = [a.bin, "bench", path, "--dim", "batch=1", "--dim", "seq=1", "--dim",
                f"past={a.past}", "--dim", f"total={a.past + 1}", "--runs", str(a.runs),
                "--warmup", str(a.warmup), "--json"]
        if a.threads > 1:
            argv += ["--threads", str(a.threads)]
        j = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True,
                                      cwd=REPO).stdout)
        row = {"model": m, "past": a.past, "threads": a.threads, "ort_ms": o["median_ms"],
               "fuselab_original_ms": j["original"]["median_ms"],
               "fuselab_optimized_ms": j["optimized"]["median_ms"],
               "nodes_before": j["nodes_before"], "nodes_after": j["nodes_after"]}
        row["fuselab_over_ort"] = row["fuselab_optimized_ms"] / row["ort_ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print(f"onnxruntime {ort.__version__} CPU ({a.threads} thread(s)) vs fuselab, decode step "
          f"at past {a.past}, {a.runs} runs")
    print("| model | nodes | onnxruntime ms | fuselab original ms | fuselab optimized ms | fuselab/ORT |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['nodes_before']} → {r['nodes_after']} | {r['ort_ms']:.2f} | "
              f"{r['fuselab_original_ms']:.2f} | {r['fuselab_optimized_ms']:.2f} | "
              f"{r['fuselab_over_ort']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
