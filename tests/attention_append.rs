//! Appending tokens to the KV cache (`tilus::kernels::attention::append`) on the CPU
//! interpreter: the quantized codes and `(scale, zero)` agree bit for bit with the host
//! quantizer (`kv::quantize_head`), a cache of the activation type receives exact copies, slots
//! outside the cache (padding, -1; past the end) write nothing, and every row not appended to
//! keeps its poisoned bytes. The GPU runs the same checks in `gpu_attention.rs`.

mod common;

use common::attention::random_f32;
use half::{bf16, f16};
use tilus::element::Activation;
use tilus::kernels::attention::append::append_kv_cpu;
use tilus::kernels::attention::decode::{CacheLayout, DecodeShape, KvFormat};
use tilus::kernels::attention::kv::quantize_head;
use tilus::DType;

fn shape(kv: KvFormat, head_dim: usize) -> DecodeShape {
    DecodeShape {
        batch: 1,
        q_heads: 2,
        kv_heads: 2,
        head_dim,
        cache: CacheLayout::Paged {
            pages: 2,
            page_size: 16,
            max_pages: 2,
        },
        kv,
    }
}

/// The slots of five tokens: three rows, one padding token, one past the cache.
const SLOTS: [i32; 5] = [5, 31, -1, 0, 32];

fn check<T: Activation>(kv: KvFormat, head_dim: usize) {
    let s = shape(kv, head_dim);
    let row = s.kv_heads * head_dim;
    let tokens = SLOTS.len();
    let (xk, xv) = (random_f32(tokens * row, 3.0), random_f32(tokens * row, 3.0));
    let nk: Vec<T> = xk.iter().map(|&v| T::from_f32(v)).collect();
    let nv: Vec<T> = xv.iter().map(|&v| T::from_f32(v)).collect();
    let bytes = s.cache_bytes(T::DTYPE);
    let (mut k, mut v) = (vec![0xabu8; bytes], vec![0xabu8; bytes]);
    let quantized = matches!(kv, KvFormat::Quantized(_));
    let (mut km, mut vm) = (vec![f32::NAN; s.meta_len()], vec![f32::NAN; s.meta_len()]);
    let meta = quantized.then_some((&mut km[..], &mut vm[..]));
    append_kv_cpu(&s, &nk, &nv, &SLOTS, &mut k, &mut v, meta).unwrap();

    let rows = s.cache_rows();
    let row_bytes = row * kv.bits(T::DTYPE) / 8;
    let head_bytes = head_dim * kv.bits(T::DTYPE) / 8;
    for (cache, meta, new) in [(&k, &km, &nk), (&v, &vm, &nv)] {
        for r in 0..rows {
            let written = SLOTS.iter().position(|&sl| sl == r as i32);
            let got = &cache[r * row_bytes..(r + 1) * row_bytes];
            let Some(t) = written else {
                assert!(
                    got.iter().all(|&b| b == 0xab),
                    "row {r} was not appended to"
                );
                for h in 0..s.kv_heads {
                    assert!(meta[2 * (h * rows + r)].is_nan(), "meta of row {r} written");
                }
                continue;
            };
            for h in 0..s.kv_heads {
                let x = &new[(t * s.kv_heads + h) * head_dim..][..head_dim];
                let got = &got[h * head_bytes..(h + 1) * head_bytes];
                match kv {
                    KvFormat::Activation => assert_eq!(got, &T::to_bytes(x)[..], "row {r}"),
                    KvFormat::Quantized(dtype) => {
                        let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
                        let (codes, scale, zero) = quantize_head(dtype, &xf);
                        let m = 2 * (h * rows + r);
                        assert_eq!(meta[m].to_bits(), scale.to_bits(), "scale of row {r}");
                        assert_eq!(meta[m + 1].to_bits(), zero.to_bits(), "zero of row {r}");
                        assert_eq!(
                            got,
                            &tilus::core::storage::pack(dtype, &codes)[..],
                            "{dtype} codes of row {r} head {h}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn appends_quantize_like_the_host() {
    check::<f16>(KvFormat::Quantized(DType::Int(8)), 128);
    check::<f16>(KvFormat::Quantized(DType::F8E4M3), 64);
    check::<bf16>(KvFormat::Quantized(DType::UInt(4)), 128);
    check::<f16>(KvFormat::Quantized(DType::UInt(4)), 64);
}

#[test]
fn appends_copy_an_activation_cache() {
    check::<f16>(KvFormat::Activation, 64);
    check::<bf16>(KvFormat::Activation, 128);
}

#[test]
fn append_arguments_are_checked() {
    let s = shape(KvFormat::Quantized(DType::Int(8)), 64);
    let nk = vec![f16::ONE; 2 * 64];
    let mut c = vec![0u8; s.cache_bytes(DType::F16)];
    let mut c2 = c.clone();
    let e = append_kv_cpu(&s, &nk, &nk, &[0, 1], &mut c, &mut c2, None).unwrap_err();
    assert!(e.to_string().contains("new_k"), "{e}");
    let nk = vec![f16::ONE; 2 * 2 * 64];
    let e = append_kv_cpu(&s, &nk, &nk, &[0, 1], &mut c, &mut c2, None).unwrap_err();
    assert!(e.to_string().contains("meta"), "{e}");
    let (mut km, mut vm) = (vec![0.0f32; 3], vec![0.0f32; 3]);
    let e = append_kv_cpu(
        &s,
        &nk,
        &nk,
        &[0, 1],
        &mut c,
        &mut c2,
        Some((&mut km, &mut vm)),
    )
    .unwrap_err();
    assert!(e.to_string().contains("k_meta"), "{e}");
}
