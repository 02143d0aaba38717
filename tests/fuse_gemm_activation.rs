//! Gemm + Relu/Tanh/Sigmoid → com.microsoft.FusedGemm: op counts, parity, and what must not fuse.

mod common;

use common::{counts, fuse, ops, parity, seeded_f32};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model};
use fuselab::{DType, Tensor};

const RULES: &[&str] = &["gemm_activation"];

/// `act(Gemm(x, W, c))` with x [batch, 4] f32 (or f64), W [3, 4] (transB) and c [3].
fn model(act: &str, dtype: DType, with_c: bool, extra_reader: bool, gemm_output: bool) -> Model {
    let mut b = GraphBuilder::new("gemm_act", 14);
    let x = b.input("x", dtype, vec![sym("batch"), Dim::Known(4)]);
    let cast = |t: Tensor| match dtype {
        DType::F64 => Tensor::F64(t.as_f32().unwrap().mapv(f64::from)),
        _ => t,
    };
    let w = b.initializer("w", &cast(seeded_f32(&[3, 4], 1)));
    let mut ins = vec![x, w];
    if with_c {
        ins.push(b.initializer("c", &cast(seeded_f32(&[3], 2))));
    }
    let t = b.op(
        "Gemm",
        &ins,
        vec![attr::int("transB", 1), attr::float("alpha", 0.5)],
    );
    let y = b.op(act, &[t], vec![]);
    b.output(y, "y");
    if extra_reader {
        let z = b.op("Neg", &[t], vec![]);
        b.output(z, "z");
    }
    if gemm_output {
        b.output(t, "t");
    }
    b.build()
}

fn assert_rejected(m: &Model, needle: &str) {
    common::assert_rejected(m, RULES, needle)
}

#[test]
fn gemm_and_each_activation_fuse_with_parity() {
    for act in ["Tanh", "Relu", "Sigmoid"] {
        let m = model(act, DType::F32, true, false, false);
        let (opt, trace) = fuse(&m, RULES);
        assert_eq!(ops(&opt), counts(&[("FusedGemm", 1)]), "{act}");
        assert_eq!(trace.rewrites[0].removed.len(), 2);
        let id = opt.graph.node_ids().next().unwrap();
        let n = opt.graph.node(id);
        assert_eq!(n.domain, "com.microsoft");
        assert_eq!(n.attr_string("activation").as_deref(), Some(act));
        assert_eq!(n.attr_int("transB"), Some(1));
        assert_eq!(n.attr_float("alpha"), Some(0.5));
        for batch in [3, 1] {
            let p = parity(&m, &opt, &[("batch", batch)]);
            assert!(
                p.max_abs_diff == 0.0,
                "{act} at batch {batch}: {}",
                p.max_abs_diff
            );
        }
    }
}

#[test]
fn gemm_output_read_elsewhere_does_not_fuse() {
    let m = model("Tanh", DType::F32, true, true, false);
    assert_rejected(&m, "has 2 consumers");
    let m = model("Tanh", DType::F32, true, false, true);
    assert_rejected(&m, "is a graph output");
}

#[test]
fn gemm_without_c_or_in_float64_does_not_fuse() {
    let m = model("Relu", DType::F32, false, false, false);
    assert_rejected(&m, "has no C input");
    let m = model("Relu", DType::F64, true, false, false);
    assert_rejected(&m, "f32 only");
}

#[test]
fn other_activations_are_not_candidates() {
    let m = model("Exp", DType::F32, true, false, false);
    let (opt, trace) = fuse(&m, RULES);
    assert_eq!(ops(&opt), ops(&m));
    assert!(trace.rejected.is_empty());
}
