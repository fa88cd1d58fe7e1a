//! tilus's decode attention ([`crate::kernels::attention::decode`]) over a KV cache held in
//! candle tensors.
//!
//! The cache is token-major, `[batch, capacity, kv_heads, head_dim]` for keys and for values (the
//! kernel's contiguous layout): a step writes its new keys and values at their positions with
//! `Tensor::slice_set` along dimension 1 (the projection's output is already in that order, so
//! no transpose), then [`DecodeAttn::forward`] attends one query token per sequence to the first
//! `seq_lens[b]` positions. On CUDA tensors that is tilus's split-KV kernel on the candle
//! device's stream, reading the cache in place; on CPU tensors, the same kernel program on the
//! VM's interpreter.

use crate::element::Activation;
use crate::kernels::attention::decode::{
    CacheLayout, DecodeAttention, DecodeShape, KvCache, KvFormat,
};
use candle_core::{DType, Device, Result, Tensor, WithDType};
use half::{bf16, f16};
use std::sync::{Arc, Mutex};

/// Decode attention for one model shape (heads, head dim, cache capacity, scale); sequences in
/// a batch may have different lengths. Make it once and call [`Self::forward`] every step.
pub struct DecodeAttn {
    q_heads: usize,
    kv_heads: usize,
    head_dim: usize,
    capacity: usize,
    scale: f32,
    /// One kernel object per batch size seen (each keeps its split-KV workspace).
    kernels: Mutex<Vec<(usize, Arc<DecodeAttention>)>>,
}

impl std::fmt::Debug for DecodeAttn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeAttn")
            .field("q_heads", &self.q_heads)
            .field("kv_heads", &self.kv_heads)
            .field("head_dim", &self.head_dim)
            .field("capacity", &self.capacity)
            .field("scale", &self.scale)
            .finish_non_exhaustive()
    }
}

fn msg(text: String) -> candle_core::Error {
    candle_core::Error::Msg(format!("tilus decode attention: {text}"))
}

impl DecodeAttn {
    /// `q_heads` a multiple of `kv_heads`; `head_dim` 64 or 128; `capacity` the positions the
    /// cache tensors hold; `scale` multiplies the scores (usually `1 / sqrt(head_dim)`). Errors
    /// name the argument.
    pub fn new(
        q_heads: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        scale: f32,
    ) -> Result<DecodeAttn> {
        let attn = DecodeAttn {
            q_heads,
            kv_heads,
            head_dim,
            capacity,
            scale,
            kernels: Mutex::new(Vec::new()),
        };
        attn.kernel(1)?;
        Ok(attn)
    }

    fn kernel(&self, batch: usize) -> Result<Arc<DecodeAttention>> {
        let mut all = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, k)) = all.iter().find(|(b, _)| *b == batch) {
            return Ok(k.clone());
        }
        let shape = DecodeShape {
            batch,
            q_heads: self.q_heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            cache: CacheLayout::Contiguous {
                max_len: self.capacity,
            },
            kv: KvFormat::Activation,
        };
        let k = Arc::new(
            DecodeAttention::new(shape, self.scale, None, self.capacity)
                .map_err(candle_core::Error::wrap)?,
        );
        all.push((batch, k.clone()));
        Ok(k)
    }

    /// The attention of `q` (`[batch, q_heads, head_dim]`, f16 or bf16) over the first
    /// `seq_lens[b]` (`[batch]`, i32) positions of `k_cache` and `v_cache` (`[batch, capacity,
    /// kv_heads, head_dim]`, `q`'s dtype, contiguous): `[batch, q_heads, head_dim]`. A length of
    /// 0 gives zeros; lengths above the capacity are refused by the kernel's checks on the CPU
    /// and never read out of bounds on the GPU.
    pub fn forward(
        &self,
        q: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        seq_lens: &Tensor,
    ) -> Result<Tensor> {
        let dtype = q.dtype();
        if !matches!(dtype, DType::F16 | DType::BF16) {
            return Err(msg(format!("q must be f16 or bf16, got {dtype:?}")));
        }
        let (batch, qh, hd) = q.dims3().map_err(|_| {
            msg(format!(
                "q must be [batch, q_heads, head_dim], got {:?}",
                q.dims()
            ))
        })?;
        if (qh, hd) != (self.q_heads, self.head_dim) {
            return Err(msg(format!(
                "q is {:?}, but this attention has {} query heads of {}",
                q.dims(),
                self.q_heads,
                self.head_dim
            )));
        }
        let want = [batch, self.capacity, self.kv_heads, self.head_dim];
        for (name, t) in [("k_cache", k_cache), ("v_cache", v_cache)] {
            if t.dims() != want || t.dtype() != dtype {
                return Err(msg(format!(
                    "{name} must be {dtype:?} {want:?} ([batch, capacity, kv_heads, head_dim]), \
                     got {:?} {:?}",
                    t.dtype(),
                    t.dims()
                )));
            }
            if !t.is_contiguous() {
                return Err(msg(format!(
                    "{name} must be contiguous (a cache is written in place, not copied per step)"
                )));
            }
            if !t.device().same_device(q.device()) {
                return Err(msg(format!("{name} is on another device than q")));
            }
        }
        if seq_lens.dims() != [batch] || seq_lens.dtype() != DType::I32 {
            return Err(msg(format!(
                "seq_lens must be i32 [{batch}], got {:?} {:?}",
                seq_lens.dtype(),
                seq_lens.dims()
            )));
        }
        if !seq_lens.device().same_device(q.device()) {
            return Err(msg("seq_lens is on another device than q".into()));
        }
        let q = q.contiguous()?;
        let kernel = self.kernel(batch)?;
        match q.device() {
            Device::Cpu => match dtype {
                DType::F16 => cpu::<f16>(&kernel, &q, k_cache, v_cache, seq_lens),
                _ => cpu::<bf16>(&kernel, &q, k_cache, v_cache, seq_lens),
            },
            #[cfg(feature = "candle-cuda")]
            Device::Cuda(_) => match dtype {
                DType::F16 => cuda::run::<f16>(&kernel, &q, k_cache, v_cache, seq_lens),
                _ => cuda::run::<bf16>(&kernel, &q, k_cache, v_cache, seq_lens),
            },
            other => Err(msg(format!(
                "tensors on {other:?} are not supported{}",
                if cfg!(feature = "candle-cuda") {
                    ""
                } else {
                    " (CUDA tensors need the `candle-cuda` feature)"
                }
            ))),
        }
    }
}

fn cpu<T: Activation + WithDType>(
    kernel: &DecodeAttention,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    lens: &Tensor,
) -> Result<Tensor> {
    let qv = q.flatten_all()?.to_vec1::<T>()?;
    let kv = k.flatten_all()?.to_vec1::<T>()?;
    let vv = v.flatten_all()?.to_vec1::<T>()?;
    let lv = lens.to_vec1::<i32>()?;
    let cache: KvCache<'_, [T], [f32], [i32]> = KvCache {
        k: &kv,
        v: &vv,
        meta: None,
        block_table: None,
        seq_lens: &lv,
    };
    let mut out = vec![T::from_f32(0.0); qv.len()];
    kernel
        .run_cpu(1, &qv, &cache, &mut out)
        .map_err(candle_core::Error::wrap)?;
    Tensor::from_vec(out, q.dims(), &Device::Cpu)
}

#[cfg(feature = "candle-cuda")]
mod cuda {
    use super::msg;
    use crate::candle::contiguous;
    use crate::element::Activation;
    use crate::kernels::attention::decode::{DecodeAttention, KvCache};
    use candle_core::cuda::CudaDType;
    use candle_core::op::BackpropOp;
    use candle_core::{CudaStorage, Result, Storage, Tensor};
    use tilus_runtime::{DeviceBuffer, DeviceView, DeviceViewMut};

    /// `t`'s CUDA storage, read-locked for the launch, and its element range.
    fn cuda_of(t: &Tensor) -> Result<(candle_core::StorageRef<'_>, (usize, usize))> {
        let (storage, layout) = t.storage_and_layout();
        let range = contiguous(layout)?;
        if !matches!(&*storage, Storage::Cuda(_)) {
            return Err(msg("all tensors must be on the same CUDA device".into()));
        }
        Ok((storage, range))
    }

    fn slice<'a, T: CudaDType + tilus_runtime::Element>(
        s: &'a candle_core::StorageRef<'_>,
        (start, end): (usize, usize),
    ) -> Result<DeviceView<'a, T>> {
        match &**s {
            Storage::Cuda(c) => Ok(DeviceView::from_cuda(
                c.as_cuda_slice::<T>()?.slice(start..end),
            )),
            _ => unreachable!("checked by cuda_of"),
        }
    }

    pub(super) fn run<T: Activation + CudaDType>(
        kernel: &DecodeAttention,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        lens: &Tensor,
    ) -> Result<Tensor> {
        let (qs, qr) = cuda_of(q)?;
        let (ks, kr) = cuda_of(k)?;
        let (vs, vr) = cuda_of(v)?;
        let (ls, lr) = cuda_of(lens)?;
        let device = match &*qs {
            Storage::Cuda(c) => c.device.clone(),
            _ => unreachable!("checked by cuda_of"),
        };
        let ctx = super::super::context_for(&device)?;
        let (qv, kv, vv) = (
            slice::<T>(&qs, qr)?,
            slice::<T>(&ks, kr)?,
            slice::<T>(&vs, vr)?,
        );
        let lv = slice::<i32>(&ls, lr)?;
        let cache: KvCache<'_, _, DeviceBuffer<f32>, _> = KvCache {
            k: &kv,
            v: &vv,
            meta: None,
            block_table: None,
            seq_lens: &lv,
        };
        // SAFETY: the kernel writes every element (zeros for an empty sequence).
        let mut y = unsafe { device.alloc::<T>(qr.1 - qr.0) }?;
        kernel
            .run(
                &ctx,
                &qv,
                &cache,
                &mut DeviceViewMut::from_cuda(y.as_view_mut()),
            )
            .map_err(candle_core::Error::wrap)?;
        let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(y, device));
        Ok(Tensor::from_storage(
            storage,
            q.dims(),
            BackpropOp::none(),
            false,
        ))
    }
}
