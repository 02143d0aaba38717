#!/usr/bin/env python3
"""Times two fuselab builds against each other in one sitting: for each model and size, the
two binaries' `fuselab bench --json` alternate (A B A B ...), so machine noise hits both alike.
Prints per case the median of each build's medians (original and optimized graph), the fused
speedup each build measured, and new/old time ratios.

    python3 benches/compare_builds.py OLD_BIN NEW_BIN [--rounds 3] [--runs 200]
"""
import argparse
import json
import statistics
import subprocess

CASES = [
    ("examples/eyelike_add.onnx", ["--dim", "N=256"]),
    ("examples/eyelike_add.onnx", ["--dim", "N=1024"]),
    ("tests/models/gpt2_tiny.onnx", ["--dim", "batch=1", "--dim", "seq=8"]),
    ("tests/models/gpt2_tiny.onnx", ["--dim", "batch=1", "--dim", "seq=128"]),
    ("tests/models/bert_tiny.onnx", ["--dim", "batch=1", "--dim", "seq=8"]),
    ("tests/models/bert_tiny.onnx", ["--dim", "batch=1", "--dim", "seq=128"]),
]


def bench(binary, model, dims, runs):
    out = subprocess.run(
        [binary, "bench", model, "--runs", str(runs), "--json", *dims],
        check=True, capture_output=True, text=True,
    ).stdout
    j = json.loads(out)
    return j["original"]["median_ms"], j["optimized"]["median_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=200)
    a = ap.parse_args()
    print("| model | dims | old orig / fused ms | new orig / fused ms | old speedup | new speedup | new/old orig | new/old fused |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for model, dims in CASES:
        res = {"old": [], "new": []}
        for _ in range(a.rounds):
            for k, b in (("old", a.old), ("new", a.new)):
                res[k].append(bench(b, model, dims, a.runs))
        med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in res.items()}
        (oo, of), (no, nf) = med["old"], med["new"]
        print(f"| {model.split('/')[-1]} | {' '.join(d for d in dims if d != '--dim')} | "
              f"{oo:.4f} / {of:.4f} | {no:.4f} / {nf:.4f} | {oo / of:.2f}x | {no / nf:.2f}x | "
              f"{no / oo:.2f} | {nf / of:.2f} |", flush=True)


if __name__ == "__main__":
    main()
