//! Decode attention (`tilus::kernels::attention::decode`) on the CPU interpreter against an f64
//! reference: fresh random inputs, outputs poisoned before each run, ragged sequence lengths
//! (1 token, a partial tile, several tiles), contiguous and paged caches with a scrambled block
//! table, unwritten cache slots holding NaN (they must not leak into the output), split-KV with
//! its combine step, sliding windows, GQA ratios 1 to 8, f16 and bf16, head dims 64 and 128.
//! The GPU runs the same kernels in `gpu_attention.rs`.

use half::{bf16, f16};
use rand::seq::SliceRandom;
use rand::Rng;
use tilus::element::Activation;
use tilus::kernels::attention::decode::{reference, CacheLayout, DecodeAttention, DecodeShape};

/// A random case: the inputs as `T` and as the f64 values they round to.
struct Case<T> {
    shape: DecodeShape,
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
    table: Option<Vec<i32>>,
    lens: Vec<i32>,
}

fn random<T: Activation>(len: usize, spread: f32) -> Vec<T> {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| T::from_f32(rng.random_range(-spread..spread)))
        .collect()
}

/// Fill the cache rows no sequence uses with NaN: a kernel that lets unwritten slots into its
/// sums fails.
fn poison_unused<T: Activation>(
    shape: &DecodeShape,
    table: Option<&[i32]>,
    lens: &[i32],
    cache: &mut [T],
) {
    let row = shape.kv_heads * shape.head_dim;
    let mut used = vec![false; shape.cache_rows()];
    for (b, &len) in lens.iter().enumerate() {
        for t in 0..len.max(0) as usize {
            let r = match shape.cache {
                CacheLayout::Contiguous { max_len } => b * max_len + t,
                CacheLayout::Paged {
                    page_size,
                    max_pages,
                    ..
                } => {
                    table.unwrap()[b * max_pages + t / page_size] as usize * page_size
                        + t % page_size
                }
            };
            used[r] = true;
        }
    }
    for (r, u) in used.iter().enumerate() {
        if !u {
            cache[r * row..(r + 1) * row].fill(T::from_f32(f32::NAN));
        }
    }
}

fn make<T: Activation>(shape: DecodeShape, lens: &[i32]) -> Case<T> {
    let table = match shape.cache {
        CacheLayout::Paged {
            pages, max_pages, ..
        } => {
            // Every page used at most once, in a scrambled order.
            let mut ids: Vec<i32> = (0..pages as i32).collect();
            ids.shuffle(&mut rand::rng());
            let need = shape.batch * max_pages;
            assert!(need <= pages, "the test cache is large enough");
            Some(ids[..need].to_vec())
        }
        CacheLayout::Contiguous { .. } => None,
    };
    let mut k = random::<T>(shape.cache_len(), 1.0);
    let mut v = random::<T>(shape.cache_len(), 1.0);
    poison_unused(&shape, table.as_deref(), lens, &mut k);
    poison_unused(&shape, table.as_deref(), lens, &mut v);
    Case {
        q: random::<T>(shape.q_len(), 1.0),
        k,
        v,
        table,
        lens: lens.to_vec(),
        shape,
    }
}

/// Run `case` with `splits` splits and compare with the f64 reference. The tolerance follows
/// from the kernel's arithmetic: the probabilities are rounded to the activation type (unit
/// roundoff `u`) before P·V, which moves the output by at most `u · max|v|`, and the output is
/// rounded once more; products and sums are f32.
fn check<T: Activation>(case: &Case<T>, scale: f32, window: Option<usize>, splits: usize, u: f64) {
    let s = &case.shape;
    let attn = DecodeAttention::new(s.clone(), scale, window, 1 << 20).unwrap();
    let mut out = vec![T::from_f32(f32::NAN); s.q_len()];
    attn.run_cpu(
        splits,
        &case.q,
        &case.k,
        &case.v,
        case.table.as_deref(),
        &case.lens,
        &mut out,
    )
    .unwrap();
    let f = |x: &[T]| -> Vec<f64> { x.iter().map(|v| v.to_f32() as f64).collect() };
    let want = reference(
        s,
        scale as f64,
        window,
        &f(&case.q),
        &f(&case.k),
        &f(&case.v),
        case.table.as_deref(),
        &case.lens,
    );
    let tol = 2.5 * u + 1e-4;
    for (i, (g, w)) in out.iter().zip(&want).enumerate() {
        let g = g.to_f32() as f64;
        let d = s.head_dim;
        assert!(
            (g - w).abs() <= tol,
            "{s:?} splits={splits} window={window:?}: out[b={}, head={}, {}] = {g}, want {w}",
            i / (s.q_heads * d),
            i / d % s.q_heads,
            i % d
        );
    }
}

const U_F16: f64 = 1.0 / 2048.0;
const U_BF16: f64 = 1.0 / 256.0;

#[test]
fn contiguous_cache_with_and_without_splits() {
    let shape = DecodeShape {
        batch: 3,
        q_heads: 8,
        kv_heads: 2,
        head_dim: 64,
        cache: CacheLayout::Contiguous { max_len: 80 },
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
    let e = attn
        .run_cpu(1, &q[1..], &kv, &kv, None, &[4], &mut out)
        .unwrap_err();
    assert!(e.to_string().contains("q:"), "{e}");
    let e = attn
        .run_cpu(1, &q, &kv, &kv[2..], None, &[4], &mut out)
        .unwrap_err();
    assert!(e.to_string().contains("v_cache"), "{e}");
    let e = attn
        .run_cpu(1, &q, &kv, &kv, Some(&[0]), &[4], &mut out)
        .unwrap_err();
    assert!(e.to_string().contains("block_table"), "{e}");
    let e = attn
        .run_cpu(1, &q, &kv, &kv, None, &[], &mut out)
        .unwrap_err();
    assert!(e.to_string().contains("seq_lens"), "{e}");
}
