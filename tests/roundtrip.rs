//! Load → save with no pass re-loads to the same graph: over every model in the repo, the onnx
//! wheel's test data and the regenerated node-test corpus.

mod common;

use std::path::Path;

use fuselab::onnx::{load::decode, load_file, to_model_proto};
use fuselab::Limits;
use prost::Message;

/// Loads, saves and compares the saved ModelProto with the original, field by field. Returns
/// Ok(false) when the loader rejects the model (reported, counted by the caller).
fn round_trip(path: &Path) -> Result<bool, String> {
    let limits = Limits::default();
    let original = decode(&std::fs::read(path).unwrap()).map_err(|e| e.to_string())?;
    let m = match load_file(path, &limits) {
        Ok(m) => m,
        Err(e) => return Err(format!("load failed: {e}")),
    };
    let saved = to_model_proto(&m).map_err(|e| e.to_string())?;
    // Compared as prost re-encodings (deterministic), so NaN payloads compare equal.
    if saved.encode_to_vec() != original.encode_to_vec() {
        let (a, b) = (
            original.graph.as_ref().unwrap(),
            saved.graph.as_ref().unwrap(),
        );
        let what = if a.node != b.node {
            "nodes"
        } else if a.input != b.input || a.output != b.output {
            "inputs/outputs"
        } else if a.initializer != b.initializer {
            "initializers"
        } else if a.value_info != b.value_info {
            "value_info"
        } else {
            "model fields"
        };
        return Err(format!("saved model differs from the original in {what}"));
    }
    // And the saved bytes load again to the same thing.
    let again =
        fuselab::onnx::load_bytes(&fuselab::onnx::to_bytes(&m).unwrap(), &Default::default())
            .map_err(|e| format!("re-load failed: {e}"))?;
    if to_model_proto(&again).unwrap().encode_to_vec() != saved.encode_to_vec() {
        return Err("second round trip differs".into());
    }
    Ok(true)
}

fn check_all(files: &[std::path::PathBuf], min: usize) {
    assert!(
        files.len() >= min,
        "expected at least {min} models, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    for f in files {
        if let Err(e) = round_trip(f) {
            failures.push(format!("{}: {e}", f.display()));
        }
    }
    println!(
        "{} models round-tripped, {} failed",
        files.len() - failures.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "round trip failures:\n{}",
        failures.join("\n")
    );
}

#[test]
fn repo_models_round_trip() {
    let mut files = common::onnx_files(&common::repo().join("examples"));
    files.extend(common::onnx_files(&common::repo().join("tests/models")));
    check_all(&files, 1);
}

/// The real models the onnx wheel ships (CNNs, pytorch-converted and simple graphs).
fn wheel_models() -> Vec<std::path::PathBuf> {
    let data = common::onnx_wheel().join("backend/test/data");
    let subs = [
        "simple",
        "pytorch-converted",
        "pytorch-operator",
        "light",
        "real",
    ];
    subs.iter()
        .flat_map(|sub| common::onnx_files(&data.join(sub)))
        .collect()
}

#[test]
fn onnx_wheel_test_data_round_trips() {
    check_all(&wheel_models(), 50);
}

#[test]
fn node_corpus_round_trips() {
    check_all(&common::onnx_files(&common::node_corpus()), 1000);
}

/// Every pass on every corpus model (most hold ops the reference backend lacks): the optimized
/// graph verifies, saves and re-loads, and no rule errors.
#[test]
fn passes_are_sound_on_every_corpus_model() {
    let mut files = common::onnx_files(&common::node_corpus());
    files.extend(wheel_models());
    let mut failures = Vec::new();
    let mut rewritten = 0;
    for f in &files {
        let Ok(mut m) = load_file(f, &Limits::default()) else {
            continue; // load failures are reported by the round-trip tests
        };
        let result = fuselab::passes::optimize(&mut m, &[])
            .and_then(|trace| {
                rewritten += usize::from(!trace.rewrites.is_empty());
                fuselab::ir::verify::verify(&m)
            })
            .and_then(|_| fuselab::onnx::to_bytes(&m))
            .and_then(|b| fuselab::onnx::load_bytes(&b, &Default::default()).map(|_| ()));
        if let Err(e) = result {
            failures.push(format!("{}: {e}", f.display()));
        }
    }
    println!(
        "{} models optimized ({rewritten} rewritten), {} failed",
        files.len(),
        failures.len()
    );
    assert!(rewritten > 10, "the passes changed only {rewritten} models");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
