//! GPU measurements of the row-wise kernels (`tilus bench rowwise`): each kernel on a
//! `[rows, n]` f16 or bf16 tensor of random values, timed with CUDA events after an L2 flush,
//! with the bytes it must move (read + written, the way the copy-bandwidth floor counts them).
//! `bench/torch_rowwise.py` measures torch's kernels the same way and prints the same table.

use super::RowElement;
use crate::kernels::timing::time_launches;
use tilus_runtime::{copy_time, Context, DeviceBuffer, L2Flush, Timing};

/// One measured kernel.
#[derive(Clone, Debug)]
pub struct RowBench {
    pub kernel: &'static str,
    pub rows: usize,
    pub n: usize,
    pub timing: Timing,
    /// Bytes read plus bytes written by one launch.
    pub bytes: usize,
    /// A device-to-device copy moving the same bytes (half read, half written), L2 flushed:
    /// the floor at this size.
    pub copy: Timing,
}

impl RowBench {
    pub fn gb_per_s(&self) -> f64 {
        self.timing.gb_per_s(self.bytes as f64)
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Random values in `[-2, 2)` (a fixed-seed LCG: benchmarks need no fresh randomness).
fn random<T: RowElement>(ctx: &Context, len: usize, seed: u64) -> Result<DeviceBuffer<T>, String> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let host: Vec<T> = (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            T::from_f64(((s >> 40) as f64 / (1u64 << 24) as f64) * 4.0 - 2.0)
        })
        .collect();
    DeviceBuffer::from_host(ctx, &host).map_err(err)
}

/// Time every row-wise kernel on `[rows, n]`: `runs` timed launches after 3 warm-ups, each
/// after an L2 flush. Rotary takes the row as `n / 128` heads of 128; SiLU-and-mul reads the row
/// as `[gate | up]` and writes half of it.
pub fn bench_rowwise<T: RowElement>(
    ctx: &Context,
    rows: usize,
    n: usize,
    runs: usize,
) -> Result<Vec<RowBench>, String> {
    let el = std::mem::size_of::<T>();
    let x = random::<T>(ctx, rows * n, 1)?;
    let res = random::<T>(ctx, rows * n, 2)?;
    let w = random::<T>(ctx, n, 3)?;
    let b = random::<T>(ctx, n, 4)?;
    let mut y = DeviceBuffer::<T>::zeros(ctx, rows * n).map_err(err)?;
    let mut flush = L2Flush::new(ctx).map_err(err)?;
    let mut out = Vec::new();
    let mut time = |kernel: &'static str,
                    bytes: usize,
                    run: &mut dyn FnMut() -> Result<(), String>|
     -> Result<(), String> {
        let timing = time_launches(ctx, &mut flush, runs, &mut *run)
            .map_err(|e| format!("{kernel}: {e}"))?;
        let copy = copy_time(ctx, bytes / 2, Some(&mut flush)).map_err(err)?;
        out.push(RowBench {
            kernel,
            rows,
            n,
            timing,
            bytes,
            copy,
        });
        Ok(())
    };
    let xy = 2 * rows * n * el;
    time("softmax", xy, &mut || {
        super::softmax(ctx, rows, n, &x, &mut y).map_err(err)
    })?;
    time("layernorm", xy + 2 * n * el, &mut || {
        super::layer_norm(ctx, rows, n, 1e-5, &x, &w, &b, &mut y).map_err(err)
    })?;
    time("rmsnorm", xy + n * el, &mut || {
        super::rms_norm(ctx, rows, n, 1e-6, &x, &w, &mut y).map_err(err)
    })?;
    // In place on copies: x and the residual are read and written.
    let mut xa = random::<T>(ctx, rows * n, 5)?;
    let mut ra = res;
    time("add_rmsnorm", 2 * xy + n * el, &mut || {
        super::add_rms_norm(ctx, rows, n, 1e-6, &mut xa, &mut ra, &w).map_err(err)
    })?;
    let mut idx = DeviceBuffer::<i32>::zeros(ctx, rows).map_err(err)?;
    time("argmax", rows * n * el + rows * 4, &mut || {
        super::argmax(ctx, rows, n, &x, &mut idx).map_err(err)
    })?;
    let half = n / 2;
    time(
        "silu_and_mul",
        rows * n * el + rows * half * el,
        &mut || super::silu_and_mul(ctx, rows, half, &x, &mut y).map_err(err),
    )?;
    // The runs per thread the default was chosen from.
    for (runs, kernel) in [
        (1, "silu_and_mul/runs1"),
        (2, "silu_and_mul/runs2"),
        (4, "silu_and_mul/runs4"),
    ] {
        time(kernel, rows * n * el + rows * half * el, &mut || {
            super::silu_and_mul_runs(ctx, runs, rows, half, &x, &mut y).map_err(err)
        })?;
    }
    if n.is_multiple_of(128) {
        let cos = random::<T>(ctx, rows * 64, 6)?;
        let sin = random::<T>(ctx, rows * 64, 7)?;
        let mut q = random::<T>(ctx, rows * n, 8)?;
        time("rotary", xy + 2 * rows * 64 * el, &mut || {
            super::rotary(ctx, rows, n / 128, 128, &mut q, &cos, &sin).map_err(err)
        })?;
    }
    Ok(out)
}

/// The table `tilus bench rowwise` prints (the same columns as `bench/torch_rowwise.py`).
pub fn table(copy_gbps: f64, dtype: &str, results: &[RowBench]) -> String {
    let mut s = format!(
        "tilus {dtype}; copy bandwidth {copy_gbps:.0} GB/s (1 GiB); %floor = bandwidth / that; \
         copy us = a copy of the same bytes, %copy = copy us / time us\n\
         {:<14} {:>11} {:>9} {:>7} {:>7} {:>8} {:>7}\n",
        "kernel", "shape", "time us", "GB/s", "%floor", "copy us", "%copy"
    );
    for r in results {
        let gbps = r.gb_per_s();
        s += &format!(
            "{:<14} {:>11} {:>9.1} {:>7.0} {:>6.1}% {:>8.1} {:>6.1}%\n",
            r.kernel,
            format!("{}x{}", r.rows, r.n),
            r.timing.median_us,
            gbps,
            100.0 * gbps / copy_gbps,
            r.copy.median_us,
            100.0 * r.copy.median_us / r.timing.median_us
        );
    }
    s
}
