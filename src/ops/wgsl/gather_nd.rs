//! GatherND: one thread per output element reads its index tuple and copies one element.

use super::*;

/// GatherND of `data` by i32 `indices` (last dim k) with `b` batch dims, shapes checked by the
/// reference's `nd_tuple_len`. Negative indices count from the end; out-of-range ones are
/// clamped (a GPU kernel cannot fail; the reference backend reports them).
pub fn gather_nd(data: &[usize], indices: &[usize], b: usize, ty: Ty) -> Dispatch {
    let q = indices.len();
    let k = indices[q - 1];
    let run = numel(&data[b + k..]);
    let tuples = numel(&indices[..q - 1]);
    let per_batch = numel(&indices[b..q - 1]).max(1);
    let st = strides(data);
    let batch_stride = if b == 0 { 0 } else { st[b - 1] };
    let n = tuples * run;
    let mut s = String::new();
    bindings(&mut s, &[ty, Ty::I32], &[ty]);
    let groups = thread_kernel(&mut s, n);
    let _ = writeln!(
        s,
        "  let t = i / {run}u;\n  var off = (t / {per_batch}u) * {batch_stride}u + i % {run}u;"
    );
    for j in 0..k {
        let dim = data[b + j];
        let _ = writeln!(
            s,
            "  var g{j} = in1[t * {k}u + {j}u];\n  if (g{j} < 0) {{ g{j} = g{j} + {dim}i; }}\n  off = off + u32(clamp(g{j}, 0i, {}i)) * {}u;",
            dim.saturating_sub(1),
            st[b + j]
        );
    }
    s.push_str("  out0[i] = in0[off];\n}\n");
    Dispatch {
        wgsl: s,
        groups,
        reads: vec![Bind::In(0), Bind::In(1)],
        writes: vec![Bind::Out(0)],
    }
}
