"""fuselab as seen by a client: optimize every bundled model, check the result with onnx's checker,
and compare `fuselab run` on the original and the optimized model against onnxruntime on the
original.

Models: examples/*.onnx and tests/models/*.onnx (the tiny GPT-2/BERT exports of
scripts/export_models.py). Where a model holds ops fuselab's reference backend has no kernel for
(the CLI exits 2 with `unsupported op X (domain ...)`), the checks that execute it in fuselab
(the parity check of `optimize`, `fuselab run`) xfail with the missing ops in the reason if
conftest.ALLOWED_GAPS allows those ops for that model, and fail otherwise; every other check (`optimize --no-parity` output passes onnx.checker and runs in onnxruntime with the
original's outputs) runs and must pass.

Run from the repository root (scripts/test.sh does, after building the release CLI):

    FUSELAB_BIN=target/release/fuselab .venv/bin/python -m pytest -q tests/python
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import onnx
import conftest
import real_models
from conftest import (
    DEFAULT_DIM,
    EYELIKE_ADD,
    REPO,
    CliResult,
    Fuselab,
    assert_close,
    check_model,
    custom_domains,
    fuselab_outputs,
    make_inputs,
    model_files,
    model_id,
    ort_outputs,
    xfail_if_unsupported,
)

SEED = 1234
REPORT_KEYS = {
    "nodes_before",
    "nodes_after",
    "ops_before",
    "ops_after",
    "fusions",
    "rewrites",
    "rejected",
    "parity",
    "optimize_ms",
}
PARITY_KEYS = {"max_abs_diff", "tolerance", "ok"}

# Extra symbolic-dim settings per model (on top of the default of 8 for every dim), and the
# largest accepted |fuselab - onnxruntime| per model.
TRANSFORMERS = ["gpt2_tiny", "gpt2_tiny_op17", "bert_tiny", "bert_tiny_op17"]
EXTRA_DIMS = {
    "examples/eyelike_add.onnx": [{"N": 64}, {"N": 1}],
    **{
        f"tests/models/{m}.onnx": [{"batch": 2, "seq": 5}, {"batch": 1, "seq": 128}]
        for m in TRANSFORMERS
    },
}
MAX_ABS_DIFF = {"examples/eyelike_add.onnx": 1e-5}
DEFAULT_ATOL, DEFAULT_RTOL = 1e-4, 1e-3
# onnxruntime on fuselab's optimized model vs onnxruntime on the original: max |diff|.
ORT_MAX_ABS_DIFF = 1e-4

MODELS = model_files()


def test_bundled_example_present():
    # Guards against the parametrized tests below silently collecting nothing.
    assert EYELIKE_ADD.is_file(), (
        f"{EYELIKE_ADD} is missing: run `.venv/bin/python scripts/make_examples.py`"
    )


def test_transformer_models_present():
    want = {REPO / "tests" / "models" / f"{m}.onnx" for m in TRANSFORMERS}
    missing = sorted(str(p.relative_to(REPO)) for p in want - set(MODELS))
    assert not missing, (
        f"{missing} missing: see tests/models/README.md (scripts/export_models.py)"
    )


# ---------------------------------------------------------------------------------------------
# helpers


# ---------------------------------------------------------------------------------------------
# optimize once per model per session


def _optimize_fixture(fuselab: Fuselab, tmp_path_factory, backend_gaps, parity: bool):
    """model path -> (optimized path, report dict, CliResult); `fuselab optimize` runs once per
    model. With parity, a model the reference backend cannot run xfails the calling test."""
    cache: dict[Path, tuple[Path, dict, object] | object] = {}

    def get(model: Path):
        if model not in cache:
            d = tmp_path_factory.mktemp(model.stem + ("" if parity else "_noparity"))
            out, rep = d / f"{model.stem}.opt.onnx", d / "report.json"
            args = ["optimize", model, "-o", out, "--report", rep]
            if not parity:
                args.append("--no-parity")
            r = fuselab(*args)
            if r.returncode != 0:
                cache[model] = r
            else:
                assert out.is_file(), f"no optimized model written\n{r.describe()}"
                assert rep.is_file(), f"no report written\n{r.describe()}"
                cache[model] = (out, json.loads(rep.read_text()), r)
        got = cache[model]
        if not isinstance(got, tuple):
            if parity:
                xfail_if_unsupported(got, model, backend_gaps)
            raise AssertionError(f"fuselab optimize failed\n{got.describe()}")
        return got

    return get


@pytest.fixture(scope="session")
def optimized(fuselab: Fuselab, tmp_path_factory: pytest.TempPathFactory, backend_gaps):
    """`fuselab optimize` with its parity check (runs the model on the reference backend)."""
    return _optimize_fixture(fuselab, tmp_path_factory, backend_gaps, parity=True)


@pytest.fixture(scope="session")
def optimized_no_parity(fuselab: Fuselab, tmp_path_factory: pytest.TempPathFactory, backend_gaps):
    """`fuselab optimize --no-parity`: needs no kernel, so every model must get through."""
    return _optimize_fixture(fuselab, tmp_path_factory, backend_gaps, parity=False)


# ---------------------------------------------------------------------------------------------
# (a) every optimized model passes onnx.checker; the report has its keys; parity holds


@pytest.mark.parametrize("model", MODELS, ids=model_id)
def test_optimized_model_passes_checker(model: Path, optimized_no_parity):
    """`optimize --no-parity` runs no kernel, so it must work on every model."""
    out, report, _ = optimized_no_parity(model)
    saved = onnx.load(str(out))
    check_model(saved)
    original = onnx.load(str(model))

    missing = REPORT_KEYS - report.keys()
    assert not missing, f"report lacks {sorted(missing)}: {sorted(report)}"
    assert report["parity"] is None, f"--no-parity, yet parity reported: {report['parity']}"
    assert report["nodes_after"] == len(saved.graph.node)
    assert report["nodes_before"] == len(original.graph.node)
    assert report["nodes_after"] <= report["nodes_before"]
    # The interface is kept: same inputs (in order, with types) and outputs.
    def io(m: onnx.ModelProto) -> tuple[list, list]:
        inits = {t.name for t in m.graph.initializer}
        ins = [(v.name, v.type) for v in m.graph.input if v.name not in inits]
        return ins, [(v.name, v.type) for v in m.graph.output]

    assert io(saved) == io(original), "graph inputs/outputs changed"


@pytest.mark.parametrize("model", MODELS, ids=model_id)
def test_optimize_parity_holds(model: Path, optimized):
    """`optimize` with the parity check: xfails where the reference backend lacks an op."""
    out, report, _ = optimized(model)
    saved = onnx.load(str(out))
    check_model(saved)
    missing = REPORT_KEYS - report.keys()
    assert not missing, f"report lacks {sorted(missing)}: {sorted(report)}"
    assert report["parity"] is not None, "parity was skipped"
    assert PARITY_KEYS <= report["parity"].keys(), report["parity"]
    assert report["parity"]["ok"] is True, report["parity"]
    assert report["nodes_after"] == len(saved.graph.node)
    assert report["nodes_before"] == len(onnx.load(str(model)).graph.node)


# ---------------------------------------------------------------------------------------------
# (b) fuselab run on original and optimized == onnxruntime on the original


def run_cases():
    cases = []
    for m in MODELS:
        mid = model_id(m)
        for dims in [{}] + EXTRA_DIMS.get(mid, []):
            label = ",".join(f"{k}={v}" for k, v in dims.items()) or f"dims={DEFAULT_DIM}"
            cases.append(pytest.param(m, dims, id=f"{mid}-{label}"))
    return cases


@pytest.mark.parametrize(("model", "dims"), run_cases())
def test_run_matches_onnxruntime(
    model: Path, dims: dict[str, int], optimized, fuselab, backend_gaps, tmp_path
):
    mid = model_id(model)
    original = onnx.load(str(model))
    feeds = make_inputs(original, dims, SEED)
    want = ort_outputs(model, feeds)
    if mid in MAX_ABS_DIFF:
        atol, rtol = MAX_ABS_DIFF[mid], 0.0
    else:
        atol, rtol = DEFAULT_ATOL, DEFAULT_RTOL

    # The original first: where the reference backend lacks an op this xfails, naming them.
    runs = {
        "original": fuselab_outputs(
            fuselab, model, feeds, dims, tmp_path / "original", backend_gaps
        ),
    }
    opt_path, _, _ = optimized(model)
    runs["optimized"] = fuselab_outputs(fuselab, opt_path, feeds, dims, tmp_path / "optimized")
    for label, got in runs.items():
        assert set(got) == set(want), f"{label}: outputs {sorted(got)} != {sorted(want)}"
        for name in want:
            assert_close(got[name], want[name], atol, rtol, f"{label} output {name!r}")

    # Where the optimized model uses only standard ops, onnxruntime must run it too.
    if not custom_domains(onnx.load(str(opt_path))):
        for name, arr in ort_outputs(opt_path, feeds).items():
            assert_close(arr, want[name], atol, rtol, f"onnxruntime on optimized {name!r}")


@pytest.mark.parametrize(("model", "dims"), run_cases())
def test_optimized_runs_in_onnxruntime(model: Path, dims: dict[str, int], optimized_no_parity):
    """onnxruntime on `optimize --no-parity`'s output == onnxruntime on the original (needs no
    fuselab kernel, so it runs for every model whose output onnxruntime can load)."""
    opt_path, _, _ = optimized_no_parity(model)
    domains = custom_domains(onnx.load(str(opt_path)))
    if domains:
        pytest.skip(f"optimized model uses custom domains {sorted(domains)}; onnxruntime has no "
                    "kernels for them (test_run_matches_onnxruntime covers it in fuselab)")
    feeds = make_inputs(onnx.load(str(model)), dims, SEED)
    want = ort_outputs(model, feeds)
    got = ort_outputs(opt_path, feeds)
    assert set(got) == set(want), f"outputs {sorted(got)} != {sorted(want)}"
    for name in want:
        what = f"onnxruntime on optimized {name!r}"
        assert_close(got[name], want[name], ORT_MAX_ABS_DIFF, 0.0, what)


def test_external_data_output_runs_in_onnxruntime(fuselab: Fuselab, tmp_path: Path):
    """`optimize --external-data 4096`: the weights go to OUT.data (onnx's checker and loader
    accept the pair) and onnxruntime gives the same outputs as on the single-file save."""
    src = REPO / "tests" / "models" / "gpt2_tiny.onnx"
    one, split = tmp_path / "one.onnx", tmp_path / "split.onnx"
    fuselab.ok("optimize", src, "-o", one, "--no-parity")
    r = fuselab.ok("optimize", src, "-o", split, "--no-parity", "--external-data", "4096")
    assert "external data: " in r.stdout and "split.onnx.data" in r.stdout, r.describe()
    assert (tmp_path / "split.onnx.data").is_file()
    assert split.stat().st_size < one.stat().st_size / 10
    m = onnx.load(str(split), load_external_data=False)
    outside = [t.name for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert len(outside) >= 10 and all(len(t.raw_data) < 4096 for t in m.graph.initializer)
    onnx.checker.check_model(str(split))
    feeds = make_inputs(onnx.load(str(src)), {"batch": 2, "seq": 5}, SEED)
    want, got = ort_outputs(one, feeds), ort_outputs(split, feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


# ---------------------------------------------------------------------------------------------
# (c) the worked example fuses to one ai.fuselab.AddEyeLike node


def test_eyelike_add_fuses_to_one_node(optimized):
    out, report, _ = optimized(EYELIKE_ADD)
    m = onnx.load(str(out))
    nodes = [(n.domain, n.op_type) for n in m.graph.node]
    assert nodes == [("ai.fuselab", "AddEyeLike")], nodes
    opsets = {o.domain: o.version for o in m.opset_import}
    assert opsets.get("ai.fuselab") == 1, f"opset imports: {opsets}"
    assert [i.name for i in m.graph.input] == ["X"]
    assert [o.name for o in m.graph.output] == ["Y"]
    n = m.graph.node[0]
    assert list(n.input) == ["X"] and list(n.output) == ["Y"], n

    assert report["fusions"] == {"AddEyeLike": 1}, report["fusions"]
    assert report["nodes_before"] == 2
    assert report["nodes_after"] == 1
    assert report["ops_before"] == {"EyeLike": 1, "Add": 1}, report["ops_before"]
    assert report["ops_after"] == {"AddEyeLike": 1}, report["ops_after"]
    assert report["parity"]["ok"] is True, report["parity"]
    assert report["parity"]["max_abs_diff"] <= report["parity"]["tolerance"]


# ---------------------------------------------------------------------------------------------
# (d) a damaged model is an error (exit 2, one line on stderr), never a panic


@pytest.mark.parametrize("keep", ["half", "all_but_last_byte"])
def test_truncated_model_is_a_clean_error(keep: str, fuselab: Fuselab, tmp_path: Path):
    data = EYELIKE_ADD.read_bytes()
    n = len(data) // 2 if keep == "half" else len(data) - 1
    bad = tmp_path / "truncated.onnx"
    bad.write_bytes(data[:n])
    r = fuselab("optimize", bad, "-o", tmp_path / "out.onnx", "--report", tmp_path / "r.json")
    assert r.returncode == 2, r.describe()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].strip(), f"expected one line on stderr\n{r.describe()}"
    assert "panicked" not in r.stderr and "RUST_BACKTRACE" not in r.stderr, r.describe()


# ---------------------------------------------------------------------------------------------
# (e) a gap in the reference backend xfails only where ALLOWED_GAPS allows it


def test_allowed_gaps_are_real(backend_gaps):
    """Every ALLOWED_GAPS entry of a bundled model names an op its probe still finds missing: a
    stale entry would let that op's kernel break later with an xfail instead of a failure."""
    ids = {model_id(m): m for m in MODELS}
    for mid, allowed in conftest.ALLOWED_GAPS.items():
        if mid in real_models.SPECS:
            continue  # a real model: test_models.py::test_allowed_gaps_are_current checks it
        assert mid in ids, (
            f"ALLOWED_GAPS names {mid}, which is neither a bundled model nor in real_models.SPECS"
        )
        stale = sorted(allowed - set(backend_gaps(ids[mid])))
        assert not stale, (
            f"{mid}: the reference backend now runs {stale}; remove them from ALLOWED_GAPS"
        )


def test_a_gap_fails_unless_allowed(monkeypatch):
    """xfail_if_unsupported itself: the CLI's `unsupported op` on a model fails the test when
    ALLOWED_GAPS does not list that op, and xfails it, naming the op, when it does."""
    r = CliResult(["fuselab", "run"], 2, "", "error: unsupported op EyeLike (domain 'ai.onnx') at node 'e'\n")
    mid = model_id(EYELIKE_ADD)
    no_probe = lambda model: []  # noqa: E731
    monkeypatch.setattr(conftest, "ALLOWED_GAPS", {})
    with pytest.raises(pytest.fail.Exception, match=f"lacks EyeLike for {mid}, which ALLOWED_GAPS"):
        xfail_if_unsupported(r, EYELIKE_ADD, no_probe)
    monkeypatch.setattr(conftest, "ALLOWED_GAPS", {mid: {"Add"}})
    with pytest.raises(pytest.fail.Exception, match="lacks EyeLike for"):
        xfail_if_unsupported(r, EYELIKE_ADD, lambda model: ["Add"])
    monkeypatch.setattr(conftest, "ALLOWED_GAPS", {mid: {"EyeLike"}})
    with pytest.raises(pytest.xfail.Exception, match="lacks EyeLike"):
        xfail_if_unsupported(r, EYELIKE_ADD, no_probe)
    # A failure for any other reason is left to the caller.
    other = CliResult(["fuselab", "run"], 2, "", "error: input 'X': missing\n")
    assert xfail_if_unsupported(other, EYELIKE_ADD, no_probe) is None
