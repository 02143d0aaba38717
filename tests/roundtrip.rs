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

#[test]
fn onnx_wheel_test_data_round_trips() {
    let data = common::onnx_wheel().join("backend/test/data");
    let mut files = Vec::new();
    for sub in [
        "simple",
        "pytorch-converted",
        "pytorch-operator",
        "light",
        "real",
    ] {
        files.extend(common::onnx_files(&data.join(sub)));
    }
    check_all(&files, 50);
}

#[test]
fn node_corpus_round_trips() {
    check_all(&common::onnx_files(&common::node_corpus()), 1000);
}
