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

/// `f` applied element-wise over `a` and `b` broadcast together. Inputs are only viewed, never
/// copied. The output is in standard layout.
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
    // Fast path: equal shapes, both contiguous row-major. A plain slice loop that the compiler
    // vectorizes; this is the benchmarked Add(X, EyeLike(X)) case.
    if a.shape() == b.shape() {
        if let (Some(sa), Some(sb)) = (a.as_slice(), b.as_slice()) {
            let v: Vec<O> = sa.iter().zip(sb).map(|(&x, &y)| f(x, y)).collect();
            return from_vec(op, a.shape(), v);
        }
    }
    // Fast path: one operand is a single element that broadcasts to the other's shape.
    if b.len() == 1 && b.ndim() <= a.ndim() {
        if let (Some(sa), Some(&y)) = (a.as_slice(), b.iter().next()) {
            let v: Vec<O> = sa.iter().map(|&x| f(x, y)).collect();
            return from_vec(op, a.shape(), v);
        }
    }
    if a.len() == 1 && a.ndim() <= b.ndim() {
        if let (Some(&x), Some(sb)) = (a.iter().next(), b.as_slice()) {
            let v: Vec<O> = sb.iter().map(|&y| f(x, y)).collect();
            return from_vec(op, b.shape(), v);
        }
    }
    let shape = broadcast_shape(op, a.shape(), b.shape())?;
    check_out(ctx, op, &shape, (std::mem::size_of::<O>() * 8) as u64)?;
    let dim = IxDyn(&shape);
    let av = a
        .broadcast(dim.clone())
        .ok_or_else(|| format!("{op}: cannot broadcast {:?} to {shape:?}", a.shape()))?;
    let bv = b
        .broadcast(dim)
        .ok_or_else(|| format!("{op}: cannot broadcast {:?} to {shape:?}", b.shape()))?;
    let out = Zip::from(&av).and(&bv).map_collect(|&x, &y| f(x, y));
    // Zip may pick column-major for column-major inputs; keep outputs row-major for later fast paths.
    Ok(if out.is_standard_layout() {
        out
    } else {
        out.as_standard_layout().into_owned()
    })
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
    fn unidirectional() {
        assert!(check_unidirectional("Gemm", "C", &[3], &[2, 3]).is_ok());
        assert!(check_unidirectional("Gemm", "C", &[2, 1], &[2, 3]).is_ok());
        assert!(check_unidirectional("Gemm", "C", &[], &[2, 3]).is_ok());
        let e = check_unidirectional("Gemm", "C", &[2], &[2, 3]).unwrap_err();
        assert!(e.contains("[2]") && e.contains("[2, 3]"), "{e}");
        assert!(check_unidirectional("Gemm", "C", &[1, 2, 3], &[2, 3]).is_err());
    }
}
