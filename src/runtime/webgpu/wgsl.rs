//! WGSL kernel generators. Every kernel is generated for one node with its shapes baked in as
//! constants (a session is prepared for fixed input shapes), so the text is short and the
//! compiler sees every loop bound. Element types on the GPU are 4 bytes: f32, i32 (ONNX int32
//! and int64, range-checked on upload) and u32 0/1 (bool).

use std::fmt::Write;

use crate::tensor::DType;

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
    pub fn of(d: DType) -> Result<Ty, String> {
        match d {
            DType::F32 => Ok(Ty::F32),
            DType::I32 | DType::I64 => Ok(Ty::I32),
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

fn bindings(src: &mut String, reads: &[Ty], writes: &[Ty]) {
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
    let (groups, xthreads) = grid(n, WG);
    let out_strides = strides(out);
    let mut s = String::new();
    let tys: Vec<Ty> = ins.iter().map(|a| a.ty).collect();
    bindings(&mut s, &tys, &[out_ty]);
    s.push_str(PRELUDE);
    let _ = writeln!(
        s,
        "@compute @workgroup_size({WG})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {{"
    );
    let _ = writeln!(s, "  let i = gid.x + gid.y * {xthreads}u;");
    let _ = writeln!(s, "  if (i >= {n}u) {{ return; }}");
    for (j, (&d, &st)) in out.iter().zip(&out_strides).enumerate() {
        let _ = writeln!(s, "  let c{j} = (i / {st}u) % {d}u;");
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

/// Batched `out[b] = epilogue(A[b] · B[b])`, tiled in workgroup memory. `a_batch`/`b_batch`:
/// per output batch coordinate, the element strides of A's and B's matrices (0 where
/// broadcast). `trans_a`/`trans_b` read A as [K, M] / B as [N, K]. The epilogue sees `acc`
/// (the dot product), `row`, `col` and may read `in2` (a bias or C) through `c_index`.
pub struct MatMul<'a> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: &'a [usize],
    pub a_batch: Vec<usize>,
    pub b_batch: Vec<usize>,
    pub trans_a: bool,
    pub trans_b: bool,
    /// Extra read (binding 2), e.g. Gemm's C or a bias, with its index expression in `row`/`col`.
    pub extra: Option<String>,
    /// WGSL expression of the output element from `acc` (and `e`, the extra input's element).
    pub epilogue: String,
}

/// Rows up to which `matmul` uses one thread per output element instead of tiles: with few
/// rows most of a tile's threads idle, and its barriers cost. On lavapipe (a CPU Vulkan) a
/// [1, 64]·[64, 1000] product took 3.9 ms tiled, 0.27 ms this way, and [8, 64]·[64, 256] 1.08
/// against 0.77 ms. Adjacent threads read adjacent columns of B, so reads stay coalesced.
pub const SMALL_M: usize = 32;

pub fn matmul(p: &MatMul) -> Dispatch {
    if p.m <= SMALL_M {
        return matmul_small(p);
    }
    let (m, n, k) = (p.m, p.n, p.k);
    let batches = numel(p.batch).max(1);
    let mut s = String::new();
    let reads = matmul_reads(p);
    bindings(&mut s, &vec![Ty::F32; reads.len()], &[Ty::F32]);
    s.push_str(PRELUDE);
    let _ = writeln!(
        s,
        "var<workgroup> ta: array<array<f32, {TILE}>, {TILE}>;\nvar<workgroup> tb: array<array<f32, {TILE}>, {TILE}>;"
    );
    let _ = writeln!(
        s,
        "@compute @workgroup_size({TILE}, {TILE})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{"
    );
    let _ = writeln!(
        s,
        "  let bz = wid.z;\n  let row = wid.y * {TILE}u + lid.y;\n  let col = wid.x * {TILE}u + lid.x;"
    );
    batch_bases(&mut s, p);
    let a_at = if p.trans_a {
        format!("abase + (t + lid.x) * {m}u + row")
    } else {
        format!("abase + row * {k}u + t + lid.x")
    };
    let b_at = if p.trans_b {
        format!("bbase + col * {k}u + t + lid.y")
    } else {
        format!("bbase + (t + lid.y) * {n}u + col")
    };
    let _ = writeln!(s, "  var acc = 0.0;");
    let _ = writeln!(
        s,
        "  for (var t = 0u; t < {k}u; t = t + {TILE}u) {{\n    var av = 0.0;\n    if (row < {m}u && t + lid.x < {k}u) {{ av = in0[{a_at}]; }}\n    ta[lid.y][lid.x] = av;\n    var bv = 0.0;\n    if (col < {n}u && t + lid.y < {k}u) {{ bv = in1[{b_at}]; }}\n    tb[lid.y][lid.x] = bv;\n    workgroupBarrier();\n    for (var q = 0u; q < {TILE}u; q = q + 1u) {{ acc = acc + ta[lid.y][q] * tb[q][lid.x]; }}\n    workgroupBarrier();\n  }}"
    );
    let _ = writeln!(s, "  if (row < {m}u && col < {n}u) {{");
    if let Some(idx) = &p.extra {
        let _ = writeln!(s, "    let e = in2[{idx}];");
    }
    let _ = writeln!(
        s,
        "    out0[bz * {}u + row * {n}u + col] = {};\n  }}\n}}",
        m * n,
        p.epilogue
    );
    Dispatch {
        wgsl: s,
        groups: [
            n.div_ceil(TILE as usize) as u32,
            m.div_ceil(TILE as usize) as u32,
            batches as u32,
        ],
        reads,
        writes: vec![Bind::Out(0)],
    }
}

/// A, B and, when the epilogue reads it, the extra input.
fn matmul_reads(p: &MatMul) -> Vec<Bind> {
    let mut reads = vec![Bind::In(0), Bind::In(1)];
    if p.extra.is_some() {
        reads.push(Bind::In(2));
    }
    reads
}

/// Defines `abase` / `bbase`, the offsets of A's and B's matrices for output batch `bz`.
fn batch_bases(s: &mut String, p: &MatMul) {
    let bst = strides(p.batch);
    let mut a_base = vec!["0u".to_string()];
    let mut b_base = vec!["0u".to_string()];
    for (j, (&d, &st)) in p.batch.iter().zip(&bst).enumerate() {
        let _ = writeln!(s, "  let b{j} = (bz / {st}u) % {d}u;");
        if p.a_batch[j] != 0 {
            a_base.push(format!("b{j} * {}u", p.a_batch[j]));
        }
        if p.b_batch[j] != 0 {
            b_base.push(format!("b{j} * {}u", p.b_batch[j]));
        }
    }
    let _ = writeln!(
        s,
        "  let abase = {};\n  let bbase = {};",
        a_base.join(" + "),
        b_base.join(" + ")
    );
}

/// `matmul` for few rows: one thread per output element, the dot product from global memory.
fn matmul_small(p: &MatMul) -> Dispatch {
    let (m, n, k) = (p.m, p.n, p.k);
    let batches = numel(p.batch).max(1);
    let total = batches * m * n;
    let (groups, xthreads) = grid(total, WG);
    let mut s = String::new();
    let reads = matmul_reads(p);
    bindings(&mut s, &vec![Ty::F32; reads.len()], &[Ty::F32]);
    s.push_str(PRELUDE);
    let _ = writeln!(
        s,
        "@compute @workgroup_size({WG})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {{\n  let i = gid.x + gid.y * {xthreads}u;\n  if (i >= {total}u) {{ return; }}\n  let col = i % {n}u;\n  let row = (i / {n}u) % {m}u;\n  let bz = i / {};",
        m * n
    );
    batch_bases(&mut s, p);
    let a_at = if p.trans_a {
        format!("q * {m}u + row")
    } else {
        format!("row * {k}u + q")
    };
    let b_at = if p.trans_b {
        format!("col * {k}u + q")
    } else {
        format!("q * {n}u + col")
    };
    let _ = writeln!(
        s,
        "  var acc = 0.0;\n  for (var q = 0u; q < {k}u; q = q + 1u) {{ acc = acc + in0[abase + {a_at}] * in1[bbase + {b_at}]; }}"
    );
    if let Some(idx) = &p.extra {
        let _ = writeln!(s, "  let e = in2[{idx}];");
    }
    let _ = writeln!(s, "  out0[i] = {};\n}}", p.epilogue);
    Dispatch {
        wgsl: s,
        groups,
        reads,
        writes: vec![Bind::Out(0)],
    }
}

/// A workgroup-wide reduction of `v` (sum or max) into every thread's return value. Uses the
/// workgroup array `red`.
fn reduce_fn(s: &mut String) {
    let _ = writeln!(
        s,
        "var<workgroup> red: array<f32, {WG}>;\nfn wg_sum(v: f32, l: u32) -> f32 {{\n  red[l] = v;\n  workgroupBarrier();\n  for (var w = {half}u; w > 0u; w = w / 2u) {{\n    if (l < w) {{ red[l] = red[l] + red[l + w]; }}\n    workgroupBarrier();\n  }}\n  let r = red[0];\n  workgroupBarrier();\n  return r;\n}}\nfn wg_max(v: f32, l: u32) -> f32 {{\n  red[l] = v;\n  workgroupBarrier();\n  for (var w = {half}u; w > 0u; w = w / 2u) {{\n    if (l < w) {{ red[l] = max(red[l], red[l + w]); }}\n    workgroupBarrier();\n  }}\n  let r = red[0];\n  workgroupBarrier();\n  return r;\n}}",
        half = WG / 2
    );
}

/// Header of a one-workgroup-per-row kernel over `rows` rows: defines `r` (the row) and `l`
/// (the lane); rows past the end return (uniformly: `r` depends on the workgroup only).
fn row_kernel(s: &mut String, rows: usize) -> [u32; 3] {
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

/// What a layer norm reads besides its input: the row sum is `x + skip + bias` when those are
/// set (SkipLayerNormalization), and it may write that sum out (`input_skip_bias_sum`).
pub struct LayerNorm {
    pub rows: usize,
    pub len: usize,
    pub epsilon: f32,
    /// Elements of the skip input: it repeats every `skip_len` elements (a multiple of `len`).
    pub skip_len: Option<usize>,
    /// Which of (mean, inv_std_dev, sum) outputs are written, as output positions.
    pub mean_out: Option<usize>,
    pub inv_std_out: Option<usize>,
    pub sum_out: Option<usize>,
    /// Positions of the node inputs: x, gamma, beta, skip, bias.
    pub x_in: usize,
    pub gamma_in: usize,
    pub beta_in: Option<usize>,
    pub skip_in: Option<usize>,
    pub bias_in: Option<usize>,
}

pub fn layer_norm(p: &LayerNorm) -> Result<Dispatch, String> {
    let mut reads = vec![Bind::In(p.x_in), Bind::In(p.gamma_in)];
    let mut names = vec!["x", "gamma"];
    if let Some(b) = p.beta_in {
        reads.push(Bind::In(b));
        names.push("beta");
    }
    if let Some(sk) = p.skip_in {
        reads.push(Bind::In(sk));
        names.push("skip");
    }
    if let Some(b) = p.bias_in {
        reads.push(Bind::In(b));
        names.push("bias");
    }
    let mut writes = vec![Bind::Out(0)];
    let mut wnames = vec!["y"];
    for (o, name) in [
        (p.mean_out, "mean"),
        (p.inv_std_out, "inv_std"),
        (p.sum_out, "sum"),
    ] {
        if let Some(o) = o {
            writes.push(Bind::Out(o));
            wnames.push(name);
        }
    }
    let mut s = String::new();
    bindings(
        &mut s,
        &vec![Ty::F32; reads.len()],
        &vec![Ty::F32; writes.len()],
    );
    // Readable aliases for the numbered bindings.
    let alias = |name: &str, list: &[&str], prefix: &str| -> Option<String> {
        list.iter()
            .position(|n| *n == name)
            .map(|i| format!("{prefix}{i}"))
    };
    let x = alias("x", &names, "in").expect("x");
    let gamma = alias("gamma", &names, "in").expect("gamma");
    reduce_fn(&mut s);
    let len = p.len;
    let groups = row_kernel(&mut s, p.rows);
    let mut val = format!("{x}[base + j]");
    if let (Some(skip), Some(skip_len)) = (alias("skip", &names, "in"), p.skip_len) {
        val = format!("{val} + {skip}[(base % {skip_len}u) + j]");
    }
    if let Some(bias) = alias("bias", &names, "in") {
        val = format!("{val} + {bias}[j]");
    }
    let _ = writeln!(
        s,
        "  let base = r * {len}u;\n  var t = 0.0;\n  for (var j = l; j < {len}u; j = j + {WG}u) {{ t = t + ({val}); }}\n  let mean = wg_sum(t, l) / {lenf};\n  var v = 0.0;\n  for (var j = l; j < {len}u; j = j + {WG}u) {{ let d = ({val}) - mean; v = v + d * d; }}\n  let inv = 1.0 / sqrt(wg_sum(v, l) / {lenf} + {eps});",
        lenf = lit(len.max(1) as f32)?,
        eps = lit(p.epsilon)?
    );
    let beta = alias("beta", &names, "in")
        .map(|b| format!(" + {b}[j]"))
        .unwrap_or_default();
    let mut body = format!("let s = {val}; out0[base + j] = (s - mean) * inv * {gamma}[j]{beta};");
    if let Some(o) = alias("sum", &wnames, "out") {
        let _ = write!(body, " {o}[base + j] = s;");
    }
    let _ = writeln!(
        s,
        "  for (var j = l; j < {len}u; j = j + {WG}u) {{ {body} }}"
    );
    if let Some(o) = alias("mean", &wnames, "out") {
        let _ = writeln!(s, "  if (l == 0u) {{ {o}[r] = mean; }}");
    }
    if let Some(o) = alias("inv_std", &wnames, "out") {
        let _ = writeln!(s, "  if (l == 0u) {{ {o}[r] = inv; }}");
    }
    s.push_str("}\n");
    Ok(Dispatch {
        wgsl: s,
        groups,
        reads,
        writes,
    })
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
    let (groups, xthreads) = grid(n, WG);
    let out_st = strides(&out);
    let data_st = strides(data);
    let idx_st = strides(indices);
    let mut s = String::new();
    bindings(&mut s, &[ty, Ty::I32], &[ty]);
    let _ = writeln!(
        s,
        "@compute @workgroup_size({WG})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {{\n  let i = gid.x + gid.y * {xthreads}u;\n  if (i >= {n}u) {{ return; }}"
    );
    for (j, (&d, &st)) in out.iter().zip(&out_st).enumerate() {
        let _ = writeln!(s, "  let c{j} = (i / {st}u) % {d}u;");
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
    let (groups, xthreads) = grid(n, WG);
    let out_st = strides(out);
    let mut s = String::new();
    bindings(&mut s, &vec![ty; inputs.len()], &[ty]);
    let _ = writeln!(
        s,
        "@compute @workgroup_size({WG})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {{\n  let i = gid.x + gid.y * {xthreads}u;\n  if (i >= {n}u) {{ return; }}"
    );
    for (j, (&d, &st)) in out.iter().zip(&out_st).enumerate() {
        let _ = writeln!(s, "  let c{j} = (i / {st}u) % {d}u;");
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

/// Attention's second pass: one workgroup per (batch, head, query) over the packed [B·S, 3H]
/// projection in `in0`: scores for every key into workgroup memory (scaled, then the padding
/// mask `in1` [B, S] (int32, key kept where > 0) adds `filter` and causal later keys add the
/// lowest float, as the reference kernel does), softmax, and the weighted sum of V rows.
pub struct AttentionCore {
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    pub filter: f32,
    pub causal: bool,
    pub masked: bool,
}

/// Longest sequence the attention kernel keeps a score row of in workgroup memory.
pub const MAX_ATTENTION_SEQ: usize = 2048;

pub fn attention_core(p: &AttentionCore) -> Result<Dispatch, String> {
    let (s, d, h) = (p.seq, p.head_dim, p.heads * p.head_dim);
    if s > MAX_ATTENTION_SEQ {
        return Err(format!(
            "sequence {s} is longer than the webgpu attention kernel's {MAX_ATTENTION_SEQ}"
        ));
    }
    let mut src = String::new();
    let reads = if p.masked {
        vec![Ty::F32, Ty::I32]
    } else {
        vec![Ty::F32]
    };
    bindings(&mut src, &reads, &[Ty::F32]);
    reduce_fn(&mut src);
    let _ = writeln!(src, "var<workgroup> sc: array<f32, {}>;", s.max(1));
    let groups = row_kernel(&mut src, p.batch * p.heads * s);
    // A later key (causal) gets the lowest float added, padded or not; otherwise a padded key
    // gets the filter (the reference kernel's rule: one additive mask value per score).
    let pad = if p.masked {
        format!("in1[b * {s}u + j] <= 0")
    } else {
        "false".into()
    };
    let later = if p.causal { "j > q" } else { "false" };
    let mask = format!(
        "    if ({later}) {{ x = x + -3.4028234663852886e38; }} else if ({pad}) {{ x = x + {}; }}\n",
        lit(p.filter)?
    );
    let _ = writeln!(
        src,
        "  let q = r % {s}u;\n  let hd = (r / {s}u) % {heads}u;\n  let b = r / ({s}u * {heads}u);\n  let qrow = (b * {s}u + q) * {w}u + hd * {d}u;\n  var m = -3.4028234663852886e38;\n  for (var j = l; j < {s}u; j = j + {WG}u) {{\n    let krow = (b * {s}u + j) * {w}u + {h}u + hd * {d}u;\n    var x = 0.0;\n    for (var t = 0u; t < {d}u; t = t + 1u) {{ x = x + in0[qrow + t] * in0[krow + t]; }}\n    x = x * {scale};\n{mask}    sc[j] = x;\n    m = max(m, x);\n  }}\n  m = wg_max(m, l);\n  var total = 0.0;\n  for (var j = l; j < {s}u; j = j + {WG}u) {{ let e = exp(sc[j] - m); sc[j] = e; total = total + e; }}\n  total = wg_sum(total, l);\n  for (var t = l; t < {d}u; t = t + {WG}u) {{\n    var acc = 0.0;\n    for (var j = 0u; j < {s}u; j = j + 1u) {{ acc = acc + sc[j] * in0[(b * {s}u + j) * {w}u + {h2}u + hd * {d}u + t]; }}\n    out0[(b * {s}u + q) * {h}u + hd * {d}u + t] = acc / total;\n  }}\n}}",
        heads = p.heads,
        w = 3 * h,
        h2 = 2 * h,
        scale = lit(p.scale)?,
    );
    let mut r = vec![Bind::Scratch(0)];
    if p.masked {
        r.push(Bind::In(3));
    }
    Ok(Dispatch {
        wgsl: src,
        groups,
        reads: r,
        writes: vec![Bind::Out(0)],
    })
}

/// EmbedLayerNormalization, one workgroup per token: word + position (+ segment) rows summed,
/// then normalized. Ids are bound-clamped (the reference backend reports bad ids). Inputs by
/// node position: 0 ids, 1 segment ids?, 2 word, 3 position, 4 segment?, 5 gamma, 6 beta,
/// 8 position_ids?.
pub struct Embed {
    pub batch: usize,
    pub seq: usize,
    pub hidden: usize,
    pub words: usize,
    pub positions: usize,
    /// Rows of the segment table, when segments are given.
    pub segments: Option<usize>,
    /// Rows of position_ids ([1, S] or [B, S]), when given.
    pub position_rows: Option<usize>,
    pub epsilon: f32,
    pub sum_out: bool,
}

pub fn embed_layer_norm(p: &Embed) -> Result<Dispatch, String> {
    let mut reads = vec![Bind::In(0)];
    let mut tys = vec![Ty::I32];
    let idx = |b: Bind, t: Ty, reads: &mut Vec<Bind>, tys: &mut Vec<Ty>| {
        reads.push(b);
        tys.push(t);
        reads.len() - 1
    };
    let seg_ids = p
        .segments
        .map(|_| idx(Bind::In(1), Ty::I32, &mut reads, &mut tys));
    let word = idx(Bind::In(2), Ty::F32, &mut reads, &mut tys);
    let pos = idx(Bind::In(3), Ty::F32, &mut reads, &mut tys);
    let seg = p
        .segments
        .map(|_| idx(Bind::In(4), Ty::F32, &mut reads, &mut tys));
    let gamma = idx(Bind::In(5), Ty::F32, &mut reads, &mut tys);
    let beta = idx(Bind::In(6), Ty::F32, &mut reads, &mut tys);
    let pos_ids = p
        .position_rows
        .map(|_| idx(Bind::In(8), Ty::I32, &mut reads, &mut tys));
    let mut writes = vec![Bind::Out(0)];
    if p.sum_out {
        writes.push(Bind::Out(2));
    }
    let mut s = String::new();
    bindings(&mut s, &tys, &vec![Ty::F32; writes.len()]);
    reduce_fn(&mut s);
    let (seq, hid) = (p.seq, p.hidden);
    let groups = row_kernel(&mut s, p.batch * seq);
    let clampi = |e: String, n: usize| format!("u32(clamp({e}, 0i, {}i))", n.saturating_sub(1));
    let _ = writeln!(
        s,
        "  let b = r / {seq}u;\n  let t = r % {seq}u;\n  let wrow = {} * {hid}u;",
        clampi("in0[r]".into(), p.words)
    );
    let prow = match (pos_ids, p.position_rows) {
        (Some(k), Some(rows)) => {
            let at = if rows == 1 {
                "t".to_string()
            } else {
                "r".to_string()
            };
            clampi(format!("in{k}[{at}]"), p.positions)
        }
        _ => clampi("i32(t)".into(), p.positions),
    };
    let _ = writeln!(s, "  let prow = {prow} * {hid}u;");
    let mut val = format!("in{word}[wrow + j] + in{pos}[prow + j]");
    if let (Some(si), Some(st), Some(n)) = (seg_ids, seg, p.segments) {
        let _ = writeln!(
            s,
            "  let srow = {} * {hid}u;",
            clampi(format!("in{si}[r]"), n)
        );
        val = format!("{val} + in{st}[srow + j]");
    }
    let sum = if p.sum_out {
        " out1[r * {hid}u + j] = v;".replace("{hid}", &hid.to_string())
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "  var tot = 0.0;\n  for (var j = l; j < {hid}u; j = j + {WG}u) {{ tot = tot + ({val}); }}\n  let mean = wg_sum(tot, l) / {hf};\n  var var_ = 0.0;\n  for (var j = l; j < {hid}u; j = j + {WG}u) {{ let dd = ({val}) - mean; var_ = var_ + dd * dd; }}\n  let inv = 1.0 / sqrt(wg_sum(var_, l) / {hf} + {eps});\n  for (var j = l; j < {hid}u; j = j + {WG}u) {{ let v = {val}; out0[r * {hid}u + j] = (v - mean) * inv * in{gamma}[j] + in{beta}[j];{sum} }}\n}}",
        hf = lit(hid.max(1) as f32)?,
        eps = lit(p.epsilon)?,
    );
    Ok(Dispatch {
        wgsl: s,
        groups,
        reads,
        writes,
    })
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
