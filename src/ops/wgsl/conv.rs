//! Windowed kernels in one dispatch, one thread per output element: direct convolution (Conv,
//! FusedConv), looping over its group's input channels and the kernel window, bias first and
//! then (FusedConv) Z and the activation in the epilogue; MaxPool. Any number of spatial axes;
//! taps that fall in the padding are skipped (the check is emitted only on axes that can reach
//! it).

use super::*;
use crate::ops::window::Axis;

/// Y [N, M, out...] = act(B[m] + Σ X[n, g·cg + c, o·s + k·d - pb] · W[m, c, k] + Z), with
/// `g = m / (M / group)`.
pub struct Conv<'a> {
    /// X's batch and channels.
    pub n: usize,
    pub c: usize,
    /// Output channels, and input channels per group (W's dim 1).
    pub m: usize,
    pub cg: usize,
    pub group: usize,
    pub(in crate::ops) axes: &'a [Axis],
    pub bias: bool,
    /// Z, Y's shape, added before the activation.
    pub z: bool,
    /// The activation as a WGSL expression of `v0` ("v0": none).
    pub act: &'a str,
}

pub fn conv(p: &Conv) -> Dispatch {
    let outs: Vec<usize> = p.axes.iter().map(|a| a.out).collect();
    let ins: Vec<usize> = p.axes.iter().map(|a| a.inp).collect();
    let ks: Vec<usize> = p.axes.iter().map(|a| a.k).collect();
    let (osz, isz, ksz) = (numel(&outs), numel(&ins), numel(&ks));
    let (ist, kst) = (strides(&ins), strides(&ks));
    let total = p.n * p.m * osz;
    let mut reads = vec![Bind::In(0), Bind::In(1)];
    if p.bias {
        reads.push(Bind::In(2));
    }
    if p.z {
        reads.push(Bind::In(3));
    }
    let mut s = String::new();
    bindings(&mut s, &vec![Ty::F32; reads.len()], &[Ty::F32]);
    if p.act != "v0" {
        s.push_str(PRELUDE);
    }
    let mg = p.m / p.group.max(1);
    let groups = thread_kernel(&mut s, total);
    let _ = writeln!(
        s,
        "  let m = (i / {osz}u) % {m}u;\n  let xb = (i / {mo}u) * {cisz}u + (m / {mg}u) * {gisz}u;\n  let wb = m * {wm}u;",
        m = p.m,
        mo = p.m * osz,
        cisz = p.c * isz,
        gisz = p.cg * isz,
        wm = p.cg * ksz,
    );
    out_coords(&mut s, &outs);
    let start = if p.bias { "in2[m]" } else { "0.0" };
    let _ = writeln!(
        s,
        "  var acc = {start};\n  for (var c = 0u; c < {cg}u; c = c + 1u) {{\n  let xc = xb + c * {isz}u;\n  let wc = wb + c * {ksz}u;",
        cg = p.cg
    );
    window_loops(&mut s, p.axes);
    let _ = writeln!(
        s,
        "  acc = acc + in0[xc{}] * in1[wc{}];",
        terms("p", &ist),
        terms("k", &kst)
    );
    s.push_str(&"  }\n".repeat(p.axes.len() + 1));
    let z = if p.z {
        format!(" + in{}[i]", reads.len() - 1)
    } else {
        String::new()
    };
    let _ = writeln!(s, "  let v0 = acc{z};\n  out0[i] = {};\n}}", p.act);
    Dispatch {
        wgsl: s,
        groups,
        reads,
        writes: vec![Bind::Out(0)],
    }
}

/// MaxPool over `planes` planes (N·C) of float32 X: the largest tap inside the input.
pub(in crate::ops) fn max_pool(planes: usize, axes: &[Axis]) -> Dispatch {
    let outs: Vec<usize> = axes.iter().map(|a| a.out).collect();
    let ins: Vec<usize> = axes.iter().map(|a| a.inp).collect();
    let total = planes * numel(&outs);
    let mut s = String::new();
    bindings(&mut s, &[Ty::F32], &[Ty::F32]);
    let groups = thread_kernel(&mut s, total);
    let _ = writeln!(
        s,
        "  let xc = (i / {}u) * {}u;\n  var acc = -3.4028234663852886e38;",
        numel(&outs),
        numel(&ins)
    );
    out_coords(&mut s, &outs);
    window_loops(&mut s, axes);
    let _ = writeln!(
        s,
        "  acc = max(acc, in0[xc{}]);",
        terms("p", &strides(&ins))
    );
    s.push_str(&"  }\n".repeat(axes.len()));
    s.push_str("  out0[i] = acc;\n}\n");
    Dispatch {
        wgsl: s,
        groups,
        reads: vec![Bind::In(0)],
        writes: vec![Bind::Out(0)],
    }
}

/// `o0, o1, ...`: the thread's output position on each spatial axis (the innermost dims).
fn out_coords(s: &mut String, outs: &[usize]) {
    for (j, (&o, &st)) in outs.iter().zip(&strides(outs)).enumerate() {
        let _ = writeln!(s, "  let o{j} = i32((i / {st}u) % {o}u);");
    }
}

/// Opens a loop over each axis's taps `k0, k1, ...` at input positions `p0, p1, ...`, skipping
/// those outside the input; the caller closes them.
fn window_loops(s: &mut String, axes: &[Axis]) {
    for (j, a) in axes.iter().enumerate() {
        let _ = writeln!(
            s,
            "  for (var k{j} = 0; k{j} < {k}; k{j} = k{j} + 1) {{\n  let p{j} = o{j} * {st} + k{j} * {d} - {pb};",
            k = a.k,
            st = a.s,
            d = a.d,
            pb = a.pb
        );
        // The last tap of the last output, read without padding, must lie inside X.
        let reach = (a.out.max(1) - 1) * a.s + (a.k.max(1) - 1) * a.d;
        if a.pb > 0 || reach as i64 - a.pb >= a.inp as i64 {
            let _ = writeln!(s, "  if (p{j} < 0 || p{j} >= {}) {{ continue; }}", a.inp);
        }
    }
}

/// ` + u32(v0) * st0 + u32(v1) * st1 ...`: an offset from positions `v0, v1, ...`.
fn terms(v: &str, st: &[usize]) -> String {
    st.iter()
        .enumerate()
        .map(|(j, st)| format!(" + u32({v}{j}) * {st}u"))
        .collect()
}
