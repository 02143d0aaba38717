//! Helpers every kernel family shares: input access, axis normalization, output-size checks and
//! the numeric traits the generic kernels are written against.

use std::collections::HashSet;

use super::KernelCtx;
use crate::tensor::{DType, Tensor};

/// Rebuilds a `Tensor` of the same variant after transforming its array. `$body` must yield an
/// `ArrayD` of the same element type as `$a` (it may use `?`).
macro_rules! map_tensor {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::tensor::Tensor::F32($a) => $crate::tensor::Tensor::F32($body),
            $crate::tensor::Tensor::F64($a) => $crate::tensor::Tensor::F64($body),
            $crate::tensor::Tensor::I32($a) => $crate::tensor::Tensor::I32($body),
            $crate::tensor::Tensor::I64($a) => $crate::tensor::Tensor::I64($body),
            $crate::tensor::Tensor::Bool($a) => $crate::tensor::Tensor::Bool($body),
            $crate::tensor::Tensor::F16($a) => $crate::tensor::Tensor::F16($body),
            $crate::tensor::Tensor::BF16($a) => $crate::tensor::Tensor::BF16($body),
            $crate::tensor::Tensor::I8($a) => $crate::tensor::Tensor::I8($body),
            $crate::tensor::Tensor::U8($a) => $crate::tensor::Tensor::U8($body),
            $crate::tensor::Tensor::I16($a) => $crate::tensor::Tensor::I16($body),
            $crate::tensor::Tensor::U16($a) => $crate::tensor::Tensor::U16($body),
            $crate::tensor::Tensor::U32($a) => $crate::tensor::Tensor::U32($body),
            $crate::tensor::Tensor::U64($a) => $crate::tensor::Tensor::U64($body),
            $crate::tensor::Tensor::I4($a) => $crate::tensor::Tensor::I4($body),
            $crate::tensor::Tensor::U4($a) => $crate::tensor::Tensor::U4($body),
            $crate::tensor::Tensor::Str($a) => $crate::tensor::Tensor::Str($body),
        }
    };
}
pub(crate) use map_tensor;

/// Required input `i`; an omitted or absent one is an error naming the op.
pub fn input<'a>(op: &str, inputs: &[Option<&'a Tensor>], i: usize) -> Result<&'a Tensor, String> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| format!("{op}: missing required input {i}"))
}

/// Optional input `i` (`None` when omitted or past the end).
pub fn opt_input<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Option<&'a Tensor> {
    inputs.get(i).copied().flatten()
}

pub fn type_mismatch(op: &str, a: DType, b: DType) -> String {
    format!("{op}: input types differ: {a} and {b}")
}

pub fn unsupported_type(op: &str, t: DType) -> String {
    format!("{op}: element type {t} is not supported")
}

/// Checks an output's size against the limits before it is allocated.
pub fn check_out(ctx: &KernelCtx, what: &str, shape: &[usize], bits: u64) -> Result<(), String> {
    let dims: Vec<i64> = shape
        .iter()
        .map(|&d| i64::try_from(d).unwrap_or(i64::MAX))
        .collect();
    ctx.limits
        .check_dims(what, &dims, bits)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Bits per element of a tensor of type `t` (for `check_out`); a string counts as its handle
/// (24 bytes; its text is not counted).
pub fn bits(t: DType) -> u64 {
    if t == DType::STRING {
        return 8 * std::mem::size_of::<String>() as u64;
    }
    t.bits().unwrap_or(64)
}

/// Normalizes an axis in the ONNX range `[-rank, rank - 1]`.
pub fn norm_axis(op: &str, axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(format!(
            "{op}: axis {axis} is out of range for rank {rank} (valid: [{}, {}])",
            -r,
            r - 1
        ));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

/// Normalizes a list of axes and rejects duplicates (the spec calls them an error for Squeeze,
/// Unsqueeze and the reductions).
pub fn norm_axes(op: &str, axes: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = norm_axis(op, a, rank)?;
        if !seen.insert(n) {
            return Err(format!("{op}: axis {a} appears more than once in {axes:?}"));
        }
        out.push(n);
    }
    Ok(out)
}

/// Integer contents of a shape-like input (int64 per the spec; int32 accepted as well).
pub fn int_list(op: &str, what: &str, t: &Tensor) -> Result<Vec<i64>, String> {
    if t.shape().len() > 1 {
        return Err(format!(
            "{op}: '{what}' must be a 1-D tensor, got shape {:?}",
            t.shape()
        ));
    }
    t.to_i64_vec()
        .ok_or_else(|| format!("{op}: '{what}' must be int64, got {}", t.dtype()))
}

/// `Σ v` in 8 interleaved accumulators, then the tail: the loop vectorizes, and the order
/// differs from a left-to-right sum by rounding only (Softmax's sum, GlobalAveragePool's mean).
#[inline(always)]
pub(super) fn lane_sum<T: Num>(v: &[T]) -> T {
    const L: usize = 8;
    let mut sums = [T::ZERO; L];
    let mut chunks = v.chunks_exact(L);
    for c in &mut chunks {
        for (s, &x) in sums.iter_mut().zip(c) {
            *s = s.wadd(x);
        }
    }
    chunks
        .remainder()
        .iter()
        .chain(&sums)
        .fold(T::ZERO, |s, &x| s.wadd(x))
}

/// Arithmetic the generic kernels need. Integer operations wrap (two's complement), as the ONNX
/// spec leaves overflow undefined and a kernel must never panic on data.
pub trait Num:
    Copy + PartialEq + PartialOrd + Default + std::fmt::Debug + Send + Sync + 'static
{
    const ZERO: Self;
    const ONE: Self;
    const IS_INT: bool;
    fn wadd(self, o: Self) -> Self;
    fn wsub(self, o: Self) -> Self;
    fn wmul(self, o: Self) -> Self;
    /// Division; integers truncate toward zero. The caller rules out integer division by zero.
    fn wdiv(self, o: Self) -> Self;
    /// `self * s` for a float attribute (Gemm alpha/beta); integers go through f64 and truncate.
    fn scale(self, s: f32) -> Self;
    /// `self / n` for a mean; `None` for an integer mean over zero elements.
    fn div_count(self, n: usize) -> Option<Self>;
}

macro_rules! impl_num_float {
    ($t:ty) => {
        impl Num for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const IS_INT: bool = false;
            #[inline(always)]
            fn wadd(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn wsub(self, o: Self) -> Self {
                self - o
            }
            #[inline(always)]
            fn wmul(self, o: Self) -> Self {
                self * o
            }
            #[inline(always)]
            fn wdiv(self, o: Self) -> Self {
                self / o
            }
            fn scale(self, s: f32) -> Self {
                self * s as $t
            }
            fn div_count(self, n: usize) -> Option<Self> {
                Some(self / n as $t)
            }
        }
    };
}
impl_num_float!(f32);
impl_num_float!(f64);

macro_rules! impl_num_int {
    ($t:ty) => {
        impl Num for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const IS_INT: bool = true;
            #[inline(always)]
            fn wadd(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn wsub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline(always)]
            fn wmul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn wdiv(self, o: Self) -> Self {
                // MIN / -1 wraps to MIN instead of trapping.
                if o == 0 {
                    0
                } else {
                    self.wrapping_div(o)
                }
            }
            fn scale(self, s: f32) -> Self {
                if s == 1.0 {
                    self
                } else {
                    (self as f64 * s as f64) as $t
                }
            }
            fn div_count(self, n: usize) -> Option<Self> {
                if n == 0 {
                    None
                } else {
                    Some((self as i128 / n as i128) as $t)
                }
            }
        }
    };
}
impl_num_int!(i32);
impl_num_int!(i64);

/// Float-only math (Softmax, transcendental unary ops).
pub trait Float: Num {
    const NEG_INFINITY: Self;
    /// Below this, `exp` rounds to 0 (it is under half the smallest subnormal).
    const EXP_ZERO: Self;
    /// exp for hot loops: float32 uses the branch-free `fastmath::exp` (within 3e-7 relative of
    /// the true value; it vectorizes), float64 libm's.
    fn fast_exp(self) -> Self;
    /// Softmax over `row` by a vector routine of this build, if it has one for the type (the
    /// wasm build's float32: `simd::softmax_row`); false (nothing done) otherwise.
    #[inline(always)]
    fn softmax_lanes(row: &mut [Self]) -> bool {
        let _ = row;
        false
    }
}

impl Float for f32 {
    const NEG_INFINITY: Self = f32::NEG_INFINITY;
    const EXP_ZERO: Self = -104.0;
    #[inline(always)]
    fn fast_exp(self) -> Self {
        super::fastmath::exp(self)
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    fn softmax_lanes(row: &mut [f32]) -> bool {
        super::simd::softmax_row(row);
        true
    }
}

impl Float for f64 {
    const NEG_INFINITY: Self = f64::NEG_INFINITY;
    const EXP_ZERO: Self = -746.0;
    #[inline(always)]
    fn fast_exp(self) -> Self {
        f64::exp(self)
    }
}

/// Sorts indices stably by `cmp`: not generic, so every kernel that orders rows (Unique's groups,
/// NonMaxSuppression's scores) shares one copy of the sort in the wasm.
pub fn sort_indices(order: &mut [usize], cmp: &dyn Fn(usize, usize) -> std::cmp::Ordering) {
    order.sort_by(|&p, &q| cmp(p, q));
}

/// Sorts numbers ascending (axes, mostly) through `sort_indices`' one copy of the sort.
pub fn sort_usizes(v: &mut [usize]) {
    sort_indices(v, &|p, q| p.cmp(&q));
}

/// Sorts `v` stably by `cmp`, for the short lists outside the hot loops (a plan's axes, a
/// report's rows): the order is found by `sort_indices` and applied by swaps, so each element
/// type costs a few instructions in the wasm instead of its own copy of the standard sort
/// (~4 KB each).
pub fn sort_by_dyn<T>(v: &mut [T], cmp: &dyn Fn(&T, &T) -> std::cmp::Ordering) {
    let mut order: Vec<usize> = (0..v.len()).collect();
    sort_indices(&mut order, &|p, q| cmp(&v[p], &v[q]));
    // Position i takes the element at order[i]: follow each cycle, marking done positions.
    for i in 0..v.len() {
        let mut j = i;
        loop {
            let k = order[j];
            order[j] = j;
            if k == i {
                break;
            }
            v.swap(j, k);
            j = k;
        }
    }
}

#[cfg(test)]
mod sort_tests {
    #[test]
    fn sort_by_dyn_is_the_standard_stable_sort() {
        // Keys with many ties (stability shows), lengths 0 to 40, a fixed pseudo-random walk.
        let mut seed = 7u32;
        for n in 0..40usize {
            let v: Vec<(u32, usize)> = (0..n)
                .map(|i| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    ((seed >> 16) % 5, i)
                })
                .collect();
            let (mut a, mut b) = (v.clone(), v);
            a.sort_by_key(|p| p.0);
            super::sort_by_dyn(&mut b, &|p, q| p.0.cmp(&q.0));
            assert_eq!(a, b, "n = {n}");
        }
        let mut u = vec![3usize, 1, 2, 1, 0];
        super::sort_usizes(&mut u);
        assert_eq!(u, [0, 1, 1, 2, 3]);
    }
}

#[cfg(test)]
pub mod test_util {
    use ndarray::{ArrayD, IxDyn};

    use super::super::{Kernel, KernelCtx};
    use crate::ir::Node;
    use crate::limits::Limits;
    use crate::tensor::Tensor;

    pub fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
    }
    /// A float32 tensor's elements as bits: equal only where every element is the same float
    /// (the thread-count tests compare results bit for bit).
    pub fn f32_bits(t: &Tensor) -> Vec<u32> {
        t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect()
    }
    pub fn f64s(shape: &[usize], v: &[f64]) -> Tensor {
        Tensor::F64(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
    }
    pub fn i32s(shape: &[usize], v: &[i32]) -> Tensor {
        Tensor::I32(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
    }
    pub fn i64s(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::I64(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
    }
    pub fn bools(shape: &[usize], v: &[bool]) -> Tensor {
        Tensor::Bool(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
    }
    pub fn strs(shape: &[usize], v: &[&str]) -> Tensor {
        let v = v.iter().map(|s| s.to_string()).collect();
        Tensor::Str(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap())
    }

    /// Runs `k` on `node` at `opset` with default limits.
    pub fn run_at(
        k: Kernel,
        node: &Node,
        opset: i64,
        inputs: &[Option<&Tensor>],
    ) -> super::super::KernelResult {
        let limits = Limits::default();
        // The node parsed as the registry says (its typed attributes), then `k` run on it.
        let op = super::super::resolve(node, opset).map_err(|e| e.to_string())?;
        let ctx = KernelCtx {
            node,
            op: &*op,
            opset,
            limits: &limits,
            prepared: None,
        };
        k(&ctx, inputs)
    }

    /// A default-domain node of `op` with `attrs` (and no inputs or outputs).
    pub fn node(op: &str, attrs: Vec<crate::onnx::proto::AttributeProto>) -> Node {
        let mut n = Node::new(op, "");
        for a in attrs {
            n.set_attr(a);
        }
        n
    }

    /// Runs `k` on `n` at `opset` with every input given and returns its first output.
    pub fn run_first(k: Kernel, n: &Node, opset: i64, ins: &[&Tensor]) -> Result<Tensor, String> {
        let ins: Vec<Option<&Tensor>> = ins.iter().map(|&t| Some(t)).collect();
        run_at(k, n, opset, &ins).map(|mut v| v.remove(0))
    }

    /// 0, 1, 2, ... as float32 in `shape`.
    pub fn iota(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        f32s(shape, &(0..n).map(|v| v as f32).collect::<Vec<_>>())
    }

    /// Runs a kernel with no attributes at opset 17 and returns its single output.
    pub fn run1(k: Kernel, op: &str, inputs: &[&Tensor]) -> Result<Tensor, String> {
        let node = Node::new(op, "");
        let ins: Vec<Option<&Tensor>> = inputs.iter().map(|&t| Some(t)).collect();
        run_at(k, &node, 17, &ins).map(|mut v| v.remove(0))
    }

    /// Asserts two tensors have the same type and shape and agree within `tol`.
    pub fn assert_close(got: &Tensor, want: &Tensor, tol: f64) {
        match got.max_abs_diff(want) {
            Some(d) if d <= tol => {}
            _ => panic!("got {got:?}, want {want:?}"),
        }
    }
}
