//! Benchmark policy, one for every front end: `fuselab bench` (src/cli/bench.rs), the wasm
//! `Bench` (reference backend) and `GpuBench` (WebGPU) that the npm package exports and the
//! page's benchmark panel drives. It decides how long to warm up, how many back-to-back runs
//! make one sample (calibration), which graph runs next (original and optimized interleaved, the
//! order alternating every pair, so that noise and cache warmth hit both alike), and the
//! statistics (median, minimum, speedup of the medians).
//!
//! It reads no clock (wasm32-unknown-unknown has none) and runs nothing: the caller asks
//! [`Bench::next`] what to run, passing the time now in milliseconds by its own clock
//! (`Instant`, `performance.now()`, or a fake one in tests), runs it, and asks again. The time
//! between two calls is what the previous [`Runs`] took. [`Bench::drive`] and
//! [`Bench::drive_async`] are that loop for a blocking and an async runner.

use std::future::Future;

use serde::Serialize;

/// One of the two graphs a benchmark compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Graph {
    Original,
    Optimized,
}

impl Graph {
    /// 0 for the original, 1 for the optimized graph.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What the caller runs next: `graph`, `times` times back to back, then it calls `next` again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Runs {
    pub graph: Graph,
    pub times: u32,
}

/// The knobs that differ between front ends.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// Warm-up: at least this many pairs of runs (one of each graph)...
    pub warmup_pairs: u32,
    /// ...taking at least this long.
    pub warmup_ms: f64,
    /// The calibration target when the caller names none: one sample must take at least this
    /// long by the clock. 0: one run per sample, no calibration runs.
    pub min_sample_ms: f64,
}

impl Policy {
    /// In a browser (the npm package and the page). Engines first run wasm through a baseline
    /// compiler and tier hot functions up in the background: in Chromium, 20 runs of gpt2_tiny
    /// right after loading measured its unfused graph (many distinct kernels) at 1.7 ms, against
    /// 0.9 ms a second later, and 200 ms of warm-up was not enough; hence 1 s. Browsers coarsen
    /// `performance.now()` (to 0.1 ms unless the page is cross-origin isolated), which
    /// sub-millisecond models fall under; hence samples of at least 1 ms.
    pub const BROWSER: Policy = Policy {
        warmup_pairs: 3,
        warmup_ms: 1000.0,
        min_sample_ms: 1.0,
    };

    /// Natively (the CLI): `pairs` warm-up pairs and one run per sample, since `Instant`
    /// resolves nanoseconds.
    pub fn native(pairs: u32) -> Policy {
        Policy {
            warmup_pairs: pairs,
            warmup_ms: 0.0,
            min_sample_ms: 0.0,
        }
    }
}

/// Calibration stops doubling the runs per sample here.
pub const MAX_REPEAT: u32 = 10_000;
/// Warm-up stops after this many pairs whatever the clock says (a clock that stands still).
pub const MAX_WARMUP_PAIRS: u64 = 100_000;
/// Calibration takes the fastest of this many pairs of trial samples at each size, so that one
/// preempted sample does not stop the search.
pub const TRIAL_PAIRS: u32 = 3;

/// Median and minimum of one graph's samples, each sample the mean time of one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Timing {
    pub median_ms: f64,
    pub min_ms: f64,
}

impl Timing {
    /// NaN for no samples (serialized as null).
    pub fn of(samples: &[f64]) -> Timing {
        let mut v = samples.to_vec();
        crate::ops::common::sort_by_dyn(&mut v, &|a, b| a.total_cmp(b));
        let n = v.len();
        let median_ms = match n {
            0 => f64::NAN,
            _ if n % 2 == 1 => v[n / 2],
            _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        };
        Timing {
            median_ms,
            min_ms: v.first().copied().unwrap_or(f64::NAN),
        }
    }
}

/// The statistics of every sample taken since the last calibration.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct BenchSummary {
    /// Samples of each graph.
    pub samples: usize,
    /// Runs per sample.
    pub repeat: u32,
    pub original: Timing,
    pub optimized: Timing,
    /// Original median over optimized median.
    pub speedup: f64,
}

/// A figure of each graph (nodes, compute dispatches per run).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Pair<T> {
    pub original: T,
    pub optimized: T,
}

#[derive(Clone, Debug)]
enum Task {
    Idle,
    WarmUp {
        min_sample_ms: f64,
        start: Option<f64>,
        runs: u64,
    },
    Calibrate {
        min_sample_ms: f64,
        trials: u32,
        fastest: f64,
    },
    Sample {
        pairs_left: u64,
        /// Samples of the current pair taken (0 or 1).
        half: u8,
    },
}

/// A benchmark in progress: the policy's state and the samples taken.
#[derive(Clone, Debug)]
pub struct Bench {
    policy: Policy,
    repeat: u32,
    /// Sample pairs taken since the last calibration; its parity decides the next pair's order.
    pairs: u64,
    samples: [Vec<f64>; 2],
    task: Task,
    /// The runs handed out by the last `next` and the clock then.
    pending: Option<(Runs, f64)>,
}

impl Bench {
    /// One run per sample until `calibrate`.
    pub fn new(policy: Policy) -> Bench {
        Bench {
            policy,
            repeat: 1,
            pairs: 0,
            samples: [Vec::new(), Vec::new()],
            task: Task::Idle,
            pending: None,
        }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Runs per sample.
    pub fn repeat(&self) -> u32 {
        self.repeat
    }

    /// The samples (ms per run) of `graph`, in the order taken.
    pub fn samples(&self, graph: Graph) -> &[f64] {
        &self.samples[graph.index()]
    }

    /// Starts warm-up, then calibration to samples of at least `min_sample_ms` (the policy's
    /// when None); drops the samples taken so far (cold, and of another size).
    pub fn start_calibration(&mut self, min_sample_ms: Option<f64>) {
        let min = min_sample_ms.unwrap_or(self.policy.min_sample_ms);
        self.samples = [Vec::new(), Vec::new()];
        self.pairs = 0;
        self.pending = None;
        self.task = Task::WarmUp {
            min_sample_ms: if min.is_finite() { min.max(0.0) } else { 0.0 },
            start: None,
            runs: 0,
        };
    }

    /// Starts taking `pairs` more samples of each graph (dropping the half of a pair that an
    /// error cut short).
    pub fn start_samples(&mut self, pairs: u64) {
        let n = self.samples[0].len().min(self.samples[1].len());
        self.samples.iter_mut().for_each(|s| s.truncate(n));
        self.pending = None;
        self.task = Task::Sample {
            pairs_left: pairs,
            half: 0,
        };
    }

    /// `now`: the caller's clock in milliseconds, read right after the previous `Runs` ended
    /// (or before the first). Returns the next runs, or None when the started task is done.
    pub fn next(&mut self, now: f64) -> Option<Runs> {
        if let Some((runs, t0)) = self.pending.take() {
            self.finished(runs, now - t0);
        }
        let runs = self.plan(now)?;
        self.pending = Some((runs, now));
        Some(runs)
    }

    /// Records what the last runs took.
    fn finished(&mut self, runs: Runs, ms: f64) {
        match &mut self.task {
            Task::Idle => {}
            Task::WarmUp { runs: n, .. } => *n += 1,
            Task::Calibrate {
                trials, fastest, ..
            } => {
                *trials += 1;
                *fastest = fastest.min(ms);
            }
            Task::Sample { pairs_left, half } => {
                self.samples[runs.graph.index()].push(ms / runs.times as f64);
                if *half == 1 {
                    *half = 0;
                    *pairs_left -= 1;
                    self.pairs += 1;
                } else {
                    *half = 1;
                }
            }
        }
    }

    /// What to run next for the current task, moving on to the next task when one is done.
    fn plan(&mut self, now: f64) -> Option<Runs> {
        let pair = |first: Graph, half: u8| {
            let second = match first {
                Graph::Original => Graph::Optimized,
                Graph::Optimized => Graph::Original,
            };
            if half == 0 {
                first
            } else {
                second
            }
        };
        loop {
            match &mut self.task {
                Task::Idle => return None,
                Task::WarmUp {
                    min_sample_ms,
                    start,
                    runs,
                } => {
                    let start = *start.get_or_insert(now);
                    let pairs = *runs / 2;
                    let warm = pairs >= self.policy.warmup_pairs as u64
                        && now - start >= self.policy.warmup_ms;
                    if runs.is_multiple_of(2) && (warm || pairs >= MAX_WARMUP_PAIRS) {
                        let min = *min_sample_ms;
                        self.repeat = 1;
                        self.task = if min > 0.0 {
                            Task::Calibrate {
                                min_sample_ms: min,
                                trials: 0,
                                fastest: f64::INFINITY,
                            }
                        } else {
                            Task::Idle
                        };
                        continue;
                    }
                    return Some(Runs {
                        graph: pair(Graph::Original, (*runs % 2) as u8),
                        times: 1,
                    });
                }
                Task::Calibrate {
                    min_sample_ms,
                    trials,
                    fastest,
                } => {
                    if *trials == 2 * TRIAL_PAIRS {
                        if *fastest >= *min_sample_ms || self.repeat >= MAX_REPEAT {
                            self.task = Task::Idle;
                            return None;
                        }
                        self.repeat = (self.repeat * 2).min(MAX_REPEAT);
                        *trials = 0;
                        *fastest = f64::INFINITY;
                    }
                    return Some(Runs {
                        graph: pair(Graph::Original, (*trials % 2) as u8),
                        times: self.repeat,
                    });
                }
                Task::Sample { pairs_left, half } => {
                    if *pairs_left == 0 {
                        self.task = Task::Idle;
                        return None;
                    }
                    let first = if self.pairs.is_multiple_of(2) {
                        Graph::Original
                    } else {
                        Graph::Optimized
                    };
                    return Some(Runs {
                        graph: pair(first, *half),
                        times: self.repeat,
                    });
                }
            }
        }
    }

    /// Runs the started task to its end: `clock` reads milliseconds, `run` runs a graph once.
    pub fn drive<E>(
        &mut self,
        mut clock: impl FnMut() -> Result<f64, E>,
        mut run: impl FnMut(Graph) -> Result<(), E>,
    ) -> Result<(), E> {
        while let Some(r) = self.next(clock()?) {
            for _ in 0..r.times {
                run(r.graph)?;
            }
        }
        Ok(())
    }

    /// `drive` for a runner that returns a future (the browser cannot block on a GPU).
    pub async fn drive_async<E, F: Future<Output = Result<(), E>>>(
        &mut self,
        mut clock: impl FnMut() -> Result<f64, E>,
        mut run: impl FnMut(Graph) -> F,
    ) -> Result<(), E> {
        while let Some(r) = self.next(clock()?) {
            for _ in 0..r.times {
                run(r.graph).await?;
            }
        }
        Ok(())
    }

    /// Warm-up and calibration with a blocking runner; returns the runs per sample.
    pub fn calibrate<E>(
        &mut self,
        min_sample_ms: Option<f64>,
        clock: impl FnMut() -> Result<f64, E>,
        run: impl FnMut(Graph) -> Result<(), E>,
    ) -> Result<u32, E> {
        self.start_calibration(min_sample_ms);
        self.drive(clock, run)?;
        Ok(self.repeat)
    }

    /// `pairs` more samples of each graph with a blocking runner; returns them as
    /// `[original, optimized]` per pair, flat (ms per run).
    pub fn sample<E>(
        &mut self,
        pairs: u64,
        clock: impl FnMut() -> Result<f64, E>,
        run: impl FnMut(Graph) -> Result<(), E>,
    ) -> Result<Vec<f64>, E> {
        self.start_samples(pairs);
        let from = self.samples[0].len();
        self.drive(clock, run)?;
        Ok(self.taken_since(from))
    }

    /// The samples of both graphs from index `from` on, `[original, optimized]` per pair, flat.
    pub fn taken_since(&self, from: usize) -> Vec<f64> {
        let [a, b] = &self.samples;
        let n = a.len().min(b.len());
        (from.min(n)..n).flat_map(|i| [a[i], b[i]]).collect()
    }

    pub fn summary(&self) -> BenchSummary {
        let original = Timing::of(&self.samples[0]);
        let optimized = Timing::of(&self.samples[1]);
        BenchSummary {
            samples: self.samples[0].len().min(self.samples[1].len()),
            repeat: self.repeat,
            speedup: original.median_ms / optimized.median_ms,
            original,
            optimized,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};

    /// A fake machine: running a graph advances the clock by that graph's cost; every run is
    /// logged.
    struct Fake {
        now: Cell<f64>,
        cost: [f64; 2],
        log: RefCell<Vec<Graph>>,
        reads: Cell<usize>,
    }

    impl Fake {
        fn new(original_ms: f64, optimized_ms: f64) -> Fake {
            Fake {
                now: Cell::new(0.0),
                cost: [original_ms, optimized_ms],
                log: RefCell::new(Vec::new()),
                reads: Cell::new(0),
            }
        }
        fn clock(&self) -> impl FnMut() -> Result<f64, ()> + '_ {
            || {
                self.reads.set(self.reads.get() + 1);
                Ok(self.now.get())
            }
        }
        fn run(&self) -> impl FnMut(Graph) -> Result<(), ()> + '_ {
            |g| {
                self.now.set(self.now.get() + self.cost[g.index()]);
                self.log.borrow_mut().push(g);
                Ok(())
            }
        }
        fn runs(&self, g: Graph) -> usize {
            self.log.borrow().iter().filter(|&&x| x == g).count()
        }
        fn take_log(&self) -> Vec<Graph> {
            self.log.take()
        }
    }

    use Graph::{Optimized as B, Original as A};

    #[test]
    fn native_policy_warms_up_the_given_pairs_then_samples_one_run_each_interleaved() {
        let f = Fake::new(0.3, 0.1);
        let mut b = Bench::new(Policy::native(2));
        assert_eq!(b.calibrate(None, f.clock(), f.run()), Ok(1));
        assert_eq!(f.take_log(), [A, B, A, B]);
        let t = b.sample(3, f.clock(), f.run()).unwrap();
        // Pairs alternate their order: A B, B A, A B.
        assert_eq!(f.take_log(), [A, B, B, A, A, B]);
        assert_eq!(t.len(), 6);
        for (i, want) in [0.3, 0.1, 0.3, 0.1, 0.3, 0.1].iter().enumerate() {
            assert!((t[i] - want).abs() < 1e-12, "{t:?}");
        }
        // One clock read per run, plus the first.
        assert_eq!(f.reads.get(), (4 + 1) + (6 + 1));
    }

    #[test]
    fn no_warmup_pairs_is_no_warmup_run() {
        let f = Fake::new(1.0, 1.0);
        let mut b = Bench::new(Policy::native(0));
        assert_eq!(b.calibrate(None, f.clock(), f.run()), Ok(1));
        assert!(f.take_log().is_empty());
    }

    #[test]
    fn browser_warmup_lasts_its_time_then_calibration_doubles_until_a_sample_takes_the_target() {
        // 7/16 + 1/16 ms per pair (exact in binary): 1000 ms of warm-up is 2000 pairs.
        let f = Fake::new(0.4375, 0.0625);
        let mut b = Bench::new(Policy::BROWSER);
        let mut calls = 0;
        let repeat = b
            .calibrate(None, f.clock(), |g| {
                calls += 1;
                if calls == 4000 {
                    // The last warm-up run: so far one pair after another.
                    assert_eq!(f.runs(A), 2000);
                    assert_eq!(f.runs(B), 1999);
                    assert!(f
                        .log
                        .borrow()
                        .chunks(2)
                        .all(|p| p[0] == A && (p.len() == 1 || p[1] == B)));
                }
                f.run()(g)
            })
            .unwrap();
        // The faster graph sets the size: 1/16 ms × 16 = 1 ms reaches the 1 ms target, × 8 does
        // not.
        assert_eq!(repeat, 16);
        assert_eq!(b.repeat(), 16);
        // Calibration: 3 trial pairs at each of 1, 2, 4, 8, 16 runs per sample.
        let trial_runs = 3 * (1 + 2 + 4 + 8 + 16);
        assert_eq!(f.runs(A), 2000 + trial_runs);
        assert_eq!(f.runs(B), 2000 + trial_runs);
        let t = b.sample(2, f.clock(), f.run()).unwrap();
        assert_eq!(f.runs(A), 2000 + trial_runs + 2 * 16);
        assert_eq!(t, [0.4375, 0.0625, 0.4375, 0.0625]);
        let s = b.summary();
        assert_eq!((s.samples, s.repeat), (2, 16));
        assert_eq!(s.original.median_ms, 0.4375);
        assert_eq!(s.speedup, 7.0);
    }

    #[test]
    fn warmup_needs_its_pairs_even_when_runs_are_slow() {
        // One pair takes 2 s, more than the warm-up time: still 3 pairs.
        let f = Fake::new(1000.0, 1000.0);
        let mut b = Bench::new(Policy::BROWSER);
        assert_eq!(b.calibrate(Some(1.0), f.clock(), f.run()), Ok(1));
        assert_eq!(f.runs(A), 3 + TRIAL_PAIRS as usize);
    }

    #[test]
    fn calibration_stops_at_the_cap_when_the_clock_stands_still() {
        let f = Fake::new(0.0, 0.0);
        let mut b = Bench::new(Policy::BROWSER);
        assert_eq!(b.calibrate(None, f.clock(), f.run()), Ok(MAX_REPEAT));
        // Warm-up gave up at its cap too.
        let sizes: u64 = (0..14).map(|k| 1u64 << k).sum::<u64>() + MAX_REPEAT as u64;
        assert_eq!(
            f.runs(A) as u64,
            MAX_WARMUP_PAIRS + TRIAL_PAIRS as u64 * sizes
        );
    }

    #[test]
    fn calibration_takes_the_fastest_trial_so_one_slow_sample_does_not_stop_it() {
        let f = Fake::new(0.1, 0.1);
        let mut b = Bench::new(Policy::native(0));
        let mut n = 0;
        let repeat = b
            .calibrate(Some(0.5), f.clock(), |g| {
                n += 1;
                if n == 1 {
                    f.now.set(f.now.get() + 100.0); // preempted once
                }
                f.run()(g)
            })
            .unwrap();
        assert_eq!(repeat, 8);
    }

    #[test]
    fn a_new_calibration_drops_old_samples_and_statistics_follow_the_samples() {
        let f = Fake::new(2.0, 1.0);
        let mut b = Bench::new(Policy::native(0));
        b.sample(3, f.clock(), f.run()).unwrap();
        assert_eq!(b.summary().samples, 3);
        b.calibrate(None, f.clock(), f.run()).unwrap();
        let s = b.summary();
        assert_eq!(s.samples, 0);
        assert!(s.original.median_ms.is_nan() && s.speedup.is_nan());
        assert_eq!(
            Timing::of(&[4.0, 1.0, 3.0, 2.0]),
            Timing {
                median_ms: 2.5,
                min_ms: 1.0
            }
        );
        assert_eq!(Timing::of(&[3.0, 1.0, 2.0]).median_ms, 2.0);
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn the_async_driver_makes_the_same_decisions() {
        let f = Fake::new(0.4375, 0.0625);
        let mut b = Bench::new(Policy::BROWSER);
        b.start_calibration(None);
        let run = |g| {
            f.run()(g).unwrap();
            std::future::ready(Ok::<(), ()>(()))
        };
        pollster::block_on(b.drive_async(f.clock(), run)).unwrap();
        assert_eq!(b.repeat(), 16);
    }

    #[test]
    fn a_run_error_mid_pair_leaves_whole_pairs() {
        let f = Fake::new(2.0, 1.0);
        let mut b = Bench::new(Policy::native(0));
        let mut n = 0;
        let e = b.sample(2, f.clock(), |g| {
            n += 1;
            if n == 4 {
                return Err(());
            }
            f.run()(g)
        });
        assert_eq!(e, Err(()));
        assert_eq!((b.samples(A).len(), b.samples(B).len()), (1, 2));
        // The second pair ran B, then failed on A; the next pair is again B first.
        assert_eq!(b.sample(1, f.clock(), f.run()), Ok(vec![2.0, 1.0]));
        assert_eq!(f.take_log(), [A, B, B, B, A]);
        assert_eq!(b.summary().samples, 2);
    }

    #[test]
    fn a_clock_error_stops_the_driver() {
        let mut b = Bench::new(Policy::native(1));
        let e = b.calibrate(None, || Err("no clock"), |_| Ok(()));
        assert_eq!(e, Err("no clock"));
    }
}
