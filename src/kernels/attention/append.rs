//! Appending new tokens' keys and values to the KV cache, on the GPU and on the CPU
//! interpreter: a copy into the cache's rows for a cache of the activation type, or
//! quantization on the fly ([`quantize_head`](super::kv::quantize_head)'s formulas, bit for bit)
//! for a quantized one. Token `t` goes to cache row `slots[t]` (serving engines compute the
//! slots from their block tables; a slot outside `0..rows` skips the token, so padded batches
//! need no special case).

use super::decode::{DecodeShape, KvFormat};
use super::kernel::{kv_append, kv_append_quantized};
use crate::element::Activation;
use crate::gpu::GpuArg;
use crate::macro_support::KernelError;
use tilus_core::DType;
use tilus_runtime::{Context, DeviceBuffer, HostElement};

fn bad(arg: &str, message: impl std::fmt::Display) -> KernelError {
    KernelError::BadArgument {
        kernel: kv_append::NAME,
        config: "-".to_string(),
        message: format!("{arg}: {message}"),
    }
}

/// The configuration of the append for `shape`: `Err` for a format or shape it cannot take.
enum Plan {
    Copy(kv_append::Config),
    Quantize(kv_append_quantized::Config, f32),
}

fn plan(shape: &DecodeShape, activation: DType) -> Result<Plan, KernelError> {
    // The decode kernel's rules on shapes and formats hold here too.
    shape.validate()?;
    super::decode::check_activation(activation)?;
    let d = shape.head_dim as i32;
    Ok(match shape.kv {
        KvFormat::Activation => Plan::Copy(kv_append::Config {
            D: d,
            A: activation,
        }),
        KvFormat::Quantized(t) => Plan::Quantize(
            kv_append_quantized::Config {
                D: d,
                SYM: i32::from(!matches!(t, DType::UInt(_))),
                A: activation,
                KV: t,
            },
            t.max_value() as f32,
        ),
    })
}

/// Check the lengths of an append of `tokens` tokens (caches and metadata in bytes and
/// elements as [`DecodeShape`] counts them).
#[allow(clippy::too_many_arguments)]
fn check(
    shape: &DecodeShape,
    activation: DType,
    cache: DType,
    new_k: usize,
    new_v: usize,
    tokens: usize,
    k: usize,
    v: usize,
    meta: Option<(usize, usize)>,
) -> Result<(), KernelError> {
    let row = shape.kv_heads * shape.head_dim;
    for (arg, len) in [("new_k", new_k), ("new_v", new_v)] {
        if len != tokens * row {
            return Err(bad(
                arg,
                format!(
                    "holds {len} elements, but {tokens} tokens (slots) of {} heads of {} need {}",
                    shape.kv_heads,
                    shape.head_dim,
                    tokens * row
                ),
            ));
        }
    }
    i32::try_from(tokens * shape.kv_heads).map_err(|_| bad("slots", "too many tokens"))?;
    shape.check_cache(activation, cache, k, v, meta)
}

/// Append `slots.len()` tokens (`new_k`, `new_v` `[tokens, kv_heads, head_dim]`) to the cache
/// of `shape` on `ctx`'s stream; `meta` are the scales of a quantized cache. Returns when the
/// work is queued.
#[allow(clippy::too_many_arguments)]
pub fn append_kv<T: Activation, C: HostElement>(
    ctx: &Context,
    shape: &DecodeShape,
    new_k: &DeviceBuffer<T>,
    new_v: &DeviceBuffer<T>,
    slots: &DeviceBuffer<i32>,
    k_cache: &mut DeviceBuffer<C>,
    v_cache: &mut DeviceBuffer<C>,
    meta: Option<(&mut DeviceBuffer<f32>, &mut DeviceBuffer<f32>)>,
) -> Result<(), KernelError> {
    let bytes = std::mem::size_of::<C>();
    check(
        shape,
        T::DTYPE,
        C::DTYPE,
        new_k.len(),
        new_v.len(),
        slots.len(),
        k_cache.len() * bytes,
        v_cache.len() * bytes,
        meta.as_ref().map(|(k, v)| (k.len(), v.len())),
    )?;
    if slots.is_empty() {
        return Ok(());
    }
    let dims = [
        GpuArg::I32(slots.len() as i32),
        GpuArg::I32(shape.kv_heads as i32),
        GpuArg::I32(shape.cache_rows() as i32),
    ];
    match plan(shape, T::DTYPE)? {
        Plan::Copy(cfg) => {
            let kernel = kv_append::instance(&cfg)?.kernel(kv_append::NAME, &cfg)?;
            let mut args = Vec::from(dims);
            args.extend([
                GpuArg::InBytes(new_k),
                GpuArg::InBytes(new_v),
                GpuArg::In(slots),
                GpuArg::OutBytes(k_cache),
                GpuArg::OutBytes(v_cache),
            ]);
            kernel
                .launch(ctx, args)
                .map_err(|e| KernelError::launch(kv_append::NAME, &cfg, e))
        }
        Plan::Quantize(cfg, qmax) => {
            let (km, vm) = meta.expect("checked");
            let kernel =
                kv_append_quantized::instance(&cfg)?.kernel(kv_append_quantized::NAME, &cfg)?;
            let mut args = Vec::from(dims);
            args.extend([
                GpuArg::F32(qmax),
                GpuArg::InBytes(new_k),
                GpuArg::InBytes(new_v),
                GpuArg::In(slots),
                GpuArg::OutBytes(k_cache),
                GpuArg::OutBytes(v_cache),
                GpuArg::Out(km),
                GpuArg::Out(vm),
            ]);
            kernel
                .launch(ctx, args)
                .map_err(|e| KernelError::launch(kv_append_quantized::NAME, &cfg, e))
        }
    }
}

/// [`append_kv`] on the CPU interpreter, on host slices.
#[allow(clippy::too_many_arguments)]
pub fn append_kv_cpu<T: Activation, C: HostElement>(
    shape: &DecodeShape,
    new_k: &[T],
    new_v: &[T],
    slots: &[i32],
    k_cache: &mut [C],
    v_cache: &mut [C],
    meta: Option<(&mut [f32], &mut [f32])>,
) -> Result<(), KernelError> {
    check(
        shape,
        T::DTYPE,
        C::DTYPE,
        new_k.len(),
        new_v.len(),
        slots.len(),
        std::mem::size_of_val(k_cache),
        std::mem::size_of_val(v_cache),
        meta.as_ref().map(|(k, v)| (k.len(), v.len())),
    )?;
    if slots.is_empty() {
        return Ok(());
    }
    let (tokens, heads, rows) = (
        slots.len() as i32,
        shape.kv_heads as i32,
        shape.cache_rows() as i32,
    );
    let (nk, nv) = (T::to_bytes(new_k), T::to_bytes(new_v));
    let (mut kb, mut vb) = (C::to_bytes(k_cache), C::to_bytes(v_cache));
    match plan(shape, T::DTYPE)? {
        Plan::Copy(cfg) => {
            kv_append::interpret(&cfg, tokens, heads, rows, &nk, &nv, slots, &mut kb, &mut vb)?
        }
        Plan::Quantize(cfg, qmax) => {
            let (km, vm) = meta.expect("checked");
            kv_append_quantized::interpret(
                &cfg, tokens, heads, rows, qmax, &nk, &nv, slots, &mut kb, &mut vb, km, vm,
            )?
        }
    }
    C::copy_from_bytes(&kb, k_cache);
    C::copy_from_bytes(&vb, v_cache);
    Ok(())
}
