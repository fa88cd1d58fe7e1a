//! tilus's row kernels ([`crate::kernels::rowwise`]) as candle operations on f16/bf16 tensors.
//!
//! On CUDA tensors (feature `candle-cuda`) each is one tilus kernel launched on the device's
//! stream, reading and writing candle's memory in place. On CPU tensors each falls back to the
//! same formula in candle's own operations (computed in f32), which is also the reference the
//! tests compare the kernels with.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Result, Shape, Tensor, D};

/// `x / sqrt(mean(x²) + eps) · w` along the last dimension of `x` (`w` has that length).
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    check_float("x", x)?;
    if w.dtype() != x.dtype() || w.dims() != [x.dim(D::Minus1)?] {
        return Err(candle_core::Error::Msg(format!(
            "tilus rms_norm: w must be a {:?} vector of the last dimension of x ({:?}), got {:?} {:?}",
            x.dtype(),
            x.dims(),
            w.dtype(),
            w.dims()
        )));
    }
    if x.device().is_cuda() {
        x.contiguous()?
            .apply_op2_no_bwd(&w.contiguous()?, &RmsNorm { eps })
    } else {
        rms_norm_reference(x, w, eps)
    }
}

/// `silu(gate) · up` for `x = [gate | up]` along the last dimension (`[..., 2 d]` -> `[..., d]`).
pub fn silu_and_mul(x: &Tensor) -> Result<Tensor> {
    check_float("x", x)?;
    let two_d = x.dim(D::Minus1)?;
    if two_d % 2 != 0 {
        return Err(candle_core::Error::Msg(format!(
            "tilus silu_and_mul: the last dimension of x ({:?}) must be even: [gate | up]",
            x.dims()
        )));
    }
    if x.device().is_cuda() {
        x.contiguous()?.apply_op1_no_bwd(&SiluAndMul)
    } else {
        silu_and_mul_reference(x)
    }
}

/// [`rms_norm`] in candle's own operations, in f32.
pub fn rms_norm_reference(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    let dtype = x.dtype();
    let x32 = x.to_dtype(DType::F32)?;
    let ms = x32.sqr()?.mean_keepdim(D::Minus1)?;
    let y = x32.broadcast_div(&(ms + eps as f64)?.sqrt()?)?;
    y.broadcast_mul(&w.to_dtype(DType::F32)?)?.to_dtype(dtype)
}

/// [`silu_and_mul`] in candle's own operations, in f32.
pub fn silu_and_mul_reference(x: &Tensor) -> Result<Tensor> {
    let dtype = x.dtype();
    let d = x.dim(D::Minus1)? / 2;
    let x32 = x.to_dtype(DType::F32)?;
    let gate = x32.narrow(D::Minus1, 0, d)?;
    let up = x32.narrow(D::Minus1, d, d)?;
    (gate.silu()? * up)?.to_dtype(dtype)
}

fn check_float(arg: &str, x: &Tensor) -> Result<()> {
    match x.dtype() {
        DType::F16 | DType::BF16 => Ok(()),
        other => Err(candle_core::Error::Msg(format!(
            "tilus: {arg} must be f16 or bf16, got {other:?}"
        ))),
    }
}

#[cfg_attr(not(feature = "candle-cuda"), allow(dead_code))]
struct RmsNorm {
    eps: f32,
}

struct SiluAndMul;

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "tilus-rms-norm"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        Err(candle_core::Error::Msg(
            "tilus rms_norm: CPU tensors take rms_norm_reference".into(),
        ))
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        xl: &Layout,
        w: &candle_core::CudaStorage,
        wl: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        use half::{bf16, f16};
        match candle_core::backend::BackendStorage::dtype(x) {
            DType::F16 => cuda::rms_norm::<f16>(self.eps, x, xl, w, wl),
            _ => cuda::rms_norm::<bf16>(self.eps, x, xl, w, wl),
        }
    }
}

impl CustomOp1 for SiluAndMul {
    fn name(&self) -> &'static str {
        "tilus-silu-and-mul"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        Err(candle_core::Error::Msg(
            "tilus silu_and_mul: CPU tensors take silu_and_mul_reference".into(),
        ))
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        xl: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        use half::{bf16, f16};
        match candle_core::backend::BackendStorage::dtype(x) {
            DType::F16 => cuda::silu_and_mul::<f16>(x, xl),
            _ => cuda::silu_and_mul::<bf16>(x, xl),
        }
    }
}

#[cfg(feature = "candle-cuda")]
mod cuda {
    use super::super::{context_for, contiguous};
    use crate::kernels::rowwise::{self, RowElement};
    use candle_core::cuda::CudaDType;
    use candle_core::{CudaStorage, Layout, Result, Shape};
    use tilus_runtime::{DeviceView, DeviceViewMut};

    pub(super) fn rms_norm<T: RowElement + CudaDType>(
        eps: f32,
        x: &CudaStorage,
        xl: &Layout,
        w: &CudaStorage,
        wl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let device = x.device.clone();
        let ctx = context_for(&device)?;
        let shape = xl.shape().clone();
        let n = shape.dims().last().copied().unwrap_or(1);
        let rows = shape.elem_count() / n.max(1);
        let (xs, xe) = contiguous(xl)?;
        let (ws, we) = contiguous(wl)?;
        // SAFETY: the kernel writes every element before anything reads it.
        let mut y = unsafe { device.alloc::<T>(shape.elem_count()) }?;
        if rows > 0 {
            let xv = DeviceView::from_cuda(x.as_cuda_slice::<T>()?.slice(xs..xe));
            let wv = DeviceView::from_cuda(w.as_cuda_slice::<T>()?.slice(ws..we));
            let mut yv = DeviceViewMut::from_cuda(y.as_view_mut());
            rowwise::rms_norm(&ctx, rows, n, eps, &xv, &wv, &mut yv)
                .map_err(candle_core::Error::wrap)?;
        }
        Ok((CudaStorage::wrap_cuda_slice(y, device), shape))
    }

    pub(super) fn silu_and_mul<T: RowElement + CudaDType>(
        x: &CudaStorage,
        xl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let device = x.device.clone();
        let ctx = context_for(&device)?;
        let mut dims = xl.shape().dims().to_vec();
        let two_d = dims.last().copied().unwrap_or(0);
        let d = two_d / 2;
        let tokens = xl.shape().elem_count() / two_d.max(1);
        if let Some(last) = dims.last_mut() {
            *last = d;
        }
        let shape = Shape::from(dims);
        let (xs, xe) = contiguous(xl)?;
        // SAFETY: as above.
        let mut y = unsafe { device.alloc::<T>(shape.elem_count()) }?;
        if tokens > 0 && d > 0 {
            let xv = DeviceView::from_cuda(x.as_cuda_slice::<T>()?.slice(xs..xe));
            let mut yv = DeviceViewMut::from_cuda(y.as_view_mut());
            rowwise::silu_and_mul(&ctx, tokens, d, &xv, &mut yv)
                .map_err(candle_core::Error::wrap)?;
        }
        Ok((CudaStorage::wrap_cuda_slice(y, device), shape))
    }
}
