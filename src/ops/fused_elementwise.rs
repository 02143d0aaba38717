//! ai.fuselab.FusedElementwise: an elementwise expression over broadcast float32 inputs, in one
//! pass over the output (contract: src/passes/fuse_elementwise.rs; grammar: src/ir/expr.rs).
//!
//! | op | versions | attributes | inputs -> output |
//! |---|---|---|---|
//! | FusedElementwise (ai.fuselab) | 1- | `expression` (string, required): the tree over `x0, x1, ...` | x0..xN: float32 -> y: float32, the broadcast of every input's shape |
//!
//! The expression is parsed once, with the node; a missing or malformed one is the kernel's
//! error (a model holding it still loads), as is an input index past the node's inputs.
//!
//! The output is computed in chunks of `CHUNK` elements: each input's elements for the chunk
//! are gathered through its broadcast strides (or sliced, when it already has the output's
//! shape), then the tree is evaluated into chunk-sized buffers. No intermediate of the full size
//! exists, and every op goes through the same scalar function as its one-op kernel
//! (`elementwise::unary_f32`/`binary_f32`), in the chain's order: results equal the unfused
//! chain's bit for bit. The WebGPU lowering is one elementwise dispatch whose expression uses
//! the one-op kernels' WGSL helpers.

use std::borrow::Cow;

use ndarray::{ArrayD, IxDyn};

use super::broadcast::broadcast_shape;
use super::common::{check_out, input};
use super::elementwise::{binary_f32, unary_f32};
use super::infer::broadcast_dims;
use super::lowering::{NodeCtx, R};
use super::wgsl::lit;
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::expr::{BinaryOp, Expr, ExprError, UnaryOp};
use crate::ir::TensorType;
use crate::tensor::{DType, Tensor};

const OP: &str = "FusedElementwise";

/// Output elements per evaluation step: the temporaries (one per tree level that needs one)
/// stay in L1.
const CHUNK: usize = 512;

#[derive(Debug)]
pub struct FusedElementwise {
    /// The `expression` attribute (`None`: absent), parsed for any number of inputs: how many
    /// the node has is checked against the tree's highest input (`max_input`) where it runs.
    pub expr: Option<Expression>,
}

#[derive(Debug)]
pub struct Expression {
    pub text: String,
    pub tree: Result<Expr, ExprError>,
    /// The highest input index the tree reads (`None`: it reads none).
    pub max_input: Option<usize>,
}

/// Why a node has no usable expression for its inputs.
enum NoExpr {
    Missing,
    Malformed(ExprError),
}

impl FusedElementwise {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        let expr = a.string("expression")?.map(|text| {
            let tree = Expr::parse(&text, usize::MAX);
            let max_input = tree.as_ref().ok().and_then(max_input);
            Expression {
                text,
                tree,
                max_input,
            }
        });
        Ok(Box::new(FusedElementwise { expr }))
    }

    /// The tree for a node with `n` inputs.
    fn tree(&self, n: usize) -> Result<&Expr, NoExpr> {
        let p = self.expr.as_ref().ok_or(NoExpr::Missing)?;
        match &p.tree {
            Ok(tree) if p.max_input.is_none_or(|i| i < n) => Ok(tree),
            // Malformed, or reading an input the node lacks: the text parsed again with the
            // node's input count, for the message the parser gives (the first fault in it).
            parsed => Err(NoExpr::Malformed(
                Expr::parse(&p.text, n)
                    .err()
                    .or_else(|| parsed.as_ref().err().cloned())
                    .unwrap_or_else(|| ExprError {
                        offset: 0,
                        message: format!("an input is out of range: the node has {n} input(s)"),
                    }),
            )),
        }
    }
}

fn max_input(e: &Expr) -> Option<usize> {
    match e {
        Expr::Input(i) => Some(*i),
        Expr::Literal(_) => None,
        Expr::Unary(_, a) => max_input(a),
        Expr::Binary(_, a, b) => max_input(a).max(max_input(b)),
    }
}

impl Op for FusedElementwise {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        // float32, the broadcast of every input's shape.
        let shape = cx.input_shapes().and_then(|shapes| {
            shapes
                .iter()
                .try_fold(Vec::new(), |acc, s| broadcast_dims(&acc, s))
        });
        vec![TensorType {
            dtype: Some(DType::F32),
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        fused_elementwise
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        let n = c.ins.len();
        let e = match self.tree(n) {
            Ok(e) => e,
            Err(NoExpr::Missing) => return Err("FusedElementwise without an expression".into()),
            Err(NoExpr::Malformed(e)) => return Err(e.to_string()),
        };
        c.ew(n, &expr_wgsl(e)?)
    }
}

pub fn fused_elementwise(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let expr = match ctx.attrs::<FusedElementwise>()?.tree(inputs.len()) {
        Ok(e) => e,
        Err(NoExpr::Missing) => return Err(format!("{OP}: missing string attribute 'expression'")),
        Err(NoExpr::Malformed(e)) => return Err(format!("{OP}: expression: {e}")),
    };
    let mut arrays = Vec::with_capacity(inputs.len());
    for i in 0..inputs.len() {
        match input(OP, inputs, i)? {
            Tensor::F32(a) => arrays.push(a),
            other => {
                return Err(format!(
                    "{OP}: input {i} is {}; the op is float32 only",
                    other.dtype()
                ))
            }
        }
    }
    let mut shape = Vec::new();
    for a in &arrays {
        shape = broadcast_shape(OP, &shape, a.shape())?;
    }
    check_out(ctx, OP, &shape, 32)?;
    let n: usize = shape.iter().product();
    // A rank-0 output iterates as one element of shape [1].
    let walk: Vec<usize> = if shape.is_empty() {
        vec![1]
    } else {
        shape.clone()
    };
    let sources: Vec<Source> = arrays.iter().map(|a| Source::new(a, &walk)).collect();
    let mut out = vec![0f32; n];
    let mut gathered: Vec<Vec<f32>> = vec![Vec::with_capacity(CHUNK); sources.len()];
    let mut pool: Vec<Vec<f32>> = Vec::new();
    let mut start = 0;
    while start < n {
        let len = CHUNK.min(n - start);
        for (s, buf) in sources.iter().zip(&mut gathered) {
            if !s.direct {
                s.gather(&walk, start, len, buf);
            }
        }
        let chunk: Vec<&[f32]> = sources
            .iter()
            .zip(&gathered)
            .map(|(s, buf)| {
                if s.direct {
                    &s.data[start..start + len]
                } else {
                    &buf[..]
                }
            })
            .collect();
        eval_into(expr, &chunk, &mut out[start..start + len], &mut pool);
        start += len;
    }
    let y = ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| format!("{OP}: {e}"))?;
    Ok(vec![Tensor::F32(y)])
}

/// One input, read in the output's row-major order.
struct Source<'a> {
    /// The elements in row-major order (copied only when the input was not laid out so).
    data: Cow<'a, [f32]>,
    /// Element stride along each output axis: 0 where the input broadcasts.
    strides: Vec<usize>,
    /// The input has the output's shape: a chunk is a plain slice of `data`.
    direct: bool,
}

impl<'a> Source<'a> {
    fn new(a: &'a ArrayD<f32>, walk: &[usize]) -> Source<'a> {
        let data = super::lanes::elements(a);
        let shape = a.shape();
        // Row-major strides of the input, right-aligned to the output's axes.
        let mut strides = vec![0; walk.len()];
        let mut step = 1;
        for (k, &d) in shape.iter().enumerate().rev() {
            let axis = walk.len() - (shape.len() - k);
            strides[axis] = if d == 1 { 0 } else { step };
            step *= d;
        }
        Source {
            data,
            strides,
            direct: shape == walk,
        }
    }

    /// Writes output elements `start..start + len` of this input into `buf`, one run along
    /// the last axis at a time.
    fn gather(&self, walk: &[usize], start: usize, len: usize, buf: &mut Vec<f32>) {
        buf.clear();
        let last = walk.len() - 1;
        // The multi-index of `start`.
        let mut idx = vec![0; walk.len()];
        let mut rest = start;
        for k in (0..walk.len()).rev() {
            idx[k] = rest % walk[k];
            rest /= walk[k];
        }
        while buf.len() < len {
            let run = (walk[last] - idx[last]).min(len - buf.len());
            let off: usize = idx.iter().zip(&self.strides).map(|(i, s)| i * s).sum();
            match self.strides[last] {
                0 => buf.extend(std::iter::repeat_n(self.data[off], run)),
                1 => buf.extend_from_slice(&self.data[off..off + run]),
                s => buf.extend((0..run).map(|j| self.data[off + j * s])),
            }
            idx[last] += run;
            for k in (1..walk.len()).rev() {
                if idx[k] < walk[k] {
                    break;
                }
                idx[k] = 0;
                idx[k - 1] += 1;
            }
        }
    }
}

/// Evaluates `e` over one chunk into `out` (`ins[i]` holds input i's chunk; all have
/// `out.len()` elements). `pool` recycles temporaries: at most one per tree level is live.
fn eval_into(e: &Expr, ins: &[&[f32]], out: &mut [f32], pool: &mut Vec<Vec<f32>>) {
    match e {
        Expr::Input(i) => out.copy_from_slice(ins[*i]),
        Expr::Literal(c) => out.fill(*c),
        Expr::Unary(op, a) => {
            eval_into(a, ins, out, pool);
            unary_in_place(*op, out);
        }
        Expr::Binary(op, a, b) => match (&**a, &**b) {
            (_, Expr::Literal(c)) => {
                eval_into(a, ins, out, pool);
                binary_in_place(*op, out, Rhs::Scalar(*c));
            }
            (_, Expr::Input(i)) => {
                eval_into(a, ins, out, pool);
                binary_in_place(*op, out, Rhs::Slice(ins[*i]));
            }
            (Expr::Literal(c), _) => {
                eval_into(b, ins, out, pool);
                binary_in_place(*op, out, Rhs::ScalarLhs(*c));
            }
            (Expr::Input(i), _) => {
                eval_into(b, ins, out, pool);
                binary_in_place(*op, out, Rhs::SliceLhs(ins[*i]));
            }
            _ => {
                let mut tmp = pool.pop().unwrap_or_default();
                tmp.resize(out.len(), 0.0);
                eval_into(b, ins, &mut tmp, pool);
                eval_into(a, ins, out, pool);
                binary_in_place(*op, out, Rhs::Slice(&tmp));
                pool.push(tmp);
            }
        },
    }
}

/// The operand of a binary op that is not in `out`; the `Lhs` forms hold op's first operand
/// (`out` then holds the second).
#[derive(Clone, Copy)]
enum Rhs<'a> {
    Scalar(f32),
    Slice(&'a [f32]),
    ScalarLhs(f32),
    SliceLhs(&'a [f32]),
}

fn unary_in_place(op: UnaryOp, out: &mut [f32]) {
    // One loop per op, so that each inlines its scalar function (and vectorizes where it can).
    macro_rules! each {
        ($($op:ident),*) => {
            match op {
                $(UnaryOp::$op => out.iter_mut().for_each(|v| *v = unary_f32(UnaryOp::$op, *v)),)*
            }
        };
    }
    each!(Neg, Abs, Sqrt, Exp, Log, Erf, Tanh, Sigmoid, Relu)
}

fn binary_in_place(op: BinaryOp, out: &mut [f32], rhs: Rhs) {
    #[inline(always)]
    fn apply(out: &mut [f32], rhs: Rhs, f: impl Fn(f32, f32) -> f32) {
        match rhs {
            Rhs::Scalar(c) => out.iter_mut().for_each(|v| *v = f(*v, c)),
            Rhs::Slice(s) => out.iter_mut().zip(s).for_each(|(v, &y)| *v = f(*v, y)),
            Rhs::ScalarLhs(c) => out.iter_mut().for_each(|v| *v = f(c, *v)),
            Rhs::SliceLhs(s) => out.iter_mut().zip(s).for_each(|(v, &x)| *v = f(x, *v)),
        }
    }
    macro_rules! each {
        ($($op:ident),*) => {
            match op {
                $(BinaryOp::$op => apply(out, rhs, |a, b| binary_f32(BinaryOp::$op, a, b)),)*
            }
        };
    }
    each!(Add, Sub, Mul, Div, Pow)
}

/// A FusedElementwise expression as one WGSL expression over the loaded inputs `v0, v1, ...`,
/// with the same helper functions the one-op kernels use (so fused and unfused agree).
fn expr_wgsl(e: &crate::ir::expr::Expr) -> R<String> {
    use crate::ir::expr::{BinaryOp as B, Expr, UnaryOp as U};
    Ok(match e {
        Expr::Input(i) => format!("v{i}"),
        Expr::Literal(v) => format!("({})", lit(*v)?),
        Expr::Unary(op, a) => {
            let a = expr_wgsl(a)?;
            match op {
                U::Neg => format!("(-{a})"),
                U::Abs => format!("abs({a})"),
                U::Sqrt => format!("sqrt({a})"),
                U::Exp => format!("exp({a})"),
                U::Log => format!("log({a})"),
                U::Erf => format!("erf_({a})"),
                U::Tanh => format!("tanh_({a})"),
                U::Sigmoid => format!("(1.0 / (1.0 + exp(-{a})))"),
                U::Relu => format!("max({a}, 0.0)"),
            }
        }
        Expr::Binary(op, a, b) => {
            let (a, b) = (expr_wgsl(a)?, expr_wgsl(b)?);
            match op {
                B::Add => format!("({a} + {b})"),
                B::Sub => format!("({a} - {b})"),
                B::Mul => format!("({a} * {b})"),
                B::Div => format!("({a} / {b})"),
                B::Pow => format!("pow_({a}, {b})"),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::common::test_util::*;
    use super::*;
    use crate::ir::{attr, Node};

    fn run(expr: &str, inputs: &[&Tensor]) -> Result<Tensor, String> {
        let mut node = Node::new(OP, crate::ir::model::FUSELAB_DOMAIN);
        node.set_attr(attr::string("expression", expr));
        let args: Vec<Option<&Tensor>> = inputs.iter().map(|&t| Some(t)).collect();
        run_at(fused_elementwise, &node, 1, &args).map(|mut v| v.remove(0))
    }

    #[test]
    fn evaluates_with_broadcasting() {
        let a = f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let row = f32s(&[3], &[10., 20., 30.]);
        let col = f32s(&[2, 1], &[1., -1.]);
        let y = run("(mul (add x0 x1) x2)", &[&a, &row, &col]).unwrap();
        assert_eq!(y, f32s(&[2, 3], &[11., 22., 33., -14., -25., -36.]));
        // Literal on the left, a subtree on the right, operand order kept for sub/div/pow.
        let y = run("(sub 1.0 (div x0 2.0))", &[&a]).unwrap();
        assert_eq!(y, f32s(&[2, 3], &[0.5, 0., -0.5, -1., -1.5, -2.]));
        let y = run("(pow (neg (neg x0)) (sub x1 x1))", &[&a, &row]).unwrap();
        assert_eq!(y, f32s(&[2, 3], &[1.; 6]));
        let y = run("(relu (sub x1 x0))", &[&col, &row]).unwrap();
        assert_eq!(y, f32s(&[2, 3], &[9., 19., 29., 11., 21., 31.]));
    }

    #[test]
    fn rank_zero_and_empty_outputs() {
        let s = f32s(&[], &[4.]);
        assert_eq!(run("(sqrt x0)", &[&s]).unwrap(), f32s(&[], &[2.]));
        let e = f32s(&[0, 3], &[]);
        let r = f32s(&[3], &[1., 2., 3.]);
        assert_eq!(run("(add x0 x1)", &[&e, &r]).unwrap(), f32s(&[0, 3], &[]));
    }

    #[test]
    fn spans_chunks_with_inner_broadcast() {
        // [3, 700, 1] * [5]: runs of 5 along the last axis, chunks of 512 cutting through runs.
        let n = 3 * 700;
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let a = f32s(&[3, 700, 1], &a);
        let b = f32s(&[5], &[1., 2., 3., 4., 5.]);
        let y = run("(mul x0 x1)", &[&a, &b]).unwrap();
        let want: Vec<f32> = (0..n * 5)
            .map(|i| (i / 5) as f32 * (i % 5 + 1) as f32)
            .collect();
        assert_eq!(y, f32s(&[3, 700, 5], &want));
    }

    #[test]
    fn non_contiguous_input() {
        let a = f32s(&[2, 2], &[1., 2., 3., 4.]);
        let at = match &a {
            Tensor::F32(x) => Tensor::F32(x.t().to_owned()),
            _ => unreachable!(),
        };
        let y = run("(sub x0 x1)", &[&at, &a]).unwrap();
        assert_eq!(y, f32s(&[2, 2], &[0., 1., -1., 0.]));
    }

    #[test]
    fn errors_name_the_problem() {
        let a = f32s(&[2], &[1., 2.]);
        let e = run("(add x0 x1)", &[&a]).unwrap_err();
        assert!(e.contains("x1 is out of range"), "{e}");
        let e = run("(add x0", &[&a]).unwrap_err();
        assert!(e.contains("never closed"), "{e}");
        let i = i64s(&[2], &[1, 2]);
        let e = run("(neg x0)", &[&i]).unwrap_err();
        assert!(e.contains("int64"), "{e}");
        let b = f32s(&[3], &[1., 2., 3.]);
        let e = run("(add x0 x1)", &[&a, &b]).unwrap_err();
        assert!(e.contains("cannot be broadcast"), "{e}");
        let node = Node::new(OP, crate::ir::model::FUSELAB_DOMAIN);
        let e = run_at(fused_elementwise, &node, 1, &[Some(&a)]).unwrap_err();
        assert!(e.contains("'expression'"), "{e}");
    }
}
