"""Issue 15's bar against every anchor (tests/python/anchors.py) on every model it names: on each
file, fuselab fuses every fused op at least as often as the anchor (norms and gelus compared as
families) and its graph has at most as many nodes. The anchors: onnxruntime's transformers
optimizer at opt_level 0 and 1 and onnxscript's optimize_for_ort on the transformers; onnxruntime's
session optimizer (FusedConv) on the CNNs.

Run from the repository root:

    FUSELAB_BIN=$PWD/target/release/fuselab .venv/bin/python -m pytest -q tests/python/test_anchors.py
"""
from __future__ import annotations

import pytest

from anchors import SUBJECTS, histogram, shortfalls

CASES = [(s, a) for s in SUBJECTS for a in s.anchors]


@pytest.fixture(scope="module")
def ours(fuselab, tmp_path_factory):
    """name -> fuselab's optimized ModelProto (one `fuselab optimize` per model)."""
    import onnx

    tmp = tmp_path_factory.mktemp("anchors")
    cache = {}

    def get(subject):
        if subject.name not in cache:
            if not subject.path.exists():
                pytest.fail(f"{subject.path} is missing: run scripts/setup.sh (scripts/fetch_models.py)")
            out = tmp / f"{subject.name}.onnx"
            fuselab.ok("optimize", subject.path, "-o", out, "--no-parity", *subject.args)
            cache[subject.name] = onnx.load(str(out))
        return cache[subject.name]

    return get


@pytest.mark.parametrize("subject,anchor", CASES, ids=[f"{s.name}-{a}" for s, a in CASES])
def test_fuses_at_least_what_the_anchor_does_with_no_more_nodes(ours, subject, anchor):
    mine = ours(subject)
    theirs = subject.run_anchor(anchor)
    a, b = histogram(mine), histogram(theirs)
    assert shortfalls(a, b) == [], (shortfalls(a, b), a, b)
    assert len(mine.graph.node) <= len(theirs.graph.node), (len(mine.graph.node), len(theirs.graph.node))


def test_opt_level_1_runs_onnxruntimes_basic_optimizations_first():
    """The opt_level 1 anchor is not opt_level 0 under another name: onnxruntime's constant folding
    removes the nodes that compute GPT-2's constant shapes before the fusions run."""
    from anchors import ort_transformers

    gpt2 = next(s for s in SUBJECTS if s.name == "gpt2_tiny")
    assert len(ort_transformers(gpt2.path, "gpt2", 1).graph.node) < len(ort_transformers(gpt2.path, "gpt2", 0).graph.node)
