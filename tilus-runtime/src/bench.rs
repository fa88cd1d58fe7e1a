//! Measuring kernels: CUDA-event timing with warm-up and medians, an L2 flush between runs, the
//! device's copy bandwidth (the floor every memory-bound kernel is judged against). The cuBLAS
//! baseline is [`crate::blas`].
//!
//! Timings are medians of per-launch CUDA events after warm-up, never host clocks: launches are
//! asynchronous, and a median is robust against the odd slow sample on a shared machine.

use crate::buffer::DeviceBuffer;
use crate::context::Context;
use crate::error::{Result, RuntimeError};
pub use crate::timing::Timing;
use cudarc::driver::sys::CUevent_flags;

/// Overwrites a buffer larger than the L2 cache, so the next timed run starts cold.
pub struct L2Flush {
    scratch: DeviceBuffer<u8>,
}

impl L2Flush {
    /// 256 MiB: several times the L2 of any current GPU (50 MB on H100, 60 MB on H200).
    pub fn new(ctx: &Context) -> Result<L2Flush> {
        Ok(L2Flush {
            scratch: DeviceBuffer::zeros(ctx, 256 << 20)?,
        })
    }

    /// Queue the overwrite on the stream: a device memset, so a flush costs ~0.1 ms of GPU time
    /// and no host work (a host copy of 256 MiB would take longer than most timed runs).
    pub fn flush(&mut self) -> Result<()> {
        self.scratch.fill_zeros()
    }
}

fn driver_err(during: &str, e: cudarc::driver::DriverError) -> RuntimeError {
    RuntimeError::driver(during.to_string(), e)
}

/// Time `run` with CUDA events on the context's stream: `warmup` untimed runs, then `reps` timed
/// runs, each preceded by an L2 flush when `flush` is given.
pub fn time_runs(
    ctx: &Context,
    warmup: usize,
    reps: usize,
    mut flush: Option<&mut L2Flush>,
    mut run: impl FnMut() -> Result<()>,
) -> Result<Timing> {
    if reps == 0 {
        return Err(RuntimeError::invalid_arg("reps", "must be at least 1"));
    }
    for _ in 0..warmup {
        run()?;
    }
    let stream = ctx.stream();
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        if let Some(f) = flush.as_deref_mut() {
            f.flush()?;
        }
        let start = stream
            .record_event(flags)
            .map_err(|e| driver_err("recording a start event", e))?;
        run()?;
        let end = stream
            .record_event(flags)
            .map_err(|e| driver_err("recording an end event", e))?;
        end.synchronize()
            .map_err(|e| driver_err("waiting for a timed run", e))?;
        let ms = start
            .elapsed_ms(&end)
            .map_err(|e| driver_err("reading an event timer", e))?;
        samples.push(ms as f64 * 1e3);
    }
    Ok(Timing::from_samples(samples))
}

/// Device-to-device copy of `bytes` bytes; the bandwidth counts bytes read plus bytes written,
/// which is how a kernel's traffic is counted against it.
pub fn copy_bandwidth(ctx: &Context, bytes: usize) -> Result<(Timing, f64)> {
    let timing = copy_time(ctx, bytes, None)?;
    let gbps = timing.gb_per_s(2.0 * bytes as f64);
    Ok((timing, gbps))
}

/// The time of a device-to-device copy of `bytes` bytes (20 runs after 3 warm-ups), each run
/// after an L2 flush when `flush` is given: the floor of a kernel that moves `2 · bytes` at
/// this size, where fixed costs weigh more than at 1 GiB.
pub fn copy_time(ctx: &Context, bytes: usize, flush: Option<&mut L2Flush>) -> Result<Timing> {
    let src = DeviceBuffer::<u8>::filled(ctx, bytes, 0x5a)?;
    let mut dst = DeviceBuffer::<u8>::zeros(ctx, bytes)?;
    let stream = ctx.stream().clone();
    time_runs(ctx, 3, 20, flush, || {
        stream
            .memcpy_dtod(src.cuda_slice(), dst.cuda_slice_mut())
            .map_err(|e| driver_err("copying device to device", e))
    })
}
