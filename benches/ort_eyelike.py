#!/usr/bin/env python3
"""onnxruntime baseline for the worked example: times examples/eyelike_add.onnx on the CPU.

Run from the repository root:

    .venv/bin/python benches/ort_eyelike.py [--runs 200] [--warmup 20] [--sizes 64,256,1024]

One session (CPUExecutionProvider, intra_op_num_threads=1, inter_op_num_threads=1, default graph
optimization level) is timed per N on one seeded float32 [N, N] input: `--warmup` untimed runs,
then `--runs` timed ones. Prints one JSON line per N (n, runs, median_ms, min_ms, ...) and then a
human-readable table. ORT's own optimizer does not fuse EyeLike + Add, so this is the unfused
two-kernel cost fuselab's AddEyeLike is compared against.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys

import numpy as np
import onnxruntime as ort
from ort_timing import session, time_ms

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench(path: str, n: int, runs: int, warmup: int, seed: int) -> dict:
    sess = session(path)
    x = np.random.default_rng(seed).standard_normal((n, n), dtype=np.float32)
    feeds = {"X": x}
    y = sess.run(None, feeds)[0]
    # Sanity: the model is Y = X + I.
    expected = x + np.eye(n, dtype=np.float32)
    max_abs_diff = float(np.max(np.abs(y - expected))) if n else 0.0
    return {
        "backend": "onnxruntime-cpu",
        "ort_version": ort.__version__,
        "threads": 1,
        "n": n,
        "runs": runs,
        "warmup": warmup,
        **time_ms(lambda: sess.run(None, feeds), runs, warmup),
        "max_abs_diff_vs_numpy": max_abs_diff,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.join(REPO, "examples", "eyelike_add.onnx"))
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--sizes", default="64,256,1024", help="comma-separated N values")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    sizes = [int(s) for s in args.sizes.split(",") if s]

    rows = [bench(args.model, n, args.runs, args.warmup, args.seed) for n in sizes]
    for r in rows:
        print(json.dumps(r, sort_keys=True))
    print()
    print(
        f"onnxruntime {ort.__version__} CPU, 1 thread, {platform.machine()}, "
        f"{args.runs} runs after {args.warmup} warmup, {os.path.relpath(args.model)}"
    )
    print(f"{'N':>6}  {'median ms':>10}  {'min ms':>10}")
    for r in rows:
        print(f"{r['n']:>6}  {r['median_ms']:>10.4f}  {r['min_ms']:>10.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
