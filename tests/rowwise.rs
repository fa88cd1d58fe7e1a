//! The row-wise kernels (`tilus::kernels::rowwise`) on the CPU interpreter against f64
//! references: fresh random inputs, outputs poisoned before each run, ragged row lengths (the
//! masked tail), both vector widths, f16 and bf16. The GPU runs the same kernels in
//! `gpu_rowwise.rs`.

use half::{bf16, f16};
use rand::Rng;
use tilus::kernels::rowwise::{programs, row_config};

/// Row lengths that exercise every path: one element, a ragged tail with scalar loads (V = 1),
/// vector loads (V = 8), and a full capacity.
const LENGTHS: [usize; 5] = [1, 7, 200, 256, 520];

fn random_f16(len: usize, lo: f32, hi: f32) -> Vec<f16> {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| f16::from_f32(rng.random_range(lo..hi)))
        .collect()
}

/// `got` within `rel` of `want` relative to `scale` (the size of the row's values).
fn close(what: &str, got: f64, want: f64, rel: f64, scale: f64) {
    assert!(
        (got - want).abs() <= rel * scale.max(want.abs()) + 1e-7,
        "{what}: got {got}, want {want}"
    );
}

#[test]
fn softmax_matches_f64() {
    for &n in &LENGTHS {
        let rows = 3;
        let (bn, v) = row_config("softmax", n).unwrap();
        let cfg = programs::softmax_f16::Config { BN: bn, V: v };
        let x = random_f16(rows * n, -8.0, 8.0);
        let mut y = vec![f16::NAN; rows * n];
        programs::softmax_f16::interpret(&cfg, rows as i32, n as i32, &x, &mut y).unwrap();
        for r in 0..rows {
            let row: Vec<f64> = x[r * n..(r + 1) * n].iter().map(|v| v.to_f64()).collect();
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
            for j in 0..n {
                let want = (row[j] - m).exp() / s;
                close(
                    &format!("{cfg} n={n} ({r}, {j})"),
                    y[r * n + j].to_f64(),
                    want,
                    2e-3,
                    0.0,
                );
            }
        }
    }
}

#[test]
fn rms_norm_and_the_residual_variant_match_f64() {
    let eps = 1e-6f32;
    for &n in &LENGTHS {
        let rows = 2;
        let (bn, v) = row_config("rms_norm", n).unwrap();
        let x = random_f16(rows * n, -2.0, 2.0);
        let res = random_f16(rows * n, -2.0, 2.0);
        let w = random_f16(n, 0.5, 1.5);
        let mut y = vec![f16::NAN; rows * n];
        let cfg = programs::rms_norm_f16::Config { BN: bn, V: v };
        programs::rms_norm_f16::interpret(&cfg, rows as i32, n as i32, eps, &x, &w, &mut y)
            .unwrap();
        let (mut xa, mut ra) = (x.clone(), res.clone());
        let cfg2 = programs::add_rms_norm_f16::Config { BN: bn, V: v };
        programs::add_rms_norm_f16::interpret(
            &cfg2,
            rows as i32,
            n as i32,
            eps,
            &mut xa,
            &mut ra,
            &w,
        )
        .unwrap();
        for r in 0..rows {
            let norm = |vals: &[f64]| {
                let ms = vals.iter().map(|v| v * v).sum::<f64>() / n as f64;
                1.0 / (ms + eps as f64).sqrt()
            };
            let row: Vec<f64> = x[r * n..(r + 1) * n].iter().map(|v| v.to_f64()).collect();
            let inv = norm(&row);
            let sum: Vec<f64> = (0..n)
                .map(|j| (x[r * n + j].to_f32() + res[r * n + j].to_f32()) as f64)
                .collect();
            let inv2 = norm(&sum);
            for j in 0..n {
                let wj = w[j].to_f64();
                let at = format!("n={n} ({r}, {j})");
                close(&at, y[r * n + j].to_f64(), row[j] * inv * wj, 2e-3, 0.0);
                assert_eq!(ra[r * n + j], f16::from_f64(sum[j]), "residual {at}");
                close(&at, xa[r * n + j].to_f64(), sum[j] * inv2 * wj, 2e-3, 0.0);
            }
        }
    }
}

#[test]
fn layer_norm_matches_f64_bf16() {
    let eps = 1e-5f32;
    let mut rng = rand::rng();
    for &n in &LENGTHS[1..] {
        let rows = 2;
        let (bn, v) = row_config("layer_norm", n).unwrap();
        let gen = |len: usize, rng: &mut rand::rngs::ThreadRng| -> Vec<bf16> {
            (0..len)
                .map(|_| bf16::from_f32(rng.random_range(-3.0..3.0)))
                .collect()
        };
        let (x, w, b) = (gen(rows * n, &mut rng), gen(n, &mut rng), gen(n, &mut rng));
        let mut y = vec![bf16::NAN; rows * n];
        let cfg = programs::layer_norm_bf16::Config { BN: bn, V: v };
        programs::layer_norm_bf16::interpret(&cfg, rows as i32, n as i32, eps, &x, &w, &b, &mut y)
            .unwrap();
        for r in 0..rows {
            let row: Vec<f64> = x[r * n..(r + 1) * n].iter().map(|v| v.to_f64()).collect();
            let mean = row.iter().sum::<f64>() / n as f64;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
            let inv = 1.0 / (var + eps as f64).sqrt();
            for j in 0..n {
                let want = (row[j] - mean) * inv * w[j].to_f64() + b[j].to_f64();
                // bf16 keeps 8 bits: one rounding of the result, plus the f32 steps.
                close(
                    &format!("n={n} ({r}, {j})"),
                    y[r * n + j].to_f64(),
                    want,
                    1e-2,
                    1.0,
                );
            }
        }
    }
}

#[test]
fn argmax_finds_the_first_largest() {
    let mut rng = rand::rng();
    for &n in &LENGTHS {
        let rows = 4;
        let (bn, v) = row_config("argmax", n).unwrap();
        // Few distinct values, so ties are common: the first index must win.
        let x: Vec<f16> = (0..rows * n)
            .map(|_| f16::from_f32(rng.random_range(-20..20) as f32 * 0.25))
            .collect();
        let mut out = vec![-7i32; rows];
        let cfg = programs::argmax_f16::Config { BN: bn, V: v };
        programs::argmax_f16::interpret(&cfg, rows as i32, n as i32, &x, &mut out).unwrap();
        for r in 0..rows {
            let row = &x[r * n..(r + 1) * n];
            let mut best = 0;
            for j in 1..n {
                if row[j] > row[best] {
                    best = j;
                }
            }
            assert_eq!(out[r], best as i32, "n={n} row {r}");
        }
    }
}

#[test]
fn silu_and_mul_matches_f64() {
    for (d, v, u) in [(1000, 8, 1), (2600, 8, 2), (3000, 8, 4), (77, 1, 2)] {
        let tokens = 3;
        let x = random_f16(tokens * 2 * d, -6.0, 6.0);
        let mut y = vec![f16::NAN; tokens * d];
        let cfg = programs::silu_and_mul_f16::Config { V: v, U: u };
        programs::silu_and_mul_f16::interpret(&cfg, tokens as i32, d as i32, &x, &mut y).unwrap();
        for t in 0..tokens {
            for j in 0..d {
                let (g, u) = (x[t * 2 * d + j].to_f64(), x[t * 2 * d + d + j].to_f64());
                let want = g / (1.0 + (-g).exp()) * u;
                close(
                    &format!("d={d} u={u} ({t}, {j})"),
                    y[t * d + j].to_f64(),
                    want,
                    2e-3,
                    0.0,
                );
            }
        }
    }
}

#[test]
fn rotary_rotates_the_halves_in_place() {
    for (hd, heads) in [(64, 3), (128, 17)] {
        let tokens = 2;
        let half = hd / 2;
        let x = random_f16(tokens * heads * hd, -2.0, 2.0);
        let cos = random_f16(tokens * half, -1.0, 1.0);
        let sin = random_f16(tokens * half, -1.0, 1.0);
        let mut y = x.clone();
        let cfg = programs::rotary_f16::Config { HD: hd as i32 };
        programs::rotary_f16::interpret(&cfg, tokens as i32, heads as i32, &mut y, &cos, &sin)
            .unwrap();
        for t in 0..tokens {
            for h in 0..heads {
                for j in 0..half {
                    let base = (t * heads + h) * hd;
                    let (x1, x2) = (x[base + j].to_f64(), x[base + half + j].to_f64());
                    let (c, s) = (cos[t * half + j].to_f64(), sin[t * half + j].to_f64());
                    let at = format!("hd={hd} ({t}, {h}, {j})");
                    close(&at, y[base + j].to_f64(), x1 * c - x2 * s, 2e-3, 1.0);
                    close(&at, y[base + half + j].to_f64(), x2 * c + x1 * s, 2e-3, 1.0);
                }
            }
        }
    }
}

#[test]
fn shapes_outside_the_kernels_are_errors_naming_the_argument() {
    let e = row_config("softmax", 0).unwrap_err().to_string();
    assert!(e.contains("n = 0"), "{e}");
    let e = row_config("softmax", 8193).unwrap_err().to_string();
    assert!(e.contains("n = 8193") && e.contains("8192"), "{e}");
    assert_eq!(row_config("softmax", 8192).unwrap(), (8192, 8));
    assert_eq!(row_config("softmax", 257).unwrap(), (512, 1));
}

#[test]
fn long_rows_softmax_in_chunks_matches_f64() {
    // Past 8192 elements: chunks with an online maximum, a ragged last chunk, scalar loads.
    for (n, v) in [(8192 * 2 + 100, 1), (8192 * 2 + 8, 8)] {
        let rows = 2;
        let x = random_f16(rows * n, -8.0, 8.0);
        let mut y = vec![f16::NAN; rows * n];
        let cfg = programs::softmax_long_f16::Config { V: v };
        programs::softmax_long_f16::interpret(&cfg, rows as i32, n as i32, &x, &mut y).unwrap();
        for r in 0..rows {
            let row: Vec<f64> = x[r * n..(r + 1) * n].iter().map(|v| v.to_f64()).collect();
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
            for j in 0..n {
                let want = (row[j] - m).exp() / s;
                close(
                    &format!("n={n} ({r}, {j})"),
                    y[r * n + j].to_f64(),
                    want,
                    2e-3,
                    0.0,
                );
            }
        }
    }
}
