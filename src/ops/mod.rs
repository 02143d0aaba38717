//! The ops layer: one owner per operator.
//!
//! Each op is a Rust type holding its attributes, parsed and validated once per node for the
//! opset version the model imports (`parse`), and implementing [`Op`]: type and shape inference,
//! the reference kernel and, where it has one, the WebGPU lowering. The registry
//! (`registry.rs`) is the only list of ops; inference, the reference executor, the WebGPU
//! session, the CLI's "unsupported op" message and the docs' op table all read it.
//!
//! The IR stays free of op semantics: a node keeps its attribute records (so a save is
//! byte-faithful) and a cache slot where `resolve` leaves the parsed op the first time anyone
//! asks for it.

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use crate::ir::{Node, TensorType};
use crate::limits::Limits;
use crate::tensor::Tensor;

pub mod attrs;
pub mod infer;
pub mod lowering;
pub mod registry;
pub mod shape_value;
pub mod wgsl;

mod broadcast;
pub(crate) mod common;
mod fastmath;
mod simd;
mod window;

pub mod activation;
pub mod arg;
pub mod attention;
pub mod cast;
pub mod compare;
pub mod concat;
pub mod control_flow;
pub mod conv;
pub mod deform;
pub mod detect;
pub mod einsum;
pub mod elementwise;
pub mod embed;
pub mod eyelike;
pub mod fused_elementwise;
pub mod fused_matmul;
pub mod gather_scatter;
pub mod gelu;
pub mod glu;
pub mod index_ops;
pub mod lanes;
pub mod layout;
pub mod linalg;
pub mod loss;
pub mod math;
pub mod matmul;
pub mod ms_attention;
pub mod norm;
pub mod pad;
pub mod pool;
pub mod quant;
pub mod quant_conv;
pub mod quant_ms;
pub mod rearrange;
pub mod recurrent;
pub mod reduce;
pub mod reduce_more;
pub mod resize;
pub mod rms;
pub mod rotary;
pub mod sample;
pub mod sdpa;
pub mod select;
pub mod sgemm;
pub mod shape_ops;
pub mod signal;
pub mod slice;
pub mod state_ops;
pub mod strings;
pub mod tensor_scatter;
pub mod transformer;

pub use attrs::Attrs;
pub use infer::InferCx;
pub use lowering::{Info, Lowered, NodeCtx};
pub use registry::{lookup, registry, OpDef};
pub use shape_ops::{relabel, RelabelShape};

/// What a kernel may read besides its inputs.
pub struct KernelCtx<'a> {
    pub node: &'a Node,
    /// The node's parsed op (its typed attributes).
    pub op: &'a dyn Op,
    /// Opset version imported for the node's domain.
    pub opset: i64,
    pub limits: &'a Limits,
    /// Where the executor keeps what this node's kernel derives from its constant inputs;
    /// None where nothing is kept between runs (a one-off call).
    pub prepared: Option<Prepared<'a>>,
}

impl KernelCtx<'_> {
    /// The node's typed attributes as the op type `T` that the kernel belongs to.
    pub fn attrs<T: Op>(&self) -> Result<&T, String> {
        downcast(self.op)
    }

    /// What `make` derives from input `input` (packed weights), made on the first run and
    /// kept for the executor's life; None when that input is not an initializer (it may change
    /// between runs) or the caller keeps nothing. A node keeps one such value.
    pub fn prepare<T: Any + Send + Sync>(
        &self,
        input: usize,
        make: impl FnOnce() -> T,
    ) -> Option<&T> {
        let p = self.prepared.as_ref().filter(|p| p.is_constant(input))?;
        p.cell.get_or_init(|| Box::new(make())).downcast_ref()
    }
}

/// One node's slot for [`KernelCtx::prepare`], and which of its inputs are initializers (the
/// very tensors the executor decoded once: bit `i` for input `i`).
#[derive(Clone, Copy)]
pub struct Prepared<'a> {
    pub cell: &'a PreparedCell,
    pub constant: u64,
}

impl Prepared<'_> {
    fn is_constant(&self, input: usize) -> bool {
        input < 64 && self.constant >> input & 1 == 1
    }
}

/// The value a kernel prepared once (see [`KernelCtx::prepare`]).
pub type PreparedCell = std::sync::OnceLock<Box<dyn Any + Send + Sync>>;

/// Generic over every op type, so kept to the type check: the message is built apart and names
/// no type (the executor's error names the node and its op type), so the wasm build holds one
/// copy of it, not one per op.
fn downcast<T: Op>(op: &dyn Op) -> Result<&T, String> {
    let any: &dyn Any = op;
    any.downcast_ref::<T>().ok_or_else(wrong_op)
}

#[cold]
#[inline(never)]
fn wrong_op() -> String {
    "internal: the kernel was given a node parsed as another op".to_string()
}

/// Kernel errors are plain messages; the executor adds the node and op type.
pub type KernelResult = Result<Vec<Tensor>, String>;

/// A reference kernel. `inputs[i]` is `None` for an omitted optional input.
pub type Kernel = fn(&KernelCtx, &[Option<&Tensor>]) -> KernelResult;

/// One operator with its attributes parsed for one node: everything each layer needs to know.
pub trait Op: Any + Send + Sync {
    /// Output types and shapes, as far as they are statically known (unknown parts stay
    /// `None`/`Dim::Unknown`; never wrong).
    fn infer(&self, cx: &InferCx) -> Vec<TensorType>;
    /// The reference kernel (ndarray).
    fn kernel(&self) -> Kernel;
    /// The WebGPU lowering: shape-specialized WGSL dispatches, or an alias of input 0.
    fn lower(&self, cx: &NodeCtx) -> Result<Lowered, String> {
        Err(lowering::no_kernel(cx))
    }
    /// Inputs the WebGPU lowering reads as uint8/int8 bytes packed four to a u32 word, low
    /// byte first (MatMulNBits' and DynamicQuantizeMatMul's B and zero points). The session packs
    /// such a value only when it is static (an initializer); elsewhere uint8/int8 is held widened
    /// to int32, so a lowering reading packed bytes checks that the input is static.
    fn packed_byte_inputs(&self) -> &'static [usize] {
        &[]
    }
    /// For ops whose output is input 0 relabelled (Reshape, Squeeze, ...): the output shape,
    /// so the executor can move a tensor instead of copying it.
    fn relabel(&self) -> Option<RelabelShape> {
        None
    }
    /// True when every input must have the same element type (the spec's single `T`); `verify`
    /// checks it.
    fn same_type_inputs(&self) -> bool {
        false
    }
    /// True when the output depends only on the inputs' shapes, not their data (Shape): the
    /// WebGPU session computes such values once at prepare time.
    fn reads_only_shapes(&self) -> bool {
        false
    }
    /// True when the kernel takes values of every held element type as they are (data movement,
    /// Cast). Otherwise the executor widens storage types (float16, int8, ...) to their compute
    /// type before the kernel runs and narrows its outputs back to their declared types
    /// (`Tensor::widen`/`narrow`), so kernels are written for the compute types only.
    fn any_element_type(&self) -> bool {
        false
    }
    /// True when the executor's narrowing of this op's integer results to a smaller integer
    /// storage type saturates (clamps to the type's range) instead of wrapping: onnxruntime
    /// computes such ops (Resize's linear and cubic modes on uint8/int8) in the storage type.
    fn saturates(&self) -> bool {
        false
    }
    /// The graphs the op runs (If's branches, Loop's and Scan's bodies), by attribute name:
    /// the reference executor plans each as a nested model.
    fn bodies(&self) -> Vec<(&str, &crate::onnx::proto::GraphProto)> {
        Vec::new()
    }
}

/// Why a node has no usable op.
#[derive(Clone, Debug, PartialEq)]
pub enum OpError {
    /// No registry entry for this (domain, op type) at this opset version.
    Unsupported,
    /// The entry exists but the node's attributes are wrong (the message names the attribute).
    BadAttributes(String),
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpError::Unsupported => f.write_str("the op is not in the registry at this opset"),
            OpError::BadAttributes(m) => f.write_str(m),
        }
    }
}

type Parsed = Result<Box<dyn Op>, OpError>;

/// A node's parsed op: borrowed from the node's cache, or parsed afresh when the cache holds
/// another opset version's parse.
pub enum OpRef<'a> {
    Cached(&'a dyn Op),
    Fresh(Box<dyn Op>),
}

impl std::ops::Deref for OpRef<'_> {
    type Target = dyn Op;
    fn deref(&self) -> &(dyn Op + 'static) {
        match self {
            OpRef::Cached(op) => *op,
            OpRef::Fresh(op) => op.as_ref(),
        }
    }
}

impl<'a> OpRef<'a> {
    /// The typed attributes as `T`, if the node is that op.
    pub fn get<T: Op>(&self) -> Option<&T> {
        let any: &dyn Any = &**self;
        any.downcast_ref::<T>()
    }
}

fn parse(node: &Node, opset: i64) -> Parsed {
    let def = lookup(&node.domain, &node.op_type, opset).ok_or(OpError::Unsupported)?;
    (def.parse)(&Attrs::new(node, opset)).map_err(OpError::BadAttributes)
}

/// The node's op at `opset` (the version the model imports for the node's domain), parsed on
/// first use and cached in the node.
pub fn resolve(node: &Node, opset: i64) -> Result<OpRef<'_>, OpError> {
    let cached = node
        .parsed
        .get_or_init(opset, || Arc::new(parse(node, opset)));
    match cached.and_then(|a| a.downcast_ref::<Parsed>()) {
        Some(Ok(op)) => Ok(OpRef::Cached(op.as_ref())),
        Some(Err(e)) => Err(e.clone()),
        None => parse(node, opset).map(OpRef::Fresh),
    }
}

/// The typed attributes of `node` if it is the op `T` (at the model's opset for its domain).
pub fn attrs_of<'a, T: Op>(model: &crate::ir::Model, node: &'a Node) -> Option<&'a T> {
    let any: &dyn Any = cached_op(model, node)?;
    any.downcast_ref::<T>()
}

/// `node`'s parsed op as cached on the node (the non-generic half of [`attrs_of`]).
fn cached_op<'a>(model: &crate::ir::Model, node: &'a Node) -> Option<&'a dyn Op> {
    let opset = model.opset(&node.domain).unwrap_or(1);
    match resolve(node, opset).ok()? {
        OpRef::Cached(op) => Some(op),
        // A fresh parse cannot be borrowed past this call. The cache holds another opset's parse
        // only if the opset import was edited directly: `Model::require_opset`/`ensure_opset`
        // reset the caches of the domain's nodes.
        OpRef::Fresh(_) => None,
    }
}

/// Runs `node`'s reference kernel on `inputs` (constant folding, static evaluation).
pub fn evaluate(
    node: &Node,
    opset: i64,
    limits: &Limits,
    inputs: &[Option<&Tensor>],
) -> Result<KernelResult, OpError> {
    let op = resolve(node, opset)?;
    let ctx = KernelCtx {
        node,
        op: &*op,
        opset,
        limits,
        prepared: None,
    };
    Ok((op.kernel())(&ctx, inputs))
}

/// Declares attribute-less op types: a unit struct each, whose parse accepts the node as is.
macro_rules! plain_ops {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {
        $(
            $(#[$m])*
            #[derive(Debug)]
            pub struct $name;
            impl $name {
                pub fn parse(_: &$crate::ops::Attrs) -> Result<Box<dyn $crate::ops::Op>, String> {
                    Ok(Box::new($name))
                }
            }
        )*
    };
}
pub(crate) use plain_ops;

/// Parses every node whose op the registry knows: a bad attribute is an error naming the node
/// and the attribute. (Unknown ops are not errors here: they only cannot run.)
pub fn check_attributes(model: &crate::ir::Model) -> crate::Result<()> {
    let g = &model.graph;
    for id in g.node_ids() {
        let node = g.node(id);
        let opset = model.opset(&node.domain).unwrap_or(1);
        if let Err(OpError::BadAttributes(m)) = resolve(node, opset) {
            return Err(crate::Error::invalid(format!(
                "{} node '{}': {m}",
                node.op_type,
                node.label(id)
            )));
        }
    }
    Ok(())
}

/// `ir::verify::verify_structure`, then the type checks that need op semantics: same-type ops
/// fed different element types, and outputs declared with a type other than their op computes.
pub fn verify(model: &crate::ir::Model) -> crate::Result<()> {
    crate::ir::verify::verify_structure(model)?;
    infer::check_types(model)
}

/// The node's parse for whichever opset it was resolved at, or (never resolved) a fresh parse at
/// the newest version. For graph walks that have no model at hand (`shape_value`); the
/// attributes they read mean the same in every version the registry covers.
pub fn parse_any_version(node: &Node) -> Option<OpRef<'_>> {
    match node.parsed.peek().and_then(|a| a.downcast_ref::<Parsed>()) {
        Some(Ok(op)) => Some(OpRef::Cached(op.as_ref())),
        Some(Err(_)) => None,
        None => parse(node, i64::MAX).ok().map(OpRef::Fresh),
    }
}

/// Why an op the registry knows is still unsupported at `opset`, for the "unsupported op"
/// message: e.g. "Reshape is covered from opset 5; the model imports 4".
pub fn version_note(node: &Node, opset: i64) -> Option<String> {
    let first = registry::first_version(&node.domain, &node.op_type)?;
    (first > opset).then(|| {
        format!(
            "{} is covered from opset {first}; the model imports {opset}",
            node.op_type
        )
    })
}
