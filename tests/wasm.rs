//! The wasm API (src/wasm.rs) as the page calls it, run by wasm-bindgen-test-runner in headless
//! Chromium (chromium-driver): the bundled example optimizes to one AddEyeLike with exact parity,
//! the graph views link the fused node to the nodes it replaced, run, bench and profile work,
//! and bad input is an error naming what is wrong, not a trap; and on the browser's WebGPU
//! (SwiftShader in headless Chromium) every model of `common::gpu_parity`, MobileNetV3 and a
//! ResNet-like block run original and optimized as the reference backend computes them.
//!
//! `WASM_BINDGEN_TEST_TIMEOUT=600 \
//!    CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
//!    cargo test --target wasm32-unknown-unknown --test wasm -- --nocapture` (scripts/test.sh; the
//! runner's default 20 s for the whole page is too short for the model tests, and
//! `--nocapture` prints their diffs and dispatch counts). MobileNetV3 comes from
//! tests/data/models/torchvision/, which scripts/setup.sh fills (scripts/fetch_models.py):
//! without it this file does not compile.
#![cfg(target_arch = "wasm32")]

mod common;

use std::collections::HashMap;

use common::gpu_parity;
use fuselab::ir::Model;
use fuselab::runtime::reference::Executor;
use fuselab::wasm::{Bench, GpuBench, GpuModel, WasmModel};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

const EXAMPLE: &[u8] = include_bytes!("../examples/eyelike_add.onnx");

fn js(json: &str) -> JsValue {
    js_sys::JSON::parse(json).unwrap()
}

/// A JS value as serde_json, to assert on.
fn json(v: &JsValue) -> serde_json::Value {
    let s: String = js_sys::JSON::stringify(v).unwrap().into();
    serde_json::from_str(&s).unwrap()
}

fn error_text(e: wasm_bindgen::JsError) -> String {
    let v: JsValue = e.into();
    v.dyn_into::<js_sys::Error>().unwrap().message().into()
}

/// `Model.load` as JS calls it, with the bytes in a Uint8Array.
fn load(bytes: &[u8], external: JsValue) -> Result<WasmModel, wasm_bindgen::JsError> {
    WasmModel::load(js_sys::Uint8Array::from(bytes), external)
}

#[wasm_bindgen_test]
fn a_model_past_the_wasm_memory_ceiling_is_refused_before_it_is_copied() {
    // 1.5 GB of zeros: the browser reserves it lazily, and nothing may copy it into wasm memory.
    let big = js_sys::Uint8Array::new_with_length(1_500_000_000);
    let e = error_text(WasmModel::load(big, JsValue::UNDEFINED).err().unwrap());
    assert!(
        e.contains("the model's files total 1500000000 bytes, over the 1431655765 bytes"),
        "{e}"
    );
    // The external data files count too.
    let files = js_sys::Object::new();
    let data = js_sys::Uint8Array::new_with_length(1_431_656_000);
    js_sys::Reflect::set(&files, &"w.bin".into(), &data).unwrap();
    let e = error_text(load(EXAMPLE, files.into()).err().unwrap());
    assert!(e.contains("over the 1431655765 bytes"), "{e}");
}

#[wasm_bindgen_test]
fn optimizes_the_example_and_links_fused_nodes() {
    let m = load(EXAMPLE, JsValue::UNDEFINED).unwrap();
    let summary = json(&m.summary().unwrap());
    assert_eq!(summary["nodes"], 2);
    assert_eq!(summary["inputs"][0]["shape"], serde_json::json!(["N", "N"]));
    let o = m.optimize(js(r#"{"dims": {"N": 17}}"#)).unwrap();
    let report = json(&o.report().unwrap());
    assert_eq!(report["nodes_before"], 2);
    assert_eq!(report["nodes_after"], 1);
    assert_eq!(report["fusions"]["AddEyeLike"], 1);
    assert_eq!(report["parity"]["ok"], true);
    assert_eq!(report["parity"]["max_abs_diff"], 0.0);
    assert_eq!(report["dims"]["N"], 17);

    let after = json(&o.graph_after().unwrap());
    let ops: Vec<&serde_json::Value> = after["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "op")
        .collect();
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0]["op_type"], "AddEyeLike");
    assert_eq!(ops[0]["fused"]["rule"], "add_eyelike");
    let replaced = ops[0]["fused"]["replaced"].as_array().unwrap().clone();
    assert_eq!(replaced.len(), 2);
    let before = json(&o.graph_before().unwrap());
    for n in before["nodes"].as_array().unwrap() {
        if n["kind"] == "op" {
            assert!(replaced.contains(&n["name"]), "{n}");
            assert_eq!(n["fused_into"], ops[0]["name"]);
        }
    }
    // One edge per wire: input → EyeLike, input → Add, EyeLike → Add, Add → output.
    assert_eq!(before["edges"].as_array().unwrap().len(), 4);

    let reloaded = load(&o.bytes().unwrap(), JsValue::UNDEFINED).unwrap();
    assert_eq!(json(&reloaded.summary().unwrap())["ops"]["AddEyeLike"], 1);
}

#[wasm_bindgen_test]
fn runs_given_inputs_and_benches_both_graphs() {
    let m = load(EXAMPLE, JsValue::UNDEFINED).unwrap();
    let x = js_sys::Float32Array::from(&[1.0f32, 2.0, 3.0, 4.0][..]);
    let inputs = js_sys::Object::new();
    let t = js(r#"{"dtype": "float32", "shape": [2, 2]}"#);
    js_sys::Reflect::set(&t, &"data".into(), &x).unwrap();
    let name = json(&m.summary().unwrap())["inputs"][0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    js_sys::Reflect::set(&inputs, &name.as_str().into(), &t).unwrap();
    let out = json(&m.run(inputs.clone().into(), JsValue::UNDEFINED).unwrap());
    let y = out.as_object().unwrap().values().next().unwrap();
    assert_eq!(y["shape"], serde_json::json!([2, 2]));
    // Typed arrays stringify as index → value objects.
    assert_eq!(y["data"]["0"], 2.0);
    assert_eq!(y["data"]["3"], 5.0);
    // A session plans once and runs as often as asked, with the same results as Model.run.
    let s = m.session(js(r#"{"dims": {"N": 3}}"#)).unwrap();
    for _ in 0..2 {
        assert_eq!(json(&s.run(inputs.clone().into()).unwrap()), out);
    }
    let random = json(&s.run(JsValue::UNDEFINED).unwrap());
    let y = random.as_object().unwrap().values().next().unwrap();
    assert_eq!(y["shape"], serde_json::json!([3, 3]));
    assert_eq!(
        random,
        json(
            &m.run(JsValue::UNDEFINED, js(r#"{"dims": {"N": 3}}"#))
                .unwrap()
        )
    );
    let e = error_text(m.session(js(r#"{"backend": "webgpu"}"#)).err().unwrap());
    assert!(e.contains("GpuModel.prepare"), "{e}");
    // This build has no threads: asking for two is refused up front, naming the build that has
    // them; one thread is what it runs, and nothing split.
    let e = error_text(m.session(js(r#"{"threads": 2}"#)).err().unwrap());
    assert!(
        e.contains("threads 2: this wasm build runs on one thread"),
        "{e}"
    );
    assert!(e.contains("fuselab/threads"), "{e}");
    let e = error_text(Bench::new(&m, &m, js(r#"{"threads": 2}"#)).err().unwrap());
    assert!(e.contains("runs on one thread"), "{e}");
    let one = m
        .session(js(r#"{"dims": {"N": 3}, "threads": 1}"#))
        .unwrap();
    assert_eq!(json(&one.run(inputs.clone().into()).unwrap()), out);
    assert_eq!(fuselab::wasm::thread_pool(), 1);
    assert_eq!(fuselab::wasm::parallel_calls(), 0);

    let o = m.optimize(js(r#"{"dims": {"N": 8}}"#)).unwrap();
    let mut b = Bench::new(&m, &o.model(), js(r#"{"dims": {"N": 8}}"#)).unwrap();
    let now: js_sys::Function = js_sys::Function::new_no_args("return performance.now()");
    let times = b.step(3, &now).unwrap();
    assert_eq!(times.len(), 6);
    // Each entry is a number the clock produced (the clock is the page's; how long a run takes
    // is not this test's business).
    assert!(times.iter().all(|t| t.is_finite()), "{times:?}");
    let fake = scripted_clock();
    let repeat = b.calibrate(Some(1.0), &fake).unwrap();
    assert_eq!(repeat, 8);
    assert_eq!(b.step(1, &fake).unwrap(), [0.5, 0.25]);
    assert_eq!(json(&b.summary().unwrap())["speedup"], 2.0);
    let e = error_text(b.step(1, &fake).err().unwrap());
    assert!(e.contains("clock"), "the script is used up: {e}");
    assert_eq!(b.repeat(), repeat);
    assert_eq!(b.step(2, &now).unwrap().len(), 4);
    let broken: js_sys::Function = js_sys::Function::new_no_args("return 'soon'");
    let e = error_text(b.step(1, &broken).err().unwrap());
    assert!(e.contains("clock"), "{e}");
}

/// `Model.profile` gives the CLI's profile: EyeLike → Add at N = 256 is one sequence of one
/// 256·256 float32 identity, covered by add_eyelike; the optimized model has none left.
#[wasm_bindgen_test]
fn profiles_the_example_as_the_cli_does() {
    let m = load(EXAMPLE, JsValue::UNDEFINED).unwrap();
    let now: js_sys::Function = js_sys::Function::new_no_args("return performance.now()");
    let p = json(
        &m.profile(js(r#"{"dims": {"N": 256}}"#), Some(2), &now)
            .unwrap(),
    );
    assert_eq!(p["backend"], "reference");
    assert_eq!(p["timing"], "node-clock");
    assert_eq!(p["runs"], 2);
    assert!(p["total_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(p["sequences"].as_array().unwrap().len(), 1);
    assert_eq!(
        p["sequences"][0]["ops"],
        serde_json::json!(["EyeLike", "Add"])
    );
    assert_eq!(p["sequences"][0]["intermediate_bytes"], 256 * 256 * 4);
    let c = &p["candidates"][0];
    assert_eq!(c["rule"], "add_eyelike");
    assert_eq!(c["intermediate_bytes"], 256 * 256 * 4);
    assert!(c["estimated_saving_ms"].as_f64().unwrap() >= 0.0);
    // Node names to highlight: those of graphBefore().
    let o = m.optimize(js(r#"{"dims": {"N": 256}}"#)).unwrap();
    let names: Vec<serde_json::Value> = json(&o.graph_before().unwrap())["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].clone())
        .collect();
    for n in c["nodes"][0].as_array().unwrap() {
        assert!(names.contains(n), "{n} not in {names:?}");
    }
    let after = json(
        &o.model()
            .profile(js(r#"{"dims": {"N": 256}}"#), None, &now)
            .unwrap(),
    );
    assert_eq!(after["runs"], 10);
    assert_eq!(after["candidates"], serde_json::json!([]));
    let e = error_text(m.profile(JsValue::UNDEFINED, Some(0), &now).err().unwrap());
    assert!(e.contains("runs"), "{e}");
    let e = error_text(m.profile(js(r#"{"dimz": {}}"#), None, &now).err().unwrap());
    assert!(e.contains("dimz"), "{e}");
    let broken: js_sys::Function = js_sys::Function::new_no_args("return 'soon'");
    let e = error_text(
        m.profile(JsValue::UNDEFINED, Some(1), &broken)
            .err()
            .unwrap(),
    );
    assert!(e.contains("clock"), "{e}");
}

#[wasm_bindgen_test]
fn bad_input_is_an_error_naming_it() {
    let half = &EXAMPLE[..EXAMPLE.len() / 2];
    for bytes in [half, b"\xff\xff\xff"] {
        let e = error_text(load(bytes, JsValue::UNDEFINED).err().unwrap());
        assert!(e.starts_with("cannot decode ONNX model: "), "{e}");
    }
    let m = load(EXAMPLE, JsValue::UNDEFINED).unwrap();
    let e = error_text(m.optimize(js(r#"{"rules": ["nope"]}"#)).err().unwrap());
    assert!(e.contains("nope"), "{e}");
    let e = error_text(m.optimize(js(r#"{"rulez": []}"#)).err().unwrap());
    assert!(e.contains("rulez"), "{e}");
    let e = error_text(
        m.run(JsValue::UNDEFINED, js(r#"{"backend": "webgpu"}"#))
            .err()
            .unwrap(),
    );
    assert!(e.contains("webgpu"), "{e}");
    let bad = js(r#"{"X": {"dtype": "float32", "shape": [3, 3], "data": null}}"#);
    let e = error_text(m.run(bad, JsValue::UNDEFINED).err().unwrap());
    assert!(e.contains("typed array"), "{e}");
}

/// `Y = X + W` with W (float32[2]) stored in the external file `w.bin`.
fn external_data_model() -> Vec<u8> {
    use fuselab::onnx::proto::{
        data_type, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto,
        TensorProto, ValueInfoProto, DATA_LOCATION_EXTERNAL,
    };
    use prost::Message;
    let vi = |name: &str| ValueInfoProto {
        name: name.into(),
        r#type: Some(
            fuselab::ir::TensorType::new(fuselab::DType::F32, vec![fuselab::ir::Dim::Known(2)])
                .to_proto(),
        ),
        ..Default::default()
    };
    let entry = |k: &str, v: &str| StringStringEntryProto {
        key: k.into(),
        value: v.into(),
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(GraphProto {
            name: "g".into(),
            node: vec![NodeProto {
                op_type: "Add".into(),
                name: "add".into(),
                input: vec!["X".into(), "W".into()],
                output: vec!["Y".into()],
                ..Default::default()
            }],
            initializer: vec![TensorProto {
                name: "W".into(),
                dims: vec![2],
                data_type: data_type::FLOAT,
                data_location: DATA_LOCATION_EXTERNAL,
                external_data: vec![entry("location", "w.bin"), entry("length", "8")],
                ..Default::default()
            }],
            input: vec![vi("X")],
            output: vec![vi("Y")],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

#[wasm_bindgen_test]
fn external_data_files_come_with_the_model() {
    let bytes = external_data_model();
    let e = error_text(load(&bytes, JsValue::UNDEFINED).err().unwrap());
    assert!(e.contains("w.bin"), "{e}");

    let w: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let files = js_sys::Object::new();
    js_sys::Reflect::set(&files, &"w.bin".into(), &js_sys::Uint8Array::from(&w[..])).unwrap();
    let m = load(&bytes, files.into()).unwrap();
    let inputs = js(r#"{"X": {"dtype": "float32", "shape": [2]}}"#);
    let x = js_sys::Reflect::get(&inputs, &"X".into()).unwrap();
    js_sys::Reflect::set(
        &x,
        &"data".into(),
        &js_sys::Float32Array::from(&[1.0f32, 1.0][..]),
    )
    .unwrap();
    let out = json(&m.run(inputs, JsValue::UNDEFINED).unwrap());
    assert_eq!(out["Y"]["data"]["0"], 2.5);
    assert_eq!(out["Y"]["data"]["1"], -1.0);

    let wrong = js_sys::Object::new();
    js_sys::Reflect::set(&wrong, &"w.bin".into(), &JsValue::from(3)).unwrap();
    let e = error_text(load(&bytes, wrong.into()).err().unwrap());
    assert!(e.contains("'w.bin' is not a Uint8Array"), "{e}");
}

/// The WebGPU backend in the browser (Chromium's WebGPU, SwiftShader here; webdriver.json passes
/// `--enable-unsafe-webgpu`): the example, unfused and fused, as the reference backend computes
/// it, in 2 and 1 dispatches.
#[wasm_bindgen_test]
async fn webgpu_in_the_browser_matches_the_reference_backend() {
    let m = load(EXAMPLE, JsValue::UNDEFINED).unwrap();
    let o = m.optimize(js(r#"{"dims": {"N": 33}}"#)).unwrap();
    let dims = HashMap::from([("N".to_string(), 33usize)]);
    let limits = fuselab::Limits::default();
    for (model, want_dispatches) in [(m.inner().clone(), 2), (o.model().inner().clone(), 1)] {
        let g = GpuModel::prepare_with(model.clone(), dims.clone())
            .await
            .unwrap_or_else(|e| panic!("no WebGPU in this browser: {e:?}"));
        assert_eq!(g.dispatches(), want_dispatches);
        let got = g.run_with(&dims, 3).await.unwrap();
        let feeds =
            fuselab::runtime::inputs::random_inputs(&model, &HashMap::new(), &dims, 3, &limits)
                .unwrap();
        let want = fuselab::runtime::reference::Executor::new(&model, &limits)
            .unwrap()
            .run(&feeds)
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1.max_abs_diff(&want[0].1), Some(0.0));
    }
}

/// `GpuBench`: the bench policy with runs on the browser's WebGPU (a scripted clock, read once
/// per sample, gives exact figures), both graphs as the WebGPU backend runs them, and one
/// `calibrate` or `step` at a time.
#[wasm_bindgen_test]
async fn gpu_bench_times_both_graphs_on_webgpu() {
    use wasm_bindgen_futures::JsFuture;
    let m = load(EXAMPLE, JsValue::UNDEFINED).unwrap();
    let o = m.optimize(js(r#"{"dims": {"N": 33}}"#)).unwrap();
    let dims = HashMap::from([("N".to_string(), 33usize)]);
    let g = GpuBench::prepare_with(m.inner().clone(), o.model().inner().clone(), dims, 0)
        .await
        .unwrap_or_else(|e| panic!("no WebGPU in this browser: {e:?}"));
    assert_eq!(
        json(&g.dispatches().unwrap()),
        serde_json::json!({"original": 2, "optimized": 1})
    );
    assert_eq!(
        json(&g.nodes().unwrap()),
        serde_json::json!({"original": 2, "optimized": 1})
    );
    // As for `Bench`: warm-up to 1 s, samples of 1, 2, 4, 8 runs; 8 reaches 1 ms.
    let fake = scripted_clock();
    let repeat = JsFuture::from(g.calibrate(Some(1.0), fake.clone()))
        .await
        .unwrap();
    assert_eq!(repeat.as_f64(), Some(8.0));
    assert_eq!(g.repeat(), 8);
    let times = JsFuture::from(g.step(1, fake)).await.unwrap();
    assert_eq!(js_sys::Float64Array::from(times).to_vec(), [0.5, 0.25]);
    let summary = json(&g.summary().unwrap());
    assert_eq!(summary["samples"], 1);
    assert_eq!(summary["speedup"], 2.0);

    let now = js_sys::Function::new_no_args("return performance.now()");
    let first = g.step(1, now.clone());
    let second = JsFuture::from(g.step(1, now)).await;
    let e: js_sys::Error = second.err().unwrap().dyn_into().unwrap();
    assert!(String::from(e.message()).contains("still running"));
    let first = js_sys::Float64Array::from(JsFuture::from(first).await.unwrap());
    assert_eq!(first.length(), 2);

    // The optimized graph as the WebGPU backend runs it (`pipeline::for_backend`, as in
    // `fuselab bench --backend webgpu`): `Relu(Mul(Add(x, y), 0.5))`, which no default rule
    // fuses, is one FusedElementwise kernel.
    use fuselab::builder::{sym, GraphBuilder};
    let mut b = GraphBuilder::new("chain", 17);
    let x = b.input("x", fuselab::DType::F32, vec![sym("N")]);
    let y = b.input("y", fuselab::DType::F32, vec![sym("N")]);
    let half = fuselab::Tensor::F32(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), 0.5));
    let half = b.initializer("half", &half);
    let s = b.op("Add", &[x, y], vec![]);
    let p = b.op("Mul", &[s, half], vec![]);
    let r = b.op("Relu", &[p], vec![]);
    b.output(r, "Y");
    let chain = b.build();
    let opts = fuselab::pipeline::OptimizeOptions::default();
    let (optimized, _) = fuselab::pipeline::optimize(&chain, &opts, &|| 0.0).unwrap();
    let dims = HashMap::from([("N".to_string(), 5usize)]);
    let g = GpuBench::prepare_with(chain, optimized, dims, 0)
        .await
        .unwrap();
    let want = serde_json::json!({"original": 3, "optimized": 1});
    assert_eq!(json(&g.nodes().unwrap()), want);
    assert_eq!(json(&g.dispatches().unwrap()), want);
}

/// A fake clock, read once per sample: 3 warm-up pairs ending at 1 s, then 3 trial pairs at 1, 2,
/// 4 and 8 runs per sample, the fastest sample reading 0.25, 0.5, 0.75 and 1 ms (calibration stops
/// at 8), then one pair: original 4 ms, optimized 2 ms for 8 runs each; then it is used up.
fn scripted_clock() -> js_sys::Function {
    let mut t = vec![0.0; 6];
    t.push(1000.0);
    for dt in [0.25, 0.5, 0.75, 1.0] {
        for _ in 0..6 {
            t.push(t.last().unwrap() + dt);
        }
    }
    let end = *t.last().unwrap();
    t.extend([end + 10.0, end + 14.0, end + 16.0]);
    let script = js_sys::Function::new_with_args("t", "let i = 0; return () => t[i++];");
    script
        .call1(&JsValue::NULL, &js_sys::Float64Array::from(&t[..]))
        .unwrap()
        .into()
}

/// `model` on the reference backend.
fn on_reference(
    model: &Model,
    feeds: &HashMap<String, fuselab::Tensor>,
) -> Vec<(String, fuselab::Tensor)> {
    let limits = fuselab::Limits::default();
    Executor::new(model, &limits).unwrap().run(feeds).unwrap()
}

/// `model` on the browser's WebGPU, prepared for `dims`: its outputs and the dispatches of one
/// run.
async fn on_webgpu(
    model: &Model,
    dims: &HashMap<String, usize>,
    feeds: &HashMap<String, fuselab::Tensor>,
) -> (Vec<(String, fuselab::Tensor)>, usize) {
    let g = GpuModel::prepare_with(model.clone(), dims.clone())
        .await
        .unwrap_or_else(|e| panic!("cannot prepare the model on this browser's WebGPU: {e:?}"));
    (g.run_inputs(feeds).await.unwrap(), g.dispatches())
}

/// Where the original graph is compared.
#[derive(PartialEq)]
enum Original {
    /// Run on WebGPU too, against its reference run; the optimized graph must take fewer
    /// dispatches.
    OnWebgpu,
    /// It has an op without a WebGPU kernel: the optimized graph's WebGPU run is compared with
    /// the original's reference run instead.
    ReferenceOnly,
}

/// One model on WebGPU against the reference backend: the original, the optimized graph and
/// the optimized graph as the page's WebGPU benchmark runs it (`pipeline::for_backend`, with
/// the elementwise lowering), all on the same seeded inputs (those the native tests use), each
/// within `bound`. Logs the diffs and dispatches; returns what is wrong (empty when all is
/// well).
async fn check_on_webgpu(
    name: &str,
    (original, how): (&Model, Original),
    optimized: &Model,
    dims: &HashMap<String, usize>,
    bound: f64,
) -> Vec<String> {
    let start = js_sys::Date::now();
    let limits = fuselab::Limits::default();
    let feeds =
        fuselab::runtime::inputs::random_inputs(original, &HashMap::new(), dims, 7, &limits)
            .unwrap();
    let lowered =
        fuselab::pipeline::for_backend(optimized, fuselab::pipeline::Backend::Webgpu).unwrap();
    let (got_f, nf) = on_webgpu(optimized, dims, &feeds).await;
    let df = gpu_parity::max_abs_diff(&on_reference(optimized, &feeds), &got_f);
    let (got_l, nl) = on_webgpu(&lowered, dims, &feeds).await;
    let dl = gpu_parity::max_abs_diff(&on_reference(&lowered, &feeds), &got_l);
    let want_u = on_reference(original, &feeds);
    let (du, nu) = match how {
        Original::OnWebgpu => {
            let (got_u, nu) = on_webgpu(original, dims, &feeds).await;
            (gpu_parity::max_abs_diff(&want_u, &got_u), Some(nu))
        }
        Original::ReferenceOnly => (gpu_parity::max_abs_diff(&want_u, &got_f), None),
    };
    let original_is = match nu {
        Some(n) => format!("original ({n} dispatches)"),
        None => "optimized on WebGPU vs original on reference (no WebGPU run of it)".into(),
    };
    // The outputs' scale, to read the diffs against.
    let largest = want_u
        .iter()
        .flat_map(|(_, t)| t.to_f64_vec())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let mut dims: Vec<_> = dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
    dims.sort();
    wasm_bindgen_test::console_log!(
        "{name} ({}): max |diff| {du:.2e} {original_is}, {df:.2e} optimized ({nf}), {dl:.2e} \
         lowered for WebGPU ({nl}); bound {bound:e}; max |output| {largest:.2e}; {:.1} s",
        dims.join(", "),
        (js_sys::Date::now() - start) / 1000.0
    );
    let mut bad = Vec::new();
    for (graph, d) in [
        (original_is.as_str(), du),
        ("optimized", df),
        ("lowered", dl),
    ] {
        // `max_abs_diff` is infinite where an output has a NaN.
        if d > bound {
            bad.push(format!("{name} {graph}: max |diff| {d:e} over {bound:e}"));
        }
    }
    if !(nu.is_none_or(|nu| nf < nu) && nl <= nf) {
        bad.push(format!(
            "{name}: {nu:?} dispatches original, {nf} optimized, {nl} lowered"
        ));
    }
    bad
}

/// Every transformer of `gpu_parity::ZOO` (GatherND, DynamicQuantizeLinear, MatMulInteger,
/// DynamicQuantizeMatMul, MatMulNBits, RotaryEmbedding, GroupQueryAttention,
/// MultiHeadAttention, Attention, (Skip)(Simplified)LayerNormalization, FastGelu, BiasGelu,
/// Gelu, float16, ViT's and Whisper's Convs), optimized as the page does (`Model.optimize`), on
/// the browser's WebGPU against the reference backend at the sizes and bounds the native tests
/// use (tests/webgpu/models.rs), in fewer dispatches optimized.
#[wasm_bindgen_test]
async fn zoo_models_on_webgpu_match_the_reference_backend() {
    let mut bad = Vec::new();
    for z in gpu_parity::ZOO {
        let m = load(z.bytes, JsValue::UNDEFINED).unwrap();
        let dims = z.dims();
        let options = serde_json::json!({"dims": dims, "parity": false}).to_string();
        let o = m.optimize(js(&options)).unwrap();
        let optimized = o.model().inner().clone();
        let original = (m.inner(), Original::OnWebgpu);
        bad.extend(check_on_webgpu(z.name(), original, &optimized, &dims, z.bound).await);
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// torchvision's MobileNetV3-small at 224×224 (filled by scripts/fetch_models.py, which
/// scripts/setup.sh runs): depthwise and strided Convs, FusedConv (Relu, and HardSigmoid with
/// its parameters), HardSwish (not fused: onnxruntime's FusedConv has no HardSwish),
/// GlobalAveragePool, the squeeze-excitation Mul, Gemm.
#[wasm_bindgen_test]
async fn mobilenet_on_webgpu_matches_the_reference_backend() {
    const MOBILENET: &[u8] = include_bytes!("data/models/torchvision/mobilenet_v3_small.onnx");
    let m = load(MOBILENET, JsValue::UNDEFINED).unwrap();
    let o = m
        .optimize(js(r#"{"dims": {"batch": 1}, "parity": false}"#))
        .unwrap();
    let optimized = o.model().inner().clone();
    let fused = gpu_parity::fused_convs(&optimized);
    wasm_bindgen_test::console_log!("mobilenet_v3_small FusedConv: {fused:?}");
    assert!(
        fused.contains_key("Relu") && fused.contains_key("HardSigmoid"),
        "{fused:?}"
    );
    let dims = HashMap::from([("batch".to_string(), 1)]);
    let bad = check_on_webgpu(
        "mobilenet_v3_small",
        (m.inner(), Original::OnWebgpu),
        &optimized,
        &dims,
        gpu_parity::TORCHVISION_BOUND,
    )
    .await;
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// `gpu_parity::resnet_block`: Conv + BatchNormalization + Relu, MaxPool, the residual Add +
/// Relu, HardSigmoid, GlobalAveragePool; optimized, the batch norms fold and four FusedConvs
/// (with Relu, the residual Z, HardSigmoid's alpha and beta) remain.
#[wasm_bindgen_test]
async fn resnet_block_on_webgpu_matches_the_reference_backend() {
    let m = gpu_parity::resnet_block();
    let opts = fuselab::pipeline::OptimizeOptions::default();
    let (optimized, report) = fuselab::pipeline::optimize(&m, &opts, &js_sys::Date::now).unwrap();
    assert_eq!(report.parity.map(|p| p.ok), Some(true));
    let fused: Vec<_> = gpu_parity::fused_convs(&optimized).into_iter().collect();
    let want = [("HardSigmoid", 1), ("Relu", 2), ("Relu+Z", 1)];
    assert_eq!(fused, want.map(|(k, n)| (k.to_string(), n)), "FusedConv");
    let ops = fuselab::report::op_histogram(&optimized);
    assert_eq!(ops.get("BatchNormalization"), None, "{ops:?}");
    let mut bad = Vec::new();
    for batch in [1, 2] {
        let dims = HashMap::from([("batch".to_string(), batch)]);
        let name = "resnet_block";
        let bound = gpu_parity::RESNET_BLOCK_BOUND;
        // BatchNormalization has no WebGPU kernel: the original runs on the reference only.
        let original = (&m, Original::ReferenceOnly);
        bad.extend(check_on_webgpu(name, original, &optimized, &dims, bound).await);
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The wasm build's MatMul kernels (the SIMD128 packed GEMM, its prepacked-B path, the
/// small-product window and the thin paths) against a float64 triple loop: edges in every
/// dimension, panels deeper than `KC` and wider than `NC`, transposed operands, alpha, and
/// accumulation into C with a row stride past its width (the gap must stay untouched).
#[wasm_bindgen_test]
fn simd128_gemm_matches_the_triple_loop() {
    use fuselab::ops::sgemm::{self, Isa, PackedB, Strided};
    assert_eq!(sgemm::best_isa(), Some(Isa::Simd128));
    let fill = |len: usize, seed: u32| -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).max(1);
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    };
    let naive = |[m, k, n]: [usize; 3],
                 alpha: f32,
                 a: Strided<f32>,
                 b: Strided<f32>,
                 c: &mut [f32],
                 ldc: usize| {
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|p| {
                        a.data[i * a.rs + p * a.cs] as f64 * b.data[p * b.rs + j * b.cs] as f64
                    })
                    .sum();
                c[i * ldc + j] += alpha * s as f32;
            }
        }
    };
    let shapes = [
        [1, 1, 1],
        [1, 576, 100],
        [2, 300, 37],
        [3, 70, 45],
        [4, 256, 8],
        [13, 7, 33],
        [5, 300, 17],
        [150, 520, 70],
        [7, 3, 3100],
        [40, 700, 4],
        [3, 300, 1],
    ];
    for (t, &[m, k, n]) in shapes.iter().enumerate() {
        for (ta, tb) in [(false, false), (true, false), (false, true)] {
            let ad = fill(m * k, t as u32 * 7 + 1);
            let bd = fill(k * n, t as u32 * 7 + 2);
            let a = if ta {
                Strided::rows(&ad, m).t()
            } else {
                Strided::rows(&ad, k)
            };
            let b = if tb {
                Strided::rows(&bd, k).t()
            } else {
                Strided::rows(&bd, n)
            };
            let ldc = n + 3;
            let c0 = fill(m * ldc, t as u32 * 7 + 3);
            let mut want = c0.clone();
            naive([m, k, n], 0.5, a, b, &mut want, ldc);
            let mut got = c0.clone();
            assert!(sgemm::sgemm([m, k, n], 0.5, a, b, &mut got, ldc));
            let mut packed = c0.clone();
            if let Some(pb) = PackedB::new(b, k, n) {
                sgemm::sgemm_packed_b(m, 0.5, a, &pb, sgemm::COut::Add(&mut packed), ldc);
            } else {
                packed.clone_from(&got);
            }
            for (name, out) in [("sgemm", &got), ("packed B", &packed)] {
                for i in 0..m {
                    for j in 0..ldc {
                        let (g, w) = (out[i * ldc + j], want[i * ldc + j]);
                        let tol = if j < n {
                            1e-4 * (1.0 + k as f32).sqrt()
                        } else {
                            0.0
                        };
                        assert!(
                            (g - w).abs() <= tol,
                            "{name} {m}x{k}x{n} ta={ta} tb={tb} at ({i},{j}): {g} vs {w}"
                        );
                    }
                }
            }
        }
        if m <= 2 {
            let (ad, bd) = (fill(m * k, t as u32 + 11), fill(k * n, t as u32 + 12));
            let mut want = vec![0f32; m * n];
            naive(
                [m, k, n],
                1.0,
                Strided::rows(&ad, k),
                Strided::rows(&bd, n),
                &mut want,
                n,
            );
            let mut got = vec![f32::NAN; m * n];
            assert!(sgemm::small_sgemm(&ad, &bd, &mut got, m, k, n));
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-4 * (1.0 + k as f32).sqrt(),
                    "small {m}x{k}x{n}: {g} vs {w}"
                );
            }
        }
    }
}

/// The wasm build's four-lane paths (`simd::map_biased`, `simd::softmax_row` and the norms:
/// the size-optimized build vectorizes no loop, so these are written with SIMD128 by hand)
/// against the same ops in float64 (scalar kernels, libm's exp and an erf series): Softmax over
/// rows of 37 (nine vectors and a tail; scores far apart, so some exps underflow to 0),
/// com.microsoft Gelu, FastGelu and BiasGelu (a bias row of 37), and the norm rows
/// (`simd::layer_norm_row`, `simd::rms_row`) through SkipLayerNormalization and
/// SkipSimplifiedLayerNormalization.
#[wasm_bindgen_test]
fn four_lane_softmax_and_gelu_match_float64() {
    use fuselab::builder::{dims, GraphBuilder};
    use fuselab::ir::attr;
    use fuselab::DType;
    let (rows, n) = (3usize, 37usize);
    let xs: Vec<f32> = (0..rows * n)
        .map(|i| ((i * 7919) % 113) as f32 / 9.0 - 6.0 - if i % 17 == 0 { 150.0 } else { 0.0 })
        .collect();
    let bias: Vec<f32> = (0..n).map(|j| (j as f32 - 18.0) / 20.0).collect();
    let tensor = |dt: DType, shape: Vec<usize>, v: &[f32]| match dt {
        DType::F32 => {
            fuselab::Tensor::F32(ndarray::ArrayD::from_shape_vec(shape, v.to_vec()).unwrap())
        }
        _ => fuselab::Tensor::F64(
            ndarray::ArrayD::from_shape_vec(shape, v.iter().map(|&x| x as f64).collect()).unwrap(),
        ),
    };
    let run = |dt: DType| -> Vec<Vec<f64>> {
        let mut g = GraphBuilder::new("lanes", 17);
        g.import("com.microsoft", 1);
        let x = g.input("x", dt, dims(&[rows as i64, n as i64]));
        let b = g.initializer("b", &tensor(dt, vec![n], &bias));
        let outs = [
            g.op("Softmax", &[x], vec![attr::int("axis", -1)]),
            g.node("com.microsoft", "Gelu", &[Some(x)], 1, vec![])[0],
            g.node("com.microsoft", "FastGelu", &[Some(x)], 1, vec![])[0],
            g.node("com.microsoft", "BiasGelu", &[Some(x), Some(b)], 1, vec![])[0],
            g.node(
                "com.microsoft",
                "SkipLayerNormalization",
                &[Some(x), Some(x), Some(b), Some(b)],
                1,
                vec![],
            )[0],
            g.node(
                "com.microsoft",
                "SkipSimplifiedLayerNormalization",
                &[Some(x), Some(x), Some(b)],
                1,
                vec![],
            )[0],
        ];
        for (i, o) in outs.into_iter().enumerate() {
            g.output(o, &format!("y{i}"));
        }
        let feeds = HashMap::from([("x".to_string(), tensor(dt, vec![rows, n], &xs))]);
        on_reference(&g.build(), &feeds)
            .into_iter()
            .map(|(_, t)| match t {
                fuselab::Tensor::F32(a) => a.iter().map(|&v| v as f64).collect(),
                fuselab::Tensor::F64(a) => a.iter().copied().collect(),
                t => panic!("unexpected {:?}", t.dtype()),
            })
            .collect()
    };
    let (got, want) = (run(DType::F32), run(DType::F64));
    assert_eq!(got.len(), 6);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.len(), rows * n);
        for (k, (&g, &w)) in g.iter().zip(w).enumerate() {
            assert!(
                (g - w).abs() <= 2e-6 * (1.0 + w.abs()),
                "output {i}[{k}]: {g} vs {w}"
            );
        }
    }
}
