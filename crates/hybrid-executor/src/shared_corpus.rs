//! A corpus validated once and shared between calls, so that a GPU backend can keep it on the device.

use crate::executor::ExecError;
use parking_lot::Mutex;
use recall_cpu_simd::check_corpus_rows;
use recall_cpu_simd::check_matrix_shape;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The memory of a corpus, shared by the handle and its shards.
#[derive(Debug)]
struct Block {
    /// The page-locked registration of `values` (out-of-core knn DMAs from it), made on first need and shared
    /// by every shard. It holds its own `Arc` of `values`, so the memory outlives the registration whatever
    /// the drop order.
    #[cfg(feature = "gpu")]
    pinned: OnceLock<Option<Arc<recall_gpu_sys::HostRegistration<f32>>>>,
    values: Arc<Vec<f32>>,
}

/// Rows validated once (shape and finiteness), owned and cheap to clone. A GPU backend keeps a device copy
/// under the corpus's id while any clone of it lives, and frees it after the last clone is dropped.
#[derive(Debug, Clone)]
pub struct SharedCorpus {
    inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    id: u64,
    /// All rows of the corpus this handle is a view of (a shard shares its parent's block).
    data: Arc<Block>,
    /// The handle's rows: `data[rows.start * dim .. rows.end * dim]`.
    rows: Range<usize>,
    dim: usize,
    /// The largest magnitude, computed on first use (fast mode's f16 range check).
    max_abs: OnceLock<f32>,
    /// The shards the multi-GPU layer cut this handle into, per number of parts asked for: held by the handle
    /// so that they go with it (a GPU frees a shard's device copy once no handle of the shard lives).
    shards: Mutex<Vec<Shards>>,
}

/// A handle cut into parts: `(parts asked for, [(first row, the part's handle)])`.
type Shards = (usize, Vec<(usize, SharedCorpus)>);

impl SharedCorpus {
    /// Validate `data` as `n_rows x dim` row-major values (no NaN or infinity, at least one row, at most
    /// `u32::MAX` rows: row ids are `u32`).
    pub fn new(data: Vec<f32>, dim: usize) -> Result<SharedCorpus, ExecError> {
        let n = check_matrix_shape("corpus", &data, dim)?;
        check_corpus_rows(n)?;
        recall_cpu_simd::check_finite("corpus", &data)?;
        let block = Block {
            #[cfg(feature = "gpu")]
            pinned: OnceLock::new(),
            values: Arc::new(data),
        };
        Ok(SharedCorpus::from_parts(Arc::new(block), 0..n, dim))
    }

    fn from_parts(data: Arc<Block>, rows: Range<usize>, dim: usize) -> SharedCorpus {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        SharedCorpus {
            inner: Arc::new(Inner {
                id,
                data,
                rows,
                dim,
                max_abs: OnceLock::new(),
                shards: Mutex::new(Vec::new()),
            }),
        }
    }

    /// A handle of its own (new id, so cached on devices separately) for rows `rows` of this corpus (row
    /// ids relative to this handle), sharing its memory: the shard of one GPU. `None` if the range is empty
    /// or out of bounds.
    pub fn shard(&self, rows: Range<usize>) -> Option<SharedCorpus> {
        if rows.start >= rows.end || rows.end > self.n_rows() {
            return None;
        }
        let base = self.inner.rows.start;
        Some(SharedCorpus::from_parts(
            self.inner.data.clone(),
            base + rows.start..base + rows.end,
            self.inner.dim,
        ))
    }

    /// This handle cut into `parts` contiguous row ranges of nearly equal size (fewer when it has fewer
    /// rows), each `(first row, its shard)`: made on the first call for `parts` and kept by the handle, so
    /// later calls get the same shards (the same ids, which devices cache by) and the shards are dropped with
    /// the handle. The second value is whether this call made them.
    pub(crate) fn shards(&self, parts: usize) -> (Vec<(usize, SharedCorpus)>, bool) {
        let mut sets = self.inner.shards.lock();
        if let Some((_, set)) = sets.iter().find(|(p, _)| *p == parts) {
            return (set.clone(), false);
        }
        let n = self.n_rows();
        let g = parts.clamp(1, n.max(1));
        let set: Vec<(usize, SharedCorpus)> = (0..g)
            .filter_map(|i| {
                let (r0, r1) = (i * n / g, (i + 1) * n / g);
                self.shard(r0..r1).map(|s| (r0, s))
            })
            .collect();
        sets.push((parts, set.clone()));
        (set, true)
    }

    /// The rows, row-major.
    pub fn data(&self) -> &[f32] {
        let d = self.inner.dim;
        &self.inner.data.values[self.inner.rows.start * d..self.inner.rows.end * d]
    }

    pub fn dim(&self) -> usize {
        self.inner.dim
    }

    pub fn n_rows(&self) -> usize {
        self.inner.rows.len()
    }

    /// The largest magnitude of any value (computed once, on first use).
    pub fn max_abs(&self) -> f32 {
        if let Some(&m) = self.inner.max_abs.get() {
            return m;
        }
        // Computed outside the cell's initialisation, so that no caller waits on another's: the scan runs on
        // rayon's pool, and callers on its workers parked on the cell would stop the pool the scan waits for (a
        // deadlock), as would a worker that, while its scan waits for a stolen piece, picks up a call that asks
        // for the value on the same thread. Callers that race compute the same value.
        let m = recall_cpu_simd::max_abs(self.data());
        *self.inner.max_abs.get_or_init(|| m)
    }

    /// Unique per corpus created in this process.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// A handle that does not keep the corpus alive (for device caches).
    pub(crate) fn weak(&self) -> Weak<Inner> {
        Arc::downgrade(&self.inner)
    }

    /// The page-locked registration of the memory this handle's rows lie in (shared with its shards), made
    /// on first use by `register`, with the element range of this handle's rows in it; `None` when
    /// registering failed (remembered: not tried again for this memory).
    #[cfg(feature = "gpu")]
    pub(crate) fn pinned(
        &self,
        register: impl FnOnce(Arc<Vec<f32>>) -> Option<Arc<recall_gpu_sys::HostRegistration<f32>>>,
    ) -> Option<(Arc<recall_gpu_sys::HostRegistration<f32>>, Range<usize>)> {
        let reg = self
            .inner
            .data
            .pinned
            .get_or_init(|| register(self.inner.data.values.clone()))
            .clone()?;
        let d = self.inner.dim;
        Some((reg, self.inner.rows.start * d..self.inner.rows.end * d))
    }

    /// Whether this handle's rows are page-locked (`None`: not tried yet).
    pub fn host_registered(&self) -> Option<bool> {
        #[cfg(feature = "gpu")]
        {
            self.inner.data.pinned.get().map(Option::is_some)
        }
        #[cfg(not(feature = "gpu"))]
        {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_is_its_rows_of_the_parent_under_a_new_id() {
        let data: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let c = SharedCorpus::new(data.clone(), 2).unwrap();
        let s = c.shard(1..4).unwrap();
        assert_eq!(s.n_rows(), 3);
        assert_eq!(s.data(), &data[2..8]);
        assert_ne!(s.id(), c.id());
        let ss = s.shard(1..2).unwrap();
        assert_eq!(ss.data(), &data[4..6]);
        assert!(c.shard(2..2).is_none());
        assert!(c.shard(5..7).is_none());
        // The shard keeps the rows alive after its parent is gone.
        drop(c);
        assert_eq!(s.data(), &data[2..8]);
    }

    /// The multi-GPU layer's shards: equal cuts covering every row, the same handles on every call for the
    /// same count, and gone with the handle (nothing else keeps them, so the devices free their copies).
    #[test]
    fn shards_cover_the_rows_are_kept_and_go_with_the_handle() {
        let data: Vec<f32> = (0..14).map(|x| x as f32).collect();
        let c = SharedCorpus::new(data.clone(), 2).unwrap();
        let (three, made) = c.shards(3);
        assert!(made);
        let firsts: Vec<usize> = three.iter().map(|(r0, _)| *r0).collect();
        assert_eq!(firsts, [0, 2, 4]);
        let rows: Vec<f32> = three.iter().flat_map(|(_, s)| s.data().to_vec()).collect();
        assert_eq!(rows, data);
        let (again, made) = c.shards(3);
        assert!(!made);
        let ids = |v: &[(usize, SharedCorpus)]| v.iter().map(|(_, s)| s.id()).collect::<Vec<_>>();
        assert_eq!(ids(&again), ids(&three));
        // More parts than rows: one row each.
        assert_eq!(c.shards(9).0.len(), 7);
        let weak: Vec<_> = three.iter().map(|(_, s)| s.weak()).collect();
        drop((three, again));
        assert!(weak.iter().all(|w| w.strong_count() == 1));
        drop(c);
        assert!(weak.iter().all(|w| w.strong_count() == 0));
    }

    /// Row ids are `u32`: a corpus of more rows is refused when it is made (`docs/numerics.md`), as the CPU's knn
    /// refuses it, instead of reaching a GPU that streams or shards it and merges per-part ids offset by the
    /// part's first row, which wrap past `u32::MAX` (row `2^32 + 1` answered as id 1).
    #[test]
    #[ignore = "reserves 16 GiB of virtual memory (zero pages, never written)"]
    fn a_corpus_of_more_rows_than_u32_ids_is_refused() {
        let rows = u32::MAX as usize + 2;
        let r = SharedCorpus::new(vec![0.0f32; rows], 1).map(|c| c.n_rows());
        assert!(
            matches!(
                r,
                Err(ExecError::InvalidInput(recall_cpu_simd::CpuError::TooLarge { len, .. })) if len == rows
            ),
            "{r:?}"
        );
    }
}
