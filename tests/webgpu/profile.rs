//! The profiler on WebGPU (`fuselab::profile::profile_webgpu`): GPU timestamps around each
//! dispatch where the adapter has `timestamp-query`, each dispatch submitted alone otherwise;
//! either way the same sequences, bytes and rules as on the reference backend.

use super::*;
use fuselab::builder::sym;
use fuselab::pipeline::Backend;
use fuselab::profile::{profile_reference, profile_webgpu, NodeTiming, Profile, ProfileOptions};

type Shape = (Vec<String>, usize, u64);
type Cover = (Vec<String>, Option<String>, u64);

/// (ops, count, bytes) of every sequence and (ops, rule, bytes) of every candidate, sorted.
fn structure(p: &Profile) -> (Vec<Shape>, Vec<Cover>) {
    let mut s: Vec<Shape> = (p.sequences.iter())
        .map(|s| (s.ops.clone(), s.count, s.intermediate_bytes))
        .collect();
    s.sort();
    let mut c: Vec<_> = (p.candidates.iter())
        .map(|c| (c.ops.clone(), c.rule.clone(), c.intermediate_bytes))
        .collect();
    c.sort();
    (s, c)
}

pub fn profile_times_every_dispatch_with_and_without_timestamps(gpu: &Gpu) {
    // EyeLike → Add, and an elementwise chain beside it.
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("N"), sym("N")]);
    let e = b.op("EyeLike", &[x], vec![]);
    let y = b.op("Add", &[e, x], vec![]);
    b.output(y, "Y");
    let mut v = x;
    for op in ["Exp", "Neg", "Abs"] {
        v = b.op(op, &[v], vec![]);
    }
    b.output(v, "Z");
    let m = b.build();
    let opts = ProfileOptions {
        runs: 2,
        dims: [("N".to_string(), 64)].into(),
        ..Default::default()
    };
    let t0 = std::time::Instant::now();
    let clock = || t0.elapsed().as_secs_f64() * 1e3;
    let reference = profile_reference(&m, &opts, &clock).unwrap();
    let stamped = match gpu.has_timestamps() {
        true => NodeTiming::TimestampQuery,
        false => NodeTiming::PerDispatch,
    };
    for (g, timing) in [
        (gpu.clone(), stamped),
        (gpu.clone().without_timestamps(), NodeTiming::PerDispatch),
    ] {
        let p = pollster::block_on(profile_webgpu(&g, &m, &opts, &clock)).unwrap();
        println!(
            "{timing:?}: {:.4} ms per run in {} nodes",
            p.total_ms, p.nodes
        );
        assert_eq!(p.timing, timing);
        assert_eq!(p.backend, Backend::Webgpu);
        assert_eq!(structure(&p), structure(&reference));
        assert_eq!(p.ops.len(), 5, "{:?}", p.ops);
        assert!(p.total_ms.is_finite() && p.total_ms >= 0.0);
        assert!(
            p.ops.iter().all(|o| o.count == 1 && o.ms >= 0.0),
            "{:?}",
            p.ops
        );
        assert!(p.candidates.iter().all(|c| c.estimated_saving_ms >= 0.0));
    }
}
