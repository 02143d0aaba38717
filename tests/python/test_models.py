"""Real models, run like onnxruntime: one row per model file, three checks per row.

Models: every .onnx under tests/data/models/ (scripts/fetch_models.py) and tests/models/zoo/
(scripts/export_models.py), with their inputs and tolerances in real_models.SPECS. Per model:

  test_run_matches_onnxruntime          `fuselab run --input ...` on seeded inputs == onnxruntime
                                        (CPU) on the same inputs, every output, within the spec's
                                        tolerance (1e-4 abs + 1e-4 rel unless the spec says why not)
  test_optimize_with_parity             `fuselab optimize` (which runs original and optimized on
                                        the reference backend and compares) succeeds, parity ok
  test_optimized_model_matches_onnxruntime
                                        `fuselab optimize --no-parity` (no kernel needed) writes a
                                        model that passes onnx.checker and, in onnxruntime, gives
                                        the original's outputs

A model whose ops the reference backend lacks is not hidden: the first two checks carry a strict
xfail whose reason is `unsupported op A, B, ...` (the ops conftest.ALLOWED_GAPS lists for it), and
they xfail only when the CLI names exactly those ops or fewer; a gap not listed fails, a test that
passes while still listed fails as XPASS(strict), and test_allowed_gaps_are_current fails while a
listed op no longer is a gap. KNOWN_FAILURES lists the other things fuselab cannot do yet with
the exact error text; they xfail the same strict way.

Run from the repository root (scripts/test.sh runs all of tests/python):

    FUSELAB_BIN=target/release/fuselab .venv/bin/python -m pytest -q -rxs \\
        tests/python/test_models.py
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import onnx
import conftest
from conftest import Fuselab, assert_close, check_model, custom_domains, file_stem, ort_outputs
from real_models import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    FETCHED,
    SPECS,
    ZOO,
    make_feeds,
    model_id,
    real_model_files,
    reported_gaps,
)

# What fuselab cannot do yet on a model other than lacking an op: model id -> (check -> the exact
# text its error contains), with why. Checks: "run", "optimize" (with parity), "no_parity".
KNOWN_FAILURES: dict[str, dict[str, str]] = {
    # The OpenVINO silero file (repeated node names) and the fp16 GPT-2 (float16 compute) both
    # load and run since issue 14's element types; an entry here needs the exact error text.
}

MODELS = real_model_files()


class BackendGap(Exception):
    """The CLI named only ops ALLOWED_GAPS lists for this model (xfails under the strict mark)."""


class KnownFailure(Exception):
    """The CLI failed with the error KNOWN_FAILURES lists for this model and check."""


def marks(mid: str, check: str) -> list[pytest.MarkDecorator]:
    reasons, raises = [], []
    if check != "no_parity" and (gaps := conftest.ALLOWED_GAPS.get(mid)):
        reasons.append(f"unsupported op {', '.join(sorted(gaps))}")
        raises.append(BackendGap)
    if text := KNOWN_FAILURES.get(mid, {}).get(check):
        reasons.append(text)
        raises.append(KnownFailure)
    if not reasons:
        return []
    return [pytest.mark.xfail(strict=True, reason="; ".join(reasons), raises=tuple(raises))]


def cases(check: str) -> list:
    return [pytest.param(p, id=model_id(p), marks=marks(model_id(p), check)) for p in MODELS]


def cli_failed(r: conftest.CliResult, mid: str, check: str) -> None:
    """Raises for a failed CLI call: BackendGap or KnownFailure when listed, a test failure
    otherwise."""
    gaps = reported_gaps(r.returncode, r.stderr)
    allowed = conftest.ALLOWED_GAPS.get(mid, set())
    if gaps is not None and check != "no_parity":
        if gaps <= allowed:
            raise BackendGap(f"unsupported op {', '.join(sorted(gaps))}")
        pytest.fail(
            f"fuselab's reference backend lacks {', '.join(sorted(gaps - allowed))} for {mid}, "
            "which conftest.ALLOWED_GAPS does not list\n" + r.describe(),
            pytrace=False,
        )
    text = KNOWN_FAILURES.get(mid, {}).get(check)
    if text and text in r.stderr:
        raise KnownFailure(text)
    pytest.fail(f"fuselab failed on {mid}\n{r.describe()}", pytrace=False)


def dim_args(mid: str) -> list[str]:
    """The spec's dims by name, and its full input shapes axis by axis (`--dim INPUT[AXIS]=V`),
    so that `optimize`'s own parity inputs have the sizes the model is fed with here."""
    spec = SPECS[mid]
    pairs = list(spec.dims.items())
    pairs += [(f"{name}[{i}]", v) for name, shape in spec.shapes.items() for i, v in enumerate(shape)]
    return [a for k, v in pairs for a in ("--dim", f"{k}={v}")]


def tolerance(mid: str) -> tuple[float, float]:
    spec = SPECS[mid]
    return spec.atol, spec.rtol


@pytest.fixture(scope="session")
def feeds_and_reference():
    """model -> (feeds, onnxruntime's outputs on them), computed once per model."""
    cache: dict[Path, tuple[dict, dict]] = {}

    def get(model: Path):
        if model not in cache:
            spec = SPECS[model_id(model)]
            feeds = make_feeds(onnx.load(str(model)), spec)
            cache[model] = feeds, ort_outputs(model, feeds, spec.ort_level)
        return cache[model]

    return get


@pytest.fixture(scope="session")
def cli_run(fuselab: Fuselab, tmp_path_factory: pytest.TempPathFactory, feeds_and_reference):
    """model -> (CliResult, output folder) of `fuselab run` on the model's feeds, once per model."""
    cache: dict[Path, tuple[conftest.CliResult, Path]] = {}

    def get(model: Path):
        if model not in cache:
            work = tmp_path_factory.mktemp(f"run_{model.stem}")
            feeds, _ = feeds_and_reference(model)
            args: list = ["run", model]
            for name, arr in feeds.items():
                f = work / f"in_{file_stem(name)}.npy"
                np.save(f, arr)
                args += ["--input", f"{name}={f}"]
            r = fuselab(*args, *dim_args(model_id(model)), "--out", work / "out")
            cache[model] = r, work / "out"
        return cache[model]

    return get


# ---------------------------------------------------------------------------------------------
# the table is complete


def test_every_model_has_a_spec_and_every_spec_a_model():
    found = {model_id(p) for p in MODELS}
    no_spec = sorted(found - SPECS.keys())
    assert not no_spec, (
        f"models without an entry in real_models.SPECS (inputs, tolerance): {no_spec}")
    missing = sorted(SPECS.keys() - found)
    assert not missing, (
        f"{len(missing)} models of real_models.SPECS are missing, e.g. {missing[:3]}: run "
        f"`.venv/bin/python scripts/fetch_models.py` (fills {FETCHED.relative_to(conftest.REPO)}) "
        f"or see tests/models/README.md ({ZOO.relative_to(conftest.REPO)})"
    )


def test_looser_tolerances_say_why():
    for mid, spec in SPECS.items():
        if (spec.atol, spec.rtol) != (DEFAULT_ATOL, DEFAULT_RTOL):
            assert spec.why, f"{mid}: tolerance {spec.atol:g}/{spec.rtol:g} without a reason"
        assert spec.ort_level in ("all", "basic"), (mid, spec.ort_level)
        if spec.ort_level != "all":
            assert spec.why, f"{mid}: onnxruntime at {spec.ort_level} without a reason"


def test_known_failures_name_models():
    for mid, checks in KNOWN_FAILURES.items():
        assert mid in SPECS, f"KNOWN_FAILURES names {mid}, which real_models.SPECS does not"
        assert set(checks) <= {"run", "optimize", "no_parity"}, checks


# ---------------------------------------------------------------------------------------------
# the three checks per model


@pytest.mark.parametrize("model", cases("run"))
def test_run_matches_onnxruntime(model: Path, cli_run, feeds_and_reference):
    mid = model_id(model)
    r, out = cli_run(model)
    if r.returncode != 0:
        cli_failed(r, mid, "run")
    _, want = feeds_and_reference(model)
    atol, rtol = tolerance(mid)
    for name, arr in want.items():
        f = out / f"{file_stem(name)}.npy"
        assert f.is_file(), f"fuselab run wrote no {f.name} for output {name!r}\n{r.describe()}"
        assert_close(np.load(f), arr, atol, rtol, f"{mid} output {name!r}")


@pytest.mark.parametrize("model", cases("optimize"))
def test_optimize_with_parity(model: Path, fuselab: Fuselab, tmp_path: Path, feeds_and_reference):
    mid = model_id(model)
    out, rep = tmp_path / "opt.onnx", tmp_path / "report.json"
    atol, _ = tolerance(mid)
    tol = ["--tolerance", str(atol)] if atol != DEFAULT_ATOL else []
    # The parity check runs on the same feeds as the onnxruntime comparisons: some models
    # branch on an input's value (silero's sample rate picks the 8 or 16 kHz subgraph).
    feeds, _ = feeds_and_reference(model)
    given = []
    for name, arr in feeds.items():
        f = tmp_path / f"in_{file_stem(name)}.npy"
        np.save(f, arr)
        given += ["--input", f"{name}={f}"]
    r = fuselab("optimize", model, "-o", out, "--report", rep, *dim_args(mid), *given, *tol)
    if r.returncode != 0:
        cli_failed(r, mid, "optimize")
    report = json.loads(rep.read_text())
    assert report["parity"] is not None and report["parity"]["ok"] is True, report["parity"]
    check_model(onnx.load(str(out)))


@pytest.mark.parametrize("model", cases("no_parity"))
def test_optimized_model_matches_onnxruntime(
    model: Path, fuselab: Fuselab, tmp_path: Path, feeds_and_reference
):
    mid = model_id(model)
    out = tmp_path / "opt.onnx"
    r = fuselab("optimize", model, "-o", out, "--no-parity", *dim_args(mid))
    if r.returncode != 0:
        cli_failed(r, mid, "no_parity")
    saved = onnx.load(str(out))
    check_model(saved)
    if domains := custom_domains(saved):
        pytest.skip(f"the optimized model uses {sorted(domains)}, which onnxruntime cannot run; "
                    "test_optimize_with_parity covers it")
    feeds, want = feeds_and_reference(model)
    got = ort_outputs(out, feeds)
    assert set(got) == set(want), f"outputs {sorted(got)} != {sorted(want)}"
    atol, rtol = tolerance(mid)
    for name in want:
        assert_close(got[name], want[name], atol, rtol, f"onnxruntime on optimized {name!r}")


@pytest.mark.parametrize(
    "model", [p for p in MODELS if model_id(p) in conftest.ALLOWED_GAPS], ids=model_id
)
def test_allowed_gaps_are_current(model: Path, cli_run):
    """The ops ALLOWED_GAPS lists for a real model are exactly those the CLI still names: an op
    that landed must leave the list, so a later regression of its kernel fails instead of
    xfailing."""
    mid = model_id(model)
    r, _ = cli_run(model)
    allowed = conftest.ALLOWED_GAPS[mid]
    gaps = reported_gaps(r.returncode, r.stderr) or set()
    assert gaps == allowed, (
        f"{mid}: the CLI names {sorted(gaps) or 'no missing op'}; ALLOWED_GAPS lists "
        f"{sorted(allowed)}: update tests/python/conftest.py"
        + (f"\n{r.describe()}" if r.returncode not in (0, 2) else "")
    )
