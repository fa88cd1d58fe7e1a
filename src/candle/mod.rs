//! candle integration: tilus's quantized linear layer and row kernels as candle operations.
//!
//! Feature `candle` gives [`QLinear`], a [`candle_core::Module`] over f16/bf16 tensors, and the
//! row operations in [`ops`]. On CPU tensors they run on the VM's interpreter (the quantized
//! matmul, bit for bit what the GPU kernel computes) or on candle's own CPU code (the row
//! operations). Feature `candle-cuda` adds CUDA tensors: the kernels launch on the candle
//! device's own stream, read the input tensor's memory in place and write into memory candle
//! then owns, so nothing is copied and nothing needs synchronizing.
//!
//! ```no_run
//! # fn main() -> candle_core::Result<()> {
//! use candle_core::{DType, Device, Module, Tensor};
//! use tilus::candle::QLinear;
//! use tilus::kernels::linear::QuantizedLinear;
//! let (k, n) = (4096, 1024);
//! let w: Vec<f32> = (0..k * n).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 500.0).collect();
//! let host = QuantizedLinear::new(&w, k, n, tilus::DType::Int(4),
//!     tilus::quant::Group::Rows(128), tilus::DType::F16).map_err(candle_core::Error::wrap)?;
//! let layer = QLinear::new(host);
//! let device = Device::new_cuda(0)?; // or Device::Cpu: the interpreter
//! let x = Tensor::randn(0f32, 1., (2, 3, k), &device)?.to_dtype(DType::F16)?;
//! let y = layer.forward(&x)?; // [2, 3, 1024] f16
//! # Ok(()) }
//! ```
//!
//! How a CUDA call finds its tilus [`Context`]: one per candle device (by `DeviceId`), built on
//! that device's stream with [`Context::builder_on`] and shared by every layer on the device,
//! so kernels compile and tune once per process (then the disk caches serve them).
//!
//! Threads: candle's default device launches on the calling thread's own stream, and a layer
//! keeps one split-k workspace per configuration; call a layer from one thread at a time, or
//! give each thread its own device (`Device::new_cuda_with_stream`).
//!
//! Errors are candle errors: tilus's own (a shape no kernel takes, a dtype the layer does not
//! compute in) are wrapped with [`candle_core::Error::wrap`] and keep their message, which names
//! the argument.

pub mod attention;
pub mod ops;

pub use attention::DecodeAttn;

use crate::element::Activation;
use crate::kernels::linear::QuantizedLinear;
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Module, Result, Shape, Tensor, WithDType};
use half::{bf16, f16};

#[cfg(feature = "candle-cuda")]
pub use self::cuda::context_for;

/// A quantized linear layer (`y = x · W`, `W` of `k x n`) as a candle module. See the module
/// documentation.
pub struct QLinear {
    host: QuantizedLinear,
    #[cfg(feature = "candle-cuda")]
    gpu: cuda::PerDevice,
}

impl std::fmt::Debug for QLinear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QLinear")
            .field("k", &self.host.k())
            .field("n", &self.host.n())
            .field("wdtype", &self.host.config().wdtype)
            .field("dtype", &self.dtype())
            .finish_non_exhaustive()
    }
}

impl QLinear {
    /// The layer of a host [`QuantizedLinear`] (quantized from f32, or imported from a GPTQ/AWQ
    /// checkpoint with [`QuantizedLinear::from_imported`]). Its activation type (f16 or bf16)
    /// is the dtype inputs must have. Nothing is uploaded until the first CUDA forward.
    pub fn new(host: QuantizedLinear) -> QLinear {
        QLinear {
            host,
            #[cfg(feature = "candle-cuda")]
            gpu: Default::default(),
        }
    }

    /// Input features.
    pub fn k(&self) -> usize {
        self.host.k()
    }

    /// Output features.
    pub fn n(&self) -> usize {
        self.host.n()
    }

    /// The dtype the layer computes in: inputs and outputs have it.
    pub fn dtype(&self) -> DType {
        match self.host.config().adtype {
            tilus_core::DType::BF16 => DType::BF16,
            _ => DType::F16,
        }
    }

    /// The host layer (its quantized weight, configuration and CPU path).
    pub fn host(&self) -> &QuantizedLinear {
        &self.host
    }

    fn dtype_error(&self, dtype: DType) -> candle_core::Error {
        candle_core::Error::Msg(format!(
            "tilus QLinear: x is {dtype:?}, but the layer computes in {:?} (convert x with \
             to_dtype, or build the layer for {dtype:?})",
            self.dtype()
        ))
    }

    /// Check `x`'s dtype and last dimension; the number of rows `m` it holds.
    fn rows(&self, x: &Layout, dtype: DType) -> Result<usize> {
        if dtype != self.dtype() {
            return Err(self.dtype_error(dtype));
        }
        let dims = x.shape().dims();
        match dims.last() {
            Some(&k) if k == self.k() => Ok(x.shape().elem_count() / k.max(1)),
            _ => Err(candle_core::Error::Msg(format!(
                "tilus QLinear: x has shape {:?}; its last dimension must be k = {}",
                dims,
                self.k()
            ))),
        }
    }

    /// `x`'s shape with the last dimension `n`.
    fn out_shape(&self, x: &Layout) -> Shape {
        let mut dims = x.shape().dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = self.n();
        }
        Shape::from(dims)
    }

    fn cpu_typed<T: Activation + WithDType>(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> Result<(Vec<T>, Shape)> {
        let m = self.rows(layout, <T as WithDType>::DTYPE)?;
        let (start, end) = contiguous(layout)?;
        let x = &storage.as_slice::<T>()?[start..end];
        if m == 0 {
            return Ok((Vec::new(), self.out_shape(layout)));
        }
        let y = self
            .host
            .forward_cpu::<T>(x, m)
            .map_err(candle_core::Error::wrap)?;
        Ok((y, self.out_shape(layout)))
    }
}

/// The element range of a contiguous layout (the callers make tensors contiguous first).
fn contiguous(layout: &Layout) -> Result<(usize, usize)> {
    layout.contiguous_offsets().ok_or_else(|| {
        candle_core::Error::Msg("tilus: the input must be contiguous (call .contiguous())".into())
    })
}

impl Module for QLinear {
    /// `x · W` over the last dimension of `x` (`[..., k]` -> `[..., n]`), in the layer's dtype.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.contiguous()?.apply_op1_no_bwd(self)
    }
}

impl CustomOp1 for QLinear {
    fn name(&self) -> &'static str {
        "tilus-qlinear"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        match storage {
            CpuStorage::F16(_) => {
                let (y, s) = self.cpu_typed::<f16>(storage, layout)?;
                Ok((CpuStorage::F16(y), s))
            }
            CpuStorage::BF16(_) => {
                let (y, s) = self.cpu_typed::<bf16>(storage, layout)?;
                Ok((CpuStorage::BF16(y), s))
            }
            other => Err(self.dtype_error(candle_core::backend::BackendStorage::dtype(other))),
        }
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        match candle_core::backend::BackendStorage::dtype(storage) {
            DType::F16 => self.cuda_typed::<f16>(storage, layout),
            DType::BF16 => self.cuda_typed::<bf16>(storage, layout),
            other => Err(self.dtype_error(other)),
        }
    }
}

#[cfg(feature = "candle-cuda")]
mod cuda {
    use super::{contiguous, QLinear};
    use crate::element::Activation;
    use crate::kernels::linear::GpuQuantizedLinear;
    use candle_core::cuda::{CudaDType, DeviceId};
    use candle_core::{CudaDevice, CudaStorage, Layout, Result, Shape, WithDType};
    use half::{bf16, f16};
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, Weak};
    use tilus_runtime::{Context, DeviceView, DeviceViewMut};

    /// The tilus context of a candle CUDA device: built on its stream on first use, shared by
    /// every layer on the device while any of them holds it.
    pub fn context_for(device: &CudaDevice) -> Result<Arc<Context>> {
        static CONTEXTS: Mutex<Vec<(DeviceId, Weak<Context>)>> = Mutex::new(Vec::new());
        let mut all = CONTEXTS.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|(_, w)| w.strong_count() > 0);
        if let Some(ctx) = all
            .iter()
            .find(|(id, _)| *id == device.id())
            .and_then(|(_, w)| w.upgrade())
        {
            return Ok(ctx);
        }
        let ctx = Context::builder_on(device.cuda_stream())
            .build()
            .map_err(candle_core::Error::wrap)?;
        all.push((device.id(), Arc::downgrade(&ctx)));
        Ok(ctx)
    }

    /// A layer's GPU copies, one per candle device it has run on.
    #[derive(Default)]
    pub(super) struct PerDevice {
        layers: Mutex<HashMap<DeviceId, Gpu>>,
    }

    #[derive(Clone)]
    pub(super) enum Gpu {
        F16(Arc<GpuQuantizedLinear<f16>>),
        Bf16(Arc<GpuQuantizedLinear<bf16>>),
    }

    /// The GPU layer of one activation type.
    pub(super) trait GpuOf: Activation + CudaDType + WithDType {
        fn wrap(layer: Arc<GpuQuantizedLinear<Self>>) -> Gpu;
        fn unwrap(gpu: &Gpu) -> Option<Arc<GpuQuantizedLinear<Self>>>;
    }
    impl GpuOf for f16 {
        fn wrap(layer: Arc<GpuQuantizedLinear<f16>>) -> Gpu {
            Gpu::F16(layer)
        }
        fn unwrap(gpu: &Gpu) -> Option<Arc<GpuQuantizedLinear<f16>>> {
            match gpu {
                Gpu::F16(l) => Some(l.clone()),
                Gpu::Bf16(_) => None,
            }
        }
    }
    impl GpuOf for bf16 {
        fn wrap(layer: Arc<GpuQuantizedLinear<bf16>>) -> Gpu {
            Gpu::Bf16(layer)
        }
        fn unwrap(gpu: &Gpu) -> Option<Arc<GpuQuantizedLinear<bf16>>> {
            match gpu {
                Gpu::Bf16(l) => Some(l.clone()),
                Gpu::F16(_) => None,
            }
        }
    }

    impl QLinear {
        /// The layer on `device`, uploaded on first use.
        fn on_device<T: GpuOf>(&self, device: &CudaDevice) -> Result<Arc<GpuQuantizedLinear<T>>> {
            let mut layers = self.gpu.layers.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(l) = layers.get(&device.id()).and_then(T::unwrap) {
                return Ok(l);
            }
            let ctx = context_for(device)?;
            let layer = Arc::new(
                self.host
                    .to_gpu::<T>(&ctx)
                    .map_err(candle_core::Error::wrap)?,
            );
            layers.insert(device.id(), T::wrap(layer.clone()));
            Ok(layer)
        }

        /// The GPU layer this module runs on `device` (uploading it if needed), e.g. to tune
        /// its `m` buckets ahead of time with [`GpuQuantizedLinear::plan`].
        pub fn gpu_f16(&self, device: &CudaDevice) -> Result<Arc<GpuQuantizedLinear<f16>>> {
            self.on_device::<f16>(device)
        }

        /// As [`Self::gpu_f16`], for a bf16 layer.
        pub fn gpu_bf16(&self, device: &CudaDevice) -> Result<Arc<GpuQuantizedLinear<bf16>>> {
            self.on_device::<bf16>(device)
        }

        pub(super) fn cuda_typed<T: GpuOf>(
            &self,
            storage: &CudaStorage,
            layout: &Layout,
        ) -> Result<(CudaStorage, Shape)> {
            let m = self.rows(layout, <T as WithDType>::DTYPE)?;
            let (start, end) = contiguous(layout)?;
            let device = storage.device.clone();
            let shape = self.out_shape(layout);
            let len = shape.elem_count();
            // SAFETY: the kernel writes every element of `y` before anything reads it; on an
            // error `y` is dropped unread.
            let mut y = unsafe { device.alloc::<T>(len) }?;
            if m > 0 {
                let layer = self.on_device::<T>(&device)?;
                let x = DeviceView::from_cuda(storage.as_cuda_slice::<T>()?.slice(start..end));
                let mut out = DeviceViewMut::from_cuda(y.as_view_mut());
                layer
                    .forward_into(&x, m, &mut out)
                    .map_err(candle_core::Error::wrap)?;
            }
            Ok((CudaStorage::wrap_cuda_slice(y, device), shape))
        }
    }
}
