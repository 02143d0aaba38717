//! What the WebGPU backend is held to when it runs whole models against the reference backend:
//! the models, their sizes and their bounds on max |gpu - reference|. One owner, used natively
//! (tests/webgpu.rs, on lavapipe) and in the browser (tests/wasm.rs, Chromium's WebGPU on
//! SwiftShader), so that both compute the same thing and are held to the same number.

use std::collections::{BTreeMap, HashMap};

use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::runtime::parity::{DEFAULT_TOLERANCE, HALF_TOLERANCE};
use fuselab::{DType, Tensor};

use super::seeded_f32;

/// A committed model the WebGPU backend runs whole, original and optimized.
pub struct ZooModel {
    /// Under tests/models/, without `.onnx`.
    pub file: &'static str,
    /// The file's bytes (for the browser, which has no file system).
    pub bytes: &'static [u8],
    /// `batch` and `seq` (the text models' symbolic dims; ViT and Whisper have only `batch`).
    pub batch: usize,
    pub seq: usize,
    /// Largest max |gpu - reference| over every output, original and optimized.
    pub bound: f64,
}

impl ZooModel {
    /// The file name without `.onnx`.
    pub fn name(&self) -> &'static str {
        self.file.rsplit('/').next().unwrap()
    }

    /// Relative to the repository root.
    pub fn path(&self) -> String {
        format!("tests/models/{}.onnx", self.file)
    }

    /// The dims the inputs are sized by.
    pub fn dims(&self) -> HashMap<String, usize> {
        HashMap::from([
            ("batch".to_string(), self.batch),
            ("seq".to_string(), self.seq),
        ])
    }
}

macro_rules! zoo_model {
    ($file:literal, $batch:expr, $seq:expr, $bound:expr) => {
        ZooModel {
            file: $file,
            bytes: include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/models/",
                $file,
                ".onnx"
            )),
            batch: $batch,
            seq: $seq,
            bound: $bound,
        }
    };
}

/// Every transformer of tests/models and tests/models/zoo. Text models at batch 2, seq 8 (the
/// Llama dynamo export at 1×13, a length that is no multiple of anything), and two at 1×70, past
/// the kernels' 64 threads per workgroup, where each thread of the attention and norm kernels
/// takes several keys or columns. (Sequences of 31 to 100 on SwiftShader in Chromium matched as
/// these do, within 1.2e-6, for every attention fusion; the sizes are small to keep the browser
/// run short.) Float32 models are held to the project's float32 parity tolerance, the float16
/// GPT-2 to its float16 one.
pub const ZOO: &[ZooModel] = &[
    // The legacy exports (opset 13): 1e-3, as they have been held to natively since they were
    // first run on WebGPU.
    zoo_model!("gpt2_tiny", 2, 8, 1e-3),
    zoo_model!("bert_tiny", 2, 8, 1e-3),
    zoo_model!("zoo/gpt2_tiny_dynamo", 2, 8, DEFAULT_TOLERANCE),
    // Computed in float32 on the GPU, rounded to float16 once at the end; the reference rounds
    // every op's result to float16.
    zoo_model!("zoo/gpt2_tiny_fp16", 2, 8, HALF_TOLERANCE),
    zoo_model!("zoo/llama_gqa_tiny", 2, 8, DEFAULT_TOLERANCE),
    zoo_model!("zoo/llama_gqa_tiny_dynamo", 1, 13, DEFAULT_TOLERANCE),
    // torch's opset-23 export: the standard RotaryEmbedding with [1, seq, r/2] caches.
    zoo_model!("zoo/llama_gqa_tiny_op23", 2, 8, DEFAULT_TOLERANCE),
    zoo_model!("zoo/llama_gqa_tiny_int4", 2, 8, DEFAULT_TOLERANCE),
    // MatMulNBits dequantizes exactly what DequantizeLinear does; held to 1e-5 natively since
    // it first ran whole.
    zoo_model!("zoo/llama_gqa_tiny_int4_qdq", 2, 7, 1e-5),
    zoo_model!("zoo/qwen2_tiny", 1, 70, DEFAULT_TOLERANCE),
    zoo_model!("zoo/phi_tiny", 2, 8, DEFAULT_TOLERANCE),
    // GPT-J: the interleaved rotary on the [batch, seq, heads·head] view, partial (8 of 16).
    zoo_model!("zoo/gptj_tiny", 2, 8, DEFAULT_TOLERANCE),
    // transformers' default attention: the original's IsNaN guard, the fused graph's
    // zero_masked_rows chain after MultiHeadAttention.
    zoo_model!("zoo/gpt2_tiny_sdpa", 2, 8, DEFAULT_TOLERANCE),
    zoo_model!("zoo/llama_gqa_tiny_sdpa", 2, 8, DEFAULT_TOLERANCE),
    zoo_model!("zoo/bert_tiny_int8", 2, 8, DEFAULT_TOLERANCE),
    zoo_model!("zoo/distilbert_tiny", 1, 70, DEFAULT_TOLERANCE),
    zoo_model!("zoo/vit_tiny", 2, 1, DEFAULT_TOLERANCE),
    zoo_model!("zoo/whisper_encoder_tiny", 1, 1, DEFAULT_TOLERANCE),
];

/// The entry of `ZOO` named `name`.
pub fn zoo(name: &str) -> &'static ZooModel {
    ZOO.iter()
        .find(|z| z.name() == name)
        .unwrap_or_else(|| panic!("{name} is not in gpu_parity::ZOO"))
}

/// torchvision's CNNs (tests/data/models/torchvision, filled by scripts/fetch_models.py) at
/// 224×224, batch 1: 1e-3, as tests/webgpu has held them since they first ran (MobileNetV3-small
/// and ResNet-18 both match within 2e-6 on lavapipe, MobileNetV3 within 4e-7 in Chromium).
pub const TORCHVISION_BOUND: f64 = 1e-3;

/// `resnet_block()`'s bound: the project's float32 parity tolerance.
pub const RESNET_BLOCK_BOUND: f64 = DEFAULT_TOLERANCE;

/// A small ResNet-like network, x float32 [batch, 3, 16, 16] → logits [batch, 10]: a stem
/// Conv(8, 3×3) + BatchNormalization + Relu, MaxPool(3×3, stride 2, pad 1), one basic block
/// (Conv + BN + Relu, Conv + BN, the residual Add, Relu), a strided 1×1 Conv + BN + HardSigmoid
/// (alpha 0.25), GlobalAveragePool, Flatten, Gemm. Optimized, the batch norms fold into the
/// Convs and each activation (and the residual Add) fuses into one of four FusedConvs. The
/// WebGPU backend has no BatchNormalization kernel: only the optimized graph runs there.
pub fn resnet_block() -> Model {
    let mut b = GraphBuilder::new("resnet_block", 17);
    let known = |d: i64| Dim::Known(d);
    let x = b.input(
        "x",
        DType::F32,
        vec![sym("batch"), known(3), known(16), known(16)],
    );
    let stem = conv_bn(&mut b, "stem", x, (3, 8), 3, 1);
    let stem = b.op("Relu", &[stem], vec![]);
    let pooled = b.op(
        "MaxPool",
        &[stem],
        vec![
            attr::ints("kernel_shape", &[3, 3]),
            attr::ints("strides", &[2, 2]),
            attr::ints("pads", &[1, 1, 1, 1]),
        ],
    );
    let h = conv_bn(&mut b, "block_a", pooled, (8, 8), 3, 1);
    let h = b.op("Relu", &[h], vec![]);
    let h = conv_bn(&mut b, "block_b", h, (8, 8), 3, 1);
    let sum = b.op("Add", &[h, pooled], vec![]);
    let block = b.op("Relu", &[sum], vec![]);
    let down = conv_bn(&mut b, "down", block, (8, 16), 1, 2);
    let down = b.op("HardSigmoid", &[down], vec![attr::float("alpha", 0.25)]);
    let gap = b.op("GlobalAveragePool", &[down], vec![]);
    let flat = b.op("Flatten", &[gap], vec![attr::int("axis", 1)]);
    let fc_w = b.initializer("fc_w", &seeded_f32(&[16, 10], 150));
    let fc_b = b.initializer("fc_b", &seeded_f32(&[10], 151));
    let logits = b.op("Gemm", &[flat, fc_w, fc_b], vec![]);
    b.output(logits, "logits");
    b.build()
}

/// Conv(cin → cout, k×k, stride, same padding) + BatchNormalization, named `name`: seeded
/// weights scaled by 1/sqrt(fan_in), batch-norm statistics that keep activations near unit
/// spread.
fn conv_bn(
    b: &mut GraphBuilder,
    name: &str,
    x: ValueId,
    (cin, cout): (usize, usize),
    k: usize,
    stride: i64,
) -> ValueId {
    // Seeds differ per layer: derived from the name's bytes.
    let seed = name
        .bytes()
        .fold(7u32, |h, c| h.wrapping_mul(31).wrapping_add(c as u32));
    let affine =
        |t: Tensor, mul: f32, add: f32| Tensor::F32(t.as_f32().unwrap().mapv(|v| v * mul + add));
    let fan_in = (cin * k * k) as f32;
    let w = affine(
        seeded_f32(&[cout, cin, k, k], seed),
        1.0 / fan_in.sqrt(),
        0.0,
    );
    let w = b.initializer(&format!("{name}_w"), &w);
    let bias = b.initializer(&format!("{name}_b"), &seeded_f32(&[cout], seed + 1));
    let pad = (k / 2) as i64;
    let c = b.op(
        "Conv",
        &[x, w, bias],
        vec![
            attr::ints("pads", &[pad; 4]),
            attr::ints("strides", &[stride, stride]),
        ],
    );
    let stats = [
        ("scale", 0.2, 1.0),
        ("bias", 0.1, 0.0),
        ("mean", 0.1, 0.0),
        ("var", 0.2, 0.8),
    ];
    let mut ins = vec![c];
    for (i, (what, mul, add)) in stats.into_iter().enumerate() {
        let t = affine(seeded_f32(&[cout], seed + 2 + i as u32), mul, add);
        ins.push(b.initializer(&format!("{name}_bn_{what}"), &t));
    }
    b.op(
        "BatchNormalization",
        &ins,
        vec![attr::float("epsilon", 1e-5)],
    )
}

/// `m`'s FusedConv nodes by activation, "+Z" where one adds a residual Z: {"Relu": 2, ...}.
pub fn fused_convs(m: &Model) -> BTreeMap<String, usize> {
    let g = &m.graph;
    let mut out = BTreeMap::new();
    for id in g.node_ids() {
        let n = g.node(id);
        if n.op_type == "FusedConv" {
            let act = n.attr_string("activation").unwrap_or_default();
            let z = if n.input(3).is_some() { "+Z" } else { "" };
            *out.entry(format!("{act}{z}")).or_insert(0) += 1;
        }
    }
    out
}

/// The largest |want - got| over every element of every output (infinite where either is NaN),
/// after checking that both runs give the same outputs, element types and shapes.
pub fn max_abs_diff(want: &[(String, Tensor)], got: &[(String, Tensor)]) -> f64 {
    assert_eq!(want.len(), got.len(), "number of outputs");
    let mut worst = 0.0f64;
    for ((wn, w), (gn, g)) in want.iter().zip(got) {
        assert_eq!(
            (wn, w.dtype(), w.shape()),
            (gn, g.dtype(), g.shape()),
            "output"
        );
        for (a, b) in w.to_f64_vec().iter().zip(g.to_f64_vec()) {
            let d = (a - b).abs();
            worst = if d.is_nan() {
                f64::INFINITY
            } else {
                worst.max(d)
            };
        }
    }
    worst
}
