//! The layering rules of docs/ARCHITECTURE.md, checked on the source tree: the protobuf codec
//! knows no IR, the IR knows no op semantics or backend, backends never read attribute records,
//! and files stay small enough to read at once.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Lines of code (comments dropped) in every non-test .rs file under `src/<dir>` (unit-test files,
/// `*_tests.rs`, may drive a layer from above).
fn code_lines(dir: &str) -> Vec<(PathBuf, usize, String)> {
    let mut files = Vec::new();
    rust_files(&src().join(dir), &mut files);
    files.retain(|f| !f.to_string_lossy().ends_with("_tests.rs"));
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("").trim().to_string();
            if !code.is_empty() {
                out.push((f.clone(), i + 1, code));
            }
        }
    }
    out
}

/// Every line of `dir` that names one of `forbidden` modules of the crate.
fn imports_of(dir: &str, forbidden: &[&str]) -> Vec<String> {
    code_lines(dir)
        .into_iter()
        .filter(|(_, _, code)| {
            forbidden.iter().any(|m| {
                code.contains(&format!("crate::{m}::")) || code.contains(&format!("crate::{m};"))
            })
        })
        .map(|(f, n, code)| format!("{}:{n}: {code}", f.display()))
        .collect()
}

#[test]
fn layers_point_one_way() {
    let codec = imports_of(
        "onnx",
        &["ir", "ops", "io", "passes", "runtime", "pipeline"],
    );
    assert!(
        codec.is_empty(),
        "the codec imports layers above it:\n{}",
        codec.join("\n")
    );
    let ir = imports_of(
        "ir",
        &["ops", "io", "passes", "runtime", "pipeline", "builder"],
    );
    assert!(
        ir.is_empty(),
        "the IR imports layers above it:\n{}",
        ir.join("\n")
    );
    let ops = imports_of("ops", &["io", "passes", "runtime", "pipeline", "builder"]);
    assert!(
        ops.is_empty(),
        "the ops layer imports layers above it:\n{}",
        ops.join("\n")
    );
}

#[test]
fn kernels_inference_lowering_and_passes_see_typed_attributes_only() {
    let raw = [
        ".attributes()",
        ".attr(",
        ".attr_int(",
        ".attr_float(",
        ".attr_ints(",
        ".attr_string(",
        ".attr_tensor(",
        ".attr_floats(",
    ];
    let mut found: Vec<String> = Vec::new();
    for dir in ["runtime", "passes", "ops"] {
        for (f, n, code) in code_lines(dir) {
            // The ops layer's one reader of the records: the attribute parser.
            if f.ends_with("ops/attrs.rs") {
                continue;
            }
            if raw.iter().any(|r| code.contains(r)) {
                found.push(format!("{}:{n}: {code}", f.display()));
            }
        }
    }
    // Sanctioned readers of the records in passes, which compare or copy them without reading
    // their meaning: CSE (two nodes are the same op only if their stored attributes are), the
    // engine (a patch's copy of a node), and a fusion that carries a node's attributes onto its
    // fused node as stored.
    let copiers = [
        "passes/cse.rs",
        "passes/rewrite.rs",
        "fuse_gemm_activation.rs",
        "fuse_conv_activation.rs",
        "fuse_conv_batchnorm.rs",
        "fuse_conv_affine.rs",
        "fuse_pad_conv.rs",
    ];
    found.retain(|l| !copiers.iter().any(|c| l.contains(c)));
    assert!(
        found.is_empty(),
        "raw attribute records read outside the ops layer:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_source_file_is_over_700_lines() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let long: Vec<String> = files
        .iter()
        .filter(|f| !f.to_string_lossy().ends_with("_tests.rs"))
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).unwrap().lines().count();
            (n > 700).then(|| format!("{}: {n} lines", f.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "split these by concept:\n{}",
        long.join("\n")
    );
    let wasm = std::fs::read_to_string(src().join("wasm.rs")).map_or(0, |t| t.lines().count());
    assert!(
        wasm <= 350,
        "src/wasm.rs has {wasm} lines; the facade stays thin (<= 350)"
    );
}
