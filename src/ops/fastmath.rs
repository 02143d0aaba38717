//! Branch-free float32 `exp`, `tanh` and `erf` for the hot activation and Softmax loops.
//!
//! libm's `expf`/`tanhf` and the float64 `erf` series cost 10-20 ns an element and never
//! vectorize; these are straight-line f32 arithmetic (range reduction, a short polynomial, a
//! select between two pieces), so a loop over a slice that calls them compiles to SIMD code.
//! Every function is `#[inline(always)]` for that reason.
//!
//! Accuracy, checked against float64 over sweeps in the tests below: `exp` and `tanh` within
//! 3e-7 relative; `erf` within 2e-7 absolute (and 3e-7 relative for |x| < 1); `one_plus_tanh_l`
//! and `one_plus_erf_l` (`1 + f(x)`, the Gelu forms) within 1e-6 relative (for erf where
//! x >= -4; below, 1 + erf(x) is under 2e-8 and its error under 1e-10), without the
//! cancellation that `1 + f(x)` suffers for negative x. NaN in gives NaN out; infinities give
//! the limits.
//!
//! The polynomial coefficients are least-squares fits on Chebyshev nodes (numpy, float64),
//! rounded to float32; the fits are described next to each table.

/// Below this, exp(x) rounds to 0 in float32 (under half the smallest subnormal).
const EXP_LO: f32 = -104.0;
/// Above this, exp(x) overflows float32.
const EXP_HI: f32 = 89.0;
/// 1.5 * 2^23: adding it rounds a float of magnitude under 2^22 to an integer, which then sits
/// in the low mantissa bits.
pub(crate) const ROUND_MAGIC: f32 = 12_582_912.0;

/// exp(r) for |r| <= ln2 / 2: degree 6, fitted to exp on [-ln2/2, ln2/2] (max relative error
/// 1e-7 evaluated in float32).
const EXP_POLY: [f32; 7] = [
    1.0,
    1.0,
    0.5,
    0.166_664_15,
    0.041_666_217,
    0.008_375_129,
    0.001_394_858_1,
];

/// tanh(x) / x as a polynomial in s = x^2 for |x| < TANH_SPLIT: degree 5, fitted on
/// s in [0, 0.3025] (9e-8 relative in float32).
const TANH_POLY: [f32; 6] = [
    1.0,
    -0.333_333_1,
    0.133_324_68,
    -0.053_843_368,
    0.021_042_168,
    -0.006_238_845_6,
];
const TANH_SPLIT: f32 = 0.55;

/// erf(x) / x as a polynomial in s = x^2 for |x| < 1: degree 6, fitted on s in [0, 1]
/// (2e-7 relative in float32).
const ERF_POLY: [f32; 7] = [
    std::f32::consts::FRAC_2_SQRT_PI,
    -0.376_126_26,
    0.112_835_97,
    -0.026_854_329,
    0.005_189_312,
    -0.000_801_885_5,
    0.000_078_824_974,
];

/// erfc(x) * exp(x^2) as a polynomial in t = 1/x for 1 <= x <= 4: degree 7, fitted on
/// t in [0.25, 1] (5e-7 relative in float32). Past 4, erf(x) is 1 in float32.
const ERFC_POLY: [f32; 8] = [
    0.000_363_852_92,
    0.557_537_26,
    0.052_210_074,
    -0.509_692_3,
    0.582_545_94,
    -0.361_126_45,
    0.124_435_32,
    -0.018_690_08,
];

/// What the functions here compute on: one float32 (every build) or four (`V4`, wasm SIMD128,
/// where the size-optimized build does not vectorize the scalar loops). Each function is
/// written once over `Lane`; the scalar instance is the same arithmetic in the same order as
/// the vector one, lane by lane, and an `if` on a `bool` mask is the scalar select.
pub(crate) trait Lane:
    Copy
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
{
    type Mask: Copy;
    fn splat(v: f32) -> Self;
    fn abs(self) -> Self;
    /// `self` with the sign of `sign`.
    fn copysign(self, sign: Self) -> Self;
    /// `min(self, hi)`, a NaN giving `hi`.
    fn min_or(self, hi: f32) -> Self;
    fn lt(self, o: Self) -> Self::Mask;
    fn gt(self, o: Self) -> Self::Mask;
    fn is_nan(self) -> Self::Mask;
    /// `a` where `m`, else `b`.
    fn select(m: Self::Mask, a: Self, b: Self) -> Self;
    /// `p · 2^n` for `t = n + ROUND_MAGIC` (n read from t's low mantissa bits), in two factors
    /// so that n from -150 (subnormal results) to 128 (overflow to inf) stays representable.
    fn scale_pow2(p: Self, t: Self) -> Self;
}

impl Lane for f32 {
    type Mask = bool;
    #[inline(always)]
    fn splat(v: f32) -> f32 {
        v
    }
    #[inline(always)]
    fn abs(self) -> f32 {
        f32::abs(self)
    }
    #[inline(always)]
    fn copysign(self, sign: f32) -> f32 {
        f32::copysign(self, sign)
    }
    #[inline(always)]
    fn min_or(self, hi: f32) -> f32 {
        self.min(hi)
    }
    #[inline(always)]
    fn lt(self, o: f32) -> bool {
        self < o
    }
    #[inline(always)]
    fn gt(self, o: f32) -> bool {
        self > o
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    #[inline(always)]
    fn select(m: bool, a: f32, b: f32) -> f32 {
        if m {
            a
        } else {
            b
        }
    }
    #[inline(always)]
    fn scale_pow2(p: f32, t: f32) -> f32 {
        let pow2i = |n: i32| f32::from_bits((n.wrapping_add(127) << 23) as u32);
        let ni = (t.to_bits() as i32).wrapping_sub(ROUND_MAGIC.to_bits() as i32);
        let n1 = ni >> 1;
        p * pow2i(n1) * pow2i(ni.wrapping_sub(n1))
    }
}

#[inline(always)]
fn horner<L: Lane, const N: usize>(c: &[f32; N], x: L) -> L {
    let mut acc = L::splat(c[N - 1]);
    for &k in c[..N - 1].iter().rev() {
        acc = acc * x + L::splat(k);
    }
    acc
}

/// e^x.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    exp_l(x)
}

/// e^x on any [`Lane`].
#[inline(always)]
pub(crate) fn exp_l<L: Lane>(x: L) -> L {
    // Below EXP_LO the answer is 0 (selected at the end); compute on 0 meanwhile, as a clamped
    // -104 would make subnormal intermediates, and x86 takes a ~100-cycle assist for each (masked
    // attention scores are all down there). `min_or` also turns a NaN into a harmless in-range
    // value; the NaN is put back below.
    let low = x.lt(L::splat(EXP_LO));
    let xc = L::select(low, L::splat(0.0), x.min_or(EXP_HI));
    // n = round(x / ln2), read back from the mantissa bits of t.
    let t = xc * L::splat(std::f32::consts::LOG2_E) + L::splat(ROUND_MAGIC);
    let n = t - L::splat(ROUND_MAGIC);
    // r = x - n ln2 in two steps (Cody-Waite): n * LN2_HI is exact for |n| < 2^15.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let r = (xc - n * L::splat(LN2_HI)) - n * L::splat(LN2_LO);
    let y = L::scale_pow2(horner(&EXP_POLY, r), t);
    L::select(x.is_nan(), x, L::select(low, L::splat(0.0), y))
}

/// 1 - tanh(a) = 2 / (e^(2a) + 1), for a >= 0.
#[inline(always)]
fn one_minus_tanh_abs<L: Lane>(a: L) -> L {
    L::splat(2.0) / (exp_l(L::splat(2.0) * a) + L::splat(1.0))
}

/// tanh(x).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    tanh_l(x)
}

/// tanh(x) on any [`Lane`].
#[inline(always)]
pub(crate) fn tanh_l<L: Lane>(x: L) -> L {
    let a = x.abs();
    let small = a * horner(&TANH_POLY, a * a);
    let big = L::splat(1.0) - one_minus_tanh_abs(a);
    // a NaN fails the comparison and takes `big`, which is NaN too.
    let r = L::select(a.lt(L::splat(TANH_SPLIT)), small, big);
    r.copysign(x)
}

/// 1 + tanh(x) on any [`Lane`], accurate (relatively) for negative x too.
#[inline(always)]
pub(crate) fn one_plus_tanh_l<L: Lane>(x: L) -> L {
    let a = x.abs();
    let small = a * horner(&TANH_POLY, a * a);
    let tail = one_minus_tanh_abs(a);
    // 1 + tanh(-a) = 1 - tanh(a) for x <= 0; NaN lands there and stays NaN.
    let big = L::select(x.gt(L::splat(0.0)), L::splat(2.0) - tail, tail);
    L::select(
        a.lt(L::splat(TANH_SPLIT)),
        L::splat(1.0) + small.copysign(x),
        big,
    )
}

/// (erf(a) for a < 1, erfc(a) for a >= 1), a = |x| not NaN.
#[inline(always)]
fn erf_parts<L: Lane>(a: L) -> (L, L) {
    let s = a * a;
    let small = a * horner(&ERF_POLY, s);
    let tail = exp_l(L::splat(0.0) - s) * horner(&ERFC_POLY, L::splat(1.0) / a);
    // Past 4 the fit is extrapolated; erfc is under 2e-8 there, so erf is 1 and `tail`
    // only feeds 1 + erf(x) for x < -4, whose true value is that small.
    (small, tail)
}

/// erf(x).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    erf_l(x)
}

/// erf(x) on any [`Lane`].
#[inline(always)]
pub(crate) fn erf_l<L: Lane>(x: L) -> L {
    let a = x.abs();
    let (small, tail) = erf_parts(a);
    let r = L::select(a.lt(L::splat(1.0)), small, L::splat(1.0) - tail);
    L::select(x.is_nan(), x, r.copysign(x))
}

/// 1 + erf(x) on any [`Lane`], accurate (relatively) for negative x too: there it is erfc(|x|).
#[inline(always)]
pub(crate) fn one_plus_erf_l<L: Lane>(x: L) -> L {
    let a = x.abs();
    let (small, tail) = erf_parts(a);
    let big = L::select(x.gt(L::splat(0.0)), L::splat(2.0) - tail, tail);
    let r = L::select(a.lt(L::splat(1.0)), L::splat(1.0) + small.copysign(x), big);
    L::select(x.is_nan(), x, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Points over `[lo, hi]`: an even grid plus every float32 power of two (and its
    /// neighbours) inside the range, so tiny and huge magnitudes are covered.
    fn sweep(lo: f32, hi: f32, n: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..=n)
            .map(|i| lo + (hi - lo) * (i as f32 / n as f32))
            .collect();
        for e in -149..128 {
            let p = 2f32.powi(e);
            for q in [p, -p, p * 1.000_001, -p * 0.999_999] {
                if (lo..=hi).contains(&q) {
                    v.push(q);
                }
            }
        }
        v
    }

    fn rel(got: f32, want: f64) -> f64 {
        if want == 0.0 {
            (got as f64).abs()
        } else {
            ((got as f64 - want) / want).abs()
        }
    }

    #[test]
    fn exp_matches_f64() {
        let mut worst = 0f64;
        for x in sweep(-87.0, 88.7, 200_000) {
            let e = rel(exp(x), (x as f64).exp());
            worst = worst.max(e);
            assert!(e < 3e-7, "exp({x}) = {} vs {}", exp(x), (x as f64).exp());
        }
        assert!(worst > 0.0);
        // Subnormal results: within a couple of the smallest subnormal steps.
        for x in sweep(-104.0, -87.0, 20_000) {
            let d = (exp(x) as f64 - (x as f64).exp()).abs();
            assert!(
                d <= 3.0 * f32::from_bits(1) as f64 + 1e-7 * (x as f64).exp(),
                "exp({x})"
            );
        }
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-104.5), 0.0);
        assert_eq!(exp(-1e30), 0.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert_eq!(exp(1e30), f32::INFINITY);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
        assert!(exp(f32::MAX).is_infinite() && exp(f32::MIN) == 0.0);
    }

    #[test]
    fn tanh_matches_f64() {
        for x in sweep(-50.0, 50.0, 200_000) {
            let want = (x as f64).tanh();
            assert!(
                rel(tanh(x), want) < 3e-7,
                "tanh({x}) = {} vs {want}",
                tanh(x)
            );
            // 1 + tanh: relative accuracy wherever the value is not vanishing.
            let want1 = 1.0 + want;
            let want1 = if want1 == 0.0 || want1 < 1e-8 {
                // 1 + tanh(x) = 2 e^(2x) / (1 + e^(2x)) for very negative x.
                2.0 * (2.0 * x as f64).exp() / (1.0 + (2.0 * x as f64).exp())
            } else {
                want1
            };
            if want1 > 1e-30 {
                assert!(
                    rel(one_plus_tanh_l::<f32>(x), want1) < 1e-6,
                    "1 + tanh({x}) = {} vs {want1}",
                    one_plus_tanh_l::<f32>(x)
                );
            }
        }
        assert_eq!(tanh(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(tanh(-0.0).to_bits(), (-0.0f32).to_bits());
        for (x, y) in [(f32::INFINITY, 1.0), (f32::NEG_INFINITY, -1.0), (1e30, 1.0)] {
            assert_eq!(tanh(x), y);
        }
        assert_eq!(one_plus_tanh_l::<f32>(f32::INFINITY), 2.0);
        assert_eq!(one_plus_tanh_l::<f32>(f32::NEG_INFINITY), 0.0);
        assert!(tanh(f32::NAN).is_nan() && one_plus_tanh_l::<f32>(f32::NAN).is_nan());
        assert!(tanh(f32::MAX) == 1.0 && tanh(f32::MIN_POSITIVE) == f32::MIN_POSITIVE);
    }

    /// erf and erfc in float64 from the crate's libm-free series (about 1e-15 relative).
    fn erf64(x: f64) -> f64 {
        use super::super::elementwise::ErfF64;
        x.onnx_erf()
    }

    /// erfc(a) for a >= 0 in float64, from the continued fraction where erf is near 1.
    fn erfc64(a: f64) -> f64 {
        if a < 2.0 {
            return 1.0 - erf64(a);
        }
        // erfc(a) = exp(-a^2)/sqrt(pi) / (a + (1/2)/(a + 1/(a + (3/2)/(a + ...)))).
        let mut f = a;
        for k in (1..200).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        (-a * a).exp() / std::f64::consts::PI.sqrt() / f
    }

    #[test]
    fn erf_matches_f64() {
        for x in sweep(-10.0, 10.0, 200_000) {
            let want = erf64(x as f64);
            let got = erf(x);
            assert!(
                (got as f64 - want).abs() < 2e-7,
                "erf({x}) = {got} vs {want}"
            );
            if x.abs() < 1.0 {
                assert!(rel(got, want) < 3e-7, "erf({x}) = {got} vs {want}");
            }
            let want1 = if x < 0.0 {
                erfc64(-x as f64)
            } else {
                1.0 + want
            };
            let got1 = one_plus_erf_l::<f32>(x);
            if x >= -4.0 {
                assert!(rel(got1, want1) < 1e-6, "1 + erf({x}) = {got1} vs {want1}");
            } else {
                // Past the fitted range: the value is under 2e-8, its error far smaller.
                assert!((got1 as f64 - want1).abs() < 1e-10, "1 + erf({x}) = {got1}");
            }
        }
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(f32::NEG_INFINITY), -1.0);
        assert_eq!(erf(1e30), 1.0);
        assert_eq!(one_plus_erf_l::<f32>(f32::INFINITY), 2.0);
        assert_eq!(one_plus_erf_l::<f32>(f32::NEG_INFINITY), 0.0);
        assert!(erf(f32::NAN).is_nan() && one_plus_erf_l::<f32>(f32::NAN).is_nan());
        assert!(erf(f32::MIN_POSITIVE) > 0.0);
    }
}
