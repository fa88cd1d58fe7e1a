//! Typed device memory: [`DeviceBuffer<T>`], views into it, and [`PackedTensor`] for sub-byte
//! data that knows its logical shape and data type.

use crate::context::Context;
use crate::element::Element;
use crate::error::{Result, RuntimeError};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, DevicePtr, DeviceSlice};
use std::ops::Range;
use tilus_core::DType;

fn alloc_err(what: &str, bytes: usize, e: cudarc::driver::DriverError) -> RuntimeError {
    RuntimeError::driver(format!("{what} ({bytes} bytes)"), e)
}

/// `len` elements of `T` in device memory, owned. Dropping it frees the memory (after the
/// stream's pending work on it).
pub struct DeviceBuffer<T: Element> {
    slice: CudaSlice<T>,
}

impl<T: Element> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer<{}>[{}]", T::SCALAR, self.len())
    }
}

impl<T: Element> DeviceBuffer<T> {
    /// A copy of `data` on the device.
    pub fn from_host(ctx: &Context, data: &[T]) -> Result<Self> {
        let slice = ctx
            .stream()
            .clone_htod(data)
            .map_err(|e| alloc_err("copying to the device", std::mem::size_of_val(data), e))?;
        Ok(DeviceBuffer { slice })
    }

    /// `len` zeros. Errors name `len` if its byte size overflows.
    pub fn zeros(ctx: &Context, len: usize) -> Result<Self> {
        let bytes = byte_size::<T>("len", len)?;
        let slice = ctx
            .stream()
            .alloc_zeros(len)
            .map_err(|e| alloc_err("allocating device memory", bytes, e))?;
        Ok(DeviceBuffer { slice })
    }

    /// The buffer in `slot` when it holds at least `len` elements, else `len` new zeros put
    /// there: the grow-on-demand scratch of a layer's split-k partials and tables. A buffer that
    /// serves is kept with its contents (semaphores a kernel leaves zero stay zero); the old
    /// one is replaced only once the new exists, so a failed allocation keeps it.
    pub fn grow_zeroed<'a>(
        slot: &'a mut Option<Self>,
        ctx: &Context,
        len: usize,
    ) -> Result<&'a mut Self> {
        if slot.as_ref().is_none_or(|b| b.len() < len) {
            *slot = Some(Self::zeros(ctx, len)?);
        }
        Ok(slot.as_mut().expect("filled above"))
    }

    /// `len` copies of `value` (e.g. NaN to poison an output before a launch).
    pub fn filled(ctx: &Context, len: usize, value: T) -> Result<Self> {
        // Checked first: a host `vec!` of an impossible size is a panic, not an error.
        byte_size::<T>("len", len)?;
        Self::from_host(ctx, &vec![value; len])
    }

    pub fn len(&self) -> usize {
        self.slice.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slice.len() == 0
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.slice.num_bytes()
    }

    /// The device address (for [`crate::check_align`]).
    pub fn device_ptr(&self) -> u64 {
        let (ptr, _sync) = self.slice.device_ptr(self.slice.stream());
        ptr
    }

    /// A host copy. Waits for pending work on the stream.
    pub fn to_host(&self) -> Result<Vec<T>> {
        let stream = self.slice.stream().clone();
        stream
            .clone_dtoh(&self.slice)
            .map_err(|e| alloc_err("copying to the host", self.size_bytes(), e))
    }

    /// Overwrite the whole buffer with `data`, which must have the same length.
    pub fn copy_from_host(&mut self, data: &[T]) -> Result<()> {
        crate::checks::check_len("data", data.len(), self.len())?;
        let stream = self.slice.stream().clone();
        stream
            .memcpy_htod(data, &mut self.slice)
            .map_err(|e| alloc_err("copying to the device", std::mem::size_of_val(data), e))
    }

    /// Set every element to zero bits on the device, asynchronously on the buffer's stream (no
    /// host copy).
    pub fn fill_zeros(&mut self) -> Result<()> {
        let stream = self.slice.stream().clone();
        stream
            .memset_zeros(&mut self.slice)
            .map_err(|e| crate::error::RuntimeError::driver("zeroing a buffer".to_string(), e))
    }

    /// Set every element to `value` (through a host copy; see [`Self::fill_zeros`]).
    pub fn fill(&mut self, value: T) -> Result<()> {
        self.copy_from_host(&vec![value; self.len()])
    }

    /// Elements `range` as a read-only view (a kernel argument like the buffer itself).
    pub fn view(&self, range: Range<usize>) -> Result<DeviceView<'_, T>> {
        check_range(&range, self.len())?;
        let view = self.slice.slice(range);
        Ok(DeviceView { view })
    }

    /// Elements `range` as a writable view.
    pub fn view_mut(&mut self, range: Range<usize>) -> Result<DeviceViewMut<'_, T>> {
        check_range(&range, self.len())?;
        let view = self.slice.slice_mut(range);
        Ok(DeviceViewMut { view })
    }

    /// cudarc's slice, for what the runtime does not wrap.
    pub fn cuda_slice(&self) -> &CudaSlice<T> {
        &self.slice
    }

    /// cudarc's slice, mutably.
    pub fn cuda_slice_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

/// Bytes of `len` elements of `T`, or an error naming `arg` when that exceeds what an
/// allocation can hold (`isize::MAX` bytes).
pub fn byte_size<T>(arg: &str, len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| {
            RuntimeError::invalid_arg(
                arg,
                format!(
                    "{len} elements of {} bytes are more than an allocation can hold",
                    std::mem::size_of::<T>()
                ),
            )
        })
}

fn check_range(range: &Range<usize>, len: usize) -> Result<()> {
    if range.start > range.end || range.end > len {
        return Err(RuntimeError::invalid_arg(
            "range",
            format!(
                "{}..{} is out of bounds for a buffer of {len} elements",
                range.start, range.end
            ),
        ));
    }
    Ok(())
}

/// A read-only window into a [`DeviceBuffer`], or into device memory another library owns.
pub struct DeviceView<'a, T: Element> {
    pub(crate) view: CudaView<'a, T>,
}

impl<'a, T: Element> DeviceView<'a, T> {
    /// Wrap a cudarc view, e.g. of another framework's tensor, so that kernels read it in place
    /// (no copy). Launches go to the stream of the [`Context`] they are given; when that is not
    /// the view's own stream, order the two streams yourself.
    pub fn from_cuda(view: CudaView<'a, T>) -> Self {
        DeviceView { view }
    }
}

/// `len`, `is_empty` and `device_ptr` of both view types.
macro_rules! view_accessors {
    ($view:ident) => {
        impl<T: Element> $view<'_, T> {
            pub fn len(&self) -> usize {
                self.view.len()
            }
            pub fn is_empty(&self) -> bool {
                self.view.len() == 0
            }
            /// The device address of the first element.
            pub fn device_ptr(&self) -> u64 {
                let (ptr, _sync) = self.view.device_ptr(self.view.stream());
                ptr
            }
        }
    };
}
view_accessors!(DeviceView);
view_accessors!(DeviceViewMut);

impl<T: Element> DeviceView<'_, T> {
    /// A host copy.
    pub fn to_host(&self) -> Result<Vec<T>> {
        self.view
            .stream()
            .clone_dtoh(&self.view)
            .map_err(|e| alloc_err("copying to the host", self.view.num_bytes(), e))
    }
}

/// A writable window into a [`DeviceBuffer`], or into device memory another library owns.
pub struct DeviceViewMut<'a, T: Element> {
    pub(crate) view: CudaViewMut<'a, T>,
}

impl<'a, T: Element> DeviceViewMut<'a, T> {
    /// Wrap a writable cudarc view so that kernels write it in place (see
    /// [`DeviceView::from_cuda`]).
    pub fn from_cuda(view: CudaViewMut<'a, T>) -> Self {
        DeviceViewMut { view }
    }
}

/// Bytes needed to store `numel` values of `bits` bits each, packed with no gaps (a value may
/// span two bytes). `None` on overflow.
pub fn packed_byte_len(numel: usize, bits: u32) -> Option<usize> {
    numel.checked_mul(bits as usize).map(|b| b.div_ceil(8))
}

/// Number of elements of `shape`; `None` on overflow.
pub fn shape_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// Check that `len` bytes is exactly what `shape` elements of `bits` bits pack into.
/// `arg` names the argument in the error.
pub fn check_packed_len(
    arg: &str,
    len: usize,
    shape: &[usize],
    bits: u32,
    dtype: &str,
) -> Result<()> {
    let expected = shape_numel(shape)
        .and_then(|n| packed_byte_len(n, bits))
        .ok_or_else(|| {
            RuntimeError::invalid_arg(arg, format!("shape {shape:?} is too large to address"))
        })?;
    if len != expected {
        return Err(RuntimeError::invalid_arg(
            arg,
            format!(
                "{len} bytes, but a {dtype} tensor of shape {shape:?} ({bits} bits per value, \
                 packed) takes {expected} bytes"
            ),
        ));
    }
    Ok(())
}

/// Bytes of a `dtype` tensor of `shape`, packed: errors name `dtype` for a hand-built invalid
/// type (see [`DType::validate`]) and `shape` when the size overflows. [`PackedTensor`] checks
/// every construction with it before touching the device.
pub fn packed_tensor_bytes(dtype: DType, shape: &[usize]) -> Result<usize> {
    dtype
        .validate()
        .map_err(|e| RuntimeError::invalid_arg("dtype", e.to_string()))?;
    shape_numel(shape)
        .and_then(|n| packed_byte_len(n, dtype.bits()))
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| {
            RuntimeError::invalid_arg(
                "shape",
                format!("{shape:?} is too large to address as {dtype}"),
            )
        })
}

/// Packed low-precision data on the device: the bytes plus the logical shape and data type they
/// hold. The byte length always equals `ceil(numel * bits / 8)`.
pub struct PackedTensor {
    dtype: DType,
    shape: Vec<usize>,
    bytes: DeviceBuffer<u8>,
}

impl std::fmt::Debug for PackedTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedTensor")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl PackedTensor {
    /// Upload packed `bytes` holding a `dtype` tensor of `shape`.
    pub fn from_host(ctx: &Context, dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<Self> {
        packed_tensor_bytes(dtype, shape)?;
        check_packed_len(
            "bytes",
            bytes.len(),
            shape,
            dtype.bits(),
            &format!("{dtype:?}"),
        )?;
        Ok(PackedTensor {
            dtype,
            shape: shape.to_vec(),
            bytes: DeviceBuffer::from_host(ctx, bytes)?,
        })
    }

    /// An all-zero-bits tensor.
    pub fn zeros(ctx: &Context, dtype: DType, shape: &[usize]) -> Result<Self> {
        let len = packed_tensor_bytes(dtype, shape)?;
        Ok(PackedTensor {
            dtype,
            shape: shape.to_vec(),
            bytes: DeviceBuffer::zeros(ctx, len)?,
        })
    }

    /// Wrap an existing byte buffer, checking its length.
    pub fn from_buffer(dtype: DType, shape: &[usize], bytes: DeviceBuffer<u8>) -> Result<Self> {
        packed_tensor_bytes(dtype, shape)?;
        check_packed_len(
            "bytes",
            bytes.len(),
            shape,
            dtype.bits(),
            &format!("{dtype:?}"),
        )?;
        Ok(PackedTensor {
            dtype,
            shape: shape.to_vec(),
            bytes,
        })
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// Number of logical elements.
    pub fn numel(&self) -> usize {
        shape_numel(&self.shape).expect("checked at construction")
    }
    /// The packed bytes.
    pub fn bytes(&self) -> &DeviceBuffer<u8> {
        &self.bytes
    }
    /// The packed bytes, writable (the length cannot change).
    pub fn bytes_mut(&mut self) -> &mut DeviceBuffer<u8> {
        &mut self.bytes
    }
    /// A host copy of the packed bytes.
    pub fn to_host(&self) -> Result<Vec<u8>> {
        self.bytes.to_host()
    }
    pub fn into_parts(self) -> (DType, Vec<usize>, DeviceBuffer<u8>) {
        (self.dtype, self.shape, self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_lengths() {
        assert_eq!(packed_byte_len(8, 1), Some(1));
        assert_eq!(packed_byte_len(9, 1), Some(2));
        assert_eq!(packed_byte_len(4, 6), Some(3));
        assert_eq!(packed_byte_len(5, 6), Some(4)); // 30 bits
        assert_eq!(packed_byte_len(3, 3), Some(2)); // 9 bits: the last value spans bytes
        assert_eq!(packed_byte_len(0, 4), Some(0));
        assert_eq!(packed_byte_len(usize::MAX, 2), None);
        assert_eq!(shape_numel(&[]), Some(1));
        assert_eq!(shape_numel(&[3, 0, 5]), Some(0));
        assert_eq!(shape_numel(&[usize::MAX, 2]), None);
    }

    #[test]
    fn packed_len_check_names_argument_and_shape() {
        assert!(check_packed_len("w", 96, &[16, 8], 6, "i6").is_ok());
        let e = check_packed_len("w", 95, &[16, 8], 6, "i6").unwrap_err();
        assert_eq!(e.arg(), Some("w"));
        let msg = e.to_string();
        assert!(
            msg.contains("95 bytes") && msg.contains("[16, 8]") && msg.contains("96"),
            "{msg}"
        );
        let e = check_packed_len("w", 0, &[usize::MAX, 4], 4, "u4").unwrap_err();
        assert!(e.to_string().contains("too large"));
    }

    /// `PackedTensor`'s checks, which run before the device is touched: a hand-built invalid
    /// type (`UInt(0)` packed to 0 bytes per value, `Int(1)` decoded to NaN) and a shape whose
    /// byte size overflows are errors naming the argument.
    #[test]
    fn packed_tensor_checks_dtype_and_shape() {
        let mut rng = rand::rng();
        use rand::Rng;
        let shape = [rng.random_range(1..50usize), rng.random_range(1..50usize)];
        let n = shape[0] * shape[1];
        assert_eq!(
            packed_tensor_bytes(DType::Int(6), &shape).unwrap(),
            (n * 6).div_ceil(8)
        );
        for d in [
            DType::UInt(0),
            DType::Int(1),
            DType::Float { exp: 0, man: 5 },
        ] {
            let e = packed_tensor_bytes(d, &shape).unwrap_err();
            assert_eq!(e.arg(), Some("dtype"), "{e}");
            assert!(e.to_string().contains(&format!("{d:?}")), "{e}");
        }
        let e = packed_tensor_bytes(DType::F32, &[1 << 31, 1 << 31]).unwrap_err();
        assert_eq!(e.arg(), Some("shape"), "{e}");
        let e = packed_tensor_bytes(DType::UInt(4), &[usize::MAX, 2]).unwrap_err();
        assert_eq!(e.arg(), Some("shape"), "{e}");
        assert!(byte_size::<f32>("len", 1 << 40).is_ok());
        let e = byte_size::<f32>("len", usize::MAX / 2).unwrap_err();
        assert_eq!(e.arg(), Some("len"), "{e}");
    }
}
