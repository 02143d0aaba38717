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
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import onnx

REPO = Path(__file__).resolve().parents[2]
MODEL_DIRS = [REPO / "examples", REPO / "tests" / "models"]
EYELIKE_ADD = REPO / "examples" / "eyelike_add.onnx"

# Domains whose op schemas the onnx package registers; anything else (com.microsoft,
# ai.fuselab, ...) is a custom domain for the checker.
STANDARD_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training"}

CLI_TIMEOUT_S = 300


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


def custom_domains(model: onnx.ModelProto) -> set[str]:
    """Non-standard domains used by nodes of the main graph or any subgraph."""
    out: set[str] = set()

    def walk(g: onnx.GraphProto) -> None:
        for n in g.node:
            if n.domain not in STANDARD_DOMAINS:
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
    return [f"fuselab binary: {p} ({state})", f"models: {len(model_files())}"]
