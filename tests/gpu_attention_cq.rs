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

/// The GPU-side encoder: codes written into a device cache are nearest entries, other rows
/// untouched; then decode attention over the updated cache matches the f64 reference.
#[test]
fn append_then_decode_matches_the_reference() {
    use common::cq::check_append;
    use rand::{Rng, SeedableRng};
    let Some(ctx) = context("append_then_decode_matches_the_reference") else {
        return;
    };
    let shape = CqShape {
        batch: 3,
        q_heads: 16,
        kv_heads: 2,
        head_dim: 128,
        max_len: 700,
    };
    for (i, name) in ["cq2", "cq4", "cq2g"].into_iter().enumerate() {
        let format = CqFormat::by_name(name).unwrap();
        let mut case = make::<f16>(shape, format, vec![700, 1, 350], 40 + i as u64);
        let mut rng = rand::rngs::StdRng::seed_from_u64(i as u64);
        // The last token of each sequence (slot b · max_len + len - 1), a padded slot (-1) and
        // one past the cache.
        let slots: Vec<i32> = vec![699, -1, 700, 1749, 2100];
        let per = shape.kv_heads * shape.head_dim;
        let gen = |rng: &mut rand::rngs::StdRng| -> Vec<f16> {
            (0..slots.len() * per)
                .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
                .collect()
        };
        let (nk, nv) = (gen(&mut rng), gen(&mut rng));
        let attn = CqDecodeAttention::new(shape, format, scale(128), 700).unwrap();
        let up = |x: &[f16]| DeviceBuffer::from_host(&ctx, x).unwrap();
        let kb = up(&case.books.to_activation::<f16>(Kv::K));
        let vb = up(&case.books.to_activation::<f16>(Kv::V));
        let mut kd = DeviceBuffer::from_host(&ctx, &case.k).unwrap();
        let mut vd = DeviceBuffer::from_host(&ctx, &case.v).unwrap();
        let sd = DeviceBuffer::from_host(&ctx, &slots).unwrap();
        attn.append(&ctx, &up(&nk), &up(&nv), &sd, &kb, &vb, &mut kd, &mut vd)
            .unwrap();
        let (k, v) = (kd.to_host().unwrap(), vd.to_host().unwrap());
        check_append(&case.books, Kv::K, &nk, &slots, &case.k, &k);
        check_append(&case.books, Kv::V, &nv, &slots, &case.v, &v);
        // The interpreter's encoder writes the same codes.
        let (mut kc, mut vc) = (case.k.clone(), case.v.clone());
        attn.append_cpu(
            &nk,
            &nv,
            &slots,
            &case.books.to_activation::<f16>(Kv::K),
            &case.books.to_activation::<f16>(Kv::V),
            &mut kc,
            &mut vc,
        )
        .unwrap();
        assert_eq!((&k, &v), (&kc, &vc), "{name}: GPU vs interpreter codes");
        case.k = k;
        case.v = v;
        let got = run_gpu(&ctx, &case, (32, 16));
        compare(&case, &got, U_F16, &format!("{name} after append"));
    }
}
