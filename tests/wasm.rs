//! The wasm build, run under wasm-bindgen-test-runner (node): the bundled example optimizes
//! to one AddEyeLike node with exact parity, and bad bytes are an error, not a trap.
//!
//! `CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
//!    cargo test --target wasm32-unknown-unknown --test wasm`
#![cfg(target_arch = "wasm32")]

use wasm_bindgen_test::wasm_bindgen_test;

const EXAMPLE: &[u8] = include_bytes!("../examples/eyelike_add.onnx");

#[wasm_bindgen_test]
fn optimizes_the_example_in_wasm() {
    let out = fuselab::wasm::optimize(EXAMPLE, "", r#"{"N": 17}"#, true).unwrap();
    let report: serde_json::Value = serde_json::from_str(&out.report()).unwrap();
    assert_eq!(report["nodes_before"], 2);
    assert_eq!(report["nodes_after"], 1);
    assert_eq!(report["fusions"]["AddEyeLike"], 1);
    assert_eq!(report["parity"]["ok"], true);
    assert_eq!(report["parity"]["max_abs_diff"], 0.0);
    assert_eq!(report["dims"]["N"], 17);
    let summary: serde_json::Value =
        serde_json::from_str(&fuselab::wasm::inspect(&out.model()).unwrap()).unwrap();
    assert_eq!(summary["ops"]["AddEyeLike"], 1);
}

#[wasm_bindgen_test]
fn bad_bytes_are_errors() {
    assert!(fuselab::wasm::optimize(&EXAMPLE[..EXAMPLE.len() / 2], "", "", true).is_err());
    assert!(fuselab::wasm::optimize(EXAMPLE, "nope", "", true).is_err());
    assert!(fuselab::wasm::inspect(b"\xff\xff\xff").is_err());
}
