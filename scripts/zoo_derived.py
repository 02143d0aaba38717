"""The derived files of the model zoo (tests/models/zoo/): committed float files converted by
onnxruntime's own tools (quantize_dynamic, MatMulNBitsQuantizer, float16), each checked against
its source in onnxruntime. No torch: `scripts/export_zoo.py` (through `export_models.py --zoo`)
runs these with the exports, and one can be remade alone, which updates its row and histogram
line in tests/models/zoo/README.md and leaves the others:

    .venv/bin/pip install onnx-ir   # MatMulNBitsQuantizer imports it; CI does not need it
    .venv/bin/python scripts/zoo_derived.py llama_gqa_tiny_int4_qdq

(`bert_tiny_int8` and `gpt2_tiny_fp16` are made from tests/models/*_op17.onnx, which
export_models.py writes.)
"""
from __future__ import annotations

import argparse
import collections
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "models"
ZOO = OUT / "zoo"
VOCAB = 1000


def sample_inputs(names: list[str], seed: int, batch: int = 2, seq: int = 8) -> dict:
    """[batch, seq] int64 feeds as export_models.sample_inputs makes them (input_ids in [0,
    VOCAB), attention_mask ones with the last row's last two positions 0, token_type_ids 0 then
    1)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for n in names:
        if n == "input_ids":
            feeds[n] = rng.integers(0, VOCAB, size=(batch, seq), dtype=np.int64)
        elif n == "attention_mask":
            m = np.ones((batch, seq), dtype=np.int64)
            m[-1, -2:] = 0
            feeds[n] = m
        elif n == "token_type_ids":
            t = np.zeros((batch, seq), dtype=np.int64)
            t[:, seq // 2:] = 1
            feeds[n] = t
        else:
            raise ValueError(f"no sample input for {n!r}")
    return feeds


def decode_sample_inputs(model: onnx.ModelProto, seed: int, batch: int = 2,
                         seq: int = 3) -> dict:
    """A decode step's feeds, as export_zoo.decode_feeds makes them: seq new tokens after past =
    seq + 2 cached ones (random float32 caches shaped as the model declares them: batch, past
    and the static heads/head dims), a mask of ones over past + seq."""
    rng = np.random.default_rng(seed)
    past = seq + 2
    sizes = {"batch": batch, "seq": seq, "past": past, "total": past + seq}
    feeds = {}
    for v in model.graph.input:
        dims = [d.dim_value or sizes[d.dim_param] for d in v.type.tensor_type.shape.dim]
        if v.name == "input_ids":
            feeds[v.name] = rng.integers(0, VOCAB, size=dims, dtype=np.int64)
        elif v.name == "attention_mask":
            feeds[v.name] = np.ones(dims, np.int64)
        elif v.name.startswith("past_"):
            feeds[v.name] = rng.standard_normal(dims).astype(np.float32)
        else:
            raise ValueError(f"no sample decode input for {v.name!r}")
    return feeds


def histogram(model: onnx.ModelProto) -> dict[str, int]:
    c = collections.Counter(
        (f"{n.domain}." if n.domain not in ("", "ai.onnx") else "") + n.op_type
        for n in model.graph.node
    )
    return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


def io_sig(model: onnx.ModelProto) -> tuple[list[str], list[str]]:
    def one(v):
        t = v.type.tensor_type
        dims = [d.dim_param or str(d.dim_value) for d in t.shape.dim]
        ty = onnx.helper.tensor_dtype_to_string(t.elem_type).removeprefix("TensorProto.").lower()
        return f"{v.name}: {ty} [{', '.join(dims)}]"

    inits = {i.name for i in model.graph.initializer}
    return ([one(v) for v in model.graph.input if v.name not in inits],
            [one(v) for v in model.graph.output])


def save_checked(model: onnx.ModelProto, path: Path) -> onnx.ModelProto:
    """Writes `model` as one self-contained file and runs the full checker on what was written."""
    onnx.checker.check_model(model, full_check=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    again = onnx.load(str(path), load_external_data=False)
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in again.graph.initializer)
    onnx.checker.check_model(str(path), full_check=True)
    return again


def ort_run(path: Path, feeds: dict[str, np.ndarray], level=None) -> list[np.ndarray]:
    """onnxruntime (CPU) on `feeds`; `level`, a GraphOptimizationLevel, when given."""
    opts = ort.SessionOptions()
    if level is not None:
        opts.graph_optimization_level = level
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def max_abs(a: list[np.ndarray], b: list[np.ndarray], what: str) -> float:
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        assert x.shape == y.shape, f"{what}: shape {x.shape} != {y.shape}"
        worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))))
    return worst


def check_vs_float(path: Path, float_path: Path, feeds: dict[str, np.ndarray],
                   bound: float) -> float:
    """max |onnxruntime(derived) - onnxruntime(float)| relative to max |float output|; asserts
    it is <= bound (what the conversion costs) and returns it."""
    want = ort_run(float_path, feeds)
    scale = max(float(np.max(np.abs(w))) for w in want)
    rel = max_abs(ort_run(path, feeds), want, path.name) / scale
    assert rel <= bound, f"{path.name}: max |derived - float| / max |float| = {rel:.3g} > {bound}"
    return rel


# ---------------------------------------------------------------------------------------------
# conversions


def derive_int8(src: Path, dst: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)


def derive_int4(src: Path, dst: Path) -> None:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    q = MatMulNBitsQuantizer(onnx.load(str(src)), bits=4, block_size=32, is_symmetric=True)
    q.process()
    q.model.save_model_to_file(str(dst), use_external_data_format=False)


def derive_int4_qdq(src: Path, dst: Path) -> None:
    """The same quantization written as QDQ: DequantizeLinear(int4 [K, N], scales [K / 32, N],
    axis 0, block_size 32) → MatMul. Int4 DequantizeLinear needs opset 21, which the quantizer
    imports without converting the other nodes (a ReduceMean keeps its opset-17 `axes`
    attribute, which onnxruntime then refuses), so the source is converted to 21 first."""
    from onnx import version_converter
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    model = version_converter.convert_version(onnx.load(str(src)), 21)
    q = MatMulNBitsQuantizer(model, bits=4, block_size=32, is_symmetric=True,
                             quant_format=QuantFormat.QDQ)
    q.process()
    q.model.save_model_to_file(str(dst), use_external_data_format=False)


def topo_sorted(model: onnx.ModelProto) -> onnx.ModelProto:
    """The graph's nodes in an order where each reads only what comes before it (the float16
    converter appends the Casts of graph inputs after their readers in a decode step), stable
    otherwise."""
    nodes = list(model.graph.node)
    ready = {i.name for i in model.graph.input} | {i.name for i in model.graph.initializer} | {""}
    order = []
    while nodes:
        rest = []
        for n in nodes:  # a sorted graph goes in one sweep, in its own order
            if all(x in ready for x in n.input):
                order.append(n)
                ready.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(nodes):
            raise ValueError(f"{len(rest)} nodes read values nothing produces")
        nodes = rest
    del model.graph.node[:]
    model.graph.node.extend(order)
    return model


def derive_fp16(src: Path, dst: Path) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16
    model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    onnx.save(topo_sorted(model), str(dst))


# name -> (source file, conversion, bound on max |derived - float| / max |float|, why)
DERIVED = {
    "bert_tiny_int8": (OUT / "bert_tiny_op17.onnx", derive_int8, 0.1,
                       "int8 weights and activations: ~1/127 of each range per MatMul"),
    "llama_gqa_tiny_int4": (ZOO / "llama_gqa_tiny.onnx", derive_int4, 0.25,
                            "4-bit weights: ~1/7 of each block's range"),
    "llama_gqa_tiny_int4_qdq": (ZOO / "llama_gqa_tiny.onnx", derive_int4_qdq, 0.25,
                                "4-bit weights: ~1/7 of each block's range"),
    # onnxruntime's 4-bit quantizer on the float16 model: MatMulNBits with float16 scales.
    "llama_gqa_tiny_fp16_int4": (ZOO / "llama_gqa_tiny_fp16.onnx", derive_int4, 0.25,
                                 "4-bit weights: ~1/7 of each block's range"),
    "gpt2_tiny_fp16": (OUT / "gpt2_tiny_op17.onnx", derive_fp16, 0.01,
                       "fp16 inside: ~1e-3 relative per op"),
    "llama_gqa_tiny_fp16": (ZOO / "llama_gqa_tiny.onnx", derive_fp16, 0.01,
                            "fp16 inside: ~1e-3 relative per op"),
    "qwen3_tiny_fp16": (ZOO / "qwen3_tiny.onnx", derive_fp16, 0.01,
                        "fp16 inside: ~1e-3 relative per op"),
    # transformers 5.x's mask through the dynamo exporter: GatherND of the attention_mask.
    "llama_gqa_tiny_dynamo_fp16": (ZOO / "llama_gqa_tiny_dynamo.onnx", derive_fp16, 0.01,
                                   "fp16 inside: ~1e-3 relative per op"),
    # Decode steps: the present outputs are Cast(Concat(Cast(past), new)) with keep_io_types.
    "gpt2_tiny_decode_fp16": (ZOO / "gpt2_tiny_decode.onnx", derive_fp16, 0.01,
                              "fp16 inside: ~1e-3 relative per op"),
    "llama_gqa_tiny_decode_fp16": (ZOO / "llama_gqa_tiny_decode.onnx", derive_fp16, 0.01,
                                   "fp16 inside: ~1e-3 relative per op"),
}


def describe(path: Path, model: onnx.ModelProto) -> dict:
    ins, outs = io_sig(model)
    return {"file": str(path.relative_to(ZOO)), "bytes": path.stat().st_size,
            "nodes": len(model.graph.node), "inputs": ins, "outputs": outs,
            "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
            "ops": histogram(model)}


def export_derived(only: set[str] | None) -> list[dict]:
    """Makes and checks each derived file (those in `only`, when given); their README rows."""
    rows = []
    for name, (src, convert, bound, why) in DERIVED.items():
        if only and name not in only:
            continue
        path = ZOO / f"{name}.onnx"
        convert(src, path)
        model = save_checked(onnx.load(str(path)), path)
        source = onnx.load(str(src), load_external_data=False)
        names = [i.name for i in source.graph.input]
        feeds = (decode_sample_inputs(source, seed=1) if any(n.startswith("past_") for n in names)
                 else sample_inputs(names, seed=1))
        rel = check_vs_float(path, src, feeds, bound)
        row = describe(path, model) | {
            "check": f"max \\|ORT - ORT({src.name})\\| / max \\|out\\| {rel:.2e} "
                     f"(<= {bound}: {why})"}
        rows.append(row)
        print(f"{path.relative_to(REPO)}: {row['bytes']:,} bytes, {row['nodes']} nodes, "
              f"{row['check']}")
    return rows


# ---------------------------------------------------------------------------------------------
# README rows


def table_row(r: dict) -> str:
    opsets = ", ".join(f"{d} {n}" for d, n in r["opsets"].items())
    return (f"| `{r['file']}` | {r['bytes']:,} | {r['nodes']} | {opsets} | "
            f"{'<br>'.join(r['inputs'])} | {'<br>'.join(r['outputs'])} | {r['check']} |")


def histogram_line(r: dict) -> str:
    return f"`{r['file']}` ({r['nodes']} nodes): " + ", ".join(
        f"{k} {n}" for k, n in r["ops"].items())


def update_readme(rows: list[dict]) -> None:
    """Replaces (or appends) each row's table line and histogram line in the zoo README."""
    path = ZOO / "README.md"
    lines = path.read_text().rstrip("\n").split("\n")
    for r in rows:
        key = f"`{r['file']}`"
        for render, starts in ((table_row, f"| {key} |"), (histogram_line, f"{key} (")):
            at = [i for i, line in enumerate(lines) if line.startswith(starts)]
            if at:
                lines[at[0]] = render(r)
                continue
            # After the last line of the same kind.
            kind = "| `" if render is table_row else "`"
            last = max(i for i, line in enumerate(lines) if line.startswith(kind))
            new = [render(r)] if render is table_row else ["", render(r)]
            lines[last + 1:last + 1] = new
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="+", choices=sorted(DERIVED), help="derived files to remake")
    rows = export_derived(set(ap.parse_args().names))
    update_readme(rows)
    print(f"updated {(ZOO / 'README.md').relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
