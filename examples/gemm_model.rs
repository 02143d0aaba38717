//! Threads probe: GPT-2 small's 49 matrix products at 1×128 (twelve blocks of 768×2304,
//! 768×768, 768×3072 and 3072×768, then the 768×50257 head), each with its own packed weight
//! (651 MB, as in the model), in model order, at 1 and 2 threads, with and without a busy pause
//! on the calling thread after each product (what the model's single-threaded ops between two
//! products look like to the pool).
//!
//! ```text
//! cargo run --release --example gemm_model [-- PAUSES_US]    # default 0,2000
//! ```
//!
//! Each figure is the median (and min) over 5 rounds of the products' summed wall time per pass
//! (the pauses not counted); the configurations alternate within each round, so a neighbour's
//! load on a shared machine hits them alike. The figures in `threads::awake`'s docs and
//! docs/benchmarks.md come from here.

use fuselab::ops::sgemm::{sgemm_packed_b, COut, PackedB, Strided};
use std::collections::BTreeMap;
use std::time::Instant;

fn fill(len: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn main() {
    let pauses: Vec<u64> = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "0,2000".into())
        .split(',')
        .map(|v| v.parse().expect("pauses: comma-separated microseconds"))
        .collect();
    let m = 128;
    let mut shapes = vec![];
    for _ in 0..12 {
        shapes.extend([(768, 2304), (768, 768), (768, 3072), (3072, 768)]);
    }
    shapes.push((768, 50257));
    let weights: Vec<PackedB> = (shapes.iter().enumerate())
        .map(|(i, &(k, n))| {
            PackedB::new(Strided::rows(&fill(k * n, i as u32), n), k, n).expect("an x86-64 kernel")
        })
        .collect();
    let a = fill(m * 3072, 99);
    let mut results: BTreeMap<(usize, u64), Vec<f64>> = BTreeMap::new();
    for _round in 0..5 {
        for threads in [1, 2] {
            for &pause in &pauses {
                let ms = fuselab::threads::with_threads(threads, || {
                    let mut y = vec![0f32; m * 50257];
                    let mut total = 0.0;
                    // One untimed pass, then two timed ones.
                    for pass in 0..3 {
                        for (&(k, n), w) in shapes.iter().zip(&weights) {
                            let t = Instant::now();
                            let a = Strided::rows(&a[..m * k], k);
                            sgemm_packed_b(m, 1.0, a, w, COut::Add(&mut y[..m * n]), n);
                            if pass > 0 {
                                total += t.elapsed().as_secs_f64() * 1e3;
                            }
                            let t = Instant::now();
                            while t.elapsed().as_micros() < pause as u128 {}
                        }
                    }
                    total / 2.0
                })
                .expect("a pool");
                results.entry((threads, pause)).or_default().push(ms);
            }
        }
    }
    for ((threads, pause), mut v) in results {
        v.sort_by(f64::total_cmp);
        println!(
            "threads {threads}, pause {pause:5} us: median {:.1} ms, min {:.1} ms",
            v[v.len() / 2],
            v[0]
        );
    }
}
