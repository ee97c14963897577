//! How kiln's compiled CPU code shares work among the threads of rayon's pool.
//!
//! A program's steps each hand out a few parallel tasks and wait for them, hundreds of times a
//! run. Left to itself, a rayon worker with nothing to do falls asleep within microseconds, and
//! the next hand-off, or the wait for the last task, pays for waking it (an interrupt to another
//! core; in a VM, a trip through the host). So a run keeps the other workers spinning
//! ([`run_awake`]) and a step waits for its tasks by spinning too ([`for_each_task`]), bounded in
//! time, the way ONNX Runtime's pool spins between nodes. `KILN_NO_SPIN` set turns both off
//! (for comparisons, or where the spare cores are better left idle), as ORT's
//! `session.intra_op.allow_spinning = 0` does.

use rayon::Yield;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a run waits for the other workers to join it before it starts without them.
const JOIN_WINDOW: Duration = Duration::from_micros(300);

/// How long a step spins for its last tasks before it blocks in rayon's wait instead.
const WAIT_SPIN: Duration = Duration::from_millis(1);

/// Set in the join count once the window is closed: a worker that comes later goes away.
const CLOSED: usize = 1 << (usize::BITS - 1);

/// Runs `body` on this thread while every other worker of the current pool that joins within
/// [`JOIN_WINDOW`] spins, taking any task the body hands out, until `body` returns.
///
/// Meant for a worker of the pool (elsewhere, or in a pool of one, it just runs `body`).
/// Deadlock-free because a spinner only joins before `body` starts: it cannot sit inside one
/// of the body's own tasks and hold it up.
pub fn run_awake<R>(body: impl FnOnce() -> R) -> R {
    let others = rayon::current_num_threads().saturating_sub(1);
    if others == 0 || rayon::current_thread_index().is_none() || !spinning() {
        return body();
    }
    let joined = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    rayon::in_place_scope(|s| {
        for _ in 0..others {
            let (joined, done) = (&joined, &done);
            s.spawn(move |_| spin(joined, done));
        }
        let start = Instant::now();
        while joined.load(Ordering::Acquire) < others && start.elapsed() < JOIN_WINDOW {
            std::hint::spin_loop();
        }
        joined.fetch_or(CLOSED, Ordering::AcqRel);
        // Set even if `body` panics, so that the spinners stop and the panic reaches the caller.
        let _stop = OnDrop(|| done.store(true, Ordering::Release));
        body()
    })
}

/// One spinner: takes pool work until `done`, unless it came after the window closed.
fn spin(joined: &AtomicUsize, done: &AtomicBool) {
    if joined.fetch_add(1, Ordering::AcqRel) & CLOSED != 0 {
        return;
    }
    while !done.load(Ordering::Acquire) {
        if rayon::yield_now() != Some(Yield::Executed) {
            std::hint::spin_loop();
        }
    }
}

/// Runs `task(i)` for every `i` in `0..n` on the current pool and returns once all have run.
/// This thread and up to `threads - 1` workers each take the next index as they come free, so
/// uneven tasks balance; this thread then spins (up to [`WAIT_SPIN`]) for the others' last.
pub fn for_each_task(n: usize, task: impl Fn(usize) + Sync) {
    let helpers = rayon::current_num_threads().min(n).saturating_sub(1);
    if helpers == 0 {
        (0..n).for_each(task);
        return;
    }
    let next = AtomicUsize::new(0);
    let busy = AtomicUsize::new(helpers);
    let take = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            break;
        }
        task(i);
    };
    rayon::in_place_scope(|s| {
        for _ in 0..helpers {
            let (take, busy) = (&take, &busy);
            s.spawn(move |_| {
                let _done = OnDrop(|| {
                    busy.fetch_sub(1, Ordering::Release);
                });
                take();
            });
        }
        take();
        if rayon::current_thread_index().is_some() && spinning() {
            let start = Instant::now();
            while busy.load(Ordering::Acquire) > 0 && start.elapsed() < WAIT_SPIN {
                // A helper nobody has started yet is in this thread's own queue: run it here.
                if rayon::yield_now() != Some(Yield::Executed) {
                    std::hint::spin_loop();
                }
            }
        }
    });
}

/// Whether runs and steps spin (see the module's doc): 0 until first read, then 1 yes, 2 no.
static SPIN: AtomicU8 = AtomicU8::new(0);

/// Turns spinning on or off for this process, over `KILN_NO_SPIN`.
pub fn set_spinning(on: bool) {
    SPIN.store(if on { 1 } else { 2 }, Ordering::Relaxed);
}

/// True unless [`set_spinning`] turned it off or, before any call to it, `KILN_NO_SPIN` is set.
fn spinning() -> bool {
    match SPIN.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var_os("KILN_NO_SPIN").is_none();
            let _ = SPIN.compare_exchange(0, if on { 1 } else { 2 }, Ordering::Relaxed, Ordering::Relaxed);
            SPIN.load(Ordering::Relaxed) == 1
        }
        v => v == 1,
    }
}

/// Runs its closure when dropped (also while unwinding from a panic).
struct OnDrop<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// Runs `f(i, chunk)` for each `chunk` of `len` elements of `data` (the last may be shorter),
/// `i` counting from 0, as tasks of [`for_each_task`].
pub fn for_each_chunk_mut<T: Send>(data: &mut [T], len: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    assert!(len > 0, "for_each_chunk_mut: chunks of 0 elements");
    let (ptr, total) = (SendMut(data.as_mut_ptr()), data.len());
    for_each_task(total.div_ceil(len), |i| {
        let start = i * len;
        // SAFETY: each index is taken once, so the chunks handed out are disjoint parts of
        // `data`, which this function borrows mutably until every task is done.
        let chunk = unsafe { std::slice::from_raw_parts_mut(ptr.at(start), len.min(total - start)) };
        f(i, chunk)
    });
}

/// A pointer into a slice whose disjoint parts tasks on other threads write.
struct SendMut<T>(*mut T);

// SAFETY: only used by `for_each_chunk_mut`, whose tasks touch disjoint elements.
unsafe impl<T: Send> Sync for SendMut<T> {}

impl<T> SendMut<T> {
    /// The pointer `i` elements on (a method, so that closures capture the whole wrapper).
    fn at(&self, i: usize) -> *mut T {
        self.0.wrapping_add(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a test pool")
    }

    /// Runs `f` on another thread and fails the test, instead of hanging it, when it has not
    /// returned within a minute (a deadlock).
    fn within_a_minute<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(60)).expect("did not finish within a minute: deadlock")
    }

    /// How many times each of `0..n` ran.
    fn counts(n: usize, run: impl FnOnce(&(dyn Fn(usize) + Sync))) -> Vec<usize> {
        let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        run(&|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        hits.into_iter().map(AtomicUsize::into_inner).collect()
    }

    #[test]
    fn every_task_runs_once_on_pools_of_any_size_and_from_any_thread() {
        for threads in [1, 2, 3] {
            let pool = pool(threads);
            for n in [0, 1, 2, 3, 7, 100] {
                let on_worker = pool.install(|| counts(n, |t| for_each_task(n, t)));
                assert_eq!(on_worker, vec![1; n], "{threads} threads, {n} tasks, on a worker");
                let awake = pool.install(|| run_awake(|| counts(n, |t| for_each_task(n, t))));
                assert_eq!(awake, vec![1; n], "{threads} threads, {n} tasks, in run_awake");
            }
        }
        // Outside any pool: the global one runs the tasks, this thread waits.
        assert_eq!(counts(9, |t| for_each_task(9, t)), vec![1; 9]);
    }

    #[test]
    fn tasks_spread_over_the_workers() {
        let pool = pool(2);
        let seen: Vec<AtomicUsize> = (0..2).map(|_| AtomicUsize::new(0)).collect();
        pool.install(|| {
            run_awake(|| {
                for_each_task(64, |_| {
                    std::thread::sleep(Duration::from_millis(2));
                    seen[rayon::current_thread_index().expect("a worker")].fetch_add(1, Ordering::Relaxed);
                })
            })
        });
        let seen: Vec<usize> = seen.into_iter().map(AtomicUsize::into_inner).collect();
        assert_eq!(seen.iter().sum::<usize>(), 64);
        assert!(seen.iter().all(|&s| s > 0), "one worker ran every task: {seen:?}");
    }

    #[test]
    fn chunks_cover_the_slice_in_order_with_a_short_last_one() {
        let pool = pool(2);
        for (len, chunk) in [(0, 3), (1, 3), (10, 3), (12, 3), (5, 8)] {
            let mut data = vec![usize::MAX; len];
            let sizes = std::sync::Mutex::new(Vec::new());
            pool.install(|| {
                for_each_chunk_mut(&mut data, chunk, |i, part| {
                    sizes.lock().expect("unpoisoned").push((i, part.len()));
                    part.iter_mut().for_each(|v| *v = i);
                })
            });
            let want: Vec<usize> = (0..len).map(|j| j / chunk).collect();
            assert_eq!(data, want, "{len} elements in chunks of {chunk}");
            let mut sizes = sizes.into_inner().expect("unpoisoned");
            sizes.sort();
            let want: Vec<(usize, usize)> = (0..len.div_ceil(chunk)).map(|i| (i, chunk.min(len - i * chunk))).collect();
            assert_eq!(sizes, want);
        }
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_and_the_pool_still_works() {
        within_a_minute(|| {
            let pool = pool(2);
            for awake in [false, true] {
                let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    pool.install(|| {
                        let body = || for_each_task(8, |i| assert_ne!(i, 5, "task five fails"));
                        if awake { run_awake(body) } else { body() }
                    })
                }));
                assert!(caught.is_err(), "the panic of task 5 was lost (awake: {awake})");
                let after = pool.install(|| run_awake(|| counts(4, |t| for_each_task(4, t))));
                assert_eq!(after, vec![1; 4]);
            }
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pool.install(|| run_awake(|| panic!("the body fails")))
            }));
            assert!(caught.is_err(), "the body's panic was lost");
        });
    }

    #[test]
    fn concurrent_and_nested_runs_share_a_small_pool_without_deadlock() {
        let sums = within_a_minute(|| {
            let pool = std::sync::Arc::new(pool(2));
            let callers: Vec<_> = (0..4)
                .map(|c| {
                    let pool = pool.clone();
                    std::thread::spawn(move || {
                        (0..50)
                            .map(|_| {
                                pool.install(|| {
                                    run_awake(|| {
                                        let total = AtomicUsize::new(0);
                                        // A task that itself waits on tasks: the nesting a
                                        // step's parallel parts do not have today, but may.
                                        for_each_task(6, |i| {
                                            for_each_task(4, |j| {
                                                total.fetch_add(c + i * j, Ordering::Relaxed);
                                            })
                                        });
                                        total.into_inner()
                                    })
                                })
                            })
                            .sum::<usize>()
                    })
                })
                .collect();
            callers.into_iter().map(|h| h.join().expect("a caller thread")).collect::<Vec<_>>()
        });
        // Each run adds c 24 times and i*j over 6 x 4 (15 * 6 = 90).
        let want: Vec<usize> = (0..4).map(|c| 50 * (24 * c + 90)).collect();
        assert_eq!(sums, want);
    }
}
