#!/usr/bin/env python3
"""fuselab's optimizer vs onnxruntime's transformers optimizer on the bundled GPT-2/BERT exports.

Run from the repository root after `cargo build --release --bin fuselab`:

    .venv/bin/python benches/ort_optimizer.py

Prints a markdown table (as in docs/benchmarks.md): nodes before/after for each optimizer, the
fused op counts (op types in each optimized graph), fuselab's parity, and each optimizer's wall
time (fuselab: the report's `optimize_ms`, rules only, and the whole CLI call including load,
parity and save; onnxruntime: `optimize_model(..., opt_level=0)` in this process). Every model of
issue 15, against opt_level 0 and 1 and onnxscript: benches/anchors.py (docs/anchors.md).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = [("gpt2_tiny", "gpt2"), ("gpt2_tiny_op17", "gpt2"), ("bert_tiny", "bert"),
          ("bert_tiny_op17", "bert")]
FUSED = ["SkipLayerNormalization", "LayerNormalization", "Gelu", "FastGelu", "BiasGelu",
         "Attention", "EmbedLayerNormalization", "FusedGemm"]


def fmt(h: Counter) -> str:
    return ", ".join(f"{op} {h[op]}" for op in FUSED if h.get(op)) or "-"


def main() -> int:
    import logging

    logging.disable(logging.WARNING)
    from onnxruntime.transformers.optimizer import optimize_model

    binary = os.environ.get("FUSELAB_BIN", os.path.join(REPO, "target/release/fuselab"))
    print("| model | nodes | fuselab after | onnxruntime after (opt_level 0) | fuselab fused ops "
          "| onnxruntime fused ops | fuselab parity | fuselab rules ms / CLI ms | onnxruntime ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for stem, model_type in MODELS:
            path = os.path.join(REPO, "tests", "models", f"{stem}.onnx")
            rep = os.path.join(tmp, f"{stem}.json")
            t0 = time.perf_counter()
            subprocess.run([binary, "optimize", path, "-o", os.path.join(tmp, f"{stem}.onnx"),
                            "--report", rep, "--dim", "batch=2", "--dim", "seq=8"],
                           check=True, capture_output=True, cwd=REPO)
            cli_ms = (time.perf_counter() - t0) * 1e3
            r = json.load(open(rep))
            t0 = time.perf_counter()
            o = optimize_model(path, model_type=model_type, num_heads=4, hidden_size=64,
                               opt_level=0)
            ort_ms = (time.perf_counter() - t0) * 1e3
            ort_hist = Counter(n.op_type for n in o.model.graph.node)
            print(f"| `{stem}` | {r['nodes_before']} | {r['nodes_after']} | "
                  f"{len(o.model.graph.node)} | {fmt(Counter(r['ops_after']))} | {fmt(ort_hist)} | "
                  f"{r['parity']['max_abs_diff']:.2e} | {r['optimize_ms']:.1f} / {cli_ms:.0f} | "
                  f"{ort_ms:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
