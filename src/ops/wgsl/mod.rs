//! WGSL kernel generators. Every kernel is generated for one node with its shapes baked in as
//! constants (a session is prepared for fixed input shapes), so the text is short and the
//! compiler sees every loop bound. Element types in kernels are 4 bytes: f32 (ONNX float32, and
//! float16 computed in float32: held as f16 where the device has `shader-f16`, converted at each
//! load and store by [`with_half_bindings`]; otherwise widened on upload and narrowed on
//! readback; rounded where a Cast asks for float16: [`F16_ROUND`]), i32 (ONNX int32 and int64, range-checked on upload, and
//! uint8/int8, which only data movement and the quantized ops take) and u32 0/1 (bool); constant
//! uint8/int8 that an op reads as packed bytes (`Op::packed_byte_inputs`: MatMulNBits' and
//! DynamicQuantizeMatMul's weights and zero points) is four bytes to a u32 word.

use std::fmt::Write;

use crate::tensor::DType;

mod conv;
mod gather_nd;
mod half;
mod matmul;
mod quant;
mod transformer;

pub(in crate::ops) use conv::max_pool;
pub use conv::{conv, Conv};
pub use gather_nd::gather_nd;
pub use half::with_half_bindings;
pub use matmul::{matmul, matmul_nbits, MatMul, NBits, SMALL_M};
pub use quant::{
    dynamic_quantize_linear, dynamic_quantize_matmul, matmul_integer, Dqmm, EXACT_DIV,
};
pub use transformer::{
    attention_core, cache_append, embed_layer_norm, layer_norm, mha_core, rotary, AttentionCore,
    Embed, LayerNorm, MhaCore, Rotary, RotaryRows, MAX_ATTENTION_SEQ,
};

/// Threads per workgroup of the one-thread-per-element kernels and the row reductions.
pub const WG: u32 = 64;
/// Side of the MatMul tiles (a TILE×TILE workgroup, tiles of A and B in workgroup memory).
pub const TILE: u32 = 16;
const MAX_GROUPS_X: u32 = 65535;

/// A WGSL element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    F32,
    I32,
    U32,
}

impl Ty {
    /// The type the GPU holds ONNX type `d` in. The one place float16 becomes float32.
    pub fn of(d: DType) -> Result<Ty, String> {
        match d {
            DType::F32 | DType::F16 => Ok(Ty::F32),
            DType::I32 | DType::I64 | DType::U8 | DType::I8 => Ok(Ty::I32),
            DType::BOOL => Ok(Ty::U32),
            other => Err(format!(
                "{} tensors are not supported on webgpu",
                other.name()
            )),
        }
    }
    pub fn wgsl(self) -> &'static str {
        match self {
            Ty::F32 => "f32",
            Ty::I32 => "i32",
            Ty::U32 => "u32",
        }
    }
    pub fn zero(self) -> &'static str {
        match self {
            Ty::F32 => "0.0",
            Ty::I32 => "0i",
            Ty::U32 => "0u",
        }
    }
}

/// A WGSL f32 literal that reads back as exactly `v`. Written as the f32's exact value in
/// f64 digits: the shortest f32 spelling of the extremes ("3.4028235e38") is, read exactly,
/// past f32's range, which Chromium's WGSL compiler rejects.
pub fn lit(v: f32) -> Result<String, String> {
    if !v.is_finite() {
        return Err(format!("constant {v} has no WGSL literal"));
    }
    let s = format!("{:?}", v as f64);
    Ok(if s.contains(['.', 'e']) {
        s
    } else {
        format!("{s}.0")
    })
}

/// Helper functions an expression may call: `erf_`, `tanh_` (clamped: large |x| overflows
/// exp-based tanh to NaN on some drivers), `pow_` (integral exponents of negative bases, as
/// ONNX Pow allows and WGSL's pow does not).
pub const PRELUDE: &str = r#"
fn erf_(x: f32) -> f32 {
  // Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7.
  let a = abs(x);
  let t = 1.0 / (1.0 + 0.3275911 * a);
  let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);
  return select(y, -y, x < 0.0);
}
fn tanh_(x: f32) -> f32 { return tanh(clamp(x, -15.0, 15.0)); }
fn pow_(x: f32, y: f32) -> f32 {
  if (y == 2.0) { return x * x; }
  if (y == 3.0) { return x * x * x; }
  if (y == 1.0) { return x; }
  if (y == 0.5) { return sqrt(x); }
  if (x < 0.0 && y == floor(y)) {
    let r = pow(-x, y);
    return select(r, -r, (i32(y) & 1) == 1);
  }
  return pow(x, y);
}
"#;

/// `fn f16r_(x: f32) -> f32`: `x` rounded to the nearest float16 (ties to even, overflow to
/// infinity, subnormals kept), held as f32. Bit arithmetic rather than `pack2x16float`, whose
/// rounding WGSL leaves to the implementation, so every adapter rounds as the reference does.
pub const F16_ROUND: &str = r#"
fn f16r_(x: f32) -> f32 {
  let b = bitcast<u32>(x);
  let s = b & 0x80000000u;
  let a = b & 0x7fffffffu;
  if (a >= 0x7f800000u) { return x; }
  if (a >= 0x477ff000u) { return bitcast<f32>(s | 0x7f800000u); }
  if (a < 0x38800000u) {
    let q = round(bitcast<f32>(a) * 16777216.0) / 16777216.0;
    return bitcast<f32>(s | bitcast<u32>(q));
  }
  let r = (a + 0xfffu + ((a >> 13u) & 1u)) & 0xffffe000u;
  return bitcast<f32>(s | r);
}
"#;

/// One kernel launch: the shader, its workgroup counts, and what its bindings are, in order
/// (bindings 0.. are the reads, then the writes).
#[derive(Clone, Debug)]
pub struct Dispatch {
    pub wgsl: String,
    pub groups: [u32; 3],
    pub reads: Vec<Bind>,
    pub writes: Vec<Bind>,
}

/// A binding: a node input or output by position, or a scratch buffer of the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bind {
    In(usize),
    Out(usize),
    Scratch(usize),
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major strides.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Strides that read `shape` broadcast (numpy rules, aligned right) to `out`: 0 on broadcast
/// dims.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let own = strides(shape);
    let lead = out.len() - shape.len();
    (0..out.len())
        .map(|j| {
            if j < lead || shape[j - lead] == 1 {
                0
            } else {
                own[j - lead]
            }
        })
        .collect()
}

/// Workgroup counts for `threads` threads in groups of `per_group`, spilling into y past the
/// 65,535-group limit of one dimension. Returns the counts and the x-extent in threads.
pub fn grid(threads: usize, per_group: u32) -> ([u32; 3], u32) {
    let groups = threads.div_ceil(per_group as usize).max(1) as u32;
    let x = groups.min(MAX_GROUPS_X);
    let y = groups.div_ceil(x);
    ([x, y, 1], x * per_group)
}

pub(super) fn bindings(src: &mut String, reads: &[Ty], writes: &[Ty]) {
    for (i, t) in reads.iter().enumerate() {
        let _ = writeln!(
            src,
            "@group(0) @binding({i}) var<storage, read> in{i}: array<{}>;",
            t.wgsl()
        );
    }
    for (j, t) in writes.iter().enumerate() {
        let _ = writeln!(
            src,
            "@group(0) @binding({}) var<storage, read_write> out{j}: array<{}>;",
            reads.len() + j,
            t.wgsl()
        );
    }
}

/// How an elementwise kernel reads one input: element `base + Σ c_j · strides[j]` for output
/// coordinates `c`.
#[derive(Clone, Debug)]
pub struct Access {
    pub ty: Ty,
    pub base: usize,
    pub strides: Vec<usize>,
}

impl Access {
    /// Reading `shape` broadcast to `out`.
    pub fn broadcast(ty: Ty, shape: &[usize], out: &[usize]) -> Access {
        Access {
            ty,
            base: 0,
            strides: broadcast_strides(shape, out),
        }
    }
}

/// One thread per output element: `out0[i] = expr`, where the expression reads `v0, v1, ...`
/// (input k at its access pattern) and may use the output coordinates `c0, c1, ...`.
pub fn elementwise(out: &[usize], out_ty: Ty, ins: &[Access], expr: &str) -> Dispatch {
    let n = numel(out);
    let out_strides = strides(out);
    let mut s = String::new();
    let tys: Vec<Ty> = ins.iter().map(|a| a.ty).collect();
    bindings(&mut s, &tys, &[out_ty]);
    s.push_str(PRELUDE);
    let groups = thread_kernel(&mut s, n);
    for (j, (&d, &st)) in out.iter().zip(&out_strides).enumerate() {
        // A zero-size output has stride and size 0 here; no thread gets past the bound, but WGSL
        // refuses a division by a constant zero, so both are written as at least 1.
        let _ = writeln!(s, "  let c{j} = (i / {}u) % {}u;", st.max(1), d.max(1));
    }
    for (k, a) in ins.iter().enumerate() {
        let contiguous = a.base == 0 && a.strides == out_strides;
        let offset = if contiguous {
            "i".to_string()
        } else {
            let mut terms: Vec<String> = a
                .strides
                .iter()
                .enumerate()
                .filter(|(_, &st)| st != 0)
                .map(|(j, &st)| format!("c{j} * {st}u"))
                .collect();
            if a.base != 0 || terms.is_empty() {
                terms.push(format!("{}u", a.base));
            }
            terms.join(" + ")
        };
        let _ = writeln!(s, "  let v{k} = in{k}[{offset}];");
    }
    let _ = writeln!(s, "  out0[i] = {expr};\n}}");
    Dispatch {
        wgsl: s,
        groups,
        reads: (0..ins.len()).map(Bind::In).collect(),
        writes: vec![Bind::Out(0)],
    }
}

/// A workgroup-wide reduction of `v` (sum or max) into every thread's return value. Uses the
/// workgroup array `red`.
pub(super) fn reduce_fn(s: &mut String) {
    let _ = writeln!(
        s,
        "var<workgroup> red: array<f32, {WG}>;\nfn wg_sum(v: f32, l: u32) -> f32 {{\n  red[l] = v;\n  workgroupBarrier();\n  for (var w = {half}u; w > 0u; w = w / 2u) {{\n    if (l < w) {{ red[l] = red[l] + red[l + w]; }}\n    workgroupBarrier();\n  }}\n  let r = red[0];\n  workgroupBarrier();\n  return r;\n}}\nfn wg_max(v: f32, l: u32) -> f32 {{\n  red[l] = v;\n  workgroupBarrier();\n  for (var w = {half}u; w > 0u; w = w / 2u) {{\n    if (l < w) {{ red[l] = max(red[l], red[l + w]); }}\n    workgroupBarrier();\n  }}\n  let r = red[0];\n  workgroupBarrier();\n  return r;\n}}",
        half = WG / 2
    );
}

/// Header of a one-thread-per-element kernel over `total` elements: defines `i` (the element);
/// threads past the end return. The dispatch's workgroups are returned.
pub(super) fn thread_kernel(s: &mut String, total: usize) -> [u32; 3] {
    let (groups, xthreads) = grid(total, WG);
    let _ = writeln!(
        s,
        "@compute @workgroup_size({WG})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {{\n  let i = gid.x + gid.y * {xthreads}u;\n  if (i >= {total}u) {{ return; }}"
    );
    groups
}

/// Header of a one-workgroup-per-row kernel over `rows` rows: defines `r` (the row) and `l`
/// (the lane); rows past the end return (uniformly: `r` depends on the workgroup only).
pub(super) fn row_kernel(s: &mut String, rows: usize) -> [u32; 3] {
    let (groups, _) = grid(rows, 1);
    let _ = writeln!(
        s,
        "@compute @workgroup_size({WG})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{\n  let r = wid.x + wid.y * {}u;\n  let l = lid.x;\n  if (r >= {rows}u) {{ return; }}",
        groups[0]
    );
    groups
}

/// Softmax over rows of `len` contiguous elements.
pub fn softmax(rows: usize, len: usize) -> Dispatch {
    let mut s = String::new();
    bindings(&mut s, &[Ty::F32], &[Ty::F32]);
    reduce_fn(&mut s);
    let groups = row_kernel(&mut s, rows);
    let _ = writeln!(
        s,
        "  let base = r * {len}u;\n  var m = -3.4028234663852886e38;\n  for (var j = l; j < {len}u; j = j + {WG}u) {{ m = max(m, in0[base + j]); }}\n  m = wg_max(m, l);\n  var t = 0.0;\n  for (var j = l; j < {len}u; j = j + {WG}u) {{ t = t + exp(in0[base + j] - m); }}\n  t = wg_sum(t, l);\n  for (var j = l; j < {len}u; j = j + {WG}u) {{ out0[base + j] = exp(in0[base + j] - m) / t; }}\n}}"
    );
    Dispatch {
        wgsl: s,
        groups,
        reads: vec![Bind::In(0)],
        writes: vec![Bind::Out(0)],
    }
}

/// Sum (or mean) over rows of `len` contiguous elements: one output per row.
pub fn reduce_rows(rows: usize, len: usize, mean: bool) -> Dispatch {
    let mut s = String::new();
    bindings(&mut s, &[Ty::F32], &[Ty::F32]);
    reduce_fn(&mut s);
    let groups = row_kernel(&mut s, rows);
    let scale = if mean {
        format!(
            " / {}",
            lit(len.max(1) as f32).unwrap_or_else(|_| "1.0".into())
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "  let base = r * {len}u;\n  var t = 0.0;\n  for (var j = l; j < {len}u; j = j + {WG}u) {{ t = t + in0[base + j]; }}\n  t = wg_sum(t, l);\n  if (l == 0u) {{ out0[r] = t{scale}; }}\n}}"
    );
    Dispatch {
        wgsl: s,
        groups,
        reads: vec![Bind::In(0)],
        writes: vec![Bind::Out(0)],
    }
}

/// Gather along `axis`: out = data[..axis] ++ indices.shape ++ data[axis+1..]. Indices are
/// i32; negative ones count from the end; out-of-range ones are clamped (a GPU kernel cannot
/// fail; the reference backend reports them).
pub fn gather(data: &[usize], indices: &[usize], axis: usize, ty: Ty) -> Dispatch {
    let out: Vec<usize> = data[..axis]
        .iter()
        .chain(indices)
        .chain(&data[axis + 1..])
        .copied()
        .collect();
    let n = numel(&out);
    let out_st = strides(&out);
    let data_st = strides(data);
    let idx_st = strides(indices);
    let mut s = String::new();
    bindings(&mut s, &[ty, Ty::I32], &[ty]);
    let groups = thread_kernel(&mut s, n);
    for (j, (&d, &st)) in out.iter().zip(&out_st).enumerate() {
        // A zero-size output has stride and size 0 here; no thread gets past the bound, but WGSL
        // refuses a division by a constant zero, so both are written as at least 1.
        let _ = writeln!(s, "  let c{j} = (i / {}u) % {}u;", st.max(1), d.max(1));
    }
    let q = indices.len();
    let mut idx_terms = vec!["0u".to_string()];
    for (t, &st) in idx_st.iter().enumerate() {
        idx_terms.push(format!("c{} * {st}u", axis + t));
    }
    let dim = data[axis];
    let _ = writeln!(
        s,
        "  var g = in1[{}];\n  if (g < 0) {{ g = g + {dim}i; }}\n  let gi = u32(clamp(g, 0i, {}i));",
        idx_terms.join(" + "),
        dim.saturating_sub(1)
    );
    let mut terms = vec![format!("gi * {}u", data_st[axis])];
    for (j, st) in data_st.iter().enumerate() {
        match j.cmp(&axis) {
            std::cmp::Ordering::Less => terms.push(format!("c{j} * {st}u")),
            std::cmp::Ordering::Greater => terms.push(format!("c{} * {st}u", j - 1 + q)),
            std::cmp::Ordering::Equal => {}
        }
    }
    let _ = writeln!(s, "  out0[i] = in0[{}];\n}}", terms.join(" + "));
    Dispatch {
        wgsl: s,
        groups,
        reads: vec![Bind::In(0), Bind::In(1)],
        writes: vec![Bind::Out(0)],
    }
}

/// Concat: one thread per output element picks the input whose slab along `axis` holds it.
pub fn concat(inputs: &[Vec<usize>], out: &[usize], axis: usize, ty: Ty) -> Dispatch {
    let n = numel(out);
    let out_st = strides(out);
    let mut s = String::new();
    bindings(&mut s, &vec![ty; inputs.len()], &[ty]);
    let groups = thread_kernel(&mut s, n);
    for (j, (&d, &st)) in out.iter().zip(&out_st).enumerate() {
        // A zero-size output has stride and size 0 here; no thread gets past the bound, but WGSL
        // refuses a division by a constant zero, so both are written as at least 1.
        let _ = writeln!(s, "  let c{j} = (i / {}u) % {}u;", st.max(1), d.max(1));
    }
    let mut start = 0usize;
    for (k, shape) in inputs.iter().enumerate() {
        let st = strides(shape);
        let mut terms = vec!["0u".to_string()];
        for (j, stj) in st.iter().enumerate() {
            if j == axis {
                terms.push(format!("(c{j} - {start}u) * {stj}u"));
            } else {
                terms.push(format!("c{j} * {stj}u"));
            }
        }
        let end = start + shape[axis];
        let _ = writeln!(
            s,
            "  if (c{axis} >= {start}u && c{axis} < {end}u) {{ out0[i] = in{k}[{}]; return; }}",
            terms.join(" + ")
        );
        start = end;
    }
    s.push_str("}\n");
    Dispatch {
        wgsl: s,
        groups,
        reads: (0..inputs.len()).map(Bind::In).collect(),
        writes: vec![Bind::Out(0)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_round_trip_and_refuse_non_finite() {
        for v in [0.5f32, 1.0, 1e-5, f32::MIN, 0.7978846, 1.0e-45] {
            let s = lit(v).unwrap();
            assert!(s.contains(['.', 'e']), "{s}");
            assert_eq!(s.parse::<f32>().unwrap(), v, "{s}");
            // In range as an exact (abstract) number, as WGSL compilers read it.
            assert!(s.parse::<f64>().unwrap().abs() <= f32::MAX as f64, "{s}");
        }
        assert!(lit(f32::INFINITY).is_err());
        assert!(lit(f32::NAN).is_err());
    }

    #[test]
    fn broadcast_strides_zero_the_broadcast_dims() {
        assert_eq!(broadcast_strides(&[4], &[2, 3, 4]), vec![0, 0, 1]);
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
        assert_eq!(broadcast_strides(&[2, 3, 4], &[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(broadcast_strides(&[], &[5]), vec![0]);
    }

    #[test]
    fn grids_spill_into_y_past_the_group_limit() {
        assert_eq!(grid(100, 64), ([2, 1, 1], 128));
        let (g, x) = grid(65535 * 64 + 1, 64);
        assert_eq!(g, [65535, 2, 1]);
        assert_eq!(x, 65535 * 64);
        assert_eq!(grid(0, 64).0, [1, 1, 1]);
    }
}
