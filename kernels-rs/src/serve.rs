//! The one-query server (`sm80_knn1s_*`): `sm80_knn1_*`'s grid, launched once and kept resident, answering one
//! query after another without a launch each.
//!
//! A one-query call's floor is the launch itself: about 7 us on an H200 from `cuLaunchKernel` to the host
//! seeing a tiny kernel's answer (docs/results/2026-11-27-session22), more than the whole scan of 1,000 rows
//! takes. Here the host writes the query into a mailbox in mapped memory instead ([`Knn1ServeParams`]: every
//! 8-byte word a value and the query's number), and block 0's threads poll the whole mailbox over the bus, so
//! that the query is complete, and copied into device memory, in the round trip that first sees it (a doorbell
//! word followed by a read of the query would take two). Block 0 then publishes the query's number at GPU
//! scope; every other block's first thread polls that word in the L2, and every block runs `sm80_knn1_*`'s body
//! on the query as a launch would (the same chains, keys and merges, so the same answer bit for bit), the last
//! merger writing the answer words into mapped memory where the host spins on them.
//!
//! Ordering: a mailbox word is written by the host in one 8-byte store and read by the device in one 16-byte
//! load (two words), each word whole, so a word carrying the new number holds the new value, whatever order the
//! words land in. Block 0's threads store the values as they poll and pass the poll's last barrier; its first
//! thread then publishes the number and the query's `k` as one 8-byte word with `st.release.gpu`, a release that
//! is cumulative over every store the barrier ordered before it (the pattern of a cooperative grid barrier); the
//! other blocks' first threads read that word with `ld.acquire.gpu` and pass a barrier before their threads load
//! the query (`ld.global.cg`: from the L2, never a line the L1 kept from an earlier query). A block that writes
//! the answer (or, with the groups' lists for the host, its group's list) resets its tickets first (the body
//! does) and then adds one to an answered count (release); with the blocks' lists for the host every block adds
//! one after its list (relaxed: no tickets). Block 0's first thread waits for the count to reach every such block
//! of the queries so far (acquire) before the block polls for the next query, and publishes that query after it,
//! so no block of the next query takes a ticket before the last merger has reset it, the body's scratch (scores,
//! lists) is never written by one query while the last one still reads it, and block 0's idle time starts only
//! once the last answer is written. The host rings the next query only after seeing every answer word, so the
//! mailbox and the answer are never written by both sides at once.
//!
//! Ending: block 0 ends on the host's exit (`k` = [`KNN1_SERVE_EXIT`] with the next number), after `idle_ns`
//! without a new query, or at its first wait past `life_ns`, publishing [`KNN1_SERVE_EXIT`] so that the other
//! blocks end too; the others also end on their own past `life_ns` plus [`STRAY_NS`], should block 0 never run.
//! A query found complete is answered even in the round where either time passes. The host learns that the
//! server ended from its stream (idle), never from a word the server writes, so an answer it still waits for
//! when the server ends unanswered is an error it sees, not a hang.
//!
//! Block 0 starts polling a delay after the count is complete, which follows the phase of a caller that rings
//! each query a fixed time after the last answer (see [`serve`]).
//!
//! Between a complete mailbox and the number published lies nothing but the release (session 30). Until then
//! every thread of block 0 fenced and passed another barrier, the first thread then waited for the answered count
//! (a round trip to the L2) and stored `k` and statistics (which the release waited for), and the other blocks
//! loaded `k` after the number: about 0.3 us more in block 0 and one L2 round trip more in every other block.
//!
//! Statistics for the benchmark (`sync`, device clock): per query, the time from a complete mailbox to its
//! number published and, for the device's merge, from a complete mailbox to answered.
//!
//! Every block must be resident at once (the launcher sizes the grid by the occupancy the driver reports): a
//! block waiting for a number that block 0 cannot publish because it waits for an SM would otherwise hold that
//! SM until its own deadline.

use crate::knn1::{
    BulkSmem, RingPos, bulk_chains, bulk_finish, bulk_init_barriers, bulk_issue, knn1,
};
use crate::util::{
    F4, block_dim_x, block_x, cp_async_commit, cp_async_wait, dynamic_shared_f32, grid_dim_x,
    mbarrier_wait, stage_query, sync_threads, sync_threads_or, sync_warp, thread_x,
};
use core::arch::asm;
use recall_kernel_shared::{
    KNN1_SERVE_EXIT, Knn1BulkServeParams, Knn1Params, Knn1ServeParams, LISTS_OUT_BLOCKS,
    LISTS_OUT_GROUPS, METRIC_COSINE, METRIC_DOT, METRIC_L2, SERVE_LISTS_SHIFT, ServeFields,
    knn1_bulk_serve_shared_bytes, knn1_bulk_shared_bytes, knn1_serve_next, knn1_serve_shared_bytes,
};

/// How long past `life_ns` a block other than block 0 waits before it ends on its own (block 0 ends at its first
/// wait past `life_ns`, so this is only for a block 0 that never ran): 10 ms.
const STRAY_NS: u64 = 10_000_000;

/// The device's nanosecond clock (`%globaltimer`).
#[inline(always)]
fn now_ns() -> u64 {
    let t: u64;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nomem, nostack)) };
    t
}

/// `*p` with acquire semantics at GPU scope (a word another block writes).
///
/// # Safety
/// `p` is a valid, 4-byte aligned global address.
#[inline(always)]
unsafe fn load_acquire_gpu(p: u64) -> u32 {
    let v: u32;
    // SAFETY: caller.
    unsafe {
        asm!("ld.acquire.gpu.global.u32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) p, options(nostack))
    };
    v
}

/// `*p` as one 8-byte word with acquire semantics at GPU scope (a word another block writes).
///
/// # Safety
/// `p` is a valid, 8-byte aligned global address.
#[inline(always)]
unsafe fn load_acquire_gpu_u64(p: u64) -> u64 {
    let v: u64;
    // SAFETY: caller.
    unsafe {
        asm!("ld.acquire.gpu.global.u64 {v}, [{p}];", v = out(reg64) v, p = in(reg64) p, options(nostack))
    };
    v
}

/// `*p = v` as one 8-byte word with release semantics at GPU scope.
///
/// # Safety
/// `p` is a valid, 8-byte aligned global address that no other thread writes meanwhile.
#[inline(always)]
unsafe fn store_release_gpu_u64(p: u64, v: u64) {
    // SAFETY: caller.
    unsafe {
        asm!("st.release.gpu.global.u64 [{p}], {v};", v = in(reg64) v, p = in(reg64) p, options(nostack))
    };
}

/// `*p += v` atomically, with release semantics at GPU scope.
///
/// # Safety
/// `p` is a valid, 4-byte aligned global address.
#[inline(always)]
unsafe fn add_release_gpu(p: u64, v: u32) {
    // SAFETY: caller.
    unsafe {
        asm!("red.release.gpu.global.add.u32 [{p}], {v};", v = in(reg32) v, p = in(reg64) p, options(nostack))
    };
}

/// `*p += v` atomically at GPU scope, relaxed, with no value returned (the thread does not wait for it).
///
/// # Safety
/// `p` is a valid, 4-byte aligned global address.
#[inline(always)]
unsafe fn add_relaxed_gpu(p: u64, v: u32) {
    // SAFETY: caller.
    unsafe {
        asm!("red.relaxed.gpu.global.add.u32 [{p}], {v};", v = in(reg32) v, p = in(reg64) p, options(nostack))
    };
}

/// `*p += v` atomically at GPU scope, relaxed, with no value returned (the thread does not wait for it).
///
/// # Safety
/// `p` is a valid, 8-byte aligned global address.
#[inline(always)]
unsafe fn add_relaxed_gpu_u64(p: u64, v: u64) {
    // SAFETY: caller.
    unsafe {
        asm!("red.relaxed.gpu.global.add.u64 [{p}], {v};", v = in(reg64) v, p = in(reg64) p, options(nostack))
    };
}

/// 16 bytes at `p` by a volatile load, as four words (two mailbox words: value or `k`, then number, each).
///
/// # Safety
/// `p` is a valid, 16-byte aligned global address of 16 readable bytes.
#[inline(always)]
unsafe fn load_volatile_u4(p: u64) -> [u32; 4] {
    let (x, y, z, w): (u32, u32, u32, u32);
    // SAFETY: caller.
    unsafe {
        asm!(
            "ld.volatile.global.v4.u32 {{{x}, {y}, {z}, {w}}}, [{p}];",
            p = in(reg64) p,
            x = out(reg32) x,
            y = out(reg32) y,
            z = out(reg32) z,
            w = out(reg32) w,
            options(nostack)
        )
    };
    [x, y, z, w]
}

/// 8 bytes to `p` (two values of the relayed query).
///
/// # Safety
/// `p` is a valid, 8-byte aligned global address of 8 writable bytes.
#[inline(always)]
unsafe fn store_u2(p: u64, x: u32, y: u32) {
    // SAFETY: caller.
    unsafe {
        asm!(
            "st.global.v2.u32 [{p}], {{{x}, {y}}};",
            p = in(reg64) p,
            x = in(reg32) x,
            y = in(reg32) y,
            options(nostack)
        )
    };
}

/// Mailbox pairs (16 bytes) each of block 0's threads keeps in flight per poll: 8, so that one round trip over
/// the bus reads a 768-dimension query (385 pairs) with four warps (`sm90a_knn1s`'s blocks; a one-warp
/// `sm80_knn1s` block takes two).
const POLL_DEPTH: usize = 8;

/// Block 0's wait for the next query (`expected`): poll the mailbox until every word carries `expected`, copying
/// the values into the relayed query as they come (until the host rings the next query, the mailbox holds the
/// last one's values, so these stores rewrite what other blocks may still read with the same values). Returns
/// `(expected, k, rounds)` (the polls it took), or `(KNN1_SERVE_EXIT, 0, rounds)` when the host rang the exit or
/// the server idled or aged out. Block-uniform; every thread of block 0 calls it.
///
/// # Safety
/// As [`serve`]; `k_word` a u32 of this block's shared memory.
#[inline(always)]
unsafe fn wait_for_query(
    sf: &ServeFields,
    dim: usize,
    expected: u32,
    start: u64,
    k_word: *mut u32,
) -> (u32, u32, u32) {
    let t = thread_x() as usize;
    let threads = block_dim_x() as usize;
    let pairs = dim / 2 + 1;
    let mut rounds = 0u32;
    // Not before the block's last query is done: polling warps' loads over the bus would hold the SM's
    // outstanding-load slots that warp 0's copies and loads for that query need.
    sync_threads();
    let since = now_ns();
    loop {
        rounds += 1;
        let mut complete = true;
        let mut exit = false;
        let mut j = t;
        while j < pairs {
            let mut v = [[0u32; 4]; POLL_DEPTH];
            unroll!(8, U: usize => {
                let at = j + U * threads;
                if at < pairs {
                    // SAFETY: pair at < (dim + 2) / 2 of the mailbox (launcher), 16-byte aligned.
                    v[U] = unsafe { load_volatile_u4(sf.mailbox + 16 * at as u64) };
                }
            });
            unroll!(8, U: usize => {
                let at = j + U * threads;
                if at < pairs {
                    let [a, a_n, b, b_n] = v[U];
                    complete &= a_n == expected && b_n == expected;
                    if 2 * at < dim {
                        // SAFETY: values 2 at, 2 at + 1 < dim of the relayed query (dim floats, launcher).
                        unsafe { store_u2(sf.query + 8 * at as u64, a, b) };
                    } else {
                        // The pair of k and the padding.
                        exit = a_n == expected && a == KNN1_SERVE_EXIT;
                        // SAFETY: this block's shared word; read after the barriers below.
                        unsafe { *k_word = a };
                    }
                }
            });
            j += POLL_DEPTH * threads;
        }
        let late = t == 0 && {
            let now = now_ns();
            now.wrapping_sub(since) > sf.idle_ns || now.wrapping_sub(start) > sf.life_ns
        };
        // A query this round found complete is answered even where the idle or life time has just passed: the
        // host rang it and waits for its answer (until session 30 the time was asked first, and a round slower
        // than the host's margin, as under a sanitizer, could end the server on a query it had read).
        let done = !sync_threads_or(!complete);
        if sync_threads_or(exit || (late && !done)) {
            return (KNN1_SERVE_EXIT, 0, rounds);
        }
        if done {
            // SAFETY: written by the k pair's thread before the barriers.
            return (expected, unsafe { *k_word }, rounds);
        }
    }
}

/// The steps of block 0's poll delay ([`serve`]): down by `POLL_PHASE_STEP_NS` after a query found in no more polls
/// than the last one, up by `POLL_PHASE_JUMP_NS` after one that took more.
const POLL_PHASE_STEP_NS: u64 = 10;
const POLL_PHASE_JUMP_NS: u64 = 100;

/// The server's loop (see the module comment): wait for a query (block 0: the mailbox; the others: the number
/// block 0 publishes), run `body(k)` on it (`true` in the threads of a block that wrote its part of the answer),
/// and record it answered; until the exit.
///
/// # Safety
/// The launch as the body's launcher requires, with every block resident at once and the rest as
/// [`ServeFields`] documents for a query of `dim` values; `k_word` a u32 of this block's shared memory past the
/// body's; the host rings a query only with `1 <= k <= min(SMALL_K_MAX, n_rows)` (or the exit), and only once
/// every answer word of the last query has been seen; `body` runs one query with every thread of the block,
/// reads the query from the relayed copy, and returns `true` in the blocks that write the answer (one), with
/// [`LISTS_OUT_GROUPS`] in the `k` word a group's list (`groups`), each after resetting the tickets it used, or
/// with [`LISTS_OUT_BLOCKS`] their own list (every block).
#[inline(always)]
unsafe fn serve(
    sf: &ServeFields,
    dim: usize,
    groups: u32,
    k_word: *mut u32,
    mut body: impl FnMut(u32) -> bool,
) {
    let t = thread_x() as usize;
    let leader = block_x() == 0;
    let stats = sf.sync as *mut u64;
    let start = now_ns();
    // Block 0: the number last taken, and how many blocks count themselves for the queries taken so far (those
    // whose `body` returned `true`; sync's u32 word 2 counts them). Others: the number last run.
    let mut seen = sf.seen;
    let mut answers = 0u32;
    let mut last = 0u32;
    // Block 0's first thread keeps its statistics (u64 words 3, 6 and 7, which only it writes) in registers and
    // stores them after the number, so that no read or store of device memory delays it; `published_at` is when it
    // published the query it runs (block 0's part is timed from there).
    let mut published_at = 0u64;
    // The launcher zeroes the words at each launch, so the sums start at zero here too.
    let (mut wait_ns, mut taken, mut spent_ns) = (0u64, 0u64, 0u64);
    // Block 0's first thread: how long after the block is ready it starts polling (below one poll's round trip),
    // and the last query's polls.
    let (mut delay_ns, mut last_rounds) = (0u64, 0u32);
    loop {
        let k = if leader {
            if t == 0 {
                // Every block that answered the queries so far has reset its tickets (the blocks' lists for the
                // host use none, and every block wrote its list before the host rang the next query). Waited for
                // before the mailbox is polled, not after, so that no round trip to the L2 lies between a complete
                // mailbox and the number published: the answering blocks count themselves right after writing
                // the answer, which the host must see before it rings the next query.
                // SAFETY: sync holds KNN1_SERVE_SYNC_WORDS device u32 (launcher); u32 word 2 is added to by the
                // answering blocks only.
                while unsafe { load_acquire_gpu(sf.sync + 8) } != answers {}
                // The poll's phase. With polls one round trip apart, a query is seen one round trip after the
                // first poll issued once it is in the mailbox: up to a round trip late, and a caller that rings
                // each query a fixed time after the last answer meets the same phase every time (the median of
                // such a stream of calls came out about 1.8 us apart from run to run, session 30). Starting the
                // polls `delay_ns` late moves them; the delay creeps down while queries are found in no more
                // polls than before, and jumps up when one takes a poll more, i.e. when its ring just missed a
                // poll: so the polls settle just after where such a caller's ring lands. Delays stay below one
                // round trip, which no poll schedule beats for a query that comes at an arbitrary time.
                let ready = now_ns();
                while now_ns().wrapping_sub(ready) < delay_ns {}
            }
            let poll_at = now_ns();
            // SAFETY: forwarded contract; k_word is this block's shared memory.
            let (number, k, rounds) =
                unsafe { wait_for_query(sf, dim, knn1_serve_next(seen), start, k_word) };
            // The relayed values: every thread of block 0 stored its part before the barrier that ended
            // `wait_for_query`, and thread 0's release below is cumulative over what that barrier ordered before
            // it, so no other fence or barrier is needed (until session 30 every thread fenced, then a barrier).
            let complete_at = now_ns();
            if t == 0 {
                // SAFETY: sync as above: u32 words 0 and 1 (the number and its k, one 8-byte word) and u64 words
                // 2, 3 and 6 are written by this thread only (the answering block reads word 2 after acquiring
                // the number, which the release orders after the store).
                unsafe {
                    // Word 2 only for the device's merge, whose answering block reads it: the release waits for
                    // every store before it.
                    if number != KNN1_SERVE_EXIT && k >> SERVE_LISTS_SHIFT == 0 {
                        stats.add(2).write_volatile(complete_at);
                    }
                    // The number and k in one store, so that the other blocks have both from one load.
                    store_release_gpu_u64(sf.sync, (u64::from(k) << 32) | u64::from(number));
                    if number != KNN1_SERVE_EXIT {
                        let now = now_ns();
                        wait_ns += now - complete_at;
                        taken += 1;
                        published_at = now;
                        // After the number: these stores would delay its release.
                        stats.add(3).write_volatile(wait_ns);
                        stats.add(6).write_volatile(taken);
                        // The next query's poll delay (see above). A 32-bit division (a poll's nanoseconds,
                        // saturated): the 64-bit one took about 0.1 us of block 0's part (session 30). Kept here,
                        // not after the part, where its words would stay live through the body and spill.
                        let polled =
                            complete_at.wrapping_sub(poll_at).min(u64::from(u32::MAX)) as u32;
                        let round_ns = u64::from((polled / rounds.max(1)).clamp(200, 4_000));
                        delay_ns = if rounds > last_rounds {
                            delay_ns + POLL_PHASE_JUMP_NS
                        } else if delay_ns >= POLL_PHASE_STEP_NS {
                            delay_ns - POLL_PHASE_STEP_NS
                        } else {
                            delay_ns + round_ns - POLL_PHASE_STEP_NS
                        };
                        if delay_ns >= round_ns {
                            delay_ns -= round_ns;
                        }
                        last_rounds = rounds;
                    }
                }
            }
            seen = number;
            answers = answers.wrapping_add(match k >> SERVE_LISTS_SHIFT {
                0 => 1,
                LISTS_OUT_GROUPS => groups,
                LISTS_OUT_BLOCKS => grid_dim_x(),
                _ => 0,
            });
            // Every thread of block 0 has the number and k from `wait_for_query` (block-uniform).
            if number == KNN1_SERVE_EXIT {
                return;
            }
            k
        } else {
            // Every thread has read the last query's k (some warps leave the body before its last barrier)
            // before thread 0 writes the next one's.
            sync_threads();
            let mut exit = false;
            if t == 0 {
                let (number, k) = loop {
                    // SAFETY: sync holds KNN1_SERVE_SYNC_WORDS device u32 (launcher), 8-byte aligned: the
                    // number in the low half of u64 word 0, its k in the high half.
                    let word = unsafe { load_acquire_gpu_u64(sf.sync) };
                    let number = word as u32;
                    if number != last {
                        break (number, (word >> 32) as u32);
                    }
                    if now_ns().wrapping_sub(start) > sf.life_ns.saturating_add(STRAY_NS) {
                        break (KNN1_SERVE_EXIT, 0);
                    }
                };
                if number == KNN1_SERVE_EXIT {
                    exit = true;
                } else {
                    // Only this thread polls, so only it keeps the number.
                    last = number;
                    // SAFETY: this block's shared word, read after the barriers below.
                    unsafe { *k_word = k };
                }
            }
            // A query's k reaches every thread through the word, the exit through the reduction of the second
            // barrier (no shared word: the threads leave right after it). Either barrier orders the word's store
            // before its reads; the plain one is there for compute-sanitizer's racecheck, which reported the store
            // against the reads across one barrier (a thread 0 that arrives last after its poll, in one block of a
            // few server launches a run, with three blocks an SM) and reports nothing across two (session 26,
            // runs B and C).
            sync_threads();
            if sync_threads_or(exit) {
                return;
            }
            // SAFETY: written before the barriers above.
            unsafe { *k_word }
        };
        let answered = body(k);
        if leader && t == 0 {
            // SAFETY: sync as above; only this thread writes u64 word 7.
            unsafe {
                spent_ns += now_ns() - published_at;
                stats.add(7).write_volatile(spent_ns);
            }
        }
        if answered && t == 0 {
            // SAFETY: sync as above. The block wrote its part of the answer: the answer (the device's merge, one
            // block a query), its group's list, or its own list for the host (every block).
            unsafe {
                match k >> SERVE_LISTS_SHIFT {
                    0 => {
                        // The sums are added without being read, and ordered before the count by its release.
                        // u64 word 2 (when block 0 found this query complete) was stored before the number this
                        // block acquired, and block 0 stores the next query's only after this block's count (its
                        // acquire of the count precedes its poll).
                        let from = stats.add(2).read_volatile();
                        add_relaxed_gpu_u64(sf.sync + 32, now_ns().wrapping_sub(from));
                        add_relaxed_gpu_u64(sf.sync + 40, 1);
                        add_release_gpu(sf.sync + 8, 1);
                    }
                    // No ticket to reset, so nothing for a release to order: the count only holds block 0's
                    // poll for the next query (and the start of its idle time) until every list is written. Until
                    // session 30 block 0 started at once, and where the other blocks ran far behind it (as under
                    // a sanitizer) it could idle out before the host had seen the answer and rung the next query.
                    LISTS_OUT_BLOCKS => add_relaxed_gpu(sf.sync + 8, 1),
                    // The group's tickets were reset before the list was written: the release orders them before
                    // the count.
                    _ => add_release_gpu(sf.sync + 8, 1),
                }
            }
        }
        // No thread rewrites the word before every thread has read it: block 0's wait for the next query and the
        // other blocks' loop start with a barrier.
    }
}

/// `sm80_knn1s_*`: the server with `sm80_knn1_*`'s body.
///
/// # Safety
/// As [`serve`] with `sm80_knn1_*`'s launch (`knn1_serve_shared_bytes(dim, warps)` of dynamic shared memory).
#[inline(always)]
unsafe fn knn1_serve<const METRIC: u32>(p: &Knn1ServeParams) {
    let k_word = dynamic_shared_f32()
        .wrapping_add((knn1_serve_shared_bytes(p.base.dim, p.base.warps) / 4 - 4) as usize)
        as *mut u32;
    // SAFETY: forwarded launcher contract; base.query is the relayed query.
    unsafe {
        let groups = grid_dim_x().div_ceil(p.base.group_blocks);
        serve(&p.serve, p.base.dim as usize, groups, k_word, |k| {
            knn1::<METRIC>(
                &Knn1Params {
                    k: k & 0xFFFF,
                    ..p.base
                },
                |_| F4([0.0; 4]),
            )
        })
    }
}

/// `sm90a_knn1s_*`: the server with `sm90a_knn1_*`'s chains and selection (the blocks' or the groups' lists for
/// the host, or the device's merge: the lists' mode in the query's `k` word, [`SERVE_LISTS_SHIFT`]), and a ring
/// that never waits for a query: the corpus does not change between queries, so the copying warp queues the
/// next query's first tiles as soon as their slots are read. Where the ring holds the block's whole rows
/// (`slots` at least the row's tiles, as with a block per SM at 768 dimensions), the rows are copied once per
/// launch and stay; otherwise the copying warp keeps a ring's worth of tiles ahead of the chains, the next
/// query's included, and a query waits only for the rest. Warp 0 stages each query and runs the chains and the
/// selection (its merges stage their lists past the ring, which holds the next query's tiles; their barriers
/// are warp 0's alone); the other warps wait at the next round's first barrier. Before the block ends, warp 0
/// waits for the tiles queued ahead, so that no copy lands in shared memory the block no longer has.
///
/// # Safety
/// As [`serve`] with `sm90a_knn1_*`'s launch (`knn1_bulk_serve_shared_bytes(dim, slots)` of dynamic shared
/// memory); `map` the generic address of the parameter's tensor map.
#[inline(always)]
unsafe fn knn1_bulk_serve<const METRIC: u32>(p: &Knn1BulkServeParams, map: u64) {
    let b = &p.bulk;
    let (lane, warp) = (thread_x() as usize % 32, thread_x() as usize / 32);
    let (n, dim) = (b.base.n_rows as usize, b.base.dim as usize);
    let slots = b.slots as usize;
    let n_tiles = dim.div_ceil(32);
    // Whole rows stay in the ring; else a ring's worth of tiles is always queued ahead.
    let resident = slots >= n_tiles;
    let ahead = slots.min(n_tiles);
    let sm = BulkSmem::of(b.base.dim, slots);
    let body_bytes = knn1_bulk_shared_bytes(b.base.dim, b.slots).div_ceil(16) * 16;
    let keys_s = dynamic_shared_f32().wrapping_add((body_bytes / 4) as usize) as *mut u64;
    let k_word = dynamic_shared_f32()
        .wrapping_add((knn1_bulk_serve_shared_bytes(b.base.dim, b.slots) / 4 - 4) as usize)
        as *mut u32;
    let row0 = block_x() as usize * 32;
    // Warp 1: where its next copy goes and which tile of a row it is, and whether it reuses a slot. Warp 0:
    // where its next tile is.
    let (mut prod, mut prod_t, mut issued) = (RingPos::default(), 0usize, 0usize);
    let mut cons = RingPos::default();
    let mut seen_rows = false;
    if warp == 1 {
        if lane == 0 {
            // SAFETY: this block's barriers, before any use; map as the launcher guarantees.
            unsafe { bulk_init_barriers(&sm, slots, map) };
        }
        sync_warp();
        // The first query's first tiles (every tile of the rows when they stay).
        while issued < ahead {
            // SAFETY: a fresh slot; tile prod_t < n_tiles; map as above.
            unsafe { bulk_issue(&sm, map, prod, false, prod_t, row0, lane) };
            prod = prod.next(slots as u32);
            prod_t += 1;
            issued += 1;
        }
        prod_t %= n_tiles;
    }
    // The barriers are initialised before `serve`'s first barrier, which every thread passes before waiting on
    // them.
    // SAFETY: forwarded launcher contract; base.query is the relayed query.
    unsafe {
        let groups = grid_dim_x().div_ceil(b.base.group_blocks);
        serve(&p.serve, dim, groups, k_word, |k| {
            let base = Knn1Params {
                k: k & 0xFFFF,
                ..b.base
            };
            if warp == 1 && !resident {
                // The rest of this query's tiles, then the next query's first `ahead`: n_tiles in all, each
                // into a slot once warp 0 has read its last tile.
                let mut c = 0;
                while c < n_tiles {
                    bulk_issue(&sm, map, prod, issued >= slots, prod_t, row0, lane);
                    prod = prod.next(slots as u32);
                    prod_t = if prod_t + 1 == n_tiles { 0 } else { prod_t + 1 };
                    issued = issued.saturating_add(1);
                    c += 1;
                }
            }
            if warp != 0 {
                return false;
            }
            stage_query(sm.q_s, base.query, dim, lane, 32);
            cp_async_commit();
            let r = row0 + lane;
            let nc = if METRIC == METRIC_COSINE && r < n {
                *(base.corpus_norms as *const f32).add(r)
            } else {
                0.0
            };
            cp_async_wait::<0>();
            sync_warp();
            let start = if resident { RingPos::default() } else { cons };
            // Whole rows that this warp has seen land once (the launch's first query) are not waited for again.
            let (acc, acc_q, end) = if seen_rows {
                bulk_chains::<METRIC, true, true>(
                    &base,
                    &sm,
                    b.slots,
                    start,
                    !resident,
                    lane as u32,
                )
            } else {
                bulk_chains::<METRIC, false, true>(
                    &base,
                    &sm,
                    b.slots,
                    start,
                    !resident,
                    lane as u32,
                )
            };
            seen_rows = resident;
            if !resident {
                cons = end;
            }
            bulk_finish::<METRIC>(
                &base,
                &sm,
                k >> SERVE_LISTS_SHIFT,
                r,
                acc,
                acc_q,
                nc,
                keys_s,
            )
        });
    }
    if warp == 0 && !(resident && seen_rows) {
        // The tiles queued ahead for a query that never came (whole rows: those queued at launch, when no query
        // came).
        let mut c = 0;
        while c < ahead {
            // SAFETY: barrier cons.slot, initialised; the phase of a tile queued ahead.
            unsafe { mbarrier_wait(sm.full + 8 * cons.slot, cons.parity) };
            cons = cons.next(b.slots);
            c += 1;
        }
    }
}

macro_rules! serve_kernels {
    ($($name:ident => $metric:ident;)*) => {$(
        /// See [`knn1_serve`]; its metric is fixed per entry point.
        ///
        /// # Safety
        /// Launched only through its typed launcher in `recall-gpu-kernels`.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: Knn1ServeParams) {
            // SAFETY: forwarded launcher contract.
            unsafe { knn1_serve::<$metric>(&p) }
        }
    )*};
}

macro_rules! bulk_serve_kernels {
    ($($name:ident => $metric:ident;)*) => {$(
        /// See [`knn1_bulk_serve`]; its metric is fixed per entry point.
        ///
        /// # Safety
        /// Launched only through its typed launcher in `recall-gpu-kernels`.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: Knn1BulkServeParams) {
            // The map: the first field of the parameter, which the build declares 64-byte aligned.
            let map = param_address!($name);
            // SAFETY: forwarded launcher contract.
            unsafe { knn1_bulk_serve::<$metric>(&p, map) }
        }
    )*};
}

serve_kernels! {
    sm80_knn1s_dot => METRIC_DOT;
    sm80_knn1s_cosine => METRIC_COSINE;
    sm80_knn1s_l2 => METRIC_L2;
}

bulk_serve_kernels! {
    sm90a_knn1s_dot => METRIC_DOT;
    sm90a_knn1s_cosine => METRIC_COSINE;
    sm90a_knn1s_l2 => METRIC_L2;
}
