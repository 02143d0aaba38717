"""The optimizers issue 15 measures fuselab against ("anchors"), each run one way for the tests
(tests/python/test_anchors.py) and the tables (scripts/anchor_tables.py):

  ort-o0      onnxruntime's transformers optimizer, opt_level 0: its Python fusions on the file.
  ort-o1      the same at opt_level 1: onnxruntime's basic graph optimizations (constant folding,
              redundant-node elimination; session level ORT_ENABLE_BASIC, ConstantSharing off) on
              the file first, then the Python fusions on that graph. `optimize_model(opt_level=1)`
              does exactly these two steps, but imports torch only to choose a GPU provider, and
              the test venv has no torch; `ort_transformers` runs the two steps itself.
  onnxscript  onnxscript's `optimize_for_ort` (pinned in scripts/requirements.txt).
  ort-session onnxruntime's own session optimizer at ORT_ENABLE_EXTENDED on the CPU provider
              (where its FusedConv appears): the CNN anchor.

Every function returns the optimized onnx.ModelProto and leaves no file behind.
"""
from __future__ import annotations

import collections
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnxruntime as ort

REPO = Path(__file__).resolve().parents[2]
ZOO = REPO / "tests" / "models" / "zoo"
TORCHVISION = REPO / "tests" / "data" / "models" / "torchvision"
LIGHT = REPO / "tests" / "data" / "models" / "onnx_light"


def _session_optimized(src: Path, level: ort.GraphOptimizationLevel, disabled: list[str]) -> onnx.ModelProto:
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        so.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)
        return onnx.load(so.optimized_model_filepath)


# Every transformer issue 15 names is exported with 4 heads and hidden size 64
# (scripts/export_zoo.py, scripts/export_models.py); onnxruntime's optimizer is given both, as its
# documentation asks, since its own detection misses them on some exports (BERT's Attention).
NUM_HEADS, HIDDEN_SIZE = 4, 64


def ort_transformers(src: Path, model_type: str, opt_level: int) -> onnx.ModelProto:
    from onnxruntime.transformers.optimizer import optimize_model

    if opt_level not in (0, 1):
        raise ValueError(f"opt_level {opt_level}: the anchors are 0 and 1")
    model: onnx.ModelProto | str = str(src)
    if opt_level == 1:
        model = _session_optimized(src, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, ["ConstantSharing"])
    return optimize_model(model, model_type=model_type, opt_level=0, num_heads=NUM_HEADS,
                          hidden_size=HIDDEN_SIZE).model


def onnxscript_for_ort(src: Path) -> onnx.ModelProto:
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model, _ = optimize_for_ort(ir.load(src))
    return ir.serde.serialize_model(model)


def ort_session(src: Path) -> onnx.ModelProto:
    return _session_optimized(src, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, [])


@dataclass(frozen=True)
class Subject:
    """A model issue 15 names, and how its anchors read it."""

    name: str
    path: Path
    # onnxruntime transformers optimizer's model_type; None for the CNNs (their anchor is the
    # session optimizer). GPT-2 dynamo is "bert": as "gpt2" onnxruntime's optimizer crashes on it
    # (its lm_head Gemm has no bias); "bert" runs its norm and Gelu fusions.
    model_type: str | None
    # fuselab optimize's extra arguments (the CNNs' batch dim)
    args: tuple[str, ...] = ()
    # the batch every timed run takes (torch's opset-23 Llama and Phi run in onnxruntime at
    # batch 1 only: its standard RotaryEmbedding wants caches of x's batch)
    batch: int = 2

    @property
    def anchors(self) -> list[str]:
        return ["ort-session"] if self.model_type is None else ["ort-o0", "ort-o1", "onnxscript"]

    def run_anchor(self, anchor: str) -> onnx.ModelProto:
        if anchor == "ort-o0":
            return ort_transformers(self.path, self.model_type, 0)
        if anchor == "ort-o1":
            return ort_transformers(self.path, self.model_type, 1)
        if anchor == "onnxscript":
            return onnxscript_for_ort(self.path)
        if anchor == "ort-session":
            return ort_session(self.path)
        raise ValueError(f"unknown anchor {anchor!r}")


def _zoo(name: str, model_type: str, base: Path = ZOO) -> Subject:
    return Subject(name, base / f"{name}.onnx", model_type)


SUBJECTS = [
    _zoo("gpt2_tiny", "gpt2", REPO / "tests" / "models"),
    _zoo("gpt2_tiny_dynamo", "bert"),
    _zoo("gpt2_tiny_fp16", "gpt2"),
    _zoo("gpt2_tiny_sdpa", "gpt2"),
    _zoo("llama_gqa_tiny_sdpa", "gpt2"),
    _zoo("llama_gqa_tiny", "gpt2"),
    _zoo("llama_gqa_tiny_dynamo", "gpt2"),
    Subject("llama_gqa_tiny_op23", ZOO / "llama_gqa_tiny_op23.onnx", "gpt2", batch=1),
    Subject("phi_tiny_op23", ZOO / "phi_tiny_op23.onnx", "gpt2", batch=1),
    _zoo("gpt2_tiny_op23", "bert"),
    _zoo("llama_gqa_tiny_int4", "gpt2"),
    _zoo("llama_gqa_tiny_int4_qdq", "gpt2"),
    _zoo("qwen2_tiny", "gpt2"),
    _zoo("phi_tiny", "gpt2"),
    _zoo("qwen3_tiny", "gpt2"),
    _zoo("gemma3_tiny", "gpt2"),
    _zoo("phi3_tiny", "gpt2"),
    _zoo("gptj_tiny", "gpt2"),
    _zoo("gptj_tiny_dynamo", "gpt2"),
    _zoo("codegen_tiny", "gpt2"),
    _zoo("llama_gqa_tiny_fp16", "gpt2"),
    _zoo("qwen3_tiny_fp16", "gpt2"),
    _zoo("llama_gqa_tiny_dynamo_fp16", "gpt2"),
    _zoo("llama_gqa_tiny_fp16_int4", "gpt2"),
    _zoo("bloom_tiny", "gpt2"),
    _zoo("gpt_neox_tiny_dynamo", "gpt2"),
    _zoo("bert_tiny", "bert", REPO / "tests" / "models"),
    _zoo("bert_tiny_int8", "bert"),
    _zoo("distilbert_tiny", "bert"),
    _zoo("vit_tiny", "vit"),
    _zoo("whisper_encoder_tiny", "bert"),
    _zoo("vit_tiny_op23", "vit"),
    _zoo("whisper_encoder_tiny_op23", "bert"),
    _zoo("t5_encoder_tiny", "t5"),
    Subject("mobilenet_v3_small", TORCHVISION / "mobilenet_v3_small.onnx", None, ("--dim", "batch=1")),
    Subject("resnet18", TORCHVISION / "resnet18.onnx", None, ("--dim", "batch=1")),
    # The same two through torch's dynamo exporter (opset 20).
    *(Subject(m, TORCHVISION / f"{m}.onnx", None, ("--dim", "batch=1"))
      for m in ["mobilenet_v3_small_dynamo", "resnet18_dynamo"]),
    # IR 3 files (every weight also listed as a graph input, which onnxruntime reads as
    # constant): Conv → BatchNormalization → Relu, and Caffe2's Mul/Add after each norm.
    *(Subject(m, LIGHT / f"{m}.onnx", None) for m in ["resnet50", "densenet121", "inception_v2", "shufflenet"]),
]

# Fused ops compared one by one, and families compared as sums: fuselab's position-embedding
# Add + norm is a Skip form (or, with the token gathers, an EmbedLayerNormalization) where an anchor
# may keep a plain norm, and where a quantized projection
# (DynamicQuantizeMatMul) takes the bias in, the Gelu after it has no bias left to be a BiasGelu.
FAMILIES = {
    "norms": ("SkipLayerNormalization", "LayerNormalization", "EmbedLayerNormalization"),
    "simplified norms": ("SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization"),
    "gelus": ("Gelu", "BiasGelu"),
}
FUSED = ["FastGelu", "QuickGelu", "Attention", "MultiHeadAttention", "GroupQueryAttention", "RotaryEmbedding",
         "MatMulNBits", "DynamicQuantizeMatMul", "FusedConv", "FusedGemm", "BiasAdd",
         "BiasSplitGelu"]
FUSED_OPS = [op for ops in FAMILIES.values() for op in ops] + FUSED


def histogram(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node)


def shortfalls(ours: collections.Counter, theirs: collections.Counter) -> list[str]:
    """Where `ours` fuses less than `theirs`: each fused op, the families as sums. Empty when
    fuselab fuses at least as much."""
    out = []
    for family, ops in FAMILIES.items():
        a, b = sum(ours[o] for o in ops), sum(theirs[o] for o in ops)
        if a < b:
            out.append(f"{family} {a} < {b}")
    for op in FUSED:
        if ours[op] < theirs[op]:
            out.append(f"{op} {ours[op]} < {theirs[op]}")
    return out


def timed(f, *args) -> tuple[onnx.ModelProto, float]:
    t = time.perf_counter()
    m = f(*args)
    return m, (time.perf_counter() - t) * 1e3
