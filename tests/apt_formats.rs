//! The APT-LLM host formats: bipolar-INT encode/decode, the lossless conversion from signed
//! INT, per-row quantization and bit planes (property tests on random inputs).

use proptest::prelude::*;
use tilus::apt::matrix::{bipolar_products, code_products, ScaleRule};
use tilus::apt::{AptError, AptMatrix, Bipolar};

#[test]
fn bipolar_values_are_the_odd_integers() {
    for bits in 1..=8u32 {
        let f = Bipolar::new(bits).unwrap();
        let max = (1i32 << bits) - 1;
        let values: Vec<i32> = (0..1u32 << bits).map(|c| f.decode(c).unwrap()).collect();
        let want: Vec<i32> = (-max..=max).step_by(2).collect();
        assert_eq!(values, want, "{bits} bits");
        // The definition: Σ_i (2 x_i - 1) 2^i.
        for c in 0..1u32 << bits {
            let by_bits: i32 = (0..bits)
                .map(|i| (2 * ((c >> i) & 1) as i32 - 1) << i)
                .sum();
            assert_eq!(f.decode(c).unwrap(), by_bits, "{bits} bits, code {c}");
        }
        assert!(f.encode(0).is_err() && f.encode(max as i64 + 2).is_err());
        assert!(f.decode(1 << bits).is_err());
    }
    assert_eq!(
        Bipolar::new(0).unwrap_err(),
        AptError::Bits {
            arg: "bits",
            bits: 0
        }
    );
    assert!(Bipolar::new(9)
        .unwrap_err()
        .to_string()
        .contains("argument `bits`: bipolar-INT has 1 to 8 bits, not 9"));
}

/// Every signed code of every width: flipping the sign bit gives the bipolar code of `2q + 1`,
/// and both dequantization rules carry over exactly (dyadic scales and zeros: exact in f64).
#[test]
fn signed_int_converts_losslessly() {
    let mut rng = rand::rng();
    use rand::Rng;
    for bits in 1..=8u32 {
        let f = Bipolar::new(bits).unwrap();
        let half = 1i32 << (bits - 1);
        for q in -half..half {
            let code = f.from_signed_code(q).unwrap();
            // The two's-complement code with its sign bit flipped.
            let twos = (q as u32) & ((1 << bits) - 1);
            assert_eq!(code, twos ^ half as u32, "{bits} bits, q = {q}");
            let v = f.decode(code).unwrap();
            assert_eq!(v, 2 * q + 1, "{bits} bits, q = {q}");
            for _ in 0..4 {
                let s = rng.random_range(1..4096) as f64 / 1024.0;
                let z = rng.random_range(-4096..4096) as f64 / 1024.0;
                let (s2, z2) = Bipolar::from_signed_affine(s, z);
                assert_eq!(s2 * v as f64 + z2, s * q as f64 + z, "w = s q + z");
                let zp = rng.random_range(-half..half);
                let (s3, zp3) = Bipolar::from_signed_zero_point(s, zp);
                assert_eq!(s3 * (v - zp3) as f64, s * (q - zp) as f64, "w = s (q - z)");
            }
        }
        assert!(f.from_signed_code(half).is_err() && f.from_signed_code(-half - 1).is_err());
    }
}

fn matrix_strategy() -> impl Strategy<Value = (u32, usize, usize, Vec<f32>)> {
    (1u32..=8, 1usize..5, 1usize..4).prop_flat_map(|(bits, rows, kw)| {
        let k = 32 * kw;
        (
            Just(bits),
            Just(rows),
            Just(k),
            proptest::collection::vec(-8.0f32..8.0, rows * k),
        )
    })
}

proptest! {
    #[test]
    fn encode_decode_roundtrip(bits in 1u32..=8, code in 0u32..256) {
        let f = Bipolar::new(bits).unwrap();
        let code = code & ((1 << bits) - 1);
        let v = f.decode(code).unwrap();
        prop_assert_eq!(f.encode(v as i64).unwrap(), code);
        prop_assert_eq!(f.decode(f.encode(v as i64).unwrap()).unwrap(), v);
    }

    #[test]
    fn nearest_is_the_closest_odd_value(bits in 1u32..=8, t in -300.0f32..300.0) {
        let f = Bipolar::new(bits).unwrap();
        let v = f.nearest(t);
        prop_assert!(v % 2 != 0 && v.abs() <= f.max());
        // No other value is strictly closer.
        for c in 0..1u32 << bits {
            let o = f.decode(c).unwrap();
            prop_assert!((t as f64 - v as f64).abs() <= (t as f64 - o as f64).abs() + 1e-9,
                "t = {t}: {v} but {o} is closer");
        }
    }

    #[test]
    fn planes_recompose_the_codes((bits, rows, k, x) in matrix_strategy()) {
        let q = AptMatrix::quantize(&x, rows, k, bits, ScaleRule::Max).unwrap();
        let planes = q.planes().unwrap();
        prop_assert_eq!(planes.len(), bits as usize * rows * k / 32);
        // Recomposition by hand: Σ_p 2^p bit(plane p, r, c).
        for r in 0..rows {
            for c in 0..k {
                let code: u32 = (0..bits as usize)
                    .map(|p| ((planes[(p * rows + r) * (k / 32) + c / 32] >> (c % 32)) & 1) << p)
                    .sum();
                prop_assert_eq!(code, q.codes()[r * k + c] as u32);
            }
        }
        let back = AptMatrix::from_planes(&planes, rows, k, bits, q.scales().to_vec()).unwrap();
        prop_assert_eq!(&back, &q);
    }

    #[test]
    fn quantization_is_within_half_a_step((bits, rows, k, x) in matrix_strategy()) {
        let q = AptMatrix::quantize(&x, rows, k, bits, ScaleRule::Max).unwrap();
        let d = q.dequantize();
        for r in 0..rows {
            let s = q.scales()[r] as f64;
            for c in 0..k {
                let err = (d[r * k + c] - x[r * k + c] as f64).abs();
                // Half the spacing (2 s) of the odd levels, plus f32 rounding of x / s; for
                // 1 bit the levels are ±s and |x| <= amax = s.
                let bound = if bits == 1 { s } else { s * 1.0001 };
                prop_assert!(err <= bound, "row {r} col {c}: {err} > {bound}");
            }
        }
    }

    /// The AND form of the bipolar product (4 Σ x_a x_w - 2(2^A-1) Σ x_w - 2(2^W-1) Σ x_a
    /// + K (2^A-1)(2^W-1)) equals the direct product of bipolar values.
    #[test]
    fn and_form_equals_bipolar_product(
        (abits, rows, k, x) in matrix_strategy(),
        wbits in 1u32..=8,
        wrows in 1usize..4,
        seed in any::<u64>(),
    ) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let w: Vec<f32> = (0..wrows * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let a = AptMatrix::quantize(&x, rows, k, abits, ScaleRule::Max).unwrap();
        let wq = AptMatrix::quantize(&w, wrows, k, wbits, ScaleRule::Max).unwrap();
        let direct = bipolar_products(&a, &wq);
        let codes = code_products(&a, &wq);
        let (sa, sw) = (a.row_sums(), wq.row_sums());
        let (ma, mw) = (((1i64 << abits) - 1), ((1i64 << wbits) - 1));
        for i in 0..rows {
            for j in 0..wrows {
                let and_form = 4 * codes[i * wrows + j] - 2 * ma * sw[j] as i64
                    - 2 * mw * sa[i] as i64 + k as i64 * ma * mw;
                prop_assert_eq!(and_form, direct[i * wrows + j]);
            }
        }
    }
}

#[test]
fn bad_arguments_are_named() {
    let e = AptMatrix::quantize(&[1.0; 64], 2, 32, 9, ScaleRule::Max).unwrap_err();
    assert!(e.to_string().contains("argument `bits`"), "{e}");
    let e = AptMatrix::quantize(&[1.0; 63], 2, 32, 2, ScaleRule::Max).unwrap_err();
    assert!(
        e.to_string()
            .contains("argument `x`: expected 64 values, got 63"),
        "{e}"
    );
    let mut x = vec![1.0; 64];
    x[40] = f32::NAN;
    let e = AptMatrix::quantize(&x, 2, 32, 2, ScaleRule::Max).unwrap_err();
    assert!(
        e.to_string().contains("row 1, column 8 is not finite"),
        "{e}"
    );
    let q = AptMatrix::quantize(&[1.0; 40], 2, 20, 2, ScaleRule::Max).unwrap();
    assert!(q
        .planes()
        .unwrap_err()
        .to_string()
        .contains("argument `k`: 20"));
    // An all-zero row gets the tiny scale, never a division by zero.
    let z = AptMatrix::quantize(&[0.0; 32], 1, 32, 3, ScaleRule::Max).unwrap();
    assert!(z.scales()[0] > 0.0 && z.dequantize().iter().all(|v| v.abs() < 1e-29));
}
