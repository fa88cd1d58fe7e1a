use super::aqlm::from_aqlm;
use super::kmeans::{assign, init, kmeans, mse, KmeansOptions};
use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn random(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// A small GPTVQ-like format: 16 entries, tiles of 8 x 16.
fn small(residuals: usize, scale: bool) -> VqConfig {
    VqConfig {
        name: "small",
        vector_size: 4,
        log2_entries: 4,
        residuals,
        scope: CodebookScope::Tile { rows: 8, cols: 16 },
        channel_scale: scale,
        e8p: false,
    }
}

/// The reconstruction computed independently, in f64.
fn reference(q: &VqWeight) -> Vec<f64> {
    let v = q.config.vector_size;
    let e = q.config.entries();
    let res = q.config.residuals;
    let (rows, cols) = q.config.tile(q.n, q.k);
    let mut out = vec![0f64; q.n * q.k];
    for r in 0..q.n {
        for c in 0..q.k {
            let g = (r / rows) * (q.k / cols) + c / cols;
            let mut acc = 0f64;
            for s in 0..res {
                let code = q.codes[(s * q.n + r) * (q.k / v) + c / v] as usize;
                acc += q.codebooks[((g * res + s) * e + code) * v + c % v] as f64;
            }
            out[r * q.k + c] = acc * q.scales.as_ref().map_or(1.0, |s| s[r] as f64);
        }
    }
    out
}

#[test]
fn named_configs() {
    assert_eq!(VqConfig::by_name("GPTVQ-2"), Some(VqConfig::GPTVQ_2));
    assert_eq!(VqConfig::by_name("aqlm_3"), Some(VqConfig::AQLM_3));
    assert_eq!(VqConfig::by_name("QuiP#-4"), None);
    assert_eq!(VqConfig::by_name("quip-4"), Some(VqConfig::QUIP_4));
    let bits: Vec<f64> = VqConfig::ALL.iter().map(|c| c.bits_per_value()).collect();
    assert_eq!(bits, vec![2.0, 2.0, 3.0, 4.0, 2.0, 4.0]);
    assert_eq!(VqConfig::by_name("AQLM-2x8"), Some(VqConfig::AQLM_2X8));
    assert_eq!(VqConfig::GPTVQ_2.groups(512, 1024), 2 * 4);
    assert_eq!(VqConfig::CQ_2.groups(100, 128), 32);
}

#[test]
fn kmeans_reduces_error_vs_initial_codebook() {
    let data = random(4 * 2000, 1);
    let opts = KmeansOptions { iters: 8, seed: 3 };
    let book0 = init(&data, 4, 64, opts.seed);
    let e0 = mse(&data, 4, &book0, &assign(&data, 4, &book0));
    let (book, codes) = kmeans(&data, 4, 64, opts);
    let e1 = mse(&data, 4, &book, &codes);
    assert!(e1 < 0.85 * e0, "k-means error {e1} vs initial {e0}");
    // The returned codes are the nearest entries of the returned codebook.
    assert_eq!(codes, assign(&data, 4, &book));
}

#[test]
fn quantize_is_deterministic_per_seed() {
    let w = random(16 * 32, 5);
    let a = VqWeight::quantize(
        &w,
        16,
        32,
        small(2, false),
        KmeansOptions { iters: 4, seed: 9 },
    )
    .unwrap();
    let b = VqWeight::quantize(
        &w,
        16,
        32,
        small(2, false),
        KmeansOptions { iters: 4, seed: 9 },
    )
    .unwrap();
    assert_eq!(a, b);
    let c = VqWeight::quantize(
        &w,
        16,
        32,
        small(2, false),
        KmeansOptions { iters: 4, seed: 10 },
    )
    .unwrap();
    assert_ne!(a.codebooks, c.codebooks);
}

#[test]
fn dequantize_matches_f64_reconstruction_and_residuals_help() {
    let (n, k) = (16, 64);
    let w = random(n * k, 7);
    let mut errs = vec![];
    for (res, scale) in [(1, false), (2, false), (2, true)] {
        let q = VqWeight::quantize(&w, n, k, small(res, scale), KmeansOptions::default()).unwrap();
        let d = q.dequantize();
        let r = reference(&q);
        for (i, (a, b)) in d.iter().zip(&r).enumerate() {
            assert!(
                (*a as f64 - b).abs() <= 1e-6 * (1.0 + b.abs()),
                "res {res} scale {scale} at {i}: {a} vs {b}"
            );
        }
        // Codebook values are f16-representable.
        assert!(q.codebooks.iter().all(|x| round_f16(*x) == *x));
        let err: f64 = w
            .iter()
            .zip(&d)
            .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
            .sum::<f64>()
            / w.len() as f64;
        errs.push(err);
    }
    // Uniform(-1, 1) has variance 1/3; 16 entries for 4 values cut it, a residual stage more.
    assert!(errs[0] < 0.2, "{errs:?}");
    assert!(errs[1] < 0.8 * errs[0], "{errs:?}");
}

#[test]
fn reorder_preserves_values_exactly_and_sorts_by_use() {
    let (n, k) = (16, 32);
    let w = random(n * k, 11);
    let mut q = VqWeight::quantize(
        &w,
        n,
        k,
        small(2, true),
        KmeansOptions { iters: 3, seed: 1 },
    )
    .unwrap();
    // Scramble the order (reverse each codebook), then reorder again.
    let (e, v, res) = (16, 4, 2);
    let groups = q.config.groups(n, k);
    let before = q.dequantize();
    let mut books = q.codebooks.clone();
    for gs in 0..groups * res {
        for i in 0..e {
            let src = (gs * e + i) * v;
            let dst = (gs * e + (e - 1 - i)) * v;
            books[dst..dst + v].copy_from_slice(&q.codebooks[src..src + v]);
        }
    }
    q.codebooks = books;
    q.codes.iter_mut().for_each(|c| *c = 15 - *c);
    assert_eq!(before, q.dequantize());
    q.reorder_by_frequency();
    let after = q.dequantize();
    assert!(
        before
            .iter()
            .zip(&after)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "reorder changed the weight"
    );
    // Counts per (group, stage) are non-increasing in the new order.
    for s in 0..res {
        for g in 0..groups {
            let mut counts = [0usize; 16];
            for r in 0..n {
                for j in 0..k / v {
                    if q.group_of(r, j) == g {
                        counts[q.code(s, r, j)] += 1;
                    }
                }
            }
            assert!(counts.windows(2).all(|p| p[0] >= p[1]), "{counts:?}");
        }
    }
}

#[test]
fn aqlm_layout_converts() {
    // out 3, in 4, in_group_size 2, two codebooks of 4 entries.
    let (n, in_groups, ncb, entries, gi) = (3usize, 2usize, 2usize, 4usize, 2usize);
    let mut rng = StdRng::seed_from_u64(21);
    let codes: Vec<i64> = (0..n * in_groups * ncb)
        .map(|_| rng.random_range(0..entries as i64))
        .collect();
    let books: Vec<f32> = (0..ncb * entries * gi)
        .map(|_| round_f16(rng.random_range(-1.0f32..1.0)))
        .collect();
    let scales: Vec<f32> = (0..n)
        .map(|_| round_f16(rng.random_range(0.5f32..2.0)))
        .collect();
    let q = from_aqlm(
        &codes,
        [n, in_groups, ncb],
        &books,
        [ncb, entries, 1, gi],
        &scales,
        [n, 1, 1, 1],
    )
    .unwrap();
    assert_eq!(
        (q.n, q.k, q.config.vector_size, q.config.residuals),
        (3, 4, 2, 2)
    );
    let d = q.dequantize();
    for o in 0..n {
        for i in 0..in_groups {
            for b in 0..gi {
                let mut want = 0f32;
                for c in 0..ncb {
                    let code = codes[(o * in_groups + i) * ncb + c] as usize;
                    want += books[(c * entries + code) * gi + b];
                }
                assert_eq!(d[o * 4 + i * gi + b], want * scales[o], "o {o} i {i} b {b}");
            }
        }
    }
    // int16 storage of a code above 2^15 reads negative; it is taken modulo the entries.
    let big_books = vec![0.5f32; 65536 * 2];
    let q16 = from_aqlm(
        &[-1, 1],
        [1, 2, 1],
        &big_books,
        [1, 65536, 1, 2],
        &[1.0],
        [1, 1, 1, 1],
    )
    .unwrap();
    assert_eq!(q16.codes, vec![65535, 1]);
}

#[test]
fn errors_name_the_argument() {
    let w = random(16 * 30, 1);
    let e = VqWeight::quantize(&w, 16, 30, small(1, false), KmeansOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("vector_size 4 does not divide k"), "{e}");
    let bad = VqConfig {
        log2_entries: 17,
        ..small(1, false)
    };
    let e = bad.check_shape(16, 32).unwrap_err().to_string();
    assert!(e.contains("log2_entries 17"), "{e}");
    let e = VqWeight::quantize(&w[..10], 16, 32, small(1, false), KmeansOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("`w`"), "{e}");
    let e = from_aqlm(
        &[0; 3],
        [1, 2, 2],
        &[0.0; 8],
        [2, 2, 1, 2],
        &[1.0],
        [1, 1, 1, 1],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("`codes`"), "{e}");
    let e = from_aqlm(
        &[0; 4],
        [1, 2, 2],
        &[0.0; 12],
        [2, 3, 1, 2],
        &[1.0],
        [1, 1, 1, 1],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("`codebooks_shape`") && e.contains("power of two"),
        "{e}"
    );
    let e = from_aqlm(
        &[0; 4],
        [1, 2, 2],
        &[0.0; 8],
        [2, 2, 1, 2],
        &[1.0, 2.0],
        [2, 1, 1, 1],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("`scales`"), "{e}");
    let e = VqWeight::from_parts(small(1, false), 8, 16, vec![16; 32], vec![0.0; 64], None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`codes`") && e.contains("not below"), "{e}");
    // Two residual codebooks whose largest entries add up past f16 (the kernels add residuals
    // in f16, whose sums overflow to infinity): an error; each alone is fine.
    let mut books = vec![0.5f32; 2 * 16 * 4];
    books[3] = 40000.0;
    let ok = VqWeight::from_parts(small(2, false), 8, 16, vec![1; 64], books.clone(), None);
    assert!(ok.is_ok(), "{ok:?}");
    books[16 * 4 + 9] = -30000.0;
    let e = VqWeight::from_parts(small(2, false), 8, 16, vec![1; 64], books, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`codebooks`") && e.contains("65504"), "{e}");
}

/// The E8P codebook: 256 distinct absolute vectors (227 of squared norm <= 10, 29 of 12), and
/// 2^16 distinct first-stage points, each a point of the lattice `D8 + 1/2` (half-integer
/// coordinates with an even sum) shifted by `±1/4`, as QuIP# defines it.
#[test]
fn e8p_points_lie_in_the_shifted_lattice() {
    let grid = e8p::abs_grid();
    assert_eq!(grid.len(), 256);
    let norms: Vec<f32> = grid.iter().map(|v| v.iter().map(|x| x * x).sum()).collect();
    assert!(norms[..227].iter().all(|&n| n <= 10.0));
    assert!(norms[227..].iter().all(|&n| n == 12.0));
    let abs: std::collections::HashSet<[u32; 8]> =
        grid.iter().map(|v| v.map(|x| x.abs().to_bits())).collect();
    assert_eq!(abs.len(), 256);
    let mut points = std::collections::HashSet::new();
    for c in 0..=u16::MAX {
        let v = e8p::decode(&grid, c, 0);
        let odd = (c as u8).count_ones() % 2 == 1;
        let shift = if odd { -0.25 } else { 0.25 };
        let twice: Vec<f64> = v.iter().map(|&x| 2.0 * (x as f64 - shift)).collect();
        assert!(
            twice
                .iter()
                .all(|t| t.fract() == 0.0 && t.rem_euclid(2.0) == 1.0),
            "code {c:#06x}: {v:?} is not half-integer after the shift"
        );
        let sum: f64 = twice.iter().sum::<f64>() / 2.0;
        assert_eq!(
            sum.rem_euclid(2.0),
            0.0,
            "code {c:#06x}: {v:?} has an odd sum"
        );
        // The absolute values are the grid's (the signs are the code's).
        let back: [u32; 8] = std::array::from_fn(|i| ((v[i] - shift as f32).abs()).to_bits());
        assert!(abs.contains(&back), "code {c:#06x}");
        points.insert(v.map(f32::to_bits));
    }
    assert_eq!(points.len(), 1 << 16);
}

/// The kernel's table decodes every code of both stages to the expanded codebook's entry: the
/// absolute row XOR the sign row, plus the shift row, in f16.
#[test]
fn e8p_kernel_table_matches_the_codebooks() {
    let table = e8p::kernel_table(2, 1);
    let books = e8p::codebooks(2);
    let row = |r: usize| &table[r * 8..r * 8 + 8];
    // The replicated table holds each absolute and sign row 8 times in a row, the shifts once.
    let eight = e8p::kernel_table(2, 8);
    assert_eq!(eight.len(), 8 * (768 * 8 + 4));
    for (i, chunk) in eight[..768 * 64].chunks(64).enumerate() {
        assert!(chunk.chunks(8).all(|c| c == row(i)), "row {i}");
    }
    assert_eq!(&eight[768 * 64..], &table[768 * 8..]);
    for s in 0..2 {
        for c in 0..=u16::MAX {
            let (a, b) = ((c >> 8) as usize, c as u8);
            let p = (b.count_ones() & 1) as usize;
            for i in 0..8 {
                let mag = half::f16::from_bits(
                    row(s * 256 + a)[i].to_bits() ^ row(512 + b as usize)[i].to_bits(),
                );
                let sum = half::f16::from_f32(mag.to_f32() + row(768 + 2 * s + p)[i].to_f32());
                let want = books[((s << 16) + c as usize) * 8 + i];
                assert_eq!(sum.to_f32(), want, "stage {s} code {c:#06x} dim {i}");
            }
        }
    }
    let w = VqWeight::random(VqConfig::QUIP_4, 32, 64, 5, false).unwrap();
    let mut twisted = w.codebooks.clone();
    twisted[3] += 1.0;
    let e = VqWeight::from_parts(VqConfig::QUIP_4, 32, 64, w.codes.clone(), twisted, w.scales)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`codebooks`") && e.contains("lattice"), "{e}");
}
