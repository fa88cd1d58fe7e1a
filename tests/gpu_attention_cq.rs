//! Decode attention over a CQ (vector-quantized) KV cache on the GPU: against the f64 reference
//! and the interpreter, fresh random codes, codebooks and queries, the output poisoned (NaN)
//! before the launch, ragged lengths in one batch (0, 1, 17, 1000, 4097 and one past the
//! cache), CQ-2 and CQ-4, one codebook per head or per channel group, 16 and 32 tokens per
//! warp, f16 and bf16, and the split count the GPU picks.
//!
//! Skips with a printed reason when this machine cannot run CUDA (`TILUS_REQUIRE_GPU=1` fails).

mod common;

use common::cq::{compare, make, scale, Case, U_BF16, U_F16};
use half::{bf16, f16};
use std::sync::Arc;
use tilus::element::Activation;
use tilus::kernels::attention::cq::{CqDecodeAttention, CqFormat, CqShape, CqTuning, Kv};
use tilus::runtime::{Context, DeviceBuffer};

fn context(test: &str) -> Option<Arc<Context>> {
    common::gpu_context(test, Context::builder(0))
}

fn run_gpu<T: Activation>(
    ctx: &Context,
    case: &Case<T>,
    (tile, replicas): (usize, usize),
) -> Vec<T> {
    let s = &case.shape;
    let attn = CqDecodeAttention::new(*s, case.books.format, scale(s.head_dim), s.max_len)
        .unwrap()
        .with_tuning(CqTuning {
            tile,
            replicas,
            blocks_per_sm: if replicas == 8 { 3 } else { 1 },
        })
        .unwrap();
    let up = |x: &[u8]| DeviceBuffer::from_host(ctx, x).unwrap();
    let q = DeviceBuffer::from_host(ctx, &case.q).unwrap();
    let (k, v) = (up(&case.k), up(&case.v));
    let kb = DeviceBuffer::from_host(ctx, &case.books.to_activation::<T>(Kv::K)).unwrap();
    let vb = DeviceBuffer::from_host(ctx, &case.books.to_activation::<T>(Kv::V)).unwrap();
    let lens = DeviceBuffer::from_host(ctx, &case.lens).unwrap();
    let mut out = DeviceBuffer::from_host(ctx, &vec![T::from_f32(f32::NAN); s.q_len()]).unwrap();
    attn.run(ctx, &q, &k, &v, &kb, &vb, &lens, &mut out)
        .unwrap();
    out.to_host().unwrap()
}

fn check_all<T: Activation>(test: &str, u: f64) {
    let Some(ctx) = context(test) else {
        return;
    };
    let shape = CqShape {
        batch: 6,
        q_heads: 16,
        kv_heads: 2,
        head_dim: 128,
        max_len: 4097,
    };
    let formats = ["cq2", "cq4", "cq2g", "cq4g"].map(|n| CqFormat::by_name(n).unwrap());
    for (i, format) in formats.into_iter().enumerate() {
        let case = make::<T>(
            shape,
            format,
            vec![1, 17, 1000, 4097, 0, 9000],
            100 + i as u64,
        );
        for tuning in [(16, 16), (32, 8), (32, 16)] {
            let got = run_gpu(&ctx, &case, tuning);
            compare(
                &case,
                &got,
                u,
                &format!("GPU (tile, replicas) = {tuning:?}"),
            );
        }
    }
    // A short batch: one or two block tiles per split.
    let small = CqShape {
        batch: 2,
        max_len: 300,
        ..shape
    };
    let case = make::<T>(small, CqFormat::CQ2, vec![300, 33], 7);
    let got = run_gpu(&ctx, &case, (16, 8));
    compare(&case, &got, u, "GPU small");
    // 16 query heads per KV head (two n-tiles of them) and 4 (one, half masked).
    for (q_heads, seed) in [(32, 8), (8, 9)] {
        let s = CqShape { q_heads, ..shape };
        let case = make::<T>(s, CqFormat::CQ2, vec![4097, 1, 2500, 0, 64, 700], seed);
        let got = run_gpu(&ctx, &case, (32, 16));
        compare(&case, &got, u, &format!("GPU q_heads={q_heads}"));
    }
}

#[test]
fn cq_decode_attention_f16_matches_f64() {
    check_all::<f16>("cq_decode_attention_f16_matches_f64", U_F16);
}

#[test]
fn cq_decode_attention_bf16_matches_f64() {
    check_all::<bf16>("cq_decode_attention_bf16_matches_f64", U_BF16);
}
