//! Decode attention over a CQ (vector-quantized) KV cache on the CPU interpreter against an f64
//! reference of the values the codes stand for: fresh random codes, codebooks and queries,
//! outputs poisoned before each run, ragged sequence lengths (0, 1 token, a partial tile,
//! several tiles, a length past the cache's rows), split-KV with its combine step, CQ-2 and
//! CQ-4, one codebook per head or per channel group, f16 and bf16. The GPU runs the same
//! kernels in `gpu_attention_cq.rs`.

mod common;

use common::cq::{compare, make, scale, Case, U_BF16, U_F16};
use half::{bf16, f16};
use rand::{Rng, SeedableRng};
use tilus::element::Activation;
use tilus::kernels::attention::cq::{
    CqCodebooks, CqDecodeAttention, CqFormat, CqShape, CqTuning, Kv,
};
use tilus::vq::kmeans::KmeansOptions;

fn check<T: Activation>(case: &Case<T>, (tile, replicas): (usize, usize), splits: usize, u: f64) {
    let s = &case.shape;
    let attn = CqDecodeAttention::new(*s, case.books.format, scale(s.head_dim), s.max_len)
        .unwrap()
        .with_tuning(CqTuning {
            tile,
            replicas,
            blocks_per_sm: if replicas == 8 { 3 } else { 1 },
        })
        .unwrap();
    let (kb, vb) = (
        case.books.to_activation::<T>(Kv::K),
        case.books.to_activation::<T>(Kv::V),
    );
    let mut out = vec![T::from_f32(f32::NAN); s.q_len()];
    attn.run_cpu(
        splits, &case.q, &case.k, &case.v, &kb, &vb, &case.lens, &mut out,
    )
    .unwrap();
    compare(
        case,
        &out,
        u,
        &format!("tile={tile} replicas={replicas} splits={splits}"),
    );
}

#[test]
fn cq2_and_cq4_with_and_without_splits() {
    let shape = CqShape {
        batch: 3,
        q_heads: 16,
        kv_heads: 2,
        head_dim: 128,
        max_len: 300,
    };
    for (i, format) in [CqFormat::CQ2, CqFormat::CQ4].into_iter().enumerate() {
        // Lengths: several block tiles, a partial tile, one token.
        let case = make::<f16>(shape, format, vec![300, 77, 1], 11 + i as u64);
        for (splits, replicas) in [(1, 16), (3, 8), (10, 16)] {
            check(&case, (16, replicas), splits, U_F16);
        }
    }
}

#[test]
fn per_group_codebooks_bf16_and_wide_tiles() {
    let shape = CqShape {
        batch: 2,
        q_heads: 4,
        kv_heads: 1,
        head_dim: 128,
        max_len: 200,
    };
    let format = CqFormat {
        vector: 4,
        per_group: true,
    };
    // A length of 0 gives zeros; one past the cache is clamped to it.
    let case = make::<bf16>(shape, format, vec![0, 500], 5);
    check(&case, (32, 16), 2, U_BF16);
    let case = make::<f16>(shape, CqFormat::by_name("cq4g").unwrap(), vec![133, 64], 6);
    check(&case, (16, 8), 1, U_F16);
    // 12 query heads per KV head: two n-tiles of query heads, the second partly masked.
    let wide = CqShape {
        q_heads: 12,
        ..shape
    };
    let case = make::<f16>(wide, CqFormat::CQ2, vec![150, 1], 8);
    check(&case, (32, 8), 2, U_F16);
}

#[test]
fn trained_codebooks_encode_to_their_nearest_entries() {
    let (kv_heads, d) = (2, 128);
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let x: Vec<f32> = (0..600 * kv_heads * d)
        .map(|_| rng.random_range(-2.0f32..2.0))
        .collect();
    let opts = KmeansOptions { iters: 3, seed: 9 };
    let books = CqCodebooks::train(CqFormat::CQ2, kv_heads, d, &x, &x, opts).unwrap();
    let again = CqCodebooks::train(CqFormat::CQ2, kv_heads, d, &x, &x, opts).unwrap();
    assert_eq!(books, again, "k-means is deterministic for a seed");
    let codes = books.encode(Kv::K, &x).unwrap();
    let back = books.decode::<f16>(Kv::K, &codes);
    // Each decoded vector is at least as close as any other entry of its codebook.
    for (t, (xv, bv)) in x
        .chunks_exact(4)
        .zip(back.chunks_exact(4))
        .enumerate()
        .step_by(97)
    {
        let dist = |e: &[f32]| -> f64 {
            xv.iter()
                .zip(e)
                .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
                .sum()
        };
        let got: f64 = xv
            .iter()
            .zip(bv)
            .map(|(a, b)| (*a as f64 - b).powi(2))
            .sum();
        let h = t / (d / 4) % kv_heads;
        let best = books.k[h * 256 * 4..][..256 * 4]
            .chunks_exact(4)
            .map(dist)
            .fold(f64::INFINITY, f64::min);
        assert!(got <= best + 1e-9, "vector {t}: {got} > nearest {best}");
    }
    // Quantizing moves the values less than the data's own spread.
    let err: f64 = x
        .iter()
        .zip(&back)
        .map(|(a, b)| (*a as f64 - b).powi(2))
        .sum::<f64>()
        / x.len() as f64;
    assert!(err < 0.5, "mean squared error {err}");
}

#[test]
fn bad_arguments_are_named() {
    let shape = CqShape {
        batch: 1,
        q_heads: 8,
        kv_heads: 1,
        head_dim: 64,
        max_len: 16,
    };
    let e = CqDecodeAttention::new(shape, CqFormat::CQ2, 0.1, 16)
        .err()
        .unwrap();
    assert!(e.to_string().contains("head_dim"), "{e}");
    let shape = CqShape {
        head_dim: 128,
        ..shape
    };
    let attn = CqDecodeAttention::new(shape, CqFormat::CQ2, 0.1, 16).unwrap();
    let q = vec![f16::ZERO; shape.q_len()];
    let codes = vec![0u8; shape.code_bytes(CqFormat::CQ2)];
    let books = vec![f16::ZERO; shape.book_len(CqFormat::CQ2)];
    let mut out = vec![f16::ZERO; shape.q_len()];
    let e = attn
        .run_cpu(1, &q, &codes[1..], &codes, &books, &books, &[4], &mut out)
        .unwrap_err();
    assert!(e.to_string().contains("k_codes"), "{e}");
    let e = attn
        .run_cpu(1, &q, &codes, &codes, &books, &books, &[4, 4], &mut out)
        .unwrap_err();
    assert!(e.to_string().contains("seq_lens"), "{e}");
}

/// The GPU-side encoder (`cq_append`) on the interpreter: each written code is a nearest entry,
/// rows not appended to (and slots out of range, -1 and past the cache) are left alone; f16 and
/// bf16, one codebook per head and per channel group.
#[test]
fn append_encodes_nearest_entries_into_the_slots() {
    use common::cq::check_append;
    let shape = CqShape {
        batch: 2,
        q_heads: 8,
        kv_heads: 2,
        head_dim: 128,
        max_len: 8,
    };
    let slots = [3, -1, 12, 16, 0];
    fn run<T: Activation>(shape: CqShape, format: CqFormat, slots: &[i32], seed: u64) {
        let case = make::<T>(shape, format, vec![8, 8], seed);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let per = shape.kv_heads * shape.head_dim;
        let gen = |rng: &mut rand::rngs::StdRng| -> Vec<T> {
            (0..slots.len() * per)
                .map(|_| T::from_f32(rng.random_range(-1.0f32..1.0)))
                .collect()
        };
        let (nk, nv) = (gen(&mut rng), gen(&mut rng));
        let attn = CqDecodeAttention::new(shape, format, 0.1, shape.max_len).unwrap();
        let (kb, vb) = (
            case.books.to_activation::<T>(Kv::K),
            case.books.to_activation::<T>(Kv::V),
        );
        let (mut k, mut v) = (case.k.clone(), case.v.clone());
        attn.append_cpu(&nk, &nv, slots, &kb, &vb, &mut k, &mut v)
            .unwrap();
        check_append(&case.books, Kv::K, &nk, slots, &case.k, &k);
        check_append(&case.books, Kv::V, &nv, slots, &case.v, &v);
        assert_ne!(k, case.k, "{}: nothing written", format.name());
    }
    run::<f16>(shape, CqFormat::CQ2, &slots, 1);
    run::<bf16>(shape, CqFormat::by_name("cq4g").unwrap(), &slots, 2);
    run::<f16>(shape, CqFormat::by_name("cq2g").unwrap(), &slots, 3);
}
