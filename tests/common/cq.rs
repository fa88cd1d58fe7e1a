//! CQ (vector-quantized) KV cache cases for `attention_cq.rs` (interpreter) and
//! `gpu_attention_cq.rs`: random codes, codebooks and queries, and the f64 comparison.

use rand::{Rng, SeedableRng};
use tilus::element::Activation;
use tilus::kernels::attention::cq::{reference, CqCodebooks, CqFormat, CqShape};

/// A random case: codes, codebooks, queries and lengths.
pub struct Case<T> {
    pub shape: CqShape,
    pub books: CqCodebooks,
    pub q: Vec<T>,
    pub k: Vec<u8>,
    pub v: Vec<u8>,
    pub lens: Vec<i32>,
}

pub fn make<T: Activation>(shape: CqShape, format: CqFormat, lens: Vec<i32>, seed: u64) -> Case<T> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let books = CqCodebooks::random(format, shape.kv_heads, shape.head_dim, seed).unwrap();
    let q = (0..shape.q_len())
        .map(|_| T::from_f32(rng.random_range(-1.0f32..1.0)))
        .collect();
    let mut codes = || -> Vec<u8> {
        (0..shape.code_bytes(format))
            .map(|_| rng.random::<u8>())
            .collect()
    };
    let (k, v) = (codes(), codes());
    Case {
        shape,
        books,
        q,
        k,
        v,
        lens,
    }
}

/// The scale the CQ tests use: a peaked softmax (score spread ~3), so outputs are a few
/// tokens' values, not averages near 0.
pub fn scale(head_dim: usize) -> f32 {
    8.0 / (head_dim as f32).sqrt()
}

/// `out` against the f64 reference of `case` (each codebook entry as `T`), within the rounding
/// of the probabilities and the output to `T` (unit roundoff `u`).
pub fn compare<T: Activation>(case: &Case<T>, out: &[T], u: f64, what: &str) {
    let s = &case.shape;
    let q: Vec<f64> = case.q.iter().map(|v| v.to_f32() as f64).collect();
    let sc = scale(s.head_dim) as f64;
    let want = reference::<T>(s, &case.books, sc, &q, &case.k, &case.v, &case.lens);
    let tol = 3.0 * u + 1e-4;
    for (i, (g, w)) in out.iter().zip(&want).enumerate() {
        let g = g.to_f32() as f64;
        let d = s.head_dim;
        assert!(
            (g - w).abs() <= tol,
            "{} {what} {s:?} lens {:?}: out[b={}, head={}, {}] = {g}, want {w}",
            case.books.format.name(),
            case.lens,
            i / (s.q_heads * d),
            i / d % s.q_heads,
            i % d
        );
    }
}

pub const U_F16: f64 = 1.0 / 2048.0;
pub const U_BF16: f64 = 1.0 / 256.0;

/// After an append of `new_k` (or `new_v`, `which`) `[tokens, kv_heads, head_dim]` to rows
/// `slots`: every written code is a nearest entry (in f64, the entries as `T`, up to f32
/// rounding of the distances), and every row not appended to still holds `before`.
pub fn check_append<T: Activation>(
    books: &CqCodebooks,
    which: tilus::kernels::attention::cq::Kv,
    new: &[T],
    slots: &[i32],
    before: &[u8],
    after: &[u8],
) {
    let (d, vs, heads) = (books.head_dim, books.format.vector, books.kv_heads);
    let nj = books.format.codes(d);
    let row = heads * nj;
    let rows = before.len() / row;
    let mut written = vec![false; rows];
    for (t, &slot) in slots.iter().enumerate() {
        if slot < 0 || slot as usize >= rows {
            continue;
        }
        written[slot as usize] = true;
        for h in 0..heads {
            for j in 0..nj {
                let x: Vec<f64> = new[(t * heads + h) * d + j * vs..][..vs]
                    .iter()
                    .map(|v| v.to_f32() as f64)
                    .collect();
                // The codebook of (h, j) as T, through `decode` of every entry.
                let dist = |c: u8| -> f64 {
                    let mut codes = vec![0u8; row];
                    codes[h * nj + j] = c;
                    let vals = books.decode::<T>(which, &codes);
                    let e = &vals[h * d + j * vs..][..vs];
                    x.iter().zip(e).map(|(a, b)| (a - b) * (a - b)).sum()
                };
                let got = after[slot as usize * row + h * nj + j];
                let best = (0..=255u8).map(dist).fold(f64::INFINITY, f64::min);
                let mine = dist(got);
                assert!(
                    mine <= best * (1.0 + 1e-5) + 1e-12,
                    "token {t} head {h} vector {j}: code {got} at {mine}, nearest at {best}"
                );
            }
        }
    }
    for r in (0..rows).filter(|&r| !written[r]) {
        assert_eq!(
            &after[r * row..][..row],
            &before[r * row..][..row],
            "row {r} was not appended to"
        );
    }
}
