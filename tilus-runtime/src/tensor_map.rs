//! CUDA tensor maps (`CUtensorMap`) for TMA copies (`cp.async.bulk.tensor`).
//!
//! A kernel that copies with TMA takes, per global view it copies from, a 128-byte descriptor
//! by value (`const __grid_constant__` parameter). The driver builds it on the host from the
//! buffer's address, the view's extents and the box the kernel copies
//! ([`encode_tiled`]); it is passed like any other argument with
//! [`crate::KernelArgs::tensor_map`].
//!
//! Every requirement the driver documents for `cuTensorMapEncodeTiled` (CUDA 13.0 `cuda.h`) is
//! checked here first, so a view TMA cannot describe is an [`RuntimeError::InvalidArgument`]
//! that says what is wrong and what to change, not a bare `CUDA_ERROR_INVALID_VALUE`.

use crate::error::{Result, RuntimeError};
use cudarc::driver::sys;

pub use tilus_core::launch::TmaSwizzle;

/// An encoded tensor map: the driver's opaque 128 bytes, aligned as the kernels declare it
/// (`struct __align__(64) tilus_tensor_map { unsigned long long opaque[16]; }`).
#[repr(C, align(64))]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorMap([u64; 16]);

const _: () = assert!(std::mem::size_of::<TensorMap>() == 128);
const _: () = assert!(std::mem::align_of::<TensorMap>() == 64);

// SAFETY: `TensorMap` is 128 plain bytes (`repr(C)`, no pointers, no padding, any bit pattern
// valid). A launch passes the driver a pointer to it, and the driver copies exactly the size of
// the kernel's parameter, a 128-byte `CUtensorMap`, into the parameter buffer; the descriptor
// holds a device address, which is the kernel's to use, as with any pointer argument.
unsafe impl cudarc::driver::DeviceRepr for TensorMap {}

impl TensorMap {
    /// The descriptor's words, as the driver wrote them.
    pub fn words(&self) -> &[u64; 16] {
        &self.0
    }
}

impl std::fmt::Debug for TensorMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Opaque: printing 16 words helps no one.
        f.write_str("TensorMap(..)")
    }
}

/// The driver's limits for a tiled tensor map (CUDA 13.0 `cuda.h`, `cuTensorMapEncodeTiled`).
const MAX_RANK: usize = 5;
const MAX_DIM: u64 = 1 << 32;
const MAX_STRIDE: u64 = 1 << 40;
const MAX_BOX: u32 = 256;
/// Alignment of the global address, of every row stride and of the box's inner extent in bytes.
const ALIGN: u64 = 16;

/// What the driver call takes, innermost dimension first.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Tiled {
    data_type: sys::CUtensorMapDataType,
    dims: Vec<u64>,
    /// Byte strides of dimensions 1..rank (the innermost one is the element size).
    strides: Vec<u64>,
    boxes: Vec<u32>,
    swizzle: sys::CUtensorMapSwizzle,
}

/// Encode a tensor map for TMA copies of boxes of `box_shape` elements (outermost first) out of
/// the row-major tensor at device address `address` with `shape` (outermost first) and elements
/// of `element_bytes` (1, 2, 4 or 8 bytes: TMA copies bits, so any type of that size is fine).
/// Boxes land in shared memory row-major, swizzled per `swizzle`; elements outside `shape` read
/// as zero. `name` names the argument in errors.
///
/// Needs the driver (it is a driver call), with a context current on this thread, as in any
/// launch; it does not touch the device's memory.
pub fn encode_tiled(
    name: &str,
    address: u64,
    element_bytes: usize,
    shape: &[u64],
    box_shape: &[u32],
    swizzle: TmaSwizzle,
) -> Result<TensorMap> {
    let tiled = validate(name, address, element_bytes, shape, box_shape, swizzle)?;
    // cudarc panics on a missing library or entry point: make sure the driver is there (and
    // new enough for CUDA 13.0's entry points) first.
    crate::device::driver_version()?;
    let rank = tiled.dims.len();
    let element_strides = vec![1u32; rank];
    // `CUtensorMap` in CUDA 13 is 128-byte aligned; the driver asks 64 of the output. Encode
    // into the driver's own type and copy the bytes out.
    let mut out = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every array holds `rank` entries (`strides` rank - 1), as the driver reads; `out`
    // is a valid, aligned `CUtensorMap`; the address is only recorded, not dereferenced.
    let rc = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut out,
            tiled.data_type,
            rank as u32,
            address as *mut std::ffi::c_void,
            tiled.dims.as_ptr(),
            tiled.strides.as_ptr(),
            tiled.boxes.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            tiled.swizzle,
            // Rows of a tile are usually >= 128 bytes; fetching whole 128-byte lines into L2 is
            // what the driver's samples use for GEMM operands.
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            // Zeros outside the tensor (the NaN fill is for float data types only).
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    rc.result().map_err(|e| {
        RuntimeError::driver(
            format!(
                "encoding the tensor map of `{name}` (address {address:#x}, shape {shape:?} of \
                 {element_bytes}-byte elements, box {box_shape:?}, swizzle {swizzle:?})"
            ),
            e,
        )
    })?;
    Ok(TensorMap(out.opaque))
}

/// Check every requirement of the driver and put the arguments in its order.
fn validate(
    name: &str,
    address: u64,
    element_bytes: usize,
    shape: &[u64],
    box_shape: &[u32],
    swizzle: TmaSwizzle,
) -> Result<Tiled> {
    let bad = |reason: String| Err(RuntimeError::invalid_arg(name, reason));
    let rank = shape.len();
    if rank == 0 || rank > MAX_RANK {
        return bad(format!(
            "a tensor map has 1 to {MAX_RANK} dimensions, this view has {rank} ({shape:?}); \
             merge contiguous dimensions"
        ));
    }
    if box_shape.len() != rank {
        return bad(format!(
            "the box {box_shape:?} has {} dimensions, the view {shape:?} has {rank}; give one \
             box extent per dimension",
            box_shape.len()
        ));
    }
    use sys::CUtensorMapDataType as D;
    let data_type = match element_bytes {
        1 => D::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        2 => D::CU_TENSOR_MAP_DATA_TYPE_UINT16,
        4 => D::CU_TENSOR_MAP_DATA_TYPE_UINT32,
        8 => D::CU_TENSOR_MAP_DATA_TYPE_UINT64,
        n => {
            return bad(format!(
                "elements of {n} bytes: tensor maps copy 1-, 2-, 4- or 8-byte elements; view \
                 sub-byte data as bytes"
            ))
        }
    };
    let elem = element_bytes as u64;
    if !address.is_multiple_of(ALIGN) {
        return bad(format!(
            "address {address:#x} is not a multiple of {ALIGN} bytes, which TMA requires; pass \
             a buffer (or a view of one) that starts on a 16-byte boundary"
        ));
    }
    for (d, &x) in shape.iter().enumerate() {
        if x == 0 || x > MAX_DIM {
            return bad(format!(
                "dimension {d} of the view {shape:?} has {x} elements; a tensor map needs 1 to \
                 2^32 per dimension"
            ));
        }
    }
    for (d, &b) in box_shape.iter().enumerate() {
        if b == 0 || b > MAX_BOX {
            return bad(format!(
                "dimension {d} of the box {box_shape:?} is {b} elements; TMA copies boxes of 1 \
                 to {MAX_BOX} per dimension: copy a larger tile in several boxes"
            ));
        }
    }
    // Innermost first, as the driver wants them.
    let dims: Vec<u64> = shape.iter().rev().copied().collect();
    let boxes: Vec<u32> = box_shape.iter().rev().copied().collect();
    // Row-major: the stride of dimension i is the bytes of one step of it, the product of the
    // extents inside it; each must be 16-byte aligned and below 2^40.
    let mut strides = Vec::with_capacity(rank - 1);
    let mut stride = elem;
    for i in 1..rank {
        let dim = rank - 1 - i; // outermost-first index, as in messages
        stride = match stride.checked_mul(dims[i - 1]) {
            Some(s) if s < MAX_STRIDE => s,
            _ => {
                return bad(format!(
                    "one step of dimension {dim} of the view {shape:?} spans at least 2^40 bytes, more than a TMA stride can: split the tensor"
                ))
            }
        };
        // Only the rows (i = 1) can miss: outer strides are multiples of the row's.
        if !stride.is_multiple_of(ALIGN) {
            return bad(format!(
                "its rows are {} elements x {elem} bytes = {stride} bytes, not a multiple of \
                 {ALIGN}: TMA needs every row of the row-major view {shape:?} to start on a \
                 16-byte boundary; pad the innermost dimension to a multiple of {} elements",
                dims[0],
                ALIGN / elem
            ));
        }
        strides.push(stride);
    }
    let inner_box = u64::from(boxes[0]) * elem;
    if !inner_box.is_multiple_of(ALIGN) {
        return bad(format!(
            "the box's inner extent is {} elements x {elem} bytes = {inner_box} bytes, not a \
             multiple of {ALIGN}; make it a multiple of {} elements",
            boxes[0],
            ALIGN / elem
        ));
    }
    use sys::CUtensorMapSwizzle as S;
    let span = swizzle.span() as u64;
    let swizzle = match swizzle {
        TmaSwizzle::None => S::CU_TENSOR_MAP_SWIZZLE_NONE,
        TmaSwizzle::B32 => S::CU_TENSOR_MAP_SWIZZLE_32B,
        TmaSwizzle::B64 => S::CU_TENSOR_MAP_SWIZZLE_64B,
        TmaSwizzle::B128 => S::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    if span != 0 && inner_box > span {
        return bad(format!(
            "the box's inner extent is {inner_box} bytes, more than the {span}-byte swizzle \
             span; with a swizzle a box row holds at most {} elements: narrow the box or use a \
             wider swizzle",
            span / elem
        ));
    }
    Ok(Tiled {
        data_type,
        dims,
        strides,
        boxes,
        swizzle,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sys::CUtensorMapDataType as D;

    /// Validation of `(address, element_bytes, shape, box, swizzle)`: the error, which must
    /// name the argument and contain `says`.
    fn refused(
        address: u64,
        element_bytes: usize,
        shape: &[u64],
        box_shape: &[u32],
        swizzle: TmaSwizzle,
        says: &str,
    ) {
        let e = validate("a", address, element_bytes, shape, box_shape, swizzle).unwrap_err();
        assert_eq!(e.arg(), Some("a"), "{e}");
        assert!(e.to_string().contains(says), "expected `{says}` in: {e}");
    }

    const ADDR: u64 = 0x7f00_0000_0000;

    #[test]
    fn arguments_go_innermost_first_with_row_major_strides() {
        let t = validate("a", ADDR, 2, &[7, 300, 64], &[1, 16, 64], TmaSwizzle::B128).unwrap();
        assert_eq!(t.dims, [64, 300, 7]);
        assert_eq!(t.strides, [128, 128 * 300]);
        assert_eq!(t.boxes, [64, 16, 1]);
        assert_eq!(t.data_type, D::CU_TENSOR_MAP_DATA_TYPE_UINT16);
        assert_eq!(
            t.swizzle,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B
        );
        let t = validate("a", ADDR, 1, &[4096], &[256], TmaSwizzle::None).unwrap();
        assert_eq!(
            (t.dims, t.strides, t.boxes),
            (vec![4096], vec![], vec![256])
        );
        assert_eq!(t.data_type, D::CU_TENSOR_MAP_DATA_TYPE_UINT8);
        let t = validate("a", ADDR, 4, &[3, 5, 8], &[2, 2, 8], TmaSwizzle::B32).unwrap();
        assert_eq!(t.data_type, D::CU_TENSOR_MAP_DATA_TYPE_UINT32);
        assert_eq!(t.strides, [32, 160]);
        let t = validate(
            "a",
            ADDR,
            8,
            &[1, 1, 1, 1, 2],
            &[1, 1, 1, 1, 2],
            TmaSwizzle::None,
        );
        assert_eq!(t.unwrap().data_type, D::CU_TENSOR_MAP_DATA_TYPE_UINT64);
        // A box larger than the view is fine (the rest reads as zeros), as are the limits.
        let t = validate("a", ADDR, 2, &[1 << 32, 8], &[256, 8], TmaSwizzle::None).unwrap();
        assert_eq!(t.strides, [16]);
    }

    #[test]
    fn every_driver_requirement_is_an_error_naming_the_argument() {
        use TmaSwizzle::*;
        refused(ADDR, 2, &[], &[], None, "1 to 5 dimensions");
        refused(ADDR, 2, &[1, 2, 3, 4, 5, 8], &[1; 6], None, "has 6");
        refused(
            ADDR,
            2,
            &[4, 64],
            &[64],
            None,
            "one box extent per dimension",
        );
        refused(ADDR, 3, &[4, 64], &[4, 64], None, "elements of 3 bytes");
        refused(
            ADDR,
            0,
            &[4, 64],
            &[4, 64],
            None,
            "view sub-byte data as bytes",
        );
        refused(
            ADDR + 8,
            2,
            &[4, 64],
            &[4, 64],
            None,
            "not a multiple of 16 bytes",
        );
        refused(ADDR, 2, &[0, 64], &[4, 64], None, "dimension 0 of the view");
        refused(ADDR, 1, &[(1 << 32) + 1], &[16], None, "1 to 2^32");
        refused(ADDR, 2, &[4, 64], &[0, 64], None, "dimension 0 of the box");
        refused(ADDR, 1, &[4, 512], &[4, 512], None, "1 to 256");
        // 100 f16 = 200 bytes per row: rows would start off 16-byte boundaries.
        refused(ADDR, 2, &[4, 100], &[4, 64], None, "multiple of 8 elements");
        // 2^33 rows of 2^31 bytes: the outer stride reaches 2^40.
        refused(ADDR, 1, &[2, 1 << 30, 1 << 10], &[1, 1, 16], None, "2^40");
        refused(ADDR, 4, &[4, 64], &[4, 6], None, "multiple of 4 elements");
        refused(ADDR, 2, &[4, 64], &[4, 32], B32, "at most 16 elements");
        refused(ADDR, 2, &[4, 64], &[4, 64], B64, "64-byte swizzle");
        refused(ADDR, 1, &[4, 256], &[4, 256], B128, "at most 128 elements");
    }

    /// Encoding needs the driver; without one it is the runtime's "unavailable" error after
    /// validation, never a panic (the GPU test, `tests/tensor_map.rs`, encodes a real one).
    #[test]
    fn encoding_without_a_driver_is_an_error() {
        match encode_tiled("a", ADDR, 2, &[64, 64], &[64, 64], TmaSwizzle::B128) {
            Err(e) if e.is_unavailable() => {}
            Err(e) => assert_eq!(e.arg(), Option::None, "valid arguments refused: {e}"),
            Ok(map) => assert_ne!(map.words(), &[0; 16]),
        }
        // Bad arguments are refused before the driver is asked, with or without one.
        let e = encode_tiled("x", ADDR + 4, 2, &[64, 64], &[64, 64], TmaSwizzle::B128);
        assert_eq!(e.unwrap_err().arg(), Some("x"));
    }
}
