//! Shared by `attention_prefill.rs` (interpreter) and `gpu_attention_prefill.rs` (GPU): random
//! ragged-batch inputs, the f64 reference of causal GQA attention, and its error bound.

use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tilus::DType;

/// One ragged batch.
#[derive(Clone, Debug)]
pub struct Case {
    pub lens: Vec<usize>,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub d: usize,
    pub dtype: DType,
}

/// Inputs as the kernel takes them (bytes of `dtype`) and as the reference reads them (the
/// same values decoded to f64).
pub struct Inputs {
    pub cu: Vec<i32>,
    pub tokens: usize,
    pub q: Vec<u8>,
    pub k: Vec<u8>,
    pub v: Vec<u8>,
    pub qf: Vec<f64>,
    pub kf: Vec<f64>,
    pub vf: Vec<f64>,
}

/// `x` rounded to `dtype` (nearest even), as little-endian bytes and as the value kept.
fn encode(x: f64, dtype: DType, out: &mut Vec<u8>) -> f64 {
    match dtype {
        DType::F16 => {
            let h = f16::from_f64(x);
            out.extend_from_slice(&h.to_bits().to_le_bytes());
            h.to_f64()
        }
        DType::BF16 => {
            let h = bf16::from_f64(x);
            out.extend_from_slice(&h.to_bits().to_le_bytes());
            h.to_f64()
        }
        other => panic!("no test encoding for {other}"),
    }
}

pub fn decode(bytes: &[u8], dtype: DType) -> Vec<f64> {
    bytes
        .chunks_exact(2)
        .map(|b| {
            let bits = u16::from_le_bytes([b[0], b[1]]);
            match dtype {
                DType::F16 => f16::from_bits(bits).to_f64(),
                DType::BF16 => bf16::from_bits(bits).to_f64(),
                other => panic!("no test decoding for {other}"),
            }
        })
        .collect()
}

/// A standard normal sample (Box-Muller), kept away from zero so that no input is 0.
fn normal(rng: &mut StdRng) -> f64 {
    loop {
        let u1: f64 = rng.random_range(f64::EPSILON..1.0);
        let u2: f64 = rng.random_range(0.0..1.0);
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        if z.abs() > 1e-3 {
            return z;
        }
    }
}

impl Case {
    pub fn inputs(&self, seed: u64) -> Inputs {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut cu = vec![0i32];
        for &n in &self.lens {
            cu.push(cu.last().unwrap() + n as i32);
        }
        let tokens = *cu.last().unwrap() as usize;
        let mut gen = |heads: usize| {
            let mut bytes = Vec::new();
            let vals: Vec<f64> = (0..tokens * heads * self.d)
                .map(|_| encode(normal(&mut rng), self.dtype, &mut bytes))
                .collect();
            (bytes, vals)
        };
        let (q, qf) = gen(self.q_heads);
        let (k, kf) = gen(self.kv_heads);
        let (v, vf) = gen(self.kv_heads);
        Inputs {
            cu,
            tokens,
            q,
            k,
            v,
            qf,
            kf,
            vf,
        }
    }

    /// The f64 reference `o [tokens, q_heads, d]` and, per element, the bound on the kernel's
    /// error. The kernel differs from exact arithmetic on its (already rounded) inputs by:
    /// - `P` rounded to the input type before `P · V` (relative `u` per weight, `u` = 2^-11
    ///   for f16, 2^-8 for bf16): at most `u · Σ p |v| / l`, where `l = Σ p`;
    /// - the f32 scores (a dot of `d` products, the scale, the log2 e factor): an absolute
    ///   error `δ ≤ (d + 4) 2^-24 · scale · Σ_d |q k|` per score, which changes each weight
    ///   relative to the sum by at most `e^{2δ} - 1`;
    /// - exp2 (2 ulp of f32 per weight), the f32 sums of `l` and of `P · V` (`n` terms):
    ///   `(2n + 16) 2^-24` relative to `Σ p |v| / l`;
    /// - f16's subnormal `P` below 2^-14 (absolute 2^-25 per weight, `l >= 1`);
    /// - the output rounded to the input type: `u · |o|`.
    pub fn reference(&self, x: &Inputs, scale: f32) -> (Vec<f64>, Vec<f64>) {
        self.reference_rows(x, scale, |_, _| true)
    }

    /// [`reference`](Self::reference) for the query rows `r` of sequences of length `n` where
    /// `rows(n, r)` holds; the other rows are NaN in both results (not checked). Heads are
    /// computed on parallel threads.
    pub fn reference_rows(
        &self,
        x: &Inputs,
        scale: f32,
        rows: impl Fn(usize, usize) -> bool + Sync,
    ) -> (Vec<f64>, Vec<f64>) {
        let (qh, kvh, d) = (self.q_heads, self.kv_heads, self.d);
        let u = match self.dtype {
            DType::F16 => 2f64.powi(-11),
            _ => 2f64.powi(-8),
        };
        let subnormal = if self.dtype == DType::F16 {
            2f64.powi(-25)
        } else {
            0.0
        };
        let scale = scale as f64;
        let group = qh / kvh;
        // Per head: (token, column) -> (value, bound), token-major.
        let head = |h: usize| -> Vec<(f64, f64)> {
            let mut out = vec![(f64::NAN, f64::NAN); x.tokens * d];
            let kh = h / group;
            for w in x.cu.windows(2) {
                let (s0, n) = (w[0] as usize, (w[1] - w[0]) as usize);
                for r in (0..n).filter(|&r| rows(n, r)) {
                    let qrow = &x.qf[((s0 + r) * qh + h) * d..][..d];
                    let mut s = Vec::with_capacity(r + 1);
                    let mut delta: f64 = 0.0;
                    for j in 0..=r {
                        let krow = &x.kf[((s0 + j) * kvh + kh) * d..][..d];
                        let (mut dot, mut abs) = (0.0, 0.0);
                        for (a, b) in qrow.iter().zip(krow) {
                            dot += a * b;
                            abs += (a * b).abs();
                        }
                        s.push(scale * dot);
                        delta = delta.max((d + 4) as f64 * 2f64.powi(-24) * scale * abs);
                    }
                    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let p: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
                    let l: f64 = p.iter().sum();
                    let keys = r + 1;
                    let rel =
                        u + ((2.0 * delta).exp() - 1.0) + (2 * keys + 16) as f64 * 2f64.powi(-24);
                    let mut acc = vec![0.0; d];
                    let mut mag = vec![0.0; d];
                    let mut vmax = vec![0.0f64; d];
                    for (j, pj) in p.iter().enumerate() {
                        let vrow = &x.vf[((s0 + j) * kvh + kh) * d..][..d];
                        for c in 0..d {
                            acc[c] += pj * vrow[c];
                            mag[c] += pj * vrow[c].abs();
                            vmax[c] = vmax[c].max(vrow[c].abs());
                        }
                    }
                    for c in 0..d {
                        let o = acc[c] / l;
                        let t = rel * mag[c] / l + u * o.abs() + keys as f64 * subnormal * vmax[c];
                        out[(s0 + r) * d + c] = (o, t);
                    }
                }
            }
            out
        };
        let heads: Vec<Vec<(f64, f64)>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..qh).map(|h| sc.spawn(move || head(h))).collect();
            hs.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let mut o = vec![0.0; x.tokens * qh * d];
        let mut tol = vec![0.0; x.tokens * qh * d];
        for (h, hv) in heads.iter().enumerate() {
            for t in 0..x.tokens {
                for c in 0..d {
                    let (v, b) = hv[t * d + c];
                    o[(t * qh + h) * d + c] = v;
                    tol[(t * qh + h) * d + c] = b;
                }
            }
        }
        (o, tol)
    }
}

/// Every element of `got` (bytes of `dtype`) within its bound of the reference; the report
/// names the first element that is not, with its token, head and column.
pub fn assert_close(what: &str, case: &Case, got: &[u8], want: &[f64], tol: &[f64]) {
    let got = decode(got, case.dtype);
    assert_eq!(got.len(), want.len(), "{what}: output length");
    let mut worst: f64 = 0.0;
    for (i, ((g, w), t)) in got.iter().zip(want).zip(tol).enumerate() {
        let (tok, h, c) = (
            i / (case.q_heads * case.d),
            i / case.d % case.q_heads,
            i % case.d,
        );
        // Every element is written (the poison is NaN), also in rows not checked.
        assert!(
            g.is_finite(),
            "{what}: o[{tok}, {h}, {c}] = {g} was not written"
        );
        if w.is_nan() {
            continue;
        }
        let err = (g - w).abs();
        assert!(
            err <= *t,
            "{what}: o[{tok}, {h}, {c}] = {g}, reference {w}, error {err:.3e} above the bound {t:.3e}"
        );
        worst = worst.max(err / t);
    }
    eprintln!("{what}: worst error {:.2} of the bound", worst);
}
