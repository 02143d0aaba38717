//! Node → GPU work. With every shape fixed (the session traced one run), each node becomes
//! nothing (its output is its input relabelled: Reshape, Squeeze, ...), or dispatches of
//! generated kernels (src/runtime/webgpu/wgsl.rs). Fused ops are one dispatch each.

use crate::ir::Node;
use crate::tensor::{DType, Tensor};

use super::wgsl::{self, lit, numel, strides, Access, Dispatch, LayerNorm, MatMul, Ty};

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
    pub opset: i64,
    pub ins: Vec<Option<Info>>,
    pub outs: Vec<Option<Info>>,
    pub statics: Vec<Option<&'a Tensor>>,
}

type R<T> = Result<T, String>;

impl NodeCtx<'_> {
    fn input(&self, i: usize) -> R<&Info> {
        self.ins
            .get(i)
            .and_then(|x| x.as_ref())
            .ok_or_else(|| format!("input {i} is missing"))
    }
    fn has_input(&self, i: usize) -> bool {
        self.ins.get(i).is_some_and(|x| x.is_some())
    }
    fn out(&self, i: usize) -> R<&Info> {
        self.outs
            .get(i)
            .and_then(|x| x.as_ref())
            .ok_or_else(|| format!("output {i} is missing"))
    }
    fn has_out(&self, i: usize) -> bool {
        self.outs.get(i).is_some_and(|x| x.is_some())
    }
    fn ty(&self, i: usize) -> R<Ty> {
        Ty::of(self.input(i)?.dtype)
    }
    fn out_ty(&self, i: usize) -> R<Ty> {
        Ty::of(self.out(i)?.dtype)
    }
    fn float_attr(&self, name: &str, default: f32) -> f32 {
        self.node.attr_float(name).unwrap_or(default)
    }
    fn int_attr(&self, name: &str, default: i64) -> i64 {
        self.node.attr_int(name).unwrap_or(default)
    }
    /// A broadcast read of input `i` into the output's shape.
    fn bcast(&self, i: usize) -> R<Access> {
        let out = &self.out(0)?.shape;
        let inp = self.input(i)?;
        if inp.shape.len() > out.len() {
            return Err(format!("input {i} has a higher rank than the output"));
        }
        Ok(Access::broadcast(Ty::of(inp.dtype)?, &inp.shape, out))
    }
    /// An elementwise node over inputs `0..n` (all broadcast) computing `expr`.
    fn ew(&self, n: usize, expr: &str) -> R<Lowered> {
        let ins = (0..n).map(|i| self.bcast(i)).collect::<R<Vec<_>>>()?;
        run(wgsl::elementwise(
            &self.out(0)?.shape,
            self.out_ty(0)?,
            &ins,
            expr,
        ))
    }
}

fn run(d: Dispatch) -> R<Lowered> {
    Ok(Lowered::Run {
        dispatches: if d.groups.contains(&0) {
            vec![]
        } else {
            vec![d]
        },
        scratch: vec![],
    })
}

fn norm_axis(axis: i64, rank: usize) -> R<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r.max(1)).contains(&a) {
        Ok(a as usize)
    } else {
        Err(format!("axis {axis} is out of range for rank {rank}"))
    }
}

const GELU: &str = "0.5 * x * (1.0 + erf_(x * 0.70710678118654752))";
const FAST_GELU: &str = "0.5 * x * (1.0 + tanh_(0.7978845608028654 * (x + 0.044715 * x * x * x)))";

/// Lowers one node. Errors name what the WebGPU backend does not do (yet).
pub fn lower(c: &NodeCtx) -> R<Lowered> {
    let op = c.node.op_type.as_str();
    let domain = crate::ir::model::canonical_domain(&c.node.domain);
    let binary = |e: &str| c.ew(2, e);
    let unary = |e: &str| c.ew(1, e);
    match (domain, op) {
        ("", "Reshape" | "Squeeze" | "Unsqueeze" | "Flatten" | "Identity") => Ok(Lowered::Alias),
        ("", "Add") => binary("v0 + v1"),
        ("", "Sub") => binary("v0 - v1"),
        ("", "Mul") => binary("v0 * v1"),
        ("", "Div") => binary("v0 / v1"),
        ("", "Pow") => {
            if c.ty(0)? != Ty::F32 || c.ty(1)? != Ty::F32 {
                return Err("Pow is float32-only on webgpu".into());
            }
            binary("pow_(v0, v1)")
        }
        ("", "Neg") => unary("-v0"),
        ("", "Abs") => unary("abs(v0)"),
        ("", "Sqrt") => unary("sqrt(v0)"),
        ("", "Exp") => unary("exp(v0)"),
        ("", "Log") => unary("log(v0)"),
        ("", "Erf") => unary("erf_(v0)"),
        ("", "Tanh") => unary("tanh_(v0)"),
        ("", "Sigmoid") => unary("1.0 / (1.0 + exp(-v0))"),
        ("", "Relu") => unary(&format!("max(v0, {})", c.ty(0)?.zero())),
        ("", "Equal") => binary("u32(v0 == v1)"),
        ("", "Less") => binary("u32(v0 < v1)"),
        ("", "LessOrEqual") => binary("u32(v0 <= v1)"),
        ("", "Greater") => binary("u32(v0 > v1)"),
        ("", "GreaterOrEqual") => binary("u32(v0 >= v1)"),
        ("", "Not") => unary("u32(v0 == 0u)"),
        ("", "And") => binary("v0 & v1"),
        ("", "Or") => binary("v0 | v1"),
        ("", "Xor") => binary("v0 ^ v1"),
        ("", "Where") => c.ew(3, "select(v2, v1, v0 != 0u)"),
        ("", "Expand") => unary("v0"),
        ("", "Cast") => {
            let (from, to) = (c.ty(0)?, c.out_ty(0)?);
            if from == to {
                return Ok(Lowered::Alias);
            }
            let e = match (from, to) {
                (_, Ty::U32) => format!("u32(v0 != {})", from.zero()),
                (Ty::U32, t) => format!("{}(v0)", t.wgsl()),
                (_, t) => format!("{}(v0)", t.wgsl()),
            };
            unary(&e)
        }
        ("", "EyeLike") => {
            let out = &c.out(0)?.shape;
            if out.len() != 2 {
                return Err("EyeLike needs a 2-D input".into());
            }
            let t = c.out_ty(0)?;
            let one = match t {
                Ty::F32 => "1.0",
                Ty::I32 => "1i",
                Ty::U32 => "1u",
            };
            let k = c.int_attr("k", 0);
            run(wgsl::elementwise(
                out,
                t,
                &[],
                &format!("select({}, {one}, i32(c1) - i32(c0) == {k}i)", t.zero()),
            ))
        }
        ("ai.fuselab", "AddEyeLike") => {
            let out = &c.out(0)?.shape;
            if out.len() != 2 {
                return Err("AddEyeLike needs a 2-D input".into());
            }
            let k = c.int_attr("k", 0);
            let one = match c.ty(0)? {
                Ty::F32 => "1.0",
                Ty::I32 => "1i",
                Ty::U32 => return Err("AddEyeLike of bool".into()),
            };
            unary(&format!(
                "v0 + select({}, {one}, i32(c1) - i32(c0) == {k}i)",
                c.ty(0)?.zero()
            ))
        }
        ("com.microsoft", "Gelu") => c.ew(1, "gelu_(v0)").map(|l| with_fn(l, GELU)),
        ("com.microsoft", "BiasGelu") => c.ew(2, "gelu_(v0 + v1)").map(|l| with_fn(l, GELU)),
        ("com.microsoft", "FastGelu") => {
            let e = if c.has_input(1) {
                "gelu_(v0 + v1)"
            } else {
                "gelu_(v0)"
            };
            let n = if c.has_input(1) { 2 } else { 1 };
            c.ew(n, e).map(|l| with_fn(l, FAST_GELU))
        }
        ("", "Transpose") => {
            let inp = c.input(0)?;
            let rank = inp.shape.len();
            let perm: Vec<usize> = match c.node.attr_ints("perm") {
                Some(p) => p
                    .iter()
                    .map(|&a| norm_axis(a, rank))
                    .collect::<R<Vec<_>>>()?,
                None => (0..rank).rev().collect(),
            };
            let st = strides(&inp.shape);
            let access = Access {
                ty: c.ty(0)?,
                base: 0,
                strides: perm.iter().map(|&p| st[p]).collect(),
            };
            run(wgsl::elementwise(
                &c.out(0)?.shape,
                c.out_ty(0)?,
                &[access],
                "v0",
            ))
        }
        ("", "Slice") => slice(c),
        ("", "Split") => split(c),
        ("", "Concat") => {
            let out = &c.out(0)?.shape;
            let axis = norm_axis(c.int_attr("axis", 0), out.len())?;
            let shapes: Vec<Vec<usize>> = (0..c.ins.len())
                .map(|i| c.input(i).map(|x| x.shape.clone()))
                .collect::<R<_>>()?;
            if shapes.len() > 7 {
                return Err(format!(
                    "Concat of {} inputs (at most 7 on webgpu)",
                    shapes.len()
                ));
            }
            run(wgsl::concat(&shapes, out, axis, c.out_ty(0)?))
        }
        ("", "Gather") => {
            let data = &c.input(0)?.shape;
            let axis = norm_axis(c.int_attr("axis", 0), data.len())?;
            run(wgsl::gather(data, &c.input(1)?.shape, axis, c.ty(0)?))
        }
        ("", "MatMul") => matmul(c),
        ("", "Gemm") => gemm(c, "v"),
        ("com.microsoft", "FusedGemm") => {
            let act = c.node.attr_string("activation").unwrap_or_default();
            let e = match act.as_str() {
                "Relu" => "max(v, 0.0)",
                "Tanh" => "tanh_(v)",
                "Sigmoid" => "1.0 / (1.0 + exp(-v))",
                "" => "v",
                other => return Err(format!("FusedGemm activation '{other}'")),
            };
            gemm(c, e)
        }
        ("", "Softmax") => {
            let x = &c.input(0)?.shape;
            let axis = norm_axis(
                c.int_attr("axis", if c.opset >= 13 { -1 } else { 1 }),
                x.len(),
            )?;
            // Before opset 13 the input is flattened to 2-D at `axis`, which for the last axis
            // is the same as per-row softmax.
            if axis + 1 != x.len() && c.opset >= 13 {
                return Err(format!(
                    "Softmax over axis {axis} of a rank-{} input (webgpu does the last axis)",
                    x.len()
                ));
            }
            let len: usize = x[axis..].iter().product();
            run(wgsl::softmax(numel(x) / len.max(1), len))
        }
        ("", "ReduceMean" | "ReduceSum") => reduce(c, op == "ReduceMean"),
        ("", "LayerNormalization") => {
            let x = &c.input(0)?.shape;
            let axis = norm_axis(c.int_attr("axis", -1), x.len())?;
            let len: usize = x[axis..].iter().product();
            layer_norm(
                c,
                len,
                None,
                None,
                (c.has_out(1).then_some(1), c.has_out(2).then_some(2), None),
            )
        }
        ("com.microsoft", "SkipLayerNormalization") => {
            let x = &c.input(0)?.shape;
            let len = *x.last().ok_or("SkipLayerNormalization of a scalar")?;
            let skip_len = numel(&c.input(1)?.shape);
            if skip_len == 0 || !skip_len.is_multiple_of(len.max(1)) {
                return Err("skip does not tile the input's rows".into());
            }
            layer_norm(
                c,
                len,
                Some((1, skip_len)),
                c.has_input(4).then_some(4),
                (
                    c.has_out(1).then_some(1),
                    c.has_out(2).then_some(2),
                    c.has_out(3).then_some(3),
                ),
            )
        }
        ("ai.fuselab", "FusedElementwise") => {
            let text = c
                .node
                .attr_string("expression")
                .ok_or("FusedElementwise without an expression")?;
            let n = c.ins.len();
            let e = crate::ir::expr::Expr::parse(&text, n).map_err(|e| e.to_string())?;
            c.ew(n, &expr_wgsl(&e)?)
        }
        ("com.microsoft", "Attention") => attention(c),
        ("com.microsoft", "EmbedLayerNormalization") => embed(c),
        _ => Err(format!(
            "{op} ({}) has no webgpu kernel yet",
            if domain.is_empty() { "ai.onnx" } else { domain }
        )),
    }
}

/// Adds `fn gelu_(x)` computing `body` to the kernel.
fn with_fn(l: Lowered, body: &str) -> Lowered {
    prepend(l, &format!("fn gelu_(x: f32) -> f32 {{ return {body}; }}"))
}

/// Puts `text` (a helper function) ahead of every kernel of `l`.
fn prepend(l: Lowered, text: &str) -> Lowered {
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

fn static_ints(c: &NodeCtx, i: usize, what: &str) -> R<Option<Vec<i64>>> {
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

fn slice(c: &NodeCtx) -> R<Lowered> {
    let inp = c.input(0)?;
    let rank = inp.shape.len();
    let starts = static_ints(c, 1, "starts")?.ok_or("Slice without starts")?;
    let axes: Vec<usize> = match static_ints(c, 3, "axes")? {
        Some(a) => a.iter().map(|&a| norm_axis(a, rank)).collect::<R<_>>()?,
        None => (0..starts.len()).collect(),
    };
    let steps = static_ints(c, 4, "steps")?.unwrap_or_else(|| vec![1; starts.len()]);
    let st = strides(&inp.shape);
    let mut base = 0usize;
    let mut access: Vec<usize> = st.clone();
    for (k, &ax) in axes.iter().enumerate() {
        let d = inp.shape[ax] as i64;
        let step = *steps.get(k).unwrap_or(&1);
        if step == 0 {
            return Err("Slice step 0".into());
        }
        let mut s = starts[k];
        if s < 0 {
            s += d;
        }
        // Clamp per the spec: [0, d] for positive steps, [0, d-1] for negative ones.
        let s = if step > 0 {
            s.clamp(0, d)
        } else {
            s.clamp(0, (d - 1).max(0))
        };
        if step < 0 {
            return Err("Slice with a negative step has no webgpu kernel yet".into());
        }
        base += s as usize * st[ax];
        access[ax] = st[ax] * step as usize;
    }
    run(wgsl::elementwise(
        &c.out(0)?.shape,
        c.out_ty(0)?,
        &[Access {
            ty: c.ty(0)?,
            base,
            strides: access,
        }],
        "v0",
    ))
}

fn split(c: &NodeCtx) -> R<Lowered> {
    let inp = c.input(0)?;
    let axis = norm_axis(c.int_attr("axis", 0), inp.shape.len())?;
    let st = strides(&inp.shape);
    let mut dispatches = Vec::new();
    let mut start = 0usize;
    for o in 0..c.outs.len() {
        let Some(info) = &c.outs[o] else {
            continue;
        };
        let mut d = wgsl::elementwise(
            &info.shape,
            Ty::of(info.dtype)?,
            &[Access {
                ty: c.ty(0)?,
                base: start * st[axis],
                strides: st.clone(),
            }],
            "v0",
        );
        d.writes = vec![wgsl::Bind::Out(o)];
        start += info.shape[axis];
        if !d.groups.contains(&0) && numel(&info.shape) > 0 {
            dispatches.push(d);
        }
    }
    Ok(Lowered::Run {
        dispatches,
        scratch: vec![],
    })
}

fn matmul(c: &NodeCtx) -> R<Lowered> {
    let (a, b) = (&c.input(0)?.shape, &c.input(1)?.shape);
    if c.ty(0)? != Ty::F32 {
        return Err("MatMul is float32-only on webgpu".into());
    }
    // 1-D operands are promoted (a row / a column) and the added dim dropped from the output.
    let a2: Vec<usize> = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.clone()
    };
    let b2: Vec<usize> = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.clone()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let n = b2[b2.len() - 1];
    if b2[b2.len() - 2] != k {
        return Err(format!("MatMul inner dims differ: {a:?} x {b:?}"));
    }
    let ab = &a2[..a2.len() - 2];
    let bb = &b2[..b2.len() - 2];
    let rank = ab.len().max(bb.len());
    let batch: Vec<usize> = (0..rank)
        .map(|j| {
            let da = if j + ab.len() >= rank {
                ab[j + ab.len() - rank]
            } else {
                1
            };
            let db = if j + bb.len() >= rank {
                bb[j + bb.len() - rank]
            } else {
                1
            };
            da.max(db)
        })
        .collect();
    let mat_strides = |dims: &[usize], mat: usize| -> Vec<usize> {
        let own = strides(dims);
        (0..rank)
            .map(|j| {
                if j + dims.len() < rank {
                    0
                } else {
                    let jj = j + dims.len() - rank;
                    if dims[jj] == 1 {
                        0
                    } else {
                        own[jj] * mat
                    }
                }
            })
            .collect()
    };
    run(wgsl::matmul(&MatMul {
        m,
        n,
        k,
        batch: &batch,
        a_batch: mat_strides(ab, m * k),
        b_batch: mat_strides(bb, k * n),
        trans_a: false,
        trans_b: false,
        extra: None,
        epilogue: "acc".into(),
    }))
}

/// Gemm / FusedGemm: `act(alpha · A'B' + beta · C)`; `act` is a WGSL expression in `v`.
fn gemm(c: &NodeCtx, act: &str) -> R<Lowered> {
    let (a, b) = (&c.input(0)?.shape, &c.input(1)?.shape);
    if a.len() != 2 || b.len() != 2 {
        return Err("Gemm needs 2-D A and B".into());
    }
    let ta = c.int_attr("transA", 0) != 0;
    let tb = c.int_attr("transB", 0) != 0;
    let (m, k) = if ta { (a[1], a[0]) } else { (a[0], a[1]) };
    let n = if tb { b[0] } else { b[1] };
    let alpha = lit(c.float_attr("alpha", 1.0))?;
    let beta = lit(c.float_attr("beta", 1.0))?;
    let (extra, v) = if c.has_input(2) {
        let cs = &c.input(2)?.shape;
        let st = wgsl::broadcast_strides(cs, &[m, n]);
        (
            Some(format!("row * {}u + col * {}u", st[0], st[1])),
            format!("{alpha} * acc + {beta} * e"),
        )
    } else {
        (None, format!("{alpha} * acc"))
    };
    run(wgsl::matmul(&MatMul {
        m,
        n,
        k,
        batch: &[],
        a_batch: vec![],
        b_batch: vec![],
        trans_a: ta,
        trans_b: tb,
        extra,
        epilogue: format!("act_({v})"),
    }))
    .map(|l| prepend(l, &format!("fn act_(v: f32) -> f32 {{ return {act}; }}")))
}

fn reduce(c: &NodeCtx, mean: bool) -> R<Lowered> {
    let x = &c.input(0)?.shape;
    let rank = x.len();
    let axes: Vec<i64> = if c.opset >= 18 || (c.node.op_type == "ReduceSum" && c.opset >= 13) {
        static_ints(c, 1, "axes")?.unwrap_or_default()
    } else {
        c.node
            .attr_ints("axes")
            .map(|a| a.to_vec())
            .unwrap_or_default()
    };
    let mut axes: Vec<usize> = axes.iter().map(|&a| norm_axis(a, rank)).collect::<R<_>>()?;
    if axes.is_empty() {
        if c.int_attr("noop_with_empty_axes", 0) != 0 {
            return Ok(Lowered::Alias);
        }
        axes = (0..rank).collect();
    }
    axes.sort_unstable();
    axes.dedup();
    let first = rank - axes.len();
    if axes.iter().enumerate().any(|(i, &a)| a != first + i) {
        return Err(format!(
            "{} over axes {axes:?}: webgpu reduces trailing axes only",
            c.node.op_type
        ));
    }
    let len: usize = x[first..].iter().product();
    run(wgsl::reduce_rows(numel(x) / len.max(1), len, mean))
}

fn layer_norm(
    c: &NodeCtx,
    len: usize,
    skip: Option<(usize, usize)>,
    bias: Option<usize>,
    (mean_out, inv_std_out, sum_out): (Option<usize>, Option<usize>, Option<usize>),
) -> R<Lowered> {
    let x = &c.input(0)?.shape;
    let (gamma_in, beta_in) = if skip.is_some() { (2, 3) } else { (1, 2) };
    if numel(&c.input(gamma_in)?.shape) != len {
        return Err("gamma must have one element per normalized element".into());
    }
    run(wgsl::layer_norm(&LayerNorm {
        rows: numel(x) / len.max(1),
        len,
        epsilon: c.float_attr("epsilon", 1e-5),
        skip_len: skip.map(|s| s.1),
        mean_out,
        inv_std_out,
        sum_out,
        x_in: 0,
        gamma_in,
        beta_in: c.has_input(beta_in).then_some(beta_in),
        skip_in: skip.map(|s| s.0),
        bias_in: bias,
    })?)
}

fn attention(c: &NodeCtx) -> R<Lowered> {
    let x = &c.input(0)?.shape;
    let w = &c.input(1)?.shape;
    let [b, s, h_in] = x[..] else {
        return Err("Attention input must be [batch, seq, hidden]".into());
    };
    if w.len() != 2 || w[0] != h_in || w[1] % 3 != 0 {
        return Err(format!(
            "Attention weights {w:?} are not [{h_in}, 3·hidden]"
        ));
    }
    for (i, what) in [
        (4, "past"),
        (5, "attention_bias"),
        (6, "past_sequence_length"),
    ] {
        if c.has_input(i) {
            return Err(format!("Attention input {i} ({what}) is not supported"));
        }
    }
    let h = w[1] / 3;
    let heads = c.int_attr("num_heads", 0);
    if heads <= 0 || h % heads as usize != 0 {
        return Err(format!(
            "num_heads {heads} does not divide the hidden size {h}"
        ));
    }
    let heads = heads as usize;
    let d = h / heads;
    let masked = c.has_input(3);
    if masked && c.input(3)?.shape != [b, s] {
        return Err(format!(
            "mask_index {:?} (webgpu takes the raw [{b}, {s}] mask)",
            c.input(3)?.shape
        ));
    }
    let scale = match c.float_attr("scale", 0.0) {
        0.0 => 1.0 / (d as f32).sqrt(),
        v => v,
    };
    // 1: the packed projection (+ bias) into scratch; 2: scores, softmax and context.
    let mut proj = wgsl::matmul(&MatMul {
        m: b * s,
        n: 3 * h,
        k: h_in,
        batch: &[],
        a_batch: vec![],
        b_batch: vec![],
        trans_a: false,
        trans_b: false,
        extra: c.has_input(2).then(|| "col".to_string()),
        epilogue: if c.has_input(2) {
            "acc + e".into()
        } else {
            "acc".into()
        },
    });
    proj.writes = vec![wgsl::Bind::Scratch(0)];
    let core = wgsl::attention_core(&wgsl::AttentionCore {
        batch: b,
        seq: s,
        heads,
        head_dim: d,
        scale,
        filter: c.float_attr("mask_filter_value", -10000.0),
        causal: c.int_attr("unidirectional", 0) != 0,
        masked,
    })?;
    Ok(Lowered::Run {
        dispatches: vec![proj, core],
        scratch: vec![(b * s * 3 * h * 4) as u64],
    })
}

fn embed(c: &NodeCtx) -> R<Lowered> {
    let ids = &c.input(0)?.shape;
    let [b, s] = ids[..] else {
        return Err("input_ids must be [batch, seq]".into());
    };
    let word = &c.input(2)?.shape;
    let pos = &c.input(3)?.shape;
    let hidden = *word.last().ok_or("word_embedding must be 2-D")?;
    if c.has_input(7) {
        return Err("the mask input has no webgpu kernel yet".into());
    }
    let segments = if c.has_input(1) && c.has_input(4) {
        Some(c.input(4)?.shape[0])
    } else {
        None
    };
    let embed = wgsl::embed_layer_norm(&wgsl::Embed {
        batch: b,
        seq: s,
        hidden,
        words: word[0],
        positions: pos[0],
        segments,
        position_rows: if c.has_input(8) {
            Some(c.input(8)?.shape[0])
        } else {
            None
        },
        epsilon: c.float_attr("epsilon", 1e-12),
        sum_out: c.has_out(2),
    })?;
    let mut dispatches = vec![embed];
    if c.has_out(1) {
        // Without a mask input, mask_index is all zeros (the reference kernel's contract).
        let mut zeros = wgsl::elementwise(&c.out(1)?.shape, Ty::I32, &[], "0i");
        zeros.writes = vec![wgsl::Bind::Out(1)];
        dispatches.push(zeros);
    }
    Ok(Lowered::Run {
        dispatches,
        scratch: vec![],
    })
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
