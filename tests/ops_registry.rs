//! The ops registry's promise: every op with a reference kernel also has inference, and that
//! inference is never wrong. Checked on the ONNX node-test corpus (tests/data/node, made by
//! scripts/gen_node_tests.py): every case whose ops the registry covers runs on the reference
//! backend, and each value a node produces is compared with the type and shape inference gave it.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use fuselab::ir::{Dim, NodeId, TensorType, ValueId};
use fuselab::ops;
use fuselab::runtime::inputs::random_inputs;
use fuselab::runtime::reference::{Executor, StepObserver};
use fuselab::{Limits, Tensor};

#[derive(Default)]
struct Seen {
    /// Values by the node that produced them.
    produced: Vec<(ValueId, fuselab::DType, Vec<usize>)>,
}

impl StepObserver for Seen {
    fn before(&mut self, _: NodeId) {}
    fn after(&mut self, _: NodeId) {}
    fn produced(&mut self, v: ValueId, t: &Tensor) {
        self.produced.push((v, t.dtype(), t.shape().to_vec()));
    }
}

/// Per op (domain:type): outputs checked, outputs whose dtype inference knew.
type Coverage = BTreeMap<String, (usize, usize)>;

fn check_case(dir: &Path, cov: &mut Coverage, wrong: &mut Vec<String>) {
    let limits = Limits::default();
    let Ok(mut model) = fuselab::io::load_file(&dir.join("model.onnx"), &limits) else {
        return;
    };
    // Forget every type the file declared for node outputs: what remains is inference's own.
    for id in model.graph.node_ids().collect::<Vec<_>>() {
        for v in model.graph.node(id).outputs.clone().into_iter().flatten() {
            model.graph.value_mut(v).ty = TensorType::default();
        }
    }
    ops::infer::infer_types(&mut model);
    let g = &model.graph;
    let covered = g.node_ids().all(|id| {
        let n = g.node(id);
        n.implicit_inputs.is_empty()
            && ops::lookup(&n.domain, &n.op_type, model.opset(&n.domain).unwrap_or(1)).is_some()
    });
    if !covered {
        return;
    }
    let Ok(ex) = Executor::new(&model, &limits) else {
        return;
    };
    let Ok(inputs) = random_inputs(&model, &HashMap::new(), &HashMap::new(), 0, &limits) else {
        return;
    };
    let mut seen = Seen::default();
    if ex.run_observed(&inputs, &mut seen).is_err() {
        // Random inputs may be out of an op's domain (indices); the corpus's own data is the
        // conformance test's business.
        return;
    }
    let case = dir.file_name().unwrap().to_string_lossy();
    for (v, dtype, shape) in seen.produced {
        let Some(p) = g.producer(v) else { continue };
        let n = g.node(p);
        let key = format!("{}:{}", n.domain, n.op_type);
        let e = cov.entry(key.clone()).or_default();
        e.0 += 1;
        let ty = &g.value(v).ty;
        if let Some(d) = ty.dtype {
            e.1 += 1;
            if d != dtype {
                wrong.push(format!(
                    "{case}: {key} '{}' inferred {d}, ran {dtype}",
                    g.name(v)
                ));
            }
        }
        if let Some(s) = &ty.shape {
            let agrees = s.len() == shape.len()
                && s.iter().zip(&shape).all(|(d, &k)| match d {
                    Dim::Known(x) => *x == k as i64,
                    _ => true,
                });
            if !agrees {
                wrong.push(format!(
                    "{case}: {key} '{}' inferred {s:?}, ran {shape:?}",
                    g.name(v)
                ));
            }
        }
    }
}

#[test]
fn inference_agrees_with_every_kernel_on_the_node_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/node");
    let Ok(entries) = std::fs::read_dir(&root) else {
        panic!(
            "{} is missing: run scripts/setup.sh (it regenerates the ONNX node-test corpus)",
            root.display()
        );
    };
    let mut dirs: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    let mut cov = Coverage::new();
    let mut wrong = Vec::new();
    for d in &dirs {
        check_case(d, &mut cov, &mut wrong);
    }
    assert!(
        wrong.is_empty(),
        "inference contradicts the kernels:\n{}",
        wrong.join("\n")
    );
    // An op whose kernel ran but whose inference never knew even the element type has a kernel
    // and no inference.
    let blind: Vec<_> = cov
        .iter()
        .filter(|(_, &(n, typed))| n > 0 && typed == 0)
        .map(|(k, _)| k.clone())
        .collect();
    assert!(
        blind.is_empty(),
        "ops with a kernel but no inference: {blind:?}"
    );
    // The corpus exercises most of the registry (so the check above means something).
    let ran: Vec<&String> = cov.keys().collect();
    let outputs: usize = cov.values().map(|c| c.0).sum();
    println!(
        "inference checked against {outputs} kernel outputs of {} ops",
        ran.len()
    );
    assert!(ran.len() >= 40, "only {} ops ran: {ran:?}", ran.len());
}
