#!/usr/bin/env python3
"""fuselab's optimized GPT-2/BERT vs onnxruntime on the CPU: latency ratio per model and size.

Run from the repository root after `cargo build --release --bin fuselab`:

    .venv/bin/python benches/ort_transformers.py [--runs 200] [--warmup 20] [--sizes 1x8,2x8,1x128]
        [--models gpt2_tiny,...,real/gpt2_small] [--threads N] [--rounds R]

For each tests/models/*_tiny*.onnx and each BATCHxSEQ size, in one run of this script:
- onnxruntime: one session (CPUExecutionProvider, intra_op_num_threads=N (`--threads`, default
  1), inter_op_num_threads=1,
  graph_optimization_level=ORT_ENABLE_ALL, so it runs its own optimized graph) on seeded inputs
  of that size: `--warmup` untimed runs, then `--runs` timed ones;
- fuselab: `fuselab bench MODEL --dim batch=B --dim seq=S --json` (reference backend, single
  thread, or `--threads N`; original and optimized graphs interleaved on seeded inputs of the
  same shapes).
With `--rounds R` the two alternate R times (the session is made once) and the row is the round
with the median fuselab / onnxruntime ratio; `round_ratios` lists all of them, and
`fuselab_over_ort_min` divides each side's fastest run over all rounds.
Prints one JSON line per case and a table with fuselab optimized / onnxruntime (below 1.0 means
fuselab is faster) and fuselab's fused-vs-unfused speedup. Shapes and value ranges match; the
random values differ (latency does not depend on them for these models).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from ort_timing import session, time_ms

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["gpt2_tiny", "gpt2_tiny_op17", "bert_tiny", "bert_tiny_op17"]
# Index ranges of integer inputs (vocabulary 1000, two token types).
HIGH = {"input_ids": 1000, "token_type_ids": 2, "attention_mask": 2}


def ort_runner(path: str, batch: int, seq: int, seed: int, threads: int):
    """One onnxruntime session on seeded inputs of that size: a function that runs it once."""
    sess = session(path, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, threads)
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in onnx.load(path).graph.input:
        feeds[i.name] = rng.integers(0, HIGH.get(i.name, 2), size=(batch, seq), dtype=np.int64)
    if "attention_mask" in feeds:
        feeds["attention_mask"][:] = 1
    return lambda: sess.run(None, feeds)


def fuselab_bench(binary: str, path: str, batch: int, seq: int, runs: int, warmup: int,
                  threads: int) -> dict:
    argv = [binary, "bench", path, "--dim", f"batch={batch}", "--dim", f"seq={seq}",
            "--runs", str(runs), "--warmup", str(warmup), "--json"]
    if threads > 1:
        argv += ["--threads", str(threads)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--sizes", default="1x8,2x8,1x128", help="comma-separated BATCHxSEQ")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--bin", default=os.environ.get("FUSELAB_BIN",
                                                     os.path.join(REPO, "target/release/fuselab")))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="threads for both (onnxruntime's intra-op threads, fuselab --threads)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate onnxruntime and fuselab this many times (one session each "
                         "side's runs per round) and report the median of the per-round ratios: "
                         "on a shared machine whose speed drifts between sittings a single pair "
                         "of medians can be off by 20%%")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.rounds < 1:
        ap.error("--runs and --rounds must be at least 1")
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",") if s]
    rows = []
    for m in args.models.split(","):
        path = os.path.join(REPO, "tests", "models", f"{m}.onnx")
        for batch, seq in sizes:
            run_ort = ort_runner(path, batch, seq, args.seed, args.threads)
            pairs = []
            for r in range(args.rounds):
                # Odd rounds time fuselab first, so neither side always follows the other.
                if r % 2:
                    f = fuselab_bench(args.bin, path, batch, seq, args.runs, args.warmup,
                                      args.threads)
                    o = time_ms(run_ort, args.runs, args.warmup)
                else:
                    o = time_ms(run_ort, args.runs, args.warmup)
                    f = fuselab_bench(args.bin, path, batch, seq, args.runs, args.warmup,
                                      args.threads)
                pairs.append((o, f))
            ratios = [f["optimized"]["median_ms"] / o["median_ms"] for o, f in pairs]
            # The round whose ratio is the median is the one reported.
            o, f = pairs[sorted(range(len(ratios)), key=ratios.__getitem__)[len(ratios) // 2]]
            row = {
                "model": m, "batch": batch, "seq": seq, "runs": args.runs, "threads": args.threads,
                "rounds": args.rounds, "round_ratios": [round(x, 3) for x in ratios],
                "ort_median_ms": o["median_ms"],
                "fuselab_optimized_median_ms": f["optimized"]["median_ms"],
                "fuselab_original_median_ms": f["original"]["median_ms"],
                "fuselab_over_ort": f["optimized"]["median_ms"] / o["median_ms"],
                # Fastest run over all rounds, each side: what a neighbour's load slows least.
                "fuselab_over_ort_min": min(f["optimized"]["min_ms"] for _, f in pairs)
                / min(o["min_ms"] for o, _ in pairs),
                "fuselab_fused_speedup": f["speedup"],
                "nodes_before": f["nodes_before"], "nodes_after": f["nodes_after"],
                "max_abs_diff": f["max_abs_diff"],
            }
            rows.append(row)
            print(json.dumps(row, sort_keys=True), flush=True)
    print()
    print(f"onnxruntime {ort.__version__} CPU (ORT_ENABLE_ALL, {args.threads} thread(s)) vs fuselab reference "
          f"backend, {platform.machine()}, {args.runs} runs after {args.warmup} warmup, "
          f"{args.rounds} round(s) (the median round's)")
    print(f"{'model':<16} {'BxS':>6} {'ORT ms':>8} {'fuselab ms':>10} {'fuselab/ORT':>11} "
          f"{'fused speedup':>13}")
    for r in rows:
        print(f"{r['model']:<16} {r['batch']}x{r['seq']:<4} {r['ort_median_ms']:>8.4f} "
              f"{r['fuselab_optimized_median_ms']:>10.4f} {r['fuselab_over_ort']:>11.2f} "
              f"{r['fuselab_fused_speedup']:>12.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
