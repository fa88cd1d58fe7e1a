//! Codebooks by k-means (GPTVQ/CQ-style), deterministic for a seed on any number of cores.
//!
//! **Init**: `entries` distinct training vectors picked by a seeded partial Fisher-Yates shuffle
//! (k-means++ costs `O(N · entries²)`, too slow at 4096 entries; the Lloyd iterations that
//! follow matter more). With fewer vectors than entries the picks repeat cyclically.
//! **Lloyd**: assign each vector to its nearest entry (squared distance in f32, ties to the
//! lowest index; in parallel, each assignment depends only on its vector), then move each entry
//! to the mean of its vectors (f64 sums, sequential); an entry with no vectors stays put.
//! **Residual VQ**: stage `s + 1` quantizes what stage `s` left, `x - Σ_{t <= s} c_t`, with a
//! codebook of its own. Codebooks are rounded to f16 before the final assignment of each stage,
//! so the codes are nearest for the values the kernels read.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{round_f16, VqConfig, VqError, VqWeight};
use crate::parallel::for_each_chunk_mut;

/// k-means settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KmeansOptions {
    /// Lloyd iterations per codebook.
    pub iters: usize,
    pub seed: u64,
}

impl Default for KmeansOptions {
    fn default() -> Self {
        KmeansOptions { iters: 10, seed: 0 }
    }
}

/// The nearest entry of `codebook` (`[entries, dim]`) for each vector of `data` (`[N, dim]`).
pub fn assign(data: &[f32], dim: usize, codebook: &[f32]) -> Vec<u16> {
    let n = data.len() / dim;
    let mut out = vec![0u16; n];
    for_each_chunk_mut(&mut out, 256, |c, chunk| {
        for (i, a) in chunk.iter_mut().enumerate() {
            let x = &data[(c * 256 + i) * dim..][..dim];
            let mut best = (f32::INFINITY, 0usize);
            for (e, y) in codebook.chunks_exact(dim).enumerate() {
                let d: f32 = x.iter().zip(y).map(|(a, b)| (a - b) * (a - b)).sum();
                if d < best.0 {
                    best = (d, e);
                }
            }
            *a = best.1 as u16;
        }
    });
    out
}

/// The initial codebook: `entries` training vectors chosen by a seeded partial shuffle.
pub fn init(data: &[f32], dim: usize, entries: usize, seed: u64) -> Vec<f32> {
    let n = data.len() / dim;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut idx: Vec<usize> = (0..n).collect();
    let picks = entries.min(n);
    for i in 0..picks {
        let j = rng.random_range(i..n);
        idx.swap(i, j);
    }
    (0..entries)
        .flat_map(|e| data[idx[e % picks] * dim..][..dim].iter().copied())
        .collect()
}

/// Mean squared error of `data` against `codebook` under `codes`.
pub fn mse(data: &[f32], dim: usize, codebook: &[f32], codes: &[u16]) -> f64 {
    let mut s = 0f64;
    for (x, &c) in data.chunks_exact(dim).zip(codes) {
        let y = &codebook[c as usize * dim..][..dim];
        s += x
            .iter()
            .zip(y)
            .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
            .sum::<f64>();
    }
    s / data.len().max(1) as f64
}

/// k-means of `data` (`[N, dim]`, `N >= 1`) into `entries` entries: the codebook
/// `[entries, dim]` and the assignment of each vector (after the last update).
pub fn kmeans(
    data: &[f32],
    dim: usize,
    entries: usize,
    opts: KmeansOptions,
) -> (Vec<f32>, Vec<u16>) {
    let mut book = init(data, dim, entries, opts.seed);
    let mut codes = assign(data, dim, &book);
    for _ in 0..opts.iters {
        let mut sums = vec![0f64; entries * dim];
        let mut counts = vec![0usize; entries];
        for (x, &c) in data.chunks_exact(dim).zip(&codes) {
            counts[c as usize] += 1;
            for (s, v) in sums[c as usize * dim..][..dim].iter_mut().zip(x) {
                *s += *v as f64;
            }
        }
        for e in 0..entries {
            if counts[e] > 0 {
                for d in 0..dim {
                    book[e * dim + d] = (sums[e * dim + d] / counts[e] as f64) as f32;
                }
            }
        }
        codes = assign(data, dim, &book);
    }
    (book, codes)
}

impl VqWeight {
    /// Quantizes `w [n, k]` (row-major f32) to `config` with k-means per codebook group and
    /// residual stage, then reorders the entries by access frequency. With per-channel scales
    /// each row is first divided by its RMS (rounded to f16). Deterministic for `opts.seed`.
    pub fn quantize(
        w: &[f32],
        n: usize,
        k: usize,
        config: VqConfig,
        opts: KmeansOptions,
    ) -> Result<VqWeight, VqError> {
        config.check_shape(n, k)?;
        if w.len() != n * k {
            return Err(super::arg_err(
                "w",
                format!("{} values, expected n·k = {}", w.len(), n * k),
            ));
        }
        if let Some(i) = w.iter().position(|x| !x.is_finite()) {
            return Err(super::arg_err("w", format!("value at {i} is not finite")));
        }
        let (v, entries, res) = (config.vector_size, config.entries(), config.residuals);
        let scales: Option<Vec<f32>> = config.channel_scale.then(|| {
            w.chunks_exact(k)
                .map(|row| {
                    let rms = (row.iter().map(|x| (*x as f64).powi(2)).sum::<f64>() / k as f64)
                        .sqrt() as f32;
                    let s = round_f16(rms);
                    if s > 0.0 && s.is_finite() {
                        s
                    } else {
                        1.0
                    }
                })
                .collect()
        });
        let (rows, cols) = config.tile(n, k);
        let groups = config.groups(n, k);
        let col_tiles = k / cols;
        let vpr = k / v;
        let mut codes = vec![0u16; res * n * vpr];
        let mut books = vec![0f32; groups * res * entries * v];
        for g in 0..groups {
            let (r0, c0) = ((g / col_tiles) * rows, (g % col_tiles) * cols);
            // The group's vectors, row by row, in stage-0 residual form.
            let mut data = Vec::with_capacity(rows * cols);
            for r in r0..r0 + rows {
                let s = scales.as_ref().map_or(1.0, |s| s[r]);
                data.extend(w[r * k + c0..r * k + c0 + cols].iter().map(|x| x / s));
            }
            for s in 0..res {
                let seed = opts
                    .seed
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .wrapping_add((g * res + s) as u64);
                let (mut book, _) = kmeans(&data, v, entries, KmeansOptions { seed, ..opts });
                book.iter_mut().for_each(|x| *x = round_f16(*x));
                let a = assign(&data, v, &book);
                for (i, (x, &c)) in data.chunks_exact_mut(v).zip(&a).enumerate() {
                    for (xv, bv) in x.iter_mut().zip(&book[c as usize * v..][..v]) {
                        *xv -= bv;
                    }
                    let (r, j) = (r0 + i / (cols / v), c0 / v + i % (cols / v));
                    codes[(s * n + r) * vpr + j] = c;
                }
                books[(g * res + s) * entries * v..][..entries * v].copy_from_slice(&book);
            }
        }
        let mut q = VqWeight::from_parts(config, n, k, codes, books, scales)?;
        q.reorder_by_frequency();
        Ok(q)
    }
}
