"""Shared fixtures for the client suite: the fuselab binary, a CLI runner, model discovery.

The suite treats `fuselab` as a black box: it only runs the binary and reads what it writes, with
onnx (checker) and onnxruntime (reference outputs) as the judges. It does not depend on the Rust
test suite or on anything under src/.

Binary: $FUSELAB_BIN (absolute, or relative to the repository root), default
target/release/fuselab. A missing binary makes every test that needs it FAIL, not skip: a green
run must mean the CLI was exercised.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import onnx
import onnxruntime as ort

import real_models

REPO = Path(__file__).resolve().parents[2]
MODEL_DIRS = [REPO / "examples", REPO / "tests" / "models"]
EYELIKE_ADD = REPO / "examples" / "eyelike_add.onnx"

# Domains whose op schemas the onnx package registers; anything else (com.microsoft,
# ai.fuselab, ...) is a custom domain for the checker.
STANDARD_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training"}

CLI_TIMEOUT_S = 300

DEFAULT_DIM = 8  # symbolic dims not given otherwise; the CLI's default too

# How the CLI names an op its reference backend has no kernel for (exit 2).
UNSUPPORTED_RE = re.compile(r"unsupported op (\S+) \(domain '([^']*)'\)")


def binary_path() -> Path:
    p = Path(os.environ.get("FUSELAB_BIN", "target/release/fuselab"))
    return p if p.is_absolute() else REPO / p


def model_files() -> list[Path]:
    """Every *.onnx under examples/ and tests/models/ (a missing folder contributes nothing)."""
    found: list[Path] = []
    for d in MODEL_DIRS:
        if d.is_dir():
            found.extend(sorted(d.glob("*.onnx")))
    return found


def model_id(p: Path) -> str:
    return str(p.relative_to(REPO))


# Domains onnxruntime (CPU) has kernels for: the standard ones and its contrib ops.
ORT_DOMAINS = STANDARD_DOMAINS | {"com.microsoft"}


def custom_domains(model: onnx.ModelProto, known: set[str] = ORT_DOMAINS) -> set[str]:
    """Domains used by nodes of the main graph or any subgraph that are not in `known` (by
    default: that onnxruntime cannot run, e.g. ai.fuselab)."""
    out: set[str] = set()

    def walk(g: onnx.GraphProto) -> None:
        for n in g.node:
            if n.domain not in known:
                out.add(n.domain)
            for a in n.attribute:
                if a.HasField("g"):
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)

    walk(model.graph)
    return out


@dataclass
class CliResult:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (
            f"$ {' '.join(self.args)}\n-> exit {self.returncode}\n"
            f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        )


class Fuselab:
    def __init__(self, path: Path):
        self.path = path

    def __call__(self, *args: str | os.PathLike) -> CliResult:
        argv = [str(self.path), *map(str, args)]
        env = dict(os.environ, RUST_BACKTRACE="0")
        p = subprocess.run(
            argv, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, cwd=REPO, env=env
        )
        return CliResult(argv, p.returncode, p.stdout, p.stderr)

    def ok(self, *args: str | os.PathLike) -> CliResult:
        r = self(*args)
        assert r.returncode == 0, r.describe()
        return r


@pytest.fixture(scope="session")
def fuselab() -> Fuselab:
    p = binary_path()
    if not p.is_file() or not os.access(p, os.X_OK):
        pytest.fail(
            f"fuselab binary not found or not executable at {p}. Build it with "
            "`cargo build --release --bin fuselab` or point FUSELAB_BIN at it.",
            pytrace=False,
        )
    return Fuselab(p)


def pytest_report_header(config: pytest.Config) -> list[str]:
    p = binary_path()
    state = "found" if p.is_file() else "MISSING"
    return [
        f"fuselab binary: {p} ({state})",
        f"models: {len(model_files())} bundled, {len(real_models.real_model_files())} real "
        "(tests/python/test_models.py)",
    ]


# ---------------------------------------------------------------------------------------------
# inputs


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs the caller must feed (initializers listed as inputs have defaults)."""
    inits = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in inits]


def index_bound(model: onnx.ModelProto, name: str) -> int | None:
    """If `name` is the indices input of a Gather whose data is an initializer (an embedding
    lookup), the size of that table's first axis: valid indices are [0, bound)."""
    inits = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == name:
            t = inits.get(n.input[0])
            axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
            if t is not None and axis == 0 and t.dims:
                return int(t.dims[0])
    return None


def make_inputs(model: onnx.ModelProto, dims: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Seeded random inputs; a symbolic (or unknown) dim takes dims[name], else DEFAULT_DIM.

    Integer inputs are in [0, 4), except embedding indices (in [0, table size)) and inputs named
    like `*mask*` (ones, with the last two positions of the last row zero when there are at least
    three: right padding that leaves every row something to attend to)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in graph_inputs(model):
        tt = vi.type.tensor_type
        assert vi.type.HasField("tensor_type"), f"input {vi.name!r} is not a tensor"
        shape = [
            d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, DEFAULT_DIM)
            for d in tt.shape.dim
        ]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if dtype == np.float32:
            feeds[vi.name] = rng.standard_normal(shape, dtype=np.float32)
        elif np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[vi.name] = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.integer) and "mask" in vi.name.lower():
            m = np.ones(shape, dtype=dtype)
            if m.ndim >= 1 and m.shape[-1] >= 3 and m.size:
                m.reshape(-1, m.shape[-1])[-1, -2:] = 0
            feeds[vi.name] = m
        elif np.issubdtype(dtype, np.integer):
            high = index_bound(model, vi.name) or 4
            feeds[vi.name] = rng.integers(0, high, size=shape).astype(dtype)
        else:
            pytest.fail(f"input {vi.name!r}: no generator for element type {dtype}")
    return feeds


# ---------------------------------------------------------------------------------------------
# ops the reference backend lacks

# The only gaps a test may xfail on: model id (as model_id gives it) -> op types the reference
# backend is allowed to lack (as missing_ops names them: `Op`, or `domain.Op` outside ai.onnx).
# Any other gap fails the test that hits it, and an entry that is no longer a gap fails too
# (test_client.test_allowed_gaps_are_real for the bundled models, test_models.
# test_allowed_gaps_are_current for the real ones, which compare with the ops the CLI names).
# No bundled model (examples/, tests/models/*.onnx) has a gap. The real models of
# tests/python/test_models.py do, for the ops of issue 14 that are not in yet: as each lands,
# remove it here (the table's tests then xpass, which strict xfail reports as a failure, until
# the entry is gone).
_LIGHT = "tests/data/models/onnx_light"
_OCR = "tests/data/models/rapidocr"
_OCR_ORT = "tests/data/models/rapidocr-onnxruntime"
_VAD = "tests/data/models/silero-vad"
_TORCHVISION = "tests/data/models/torchvision"
_ZOO = "tests/models/zoo"
ALLOWED_GAPS: dict[str, set[str]] = {
    f"{_LIGHT}/bvlc_alexnet.onnx": set(),
    f"{_LIGHT}/densenet121.onnx": set(),
    f"{_LIGHT}/inception_v1.onnx": set(),
    f"{_LIGHT}/inception_v2.onnx": set(),
    f"{_LIGHT}/resnet50.onnx": set(),
    f"{_LIGHT}/shufflenet.onnx": set(),
    f"{_LIGHT}/squeezenet.onnx": set(),
    f"{_LIGHT}/vgg19.onnx": set(),
    f"{_LIGHT}/zfnet512.onnx": set(),
    f"{_OCR}/PP-OCRv6_det_small.onnx": set(),
    f"{_OCR}/PP-OCRv6_rec_small.onnx": set(),
    f"{_OCR}/ch_ppocr_mobile_v2.0_cls_mobile.onnx": set(),
    f"{_OCR_ORT}/ch_PP-OCRv4_det_infer.onnx": set(),
    f"{_OCR_ORT}/ch_PP-OCRv4_rec_infer.onnx": set(),
    f"{_OCR_ORT}/ch_ppocr_mobile_v2.0_cls_infer.onnx": set(),
    f"{_VAD}/silero_vad.onnx": set(),
    f"{_VAD}/silero_vad_16k_op15.onnx": set(),
    f"{_VAD}/silero_vad_16k_sequence.onnx": set(),
    f"{_VAD}/silero_vad_half.onnx": set(),
    f"{_VAD}/silero_vad_openvino_16k.onnx": set(),
    f"{_TORCHVISION}/mobilenet_v3_small.onnx": set(),
    f"{_TORCHVISION}/resnet18.onnx": set(),
    f"{_ZOO}/bert_tiny_int8.onnx": set(),
    f"{_ZOO}/gpt2_tiny_dynamo.onnx": set(),
    f"{_ZOO}/gpt2_tiny_sdpa.onnx": set(),
    f"{_ZOO}/llama_gqa_tiny_sdpa.onnx": set(),
    f"{_ZOO}/llama_gqa_tiny_dynamo.onnx": set(),
    f"{_ZOO}/llama_gqa_tiny_int4.onnx": set(),
    f"{_ZOO}/llama_gqa_tiny_fp16_int4.onnx": set(),
    f"{_ZOO}/vit_tiny.onnx": set(),
    f"{_ZOO}/whisper_encoder_tiny.onnx": set(),
}


def unsupported_in(r: CliResult) -> tuple[str, str] | None:
    """(op_type, domain) when the CLI failed because the reference backend lacks an op."""
    m = UNSUPPORTED_RE.search(r.stderr)
    return (m.group(1), m.group(2)) if r.returncode == 2 and m else None


def missing_ops(fuselab: Fuselab, model_path: Path, work: Path) -> list[str]:
    """Every op type of the model's main graph that `fuselab run` reports as unsupported.

    The CLI names only the first such node, so each distinct op type is probed on its own: a
    one-node model holding the first node of that type, its inputs as initializers with the real
    values onnxruntime computes for them on seeded inputs, and `fuselab run` on it. Only ops whose
    probe fails with `unsupported op <that op>` are listed."""
    model = onnx.load(str(model_path))
    feeds = make_inputs(model, {}, 0)
    # Every intermediate value, from onnxruntime on the original.
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    have = {o.name for o in exposed.graph.output}
    for n in exposed.graph.node:
        for o in n.output:
            if o and o not in have:
                exposed.graph.output.append(onnx.ValueInfoProto(name=o))
                have.add(o)
    sess = ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    values = dict(zip(names, sess.run(names, feeds), strict=True))
    values.update(feeds)
    values.update({t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer})

    work.mkdir(parents=True, exist_ok=True)
    seen: set[tuple[str, str]] = set()
    missing: list[str] = []
    for i, node in enumerate(model.graph.node):
        key = (node.domain, node.op_type)
        if key in seen:
            continue
        seen.add(key)
        inits = [onnx.numpy_helper.from_array(values[x], x) for x in dict.fromkeys(node.input) if x]
        outs = [
            onnx.helper.make_tensor_value_info(
                o, onnx.helper.np_dtype_to_tensor_dtype(values[o].dtype), values[o].shape
            )
            for o in node.output
            if o
        ]
        g = onnx.helper.make_graph([node], f"probe_{node.op_type}", [], outs, inits)
        probe = onnx.helper.make_model(g, opset_imports=model.opset_import)
        probe.ir_version = model.ir_version
        f = work / f"probe_{i}_{node.op_type}.onnx"
        onnx.save(probe, str(f))
        r = fuselab("run", f, "--out", work / f"out_{i}")
        got = unsupported_in(r)
        if got and got[0] == node.op_type:
            missing.append(f"{node.op_type}" if got[1] == "ai.onnx" else f"{got[1]}.{got[0]}")
    return sorted(missing)


@pytest.fixture(scope="session")
def backend_gaps(fuselab: Fuselab, tmp_path_factory: pytest.TempPathFactory):
    """model path -> sorted op types the reference backend lacks (probed once per model)."""
    cache: dict[Path, list[str]] = {}

    def get(model: Path) -> list[str]:
        if model not in cache:
            work = tmp_path_factory.mktemp(f"probe_{model.stem}")
            cache[model] = missing_ops(fuselab, model, work)
        return cache[model]

    return get


def xfail_if_unsupported(r: CliResult, model: Path, backend_gaps) -> None:
    """A CLI call that failed because the reference backend lacks ops: xfails the test, with those
    ops in the reason, when ALLOWED_GAPS allows every one of them for this model, and fails it
    naming the others otherwise. Any other failure is left to the caller's assertions."""
    first = unsupported_in(r)
    if first is None:
        return
    op, domain = first
    m = onnx.load(str(model), load_external_data=False)
    present = {n.op_type for n in m.graph.node}
    assert op in present or op.endswith(" with subgraphs"), (
        f"CLI reports unsupported op {op!r}, which {model.name} does not use\n{r.describe()}"
    )
    # The probe's list, and always the op the CLI named (as the probe names ops).
    ops = sorted({*backend_gaps(model), op if domain == "ai.onnx" else f"{domain}.{op}"})
    allowed = ALLOWED_GAPS.get(model_id(model), set())
    if not_allowed := sorted(set(ops) - allowed):
        pytest.fail(
            f"fuselab's reference backend lacks {', '.join(not_allowed)} for {model_id(model)}, "
            "which ALLOWED_GAPS in tests/python/conftest.py does not allow: implement the "
            "kernel, or list the gap there to xfail this test\n" + r.describe(),
            pytrace=False,
        )
    pytest.xfail(
        f"fuselab's reference backend lacks {', '.join(ops)} (allowed by ALLOWED_GAPS; CLI: "
        f"unsupported op {op} (domain '{domain}'))"
    )


# ---------------------------------------------------------------------------------------------
# shared by test_client.py and test_models.py


def file_stem(name: str) -> str:
    """How `fuselab run` names DIR/<output>.npy: characters other than [A-Za-z0-9_.-] become '_'."""
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", name)


def fuselab_outputs(
    fuselab: Fuselab,
    path: Path,
    feeds: dict[str, np.ndarray],
    dims: dict[str, int],
    work: Path,
    backend_gaps=None,
) -> dict[str, np.ndarray]:
    """`fuselab run` on `path` with these inputs and dims: every graph output by name. With
    `backend_gaps`, an op the reference backend lacks is an xfail naming it."""
    work.mkdir(parents=True, exist_ok=True)
    args: list[str | Path] = ["run", path]
    for name, arr in feeds.items():
        f = work / f"in_{file_stem(name)}.npy"
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    for k, v in dims.items():
        args += ["--dim", f"{k}={v}"]
    out = work / "out"
    r = fuselab(*args, "--out", out)
    if r.returncode != 0 and backend_gaps is not None:
        xfail_if_unsupported(r, path, backend_gaps)
    assert r.returncode == 0, r.describe()
    model = onnx.load(str(path), load_external_data=False)
    got = {}
    for o in model.graph.output:
        f = out / f"{file_stem(o.name)}.npy"
        assert f.is_file(), f"fuselab run wrote no {f.name} for output {o.name!r}\n{r.describe()}"
        got[o.name] = np.load(f)
    return got


def ort_outputs(path: Path, feeds: dict[str, np.ndarray], level: str = "all") -> dict[str, np.ndarray]:
    """onnxruntime (CPU) on `feeds`, at graph optimization level `level` ("all" or "basic")."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = {"all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                     "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC}[level]
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def assert_close(got: np.ndarray, want: np.ndarray, atol: float, rtol: float, what: str) -> None:
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != onnxruntime's {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != onnxruntime's {want.shape}"
    if got.size == 0:
        return
    if np.issubdtype(want.dtype, np.floating):
        g, w = got.astype(np.float64), want.astype(np.float64)
        diff = np.abs(g - w)
        diff[np.isnan(g) & np.isnan(w)] = 0.0
        bad = ~(diff <= atol + rtol * np.abs(w))
        assert not bad.any(), (
            f"{what}: {int(bad.sum())} of {got.size} elements differ; max |diff| = "
            f"{np.nanmax(diff):.3g} (atol {atol:g}, rtol {rtol:g})"
        )
    else:
        assert np.array_equal(got, want), f"{what}: values differ from onnxruntime"


# onnxruntime's contrib ops that it registers in the default domain, as fuselab emits them to
# match its contract (`rms_norm`): the onnx checker knows no schema for them there.
ORT_DEFAULT_DOMAIN_CONTRIB = {"SimplifiedLayerNormalization"}


def check_model(saved: onnx.ModelProto) -> None:
    contrib = [n for n in saved.graph.node if n.domain in ("", "ai.onnx") and n.op_type in ORT_DEFAULT_DOMAIN_CONTRIB]
    if contrib:
        # Checked as custom ops: the same model with those nodes in a domain of their own.
        saved = onnx.ModelProto.FromString(saved.SerializeToString())
        for n in saved.graph.node:
            if n.domain in ("", "ai.onnx") and n.op_type in ORT_DEFAULT_DOMAIN_CONTRIB:
                n.domain = "onnxruntime.default"
        saved.opset_import.append(onnx.helper.make_opsetid("onnxruntime.default", 1))
    if custom_domains(saved, STANDARD_DOMAINS):
        # onnx registers no schemas for com.microsoft / ai.fuselab ops, so the checker cannot
        # verify their inputs, attributes or types (it only requires an opset import for each
        # domain), and full_check's strict shape inference cannot infer through them, so types
        # downstream of a custom op may be unknown and strict mode may reject a valid model.
        # Hence the structural check only for models with custom domains.
        onnx.checker.check_model(saved, full_check=False)
    else:
        onnx.checker.check_model(saved, full_check=True)


def optimized_ops(fuselab: "Fuselab", src: Path, out: Path) -> "collections.Counter[str]":
    """`fuselab optimize SRC -o OUT` (which must succeed), and the op histogram of OUT's main graph."""
    import collections

    fuselab.ok("optimize", src, "-o", out)
    return collections.Counter(n.op_type for n in onnx.load(str(out)).graph.node)
