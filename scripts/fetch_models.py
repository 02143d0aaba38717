#!/usr/bin/env python3
"""Puts the real-model test set under tests/data/models/ (gitignored; CI caches the folder).

Run from the repository root with the project venv (scripts/setup.sh does):

    .venv/bin/python scripts/fetch_models.py [--out tests/data/models] [--only SOURCE ...] [--force]

Three sources, reached only through what is installed, what is committed, or pip (PyPI):

onnx_light    The nine weight-stripped CNNs the installed `onnx` wheel ships in
              onnx/backend/test/data/light/ (AlexNet, DenseNet-121, Inception v1/v2, ResNet-50,
              ShuffleNet, SqueezeNet, VGG-19, ZFNet-512; opset 9, input [1, 3, 224, 224]). In
              those files every large weight was replaced by a ConstantOfShape node filled with
              0.02 (its shape kept as an int64 initializer `<name>__SHAPE`); small tensors (some
              biases and batch-norm statistics) were left as they were. Here each such
              ConstantOfShape becomes an initializer of the same name, shape and dtype holding
              seeded random values chosen by what reads it (He-normal N(0, 2/fan_in) for Conv and
              Gemm weights, so activations keep their scale through the ReLUs; biases N(0, 0.1^2);
              batch-norm scale U(0.8, 1.2), bias N(0, 0.1^2)); the kept tensors stay as they
              are. Then every BatchNormalization's running mean and variance are set to what it
              sees on one seeded N(0, 1) image (calibrate_batch_norm: without it ResNet-50's
              logits reach ~1e5 and DenseNet-121 overflows). Written to onnx_light/<model>.onnx,
              checked with onnx.checker (full check) and run once in onnxruntime (all outputs
              finite). The values depend only on the tensor name and SEED, not on file order.

torchvision   tests/models/zoo/graphs/*.onnx: torchvision's MobileNetV3-small and ResNet-18 as
              scripts/export_zoo.py commits them, weights stripped to the same ConstantOfShape
              format (their weights are 10 and 47 MB); filled the same way, then each Conv's
              weight scaled so its output has unit spread on the seeded image (normalize_convs:
              the exporter folded batch norm into the convs, so nothing else keeps the
              residual sums in range), into torchvision/<model>.onnx.

wheels        Every .onnx inside the pinned rapidocr, rapidocr-onnxruntime and silero-vad wheels:
              `pip download --no-deps --only-binary=:all: NAME==VERSION` into <out>/.wheels/
              (kept as the download cache), the wheel's sha256 checked against WHEELS below, then
              each .onnx copied to <out>/<package>/<basename>.

Idempotent: a file whose MANIFEST.json entry matches (same recipe, same source, same sha256 on
disk) is skipped; --force redoes everything. Prints one line per file saying what it did. The
manifest, <out>/MANIFEST.json, records for each file its source, recipe and sha256.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "tests" / "data" / "models"
SEED = 20261203

ZOO_GRAPHS = REPO / "tests" / "models" / "zoo" / "graphs"

# Bump when the fill below changes, so filled files are regenerated.
FILL_RECIPE = "fill-v1"

# Pinned wheels: (package, version, sha256 of the wheel file). Pure-Python wheels, one per
# version. Bump all three fields together (`pip download --no-deps NAME==VERSION`, `sha256sum`).
WHEELS = [
    ("rapidocr", "3.10.0",
     "2fc34e26cd0f48514804a94f8832283039c7334076bff60768b1fed9ad068050"),
    ("rapidocr-onnxruntime", "1.4.4",
     "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf"),
    ("silero-vad", "6.2.3",
     "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8"),
]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Manifest:
    """<out>/MANIFEST.json: relative path -> {source, recipe, sha256, bytes}."""

    def __init__(self, out: Path):
        self.path = out / "MANIFEST.json"
        self.out = out
        self.entries: dict[str, dict] = (
            json.loads(self.path.read_text()) if self.path.is_file() else {}
        )

    def up_to_date(self, rel: str, source: str, recipe: str) -> bool:
        e = self.entries.get(rel)
        f = self.out / rel
        return (
            e is not None
            and e.get("source") == source
            and e.get("recipe") == recipe
            and f.is_file()
            and f.stat().st_size == e.get("bytes")
            and sha256(f) == e.get("sha256")
        )

    def record(self, rel: str, source: str, recipe: str) -> None:
        f = self.out / rel
        self.entries[rel] = {
            "source": source,
            "recipe": recipe,
            "sha256": sha256(f),
            "bytes": f.stat().st_size,
        }
        self.path.write_text(json.dumps(self.entries, indent=1, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------------------------
# onnx_light: fill the stripped weights


def light_dir() -> Path:
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def readers(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    """value name -> [(node, input slot)] for every node that reads it."""
    out: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for n in graph.node:
        for i, x in enumerate(n.input):
            out.setdefault(x, []).append((n, i))
    return out


def role_of(name: str, reads: dict) -> tuple[onnx.NodeProto, int]:
    """The (node, slot) that uses the weight `name`, looking through Unsqueeze/Reshape (DenseNet
    and Inception v2 unsqueeze per-channel scales; Inception v1 reshapes its classifier weight)
    and Identity (torch's exporter shares equal initializers through it). All uses must be of
    one kind (op type and input slot)."""
    uses = []
    for node, slot in reads.get(name, []):
        if node.op_type in ("Unsqueeze", "Reshape", "Identity") and slot == 0:
            uses.append(role_of(node.output[0], reads))
        else:
            uses.append((node, slot))
    kinds = {(n.op_type, s) for n, s in uses}
    if len(kinds) != 1:
        raise SystemExit(f"fetch_models: weight {name!r} has uses {sorted(kinds)}; add a rule")
    return uses[0]


def attr(node: onnx.NodeProto, key: str, default):
    for a in node.attribute:
        if a.name == key:
            return onnx.helper.get_attribute_value(a)
    return default


def fill(name: str, shape: list[int], dtype: np.dtype,
         use: tuple[onnx.NodeProto, int]) -> np.ndarray:
    """Seeded random values for the stripped weight `name`, by the role its reader gives it."""
    rng = np.random.default_rng([SEED, zlib.crc32(name.encode())])
    node, slot = use
    op = node.op_type
    if (op, slot) == ("Conv", 1):  # W [M, C/group, kH, kW]
        fan_in = int(np.prod(shape[1:]))
        v = rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)
    elif (op, slot) == ("Gemm", 1):  # B [K, N], or [N, K] with transB
        fan_in = shape[-1] if attr(node, "transB", 0) else shape[0]
        v = rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)
    elif (op, slot) in {("Conv", 2), ("Gemm", 2), ("BatchNormalization", 2),
                        ("BatchNormalization", 3), ("Add", 1)}:  # biases, means, shifts
        v = rng.normal(0.0, 0.1, shape)
    elif (op, slot) in {("BatchNormalization", 1), ("Mul", 1)}:  # scales
        v = rng.uniform(0.8, 1.2, shape)
    elif (op, slot) == ("BatchNormalization", 4):  # running variance
        v = rng.uniform(0.5, 1.5, shape)
    else:
        raise SystemExit(f"fetch_models: no fill rule for {op} input {slot} (weight {name!r})")
    return v.astype(dtype)


def fill_light(src: Path) -> onnx.ModelProto:
    """The model of `src` with each ConstantOfShape(<shape initializer>) replaced by an
    initializer of seeded random values (see the module docstring)."""
    m = onnx.load(str(src))
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    reads = readers(g)
    keep_nodes, new_inits, dropped_shapes = [], [], set()
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = [int(d) for d in numpy_helper.to_array(inits[n.input[0]])]
            value = attr(n, "value", None)
            dtype = numpy_helper.to_array(value).dtype if value is not None else np.float32
            name = n.output[0]
            values = fill(name, shape, dtype, role_of(name, reads))
            new_inits.append(numpy_helper.from_array(values, name))
            dropped_shapes.add(n.input[0])
        else:
            keep_nodes.append(n)
    still_read = {x for n in keep_nodes for x in n.input}
    dropped = {s for s in dropped_shapes if s not in still_read}

    del g.node[:]
    g.node.extend(keep_nodes)
    kept = [t for t in g.initializer if t.name not in dropped]
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    # IR version 3 requires every initializer to be a graph input too (these files list them).
    inputs = [v for v in g.input if v.name not in dropped]
    if m.ir_version < 4:
        inputs += [
            onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in new_inits
        ]
    del g.input[:]
    g.input.extend(inputs)
    return m


def seeded_image(shape: list) -> np.ndarray:
    """N(0, 1) of `shape`; a symbolic (or unknown) dim is 1."""
    dims = [d if isinstance(d, int) and d > 0 else 1 for d in shape]
    return np.random.default_rng(SEED).standard_normal(dims).astype(np.float32)


def upstream_of(g: onnx.GraphProto, nodes: list[onnx.NodeProto], value_of) -> dict[int, set[int]]:
    """For each of `nodes` (by index): the indices of the others that its probed value
    (value_of(node)) depends on."""
    producer = {o: n for n in g.node for o in n.output}
    index = {id(n): i for i, n in enumerate(nodes)}
    memo: dict[str, set[int]] = {}

    def deps(value: str) -> set[int]:
        # Iterative over producers: DenseNet-121 is ~1,700 nodes deep.
        stack = [value]
        while stack:
            v = stack[-1]
            if v in memo:
                stack.pop()
                continue
            n = producer.get(v)
            if n is None:
                memo[v] = set()
                stack.pop()
                continue
            todo = [x for x in n.input if x and x not in memo]
            if todo:
                stack.extend(todo)
                continue
            got = set().union(*(memo[x] for x in n.input if x))
            if id(n) in index:
                got = got | {index[id(n)]}
            memo[v] = got
            stack.pop()
        return memo[value]

    return {i: deps(value_of(n)) - {i} for i, n in enumerate(nodes)}


def calibrate_in_waves(m: onnx.ModelProto, nodes: list[onnx.NodeProto], value_of, apply) -> int:
    """For each of `nodes`, runs apply(node, value) with the value value_of(node) takes on one
    seeded N(0, 1) input, once every node of `nodes` upstream of that value has been through
    apply. Each wave runs onnxruntime once, asking only for the values of the nodes that are
    ready. Returns the number of waves (the depth of `nodes`)."""
    if not nodes:
        return 0
    inits = {t.name for t in m.graph.initializer}
    upstream = upstream_of(m.graph, nodes, value_of)
    (x,) = [v for v in m.graph.input if v.name not in inits]
    image = seeded_image([d.dim_value for d in x.type.tensor_type.shape.dim])
    done: set[int] = set()
    waves = 0
    while len(done) < len(nodes):
        ready = [i for i in range(len(nodes)) if i not in done and upstream[i] <= done]
        probe = onnx.ModelProto()
        probe.CopyFrom(m)
        del probe.graph.output[:]
        probe.graph.output.extend(onnx.ValueInfoProto(name=value_of(nodes[i])) for i in ready)
        sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
        for i, v in zip(ready, sess.run(None, {x.name: image}), strict=True):
            if not np.isfinite(v).all():
                n = nodes[i]
                raise SystemExit(f"fetch_models: {n.op_type} {n.name!r}: non-finite values")
            apply(nodes[i], v)
        done.update(ready)
        waves += 1
    return waves


def calibrate_batch_norm(m: onnx.ModelProto) -> int:
    """Sets every BatchNormalization's running mean and variance (inputs 3 and 4, which must be
    initializers) to the per-channel mean and variance of what it reads on one seeded N(0, 1)
    image, as if the network had been trained on it. Without this, random weights after trained
    (kept) statistics make ResNet-50's logits ~1e5 and ShuffleNet's ~1e6 (softmax saturates to
    one-hot), and DenseNet-121 overflows. Returns the number of waves."""
    inits = {t.name: t for t in m.graph.initializer}
    bns = [n for n in m.graph.node if n.op_type == "BatchNormalization"]
    for n in bns:
        if not (n.input[3] in inits and n.input[4] in inits):
            raise SystemExit(
                f"fetch_models: BatchNormalization {n.name!r}: statistics are not initializers")

    def apply(n: onnx.NodeProto, v: np.ndarray) -> None:
        axes = tuple(k for k in range(v.ndim) if k != 1)
        mean = v.mean(axis=axes, dtype=np.float64)
        var = np.maximum(v.var(axis=axes, dtype=np.float64), 1e-6)
        for name, value in ((n.input[3], mean), (n.input[4], var)):
            inits[name].CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))

    return calibrate_in_waves(m, bns, lambda n: n.input[0], apply)


def normalize_convs(m: onnx.ModelProto) -> int:
    """Scales each Conv's weight so that its output has standard deviation 1 on one seeded
    N(0, 1) image (the idea of LSUV initialization, without the orthogonal start). For networks
    whose batch norms the exporter folded into the convs: He-normal weights alone let the
    residual sums grow (ResNet-18's logits reach ~240). A weight must be an initializer that
    only this Conv reads; others are left alone. Returns the number of waves."""
    inits = {t.name: t for t in m.graph.initializer}
    reads = readers(m.graph)
    convs = [n for n in m.graph.node if n.op_type == "Conv" and n.input[1] in inits
             and len(reads[n.input[1]]) == 1]

    def apply(n: onnx.NodeProto, v: np.ndarray) -> None:
        w = inits[n.input[1]]
        scaled = numpy_helper.to_array(w) / max(float(v.std()), 1e-6)
        w.CopyFrom(numpy_helper.from_array(scaled.astype(np.float32), w.name))

    return calibrate_in_waves(m, convs, lambda n: n.output[0], apply)


def check_runs(path: Path) -> str:
    """onnx.checker (full) and one onnxruntime run on seeded N(0, 1) inputs; returns a summary
    of the outputs, and fails when any is not finite."""
    onnx.checker.check_model(str(path), full_check=True)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: seeded_image(i.shape) for i in sess.get_inputs()}
    parts = []
    for o, v in zip(sess.get_outputs(), sess.run(None, feeds), strict=True):
        if not np.isfinite(v).all():
            raise SystemExit(f"fetch_models: {path}: output {o.name} is not finite")
        parts.append(f"{o.name} {list(v.shape)} max {float(np.max(v)):.3g}")
    return "; ".join(parts)


def fill_stripped(out: Path, manifest: Manifest, force: bool, subdir: str, srcs: list[Path],
                  describe: Callable[[Path], str], rename: Callable[[str], str],
                  scale_convs: bool = False) -> None:
    """fill_light + calibrate_batch_norm (+ normalize_convs) + check_runs for each of `srcs`,
    into <out>/<subdir>/."""
    (out / subdir).mkdir(parents=True, exist_ok=True)
    for src in srcs:
        rel = f"{subdir}/{rename(src.name)}"
        source = f"{describe(src)} sha256 {sha256(src)}"
        if not force and manifest.up_to_date(rel, source, FILL_RECIPE):
            print(f"fetch_models: {rel}: up to date")
            continue
        dst = out / rel
        tmp = dst.with_suffix(".onnx.tmp")
        m = fill_light(src)
        summary = []
        if waves := calibrate_batch_norm(m):
            summary.append(f"batch norm calibrated in {waves} waves")
        if scale_convs and (waves := normalize_convs(m)):
            summary.append(f"conv outputs normalized in {waves} waves")
        onnx.save(m, str(tmp))
        summary = "; ".join([check_runs(tmp), *summary])
        tmp.replace(dst)
        manifest.record(rel, source, FILL_RECIPE)
        size = dst.stat().st_size
        print(f"fetch_models: {rel}: filled from {src.name} ({size:,} bytes; {summary})")


def fetch_light(out: Path, manifest: Manifest, force: bool) -> None:
    srcs = sorted(light_dir().glob("light_*.onnx"))
    if len(srcs) != 9:
        raise SystemExit(
            f"fetch_models: expected 9 light_*.onnx in {light_dir()}, found {len(srcs)}")
    site = Path(onnx.__file__).parent.parent
    fill_stripped(out, manifest, force, "onnx_light", srcs,
                  lambda src: f"onnx {onnx.__version__}: {src.relative_to(site)}",
                  lambda name: name.removeprefix("light_"))


def fetch_torchvision(out: Path, manifest: Manifest, force: bool) -> None:
    """tests/models/zoo/graphs/*.onnx (scripts/export_zoo.py: torchvision's MobileNetV3-small
    and ResNet-18, weights stripped to the light format) -> <out>/torchvision/."""
    srcs = sorted(ZOO_GRAPHS.glob("*.onnx"))
    if not srcs:
        raise SystemExit(f"fetch_models: no .onnx in {ZOO_GRAPHS}")
    fill_stripped(out, manifest, force, "torchvision", srcs,
                  lambda src: str(src.relative_to(REPO)), lambda name: name, scale_convs=True)


# ---------------------------------------------------------------------------------------------
# wheels: pip download, check, extract


def wheel_file(cache: Path, package: str, version: str) -> Path:
    """The cached wheel of package==version, downloaded with pip if missing."""
    stem = f"{package.replace('-', '_')}-{version}-"
    found = sorted(cache.glob(f"{stem}*.whl"))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", str(cache), f"{package}=={version}"]
        print(f"fetch_models: {' '.join(cmd[2:])}")
        subprocess.run(cmd, check=True)
        found = sorted(cache.glob(f"{stem}*.whl"))
    if len(found) != 1:
        raise SystemExit(f"fetch_models: expected one {stem}*.whl in {cache}, found {found}")
    return found[0]


def fetch_wheels(out: Path, manifest: Manifest, force: bool) -> None:
    cache = out / ".wheels"
    for package, version, want_sha in WHEELS:
        whl = wheel_file(cache, package, version)
        got_sha = sha256(whl)
        if got_sha != want_sha:
            raise SystemExit(
                f"fetch_models: {whl.name}: sha256 {got_sha}, pinned {want_sha}; delete the file "
                "to download it again, or update WHEELS after checking the new version"
            )
        source = f"{whl.name} sha256 {got_sha}"
        with zipfile.ZipFile(whl) as z:
            members = sorted(n for n in z.namelist() if n.endswith(".onnx"))
            if not members:
                raise SystemExit(f"fetch_models: {whl.name} holds no .onnx")
            (out / package).mkdir(parents=True, exist_ok=True)
            for member in members:
                rel = f"{package}/{Path(member).name}"
                recipe = f"extract {member}"
                if not force and manifest.up_to_date(rel, source, recipe):
                    print(f"fetch_models: {rel}: up to date")
                    continue
                dst = out / rel
                with (z.open(member) as f,
                      tempfile.NamedTemporaryFile(dir=dst.parent, delete=False) as t):
                    shutil.copyfileobj(f, t)
                Path(t.name).replace(dst)
                manifest.record(rel, source, recipe)
                size = dst.stat().st_size
                print(f"fetch_models: {rel}: extracted from {whl.name} ({size:,} bytes)")


SOURCES = {"onnx_light": fetch_light, "torchvision": fetch_torchvision, "wheels": fetch_wheels}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to put the models")
    ap.add_argument("--only", nargs="+", choices=sorted(SOURCES), default=sorted(SOURCES))
    ap.add_argument("--force", action="store_true", help="redo files that are up to date")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(args.out)
    for name in args.only:
        SOURCES[name](args.out, manifest, args.force)


if __name__ == "__main__":
    main()
