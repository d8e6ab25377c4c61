//! Per-thread caches of small freed blocks: the pool's lock-free hit path.
//!
//! A small block (size class up to [`THREAD_CACHE_MAX_CLASS`]) of a stream-ordered pool, freed by a
//! tenant without a quota, is parked in the freeing thread's cache for that pool instead of going back to
//! the pool's shared free lists. The same thread's next request for the same (stream, size class,
//! tenant) takes it back without a lock, an atomic read-modify-write or a reference-count change: the
//! parked entry keeps the block's stream handle, and the shard keeps the block's strong reference to the
//! pool; both move into the new [`Block`].
//!
//! The hit path (`take`, `park`, inlined into `CachingPool::allocate_for` and `Block::drop`) reads one
//! thread-local word pair (`HOT`: the pool id and shard used last; no destructor, so no lazy-registration
//! check), compares the pool's gate, and moves a parked block's fields word by word (so loads are served
//! by store forwarding from the park that wrote them). No hashing, no lock, no `RefCell` flag, no
//! reference-count change.
//!
//! Invariants (the proptests check them against a model, with one thread and with several):
//! - One owner: a parked block is in exactly one thread's cache, and only that thread takes it out (a hit
//!   or a flush into the shared free lists, under the pool lock).
//! - Stream order: a parked block goes back only to the stream that freed it (the pool is
//!   [`ReusePolicy::StreamOrdered`]); once flushed it is an ordinary unfenced free block of that stream.
//! - Accounting: the pool's locked counters keep counting a parked block as in use by its tenant; each
//!   thread's cache publishes how many bytes and blocks it has parked (plain stores, one writer), and
//!   [`crate::CachingPool::stats`] moves those from "in use" to "cached". So held bytes (what the budget
//!   bounds) are always exact, and the reported statistics are exact whenever no other thread is between
//!   the start and the end of a pool call.
//! - Budget and quotas: a hit turns cached bytes into used bytes without changing held bytes, so it can
//!   never break the budget while held bytes are within it; quota tenants never use the thread caches.
//!   Any change of the budget or a quota, any trim, and closing the pool move the pool's gate (an epoch
//!   read with one relaxed load per hit); a thread whose cache saw another gate value flushes it at its
//!   next call instead of using it.
//! - Peaks: a thread flushes its own cache whenever it takes the pool lock, so with one thread the peaks
//!   are exact; under concurrency blocks parked by *other* threads count as in use for the budget and
//!   quota checks and the peaks (conservative: at most [`THREAD_CACHE_MAX_BYTES`] per thread and pool,
//!   until that thread next calls the pool, calls [`crate::CachingPool::flush_thread_cache`] or exits).
//! - Closing: blocks a thread parked for a pool whose last handle is gone (that thread can no longer call
//!   it) go back when the thread first calls another pool (`flush_closed`), or at its exit.
//!
//! [`Block`]: crate::Block
//! [`ReusePolicy::StreamOrdered`]: crate::ReusePolicy::StreamOrdered

use crate::allocator::{Allocator, StreamKey};
use crate::pool::{FreeBlock, Inner, State, TenantId};
use std::cell::{Cell, RefCell};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// Largest size class a thread cache keeps.
pub const THREAD_CACHE_MAX_CLASS: usize = 1 << 20;
/// Most blocks one thread keeps parked for one pool.
pub const THREAD_CACHE_MAX_BLOCKS: usize = 8;
/// Most bytes one thread keeps parked for one pool.
pub const THREAD_CACHE_MAX_BYTES: usize = 1 << 20;
/// Most distinct tenants one thread's cache for one pool serves between two gate changes.
const MAX_TENANTS: usize = 4;
/// A shard epoch that never equals the gate.
const INVALID: u64 = u64::MAX;

/// Counters one thread publishes for the pool's statistics. One writer (the owning thread, with plain
/// loads and stores); readers (statistics, under the pool lock) load them.
#[derive(Debug, Default)]
pub(crate) struct ShardCounters {
    /// Requests served from this thread's cache (each one a hit).
    pub(crate) hits: AtomicU64,
    /// Tenant of each slot.
    pub(crate) tenant_ids: [AtomicU32; MAX_TENANTS],
    /// Per tenant slot: bytes parked (low 32 bits) and blocks parked (high 32 bits).
    pub(crate) parked: [AtomicU64; MAX_TENANTS],
}

/// One parked block of `class` bytes in a `parked` counter.
#[inline]
fn parked_unit(class: usize) -> u64 {
    class as u64 | (1 << 32)
}

impl ShardCounters {
    /// Bytes and blocks parked.
    pub(crate) fn parked_total(&self) -> (usize, usize) {
        self.parked.iter().fold((0, 0), |(bytes, blocks), p| {
            let v = p.load(Ordering::Acquire);
            (
                bytes + (v & 0xffff_ffff) as usize,
                blocks + (v >> 32) as usize,
            )
        })
    }

    /// Bytes parked for `tenant`.
    pub(crate) fn parked_bytes_of(&self, tenant: TenantId) -> usize {
        self.tenant_ids
            .iter()
            .zip(&self.parked)
            .filter(|(id, _)| id.load(Ordering::Acquire) == tenant.0)
            .map(|(_, p)| (p.load(Ordering::Acquire) & 0xffff_ffff) as usize)
            .sum()
    }
}

/// `a += d` (wrapping) by the only writer: a load and a store, no read-modify-write instruction.
#[inline]
fn add(a: &AtomicU64, d: u64) {
    a.store(a.load(Ordering::Relaxed).wrapping_add(d), Ordering::Release);
}

/// A parked block, with the handles the block it came from held (moved, not cloned).
pub(crate) struct Entry<A: Allocator> {
    pub(crate) pool: Arc<Inner<A>>,
    pub(crate) stream: A::Stream,
    pub(crate) key: StreamKey,
    pub(crate) class: usize,
    pub(crate) tenant: TenantId,
    pub(crate) addr: u64,
}

/// Size class, tenant slot and tenant in one word, so that the hit path matches a parked block with
/// two compares and parks one with word-sized stores. A parked class is at most
/// [`THREAD_CACHE_MAX_CLASS`] (< 2^24) and a slot is below [`MAX_TENANTS`] (<= 2^8), so the fields
/// never overlap.
#[inline(always)]
fn tag(class: usize, tenant: TenantId) -> u64 {
    class as u64 | (u64::from(tenant.0) << 32)
}

const SLOT_SHIFT: u32 = 24;
const SLOT_MASK: u64 = 0xff << SLOT_SHIFT;
const CLASS_MASK: u64 = (1 << SLOT_SHIFT) - 1;
const _: () = assert!(THREAD_CACHE_MAX_CLASS as u64 <= CLASS_MASK && MAX_TENANTS <= 0x100);

/// One thread's cache for one pool: a stack of parked blocks, most recently parked on top, kept
/// field by field (index `i < len` in each array) so that parking and taking are word-sized moves
/// (a hit reads back, through store forwarding, exactly the words the park wrote).
///
/// Each parked block keeps the strong reference to the pool that its [`Block`](crate::Block) held,
/// without storing it: the shard owns `len` strong references to the `Inner` at `pool_ptr`, given up
/// with `Arc::into_raw` when a block is parked and taken back with `Arc::from_raw` when it leaves.
struct Shard<A: Allocator> {
    /// The gate value this cache was validated against, or [`INVALID`].
    epoch: u64,
    len: usize,
    parked_bytes: usize,
    keys: [StreamKey; THREAD_CACHE_MAX_BLOCKS],
    /// [`tag`] plus the tenant's slot in [`ShardCounters::parked`] at `SLOT_SHIFT`.
    tags: [u64; THREAD_CACHE_MAX_BLOCKS],
    addrs: [u64; THREAD_CACHE_MAX_BLOCKS],
    /// Initialised exactly at `..len`.
    streams: [MaybeUninit<A::Stream>; THREAD_CACHE_MAX_BLOCKS],
    counters: Arc<ShardCounters>,
    /// `Arc::as_ptr` of the pool; the shard owns `len` strong references to it.
    pool_ptr: *const Inner<A>,
    tenants: [TenantId; MAX_TENANTS],
    n_tenants: usize,
    pool: Weak<Inner<A>>,
}

impl<A: Allocator> Shard<A> {
    fn new(pool: &Arc<Inner<A>>, counters: Arc<ShardCounters>) -> Shard<A> {
        Shard {
            epoch: INVALID,
            len: 0,
            parked_bytes: 0,
            keys: [0; THREAD_CACHE_MAX_BLOCKS],
            tags: [0; THREAD_CACHE_MAX_BLOCKS],
            addrs: [0; THREAD_CACHE_MAX_BLOCKS],
            streams: [const { MaybeUninit::uninit() }; THREAD_CACHE_MAX_BLOCKS],
            counters,
            pool_ptr: Arc::as_ptr(pool),
            tenants: [TenantId::DEFAULT; MAX_TENANTS],
            n_tenants: 0,
            pool: Arc::downgrade(pool),
        }
    }

    #[inline(always)]
    fn tenant_slot(&self, tenant: TenantId) -> Option<usize> {
        if self.n_tenants > 0 && self.tenants[0] == tenant {
            return Some(0);
        }
        self.tenants[..self.n_tenants]
            .iter()
            .position(|&t| t == tenant)
    }

    /// The most recently parked block for (`key`, `tag`).
    #[inline(always)]
    fn find(&self, key: StreamKey, tag: u64) -> Option<usize> {
        let last = self.len.checked_sub(1)?;
        if self.tags[last] & !SLOT_MASK == tag && self.keys[last] == key {
            return Some(last);
        }
        self.find_below(key, tag, last)
    }

    #[cold]
    #[inline(never)]
    fn find_below(&self, key: StreamKey, tag: u64, last: usize) -> Option<usize> {
        (0..last)
            .rev()
            .find(|&i| self.tags[i] & !SLOT_MASK == tag && self.keys[i] == key)
    }

    /// Remove parked block `i < len` (the top one moves into its place).
    #[inline(always)]
    fn remove(&mut self, i: usize) -> Entry<A> {
        let last = self.len - 1;
        let t = self.tags[i];
        // SAFETY: `i <= last < len`: both streams are initialised; each is read once, and the slot at
        // `last` is treated as uninitialised from here on (`len` becomes `last`). The shard owned one
        // strong reference to the pool per parked block (see the type's doc); this takes one back.
        let (stream, pool) = unsafe {
            let stream = self.streams[i].assume_init_read();
            if i != last {
                self.streams[i].write(self.streams[last].assume_init_read());
            }
            (stream, Arc::from_raw(self.pool_ptr))
        };
        let e = Entry {
            pool,
            stream,
            key: self.keys[i],
            class: (t & CLASS_MASK) as usize,
            tenant: TenantId((t >> 32) as u32),
            addr: self.addrs[i],
        };
        if i != last {
            self.keys[i] = self.keys[last];
            self.tags[i] = self.tags[last];
            self.addrs[i] = self.addrs[last];
        }
        self.len = last;
        self.parked_bytes -= e.class;
        let slot = ((t & SLOT_MASK) >> SLOT_SHIFT) as usize;
        add(
            &self.counters.parked[slot],
            parked_unit(e.class).wrapping_neg(),
        );
        e
    }

    /// Park `e` for tenant slot `slot` (the caller checked that there is room and that `e` is a block
    /// of this shard's pool).
    #[inline(always)]
    fn push(&mut self, e: Entry<A>, slot: usize) {
        let i = self.len;
        debug_assert!(std::ptr::eq(Arc::as_ptr(&e.pool), self.pool_ptr));
        self.keys[i] = e.key;
        self.tags[i] = tag(e.class, e.tenant) | ((slot as u64) << SLOT_SHIFT);
        self.addrs[i] = e.addr;
        self.streams[i].write(e.stream);
        // The shard keeps this strong reference (see the type's doc).
        let _ = Arc::into_raw(e.pool);
        self.len = i + 1;
        self.parked_bytes += e.class;
        add(&self.counters.parked[slot], parked_unit(e.class));
    }

    /// Move every parked block into the pool's shared free lists (the caller holds the pool lock).
    /// Adds the pool handles the entries held to `handles`, to be dropped after the lock is released.
    fn flush(&mut self, st: &mut State<A>, handles: &mut Vec<Arc<Inner<A>>>) {
        while self.len > 0 {
            let e = self.remove(self.len - 1);
            st.unpark(e.class, e.tenant);
            st.free.entry(e.class).or_default().push(FreeBlock {
                addr: e.addr,
                key: e.key,
                stream: e.stream,
                fence: None,
            });
            handles.push(e.pool);
        }
    }
}

impl<A: Allocator> Drop for Shard<A> {
    /// The thread exits (or the cache is pruned): give parked blocks back to the pool and fold the
    /// counters into it.
    fn drop(&mut self) {
        let Some(pool) = self.pool.upgrade() else {
            // Parked blocks hold the pool alive, so there are none; nothing to give back.
            debug_assert_eq!(self.len, 0);
            return;
        };
        let mut handles = Vec::new();
        {
            let mut st = pool.state.lock();
            self.flush(&mut st, &mut handles);
            let hits = self.counters.hits.load(Ordering::Acquire);
            st.stats.requests += hits;
            st.stats.hits += hits;
            st.shards.retain(|c| !Arc::ptr_eq(c, &self.counters));
            pool.after_flush(&mut st);
        }
        drop(handles);
        drop(pool);
    }
}

impl<A: Allocator> Shard<A> {
    /// If the pool has no `CachingPool` handle left, move the parked blocks to its shared free lists (a
    /// closed pool gives them back to the allocator at once). Call with no pool lock held.
    fn flush_if_closed(&mut self) {
        if self.len == 0 {
            return;
        }
        let Some(pool) = self.pool.upgrade() else {
            return;
        };
        if pool.handles.load(Ordering::Acquire) != 0 {
            return;
        }
        let mut handles = Vec::new();
        {
            let mut st = pool.state.lock();
            self.flush(&mut st, &mut handles);
            pool.after_flush(&mut st);
        }
        drop(handles);
        drop(pool);
    }
}

/// [`Shard::flush_if_closed`] of the `Shard<A>` at `ptr`, for a type-erased slot.
///
/// # Safety
/// `ptr` is a slot's pointer to its live `Shard<A>`, and no reference to that shard is live.
unsafe fn flush_if_closed_erased<A: Allocator>(ptr: *mut ()) {
    // SAFETY: forwarded to the caller (see `# Safety`).
    unsafe { &mut *ptr.cast::<Shard<A>>() }.flush_if_closed();
}

trait AnyShard {
    /// The pool is gone and nothing is parked.
    fn is_dead(&self) -> bool;
}

impl<A: Allocator> AnyShard for Shard<A> {
    fn is_dead(&self) -> bool {
        self.len == 0 && self.pool.strong_count() == 0
    }
}

/// One pool's cache in this thread, type-erased.
struct Slot {
    pool_id: u64,
    /// The `Shard<A>` inside `owner`, for typed access without a downcast.
    ptr: *mut (),
    /// [`flush_if_closed_erased`] for the shard's `A`.
    flush_if_closed: unsafe fn(*mut ()),
    owner: Box<dyn AnyShard>,
}

/// The shards of this thread, one per pool it used. Only its own thread touches a shard (other
/// threads read the shard's [`ShardCounters`]).
struct ThreadCaches {
    slots: Vec<Slot>,
}

impl ThreadCaches {
    fn find_ptr(&self, pool_id: u64) -> Option<*mut ()> {
        // `HOT` is one of these slots' shards (it is cleared before any slot is removed).
        let (id, ptr) = HOT.get();
        if id == pool_id {
            return Some(ptr);
        }
        self.slots
            .iter()
            .find(|s| s.pool_id == pool_id)
            .map(|s| s.ptr)
    }

    #[inline]
    fn find<A: Allocator>(&mut self, pool_id: u64) -> Option<&mut Shard<A>> {
        let ptr = self.find_ptr(pool_id)?;
        // SAFETY: `ptr` is the shard of a slot with this pool id, made by `enable::<A>` for the pool of
        // that id: ids are unique in the process, so the pool, and with it `A`, is the one the caller
        // names. It points into the slot's `owner`, a live box that this `&mut self` borrow covers
        // exclusively (the hit path's `HOT` pointer is never dereferenced while a `ThreadCaches` borrow
        // is held: see `hot_shard`).
        Some(unsafe { &mut *ptr.cast::<Shard<A>>() })
    }

    /// Drop the shards of pools that are gone. Clears `HOT` (it may point at one of them).
    fn retain_live(&mut self) {
        HOT.set((0, std::ptr::null_mut()));
        self.slots.retain(|s| !s.owner.is_dead());
    }

    /// Add `shard` for pool `pool_id`; returns the pointer to it (stable: it is boxed).
    fn insert<A: Allocator>(&mut self, pool_id: u64, shard: Shard<A>) -> *mut () {
        let mut b = Box::new(shard);
        let ptr = (&mut *b as *mut Shard<A>).cast::<()>();
        self.slots.push(Slot {
            pool_id,
            ptr,
            flush_if_closed: flush_if_closed_erased::<A>,
            owner: b,
        });
        ptr
    }
}

impl Drop for ThreadCaches {
    fn drop(&mut self) {
        // The shards are about to be freed: the hit path must not find them through `HOT` any more
        // (a block dropped by a later thread-local destructor then takes the locked path).
        HOT.set((0, std::ptr::null_mut()));
        self.slots.clear();
    }
}

thread_local! {
    static CACHES: RefCell<ThreadCaches> = const { RefCell::new(ThreadCaches { slots: Vec::new() }) };

    /// The shard the hit path tries first: (pool id, `Shard<A>` of that pool), or (0, null). It has no
    /// destructor, so reading it is one load relative to the thread pointer, with no lazy-registration
    /// check. It points into a box owned by `CACHES`, and is cleared before any shard is freed
    /// (`retain_live`, `ThreadCaches::drop`). Pool ids start at 1.
    static HOT: Cell<(u64, *mut ())> = const { Cell::new((0, std::ptr::null_mut())) };
}

/// This thread's caches, or `None` while the thread's locals are being destroyed.
#[inline]
fn caches() -> Option<&'static RefCell<ThreadCaches>> {
    let p = CACHES
        .try_with(|c| c as *const RefCell<ThreadCaches>)
        .ok()?;
    // SAFETY: `try_with` succeeded, so this thread's value is alive and is destroyed only when the thread
    // exits; every caller uses the reference within one call on this thread, so it never outlives it.
    Some(unsafe { &*p })
}

/// This thread's shard for pool `pool_id`, for the hit path (`take`, `park`).
///
/// The returned borrow must end before the caller calls anything that may reach `CACHES` (in `take`
/// and `park` it covers only plain moves, compares and counter stores: no allocation, no drop, no
/// callback), so it never overlaps another borrow of the same shard.
#[inline(always)]
fn hot_shard<'a, A: Allocator>(pool_id: u64) -> Option<&'a mut Shard<A>> {
    let (id, ptr) = HOT.get();
    let ptr = if id == pool_id {
        ptr
    } else {
        make_hot(pool_id)?
    };
    // SAFETY: `ptr` is the shard of pool `pool_id` (set by `make_hot` or `enable`; pool ids are unique,
    // so it is a `Shard<A>`), alive: `HOT` is cleared before any shard is freed. Only this thread uses it,
    // and no other borrow of it is live (see above; the locked paths borrow shards through `CACHES` only
    // outside `take` and `park`).
    Some(unsafe { &mut *ptr.cast::<Shard<A>>() })
}

/// `HOT` misses: look the pool's shard up in `CACHES` and make it hot.
#[cold]
#[inline(never)]
fn make_hot(pool_id: u64) -> Option<*mut ()> {
    let c = caches()?.try_borrow().ok()?;
    let ptr = c.find_ptr(pool_id)?;
    HOT.set((pool_id, ptr));
    Some(ptr)
}

/// The hit path: a block of `class` parked by this thread for (`key`, `tenant`), if the gate allows.
#[inline(always)]
pub(crate) fn take<A: Allocator>(
    inner: &Inner<A>,
    key: StreamKey,
    class: usize,
    tenant: TenantId,
) -> Option<Entry<A>> {
    let shard = hot_shard::<A>(inner.id)?;
    if shard.epoch != inner.gate.load(Ordering::Relaxed) {
        return None;
    }
    let i = shard.find(key, tag(class, tenant))?;
    add(&shard.counters.hits, 1);
    Some(shard.remove(i))
}

/// The free path: park `e` in this thread's cache, or hand it back when it may not be parked.
#[inline(always)]
pub(crate) fn park<A: Allocator>(e: Entry<A>) -> Result<(), Entry<A>> {
    let Some(shard) = hot_shard::<A>(e.pool.id) else {
        return Err(e);
    };
    if shard.epoch != e.pool.gate.load(Ordering::Relaxed)
        || shard.len >= THREAD_CACHE_MAX_BLOCKS
        || shard.parked_bytes + e.class > THREAD_CACHE_MAX_BYTES
    {
        return Err(e);
    }
    let Some(slot) = shard.tenant_slot(e.tenant) else {
        return Err(e);
    };
    shard.push(e, slot);
    Ok(())
}

/// Under the pool lock: flush this thread's cache for `pool` into the shared free lists. Adds the pool
/// handles the entries held to `handles`, to be dropped after the lock is released.
pub(crate) fn flush_own<A: Allocator>(
    pool: &Inner<A>,
    st: &mut State<A>,
    handles: &mut Vec<Arc<Inner<A>>>,
) {
    let Some(cell) = caches() else {
        return;
    };
    let Ok(mut c) = cell.try_borrow_mut() else {
        return;
    };
    if let Some(shard) = c.find::<A>(pool.id)
        && shard.len > 0
    {
        shard.flush(st, handles);
    }
}

/// Under the pool lock, at the end of a locked call by `tenant`: make sure this thread has a cache for
/// `pool`, revalidate it against the gate, and admit `tenant` if it has no quota. Flushes first if the
/// cache was validated against another gate value (adding the pool handles to drop later to `handles`).
/// Returns whether it made this thread's cache for `pool` (then call [`flush_closed`] once the lock is
/// released).
pub(crate) fn enable<A: Allocator>(
    pool: &Arc<Inner<A>>,
    st: &mut State<A>,
    tenant: TenantId,
    handles: &mut Vec<Arc<Inner<A>>>,
) -> bool {
    let Some(cell) = caches() else {
        return false;
    };
    let Ok(mut c) = cell.try_borrow_mut() else {
        return false;
    };
    let mut made = false;
    let ptr = match c.find_ptr(pool.id) {
        Some(ptr) => ptr,
        None => {
            c.retain_live();
            let counters = Arc::new(ShardCounters::default());
            st.shards.push(counters.clone());
            made = true;
            c.insert(pool.id, Shard::<A>::new(pool, counters))
        }
    };
    // This pool is the one the thread uses now: its shard is the one the hit path tries first.
    HOT.set((pool.id, ptr));
    let Some(shard) = c.find::<A>(pool.id) else {
        return made;
    };
    let gate = pool.gate.load(Ordering::Relaxed);
    if shard.epoch != gate {
        shard.flush(st, handles);
        shard.n_tenants = 0;
        shard.epoch = if gate & 1 == 0 { gate } else { INVALID };
    }
    if shard.epoch != INVALID
        && shard.tenant_slot(tenant).is_none()
        && shard.n_tenants < MAX_TENANTS
        && st
            .tenants
            .get(&tenant)
            .is_none_or(|t| t.quota_bytes.is_none())
    {
        let slot = shard.n_tenants;
        shard.tenants[slot] = tenant;
        shard.counters.tenant_ids[slot].store(tenant.0, Ordering::Release);
        shard.counters.parked[slot].store(0, Ordering::Release);
        shard.n_tenants += 1;
    }
    made
}

/// With no pool lock held: give back the blocks this thread parked for pools whose last `CachingPool`
/// handle is gone. Such a pool can no longer be called, so without this its parked blocks (and the pool,
/// with its allocator) would stay until the thread exits. Run when the thread starts using a new pool (an
/// engine made after another was dropped), so they never pile up.
pub(crate) fn flush_closed() {
    let Some(cell) = caches() else {
        return;
    };
    let Ok(c) = cell.try_borrow_mut() else {
        return;
    };
    // No shard is freed here (`HOT` stays valid); the emptied shards of pools that are gone go at the next
    // `retain_live`.
    for slot in &c.slots {
        // SAFETY: `ptr` is this slot's live `Shard` of the type `flush_if_closed` was made for (`insert`);
        // no reference to it is live: the `CACHES` borrow held here excludes the locked paths' borrows, and
        // the hit path's (`take`, `park`) never spans a call of this.
        unsafe { (slot.flush_if_closed)(slot.ptr) };
    }
}
