//! Node → GPU work, the contract between ops and the WebGPU session. With every shape fixed
//! (the session traced one run), each node becomes nothing (its output is its input relabelled:
//! Reshape, Squeeze, ...), or dispatches of generated kernels (`wgsl.rs`). Each op's own
//! lowering is its `Op::lower`; fused ops are one dispatch each.

use crate::ir::Node;
use crate::tensor::{DType, Tensor};

pub use super::wgsl::Ty;
use super::wgsl::{self, Access, Dispatch};
use super::Op;

/// Type and shape of a value, known from the traced run.
#[derive(Clone, Debug, PartialEq)]
pub struct Info {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl Info {
    pub fn of(t: &Tensor) -> Info {
        Info {
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
        }
    }
}

pub enum Lowered {
    /// Output 0 holds input 0's elements in the same order.
    Alias,
    /// Kernels to run in order; `scratch` are the sizes (bytes) of the node's own buffers.
    Run {
        dispatches: Vec<Dispatch>,
        scratch: Vec<u64>,
    },
}

/// What lowering may look at: the node, its opset, input/output infos, and the values of
/// inputs that are static (known without the run's data: initializers, shape arithmetic).
pub struct NodeCtx<'a> {
    pub node: &'a Node,
    /// The node's parsed op (its typed attributes).
    pub op: &'a dyn Op,
    pub opset: i64,
    pub ins: Vec<Option<Info>>,
    pub outs: Vec<Option<Info>>,
    pub statics: Vec<Option<&'a Tensor>>,
}

pub(crate) type R<T> = Result<T, String>;

impl NodeCtx<'_> {
    /// The node's typed attributes as the op type `T` being lowered.
    pub fn attrs<T: Op>(&self) -> R<&T> {
        super::downcast(self.op)
    }
    pub fn input(&self, i: usize) -> R<&Info> {
        self.ins
            .get(i)
            .and_then(|x| x.as_ref())
            .ok_or_else(|| format!("input {i} is missing"))
    }
    pub fn has_input(&self, i: usize) -> bool {
        self.ins.get(i).is_some_and(|x| x.is_some())
    }
    pub fn out(&self, i: usize) -> R<&Info> {
        self.outs
            .get(i)
            .and_then(|x| x.as_ref())
            .ok_or_else(|| format!("output {i} is missing"))
    }
    pub fn has_out(&self, i: usize) -> bool {
        self.outs.get(i).is_some_and(|x| x.is_some())
    }
    pub fn ty(&self, i: usize) -> R<Ty> {
        Ty::of(self.input(i)?.dtype)
    }
    pub fn out_ty(&self, i: usize) -> R<Ty> {
        Ty::of(self.out(i)?.dtype)
    }
    /// A broadcast read of input `i` into the output's shape.
    pub fn bcast(&self, i: usize) -> R<Access> {
        let out = &self.out(0)?.shape;
        let inp = self.input(i)?;
        if inp.shape.len() > out.len() {
            return Err(format!("input {i} has a higher rank than the output"));
        }
        Ok(Access::broadcast(Ty::of(inp.dtype)?, &inp.shape, out))
    }
    /// An elementwise node over inputs `0..n` (all broadcast) computing `expr`.
    pub fn ew(&self, n: usize, expr: &str) -> R<Lowered> {
        let ins = (0..n).map(|i| self.bcast(i)).collect::<R<Vec<_>>>()?;
        run(wgsl::elementwise(
            &self.out(0)?.shape,
            self.out_ty(0)?,
            &ins,
            expr,
        ))
    }
}

pub(crate) fn run(d: Dispatch) -> R<Lowered> {
    Ok(Lowered::Run {
        dispatches: if d.groups.contains(&0) {
            vec![]
        } else {
            vec![d]
        },
        scratch: vec![],
    })
}

pub(crate) fn norm_axis(axis: i64, rank: usize) -> R<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r.max(1)).contains(&a) {
        Ok(a as usize)
    } else {
        Err(format!("axis {axis} is out of range for rank {rank}"))
    }
}

/// The float32 activations FusedGemm, FusedConv and the plain ops share, as WGSL expressions
/// of `v0`.
pub(crate) const RELU: &str = "max(v0, 0.0)";
pub(crate) const TANH: &str = "tanh_(v0)";
pub(crate) const SIGMOID: &str = "1.0 / (1.0 + exp(-v0))";

pub(crate) const GELU: &str = "0.5 * x * (1.0 + erf_(x * 0.70710678118654752))";
pub(crate) const FAST_GELU: &str =
    "0.5 * x * (1.0 + tanh_(0.7978845608028654 * (x + 0.044715 * x * x * x)))";

/// Lowers one node through its op. Errors name what the WebGPU backend does not do (yet).
pub fn lower(c: &NodeCtx) -> R<Lowered> {
    c.op.lower(c)
}

/// The error of an op without a WebGPU kernel.
pub(crate) fn no_kernel(c: &NodeCtx) -> String {
    format!(
        "{} ({}) has no webgpu kernel yet",
        c.node.op_type,
        crate::ir::model::display_domain(&c.node.domain)
    )
}

/// Adds `fn gelu_(x)` computing `body` to the kernel.
pub(crate) fn with_fn(l: Lowered, body: &str) -> Lowered {
    prepend(l, &format!("fn gelu_(x: f32) -> f32 {{ return {body}; }}"))
}

/// Puts `text` (a helper function) ahead of every kernel of `l`.
pub(crate) fn prepend(l: Lowered, text: &str) -> Lowered {
    match l {
        Lowered::Run {
            mut dispatches,
            scratch,
        } => {
            for d in &mut dispatches {
                d.wgsl = format!("{text}\n{}", d.wgsl);
            }
            Lowered::Run {
                dispatches,
                scratch,
            }
        }
        other => other,
    }
}

pub(crate) fn static_ints(c: &NodeCtx, i: usize, what: &str) -> R<Option<Vec<i64>>> {
    if !c.has_input(i) {
        return Ok(None);
    }
    c.statics
        .get(i)
        .copied()
        .flatten()
        .and_then(|t| t.to_i64_vec())
        .map(Some)
        .ok_or_else(|| format!("its {what} depend on the input data (webgpu needs them fixed)"))
}
