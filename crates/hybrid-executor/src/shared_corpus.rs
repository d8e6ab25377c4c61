//! A corpus validated once and shared between calls, so that a GPU backend can keep it on the device.

use crate::executor::{ExecError, check_matrix};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Rows validated once (shape and finiteness), owned and cheap to clone. A GPU backend keeps a device copy
/// under the corpus's id while any clone of it lives, and frees it after the last clone is dropped.
#[derive(Debug, Clone)]
pub struct SharedCorpus {
    inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    id: u64,
    data: Vec<f32>,
    dim: usize,
    /// The largest magnitude, computed on first use (fast mode's f16 range check).
    max_abs: std::sync::OnceLock<f32>,
}

impl SharedCorpus {
    /// Validate `data` as `n_rows x dim` row-major values (no NaN or infinity, at least one row).
    pub fn new(data: Vec<f32>, dim: usize) -> Result<SharedCorpus, ExecError> {
        check_matrix("corpus", &data, dim)?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Ok(SharedCorpus {
            inner: Arc::new(Inner {
                id,
                data,
                dim,
                max_abs: std::sync::OnceLock::new(),
            }),
        })
    }

    /// The rows, row-major.
    pub fn data(&self) -> &[f32] {
        &self.inner.data
    }

    pub fn dim(&self) -> usize {
        self.inner.dim
    }

    pub fn n_rows(&self) -> usize {
        self.inner.data.len() / self.inner.dim
    }

    /// The largest magnitude of any value (computed once, on first use).
    pub fn max_abs(&self) -> f32 {
        *self
            .inner
            .max_abs
            .get_or_init(|| crate::executor::max_abs(&self.inner.data))
    }

    /// Unique per corpus created in this process.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// A handle that does not keep the corpus alive (for device caches).
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    pub(crate) fn weak(&self) -> Weak<Inner> {
        Arc::downgrade(&self.inner)
    }
}
