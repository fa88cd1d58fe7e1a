//! Measuring kernels: CUDA-event timing with warm-up and medians, an L2 flush between runs, the
//! device's copy bandwidth (the floor every memory-bound kernel is judged against). The cuBLAS
//! baseline is [`crate::blas`].
//!
//! Timings are medians of per-launch CUDA events after warm-up, never host clocks: launches are
//! asynchronous, and a median is robust against the odd slow sample on a shared machine.

use std::sync::Arc;

use crate::buffer::DeviceBuffer;
use crate::context::Context;
use crate::error::{Result, RuntimeError};
use crate::kernel::{KernelSource, Param};
use crate::launch::LaunchDims;
use crate::loaded::LoadedKernel;
pub use crate::timing::Timing;
use cudarc::driver::sys::CUevent_flags;

/// Empties the L2 cache of a timed kernel's data before each run: overwrites a buffer larger
/// than L2 (a device memset), and in [`L2Mode::Clean`] then reads half of it back.
///
/// After the memset alone, L2 is full of *dirty* lines of the flush buffer (L2 is write-back),
/// and the timed kernel pays for writing them to memory as it evicts them: about 50 MB on an
/// H100, ~17 us at 3 TB/s, whatever the kernel does. The read-back leaves L2 full of clean
/// lines instead, so the kernel starts cold and moves only its own bytes. `Dirty` is the
/// convention of Triton's `do_bench` and of this project's earlier tables.
pub struct L2Flush {
    scratch: DeviceBuffer<u8>,
    mode: L2Mode,
    /// With [`L2Mode::Clean`]: the read kernel and its never-written output.
    read_back: Option<(Arc<LoadedKernel>, DeviceBuffer<u32>)>,
}

/// What [`L2Flush`] leaves in the L2 cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L2Mode {
    /// Dirty lines of the flush buffer (a memset only).
    Dirty,
    /// Clean lines (a memset, then a read of 128 MiB of it).
    Clean,
}

impl L2Mode {
    /// `clean` or `dirty`, as tables and the `--l2` flags spell it.
    pub fn label(self) -> &'static str {
        match self {
            L2Mode::Clean => "clean",
            L2Mode::Dirty => "dirty",
        }
    }
}

/// Reads `n` 16-byte words and never writes (unless the data hashes to a constant that zeros
/// never give), so the loads cannot be dropped.
const READ_BACK: &str = r#"extern "C" __global__ void tilus_l2_read(long long n, const uint4* p, unsigned* sink) {
    unsigned acc = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc;
}"#;

impl L2Flush {
    /// 256 MiB: several times the L2 of any current GPU (50 MB on H100, 60 MB on H200).
    pub fn new(ctx: &Context) -> Result<L2Flush> {
        Self::with_mode(ctx, L2Mode::Dirty)
    }

    /// A flush leaving L2 as `mode` says ([`L2Mode::Clean`] compiles a small read kernel).
    pub fn with_mode(ctx: &Context, mode: L2Mode) -> Result<L2Flush> {
        let read_back = match mode {
            L2Mode::Clean => {
                let source = KernelSource::new(
                    "l2_read",
                    "",
                    "tilus_l2_read",
                    READ_BACK,
                    vec![
                        Param::value::<i64>("n"),
                        Param::ptr::<u8>("p"),
                        Param::ptr_mut::<u32>("sink"),
                    ],
                );
                Some((ctx.load(&source)?, DeviceBuffer::zeros(ctx, 1)?))
            }
            L2Mode::Dirty => None,
        };
        Ok(L2Flush {
            scratch: DeviceBuffer::zeros(ctx, 256 << 20)?,
            mode,
            read_back,
        })
    }

    pub fn mode(&self) -> L2Mode {
        self.mode
    }

    /// Queue the overwrite (and in [`L2Mode::Clean`] the read-back) on the stream: ~0.1 ms
    /// (~0.15 ms) of GPU time and no host work.
    pub fn flush(&mut self) -> Result<()> {
        self.scratch.fill_zeros()?;
        if let Some((kernel, sink)) = self.read_back.as_mut() {
            // 128 MiB in 16-byte words, from the start: lines the memset has already written
            // back, so L2 ends up holding only clean lines.
            let words = (128i64 << 20) / 16;
            kernel
                .args()
                .value(words)
                .arg(&self.scratch)
                .arg_mut(sink)
                .launch(LaunchDims::new([1056, 1, 1], [256, 1, 1]))?;
        }
        Ok(())
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
