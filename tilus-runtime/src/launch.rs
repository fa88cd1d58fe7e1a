//! Loaded kernels and checked launches.
//!
//! ```no_run
//! # use tilus_runtime::*;
//! # fn main() -> Result<()> {
//! let ctx = Context::new(0)?;
//! let src = KernelSource::new(
//!     "scale", "", "scale",
//!     r#"extern "C" __global__ void scale(int n, float s, const float* x, float* y) {
//!            int i = blockIdx.x * blockDim.x + threadIdx.x;
//!            if (i < n) y[i] = s * x[i];
//!        }"#,
//!     vec![Param::value::<i32>("n"), Param::value::<f32>("s"),
//!          Param::ptr::<f32>("x"), Param::ptr_mut::<f32>("y")],
//! );
//! let kernel = ctx.load(&src)?;
//! let x = DeviceBuffer::from_host(&ctx, &[1.0f32; 1000])?;
//! let mut y = DeviceBuffer::<f32>::zeros(&ctx, 1000)?;
//! check_len("y", y.len(), x.len())?;
//! kernel
//!     .args()
//!     .value(1000i32)
//!     .value(2.0f32)
//!     .arg(&x)
//!     .arg_mut(&mut y)
//!     .launch(LaunchDims::new([4, 1, 1], [256, 1, 1]))?;
//! assert_eq!(y.to_host()?[0], 2.0);
//! # Ok(()) }
//! ```
//!
//! Launches are checked before they reach the driver: the arguments against the kernel's
//! declared parameters (count, pointer or value, element type, writability), the grid and block
//! against the device's limits and the kernel's own thread limit, and dynamic shared memory
//! against the opt-in maximum; above the default 48 KiB the kernel is opted in automatically.
//! Each failure is an [`RuntimeError::InvalidArgument`] naming the argument (`grid.y`, `block`,
//! `dyn_smem`, or the parameter's name).

use crate::buffer::{DeviceBuffer, DeviceView, DeviceViewMut, PackedTensor};
#[cfg(test)]
use crate::checks::{check_align, check_divisible, check_len, check_min_len};
use crate::element::{Element, Scalar};
use crate::error::{Result, RuntimeError};
use crate::kernel::{Param, ParamType};
use crate::loaded::{LaunchLimits, LoadedKernel};
use crate::tensor_map::TensorMap;
use cudarc::driver::{CudaStream, CudaView, CudaViewMut, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// Grid and block shape and dynamic shared memory of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchDims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub dyn_smem: u32,
}

impl LaunchDims {
    pub fn new(grid: [u32; 3], block: [u32; 3]) -> LaunchDims {
        LaunchDims {
            grid,
            block,
            dyn_smem: 0,
        }
    }
    /// Set the dynamic shared memory per block.
    pub fn with_dyn_smem(mut self, bytes: u32) -> LaunchDims {
        self.dyn_smem = bytes;
        self
    }
}

impl LoadedKernel {
    /// Start collecting arguments for a launch.
    pub fn args(&self) -> KernelArgs<'_> {
        KernelArgs {
            kernel: self,
            slots: Vec::with_capacity(self.params().len()),
            dependent: false,
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Something that can be passed as a pointer argument: [`DeviceBuffer`], [`DeviceView`],
/// [`DeviceViewMut`], [`PackedTensor`] (as bytes).
pub trait KernelArg: sealed::Sealed {
    #[doc(hidden)]
    fn element(&self) -> Scalar;
    #[doc(hidden)]
    fn push_ref<'s>(&'s self, args: &mut cudarc::driver::LaunchArgs<'s>);
    /// The device address passed (for alignment checks).
    fn address(&self) -> u64;
    /// Bytes the kernel may access through it (for buffer-size checks).
    fn size_bytes(&self) -> usize;
}

/// A pointer argument the kernel may write: [`DeviceBuffer`], [`DeviceViewMut`],
/// [`PackedTensor`].
pub trait KernelArgMut: sealed::Sealed {
    #[doc(hidden)]
    fn element(&self) -> Scalar;
    #[doc(hidden)]
    fn push_mut<'s>(&'s mut self, args: &mut cudarc::driver::LaunchArgs<'s>);
    /// The device address passed (for alignment checks).
    fn address(&self) -> u64;
    /// Bytes the kernel may access through it (for buffer-size checks).
    fn size_bytes(&self) -> usize;
}

/// A read-only device argument of `T` elements: a whole [`DeviceBuffer`] or a [`DeviceView`] of
/// part of one (one layer of a KV cache, say) or of another framework's memory
/// ([`DeviceView::from_cuda`]). `#[kernel]` launchers take `&impl DeviceRead<T>`.
pub trait DeviceRead<T: Element>: KernelArg {
    /// cudarc's view of the elements (for library calls such as cuBLAS).
    fn cuda_view(&self) -> CudaView<'_, T>;
    /// Number of `T` elements.
    fn elements(&self) -> usize {
        self.size_bytes() / std::mem::size_of::<T>()
    }
}
/// A writable device argument of `T` elements: a [`DeviceBuffer`] or a [`DeviceViewMut`].
/// `#[kernel]` launchers take `&mut impl DeviceWrite<T>`.
pub trait DeviceWrite<T: Element>: KernelArgMut {
    /// cudarc's writable view of the elements.
    fn cuda_view_mut(&mut self) -> CudaViewMut<'_, T>;
    /// Number of `T` elements.
    fn elements(&self) -> usize {
        self.size_bytes() / std::mem::size_of::<T>()
    }
}

impl<T: Element> DeviceRead<T> for DeviceBuffer<T> {
    fn cuda_view(&self) -> CudaView<'_, T> {
        self.cuda_slice().as_view()
    }
}
impl<T: Element> DeviceRead<T> for DeviceView<'_, T> {
    fn cuda_view(&self) -> CudaView<'_, T> {
        self.view.slice(..)
    }
}
impl DeviceRead<u8> for PackedTensor {
    fn cuda_view(&self) -> CudaView<'_, u8> {
        self.bytes().cuda_view()
    }
}
impl<T: Element> DeviceWrite<T> for DeviceBuffer<T> {
    fn cuda_view_mut(&mut self) -> CudaViewMut<'_, T> {
        self.cuda_slice_mut().as_view_mut()
    }
}
impl<T: Element> DeviceWrite<T> for DeviceViewMut<'_, T> {
    fn cuda_view_mut(&mut self) -> CudaViewMut<'_, T> {
        self.view.slice_mut(..)
    }
}
impl DeviceWrite<u8> for PackedTensor {
    fn cuda_view_mut(&mut self) -> CudaViewMut<'_, u8> {
        self.bytes_mut().cuda_view_mut()
    }
}

impl<T: Element> sealed::Sealed for DeviceBuffer<T> {}
impl<T: Element> KernelArg for DeviceBuffer<T> {
    fn element(&self) -> Scalar {
        T::SCALAR
    }
    fn push_ref<'s>(&'s self, args: &mut cudarc::driver::LaunchArgs<'s>) {
        args.arg(self.cuda_slice());
    }
    fn address(&self) -> u64 {
        self.device_ptr()
    }
    fn size_bytes(&self) -> usize {
        self.len() * std::mem::size_of::<T>()
    }
}
impl<T: Element> KernelArgMut for DeviceBuffer<T> {
    fn element(&self) -> Scalar {
        T::SCALAR
    }
    fn push_mut<'s>(&'s mut self, args: &mut cudarc::driver::LaunchArgs<'s>) {
        args.arg(self.cuda_slice_mut());
    }
    fn address(&self) -> u64 {
        self.device_ptr()
    }
    fn size_bytes(&self) -> usize {
        self.len() * std::mem::size_of::<T>()
    }
}

impl<T: Element> sealed::Sealed for DeviceView<'_, T> {}
impl<T: Element> KernelArg for DeviceView<'_, T> {
    fn element(&self) -> Scalar {
        T::SCALAR
    }
    fn push_ref<'s>(&'s self, args: &mut cudarc::driver::LaunchArgs<'s>) {
        args.arg(&self.view);
    }
    fn address(&self) -> u64 {
        self.device_ptr()
    }
    fn size_bytes(&self) -> usize {
        self.len() * std::mem::size_of::<T>()
    }
}

impl<T: Element> sealed::Sealed for DeviceViewMut<'_, T> {}
impl<T: Element> KernelArgMut for DeviceViewMut<'_, T> {
    fn element(&self) -> Scalar {
        T::SCALAR
    }
    fn push_mut<'s>(&'s mut self, args: &mut cudarc::driver::LaunchArgs<'s>) {
        args.arg(&mut self.view);
    }
    fn address(&self) -> u64 {
        self.device_ptr()
    }
    fn size_bytes(&self) -> usize {
        self.len() * std::mem::size_of::<T>()
    }
}

impl sealed::Sealed for PackedTensor {}
impl KernelArg for PackedTensor {
    fn element(&self) -> Scalar {
        Scalar::U8
    }
    fn push_ref<'s>(&'s self, args: &mut cudarc::driver::LaunchArgs<'s>) {
        self.bytes().push_ref(args)
    }
    fn address(&self) -> u64 {
        self.bytes().device_ptr()
    }
    fn size_bytes(&self) -> usize {
        self.bytes().len()
    }
}
impl KernelArgMut for PackedTensor {
    fn element(&self) -> Scalar {
        Scalar::U8
    }
    fn push_mut<'s>(&'s mut self, args: &mut cudarc::driver::LaunchArgs<'s>) {
        self.bytes_mut().push_mut(args)
    }
    fn address(&self) -> u64 {
        self.bytes().device_ptr()
    }
    fn size_bytes(&self) -> usize {
        self.bytes().len()
    }
}

enum Slot<'a> {
    /// A pointer and the element type the signature check sees (the buffer's own, or the
    /// parameter's for bytes passed with [`KernelArgs::arg_bytes_as`]).
    Ref(&'a dyn KernelArg, Scalar),
    Mut(&'a mut dyn KernelArgMut, Scalar),
    /// Element type and the value's little-endian bytes in a 64-bit slot.
    Value(Scalar, u64),
    /// A tensor map, boxed so its address stays put while the builder holds it.
    TensorMap(Box<TensorMap>),
}

/// How an argument was supplied, for signature checking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Supplied {
    Ref(Scalar),
    Mut(Scalar),
    Value(Scalar),
    TensorMap,
}

impl Slot<'_> {
    fn supplied(&self) -> Supplied {
        match self {
            Slot::Ref(_, e) => Supplied::Ref(*e),
            Slot::Mut(_, e) => Supplied::Mut(*e),
            Slot::Value(s, _) => Supplied::Value(*s),
            Slot::TensorMap(_) => Supplied::TensorMap,
        }
    }
}

/// Arguments of one launch, in parameter order. Built with [`LoadedKernel::args`], finished by
/// [`KernelArgs::launch`].
pub struct KernelArgs<'a> {
    kernel: &'a LoadedKernel,
    slots: Vec<Slot<'a>>,
    dependent: bool,
}

impl<'a> KernelArgs<'a> {
    /// A read-only pointer argument.
    pub fn arg<B: KernelArg>(mut self, buffer: &'a B) -> Self {
        self.slots.push(Slot::Ref(buffer, buffer.element()));
        self
    }
    /// A pointer argument the kernel writes.
    pub fn arg_mut<B: KernelArgMut>(mut self, buffer: &'a mut B) -> Self {
        let e = buffer.element();
        self.slots.push(Slot::Mut(buffer, e));
        self
    }
    /// A read-only pointer argument chosen at run time (e.g. from a program's parameter list).
    pub fn arg_dyn(mut self, buffer: &'a dyn KernelArg) -> Self {
        self.slots.push(Slot::Ref(buffer, buffer.element()));
        self
    }
    /// A written pointer argument chosen at run time.
    pub fn arg_mut_dyn(mut self, buffer: &'a mut dyn KernelArgMut) -> Self {
        let e = buffer.element();
        self.slots.push(Slot::Mut(buffer, e));
        self
    }
    /// A byte buffer for a pointer parameter of `element`s: a parameter whose element type a
    /// kernel's configuration chooses (`Global<A>` with `A` a dtype parameter), whose callers
    /// hold bytes. Anything but a `u8` buffer is checked as itself, so a typed buffer of the
    /// wrong type is still refused. Sizes are checked in bytes by the caller's views.
    pub fn arg_bytes_as(mut self, buffer: &'a dyn KernelArg, element: Scalar) -> Self {
        let e = Self::bytes_as(buffer.element(), element);
        self.slots.push(Slot::Ref(buffer, e));
        self
    }
    /// [`Self::arg_bytes_as`] for a parameter the kernel writes.
    pub fn arg_mut_bytes_as(mut self, buffer: &'a mut dyn KernelArgMut, element: Scalar) -> Self {
        let e = Self::bytes_as(buffer.element(), element);
        self.slots.push(Slot::Mut(buffer, e));
        self
    }
    /// The element type a buffer passed as bytes is checked as: a byte buffer takes the
    /// parameter's type, and any buffer is bytes to a byte parameter (a kernel that reads a
    /// cache of any element type as bytes); otherwise the buffer keeps its own type.
    fn bytes_as(have: Scalar, element: Scalar) -> Scalar {
        if have == Scalar::U8 || element == Scalar::U8 {
            element
        } else {
            have
        }
    }
    /// A by-value argument.
    pub fn value<T: Element>(mut self, value: T) -> Self {
        self.slots
            .push(Slot::Value(T::SCALAR, value.to_param_bits()));
        self
    }
    /// Launch as a *programmatic dependent* of the kernel before it on the stream (sm_90): the
    /// kernel may start before that one ends, as soon as every block of it has executed
    /// `griddepcontrol.launch_dependents` or exited, and must execute `griddepcontrol.wait`
    /// before it touches anything that kernel writes (or reads, for its own writes). That
    /// contract is the caller's: the runtime cannot see which memory the two kernels share.
    /// Below sm_90, and on a context whose buffers cudarc orders across streams with events
    /// (the launch would bypass them), the launch is an ordinary one, in which the wait is a
    /// no-op.
    pub fn dependent(mut self, dependent: bool) -> Self {
        self.dependent = dependent;
        self
    }
    /// A tensor map passed by value (from [`crate::encode_tiled`]).
    pub fn tensor_map(mut self, map: TensorMap) -> Self {
        self.slots.push(Slot::TensorMap(Box::new(map)));
        self
    }

    /// Check everything, opt into large dynamic shared memory if needed, and enqueue the
    /// launch on the context's stream. Returns when the launch is queued; errors inside the
    /// kernel show up at the next synchronizing call ([`crate::Context::synchronize`], `to_host`).
    pub fn launch(self, dims: LaunchDims) -> Result<()> {
        let stream = self.kernel.stream.clone();
        self.launch_on(&stream, dims)
    }

    /// [`KernelArgs::launch`] on another stream of the same context (see
    /// [`crate::Context::new_stream`]). The buffers' reads and writes are ordered across streams by
    /// the events cudarc records on them.
    pub fn launch_on(self, stream: &Arc<CudaStream>, dims: LaunchDims) -> Result<()> {
        let kernel = self.kernel;
        if stream.context().cu_ctx() != kernel.stream.context().cu_ctx() {
            return Err(RuntimeError::invalid_arg(
                "stream",
                format!(
                    "kernel {} was loaded on another device's context",
                    kernel.label()
                ),
            ));
        }
        let supplied: Vec<Supplied> = self.slots.iter().map(Slot::supplied).collect();
        check_signature(kernel.params(), &supplied)?;
        check_dims(&kernel.limits, &dims)?;
        kernel.ensure_dyn_smem(dims.dyn_smem)?;

        let cfg = LaunchConfig {
            grid_dim: (dims.grid[0], dims.grid[1], dims.grid[2]),
            block_dim: (dims.block[0], dims.block[1], dims.block[2]),
            shared_mem_bytes: dims.dyn_smem,
        };
        // `stream` is on the kernel's context (checked above), so on the device it was loaded for.
        if self.dependent
            && kernel.dependent_launches
            && !stream.context().is_managing_stream_synchronization()
        {
            return launch_dependent(kernel, stream, &self.slots, cfg);
        }
        let mut slots = self.slots;
        let mut builder = stream.launch_builder(&kernel.function);
        for slot in slots.iter_mut() {
            match slot {
                Slot::Ref(a, _) => a.push_ref(&mut builder),
                Slot::Mut(a, _) => a.push_mut(&mut builder),
                Slot::Value(_, bits) => {
                    builder.arg(&*bits);
                }
                Slot::TensorMap(map) => {
                    builder.arg(&**map);
                }
            }
        }
        // SAFETY: the arguments match the kernel's declared parameters in number, kind and
        // element type (checked above); pointers come from live device allocations borrowed
        // for the launch; each value sits in an 8-byte slot of which the driver reads the
        // parameter's size; each tensor map is 128 bytes, the size of a `CUtensorMap`
        // parameter. What the kernel does with its pointers is the generated code's
        // contract, as with any GPU kernel.
        unsafe { builder.launch(cfg) }
            .map_err(|e| RuntimeError::driver(format!("launching kernel {}", kernel.label()), e))?;
        Ok(())
    }
}

/// [`KernelArgs::launch_on`] as a programmatic dependent of the stream's prior kernel
/// (`cuLaunchKernelEx` with `PROGRAMMATIC_STREAM_SERIALIZATION`), for a context that orders
/// nothing with events (the caller checked): cudarc's launcher takes no launch attributes.
fn launch_dependent(
    kernel: &LoadedKernel,
    stream: &Arc<CudaStream>,
    slots: &[Slot<'_>],
    cfg: LaunchConfig,
) -> Result<()> {
    use cudarc::driver::sys;
    // Each parameter's bytes at a stable address: device pointers and values in 64-bit slots
    // (the driver reads the parameter's size from the start), tensor maps where they are boxed.
    let words: Vec<u64> = slots
        .iter()
        .map(|slot| match slot {
            Slot::Ref(a, _) => a.address(),
            Slot::Mut(a, _) => a.address(),
            Slot::Value(_, bits) => *bits,
            Slot::TensorMap(_) => 0,
        })
        .collect();
    let mut params: Vec<*mut std::ffi::c_void> = slots
        .iter()
        .zip(&words)
        .map(|(slot, word)| match slot {
            Slot::TensorMap(map) => (&**map) as *const TensorMap as *mut std::ffi::c_void,
            _ => word as *const u64 as *mut std::ffi::c_void,
        })
        .collect();
    let mut attr = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        // SAFETY: an all-zero union is a valid value of every member (plain integers).
        value: unsafe { std::mem::zeroed() },
    };
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    stream
        .context()
        .bind_to_thread()
        .map_err(|e| RuntimeError::driver("binding the context", e))?;
    // SAFETY: as in `launch_on`: the slots were checked against the kernel's parameters; each
    // entry of `params` points at its parameter's bytes (`words` and the boxed maps outlive
    // the call, which copies them); the function and stream belong to the bound context.
    unsafe {
        sys::cuLaunchKernelEx(
            &config,
            kernel.function.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
    .map_err(|e| RuntimeError::driver(format!("launching kernel {}", kernel.label()), e))
}

/// Check supplied arguments against declared parameters. Errors name the parameter.
pub fn check_signature(params: &[Param], supplied: &[Supplied]) -> Result<()> {
    for (i, (param, got)) in params.iter().zip(supplied).enumerate() {
        let wrong = |what: String| {
            Err(RuntimeError::invalid_arg(
                &param.name,
                format!("parameter {i} is `{}`, but {what}", param.ty),
            ))
        };
        match (param.ty, *got) {
            (ParamType::Ptr(want), Supplied::Ref(have) | Supplied::Mut(have))
            | (ParamType::PtrMut(want), Supplied::Mut(have))
                if want == have => {}
            (ParamType::Value(want), Supplied::Value(have)) if want == have => {}
            (ParamType::TensorMap, Supplied::TensorMap) => {}
            (ParamType::TensorMap, Supplied::Ref(s) | Supplied::Mut(s)) => {
                return wrong(format!(
                    "a {s} buffer was passed: encode a map of it with `encode_tiled` and pass \
                     that with `.tensor_map`"
                ))
            }
            (_, Supplied::TensorMap) => return wrong("a tensor map was passed".into()),
            (ParamType::PtrMut(want), Supplied::Ref(have)) if want == have => {
                return wrong(
                    "it was passed read-only: the kernel writes it, use `.arg_mut`".into(),
                )
            }
            (ParamType::Ptr(_) | ParamType::PtrMut(_), Supplied::Value(s)) => {
                return wrong(format!("a {s} value was passed"))
            }
            (ParamType::Value(_), Supplied::Ref(s) | Supplied::Mut(s)) => {
                return wrong(format!("a {s} buffer was passed"))
            }
            (_, Supplied::Ref(s) | Supplied::Mut(s)) => {
                return wrong(format!("a {s} buffer was passed"))
            }
            (_, Supplied::Value(s)) => return wrong(format!("a {s} value was passed")),
        }
    }
    if supplied.len() < params.len() {
        let missing = &params[supplied.len()];
        return Err(RuntimeError::invalid_arg(
            &missing.name,
            format!(
                "missing: the kernel takes {} arguments, {} were passed",
                params.len(),
                supplied.len()
            ),
        ));
    }
    if supplied.len() > params.len() {
        return Err(RuntimeError::invalid_arg(
            format!("#{}", params.len()),
            format!(
                "too many arguments: the kernel takes {}, {} were passed",
                params.len(),
                supplied.len()
            ),
        ));
    }
    Ok(())
}

/// Check a launch shape against `limits`. Errors name `grid.x`/`grid.y`/`grid.z`,
/// `block.x`/..., `block` (total threads) or `dyn_smem`.
pub fn check_dims(limits: &LaunchLimits, dims: &LaunchDims) -> Result<()> {
    const AXES: [&str; 3] = ["x", "y", "z"];
    for (i, axis) in AXES.iter().enumerate() {
        let g = dims.grid[i];
        if g == 0 || g > limits.max_grid[i] {
            return Err(RuntimeError::invalid_arg(
                format!("grid.{axis}"),
                format!("{g} blocks; must be 1..={}", limits.max_grid[i]),
            ));
        }
    }
    for (i, axis) in AXES.iter().enumerate() {
        let b = dims.block[i];
        if b == 0 || b > limits.max_block[i] {
            return Err(RuntimeError::invalid_arg(
                format!("block.{axis}"),
                format!("{b} threads; must be 1..={}", limits.max_block[i]),
            ));
        }
    }
    let threads = dims.block.iter().map(|&b| b as u64).product::<u64>();
    if threads > limits.max_threads as u64 {
        return Err(RuntimeError::invalid_arg(
            "block",
            format!(
                "{threads} threads per block; this kernel allows at most {} (device limit, \
                 registers per thread and __launch_bounds__ count)",
                limits.max_threads
            ),
        ));
    }
    let total = dims.dyn_smem as u64 + limits.static_smem as u64;
    if total > limits.smem_optin as u64 {
        return Err(RuntimeError::invalid_arg(
            "dyn_smem",
            format!(
                "{} bytes of dynamic shared memory plus {} static exceed the device's {} bytes \
                 per block",
                dims.dyn_smem, limits.static_smem, limits.smem_optin
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> LaunchLimits {
        LaunchLimits {
            max_grid: [2147483647, 65535, 65535],
            max_block: [1024, 1024, 64],
            max_threads: 1024,
            static_smem: 1024,
            smem_optin: 232448,
        }
    }

    #[test]
    fn dims_within_limits() {
        let d = LaunchDims::new([1000, 2, 1], [128, 1, 1]).with_dyn_smem(200 * 1024);
        assert!(check_dims(&limits(), &d).is_ok());
    }

    #[test]
    fn dims_errors_name_the_axis() {
        let cases = [
            (LaunchDims::new([0, 1, 1], [32, 1, 1]), "grid.x"),
            (LaunchDims::new([1, 65536, 1], [32, 1, 1]), "grid.y"),
            (LaunchDims::new([1, 1, 70000], [32, 1, 1]), "grid.z"),
            (LaunchDims::new([1, 1, 1], [2048, 1, 1]), "block.x"),
            (LaunchDims::new([1, 1, 1], [32, 1, 65]), "block.z"),
            (LaunchDims::new([1, 1, 1], [64, 32, 1]), "block"),
            (
                LaunchDims::new([1, 1, 1], [32, 1, 1]).with_dyn_smem(232448),
                "dyn_smem",
            ),
        ];
        for (dims, arg) in cases {
            let e = check_dims(&limits(), &dims).unwrap_err();
            assert_eq!(e.arg(), Some(arg), "{dims:?}: {e}");
        }
    }

    #[test]
    fn kernel_thread_limit_is_respected() {
        let mut l = limits();
        l.max_threads = 256;
        let e = check_dims(&l, &LaunchDims::new([1, 1, 1], [512, 1, 1])).unwrap_err();
        assert_eq!(e.arg(), Some("block"));
        assert!(e.to_string().contains("at most 256"));
    }

    fn sig() -> Vec<Param> {
        vec![
            Param::value::<i32>("n"),
            Param::ptr::<half::f16>("a"),
            Param::ptr_mut::<half::f16>("c"),
        ]
    }

    #[test]
    fn signature_ok() {
        let s = [
            Supplied::Value(Scalar::I32),
            Supplied::Ref(Scalar::F16),
            Supplied::Mut(Scalar::F16),
        ];
        assert!(check_signature(&sig(), &s).is_ok());
        // A writable buffer for a read-only parameter is fine.
        let s = [
            Supplied::Value(Scalar::I32),
            Supplied::Mut(Scalar::F16),
            Supplied::Mut(Scalar::F16),
        ];
        assert!(check_signature(&sig(), &s).is_ok());
    }

    #[test]
    fn signature_errors_name_the_parameter() {
        let base = [
            Supplied::Value(Scalar::I32),
            Supplied::Ref(Scalar::F16),
            Supplied::Mut(Scalar::F16),
        ];
        let mut wrong_type = base;
        wrong_type[1] = Supplied::Ref(Scalar::F32);
        let mut read_only_out = base;
        read_only_out[2] = Supplied::Ref(Scalar::F16);
        let mut value_type = base;
        value_type[0] = Supplied::Value(Scalar::I64);
        let mut buffer_for_value = base;
        buffer_for_value[0] = Supplied::Ref(Scalar::I32);
        let cases: [(&[Supplied], &str); 6] = [
            (&wrong_type, "a"),
            (&read_only_out, "c"),
            (&value_type, "n"),
            (&buffer_for_value, "n"),
            (&base[..2], "c"),
            (
                &[base[0], base[1], base[2], Supplied::Value(Scalar::I32)],
                "#3",
            ),
        ];
        for (s, arg) in cases {
            let e = check_signature(&sig(), s).unwrap_err();
            assert_eq!(e.arg(), Some(arg), "{s:?}: {e}");
        }
        let e = check_signature(&sig(), &read_only_out).unwrap_err();
        assert!(e.to_string().contains("arg_mut"), "{e}");
    }

    /// A tensor map parameter takes a tensor map and nothing else, and a tensor map fits no
    /// other parameter; the error names the parameter and says what to pass.
    #[test]
    fn tensor_maps_only_for_tensor_map_parameters() {
        let params = vec![
            Param::value::<i32>("n"),
            Param::tensor_map("tma_a"),
            Param::ptr::<half::f16>("a"),
        ];
        let ok = [
            Supplied::Value(Scalar::I32),
            Supplied::TensorMap,
            Supplied::Ref(Scalar::F16),
        ];
        assert!(check_signature(&params, &ok).is_ok());
        let cases: [(usize, Supplied, &str, &str); 4] = [
            (1, Supplied::Ref(Scalar::F16), "tma_a", "encode_tiled"),
            (1, Supplied::Value(Scalar::I32), "tma_a", "i32 value"),
            (0, Supplied::TensorMap, "n", "tensor map was passed"),
            (2, Supplied::TensorMap, "a", "tensor map was passed"),
        ];
        for (at, got, arg, says) in cases {
            let mut s = ok;
            s[at] = got;
            let e = check_signature(&params, &s).unwrap_err();
            assert_eq!(e.arg(), Some(arg), "{s:?}: {e}");
            assert!(e.to_string().contains(says), "{e}");
            assert!(e.to_string().contains(&format!("parameter {at} is")), "{e}");
        }
        let e = check_signature(&params, &ok[..1]).unwrap_err();
        assert_eq!(e.arg(), Some("tma_a"));
    }

    #[test]
    fn validators() {
        assert!(check_len("b", 10, 10).is_ok());
        let e = check_len("b", 9, 10).unwrap_err();
        assert_eq!(e.arg(), Some("b"));
        assert_eq!(e.to_string(), "argument `b`: length 9, expected 10");
        assert!(check_min_len("b", 11, 10).is_ok());
        assert_eq!(check_min_len("b", 9, 10).unwrap_err().arg(), Some("b"));
        assert!(check_align("a", 0x7f00_0000_0100, 16).is_ok());
        let e = check_align("a", 0x7f00_0000_0102, 16).unwrap_err();
        assert_eq!(e.arg(), Some("a"));
        assert!(e.to_string().contains("0x7f0000000102"), "{e}");
        assert!(check_align("a", 0x100, 0).is_err());
        assert!(check_divisible("k", 4096, 64).is_ok());
        assert!(check_divisible("k", 0usize, 64).is_ok());
        let e = check_divisible("k", 4100i32, 64).unwrap_err();
        assert_eq!(e.to_string(), "argument `k`: 4100 is not a multiple of 64");
        assert_eq!(check_divisible("k", 5u32, 0).unwrap_err().arg(), Some("k"));
    }
}
