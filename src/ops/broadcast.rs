//! ONNX broadcasting (docs/Broadcasting.md): the one place that decides output shapes, plus the
//! view-based element-wise map every binary kernel goes through.

use ndarray::{ArrayD, IxDyn, Zip};

use super::common::check_out;
use super::KernelCtx;

/// Multidirectional (numpy) broadcasting: shapes are right-aligned, and each pair of dims must be
/// equal or one of them 1. A 0 dim broadcasts against 1 to 0.
pub fn broadcast_shape(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for (i, o) in out.iter_mut().enumerate() {
        // Dims missing on the left of the shorter shape count as 1.
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        *o = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(format!(
                    "{op}: shapes {a:?} and {b:?} cannot be broadcast together \
                     (dimension {da} vs {db})"
                ))
            }
        };
    }
    Ok(out)
}

/// Row-major strides of `shape`, with 0 where a dim is 1 so that it broadcasts, right-aligned to
/// a batch shape of rank `rank`.
pub fn batch_strides(shape: &[usize], rank: usize) -> Vec<usize> {
    let mut strides = vec![0; rank];
    let mut s = 1;
    for (i, &d) in shape.iter().enumerate().rev() {
        let slot = rank - shape.len() + i;
        strides[slot] = if d == 1 { 0 } else { s };
        s *= d;
    }
    strides
}

/// Unidirectional broadcasting: `from` must broadcast to exactly `to` (Gemm's C).
pub fn check_unidirectional(
    op: &str,
    what: &str,
    from: &[usize],
    to: &[usize],
) -> Result<(), String> {
    let ok = from.len() <= to.len()
        && from
            .iter()
            .rev()
            .zip(to.iter().rev())
            .all(|(&f, &t)| f == t || f == 1);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{op}: {what} of shape {from:?} cannot be broadcast to {to:?}"
        ))
    }
}

/// `f` applied element-wise over `a` and `b` broadcast together. The output is in standard
/// layout. Inputs in standard layout (the usual case) are only viewed; another layout is copied
/// to standard layout first, so that every instantiation has one loop, `blocked`'s (an
/// ndarray `Zip` path per instantiation cost tens of KB in the wasm build).
pub fn binary_map<A, B, O, F>(
    ctx: &KernelCtx,
    op: &str,
    a: &ArrayD<A>,
    b: &ArrayD<B>,
    f: F,
) -> Result<ArrayD<O>, String>
where
    A: Copy,
    B: Copy,
    O: Copy,
    F: Fn(A, B) -> O,
{
    let shape = broadcast_shape(op, a.shape(), b.shape())?;
    check_out(ctx, op, &shape, (std::mem::size_of::<O>() * 8) as u64)?;
    let (a, b) = (a.as_standard_layout(), b.as_standard_layout());
    let (Some(sa), Some(sb)) = (a.as_slice(), b.as_slice()) else {
        return Err(format!(
            "{op}: input not contiguous after as_standard_layout"
        ));
    };
    let v = blocked(&shape, (sa, a.shape()), (sb, b.shape()), f);
    from_vec(op, &shape, v)
}

/// `if c { x } else { y }` element-wise over the three inputs broadcast together (Where). Like
/// `binary_map`, inputs are only viewed and the output is in standard layout.
pub fn select_map<T: Copy>(
    ctx: &KernelCtx,
    op: &str,
    c: &ArrayD<bool>,
    x: &ArrayD<T>,
    y: &ArrayD<T>,
) -> Result<ArrayD<T>, String> {
    if c.shape() == x.shape() && c.shape() == y.shape() {
        if let (Some(sc), Some(sx), Some(sy)) = (c.as_slice(), x.as_slice(), y.as_slice()) {
            let v: Vec<T> = sc
                .iter()
                .zip(sx.iter().zip(sy))
                .map(|(&c, (&a, &b))| if c { a } else { b })
                .collect();
            return from_vec(op, c.shape(), v);
        }
    }
    let shape = broadcast_shape(op, c.shape(), x.shape())
        .and_then(|s| broadcast_shape(op, &s, y.shape()))
        .map_err(|_| {
            format!(
                "{op}: shapes {:?}, {:?} and {:?} cannot be broadcast together",
                c.shape(),
                x.shape(),
                y.shape()
            )
        })?;
    check_out(ctx, op, &shape, (std::mem::size_of::<T>() * 8) as u64)?;
    let dim = IxDyn(&shape);
    let cannot = |s: &[usize]| format!("{op}: cannot broadcast {s:?} to {shape:?}");
    let cv = c.broadcast(dim.clone()).ok_or_else(|| cannot(c.shape()))?;
    let xv = x.broadcast(dim.clone()).ok_or_else(|| cannot(x.shape()))?;
    let yv = y.broadcast(dim).ok_or_else(|| cannot(y.shape()))?;
    let out = Zip::from(&cv)
        .and(&xv)
        .and(&yv)
        .map_collect(|&c, &a, &b| if c { a } else { b });
    Ok(if out.is_standard_layout() {
        out
    } else {
        out.as_standard_layout().into_owned()
    })
}

/// `f` over row-major `a` and `b` (data and shape) broadcast to `shape`, by blocks: the
/// longest run of trailing axes on which each operand either has all of the output's elements
/// (a contiguous run of its data) or one (a value repeated) makes the block, and each block is
/// one slice loop with no index arithmetic per element: a same-shape pair is one block, a
/// per-channel [N, C, 1, 1] operand a value per H·W block, a bias [K] a run per row of K.
fn blocked<A: Copy, B: Copy, O: Copy>(
    shape: &[usize],
    (a, ash): (&[A], &[usize]),
    (b, bsh): (&[B], &[usize]),
    f: impl Fn(A, B) -> O,
) -> Vec<O> {
    let r = shape.len();
    // The operands' dims right-aligned to the output's rank.
    let dim = |s: &[usize], j: usize| {
        if j + s.len() >= r {
            s[j + s.len() - r]
        } else {
            1
        }
    };
    // Trailing axes k.. form the block: per operand, every one of them full or every one 1.
    let (mut k, mut a_run, mut b_run) = (r, None, None);
    while k > 0 {
        let n = shape[k - 1];
        if n != 1 {
            let (am, bm) = (dim(ash, k - 1) == n, dim(bsh, k - 1) == n);
            if a_run.is_some_and(|m| m != am) || b_run.is_some_and(|m| m != bm) {
                break;
            }
            (a_run, b_run) = (Some(am), Some(bm));
        }
        k -= 1;
    }
    let (a_run, b_run) = (a_run.unwrap_or(true), b_run.unwrap_or(true));
    let inner: usize = shape[k..].iter().product();
    let total: usize = shape.iter().product();
    let mut out = Vec::with_capacity(total);
    if total == 0 {
        return out;
    }
    // Per outer axis, each operand's step in its data (0 where it broadcasts).
    let steps = |s: &[usize]| -> Vec<usize> {
        let mut st = vec![0; k];
        let mut len = 1;
        for j in (0..r).rev() {
            let d = dim(s, j);
            if j < k && d != 1 {
                st[j] = len;
            }
            len *= d;
        }
        st
    };
    let (sta, stb) = (steps(ash), steps(bsh));
    let mut idx = vec![0usize; k];
    let (mut oa, mut ob) = (0usize, 0usize);
    for _ in 0..total / inner {
        match (a_run, b_run) {
            (true, true) => {
                let (ra, rb) = (&a[oa..][..inner], &b[ob..][..inner]);
                out.extend(ra.iter().zip(rb).map(|(&x, &y)| f(x, y)));
            }
            (true, false) => {
                let y = b[ob];
                out.extend(a[oa..][..inner].iter().map(|&x| f(x, y)));
            }
            (false, true) => {
                let x = a[oa];
                out.extend(b[ob..][..inner].iter().map(|&y| f(x, y)));
            }
            (false, false) => {
                let v = f(a[oa], b[ob]);
                out.extend(std::iter::repeat_n(v, inner));
            }
        }
        // The next block: the outer index counts up like an odometer.
        for j in (0..k).rev() {
            idx[j] += 1;
            oa += sta[j];
            ob += stb[j];
            if idx[j] < shape[j] {
                break;
            }
            oa -= sta[j] * shape[j];
            ob -= stb[j] * shape[j];
            idx[j] = 0;
        }
    }
    out
}

fn from_vec<O>(op: &str, shape: &[usize], v: Vec<O>) -> Result<ArrayD<O>, String> {
    ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| format!("{op}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert_eq!(broadcast_shape("t", &[2, 3], &[3]).unwrap(), vec![2, 3]);
        assert_eq!(broadcast_shape("t", &[2, 1], &[1, 3]).unwrap(), vec![2, 3]);
        assert_eq!(broadcast_shape("t", &[], &[4, 5]).unwrap(), vec![4, 5]);
        assert_eq!(broadcast_shape("t", &[0, 1], &[1, 3]).unwrap(), vec![0, 3]);
        assert_eq!(
            broadcast_shape("t", &[2, 3, 4, 5], &[4, 1]).unwrap(),
            vec![2, 3, 4, 5]
        );
    }

    #[test]
    fn mismatch_names_both_shapes() {
        let e = broadcast_shape("Add", &[2, 3], &[4]).unwrap_err();
        assert!(e.contains("[2, 3]") && e.contains("[4]"), "{e}");
    }

    #[test]
    fn blocks_match_the_element_by_element_broadcast() {
        // Per-channel, bias, same shape, scalar, both sides broadcasting, ones inside, empty.
        let pairs: [(&[usize], &[usize]); 12] = [
            (&[2, 3, 4, 5], &[1, 3, 1, 1]),
            (&[2, 3, 4, 5], &[2, 3, 1, 1]),
            (&[1, 3, 1, 1], &[2, 3, 4, 5]),
            (&[2, 3, 4], &[4]),
            (&[2, 3, 4], &[2, 3, 4]),
            (&[2, 3], &[]),
            (&[3, 1], &[1, 4]),
            (&[2, 1, 4, 1], &[1, 3, 1, 5]),
            (&[2, 3, 1, 5], &[3, 4, 1]),
            (&[1, 1, 6], &[1, 2, 1]),
            (&[2, 1, 3], &[2, 4, 1]),
            (&[2, 0, 3], &[1, 3]),
        ];
        for (sa, sb) in pairs {
            let n = |s: &[usize]| s.iter().product::<usize>();
            let a: Vec<f32> = (0..n(sa)).map(|i| i as f32 * 0.5 - 3.0).collect();
            let b: Vec<f32> = (0..n(sb)).map(|i| i as f32 * 1.7 + 0.25).collect();
            let shape = broadcast_shape("t", sa, sb).unwrap();
            let f = |x: f32, y: f32| x * y - x / (y + 0.5);
            let got = blocked(&shape, (&a, sa), (&b, sb), f);
            let av = ArrayD::from_shape_vec(IxDyn(sa), a.clone()).unwrap();
            let bv = ArrayD::from_shape_vec(IxDyn(sb), b.clone()).unwrap();
            let d = IxDyn(&shape);
            let (av, bv) = (av.broadcast(d.clone()).unwrap(), bv.broadcast(d).unwrap());
            let want: Vec<f32> = av.iter().zip(bv.iter()).map(|(&x, &y)| f(x, y)).collect();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{sa:?} with {sb:?}");
        }
    }

    #[test]
    fn unidirectional() {
        assert!(check_unidirectional("Gemm", "C", &[3], &[2, 3]).is_ok());
        assert!(check_unidirectional("Gemm", "C", &[2, 1], &[2, 3]).is_ok());
        assert!(check_unidirectional("Gemm", "C", &[], &[2, 3]).is_ok());
        let e = check_unidirectional("Gemm", "C", &[2], &[2, 3]).unwrap_err();
        assert!(e.contains("[2]") && e.contains("[2, 3]"), "{e}");
        assert!(check_unidirectional("Gemm", "C", &[1, 2, 3], &[2, 3]).is_err());
    }
}
