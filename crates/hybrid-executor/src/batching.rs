//! Dynamic batching: concurrent calls against the same corpus become one batched call.
//!
//! The first caller for a key (op, corpus identity, parameters, tenant) opens a batch and leads it: it
//! waits until the batch is full (`max_batch` queries) or `max_wait` has passed, then until fewer than
//! `in_flight` batches of the op are running, closes it, runs the whole batch once, and hands each member
//! its own answer by position. Later callers with the same key join the
//! open batch (their queries are copied in) and wait for their answer. A member brings one query or
//! several (a batch knn call joins the single-query calls, so they share one pass over the corpus). Each
//! caller's answer is taken exactly once.
//!
//! The corpus is identified by address and length. That is sound: every member borrows its corpus for
//! the whole time it waits, so two members with the same address and length look at the same, unchanging
//! memory, and the leader runs the batch on its own borrow of it.

use crate::device::Device;
use crate::executor::{ExecError, Outcome};
use crate::metrics::Metrics;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Batching limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchConfig {
    /// Queries per batch at most; `1` turns batching off.
    pub max_batch: usize,
    /// How long the first caller waits for others to join.
    pub max_wait: Duration,
    /// Batches of one op running at once (at least 1). With 1 (the default), the next batch keeps
    /// filling until the running one is done, so batches grow with the load. With 2, the next batch is
    /// handed to the backend while the previous one is still on the device (no hand-over gap), but the
    /// callers are split over two batches: on a GPU, where a batch of 32 queries costs about what one of
    /// 128 does (one GEMM tile), that lowered throughput by 13 % to 32 % on 2 x H200 with 64 and 128
    /// callers (docs/results/2026-11-21-h200-session5/, run X5). For callers many times `max_batch`.
    pub in_flight: usize,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_batch: 64,
            max_wait: Duration::from_micros(200),
            in_flight: 1,
        }
    }
}

/// What identifies calls that may share a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct BatchKey {
    /// Address and length of the corpus (see the module doc), or an explicit corpus id.
    pub corpus: (usize, usize),
    pub dim: usize,
    /// Op parameters that must match (k for top-k, …): each in bits of its own, so that no value of one can
    /// read as another's.
    pub params: u128,
    pub tenant: Option<u32>,
}

/// The result of a batched run: one answer per member, in join order.
pub(crate) type BatchResult<R> = Result<(Vec<R>, Device, Option<String>), ExecError>;

#[derive(Debug)]
struct State {
    queries: Vec<f32>,
    /// Queries of each member, in join order.
    sizes: Vec<usize>,
    /// Queries in the batch (the sum of `sizes`).
    n_queries: usize,
    members: usize,
    closed: bool,
    /// The members that wait for the answer (all but the leader), in join order.
    waiters: Vec<Thread>,
}

/// A batch's answer: one slot per member, taken once each, and the threads to wake.
#[derive(Debug)]
struct Done<R> {
    answers: Result<Vec<Mutex<Option<R>>>, ExecError>,
    device: Device,
    fallback: Option<String>,
    waiters: Vec<Thread>,
}

impl<R> Done<R> {
    /// Wake every waiting member, one after another in join order. (A tree of wake-ups, each member waking
    /// a few others, made every member runnable at once, and the members' next calls then crowded the
    /// batcher's locks ahead of the next batch's leader: docs/results/2026-11-22-h200-session11, run B.)
    fn wake_all(&self) {
        for w in &self.waiters {
            w.unpark();
        }
    }
}

#[derive(Debug)]
struct Batch<R> {
    state: Mutex<State>,
    /// Signalled when the batch closes (full).
    cv: Condvar,
    done: OnceLock<Done<R>>,
}

/// One op's open batches.
#[derive(Debug)]
pub(crate) struct Batcher<R> {
    open: Mutex<HashMap<BatchKey, Arc<Batch<R>>>>,
    /// Batches running now: a leader waits while `in_flight` are, keeping its batch open (and growing),
    /// so under load batches grow to what arrives while the running ones run.
    running: Mutex<Running>,
    /// Signalled when a running batch ends.
    ended: Condvar,
}

/// The batches of one op that run now, and when the last one ended.
#[derive(Debug, Default)]
struct Running {
    n: usize,
    last_end: Option<Instant>,
}

impl<R> Default for Batcher<R> {
    fn default() -> Self {
        Batcher {
            open: Mutex::new(HashMap::new()),
            running: Mutex::new(Running::default()),
            ended: Condvar::new(),
        }
    }
}

/// A running batch's place among the `in_flight`; given back on drop (also when the run unwinds).
struct RunSlot<'a> {
    running: &'a Mutex<Running>,
    ended: &'a Condvar,
}

impl<'a> RunSlot<'a> {
    /// Wait until fewer than `in_flight` (at least 1) batches run, then take a place; also returns how
    /// long ago the op's last batch ended (`None` before the first).
    fn take(
        running: &'a Mutex<Running>,
        ended: &'a Condvar,
        in_flight: usize,
    ) -> (RunSlot<'a>, Option<Duration>) {
        let mut r = running.lock();
        while r.n >= in_flight.max(1) {
            ended.wait(&mut r);
        }
        r.n += 1;
        let gap = r.last_end.map(|t| t.elapsed());
        (RunSlot { running, ended }, gap)
    }
}

impl Drop for RunSlot<'_> {
    fn drop(&mut self) {
        let mut r = self.running.lock();
        r.n = r.n.saturating_sub(1);
        r.last_end = Some(Instant::now());
        drop(r);
        self.ended.notify_one();
    }
}

/// Hands every waiting member an error if the leader unwinds before answering.
struct LeaderGuard<'a, R> {
    batch: &'a Batch<R>,
    done: bool,
}

impl<R> Drop for LeaderGuard<'_, R> {
    fn drop(&mut self) {
        if !self.done {
            let waiters = std::mem::take(&mut self.batch.state.lock().waiters);
            let done = Done {
                answers: Err(ExecError::Internal(
                    "the batch's leading call did not finish".into(),
                )),
                device: Device::Cpu,
                fallback: None,
                waiters,
            };
            // (Were the batch answered already, its waiters were woken; waking them again is harmless.)
            let _ = self.batch.done.set(done);
            if let Some(d) = self.batch.done.get() {
                d.wake_all();
            }
        }
    }
}

impl<R: Send> Batcher<R> {
    /// Join (or open and lead) the batch for `key` with `queries` (`n` queries, row-major); `run` runs a
    /// closed batch (all its queries, row-major, and each member's count) and is called by the leader only,
    /// which records the batch's size and phases in `metrics`. Returns this caller's answer.
    ///
    /// A caller on a rayon worker thread (`queries.par_iter().map(|q| exec.knn_shared_single(..))`) runs its
    /// queries alone, as a batch of one, and never waits on a batch: a worker parked on a batch's answer stops
    /// its pool, and the batch's run may need that pool (the CPU's knn, the value scans), so the leader would wait
    /// for the worker that waits for it; a worker that leads may, while its run waits for a part of the work,
    /// take another caller's call off the pool and then wait, on top of its own run, for the batch slot that run
    /// holds (a deadlock until session 32).
    pub(crate) fn submit(
        &self,
        metrics: &Metrics,
        key: BatchKey,
        queries: &[f32],
        n: usize,
        config: BatchConfig,
        run: impl FnOnce(&[f32], &[usize]) -> BatchResult<R>,
    ) -> Result<Outcome<R>, ExecError> {
        if rayon::current_thread_index().is_some() {
            let (mut answers, device, fallback) = run(queries, &[n])?;
            return match (answers.pop(), answers.is_empty()) {
                (Some(value), true) => Ok(Outcome {
                    value,
                    device,
                    fallback,
                }),
                _ => Err(ExecError::Internal(
                    "a batch of one gave other than one answer".into(),
                )),
            };
        }
        let max_batch = config.max_batch.max(1);
        let (batch, index) = {
            let mut open = self.open.lock();
            let joined = open.get(&key).and_then(|b| {
                let mut s = b.state.lock();
                if s.closed || s.n_queries + n > max_batch {
                    return None;
                }
                s.queries.extend_from_slice(queries);
                let index = s.members;
                s.members += 1;
                s.sizes.push(n);
                s.waiters.push(std::thread::current());
                s.n_queries += n;
                if s.n_queries >= max_batch {
                    s.closed = true;
                    b.cv.notify_all();
                }
                Some((b.clone(), index, s.closed))
            });
            match joined {
                Some((b, index, closed)) => {
                    if closed {
                        open.remove(&key);
                    }
                    drop(open);
                    return Self::follow(&b, index);
                }
                None => {
                    let b = Arc::new(Batch {
                        state: Mutex::new(State {
                            queries: queries.to_vec(),
                            sizes: vec![n],
                            n_queries: n,
                            members: 1,
                            closed: n >= max_batch,
                            waiters: Vec::new(),
                        }),
                        cv: Condvar::new(),
                        done: OnceLock::new(),
                    });
                    if n < max_batch
                        && let Some(old) = open.insert(key, b.clone())
                    {
                        // An open batch with too little room for these queries is replaced: nobody can join
                        // it any more, so it is closed and its leader runs it now, instead of waiting out
                        // `max_wait` (for good, where that has no end) for members that cannot come.
                        old.state.lock().closed = true;
                        old.cv.notify_all();
                    }
                    (b, 0)
                }
            }
        };
        self.lead(metrics, key, &batch, index, config, run)
    }

    /// Wait for the batch's answer (parked until the leader wakes this thread) and take this caller's answer
    /// from its own slot (no lock shared with the other members).
    fn follow(batch: &Batch<R>, index: usize) -> Result<Outcome<R>, ExecError> {
        let done = loop {
            if let Some(done) = batch.done.get() {
                break done;
            }
            // Spurious returns are fine: the loop looks again. An unpark before the park is kept as the
            // thread's token, so a wake-up that comes before the park is not lost.
            std::thread::park();
        };
        Self::take(done, index)
    }

    fn take(done: &Done<R>, index: usize) -> Result<Outcome<R>, ExecError> {
        match &done.answers {
            Ok(answers) => match answers.get(index).and_then(|a| a.lock().take()) {
                Some(value) => Ok(Outcome {
                    value,
                    device: done.device,
                    fallback: done.fallback.clone(),
                }),
                None => Err(ExecError::Internal(format!(
                    "batch answer {index} missing or taken twice"
                ))),
            },
            Err(e) => Err(e.clone()),
        }
    }

    fn lead(
        &self,
        metrics: &Metrics,
        key: BatchKey,
        batch: &Arc<Batch<R>>,
        index: usize,
        config: BatchConfig,
        run: impl FnOnce(&[f32], &[usize]) -> BatchResult<R>,
    ) -> Result<Outcome<R>, ExecError> {
        let mut guard = LeaderGuard { batch, done: false };
        let opened = Instant::now();
        // No deadline where `max_wait` reaches past what an `Instant` can hold: wait for a full batch.
        let deadline = opened.checked_add(config.max_wait);
        {
            let mut s = batch.state.lock();
            while !s.closed {
                match deadline {
                    Some(d) => {
                        if batch.cv.wait_until(&mut s, d).timed_out() {
                            break;
                        }
                    }
                    None => batch.cv.wait(&mut s),
                }
            }
        }
        // Wait for a place among the running batches; callers keep joining meanwhile.
        let (slot, gap) = RunSlot::take(&self.running, &self.ended, config.in_flight);
        // Close it (map lock first, as joiners take it).
        let (queries, sizes, members) = {
            let mut open = self.open.lock();
            if open.get(&key).is_some_and(|b| Arc::ptr_eq(b, batch)) {
                open.remove(&key);
            }
            let mut s = batch.state.lock();
            s.closed = true;
            (
                std::mem::take(&mut s.queries),
                std::mem::take(&mut s.sizes),
                s.members,
            )
        };
        let started = Instant::now();
        let result = run(&queries, &sizes);
        // The device's part is done: the next batch may start while this one's answers are handed out.
        drop(slot);
        metrics.record_batch(sizes.iter().sum(), started - opened, started.elapsed(), gap);
        // Closed, so no member joins any more: the waiters are complete.
        let waiters = std::mem::take(&mut batch.state.lock().waiters);
        let (answers, device, fallback) = match result {
            Ok((answers, device, fallback)) if answers.len() == members => (
                Ok(answers.into_iter().map(|a| Mutex::new(Some(a))).collect()),
                device,
                fallback,
            ),
            Ok((answers, ..)) => (
                Err(ExecError::Internal(format!(
                    "a batch of {members} members returned {} answers",
                    answers.len()
                ))),
                Device::Cpu,
                None,
            ),
            Err(e) => (Err(e), Device::Cpu, None),
        };
        let done = Done {
            answers,
            device,
            fallback,
            waiters,
        };
        guard.done = true;
        if batch.done.set(done).is_err() {
            return Err(ExecError::Internal("batch answered twice".into()));
        }
        let Some(done) = batch.done.get() else {
            return Err(ExecError::Internal("batch answer missing".into()));
        };
        done.wake_all();
        Self::take(done, index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Two leaders of different keys at once; returns the most batches seen running together.
    fn most_running_together(in_flight: usize) -> usize {
        let batcher = Batcher::<u32>::default();
        let metrics = Metrics::default();
        let config = BatchConfig {
            max_batch: 8,
            max_wait: Duration::ZERO,
            in_flight,
        };
        let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let lead = |corpus: usize| {
            let key = BatchKey {
                corpus: (corpus, 1),
                dim: 1,
                params: 0,
                tenant: None,
            };
            batcher.submit(&metrics, key, &[1.0], 1, config, |_, sizes| {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Wait (boundedly) for the other batch to be running too.
                let until =
                    Instant::now() + Duration::from_millis(if in_flight > 1 { 5_000 } else { 100 });
                while most.load(Ordering::SeqCst) < 2 && Instant::now() < until {
                    most.fetch_max(running.load(Ordering::SeqCst), Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(1));
                }
                running.fetch_sub(1, Ordering::SeqCst);
                Ok((vec![7; sizes.len()], Device::Cpu, None))
            })
        };
        std::thread::scope(|s| {
            let a = s.spawn(|| lead(1));
            let b = s.spawn(|| lead(2));
            for h in [a, b] {
                let out = h.join().expect("leader thread");
                assert_eq!(out.expect("answered").value, 7);
            }
        });
        let run = metrics.batch_phase_ns(crate::metrics::BatchPhase::Run);
        assert_eq!(run.count(), 2, "both batches' phases recorded");
        assert_eq!(metrics.batch_sizes().sum(), 2);
        most.load(Ordering::SeqCst)
    }

    /// A batcher, its metrics, a config whose batches close at `n` queries (and not before), and one key.
    fn one_key(n: usize) -> (Batcher<u32>, Metrics, BatchConfig, BatchKey) {
        let config = BatchConfig {
            max_batch: n,
            max_wait: Duration::from_secs(600),
            in_flight: 1,
        };
        let key = BatchKey {
            corpus: (1, 1),
            dim: 1,
            params: 0,
            tenant: None,
        };
        (Batcher::default(), Metrics::default(), config, key)
    }

    /// `n` callers of one key at once, one batch of all of them; each answer is the caller's own query.
    fn one_batch_of(n: usize, fail: bool) -> Vec<Result<u32, ExecError>> {
        let (batcher, metrics, config, key) = one_key(n);
        let barrier = std::sync::Barrier::new(n);
        let out = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    let (batcher, metrics, barrier) = (&batcher, &metrics, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        let q = [i as f32];
                        batcher
                            .submit(metrics, key, &q, 1, config, |all, _| {
                                assert_eq!(all.len(), n, "the leader runs the full batch");
                                if fail {
                                    return Err(ExecError::Internal("planted".into()));
                                }
                                Ok((all.iter().map(|&v| v as u32).collect(), Device::Cpu, None))
                            })
                            .map(|o| o.value)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("caller thread"))
                .collect()
        });
        assert_eq!(metrics.batch_sizes().count(), 1, "one batch");
        out
    }

    #[test]
    fn every_member_of_a_large_batch_is_woken_with_its_own_answer() {
        // Up to 1 leader and 36 waiting members, each answered by position.
        for n in [2, 5, 37] {
            let got = one_batch_of(n, false);
            let want: Vec<Result<u32, ExecError>> = (0..n as u32).map(Ok).collect();
            assert_eq!(got, want, "{n} callers");
        }
    }

    #[test]
    fn a_leader_that_unwinds_leaves_no_member_waiting() {
        let (batcher, metrics, config, key) = one_key(3);
        let barrier = std::sync::Barrier::new(3);
        let outs: Vec<Option<Result<u32, ExecError>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|_| {
                    let (batcher, metrics, barrier) = (&batcher, &metrics, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        batcher
                            .submit(metrics, key, &[1.0], 1, config, |_, _| {
                                panic!("planted panic in the batch's run")
                            })
                            .map(|o| o.value)
                    })
                })
                .collect();
            // The leader's thread panics (join gives Err); the members get an error.
            handles.into_iter().map(|h| h.join().ok()).collect()
        });
        assert_eq!(outs.iter().filter(|o| o.is_none()).count(), 1, "one leader");
        for o in outs.into_iter().flatten() {
            assert!(matches!(o, Err(ExecError::Internal(m)) if m.contains("did not finish")));
        }
    }

    #[test]
    fn a_failed_batch_reaches_every_member() {
        let got = one_batch_of(21, true);
        assert!(
            got.iter()
                .all(|r| matches!(r, Err(ExecError::Internal(m)) if m == "planted"))
        );
    }

    #[test]
    fn in_flight_bounds_the_batches_running_at_once() {
        assert_eq!(most_running_together(1), 1);
        assert_eq!(most_running_together(2), 2);
    }
}
