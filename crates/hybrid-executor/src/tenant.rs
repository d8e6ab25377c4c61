//! Tenants: a bounded queue each, fair turns between them, a VRAM quota each.
//!
//! Calls made on behalf of a tenant take a ticket in the tenant's queue and run on the caller's own
//! thread once the scheduler grants them one of `max_in_flight` permits. Permits go to tenants in
//! weighted round-robin (deficit round-robin with a cost of one per call), so a tenant with a deep
//! queue cannot starve one with a shallow queue. A tenant may also be capped at a number of calls running
//! at once ([`TenantConfig::max_running`]), so that its long calls cannot hold every permit. A full queue is a typed back-pressure error, or a wait
//! bounded by the caller's timeout ([`Wait`]).
//!
//! The GPU backend learns whose call it runs from [`current_tenant`] (a thread-local the executor sets
//! around every backend call): that is the seam for per-tenant streams and for the memory pool's
//! per-tenant budget. The executor itself checks each GPU sub-batch against the tenant's quota through
//! [`VramLedger`].

use crate::metrics::TenantCounters;
use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use thiserror::Error;

/// A tenant's handle, from [`crate::Executor::add_tenant`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(pub(crate) u32);

impl TenantId {
    /// The tenant's index (0, 1, …, in the order they were added); the GPU backend may map it to a
    /// stream.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tenant#{}", self.0)
    }
}

/// How a tenant is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantConfig {
    /// Name in metrics and errors.
    pub name: String,
    /// Calls that may wait in the tenant's queue (not counting those running). A call that finds a free permit
    /// (and the tenant under its `max_running`) runs at once without waiting, so a capacity of 0 still runs calls;
    /// it only refuses (or times out) the calls that would have to wait.
    pub queue_capacity: usize,
    /// Device memory the tenant's calls may hold at once, in bytes; `None` for no limit.
    pub vram_quota: Option<u64>,
    /// Share of turns relative to other tenants (at least 1).
    pub weight: u32,
    /// Calls of this tenant that may run at once (at least 1); `None`: up to the executor's
    /// `max_in_flight`. Its other calls wait in its queue while other tenants' calls take the free permits.
    pub max_running: Option<usize>,
}

impl TenantConfig {
    /// A tenant with a queue of 64, no quota, weight 1 and no cap on its running calls.
    pub fn new(name: impl Into<String>) -> TenantConfig {
        TenantConfig {
            name: name.into(),
            queue_capacity: 64,
            vram_quota: None,
            weight: 1,
            max_running: None,
        }
    }

    /// Cap the calls of this tenant that run at once (a cap of 0 is taken as 1).
    pub fn max_running(mut self, calls: usize) -> TenantConfig {
        self.max_running = Some(calls.max(1));
        self
    }

    /// Set the queue capacity.
    pub fn queue_capacity(mut self, n: usize) -> TenantConfig {
        self.queue_capacity = n;
        self
    }

    /// Set the VRAM quota in bytes.
    pub fn vram_quota(mut self, bytes: u64) -> TenantConfig {
        self.vram_quota = Some(bytes);
        self
    }

    /// Set the weight.
    pub fn weight(mut self, w: u32) -> TenantConfig {
        self.weight = w;
        self
    }
}

/// What a caller does when its tenant's queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wait {
    /// Return [`crate::ExecError::BackPressure`] at once. Once queued, the call waits for its turn.
    #[default]
    Reject,
    /// Wait for room and then for a turn, at most this long in all, then
    /// [`crate::ExecError::QueueTimeout`].
    Timeout(Duration),
}

/// Why a tenant's call was not admitted.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdmissionError {
    #[error("tenant {tenant:?} queue is full ({capacity} calls waiting)")]
    BackPressure { tenant: String, capacity: usize },
    #[error("tenant {tenant:?} call waited {waited:?} for its turn and timed out")]
    Timeout { tenant: String, waited: Duration },
    #[error("no tenant {0}")]
    UnknownTenant(TenantId),
}

/// What the GPU backend may know about the call it runs: whose it is and the tenant's quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantContext {
    pub id: TenantId,
    pub vram_quota: Option<u64>,
}

thread_local! {
    static CURRENT: Cell<Option<TenantContext>> = const { Cell::new(None) };
}

/// The tenant whose call this thread is running inside a backend, if any.
pub fn current_tenant() -> Option<TenantContext> {
    CURRENT.with(Cell::get)
}

/// Sets [`current_tenant`] for a scope.
#[derive(Debug)]
pub(crate) struct ContextGuard {
    previous: Option<TenantContext>,
}

impl ContextGuard {
    pub(crate) fn enter(ctx: Option<TenantContext>) -> ContextGuard {
        ContextGuard {
            previous: CURRENT.with(|c| c.replace(ctx)),
        }
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.previous));
    }
}

/// One tenant's fixed facts and live accounts.
#[derive(Debug)]
pub(crate) struct TenantInfo {
    pub id: TenantId,
    pub config: TenantConfig,
    pub counters: Arc<TenantCounters>,
    pub vram_in_use: AtomicU64,
}

impl TenantInfo {
    pub(crate) fn context(&self) -> TenantContext {
        TenantContext {
            id: self.id,
            vram_quota: self.config.vram_quota,
        }
    }
}

/// Device memory accounting per tenant: what the executor's GPU calls hold against each quota.
#[derive(Debug, Default)]
pub struct VramLedger {
    total: AtomicU64,
}

/// Memory held against a quota; released on drop.
#[derive(Debug)]
pub struct VramReservation<'a> {
    ledger: &'a VramLedger,
    tenant: Option<&'a TenantInfo>,
    bytes: u64,
}

impl Drop for VramReservation<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.tenant {
            t.vram_in_use.fetch_sub(self.bytes, Ordering::AcqRel);
        }
        self.ledger.total.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl VramLedger {
    /// Bytes held by all calls now.
    pub fn in_use(&self) -> u64 {
        self.total.load(Ordering::Acquire)
    }

    /// Hold `bytes` for `tenant` (no limit without a tenant or quota); `None` when the quota would be
    /// exceeded.
    pub(crate) fn try_reserve<'a>(
        &'a self,
        tenant: Option<&'a TenantInfo>,
        bytes: u64,
    ) -> Option<VramReservation<'a>> {
        if let Some(t) = tenant {
            let quota = t.config.vram_quota.unwrap_or(u64::MAX);
            let mut cur = t.vram_in_use.load(Ordering::Acquire);
            loop {
                if cur.saturating_add(bytes) > quota {
                    return None;
                }
                match t.vram_in_use.compare_exchange_weak(
                    cur,
                    cur + bytes,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    Err(now) => cur = now,
                }
            }
        }
        self.total.fetch_add(bytes, Ordering::AcqRel);
        Some(VramReservation {
            ledger: self,
            tenant,
            bytes,
        })
    }
}

#[derive(Debug)]
struct Slot {
    info: Arc<TenantInfo>,
    queue: VecDeque<u64>,
    credit: u32,
    /// Permits this tenant holds now.
    running: usize,
}

impl Slot {
    /// Has a call waiting and room under its cap to run it.
    fn ready(&self) -> bool {
        !self.queue.is_empty() && self.running < self.info.config.max_running.unwrap_or(usize::MAX)
    }
}

#[derive(Debug)]
struct State {
    slots: Vec<Slot>,
    cursor: usize,
    free: usize,
    granted: HashSet<u64>,
    next_ticket: u64,
}

impl State {
    /// The next tenant to get a permit, by deficit round-robin; `None` when no tenant has a call waiting
    /// with room under its cap.
    fn pick(&mut self) -> Option<usize> {
        let n = self.slots.len();
        for _ in 0..n {
            let cursor = self.cursor;
            let slot = &mut self.slots[cursor];
            let weight = slot.info.config.weight.max(1);
            if !slot.ready() {
                slot.credit = weight;
                self.cursor = (cursor + 1) % n;
                continue;
            }
            if slot.credit == 0 {
                slot.credit = weight;
            }
            slot.credit -= 1;
            if slot.credit == 0 {
                slot.credit = weight;
                self.cursor = (cursor + 1) % n;
            }
            return Some(cursor);
        }
        None
    }

    /// Hand free permits to waiting tickets. True when any was granted.
    fn grant(&mut self) -> bool {
        let mut any = false;
        while self.free > 0 {
            let Some(i) = self.pick() else { break };
            if let Some(ticket) = self.slots[i].queue.pop_front() {
                self.granted.insert(ticket);
                self.slots[i].running += 1;
                self.free -= 1;
                any = true;
            }
        }
        any
    }
}

/// Tenants' queues and the permits they take turns at.
#[derive(Debug)]
pub(crate) struct Scheduler {
    state: Mutex<State>,
    cv: Condvar,
}

/// A granted turn: the call runs while it lives.
#[derive(Debug)]
pub(crate) struct Permit<'a> {
    sched: &'a Scheduler,
    pub info: Arc<TenantInfo>,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut s = self.sched.state.lock();
        s.free += 1;
        if let Some(slot) = s.slots.get_mut(self.info.id.index()) {
            slot.running = slot.running.saturating_sub(1);
        }
        s.grant();
        drop(s);
        self.sched.cv.notify_all();
    }
}

impl Scheduler {
    pub(crate) fn new(max_in_flight: usize) -> Scheduler {
        Scheduler {
            state: Mutex::new(State {
                slots: Vec::new(),
                cursor: 0,
                free: max_in_flight.max(1),
                granted: HashSet::new(),
                next_ticket: 0,
            }),
            cv: Condvar::new(),
        }
    }

    pub(crate) fn add(&self, mut config: TenantConfig, counters: Arc<TenantCounters>) -> TenantId {
        // A cap of 0 (the field set directly) is taken as 1, as `TenantConfig::max_running` does: under a
        // cap of 0 no call of the tenant ever got a turn, and one with `Wait::Reject` waited forever.
        config.max_running = config.max_running.map(|c| c.max(1));
        let mut s = self.state.lock();
        let id = TenantId(u32::try_from(s.slots.len()).unwrap_or(u32::MAX));
        let info = Arc::new(TenantInfo {
            id,
            counters,
            vram_in_use: AtomicU64::new(0),
            config,
        });
        let weight = info.config.weight.max(1);
        s.slots.push(Slot {
            info,
            queue: VecDeque::new(),
            credit: weight,
            running: 0,
        });
        id
    }

    /// Calls waiting in `id`'s queue now (not counting those running).
    pub(crate) fn queued(&self, id: TenantId) -> usize {
        self.state
            .lock()
            .slots
            .get(id.index())
            .map_or(0, |s| s.queue.len())
    }

    /// Wait for a turn for `id` (see [`Wait`]).
    pub(crate) fn acquire(&self, id: TenantId, wait: Wait) -> Result<Permit<'_>, AdmissionError> {
        let start = Instant::now();
        let deadline = match wait {
            Wait::Reject => None,
            Wait::Timeout(t) => Some(
                start
                    .checked_add(t)
                    .unwrap_or(start + Duration::from_secs(1 << 32)),
            ),
        };
        let mut s = self.state.lock();
        let Some(slot) = s.slots.get(id.index()) else {
            return Err(AdmissionError::UnknownTenant(id));
        };
        let info = slot.info.clone();
        let capacity = info.config.queue_capacity;
        let timeout = |info: &TenantInfo| {
            info.counters.timed_out.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(tenant = %info.config.name, "recall: call timed out waiting for its turn");
            AdmissionError::Timeout {
                tenant: info.config.name.clone(),
                waited: start.elapsed(),
            }
        };
        // Room in the queue, unless the call runs at once: a free permit means no other call is ready (`grant`
        // runs whenever a permit is freed or a call queued), so one of this tenant under its cap takes it. A
        // capacity counts calls that wait, not those that run: a capacity of 0 still runs calls on free permits.
        let runs_now = |s: &State| {
            let slot = &s.slots[id.index()];
            s.free > 0 && slot.running < info.config.max_running.unwrap_or(usize::MAX)
        };
        while s.slots[id.index()].queue.len() >= capacity && !runs_now(&s) {
            match deadline {
                None => {
                    info.counters.rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(tenant = %info.config.name, "recall: queue full, back-pressure");
                    return Err(AdmissionError::BackPressure {
                        tenant: info.config.name.clone(),
                        capacity,
                    });
                }
                Some(d) => {
                    if self.cv.wait_until(&mut s, d).timed_out()
                        && s.slots[id.index()].queue.len() >= capacity
                        && !runs_now(&s)
                    {
                        return Err(timeout(&info));
                    }
                }
            }
        }
        let ticket = s.next_ticket;
        s.next_ticket += 1;
        s.slots[id.index()].queue.push_back(ticket);
        if s.grant() {
            self.cv.notify_all();
        }
        // A turn.
        loop {
            if s.granted.remove(&ticket) {
                break;
            }
            let timed_out = match deadline {
                None => {
                    self.cv.wait(&mut s);
                    false
                }
                Some(d) => self.cv.wait_until(&mut s, d).timed_out(),
            };
            if timed_out && !s.granted.contains(&ticket) {
                s.slots[id.index()].queue.retain(|t| *t != ticket);
                drop(s);
                // Room in the queue for a waiter.
                self.cv.notify_all();
                return Err(timeout(&info));
            }
        }
        drop(s);
        info.counters.admitted.fetch_add(1, Ordering::Relaxed);
        Ok(Permit { sched: self, info })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(weights: &[u32]) -> State {
        state_with(weights.iter().map(|&w| (w, None)))
    }

    /// Tenants of these (weight, cap on running calls).
    fn state_with(tenants: impl Iterator<Item = (u32, Option<usize>)>) -> State {
        State {
            slots: tenants
                .enumerate()
                .map(|(i, (w, cap))| {
                    let mut config = TenantConfig::new(format!("t{i}")).weight(w);
                    config.max_running = cap;
                    Slot {
                        info: Arc::new(TenantInfo {
                            id: TenantId(i as u32),
                            config,
                            counters: Arc::default(),
                            vram_in_use: AtomicU64::new(0),
                        }),
                        queue: VecDeque::new(),
                        credit: w,
                        running: 0,
                    }
                })
                .collect(),
            cursor: 0,
            free: 0,
            granted: HashSet::new(),
            next_ticket: 0,
        }
    }

    /// Grant one permit at a time and record which tenant got it.
    fn order(s: &mut State, n: usize) -> Vec<usize> {
        let mut out = Vec::new();
        for _ in 0..n {
            s.free = 1;
            s.granted.clear();
            s.grant();
            let Some(t) = s.granted.iter().next().copied() else {
                break;
            };
            out.push((t / 1000) as usize);
        }
        out
    }

    #[test]
    fn round_robin_between_equal_tenants() {
        let mut s = state(&[1, 1, 1]);
        for (i, n) in [(0usize, 6u64), (1, 2), (2, 3)] {
            for k in 0..n {
                s.slots[i].queue.push_back(i as u64 * 1000 + k);
            }
        }
        assert_eq!(order(&mut s, 11), vec![0, 1, 2, 0, 1, 2, 0, 2, 0, 0, 0]);
    }

    #[test]
    fn weights_share_turns() {
        let mut s = state(&[3, 1]);
        for i in 0..2 {
            for k in 0..8 {
                s.slots[i].queue.push_back(i as u64 * 1000 + k);
            }
        }
        assert_eq!(order(&mut s, 8), vec![0, 0, 0, 1, 0, 0, 0, 1]);
    }

    #[test]
    fn a_capped_tenant_leaves_the_other_permits_to_others() {
        // Tenant 0 may run 1 call at once, tenant 1 has no cap; 4 permits, 3 calls queued each.
        let mut s = state_with([(1, Some(1)), (1, None)].into_iter());
        for i in 0..2 {
            for k in 0..3 {
                s.slots[i].queue.push_back(i as u64 * 1000 + k);
            }
        }
        s.free = 4;
        s.grant();
        assert_eq!(s.slots[0].running, 1);
        assert_eq!(s.slots[1].running, 3);
        assert_eq!(s.free, 0);
        let mut granted: Vec<u64> = s.granted.iter().copied().collect();
        granted.sort_unstable();
        assert_eq!(granted, vec![0, 1000, 1001, 1002]);
        // Tenant 1's calls end: tenant 0 still runs one call at a time, and a permit stays free.
        s.slots[1].running = 0;
        s.free = 3;
        s.granted.clear();
        s.grant();
        assert_eq!(s.slots[0].running, 1);
        assert_eq!(s.free, 3);
        assert!(s.granted.is_empty());
        // Its call ends: the next one goes.
        s.slots[0].running = 0;
        s.grant();
        assert_eq!(s.slots[0].running, 1);
        assert_eq!(s.free, 2);
        assert_eq!(s.granted.iter().copied().collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn scheduler_caps_a_tenants_running_calls_across_threads() {
        use std::sync::atomic::AtomicUsize;
        let sched = Scheduler::new(4);
        let capped = sched.add(TenantConfig::new("capped").max_running(2), Arc::default());
        let free = sched.add(TenantConfig::new("free"), Arc::default());
        let (now, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let (other_now, other_most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|sc| {
            for t in 0..12 {
                let (sched, now, most, other_now, other_most) =
                    (&sched, &now, &most, &other_now, &other_most);
                sc.spawn(move || {
                    let (id, now, most) = if t % 2 == 0 {
                        (capped, now, most)
                    } else {
                        (free, other_now, other_most)
                    };
                    for _ in 0..20 {
                        let permit = sched
                            .acquire(id, Wait::Timeout(Duration::from_secs(30)))
                            .expect("a turn within 30 s");
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_micros(200));
                        now.fetch_sub(1, Ordering::SeqCst);
                        drop(permit);
                    }
                });
            }
        });
        assert!(
            most.load(Ordering::SeqCst) <= 2,
            "capped tenant ran {} at once",
            most.load(Ordering::SeqCst)
        );
        assert!(other_most.load(Ordering::SeqCst) <= 4);
        let s = sched.state.lock();
        assert_eq!(s.free, 4);
        assert!(
            s.slots
                .iter()
                .all(|slot| slot.running == 0 && slot.queue.is_empty())
        );
    }

    #[test]
    fn quota_is_enforced_per_tenant() {
        let ledger = VramLedger::default();
        let s = state(&[1, 1]);
        let a = TenantInfo {
            id: TenantId(9),
            config: TenantConfig::new("a").vram_quota(100),
            counters: Arc::default(),
            vram_in_use: AtomicU64::new(0),
        };
        let r1 = ledger.try_reserve(Some(&a), 60).unwrap();
        assert!(ledger.try_reserve(Some(&a), 60).is_none());
        // Another tenant, no quota: unaffected.
        let r2 = ledger.try_reserve(Some(&s.slots[1].info), 1 << 40).unwrap();
        assert_eq!(ledger.in_use(), 60 + (1 << 40));
        drop(r1);
        assert!(ledger.try_reserve(Some(&a), 100).is_some());
        drop(r2);
        assert_eq!(ledger.in_use(), 0);
    }
}
