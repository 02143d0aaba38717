"""The real-model table: which models, on which inputs, within which tolerance.

Shared by tests/python/test_models.py (the pytest table) and scripts/models_report.py (which
writes docs/models.md), so both run every model on the same inputs. No pytest in here.

Models: every .onnx under tests/data/models/ (scripts/fetch_models.py: the onnx wheel's light
CNNs with seeded weights, and the rapidocr, rapidocr-onnxruntime and silero-vad wheels' models)
and under tests/models/zoo/ (scripts/export_models.py: our own small exports, committed). Each
must have an entry in SPECS, so a new file cannot slip in with guessed inputs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

REPO = Path(__file__).resolve().parents[2]
FETCHED = REPO / "tests" / "data" / "models"
ZOO = REPO / "tests" / "models" / "zoo"
SEED = 4321
DEFAULT_DIM = 8  # a symbolic dim no spec sets; the CLI's default too
DEFAULT_ATOL = DEFAULT_RTOL = 1e-4  # |fuselab - onnxruntime| <= atol + rtol * |onnxruntime|

Generator = Callable[[list[int], np.random.Generator], np.ndarray]


def real_model_files() -> list[Path]:
    """Every .onnx under tests/data/models/ (any depth, hidden folders skipped) and
    tests/models/zoo/; a missing folder contributes nothing."""
    found = [
        p for p in FETCHED.rglob("*.onnx")
        if not any(part.startswith(".") for part in p.relative_to(FETCHED).parts)
    ] if FETCHED.is_dir() else []
    if ZOO.is_dir():
        found += ZOO.glob("*.onnx")
    return sorted(found)


def model_id(p: Path) -> str:
    return str(p.relative_to(REPO))


# ---------------------------------------------------------------------------------------------
# inputs


def image(shape: list[int], rng: np.random.Generator) -> np.ndarray:
    """A normalized image batch: PaddleOCR feeds (pixel / 255 - 0.5) / 0.5, so values in [-1, 1]."""
    return rng.uniform(-1.0, 1.0, shape).astype(np.float32)


def audio_16k(shape: list[int], rng: np.random.Generator) -> np.ndarray:
    """Speech-like 16 kHz samples in [-1, 1]: a 220 Hz tone with harmonics, amplitude-modulated
    at 4 Hz, plus noise; each row starts at a different time."""
    n = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    t = (np.arange(n)[None, :] + 16000 * np.arange(rows)[:, None] / 7) / 16000.0
    voice = sum(np.sin(2 * np.pi * 220 * k * t) / k for k in (1, 2, 3))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t)
    x = 0.3 * envelope * voice + 0.02 * rng.standard_normal((rows, n))
    return np.clip(x, -1, 1).reshape(shape).astype(np.float32)


def log_mel(shape: list[int], rng: np.random.Generator) -> np.ndarray:
    """Whisper's input features: clamped log10 mel energies scaled into about [-1, 1]."""
    return rng.uniform(-1.0, 1.0, shape).astype(np.float32)


def lstm_state(shape: list[int], rng: np.random.Generator) -> np.ndarray:
    """A recurrent state as a previous chunk leaves it: small values (h and c of an LSTM)."""
    return (0.1 * rng.standard_normal(shape)).astype(np.float32)


def constant(value, dtype) -> Generator:
    return lambda shape, rng: np.full(shape, value, dtype=dtype)


def standard_normal(shape: list[int], rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@dataclass(frozen=True)
class Spec:
    """How to feed one model and how close fuselab must come to onnxruntime on it.

    dims: values of symbolic dims, by name; used for the inputs here and passed to the CLI as
      `--dim` (so `optimize`'s own parity inputs get the same sizes).
    shapes: full shapes for inputs whose declared shape the dims cannot complete (a -1 or an
      unnamed dim).
    generators: per input name, how its values are made; an input not named gets the default by
      element type (see make_feeds).
    vocab: exclusive bound for integer id inputs when no embedding Gather on an initializer
      shows it.
    atol, rtol, why: the tolerance; anything looser than the default must say why.
    ort_level: the graph optimization level of onnxruntime's reference run: "all" (its default),
      or "basic" where its own level-2 fusions change the model's math (say why)."""

    dims: dict[str, int] = field(default_factory=dict)
    shapes: dict[str, list[int]] = field(default_factory=dict)
    generators: dict[str, Generator] = field(default_factory=dict)
    vocab: int | None = None
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    why: str = ""
    ort_level: str = "all"


def index_bound(model: onnx.ModelProto, name: str) -> int | None:
    """If `name` is the indices of a Gather (axis 0) on an initializer (an embedding lookup),
    directly or through a Cast, the size of that table's first axis."""
    inits = {t.name: t for t in model.graph.initializer}
    names = {name}
    for n in model.graph.node:
        if n.op_type == "Cast" and n.input[0] in names:
            names.add(n.output[0])
    for n in model.graph.node:
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] in names:
            t = inits.get(n.input[0])
            axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
            if t is not None and axis == 0 and t.dims:
                return int(t.dims[0])
    return None


def input_shape(vi: onnx.ValueInfoProto, spec: Spec) -> list[int]:
    if vi.name in spec.shapes:
        return list(spec.shapes[vi.name])
    out = []
    for d in vi.type.tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            out.append(d.dim_value)
        elif d.HasField("dim_param") and d.dim_param in spec.dims:
            out.append(spec.dims[d.dim_param])
        elif d.HasField("dim_param") and d.dim_param:
            out.append(DEFAULT_DIM)
        else:
            raise ValueError(
                f"input {vi.name!r} has a -1 or unnamed dim: give its shape in the spec")
    return out


def make_feeds(model: onnx.ModelProto, spec: Spec, seed: int = SEED) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input without an initializer. Defaults by element type:
    floats N(0, 1); bool fair coins; integers named like *mask* ones with the last two positions
    of the last row zero (right padding); *position_ids* 0, 1, 2, ... along the last axis;
    other integers in [0, bound) where bound is the embedding table's size (index_bound), or
    spec.vocab, or 4."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if not vi.type.HasField("tensor_type"):
            raise ValueError(f"input {vi.name!r} is not a tensor")
        shape = input_shape(vi, spec)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        lname = vi.name.lower()
        if vi.name in spec.generators:
            arr = spec.generators[vi.name](shape, rng)
        elif np.issubdtype(dtype, np.floating):
            arr = rng.standard_normal(shape)
        elif dtype == np.bool_:
            arr = rng.random(shape) < 0.5
        elif "mask" in lname:
            arr = np.ones(shape)
            if arr.ndim >= 1 and arr.shape[-1] >= 3 and arr.size:
                arr.reshape(-1, arr.shape[-1])[-1, -2:] = 0
        elif "position_ids" in lname:
            arr = np.broadcast_to(np.arange(shape[-1]), shape) if shape else np.zeros(shape)
        elif np.issubdtype(dtype, np.integer):
            high = index_bound(model, vi.name) or spec.vocab or 4
            arr = rng.integers(0, high, size=shape)
        else:
            raise ValueError(f"input {vi.name!r}: no generator for element type {dtype}")
        feeds[vi.name] = np.asarray(arr).astype(dtype, order="C")  # a copy: C order, rank kept
    return feeds


# ---------------------------------------------------------------------------------------------
# the table

LIGHT = "tests/data/models/onnx_light"
OCR = "tests/data/models/rapidocr"
OCR_ORT = "tests/data/models/rapidocr-onnxruntime"
VAD = "tests/data/models/silero-vad"
TORCHVISION = "tests/data/models/torchvision"
ZOO_ID = "tests/models/zoo"
TEXT_DIMS = {"batch": 2, "seq": 16}

# Silero VAD at 16 kHz reads 512 new samples plus the 64 it kept from the previous chunk.
VAD_CHUNK = 576
VAD_GENERATORS = {
    "input": audio_16k,
    "state": lstm_state,
    "h": lstm_state,
    "c": lstm_state,
    "sr": constant(16000, np.int64),
}

SPECS: dict[str, Spec] = {
    # The nine light CNNs: a fixed [1, 3, 224, 224] input, N(0, 1) like the image their
    # batch norms were calibrated on (scripts/fetch_models.py).
    **{
        f"{LIGHT}/{m}.onnx": Spec()
        for m in ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
                  "shufflenet", "squeezenet", "vgg19", "zfnet512"]
    },
    # PaddleOCR via RapidOCR: text detection on a 224 x 320 page crop (sides multiples of 32, as
    # its preprocessing makes them), recognition on one 48 x 320 text line, direction
    # classification on one 48 x 192 line.
    f"{OCR}/PP-OCRv6_det_small.onnx": Spec(
        dims={"DynamicDimension.0": 1, "DynamicDimension.1": 224, "DynamicDimension.2": 320},
        generators={"x": image},
    ),
    f"{OCR}/PP-OCRv6_rec_small.onnx": Spec(
        dims={"DynamicDimension.0": 1, "DynamicDimension.1": 320}, generators={"x": image},
    ),
    f"{OCR}/ch_ppocr_mobile_v2.0_cls_mobile.onnx": Spec(
        dims={"?": 48}, shapes={"x": [1, 3, 48, 192]}, generators={"x": image},
    ),
    f"{OCR_ORT}/ch_PP-OCRv4_det_infer.onnx": Spec(
        dims={"p2o.DynamicDimension.0": 1, "p2o.DynamicDimension.1": 224,
              "p2o.DynamicDimension.2": 320},
        generators={"x": image},
    ),
    f"{OCR_ORT}/ch_PP-OCRv4_rec_infer.onnx": Spec(
        dims={"p2o.DynamicDimension.0": 1, "?": 48, "p2o.DynamicDimension.1": 320},
        generators={"x": image},
    ),
    f"{OCR_ORT}/ch_ppocr_mobile_v2.0_cls_infer.onnx": Spec(
        dims={"?": 48}, shapes={"x": [1, 3, 48, 192]}, generators={"x": image},
    ),
    # Silero VAD: one 16 kHz chunk (batch 1) with the state a previous chunk left, sr = 16000;
    # the sequence model takes 4 chunks at once.
    f"{VAD}/silero_vad.onnx": Spec(
        shapes={"input": [1, VAD_CHUNK], "state": [2, 1, 128]}, generators=VAD_GENERATORS,
    ),
    f"{VAD}/silero_vad_16k_op15.onnx": Spec(
        dims={"batch": 1, "sequence": VAD_CHUNK}, generators=VAD_GENERATORS,
    ),
    f"{VAD}/silero_vad_16k_sequence.onnx": Spec(
        dims={"sequence_length": 4}, generators=VAD_GENERATORS,
    ),
    f"{VAD}/silero_vad_half.onnx": Spec(
        dims={"batch": 1, "sequence": VAD_CHUNK}, generators=VAD_GENERATORS,
    ),
    f"{VAD}/silero_vad_op18_ifless.onnx": Spec(
        dims={"batch": 1, "sequence": VAD_CHUNK}, generators=VAD_GENERATORS,
    ),
    f"{VAD}/silero_vad_openvino_16k.onnx": Spec(generators=VAD_GENERATORS),
    # torchvision (weights filled by scripts/fetch_models.py, calibrated on an N(0, 1) image like
    # the light CNNs): one 224 x 224 image.
    f"{TORCHVISION}/mobilenet_v3_small.onnx": Spec(dims={"batch": 1}),
    f"{TORCHVISION}/resnet18.onnx": Spec(dims={"batch": 1}),
    f"{TORCHVISION}/mobilenet_v3_small_dynamo.onnx": Spec(dims={"batch": 1}),
    f"{TORCHVISION}/resnet18_dynamo.onnx": Spec(dims={"batch": 1}),
    # Our exports (scripts/export_models.py --zoo): text models at batch 2, seq 16, the last row
    # padded by two positions; token ids below the vocabulary of 1000 (the int8 BERT's embedding
    # is dequantized before its Gather, so the table bound is not visible there).
    **{
        f"{ZOO_ID}/{m}.onnx": Spec(dims=TEXT_DIMS, vocab=1000)
        for m in ["llama_gqa_tiny", "qwen2_tiny", "phi_tiny", "distilbert_tiny",
                  "gpt2_tiny_dynamo", "llama_gqa_tiny_dynamo", "llama_gqa_tiny_int4",
                  "gpt2_tiny_sdpa", "llama_gqa_tiny_sdpa", "qwen3_tiny", "gemma3_tiny",
                  "phi3_tiny", "t5_encoder_tiny", "gptj_tiny", "gptj_tiny_dynamo",
                  "codegen_tiny", "gpt2_tiny_op23", "bloom_tiny", "gpt_neox_tiny_dynamo"]
    },
    # The whole T5: five decoder tokens after the 16 input ones.
    f"{ZOO_ID}/t5_tiny.onnx": Spec(dims={**TEXT_DIMS, "dseq": 5}, vocab=1000),
    # torch's opset-23 exports write the rotary as the standard RotaryEmbedding with [1, seq, r/2]
    # caches, which onnxruntime runs at batch 1 only (fuselab's saved model runs at any batch).
    **{
        f"{ZOO_ID}/{m}.onnx": Spec(dims={**TEXT_DIMS, "batch": 1}, vocab=1000)
        for m in ["llama_gqa_tiny_op23", "phi_tiny_op23"]
    },
    # Decode steps: 3 new tokens after 5 cached (the cache N(0, 1)), the mask over all 8.
    **{
        f"{ZOO_ID}/{m}.onnx": Spec(dims={"batch": 2, "seq": 3, "past": 5, "total": 8}, vocab=1000)
        for m in ["gpt2_tiny_decode", "llama_gqa_tiny_decode", "llama_gqa_tiny_decode_dynamo"]
    },
    # Exported with one new token (the query heads grouped for it): it runs at seq 1 only.
    f"{ZOO_ID}/llama_gqa_tiny_decode1.onnx": Spec(
        dims={"batch": 2, "seq": 1, "past": 5, "total": 6}, vocab=1000,
    ),
    f"{ZOO_ID}/llama_gqa_tiny_decode1_dynamo.onnx": Spec(
        dims={"batch": 2, "past": 5, "total": 6}, vocab=1000,
    ),
    f"{ZOO_ID}/llama_gqa_tiny_int4_qdq.onnx": Spec(
        dims=TEXT_DIMS, vocab=1000, ort_level="basic",
        why="at ORT_ENABLE_ALL onnxruntime fuses each DequantizeLinear -> MatMul into its own "
            "MatMulNBits with accuracy_level 4 (activations quantized to int8), which moves the "
            "logits by 5.7e-3 from the QDQ graph's float32 math; basic keeps that math",
    ),
    **{
        f"{ZOO_ID}/{m}.onnx": Spec(dims={"batch": 2}, generators={"pixel_values": image})
        for m in ["vit_tiny", "vit_tiny_op23"]
    },
    **{
        f"{ZOO_ID}/{m}.onnx": Spec(dims={"batch": 2}, generators={"input_features": log_mel})
        for m in ["whisper_encoder_tiny", "whisper_encoder_tiny_op23"]
    },
    f"{ZOO_ID}/bert_tiny_int8.onnx": Spec(
        dims=TEXT_DIMS, vocab=1000, atol=1e-3,
        why="int8: where x / scale lands within float error of .5, DynamicQuantizeLinear may round "
            "either way, and each such flip moves an output by one activation step times a "
            "weight; perturbing the float weights by 1e-6 relative moved last_hidden_state by "
            "2.9e-5 in onnxruntime, so 1e-3 leaves room for a few flips",
    ),
    f"{ZOO_ID}/gpt2_tiny_fp16.onnx": Spec(
        dims=TEXT_DIMS, vocab=1000, atol=2e-3, rtol=1e-3,
        why="fp16 inside (float32 logits of |x| <= ~1 out): computing any op in a different order "
            "or width moves values by ~1 fp16 ulp (~1e-3 relative); perturbing the fp16 weights "
            "by 1e-3 relative moved the logits by 1.7e-3 in onnxruntime (fp16 vs the float32 "
            "model: 4e-4)",
    ),
    **{
        f"{ZOO_ID}/{m}.onnx": Spec(
            dims=TEXT_DIMS, vocab=1000, atol=2e-3, rtol=1e-3,
            why="fp16 inside, as gpt2_tiny_fp16: computing any op in a different order or width "
                "moves values by ~1 fp16 ulp (~1e-3 relative)",
        )
        for m in ["llama_gqa_tiny_fp16", "qwen3_tiny_fp16", "llama_gqa_tiny_dynamo_fp16",
                  "llama_gqa_tiny_fp16_int4"]
    },
    # float16 decode steps (keep_io_types: the cache crosses the boundary as float32).
    **{
        f"{ZOO_ID}/{m}.onnx": Spec(
            dims={"batch": 2, "seq": 3, "past": 5, "total": 8}, vocab=1000, atol=2e-3, rtol=1e-3,
            why="fp16 inside, as gpt2_tiny_fp16: computing any op in a different order or width "
                "moves values by ~1 fp16 ulp (~1e-3 relative)",
        )
        for m in ["gpt2_tiny_decode_fp16", "llama_gqa_tiny_decode_fp16"]
    },
}


# ---------------------------------------------------------------------------------------------
# what the CLI says it cannot run

# `fuselab run`/`optimize` on a model with ops its reference backend lacks exit 2 with
# `unsupported op X (domain 'd') at node ...[; note][; also missing: Y (d), Z (d)]`: the first
# such node, and every other missing op type of the main graph. A node with subgraphs it cannot
# execute reads `unsupported op If with subgraphs (domain ...)`.
FIRST_GAP_RE = re.compile(r"unsupported op (.+?) \(domain '([^']*)'\)")
ALSO_MISSING_RE = re.compile(r"also missing: (.*)$", re.MULTILINE)
GAP_ITEM_RE = re.compile(r"(\S+) \(([^)]*)\)")


def gap_name(op: str, domain: str) -> str:
    """How ALLOWED_GAPS names an op: `Op` in ai.onnx, `domain.Op` elsewhere."""
    return op if domain in ("", "ai.onnx") else f"{domain}.{op}"


def reported_gaps(returncode: int, stderr: str) -> set[str] | None:
    """The op types a failed CLI call says the reference backend lacks; None when it failed
    (or succeeded) for another reason."""
    m = FIRST_GAP_RE.search(stderr)
    if returncode != 2 or not m:
        return None
    gaps = {gap_name(m.group(1), m.group(2))}
    if also := ALSO_MISSING_RE.search(stderr):
        gaps |= {gap_name(op, d) for op, d in GAP_ITEM_RE.findall(also.group(1))}
    return gaps
