#!/usr/bin/env python3
"""Exports tiny, randomly initialised GPT-2 and BERT models to ONNX for fuselab's tests.

Run once, by a developer, from the repository root (CI never runs this: it needs torch, and the
outputs are committed under tests/models/):

    python3 -m venv .venv-export
    .venv-export/bin/pip install torch transformers onnx==1.23.2 onnxruntime==1.32.0 numpy
    .venv-export/bin/python scripts/export_models.py            # writes tests/models/
    .venv-export/bin/python scripts/export_models.py --ort-optimizer   # also: ORT optimizer stats

With --zoo it writes the model zoo of tests/models/zoo/ instead (Llama with grouped-query
attention, Qwen2, Phi, DistilBERT, ViT, Whisper encoder, dynamo exports of GPT-2 and Llama, an
int8 BERT, a 4-bit Llama, an fp16 GPT-2, weight-stripped MobileNetV3-small and ResNet-18; see
scripts/export_zoo.py), leaving the files above untouched; that needs torchvision and onnxscript
too:

    .venv-export/bin/pip install torch torchvision transformers onnx==1.23.2 \
        onnxruntime==1.32.0 numpy onnxscript
    .venv-export/bin/python scripts/export_models.py --zoo

(torch from PyPI is the CUDA build, ~4.5 GB with its CUDA wheels; it runs on CPU. Installing took
about 5 minutes here.) Nothing is downloaded from a model hub: the configs are built in code,
weights come from `torch.manual_seed(0)`.

Writes, in tests/models/:
  gpt2_tiny.onnx, gpt2_tiny_op17.onnx  GPT2LMHeadModel, 2 layers, hidden 64, 4 heads, vocab 1000,
                                       128 positions; inputs input_ids, attention_mask [batch, seq]
                                       int64; output logits [batch, seq, 1000]
  bert_tiny.onnx, bert_tiny_op17.onnx  BertModel, 2 layers, hidden 64, 4 heads, intermediate 128,
                                       vocab 1000, 128 positions; inputs input_ids, attention_mask,
                                       token_type_ids [batch, seq] int64; outputs
                                       last_hidden_state [batch, seq, 64], pooler_output [batch, 64]
  VERSIONS.txt                         python/torch/transformers/onnx/onnxruntime versions, date,
                                       the command
  README.md                            what each file is, node counts, op histograms (and, with
                                       --ort-optimizer, what onnxruntime's transformers optimizer
                                       does to each file)

The plain files are opset 14, where torch decomposes LayerNorm into
ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add; the *_op17 files are opset 17, with native
LayerNormalization. Both use the legacy TorchScript exporter (dynamo=False) and eager attention,
so attention is the classic MatMul/Div/Add/Softmax/MatMul chain. Weights stay inside each .onnx.

Each exported model is checked with onnx.checker (full_check) and run in onnxruntime (CPU) on
seeded inputs (batch 2, seq 8), compared to torch's outputs (max |diff| <= 1e-4).
"""
from __future__ import annotations

import argparse
import datetime
import io
import json
import platform
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

# Torch-free helpers shared with the zoo's derived files (scripts/zoo_derived.py).
from zoo_derived import VOCAB, histogram, io_sig, sample_inputs  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "models"
TOL = 1e-4
BATCH, SEQ = 2, 8
OPSETS = {"": 14, "_op17": 17}


# ---------------------------------------------------------------------------------------------
# models


class Gpt2Logits(torch.nn.Module):
    """GPT2LMHeadModel -> logits only (no cache, no present key/values)."""

    def __init__(self, m: GPT2LMHeadModel):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                      return_dict=True).logits


class BertOutputs(torch.nn.Module):
    """BertModel -> (last_hidden_state, pooler_output)."""

    def __init__(self, m: BertModel):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, token_type_ids):
        o = self.m(input_ids=input_ids, attention_mask=attention_mask,
                   token_type_ids=token_type_ids, use_cache=False, return_dict=True)
        return o.last_hidden_state, o.pooler_output


def build_gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=128, n_embd=64, n_layer=2, n_head=4,
        bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1, use_cache=False,
        attn_implementation="eager",
    )
    return Gpt2Logits(GPT2LMHeadModel(cfg)).eval()


def build_bert() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=128, use_cache=False,
        attn_implementation="eager",
    )
    return BertOutputs(BertModel(cfg, add_pooling_layer=True)).eval()


SPECS = [
    # (file stem, builder, input names, output names, dynamic axes of outputs)
    ("gpt2_tiny", build_gpt2, ["input_ids", "attention_mask"], ["logits"],
     {"logits": {0: "batch", 1: "seq"}}),
    ("bert_tiny", build_bert, ["input_ids", "attention_mask", "token_type_ids"],
     ["last_hidden_state", "pooler_output"],
     {"last_hidden_state": {0: "batch", 1: "seq"}, "pooler_output": {0: "batch"}}),
]


# ---------------------------------------------------------------------------------------------
# export and checks


def export(module, inputs, out_names, out_axes, opset: int, path: Path) -> onnx.ModelProto:
    feeds = sample_inputs(inputs)
    args = tuple(torch.from_numpy(feeds[n]) for n in inputs)
    axes = {n: {0: "batch", 1: "seq"} for n in inputs}
    axes.update(out_axes)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, args, buf, input_names=inputs, output_names=out_names,
            dynamic_axes=axes, opset_version=opset, do_constant_folding=True, dynamo=False,
        )
    model = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(model, full_check=True)
    data = model.SerializeToString()
    path.write_bytes(data)
    # Round trip through the file: no external data, the checker again on what was written.
    again = onnx.load(str(path), load_external_data=False)
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in again.graph.initializer)
    onnx.checker.check_model(str(path), full_check=True)
    return again


def compare(module, inputs, out_names, path: Path) -> float:
    """max |onnxruntime - torch| at batch 2, seq 8 (returned); the dynamic axes are checked too,
    at batch 3, seq 5 and batch 1, seq 128."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    result = None
    for batch, seq in [(BATCH, SEQ), (3, 5), (1, 128)]:
        feeds = sample_inputs(inputs, seed=1, batch=batch, seq=seq)
        with torch.no_grad():
            want = module(*(torch.from_numpy(feeds[n]) for n in inputs))
        if isinstance(want, torch.Tensor):
            want = (want,)
        got = sess.run(out_names, feeds)
        worst = 0.0
        for name, g, w in zip(out_names, got, want, strict=True):
            w = w.numpy()
            what = f"{path.name} {name} (batch {batch}, seq {seq})"
            assert g.shape == w.shape, f"{what}: shape {g.shape} != torch {w.shape}"
            d = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))))
            assert d <= TOL, f"{what}: max |onnxruntime - torch| = {d:.3g} > {TOL}"
            worst = max(worst, d)
        result = worst if result is None else result
    return result


# ---------------------------------------------------------------------------------------------
# onnxruntime's transformers optimizer (for planning; not part of CI)


def ort_optimizer(path: Path, model_type: str, opt_level: int | None) -> dict:
    """optimize_model(path, model_type, num_heads=4, hidden_size=64, opt_level): node counts,
    non-zero fused-operator statistics, op histogram after, and
    max |ORT(optimized) - ORT(original)|.
    opt_level None is what `python -m onnxruntime.transformers.optimizer` does by default (the model
    type's default level: 1 for gpt2 and bert, i.e. onnxruntime's basic graph optimizations run
    first); 0 is the Python fusions alone. A failure is recorded, not raised."""
    from onnxruntime.transformers.optimizer import MODEL_TYPES, optimize_model

    level = MODEL_TYPES[model_type][2] if opt_level is None else opt_level
    before = len(onnx.load(str(path), load_external_data=False).graph.node)
    row = {"file": path.name, "model_type": model_type, "opt_level": level,
           "cli_default": opt_level is None, "nodes_before": before}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt = optimize_model(str(path), model_type=model_type, num_heads=4, hidden_size=64,
                                 opt_level=opt_level)
        row["nodes_after"] = len(opt.model.graph.node)
        stats = opt.get_fused_operator_statistics()
        row["fused"] = {k: v for k, v in stats.items() if v}
        row["ops_after"] = histogram(opt.model)
        # The optimized model must still run and agree with the original.
        names_in = [i.name for i in onnx.load(str(path)).graph.input]
        feeds = sample_inputs(names_in)
        ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        sess = ort.InferenceSession(opt.model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        names = [o.name for o in ref.get_outputs()]
        a, b = ref.run(names, feeds), sess.run(names, feeds)
        row["max_abs_diff"] = max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))
    except Exception as e:  # record what happens, do not stop
        msg = str(e).splitlines()[0] if str(e) else ""
        row["error"] = f"{type(e).__name__}: {msg}"[:300]
    return row


# ---------------------------------------------------------------------------------------------
# README and VERSIONS


def versions() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": ort.__version__,
        "numpy": np.__version__,
    }


def write_versions(command: str) -> None:
    lines = [f"{k} {v}" for k, v in versions().items()]
    lines.append(f"date {datetime.date.today().isoformat()}")
    lines.append(f"command {command}")
    (OUT / "VERSIONS.txt").write_text("\n".join(lines) + "\n")


def write_readme(rows: list[dict], ort_rows: list[dict] | None, command: str) -> None:
    v = versions()
    md = [
        "# tests/models",
        "",
        "Tiny transformer models with random weights (`torch.manual_seed(0)`, no hub download), "
        "exported from PyTorch by `scripts/export_models.py` with the legacy TorchScript exporter "
        "(`torch.onnx.export(..., dynamo=False)`), eager attention, `use_cache=False` (no "
        "past/present key-values), weights as initializers inside each file. Regenerate with:",
        "",
        "```",
        "python3 -m venv .venv-export",
        ".venv-export/bin/pip install torch transformers onnx==1.23.2 onnxruntime==1.32.0 numpy",
        command,
        "```",
        "",
        f"Made with torch {v['torch']}, transformers {v['transformers']}, onnx {v['onnx']}, "
        f"onnxruntime {v['onnxruntime']} (see `VERSIONS.txt`). The script checks each file with "
        "`onnx.checker.check_model(full_check=True)` and compares onnxruntime (CPU) with torch on "
        f"seeded inputs (batch {BATCH}, seq {SEQ}, two padded positions; and batch 3, seq 5; "
        "batch 1, seq 128 for the dynamic axes): max |diff| <= 1e-4.",
        "",
        "More models (Llama, Qwen2, Phi, DistilBERT, ViT, Whisper encoder, dynamo exports, "
        "int8/int4/fp16 variants, torchvision CNNs) are in `zoo/` (`export_models.py --zoo`; "
        "see `zoo/README.md`).",
        "",
        "Configs: GPT-2 = `GPT2LMHeadModel(GPT2Config(vocab_size=1000, n_positions=128, n_embd=64, "
        "n_layer=2, n_head=4))`; BERT = `BertModel(BertConfig(vocab_size=1000, hidden_size=64, "
        "num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, "
        "max_position_embeddings=128))` with its pooler. Symbolic dims are `batch` and `seq` "
        "(`fuselab ... --dim batch=2 --dim seq=8`).",
        "",
        "At opset 14 torch decomposes LayerNorm into ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/"
        "Mul/Add (the hard case for a fuser); at opset 17 it emits native `LayerNormalization`.",
        "",
        "| file | model | opset | bytes | nodes | inputs | outputs | max \\|ORT - torch\\| |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        md.append(
            f"| `{r['file']}` | {r['model']} | {r['opset']} | {r['bytes']:,} | {r['nodes']} | "
            f"{'<br>'.join(r['inputs'])} | {'<br>'.join(r['outputs'])} | {r['diff']:.2e} |"
        )
    md += ["", "## Op histograms", ""]
    for r in rows:
        md.append(f"`{r['file']}` ({r['nodes']} nodes): " + ", ".join(
            f"{k} {n}" for k, n in r["ops"].items()) + "")
        md.append("")
    if ort_rows is not None:
        md += [
            "## onnxruntime's transformers optimizer (for planning; not run in CI)",
            "",
            "`onnxruntime.transformers.optimizer.optimize_model(FILE, model_type=T, num_heads=4, "
            "hidden_size=64, opt_level=L)`, then `get_fused_operator_statistics()` (only non-zero "
            "entries shown). L = 0: the Python fusions alone. L = 1 is what `python -m "
            "onnxruntime.transformers.optimizer --input FILE --output OUT --model_type T "
            "--num_heads 4 --hidden_size 64` does by default (onnxruntime's basic graph "
            "optimizations, e.g. constant folding, run first). `max |diff|` compares onnxruntime "
            "on the optimized and on the original model (same inputs as above). For "
            f"onnxruntime {v['onnxruntime']}.",
            "",
            "| file | model_type | opt_level | nodes before | nodes after | fused operators | "
            "max \\|diff\\| |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in ort_rows:
            lvl = f"{r['opt_level']}" + (" (CLI default)" if r["cli_default"] else "")
            if "error" in r:
                md.append(f"| `{r['file']}` | {r['model_type']} | {lvl} | {r['nodes_before']} | "
                          f"— | **failed**: `{r['error']}` | — |")
            else:
                fused = ", ".join(f"{k} {n}" for k, n in r["fused"].items()) or "none"
                md.append(f"| `{r['file']}` | {r['model_type']} | {lvl} | {r['nodes_before']} | "
                          f"{r['nodes_after']} | {fused} | {r['max_abs_diff']:.2e} |")
        md.append("")
        gpt2 = [r for r in ort_rows if r["model_type"] == "gpt2" and "fused" in r]
        if gpt2 and not any(r["fused"].get("Attention") or r["fused"].get("MultiHeadAttention")
                            for r in gpt2):
            md += ["No GPT-2 attention is fused (and nothing crashes): only LayerNorm/"
                   "SkipLayerNorm and FastGelu fuse there. transformers 5.x builds the causal and "
                   "padding mask as Range/LessOrEqual/And/Where, not the pattern onnxruntime's "
                   "GPT-2 attention fusion looks for (not investigated further). BERT's attention, "
                   "embeddings, GELU and LayerNorms all fuse.", ""]
        md += ["Op histograms after the optimizer:", ""]
        for r in ort_rows:
            if "ops_after" in r:
                md.append(f"`{r['file']}` ({r['model_type']}, opt_level {r['opt_level']}): "
                          + ", ".join(f"{k} {n}" for k, n in r["ops_after"].items()))
                md.append("")
    (OUT / "README.md").write_text("\n".join(md).rstrip() + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ort-optimizer", action="store_true",
                    help="also run onnxruntime's transformers optimizer on each file and record "
                         "its statistics in README.md")
    ap.add_argument("--zoo", action="store_true",
                    help="export the model zoo of tests/models/zoo/ (scripts/export_zoo.py) "
                         "instead of the GPT-2/BERT files of tests/models/")
    ap.add_argument("--only", default="",
                    help="with --zoo: only these comma-separated names (the README keeps the "
                         "other rows)")
    args = ap.parse_args()
    if args.zoo:
        import export_zoo
        torch.set_grad_enabled(False)
        only = set(filter(None, args.only.split(","))) or None
        rows = export_zoo.export_all(only)
        if only:
            from zoo_derived import update_readme
            update_readme(rows)
        else:
            export_zoo.write_readme(rows, ".venv-export/bin/python scripts/export_models.py --zoo")
        print(f"wrote {export_zoo.ZOO.relative_to(REPO)}/README.md" + ("" if only else ", VERSIONS.txt"))
        return 0
    command = ".venv-export/bin/python scripts/export_models.py" + (
        " --ort-optimizer" if args.ort_optimizer else "")

    OUT.mkdir(parents=True, exist_ok=True)
    torch.set_grad_enabled(False)
    rows = []
    for stem, build, inputs, outputs, out_axes in SPECS:
        module = build()
        for suffix, opset in OPSETS.items():
            path = OUT / f"{stem}{suffix}.onnx"
            model = export(module, inputs, outputs, out_axes, opset, path)
            diff = compare(module, inputs, outputs, path)
            ins, outs = io_sig(model)
            ops = histogram(model)
            rows.append({"file": path.name, "model": "GPT-2" if stem.startswith("gpt2") else "BERT",
                         "opset": opset, "bytes": path.stat().st_size,
                         "nodes": len(model.graph.node), "inputs": ins, "outputs": outs,
                         "diff": diff, "ops": ops})
            print(f"{path.relative_to(REPO)}: opset {opset}, {path.stat().st_size:,} bytes, "
                  f"{len(model.graph.node)} nodes, max |ORT - torch| = {diff:.2e}")
            print("  " + ", ".join(f"{k} {n}" for k, n in ops.items()))

    ort_rows = None
    if args.ort_optimizer:
        ort_rows = []
        for r in rows:
            t = "gpt2" if r["file"].startswith("gpt2") else "bert"
            for level in (0, None):
                row = ort_optimizer(OUT / r["file"], t, level)
                ort_rows.append(row)
                print("ort optimizer:", json.dumps({k: v for k, v in row.items()
                                                    if k != "ops_after"}))

    write_versions(command)
    write_readme(rows, ort_rows, command)
    print(f"wrote {OUT.relative_to(REPO)}/VERSIONS.txt, README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
