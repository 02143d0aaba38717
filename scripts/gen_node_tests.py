#!/usr/bin/env python3
"""Regenerates the ONNX backend node-test corpus from the case generators in the onnx wheel.

Run from the repository root (scripts/setup.sh does this when the corpus is missing):

    .venv/bin/python scripts/gen_node_tests.py [OUT_DIR]      # default: tests/data/node/

The onnx wheel ships the generators (onnx/backend/test/case/node/*.py) but not their data. This
writes the same layout as onnx's own onnx/backend/test/data/node/ (what
`backend-test-tools generate-data` produces, see onnx/backend/test/cmd_tools.py):

    OUT_DIR/test_<name>/model.onnx
    OUT_DIR/test_<name>/test_data_set_<i>/input_<j>.pb     j indexes model.graph.input
    OUT_DIR/test_<name>/test_data_set_<i>/output_<j>.pb    j indexes model.graph.output

A .pb is a serialized TensorProto, or a SequenceProto / OptionalProto / MapProto when the graph
input or output at that index has that type. OUT_DIR/MANIFEST.json lists, per case, the ops of the
main graph, the opset imports, the input/output kinds and whether any of them is not a plain
tensor, so a runner can skip what it does not support without opening every model.

The corpus is built in a sibling temporary folder and moved into place at the end, so an
interrupted run never leaves a half-written corpus with a MANIFEST.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import warnings
from typing import Any

import numpy as np

import onnx
from onnx import TensorProto, numpy_helper

KINDS = ("tensor_type", "sequence_type", "optional_type", "map_type", "sparse_tensor_type")


def value_kind(vi: onnx.ValueInfoProto) -> str:
    """'tensor', 'sequence', 'optional', 'map', 'sparse_tensor' or 'unknown'."""
    which = vi.type.WhichOneof("value")
    return which[: -len("_type")] if which in KINDS else "unknown"


def tensor_elem_types(tp: onnx.TypeProto, out: set[str]) -> None:
    """Collects the element type names of every tensor inside a (possibly nested) type."""
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        out.add(TensorProto.DataType.Name(tp.tensor_type.elem_type))
    elif which == "sparse_tensor_type":
        out.add(TensorProto.DataType.Name(tp.sparse_tensor_type.elem_type))
    elif which == "sequence_type":
        tensor_elem_types(tp.sequence_type.elem_type, out)
    elif which == "optional_type":
        tensor_elem_types(tp.optional_type.elem_type, out)
    elif which == "map_type":
        out.add(TensorProto.DataType.Name(tp.map_type.key_type))
        tensor_elem_types(tp.map_type.value_type, out)


def serialize_value(value: Any, vi: onnx.ValueInfoProto) -> bytes:
    """Same choice of message as onnx's cmd_tools.generate_data."""
    kind = value_kind(vi)
    if kind == "map":
        return numpy_helper.from_dict(value, vi.name).SerializeToString()
    if kind == "sequence":
        return numpy_helper.from_list(value, vi.name).SerializeToString()
    if kind == "optional":
        return numpy_helper.from_optional(value, vi.name).SerializeToString()
    if isinstance(value, (TensorProto, onnx.SparseTensorProto)):
        return value.SerializeToString()
    return numpy_helper.from_array(np.asarray(value), vi.name).SerializeToString()


def subgraph_ops(graph: onnx.GraphProto, out: set[tuple[str, str]]) -> None:
    """(domain, op_type) of every node inside the graph attributes (If/Loop/Scan bodies)."""
    for node in graph.node:
        for attr in node.attribute:
            for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
                for n in g.node:
                    out.add((n.domain, n.op_type))
                subgraph_ops(g, out)


def manifest_entry(case: Any) -> dict[str, Any]:
    model: onnx.ModelProto = case.model
    g = model.graph
    ops = sorted({(n.domain, n.op_type) for n in g.node})
    inner: set[tuple[str, str]] = set()
    subgraph_ops(g, inner)
    in_kinds = [value_kind(v) for v in g.input]
    out_kinds = [value_kind(v) for v in g.output]
    elem_types: set[str] = set()
    for v in list(g.input) + list(g.output):
        tensor_elem_types(v.type, elem_types)
    return {
        "name": case.name,
        # Domains exactly as written in the model: "" is the default ONNX domain.
        "ops": [list(o) for o in ops],
        "subgraph_ops": [list(o) for o in sorted(inner)],
        "opset_imports": {o.domain: o.version for o in model.opset_import},
        "ir_version": model.ir_version,
        "n_inputs": len(g.input),
        "n_outputs": len(g.output),
        "n_initializers": len(g.initializer),
        "input_kinds": in_kinds,
        "output_kinds": out_kinds,
        "non_tensor": any(k != "tensor" for k in in_kinds + out_kinds),
        "elem_types": sorted(elem_types),
        "n_functions": len(model.functions),
        "n_data_sets": len(case.data_sets or []),
        "rtol": case.rtol,
        "atol": case.atol,
    }


def write_case(case: Any, root: str) -> None:
    case_dir = os.path.join(root, case.name)
    os.makedirs(case_dir)
    model: onnx.ModelProto = case.model
    with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    g = model.graph
    for i, (inputs, outputs) in enumerate(case.data_sets):
        ds = os.path.join(case_dir, f"test_data_set_{i}")
        os.makedirs(ds)
        for prefix, values, infos in (("input", inputs, g.input), ("output", outputs, g.output)):
            for j, value in enumerate(values):
                with open(os.path.join(ds, f"{prefix}_{j}.pb"), "wb") as f:
                    f.write(serialize_value(value, infos[j]))


def collect(op_type: str | None) -> list[Any]:
    # The generators compute expected outputs with numpy and some of them overflow on purpose
    # (Cast to float8, log(0) for ReduceLogSum...): those warnings are expected, not news.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        from onnx.backend.test.case import node as node_cases

        return list(node_cases.collect_testcases(op_type))


def looks_like_corpus(path: str) -> bool:
    """True when every entry is MANIFEST.json or a test_* folder (so replacing it is safe)."""
    return all(
        e == "MANIFEST.json" or (e.startswith("test_") and os.path.isdir(os.path.join(path, e)))
        for e in os.listdir(path)
    )


def main(argv: list[str] | None = None) -> int:
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", nargs="?", default=os.path.join(repo, "tests", "data", "node"))
    ap.add_argument("--op", help="only the cases of this op_type (for quick looks)")
    args = ap.parse_args(argv)

    out = os.path.abspath(args.out_dir)
    if os.path.isdir(out) and not looks_like_corpus(out):
        raise SystemExit(
            f"gen_node_tests: {out} exists and holds files other than a node corpus; "
            "refusing to replace it"
        )
    t0 = time.perf_counter()
    cases = [c for c in collect(args.op) if c.kind == "node"]
    t_collect = time.perf_counter() - t0

    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise SystemExit("gen_node_tests: duplicate case names from the generators")

    tmp = f"{out}.tmp-{os.getpid()}"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    entries = []
    try:
        for case in sorted(cases, key=lambda c: c.name):
            write_case(case, tmp)
            entries.append(manifest_entry(case))
        manifest = {
            "generator": "scripts/gen_node_tests.py",
            "onnx_version": onnx.__version__,
            "count": len(entries),
            "non_tensor_count": sum(e["non_tensor"] for e in entries),
            "cases": entries,
        }
        with open(os.path.join(tmp, "MANIFEST.json"), "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.write("\n")
        if os.path.exists(out):
            shutil.rmtree(out)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    total = time.perf_counter() - t0
    n_nt = manifest["non_tensor_count"]
    print(
        f"gen_node_tests: {len(entries)} cases ({n_nt} with sequence/optional/map values) "
        f"from onnx {onnx.__version__} in {total:.1f} s "
        f"(collect {t_collect:.1f} s, write {total - t_collect:.1f} s) -> {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
