//! The profiler (`fuselab::profile`) on graphs of known structure: exactly their op sequences,
//! with exact counts and byte figures, the rule that covers each (decided by running the rules),
//! and the intermediate bytes the optimization report gives each fusion. Timing figures are
//! only checked to be present and non-negative.

mod common;

use std::collections::HashMap;
use std::time::Instant;

use common::{eyelike_add, seeded_f32};
use fuselab::builder::{dims, sym, GraphBuilder};
use fuselab::ir::{attr, Model};
use fuselab::pipeline::{self, OptimizeOptions};
use fuselab::profile::{profile_reference, Candidate, NodeTiming, Profile, ProfileOptions};
use fuselab::{DType, Tensor};

fn profile(m: &Model, dims: &[(&str, usize)]) -> Profile {
    let t0 = Instant::now();
    let opts = ProfileOptions {
        runs: 2,
        dims: dims.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        ..Default::default()
    };
    let p = profile_reference(m, &opts, &|| t0.elapsed().as_secs_f64() * 1e3).expect("profile");
    check_timing(&p);
    p
}

/// Every time is finite and non-negative, shares are fractions of the total, and the total is
/// the op types' sum.
fn check_timing(p: &Profile) {
    assert_eq!(p.timing, NodeTiming::NodeClock);
    assert!(p.total_ms.is_finite() && p.total_ms >= 0.0);
    assert!(p.bandwidth_gb_s.is_none_or(|b| b.is_finite() && b > 0.0));
    let sum: f64 = p.ops.iter().map(|o| o.ms).sum();
    assert!((sum - p.total_ms).abs() <= 1e-9 * p.total_ms.max(1.0));
    for o in &p.ops {
        assert!(o.ms >= 0.0 && (0.0..=1.0).contains(&o.share), "{o:?}");
    }
    for s in &p.sequences {
        assert!(s.ms >= 0.0 && s.share >= 0.0, "{s:?}");
    }
    for c in &p.candidates {
        assert!(c.ms >= 0.0 && c.estimated_saving_ms >= 0.0, "{c:?}");
        assert!(c.estimated_saving_ms <= c.ms + 1e-12, "{c:?}");
        assert_eq!(c.nodes.len(), c.count);
    }
}

/// (ops, count, intermediate bytes) of every sequence, sorted by ops.
fn sequences(p: &Profile) -> Vec<(Vec<&str>, usize, u64)> {
    let mut v: Vec<_> = (p.sequences.iter())
        .map(|s| (strs(&s.ops), s.count, s.intermediate_bytes))
        .collect();
    v.sort();
    v
}

/// (ops, rule, opt-in rule, count, intermediate bytes) of every candidate, sorted by ops.
type Row<'a> = (Vec<&'a str>, Option<&'a str>, Option<&'a str>, usize, u64);

fn candidates(p: &Profile) -> Vec<Row<'_>> {
    let mut v: Vec<Row> = (p.candidates.iter()).map(|c| row(c)).collect();
    v.sort();
    v
}

fn row(c: &Candidate) -> Row<'_> {
    let (r, o) = (c.rule.as_deref(), c.opt_in_rule.as_deref());
    (strs(&c.ops), r, o, c.count, c.intermediate_bytes)
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(|s| s.as_str()).collect()
}

#[test]
fn eyelike_add_at_256_is_one_sequence_of_its_identity_that_add_eyelike_fuses() {
    let p = profile(&eyelike_add(None), &[("N", 256)]);
    let n = 256 * 256 * 4;
    assert_eq!(sequences(&p), vec![(vec!["EyeLike", "Add"], 1, n)]);
    assert_eq!(
        candidates(&p),
        vec![(vec!["EyeLike", "Add"], Some("add_eyelike"), None, 1, n)]
    );
    assert_eq!(p.candidates[0].nodes.len(), 1);
    let mut ops: Vec<(&str, usize)> = p.ops.iter().map(|o| (o.op.as_str(), o.count)).collect();
    ops.sort();
    assert_eq!(ops, vec![("Add", 1), ("EyeLike", 1)]);
    assert_eq!(p.inputs.len(), 1);
    assert_eq!(
        (p.inputs[0].name.as_str(), &p.inputs[0].shape[..]),
        ("X", &[256, 256][..])
    );
    assert_eq!((p.nodes, p.runs), (2, 2));
}

/// A residual Add and torch's decomposed LayerNorm of it: `layer_norm` fuses the nine
/// LayerNorm nodes, then `skip_layer_norm` takes the Add and the fused node, so the one
/// sequence with the Add is covered by `skip_layer_norm` (through the fused node) and the
/// others by `layer_norm`.
#[test]
fn a_decomposed_skip_layer_norm_lists_exactly_its_seventeen_sequences() {
    let mut b = GraphBuilder::new("skip_ln", 17);
    let shape = || vec![sym("batch"), sym("seq"), fuselab::ir::Dim::Known(16)];
    let x = b.input("x", DType::F32, shape());
    let r = b.input("r", DType::F32, shape());
    let s = b.op("Add", &[x, r], vec![]);
    let axes = || vec![attr::ints("axes", &[-1])];
    let mean = b.op("ReduceMean", &[s], axes());
    let d = b.op("Sub", &[s, mean], vec![]);
    let two = b.initializer("two", &Tensor::scalar_f32(2.0));
    let sq = b.op("Pow", &[d, two], vec![]);
    let var = b.op("ReduceMean", &[sq], axes());
    let eps = b.initializer("eps", &Tensor::scalar_f32(1e-5));
    let ve = b.op("Add", &[var, eps], vec![]);
    let std = b.op("Sqrt", &[ve], vec![]);
    let n = b.op("Div", &[d, std], vec![]);
    let gamma = b.initializer("gamma", &seeded_f32(&[16], 1));
    let beta = b.initializer("beta", &seeded_f32(&[16], 2));
    let m = b.op("Mul", &[n, gamma], vec![]);
    let y = b.op("Add", &[m, beta], vec![]);
    b.output(y, "y");
    let model = b.build();
    let p = profile(&model, &[("batch", 2), ("seq", 3)]);
    // [2, 3, 16] float32 is 384 bytes; its mean and variance [2, 3, 1] are 24.
    let (full, row) = (384, 24);
    let ln = Some("layer_norm");
    let want: Vec<Row> = vec![
        (
            vec!["Add", "ReduceMean", "Sub"],
            Some("skip_layer_norm"),
            None,
            1,
            full + row,
        ),
        (vec!["Add", "Sqrt"], ln, None, 1, row),
        (vec!["Add", "Sqrt", "Div"], ln, None, 1, 2 * row),
        (
            vec!["Add", "Sqrt", "Div", "Mul"],
            ln,
            None,
            1,
            2 * row + full,
        ),
        (vec!["Div", "Mul"], ln, None, 1, full),
        (vec!["Div", "Mul", "Add"], ln, None, 1, 2 * full),
        (vec!["Mul", "Add"], ln, None, 1, full),
        (vec!["Pow", "ReduceMean"], ln, None, 1, full),
        (vec!["Pow", "ReduceMean", "Add"], ln, None, 1, full + row),
        (
            vec!["Pow", "ReduceMean", "Add", "Sqrt"],
            ln,
            None,
            1,
            full + 2 * row,
        ),
        (vec!["ReduceMean", "Add"], ln, None, 1, row),
        (vec!["ReduceMean", "Add", "Sqrt"], ln, None, 1, 2 * row),
        (
            vec!["ReduceMean", "Add", "Sqrt", "Div"],
            ln,
            None,
            1,
            3 * row,
        ),
        (vec!["ReduceMean", "Sub"], ln, None, 1, row),
        (vec!["Sqrt", "Div"], ln, None, 1, row),
        (vec!["Sqrt", "Div", "Mul"], ln, None, 1, row + full),
        (
            vec!["Sqrt", "Div", "Mul", "Add"],
            ln,
            None,
            1,
            row + 2 * full,
        ),
    ];
    assert_eq!(candidates(&p), want);
    let seqs: Vec<_> = want.iter().map(|w| (w.0.clone(), w.3, w.4)).collect();
    assert_eq!(sequences(&p), seqs);
    // Sub's output is read by Pow and by Div: no path may hold it as an intermediate without
    // both, so Sub → Pow and Sub → Div are no sequences.
    assert!(!seqs.iter().any(|s| s.0.starts_with(&["Sub"])));

    // The report gives each fusion the bytes it removed: layer_norm the eight intermediates of
    // the decomposition, skip_layer_norm the residual sum.
    let opts = OptimizeOptions {
        dims: [("batch".to_string(), 2), ("seq".to_string(), 3)].into(),
        ..Default::default()
    };
    let (_, rep) = pipeline::optimize(&model, &opts, &|| 0.0).expect("optimize");
    let bytes: Vec<(&str, Option<u64>)> = (rep.rewrites.iter())
        .map(|e| (e.rule.as_str(), e.intermediate_bytes))
        .collect();
    let ln_bytes = 4 * full + 4 * row;
    assert_eq!(
        bytes,
        vec![
            ("layer_norm", Some(ln_bytes)),
            ("skip_layer_norm", Some(full))
        ]
    );
}

/// A chain of five float32 elementwise ops no named rule covers: every path of 2 to 4 of them,
/// each uncovered, each one that the opt-in `fused_elementwise` would take.
#[test]
fn an_elementwise_chain_is_uncovered_and_fused_elementwise_would_take_it() {
    let mut b = GraphBuilder::new("chain", 17);
    let mut v = b.input("x", DType::F32, dims(&[4, 25]));
    let ops = ["Exp", "Neg", "Abs", "Sqrt", "Log"];
    for op in ops {
        v = b.op(op, &[v], vec![]);
    }
    b.output(v, "y");
    let p = profile(&b.build(), &[]);
    let mut want: Vec<Row> = Vec::new();
    for len in 2..=4 {
        for start in 0..=ops.len() - len {
            let inter = 400 * (len as u64 - 1);
            let seq = ops[start..start + len].to_vec();
            want.push((seq, None, Some("fused_elementwise"), 1, inter));
        }
    }
    want.sort();
    assert_eq!(want.len(), 9);
    assert_eq!(candidates(&p), want);
}

/// No rule fuses Transpose → Softmax, and fused_elementwise takes float32 only: both are
/// reported with no rule at all.
#[test]
fn a_pattern_no_rule_covers_has_rule_null() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("x", DType::F32, dims(&[3, 5]));
    let t = b.op("Transpose", &[x], vec![attr::ints("perm", &[1, 0])]);
    let s = b.op("Softmax", &[t], vec![]);
    b.output(s, "y");
    let z = b.input("z", DType::F64, dims(&[7]));
    let e = b.op("Exp", &[z], vec![]);
    let n = b.op("Neg", &[e], vec![]);
    b.output(n, "w");
    let p = profile(&b.build(), &[]);
    assert_eq!(
        candidates(&p),
        vec![
            (vec!["Exp", "Neg"], None, None, 1, 7 * 8),
            (vec!["Transpose", "Softmax"], None, None, 1, 15 * 4),
        ]
    );
}

/// An intermediate read outside the path, or a graph output, ends it; a node computed from
/// constants only (what const_fold folds) joins no path.
#[test]
fn paths_stop_at_shared_values_graph_outputs_and_constants() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("x", DType::F32, dims(&[2, 8]));
    let a = b.op("Relu", &[x], vec![]);
    let e = b.op("Exp", &[a], vec![]);
    let n = b.op("Neg", &[e], vec![]);
    let s = b.op("Sigmoid", &[a], vec![]); // a second reader of Relu's output
    b.output(n, "n");
    b.output(s, "s");
    let t = b.op("Tanh", &[n], vec![]); // n is a graph output: Neg → Tanh is no sequence
    b.output(t, "t");
    let two = fuselab::onnx::tensor::from_tensor("two", &Tensor::scalar_f32(2.0));
    let k = b.node("", "Constant", &[], 1, vec![attr::tensor("value", two)]);
    let half = b.initializer("half", &Tensor::scalar_f32(0.5));
    let k2 = b.op("Mul", &[k[0], half], vec![]); // constant: folded, not profiled
    let m = b.op("Mul", &[x, k2], vec![]);
    let r = b.op("Relu", &[m], vec![]);
    b.output(r, "r");
    let p = profile(&b.build(), &[]);
    assert_eq!(
        sequences(&p),
        vec![(vec!["Exp", "Neg"], 1, 64), (vec!["Mul", "Relu"], 1, 64)]
    );
}

/// The optimization report's per-fusion bytes: the EyeLike's N·N·4 at the parity run's N; none
/// without the parity run, which is where the sizes come from.
#[test]
fn the_report_gives_each_fusion_its_intermediate_bytes() {
    let m = eyelike_add(None);
    let opts = |parity| OptimizeOptions {
        dims: HashMap::from([("N".to_string(), 256)]),
        parity,
        ..Default::default()
    };
    let (_, rep) = pipeline::optimize(&m, &opts(true), &|| 0.0).unwrap();
    assert_eq!(rep.rewrites.len(), 1);
    assert_eq!(rep.rewrites[0].intermediate_bytes, Some(256 * 256 * 4));
    let (_, rep) = pipeline::optimize(&m, &opts(false), &|| 0.0).unwrap();
    assert_eq!(rep.rewrites[0].intermediate_bytes, None);
}

/// GPT-2 exported at opset 17 (native LayerNormalization): of its five residual Add →
/// LayerNormalization pairs only ln_f's is a sequence (the other sums are read again by the
/// next residual Add), and skip_layer_norm covers it; the optimized graph has none left.
#[test]
fn gpt2_with_native_layer_norm_has_add_layer_norm_covered_by_skip_layer_norm() {
    let path = common::repo().join("tests/models/gpt2_tiny_op17.onnx");
    let m = fuselab::io::load_file(&path, &Default::default()).expect("load");
    let dims = [("batch", 2), ("seq", 8)];
    let p = profile(&m, &dims);
    let pair = ["Add", "LayerNormalization"];
    let hits: Vec<Row> = (candidates(&p).into_iter())
        .filter(|c| c.0 == pair)
        .collect();
    // [2, 8, 64] float32.
    assert_eq!(
        hits,
        vec![(pair.to_vec(), Some("skip_layer_norm"), None, 1, 4096)]
    );
    let c = p.candidates.iter().find(|c| c.ops == pair).unwrap();
    assert_eq!(
        c.nodes,
        vec![vec![
            "/m/transformer/h.1/Add_1".to_string(),
            "/m/transformer/ln_f/LayerNormalization".to_string()
        ]]
    );
    // gemm_to_matmul rewrites each Conv1D's Reshape → Gemm → Reshape to MatMul + Add at once.
    // It is a cleanup, not a fused node, but its MatMul and Add stand for the three: where
    // attention then takes them with the Split of q, k, v, the four are covered by attention;
    // where skip_layer_norm takes only the bias Add with the residual Add, the MatMul stays
    // outside and the four are uncovered.
    let of = |ops: &[&str]| -> Vec<Row> {
        let mut v: Vec<Row> = (p.candidates.iter())
            .filter(|c| c.ops == ops)
            .map(row)
            .collect();
        v.sort();
        v
    };
    // Reshape's [16, K] and Gemm's [16, N] float32 (batch·seq = 16) for each (K, N): c_attn,
    // the attention projection, c_fc and the MLP projection, two layers each.
    let io = |k: u64, n: u64| 2 * 16 * (k + n) * 4;
    let conv1d = ["Reshape", "Gemm", "Reshape"];
    let all = io(64, 192) + io(64, 64) + io(64, 256) + io(256, 64);
    let g2m = Some("gemm_to_matmul");
    assert_eq!(of(&conv1d), vec![(conv1d.to_vec(), g2m, None, 8, all)]);
    let qkv = ["Reshape", "Gemm", "Reshape", "Split"];
    // Plus the [2, 8, 192] projection the Split reads.
    let bytes = io(64, 192) + 2 * 2 * 8 * 192 * 4;
    assert_eq!(
        of(&qkv),
        vec![(qkv.to_vec(), Some("attention"), None, 2, bytes)]
    );
    let residual = ["Reshape", "Gemm", "Reshape", "Add"];
    let bytes = io(64, 64) + io(256, 64) + 4 * 2 * 8 * 64 * 4;
    assert_eq!(
        of(&residual),
        vec![(residual.to_vec(), None, None, 4, bytes)]
    );

    let mut opt = m.clone();
    fuselab::passes::optimize(&mut opt, &[]).unwrap();
    let p = profile(&opt, &dims);
    assert!(p.sequences.iter().all(|s| !s.ops.contains(&pair[1].into())));
    // At the rules' fixed point no default rule covers anything left.
    assert!(
        p.candidates.iter().all(|c| c.rule.is_none()),
        "{:?}",
        p.candidates
    );
}

/// The copy bandwidth that caps the estimates, on a clock that advances one millisecond per
/// read: 3 copies, then copies until 20 ms have passed (22 in all, over 21 ms); on a clock that
/// never advances, none.
#[test]
fn copy_bandwidth_counts_bytes_read_and_written_over_the_clock() {
    let t = std::cell::Cell::new(0.0);
    let ticking = || {
        t.set(t.get() + 1.0);
        t.get()
    };
    let bytes = 2.0 * 16.0 * 1024.0 * 1024.0;
    let got = fuselab::profile::copy_bandwidth(&ticking).unwrap();
    assert_eq!(got, bytes * 22.0 / 21.0);
    assert_eq!(fuselab::profile::copy_bandwidth(&|| 5.0), None);
}
