//! The one list of ops. An entry covers its op from opset version `since` up to the next entry
//! for the same op (or the newest version). Adding an op: its file, plus one line here.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::{
    activation, arg, attention, cast, compare, concat, control_flow, conv, deform, detect, einsum,
    elementwise, embed, eyelike, fused_elementwise, fused_matmul, gather_scatter, gelu, glu,
    index_ops, lanes, layout, linalg, loss, math, matmul, ms_attention, norm, pad, pool, quant,
    quant_conv, quant_ms, rearrange, recurrent, reduce, reduce_more, resize, rms, rotary, sample,
    sdpa, select, shape_ops, signal, slice, state_ops, strings, tensor_scatter, transformer, Attrs,
    Op,
};
use crate::ir::model::{canonical_domain, FUSELAB_DOMAIN, MS_DOMAIN};

/// Parses a node's attribute records into its op (errors name the attribute at fault).
pub type Parse = fn(&Attrs) -> Result<Box<dyn Op>, String>;

pub struct OpDef {
    /// "" is the default ai.onnx domain.
    pub domain: &'static str,
    pub op_type: &'static str,
    /// First opset version of the domain this entry covers.
    pub since: i64,
    pub parse: Parse,
    /// The file under src/ops/ that owns the op.
    pub family: &'static str,
}

/// One entry: `op!(domain, "OpType", since, family::Type)`.
macro_rules! op {
    ($domain:expr, $op:literal, $since:literal, $family:ident :: $ty:ident) => {
        OpDef {
            domain: $domain,
            op_type: $op,
            since: $since,
            parse: $family::$ty::parse,
            family: stringify!($family),
        }
    };
}

const ONNX: &str = "";
const FL: &str = FUSELAB_DOMAIN;
const MS: &str = MS_DOMAIN;

#[rustfmt::skip]
static OPS: &[OpDef] = &[
    // ai.onnx: control flow, bodies run by the executor (control_flow.rs)
    op!(ONNX, "If", 1, control_flow::If),
    op!(ONNX, "Loop", 1, control_flow::Loop),
    op!(ONNX, "Scan", 8, control_flow::Scan),
    // ai.onnx: scaled dot-product attention (sdpa.rs)
    op!(ONNX, "Attention", 23, sdpa::Attention),
    // ai.onnx: elementwise math (elementwise.rs)
    op!(ONNX, "Abs", 1, elementwise::Abs),
    op!(ONNX, "Add", 1, elementwise::Add),
    op!(ONNX, "Div", 1, elementwise::Div),
    op!(ONNX, "Erf", 9, elementwise::Erf),
    op!(ONNX, "Exp", 1, elementwise::Exp),
    op!(ONNX, "Log", 1, elementwise::Log),
    op!(ONNX, "Mul", 1, elementwise::Mul),
    op!(ONNX, "Neg", 1, elementwise::Neg),
    op!(ONNX, "Pow", 1, elementwise::Pow),
    op!(ONNX, "Relu", 1, elementwise::Relu),
    op!(ONNX, "Sigmoid", 1, elementwise::Sigmoid),
    op!(ONNX, "Sqrt", 1, elementwise::Sqrt),
    op!(ONNX, "Sub", 1, elementwise::Sub),
    op!(ONNX, "Tanh", 1, elementwise::Tanh),
    op!(ONNX, "Cos", 7, elementwise::Cos),
    op!(ONNX, "Sin", 7, elementwise::Sin),
    op!(ONNX, "Reciprocal", 1, elementwise::Reciprocal),
    op!(ONNX, "Floor", 1, elementwise::Floor),
    op!(ONNX, "Ceil", 1, elementwise::Ceil),
    op!(ONNX, "Round", 11, elementwise::Round),
    op!(ONNX, "Sign", 9, elementwise::Sign),
    op!(ONNX, "IsNaN", 9, elementwise::IsNaN),
    op!(ONNX, "IsInf", 10, elementwise::IsInf),
    // ai.onnx: more math (math.rs)
    op!(ONNX, "Tan", 7, math::Tan),
    op!(ONNX, "Asin", 7, math::Asin),
    op!(ONNX, "Acos", 7, math::Acos),
    op!(ONNX, "Atan", 7, math::Atan),
    op!(ONNX, "Sinh", 9, math::Sinh),
    op!(ONNX, "Cosh", 9, math::Cosh),
    op!(ONNX, "Asinh", 9, math::Asinh),
    op!(ONNX, "Acosh", 9, math::Acosh),
    op!(ONNX, "Atanh", 9, math::Atanh),
    op!(ONNX, "Mod", 10, math::Mod),
    op!(ONNX, "Mod", 28, math::Mod),
    op!(ONNX, "BitShift", 11, math::BitShift),
    op!(ONNX, "BitShift", 28, math::BitShift),
    op!(ONNX, "BitwiseAnd", 18, math::BitwiseAnd),
    op!(ONNX, "BitwiseOr", 18, math::BitwiseOr),
    op!(ONNX, "BitwiseXor", 18, math::BitwiseXor),
    op!(ONNX, "BitwiseNot", 18, math::BitwiseNot),
    op!(ONNX, "Max", 6, math::Max),
    op!(ONNX, "Max", 8, math::Max),
    op!(ONNX, "Min", 6, math::Min),
    op!(ONNX, "Min", 8, math::Min),
    op!(ONNX, "Sum", 6, math::Sum),
    op!(ONNX, "Sum", 8, math::Sum),
    op!(ONNX, "Mean", 6, math::Mean),
    op!(ONNX, "Mean", 8, math::Mean),
    // ai.onnx: activations (activation.rs)
    op!(ONNX, "Clip", 6, activation::Clip),
    op!(ONNX, "Clip", 11, activation::Clip),
    op!(ONNX, "LeakyRelu", 6, activation::LeakyRelu),
    op!(ONNX, "PRelu", 7, activation::PRelu),
    op!(ONNX, "Elu", 6, activation::Elu),
    op!(ONNX, "Selu", 6, activation::Selu),
    op!(ONNX, "Celu", 12, activation::Celu),
    op!(ONNX, "HardSigmoid", 6, activation::HardSigmoid),
    op!(ONNX, "HardSwish", 14, activation::HardSwish),
    op!(ONNX, "Softplus", 1, activation::Softplus),
    op!(ONNX, "Softsign", 1, activation::Softsign),
    op!(ONNX, "Mish", 18, activation::Mish),
    op!(ONNX, "ThresholdedRelu", 10, activation::ThresholdedRelu),
    op!(ONNX, "Shrink", 9, activation::Shrink),
    op!(ONNX, "Gelu", 20, activation::Gelu),
    op!(ONNX, "Swish", 24, activation::Swish),
    // ai.onnx: comparisons, logic, Where (compare.rs)
    op!(ONNX, "And", 1, compare::And),
    op!(ONNX, "Equal", 1, compare::Equal),
    op!(ONNX, "Greater", 1, compare::Greater),
    op!(ONNX, "GreaterOrEqual", 12, compare::GreaterOrEqual),
    op!(ONNX, "Less", 1, compare::Less),
    op!(ONNX, "LessOrEqual", 12, compare::LessOrEqual),
    op!(ONNX, "Not", 1, compare::Not),
    op!(ONNX, "Or", 1, compare::Or),
    op!(ONNX, "Where", 9, compare::Where),
    op!(ONNX, "Xor", 1, compare::Xor),
    // ai.onnx: data movement (shape_ops.rs; Cast and Constant: cast.rs)
    op!(ONNX, "Cast", 6, cast::Cast),
    op!(ONNX, "CastLike", 15, cast::CastLike),
    op!(ONNX, "BitCast", 26, cast::BitCast),
    op!(ONNX, "Concat", 1, concat::Concat),
    op!(ONNX, "Constant", 1, cast::Constant),
    op!(ONNX, "Identity", 1, shape_ops::Identity),
    op!(ONNX, "Reshape", 5, shape_ops::Reshape),
    op!(ONNX, "Shape", 1, shape_ops::Shape),
    op!(ONNX, "Squeeze", 1, shape_ops::Squeeze),
    op!(ONNX, "StringConcat", 20, strings::StringConcat),
    op!(ONNX, "StringNormalizer", 10, strings::StringNormalizer),
    op!(ONNX, "StringSplit", 20, strings::StringSplit),
    op!(ONNX, "Transpose", 1, shape_ops::Transpose),
    op!(ONNX, "Unsqueeze", 1, shape_ops::Unsqueeze),
    // ai.onnx: indexing and generators (index_ops.rs)
    op!(ONNX, "ConstantOfShape", 9, index_ops::ConstantOfShape),
    op!(ONNX, "Expand", 8, index_ops::Expand),
    op!(ONNX, "Flatten", 1, index_ops::Flatten),
    op!(ONNX, "Gather", 1, index_ops::Gather),
    op!(ONNX, "Range", 11, index_ops::Range),
    op!(ONNX, "Slice", 1, slice::Slice),
    op!(ONNX, "Split", 1, slice::Split),
    op!(ONNX, "Trilu", 14, index_ops::Trilu),
    // ai.onnx: Pad (pad.rs); Resize and Upsample (resize.rs). One entry per version whose
    // inputs or attributes changed; the parse reads the version.
    op!(ONNX, "Pad", 1, pad::Pad),
    op!(ONNX, "Pad", 2, pad::Pad),
    op!(ONNX, "Pad", 11, pad::Pad),
    op!(ONNX, "Pad", 18, pad::Pad),
    op!(ONNX, "Pad", 19, pad::Pad),
    op!(ONNX, "Upsample", 7, resize::Upsample),
    op!(ONNX, "Upsample", 9, resize::Upsample),
    op!(ONNX, "Resize", 10, resize::Resize),
    op!(ONNX, "Resize", 11, resize::Resize),
    op!(ONNX, "Resize", 13, resize::Resize),
    op!(ONNX, "Resize", 18, resize::Resize),
    op!(ONNX, "Resize", 19, resize::Resize),
    // ai.onnx: element- and slice-wise gather and scatter (gather_scatter.rs)
    op!(ONNX, "GatherElements", 11, gather_scatter::GatherElements),
    op!(ONNX, "GatherND", 11, gather_scatter::GatherND),
    op!(ONNX, "GatherND", 12, gather_scatter::GatherND),
    op!(ONNX, "Scatter", 9, gather_scatter::Scatter),
    op!(ONNX, "ScatterElements", 11, gather_scatter::ScatterElements),
    op!(ONNX, "ScatterElements", 16, gather_scatter::ScatterElements),
    op!(ONNX, "ScatterElements", 18, gather_scatter::ScatterElements),
    op!(ONNX, "ScatterND", 11, gather_scatter::ScatterND),
    op!(ONNX, "ScatterND", 16, gather_scatter::ScatterND),
    op!(ONNX, "ScatterND", 18, gather_scatter::ScatterND),
    // the KV-cache update (tensor_scatter.rs)
    op!(ONNX, "TensorScatter", 24, tensor_scatter::TensorScatter),
    // ai.onnx: data-dependent selection (select.rs)
    op!(ONNX, "Compress", 9, select::Compress),
    op!(ONNX, "Compress", 11, select::Compress),
    op!(ONNX, "NonZero", 9, select::NonZero),
    op!(ONNX, "OneHot", 9, select::OneHot),
    op!(ONNX, "OneHot", 11, select::OneHot),
    op!(ONNX, "Unique", 11, select::Unique),
    // ai.onnx: layout (layout.rs)
    op!(ONNX, "DepthToSpace", 1, layout::DepthToSpace),
    op!(ONNX, "DepthToSpace", 11, layout::DepthToSpace),
    op!(ONNX, "ReverseSequence", 10, layout::ReverseSequence),
    op!(ONNX, "Size", 1, layout::Size),
    op!(ONNX, "SpaceToDepth", 1, layout::SpaceToDepth),
    op!(ONNX, "SpaceToDepth", 28, layout::SpaceToDepth),
    op!(ONNX, "Tile", 6, layout::Tile),
    // ai.onnx: EyeLike, and fuselab's AddEyeLike (eyelike.rs)
    op!(ONNX, "EyeLike", 9, eyelike::EyeLike),
    op!(FL, "AddEyeLike", 1, eyelike::AddEyeLike),
    // matrix products (matmul.rs, einsum.rs, linalg.rs)
    op!(ONNX, "Gemm", 1, matmul::Gemm),
    op!(ONNX, "MatMul", 1, matmul::MatMul),
    op!(ONNX, "Einsum", 12, einsum::Einsum),
    op!(ONNX, "Det", 11, linalg::Det),
    // ai.onnx: linear quantization (quant.rs)
    op!(ONNX, "QuantizeLinear", 10, quant::QuantizeLinear),
    op!(ONNX, "QuantizeLinear", 13, quant::QuantizeLinear),
    op!(ONNX, "QuantizeLinear", 19, quant::QuantizeLinear),
    op!(ONNX, "QuantizeLinear", 21, quant::QuantizeLinear),
    op!(ONNX, "QuantizeLinear", 23, quant::QuantizeLinear),
    op!(ONNX, "DequantizeLinear", 10, quant::DequantizeLinear),
    op!(ONNX, "DequantizeLinear", 13, quant::DequantizeLinear),
    op!(ONNX, "DequantizeLinear", 19, quant::DequantizeLinear),
    op!(ONNX, "DequantizeLinear", 21, quant::DequantizeLinear),
    op!(ONNX, "DequantizeLinear", 23, quant::DequantizeLinear),
    op!(ONNX, "DynamicQuantizeLinear", 11, quant::DynamicQuantizeLinear),
    op!(ONNX, "MatMulInteger", 10, quant::MatMulInteger),
    op!(ONNX, "QLinearMatMul", 10, quant::QLinearMatMul),
    op!(ONNX, "QLinearMatMul", 21, quant::QLinearMatMul),
    op!(MS, "FusedGemm", 1, matmul::FusedGemm),
    op!(MS, "FusedMatMul", 1, fused_matmul::FusedMatMul),
    // com.microsoft quantized matrix products (quant_ms.rs)
    op!(MS, "MatMulNBits", 1, quant_ms::MatMulNBits),
    op!(MS, "DynamicQuantizeMatMul", 1, quant_ms::DynamicQuantizeMatMul),
    // convolutions (conv.rs): ConvTranspose 11 swapped the halves of computed pads
    op!(ONNX, "Conv", 1, conv::Conv),
    op!(ONNX, "ConvTranspose", 1, conv::ConvTranspose),
    op!(ONNX, "ConvTranspose", 11, conv::ConvTranspose),
    op!(MS, "FusedConv", 1, conv::FusedConv),
    // quantized convolutions (quant_conv.rs)
    op!(ONNX, "ConvInteger", 10, quant_conv::ConvInteger),
    op!(ONNX, "QLinearConv", 10, quant_conv::QLinearConv),
    // pooling (pool.rs): a line where a version adds an attribute or output
    op!(ONNX, "MaxPool", 1, pool::MaxPool),
    op!(ONNX, "MaxPool", 8, pool::MaxPool),
    op!(ONNX, "MaxPool", 10, pool::MaxPool),
    op!(ONNX, "AveragePool", 1, pool::AveragePool),
    op!(ONNX, "AveragePool", 7, pool::AveragePool),
    op!(ONNX, "AveragePool", 10, pool::AveragePool),
    op!(ONNX, "AveragePool", 19, pool::AveragePool),
    op!(ONNX, "LpPool", 1, pool::LpPool),
    op!(ONNX, "LpPool", 2, pool::LpPool),
    op!(ONNX, "LpPool", 18, pool::LpPool),
    op!(ONNX, "GlobalAveragePool", 1, pool::GlobalAveragePool),
    op!(ONNX, "GlobalMaxPool", 1, pool::GlobalMaxPool),
    op!(ONNX, "GlobalLpPool", 1, pool::GlobalLpPool),
    op!(ONNX, "GlobalLpPool", 2, pool::GlobalLpPool),
    // reductions and Softmax (reduce.rs)
    op!(ONNX, "ReduceMean", 1, reduce::ReduceMean),
    op!(ONNX, "ReduceSum", 1, reduce::ReduceSum),
    op!(ONNX, "Softmax", 1, reduce::Softmax),
    op!(ONNX, "ReduceMax", 1, reduce_more::ReduceMax),
    op!(ONNX, "ReduceMin", 1, reduce_more::ReduceMin),
    op!(ONNX, "ReduceProd", 1, reduce_more::ReduceProd),
    op!(ONNX, "ReduceL1", 1, reduce_more::ReduceL1),
    op!(ONNX, "ReduceL2", 1, reduce_more::ReduceL2),
    op!(ONNX, "ReduceLogSum", 1, reduce_more::ReduceLogSum),
    op!(ONNX, "ReduceLogSumExp", 1, reduce_more::ReduceLogSumExp),
    op!(ONNX, "ReduceSumSquare", 1, reduce_more::ReduceSumSquare),
    // index-returning reductions (arg.rs)
    op!(ONNX, "ArgMax", 1, arg::ArgMax),
    op!(ONNX, "ArgMin", 1, arg::ArgMin),
    op!(ONNX, "TopK", 1, arg::TopK),
    // lane-wise ops along one axis (lanes.rs)
    op!(ONNX, "LogSoftmax", 1, lanes::LogSoftmax),
    op!(ONNX, "Hardmax", 1, lanes::Hardmax),
    op!(ONNX, "CumSum", 11, lanes::CumSum),
    op!(ONNX, "CumProd", 26, lanes::CumProd),
    op!(ONNX, "LpNormalization", 1, lanes::LpNormalization),
    // sampling grids (sample.rs), image rearranging (rearrange.rs)
    op!(ONNX, "GridSample", 16, sample::GridSample),
    op!(ONNX, "GridSample", 20, sample::GridSample),
    op!(ONNX, "GridSample", 22, sample::GridSample),
    op!(ONNX, "AffineGrid", 20, sample::AffineGrid),
    op!(ONNX, "Col2Im", 18, rearrange::Col2Im),
    op!(ONNX, "CenterCropPad", 18, rearrange::CenterCropPad),
    // detection: box selection, roi pooling, unpooling (detect.rs); DeformConv (deform.rs)
    op!(ONNX, "NonMaxSuppression", 10, detect::NonMaxSuppression),
    op!(ONNX, "NonMaxSuppression", 11, detect::NonMaxSuppression),
    op!(ONNX, "RoiAlign", 10, detect::RoiAlign),
    op!(ONNX, "RoiAlign", 16, detect::RoiAlign),
    op!(ONNX, "RoiAlign", 22, detect::RoiAlign),
    op!(ONNX, "DeformConv", 19, deform::DeformConv),
    op!(ONNX, "DeformConv", 22, deform::DeformConv),
    op!(ONNX, "MaxUnpool", 9, detect::MaxUnpool),
    op!(ONNX, "MaxUnpool", 11, detect::MaxUnpool),
    op!(ONNX, "MaxUnpool", 22, detect::MaxUnpool),
    // classification losses (loss.rs)
    op!(ONNX, "NegativeLogLikelihoodLoss", 12, loss::NegativeLogLikelihoodLoss),
    op!(ONNX, "NegativeLogLikelihoodLoss", 13, loss::NegativeLogLikelihoodLoss),
    op!(ONNX, "NegativeLogLikelihoodLoss", 22, loss::NegativeLogLikelihoodLoss),
    op!(ONNX, "SoftmaxCrossEntropyLoss", 12, loss::SoftmaxCrossEntropyLoss),
    op!(ONNX, "SoftmaxCrossEntropyLoss", 13, loss::SoftmaxCrossEntropyLoss),
    // normalizations and Dropout (norm.rs)
    op!(ONNX, "BatchNormalization", 1, norm::BatchNormalization),
    op!(ONNX, "InstanceNormalization", 1, norm::InstanceNormalization),
    op!(ONNX, "GroupNormalization", 18, norm::GroupNormalization),
    op!(ONNX, "LRN", 1, norm::LRN),
    op!(ONNX, "MeanVarianceNormalization", 9, norm::MeanVarianceNormalization),
    op!(ONNX, "RMSNormalization", 23, norm::RMSNormalization),
    op!(ONNX, "Dropout", 1, norm::Dropout),
    // recurrent layers (recurrent.rs)
    op!(ONNX, "RNN", 7, recurrent::RNN),
    op!(ONNX, "GRU", 7, recurrent::GRU),
    op!(ONNX, "LSTM", 7, recurrent::LSTM),
    // signal processing (signal.rs)
    op!(ONNX, "DFT", 17, signal::DFT),
    op!(ONNX, "STFT", 17, signal::STFT),
    op!(ONNX, "HannWindow", 17, signal::HannWindow),
    op!(ONNX, "HammingWindow", 17, signal::HammingWindow),
    op!(ONNX, "BlackmanWindow", 17, signal::BlackmanWindow),
    op!(ONNX, "MelWeightMatrix", 17, signal::MelWeightMatrix),
    // normalization and GELU (transformer.rs)
    // Standard from 17; onnxruntime also runs it in the default domain at older opsets (its
    // contrib schema, same attributes), and so do we.
    op!(ONNX, "LayerNormalization", 1, transformer::LayerNormalization),
    op!(MS, "SkipLayerNormalization", 1, transformer::SkipLayerNormalization),
    // RMS norms (rms.rs): onnxruntime registers SimplifiedLayerNormalization in the default domain.
    op!(ONNX, "SimplifiedLayerNormalization", 1, rms::SimplifiedLayerNormalization),
    op!(MS, "SimplifiedLayerNormalization", 1, rms::SimplifiedLayerNormalization),
    op!(MS, "SkipSimplifiedLayerNormalization", 1, rms::SkipSimplifiedLayerNormalization),
    op!(MS, "Gelu", 1, gelu::Gelu),
    op!(MS, "FastGelu", 1, gelu::FastGelu),
    op!(MS, "BiasGelu", 1, gelu::BiasGelu),
    op!(MS, "QuickGelu", 1, activation::QuickGelu),
    // gated and biased elementwise ops (glu.rs)
    op!(ONNX, "SwiGLU", 28, glu::SwiGLU),
    op!(MS, "BiasAdd", 1, glu::BiasAdd),
    // attention blocks (embed.rs, attention.rs, ms_attention.rs)
    op!(MS, "EmbedLayerNormalization", 1, embed::EmbedLayerNormalization),
    op!(MS, "Attention", 1, attention::Attention),
    op!(MS, "MultiHeadAttention", 1, ms_attention::MultiHeadAttention),
    op!(MS, "GroupQueryAttention", 1, ms_attention::GroupQueryAttention),
    // sequence ops with a carried state (state_ops.rs)
    op!(ONNX, "CausalConvWithState", 27, state_ops::CausalConvWithState),
    op!(ONNX, "LinearAttention", 27, state_ops::LinearAttention),
    // rotary position embeddings, one rotation core (rotary.rs)
    op!(ONNX, "RotaryEmbedding", 23, rotary::RotaryEmbedding),
    op!(MS, "RotaryEmbedding", 1, rotary::MsRotaryEmbedding),
    // fuselab's generated elementwise chains (fused_elementwise.rs)
    op!(FL, "FusedElementwise", 1, fused_elementwise::FusedElementwise),
];

/// Every entry, in the order above.
pub fn registry() -> &'static [OpDef] {
    OPS
}

fn index() -> &'static HashMap<(&'static str, &'static str), Vec<&'static OpDef>> {
    static INDEX: OnceLock<HashMap<(&str, &str), Vec<&OpDef>>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut m: HashMap<(&str, &str), Vec<&OpDef>> = HashMap::new();
        for d in OPS {
            m.entry((d.domain, d.op_type)).or_default().push(d);
        }
        for v in m.values_mut() {
            crate::ops::common::sort_by_dyn(v, &|a, b| a.since.cmp(&b.since));
        }
        m
    })
}

/// The entry for `op_type` in `domain` at `opset`: the one with the largest `since` not above it.
pub fn lookup(domain: &str, op_type: &str, opset: i64) -> Option<&'static OpDef> {
    let entries = index().get(&(canonical_domain(domain), op_type))?;
    entries.iter().rev().find(|d| d.since <= opset).copied()
}

/// docs/ops.md: every registry entry as a Markdown table (`fuselab ops --markdown` prints it; a
/// test keeps the committed file equal to it).
pub fn markdown_table() -> String {
    let mut out = String::from(
        "# Supported operators\n\n\
         Generated from `src/ops/registry.rs` by `fuselab ops --markdown` (a test fails when this \
         file and the registry differ). An entry covers its op from `since` to the newest opset \
         version, or to the next entry of the same op. Each op's attributes, defaults and version \
         differences are in the table at the top of its file.\n\n\
         | domain | op | since | file |\n|---|---|---:|---|\n",
    );
    for d in OPS {
        out.push_str(&format!(
            "| {} | {} | {} | `src/ops/{}.rs` |\n",
            crate::ir::model::display_domain(d.domain),
            d.op_type,
            d.since,
            d.family
        ));
    }
    out
}

/// The lowest opset version any entry covers `op_type` at, if the registry knows it at all.
pub fn first_version(domain: &str, op_type: &str) -> Option<i64> {
    index()
        .get(&(canonical_domain(domain), op_type))
        .and_then(|v| v.first())
        .map(|d| d.since)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_op_and_version() {
        for (i, a) in OPS.iter().enumerate() {
            for b in &OPS[i + 1..] {
                assert!(
                    (a.domain, a.op_type, a.since) != (b.domain, b.op_type, b.since),
                    "{}:{} since {} is listed twice",
                    a.domain,
                    a.op_type,
                    a.since
                );
            }
        }
    }

    #[test]
    fn docs_op_table_is_the_registry() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/ops.md");
        let want = markdown_table();
        if std::env::var_os("FUSELAB_BLESS").is_some() {
            std::fs::write(path, &want).unwrap();
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            have == want,
            "docs/ops.md differs from the registry: run `FUSELAB_BLESS=1 cargo test --lib \
             docs_op_table` (or `fuselab ops --markdown > docs/ops.md`)"
        );
        assert!(
            want.contains("| ai.onnx | Add | 1 | `src/ops/elementwise.rs` |"),
            "{want}"
        );
    }

    #[test]
    fn lookup_respects_domain_and_version() {
        assert!(lookup("ai.onnx", "Add", 13).is_some());
        assert!(lookup(FL, "AddEyeLike", 1).is_some());
        assert!(lookup("", "AddEyeLike", 13).is_none());
        assert!(lookup("com.example", "Add", 13).is_none());
        assert!(lookup("", "ImageDecoder", 20).is_none());
        assert!(lookup("", "DeformConv", 18).is_none());
        assert!(lookup("", "DeformConv", 19).is_some());
        assert!(lookup("", "Conv", 1).is_some());
        assert!(lookup("", "SkipLayerNormalization", 17).is_none());
        assert!(lookup(MS, "SkipLayerNormalization", 1).is_some());
        // Reshape took its shape as an input from 5; Erf exists from 9.
        assert!(lookup("", "Erf", 8).is_none());
        assert!(lookup("", "Erf", 9).is_some());
        assert!(lookup("", "Reshape", 4).is_none());
        assert_eq!(first_version("", "Reshape"), Some(5));
    }
}
