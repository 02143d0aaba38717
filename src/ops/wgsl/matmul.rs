//! Matrix-product kernels: tiled in workgroup memory, or one thread per output for few rows.

use super::*;
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
    let mut s = String::new();
    let reads = matmul_reads(p);
    bindings(&mut s, &vec![Ty::F32; reads.len()], &[Ty::F32]);
    s.push_str(PRELUDE);
    let groups = thread_kernel(&mut s, total);
    let _ = writeln!(
        s,
        "  let col = i % {n}u;\n  let row = (i / {n}u) % {m}u;\n  let bz = i / {};",
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

/// MatMulNBits on float32 (`ops::quant_ms` states the contract): `out[r, n] = Σ_k A[r, k] ·
/// ((code(n, k) − zp(n, k / block)) · scale[n, k / block]) (+ bias[n])`, one thread per output
/// element. B and packed zero points are read as bytes four to a u32 word
/// (`Op::packed_byte_inputs`); bindings: A, B, scales, then zero points and bias when given.
pub struct NBits {
    /// Rows of A (its elements / K).
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub bits: usize,
    pub block: usize,
    pub zero_points: bool,
    pub bias: bool,
}

pub fn matmul_nbits(p: &NBits) -> Dispatch {
    let (m, k, n, bits, bs) = (p.m, p.k, p.n, p.bits, p.block);
    let nb = k.div_ceil(bs);
    let blob = bs * bits / 8;
    let zrow = (nb * bits).div_ceil(8);
    let mask = (1u32 << bits) - 1;
    let total = m * n;
    let mut reads = vec![Bind::In(0), Bind::In(1), Bind::In(2)];
    let mut tys = vec![Ty::F32, Ty::U32, Ty::F32];
    let zp_at = if p.zero_points {
        reads.push(Bind::In(3));
        tys.push(Ty::U32);
        Some(tys.len() - 1)
    } else {
        None
    };
    let bias_at = if p.bias {
        reads.push(Bind::In(5));
        tys.push(Ty::F32);
        Some(tys.len() - 1)
    } else {
        None
    };
    let mut s = String::new();
    bindings(&mut s, &tys, &[Ty::F32]);
    // Code `j` of the blob starting at byte `at` of B: byte j·bits/8, low bits first.
    let _ = writeln!(
        s,
        "fn code1(at: u32, j: u32) -> u32 {{\n  let byte = at + j * {bits}u / 8u;\n  let w = in1[byte / 4u];\n  return ((w >> ((byte % 4u) * 8u)) >> ((j * {bits}u) % 8u)) & {mask}u;\n}}"
    );
    if let Some(z) = zp_at {
        let _ = writeln!(
            s,
            "fn zp(col: u32, blk: u32) -> f32 {{\n  let byte = col * {zrow}u + blk * {bits}u / 8u;\n  let w = in{z}[byte / 4u];\n  return f32(((w >> ((byte % 4u) * 8u)) >> ((blk * {bits}u) % 8u)) & {mask}u);\n}}"
        );
    } else {
        let _ = writeln!(
            s,
            "fn zp(col: u32, blk: u32) -> f32 {{ return {}.0; }}",
            1u32 << (bits - 1)
        );
    }
    let groups = thread_kernel(&mut s, total);
    let _ = writeln!(
        s,
        "  let col = i % {n}u;\n  let row = i / {n}u;\n  var acc = 0.0;\n  for (var blk = 0u; blk < {nb}u; blk = blk + 1u) {{\n    let sc = in2[col * {nb}u + blk];\n    let z = zp(col, blk);\n    let at = (col * {nb}u + blk) * {blob}u;\n    let len = min({bs}u, {k}u - blk * {bs}u);\n    for (var j = 0u; j < len; j = j + 1u) {{\n      acc = acc + in0[row * {k}u + blk * {bs}u + j] * ((f32(code1(at, j)) - z) * sc);\n    }}\n  }}"
    );
    match bias_at {
        Some(b) => {
            let _ = writeln!(s, "  out0[i] = acc + in{b}[col];\n}}");
        }
        None => {
            let _ = writeln!(s, "  out0[i] = acc;\n}}");
        }
    }
    Dispatch {
        wgsl: s,
        groups,
        reads,
        writes: vec![Bind::Out(0)],
    }
}
