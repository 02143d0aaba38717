"""Issue 14's CNN target: the reference backend against onnxruntime (CPU, one thread) on the
torchvision exports at 1x3x224x224, in thread CPU time on both sides, rounds alternating.

    .venv/bin/python benches/cnn_vs_ort.py [--runs 100] [--rounds 3] [--bin target/release/fuselab]

fuselab's side is `fuselab bench MODEL --clock cpu --dim batch=1` (median of the original
graph's runs); onnxruntime's is a single-threaded session timed with `time.thread_time()` per
run (its one-thread session computes on the calling thread). Prints one markdown row per model:
the range of the round medians on each side and of their ratios.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ort_timing import session  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = {
    "ResNet-18 (torchvision)": "tests/data/models/torchvision/resnet18.onnx",
    "MobileNetV3-small (torchvision)": "tests/data/models/torchvision/mobilenet_v3_small.onnx",
}


def fuselab_ms(binary: str, model: Path, runs: int) -> float:
    out = subprocess.run(
        [binary, "bench", str(model), "--runs", str(runs), "--clock", "cpu", "--dim", "batch=1"],
        check=True, capture_output=True, text=True,
    ).stdout
    m = re.search(r"original\s+\(\s*\d+ nodes\): median ([0-9.]+) ms", out)
    if not m:
        sys.exit(f"cnn_vs_ort: no median in fuselab's output:\n{out}")
    return float(m.group(1))


def ort_ms(model: Path, runs: int) -> float:
    s = session(str(model))
    feed = {s.get_inputs()[0].name: np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    for _ in range(max(3, runs // 10)):
        s.run(None, feed)
    times = []
    for _ in range(runs):
        t0 = time.thread_time()
        s.run(None, feed)
        times.append((time.thread_time() - t0) * 1e3)
    return statistics.median(times)


def span(v: list[float], fmt: str) -> str:
    return f"{min(v):{fmt}}–{max(v):{fmt}}" if len(v) > 1 else f"{v[0]:{fmt}}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100, help="timed runs per round and side")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per model")
    ap.add_argument("--bin", default=str(ROOT / "target/release/fuselab"), help="fuselab binary")
    args = ap.parse_args()
    print("| model | fuselab (ms) | onnxruntime, 1 thread (ms) | fuselab / onnxruntime |")
    print("|---|---:|---:|---:|")
    for name, rel in MODELS.items():
        model = ROOT / rel
        if not model.exists():
            sys.exit(f"cnn_vs_ort: {model} is missing (run scripts/setup.sh)")
        ours, theirs = [], []
        for r in range(args.rounds):
            ours.append(fuselab_ms(args.bin, model, args.runs))
            theirs.append(ort_ms(model, args.runs))
            print(f"  {name} round {r + 1}: {ours[-1]:.2f} ms vs {theirs[-1]:.2f} ms", file=sys.stderr)
        ratios = [a / b for a, b in zip(ours, theirs)]
        print(f"| {name} | {span(ours, '.2f')} | {span(theirs, '.2f')} | {span(ratios, '.2f')}x |")


if __name__ == "__main__":
    main()
