#!/usr/bin/env python3
"""Writes the measured part of docs/profile.md: `fuselab profile --optimized` on every model of
docs/models.md (the real models of tests/python/test_models.py, on the inputs real_models.SPECS
gives them) and on the four tests/models/*.onnx exports (batch 2, seq 8), and per model family
the five uncovered candidates (rule null) with the largest estimated saving: what the default
rules leave, which is what tells which fusion to write next.

Run from the repository root with the project venv, after scripts/fetch_models.py and a release
build (`cargo build --release --bin fuselab`):

    .venv/bin/python scripts/profile_report.py [--fuselab target/release/fuselab] [--runs 5]
        [--only SUBSTRING] [--out docs/profile.md] [--json FILE]

The text of docs/profile.md above the marker line `<!-- measured -->` is kept; everything below
it is rewritten.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
from real_models import SPECS, Spec, make_feeds, model_id, real_model_files  # noqa: E402

MARKER = "<!-- measured -->"
TOP = 5
CLI_TIMEOUT_S = 1800
# tests/models/*.onnx: GPT-2 and BERT (opset 14 decomposed LayerNorm, opset 17 native).
EXPORTS = REPO / "tests" / "models"
EXPORT_SPEC = Spec(dims={"batch": 2, "seq": 8}, vocab=1000)

FAMILIES = [
    ("Transformers (tests/models, tests/models/zoo)", ("tests/models/",)),
    ("CNNs (onnx_light, torchvision)", ("tests/data/models/onnx_light/",
                                        "tests/data/models/torchvision/")),
    ("OCR (rapidocr, rapidocr-onnxruntime)", ("tests/data/models/rapidocr",)),
    ("Voice activity (silero-vad)", ("tests/data/models/silero-vad/",)),
]


def family(mid: str) -> str:
    return next(name for name, prefixes in FAMILIES if mid.startswith(prefixes))


def profile_one(fuselab: Path, path: Path, spec: Spec, runs: int, work: Path) -> dict:
    model = onnx.load(str(path), load_external_data=False)
    feeds = make_feeds(model, spec)
    given = []
    for i, (name, arr) in enumerate(feeds.items()):
        f = work / f"in{i}.npy"
        np.save(f, arr)
        given += ["--input", f"{name}={f}"]
    dims = [a for k, v in spec.dims.items() for a in ("--dim", f"{k}={v}")]
    dims += [a for n, shape in spec.shapes.items() for i, v in enumerate(shape)
             for a in ("--dim", f"{n}[{i}]={v}")]
    cmd = [str(fuselab), "profile", str(path), "--optimized", "--json", "--runs", str(runs),
           *dims, *given]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, cwd=REPO)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"}
    return json.loads(r.stdout)


def arrow(ops: list[str]) -> str:
    return " → ".join(ops)


def kib(b: int) -> str:
    return f"{b / 1024:,.1f}"


def uncovered(p: dict) -> list[dict]:
    return [c for c in p["candidates"] if c["rule"] is None]


def write(rows: dict[str, dict], runs: int, out: Path) -> None:
    head = out.read_text().split(MARKER)[0] if out.exists() else ""
    lines = [MARKER, ""]
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=REPO).stdout.strip()
    lines.append(
        f"Generated {datetime.date.today()} by `scripts/profile_report.py` at commit {rev} "
        f"(`fuselab profile --optimized --runs {runs}`, reference backend, on "
        f"{platform.machine()}, 2 shared cores: read shares and rankings, not absolute ms).")
    lines.append("")
    by_family: dict[str, list[str]] = collections.defaultdict(list)
    for mid in rows:
        by_family[family(mid)].append(mid)
    for name, _ in FAMILIES:
        mids = by_family.get(name, [])
        if not mids:
            continue
        lines += [f"### {name}", ""]
        # Over the family: each uncovered sequence's saving as a share of its model's time,
        # summed over the family's models (a sequence worth 5% in four models outranks one worth
        # 12% in one).
        agg: dict[tuple, dict] = {}
        for mid in mids:
            p = rows[mid]
            if "error" in p:
                continue
            for c in uncovered(p):
                a = agg.setdefault(tuple(c["ops"]), {
                    "models": [], "count": 0, "saving_ms": 0.0, "share": 0.0, "bytes": 0,
                    "opt_in": c["opt_in_rule"]})
                a["models"].append(Path(mid).stem)
                a["count"] += c["count"]
                a["saving_ms"] += c["estimated_saving_ms"]
                a["share"] += c["estimated_saving_ms"] / p["total_ms"] if p["total_ms"] else 0.0
                a["bytes"] += c["intermediate_bytes"]
                if a["opt_in"] != c["opt_in_rule"]:
                    a["opt_in"] = "partly " + str(c["opt_in_rule"] or a["opt_in"])
        top = sorted(agg.items(), key=lambda kv: (-kv[1]["share"], kv[0]))[:TOP]
        lines += ["| # | uncovered sequence | models | occurrences | est. saving, ms (summed) | "
                  "est. saving, % of model time (summed) | intermediates, KiB | opt-in rule |",
                  "|---:|---|---|---:|---:|---:|---:|---|"]
        for i, (ops, a) in enumerate(top, 1):
            models = ", ".join(sorted(set(a["models"])))
            lines.append(
                f"| {i} | {arrow(list(ops))} | {models} | {a['count']} | {a['saving_ms']:.3f} | "
                f"{100 * a['share']:.1f} | {kib(a['bytes'])} | {a['opt_in'] or ''} |")
        lines += ["", "<details><summary>Per model: time in nodes and the top three uncovered "
                  "candidates</summary>", "",
                  "| model | inputs | nodes | ms/run | top uncovered candidates (est. saving ms, % "
                  "of time) |", "|---|---|---:|---:|---|"]
        for mid in sorted(mids):
            p = rows[mid]
            if "error" in p:
                lines.append(f"| `{mid}` | | | | error: {p['error']} |")
                continue
            inputs = "<br>".join(f"{i['name']} {i['shape']}" for i in p["inputs"])
            tops = "<br>".join(
                f"{arrow(c['ops'])} ×{c['count']}: {c['estimated_saving_ms']:.3f} "
                f"({100 * c['estimated_saving_ms'] / p['total_ms']:.1f}%)"
                + (f" [{c['opt_in_rule']}]" if c["opt_in_rule"] else "")
                for c in uncovered(p)[:3]) or "none"
            lines.append(f"| `{mid}` | {inputs} | {p['nodes']} | {p['total_ms']:.3f} | {tops} |")
        lines += ["", "</details>", ""]
    out.write_text(head + "\n".join(lines).rstrip() + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fuselab", type=Path, default=REPO / "target" / "release" / "fuselab")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", default="")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "profile.md")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    models = [(p, SPECS[model_id(p)]) for p in real_model_files()]
    models += [(p, EXPORT_SPEC) for p in sorted(EXPORTS.glob("*.onnx"))]
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path, spec in models:
            mid = model_id(path)
            if args.only not in mid:
                continue
            print(mid, file=sys.stderr, flush=True)
            work = Path(tmp) / str(len(rows))
            work.mkdir()
            rows[mid] = profile_one(args.fuselab, path, spec, args.runs, work)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    write(rows, args.runs, args.out)


if __name__ == "__main__":
    main()
