//! Tensor maps (`CUtensorMap`) for the Hopper kernels' TMA copies (`cp.async.bulk.tensor`): the driver encodes
//! on the host how a block's tile of a row-major matrix is copied into shared memory (box, bounds, swizzle).
//! `cuTensorMapEncodeTiled` is in every CUDA 12.0 driver ([`crate::MIN_DRIVER_VERSION`]) and is a pure host
//! call (no context).

use crate::error::{DriverResultExt, GpuError};
use crate::gpu::guard;
use cudarc::driver::sys;
use std::ffi::c_void;

/// One encoded tensor map: 128 opaque bytes, 64-byte aligned as the driver requires. The kernels read it
/// from device memory (copy it there before the launch that uses it).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMap(pub [u64; 16]);

/// The element type of a [`TensorMap`]'s matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    F16,
    Bf16,
    F32,
}

impl Element {
    /// Bytes of one value.
    pub fn size(self) -> u64 {
        match self {
            Element::F16 | Element::Bf16 => 2,
            Element::F32 => 4,
        }
    }
}

/// A tensor map of the `rows x cols` matrix of `elem` values at device address `ptr` (row stride `ld`
/// values), copied in boxes of `box_rows` rows by 32 columns into shared memory in the swizzle whose row is
/// those 32 columns: 64 bytes for 16-bit values, 128 for f32 (the destination then 512- or 1,024-byte
/// aligned). Rows and columns past the matrix read as zeros.
///
/// Errors (never a panic) for a shape the hardware cannot describe: `ptr` or `ld` values not a multiple of 16
/// bytes, `ld < cols`, a zero or over-large dimension (the driver's limits: dimensions up to 2^32, strides below
/// 2^40, boxes of 1 to 256 rows), or the driver refusing it.
pub fn tensor_map_2d(
    elem: Element,
    ptr: u64,
    rows: u64,
    cols: u64,
    ld: u64,
    box_rows: u32,
) -> Result<TensorMap, GpuError> {
    const CALL: &str = "cuTensorMapEncodeTiled";
    let bad = |what: &str| GpuError::Driver {
        call: CALL,
        code: 0,
        name: format!("invalid tensor map: {what}"),
    };
    let size = elem.size();
    if rows == 0 || cols == 0 || ld < cols || rows > 1 << 32 || cols > 1 << 32 || ld >= 1 << 38 {
        return Err(bad("dimensions out of range"));
    }
    if !ptr.is_multiple_of(16) || !(size * ld).is_multiple_of(16) {
        return Err(bad("address and row stride must be multiples of 16 bytes"));
    }
    if box_rows == 0 || box_rows > 256 {
        return Err(bad("a box has 1 to 256 rows"));
    }
    let (dtype, swizzle) = match elem {
        Element::F16 => (
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        ),
        Element::Bf16 => (
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        ),
        Element::F32 => (
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
        ),
    };
    let dims = [cols, rows];
    // Bytes between rows (the innermost dimension's stride is implied).
    let strides = [size * ld];
    let boxes = [32, box_rows];
    let elem_strides = [1u32, 1];
    guard(CALL, || {
        let mut map = sys::CUtensorMap { opaque: [0; 16] };
        // SAFETY: every pointer argument points at a live local array of the rank's length (strides: rank - 1);
        // the driver writes only `map`. The global address is not dereferenced here.
        unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map,
                dtype,
                2,
                ptr as *mut c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                elem_strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle,
                sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        }
        .result()
        .gpu(CALL)?;
        Ok(TensorMap(map.opaque))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_the_hardware_cannot_describe_are_errors_before_the_driver() {
        // Misaligned address, odd stride, stride shorter than a row, empty, box too tall or empty: each an
        // error (no driver is needed to reject them, so this runs without a GPU).
        assert!(tensor_map_2d(Element::Bf16, 8, 10, 32, 32, 128).is_err());
        assert!(tensor_map_2d(Element::Bf16, 0, 10, 32, 36, 128).is_err());
        assert!(tensor_map_2d(Element::Bf16, 0, 10, 64, 32, 128).is_err());
        assert!(tensor_map_2d(Element::F16, 0, 0, 32, 32, 128).is_err());
        assert!(tensor_map_2d(Element::F16, 0, 10, 32, 32, 0).is_err());
        assert!(tensor_map_2d(Element::F16, 0, 10, 32, 32, 512).is_err());
        // f32 rows of 6 values are 24 bytes: not a multiple of 16 (8 would be).
        assert!(tensor_map_2d(Element::F32, 0, 10, 6, 6, 32).is_err());
    }
}
