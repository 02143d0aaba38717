//! GEMM probe: fuselab's packed float32 kernel (each micro-kernel this CPU runs) against
//! matrixmultiply (ndarray's `general_mat_mul`, what the reference backend used before, and what
//! it still uses where there is no micro-kernel) on the products the bundled models make.
//!
//! ```text
//! cargo run --release --example gemm
//! ```
//!
//! Times are this thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), so other processes on
//! a busy machine inflate them less than wall time; each line is one shape, every kernel
//! measured in the same run. "A prepacked" is the best kernel with A packed once beforehand, as
//! a Conv's constant weights are. The figures in docs/benchmarks.md ("GEMM") come from here.

use fuselab::ops::sgemm::{sgemm_packed, sgemm_with, supports, Isa, PackedA, Strided};
use ndarray::{linalg::general_mat_mul, Array2};

fn cpu_ms() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("Linux");
    let ns: f64 = s
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .expect("ns");
    ns / 1e6
}

/// GFLOP/s of `f` run `reps` times.
fn rate(flop: f64, reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let t = cpu_ms();
    for _ in 0..reps {
        f();
    }
    flop * reps as f64 / ((cpu_ms() - t) / 1e3) / 1e9
}

fn main() {
    // [m, k, n, B transposed]: ResNet-18's im2col products (W [M, C·9] x cols), MobileNetV3's
    // stem, a transformer projection at 128 tokens (x [128, 768] x W), and Linear heads at
    // batch 1 (Gemm transB=1).
    let shapes: [(usize, usize, usize, bool); 8] = [
        (64, 576, 3136, false),
        (128, 1152, 784, false),
        (256, 2304, 196, false),
        (512, 4608, 49, false),
        (16, 27, 12544, false),
        (128, 768, 768, false),
        (1, 576, 1024, true),
        (1, 1024, 1000, true),
    ];
    let isas: Vec<Isa> = [Isa::Avx512, Isa::Avx2]
        .into_iter()
        .filter(|&i| supports(i))
        .collect();
    println!("GFLOP/s (thread CPU time); m x k x n, B transposed or not");
    for (m, k, n, tb) in shapes {
        let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
        let flop = 2.0 * (m * k * n) as f64;
        let reps = (4e9 / flop).clamp(3.0, 20_000.0) as usize;
        let sa = Strided::rows(&a, k);
        let sb = if tb {
            Strided::rows(&b, k).t()
        } else {
            Strided::rows(&b, n)
        };
        let mut line = format!(
            "{m:>4} x {k:>4} x {n:>5} {:>3}:",
            if tb { "B'" } else { "" }
        );
        for &isa in &isas {
            let mut c = vec![0f32; m * n];
            let r = rate(flop, reps, || {
                sgemm_with(isa, [m, k, n], 1.0, sa, sb, &mut c, n)
            });
            line += &format!("  fuselab {isa:?} {r:6.1}");
        }
        if let Some(p) = PackedA::new(sa, m, k) {
            let mut c = vec![0f32; m * n];
            let r = rate(flop, reps, || sgemm_packed(&p, n, sb, &mut c, n));
            line += &format!("  A prepacked {r:6.1}");
        }
        let av = Array2::from_shape_vec((m, k), a.clone()).expect("shape");
        let bv =
            Array2::from_shape_vec(if tb { (n, k) } else { (k, n) }, b.clone()).expect("shape");
        let bv = if tb { bv.reversed_axes() } else { bv };
        let mut cv = Array2::<f32>::zeros((m, n));
        let r = rate(flop, reps, || general_mat_mul(1.0, &av, &bv, 1.0, &mut cv));
        line += &format!("  matrixmultiply {r:6.1}");
        println!("{line}");
    }
}
