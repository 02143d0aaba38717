//! Threads: one policy for the whole crate. Work runs on the calling thread unless a caller asks
//! for more (`--threads N` in the CLI, `threads` in the wasm API's run options), and then on a
//! rayon pool ([`with_threads`]). A kernel splits its work only when it runs inside such a pool
//! ([`split`]), so one thread stays the default and the unit tests and the parity check run as
//! before.
//!
//! Natively the pool is made for the call, its idle threads spin while the call runs
//! (`awake`), and [`with_threads`] also sets how the runs' memory is kept (glibc's heap,
//! `keep_freed_memory`): a CLI command always comes through here. In wasm, rayon is compiled
//! in only by the threads build (feature `wasm-threads`): there the pool is the global one that
//! JS starts once with `await startThreads(n)` (Web Workers sharing the module's memory, by
//! wasm-bindgen-rayon), and a call with `threads` ≤ n runs on it, its kernels splitting into at
//! most `threads` parts. The caller blocks while the pool works, so it should be a Worker (a
//! page's main thread spins). The plain wasm builds run on one thread.
//!
//! Kernels split so that every thread writes its own elements and the sums keep their order:
//! the results are the same bit for bit at any thread count.

use std::ops::Range;

/// Less work than this (multiply-adds, about 0.1 ms on one core) runs on one thread: handing
/// work to the pool and waiting for it costs tens of microseconds on a busy machine. At 2^18
/// the tiny GPT-2 at 1x128 ran 1.3x slower on 2 threads than on 1 (its products are 1-2M).
#[cfg(not(target_arch = "wasm32"))]
const MIN_PARALLEL_WORK: usize = 1 << 22;
/// In wasm a multiply-add takes 2-4x longer, so less work pays for the handoff. On 2026-12-06
/// in Chromium at 2 threads, 2^20 split 5-7 products per run of the tiny GPT-2/BERT where 2^22
/// split 0-1, and changed their times by under 5% (docs/benchmarks.md).
#[cfg(all(target_arch = "wasm32", feature = "wasm-threads"))]
const MIN_PARALLEL_WORK: usize = 1 << 20;

/// The most threads [`with_threads`] takes.
pub const MAX_THREADS: usize = 256;

/// Runs `f` with `threads` threads for the kernels: on this thread when `threads` is 1, else on a
/// rayon pool (see the module's text). An error when [`check`] refuses `threads` or the pool
/// cannot be built.
pub fn with_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> crate::Result<R> {
    check(threads)?;
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    keep_freed_memory();
    if threads == 1 {
        return Ok(f());
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("fuselab-{i}"))
            .build()
            .map_err(|e| crate::Error::Other(format!("cannot start {threads} threads: {e}")))?;
        Ok(pool.install(|| awake(threads, f)))
    }
    #[cfg(all(target_arch = "wasm32", feature = "wasm-threads"))]
    {
        Ok(web::run(threads, f))
    }
    #[cfg(all(target_arch = "wasm32", not(feature = "wasm-threads")))]
    {
        let _ = f;
        Err(one_thread_only(threads))
    }
}

/// Whether [`with_threads`] takes `threads` here, without running anything (a wasm session or
/// bench refuses a bad count when it is made): 1 to [`MAX_THREADS`]; in wasm, more than 1 only
/// in the threads build, and at most the pool `startThreads` started.
pub fn check(threads: usize) -> crate::Result<()> {
    if threads == 0 || threads > MAX_THREADS {
        return Err(crate::Error::invalid(format!(
            "--threads {threads}: give 1 to {MAX_THREADS}"
        )));
    }
    if threads == 1 {
        return Ok(());
    }
    #[cfg(all(target_arch = "wasm32", feature = "wasm-threads"))]
    return web::check(threads);
    #[cfg(all(target_arch = "wasm32", not(feature = "wasm-threads")))]
    return Err(one_thread_only(threads));
    #[cfg(not(target_arch = "wasm32"))]
    Ok(())
}

/// Makes glibc keep what the runs free for the next runs (once per process; threads made
/// before keep their arena): every thread allocates from the main heap, blocks up to 32 MiB
/// (glibc's largest threshold) come from the heap instead of a mapping of their own, and the
/// heap is never trimmed.
///
/// With several threads the executor runs on a pool thread, and glibc gave such a thread heaps
/// of its own, 64 MiB at most each, unmapping any beyond the first as soon as everything in it
/// was freed; the main heap (one thread) it trimmed once more than 2x its mapping threshold was
/// free at the top. Either way a run took its large buffers from fresh pages: GPT-2 small at
/// 1×128 on two threads faulted ~6,300 pages in per run (its 25.7 MB of logits;
/// tests/steady_state.rs has a model that did so on one thread too). Memory the process has
/// used stays its own until it exits; blocks over 32 MiB are still mapped and unmapped per run.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_freed_memory() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: mallopt only sets parameters of the allocator, each value in its range.
    ONCE.call_once(|| unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    });
}

/// Runs `f` on this pool thread while the pool's other threads wait for work spinning, each
/// taking the next part a kernel hands out as soon as it is there, until `f` returns.
///
/// Between two split kernels the model runs single-threaded ops (a residual Add, a Split), and a
/// rayon worker idle that long goes to sleep, and waking it again took ~180 µs per fork on this
/// VM: GPT-2 small's 49 products at 1×128 (`cargo run --release --example gemm_model`) took
/// 8.7 ms longer at 2 threads with a 2 ms pause after each than without, and 1.8 ms longer with
/// the spinning. onnxruntime's pool spins the same way by default. The cost: the other threads
/// use a full core each for the whole call, which is what `--threads N` asks for; with more
/// threads than cores nothing spins.
#[cfg(not(target_arch = "wasm32"))]
fn awake<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    use std::sync::atomic::{AtomicBool, Ordering};
    let done = AtomicBool::new(false);
    // More threads than cores: a spinner would take the core the work needs.
    if std::thread::available_parallelism().map_or(true, |cores| threads > cores.get()) {
        return f();
    }
    let caller = rayon::current_thread_index();
    rayon::scope(|s| {
        for _ in 1..threads {
            s.spawn(|_| {
                // A spinner this thread picks up itself (while `f` waits in a join) returns at
                // once: spinning here would never let `f` go on.
                if rayon::current_thread_index() == caller {
                    return;
                }
                while !done.load(Ordering::Acquire) {
                    rayon::yield_now();
                }
            });
        }
        let r = f();
        done.store(true, Ordering::Release);
        r
    })
}

#[cfg(all(target_arch = "wasm32", not(feature = "wasm-threads")))]
fn one_thread_only(threads: usize) -> crate::Error {
    crate::Error::invalid(format!(
        "threads {threads}: this wasm build runs on one thread; the threads build \
         (fuselab/threads) runs more in a cross-origin isolated page"
    ))
}

/// The threads build's pool: started once from JS, then shared by every call.
#[cfg(all(target_arch = "wasm32", feature = "wasm-threads"))]
pub mod web {
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Threads in the global pool: 0 before `startThreads`, `usize::MAX` while it starts.
    static POOL: AtomicUsize = AtomicUsize::new(0);
    /// Kernel calls that split between threads since the module started ([`splits`]).
    static SPLITS: AtomicUsize = AtomicUsize::new(0);
    /// The parts a kernel may split into during the current call ([`super::with_threads`]'s
    /// `threads`, which may be fewer than the pool's). wasm has one caller at a time: the JS
    /// thread that called in, blocked until the call returns.
    static WIDTH: AtomicUsize = AtomicUsize::new(1);

    /// Starts the global pool of `threads` Web Workers (once; again with the same count is a
    /// no-op). Errors name what is wrong: a count out of range, a pool already started with
    /// another count, or the browser refusing (no cross-origin isolation, no module workers).
    pub async fn start(threads: usize) -> Result<usize, String> {
        if threads == 0 || threads > super::MAX_THREADS {
            return Err(format!(
                "startThreads({threads}): give 1 to {}",
                super::MAX_THREADS
            ));
        }
        match POOL.compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {}
            Err(n) if n == threads => return Ok(n),
            Err(usize::MAX) => return Err("startThreads: the pool is still starting".into()),
            Err(n) => {
                return Err(format!(
                    "startThreads({threads}): the pool already has {n} threads (it starts once \
                     per page)"
                ))
            }
        }
        let started =
            wasm_bindgen_futures::JsFuture::from(wasm_bindgen_rayon::init_thread_pool(threads))
                .await;
        match started {
            Ok(_) => {
                POOL.store(threads, Ordering::Release);
                Ok(threads)
            }
            Err(e) => {
                POOL.store(0, Ordering::Release);
                Err(format!("startThreads({threads}) failed: {e:?}"))
            }
        }
    }

    /// The pool's size (0: not started).
    pub fn pool() -> usize {
        match POOL.load(Ordering::Acquire) {
            usize::MAX => 0,
            n => n,
        }
    }

    /// How many kernel calls have split their work between threads so far: what shows that a
    /// run with `threads` > 1 used the pool (`parallelCalls()` in JS).
    pub fn splits() -> usize {
        SPLITS.load(Ordering::Relaxed)
    }

    pub(super) fn count_split() {
        SPLITS.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn width() -> usize {
        WIDTH.load(Ordering::Relaxed)
    }

    /// `threads` against the pool ([`super::check`]).
    pub(super) fn check(threads: usize) -> crate::Result<()> {
        match pool() {
            0 => Err(crate::Error::invalid(format!(
                "threads {threads}: start the pool first (await startThreads(n) in a cross-origin \
                 isolated page)"
            ))),
            pool if threads > pool => Err(crate::Error::invalid(format!(
                "threads {threads}: the pool has {pool} (startThreads)"
            ))),
            _ => Ok(()),
        }
    }

    /// `f` on the pool, its kernels splitting into up to `threads` parts ([`super::check`]ed).
    pub(super) fn run<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
        WIDTH.store(threads, Ordering::Relaxed);
        // `scope` from outside the pool runs `f` on one of its workers and waits for it.
        let r = rayon::scope(|_| f());
        WIDTH.store(1, Ordering::Relaxed);
        r
    }
}

/// How many parts to split `units` (independent pieces: strips of columns, heads, rows) between
/// when the whole is `work` multiply-adds: `Some(parts)` with 2 ≤ parts ≤ units inside a pool of
/// several threads ([`with_threads`]) and for enough work; `None` to run on this thread.
pub fn split(units: usize, work: usize) -> Option<usize> {
    #[cfg(any(not(target_arch = "wasm32"), feature = "wasm-threads"))]
    {
        rayon::current_thread_index()?;
        #[cfg(not(target_arch = "wasm32"))]
        let width = rayon::current_num_threads();
        #[cfg(target_arch = "wasm32")]
        let width = web::width().min(rayon::current_num_threads());
        let parts = width.min(units);
        if parts >= 2 && work >= MIN_PARALLEL_WORK {
            #[cfg(target_arch = "wasm32")]
            web::count_split();
            return Some(parts);
        }
    }
    let _ = (units, work);
    None
}

/// Calls `f` on `parts` consecutive ranges covering `0..units`, in parallel (inside the pool
/// [`split`] found), and returns when all are done.
pub fn for_each_part(units: usize, parts: usize, f: impl Fn(Range<usize>) + Sync) {
    #[cfg(any(not(target_arch = "wasm32"), feature = "wasm-threads"))]
    {
        use rayon::prelude::*;
        (0..parts)
            .into_par_iter()
            .for_each(|p| f(part(p, units, parts)));
    }
    #[cfg(all(target_arch = "wasm32", not(feature = "wasm-threads")))]
    (0..parts).for_each(|p| f(part(p, units, parts)));
}

/// The units of part `p` when `units` split into `parts` ([`for_each_part`], [`for_each_rows`]):
/// consecutive, sizes differing by at most one.
pub fn part(p: usize, units: usize, parts: usize) -> Range<usize> {
    p * units / parts..(p + 1) * units / parts
}

/// [`for_each_part`] over a buffer of rows of `row` elements (`data.len().div_ceil(row)` of
/// them, the last one possibly short): part p gets its range of rows and those rows of `data`,
/// to write. The first error any part returns is the result.
pub fn for_each_rows<T: Send>(
    data: &mut [T],
    row: usize,
    parts: usize,
    f: impl Fn(Range<usize>, &mut [T]) -> Result<(), String> + Sync,
) -> Result<(), String> {
    let units = if row == 0 {
        0
    } else {
        data.len().div_ceil(row)
    };
    let mut pieces = Vec::with_capacity(parts);
    let mut rest = data;
    for p in 0..parts {
        let rows = part(p, units, parts);
        let (mine, tail) = rest.split_at_mut((rows.len() * row).min(rest.len()));
        pieces.push((rows, mine));
        rest = tail;
    }
    #[cfg(any(not(target_arch = "wasm32"), feature = "wasm-threads"))]
    {
        use rayon::prelude::*;
        pieces
            .into_par_iter()
            .map(|(rows, piece)| f(rows, piece))
            .collect::<Result<(), String>>()
    }
    #[cfg(all(target_arch = "wasm32", not(feature = "wasm-threads")))]
    pieces
        .into_iter()
        .try_for_each(|(rows, piece)| f(rows, piece))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_thread_never_splits() {
        assert_eq!(split(64, usize::MAX), None, "outside a pool");
        let inside = with_threads(1, || split(64, usize::MAX)).unwrap();
        assert_eq!(inside, None);
    }

    #[test]
    fn a_pool_splits_enough_work_only() {
        let (big, small, few) = with_threads(3, || {
            (split(64, usize::MAX), split(64, 16), split(2, usize::MAX))
        })
        .unwrap();
        assert_eq!(big, Some(3));
        assert_eq!(small, None, "too little work to fork");
        assert_eq!(few, Some(2), "no more parts than units");
    }

    #[test]
    fn parts_cover_every_unit_once() {
        let seen = std::sync::Mutex::new(vec![0u8; 37]);
        for_each_part(37, 5, |r| {
            let mut s = seen.lock().unwrap();
            r.for_each(|i| s[i] += 1);
        });
        assert!(seen.into_inner().unwrap().iter().all(|&n| n == 1));
    }

    #[test]
    fn row_parts_get_their_own_rows_and_errors_come_back() {
        // 7 rows of 3 and a short eighth: each part writes its row numbers into its rows.
        let mut data = vec![usize::MAX; 23];
        with_threads(3, || {
            for_each_rows(&mut data, 3, 3, |rows, piece| {
                assert_eq!(piece.len(), (rows.len() * 3).min(23 - rows.start * 3));
                for (i, r) in rows.enumerate() {
                    piece[i * 3..].iter_mut().take(3).for_each(|x| *x = r);
                }
                Ok(())
            })
        })
        .unwrap()
        .unwrap();
        assert_eq!(data, (0..23).map(|i| i / 3).collect::<Vec<_>>());
        let failed = for_each_rows(&mut data, 3, 2, |rows, _| match rows.start {
            0 => Ok(()),
            _ => Err("part 1 failed".to_string()),
        });
        assert_eq!(failed, Err("part 1 failed".to_string()));
    }

    #[test]
    fn bad_thread_counts_are_refused() {
        assert!(with_threads(0, || ()).is_err());
        assert!(with_threads(MAX_THREADS + 1, || ()).is_err());
    }
}
