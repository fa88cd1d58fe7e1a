//! Random decode-attention cases and their f64 check, shared by `attention_decode.rs` (the
//! interpreter) and `gpu_attention.rs` (the GPU).

use rand::seq::SliceRandom;
use rand::Rng;
use tilus::element::Activation;
use tilus::kernels::attention::decode::{reference, CacheLayout, DecodeShape, KvFormat};
use tilus::kernels::attention::kv::quantize_cache;

/// A random case: queries, the caches as bytes (the activation type, or packed codes with their
/// scales), and the values the caches stand for (what the reference computes with).
pub struct Case<T> {
    pub shape: DecodeShape,
    pub q: Vec<T>,
    pub k: Vec<u8>,
    pub v: Vec<u8>,
    pub meta: Option<(Vec<f32>, Vec<f32>)>,
    pub k_vals: Vec<f64>,
    pub v_vals: Vec<f64>,
    pub table: Option<Vec<i32>>,
    pub lens: Vec<i32>,
}

pub fn random_f32(len: usize, spread: f32) -> Vec<f32> {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| rng.random_range(-spread..spread))
        .collect()
}

/// The cache rows no sequence uses.
fn unused_rows(shape: &DecodeShape, table: Option<&[i32]>, lens: &[i32]) -> Vec<usize> {
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
    (0..used.len()).filter(|&r| !used[r]).collect()
}

/// A cache of `shape.kv` holding `x` (`[rows, kv_heads, head_dim]`), with the rows no sequence
/// uses poisoned: NaN values (activation type) or NaN scales (quantized), so a kernel that lets
/// unwritten slots into its sums fails. Returns the bytes, the scales and the values.
fn cache<T: Activation>(
    shape: &DecodeShape,
    x: &[f32],
    unused: &[usize],
) -> (Vec<u8>, Option<Vec<f32>>, Vec<f64>) {
    let row = shape.kv_heads * shape.head_dim;
    match shape.kv {
        KvFormat::Activation => {
            let mut t: Vec<T> = x.iter().map(|&v| T::from_f32(v)).collect();
            for &r in unused {
                t[r * row..(r + 1) * row].fill(T::from_f32(f32::NAN));
            }
            let vals = t.iter().map(|v| v.to_f32() as f64).collect();
            (T::to_bytes(&t), None, vals)
        }
        KvFormat::Quantized(dtype) => {
            let mut q = quantize_cache(dtype, shape.kv_heads, shape.head_dim, x);
            let vals = q.values(dtype, shape.kv_heads, shape.head_dim);
            let rows = shape.cache_rows();
            for &r in unused {
                for h in 0..shape.kv_heads {
                    q.meta[2 * (h * rows + r)] = f32::NAN;
                }
            }
            (q.codes, Some(q.meta), vals)
        }
    }
}

pub fn make<T: Activation>(shape: DecodeShape, lens: &[i32]) -> Case<T> {
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
    let unused = unused_rows(&shape, table.as_deref(), lens);
    let (k, km, k_vals) = cache::<T>(&shape, &random_f32(shape.cache_len(), 1.0), &unused);
    let (v, vm, v_vals) = cache::<T>(&shape, &random_f32(shape.cache_len(), 1.0), &unused);
    let q = random_f32(shape.q_len(), 1.0)
        .iter()
        .map(|&x| T::from_f32(x))
        .collect();
    Case {
        q,
        k,
        v,
        meta: km.zip(vm),
        k_vals,
        v_vals,
        table,
        lens: lens.to_vec(),
        shape,
    }
}

/// Compare `out` with the f64 reference of `case`. The tolerance follows from the kernel's
/// arithmetic: the probabilities are rounded to the activation type (unit roundoff `u`) before
/// P·V, which moves the output by at most `u · max|v|` (values lie in [-1, 1]), and the output
/// is rounded once more; a quantized cache's values are rounded to the activation type when
/// they are dequantized (`u` relative on K, moving the scores by `u · Σ|q k|`, and on V);
/// products and sums are f32.
pub fn compare<T: Activation>(
    case: &Case<T>,
    scale: f32,
    window: Option<usize>,
    out: &[T],
    u: f64,
    what: &str,
) {
    let s = &case.shape;
    let q: Vec<f64> = case.q.iter().map(|v| v.to_f32() as f64).collect();
    let want = reference(
        s,
        scale as f64,
        window,
        &q,
        &case.k_vals,
        &case.v_vals,
        case.table.as_deref(),
        &case.lens,
    );
    let quantized = s.kv != KvFormat::Activation;
    // |score error| <= u · scale · Σ|q||k| <= u · scale · head_dim; exp moves by that factor.
    let score = if quantized {
        u * scale as f64 * s.head_dim as f64
    } else {
        0.0
    };
    let tol = (2.5 + if quantized { 1.0 } else { 0.0 }) * u + 2.0 * score + 1e-4;
    for (i, (g, w)) in out.iter().zip(&want).enumerate() {
        let g = g.to_f32() as f64;
        let d = s.head_dim;
        assert!(
            (g - w).abs() <= tol,
            "{what} {s:?} window={window:?}: out[b={}, head={}, {}] = {g}, want {w} (tolerance {tol})",
            i / (s.q_heads * d),
            i / d % s.q_heads,
            i % d
        );
    }
}

pub const U_F16: f64 = 1.0 / 2048.0;
pub const U_BF16: f64 = 1.0 / 256.0;
