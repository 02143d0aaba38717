//! DynamicQuantizeMatMul in one dispatch: each workgroup finds A's range itself (every
//! workgroup reads all of A, so no second dispatch or global synchronisation is needed),
//! quantizes its rows of A into workgroup memory, and takes the integer product with the packed
//! bytes of B. Quantization matches the reference bit for bit: float32 divisions are computed
//! correctly rounded in integer arithmetic ([`EXACT_DIV`]; WGSL's `/` may be off by ulps, which
//! would move ties) and WGSL's `round` is round-half-to-even.

use super::*;

/// `fn div_(x: f32, y: f32) -> f32`: `x / y` correctly rounded (to nearest, ties to even) for
/// normal operands and a normal quotient, by long division of the significands; other cases
/// (zero, subnormal, infinite or NaN operands or quotient) are the hardware's `x / y`.
pub const EXACT_DIV: &str = r#"
fn div_(x: f32, y: f32) -> f32 {
  let q0 = x / y;
  let bx = bitcast<u32>(x);
  let by = bitcast<u32>(y);
  let ex = i32((bx >> 23u) & 0xffu);
  let ey = i32((by >> 23u) & 0xffu);
  if (ex == 0 || ey == 0 || ex == 255 || ey == 255) { return q0; }
  var a = (bx & 0x7fffffu) | 0x800000u;
  let b = (by & 0x7fffffu) | 0x800000u;
  var e = ex - ey;
  if (a < b) { a = a << 1u; e = e - 1; }
  var q = 0u;
  var rem = a;
  for (var i = 0u; i < 25u; i = i + 1u) {
    q = q << 1u;
    if (rem >= b) { rem = rem - b; q = q | 1u; }
    rem = rem << 1u;
  }
  var m = q >> 1u;
  if ((q & 1u) == 1u && (rem != 0u || (m & 1u) == 1u)) { m = m + 1u; }
  if (m == 0x1000000u) { m = m >> 1u; e = e + 1; }
  let be = e + 127;
  if (be <= 0 || be >= 255) { return q0; }
  return bitcast<f32>(((bx ^ by) & 0x80000000u) | (u32(be) << 23u) | (m & 0x7fffffu));
}
"#;

/// Emits what the quantizing kernels share: the workgroup reductions, [`EXACT_DIV`],
/// `fn dq_params_(l: u32) -> vec2<f32>`, the scale and zero point of `in0`'s `len` elements as
/// DynamicQuantizeLinear computes them (the range widened to hold 0; every thread of the
/// workgroup calls it, lane `l`), and `fn dq_(x: f32, p: vec2<f32>) -> f32`, `x` quantized to
/// uint8 with them.
fn dynamic_quant_fns(s: &mut String, len: usize) {
    reduce_fn(s);
    s.push_str(EXACT_DIV);
    let _ = writeln!(
        s,
        "fn dq_params_(l: u32) -> vec2<f32> {{
  var lo = 0.0;
  var hi = 0.0;
  for (var i = l; i < {len}u; i = i + {WG}u) {{ let v = in0[i]; lo = min(lo, v); hi = max(hi, v); }}
  hi = wg_max(hi, l);
  lo = -wg_max(-lo, l);
  let scale = div_(select(hi - lo, 1.0, hi == lo), 255.0);
  return vec2<f32>(scale, round(clamp(0.0 - div_(lo, scale), 0.0, 255.0)));
}}
fn dq_(x: f32, p: vec2<f32>) -> f32 {{ return clamp(round(div_(x, p.x)) + p.y, 0.0, 255.0); }}"
    );
}

/// Elements of X one DynamicQuantizeLinear workgroup quantizes (each finds X's range first).
const DQL_CHUNK: usize = 64 * WG as usize;

/// DynamicQuantizeLinear of `len` float32 values in one dispatch: y (uint8 held as i32), the
/// scale, and the zero point (i32), bit-exact with the reference.
pub fn dynamic_quantize_linear(len: usize) -> Dispatch {
    let mut s = String::new();
    bindings(&mut s, &[Ty::F32], &[Ty::I32, Ty::F32, Ty::I32]);
    dynamic_quant_fns(&mut s, len);
    let (groups, _) = grid(len, DQL_CHUNK as u32);
    let _ = writeln!(
        s,
        "@compute @workgroup_size({WG})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
  let l = lid.x;
  let p = dq_params_(l);
  let g = wid.x + wid.y * {gx}u;
  if (g == 0u && l == 0u) {{ out1[0] = p.x; out2[0] = i32(p.y); }}
  let end = min(g * {DQL_CHUNK}u + {DQL_CHUNK}u, {len}u);
  for (var i = g * {DQL_CHUNK}u + l; i < end; i = i + {WG}u) {{ out0[i] = i32(dq_(in0[i], p)); }}
}}",
        gx = groups[0]
    );
    Dispatch {
        wgsl: s,
        groups,
        reads: vec![Bind::In(0)],
        writes: vec![Bind::Out(0), Bind::Out(1), Bind::Out(2)],
    }
}

/// MatMulInteger: `Y [batch, M, N] = (A - a_zp) · (B - b_zp)` in int32, one thread per output,
/// A [batch·M, K] and B [K, N] held as i32 (uint8/int8 widened), a_zp a scalar, b_zp a scalar
/// or one per column (`b_zp`: its element count, 0 when absent).
pub fn matmul_integer(rows: usize, k: usize, n: usize, a_zp: bool, b_zp: usize) -> Dispatch {
    let total = rows * n;
    let mut reads = vec![Bind::In(0), Bind::In(1)];
    let mut za = "0".to_string();
    if a_zp {
        reads.push(Bind::In(2));
        za = "in2[0]".into();
    }
    let mut zb = "0".to_string();
    if b_zp > 0 {
        zb = format!(
            "in{}[{}]",
            reads.len(),
            if b_zp == 1 { "0u" } else { "col" }
        );
        reads.push(Bind::In(3));
    }
    let mut s = String::new();
    bindings(&mut s, &vec![Ty::I32; reads.len()], &[Ty::I32]);
    let groups = thread_kernel(&mut s, total);
    let _ = writeln!(
        s,
        "  let row = i / {n}u;
  let col = i % {n}u;
  let za = {za};
  let zb = {zb};
  var acc = 0i;
  for (var kk = 0u; kk < {k}u; kk = kk + 1u) {{ acc = acc + (in0[row * {k}u + kk] - za) * (in1[kk * {n}u + col] - zb); }}
  out0[i] = acc;
}}"
    );
    Dispatch {
        wgsl: s,
        groups,
        reads,
        writes: vec![Bind::Out(0)],
    }
}

/// Rows of A one workgroup computes (its threads are 64 columns of B).
const ROWS: usize = 8;
/// Columns of A quantized into workgroup memory at a time.
const KC: usize = 256;

/// `Y [M, N] = ((Aq - a_zp) · (B - b_zp)) · (a_scale · b_scale) + bias`, A float32 [M, K]
/// quantized as DynamicQuantizeLinear does, B [K, N] and its zero point (scalar or [N]) packed
/// bytes (`signed`: int8, else uint8), b_scale float32 (1 or N values), bias float32 [N].
pub struct Dqmm {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub signed: bool,
    /// Elements of B's zero point (0: none, 1 or N).
    pub zero_points: usize,
    /// Elements of b_scale (1 or N).
    pub scales: usize,
    pub bias: bool,
}

pub fn dynamic_quantize_matmul(p: &Dqmm) -> Dispatch {
    let (m, k, n) = (p.m, p.k, p.n);
    let mut reads = vec![Bind::In(0), Bind::In(1), Bind::In(2)];
    let mut tys = vec![Ty::F32, Ty::U32, Ty::F32];
    let zp_at = (p.zero_points > 0).then(|| {
        reads.push(Bind::In(3));
        tys.push(Ty::U32);
        tys.len() - 1
    });
    let bias_at = p.bias.then(|| {
        reads.push(Bind::In(4));
        tys.push(Ty::F32);
        tys.len() - 1
    });
    let mut s = String::new();
    bindings(&mut s, &tys, &[Ty::F32]);
    dynamic_quant_fns(&mut s, m * k);
    // Byte `i` of a packed binding, as a signed or unsigned integer.
    let byte = if p.signed {
        "bitcast<i32>(((w >> ((i % 4u) * 8u)) & 0xffu) << 24u) >> 24u"
    } else {
        "i32((w >> ((i % 4u) * 8u)) & 0xffu)"
    };
    let _ = writeln!(
        s,
        "fn b_(i: u32) -> i32 {{\n  let w = in1[i / 4u];\n  return {byte};\n}}"
    );
    let zp = match zp_at {
        Some(z) => {
            let _ = writeln!(
                s,
                "fn z_(i: u32) -> i32 {{\n  let w = in{z}[i / 4u];\n  return {byte};\n}}"
            );
            if p.zero_points == 1 {
                "z_(0u)"
            } else {
                "z_(col)"
            }
            .to_string()
        }
        None => "0".to_string(),
    };
    let bscale = if p.scales == 1 { "in2[0]" } else { "in2[col]" };
    let bias = bias_at.map_or(String::new(), |b| format!(" + in{b}[col]"));
    let _ = writeln!(s, "var<workgroup> aq: array<i32, {}>;", ROWS * KC);
    let _ = writeln!(
        s,
        "@compute @workgroup_size({WG})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
  let l = lid.x;
  let col = wid.x * {WG}u + l;
  let row0 = wid.y * {ROWS}u;
  let p = dq_params_(l);
  let scale = p.x;
  let zp = p.y;
  var acc: array<i32, {ROWS}>;
  for (var k0 = 0u; k0 < {k}u; k0 = k0 + {KC}u) {{
    for (var t = l; t < {rk}u; t = t + {WG}u) {{
      let r = row0 + t / {KC}u;
      let kk = k0 + t % {KC}u;
      var q = 0;
      if (r < {m}u && kk < {k}u) {{
        q = i32(dq_(in0[r * {k}u + kk], p) - zp);
      }}
      aq[t] = q;
    }}
    workgroupBarrier();
    if (col < {n}u) {{
      let bz = {zp};
      let kend = min({KC}u, {k}u - k0);
      for (var kk = 0u; kk < kend; kk = kk + 1u) {{
        let bv = b_((k0 + kk) * {n}u + col) - bz;
        for (var r = 0u; r < {ROWS}u; r = r + 1u) {{ acc[r] = acc[r] + aq[r * {KC}u + kk] * bv; }}
      }}
    }}
    workgroupBarrier();
  }}
  if (col >= {n}u) {{ return; }}
  let s = scale * {bscale};
  for (var r = 0u; r < {ROWS}u; r = r + 1u) {{
    if (row0 + r < {m}u) {{ out0[(row0 + r) * {n}u + col] = f32(acc[r]) * s{bias}; }}
  }}
}}",
        rk = ROWS * KC,
    );
    Dispatch {
        wgsl: s,
        groups: [n.div_ceil(WG as usize) as u32, m.div_ceil(ROWS) as u32, 1],
        reads,
        writes: vec![Bind::Out(0)],
    }
}
