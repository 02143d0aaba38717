//! Property tests: random graphs of elementwise, MatMul, Reshape, Transpose and Conv ops (and the
//! motifs the fusion rules look for: erf and tanh Gelu, decomposed LayerNorm, Add +
//! LayerNormalization, MatMul + bias + activation, EyeLike + Add, Softmax) go through
//! save → load → optimize (every rule) → the WebGPU lowering, and every stage agrees with the
//! unoptimized graph on the reference backend.
//!
//! A graph is a list of steps; each step picks its operands among the values made so far (by
//! index, modulo) and is skipped when it does not apply to the operand's shape, so every list
//! is a valid graph and proptest can shrink a failure to the few steps that matter.
//! `PROPTEST_CASES=N` runs more cases (the default is 256: seconds in CI).

mod common;

use std::collections::HashMap;

use fuselab::builder::{dims, sym, GraphBuilder};
use fuselab::io::{load_bytes, to_bytes, LoadOptions};
use fuselab::ir::{attr, Dim, Model, ValueId};
use fuselab::pipeline::{for_backend, Backend};
use fuselab::runtime::inputs::random_inputs;
use fuselab::runtime::reference::Executor;
use fuselab::tensor::{DType, Tensor};
use fuselab::Limits;
use ndarray::{ArrayD, IxDyn};
use proptest::prelude::*;

/// One step: a kind and three numbers that pick operands and parameters.
#[derive(Clone, Debug)]
struct Step(u8, u16, u16, u16);

const KINDS: u8 = 16;

#[derive(Clone, Debug)]
struct Spec {
    /// X's dims [N, C, H, W]; N is the symbol `batch` when `sym_batch`.
    x: [usize; 4],
    /// Y's side: Y is [k, k].
    k: usize,
    sym_batch: bool,
    steps: Vec<Step>,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        (1usize..=2, 1usize..=4, 1usize..=5, 1usize..=5),
        1usize..=5,
        any::<bool>(),
        prop::collection::vec(
            (0..KINDS, any::<u16>(), any::<u16>(), any::<u16>())
                .prop_map(|(k, a, b, c)| Step(k, a, b, c)),
            1..14,
        ),
    )
        .prop_map(|((n, c, h, w), k, sym_batch, steps)| Spec {
            x: [n, c, h, w],
            k,
            sym_batch,
            steps,
        })
}

/// Builds the graph of `spec`: the values with their concrete shapes, the node outputs only
/// among them being candidates for graph outputs.
struct Build {
    b: GraphBuilder,
    vals: Vec<(ValueId, Vec<usize>)>,
    outputs: Vec<ValueId>,
    consts: u32,
}

impl Build {
    fn konst(&mut self, shape: &[usize], lo: f32, hi: f32) -> ValueId {
        self.consts += 1;
        let n: usize = shape.iter().product();
        let seed = self.consts;
        let v: Vec<f32> = (0..n)
            .map(|i| {
                let u = ((i as u32 + 1).wrapping_mul(2654435761u32.wrapping_add(seed * 7919))
                    % 1000) as f32
                    / 1000.0;
                lo + (hi - lo) * u
            })
            .collect();
        let t = Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap());
        self.b.initializer(&format!("c{seed}"), &t)
    }

    fn scalar(&mut self, v: f32) -> ValueId {
        self.konst(&[], v, v)
    }

    fn ints(&mut self, v: &[i64]) -> ValueId {
        self.consts += 1;
        let t = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap());
        self.b.initializer(&format!("c{}", self.consts), &t)
    }

    fn op(
        &mut self,
        op: &str,
        ins: &[ValueId],
        attrs: Vec<fuselab::onnx::proto::AttributeProto>,
        shape: Vec<usize>,
    ) -> ValueId {
        let v = self.b.op(op, ins, attrs);
        self.vals.push((v, shape));
        v
    }

    fn pick(&self, i: u16) -> (ValueId, Vec<usize>) {
        self.vals[i as usize % self.vals.len()].clone()
    }
}

fn build(spec: &Spec) -> Model {
    let mut b = GraphBuilder::new("prop", 17);
    let [n, c, h, w] = spec.x;
    let n_dim = if spec.sym_batch {
        sym("batch")
    } else {
        Dim::Known(n as i64)
    };
    let mut xd = vec![n_dim];
    xd.extend(dims(&[c as i64, h as i64, w as i64]));
    let x = b.input("X", DType::F32, xd);
    let y = b.input("Y", DType::F32, dims(&[spec.k as i64, spec.k as i64]));
    let mut s = Build {
        b,
        vals: vec![(x, spec.x.to_vec()), (y, vec![spec.k, spec.k])],
        outputs: Vec::new(),
        consts: 0,
    };
    for st in &spec.steps {
        step(&mut s, st);
    }
    let last = s.vals.last().unwrap().0;
    if !s.outputs.contains(&last) && last != x && last != y {
        s.outputs.push(last);
    }
    if s.outputs.is_empty() {
        // Only inputs so far: one Relu so the graph computes something.
        let v = s.b.op("Relu", &[x], vec![]);
        s.outputs.push(v);
    }
    let outs = s.outputs.clone();
    for (i, v) in outs.into_iter().enumerate() {
        s.b.output(v, &format!("out{i}"));
    }
    s.b.build()
}

fn step(s: &mut Build, &Step(kind, a, p, q): &Step) {
    let (x, shape) = s.pick(a);
    let rank = shape.len();
    let last = *shape.last().unwrap_or(&1);
    match kind {
        // Unary elementwise.
        0 => {
            let op = ["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Erf"][p as usize % 6];
            s.op(op, &[x], vec![], shape);
        }
        // Binary elementwise with another value of the same shape, or a broadcast constant.
        1 => {
            let op = ["Add", "Sub", "Mul"][p as usize % 3];
            let same: Vec<ValueId> = s
                .vals
                .iter()
                .filter(|(_, sh)| *sh == shape)
                .map(|(v, _)| *v)
                .collect();
            let other = if q % 3 != 0 && !same.is_empty() {
                same[q as usize % same.len()]
            } else if q % 2 == 0 {
                s.konst(&[last], -1.0, 1.0)
            } else {
                s.scalar(0.75)
            };
            let ins = if q % 5 == 0 { [other, x] } else { [x, other] };
            s.op(op, &ins, vec![], shape);
        }
        // Division by a constant away from zero.
        2 => {
            let d = s.konst(&[last], 0.5, 2.0);
            s.op("Div", &[x, d], vec![], shape);
        }
        // MatMul by a [K, M] constant.
        3 if rank >= 1 => {
            let m = 1 + p as usize % 6;
            let wgt = s.konst(&[last, m], -0.5, 0.5);
            let mut out = shape.clone();
            *out.last_mut().unwrap() = m;
            s.op("MatMul", &[x, wgt], vec![], out);
        }
        // MatMul + bias + activation (gemm_activation's pattern).
        4 if rank >= 1 => {
            let m = 1 + p as usize % 5;
            let wgt = s.konst(&[last, m], -0.5, 0.5);
            let bias = s.konst(&[m], -0.2, 0.2);
            let mut out = shape.clone();
            *out.last_mut().unwrap() = m;
            let mm = s.op("MatMul", &[x, wgt], vec![], out.clone());
            let add = s.op("Add", &[mm, bias], vec![], out.clone());
            let act = ["Relu", "Sigmoid", "Tanh"][q as usize % 3];
            s.op(act, &[add], vec![], out);
        }
        // Reshape: flatten to 2-D, flatten to 1-D, or append a 1 (with 0s copying dims).
        5 => {
            let total: usize = shape.iter().product();
            match p % 3 {
                0 if rank >= 2 => {
                    let t = s.ints(&[-1, last as i64]);
                    s.op("Reshape", &[x, t], vec![], vec![total / last.max(1), last]);
                }
                1 => {
                    let t = s.ints(&[-1]);
                    s.op("Reshape", &[x, t], vec![], vec![total]);
                }
                _ => {
                    let mut target = vec![0i64; rank];
                    target.push(1);
                    let t = s.ints(&target);
                    let mut out = shape.clone();
                    out.push(1);
                    s.op("Reshape", &[x, t], vec![], out);
                }
            }
        }
        // Transpose: reverse, swap the last two, or none given (reverse by default).
        6 if rank >= 2 => {
            let perm: Vec<usize> = match p % 3 {
                0 => (0..rank).rev().collect(),
                1 => {
                    let mut v: Vec<usize> = (0..rank).collect();
                    v.swap(rank - 1, rank - 2);
                    v
                }
                _ => (1..rank).chain([0]).collect(),
            };
            let out = perm.iter().map(|&i| shape[i]).collect();
            let attrs = if p % 7 == 6 && perm.iter().rev().copied().eq(0..rank) {
                vec![]
            } else {
                vec![attr::ints(
                    "perm",
                    &perm.iter().map(|&i| i as i64).collect::<Vec<_>>(),
                )]
            };
            s.op("Transpose", &[x], attrs, out);
        }
        // Conv on a rank-4 value: 1x1 or 3x3 "same", grouped 1 or depthwise, with or without bias.
        7 if rank == 4 && shape[1] > 0 => {
            let ch = shape[1];
            let depthwise = q % 2 == 1;
            let m = if depthwise { ch } else { 1 + p as usize % 4 };
            let k = if p % 2 == 0 { 1 } else { 3 };
            let group = if depthwise { ch } else { 1 };
            let wgt = s.konst(&[m, ch / group, k, k], -0.5, 0.5);
            let mut ins = vec![x, wgt];
            if q % 3 == 0 {
                ins.push(s.konst(&[m], -0.1, 0.1));
            }
            let pad = (k / 2) as i64;
            let attrs = vec![
                attr::ints("kernel_shape", &[k as i64, k as i64]),
                attr::ints("pads", &[pad, pad, pad, pad]),
                attr::int("group", group as i64),
            ];
            let out = vec![shape[0], m, shape[2], shape[3]];
            s.op("Conv", &ins, attrs, out);
        }
        // Gelu, erf form: x * 0.5 * (1 + erf(x / sqrt 2)).
        8 => {
            let r2 = s.scalar(std::f32::consts::SQRT_2);
            let one = s.scalar(1.0);
            let half = s.scalar(0.5);
            let d = s.op("Div", &[x, r2], vec![], shape.clone());
            let e = s.op("Erf", &[d], vec![], shape.clone());
            let a1 = s.op("Add", &[e, one], vec![], shape.clone());
            let m1 = s.op("Mul", &[x, a1], vec![], shape.clone());
            s.op("Mul", &[m1, half], vec![], shape);
        }
        // Gelu, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
        9 => {
            let three = s.scalar(3.0);
            let c1 = s.scalar(0.044715);
            let c2 = s.scalar(0.797_884_6);
            let one = s.scalar(1.0);
            let half = s.scalar(0.5);
            let p3 = s.op("Pow", &[x, three], vec![], shape.clone());
            let m = s.op("Mul", &[p3, c1], vec![], shape.clone());
            let a = s.op("Add", &[x, m], vec![], shape.clone());
            let m2 = s.op("Mul", &[a, c2], vec![], shape.clone());
            let t = s.op("Tanh", &[m2], vec![], shape.clone());
            let a1 = s.op("Add", &[t, one], vec![], shape.clone());
            let h = s.op("Mul", &[x, half], vec![], shape.clone());
            s.op("Mul", &[h, a1], vec![], shape);
        }
        // Decomposed LayerNorm over the last axis (opset 17: axes is an attribute).
        10 if rank >= 1 => {
            let ax = || vec![attr::ints("axes", &[-1])];
            let mut red = shape.clone();
            *red.last_mut().unwrap() = 1;
            let two = s.scalar(2.0);
            let eps = s.scalar(1e-5);
            let mean = s.op("ReduceMean", &[x], ax(), red.clone());
            let d = s.op("Sub", &[x, mean], vec![], shape.clone());
            let sq = s.op("Pow", &[d, two], vec![], shape.clone());
            let var = s.op("ReduceMean", &[sq], ax(), red.clone());
            let ve = s.op("Add", &[var, eps], vec![], red.clone());
            let sd = s.op("Sqrt", &[ve], vec![], red);
            let nrm = s.op("Div", &[d, sd], vec![], shape.clone());
            if p % 2 == 0 {
                let g = s.konst(&[last], 0.5, 1.5);
                let bta = s.konst(&[last], -0.5, 0.5);
                let sc = s.op("Mul", &[nrm, g], vec![], shape.clone());
                s.op("Add", &[sc, bta], vec![], shape);
            }
        }
        // Add + LayerNormalization (skip_layer_norm's pattern).
        11 if rank >= 2 => {
            let skip = s.konst(&shape, -1.0, 1.0);
            let sum = s.op("Add", &[x, skip], vec![], shape.clone());
            let g = s.konst(&[last], 0.5, 1.5);
            let bta = s.konst(&[last], -0.5, 0.5);
            s.op(
                "LayerNormalization",
                &[sum, g, bta],
                vec![attr::int("axis", -1), attr::float("epsilon", 1e-5)],
                shape,
            );
        }
        // EyeLike + Add on a square 2-D value.
        12 if rank == 2 && shape[0] == shape[1] => {
            let attrs = if p % 3 == 0 {
                vec![]
            } else {
                vec![attr::int("k", (p % 3) as i64 - 1)]
            };
            let e = s.op("EyeLike", &[x], attrs, shape.clone());
            let ins = if q % 2 == 0 { [e, x] } else { [x, e] };
            s.op("Add", &ins, vec![], shape);
        }
        // Softmax over the last axis.
        13 if rank >= 1 => {
            s.op("Softmax", &[x], vec![attr::int("axis", -1)], shape);
        }
        // Mark a node output as a graph output (it then has a reader outside any pattern).
        14 => {
            let node_made = s.vals.len() > 2 && !s.b.graph.inputs.contains(&x);
            if node_made && !s.outputs.contains(&x) {
                s.outputs.push(x);
            }
        }
        // Identity and a Transpose pair that cancels (cleanup passes).
        15 if rank >= 2 => {
            let i = s.op("Identity", &[x], vec![], shape.clone());
            let perm: Vec<i64> = (0..rank as i64).rev().collect();
            let rev: Vec<usize> = shape.iter().rev().copied().collect();
            let t = s.op("Transpose", &[i], vec![attr::ints("perm", &perm)], rev);
            s.op("Transpose", &[t], vec![attr::ints("perm", &perm)], shape);
        }
        _ => {}
    }
}

/// Runs `m` on the same seeded inputs as every other stage.
fn run(m: &Model, spec: &Spec) -> Vec<(String, Tensor)> {
    let limits = Limits::default();
    let dims: HashMap<String, usize> = [("batch".to_string(), spec.x[0])].into();
    let inputs = random_inputs(m, &HashMap::new(), &dims, 11, &limits).expect("inputs");
    Executor::new(m, &limits)
        .expect("plan")
        .run(&inputs)
        .expect("run")
}

/// Every output equal in shape, and within 1e-3 absolute plus 1e-3 relative.
fn assert_close(stage: &str, want: &[(String, Tensor)], got: &[(String, Tensor)]) {
    assert_eq!(want.len(), got.len(), "{stage}: output count");
    for ((name, a), (gname, b)) in want.iter().zip(got) {
        assert_eq!(name, gname, "{stage}: output names");
        assert_eq!(a.shape(), b.shape(), "{stage}: shape of {name}");
        let (Tensor::F32(a), Tensor::F32(b)) = (a, b) else {
            panic!("{stage}: {name} is not float32");
        };
        for (i, (&x, &y)) in a.iter().zip(b.iter()).enumerate() {
            let ok = (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-3 + 1e-3 * x.abs();
            assert!(ok, "{stage}: {name}[{i}] = {y}, unoptimized {x}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn optimized_equals_unoptimized(spec in spec()) {
        let built = build(&spec);
        // Through the saver and the loader, as a user's file would come.
        let bytes = to_bytes(&built).expect("save");
        let original = load_bytes(&bytes, &LoadOptions::default()).expect("load");
        let want = run(&original, &spec);

        let mut optimized = original.clone();
        fuselab::passes::optimize(&mut optimized, &[]).expect("optimize");
        fuselab::ops::verify(&optimized).expect("optimized graph verifies");
        assert_close("optimize", &want, &run(&optimized, &spec));

        let saved = to_bytes(&optimized).expect("save optimized");
        let reloaded = load_bytes(&saved, &LoadOptions::default()).expect("reload optimized");
        assert_close("reloaded", &want, &run(&reloaded, &spec));

        let lowered = for_backend(&optimized, Backend::Webgpu).expect("lowering");
        assert_close("webgpu lowering", &want, &run(&lowered, &spec));
    }
}

/// The strategy reaches the rules: over a fixed seed's cases, the motifs fuse. (A generator
/// that never produced a fusable graph would make the property above prove little.)
#[test]
fn random_graphs_reach_the_fusion_rules() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut fired: HashMap<String, usize> = HashMap::new();
    for _ in 0..200 {
        let spec = spec().new_tree(&mut runner).unwrap().current();
        let mut m = build(&spec);
        let trace = fuselab::passes::optimize(&mut m, &[]).expect("optimize");
        for ev in trace.rewrites {
            *fired.entry(ev.rule).or_default() += 1;
        }
    }
    println!("fusions over 200 random graphs: {fired:?}");
    for rule in [
        "gelu",
        "fast_gelu",
        "layer_norm",
        "skip_layer_norm",
        "add_eyelike",
    ] {
        assert!(
            fired.get(rule).copied().unwrap_or(0) > 0,
            "no random graph fused by {rule}: {fired:?}"
        );
    }
}
