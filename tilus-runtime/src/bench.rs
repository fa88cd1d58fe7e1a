//! Measuring kernels: CUDA-event timing with warm-up and medians, an L2 flush between runs, the
//! device's copy bandwidth (the floor every memory-bound kernel is judged against), and a cuBLAS
//! f16 GEMM baseline.
//!
//! Timings are medians of per-launch CUDA events after warm-up, never host clocks: launches are
//! asynchronous, and a median is robust against the odd slow sample on a shared machine.

use crate::buffer::DeviceBuffer;
use crate::context::Context;
use crate::error::{Result, RuntimeError};
use cudarc::driver::sys::CUevent_flags;
use half::f16;

/// Summary of repeated timed runs, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    pub samples: usize,
}

impl Timing {
    fn from_samples(mut us: Vec<f64>) -> Timing {
        us.sort_by(f64::total_cmp);
        let n = us.len();
        let median = if n % 2 == 1 {
            us[n / 2]
        } else {
            (us[n / 2 - 1] + us[n / 2]) / 2.0
        };
        Timing {
            median_us: median,
            min_us: us[0],
            max_us: us[n - 1],
            samples: n,
        }
    }

    /// Effective bandwidth in GB/s (1e9 bytes per second) for `bytes` moved per run.
    pub fn gb_per_s(&self, bytes: f64) -> f64 {
        bytes / (self.median_us * 1e-6) / 1e9
    }
}

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

    pub fn flush(&mut self) -> Result<()> {
        self.scratch.fill(0)
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
    let src = DeviceBuffer::<u8>::filled(ctx, bytes, 0x5a)?;
    let mut dst = DeviceBuffer::<u8>::zeros(ctx, bytes)?;
    let stream = ctx.stream().clone();
    let timing = time_runs(ctx, 3, 20, None, || {
        stream
            .memcpy_dtod(src.cuda_slice(), dst.cuda_slice_mut())
            .map_err(|e| driver_err("copying device to device", e))
    })?;
    let gbps = timing.gb_per_s(2.0 * bytes as f64);
    Ok((timing, gbps))
}

/// cuBLAS row-major f16 GEMM (`C[m,n] = A[m,k] · B[k,n]`, f32 accumulation), the baseline the
/// quantized kernels are compared with.
pub struct CublasF16 {
    blas: cudarc::cublas::CudaBlas,
}

impl CublasF16 {
    pub fn new(ctx: &Context) -> Result<CublasF16> {
        crate::discover::preload_cublas();
        // cudarc panics when the library is missing; ask first.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(RuntimeError::LibraryMissing {
                library: "libcublas.so",
                hint: "install the CUDA toolkit or the `nvidia-cublas` wheel, or set CUDA_HOME"
                    .into(),
            });
        }
        let blas = cudarc::cublas::CudaBlas::new(ctx.stream().clone()).map_err(|e| {
            RuntimeError::Library {
                library: "cuBLAS",
                message: format!("creating a handle: {e:?}"),
            }
        })?;
        Ok(CublasF16 { blas })
    }

    /// Row-major `c = a · b`; lengths are checked and named.
    pub fn gemm(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: &DeviceBuffer<f16>,
        b: &DeviceBuffer<f16>,
        c: &mut DeviceBuffer<f16>,
    ) -> Result<()> {
        use cudarc::cublas::{sys::cublasOperation_t::CUBLAS_OP_N, Gemm, GemmConfig};
        crate::launch::check_len("a", a.len(), m * k)?;
        crate::launch::check_len("b", b.len(), k * n)?;
        crate::launch::check_len("c", c.len(), m * n)?;
        // Row-major C = A·B is column-major C^T = B^T · A^T: swap the operands.
        let cfg = GemmConfig {
            transa: CUBLAS_OP_N,
            transb: CUBLAS_OP_N,
            m: n as i32,
            n: m as i32,
            k: k as i32,
            alpha: f16::ONE,
            lda: n as i32,
            ldb: k as i32,
            beta: f16::ZERO,
            ldc: n as i32,
        };
        unsafe {
            self.blas
                .gemm(cfg, b.cuda_slice(), a.cuda_slice(), c.cuda_slice_mut())
        }
        .map_err(|e| RuntimeError::Library {
            library: "cuBLAS",
            message: format!("f16 GEMM {m}x{n}x{k}: {e:?}"),
        })
    }
}
