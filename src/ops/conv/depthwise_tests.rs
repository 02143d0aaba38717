//! Depthwise Conv against a naive loop written here from the definition: every output, the
//! bias, then every tap whose position is inside X (bounds checked per tap).

use super::super::super::common::test_util::*;
use super::super::conv;
use crate::ir::attr;
use crate::tensor::Tensor;

/// Values in about [-1, 1] that differ from element to element.
fn wave(n: usize, phase: f64) -> Vec<f64> {
    (0..n).map(|i| (i as f64 * 0.61 + phase).sin()).collect()
}

/// One depthwise case: X's and W's shapes (W [C·mult, 1, k...]), strides, dilations, pads.
struct Case {
    xs: Vec<usize>,
    ws: Vec<usize>,
    s: Vec<usize>,
    d: Vec<usize>,
    p: Vec<usize>,
}

impl Case {
    fn out(&self) -> Vec<usize> {
        let n = self.xs.len() - 2;
        (0..n)
            .map(|a| {
                let ek = self.d[a] * (self.ws[a + 2] - 1) + 1;
                (self.xs[a + 2] + self.p[a] + self.p[a + n] - ek) / self.s[a] + 1
            })
            .collect()
    }

    /// Y from the definition, in float64.
    fn naive(&self, x: &[f64], w: &[f64], b: &[f64]) -> Vec<f64> {
        let (xs, ws) = (&self.xs, &self.ws);
        let (n, c, m) = (xs.len() - 2, xs[1], ws[0]);
        let os = self.out();
        let unravel = |mut i: usize, shape: &[usize]| {
            let mut v = vec![0; shape.len()];
            for a in (0..shape.len()).rev() {
                v[a] = i % shape[a];
                i /= shape[a];
            }
            v
        };
        let osz: usize = os.iter().product();
        let ksz: usize = ws[2..].iter().product();
        let mut y = vec![0.0; xs[0] * m * osz];
        for (yi, yv) in y.iter_mut().enumerate() {
            let (bi, oc, o) = (yi / (m * osz), yi / osz % m, unravel(yi % osz, &os));
            *yv = b[oc];
            for t in 0..ksz {
                let k = unravel(t, &ws[2..]);
                let mut at = bi * c + oc / (m / c);
                let mut inside = true;
                for a in 0..n {
                    let pos = (o[a] * self.s[a] + k[a] * self.d[a]) as i64 - self.p[a] as i64;
                    inside &= pos >= 0 && (pos as usize) < xs[a + 2];
                    at = at * xs[a + 2] + pos.max(0) as usize;
                }
                if inside {
                    *yv += x[at] * w[oc * ksz + t];
                }
            }
        }
        y
    }

    fn attrs(&self) -> Vec<crate::onnx::proto::AttributeProto> {
        let i64s = |v: &[usize]| v.iter().map(|&v| v as i64).collect::<Vec<_>>();
        vec![
            attr::int("group", self.xs[1] as i64),
            attr::ints("strides", &i64s(&self.s)),
            attr::ints("dilations", &i64s(&self.d)),
            attr::ints("pads", &i64s(&self.p)),
        ]
    }
}

fn case(xs: &[usize], ws: &[usize], s: &[usize], d: &[usize], p: &[usize]) -> Case {
    Case {
        xs: xs.to_vec(),
        ws: ws.to_vec(),
        s: s.to_vec(),
        d: d.to_vec(),
        p: p.to_vec(),
    }
}

#[test]
fn depthwise_strides_dilations_pads_and_bias_agree_with_the_naive_loop() {
    let cases = [
        // Stride 2 and dilation 2 on both axes, uneven pads, two outputs per channel.
        case(
            &[2, 3, 9, 11],
            &[6, 1, 3, 3],
            &[2, 2],
            &[2, 2],
            &[1, 2, 3, 1],
        ),
        // MobileNet's 5x5, stride 2 one way, dilation 2 the other.
        case(
            &[1, 4, 8, 7],
            &[4, 1, 5, 5],
            &[2, 1],
            &[1, 2],
            &[2, 2, 2, 2],
        ),
        // Stride 3, pads at the start only (1-D).
        case(&[1, 2, 10], &[2, 1, 3], &[3], &[2], &[4, 0]),
        // 3-D, strides 2 on z and x.
        case(
            &[1, 2, 4, 5, 6],
            &[2, 1, 2, 3, 3],
            &[2, 1, 2],
            &[1, 2, 1],
            &[1, 0, 1, 1, 2, 0],
        ),
        // A kernel larger than X (taps wholly in the padding), one channel, group 1.
        case(
            &[1, 1, 2, 3],
            &[2, 1, 3, 3],
            &[1, 1],
            &[2, 2],
            &[2, 2, 2, 2],
        ),
        // Pads and strides so large that the padded copy is refused: the tap-by-tap loop.
        case(
            &[1, 2, 3, 3],
            &[2, 1, 2, 2],
            &[90, 90],
            &[1, 1],
            &[100, 100, 100, 100],
        ),
    ];
    for c in &cases {
        let (xn, wn): (usize, usize) = (c.xs.iter().product(), c.ws.iter().product());
        let (x, w, b) = (wave(xn, 0.2), wave(wn, 1.3), wave(c.ws[0], 2.9));
        let want = c.naive(&x, &w, &b);
        let mut shape = vec![c.xs[0], c.ws[0]];
        shape.extend(c.out());
        // float64: the same sums, in another order at most.
        let f64_in = [f64s(&c.xs, &x), f64s(&c.ws, &w), f64s(&[c.ws[0]], &b)];
        let ins64: Vec<&Tensor> = f64_in.iter().collect();
        let y = run_first(conv, &node("Conv", c.attrs()), 22, &ins64).unwrap();
        assert_close(&y, &f64s(&shape, &want), 1e-12);
        // float32.
        let f = |v: &[f64]| v.iter().map(|&v| v as f32).collect::<Vec<_>>();
        let f32_in = [
            f32s(&c.xs, &f(&x)),
            f32s(&c.ws, &f(&w)),
            f32s(&[c.ws[0]], &f(&b)),
        ];
        let ins: Vec<&Tensor> = f32_in.iter().collect();
        let y = run_first(conv, &node("Conv", c.attrs()), 22, &ins).unwrap();
        assert_close(&y, &f32s(&shape, &f(&want)), 1e-5);
        // Without a bias.
        let y = run_first(conv, &node("Conv", c.attrs()), 22, &ins[..2]).unwrap();
        let zero = vec![0.0; c.ws[0]];
        assert_close(&y, &f32s(&shape, &f(&c.naive(&x, &w, &zero))), 1e-5);
    }
}

#[test]
fn depthwise_by_hand_stride_2_with_padding() {
    // 1x1x4x4 iota, 2x2 kernel [[1, 10], [100, 1000]], stride 2, pads 1 at the start: output
    // (oy, ox) reads rows 2oy-1, 2oy and columns 2ox-1, 2ox (row or column -1: padding).
    let x = iota(&[1, 1, 4, 4]);
    let w = f32s(&[1, 1, 2, 2], &[1., 10., 100., 1000.]);
    let b = f32s(&[1], &[0.5]);
    let a = vec![
        attr::ints("strides", &[2, 2]),
        attr::ints("pads", &[1, 1, 0, 0]),
    ];
    let y = run_first(conv, &node("Conv", a), 22, &[&x, &w, &b]).unwrap();
    // (0,0): 1000·0; (0,1): 100·1 + 1000·2; (1,0): 10·4 + 1000·8; (1,1): 1·5 + 10·6 + 100·9 + 1000·10.
    let want = [0.5, 2100.5, 8040.5, 10965.5];
    assert_eq!(y, f32s(&[1, 1, 2, 2], &want));
}

/// The vector builds sum in the same order as the portable one, so every build gives the same
/// bits (a 5x5 stride-2 MobileNet layer with a bias, and a 3x3 stride-1 one). A tier this CPU
/// lacks runs the portable build, and compares equal trivially.
#[test]
fn vector_builds_match_the_portable_one_bit_for_bit() {
    use super::super::super::simd::{at, Tier};
    use super::super::super::window::{Axis, Padded};
    use super::channels;
    let axis = |inp, k, s, pad| Axis {
        inp,
        out: (inp + 2 * pad - k) / s + 1,
        k,
        s,
        d: 1,
        pb: pad as i64,
        pe: pad as i64,
    };
    for (n, k, s) in [(28usize, 5usize, 2usize), (14, 3, 1)] {
        let a = [axis(1, 1, 1, 0), axis(n, k, s, k / 2), axis(n, k, s, k / 2)];
        let osz = a[1].out * a[2].out;
        let x: Vec<f32> = wave(n * n, 0.4).iter().map(|&v| v as f32).collect();
        let w: Vec<f32> = wave(3 * k * k, 1.1).iter().map(|&v| v as f32).collect();
        let b = [0.25f32, -0.5, 0.125];
        let run = |t: Tier| {
            let mut p = Padded::new(&a, 0f32).expect("a padded copy");
            p.load(&x);
            let mut y = vec![0f32; 3 * osz];
            at(
                t,
                #[inline(always)]
                || channels(&mut p, &w, &mut y, Some(&b), [k * k, osz]),
            );
            y
        };
        let plain = run(Tier::Plain);
        for t in [Tier::Avx2, Tier::Avx512] {
            assert_eq!(run(t), plain, "{k}x{k} stride {s}: {t:?}");
        }
    }
}
