//! Causal prefill attention (`tilus::kernels::attention::prefill`) on the GPU against the f64
//! reference of `common/prefill_ref.rs` (with its derived error bound), on fresh seeded random
//! inputs, the output poisoned (0xFF bytes: NaN) before every launch: one ragged batch of
//! lengths 1, 17, 1000 and 4097, head dimensions 64 and 128, f16 and bf16, GQA ratios 1 and 4,
//! every configuration of `prefill_configs`. Rows of the long sequences are sampled (the first
//! and last 80 and every 17th: the reference is O(n^2) on the CPU); every element must be
//! written.
//!
//! Skips with a printed reason when this machine cannot run CUDA (`TILUS_REQUIRE_GPU=1` fails).
//! On the GPU machine: `cargo test --release --test gpu_attention_prefill -- --nocapture`;
//! timings of the benchmark shape: add `-- --ignored prefill_timing --nocapture`.

mod common;

#[allow(dead_code)]
#[path = "common/prefill_ref.rs"]
mod prefill_ref;

use prefill_ref::{assert_close, Case};
use std::sync::Arc;
use tilus::kernels::attention::prefill::{prefill_attention, prefill_configs, PrefillShape};
use tilus::runtime::{bench, Context, DeviceBuffer};
use tilus::DType;

fn context(test: &str) -> Option<Arc<Context>> {
    common::gpu_context(test, Context::builder(0))
}

fn sampled(n: usize, r: usize) -> bool {
    n <= 300 || r < 80 || r + 80 >= n || r.is_multiple_of(17)
}

fn check(ctx: &Context, case: &Case, seed: u64) {
    let x = case.inputs(seed);
    let scale = 1.0 / (case.d as f32).sqrt();
    let shape = PrefillShape {
        cu_seqlens: &x.cu,
        q_heads: case.q_heads,
        kv_heads: case.kv_heads,
        head_dim: case.d,
        dtype: case.dtype,
        scale,
    };
    let (want, tol) = case.reference_rows(&x, scale, sampled);
    let dcu = DeviceBuffer::from_host(ctx, &x.cu).unwrap();
    let dq = DeviceBuffer::from_host(ctx, &x.q).unwrap();
    let dk = DeviceBuffer::from_host(ctx, &x.k).unwrap();
    let dv = DeviceBuffer::from_host(ctx, &x.v).unwrap();
    let poison = vec![0xFFu8; x.q.len()];
    for cfg in prefill_configs(case.d, case.dtype).unwrap() {
        let mut dout = DeviceBuffer::from_host(ctx, &poison).unwrap();
        prefill_attention(ctx, Some(&cfg), &shape, &dcu, &dq, &dk, &dv, &mut dout).unwrap();
        let got = dout.to_host().unwrap();
        assert_close(&format!("{case:?} {cfg}"), case, &got, &want, &tol);
    }
}

const LENS: [usize; 4] = [1, 17, 1000, 4097];

#[test]
fn prefill_gpu_matches_reference() {
    let Some(ctx) = context("prefill_gpu_matches_reference") else {
        return;
    };
    for (i, (d, dtype, q_heads, kv_heads)) in [
        (64, DType::F16, 4, 1),
        (128, DType::F16, 2, 2),
        (64, DType::BF16, 2, 2),
        (128, DType::BF16, 4, 1),
    ]
    .into_iter()
    .enumerate()
    {
        let case = Case {
            lens: LENS.to_vec(),
            q_heads,
            kv_heads,
            d,
            dtype,
        };
        check(&ctx, &case, 100 + i as u64);
    }
}

/// The benchmark shape of issue 17 (batch 1, 4096 tokens, 32 query heads, 8 KV heads, causal),
/// every configuration of the sweep, D = 128 and 64, f16: median of 20 runs after 3 warm-ups.
#[test]
#[ignore = "timing, not a check: run with --ignored on a GPU"]
fn prefill_timing() {
    let Some(ctx) = context("prefill_timing") else {
        return;
    };
    let (tokens, qh, kvh) = (4096usize, 32usize, 8usize);
    let cu = vec![0, tokens as i32];
    for d in [128usize, 64] {
        let dq = DeviceBuffer::<u8>::zeros(&ctx, tokens * qh * d * 2).unwrap();
        let dk = DeviceBuffer::<u8>::zeros(&ctx, tokens * kvh * d * 2).unwrap();
        let dv = DeviceBuffer::<u8>::zeros(&ctx, tokens * kvh * d * 2).unwrap();
        let mut dout = DeviceBuffer::<u8>::zeros(&ctx, tokens * qh * d * 2).unwrap();
        let dcu = DeviceBuffer::from_host(&ctx, &cu).unwrap();
        let shape = PrefillShape {
            cu_seqlens: &cu,
            q_heads: qh,
            kv_heads: kvh,
            head_dim: d,
            dtype: DType::F16,
            scale: 1.0 / (d as f32).sqrt(),
        };
        // Causal: half of the 4 · tokens² · d · heads flops of full attention.
        let flops = 2.0 * (tokens * tokens * d * qh) as f64;
        for cfg in prefill_configs(d, DType::F16).unwrap() {
            let t = bench::time_runs(&ctx, 3, 20, None, || {
                prefill_attention(&ctx, Some(&cfg), &shape, &dcu, &dq, &dk, &dv, &mut dout)
                    .unwrap();
                Ok(())
            })
            .unwrap();
            eprintln!(
                "prefill d={d} {cfg}: {:.1} us ({:.0} TFLOP/s)",
                t.median_us,
                flops / t.median_us * 1e-6
            );
        }
    }
}
