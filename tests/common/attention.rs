//! Random decode-attention cases and their f64 check, shared by `attention_decode.rs` (the
//! interpreter) and `gpu_attention.rs` (the GPU).

use rand::seq::SliceRandom;
use rand::Rng;
use tilus::element::Activation;
use tilus::kernels::attention::decode::{reference, CacheLayout, DecodeShape};

/// A random case: the inputs as `T` and as the f64 values they round to.
pub struct Case<T> {
    pub shape: DecodeShape,
    pub q: Vec<T>,
    pub k: Vec<T>,
    pub v: Vec<T>,
    pub table: Option<Vec<i32>>,
    pub lens: Vec<i32>,
}

pub fn random<T: Activation>(len: usize, spread: f32) -> Vec<T> {
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

/// Compare `out` with the f64 reference of `case`. The tolerance follows from the kernel's
/// arithmetic: the probabilities are rounded to the activation type (unit roundoff `u`) before
/// P·V, which moves the output by at most `u · max|v|` (values lie in [-1, 1]), and the output
/// is rounded once more; products and sums are f32.
pub fn compare<T: Activation>(
    case: &Case<T>,
    scale: f32,
    window: Option<usize>,
    out: &[T],
    u: f64,
    what: &str,
) {
    let s = &case.shape;
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
            "{what} {s:?} window={window:?}: out[b={}, head={}, {}] = {g}, want {w}",
            i / (s.q_heads * d),
            i / d % s.q_heads,
            i % d
        );
    }
}

pub const U_F16: f64 = 1.0 / 2048.0;
pub const U_BF16: f64 = 1.0 / 256.0;
