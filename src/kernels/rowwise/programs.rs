//! The row-wise kernels, written with `#[kernel]`. Each row (one token for `rotary` and
//! `silu_and_mul`) is held in registers, so every element is read once and written once: the
//! kernels are bound by memory bandwidth.
//!
//! A row of capacity `BN` is spread over `TR = min(256, max(32, BN / 32))` threads, each holding
//! `E = BN / TR` elements (8 to 32) in runs of `V` consecutive ones (`V = 8` f16/bf16 elements
//! are one 16-byte load); a block of `max(128, TR)` threads takes `RB = max(1, 128 / TR)` rows:
//! the tile `[RB, BN]` is `local(1, BN / (TR V)).spatial(RB, TR).local(1, V)`. Rows up to 1024
//! elements thus live in one warp each and their reductions are warp shuffles only; longer rows
//! add a shared-memory stage across the row's warps. `BN` is the smallest capacity that holds
//! `n`; the tail past `n` is masked (loads past the view read the fill value, stores are
//! dropped). `V = 1` serves rows whose length is not a multiple of 8 (a vector would straddle
//! two rows). A reduction's result is replicated on every thread of its row, so `xs - m`
//! broadcasts without data movement, and a `[1, BN]` vector such as a norm's weight is loaded
//! in the row layout over `TR` threads, which the other rows' threads replicate.
//!
//! The occupancy hint `blocks_per_sm = (8192 + 1024 V) / (E · threads)` leaves each thread
//! about 128 registers at 32 elements, 64 at 16 and 32 at 8 (more with `V = 1`, whose
//! per-element addresses need registers): every configuration compiles without spills
//! (`tests/codegen_cuda.rs`), and short rows get many blocks in flight. Measured on an H100
//! (docs/perf-notes.md): 32 elements per thread beat 16 at 8192 columns (fewer warps to combine
//! through shared memory), and a warp per row beats a block per row at 1024.
//!
//! Every kernel is stamped for f16 and bf16 by `row_kernels!`: `#[kernel]` parameters have
//! concrete element types.

use super::RowElement;
use crate::macro_support::KernelError;
use tilus_runtime::half::{bf16, f16};
use tilus_runtime::{Context, DeviceRead, DeviceWrite};

macro_rules! row_kernels {
    ($t:ident, $softmax:ident, $softmax_long:ident, $rms:ident, $add_rms:ident, $ln:ident, $argmax:ident, $silu:ident, $rotary:ident) => {
        /// `y = softmax(x)` along each row of `x: [rows, n]`, computed in f32.
        #[tilus::kernel(
            grid = [cdiv(rows, max(1, 128 / min(256, max(32, BN / 32))))],
            warps = max(4, min(256, max(32, BN / 32)) / 32),
            blocks_per_sm = (8192 + 1024 * V) / (BN / min(256, max(32, BN / 32)) * max(128, min(256, max(32, BN / 32)))),
            space(BN = [256, 512, 1024, 2048, 4096, 8192], V = [8, 1]),
        )]
        pub fn $softmax<const BN: i32, const V: i32>(
            rows: i32,
            n: i32,
            x: Global<$t>,
            y: GlobalMut<$t>,
        ) {
            let tr = min(256, max(32, BN / 32));
            let rb = max(1, 128 / tr);
            let tile = layout!(local(1, BN / (tr * V)).spatial(rb, tr).local(1, V));
            let [bi] = block_indices();
            let r = bi * rb;
            let xs = load_global(view_global(x, [rows, n]), tile, [r, 0], f32::NEG_INFINITY);
            let xs = cast::<f32>(xs);
            // Rows past `rows` in the block's tile are all -inf: a finite floor on the maximum
            // and on the sum keeps them NaN-free (a real row's sum is at least 1).
            let m = max(reduce_max(xs, 1), -3.0e38);
            let e = exp(xs - m);
            let s = max(sum(e, 1), 1e-30);
            store_global(cast::<$t>(e * (1.0 / s)), view_global(y, [rows, n]), [r, 0]);
        }

        /// `y = softmax(x)` for rows longer than 8192 elements, in chunks of 8192: one pass keeps
        /// the running maximum `m` and the sum `l` of `exp(x - m)` (rescaled when the maximum
        /// grows), a second pass reads the row again and writes it. Reads 2, writes 1.
        #[tilus::kernel(grid = [rows], warps = 8, blocks_per_sm = 2, space(V = [8, 1]))]
        pub fn $softmax_long<const V: i32>(rows: i32, n: i32, x: Global<$t>, y: GlobalMut<$t>) {
            // Fold one chunk into the running maximum and sum (written once, used per chunk).
            fn update(m: Tensor, l: Tensor, xs: Tensor) -> (Tensor, Tensor) {
                let m_new = max(m, reduce_max(xs, 1));
                let l_new = l * exp(m - m_new) + sum(exp(xs - m_new), 1);
                (m_new, l_new)
            }
            let tile = layout!(local(1, 8192 / (256 * V)).spatial(1, 256).local(1, V));
            let [r] = block_indices();
            let gx = view_global(x, [rows, n]);
            let gy = view_global(y, [rows, n]);
            let first = cast::<f32>(load_global(gx, tile, [r, 0], f32::NEG_INFINITY));
            let mut m = reduce_max(first, 1);
            let mut l = sum(exp(first - m), 1);
            for c in (8192..n).step_by(8192) {
                let xs = cast::<f32>(load_global(gx, tile, [r, c], f32::NEG_INFINITY));
                (m, l) = update(m, l, xs);
            }
            let inv = 1.0 / l;
            for c in (0..n).step_by(8192) {
                let xs = cast::<f32>(load_global(gx, tile, [r, c], f32::NEG_INFINITY));
                store_global(cast::<$t>(exp(xs - m) * inv), gy, [r, c]);
            }
        }

        /// `y = x / sqrt(mean(x²) + eps) · w` along each row of `x: [rows, n]`, `w: [n]`,
        /// computed in f32.
        #[tilus::kernel(
            grid = [cdiv(rows, max(1, 128 / min(256, max(32, BN / 32))))],
            warps = max(4, min(256, max(32, BN / 32)) / 32),
            blocks_per_sm = (8192 + 1024 * V) / (BN / min(256, max(32, BN / 32)) * max(128, min(256, max(32, BN / 32)))),
            space(BN = [256, 512, 1024, 2048, 4096, 8192], V = [8, 1]),
        )]
        pub fn $rms<const BN: i32, const V: i32>(
            rows: i32,
            n: i32,
            eps: f32,
            x: Global<$t>,
            w: Global<$t>,
            y: GlobalMut<$t>,
        ) {
            let tr = min(256, max(32, BN / 32));
            let rb = max(1, 128 / tr);
            let tile = layout!(local(1, BN / (tr * V)).spatial(rb, tr).local(1, V));
            let vec = layout!(local(1, BN / (tr * V)).spatial(1, tr).local(1, V));
            let [bi] = block_indices();
            let r = bi * rb;
            let xs = cast::<f32>(load_global(view_global(x, [rows, n]), tile, [r, 0]));
            let ws = cast::<f32>(load_global(view_global(w, [1, n]), vec, [0, 0]));
            let ms = sum(xs * xs, 1) * (1.0 / (n as f32));
            let inv = rsqrt(ms + eps);
            store_global(cast::<$t>(xs * inv * ws), view_global(y, [rows, n]), [r, 0]);
        }

        /// The residual update and RMSNorm of a transformer layer, in place:
        /// `residual = x + residual`, then `x = rmsnorm(residual) · w` (the sum is kept in f32
        /// for the norm, as vLLM's `fused_add_rms_norm` does).
        #[tilus::kernel(
            grid = [cdiv(rows, max(1, 128 / min(256, max(32, BN / 32))))],
            warps = max(4, min(256, max(32, BN / 32)) / 32),
            blocks_per_sm = (8192 + 1024 * V) / (BN / min(256, max(32, BN / 32)) * max(128, min(256, max(32, BN / 32)))),
            space(BN = [256, 512, 1024, 2048, 4096, 8192], V = [8, 1]),
        )]
        pub fn $add_rms<const BN: i32, const V: i32>(
            rows: i32,
            n: i32,
            eps: f32,
            x: GlobalMut<$t>,
            residual: GlobalMut<$t>,
            w: Global<$t>,
        ) {
            let tr = min(256, max(32, BN / 32));
            let rb = max(1, 128 / tr);
            let tile = layout!(local(1, BN / (tr * V)).spatial(rb, tr).local(1, V));
            let vec = layout!(local(1, BN / (tr * V)).spatial(1, tr).local(1, V));
            let [bi] = block_indices();
            let r = bi * rb;
            let gx = view_global(x, [rows, n]);
            let gr = view_global(residual, [rows, n]);
            let s = cast::<f32>(load_global(gx, tile, [r, 0])) + cast::<f32>(load_global(gr, tile, [r, 0]));
            store_global(cast::<$t>(s), gr, [r, 0]);
            let ws = cast::<f32>(load_global(view_global(w, [1, n]), vec, [0, 0]));
            let ms = sum(s * s, 1) * (1.0 / (n as f32));
            let inv = rsqrt(ms + eps);
            store_global(cast::<$t>(s * inv * ws), gx, [r, 0]);
        }

        /// `y = (x - mean) / sqrt(var + eps) · w + b` along each row (biased variance, two
        /// passes over the registers), computed in f32.
        #[tilus::kernel(
            grid = [cdiv(rows, max(1, 128 / min(256, max(32, BN / 32))))],
            warps = max(4, min(256, max(32, BN / 32)) / 32),
            blocks_per_sm = (8192 + 1024 * V) / (BN / min(256, max(32, BN / 32)) * max(128, min(256, max(32, BN / 32)))),
            space(BN = [256, 512, 1024, 2048, 4096, 8192], V = [8, 1]),
        )]
        pub fn $ln<const BN: i32, const V: i32>(
            rows: i32,
            n: i32,
            eps: f32,
            x: Global<$t>,
            w: Global<$t>,
            b: Global<$t>,
            y: GlobalMut<$t>,
        ) {
            let tr = min(256, max(32, BN / 32));
            let rb = max(1, 128 / tr);
            let tile = layout!(local(1, BN / (tr * V)).spatial(rb, tr).local(1, V));
            let vec = layout!(local(1, BN / (tr * V)).spatial(1, tr).local(1, V));
            let [bi] = block_indices();
            let r = bi * rb;
            let xs = cast::<f32>(load_global(view_global(x, [rows, n]), tile, [r, 0]));
            let inv_n = 1.0 / (n as f32);
            let mean = sum(xs, 1) * inv_n;
            // Past the row's end the loads read 0, which must not count in the variance.
            let inside = lt(arange(tile, 1, 0), n);
            let d = select(inside, xs - mean, 0.0);
            let var = sum(d * d, 1) * inv_n;
            let inv = rsqrt(var + eps);
            let ws = cast::<f32>(load_global(view_global(w, [1, n]), vec, [0, 0]));
            let bs = cast::<f32>(load_global(view_global(b, [1, n]), vec, [0, 0]));
            store_global(cast::<$t>(d * inv * ws + bs), view_global(y, [rows, n]), [r, 0]);
        }

        /// The index of the largest element of each row (the first one on ties): greedy
        /// decoding over logits `x: [rows, n]`.
        #[tilus::kernel(
            grid = [cdiv(rows, max(1, 128 / min(256, max(32, BN / 32))))],
            warps = max(4, min(256, max(32, BN / 32)) / 32),
            blocks_per_sm = min(16, (16384 + 2048 * V) / (BN / min(256, max(32, BN / 32)) * max(128, min(256, max(32, BN / 32))))),
            space(BN = [256, 512, 1024, 2048, 4096, 8192], V = [8, 1]),
        )]
        pub fn $argmax<const BN: i32, const V: i32>(
            rows: i32,
            n: i32,
            x: Global<$t>,
            out: GlobalMut<i32>,
        ) {
            let tr = min(256, max(32, BN / 32));
            let rb = max(1, 128 / tr);
            let tile = layout!(local(1, BN / (tr * V)).spatial(rb, tr).local(1, V));
            let [bi] = block_indices();
            let r = bi * rb;
            let xs = load_global(view_global(x, [rows, n]), tile, [r, 0], f32::NEG_INFINITY);
            store_global(argmax(xs, 1), view_global(out, [rows, 1]), [r, 0]);
        }

        /// `y = silu(gate) · up` for `x = [gate | up]: [tokens, 2 d]`, `y: [tokens, d]`, in
        /// f32: the activation of a gated MLP. Each thread takes `U` runs of `V` elements (four
        /// runs get half the blocks per SM, so that they fit 128 registers without spilling).
        #[tilus::kernel(grid = [tokens, cdiv(d, 128 * V * U)], warps = 4, blocks_per_sm = 16 / max(2, U), space(V = [8, 1], U = [1, 2, 4]))]
        pub fn $silu<const V: i32, const U: i32>(tokens: i32, d: i32, x: Global<$t>, y: GlobalMut<$t>) {
            let tile = layout!(local(1, 1, U).spatial(1, 1, 128).local(1, 1, V));
            let [r, j] = block_indices();
            let c = j * 128 * V * U;
            let gx = view_global(x, [tokens, 2, d]);
            let gate = cast::<f32>(load_global(gx, tile, [r, 0, c]));
            let up = cast::<f32>(load_global(gx, tile, [r, 1, c]));
            store_global(cast::<$t>(silu(gate) * up), view_global(y, [tokens, 1, d]), [r, 0, c]);
        }

        /// Rotary position embedding (NeoX halves), in place on `x: [tokens, heads, HD]`:
        /// `(x1, x2) <- (x1 cos - x2 sin, x2 cos + x1 sin)` with `cos, sin: [tokens, HD / 2]`.
        /// A block takes `2048 / HD` heads of one token (128 threads of 8 columns each).
        #[tilus::kernel(grid = [tokens, cdiv(heads, 2048 / HD)], warps = 4, blocks_per_sm = 8, space(HD = [64, 128, 256]))]
        pub fn $rotary<const HD: i32>(
            tokens: i32,
            heads: i32,
            x: GlobalMut<$t>,
            cos: Global<$t>,
            sin: Global<$t>,
        ) {
            let half = HD / 2;
            let hb = 2048 / HD;
            let tile = layout!(spatial(hb, 1, half / 8).local(1, 1, 8));
            // One row of cos/sin per token, on the threads that hold the same columns of x.
            let row = layout!(spatial(half / 8).local(8));
            let [r, h] = block_indices();
            let gx = view_global(x, [tokens, heads, 2, half]);
            let x1 = cast::<f32>(load_global(gx, tile, [r, h * hb, 0, 0]));
            let x2 = cast::<f32>(load_global(gx, tile, [r, h * hb, 1, 0]));
            let c = cast::<f32>(load_global(view_global(cos, [tokens, half]), row, [r, 0]));
            let s = cast::<f32>(load_global(view_global(sin, [tokens, half]), row, [r, 0]));
            store_global(cast::<$t>(x1 * c - x2 * s), gx, [r, h * hb, 0, 0]);
            store_global(cast::<$t>(x2 * c + x1 * s), gx, [r, h * hb, 1, 0]);
        }

        // The generic host API (`super::softmax::<T>`, ...) reaches these kernels through this.
        impl RowElement for $t {
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            fn softmax(
                ctx: &Context,
                bn: i32,
                v: i32,
                rows: i32,
                n: i32,
                x: &impl DeviceRead<Self>,
                y: &mut impl DeviceWrite<Self>,
            ) -> Result<(), KernelError> {
                $softmax::launch(
                    ctx,
                    &$softmax::Config { BN: bn, V: v },
                    rows,
                    n,
                    x,
                    y,
                )
            }
            fn softmax_long(
                ctx: &Context,
                v: i32,
                rows: i32,
                n: i32,
                x: &impl DeviceRead<Self>,
                y: &mut impl DeviceWrite<Self>,
            ) -> Result<(), KernelError> {
                $softmax_long::launch(
                    ctx,
                    &$softmax_long::Config { V: v },
                    rows,
                    n,
                    x,
                    y,
                )
            }
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
            ) -> Result<(), KernelError> {
                $rms::launch(
                    ctx,
                    &$rms::Config { BN: bn, V: v },
                    rows,
                    n,
                    eps,
                    x,
                    w,
                    y,
                )
            }
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
            ) -> Result<(), KernelError> {
                $add_rms::launch(
                    ctx,
                    &$add_rms::Config { BN: bn, V: v },
                    rows,
                    n,
                    eps,
                    x,
                    residual,
                    w,
                )
            }
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
            ) -> Result<(), KernelError> {
                $ln::launch(
                    ctx,
                    &$ln::Config { BN: bn, V: v },
                    rows,
                    n,
                    eps,
                    x,
                    w,
                    b,
                    y,
                )
            }
            fn argmax(
                ctx: &Context,
                bn: i32,
                v: i32,
                rows: i32,
                n: i32,
                x: &impl DeviceRead<Self>,
                out: &mut impl DeviceWrite<i32>,
            ) -> Result<(), KernelError> {
                $argmax::launch(
                    ctx,
                    &$argmax::Config { BN: bn, V: v },
                    rows,
                    n,
                    x,
                    out,
                )
            }
            fn silu_and_mul(
                ctx: &Context,
                v: i32,
                u: i32,
                tokens: i32,
                d: i32,
                x: &impl DeviceRead<Self>,
                y: &mut impl DeviceWrite<Self>,
            ) -> Result<(), KernelError> {
                $silu::launch(ctx, &$silu::Config { V: v, U: u }, tokens, d, x, y)
            }
            fn rotary(
                ctx: &Context,
                hd: i32,
                tokens: i32,
                heads: i32,
                x: &mut impl DeviceWrite<Self>,
                cos: &impl DeviceRead<Self>,
                sin: &impl DeviceRead<Self>,
            ) -> Result<(), KernelError> {
                $rotary::launch(
                    ctx,
                    &$rotary::Config { HD: hd },
                    tokens,
                    heads,
                    x,
                    cos,
                    sin,
                )
            }
        }
    };
}

row_kernels!(
    f16,
    softmax_f16,
    softmax_long_f16,
    rms_norm_f16,
    add_rms_norm_f16,
    layer_norm_f16,
    argmax_f16,
    silu_and_mul_f16,
    rotary_f16
);
row_kernels!(
    bf16,
    softmax_bf16,
    softmax_long_bf16,
    rms_norm_bf16,
    add_rms_norm_bf16,
    layer_norm_bf16,
    argmax_bf16,
    silu_and_mul_bf16,
    rotary_bf16
);
