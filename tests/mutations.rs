//! Never panics: seeded byte mutations of real models (the example and every node-test model
//! whose ops the reference backend runs) go through load, optimize and run. Each stage may fail
//! with an error; none may panic. A panicking input is written to target/ to reproduce.
//!
//! The counts scale with `FUSELAB_MUTANTS` (a multiplier, default 1: a few tens of thousands of
//! mutants in CI, in about a minute); the bench run of docs/benchmarks.md ("Bad input") uses
//! `FUSELAB_MUTANTS=4 cargo test --release --test mutations -- --nocapture`, which prints the
//! counts per test.

mod common;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use fuselab::io::{load_bytes, LoadOptions};
use fuselab::runtime::inputs::{random_inputs, Rng};
use fuselab::runtime::reference::Executor;
use fuselab::Limits;

const MUTANTS_PER_MODEL: usize = 60;

/// The multiplier of every mutant count (`FUSELAB_MUTANTS`, default 1).
fn scale() -> usize {
    std::env::var("FUSELAB_MUTANTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// How far a mutant got: 0 rejected at load, 1 loaded, 2 ran (original or optimized).
fn exercise(bytes: &[u8], limits: &Limits) -> usize {
    let opts = LoadOptions {
        limits: *limits,
        ..Default::default()
    };
    let Ok(mut m) = load_bytes(bytes, &opts) else {
        return 0;
    };
    let mut reached = 1;
    let original = m.clone();
    let _ = fuselab::passes::optimize(&mut m, &[]);
    let dims = HashMap::new();
    for model in [&original, &m] {
        let Ok(inputs) = random_inputs(model, &HashMap::new(), &dims, 1, limits) else {
            continue;
        };
        if let Ok(ex) = Executor::new(model, limits) {
            if ex.run(&inputs).is_ok() {
                reached = 2;
            }
        }
    }
    reached
}

fn mutate(rng: &mut Rng, src: &[u8]) -> Vec<u8> {
    let mut b = src.to_vec();
    match rng.next_u64() % 4 {
        0 => {
            for _ in 0..1 + rng.next_u64() % 4 {
                let i = (rng.next_u64() as usize) % b.len();
                b[i] ^= 1 << (rng.next_u64() % 8);
            }
        }
        1 => {
            let i = (rng.next_u64() as usize) % b.len();
            b[i] = rng.next_u64() as u8;
        }
        2 => {
            let i = (rng.next_u64() as usize) % b.len();
            b.insert(i, rng.next_u64() as u8);
        }
        _ => {
            // Small integers are where dims, axes and attribute values live: nudge one.
            let i = (rng.next_u64() as usize) % b.len();
            b[i] = b[i].wrapping_add(1 + (rng.next_u64() % 3) as u8);
        }
    }
    b
}

#[test]
fn mutated_models_never_panic() {
    let limits = Limits {
        max_tensor_bytes: 64 << 20,
    };
    let mut seeds = vec![std::fs::read(common::repo().join("examples/eyelike_add.onnx")).unwrap()];
    for f in common::onnx_files(&common::node_corpus()) {
        let bytes = std::fs::read(&f).unwrap();
        let Ok(m) = load_bytes(&bytes, &LoadOptions::default()) else {
            continue;
        };
        let g = &m.graph;
        if g.node_ids().all(|id| runs(&m, id)) {
            seeds.push(bytes);
        }
    }
    assert!(seeds.len() > 100, "only {} seed models", seeds.len());
    let mut rng = Rng::new(2026);
    let mut reached = [0usize; 3];
    for seed in &seeds {
        for _ in 0..MUTANTS_PER_MODEL * scale() {
            let bytes = mutate(&mut rng, seed);
            let Ok(stage) = catch_unwind(AssertUnwindSafe(|| exercise(&bytes, &limits))) else {
                let out = common::repo().join("target/panicking-mutant.onnx");
                std::fs::write(&out, &bytes).unwrap();
                panic!("a mutant panicked; written to {}", out.display());
            };
            reached[stage] += 1;
        }
    }
    println!(
        "{} mutants of {} models, no panic: {} rejected at load, {} loaded but did not run, {} ran",
        reached.iter().sum::<usize>(),
        seeds.len(),
        reached[0],
        reached[1],
        reached[2]
    );
    // The mutations must reach the kernels often, or this test proves little.
    assert!(reached[2] > 1000, "only {} mutants ran", reached[2]);
}

const INTERESTING: [i64; 10] = [0, 1, -1, 2, -2, 3, 7, 1 << 31, i64::MAX, i64::MIN];

/// Sets one attribute int (or list element), input dim or initializer dim to an edge value.
fn mutate_fields(rng: &mut Rng, src: &[u8]) -> Vec<u8> {
    use fuselab::onnx::proto::{Dim, ModelProto};
    use prost::Message;
    let mut m = ModelProto::decode(src).unwrap();
    let g = m.graph.as_mut().unwrap();
    let v = INTERESTING[(rng.next_u64() % INTERESTING.len() as u64) as usize];
    let pick = |rng: &mut Rng, n: usize| (rng.next_u64() as usize) % n.max(1);
    match rng.next_u64() % 3 {
        0 if !g.node.is_empty() => {
            let n = pick(rng, g.node.len());
            let node = &mut g.node[n];
            if !node.attribute.is_empty() {
                let a = pick(rng, node.attribute.len());
                let attr = &mut node.attribute[a];
                if attr.ints.is_empty() {
                    attr.i = v;
                } else {
                    let i = pick(rng, attr.ints.len());
                    attr.ints[i] = v;
                }
            }
        }
        1 if !g.input.is_empty() => {
            let i = pick(rng, g.input.len());
            if let Some(fuselab::onnx::proto::type_proto::Value::TensorType(t)) =
                g.input[i].r#type.as_mut().and_then(|t| t.value.as_mut())
            {
                if let Some(s) = t.shape.as_mut().filter(|s| !s.dim.is_empty()) {
                    let d = pick(rng, s.dim.len());
                    s.dim[d].value = Some(Dim::DimValue(v));
                }
            }
        }
        _ => {
            for node in &mut g.node {
                for attr in &mut node.attribute {
                    if let Some(t) = attr.t.as_mut().filter(|t| !t.dims.is_empty()) {
                        let d = pick(rng, t.dims.len());
                        t.dims[d] = v;
                    }
                }
            }
        }
    }
    m.encode_to_vec()
}

#[test]
fn edge_values_in_attributes_and_dims_never_panic() {
    // A small cap keeps kernels fast on the huge dims this test writes.
    let limits = Limits {
        max_tensor_bytes: 1 << 20,
    };
    let mut rng = Rng::new(7);
    let mut ran = 0;
    let mut total = 0;
    for f in common::onnx_files(&common::node_corpus()) {
        let bytes = std::fs::read(&f).unwrap();
        let Ok(m) = load_bytes(&bytes, &LoadOptions::default()) else {
            continue;
        };
        let g = &m.graph;
        if !g.node_ids().all(|id| runs(&m, id)) {
            continue;
        }
        for _ in 0..40 * scale() {
            let mutant = mutate_fields(&mut rng, &bytes);
            total += 1;
            let Ok(stage) = catch_unwind(AssertUnwindSafe(|| exercise(&mutant, &limits))) else {
                let out = common::repo().join("target/panicking-mutant.onnx");
                std::fs::write(&out, &mutant).unwrap();
                panic!(
                    "a mutant of {} panicked; written to {}",
                    f.display(),
                    out.display()
                );
            };
            ran += usize::from(stage == 2);
        }
    }
    println!("{total} field mutants, {ran} ran, no panic");
    assert!(ran > 1000, "only {ran} mutants ran");
}

/// The real models: the committed exports (tests/models, tests/models/zoo) and the fetched ones
/// under tests/data/models up to 4 MB (the OCR detectors' and the light CNNs' weights make each
/// mutant slow without reaching more code: what the mutations change is the graph).
fn real_models() -> Vec<std::path::PathBuf> {
    let repo = common::repo();
    let mut files = common::onnx_files(&repo.join("tests/models"));
    files.extend(
        common::onnx_files(&repo.join("tests/data/models"))
            .into_iter()
            .filter(|f| std::fs::metadata(f).is_ok_and(|m| m.len() <= 4 << 20)),
    );
    files
}

#[test]
fn mutated_real_models_never_panic() {
    let limits = Limits {
        max_tensor_bytes: 16 << 20,
    };
    let files = real_models();
    assert!(files.len() >= 15, "only {} real models", files.len());
    let mut rng = Rng::new(14);
    let mut reached = [0usize; 3];
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        for i in 0..12 * scale() {
            // Alternate: bytes anywhere (mostly weights in these files), then the fields where
            // dims, axes and attribute values live.
            let mutant = if i % 2 == 0 {
                mutate(&mut rng, &bytes)
            } else {
                mutate_fields(&mut rng, &bytes)
            };
            let Ok(stage) = catch_unwind(AssertUnwindSafe(|| exercise(&mutant, &limits))) else {
                let out = common::repo().join("target/panicking-mutant.onnx");
                std::fs::write(&out, &mutant).unwrap();
                panic!(
                    "a mutant of {} panicked; written to {}",
                    f.display(),
                    out.display()
                );
            };
            reached[stage] += 1;
        }
    }
    println!(
        "{} mutants of {} real models, no panic: {} rejected at load, {} loaded but did not run, {} ran",
        reached.iter().sum::<usize>(),
        files.len(),
        reached[0],
        reached[1],
        reached[2]
    );
    assert!(reached[2] > files.len(), "only {} mutants ran", reached[2]);
}

/// Whether the reference backend runs node `id` at the model's opset for its domain.
fn runs(m: &fuselab::ir::Model, id: fuselab::ir::NodeId) -> bool {
    let n = m.graph.node(id);
    fuselab::ops::lookup(&n.domain, &n.op_type, m.opset(&n.domain).unwrap_or(1)).is_some()
}
