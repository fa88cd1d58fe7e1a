//! Decode attention on the GPU against the f64 reference, on fresh random inputs with the
//! output poisoned (NaN) before the launch and unwritten cache slots holding NaN: ragged
//! lengths in one batch (1, 17, 1000, 4097: one sequence much longer than the others, tiles and
//! pages cut short), contiguous caches and paged ones of 16, 32 and 64 tokens with scrambled
//! block tables, GQA 8:1 and 1:1, head dims 64 and 128, f16 and bf16, sliding windows, caches
//! of the activation type and quantized (int8, fp8 e4m3, 4-bit with zero points), and the
//! split count the GPU picks (several splits per long sequence, then the combine step).
//!
//! Skips with a printed reason when this machine cannot run CUDA (`TILUS_REQUIRE_GPU=1` fails).

mod common;

use common::attention::{compare, make, Case, U_BF16, U_F16};
use half::{bf16, f16};
use std::sync::Arc;
use tilus::element::Activation;
use tilus::kernels::attention::decode::{
    CacheLayout, DecodeAttention, DecodeShape, KvCache, KvFormat,
};
use tilus::runtime::{Context, DeviceBuffer};
use tilus::DType;

fn context(test: &str) -> Option<Arc<Context>> {
    common::gpu_context(test, Context::builder(0))
}

const LENS: [i32; 4] = [1, 17, 1000, 4097];

fn run_gpu<T: Activation>(
    ctx: &Context,
    case: &Case<T>,
    scale: f32,
    window: Option<usize>,
    max_seq_len: usize,
) -> (Vec<T>, usize) {
    let s = &case.shape;
    let attn = DecodeAttention::new(s.clone(), scale, window, max_seq_len).unwrap();
    let q = DeviceBuffer::from_host(ctx, &case.q).unwrap();
    let k = DeviceBuffer::from_host(ctx, &case.k).unwrap();
    let v = DeviceBuffer::from_host(ctx, &case.v).unwrap();
    let meta = case.meta.as_ref().map(|(k, v)| {
        (
            DeviceBuffer::from_host(ctx, k).unwrap(),
            DeviceBuffer::from_host(ctx, v).unwrap(),
        )
    });
    let table = case
        .table
        .as_ref()
        .map(|t| DeviceBuffer::from_host(ctx, t).unwrap());
    let lens = DeviceBuffer::from_host(ctx, &case.lens).unwrap();
    let mut out = DeviceBuffer::from_host(ctx, &vec![T::from_f32(f32::NAN); s.q_len()]).unwrap();
    let cache = KvCache {
        k: &k,
        v: &v,
        meta: meta.as_ref().map(|(a, b)| (a, b)),
        block_table: table.as_ref(),
        seq_lens: &lens,
    };
    attn.run(ctx, &q, &cache, &mut out).unwrap();
    let splits = attn
        .plan_for::<T>(ctx.device().multiprocessors as usize)
        .unwrap()
        .splits;
    (out.to_host().unwrap(), splits)
}

fn shape(q_heads: usize, kv_heads: usize, head_dim: usize, cache: CacheLayout) -> DecodeShape {
    DecodeShape {
        batch: LENS.len(),
        q_heads,
        kv_heads,
        head_dim,
        cache,
        kv: KvFormat::Activation,
    }
}

fn quantized(s: DecodeShape, dtype: DType) -> DecodeShape {
    DecodeShape {
        kv: KvFormat::Quantized(dtype),
        ..s
    }
}

fn paged(page_size: usize) -> CacheLayout {
    let max_pages = 4097usize.div_ceil(page_size);
    CacheLayout::Paged {
        pages: LENS.len() * max_pages + 3,
        page_size,
        max_pages,
    }
}

fn check_all<T: Activation>(test: &str, u: f64) {
    let Some(ctx) = context(test) else { return };
    let cases = [
        (shape(16, 2, 128, paged(32)), None),
        (shape(16, 2, 64, paged(16)), None),
        (shape(8, 8, 128, paged(64)), Some(300)),
        (
            shape(16, 2, 128, CacheLayout::Contiguous { max_len: 4100 }),
            None,
        ),
        (
            shape(16, 2, 64, CacheLayout::Contiguous { max_len: 4097 }),
            Some(1500),
        ),
        (quantized(shape(16, 2, 128, paged(32)), DType::Int(8)), None),
        (quantized(shape(16, 2, 128, paged(16)), DType::F8E4M3), None),
        (
            quantized(shape(16, 2, 128, paged(64)), DType::UInt(4)),
            Some(700),
        ),
        (
            quantized(
                shape(8, 1, 64, CacheLayout::Contiguous { max_len: 4097 }),
                DType::UInt(4),
            ),
            None,
        ),
    ];
    for (s, window) in cases {
        let case = make::<T>(s, &LENS);
        let scale = 1.0 / (case.shape.head_dim as f32).sqrt();
        // One split per sequence, and the GPU's own choice for the longest.
        for max_seq_len in [1, 4097] {
            let (out, splits) = run_gpu(&ctx, &case, scale, window, max_seq_len);
            compare(
                &case,
                scale,
                window,
                &out,
                u,
                &format!("{test} splits={splits}"),
            );
        }
    }
}

#[test]
fn decode_attention_f16_matches_f64() {
    check_all::<f16>("decode_attention_f16_matches_f64", U_F16);
}

#[test]
fn decode_attention_bf16_matches_f64() {
    check_all::<bf16>("decode_attention_bf16_matches_f64", U_BF16);
}
