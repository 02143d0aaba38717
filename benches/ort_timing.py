"""Shared by the onnxruntime benchmark scripts: one single-threaded CPU session, and a timer."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import onnxruntime as ort


def session(path: str, level: ort.GraphOptimizationLevel | None = None,
            threads: int = 1) -> ort.InferenceSession:
    """A CPUExecutionProvider session with `threads` intra-op threads and one inter-op thread;
    `level` None keeps onnxruntime's default graph optimization level."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    if level is not None:
        so.graph_optimization_level = level
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def time_ms(run: Callable[[], object], runs: int, warmup: int) -> dict:
    """`warmup` untimed calls of `run`, then `runs` timed ones: median, min and mean in ms."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e3)
    return {
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "mean_ms": statistics.fmean(times),
    }
