//! Launch parameters shared by the device crate (`kernels-rs`, built for `nvptx64-nvidia-cuda`) and the
//! host launchers in `recall-gpu-kernels`.
//!
//! Architecture invariant: this crate is `no_std`, has no dependencies and holds only `#[repr(C)]` plain
//! data, so one definition serves both sides and a layout is written exactly once. Every kernel takes one
//! of these structs by value as its only parameter. Device pointers are carried as `u64`.
//!
//! Architecture invariant: the kernels trust these values. The host launchers validate every field (sizes,
//! bounds, alignment) before a launch; see `recall-gpu-kernels`.
#![no_std]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(core_intrinsics, asm_experimental_arch)
)]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]

#[cfg(not(target_arch = "nvptx64"))]
extern crate std;

/// Threads per block of the row-scan kernels (one thread per corpus row).
pub const ROW_BLOCK: u32 = 256;
/// Columns of a row staged through shared memory per step by the row-scan kernels.
pub const ROW_TILE_K: u32 = 32;
/// Queries handled by one block of the dense row-scan kernels (one accumulator per query per thread).
pub const ROW_QUERIES_PER_BLOCK: u32 = 4;
/// The warp-per-row kernels (`scan_warp_*`, `row_norms_warp`, for small launches) stage rows of at most this
/// many values in shared memory.
pub const WARP_ROW_DIM_MAX: u32 = 1024;

/// Tile of the GEMM-style similarity kernels: `GEMM_TILE` queries x `GEMM_TILE` rows per block of
/// `GEMM_THREADS` threads, `GEMM_TILE_K` columns staged per step.
pub const GEMM_TILE: u32 = 128;
pub const GEMM_TILE_K: u32 = 8;
pub const GEMM_THREADS: u32 = 256;

/// The sm_80 GEMM (`sm80_gemm_*`): the same 128 x 128 tile and 256 threads as `gemm_*`, `SGEMM_TILE_K`
/// columns per stage, `SGEMM_STAGES` stages in flight (`cp.async`). Each stage holds both operands k-major,
/// `SGEMM_STRIDE` floats per column (128 values + 4 of padding: conflict-free copies, 16-byte aligned reads).
pub const SGEMM_TILE_K: u32 = 16;
pub const SGEMM_STAGES: u32 = 3;
pub const SGEMM_STRIDE: u32 = GEMM_TILE + 4;

/// Dynamic shared memory of one `sm80_gemm_*` block with `tile_k` columns per stage and `stages` stages.
pub const fn sgemm_shared_bytes(tile_k: u32, stages: u32) -> u32 {
    stages * 2 * tile_k * SGEMM_STRIDE * 4
}

/// Queries of a block tile of the sm_80 GEMM whose 8 warps stand `qw` along the queries (4: `sm80_gemm_*`, the
/// 128 x 128 tile; 2: `sm80_gemm_q64_*`, 64 queries x 256 rows; 1: `sm80_gemm_q32_*`, 32 x 512). Every warp
/// computes a 32 x 64 warp tile, so the three shapes differ only in how much of a tile few queries leave idle.
pub const fn sgemm_tile_queries(qw: u32) -> u32 {
    32 * qw
}

/// Corpus rows of a block tile of the sm_80 GEMM with `qw` warps along the queries ([`sgemm_tile_queries`]).
pub const fn sgemm_tile_rows(qw: u32) -> u32 {
    64 * (8 / qw)
}

/// Dynamic shared memory of one block of the sm_80 GEMM with `qw` warps along the queries: `SGEMM_STAGES`
/// stages of `SGEMM_TILE_K` columns, each operand k-major with 4 floats of padding per column (50,688 bytes for
/// 4, [`sgemm_shared_bytes`]; 62,976 for 2; 105,984 for 1).
pub const fn sgemm_tile_shared_bytes(qw: u32) -> u32 {
    SGEMM_STAGES * SGEMM_TILE_K * (sgemm_tile_queries(qw) + 4 + sgemm_tile_rows(qw) + 4) * 4
}
const _: () = assert!(sgemm_tile_shared_bytes(4) == sgemm_shared_bytes(SGEMM_TILE_K, SGEMM_STAGES));

/// Threads per block of the top-k selection kernels, and elements each thread reads per pass.
pub const SELECT_BLOCK: u32 = 256;
pub const SELECT_ITEMS: u32 = 16;
/// Bins of the radix-select histogram (11-bit digits of the 64-bit pair key).
pub const SELECT_BINS: u32 = 2048;
/// Radix-select passes over the 64-bit key (11, 11, 11, 11, 11 and 9 bits).
pub const SELECT_PASSES: u32 = 6;

/// The similarity metrics, as the kernels number them (`docs/numerics.md`, "Scores by metric").
pub const METRIC_DOT: u32 = 0;
pub const METRIC_COSINE: u32 = 1;
pub const METRIC_L2: u32 = 2;

/// `row_norms_f32`: `out[r] = sqrt(sum_k x[r][k] * x[r][k])`, the sum one FMA chain over `k` ascending.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowNormsParams {
    /// `n_rows * dim` f32, row-major.
    pub x: u64,
    /// `n_rows` f32.
    pub out: u64,
    pub n_rows: u32,
    pub dim: u32,
}

/// The similarity kernels (`scan_*`, `gather_*`, `gemm_*`): one score per (query, row) pair, in the order
/// of `docs/numerics.md` for the kernel's metric.
///
/// - dense (`scan_*`, `gemm_*`): `out[q * n_rows + r]` for every query `q` and corpus row `r`.
/// - gather (`gather_*`, candidate scoring): query `q` scores the corpus rows `ids[j]` for
///   `j in offsets[q] .. offsets[q + 1]`, into `out[j]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimParams {
    /// `n_queries * dim` f32, row-major.
    pub queries: u64,
    /// `n_queries` f32 (cosine only, else 0).
    pub query_norms: u64,
    /// `n_rows * dim` f32, row-major.
    pub corpus: u64,
    /// `n_rows` f32 (cosine only, else 0).
    pub corpus_norms: u64,
    /// Scores, f32 (see above for the layout).
    pub out: u64,
    /// gather only: u32 corpus row ids, every query's list one after the other (else 0).
    pub ids: u64,
    /// gather only: `n_queries + 1` u64 offsets into `ids` (else 0).
    pub offsets: u64,
    pub n_queries: u32,
    pub n_rows: u32,
    pub dim: u32,
    pub _pad: u32,
}

/// Per-segment state of the radix select (one segment = one query's scores).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SelectState {
    /// The key bits fixed so far (the bits below the current digit are 0).
    pub prefix: u64,
    /// How many keys still to take from the group that matches `prefix` at the fixed bits.
    pub rank: u32,
    /// 1 once the selection is known: every key with `key >> shift <= prefix >> shift` is in the top k.
    pub done: u32,
    /// The shift of the last digit fixed.
    pub shift: u32,
    /// Keys written out so far by `select_collect`.
    pub count: u32,
}

/// The radix-select kernels (`select_init`, `select_histogram`, `select_choose`, `select_collect`): the `k`
/// smallest 64-bit pair keys `(score_key(score) << 32) | id` of each segment, in any order (the host sorts
/// them), with their scores.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SelectParams {
    /// f32 scores; segment `s` is `scores[offsets[s] .. offsets[s + 1]]`.
    pub scores: u64,
    /// 0: the id of position `j` of segment `s` is `j - offsets[s]`; else u32 ids, one per position.
    pub ids: u64,
    /// `n_segments + 1` u64 offsets; 0 means dense segments of `seg_len` values each.
    pub offsets: u64,
    /// `n_segments` [`SelectState`].
    pub state: u64,
    /// `n_segments * SELECT_BINS` u32.
    pub hist: u64,
    /// `n_segments * k` u64 keys out.
    pub out_keys: u64,
    /// `n_segments * k` f32 scores out.
    pub out_scores: u64,
    pub n_segments: u32,
    /// Dense segments: values per segment.
    pub seg_len: u32,
    pub k: u32,
    /// 1: higher scores first (cosine, dot); 0: lower first (l2).
    pub higher_first: u32,
    /// The pass (0 .. SELECT_PASSES) of `select_histogram` / `select_choose`.
    pub pass: u32,
    pub _pad: u32,
}

/// The largest `k` the one-pass small-k selection (`topk_small_*`) handles; larger `k` use radix select.
pub const SMALL_K_MAX: u32 = 32;
/// Up to this `k` the 16-slot variant (`topk_small_16`) runs, above it the 32-slot one.
pub const SMALL_K_16: u32 = 16;

/// One level of the small-k selection (`topk_small_16`, `topk_small_32`): block `(x, y)` reads slice `x`
/// (`256 * items` consecutive inputs) of dense segment `y`, each thread keeps its best keys in registers,
/// and the block writes its `k` smallest pair keys, ascending, to `out_keys[(y * n_slices + x) * k ..]`.
/// Inputs are f32 scores (key `score_key(score) << 32 | position`) or, for later levels, such keys.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TopkSmallParams {
    /// `n_segments * seg_len` f32 scores (`keys_in == 0`) or u64 keys (`keys_in == 1`).
    pub input: u64,
    /// `n_segments * n_slices * k` u64 keys out.
    pub out_keys: u64,
    /// 0, or (last level, `n_slices == 1`) `n_segments * k` f32: the score of each selected key, read from
    /// `scores` at the key's position.
    pub out_scores: u64,
    /// The first level's f32 scores, `n_segments * score_seg_len` (read only when `out_scores != 0`).
    pub scores: u64,
    pub n_segments: u32,
    /// Inputs per segment.
    pub seg_len: u32,
    pub score_seg_len: u32,
    pub k: u32,
    /// Inputs per thread: a block covers `256 * items` inputs of its segment.
    pub items: u32,
    pub n_slices: u32,
    pub keys_in: u32,
    /// 1: higher scores first (cosine, dot); 0: lower first (l2).
    pub higher_first: u32,
    /// 0, or `n_segments` u32: segment `s` holds only its first `min(counts[s], seg_len)` inputs, and a
    /// count above `seg_len` (the filter's candidates overflowed) makes the block write zero keys, which the
    /// host takes as "select again by radix".
    pub counts: u64,
}

/// Threshold selection for small k over long dense segments (`topk_group_min`, then `topk_small` over the
/// group minima, then `topk_filter`, then `topk_small` over the candidates; `docs/numerics.md`, "Top-k").
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TopkFilterParams {
    /// `n_segments * seg_len` f32 scores.
    pub scores: u64,
    /// `topk_group_min`: out, `n_segments * n_groups` u64, the smallest pair key of each group.
    pub group_min: u64,
    /// `topk_filter`: in, `n_segments * k` u64, ascending; the last of each segment's is its threshold.
    pub threshold: u64,
    /// `topk_filter`: out, `n_segments * cap` u64 candidate keys (every key at or below the threshold).
    pub cand: u64,
    /// `topk_filter`: `n_segments` u32 counters, zero before the launch.
    pub counts: u64,
    pub n_segments: u32,
    pub seg_len: u32,
    /// Scores per warp-group (a multiple of 32); groups per segment `ceil(seg_len / group_len)`.
    pub group_len: u32,
    pub n_groups: u32,
    pub k: u32,
    pub cap: u32,
    pub higher_first: u32,
    pub _pad: u32,
}

/// Tensor-core tiles of fast mode (`tc_gemm_*`, `tc_knn_*`): [`TC_TILE_Q`] queries x [`TC_TILE_R`] corpus rows
/// per block of [`TC_THREADS`] threads (8 warps of 64 x 64), [`TC_TILE_K`] columns per step, [`TC_STAGES`]
/// steps in the shared-memory ring.
pub const TC_TILE_Q: u32 = 128;
pub const TC_TILE_R: u32 = 256;
pub const TC_TILE_K: u32 = 32;
pub const TC_STAGES: u32 = 3;
pub const TC_THREADS: u32 = 256;
/// Shared row stride of a fast-mode operand tile, in 16-bit values (32 columns and 8 of padding: the eight
/// 16-byte row pieces one `ldmatrix` phase reads fall in eight different bank groups).
pub const TC_SROW: u32 = 40;
/// Dynamic shared memory of `tc_gemm_*`: the ring of [`TC_STAGES`] query and corpus tiles.
pub const TC_PIPE_BYTES: u32 = TC_STAGES * (TC_TILE_Q + TC_TILE_R) * TC_SROW * 2;
/// Fast-mode operands are 16-bit rows padded with zeros to a multiple of this many columns.
pub const TC_LD_ALIGN: u32 = 32;
/// The largest `k` of the fused fast-mode knn (`tc_knn_*`).
pub const TC_KNN_K_MAX: u32 = 32;
/// Candidates per query that one filter round of `tc_knn_*` can hold (more start another round).
pub const TC_KNN_CAP: u32 = 32;

/// Dynamic shared memory of one `tc_knn_*` block for top-`k`: the ring, then per query of the tile its sorted
/// list (`k` keys, `k` scores), its candidates ([`TC_KNN_CAP`] keys and scores), its threshold key, candidate
/// count, norm and inverse norm; then per corpus row of the tile its norm and inverse norm.
pub const fn tc_knn_shared_bytes(k: u32) -> u32 {
    TC_PIPE_BYTES + TC_TILE_Q * (12 * k + 12 * TC_KNN_CAP + 20) + TC_TILE_R * 8
}

/// Fast mode on Hopper (`sm90a_*`, only in the bundle's sm_90a image): the tiles of [`TC_TILE_Q`] x
/// [`TC_TILE_R`] on warpgroup MMA (`wgmma`), [`H_TILE_K`] columns (64 bytes, one row of the 64-byte
/// swizzle) per step, [`H_STAGES`] steps in the shared-memory ring.
pub const H_TILE_K: u32 = 32;
pub const H_STAGES: u32 = 6;
/// Dynamic shared memory of `sm90a_gemm_*`: the ring, plus 1,024 bytes to align it to 1,024 bytes (the
/// swizzle's pattern repeats every 512).
pub const H_PIPE_BYTES: u32 = H_STAGES * (TC_TILE_Q + TC_TILE_R) * H_TILE_K * 2 + 1024;
/// Candidates per query that one filter round of `sm90a_knn_*` can hold (fewer than [`TC_KNN_CAP`]: its
/// ring is larger).
pub const H_KNN_CAP: u32 = 16;

/// Shared bytes at the end of an `sm90a_knn_*` block's shared memory for its copies' barriers (one 8-byte
/// `mbarrier` per stage).
pub const H_KNN_BARRIER_BYTES: u32 = 8 * H_STAGES;

/// List heads each split publishes per query in `TcKnnParams::heads`: `ceil(k / n_splits)`, so that a query's
/// splits publish at least `k` between them (1 when `n_splits >= k`).
pub const fn tc_knn_heads_per_split(k: u32, n_splits: u32) -> u32 {
    if n_splits >= k {
        1
    } else if n_splits == 0 {
        k
    } else {
        k.div_ceil(n_splits)
    }
}

/// Dynamic shared memory of one `sm90a_knn_*` block for top-`k`: as [`tc_knn_shared_bytes`], with the
/// ring of [`H_PIPE_BYTES`] and [`H_KNN_CAP`] candidates per query, then the barriers
/// ([`H_KNN_BARRIER_BYTES`]).
pub const fn h_knn_shared_bytes(k: u32) -> u32 {
    H_PIPE_BYTES + TC_TILE_Q * (12 * k + 12 * H_KNN_CAP + 20) + TC_TILE_R * 8 + H_KNN_BARRIER_BYTES
}
// 227 KiB: the most dynamic shared memory one block of an sm_90 device may opt into.
const _: () = assert!(
    h_knn_shared_bytes(TC_KNN_K_MAX) <= 232_448,
    "sm90a_knn must fit an H100 SM"
);

/// Fast mode (`tc_gemm_{f16,bf16}_{dot,cosine,l2}`, sm_80 and newer): scores of every query against every
/// row from 16-bit operands on tensor cores with f32 accumulation, `out[q * n_rows + r]`. Cosine and l2 use
/// the f32 norms of the original rows: `dot / (nq * nc)` and `max(nq * nq + nc * nc - 2 * dot, 0)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcGemmParams {
    /// `n_queries * ld` 16-bit values (f16 or bf16 as the kernel's name says), zero-padded rows.
    pub queries: u64,
    /// `n_queries` f32 (cosine and l2, else 0).
    pub query_norms: u64,
    /// `n_rows * ld` 16-bit values, zero-padded rows.
    pub corpus: u64,
    /// `n_rows` f32 (cosine and l2, else 0).
    pub corpus_norms: u64,
    /// `n_queries * n_rows` f32.
    pub out: u64,
    pub n_queries: u32,
    pub n_rows: u32,
    /// Row stride of both operands in 16-bit values, a multiple of [`TC_LD_ALIGN`].
    pub ld: u32,
    pub _pad: u32,
}

/// Fast-mode knn with top-k fused (`tc_knn_{f16,bf16}_{dot,cosine,l2}`, sm_80 and newer): the scores of
/// `tc_gemm_*` (the same main loop, so the same bits), never written out. Block `(x, y)` takes queries
/// `TC_TILE_Q * x ..` and the row tiles `y, y + n_splits, ..` of `TC_TILE_R` rows; it keeps each query's `k`
/// best pair keys `(score_key(score) << 32) | row` below the query's shared threshold in shared memory and
/// writes them, ascending, with their scores to `out_keys[(q * n_splits + y) * k ..]` and `out_scores` (key
/// `u64::MAX` where fewer than `k` were kept). Every pair of the query's `k` best over all rows is in its
/// split's list. `tc_knn_merge` then merges the `n_splits` lists of each query.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcKnnParams {
    /// `n_queries * ld` 16-bit values, zero-padded rows.
    pub queries: u64,
    /// `n_queries` f32 (cosine and l2, else 0).
    pub query_norms: u64,
    /// `n_rows * ld` 16-bit values, zero-padded rows.
    pub corpus: u64,
    /// `n_rows` f32 (cosine and l2, else 0).
    pub corpus_norms: u64,
    /// `n_queries * n_splits * k` u64 out.
    pub out_keys: u64,
    /// `n_queries * n_splits * k` f32 out.
    pub out_scores: u64,
    /// `n_queries` u64, `u64::MAX` at launch: per query the smallest `k`-th key of any block's full list so
    /// far (atomic minimum), which every block filters against as well as its own: a pair with a larger key
    /// has `k` better pairs somewhere, so no split needs it.
    pub thresholds: u64,
    /// `n_queries * n_splits * h` u64 with `h = tc_knn_heads_per_split(k, n_splits)`, `u64::MAX` at launch:
    /// `[(q * n_splits + s) * h ..][..h]` the `h` best keys of split `s`'s list for query `q` so far. The
    /// splits' heads of a query are at least `k` distinct pairs, so their `k`-th smallest is the key of a pair
    /// with `k - 1` better ones and bounds the query like `thresholds`; when the answer's `k` pairs lie in
    /// different splits, it is close to the answer's own `k`-th key. Unused (the kernels skip the heads) when a
    /// query would have more than 256.
    pub heads: u64,
    /// `sm90a_knn_*` only (`tc_knn_*` ignores it): the device address of two 64-byte aligned `CUtensorMap`s
    /// of 128 bytes each, written before the launch: the queries (`n_queries` rows) and the corpus (`n_rows`
    /// rows), both `ld` columns of row stride `ld`, in boxes of 32 columns by [`TC_TILE_Q`] (queries) and
    /// [`TC_TILE_R`] (corpus) rows, the 64-byte swizzle, rows past the end read as zeros.
    pub maps: u64,
    pub n_queries: u32,
    pub n_rows: u32,
    /// Row stride of both operands in 16-bit values, a multiple of [`TC_LD_ALIGN`].
    pub ld: u32,
    /// `1 <= k <= TC_KNN_K_MAX`.
    pub k: u32,
    /// The grid's `y`: at most the number of row tiles.
    pub n_splits: u32,
    pub _pad: u32,
}

/// `tc_knn_merge`: block `q` (of `32 * ceil(n_lists / 32)` threads) merges query `q`'s `n_lists` ascending
/// lists of `k` keys (`keys[(q * n_lists + l) * k ..]`, scores beside them in `scores`) into its `k`
/// smallest keys, ascending, at `out_keys[q * k ..]`, with their scores at `out_scores[q * k ..]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcMergeParams {
    pub keys: u64,
    pub scores: u64,
    pub out_keys: u64,
    pub out_scores: u64,
    pub n_queries: u32,
    /// `1 <= n_lists <= 1024`.
    pub n_lists: u32,
    pub k: u32,
    pub _pad: u32,
}

/// One query against few rows, scan and top-k in one launch (`sm80_knn1_*`, sm_80 and newer: `cp.async`).
///
/// A block of `warps` warps covers `32 * warps` consecutive rows, 32 per warp, one row per lane: the warp
/// copies its rows through a ring of [`KNN1_STAGES`] shared tiles of [`KNN1_TILE`] columns, and every lane
/// runs its row's chain in the order of `docs/numerics.md` (for cosine also the query's norm chain). The
/// block writes its rows' scores and its `k` smallest pair keys. Blocks form groups of `group_blocks`; the
/// last block of a group to finish (ticket counters) merges the group's keys, and the last group's merger
/// merges the groups' keys and writes the `k` smallest, then their scores, to `out`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Knn1Params {
    /// `dim` f32: the query.
    pub query: u64,
    /// `n_rows * dim` f32, 16-byte aligned, `dim` a multiple of 4.
    pub corpus: u64,
    /// `n_rows` f32 (cosine, else 0).
    pub corpus_norms: u64,
    /// `n_rows` f32 out: every row's score.
    pub scores: u64,
    /// `(n_blocks + n_groups) * k` u64: each block's `k` smallest keys, then each group's.
    pub partial: u64,
    /// `1 + n_groups` u32 (the groups' counter, then one per group), zero before the launch; the mergers set
    /// them back to zero.
    pub ticket: u64,
    /// `2 * k` u64 out: the `k` smallest keys ascending, then each one's score (f32 bits in the low half).
    pub out: u64,
    pub n_rows: u32,
    pub dim: u32,
    pub k: u32,
    /// Warps per block: 1, 2 or 4.
    pub warps: u32,
    /// 1: higher scores first (cosine, dot); 0: lower first (l2).
    pub higher_first: u32,
    /// Blocks per merge group: the block's thread count (a merger gives each thread one list); the groups
    /// number at most that many too.
    pub group_blocks: u32,
}

/// A one-query launch's parameters with the query itself inside (`sm80_knn1q_*`, `Q =` [`KNN1_PARAM_QUERY`]):
/// `base.query` is 0 and the kernel reads the query's `base.dim <= Q` floats from `query` (the launch
/// carries them: no copy call, and no read over the bus by every block). `sm90a_knn1q_*` carry theirs in
/// [`Knn1BulkParams`].
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Knn1QueryParams<const Q: usize> {
    pub base: Knn1Params,
    pub query: [f32; Q],
}

/// Query floats `sm80_knn1q_*` carries in its parameters: 4,080 bytes of parameters in all, under the 4 KiB
/// that PTX before ISA 8.1 allows (the sm_80 .. sm_90 images use 7.0 .. 7.8).
pub const KNN1_PARAM_QUERY: usize = 1000;
const _: () = assert!(
    core::mem::size_of::<Knn1QueryParams<KNN1_PARAM_QUERY>>() <= 4096,
    "sm80_knn1's parameters must fit PTX's 4 KiB"
);
const _: () = assert!(
    core::mem::offset_of!(Knn1QueryParams<KNN1_PARAM_QUERY>, query) % 16 == 0,
    "the kernels load the parameters' query 16 bytes at a time"
);
/// Query floats `sm90a_knn1q_*` carries in its parameters (PTX ISA 8.3 allows 32 KiB, but a launch's cost
/// grows with its parameters: 6 KiB cost about a microsecond more than 4 KiB on an H100, session 16).
pub const KNN1_BULK_PARAM_QUERY: usize = 1024;

/// Columns per shared tile of `sm80_knn1_*`.
pub const KNN1_TILE: u32 = 32;
/// Tiles in flight per warp of `sm80_knn1_*`.
pub const KNN1_STAGES: u32 = 8;
/// Shared row stride of a `sm80_knn1_*` tile, in f32 (the tile's 32 columns and 4 of padding: the eight
/// 16-byte reads of one quarter-warp fall in eight different bank groups).
pub const KNN1_ROW_STRIDE: u32 = 36;

/// Dynamic shared memory of one `sm80_knn1_*` block: the query, each warp's ring, the block minima (two
/// rounds' worth) and the last-block flag.
pub const fn knn1_shared_bytes(dim: u32, warps: u32) -> u32 {
    let query = dim.div_ceil(4) * 4;
    let rings = warps * KNN1_STAGES * 32 * KNN1_ROW_STRIDE;
    (query + rings) * 4 + 2 * warps * 8 + 8
}

/// The parameters of `sm80_knn1s_*`, the one-query server: a launch of `sm80_knn1_*`'s grid whose blocks stay
/// resident and answer one query after another until the host stops it or no query comes for `idle_ns` (or
/// `life_ns` have passed since it started).
///
/// The host rings a query by writing the mailbox: `dim + 2` u64 words in mapped memory, word `i < dim` the
/// query's value `i` (f32 bits, low half), word `dim` its `k` ([`KNN1_SERVE_EXIT`] to end the server), word
/// `dim + 1` padding, every word carrying the query's number in its high half (`k` may carry the lists' mode,
/// [`SERVE_LISTS_SHIFT`]). Numbers follow one another ([`knn1_serve_next`]) from `seen`. Block 0 polls the whole
/// mailbox (each word is written and read whole, so a word with the new number holds the new value) until every
/// word carries the next number, copies the query into `query` and publishes the number in `sync`'s word 0 with
/// its `k` in word 1 (one 8-byte store); every block then runs `sm80_knn1_*`'s body on it, and each block that
/// wrote its part of the answer (once its tickets are reset) adds one to the count in word 2. The host rings the
/// next query only after it has seen every answer word of the last.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Knn1ServeParams {
    /// As for `sm80_knn1_*`, with `query` the relayed query (`serve.query`) and `k` unused (each query brings
    /// its own); `out` (2 * [`SMALL_K_MAX`] u64) is mapped host memory.
    pub base: Knn1Params,
    pub serve: ServeFields,
}

/// `sm90a_knn1s_*`: the one-query server with `sm90a_knn1_*`'s body (tensor-map copies, device merge;
/// `bulk.base` as in [`Knn1ServeParams`], `bulk.lists_out` unused: each query brings its own), the map first as
/// the copies need.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Knn1BulkServeParams {
    pub bulk: Knn1BulkParams<0>,
    pub serve: ServeFields,
}

/// What a one-query server takes besides its body's parameters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServeFields {
    /// Mapped host memory, `dim + 2` u64 (16-byte aligned): the mailbox.
    pub mailbox: u64,
    /// Device memory, `dim` f32 (16-byte aligned): the query as block 0 relays it.
    pub query: u64,
    /// Device memory, [`KNN1_SERVE_SYNC_WORDS`] u32, zero at launch: the number published and its `k` (one
    /// 8-byte word, written and read whole), the count of blocks that wrote an answer or a group's list (with the
    /// blocks' lists for the host, every block), padding; then as u64 (words 2 ..): when block 0 found the
    /// published query's mailbox complete (device clock, ns; written for device merges only), the sum over
    /// queries of the nanoseconds from a complete mailbox to its number published, the sum from a complete
    /// mailbox to answered (device merges only), the number of queries answered so, the number of queries
    /// published, and the sum from published to block 0's part done.
    pub sync: u64,
    /// Nanoseconds without a new query after which the server ends.
    pub idle_ns: u64,
    /// Nanoseconds from the server's start after which it ends at its next wait for a query.
    pub life_ns: u64,
    /// The number of the last query answered before this launch: the first one it answers is the next.
    pub seen: u32,
    pub _pad: u32,
}

/// The `k` that ends `sm80_knn1s_*` (and the number block 0 publishes to end the other blocks).
pub const KNN1_SERVE_EXIT: u32 = u32::MAX;

/// A server's `k` word (`sm90a_knn1s_*` only) carries the query's `Knn1BulkParams::lists_out` from this bit
/// on ([`LISTS_OUT_BLOCKS`], [`LISTS_OUT_GROUPS`]; 0 for the device's merge); the `k` itself is the word's low
/// 16 bits.
pub const SERVE_LISTS_SHIFT: u32 = 16;
const _: () = assert!(
    SMALL_K_MAX < 1 << SERVE_LISTS_SHIFT,
    "the lists' mode is clear of any k"
);

/// u32 words of `ServeFields::sync`.
pub const KNN1_SERVE_SYNC_WORDS: usize = 16;

/// The number of the query after the one numbered `n`: `n + 1`, skipping 0 (the device's words at launch) and
/// [`KNN1_SERVE_EXIT`].
pub const fn knn1_serve_next(n: u32) -> u32 {
    match n.wrapping_add(1) {
        0 | KNN1_SERVE_EXIT => 1,
        m => m,
    }
}

/// Dynamic shared memory of one `sm80_knn1s_*` block: `sm80_knn1_*`'s, then 16 bytes (aligned to 16) whose first
/// word carries a query's `k` from the thread that read it to the others.
pub const fn knn1_serve_shared_bytes(dim: u32, warps: u32) -> u32 {
    knn1_shared_bytes(dim, warps).div_ceil(16) * 16 + 16
}

/// Warps of an `sm90a_knn1_*` block where its blocks fit the SMs one each: warp 0 runs the rows' chains,
/// warp 1 queues the tiles' copies, and the others stage the query from the parameters and leave. Eight
/// while the query came through the constant cache, whose misses only overlapped across warps (session 16:
/// 1,000 rows 16.3-17.3 us with 4 warps, 15.7-15.9 with 8 on an H200); since the query is loaded through the
/// parameter's generic address, 4 took 14.7-15.4 us against 15.1-15.7 with 8 in four alternated rounds
/// (session 22, run G).
pub const KNN1_BULK_WARPS: u32 = 4;
/// Bytes of one `sm90a_knn1_*` tile: 32 rows x 32 columns of f32, one tensor-map copy, stored in the 128-byte
/// swizzle (row `r`'s 16-byte piece `c` at piece `c ^ (r % 8)` of the tile's row `r`).
pub const KNN1_BULK_TILE_BYTES: u32 = 32 * 32 * 4;
/// The most tiles in an `sm90a_knn1_*` block's ring: 48 (192 KiB) hold the 32 whole rows of up to 1,536
/// dimensions, so a block that has an SM to itself has every copy in flight at once.
pub const KNN1_BULK_MAX_SLOTS: u32 = 48;
/// The fewest tiles in an `sm90a_knn1_*` ring: its merges stage up to 32 lists of 32 keys (8 KiB) there.
pub const KNN1_BULK_MIN_SLOTS: u32 = 2;

/// A one-query launch's parameters for `sm90a_knn1_*` (`Q = 0`: the query in memory at `base.query`) and
/// `sm90a_knn1q_*` (`Q = `[`KNN1_BULK_PARAM_QUERY`]: the query inside, `base.query` 0).
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Knn1BulkParams<const Q: usize> {
    /// The corpus's encoded tensor map (`CUtensorMap`: `n_rows x dim` f32, boxes of 32 x 32, 128-byte
    /// swizzle), read by the copies from the parameter itself. The kernels' parameter is declared 64-byte
    /// aligned, as the tensor memory accelerator needs (`cargo xtask build-kernels` raises rustc's 16).
    pub map: [u64; 16],
    pub base: Knn1Params,
    /// Tiles in the block's ring, [`KNN1_BULK_MIN_SLOTS`] to [`KNN1_BULK_MAX_SLOTS`].
    pub slots: u32,
    /// Which lists the host merges: [`LISTS_OUT_BLOCKS`], [`LISTS_OUT_GROUPS`], or 0 (none: the tickets and
    /// mergers of [`Knn1Params`] write the answer).
    pub lists_out: u32,
    pub _pad: [u32; 2],
    pub query: [f32; Q],
}

/// `Knn1BulkParams::lists_out`: every block writes its `k` smallest keys ascending, then their scores' bits, to
/// `base.out[2 k block ..]` ([`KNN1_EMPTY_KEY`] where the block has fewer than `k` rows) and nothing merges on
/// the device (no tickets, no fence): the host merges the lists.
pub const LISTS_OUT_BLOCKS: u32 = 1;
/// `Knn1BulkParams::lists_out`: each group's merger writes the group's `k` smallest keys, then their scores'
/// bits, to `base.out[2 k group ..]` (as the last merger writes the answer) and no block merges the groups: the
/// host merges the groups' lists.
pub const LISTS_OUT_GROUPS: u32 = 2;

/// The key a block writes for a place in its list that no row fills (`Knn1BulkParams::lists_out`): never a
/// row's key (a row id is below `u32::MAX - 1`) and never the host's "not yet written" word (`u64::MAX`).
pub const KNN1_EMPTY_KEY: u64 = u64::MAX - 1;
const _: () = assert!(
    core::mem::offset_of!(Knn1BulkParams<KNN1_BULK_PARAM_QUERY>, query) % 16 == 0,
    "the kernels load the parameters' query 16 bytes at a time"
);

/// f32 of `sm90a_knn1_*`'s query area: `dim` rounded up to whole tiles (the last tile's loads stay inside).
pub const fn knn1_bulk_query_floats(dim: u32) -> u32 {
    dim.div_ceil(32) * 32
}

/// Dynamic shared memory of one `sm90a_knn1_*` block with `slots` tiles: up to 1,023 bytes to align the ring
/// to 1,024 (the swizzle's period), the ring, the query, a full and an empty barrier per tile, two minima
/// and the last-block flag.
pub const fn knn1_bulk_shared_bytes(dim: u32, slots: u32) -> u32 {
    1024 + slots * KNN1_BULK_TILE_BYTES + knn1_bulk_query_floats(dim) * 4 + slots * 16 + 2 * 8 + 8
}

/// Dynamic shared memory of one `sm90a_knn1s_*` block with `slots` tiles: `sm90a_knn1_*`'s, then (aligned to 16)
/// [`KNN1_BULK_SERVE_KEYS_BYTES`] where its merges stage their lists (its ring holds the next query's tiles
/// meanwhile), then 16 bytes whose first word carries a query's `k` from the thread that read it to the others.
pub const fn knn1_bulk_serve_shared_bytes(dim: u32, slots: u32) -> u32 {
    knn1_bulk_shared_bytes(dim, slots).div_ceil(16) * 16 + KNN1_BULK_SERVE_KEYS_BYTES + 16
}

/// The merge lists' room in an `sm90a_knn1s_*` block: 32 lists of up to 32 keys.
pub const KNN1_BULK_SERVE_KEYS_BYTES: u32 = 32 * 32 * 8;

/// One query against many rows (`sm80_scan1_*`, sm_80 and newer: `cp.async`): a persistent scan, scores and,
/// for `k >= 1`, top-k in one launch.
///
/// The grid has about one block per SM; global warp `gw = block * warps + warp` of `W = grid * warps` owns the
/// groups of 32 rows `gw, gw + W, gw + 2W, ..` (rows `32 g ..`), lane `l` one row of a group. The warp copies
/// its groups through one ring of [`SCAN1_TILE`] columns per stage that runs on across groups (16-byte
/// `cp.async`, 4 rows of 128 bytes per instruction), and every lane runs its row's chain in the order of
/// `docs/numerics.md` (for cosine also the query's norm chain, the steps of `row_norms`). With `k == 0` every
/// score is written; with `k >= 1` each warp keeps its `k` smallest pair keys (`score_key << 32 | row`) in
/// registers (lane `i` the `i`-th), writing the score of every row that enters its list; the block merges its
/// warps' lists, and the last block to finish (ticket) merges the blocks' lists into `out`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scan1Params {
    /// `dim` f32: the query, 16-byte aligned.
    pub query: u64,
    /// One f32, the query's norm (cosine; computed in the kernel when 0).
    pub query_norm: u64,
    /// `n_rows * dim` f32, 16-byte aligned, `dim` a multiple of 4.
    pub corpus: u64,
    /// `n_rows` f32 (cosine, else 0).
    pub corpus_norms: u64,
    /// `n_rows` f32 out: every row's score (`k == 0`), or those of the rows that entered a warp's list.
    pub scores: u64,
    /// `grid * k` u64: each block's `k` smallest keys, ascending (`k >= 1`).
    pub partial: u64,
    /// One u32, zero before the launch; the last block sets it back to zero (`k >= 1`).
    pub ticket: u64,
    /// `2 * k` u64 out: the `k` smallest keys ascending, then each one's score (f32 bits in the low half).
    pub out: u64,
    pub n_rows: u32,
    pub dim: u32,
    /// 0: scores only; `1 ..= SMALL_K_MAX`: top-k too (`k <= n_rows`).
    pub k: u32,
    /// Warps per block, `1 ..= SCAN1_MAX_WARPS`.
    pub warps: u32,
    /// 1: higher scores first (cosine, dot); 0: lower first (l2).
    pub higher_first: u32,
    /// 0, or how many tiles ahead of its copies each warp asks the L2 for its rows (`prefetch.global.L2`).
    pub l2_ahead: u32,
}

/// Columns per ring stage of `sm80_scan1_*`.
pub const SCAN1_TILE: u32 = 32;
/// Shared row stride of a `sm80_scan1_*` stage, in f32 (32 columns and 4 of padding, as `KNN1_ROW_STRIDE`).
pub const SCAN1_ROW_STRIDE: u32 = 36;
/// The most warps per block of `sm80_scan1_*`.
pub const SCAN1_MAX_WARPS: u32 = 32;

/// Dynamic shared memory of one `sm80_scan1_*` block with `stages` ring stages: the query, each warp's ring,
/// the warps' lists (32 u64 each) and the last-block flag.
pub const fn scan1_shared_bytes(dim: u32, warps: u32, stages: u32) -> u32 {
    let query = dim.div_ceil(4) * 4;
    let rings = warps * stages * 32 * SCAN1_ROW_STRIDE;
    (query + rings) * 4 + warps * 32 * 8 + 16
}

/// Candidate scoring, gather, score and top-k in one launch (`sm80_cand_*`, sm_80 and newer: `cp.async`).
///
/// Block `(q, x)` takes query `q`'s candidates `ids[offsets[q] + CAND_SLICE * x ..]`, at most [`CAND_SLICE`]
/// of them (`count`): warp `w` owns the groups of 32 candidates `w, w + CAND_WARPS, ..`, lane `l` one
/// candidate of a group. The warp copies its group's 32 rows through a ring of [`CAND_STAGES`] shared tiles
/// of [`CAND_TILE`] columns (coalesced 16-byte `cp.async`, the ring running on across groups), and every lane
/// runs its candidate's chain in the order of `docs/numerics.md` (for cosine the query's norm chain beside
/// it). The block then writes its `min(k, count)` smallest pair keys `(score_key << 32) | id`, ascending, to
/// `out_keys[(q * n_slices + x) * k ..]` and their scores to the same positions of `out_scores`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CandParams {
    /// `n_queries * dim` f32, row-major.
    pub queries: u64,
    /// `n_rows * dim` f32, 16-byte aligned, `dim` a multiple of 4.
    pub corpus: u64,
    /// `n_rows` f32 (cosine, else 0).
    pub corpus_norms: u64,
    /// u32 corpus row ids, every query's list one after the other; every id below `n_rows`.
    pub ids: u64,
    /// `n_queries + 1` u64 offsets into `ids`, non-decreasing.
    pub offsets: u64,
    /// `n_queries * n_slices * k` u64 keys out.
    pub out_keys: u64,
    /// `n_queries * n_slices * k` f32 scores out.
    pub out_scores: u64,
    pub dim: u32,
    /// `1 <= k <= CAND_K_MAX`.
    pub k: u32,
    /// Slices per query: the grid's `y`.
    pub n_slices: u32,
    /// 1: higher scores first (cosine, dot); 0: lower first (l2).
    pub higher_first: u32,
    /// Candidates per slice, `1 ..= CAND_SLICE`: block `(q, x)` scores positions `x * slice ..` of list `q`.
    /// Shorter than `CAND_SLICE` when few lists would leave most SMs idle (the launcher's choice).
    pub slice: u32,
    /// Padding to a multiple of 8 bytes.
    pub _pad: u32,
}

/// Candidates per block of `sm80_cand_*` (a longer list takes several blocks, merged on the host).
pub const CAND_SLICE: u32 = 1024;
/// Warps per block of `sm80_cand_*`.
pub const CAND_WARPS: u32 = 4;
/// Columns per shared tile of `sm80_cand_*`.
pub const CAND_TILE: u32 = 32;
/// Tiles in flight per warp of `sm80_cand_*`.
pub const CAND_STAGES: u32 = 4;
/// Shared row stride of a `sm80_cand_*` tile, in f32 (32 columns and 4 of padding, as `KNN1_ROW_STRIDE`).
pub const CAND_ROW_STRIDE: u32 = 36;
/// The largest `k` of `sm80_cand_*` (one block-wide minimum per rank).
pub const CAND_K_MAX: u32 = 64;

/// Dynamic shared memory of one `sm80_cand_*` block: the query, each warp's ring, the slice's ids and
/// scores, and the block minima (two rounds' worth).
pub const fn cand_shared_bytes(dim: u32) -> u32 {
    let query = dim.div_ceil(4) * 4;
    let rings = CAND_WARPS * CAND_STAGES * 32 * CAND_ROW_STRIDE;
    (query + rings + 2 * CAND_SLICE) * 4 + 2 * CAND_WARPS * 8
}

/// `to_half_rows` (f32 or 16-bit rows to zero-padded 16-bit rows) and `widen_half_rows` (16-bit rows to
/// f32 rows, exact).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HalfRowsParams {
    /// `to_half_rows`: `n_rows * dim` f32 (`src_f32 == 1`) or 16-bit values; `widen_half_rows`: 16-bit.
    pub src: u64,
    /// `to_half_rows`: `n_rows * ld` 16-bit values; `widen_half_rows`: `n_rows * dim` f32.
    pub dst: u64,
    pub n_rows: u32,
    pub dim: u32,
    pub ld: u32,
    pub src_f32: u32,
    /// 1: the 16-bit values are bf16; 0: f16.
    pub bf16: u32,
    pub _pad: u32,
}

/// Threads per block of the graph and clustering kernels.
pub const GRAPH_BLOCK: u32 = 256;

/// `spread_hop`: one hop of activation spreading in the pull order of `docs/numerics.md`, one warp per
/// target node.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpreadHopParams {
    /// `n_nodes + 1` u64: target `v`'s in-edges are `in_ptr[v] .. in_ptr[v + 1]`.
    pub in_ptr: u64,
    /// u32 source of each in-edge: each target's in-edges in pull order (by source, then original position),
    /// except a hub's, which are stored group by group for `spread_hub` (the launcher's `hub_order`).
    pub in_src: u64,
    /// f32 weight of each in-edge, in the order of `in_src`.
    pub in_w: u64,
    /// f32 activations of the previous hop, `n_nodes`.
    pub prev: u64,
    /// f32 activations of this hop, `n_nodes` (written).
    pub next: u64,
    /// f32 accumulated activations, `n_nodes` (updated).
    pub total: u64,
    /// u32: `u32::MAX - h` for the first hop `h` at which a value became infinite (`atomicMax`), 0 if none
    /// (so a zeroed word means none).
    pub overflow_hop: u64,
    /// u32 node ids by in-degree class, one list after the other: the hubs (at least `SPREAD_HUB_MIN`
    /// in-edges, a block each), then nodes with more than 16 in-edges (a warp each), then 9 to 16 (two per
    /// warp), then at most 8 (four per warp).
    pub nodes: u64,
    /// 0 (read each node's in-edges from `in_ptr`), or, for the dense hop over the graph's own lists, one u64
    /// per entry of `nodes`: `start << 16 | count` of that node's in-edges (hub entries unused). Read beside the
    /// node id, so the in-edge positions do not wait for it.
    pub spans: u64,
    /// f32, 32 per entry of the hub list: each hub's 32 lane-chain sums, written by its blocks.
    pub hub_lanes: u64,
    /// u32, one per entry of the hub list, zero between hops: the hub's blocks take tickets, the last finishes it.
    pub hub_tickets: u64,
    pub n_nodes: u32,
    pub hop: u32,
    pub decay: f32,
    pub threshold: f32,
    /// Lengths of the four lists in `nodes`: hubs, 32-lane, 16-lane, 8-lane (used when `counts` is 0).
    pub n_class: [u32; 4],
    /// Where each class's list starts in `nodes`.
    pub class_off: [u32; 4],
    /// 0: the lists hold `n_class` nodes and the grid covers them exactly (the dense hop). Otherwise the address
    /// of four device u32 (the lengths, written by `spread_collect`: the sparse hop) and the grid strides over
    /// the lists' blocks.
    pub counts: u64,
}

/// The u32 counters of the sparse hop (`SpreadFrontierParams::counters`): `[SPREAD_CTR_ACTIVE]` active
/// sources listed, `[SPREAD_CTR_TOUCHED + c]` touched targets of in-degree class `c`, and at
/// `[SPREAD_CTR_EDGES]` (8-byte aligned) a u64: the out-edges of the listed sources.
pub const SPREAD_COUNTERS: usize = 8;
/// See [`SPREAD_COUNTERS`].
pub const SPREAD_CTR_ACTIVE: usize = 0;
/// See [`SPREAD_COUNTERS`].
pub const SPREAD_CTR_TOUCHED: usize = 1;
/// See [`SPREAD_COUNTERS`].
pub const SPREAD_CTR_EDGES: usize = 6;
/// Threads per block of `spread_frontier` and `spread_collect` (one node each, 32 warps).
pub const SPREAD_SCAN_BLOCK: u32 = 1024;

/// `spread_seed`, `spread_frontier`, `spread_mark` and `spread_collect`: the sparse frontier of a hop.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpreadFrontierParams {
    /// f32 activations of the previous hop, `n_nodes` (`spread_seed` writes the seeds into it).
    pub prev: u64,
    /// f32 accumulated activations, `n_nodes` (`spread_seed` writes the seeds into it).
    pub total: u64,
    /// `spread_seed`: `count` u32 node ids, then `count` f32 values (as bits), distinct nodes.
    pub seeds: u64,
    /// `n_nodes + 1` u64: source `u`'s out-edges are `out_ptr[u] .. out_ptr[u + 1]`.
    pub out_ptr: u64,
    /// u32 target of each out-edge.
    pub out_dst: u64,
    /// `n_nodes + 1` u64: the pull-order offsets (for the in-degree class of a touched target).
    pub in_ptr: u64,
    /// u32 list of active sources, capacity `n_nodes`.
    pub active: u64,
    /// u32 bitmap of touched targets, `ceil(n_nodes / 32)` words, zero before `spread_mark`.
    pub mark: u64,
    /// u32 touched targets by in-degree class, class `c` from `class_off[c]` (capacity: that class's size).
    pub touched: u64,
    /// `SPREAD_COUNTERS` u32 (see there), zero before the first kernel of a hop.
    pub counters: u64,
    pub n_nodes: u32,
    /// `spread_seed`: the number of seeds.
    pub count: u32,
    pub class_off: [u32; 4],
}

/// Nodes with at least this many in-edges take the block-staged hub path of `spread_hop`. Below it a node's
/// in-edge count fits the 16 bits of a `SpreadHopParams::spans` entry.
pub const SPREAD_HUB_MIN: u64 = 4096;
const _: () = assert!(SPREAD_HUB_MIN <= 1 << 16, "span counts are 16 bits");
/// Nodes of the 32-lane class (17 in-edges up to the hubs) per warp of `spread_hop`, their loads interleaved.
pub const SPREAD_PAIR: u32 = 2;
/// Rounds of `spread_hop`'s 16- and 8-lane classes per warp (2 or 4 nodes a round), all rounds' loads issued
/// before any round's sum: the hop is bound by dependent memory latency, not bytes.
pub const SPREAD_SMALL_ROUNDS: u32 = 4;

/// Blocks of one dense `spread_hop` over class lists of these sizes (hubs, 32-, 16-, 8-lane): 32 blocks per
/// hub (one per lane chain), then the warp classes at `SPREAD_PAIR`, `2 * SPREAD_SMALL_ROUNDS` and `4 * SPREAD_SMALL_ROUNDS`
/// nodes per warp. The kernel and its launcher both use this.
pub const fn spread_hop_blocks(n_class: [u32; 4]) -> [u32; 4] {
    let warps = GRAPH_BLOCK / 32;
    [
        n_class[0] * 32,
        n_class[1].div_ceil(SPREAD_PAIR * warps),
        n_class[2].div_ceil(2 * SPREAD_SMALL_ROUNDS * warps),
        n_class[3].div_ceil(4 * SPREAD_SMALL_ROUNDS * warps),
    ]
}
/// In-edge positions a hub block stages per step (a multiple of 32, so that a chunk starts at chain 0 of the
/// block's chains).
pub const SPREAD_HUB_CHUNK: u32 = 2048;
/// About this many in-edges per block of `spread_hub`: see [`spread_hub_groups`].
pub const SPREAD_HUB_EDGES: u64 = 8192;

/// The blocks `spread_hub` gives a hub of `len` in-edges: the power of two (1 to 32) at or above
/// `len / SPREAD_HUB_EDGES`. Block `g` of `G` runs the lane chains `g, g + G, ...` (`32 / G` of them) side by
/// side, so a small hub is one block reading its in-edges whole (coalesced) and the largest are 32 blocks of
/// one chain each, whose chains of `len / 32` dependent FMAs are the longest path of a hop.
pub const fn spread_hub_groups(len: u64) -> u32 {
    let want = len.div_ceil(SPREAD_HUB_EDGES);
    let mut g = 1;
    while g < 32 && (g as u64) < want {
        g *= 2;
    }
    g
}

/// Where group `g` of a hub of `len` in-edges keeps its slots in the hub's device order (the launcher's
/// `hub_order`: group by group, group `g` holding positions `g, g + G, g + 2 G, ...` with `G =
/// spread_hub_groups(len)`): `(first, slots)`, its run's offset from the hub's first in-edge and its length,
/// `len / G` slots a group and one more for the first `len % G`. For `g < G <= len`.
pub const fn spread_hub_run(len: u64, g: u32) -> (u64, u64) {
    let groups = spread_hub_groups(len) as u64;
    let g = g as u64;
    let (q, r) = (len / groups, len % groups);
    if g < r {
        (g * (q + 1), q + 1)
    } else {
        (g * q + r, q)
    }
}

/// `fill_u64`: `ptr[i] = value` for `i < len`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FillParams {
    pub ptr: u64,
    pub len: u64,
    pub value: u64,
}

/// `noise_radii`: `out[i] = math::box_muller_radius(i << 9)` for `i < len` (every radius clip-and-noise can
/// produce, for the diff-test).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RadiiParams {
    /// f32 `len`, out.
    pub out: u64,
    pub len: u32,
    pub _pad: u32,
}

/// The number of distinct Box-Muller radii: `uniform_open` reads 23 bits of its word.
pub const NOISE_RADII: u32 = 1 << 23;

/// `kmeans_inertia_blocks`: per block of `INERTIA_BLOCK` points (index order), the f64 sum of each point's
/// distance to its centroid, taken from the point's argmin key.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InertiaParams {
    /// u64 argmin key per point: `(score_key(dist) << 32) | centroid`.
    pub keys: u64,
    /// f64 per block (written).
    pub block_sums: u64,
    pub n_points: u32,
    pub block: u32,
}

/// `kmeans_update`: centroid `c`, dimension `j` = the mean of the members' values in member order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CentroidParams {
    /// f32 points, `n_points * dim`.
    pub points: u64,
    /// u32 point ids grouped by cluster, ascending within a cluster.
    pub members: u64,
    /// u32 per cluster + 1: cluster `c`'s members are `members[offsets[c] .. offsets[c + 1]]`.
    pub offsets: u64,
    /// f32 centroids, `n_clusters * dim` (updated; a cluster without members keeps its centroid).
    pub centroids: u64,
    pub n_clusters: u32,
    pub dim: u32,
}

/// `clip_noise`: `out[r][j] = fma(sigma, g(r, j), y)` with `y = x[r][j] * (clip / norm_r)` when
/// `norm_r > clip`, else `x[r][j]` (`docs/numerics.md`, "Clip-and-noise"); one thread per block of 4 values.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NoiseParams {
    /// f32 `n_rows * dim`, row-major.
    pub x: u64,
    /// f32 row norms (as `row_norms_f32` computes them), `n_rows`; `clip_noise` only (`sm80_clip_noise_rows`
    /// computes them itself).
    pub norms: u64,
    /// f32 `n_rows * dim` out.
    pub out: u64,
    pub n_rows: u32,
    pub dim: u32,
    pub clip: f32,
    pub sigma: f32,
    /// The Philox key of the seed (`math::philox_key`).
    pub key: [u32; 2],
    /// `sm80_clip_noise_rows` only: rows per block (1 to [`NOISE_ROWS_MAX`]).
    pub rows_per_block: u32,
    pub _pad: u32,
}

/// The most rows one `sm80_clip_noise_rows` block stages (one norm chain per thread of its first warp).
pub const NOISE_ROWS_MAX: u32 = 32;

/// Threads of a `sm80_clip_noise_rows` block.
pub const NOISE_THREADS: u32 = 256;

/// Dynamic shared memory of a `sm80_clip_noise_rows` / `sm90a_clip_noise_rows` block of `rows` rows of `dim`
/// values (`dim` a multiple of 4): each row padded by 4 floats, so that the norm chains' 16-byte reads of 8 rows at
/// a time fall in different banks, then one f32 scale per row ([`NOISE_ROWS_MAX`] places), then 16 bytes for
/// `sm90a_clip_noise_rows`' bulk copies' barrier.
pub const fn noise_rows_shared_bytes(rows: u32, dim: u32) -> u32 {
    rows * (dim + 4) * 4 + NOISE_ROWS_MAX * 4 + 16
}

/// Scalar math that the device and the host must evaluate identically: written once, compiled into the
/// kernels and into `recall-cpu-simd`. See `docs/numerics.md`.
pub mod math {
    /// Fused multiply-add with one rounding: `fma.rn.f32` on the device, `f32::mul_add` on the host.
    #[inline(always)]
    pub fn fma(a: f32, b: f32, c: f32) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        {
            core::intrinsics::fmaf32(a, b, c)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            a.mul_add(b, c)
        }
    }

    /// Correctly rounded IEEE square root: `sqrt.rn.f32` on the device, `f32::sqrt` on the host.
    #[inline(always)]
    pub fn sqrt(x: f32) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        {
            core::intrinsics::sqrtf32(x)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            x.sqrt()
        }
    }

    /// The last step of cosine similarity: `dot / (nq * nc)`, or `0.0` when either norm is zero.
    #[inline(always)]
    pub fn cosine_from_parts(dot: f32, nq: f32, nc: f32) -> f32 {
        if nq == 0.0 || nc == 0.0 {
            0.0
        } else {
            dot / (nq * nc)
        }
    }

    // ---- Counter-based random numbers and the Gaussian transform (docs/numerics.md, "Counter-based
    // random numbers" and "Clip-and-noise"). Only integer ops, `+ - * /`, `fma` and `sqrt` on f32: no
    // libm, so the device and the host produce the same bits.

    /// Philox4x32 multipliers and Weyl key increments (Salmon et al. 2011, Random123).
    pub const PHILOX_M0: u32 = 0xD251_1F53;
    pub const PHILOX_M1: u32 = 0xCD9E_8D57;
    pub const PHILOX_W0: u32 = 0x9E37_79B9;
    pub const PHILOX_W1: u32 = 0xBB67_AE85;
    /// Domain (fourth counter word) of the k-means seeding stream.
    pub const DOMAIN_KMEANS: u32 = 1;
    /// Domain (fourth counter word) of the clip-and-noise stream.
    pub const DOMAIN_NOISE: u32 = 2;

    #[inline(always)]
    fn mulhilo(a: u32, b: u32) -> (u32, u32) {
        let p = (a as u64) * (b as u64);
        ((p >> 32) as u32, p as u32)
    }

    /// Philox4x32 with 10 rounds.
    #[inline(always)]
    pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
        let mut c = counter;
        let mut k = key;
        let mut round = 0;
        loop {
            let (hi0, lo0) = mulhilo(PHILOX_M0, c[0]);
            let (hi1, lo1) = mulhilo(PHILOX_M1, c[2]);
            c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
            round += 1;
            if round == 10 {
                return c;
            }
            k = [k[0].wrapping_add(PHILOX_W0), k[1].wrapping_add(PHILOX_W1)];
        }
    }

    /// The Philox key of a 64-bit seed: `[low32(seed), high32(seed)]`.
    #[inline(always)]
    pub fn philox_key(seed: u64) -> [u32; 2] {
        [seed as u32, (seed >> 32) as u32]
    }

    /// Word `i` of the stream of `domain`: `philox([low32(i/4), high32(i/4), 0, domain], key)[i % 4]`.
    #[inline(always)]
    pub fn philox_word(key: [u32; 2], domain: u32, i: u64) -> u32 {
        let block = i / 4;
        philox4x32_10([block as u32, (block >> 32) as u32, 0, domain], key)[(i % 4) as usize]
    }

    /// A uniform value in `(0, 1)` from a 32-bit word: `f32(2 * (w >> 9) + 1) * 2^-24`, exact.
    #[inline(always)]
    pub fn uniform_open(w: u32) -> f32 {
        ((((w >> 9) << 1) | 1) as f32) * (1.0 / 16_777_216.0)
    }

    /// `sqrt(x)`, correctly rounded, for `2^-25 <= x <= 64`: the radius of [`box_muller_radius`]. On the
    /// device: the steps `ptxas` runs for `sqrt.rn.f32` once its range check has passed, without the check and
    /// its slow path: the reciprocal square root estimate (`rsqrt.approx.ftz.f32`, `MUFU.RSQ`), `y = x r`,
    /// and one correction `y + (x - y y) r / 2`. On the host: `f32::sqrt`. Every input clip-and-noise can reach is
    /// compared bit for bit with the host's root by the diff-test (`noise` group, all 2^23 values of
    /// [`box_muller_radius`]). Saves the check, its branch and the convergence barrier around it, per call.
    #[inline(always)]
    pub fn sqrt_in_range(x: f32) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        {
            let y: f32;
            // SAFETY: register arithmetic only.
            unsafe {
                core::arch::asm!(
                    "{{",
                    ".reg .f32 r, y0, h, ny, e;",
                    "rsqrt.approx.ftz.f32 r, {x}; // refined: sqrt_in_range",
                    "mul.rn.f32 y0, {x}, r;",
                    "mul.rn.f32 h, r, 0f3F000000;",
                    "neg.f32 ny, y0;",
                    "fma.rn.f32 e, ny, y0, {x};",
                    "fma.rn.f32 {y}, e, h, y0;",
                    "}}",
                    x = in(reg32) x,
                    y = out(reg32) y,
                    options(pure, nomem, nostack)
                );
            }
            y
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            x.sqrt()
        }
    }

    /// `ln 2` in two parts for [`ln_unit`] (`LN2_HI` has 16 significant bits, so `k * LN2_HI` is exact). Public,
    /// with [`LN_OFF`] and [`TURN_RAD`], for the host's SIMD forms of these functions (cpu-simd), which must
    /// take the same steps.
    pub const LN2_HI: f32 = f32::from_bits(0x3f31_7200); // 0.693145751953125
    /// The rest of `ln 2` (see [`LN2_HI`]).
    pub const LN2_LO: f32 = f32::from_bits(0x35bf_be8e); // 1.42860677e-6
    /// The bits [`ln_unit`] subtracts to split `u` into `2^k * z` with `z` in `[0.699, 1.398)`: `f32` 0.69921875.
    pub const LN_OFF: u32 = 0x3f33_0000;
    /// One step of [`sincos_turns`]' angle, in radians: `2 * pi / 2^24` (exact scaling of `f32` `2 * pi`).
    pub const TURN_RAD: f32 = core::f32::consts::TAU / 16_777_216.0;

    const fn e(a: u32, b: u32) -> [f32; 2] {
        [f32::from_bits(a), f32::from_bits(b)]
    }

    /// A table of 64 `[f32; 2]` entries, 8-byte aligned so that an entry is one 8-byte load on the device.
    #[repr(C, align(8))]
    pub struct Table64(pub [[f32; 2]; 64]);

    /// [`ln_unit`]'s table (docs/numerics.md, "Clip-and-noise"): entry `j` serves the reduced arguments `z`
    /// whose bits lie in `LN_OFF + j * 2^17 .. LN_OFF + (j + 1) * 2^17` and holds `[invc, logc]`: `invc` the
    /// `f32` nearest to 2 over the sum of the range's ends, `logc` the `f32` nearest to `-ln(invc)`; entry 38,
    /// which holds `z = 1`, is exactly `[1, 0]`, so that `ln u` keeps its relative accuracy as `u` nears 1.
    pub static LN_TABLE: Table64 = Table64([
        e(0x3fb60b61, 0xbeb45643),
        e(0x3fb40b41, 0xbeaeadf0),
        e(0x3fb21643, 0xbea91571),
        e(0x3fb02c0b, 0xbea38c6e),
        e(0x3fae4c41, 0xbe9e1293),
        e(0x3fac7692, 0xbe98a790),
        e(0x3faaaaab, 0xbe934b12),
        e(0x3fa8e83f, 0xbe8dfcca),
        e(0x3fa72f05, 0xbe88bc73),
        e(0x3fa57eb5, 0xbe8389c3),
        e(0x3fa3d70a, 0xbe7cc8e2),
        e(0x3fa237c3, 0xbe729877),
        e(0x3fa0a0a1, 0xbe6881c2),
        e(0x3f9f1166, 0xbe5e843a),
        e(0x3f9d89d9, 0xbe549f6c),
        e(0x3f9c09c1, 0xbe4ad2d9),
        e(0x3f9a90e8, 0xbe411e0c),
        e(0x3f991f1a, 0xbe378092),
        e(0x3f97b426, 0xbe2dfa04),
        e(0x3f964fda, 0xbe2489e9),
        e(0x3f94f209, 0xbe1b2fe3),
        e(0x3f939a86, 0xbe11eb8b),
        e(0x3f924925, 0xbe08bc77),
        e(0x3f90fdbc, 0xbdff4489),
        e(0x3f8fb824, 0xbded393c),
        e(0x3f8e7835, 0xbddb563e),
        e(0x3f8d3dcb, 0xbdc99af2),
        e(0x3f8c08c1, 0xbdb8069f),
        e(0x3f8ad8f3, 0xbda6988b),
        e(0x3f89ae41, 0xbd95502c),
        e(0x3f888889, 0xbd842ccd),
        e(0x3f8767ab, 0xbd665b93),
        e(0x3f864b8a, 0xbd44a542),
        e(0x3f853408, 0xbd23356d),
        e(0x3f842108, 0xbd020ae4),
        e(0x3f83126f, 0xbcc24943),
        e(0x3f820821, 0xbc8102d2),
        e(0x3f810204, 0xbc0080a8),
        e(0x3f800000, 0x00000000),
        e(0x3f7c0fc1, 0x3c7e0545),
        e(0x3f783e10, 0x3cfc14c8),
        e(0x3f74898d, 0x3d3ba2ce),
        e(0x3f70f0f1, 0x3d785185),
        e(0x3f6d7304, 0x3d9a0eba),
        e(0x3f6a0ea1, 0x3db78694),
        e(0x3f66c2b4, 0x3dd4936c),
        e(0x3f638e39, 0x3df1383a),
        e(0x3f607038, 0x3e06bbf4),
        e(0x3f5d67c9, 0x3e14aa96),
        e(0x3f5a740e, 0x3e22695a),
        e(0x3f579436, 0x3e2ff983),
        e(0x3f54c77b, 0x3e3d5c48),
        e(0x3f520d21, 0x3e4a92d4),
        e(0x3f4f6475, 0x3e579e49),
        e(0x3f4ccccd, 0x3e647fbd),
        e(0x3f4a4588, 0x3e71383b),
        e(0x3f47ce0c, 0x3e7dc8c6),
        e(0x3f4565c8, 0x3e851928),
        e(0x3f430c31, 0x3e8b3ae5),
        e(0x3f40c0c1, 0x3e914a0f),
        e(0x3f3e82fa, 0x3e974716),
        e(0x3f3c5264, 0x3e9d3263),
        e(0x3f3a2e8c, 0x3ea30c5d),
        e(0x3f381703, 0x3ea8d56c),
    ]);

    /// [`sincos_turns`]' table: entry `j` is `[sin, cos]` of the angle `2 * pi * j / 64`, each the `f32`
    /// nearest to the true value, with exact `0` and `1` at the quarter turns and the quadrants' entries the
    /// first quadrant's rotated (`(s, c)`, `(c, -s)`, `(-s, -c)`, `(-c, s)`; `+0.0` for every zero).
    pub static TURN_TABLE: Table64 = Table64([
        e(0x00000000, 0x3f800000),
        e(0x3dc8bd36, 0x3f7ec46d),
        e(0x3e47c5c2, 0x3f7b14be),
        e(0x3e94a031, 0x3f74fa0b),
        e(0x3ec3ef15, 0x3f6c835e),
        e(0x3ef15aea, 0x3f61c598),
        e(0x3f0e39da, 0x3f54db31),
        e(0x3f226799, 0x3f45e403),
        e(0x3f3504f3, 0x3f3504f3),
        e(0x3f45e403, 0x3f226799),
        e(0x3f54db31, 0x3f0e39da),
        e(0x3f61c598, 0x3ef15aea),
        e(0x3f6c835e, 0x3ec3ef15),
        e(0x3f74fa0b, 0x3e94a031),
        e(0x3f7b14be, 0x3e47c5c2),
        e(0x3f7ec46d, 0x3dc8bd36),
        e(0x3f800000, 0x00000000),
        e(0x3f7ec46d, 0xbdc8bd36),
        e(0x3f7b14be, 0xbe47c5c2),
        e(0x3f74fa0b, 0xbe94a031),
        e(0x3f6c835e, 0xbec3ef15),
        e(0x3f61c598, 0xbef15aea),
        e(0x3f54db31, 0xbf0e39da),
        e(0x3f45e403, 0xbf226799),
        e(0x3f3504f3, 0xbf3504f3),
        e(0x3f226799, 0xbf45e403),
        e(0x3f0e39da, 0xbf54db31),
        e(0x3ef15aea, 0xbf61c598),
        e(0x3ec3ef15, 0xbf6c835e),
        e(0x3e94a031, 0xbf74fa0b),
        e(0x3e47c5c2, 0xbf7b14be),
        e(0x3dc8bd36, 0xbf7ec46d),
        e(0x00000000, 0xbf800000),
        e(0xbdc8bd36, 0xbf7ec46d),
        e(0xbe47c5c2, 0xbf7b14be),
        e(0xbe94a031, 0xbf74fa0b),
        e(0xbec3ef15, 0xbf6c835e),
        e(0xbef15aea, 0xbf61c598),
        e(0xbf0e39da, 0xbf54db31),
        e(0xbf226799, 0xbf45e403),
        e(0xbf3504f3, 0xbf3504f3),
        e(0xbf45e403, 0xbf226799),
        e(0xbf54db31, 0xbf0e39da),
        e(0xbf61c598, 0xbef15aea),
        e(0xbf6c835e, 0xbec3ef15),
        e(0xbf74fa0b, 0xbe94a031),
        e(0xbf7b14be, 0xbe47c5c2),
        e(0xbf7ec46d, 0xbdc8bd36),
        e(0xbf800000, 0x00000000),
        e(0xbf7ec46d, 0x3dc8bd36),
        e(0xbf7b14be, 0x3e47c5c2),
        e(0xbf74fa0b, 0x3e94a031),
        e(0xbf6c835e, 0x3ec3ef15),
        e(0xbf61c598, 0x3ef15aea),
        e(0xbf54db31, 0x3f0e39da),
        e(0xbf45e403, 0x3f226799),
        e(0xbf3504f3, 0x3f3504f3),
        e(0xbf226799, 0x3f45e403),
        e(0xbf0e39da, 0x3f54db31),
        e(0xbef15aea, 0x3f61c598),
        e(0xbec3ef15, 0x3f6c835e),
        e(0xbe94a031, 0x3f74fa0b),
        e(0xbe47c5c2, 0x3f7b14be),
        e(0xbdc8bd36, 0x3f7ec46d),
    ]);

    /// [`ln_unit`] of the `f32` with bits `ix`.
    #[inline(always)]
    fn ln_unit_bits(ix: u32) -> f32 {
        let tmp = ix.wrapping_sub(LN_OFF);
        let [invc, logc] = LN_TABLE.0[((tmp >> 17) & 63) as usize];
        let z = f32::from_bits(ix.wrapping_sub(tmp & 0xff80_0000));
        let kf = ((tmp as i32) >> 23) as f32;
        let r = fma(z, invc, -1.0);
        let mut p = fma(r, -0.25, 1.0 / 3.0);
        p = fma(r, p, -0.5);
        let l1 = fma(r * r, p, r);
        fma(kf, LN2_HI, logc) + fma(kf, LN2_LO, l1)
    }

    /// Natural logarithm of a normal `u` in `(0, 1]` (the only range clip-and-noise needs): `u = 2^k * z` (bit
    /// fields, exact), `r = z * invc - 1` (one rounding, `|r| < 0.008`), `ln u = (k ln2_hi + logc) + (k ln2_lo +
    /// log1p(r))` with a degree-4 polynomial for `log1p`.
    #[inline(always)]
    pub fn ln_unit(u: f32) -> f32 {
        ln_unit_bits(u.to_bits())
    }

    /// `(sin, cos)` of the angle `2 * pi * a / 2^24` for `a < 2^24` (higher bits are ignored): the nearest table
    /// angle `2 * pi * j / 64` and the rest `b` (`|b| <= pi / 64`, from the integer exactly, then one rounding),
    /// `sin b` and `cos b` by short Taylor polynomials, and the angle-sum formulas.
    #[inline(always)]
    pub fn sincos_turns(a: u32) -> (f32, f32) {
        let a = a.wrapping_add(1 << 17);
        let [sa, ca] = TURN_TABLE.0[((a >> 18) & 63) as usize];
        // (a mod 2^18) - 2^17 as f32: the float with bits 2^23's | (a mod 2^18) is 2^23 + (a mod 2^18), exact.
        let d = f32::from_bits(0x4b00_0000 | (a & 0x0003_ffff)) - 8_519_680.0;
        let b = d * TURN_RAD;
        let b2 = b * b;
        let sb = fma(b * b2, fma(b2, 1.0 / 120.0, -1.0 / 6.0), b);
        let cb = fma(b2, fma(b2, 1.0 / 24.0, -0.5), 1.0);
        (fma(sa, cb, ca * sb), fma(ca, cb, -(sa * sb)))
    }

    /// The radius `sqrt(-2 ln u)` of [`box_muller`] for the word `w0` (`u = uniform_open(w0)`, which reads
    /// `w0 >> 9`: 2^23 distinct inputs, in `[1.2e-7, 33.3]` under the root).
    #[inline(always)]
    pub fn box_muller_radius(w0: u32) -> f32 {
        // uniform_open(w0)'s bits: the exact f32 of the odd integer, its exponent lowered by 24 (the same value
        // as the product by 2^-24, which the compiler then folds into the logarithm's integer steps).
        let n = ((w0 >> 9) << 1) | 1;
        sqrt_in_range(-2.0 * ln_unit_bits((n as f32).to_bits() - (24 << 23)))
    }

    /// Two standard normal values from two 32-bit words (Box-Muller).
    #[inline(always)]
    pub fn box_muller(w0: u32, w1: u32) -> (f32, f32) {
        let rad = box_muller_radius(w0);
        let (s, c) = sincos_turns(w1 >> 8);
        (rad * c, rad * s)
    }

    /// The four noise values `g(row, 4 * block .. 4 * block + 4)` of clip-and-noise.
    #[inline(always)]
    pub fn gaussian4(key: [u32; 2], row: u64, block: u32) -> [f32; 4] {
        let w = philox4x32_10([block, row as u32, (row >> 32) as u32, DOMAIN_NOISE], key);
        let (g0, g1) = box_muller(w[0], w[1]);
        let (g2, g3) = box_muller(w[2], w[3]);
        [g0, g1, g2, g3]
    }

    /// An unbiased integer in `0 .. m` (`m >= 1`) by Lemire's method, drawing words from `next`.
    #[inline(always)]
    pub fn uniform_below(m: u32, next: &mut impl FnMut() -> u32) -> u32 {
        let mut x = (next() as u64) * (m as u64);
        if (x as u32) < m {
            let t = m.wrapping_neg() % m;
            while (x as u32) < t {
                x = (next() as u64) * (m as u64);
            }
        }
        (x >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server's query numbers never take the values its device words start at (0) or the exit; the host and
    /// the kernel step them with the same function.
    #[test]
    fn serve_numbers_skip_zero_and_the_exit() {
        assert_eq!(knn1_serve_next(0), 1);
        assert_eq!(knn1_serve_next(41), 42);
        assert_eq!(knn1_serve_next(KNN1_SERVE_EXIT - 1), 1);
        assert_eq!(knn1_serve_next(KNN1_SERVE_EXIT), 1);
        let mut n = KNN1_SERVE_EXIT - 3;
        for _ in 0..8 {
            n = knn1_serve_next(n);
            assert!(n != 0 && n != KNN1_SERVE_EXIT);
        }
    }

    /// The servers' words sit past their bodies' shared memory, 16-byte aligned; the tensor map leads the
    /// Hopper server's parameters.
    #[test]
    fn serve_words_follow_the_bodies_shared_memory() {
        for dim in [4, 768, 1540, 4096] {
            for warps in [1, 2] {
                let b = knn1_serve_shared_bytes(dim, warps);
                assert!(b.is_multiple_of(16) && b >= knn1_shared_bytes(dim, warps) + 16);
            }
            for slots in [KNN1_BULK_MIN_SLOTS, 24, KNN1_BULK_MAX_SLOTS] {
                let b = knn1_bulk_serve_shared_bytes(dim, slots);
                assert!(b.is_multiple_of(16) && b >= knn1_bulk_shared_bytes(dim, slots) + 16);
            }
        }
        assert_eq!(core::mem::offset_of!(Knn1BulkServeParams, bulk), 0);
    }

    /// The device's `sqrt_in_range` skips `sqrt.rn`'s range check on the promise that its argument stays in
    /// the range it documents, and `ln_unit`'s polynomial on `|r| < 0.008`: both checked here for every input
    /// the noise can give them, with `ln_unit`'s accuracy against f64 over the same inputs.
    #[test]
    fn box_muller_operands_stay_in_their_ranges_and_ln_is_accurate() {
        use math::{LN_TABLE, ln_unit, uniform_open};
        let (mut lo, mut hi, mut worst_r, mut worst_rel) = (f32::INFINITY, 0.0f32, 0.0f32, 0.0f64);
        for k in 0..NOISE_RADII {
            let u = uniform_open(k << 9);
            assert!(u.is_normal() && u > 0.0 && u < 1.0, "k {k}");
            // ln_unit's reduction, as it runs.
            let tmp = u.to_bits().wrapping_sub(0x3f33_0000);
            let z = f32::from_bits(u.to_bits().wrapping_sub(tmp & 0xff80_0000));
            let [invc, _] = LN_TABLE.0[(tmp >> 17 & 63) as usize];
            worst_r = worst_r.max(z.mul_add(invc, -1.0).abs());
            let l = ln_unit(u);
            let want = f64::from(u).ln();
            worst_rel = worst_rel.max((f64::from(l) - want).abs() / want.abs());
            let x = -2.0 * l;
            lo = lo.min(x);
            hi = hi.max(x);
        }
        assert!(lo >= 2f32.powi(-25) && hi <= 64.0, "{lo} .. {hi}");
        assert!(worst_r < 0.008, "|r| up to {worst_r}");
        assert!(worst_rel < 2.5e-7, "ln_unit relative error {worst_rel:e}");
    }

    /// The tables hold the values their doc promises: within half an ulp of the f64 values (the nearest f32,
    /// up to f64's own error), `ln`'s entry for `z = 1` exactly `[1, 0]`, the turns exact at the quarter turns.
    #[test]
    fn noise_tables_hold_the_nearest_values() {
        use math::{LN_TABLE, TURN_TABLE};
        let half_ulp =
            |x: f32| f64::from(f32::from_bits(x.abs().to_bits() + 1) - x.abs()) / 2.0 + 1e-15;
        for (j, &[invc, logc]) in LN_TABLE.0.iter().enumerate() {
            let z_lo = f64::from(f32::from_bits(0x3f33_0000 + (j as u32) * (1 << 17)));
            let z_hi = f64::from(f32::from_bits(0x3f33_0000 + (j as u32 + 1) * (1 << 17)));
            if z_lo <= 1.0 && 1.0 < z_hi {
                assert_eq!((invc, logc), (1.0, 0.0), "entry {j}");
                continue;
            }
            assert!(
                (f64::from(invc) - 2.0 / (z_lo + z_hi)).abs() <= half_ulp(invc),
                "entry {j}"
            );
            assert!(
                (f64::from(logc) + f64::from(invc).ln()).abs() <= half_ulp(logc),
                "entry {j}"
            );
        }
        for (j, &[s, c]) in TURN_TABLE.0.iter().enumerate() {
            let a = std::f64::consts::TAU * j as f64 / 64.0;
            if j % 16 == 0 {
                let (ws, wc) = [(0.0, 1.0), (1.0, 0.0), (0.0, -1.0), (-1.0, 0.0)][j / 16];
                assert_eq!(
                    (s.to_bits(), c.to_bits()),
                    (f32::to_bits(ws), f32::to_bits(wc)),
                    "entry {j}"
                );
                continue;
            }
            assert!((f64::from(s) - a.sin()).abs() <= half_ulp(s), "entry {j}");
            assert!((f64::from(c) - a.cos()).abs() <= half_ulp(c), "entry {j}");
        }
    }

    #[test]
    fn hub_groups_are_powers_of_two_that_split_the_edges() {
        assert_eq!(spread_hub_groups(SPREAD_HUB_MIN), 1);
        assert_eq!(spread_hub_groups(SPREAD_HUB_EDGES), 1);
        assert_eq!(spread_hub_groups(SPREAD_HUB_EDGES + 1), 2);
        assert_eq!(spread_hub_groups(170_000), 32);
        assert_eq!(spread_hub_groups(u64::MAX), 32);
        let mut last = 1;
        for len in (SPREAD_HUB_MIN..2_000_000).step_by(997) {
            let g = spread_hub_groups(len);
            assert!(
                g.is_power_of_two() && g <= 32 && g >= last,
                "len {len}: {g}"
            );
            // At most SPREAD_HUB_EDGES a block unless all 32 chains have a block each.
            assert!(
                g == 32 || len <= u64::from(g) * SPREAD_HUB_EDGES,
                "len {len}: {g}"
            );
            last = g;
        }
    }

    #[test]
    fn the_splits_publish_at_least_k_heads_and_one_each_when_there_are_k_splits() {
        for k in 1..=TC_KNN_K_MAX {
            for n_splits in 1..=300 {
                let h = tc_knn_heads_per_split(k, n_splits);
                assert!(n_splits * h >= k, "k {k}, splits {n_splits}");
                // No more than needed: one fewer a split would not cover k.
                assert!(n_splits * (h - 1) < k, "k {k}, splits {n_splits}");
                if n_splits >= k {
                    assert_eq!(h, 1);
                }
            }
        }
        assert_eq!(tc_knn_heads_per_split(10, 0), 10);
    }
}
