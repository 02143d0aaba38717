//! Runs in the steady state take no fresh memory from the system: a run after the first few
//! reuses the pages the earlier ones freed. Its own test binary (its own process), so that no
//! other test's allocations count, with its own `main`: libtest would run it on a thread that
//! allocated (and so got a glibc heap of its own) before the test could set anything up.
//!
//! glibc unmapped a pool thread's extra heaps whenever everything in them was freed, and trimmed
//! the main heap once enough was free at its top: every run then faulted in its large buffers
//! afresh (GPT-2 small at 1×128 on two threads: ~6,300 page faults per run, its 25.7 MB of
//! logits; this test's model: 6,401 per run on two threads, and on one). `threads::with_threads`
//! sets glibc to keep what is freed.

use std::collections::HashMap;

use fuselab::builder::{dims, GraphBuilder};
use fuselab::runtime::reference::Executor;
use fuselab::{DType, Limits, Tensor};

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn main() {
    println!("steady_state: skipped (counts glibc's page faults on Linux)");
}

/// Minor page faults of this process so far.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn minor_faults() -> i64 {
    // SAFETY: getrusage writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) }, 0);
    u.ru_minflt
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn tensor(shape: &[usize], seed: u32) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n as u32)
        .map(|i| ((i.wrapping_mul(2654435761).wrapping_add(seed)) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    Tensor::F32(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), v).unwrap())
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn main() {
    // Y = X · W with X [800, 64] and W [64, 8192]: 25 MiB (6,400 pages) like GPT-2 small's
    // logits at 1×128, a product large enough to split between two threads; with Relu(Y) and
    // Sigmoid(Y) the outputs outgrow one of glibc's 64 MiB thread heaps, as a model's buffers
    // do, and the heap beyond the first was the one unmapped after every run.
    let mut b = GraphBuilder::new("big_output", 17);
    let x = b.input("X", DType::F32, dims(&[800, 64]));
    let w = b.initializer("W", &tensor(&[64, 8192], 1));
    let y = b.op("MatMul", &[x, w], vec![]);
    let r = b.op("Relu", &[y], vec![]);
    let s = b.op("Sigmoid", &[y], vec![]);
    b.output(y, "Y");
    b.output(r, "R");
    b.output(s, "S");
    let model = b.build();
    let inputs = HashMap::from([("X".to_string(), tensor(&[800, 64], 2))]);
    let limits = Limits::default();
    for threads in [1, 2] {
        let faults_per_run = fuselab::threads::with_threads(threads, || {
            let exec = Executor::new(&model, &limits).expect("plan");
            let run = || {
                let out = exec.run(&inputs).expect("run");
                assert_eq!(out[0].1.shape(), &[800, 8192]);
            };
            // The first runs pack W and let malloc settle.
            for _ in 0..4 {
                run();
            }
            let before = minor_faults();
            for _ in 0..20 {
                run();
            }
            (minor_faults() - before) as f64 / 20.0
        })
        .expect("a pool");
        // Fresh pages for the outputs would be 6,400 faults per run.
        assert!(
            faults_per_run < 100.0,
            "{faults_per_run} page faults per run in the steady state at {threads} threads"
        );
        println!("steady_state at {threads} threads: {faults_per_run} page faults per run ... ok");
    }
}
