//! The caching pool: size classes, stream-ordered reuse, trimming, a budget, tenant quotas, statistics.
//!
//! Reuse rule (see `docs/adr/0010-caching-pool-stream-order.md`): a freed block remembers the stream it
//! was freed on. The same stream may take it back at once (its later work runs after its earlier work),
//! unless the pool's memory is host-visible ([`ReusePolicy::HostVisible`]), where the host may write it
//! immediately. Any other reuse, and giving the block back to the allocator, waits until a fence
//! recorded on that stream after the free has completed. Fences are recorded lazily, one per stream for
//! all of that stream's unfenced free blocks, only when a block is wanted elsewhere or memory is trimmed:
//! a fence recorded later than the free still covers all work queued before the free.
//!
//! Hit path: a small block freed on stream S by a tenant without a quota is parked in the freeing
//! thread's cache (`thread_cache`), and the same thread's next request for that (S, size class, tenant)
//! takes it back without the lock. That is the same-stream case of the rule above; any other reuse goes
//! through the locked path, which first moves the calling thread's parked blocks to the shared free
//! lists as ordinary unfenced blocks of their streams.

use crate::allocator::{Allocator, StreamKey};
use crate::error::{OomScope, PoolError};
use crate::thread_cache::{self, Entry, ShardCounters, THREAD_CACHE_MAX_CLASS};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Smallest block the pool hands out.
pub const MIN_BLOCK_BYTES: usize = 512;
/// Requests up to this size are rounded up to a power of two.
pub const SMALL_LIMIT_BYTES: usize = 1 << 20;
/// Larger requests are rounded up to a multiple of this.
pub const LARGE_GRANULE_BYTES: usize = 2 << 20;

/// The size class (block size) serving a request of `bytes`: powers of two from [`MIN_BLOCK_BYTES`] up
/// to [`SMALL_LIMIT_BYTES`], then multiples of [`LARGE_GRANULE_BYTES`]. `None` on overflow.
pub fn size_class(bytes: usize) -> Option<usize> {
    if bytes <= SMALL_LIMIT_BYTES {
        Some(bytes.max(MIN_BLOCK_BYTES).next_power_of_two())
    } else {
        bytes.checked_next_multiple_of(LARGE_GRANULE_BYTES)
    }
}

/// A tenant of the pool: its live bytes count against its own quota as well as the pool's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TenantId(pub u32);

impl TenantId {
    /// The tenant of requests that name none. No quota unless one is set.
    pub const DEFAULT: TenantId = TenantId(0);
}

/// When a cached block may be handed to a new owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReusePolicy {
    /// Device memory, touched only by stream-ordered work: the freeing stream may reuse a block at once;
    /// others wait for its fence.
    #[default]
    StreamOrdered,
    /// Host-visible memory (pinned): the host may write a block as soon as it gets it, so every reuse
    /// waits for the fence of the stream that freed it.
    HostVisible,
}

/// How a pool is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Most bytes the pool may hold from the allocator (in use, cached and reserved together).
    pub budget_bytes: usize,
    /// When to reuse a cached block.
    pub reuse: ReusePolicy,
    /// Cap on cached bytes: beyond it, a request that misses first gives ready cached blocks back.
    pub max_cached_bytes: Option<usize>,
}

impl PoolConfig {
    /// A stream-ordered pool with this budget and no cache cap.
    pub fn with_budget(budget_bytes: usize) -> PoolConfig {
        PoolConfig {
            budget_bytes,
            reuse: ReusePolicy::StreamOrdered,
            max_cached_bytes: None,
        }
    }
}

/// Counters of a pool. Bytes are block (size-class) bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// The budget now.
    pub budget_bytes: usize,
    /// Bytes in blocks handed out and not yet returned.
    pub in_use_bytes: usize,
    /// Bytes in free blocks the pool keeps for reuse.
    pub cached_bytes: usize,
    /// Bytes counted against the budget for memory the pool does not hand out itself (managed buffers).
    pub reserved_external_bytes: usize,
    /// Highest `in_use_bytes + reserved_external_bytes` seen.
    pub peak_in_use_bytes: usize,
    /// Highest total held from the allocator plus external reservations.
    pub peak_held_bytes: usize,
    /// Blocks handed out now.
    pub blocks_in_use: usize,
    /// Blocks cached now.
    pub blocks_cached: usize,
    /// Requests (`allocate` and `reserve` calls).
    pub requests: u64,
    /// Requests served from the cache.
    pub hits: u64,
    /// Requests that went to the allocator.
    pub misses: u64,
    /// Requests that returned an error.
    pub failed_requests: u64,
    /// Driver out-of-memory answers that led to a trim and a retry.
    pub driver_oom_retries: u64,
    /// Blocks given back to the allocator by trimming.
    pub trimmed_blocks: u64,
    /// Bytes given back to the allocator by trimming.
    pub trimmed_bytes: u64,
    /// Fences recorded for stream-ordered reuse.
    pub fences_recorded: u64,
    /// Errors met while giving memory back or checking fences (recorded, see [`CachingPool::take_errors`]).
    pub recorded_errors: u64,
    /// Of `cached_bytes`: bytes parked in threads' caches (see [`CachingPool::flush_thread_cache`]).
    pub thread_cached_bytes: usize,
    /// Of `blocks_cached`: blocks parked in threads' caches.
    pub thread_cached_blocks: usize,
}

impl PoolStats {
    /// Bytes held from the allocator plus external reservations: what counts against the budget.
    pub fn held_bytes(&self) -> usize {
        self.in_use_bytes + self.cached_bytes + self.reserved_external_bytes
    }
}

/// Counters of one tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantStats {
    /// The tenant's quota, if any.
    pub quota_bytes: Option<usize>,
    /// Bytes the tenant holds (blocks and reservations).
    pub in_use_bytes: usize,
    /// Highest `in_use_bytes` seen.
    pub peak_in_use_bytes: usize,
    /// The tenant's requests that returned an error.
    pub failed_requests: u64,
}

pub(crate) struct FenceSlot<F> {
    /// `None` when the stream was idle at the time: nothing to wait for.
    fence: Option<F>,
    done: AtomicBool,
}

pub(crate) struct FreeBlock<A: Allocator> {
    pub(crate) addr: u64,
    pub(crate) key: StreamKey,
    pub(crate) stream: A::Stream,
    pub(crate) fence: Option<Arc<FenceSlot<A::Fence>>>,
}

impl<A: Allocator> FreeBlock<A> {
    fn known_done(&self) -> bool {
        self.fence
            .as_ref()
            .is_some_and(|f| f.done.load(Ordering::Relaxed))
    }
}

/// Tenant ids are small integers: hash them as themselves (the hit path touches this map twice).
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

pub(crate) type TenantMap = HashMap<TenantId, TenantStats, std::hash::BuildHasherDefault<IdHasher>>;

pub(crate) struct State<A: Allocator> {
    /// Free blocks by size class, most recently freed last.
    pub(crate) free: BTreeMap<usize, Vec<FreeBlock<A>>>,
    pub(crate) tenants: TenantMap,
    /// Counters of the locked state. Blocks parked in threads' caches count here as in use by their
    /// tenant (see `thread_cache`); `CachingPool::stats` moves them to cached.
    pub(crate) stats: PoolStats,
    /// The counters each thread's cache publishes.
    pub(crate) shards: Vec<Arc<ShardCounters>>,
    /// The last `CachingPool` handle is gone: blocks freed from now on go back to the allocator.
    closed: bool,
}

impl<A: Allocator> State<A> {
    /// A block parked in a thread's cache moves to the shared free lists: from in use to cached.
    pub(crate) fn unpark(&mut self, class: usize, tenant: TenantId) {
        self.stats.in_use_bytes -= class;
        self.stats.blocks_in_use -= 1;
        self.stats.cached_bytes += class;
        self.stats.blocks_cached += 1;
        if let Some(t) = self.tenants.get_mut(&tenant) {
            t.in_use_bytes -= class;
        }
    }
}

/// Source of pool ids (keys of the thread caches).
static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) struct Inner<A: Allocator> {
    alloc: A,
    reuse: ReusePolicy,
    /// Small freed blocks may be parked in threads' caches (stream-ordered pools).
    pub(crate) fast: bool,
    /// Unique per pool in the process.
    pub(crate) id: u64,
    /// Epoch of the configuration the thread caches rely on, times two, plus one while they must not
    /// be used (held bytes over the budget, or the pool closed). Changed only under the state lock.
    pub(crate) gate: AtomicU64,
    /// Live `CachingPool` handles.
    pub(crate) handles: AtomicUsize,
    max_cached: Mutex<Option<usize>>,
    pub(crate) state: Mutex<State<A>>,
    errors: Mutex<Vec<PoolError>>,
}

/// A caching pool of blocks from an [`Allocator`]. Cheap to clone (a shared handle); thread safe.
pub struct CachingPool<A: Allocator> {
    inner: Arc<Inner<A>>,
}

impl<A: Allocator> Clone for CachingPool<A> {
    fn clone(&self) -> Self {
        self.inner.handles.fetch_add(1, Ordering::Relaxed);
        CachingPool {
            inner: self.inner.clone(),
        }
    }
}

impl<A: Allocator> Drop for CachingPool<A> {
    /// The last handle closes the pool: thread caches stop being used, the cache goes back to the
    /// allocator, and blocks still live go back to it when they are dropped.
    fn drop(&mut self) {
        if self.inner.handles.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let inner = &*self.inner;
        let mut handles = Vec::new();
        {
            let mut st = inner.state.lock();
            st.closed = true;
            thread_cache::flush_own(inner, &mut st, &mut handles);
            inner.bump_gate(&st);
            inner.release(&mut st, usize::MAX, TrimWait::Wait);
        }
        drop(handles);
    }
}

impl<A: Allocator + fmt::Debug> fmt::Debug for CachingPool<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingPool")
            .field("allocator", &self.inner.alloc)
            .field("reuse", &self.inner.reuse)
            .field("stats", &self.stats())
            .finish()
    }
}

/// A block handed out by a [`CachingPool`]; it goes back to the pool's cache on drop, tagged with its
/// stream. It has one owner: the pool never hands a block out again while this lives.
pub struct Block<A: Allocator> {
    /// Taken (moved out, not cloned) only in `drop`.
    pool: ManuallyDrop<Arc<Inner<A>>>,
    addr: u64,
    size: usize,
    requested: usize,
    tenant: TenantId,
    /// Taken (moved out, not cloned) only in `drop`.
    stream: ManuallyDrop<A::Stream>,
    key: StreamKey,
}

impl<A: Allocator> fmt::Debug for Block<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Block")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("size", &self.size)
            .field("requested", &self.requested)
            .field("tenant", &self.tenant)
            .field("stream", &self.key)
            .finish()
    }
}

impl<A: Allocator> Block<A> {
    /// The block's address (device address, or host address for pinned memory).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The block's size: its size class, at least the bytes requested.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The bytes requested.
    pub fn requested(&self) -> usize {
        self.requested
    }

    /// The tenant the block counts against.
    pub fn tenant(&self) -> TenantId {
        self.tenant
    }

    /// The stream the block's work is ordered on; it is freed on this stream.
    pub fn stream(&self) -> &A::Stream {
        &self.stream
    }

    /// Move the block to another stream.
    ///
    /// # Safety
    /// All work queued on the old stream that uses the block must be ordered before any later work on
    /// `stream` (for example `stream` waits for an event recorded on the old stream) or be complete.
    pub unsafe fn set_stream(&mut self, stream: A::Stream) {
        self.key = self.pool.alloc.stream_key(&stream);
        *self.stream = stream;
    }
}

impl<A: Allocator> Drop for Block<A> {
    /// Inlined so that a block kept in registers goes back to the thread cache without being copied
    /// through memory; the locked path is out of line.
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: `drop` runs once and nothing reads these fields after it.
        let (pool, stream) = unsafe {
            (
                ManuallyDrop::take(&mut self.pool),
                ManuallyDrop::take(&mut self.stream),
            )
        };
        let entry = Entry {
            pool,
            stream,
            key: self.key,
            class: self.size,
            tenant: self.tenant,
            addr: self.addr,
        };
        let entry = if entry.pool.fast && entry.class <= THREAD_CACHE_MAX_CLASS {
            match thread_cache::park(entry) {
                Ok(()) => return,
                Err(entry) => entry,
            }
        } else {
            entry
        };
        Inner::free_locked(entry);
    }
}

/// Budget bytes counted for memory the pool does not hand out (a managed allocation). Released on drop.
pub struct Reservation<A: Allocator> {
    pool: Arc<Inner<A>>,
    bytes: usize,
    tenant: TenantId,
}

impl<A: Allocator> fmt::Debug for Reservation<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("bytes", &self.bytes)
            .field("tenant", &self.tenant)
            .finish()
    }
}

impl<A: Allocator> Reservation<A> {
    /// The bytes reserved.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl<A: Allocator> Drop for Reservation<A> {
    fn drop(&mut self) {
        let mut st = self.pool.state.lock();
        st.stats.reserved_external_bytes -= self.bytes;
        if let Some(t) = st.tenants.get_mut(&self.tenant) {
            t.in_use_bytes -= self.bytes;
        }
        self.pool.update_gate(&st);
    }
}

/// How far a trim goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TrimWait {
    /// Release only blocks whose fences have already completed.
    ReadyOnly,
    /// Wait for fences as needed.
    Wait,
}

impl<A: Allocator> CachingPool<A> {
    /// A pool over `alloc`.
    pub fn new(alloc: A, config: PoolConfig) -> CachingPool<A> {
        let stats = PoolStats {
            budget_bytes: config.budget_bytes,
            ..PoolStats::default()
        };
        CachingPool {
            inner: Arc::new(Inner {
                alloc,
                reuse: config.reuse,
                fast: config.reuse == ReusePolicy::StreamOrdered,
                id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
                gate: AtomicU64::new(0),
                handles: AtomicUsize::new(1),
                max_cached: Mutex::new(config.max_cached_bytes),
                state: Mutex::new(State {
                    free: BTreeMap::new(),
                    tenants: TenantMap::default(),
                    stats,
                    shards: Vec::new(),
                    closed: false,
                }),
                errors: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The allocator underneath.
    pub fn allocator(&self) -> &A {
        &self.inner.alloc
    }

    /// The reuse policy.
    pub fn reuse_policy(&self) -> ReusePolicy {
        self.inner.reuse
    }

    /// A snapshot of the counters. Blocks parked in threads' caches count as cached (and in
    /// [`PoolStats::thread_cached_bytes`]); requests and hits served there are included.
    pub fn stats(&self) -> PoolStats {
        let st = self.inner.state.lock();
        let mut s = st.stats.clone();
        for c in &st.shards {
            let (bytes, blocks) = c.parked_total();
            s.in_use_bytes = s.in_use_bytes.saturating_sub(bytes);
            s.blocks_in_use = s.blocks_in_use.saturating_sub(blocks);
            s.cached_bytes += bytes;
            s.blocks_cached += blocks;
            s.thread_cached_bytes += bytes;
            s.thread_cached_blocks += blocks;
            let hits = c.hits.load(Ordering::Acquire);
            s.requests += hits;
            s.hits += hits;
        }
        s
    }

    /// A snapshot of one tenant's counters (blocks parked in threads' caches are not in use).
    pub fn tenant_stats(&self, tenant: TenantId) -> TenantStats {
        let st = self.inner.state.lock();
        let mut t = st.tenants.get(&tenant).cloned().unwrap_or_default();
        for c in &st.shards {
            t.in_use_bytes = t.in_use_bytes.saturating_sub(c.parked_bytes_of(tenant));
        }
        t
    }

    /// Change the budget. Cached blocks beyond it are given back at the next request that needs room.
    pub fn set_budget(&self, budget_bytes: usize) {
        let inner = &*self.inner;
        let mut st = inner.state.lock();
        st.stats.budget_bytes = budget_bytes;
        inner.bump_gate(&st);
    }

    /// Change the cap on cached bytes.
    pub fn set_max_cached(&self, max_cached_bytes: Option<usize>) {
        *self.inner.max_cached.lock() = max_cached_bytes;
    }

    /// Set (or with `None` remove) a tenant's quota. Lowering it below what the tenant holds only
    /// rejects its new requests.
    pub fn set_tenant_quota(&self, tenant: TenantId, quota_bytes: Option<usize>) {
        let inner = &*self.inner;
        let mut st = inner.state.lock();
        st.tenants.entry(tenant).or_default().quota_bytes = quota_bytes;
        inner.bump_gate(&st);
    }

    /// Errors met while giving memory back or checking fences, since the last call. They do not fail the
    /// request that met them; they are kept here (and counted in [`PoolStats::recorded_errors`]).
    pub fn take_errors(&self) -> Vec<PoolError> {
        std::mem::take(&mut *self.inner.errors.lock())
    }

    /// Record an error met where it cannot be returned (in a drop).
    pub(crate) fn record_error(&self, e: PoolError) {
        let mut st = self.inner.state.lock();
        self.inner.record(&mut st, e);
    }

    /// Move the blocks this thread has parked in its cache for this pool to the shared free lists (other
    /// threads and streams can then have them, and trimming can give them back). Every locked call of
    /// this thread does it too; a thread that is about to stay idle a long time may call it.
    pub fn flush_thread_cache(&self) {
        let inner = &*self.inner;
        let mut handles = Vec::new();
        {
            let mut st = inner.state.lock();
            thread_cache::flush_own(inner, &mut st, &mut handles);
            inner.after_flush(&mut st);
        }
        drop(handles);
    }

    /// A block of at least `bytes` for the default tenant, ordered on `stream`.
    #[inline(always)]
    pub fn allocate(&self, bytes: usize, stream: &A::Stream) -> Result<Block<A>, PoolError> {
        self.allocate_for(TenantId::DEFAULT, bytes, stream)
    }

    /// A block of at least `bytes` for `tenant`, ordered on `stream`.
    ///
    /// First, without a lock: a block of the size class that this thread freed on `stream` for `tenant`
    /// and parked in its cache (small classes of stream-ordered pools, tenants without a quota; see
    /// [`PoolStats::thread_cached_bytes`]). Otherwise, under the pool lock: checks the tenant's quota and
    /// the pool's budget (typed [`PoolError::OutOfMemory`], the driver is not asked); then reuses a cached
    /// block of the size class if the reuse rule allows; otherwise gives cached blocks back until the new
    /// block fits the budget and asks the allocator. A driver out-of-memory empties the cache (waiting
    /// for fences) and tries once more before it becomes [`PoolError::OutOfMemory`] with
    /// [`OomScope::Device`].
    ///
    /// The hit path is inlined into the caller (the block's fields stay in registers); everything else
    /// is out of line.
    #[inline(always)]
    pub fn allocate_for(
        &self,
        tenant: TenantId,
        bytes: usize,
        stream: &A::Stream,
    ) -> Result<Block<A>, PoolError> {
        let inner = &*self.inner;
        let key = inner.alloc.stream_key(stream);
        if inner.fast && bytes <= THREAD_CACHE_MAX_CLASS {
            let class = bytes.max(MIN_BLOCK_BYTES).next_power_of_two();
            if let Some(e) = thread_cache::take(inner, key, class, tenant) {
                return Ok(Block {
                    pool: ManuallyDrop::new(e.pool),
                    addr: e.addr,
                    size: class,
                    requested: bytes,
                    tenant,
                    stream: ManuallyDrop::new(e.stream),
                    key,
                });
            }
        }
        // The locked path returns scalars only, so both paths build the block here from registers (no
        // copy of a block through memory on the hit path).
        match self.allocate_locked(tenant, bytes, key) {
            Ok((addr, class)) => Ok(self.block(addr, class, bytes, tenant, stream.clone(), key)),
            Err(e) => Err(e),
        }
    }

    /// The locked part of [`CachingPool::allocate_for`]: the block's address and size class.
    #[inline(never)]
    fn allocate_locked(
        &self,
        tenant: TenantId,
        bytes: usize,
        key: StreamKey,
    ) -> Result<(u64, usize), PoolError> {
        let inner = &*self.inner;
        let mut handles = Vec::new();
        let mut guard = inner.state.lock();
        if inner.fast {
            thread_cache::flush_own(inner, &mut guard, &mut handles);
        }
        let r = self.allocate_in(&mut guard, tenant, bytes, key);
        inner.update_gate(&guard);
        let new_shard =
            inner.fast && thread_cache::enable(&self.inner, &mut guard, tenant, &mut handles);
        drop(guard);
        drop(handles);
        if new_shard {
            thread_cache::flush_closed();
        }
        r
    }

    /// The locked part of an allocation: the address and size class.
    fn allocate_in(
        &self,
        st: &mut State<A>,
        tenant: TenantId,
        bytes: usize,
        key: StreamKey,
    ) -> Result<(u64, usize), PoolError> {
        let inner = &*self.inner;
        st.stats.requests += 1;
        let Some(class) = size_class(bytes) else {
            st.stats.failed_requests += 1;
            return Err(PoolError::SizeOverflow {
                len: bytes,
                elem_size: 1,
            });
        };
        inner.check_limits(st, tenant, class)?;
        match inner.take_cached(st, class, key) {
            Ok(Some(addr)) => {
                st.stats.hits += 1;
                st.stats.cached_bytes -= class;
                st.stats.blocks_cached -= 1;
                inner.account_live(st, tenant, class);
                return Ok((addr, class));
            }
            Ok(None) => {}
            Err(e) => inner.record(st, e),
        }
        st.stats.misses += 1;
        let addr = match inner.allocate_fresh(st, class) {
            Ok(addr) => addr,
            Err(e) => {
                st.stats.failed_requests += 1;
                st.tenants.entry(tenant).or_default().failed_requests += 1;
                return Err(e);
            }
        };
        inner.account_live(st, tenant, class);
        Ok((addr, class))
    }

    /// Count `bytes` of memory the pool does not hand out (a managed allocation) against the budget and
    /// `tenant`'s quota, giving cached blocks back if that makes it fit.
    pub fn reserve(&self, tenant: TenantId, bytes: usize) -> Result<Reservation<A>, PoolError> {
        let inner = &*self.inner;
        let mut handles = Vec::new();
        let mut guard = inner.state.lock();
        thread_cache::flush_own(inner, &mut guard, &mut handles);
        let r = Self::reserve_in(inner, &mut guard, tenant, bytes);
        inner.update_gate(&guard);
        drop(guard);
        drop(handles);
        r?;
        Ok(Reservation {
            pool: self.inner.clone(),
            bytes,
            tenant,
        })
    }

    fn reserve_in(
        inner: &Inner<A>,
        st: &mut State<A>,
        tenant: TenantId,
        bytes: usize,
    ) -> Result<(), PoolError> {
        st.stats.requests += 1;
        inner.check_limits(st, tenant, bytes)?;
        if let Err(e) = inner.make_room(st, bytes) {
            st.stats.failed_requests += 1;
            st.tenants.entry(tenant).or_default().failed_requests += 1;
            return Err(e);
        }
        st.stats.reserved_external_bytes += bytes;
        let t = st.tenants.entry(tenant).or_default();
        t.in_use_bytes += bytes;
        t.peak_in_use_bytes = t.peak_in_use_bytes.max(t.in_use_bytes);
        inner.update_peaks(st);
        Ok(())
    }

    /// Give back cached blocks whose streams have finished with them, without waiting. Returns the bytes
    /// given back. Blocks parked in other threads' caches go back to the shared cache at those threads'
    /// next call of the pool.
    pub fn trim(&self) -> usize {
        self.trim_with(TrimWait::ReadyOnly)
    }

    /// Give back every cached block, waiting for the streams that freed them. Returns the bytes given
    /// back. Blocks parked in other threads' caches go back to the shared cache at those threads' next
    /// call of the pool.
    pub fn trim_all(&self) -> usize {
        self.trim_with(TrimWait::Wait)
    }

    fn trim_with(&self, wait: TrimWait) -> usize {
        let inner = &*self.inner;
        let mut handles = Vec::new();
        let released = {
            let mut st = inner.state.lock();
            thread_cache::flush_own(inner, &mut st, &mut handles);
            let released = inner.release(&mut st, usize::MAX, wait);
            inner.bump_gate(&st);
            released
        };
        drop(handles);
        released
    }

    fn block(
        &self,
        addr: u64,
        size: usize,
        requested: usize,
        tenant: TenantId,
        stream: A::Stream,
        key: StreamKey,
    ) -> Block<A> {
        Block {
            pool: ManuallyDrop::new(self.inner.clone()),
            addr,
            size,
            requested,
            tenant,
            stream: ManuallyDrop::new(stream),
            key,
        }
    }
}

impl<A: Allocator> Inner<A> {
    /// The gate value the state calls for now, in a new epoch: threads' caches validated against the
    /// old one flush at their next call.
    pub(crate) fn bump_gate(&self, st: &State<A>) {
        let epoch = (self.gate.load(Ordering::Relaxed) >> 1) + 1;
        let closed = st.closed || st.stats.held_bytes() > st.stats.budget_bytes;
        self.gate
            .store((epoch << 1) | u64::from(closed), Ordering::Release);
    }

    /// After a locked call: close the gate while held bytes are over the budget (after the budget was
    /// lowered), open it in a new epoch when they are back within it.
    pub(crate) fn update_gate(&self, st: &State<A>) {
        let closed = st.closed || st.stats.held_bytes() > st.stats.budget_bytes;
        if (self.gate.load(Ordering::Relaxed) & 1 == 1) != closed {
            self.bump_gate(st);
        }
    }

    /// After parked blocks moved to the shared free lists: a closed pool gives them back at once.
    pub(crate) fn after_flush(&self, st: &mut State<A>) {
        if st.closed {
            self.release(st, usize::MAX, TrimWait::Wait);
        }
        self.update_gate(st);
    }

    /// Free a block under the lock (it may not, or could not, be parked in this thread's cache).
    #[inline(never)]
    fn free_locked(e: Entry<A>) {
        let Entry {
            pool,
            stream,
            key,
            class,
            tenant,
            addr,
        } = e;
        let mut handles = Vec::new();
        let mut new_shard = false;
        {
            let mut st = pool.state.lock();
            if pool.fast {
                thread_cache::flush_own(&pool, &mut st, &mut handles);
            }
            st.stats.in_use_bytes -= class;
            st.stats.blocks_in_use -= 1;
            st.stats.cached_bytes += class;
            st.stats.blocks_cached += 1;
            if let Some(t) = st.tenants.get_mut(&tenant) {
                t.in_use_bytes -= class;
            }
            st.free.entry(class).or_default().push(FreeBlock {
                addr,
                key,
                stream,
                fence: None,
            });
            pool.after_flush(&mut st);
            if pool.fast && class <= THREAD_CACHE_MAX_CLASS && !st.closed {
                new_shard = thread_cache::enable(&pool, &mut st, tenant, &mut handles);
            }
        }
        drop(handles);
        drop(pool);
        if new_shard {
            thread_cache::flush_closed();
        }
    }

    fn record(&self, st: &mut State<A>, e: PoolError) {
        st.stats.recorded_errors += 1;
        self.errors.lock().push(e);
    }

    /// Quota and budget on live bytes: what no trimming can fix.
    fn check_limits(
        &self,
        st: &mut State<A>,
        tenant: TenantId,
        bytes: usize,
    ) -> Result<(), PoolError> {
        // A sum past usize::MAX exceeds any limit (a saturating sum would pass a limit of usize::MAX).
        let exceeds = |held: usize, limit: usize| held.checked_add(bytes).is_none_or(|s| s > limit);
        let t = st.tenants.entry(tenant).or_default();
        if let Some(quota) = t.quota_bytes
            && exceeds(t.in_use_bytes, quota)
        {
            t.failed_requests += 1;
            let err = PoolError::OutOfMemory {
                requested: bytes,
                in_use: t.in_use_bytes,
                budget: quota,
                scope: OomScope::Tenant(tenant),
            };
            st.stats.failed_requests += 1;
            return Err(err);
        }
        let live = st.stats.in_use_bytes + st.stats.reserved_external_bytes;
        if exceeds(live, st.stats.budget_bytes) {
            t.failed_requests += 1;
            st.stats.failed_requests += 1;
            return Err(PoolError::OutOfMemory {
                requested: bytes,
                in_use: live,
                budget: st.stats.budget_bytes,
                scope: OomScope::Pool,
            });
        }
        Ok(())
    }

    fn account_live(&self, st: &mut State<A>, tenant: TenantId, size: usize) {
        st.stats.in_use_bytes += size;
        st.stats.blocks_in_use += 1;
        let t = st.tenants.entry(tenant).or_default();
        t.in_use_bytes += size;
        t.peak_in_use_bytes = t.peak_in_use_bytes.max(t.in_use_bytes);
        self.update_peaks(st);
    }

    fn update_peaks(&self, st: &mut State<A>) {
        let s = &mut st.stats;
        s.peak_in_use_bytes = s
            .peak_in_use_bytes
            .max(s.in_use_bytes + s.reserved_external_bytes);
        s.peak_held_bytes = s.peak_held_bytes.max(s.held_bytes());
    }

    /// A cached block of `class` that the reuse rule lets stream `key` have, removed from the cache.
    fn take_cached(
        &self,
        st: &mut State<A>,
        class: usize,
        key: StreamKey,
    ) -> Result<Option<u64>, PoolError> {
        let same_stream_ok = self.reuse == ReusePolicy::StreamOrdered;
        let Some(list) = st.free.get_mut(&class) else {
            return Ok(None);
        };
        // 1. No driver call: the same stream (stream order), or a fence already seen complete.
        if let Some(i) = list
            .iter()
            .rposition(|b| (same_stream_ok && b.key == key) || b.known_done())
        {
            return Ok(Some(list.swap_remove(i).addr));
        }
        // 2. Ask the fences that exist.
        for i in (0..list.len()).rev() {
            if let Some(f) = &list[i].fence
                && let Some(fence) = &f.fence
                && self.alloc.fence_complete(fence)?
            {
                f.done.store(true, Ordering::Relaxed);
                return Ok(Some(list.swap_remove(i).addr));
            }
        }
        // 3. Fence the streams of unfenced blocks of this class, and ask once.
        let mut streams: Vec<(StreamKey, A::Stream)> = Vec::new();
        for b in list.iter().filter(|b| b.fence.is_none()) {
            if !streams.iter().any(|(k, _)| *k == b.key) {
                streams.push((b.key, b.stream.clone()));
            }
        }
        if streams.is_empty() {
            return Ok(None);
        }
        for (k, s) in &streams {
            self.fence_stream(st, *k, s)?;
        }
        let Some(list) = st.free.get_mut(&class) else {
            return Ok(None);
        };
        for i in (0..list.len()).rev() {
            if let Some(f) = &list[i].fence
                && !f.done.load(Ordering::Relaxed)
                && let Some(fence) = &f.fence
                && self.alloc.fence_complete(fence)?
            {
                f.done.store(true, Ordering::Relaxed);
            }
            if list[i].known_done() {
                return Ok(Some(list.swap_remove(i).addr));
            }
        }
        Ok(None)
    }

    /// Attach to all of stream `key`'s unfenced free blocks a fence: "done" at once if the stream is idle,
    /// otherwise one recorded on it now.
    fn fence_stream(
        &self,
        st: &mut State<A>,
        key: StreamKey,
        stream: &A::Stream,
    ) -> Result<(), PoolError> {
        let fence = if self.alloc.stream_idle(stream)? {
            Arc::new(FenceSlot {
                fence: None,
                done: AtomicBool::new(true),
            })
        } else {
            st.stats.fences_recorded += 1;
            Arc::new(FenceSlot {
                fence: Some(self.alloc.record_fence(stream)?),
                done: AtomicBool::new(false),
            })
        };
        for list in st.free.values_mut() {
            for b in list
                .iter_mut()
                .filter(|b| b.key == key && b.fence.is_none())
            {
                b.fence = Some(fence.clone());
            }
        }
        Ok(())
    }

    /// Give back cached blocks until the held bytes plus `extra` fit the budget.
    fn make_room(&self, st: &mut State<A>, extra: usize) -> Result<(), PoolError> {
        // Held bytes plus `extra` past usize::MAX are over any budget: give back everything cached (the
        // limits were checked, so live bytes plus `extra` fit).
        let over = |st: &State<A>| {
            st.stats
                .held_bytes()
                .checked_add(extra)
                .map_or(usize::MAX, |held| {
                    held.saturating_sub(st.stats.budget_bytes)
                })
        };
        if over(st) > 0 {
            let need = over(st);
            self.release(st, need, TrimWait::ReadyOnly);
        }
        if over(st) > 0 {
            let need = over(st);
            self.release(st, need, TrimWait::Wait);
        }
        if over(st) > 0 {
            // Only possible if giving blocks back failed; the limits were checked before.
            let live = st.stats.in_use_bytes + st.stats.reserved_external_bytes;
            return Err(PoolError::OutOfMemory {
                requested: extra,
                in_use: live,
                budget: st.stats.budget_bytes,
                scope: OomScope::Pool,
            });
        }
        Ok(())
    }

    /// A fresh block of `class` from the allocator, within the budget and the cache cap.
    fn allocate_fresh(&self, st: &mut State<A>, class: usize) -> Result<u64, PoolError> {
        if let Some(cap) = *self.max_cached.lock()
            && st.stats.cached_bytes > cap
        {
            let need = st.stats.cached_bytes - cap;
            self.release(st, need, TrimWait::ReadyOnly);
        }
        self.make_room(st, class)?;
        match self.alloc.allocate(class) {
            Ok(addr) => Ok(addr),
            Err(e) if e.is_out_of_memory() => {
                st.stats.driver_oom_retries += 1;
                self.release(st, usize::MAX, TrimWait::Wait);
                match self.alloc.allocate(class) {
                    Ok(addr) => Ok(addr),
                    Err(e) if e.is_out_of_memory() => Err(PoolError::OutOfMemory {
                        requested: class,
                        in_use: st.stats.in_use_bytes + st.stats.reserved_external_bytes,
                        budget: st.stats.budget_bytes,
                        scope: OomScope::Device,
                    }),
                    Err(e) => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Give back up to (at least) `want` bytes of cached blocks, largest classes first. Returns the bytes
    /// given back. Errors are recorded, not returned: a block whose release failed is dropped from the
    /// cache (its memory is lost to the pool, not handed out again).
    fn release(&self, st: &mut State<A>, want: usize, wait: TrimWait) -> usize {
        if want == 0 || st.free.is_empty() {
            return 0;
        }
        // Fence every stream that has unfenced free blocks.
        let mut streams: Vec<(StreamKey, A::Stream)> = Vec::new();
        for b in st.free.values().flatten().filter(|b| b.fence.is_none()) {
            if !streams.iter().any(|(k, _)| *k == b.key) {
                streams.push((b.key, b.stream.clone()));
            }
        }
        for (k, s) in &streams {
            if let Err(e) = self.fence_stream(st, *k, s) {
                self.record(st, e);
            }
        }
        let mut released = 0usize;
        let classes: Vec<usize> = st.free.keys().rev().copied().collect();
        'classes: for class in classes {
            let mut i = 0;
            loop {
                if released >= want {
                    break 'classes;
                }
                let Some(list) = st.free.get_mut(&class) else {
                    break;
                };
                if i >= list.len() {
                    break;
                }
                let done = match &list[i].fence {
                    None => Ok(false),
                    Some(f) if f.done.load(Ordering::Relaxed) => Ok(true),
                    Some(f) => {
                        let r = match (&f.fence, wait) {
                            (None, _) => Ok(true),
                            (Some(fence), TrimWait::ReadyOnly) => self.alloc.fence_complete(fence),
                            (Some(fence), TrimWait::Wait) => {
                                self.alloc.wait_fence(fence).map(|()| true)
                            }
                        };
                        if let Ok(true) = r {
                            f.done.store(true, Ordering::Relaxed);
                        }
                        r
                    }
                };
                match done {
                    Ok(true) => {
                        let b = list.swap_remove(i);
                        if list.is_empty() {
                            st.free.remove(&class);
                        }
                        // SAFETY: `b` is in no one's hands (it was in the cache) and its fence, recorded
                        // on the freeing stream after the free, has completed, so no work uses it.
                        let r = unsafe { self.alloc.deallocate(b.addr, class) };
                        st.stats.cached_bytes -= class;
                        st.stats.blocks_cached -= 1;
                        st.stats.trimmed_blocks += 1;
                        st.stats.trimmed_bytes += class as u64;
                        released += class;
                        if let Err(e) = r {
                            self.record(st, e.into());
                        }
                    }
                    Ok(false) => i += 1,
                    Err(e) => {
                        self.record(st, PoolError::Gpu(e));
                        i += 1;
                    }
                }
            }
        }
        released
    }
}

impl<A: Allocator> Drop for Inner<A> {
    fn drop(&mut self) {
        // No block is live (each holds this `Inner`); give the cache back, waiting for its streams.
        let mut st = std::mem::replace(
            &mut *self.state.lock(),
            State {
                free: BTreeMap::new(),
                tenants: TenantMap::default(),
                stats: PoolStats::default(),
                shards: Vec::new(),
                closed: true,
            },
        );
        self.release(&mut st, usize::MAX, TrimWait::Wait);
        for e in self.errors.lock().drain(..) {
            tracing::warn!(error = %e, "memory pool: error while giving memory back at drop");
        }
    }
}
