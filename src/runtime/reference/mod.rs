//! The reference backend: ndarray kernels per the ONNX operator spec (opset 13 and newer).
//!
//! A kernel is a plain function from its node (attributes), the opset version of its domain and
//! its input tensors to its output tensors. Kernels read inputs as views and never mutate them.

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

/// The kernel for an op, if the reference backend implements it.
pub fn lookup(domain: &str, op_type: &str) -> Option<Kernel> {
    let domain = if domain == "ai.onnx" { "" } else { domain };
    let _ = (domain, op_type);
    None
}

pub mod executor;
pub use executor::Executor;
