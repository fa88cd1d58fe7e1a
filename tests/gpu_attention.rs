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

use common::attention::{compare, make, random_f32, Case, U_BF16, U_F16};
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

/// Build caches on the GPU with `append_kv` (one call per step of 1..3 tokens, slots through
/// a scrambled block table, a padding slot of -1 in every call), check the bytes and scales bit
/// for bit against the host quantizer, then decode over them against the f64 reference.
fn append_then_decode<T: Activation>(test: &str, kv: KvFormat, u: f64) {
    use tilus::kernels::attention::append::append_kv;
    use tilus::kernels::attention::kv::quantize_cache;
    let Some(ctx) = context(test) else { return };
    let s = DecodeShape {
        batch: 2,
        q_heads: 8,
        kv_heads: 2,
        head_dim: 128,
        cache: CacheLayout::Paged {
            pages: 12,
            page_size: 16,
            max_pages: 6,
        },
        kv,
    };
    let lens = [37i32, 90];
    let table: Vec<i32> = vec![3, 7, 1, 0, 11, 5, 2, 9, 4, 10, 6, 8];
    let row = s.kv_heads * s.head_dim;
    // Every row's values on the host (rows nobody appends to stay zero on both sides).
    let mut xk = vec![0.0f32; s.cache_rows() * row];
    let mut xv = vec![0.0f32; s.cache_rows() * row];
    let bytes = s.cache_bytes(T::DTYPE);
    let mut k = DeviceBuffer::<u8>::zeros(&ctx, bytes).unwrap();
    let mut v = DeviceBuffer::<u8>::zeros(&ctx, bytes).unwrap();
    let mut km = DeviceBuffer::<f32>::zeros(&ctx, s.meta_len()).unwrap();
    let mut vm = DeviceBuffer::<f32>::zeros(&ctx, s.meta_len()).unwrap();
    let quantized = kv != KvFormat::Activation;
    let slot = |b: usize, t: usize| table[b * 6 + t / 16] * 16 + (t % 16) as i32;
    let mut pos = [0usize; 2];
    let mut step = 0;
    while pos[0] < 37 || pos[1] < 90 {
        // Tokens of this step: up to 1 + step % 3 per sequence, then a padding token.
        let mut slots = Vec::new();
        let mut vals_k = Vec::new();
        let mut vals_v = Vec::new();
        for b in 0..2 {
            for _ in 0..1 + step % 3 {
                if pos[b] < lens[b] as usize {
                    let sl = slot(b, pos[b]) as usize;
                    let (nk, nv) = (random_f32(row, 2.0), random_f32(row, 2.0));
                    // What the cache will hold, as the activation type rounds it.
                    let r = |x: &[f32]| -> Vec<f32> {
                        x.iter().map(|&v| T::from_f32(v).to_f32()).collect()
                    };
                    xk[sl * row..(sl + 1) * row].copy_from_slice(&r(&nk));
                    xv[sl * row..(sl + 1) * row].copy_from_slice(&r(&nv));
                    slots.push(sl as i32);
                    vals_k.extend(nk);
                    vals_v.extend(nv);
                    pos[b] += 1;
                }
            }
        }
        slots.push(-1);
        vals_k.extend(random_f32(row, 2.0));
        vals_v.extend(random_f32(row, 2.0));
        let to_t = |x: &[f32]| -> Vec<T> { x.iter().map(|&v| T::from_f32(v)).collect() };
        let nk = DeviceBuffer::from_host(&ctx, &to_t(&vals_k)).unwrap();
        let nv = DeviceBuffer::from_host(&ctx, &to_t(&vals_v)).unwrap();
        let sl = DeviceBuffer::from_host(&ctx, &slots).unwrap();
        let meta = quantized.then_some((&mut km, &mut vm));
        append_kv(&ctx, &s, &nk, &nv, &sl, &mut k, &mut v, meta).unwrap();
        step += 1;
    }
    let (kb, vb) = (k.to_host().unwrap(), v.to_host().unwrap());
    // The host's version of the same cache.
    let (want_k, want_v, k_vals, v_vals, meta) = match kv {
        KvFormat::Activation => {
            let b = |x: &[f32]| T::to_bytes(&x.iter().map(|&v| T::from_f32(v)).collect::<Vec<_>>());
            let f = |x: &[f32]| x.iter().map(|&v| v as f64).collect::<Vec<_>>();
            (b(&xk), b(&xv), f(&xk), f(&xv), None)
        }
        KvFormat::Quantized(t) => {
            let (qk, qv) = (
                quantize_cache(t, s.kv_heads, s.head_dim, &xk),
                quantize_cache(t, s.kv_heads, s.head_dim, &xv),
            );
            let (gkm, gvm) = (km.to_host().unwrap(), vm.to_host().unwrap());
            let used = |i: usize| {
                xk[(i / 2 % s.cache_rows()) * row..][..row]
                    .iter()
                    .any(|&x| x != 0.0)
            };
            for (i, (g, w)) in gkm.iter().zip(&qk.meta).enumerate() {
                if used(i) {
                    assert_eq!(g.to_bits(), w.to_bits(), "{test}: k_meta[{i}]");
                }
            }
            for (i, (g, w)) in gvm.iter().zip(&qv.meta).enumerate() {
                if used(i) {
                    assert_eq!(g.to_bits(), w.to_bits(), "{test}: v_meta[{i}]");
                }
            }
            let kvals = qk.values(t, s.kv_heads, s.head_dim);
            let vvals = qv.values(t, s.kv_heads, s.head_dim);
            (qk.codes, qv.codes, kvals, vvals, Some((gkm, gvm)))
        }
    };
    for r in 0..s.cache_rows() {
        let n = bytes / s.cache_rows();
        assert_eq!(
            &kb[r * n..(r + 1) * n],
            &want_k[r * n..(r + 1) * n],
            "{test}: k row {r}"
        );
        assert_eq!(
            &vb[r * n..(r + 1) * n],
            &want_v[r * n..(r + 1) * n],
            "{test}: v row {r}"
        );
    }
    // Decode over the appended cache.
    let case = Case::<T> {
        shape: s.clone(),
        q: random_f32(s.q_len(), 1.0)
            .iter()
            .map(|&x| T::from_f32(x))
            .collect(),
        k: kb,
        v: vb,
        meta,
        k_vals,
        v_vals,
        table: Some(table),
        lens: lens.to_vec(),
    };
    let scale = 1.0 / (s.head_dim as f32).sqrt();
    let (out, _) = run_gpu(&ctx, &case, scale, None, 90);
    compare(&case, scale, None, &out, u, test);
}

#[test]
fn append_then_decode_matches_the_host() {
    let t = "append_then_decode_matches_the_host";
    append_then_decode::<f16>(t, KvFormat::Activation, U_F16);
    append_then_decode::<f16>(t, KvFormat::Quantized(DType::Int(8)), U_F16);
    append_then_decode::<bf16>(t, KvFormat::Quantized(DType::UInt(4)), U_BF16);
    append_then_decode::<f16>(t, KvFormat::Quantized(DType::F8E4M3), U_F16);
}

/// Hostile device data on the GPU (run it under compute-sanitizer memcheck): lengths past the
/// capacity and page indices outside the cache read only inside it, and the context stays
/// usable.
#[test]
fn hostile_lengths_and_pages_stay_inside_the_cache() {
    let test = "hostile_lengths_and_pages_stay_inside_the_cache";
    let Some(ctx) = context(test) else { return };
    for kv in [KvFormat::Activation, KvFormat::Quantized(DType::UInt(4))] {
        let shape = DecodeShape {
            batch: 3,
            q_heads: 8,
            kv_heads: 2,
            head_dim: 128,
            cache: CacheLayout::Paged {
                pages: 4,
                page_size: 16,
                max_pages: 2,
            },
            kv,
        };
        let bytes = shape.cache_bytes(DType::F16);
        let k = DeviceBuffer::from_host(
            &ctx,
            &(0..bytes).map(|i| (i * 7 % 61) as u8).collect::<Vec<_>>(),
        )
        .unwrap();
        let meta = DeviceBuffer::from_host(&ctx, &vec![0.01f32; shape.meta_len()]).unwrap();
        let table = DeviceBuffer::from_host(&ctx, &[0i32, 999, -5, 3, i32::MAX, i32::MIN]).unwrap();
        let lens = DeviceBuffer::from_host(&ctx, &[40i32, i32::MAX, 17]).unwrap();
        let q = DeviceBuffer::from_host(&ctx, &vec![f16::from_f32(0.5); shape.q_len()]).unwrap();
        let mut out = DeviceBuffer::<f16>::zeros(&ctx, shape.q_len()).unwrap();
        let cache = KvCache {
            k: &k,
            v: &k,
            meta: (kv != KvFormat::Activation).then_some((&meta, &meta)),
            block_table: Some(&table),
            seq_lens: &lens,
        };
        for max_seq_len in [1, 1 << 20] {
            let attn = DecodeAttention::new(shape.clone(), 0.125, None, max_seq_len).unwrap();
            attn.run(&ctx, &q, &cache, &mut out).unwrap();
            ctx.synchronize().unwrap();
        }
    }
}
