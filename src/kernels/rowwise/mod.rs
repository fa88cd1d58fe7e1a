//! Row-wise kernels of a transformer layer, written with `#[kernel]` ([`programs`]): softmax,
//! RMSNorm (plain, and fused with the residual add), LayerNorm, argmax, SiLU-and-mul and rotary
//! embedding, for f16 and bf16. Each reads its input once and writes its output once, so it runs
//! at the speed of memory; `tilus bench rowwise` measures that against the copy bandwidth and
//! torch (`bench/torch_rowwise.py`).
//!
//! The functions here pick the configuration for a shape (the smallest row capacity `BN` that
//! holds a row, 16-byte vectors when the row length allows) and launch it; the same kernels run
//! on the CPU interpreter through each kernel module's `interpret`.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use tilus::kernels::rowwise;
//! use tilus::runtime::{half::f16, Context, DeviceBuffer};
//! let ctx = Context::new(0)?;
//! let (rows, n) = (4, 1000);
//! let x = DeviceBuffer::from_host(&ctx, &vec![f16::from_f32(0.5); rows * n])?;
//! let mut y = DeviceBuffer::<f16>::zeros(&ctx, rows * n)?;
//! rowwise::softmax(&ctx, rows, n, &x, &mut y)?;
//! # Ok(()) }
//! ```

pub mod bench;
pub mod programs;

use crate::macro_support::KernelError;
use tilus_runtime::{Context, DeviceRead, DeviceWrite};

/// The longest row the single-pass row kernels hold in registers.
pub const MAX_ROW: usize = 8192;

/// The row capacities of the row kernels' space, smallest first.
const CAPACITIES: [usize; 6] = [256, 512, 1024, 2048, 4096, 8192];

/// The row capacity `BN` and vector width `V` for rows of `n` elements.
pub fn row_config(kernel: &'static str, n: usize) -> Result<(i32, i32), KernelError> {
    let bad = |message: String| KernelError::BadArgument {
        kernel,
        config: "-".to_string(),
        message,
    };
    if n == 0 {
        return Err(bad("n = 0: a row needs at least one element".into()));
    }
    let bn = CAPACITIES.iter().find(|&&c| c >= n).ok_or_else(|| {
        bad(format!(
            "n = {n}: rows longer than {MAX_ROW} elements are not supported"
        ))
    })?;
    Ok((*bn as i32, if n.is_multiple_of(8) { 8 } else { 1 }))
}

/// `usize` extents as the kernels' `i32` parameters, naming the argument that does not fit.
fn dims<const N: usize>(
    kernel: &'static str,
    named: [(&str, usize); N],
) -> Result<[i32; N], KernelError> {
    let mut out = [0; N];
    for (o, (name, v)) in out.iter_mut().zip(named) {
        *o = i32::try_from(v).map_err(|_| KernelError::BadArgument {
            kernel,
            config: "-".to_string(),
            message: format!("{name} = {v} does not fit an i32"),
        })?;
    }
    Ok(out)
}

/// f16 and bf16: the element types of the row kernels. `programs::row_kernels!` implements it
/// next to the kernels it stamps for each type.
pub trait RowElement: tilus_runtime::Element + Copy {
    /// The nearest value (round to nearest even).
    fn from_f64(v: f64) -> Self;
    #[doc(hidden)]
    fn softmax(
        ctx: &Context,
        bn: i32,
        v: i32,
        rows: i32,
        n: i32,
        x: &impl DeviceRead<Self>,
        y: &mut impl DeviceWrite<Self>,
    ) -> Result<(), KernelError>;
    #[doc(hidden)]
    fn softmax_long(
        ctx: &Context,
        v: i32,
        rows: i32,
        n: i32,
        x: &impl DeviceRead<Self>,
        y: &mut impl DeviceWrite<Self>,
    ) -> Result<(), KernelError>;
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    fn rms_norm(
        ctx: &Context,
        bn: i32,
        v: i32,
        rows: i32,
        n: i32,
        eps: f32,
        x: &impl DeviceRead<Self>,
        w: &impl DeviceRead<Self>,
        y: &mut impl DeviceWrite<Self>,
    ) -> Result<(), KernelError>;
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    fn add_rms_norm(
        ctx: &Context,
        bn: i32,
        v: i32,
        rows: i32,
        n: i32,
        eps: f32,
        x: &mut impl DeviceWrite<Self>,
        residual: &mut impl DeviceWrite<Self>,
        w: &impl DeviceRead<Self>,
    ) -> Result<(), KernelError>;
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    fn layer_norm(
        ctx: &Context,
        bn: i32,
        v: i32,
        rows: i32,
        n: i32,
        eps: f32,
        x: &impl DeviceRead<Self>,
        w: &impl DeviceRead<Self>,
        b: &impl DeviceRead<Self>,
        y: &mut impl DeviceWrite<Self>,
    ) -> Result<(), KernelError>;
    #[doc(hidden)]
    fn argmax(
        ctx: &Context,
        bn: i32,
        v: i32,
        rows: i32,
        n: i32,
        x: &impl DeviceRead<Self>,
        out: &mut impl DeviceWrite<i32>,
    ) -> Result<(), KernelError>;
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    fn silu_and_mul(
        ctx: &Context,
        v: i32,
        u: i32,
        tokens: i32,
        d: i32,
        x: &impl DeviceRead<Self>,
        y: &mut impl DeviceWrite<Self>,
    ) -> Result<(), KernelError>;
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    fn rotary(
        ctx: &Context,
        hd: i32,
        tokens: i32,
        heads: i32,
        x: &mut impl DeviceWrite<Self>,
        cos: &impl DeviceRead<Self>,
        sin: &impl DeviceRead<Self>,
    ) -> Result<(), KernelError>;
}

/// `y = softmax(x)` along each row of `x: [rows, n]` (computed in f32), rows of any length:
/// up to [`MAX_ROW`] in one pass over registers, longer ones in chunks with an online maximum
/// (two reads of the row).
pub fn softmax<T: RowElement>(
    ctx: &Context,
    rows: usize,
    n: usize,
    x: &impl DeviceRead<T>,
    y: &mut impl DeviceWrite<T>,
) -> Result<(), KernelError> {
    let [r, m] = dims("softmax", [("rows", rows), ("n", n)])?;
    if n > MAX_ROW {
        return T::softmax_long(ctx, if n.is_multiple_of(8) { 8 } else { 1 }, r, m, x, y);
    }
    let (bn, v) = row_config("softmax", n)?;
    T::softmax(ctx, bn, v, r, m, x, y)
}

/// `y = x / sqrt(mean(x²) + eps) · w` along each row of `x: [rows, n]`, `w: [n]`.
pub fn rms_norm<T: RowElement>(
    ctx: &Context,
    rows: usize,
    n: usize,
    eps: f32,
    x: &impl DeviceRead<T>,
    w: &impl DeviceRead<T>,
    y: &mut impl DeviceWrite<T>,
) -> Result<(), KernelError> {
    let (bn, v) = row_config("rms_norm", n)?;
    let [rows, n] = dims("rms_norm", [("rows", rows), ("n", n)])?;
    T::rms_norm(ctx, bn, v, rows, n, eps, x, w, y)
}

/// In place: `residual += x`, then `x = rmsnorm(residual) · w` (the sum kept in f32 for the
/// norm).
pub fn add_rms_norm<T: RowElement>(
    ctx: &Context,
    rows: usize,
    n: usize,
    eps: f32,
    x: &mut impl DeviceWrite<T>,
    residual: &mut impl DeviceWrite<T>,
    w: &impl DeviceRead<T>,
) -> Result<(), KernelError> {
    let (bn, v) = row_config("add_rms_norm", n)?;
    let [rows, n] = dims("add_rms_norm", [("rows", rows), ("n", n)])?;
    T::add_rms_norm(ctx, bn, v, rows, n, eps, x, residual, w)
}

/// `y = (x - mean) / sqrt(var + eps) · w + b` along each row of `x: [rows, n]`.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm<T: RowElement>(
    ctx: &Context,
    rows: usize,
    n: usize,
    eps: f32,
    x: &impl DeviceRead<T>,
    w: &impl DeviceRead<T>,
    b: &impl DeviceRead<T>,
    y: &mut impl DeviceWrite<T>,
) -> Result<(), KernelError> {
    let (bn, v) = row_config("layer_norm", n)?;
    let [rows, n] = dims("layer_norm", [("rows", rows), ("n", n)])?;
    T::layer_norm(ctx, bn, v, rows, n, eps, x, w, b, y)
}

/// The index of the largest element of each row of `x: [rows, n]` (the first on ties).
pub fn argmax<T: RowElement>(
    ctx: &Context,
    rows: usize,
    n: usize,
    x: &impl DeviceRead<T>,
    out: &mut impl DeviceWrite<i32>,
) -> Result<(), KernelError> {
    let (bn, v) = row_config("argmax", n)?;
    let [rows, n] = dims("argmax", [("rows", rows), ("n", n)])?;
    T::argmax(ctx, bn, v, rows, n, x, out)
}

/// `y = silu(gate) · up` for `x = [gate | up]: [tokens, 2 d]`, `y: [tokens, d]`.
pub fn silu_and_mul<T: RowElement>(
    ctx: &Context,
    tokens: usize,
    d: usize,
    x: &impl DeviceRead<T>,
    y: &mut impl DeviceWrite<T>,
) -> Result<(), KernelError> {
    silu_and_mul_runs(ctx, silu_runs(d), tokens, d, x, y)
}

/// Runs of 8 elements each thread of `silu_and_mul` takes: the most of 4, 2, 1 whose block
/// (`128 · 8 · runs` columns) divides `d`. More bytes in flight per thread help long rows
/// (H100, 8192 tokens x d = 4096: 75.0, 74.1, 72.7 us for 1, 2, 4 runs, 89.7% to 92.6% of the
/// floor), while a block wider than the row leaves its threads idle (d = 512: 10.9 us with one
/// run, 21.7 with two, 48.3 with four). `tilus bench rowwise` times all three.
fn silu_runs(d: usize) -> usize {
    [4, 2, 1]
        .into_iter()
        .find(|r| d.is_multiple_of(128 * 8 * r))
        .unwrap_or(1)
}

/// [`silu_and_mul`] with `runs` (1, 2 or 4) runs per thread, for the benchmark.
pub(crate) fn silu_and_mul_runs<T: RowElement>(
    ctx: &Context,
    runs: usize,
    tokens: usize,
    d: usize,
    x: &impl DeviceRead<T>,
    y: &mut impl DeviceWrite<T>,
) -> Result<(), KernelError> {
    let [tokens, d] = dims("silu_and_mul", [("tokens", tokens), ("d", d)])?;
    T::silu_and_mul(
        ctx,
        if d % 8 == 0 { 8 } else { 1 },
        runs as i32,
        tokens,
        d,
        x,
        y,
    )
}

/// NeoX rotary embedding in place on `x: [tokens, heads, head_dim]` with `cos, sin: [tokens,
/// head_dim / 2]`; `head_dim` is 64, 128 or 256.
pub fn rotary<T: RowElement>(
    ctx: &Context,
    tokens: usize,
    heads: usize,
    head_dim: usize,
    x: &mut impl DeviceWrite<T>,
    cos: &impl DeviceRead<T>,
    sin: &impl DeviceRead<T>,
) -> Result<(), KernelError> {
    if ![64, 128, 256].contains(&head_dim) {
        return Err(KernelError::BadArgument {
            kernel: "rotary",
            config: "-".to_string(),
            message: format!("head_dim = {head_dim}: supported head sizes are 64, 128 and 256"),
        });
    }
    let [tokens, heads, hd] = dims(
        "rotary",
        [("tokens", tokens), ("heads", heads), ("head_dim", head_dim)],
    )?;
    T::rotary(ctx, hd, tokens, heads, x, cos, sin)
}
