#!/usr/bin/env python3
"""Do the passes scale linearly in node count? (issue 16, item 3)

Builds the page tests' transformer-like stack (tests/js/make_models.py `layers`: pre-norm blocks
of 24 nodes: LayerNorm, Q/K/V MatMuls, masked softmax attention, Tanh MLP, residual Adds) at 1x,
2x, 4x and 8x the layers, runs `fuselab optimize --no-parity` on each RUNS times and prints, per
size, the fastest `passes` time (the rules to a fixed point, as the CLI's `time:` line and the
report's `optimize_ms` give it), microseconds per node, and the ratio to the 1x time per node
(1.0 everywhere is linear). Run from the repository root after `cargo build --release`:

    .venv/bin/python benches/pass_scaling.py [BASE_NODES] [RUNS]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.environ.get("FUSELAB_BIN", os.path.join(REPO, "target", "release", "fuselab"))


def main() -> None:
    base = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    print("| layers | nodes before | nodes after | fusions | passes, fastest of "
          f"{runs} (ms) | µs per node | vs 1x per node |")
    print("|---:|---:|---:|---|---:|---:|---:|")
    first = None
    with tempfile.TemporaryDirectory() as tmp:
        for scale in (1, 2, 4, 8):
            model = os.path.join(tmp, f"stack{scale}.onnx")
            subprocess.run([sys.executable, os.path.join(REPO, "tests/js/make_models.py"), "layers",
                            str(base * scale), model], check=True)
            best, rep = float("inf"), None
            for _ in range(runs):
                report = os.path.join(tmp, "r.json")
                subprocess.run([CLI, "optimize", model, "-o", os.path.join(tmp, "o.onnx"), "--no-parity",
                                "--report", report], check=True, stdout=subprocess.DEVNULL)
                with open(report) as f:
                    rep = json.load(f)
                best = min(best, rep["optimize_ms"])
            per = best * 1000 / rep["nodes_before"]
            first = first or per
            fused = ", ".join(f"{k} {v}" for k, v in sorted(rep["fusions"].items()))
            print(f"| {rep['nodes_before'] // 24} | {rep['nodes_before']:,} | {rep['nodes_after']:,} | "
                  f"{fused} | {best:.1f} | {per:.1f} | {per / first:.2f} |")


if __name__ == "__main__":
    main()
