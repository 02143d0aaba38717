//! Loops compiled for the widest vectors this CPU has, chosen at run time: the one owner of that
//! policy for the reference kernels' slice loops (the GEMM's intrinsics micro-kernels choose
//! their own, in sgemm.rs).
//!
//! On x86-64 the native build targets baseline x86-64 (SSE2), so LLVM vectorizes a plain loop
//! 4 floats wide. [`widest`] runs a closure inside a function compiled for AVX-512F or AVX2
//! when the CPU has it; marked `#[inline(always)]`, the closure (and the `#[inline(always)]`
//! loops it calls) is compiled into that function with its features. The features bring no
//! FMA contraction (Rust never fuses a product and a sum by itself), so every tier gives the
//! plain loop's bits. Elsewhere (wasm32 builds with simd128 at compile time) the closure just
//! runs.
//!
//! ```ignore
//! simd::widest(#[cfg_attr(target_arch = "x86_64", inline(always))] || body(x, y))
//! ```
//! The attribute is x86-64's only: in the size-optimized wasm build, forcing every such closure
//! (and the closures they pass on) inline cost 11 KB (2,506,819 against 2,495,856 bytes after
//! wasm-opt), for loops that are the same there either way.

/// The instruction sets [`at`] compiles a closure for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tier {
    /// The build's own target (SSE2 on x86-64, simd128 on wasm32).
    #[cfg_attr(not(test), allow(dead_code))]
    Plain,
    /// AVX2: 8 floats a vector.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx2,
    /// AVX-512F: 16 floats a vector.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx512,
}

impl Tier {
    /// Whether this CPU runs code compiled for the tier.
    pub(crate) fn available(self) -> bool {
        match self {
            Tier::Plain => true,
            #[cfg(target_arch = "x86_64")]
            Tier::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Tier::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// `f()` compiled for the widest tier this CPU has.
#[inline(always)]
pub(crate) fn widest<R>(f: impl FnOnce() -> R) -> R {
    for t in [Tier::Avx512, Tier::Avx2] {
        if t.available() {
            return at(t, f);
        }
    }
    f()
}

/// `f()` compiled for tier `t`, or as it is when this CPU lacks `t` (tests compare the tiers).
#[inline(always)]
pub(crate) fn at<R>(t: Tier, f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        fn wide<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        #[target_feature(enable = "avx2")]
        fn mid<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        if t.available() {
            match t {
                // SAFETY: the CPU has AVX-512F (`available` checked it); `wide` is safe code.
                Tier::Avx512 => return unsafe { wide(f) },
                // SAFETY: the CPU has AVX2 (`available` checked it); `mid` is safe code.
                Tier::Avx2 => return unsafe { mid(f) },
                Tier::Plain => {}
            }
        }
    }
    let _ = t;
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tier runs the closure once and returns its value, whether or not the CPU has it.
    #[test]
    fn every_tier_runs_the_closure() {
        let x: Vec<f32> = (0..1000).map(|i| (i as f32).sin()).collect();
        let plain: Vec<f32> = x.iter().map(|v| v * 0.5 + 1.0).collect();
        for t in [Tier::Plain, Tier::Avx2, Tier::Avx512] {
            let got = at(
                t,
                #[inline(always)]
                || x.iter().map(|v| v * 0.5 + 1.0).collect::<Vec<f32>>(),
            );
            assert_eq!(got, plain, "{t:?}");
        }
        assert!(Tier::Plain.available());
        assert_eq!(widest(|| 7), 7);
    }
}
