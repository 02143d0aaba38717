//! The reference backend: ndarray kernels per the ONNX operator spec (opset 13 and newer).
//!
//! A kernel is a plain function from its node (attributes), the opset version of its domain and
//! its input tensors to its output tensors. Kernels read inputs as views and never mutate them.

mod attention;
mod broadcast;
mod common;
mod compare;
mod elementwise;
mod embed;
mod eyelike;
mod fastmath;
mod fused_elementwise;
mod index_ops;
mod matmul;
mod reduce;
mod shape_ops;
mod transformer;

use crate::ir::Node;
use crate::limits::Limits;
use crate::tensor::Tensor;

/// What a kernel may read besides its inputs.
pub struct KernelCtx<'a> {
    pub node: &'a Node,
    /// Opset version imported for the node's domain.
    pub opset: i64,
    pub limits: &'a Limits,
}

/// Kernel errors are plain messages; the executor adds the node and op type.
pub type KernelResult = Result<Vec<Tensor>, String>;

/// `inputs[i]` is `None` for an omitted optional input.
pub type Kernel = fn(&KernelCtx, &[Option<&Tensor>]) -> KernelResult;

pub use crate::ir::model::FUSELAB_DOMAIN;
use crate::ir::model::MS_DOMAIN;

/// Every kernel: (domain, op_type, kernel). "" is the default ONNX domain.
const KERNELS: &[(&str, &str, Kernel)] = &[
    ("", "Abs", elementwise::abs),
    ("", "Add", elementwise::add),
    ("", "And", compare::and),
    ("", "Cast", shape_ops::cast),
    ("", "Concat", shape_ops::concat),
    ("", "Constant", shape_ops::constant),
    ("", "ConstantOfShape", index_ops::constant_of_shape),
    ("", "Div", elementwise::div),
    ("", "Equal", compare::equal),
    ("", "Erf", elementwise::erf),
    ("", "Exp", elementwise::exp),
    ("", "Expand", index_ops::expand),
    ("", "EyeLike", eyelike::eye_like),
    ("", "Flatten", index_ops::flatten),
    ("", "Gather", index_ops::gather),
    ("", "Gemm", matmul::gemm),
    ("", "Greater", compare::greater),
    ("", "GreaterOrEqual", compare::greater_or_equal),
    ("", "Identity", shape_ops::identity),
    ("", "Less", compare::less),
    ("", "LessOrEqual", compare::less_or_equal),
    ("", "Log", elementwise::log),
    ("", "MatMul", matmul::matmul),
    ("", "Mul", elementwise::mul),
    ("", "Neg", elementwise::neg),
    ("", "Not", compare::not),
    ("", "Or", compare::or),
    ("", "Pow", elementwise::pow),
    ("", "Range", index_ops::range),
    ("", "ReduceMean", reduce::reduce_mean),
    ("", "ReduceSum", reduce::reduce_sum),
    ("", "Relu", elementwise::relu),
    ("", "Reshape", shape_ops::reshape),
    ("", "Shape", shape_ops::shape),
    ("", "Sigmoid", elementwise::sigmoid),
    ("", "Slice", index_ops::slice),
    ("", "Softmax", reduce::softmax),
    ("", "Split", index_ops::split),
    ("", "Sqrt", elementwise::sqrt),
    ("", "Squeeze", shape_ops::squeeze),
    ("", "Sub", elementwise::sub),
    ("", "Tanh", elementwise::tanh),
    ("", "Transpose", shape_ops::transpose),
    ("", "Trilu", index_ops::trilu),
    ("", "Unsqueeze", shape_ops::unsqueeze),
    ("", "Where", compare::where_),
    ("", "Xor", compare::xor),
    (FUSELAB_DOMAIN, "AddEyeLike", eyelike::add_eye_like),
    (
        FUSELAB_DOMAIN,
        "FusedElementwise",
        fused_elementwise::fused_elementwise,
    ),
    ("", "LayerNormalization", transformer::layer_norm),
    (
        MS_DOMAIN,
        "SkipLayerNormalization",
        transformer::skip_layer_norm,
    ),
    (MS_DOMAIN, "Gelu", transformer::gelu),
    (MS_DOMAIN, "FastGelu", transformer::fast_gelu),
    (MS_DOMAIN, "BiasGelu", transformer::bias_gelu),
    (
        MS_DOMAIN,
        "EmbedLayerNormalization",
        embed::embed_layer_norm,
    ),
    (MS_DOMAIN, "Attention", attention::attention),
    (MS_DOMAIN, "FusedGemm", matmul::fused_gemm),
];

const SUPPORTED: &[(&str, &str)] = &{
    let mut out = [("", ""); KERNELS.len()];
    let mut i = 0;
    while i < KERNELS.len() {
        out[i] = (KERNELS[i].0, KERNELS[i].1);
        i += 1;
    }
    out
};

/// The kernel for an op, if the reference backend implements it.
pub fn lookup(domain: &str, op_type: &str) -> Option<Kernel> {
    let domain = crate::ir::model::canonical_domain(domain);
    KERNELS
        .iter()
        .find(|(d, op, _)| *d == domain && *op == op_type)
        .map(|&(_, _, k)| k)
}

/// (domain, op_type) of every kernel, "" being the default ONNX domain.
pub fn supported_ops() -> &'static [(&'static str, &'static str)] {
    SUPPORTED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_finds_every_supported_op() {
        for &(d, op) in supported_ops() {
            assert!(lookup(d, op).is_some(), "{d}:{op}");
        }
        assert_eq!(supported_ops().len(), 57);
        assert!(lookup("ai.onnx", "Add").is_some());
        assert!(lookup(FUSELAB_DOMAIN, "AddEyeLike").is_some());
        assert!(lookup(FUSELAB_DOMAIN, "FusedElementwise").is_some());
        assert!(lookup("", "FusedElementwise").is_none());
        assert!(lookup("", "AddEyeLike").is_none());
        assert!(lookup("com.example", "Add").is_none());
        assert!(lookup("", "Conv").is_none());
        assert!(lookup(MS_DOMAIN, "SkipLayerNormalization").is_some());
        assert!(lookup("", "SkipLayerNormalization").is_none());
    }
}

pub mod executor;
pub use executor::{Executor, NoObserver, StepObserver};
/// The Constant kernel, also how passes and inference read Constant nodes' values.
pub use shape_ops::constant;
use shape_ops::{relabel, relabel_shape, RelabelShape};
