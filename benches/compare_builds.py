#!/usr/bin/env python3
"""Times two fuselab builds against each other in one sitting: for each model and size, the
two binaries' `fuselab bench --json` alternate (A B A B ...), so machine noise hits both alike.
Prints per case the median of each build's medians (original and optimized graph), the fused
speedup each build measured, and new/old time ratios.

    python3 benches/compare_builds.py OLD_BIN NEW_BIN [--rounds 3] [--runs 200] [--real]
        [--seqs 8,16] [--threads N]

`--real` times the real-size models instead (tests/models/real, written by setup.sh: GPT-2
small and the 12-layer Llama at batch 1 and each `--seqs` length, 8 and 16 unless given), and
skips the optimize comparison. `--threads N` benches both builds with `--threads N`.
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


def real_cases(seqs):
    return [
        (f"tests/models/real/{m}.onnx", ["--dim", "batch=1", "--dim", f"seq={s}"])
        for m in ["gpt2_small", "llama12"] for s in seqs
    ]


def bench(binary, model, dims, runs, threads=1):
    out = subprocess.run(
        [binary, "bench", model, "--runs", str(runs), "--json", "--threads", str(threads), *dims],
        check=True, capture_output=True, text=True,
    ).stdout
    j = json.loads(out)
    return j["original"]["median_ms"], j["optimized"]["median_ms"]


OPTIMIZE = ["tests/models/gpt2_tiny.onnx", "tests/models/bert_tiny.onnx",
            "tests/models/gpt2_tiny_op17.onnx", "tests/models/bert_tiny_op17.onnx"]


def optimize(binary, model):
    """(nodes before, nodes after, optimize_ms, max parity diff) of one `fuselab optimize`."""
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        rep = os.path.join(d, "r.json")
        subprocess.run([binary, "optimize", model, "-o", os.path.join(d, "o.onnx"),
                        "--report", rep], check=True, capture_output=True)
        j = json.load(open(rep))
    diff = max(o["max_abs_diff"] for o in j["parity"]["outputs"]) if j.get("parity") else None
    return j["nodes_before"], j["nodes_after"], j["optimize_ms"], diff


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--real", action="store_true", help="the real-size models (see above)")
    ap.add_argument("--seqs", default="8,16", help="with --real: comma-separated seq lengths")
    ap.add_argument("--threads", type=int, default=1, help="`fuselab bench --threads` for both")
    a = ap.parse_args()
    print("| model | dims | old orig / fused ms | new orig / fused ms | old speedup | new speedup | new/old orig | new/old fused |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    cases = real_cases([int(x) for x in a.seqs.split(",")]) if a.real else CASES
    for model, dims in cases:
        res = {"old": [], "new": []}
        for _ in range(a.rounds):
            for k, b in (("old", a.old), ("new", a.new)):
                res[k].append(bench(b, model, dims, a.runs, a.threads))
        med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in res.items()}
        (oo, of), (no, nf) = med["old"], med["new"]
        print(f"| {model.split('/')[-1]} | {' '.join(d for d in dims if d != '--dim')} | "
              f"{oo:.4f} / {of:.4f} | {no:.4f} / {nf:.4f} | {oo / of:.2f}x | {no / nf:.2f}x | "
              f"{no / oo:.2f} | {nf / of:.2f} |", flush=True)
    if not a.real:
        main_optimize(a)


def main_optimize(a):
    print()
    print("| model | old nodes | new nodes | old optimize_ms (median) | new optimize_ms (median) | old / new parity max diff |")
    print("|---|---|---|---:|---:|---|")
    for model in OPTIMIZE:
        res = {"old": [], "new": []}
        for _ in range(max(a.rounds, 5)):
            for k, b in (("old", a.old), ("new", a.new)):
                res[k].append(optimize(b, model))
        o, n = res["old"], res["new"]
        print(f"| {model.split('/')[-1]} | {o[0][0]} -> {o[0][1]} | {n[0][0]} -> {n[0][1]} | "
              f"{statistics.median(r[2] for r in o):.1f} | {statistics.median(r[2] for r in n):.1f} | "
              f"{o[0][3]:.3g} / {n[0][3]:.3g} |", flush=True)


if __name__ == "__main__":
    main()
