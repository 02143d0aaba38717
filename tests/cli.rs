//! The CLI end to end: optimize → run → same outputs; report contents; help; error exits.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ndarray::Array2;
use ndarray_npy::read_npy;

fn fuselab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fuselab"))
        .args(args)
        .output()
        .expect("run fuselab")
}

fn ok(args: &[&str]) -> String {
    let out = fuselab(args);
    assert!(
        out.status.success(),
        "fuselab {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fuselab-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn example() -> PathBuf {
    let p = common::repo().join("examples/eyelike_add.onnx");
    assert!(
        p.is_file(),
        "missing {} (scripts/make_examples.py)",
        p.display()
    );
    p
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn optimize_then_run_gives_the_same_outputs() {
    let d = tmp("e2e");
    let (opt, rep) = (d.join("opt.onnx"), d.join("report.json"));
    let model = example();
    let stdout = ok(&[
        "optimize",
        s(&model),
        "-o",
        s(&opt),
        "--report",
        s(&rep),
        "--dim",
        "N=33",
    ]);
    assert!(stdout.contains("2 -> 1 nodes (AddEyeLike x1)"), "{stdout}");

    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    assert_eq!(r["nodes_before"], 2);
    assert_eq!(r["nodes_after"], 1);
    assert_eq!(r["ops_before"], serde_json::json!({"Add": 1, "EyeLike": 1}));
    assert_eq!(r["ops_after"], serde_json::json!({"AddEyeLike": 1}));
    assert_eq!(r["fusions"], serde_json::json!({"AddEyeLike": 1}));
    assert_eq!(r["parity"]["ok"], true);
    assert_eq!(r["parity"]["max_abs_diff"], 0.0);
    assert_eq!(r["dims"]["N"], 33);
    assert_eq!(r["rewrites"].as_array().unwrap().len(), 1);
    assert_eq!(r["rewrites"][0]["rule"], "add_eyelike");
    // The EyeLike's N·N float32 identity, which the fused node never writes.
    assert_eq!(r["rewrites"][0]["intermediate_bytes"], 33 * 33 * 4);
    assert!(r["rejected"].as_array().unwrap().is_empty());
    assert!(r["optimize_ms"].as_f64().unwrap() >= 0.0);

    let (out_a, out_b) = (d.join("a"), d.join("b"));
    ok(&[
        "run",
        s(&model),
        "--dim",
        "N=33",
        "--seed",
        "3",
        "--out",
        s(&out_a),
    ]);
    ok(&[
        "run",
        s(&opt),
        "--dim",
        "N=33",
        "--seed",
        "3",
        "--out",
        s(&out_b),
    ]);
    let a = std::fs::read(out_a.join("Y.npy")).unwrap();
    let b = std::fs::read(out_b.join("Y.npy")).unwrap();
    assert_eq!(a, b, "original and optimized outputs differ");
    assert!(a.len() > 33 * 33 * 4);

    // --input feeds a file: X = the output we just wrote, so Y' = Y + I.
    let out_c = d.join("c");
    let spec = format!("X={}", out_a.join("Y.npy").display());
    ok(&["run", s(&opt), "--input", &spec, "--out", s(&out_c)]);
    let y: Array2<f32> = read_npy(out_a.join("Y.npy")).unwrap();
    let y2: Array2<f32> = read_npy(out_c.join("Y.npy")).unwrap();
    assert_eq!(y.dim(), (33, 33));
    assert_eq!(y2.dim(), y.dim());
    for ((i, j), &got) in y2.indexed_iter() {
        let x = y[[i, j]];
        let want = if i == j { x + 1.0 } else { x };
        assert_eq!(got, want, "Y'[{i}, {j}] with X[{i}, {j}] = {x}");
    }
}

#[test]
fn rules_flag_selects_rules() {
    let d = tmp("rules");
    let opt = d.join("opt.onnx");
    let stdout = ok(&[
        "optimize",
        s(&example()),
        "-o",
        s(&opt),
        "--rules",
        "dce,identity",
    ]);
    assert!(stdout.contains("2 -> 2 nodes"), "{stdout}");
    let out = fuselab(&["optimize", s(&example()), "-o", s(&opt), "--rules", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown rule 'nope'"), "{err}");
    assert!(err.contains("opt-in: fused_elementwise"), "{err}");
    // The opt-in rule is accepted by name (here it finds no chain: the Add stands alone).
    let stdout = ok(&[
        "optimize",
        s(&example()),
        "-o",
        s(&opt),
        "--rules",
        "add_eyelike,fused_elementwise",
    ]);
    assert!(stdout.contains("2 -> 1 nodes"), "{stdout}");
}

#[test]
fn target_flag_picks_what_the_runtime_runs() {
    let d = tmp("target");
    let opt = d.join("opt.onnx");
    let report = d.join("report.json");
    let gpt2 = common::repo().join("tests/models/gpt2_tiny.onnx");
    let run = |target: &str| -> serde_json::Value {
        ok(&[
            "optimize",
            s(&gpt2),
            "-o",
            s(&opt),
            "--target",
            target,
            "--report",
            s(&report),
        ]);
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap()
    };
    let cpu = run("ort-cpu");
    assert_eq!(cpu["target"], "ort-cpu");
    assert_eq!(cpu["fusions"]["Attention"], 2, "{}", cpu["fusions"]);
    let web = run("ort-webgpu");
    assert_eq!(web["target"], "ort-webgpu");
    assert_eq!(
        web["fusions"]["MultiHeadAttention"], 2,
        "{}",
        web["fusions"]
    );
    assert!(
        web["fusions"].get("Attention").is_none(),
        "{}",
        web["fusions"]
    );
    // No target: the default rules; GPT-2's fusions are all onnxruntime's, so the same.
    ok(&["optimize", s(&gpt2), "-o", s(&opt), "--report", s(&report)]);
    let default: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(default["fusions"], cpu["fusions"]);
    assert!(default["target"].is_null());
    // The book's worked example is an ai.fuselab op: a default rule, refused for onnxruntime.
    let stdout = ok(&[
        "optimize",
        s(&example()),
        "-o",
        s(&opt),
        "--target",
        "ort-cpu",
    ]);
    assert!(stdout.contains("2 -> 2 nodes"), "{stdout}");
    assert!(
        stdout.contains("target ort-cpu: AddEyeLike is an ai.fuselab op that only fuselab runs"),
        "{stdout}"
    );
    let out = fuselab(&["optimize", s(&gpt2), "-o", s(&opt), "--target", "tflite"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ort-cpu, ort-webgpu, fuselab"), "{err}");
}

#[test]
fn inspect_reports_the_model() {
    let j: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", s(&example()), "--json"])).unwrap();
    assert_eq!(j["nodes"], 2);
    assert_eq!(j["ops"], serde_json::json!({"Add": 1, "EyeLike": 1}));
    assert_eq!(j["inputs"][0]["name"], "X");
    assert_eq!(j["inputs"][0]["type"], "float32[N, N]");
    assert_eq!(j["opsets"]["ai.onnx"], 17);
    let text = ok(&["inspect", s(&example())]);
    assert!(text.contains("input: X float32[N, N]"), "{text}");
}

#[test]
fn bench_json_has_the_documented_fields() {
    let out = ok(&[
        "bench",
        s(&example()),
        "--runs",
        "3",
        "--warmup",
        "1",
        "--dim",
        "N=16",
        "--json",
    ]);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["backend"], "reference");
    assert_eq!(j["runs"], 3);
    for side in ["original", "optimized"] {
        assert!(j[side]["median_ms"].as_f64().unwrap() > 0.0);
        assert!(j[side]["min_ms"].as_f64().unwrap() <= j[side]["median_ms"].as_f64().unwrap());
    }
    let ratio = j["original"]["median_ms"].as_f64().unwrap()
        / j["optimized"]["median_ms"].as_f64().unwrap();
    assert!((j["speedup"].as_f64().unwrap() - ratio).abs() < 1e-9);
    assert_eq!(j["max_abs_diff"], 0.0);
}

#[test]
fn bench_profile_lists_time_per_op_type() {
    let model = example();
    let args = [
        "bench",
        s(&model),
        "--runs",
        "3",
        "--warmup",
        "1",
        "--dim",
        "N=16",
    ];
    let mut json_args = args.to_vec();
    json_args.extend(["--json", "--profile"]);
    let j: serde_json::Value = serde_json::from_str(&ok(&json_args)).unwrap();
    let rows = j["profile"].as_array().expect("profile rows");
    // The optimized example is one AddEyeLike node.
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["op"], "ai.fuselab:AddEyeLike");
    assert_eq!(rows[0]["count"], 1);
    assert!(rows[0]["ms"].as_f64().unwrap() >= 0.0);
    assert!((rows[0]["share"].as_f64().unwrap() - 1.0).abs() < 1e-9);
    // Without --profile there is no profile field; the text form prints the table.
    let j: serde_json::Value =
        serde_json::from_str(&ok(&[&args[..], &["--json"]].concat())).unwrap();
    assert!(j.get("profile").is_none());
    let mut text_args = args.to_vec();
    text_args.push("--profile");
    let text = ok(&text_args);
    assert!(
        text.contains("profile of the optimized graph") && text.contains("AddEyeLike"),
        "{text}"
    );
    // The text form names the shapes it timed: N sized by --dim, and bench's default 8 without.
    assert!(text.contains("inputs: X [16, 16]"), "{text}");
    let text = ok(&args[..args.len() - 2]);
    assert!(text.contains("inputs: X [8, 8]"), "{text}");
}

#[test]
fn every_subcommand_has_help() {
    for sub in ["inspect", "optimize", "run", "bench", "profile"] {
        let out = ok(&[sub, "--help"]);
        assert!(out.contains("Usage: fuselab"), "{sub}: {out}");
    }
    assert!(ok(&["--help"]).contains("optimize"));
}

#[test]
fn profile_json_lists_the_sequence_its_bytes_and_the_rule() {
    let model = example();
    let args = ["profile", s(&model), "--dim", "N=256", "--runs", "2"];
    let j: serde_json::Value =
        serde_json::from_str(&ok(&[&args[..], &["--json"]].concat())).unwrap();
    assert_eq!(j["backend"], "reference");
    assert_eq!(j["timing"], "node-clock");
    assert_eq!(j["runs"], 2);
    assert!(j["total_ms"].as_f64().unwrap() >= 0.0);
    let ops = j["ops"].as_array().unwrap();
    let mut names: Vec<&str> = ops.iter().map(|o| o["op"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["Add", "EyeLike"]);
    for o in ops {
        assert_eq!(o["count"], 1);
        assert!(o["ms"].as_f64().unwrap() >= 0.0 && o["share"].as_f64().unwrap() >= 0.0);
    }
    let seqs = j["sequences"].as_array().unwrap();
    assert_eq!(seqs.len(), 1);
    assert_eq!(seqs[0]["ops"], serde_json::json!(["EyeLike", "Add"]));
    assert_eq!(seqs[0]["count"], 1);
    assert_eq!(seqs[0]["intermediate_bytes"], 256 * 256 * 4);
    assert!(seqs[0]["ms"].as_f64().unwrap() >= 0.0 && seqs[0]["share"].as_f64().unwrap() >= 0.0);
    let cands = j["candidates"].as_array().unwrap();
    assert_eq!(cands.len(), 1);
    assert_eq!(cands[0]["ops"], serde_json::json!(["EyeLike", "Add"]));
    assert_eq!(cands[0]["rule"], "add_eyelike");
    assert_eq!(cands[0]["opt_in_rule"], serde_json::Value::Null);
    assert_eq!(cands[0]["intermediate_bytes"], 256 * 256 * 4);
    assert!(cands[0]["estimated_saving_ms"].as_f64().unwrap() >= 0.0);

    // What the rules leave: one AddEyeLike, no sequence.
    let j: serde_json::Value =
        serde_json::from_str(&ok(&[&args[..], &["--json", "--optimized"]].concat())).unwrap();
    assert_eq!(j["ops"][0]["op"], "ai.fuselab:AddEyeLike");
    assert_eq!(j["sequences"], serde_json::json!([]));
    assert_eq!(j["candidates"], serde_json::json!([]));

    let text = ok(&args);
    assert!(text.contains("original graph (2 nodes)"), "{text}");
    assert!(text.contains("inputs: X [256, 256]"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("EyeLike -> Add") && l.contains("add_eyelike")),
        "{text}"
    );
}

#[test]
fn errors_exit_2_with_one_message() {
    let d = tmp("errors");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["inspect".into(), s(&d.join("missing.onnx")).into()],
            "missing.onnx",
        ),
        (
            vec![
                "run".into(),
                s(&example()).into(),
                "--dim".into(),
                "N".into(),
            ],
            "expected NAME=VALUE",
        ),
        (
            vec![
                "run".into(),
                s(&example()).into(),
                "--input".into(),
                "X=/nonexistent.npy".into(),
            ],
            "nonexistent.npy",
        ),
        (
            vec![
                "run".into(),
                s(&example()).into(),
                "--input".into(),
                "Q=/nonexistent.npy".into(),
            ],
            "nonexistent.npy",
        ),
        (
            vec![
                "profile".into(),
                s(&example()).into(),
                "--runs".into(),
                "0".into(),
            ],
            "--runs must be at least 1",
        ),
        (
            vec!["profile".into(), s(&d.join("missing.onnx")).into()],
            "missing.onnx",
        ),
    ];
    for (args, needle) in cases {
        let refs: Vec<&str> = args.iter().map(|a| a.as_str()).collect();
        let out = fuselab(&refs);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn unsupported_op_is_named_unless_parity_is_skipped_or_partial() {
    use fuselab::builder::{dims, GraphBuilder};
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", fuselab::DType::F32, dims(&[2, 2]));
    let y = b.node("com.example", "Mystery", &[Some(x)], 1, vec![])[0];
    let id = b.op("Identity", &[y], vec![]);
    b.output(id, "Y");
    let mut m = b.build();
    m.ensure_opset("com.example", 1);
    m.graph.value_mut(y).ty = fuselab::ir::TensorType::new(fuselab::DType::F32, dims(&[2, 2]));
    let d = tmp("unsupported");
    let (src, opt) = (d.join("m.onnx"), d.join("o.onnx"));
    fuselab::io::save_file(&m, &src, None).unwrap();
    let out = fuselab(&["optimize", s(&src), "-o", s(&opt)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unsupported op Mystery (domain 'com.example')"),
        "{err}"
    );
    // Passes still run soundly around the unknown op: the Identity goes, the Mystery stays.
    let stdout = ok(&["optimize", s(&src), "-o", s(&opt), "--no-parity"]);
    assert!(stdout.contains("2 -> 1 nodes"), "{stdout}");
    let saved = fuselab::io::load_file(&opt, &fuselab::Limits::default()).unwrap();
    assert_eq!(common::ops(&saved), vec![("Mystery".to_string(), 1)]);
    assert_eq!(saved.graph.name(saved.graph.outputs[0]), "Y");

    // A second output that does not need the Mystery op: parity compares it (partial).
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", fuselab::DType::F32, dims(&[2, 2]));
    let y = b.node("com.example", "Mystery", &[Some(x)], 1, vec![])[0];
    let r = b.op("Relu", &[x], vec![]);
    b.output(y, "Y");
    b.output(r, "R");
    let mut m = b.build();
    m.ensure_opset("com.example", 1);
    fuselab::io::save_file(&m, &src, None).unwrap();
    let stdout = ok(&["optimize", s(&src), "-o", s(&opt)]);
    assert!(
        stdout.contains("parity (partial): max |diff| = 0e0"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "partial: compared 1 of 2 outputs and 0 of 0 fused nodes; the rest need ops the \
             reference backend lacks: Mystery (com.example)"
        ),
        "{stdout}"
    );
}

#[test]
fn optimize_help_names_every_rule() {
    // `--rules` help is prose; it must not fall behind the rule list.
    let help = ok(&["optimize", "--help"]).replace('\n', " ");
    let opt_in = fuselab::passes::BACKEND_LOWERING_RULES.iter();
    for rule in fuselab::passes::ALL_RULES.iter().chain(opt_in) {
        assert!(
            help.contains(rule),
            "`optimize --help` does not mention rule '{rule}'"
        );
    }
}

#[test]
fn fix_dim_errors_name_the_problem() {
    let out = tmp("fix_dim_err.onnx");
    let ex = example();
    for (flag, needle) in [
        ("N=-3", "not a non-negative integer"),
        ("M=4", "no graph input has a dim named 'M'"),
    ] {
        let o = fuselab(&["optimize", s(&ex), "-o", s(&out), "--fix-dim", flag]);
        assert_eq!(o.status.code(), Some(2), "{flag}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(needle), "{flag}: {err}");
    }
    let o = fuselab(&[
        "optimize",
        s(&ex),
        "-o",
        s(&out),
        "--fix-dim",
        "N=4",
        "--dim",
        "N=5",
    ]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("contradicts"));
}

#[test]
fn ops_lists_the_registry_and_prints_its_docs_table() {
    let text = ok(&["ops"]);
    assert!(
        text.lines()
            .any(|l| l.starts_with("ai.onnx") && l.contains(" Add ")),
        "{text}"
    );
    assert!(
        text.contains("com.microsoft") && text.contains("SkipLayerNormalization"),
        "{text}"
    );
    assert_eq!(text.lines().count(), fuselab::ops::registry().len());
    let table = ok(&["ops", "--markdown"]);
    let committed =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ops.md")).unwrap();
    assert_eq!(table, committed, "docs/ops.md is `fuselab ops --markdown`");
}

#[test]
fn threads_give_the_same_outputs_and_refuse_what_they_cannot_do() {
    // GPT-2 tiny at 128 tokens: its projections are large enough to split between threads.
    let d = tmp("threads");
    let model = common::repo().join("tests/models/gpt2_tiny.onnx");
    let mut outs = Vec::new();
    for threads in ["1", "2"] {
        let out = d.join(threads);
        ok(&[
            "run",
            s(&model),
            "--dim",
            "batch=1",
            "--dim",
            "seq=128",
            "--threads",
            threads,
            "--out",
            s(&out),
        ]);
        outs.push(std::fs::read(out.join("logits.npy")).unwrap());
    }
    assert_eq!(outs[0], outs[1], "the same bytes at 1 and 2 threads");
    assert!(outs[0].len() > 128 * 1000 * 4);

    let json = ok(&[
        "bench",
        s(&example()),
        "--runs",
        "3",
        "--warmup",
        "1",
        "--threads",
        "2",
        "--json",
    ]);
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(j["threads"], 2);

    for (args, needle) in [
        (vec!["--threads", "0"], "give 1 to"),
        (
            vec!["--threads", "2", "--clock", "cpu"],
            "--clock cpu counts this thread's time only",
        ),
    ] {
        let ex = example();
        let mut full = vec!["bench", s(&ex), "--runs", "1"];
        full.extend(args);
        let out = fuselab(&full);
        assert_eq!(out.status.code(), Some(2), "{full:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{full:?}: {err}");
    }
}
