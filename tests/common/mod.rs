//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod gpu_parity;

use std::collections::HashMap;
use std::path::PathBuf;

use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::{attr, Model};
use fuselab::ops::verify;
use fuselab::passes::{optimize, Trace};
use fuselab::runtime::inputs::random_inputs;
use fuselab::runtime::parity::{compare, ParityReport};
use fuselab::runtime::reference::Executor;
use fuselab::{DType, Limits, Tensor};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `Y = Add(EyeLike(X, k), X)` with X f32 [N, N], as in examples/eyelike_add.onnx.
pub fn eyelike_add(k: Option<i64>) -> Model {
    let mut b = GraphBuilder::new("eyelike_add", 17);
    let x = b.input("X", DType::F32, vec![sym("N"), sym("N")]);
    let attrs = k.map(|k| vec![attr::int("k", k)]).unwrap_or_default();
    let e = b.op("EyeLike", &[x], attrs);
    let y = b.op("Add", &[e, x], vec![]);
    b.output(y, "Y");
    b.build()
}

/// Runs both models on the same seeded inputs and compares every output.
pub fn parity(a: &Model, b: &Model, dims: &[(&str, usize)]) -> ParityReport {
    let limits = Limits::default();
    let dims: HashMap<String, usize> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let inputs = random_inputs(a, &HashMap::new(), &dims, 7, &limits).expect("inputs");
    let ra = Executor::new(a, &limits)
        .expect("plan a")
        .run(&inputs)
        .expect("run a");
    let rb = Executor::new(b, &limits)
        .expect("plan b")
        .run(&inputs)
        .expect("run b");
    compare(&ra, &rb, 0.0)
}

/// op_type → count.
pub fn ops(m: &Model) -> Vec<(String, usize)> {
    fuselab::report::op_histogram(m).into_iter().collect()
}

/// The installed `onnx` wheel (its backend test data is part of our corpus). From
/// `FUSELAB_ONNX_DIR`, else the repo's `.venv`. Panics with the fix when it is missing.
pub fn onnx_wheel() -> PathBuf {
    if let Ok(d) = std::env::var("FUSELAB_ONNX_DIR") {
        return PathBuf::from(d);
    }
    let lib = repo().join(".venv/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|rd| {
        rd.flatten()
            .map(|e| e.path().join("site-packages/onnx"))
            .find(|p| p.is_dir())
    });
    found.unwrap_or_else(|| {
        panic!(
            "the onnx wheel was not found under {}: run `bash .ci/run` (or create .venv from \
             scripts/requirements.txt), or set FUSELAB_ONNX_DIR",
            lib.display()
        )
    })
}

/// The regenerated ONNX node-test corpus (scripts/gen_node_tests.py). Panics with the fix.
pub fn node_corpus() -> PathBuf {
    let d = std::env::var("FUSELAB_NODE_TESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("tests/data/node"));
    assert!(
        d.join("MANIFEST.json").is_file(),
        "node-test corpus missing at {}: run `.venv/bin/python scripts/gen_node_tests.py`",
        d.display()
    );
    d
}

/// Every `.onnx` file under `dir`, recursively, sorted.
pub fn onnx_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "onnx") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Deterministic f32 values in [-1, 1) of `shape`, different per `seed`.
pub fn seeded_f32(shape: &[usize], seed: u32) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| {
            (((i as u32 + 1).wrapping_mul(2654435761u32.wrapping_add(seed))) % 1000) as f32 / 500.0
                - 1.0
        })
        .collect();
    Tensor::F32(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), v).unwrap())
}

/// `m` optimized by `rules` (every rule when empty), verified; and the trace.
pub fn fuse(m: &Model, rules: &[&str]) -> (Model, Trace) {
    let mut opt = m.clone();
    let trace = optimize(&mut opt, rules).expect("optimize");
    verify(&opt).expect("optimized graph verifies");
    (opt, trace)
}

/// Runs `rules` on `m` and asserts that nothing changed and that some rejection reason
/// contains `needle`.
#[allow(dead_code)]
pub fn assert_rejected(m: &Model, rules: &[&str], needle: &str) {
    let (opt, trace) = fuse(m, rules);
    assert_eq!(ops(&opt), ops(m), "nothing fused");
    let reasons: Vec<&str> = trace.rejected.iter().map(|r| r.reason.as_str()).collect();
    assert!(
        reasons.iter().any(|r| r.contains(needle)),
        "no rejection mentions '{needle}': {reasons:?}"
    );
}

/// (op, count) pairs sorted, as `ops` returns them.
pub fn counts(pairs: &[(&str, usize)]) -> Vec<(String, usize)> {
    let mut v: Vec<(String, usize)> = pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    v.sort();
    v
}

/// Parity within `tol` at batch×seq 2×3 and 1×1.
pub fn assert_parity_within(a: &Model, b: &Model, tol: f64) {
    for (batch, seq) in [(2, 3), (1, 1)] {
        let p = parity(a, b, &[("batch", batch), ("seq", seq)]);
        println!("parity at {batch}x{seq}: max |diff| = {:e}", p.max_abs_diff);
        assert!(
            p.max_abs_diff <= tol,
            "max diff {} at {batch}x{seq}",
            p.max_abs_diff
        );
    }
}
