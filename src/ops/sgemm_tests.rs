use super::*;

/// Deterministic values in [-1, 1).
fn fill(len: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn naive(mkn: [usize; 3], alpha: f32, a: Strided<f32>, b: Strided<f32>, c: &mut [f32], ldc: usize) {
    let [m, k, n] = mkn;
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k)
                .map(|p| a.data[i * a.rs + p * a.cs] as f64 * b.data[p * b.rs + j * b.cs] as f64)
                .sum();
            c[i * ldc + j] += alpha * s as f32;
        }
    }
}

/// Every kernel this CPU has against a float64 triple loop: edges in every dimension,
/// several panels deep and wide, transposed operands, alpha, accumulation into C and a row
/// stride past C's width (the untouched gap must stay as it was).
#[test]
fn matches_the_triple_loop() {
    let isas: Vec<Isa> = [Isa::Avx512, Isa::Avx2]
        .into_iter()
        .filter(|&i| supports(i))
        .collect();
    let shapes = [
        [1, 1, 1],
        [1, 576, 100],
        [3, 70, 45],
        [12, 256, 32],
        [13, 7, 33],
        [5, 300, 17],
        [150, 520, 70],
        [7, 3, 3100],
        [64, 27, 3136],
        // Few columns: the matrix-vector path.
        [150, 520, 1],
        [13, 300, 3],
        [40, 700, 4],
    ];
    for isa in isas {
        for (t, &[m, k, n]) in shapes.iter().enumerate() {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let ad = fill(m * k, t as u32 * 7 + 1);
                let bd = fill(k * n, t as u32 * 7 + 2);
                let a = if ta {
                    Strided::rows(&ad, m).t()
                } else {
                    Strided::rows(&ad, k)
                };
                let b = if tb {
                    Strided::rows(&bd, k).t()
                } else {
                    Strided::rows(&bd, n)
                };
                let ldc = n + 3;
                let c0 = fill(m * ldc, t as u32 * 7 + 3);
                let (mut got, mut want) = (c0.clone(), c0.clone());
                sgemm_with(isa, [m, k, n], 0.5, a, b, &mut got, ldc);
                naive([m, k, n], 0.5, a, b, &mut want, ldc);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    if i % ldc >= n {
                        assert_eq!(g, w, "{isa:?} {m}x{k}x{n}: gap at {i} changed");
                    }
                    let tol = 1e-5 * (k as f32).sqrt() * 4.0;
                    assert!(
                        (g - w).abs() <= tol,
                        "{isa:?} {m}x{k}x{n} ta={ta} tb={tb}: c[{i}] = {g}, want {w}"
                    );
                }
            }
        }
    }
}

/// Packing A once gives what packing it on every call gives, bit for bit: deep enough for
/// three panels and tall enough for two row blocks with a ragged strip.
#[test]
fn prepacked_a_matches_packing_per_call() {
    let Some(isa) = best_isa() else { return };
    let [m, k, n] = [MC + 7, 2 * KC + 5, 45];
    let ad = fill(m * k, 11);
    let bd = fill(k * n, 12);
    let (a, b) = (Strided::rows(&ad, k), Strided::rows(&bd, n));
    let mut want = fill(m * n, 13);
    let mut got = want.clone();
    sgemm_with(isa, [m, k, n], 1.0, a, b, &mut want, n);
    let packed = PackedA::new(a, m, k).expect("a kernel");
    sgemm_packed(&packed, n, b, &mut got, n);
    assert_eq!(got, want);
    // Transposed A packs the same values.
    let at: Vec<f32> = (0..k * m).map(|i| ad[(i % m) * k + i / m]).collect();
    let packed_t = PackedA::new(Strided::rows(&at, m).t(), m, k).expect("a kernel");
    assert_eq!(packed_t.data, packed.data);
}

/// A product wider than one block of B's columns packs A once for all blocks (`pack_shared`):
/// the same bits as each block on its own, which packs A itself, with alpha, A transposed, row
/// blocks past MC and a ragged strip.
#[test]
fn a_packed_once_matches_each_block_on_its_own() {
    let Some(isa) = best_isa() else { return };
    let [m, k, n] = [MC + 7, 2 * KC + 5, NC + 45];
    let (ad, bd) = (fill(m * k, 51), fill(k * n, 52));
    let b = Strided::rows(&bd, n);
    for a in [Strided::rows(&ad, k), Strided::rows(&ad, m).t()] {
        let mut whole = fill(m * n, 53);
        let mut blocks = whole.clone();
        sgemm_with(isa, [m, k, n], 0.5, a, b, &mut whole, n);
        for (j0, w) in [(0, NC), (NC, n - NC)] {
            let bj = Strided {
                data: &bd[j0..],
                ..b
            };
            sgemm_with(isa, [m, k, w], 0.5, a, bj, &mut blocks[j0..], n);
        }
        assert!(whole == blocks, "{m}x{k}x{n}: differs");
    }
}

/// Few columns of B times a prepacked A (a squeeze-excitation 1x1 Conv): the matrix-vector
/// path over the packed strips matches the triple loop, across panels, row blocks and a ragged
/// strip, with B row-major and transposed.
#[test]
fn prepacked_a_times_few_columns() {
    if best_isa().is_none() {
        return;
    }
    let [m, k] = [MC + 7, 2 * KC + 5];
    let ad = fill(m * k, 21);
    let a = Strided::rows(&ad, k);
    let packed = PackedA::new(a, m, k).expect("a kernel");
    for n in 1..=NARROW_COLS {
        let bd = fill(k * n, 22 + n as u32);
        for b in [Strided::rows(&bd, n), Strided::rows(&bd, k).t()] {
            let ldc = n + 2;
            let mut got = fill(m * ldc, 30);
            let mut want = got.clone();
            sgemm_packed(&packed, n, b, &mut got, ldc);
            naive([m, k, n], 1.0, a, b, &mut want, ldc);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w).abs() <= 1e-4, "n={n}: c[{i}] = {g}, want {w}");
            }
        }
    }
}

/// Packing B once gives what `sgemm_with` gives, bit for bit, with each kernel the CPU has:
/// sizes off the tiles, several panels deep (k > KC) and wide (n > NC), row blocks past MC, A
/// transposed, alpha and accumulation into C past a gap.
#[test]
fn prepacked_b_matches_packing_per_call() {
    let isas = [Isa::Avx512, Isa::Avx2]
        .into_iter()
        .filter(|&i| supports(i));
    for isa in isas {
        for (t, [m, k, n]) in [
            [MC + 7, 2 * KC + 5, NC + 45],
            [5, KC + 1, 37],
            [13, 3, NARROW_COLS + 1],
            [1, 70, 33],
        ]
        .into_iter()
        .enumerate()
        {
            let seed = t as u32 * 5;
            let (ad, bd) = (fill(m * k, seed + 41), fill(k * n, seed + 42));
            let b = Strided::rows(&bd, n);
            let packed = PackedB::new_with(isa, b, k, n).expect("a kernel");
            assert_eq!(packed.shape(), [k, n]);
            for a in [Strided::rows(&ad, k), Strided::rows(&ad, m).t()] {
                let ldc = n + 3;
                let mut want = fill(m * ldc, seed + 43);
                let mut got = want.clone();
                sgemm_with(isa, [m, k, n], 0.5, a, b, &mut want, ldc);
                sgemm_packed_b(m, 0.5, a, &packed, COut::Add(&mut got), ldc);
                assert!(got == want, "{isa:?} {m}x{k}x{n}: differs");
            }
        }
    }
}

/// `COut::Fill` writes every element of C's block and reads none: memory holding NaN (standing
/// for whatever a fresh allocation holds) comes out with the bits that adding into zeros gives,
/// edges off the tiles, several panels deep and blocks wide, at one thread and split over two.
#[test]
fn fill_writes_the_product_without_reading_c() {
    use std::mem::MaybeUninit;
    let isas = [Isa::Avx512, Isa::Avx2]
        .into_iter()
        .filter(|&i| supports(i));
    for isa in isas {
        for [m, k, n] in [
            [MC + 7, 2 * KC + 5, NC + 45],
            [5, KC + 1, 37],
            [64, 700, 3100],
        ] {
            let (ad, bd) = (fill(m * k, 51), fill(k * n, 52));
            let packed = PackedB::new_with(isa, Strided::rows(&bd, n), k, n).expect("packs");
            let a = Strided::rows(&ad, k);
            let ldc = n + 2;
            let mut want = vec![0f32; m * ldc];
            sgemm_packed_b(m, 0.5, a, &packed, COut::Add(&mut want), ldc);
            let got = |threads| {
                let mut c = vec![MaybeUninit::new(f32::NAN); m * ldc];
                let run = || sgemm_packed_b(m, 0.5, a, &packed, COut::Fill(&mut c), ldc);
                crate::threads::with_threads(threads, run).expect("a pool");
                // SAFETY: every element was initialized (NaN, then maybe the product).
                c.into_iter()
                    .map(|v| unsafe { v.assume_init() })
                    .collect::<Vec<f32>>()
            };
            for threads in [1, 2] {
                let got = got(threads);
                for i in 0..m {
                    let (w, g) = (&want[i * ldc..][..n], &got[i * ldc..][..n]);
                    assert!(
                        w == g,
                        "{isa:?} {m}x{k}x{n}, {threads} threads: row {i} differs"
                    );
                    // Past the block's n columns C is left alone.
                    assert!(got[i * ldc + n..][..ldc - n].iter().all(|v| v.is_nan()));
                }
            }
        }
    }
}

/// Row-major A at alpha 1, which the AVX-512 kernel reads in place (`AStrips::InPlace`, every
/// row count from 1 to 12 in the last strip), gives the bits of the same A stored transposed,
/// which is packed: added into C, and filled, with B strided and packed, at one thread and two.
#[test]
fn a_read_in_place_matches_a_packed() {
    use std::mem::MaybeUninit;
    let isas = [Isa::Avx512, Isa::Avx2]
        .into_iter()
        .filter(|&i| supports(i));
    for isa in isas {
        assert_eq!(in_place(isa), isa == Isa::Avx512);
        for (t, [m, k, n]) in (1..=13)
            .map(|m| [m, 70, 37])
            .chain([
                [24 + 5, KC + 3, 64],
                [MC + 7, 2 * KC + 5, NC + 45],
                [128, 768, 256],
            ])
            .enumerate()
        {
            let seed = t as u32 * 3;
            let (ad, bd) = (fill(m * k, seed + 61), fill(k * n, seed + 62));
            let at: Vec<f32> = (0..k * m).map(|i| ad[(i % m) * k + i / m]).collect();
            let (a, a_t) = (Strided::rows(&ad, k), Strided::rows(&at, m).t());
            let b = Strided::rows(&bd, n);
            let packed = PackedB::new_with(isa, b, k, n).expect("packs");
            let ldc = n + 1;
            let c0 = fill(m * ldc, seed + 63);
            for threads in [1, 2] {
                let run = |a: Strided<f32>| {
                    let (mut added, mut filled) =
                        (c0.clone(), vec![MaybeUninit::new(f32::NAN); m * ldc]);
                    let mut go = || {
                        sgemm_with(isa, [m, k, n], 1.0, a, b, &mut added, ldc);
                        if FILLS {
                            sgemm_packed_b(m, 1.0, a, &packed, COut::Fill(&mut filled), ldc);
                        }
                    };
                    crate::threads::with_threads(threads, &mut go).expect("a pool");
                    // SAFETY: every element was initialized (NaN, then maybe the product).
                    let filled: Vec<f32> = filled
                        .into_iter()
                        .map(|v| unsafe { v.assume_init() })
                        .collect();
                    (added, filled)
                };
                let ((added, filled), (want_added, want_filled)) = (run(a), run(a_t));
                assert!(
                    added == want_added,
                    "{isa:?} {m}x{k}x{n}, {threads} threads: added"
                );
                for i in 0..m {
                    let (g, w) = (&filled[i * ldc..][..n], &want_filled[i * ldc..][..n]);
                    assert!(
                        g == w,
                        "{isa:?} {m}x{k}x{n}, {threads} threads: row {i} filled"
                    );
                }
            }
        }
    }
}

/// Where `sgemm` would not use B's panels, or the shape is bad, nothing is packed.
#[test]
fn prepacked_b_refuses_what_it_would_not_use() {
    let Some(isa) = best_isa() else { return };
    let d = fill(64, 1);
    assert!(PackedB::new_with(isa, Strided::rows(&d, NARROW_COLS), 16, NARROW_COLS).is_none());
    assert!(PackedB::new_with(isa, Strided::rows(&d, 8), 0, 8).is_none());
    assert!(PackedB::new_with(isa, Strided::rows(&d, 8), 9, 8).is_none());
    // Stored transposed (`dots` may take it for few rows of A).
    assert!(PackedB::new_with(isa, Strided::rows(&d, 8).t(), 8, 8).is_none());
    assert!(PackedB::new_with(isa, Strided::rows(&d, 8), usize::MAX, 8).is_none());
}

#[test]
fn covers_checks_the_last_element() {
    let d = [0f32; 12];
    assert!(Strided::rows(&d, 4).covers(3, 4));
    assert!(!Strided::rows(&d, 4).covers(4, 4));
    assert!(Strided::rows(&d, 4).t().covers(4, 3));
    assert!(!Strided::rows(&d, 4).covers(usize::MAX, 2));
    assert!(Strided::rows(&d, 4).covers(0, 99));
}

#[test]
fn threads_give_the_same_bits() {
    // Threads split C's columns (strips of B) and keep each sum's order: any thread count,
    // any ISA, ragged edges and a prepacked B give the one-thread result exactly.
    let isas: Vec<Isa> = [Isa::Avx512, Isa::Avx2]
        .into_iter()
        .filter(|&i| supports(i))
        .collect();
    for isa in isas {
        for [m, k, n] in [[13, 300, 1000], [64, 700, 3100], [8, 768, 2304]] {
            let ad = fill(m * k, 3);
            let bd = fill(k * n, 4);
            let (a, b) = (Strided::rows(&ad, k), Strided::rows(&bd, n));
            // B stored transposed: packed panel by panel, by each thread for its columns.
            let btd = fill(n * k, 6);
            let bt = Strided::rows(&btd, k).t();
            let product = || {
                let mut c = fill(m * n, 5);
                sgemm_with(isa, [m, k, n], 0.5, a, b, &mut c, n);
                let packed = PackedB::new_with(isa, b, k, n).expect("packs");
                let mut cp = vec![0f32; m * n];
                sgemm_packed_b(m, 1.0, a, &packed, COut::Add(&mut cp), n);
                sgemm_with(isa, [m, k, n], 1.0, a, bt, &mut cp, n);
                (c, cp)
            };
            let one = product();
            assert!(
                crate::threads::split(n / 32, usize::MAX).is_none(),
                "one thread outside a pool"
            );
            for threads in [2, 3] {
                let many = crate::threads::with_threads(threads, || {
                    assert!(crate::threads::split(n / 32, usize::MAX).is_some());
                    product()
                })
                .unwrap();
                let same =
                    |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
                assert!(
                    same(&one.0, &many.0),
                    "{isa:?} {m}x{k}x{n} at {threads} threads"
                );
                assert!(
                    same(&one.1, &many.1),
                    "{isa:?} {m}x{k}x{n} packed B, {threads} threads"
                );
            }
        }
    }
}

#[test]
fn small_product_threads_give_the_same_bits() {
    // Threads split the columns (64 at a time, the last unit ragged) and each element's sum
    // keeps its order: 2 and 3 threads give the one-thread result exactly, at 1 and 2 rows.
    let (k, n) = (768, 2304 + 37);
    for m in [1usize, 2] {
        let a = fill(m * k, 7);
        let b = fill(k * n, 8);
        let product = || {
            let mut y = vec![f32::NAN; m * n];
            let done = super::small_sgemm(&a, &b, &mut y, m, k, n);
            (done, y)
        };
        let (done, one) = product();
        if !done {
            return; // no AVX2 + FMA here: the caller's fallback runs instead
        }
        for threads in [2, 3] {
            let (_, many) = crate::threads::with_threads(threads, product).unwrap();
            let same = one
                .iter()
                .zip(&many)
                .all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(same, "{m}x{k}x{n} at {threads} threads");
        }
    }
}

/// Throughput of the small-product kernel against the packed one (best ISA, and AVX2) at
/// transformer shapes: what `SMALL_M` is chosen from. Timing, not a test of behaviour:
/// `cargo test --release --lib sgemm_timing -- --ignored --nocapture`.
#[cfg(target_arch = "x86_64")]
#[test]
#[ignore]
fn sgemm_timing() {
    let shapes = [
        (1, 768, 2304),
        (1, 3072, 768),
        (1, 768, 50257),
        (2, 768, 2304),
        (3, 768, 2304),
        (2, 768, 50257),
        (4, 768, 3072),
        (4, 768, 768),
        (5, 768, 768),
        (6, 768, 3072),
        (8, 768, 768),
        (16, 64, 128),
        (16, 768, 2304),
        (16, 3072, 768),
        (16, 768, 50257),
        (64, 768, 768),
        (128, 768, 768),
        (128, 768, 2304),
        (128, 768, 3072),
        (128, 3072, 768),
        (128, 768, 50257),
    ];
    if !supports(Isa::Avx2) {
        return;
    }
    for (m, k, n) in shapes {
        let a = fill(m * k, 1);
        let b = fill(k * n, 2);
        let mut y = vec![0f32; m * n];
        let reps = (2e9 / (2.0 * (m * k * n) as f64)).clamp(3.0, 2000.0) as usize;
        let flops = 2.0 * (m * k * n) as f64 * reps as f64;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            // SAFETY: AVX-512F, or AVX2 and FMA, checked (`supports`).
            unsafe {
                let all = super::small::Window::all(n);
                if supports(Isa::Avx512) {
                    super::small::window_avx512(&a, &b, &mut y, m, k, all)
                } else {
                    super::small::window_avx2(&a, &b, &mut y, m, k, all)
                }
            };
        }
        let small = flops / t.elapsed().as_secs_f64() / 1e9;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            y.fill(0.0);
            sgemm(
                [m, k, n],
                1.0,
                Strided::rows(&a, k),
                Strided::rows(&b, n),
                &mut y,
                n,
            );
        }
        let big = flops / t.elapsed().as_secs_f64() / 1e9;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            y.fill(0.0);
            sgemm_with(
                Isa::Avx2,
                [m, k, n],
                1.0,
                Strided::rows(&a, k),
                Strided::rows(&b, n),
                &mut y,
                n,
            );
        }
        let avx2 = flops / t.elapsed().as_secs_f64() / 1e9;
        let pb = super::PackedB::new(Strided::rows(&b, n), k, n);
        let t = std::time::Instant::now();
        for _ in 0..reps {
            y.fill(0.0);
            if let Some(p) = &pb {
                super::sgemm_packed_b(m, 1.0, Strided::rows(&a, k), p, super::COut::Add(&mut y), n);
            }
        }
        let prepacked = flops / t.elapsed().as_secs_f64() / 1e9;
        println!(
            "{m}x{k}x{n}: small {small:.1} GFLOP/s, packed {big:.1}, packed avx2 {avx2:.1}, \
             B prepacked {prepacked:.1} ({reps} reps)"
        );
    }
}
