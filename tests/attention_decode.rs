//! Decode attention (`tilus::kernels::attention::decode`) on the CPU interpreter against an f64
//! reference: fresh random inputs, outputs poisoned before each run, ragged sequence lengths
//! (1 token, a partial tile, several tiles), contiguous and paged caches with a scrambled block
//! table, unwritten cache slots holding NaN (they must not leak into the output), split-KV with
//! its combine step, sliding windows, GQA ratios 1 to 8, f16 and bf16, head dims 64 and 128.
//! The GPU runs the same kernels in `gpu_attention.rs`.

mod common;

use common::attention::{compare, make, Case, U_BF16, U_F16};
use half::{bf16, f16};
use tilus::element::Activation;
use tilus::kernels::attention::decode::{
    CacheLayout, DecodeAttention, DecodeShape, KvCache, KvFormat,
};
use tilus::DType;

/// Run `case` on the interpreter with `splits` splits and compare with the f64 reference.
fn check<T: Activation>(case: &Case<T>, scale: f32, window: Option<usize>, splits: usize, u: f64) {
    let s = &case.shape;
    let attn = DecodeAttention::new(s.clone(), scale, window, 1 << 20).unwrap();
    let mut out = vec![T::from_f32(f32::NAN); s.q_len()];
    let cache = KvCache {
        k: &case.k[..],
        v: &case.v[..],
        meta: case.meta.as_ref().map(|(k, v)| (&k[..], &v[..])),
        block_table: case.table.as_deref(),
        seq_lens: &case.lens[..],
    };
    attn.run_cpu(splits, &case.q, &cache, &mut out).unwrap();
    compare(case, scale, window, &out, u, &format!("splits={splits}"));
}

#[test]
fn contiguous_cache_with_and_without_splits() {
    let shape = DecodeShape {
        batch: 3,
        q_heads: 8,
        kv_heads: 2,
        head_dim: 64,
        cache: CacheLayout::Contiguous { max_len: 80 },
        kv: KvFormat::Activation,
    };
    let case = make::<f16>(shape, &[1, 17, 70]);
    for splits in [1, 3] {
        check(&case, 0.125, None, splits, U_F16);
    }
}

#[test]
fn paged_cache_scrambled_pages_head_dim_128() {
    let shape = DecodeShape {
        batch: 2,
        q_heads: 8,
        kv_heads: 1,
        head_dim: 128,
        cache: CacheLayout::Paged {
            pages: 12,
            page_size: 16,
            max_pages: 5,
        },
        kv: KvFormat::Activation,
    };
    let case = make::<f16>(shape, &[33, 80]);
    check(&case, 0.09, None, 2, U_F16);
}

#[test]
fn bf16_sliding_window_and_an_empty_sequence() {
    let shape = DecodeShape {
        batch: 3,
        q_heads: 2,
        kv_heads: 2,
        head_dim: 64,
        cache: CacheLayout::Paged {
            pages: 9,
            page_size: 32,
            max_pages: 3,
        },
        kv: KvFormat::Activation,
    };
    let case = make::<bf16>(shape, &[70, 0, 5]);
    for (window, splits) in [(None, 1), (Some(20), 1), (Some(45), 2)] {
        check(&case, 0.125, window, splits, U_BF16);
    }
}

#[test]
fn bad_arguments_are_named() {
    let ok = DecodeShape {
        batch: 1,
        q_heads: 4,
        kv_heads: 2,
        head_dim: 64,
        cache: CacheLayout::Contiguous { max_len: 16 },
        kv: KvFormat::Activation,
    };
    let err = |shape: DecodeShape| {
        DecodeAttention::new(shape, 1.0, None, 16)
            .err()
            .expect("refused")
            .to_string()
    };
    assert!(err(DecodeShape {
        q_heads: 3,
        ..ok.clone()
    })
    .contains("q_heads"));
    assert!(err(DecodeShape {
        head_dim: 96,
        ..ok.clone()
    })
    .contains("head_dim"));
    assert!(err(DecodeShape {
        kv_heads: 0,
        ..ok.clone()
    })
    .contains("kv_heads"));
    assert!(err(DecodeShape {
        cache: CacheLayout::Paged {
            pages: 4,
            page_size: 8,
            max_pages: 2
        },
        ..ok.clone()
    })
    .contains("page_size"));
    let e = DecodeAttention::new(ok.clone(), f32::NAN, None, 16)
        .err()
        .unwrap();
    assert!(e.to_string().contains("scale"), "{e}");
    let e = DecodeAttention::new(ok.clone(), 1.0, Some(0), 16)
        .err()
        .unwrap();
    assert!(e.to_string().contains("window"), "{e}");

    let attn = DecodeAttention::new(ok.clone(), 1.0, None, 16).unwrap();
    let q = vec![f16::ONE; ok.q_len()];
    let kv = vec![f16::ONE; ok.cache_len()];
    let mut out = vec![f16::ZERO; ok.q_len()];
    let run = |q: &[f16], k: &[f16], v: &[f16], table: Option<&[i32]>, lens: &[i32]| {
        let cache = KvCache {
            k,
            v,
            meta: None,
            block_table: table,
            seq_lens: lens,
        };
        attn.run_cpu(1, q, &cache, &mut out.clone())
            .unwrap_err()
            .to_string()
    };
    assert!(run(&q[1..], &kv, &kv, None, &[4]).contains("q:"));
    assert!(run(&q, &kv, &kv[2..], None, &[4]).contains("v_cache"));
    assert!(run(&q, &kv, &kv, Some(&[0]), &[4]).contains("block_table"));
    assert!(run(&q, &kv, &kv, None, &[]).contains("seq_lens"));
    let meta = [0.0f32; 64];
    let with_meta = KvCache {
        k: &kv[..],
        v: &kv[..],
        meta: Some((&meta[..], &meta[..])),
        block_table: None,
        seq_lens: &[4][..],
    };
    let e = attn.run_cpu(1, &q, &with_meta, &mut out).unwrap_err();
    assert!(e.to_string().contains("meta"), "{e}");
    // A quantized cache needs its scales, and a code type.
    let quant = DecodeShape {
        kv: KvFormat::Quantized(DType::Int(8)),
        ..ok.clone()
    };
    let attn = DecodeAttention::new(quant.clone(), 1.0, None, 16).unwrap();
    let codes = vec![0u8; quant.cache_bytes(DType::F16)];
    let no_meta = KvCache {
        k: &codes[..],
        v: &codes[..],
        meta: None,
        block_table: None,
        seq_lens: &[4][..],
    };
    let e = attn.run_cpu(1, &q, &no_meta, &mut out).unwrap_err();
    assert!(e.to_string().contains("k_meta"), "{e}");
    let e = DecodeAttention::new(
        DecodeShape {
            kv: KvFormat::Quantized(DType::F16),
            ..ok
        },
        1.0,
        None,
        16,
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("kv"), "{e}");
}

/// Quantized caches: int8, fp8 (e4m3) and 4-bit codes with a scale (and for unsigned codes a
/// zero point) per token and head, dequantized in the kernel; paged and contiguous, with splits.
#[test]
fn quantized_caches_match_f64() {
    for (dtype, cache) in [
        (
            DType::Int(8),
            CacheLayout::Paged {
                pages: 10,
                page_size: 16,
                max_pages: 5,
            },
        ),
        (DType::F8E4M3, CacheLayout::Contiguous { max_len: 70 }),
        (
            DType::UInt(4),
            CacheLayout::Paged {
                pages: 10,
                page_size: 32,
                max_pages: 3,
            },
        ),
    ] {
        let shape = DecodeShape {
            batch: 2,
            q_heads: 4,
            kv_heads: 2,
            head_dim: 64,
            cache,
            kv: KvFormat::Quantized(dtype),
        };
        let case = make::<f16>(shape, &[1, 66]);
        for splits in [1, 2] {
            check(&case, 0.125, None, splits, U_F16);
        }
    }
    let shape = DecodeShape {
        batch: 1,
        q_heads: 8,
        kv_heads: 2,
        head_dim: 128,
        cache: CacheLayout::Contiguous { max_len: 40 },
        kv: KvFormat::Quantized(DType::UInt(4)),
    };
    check(&make::<bf16>(shape, &[40]), 0.09, None, 1, U_BF16);
}

/// Hostile device data: sequence lengths past the cache's capacity and page indices outside
/// the cache (negative, past the end) only ever read inside the cache: the run completes and
/// writes every output (the values of such a step are unspecified, but nothing is read out of
/// bounds; `gpu_attention.rs` runs the same case under compute-sanitizer).
#[test]
fn hostile_lengths_and_pages_stay_inside_the_cache() {
    for kv in [KvFormat::Activation, KvFormat::Quantized(DType::UInt(4))] {
        let shape = DecodeShape {
            batch: 3,
            q_heads: 4,
            kv_heads: 2,
            head_dim: 64,
            cache: CacheLayout::Paged {
                pages: 4,
                page_size: 16,
                max_pages: 2,
            },
            kv,
        };
        let attn = DecodeAttention::new(shape.clone(), 0.125, None, 64).unwrap();
        let bytes = shape.cache_bytes(DType::F16);
        let k: Vec<u8> = (0..bytes).map(|i| (i * 7 % 61) as u8).collect();
        let meta = vec![0.01f32; shape.meta_len()];
        let table = [0i32, 999, -5, 3, i32::MAX, i32::MIN];
        let lens = [40i32, i32::MAX, 17];
        let q = vec![f16::from_f32(0.5); shape.q_len()];
        let mut out = vec![f16::NAN; shape.q_len()];
        let cache = KvCache {
            k: &k[..],
            v: &k[..],
            meta: (kv != KvFormat::Activation).then_some((&meta[..], &meta[..])),
            block_table: Some(&table[..]),
            seq_lens: &lens[..],
        };
        for splits in [1, 3] {
            attn.run_cpu(splits, &q, &cache, &mut out).unwrap();
        }
    }
}
