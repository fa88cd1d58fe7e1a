//! Data type semantics: value tables against the OCP/IEEE definitions, exact rounding checked by
//! brute force, and names.

// Float codes are written as sign_exponent_mantissa, which reads better than groups of four.
#![allow(clippy::unusual_byte_groupings)]

use proptest::prelude::*;
use rand::Rng;
use tilus_core::dtype::{DTypeError, Kind};
use tilus_core::DType;

fn t(name: &str) -> DType {
    name.parse().unwrap()
}

/// Generic `fNeEmM` decoder written from the definition, independent of the crate's.
fn reference_generic_decode(exp: u32, man: u32, code: u32) -> f64 {
    let bias = 2f64.powi((exp - 1) as i32) - 1.0;
    let s = (code >> (exp + man)) & 1;
    let e = (code >> man) & ((1 << exp) - 1);
    let m = code & ((1 << man) - 1);
    let frac = m as f64 / 2f64.powi(man as i32);
    let mag = if e == 0 {
        2f64.powf(1.0 - bias) * frac
    } else {
        2f64.powf(e as f64 - bias) * (1.0 + frac)
    };
    if s == 1 {
        -mag
    } else {
        mag
    }
}

fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn small_floats() -> impl Iterator<Item = DType> {
    DType::all().filter(|d| d.is_float() && d.bits() <= 8)
}

// ---------------------------------------------------------------------------------------------
// Value tables

#[test]
fn f4e2m1_is_ocp_mx_fp4() {
    let want = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    let f4 = t("f4e2m1");
    assert_eq!(f4, DType::Float { exp: 2, man: 1 });
    for (c, &v) in want.iter().enumerate() {
        assert_eq!(f4.decode(c as u32), v);
        assert!(same(f4.decode(c as u32 | 8), -v), "code {c:#b} with sign");
    }
    assert_eq!(f4.max_value(), 6.0);
    assert_eq!(f4.min_value(), -6.0);
    assert_eq!(f4.exponent_bias(), Some(1));
}

#[test]
fn f6_formats_are_ocp_mx_fp6() {
    let e3m2 = t("f6e3m2");
    assert_eq!(e3m2.max_value(), 28.0);
    assert_eq!(e3m2.decode(0b0_111_11), 28.0);
    assert_eq!(e3m2.decode(0b0_000_01), 0.0625);
    assert_eq!(e3m2.decode(0b0_001_00), 0.25);
    let e2m3 = t("f6e2m3");
    assert_eq!(e2m3.max_value(), 7.5);
    assert_eq!(e2m3.decode(0b0_11_111), 7.5);
    assert_eq!(e2m3.decode(0b0_00_001), 0.125);
    assert_eq!(e2m3.decode(0b1_01_000), -1.0);
}

#[test]
fn f8e4m3_is_ocp_e4m3fn() {
    let d = t("f8e4m3");
    assert_eq!(d, DType::F8E4M3);
    assert_eq!(d.max_value(), 448.0);
    assert_eq!(d.decode(0x7e), 448.0);
    assert_eq!(d.decode(0x78), 256.0);
    assert_eq!(d.decode(0x01), 2f64.powi(-9));
    assert_eq!(d.decode(0x08), 2f64.powi(-6));
    assert_eq!(d.decode(0x38), 1.0);
    assert!(d.decode(0x7f).is_nan() && d.decode(0xff).is_nan());
    let nans = (0..256).filter(|&c| d.decode(c).is_nan()).count();
    let infs = (0..256).filter(|&c| d.decode(c).is_infinite()).count();
    assert_eq!((nans, infs), (2, 0));
    assert!(d.has_nan() && !d.has_inf());
}

#[test]
fn f8e5m2_is_ocp_e5m2() {
    let d = t("f8e5m2");
    assert_eq!(d, DType::F8E5M2);
    assert_eq!(d.max_value(), 57344.0);
    assert_eq!(d.decode(0x7b), 57344.0);
    assert_eq!(d.decode(0x3c), 1.0);
    assert_eq!(d.decode(0x01), 2f64.powi(-16));
    assert_eq!(d.decode(0x7c), f64::INFINITY);
    assert_eq!(d.decode(0xfc), f64::NEG_INFINITY);
    for c in [0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff] {
        assert!(d.decode(c).is_nan(), "{c:#x}");
    }
    // Same bits as the top byte of an f16.
    for c in 0..256u32 {
        let h = half::f16::from_bits((c << 8) as u16).to_f64();
        assert!(same(d.decode(c), h), "{c:#x}");
    }
}

#[test]
fn generic_floats_decode_per_definition() {
    for d in DType::all() {
        let (exp, man) = match d {
            DType::Float { exp, man } => (exp as u32, man as u32),
            _ => continue,
        };
        for c in 0..(1u32 << d.bits()) {
            let want = reference_generic_decode(exp, man, c);
            assert!(same(d.decode(c), want), "{d} code {c:#b}");
        }
        // No inf/nan codes: the all-ones exponent is finite.
        assert!(d.values().unwrap().iter().all(|v| v.is_finite()), "{d}");
        assert!(!d.has_nan() && !d.has_inf());
    }
}

#[test]
fn f8_generic_splits_are_not_the_ocp_types() {
    let e3m4 = t("f8e3m4");
    assert_eq!(e3m4, DType::Float { exp: 3, man: 4 });
    // Bias 3; the all-ones exponent is finite: 2^(7-3) * (1 + 15/16).
    assert_eq!(e3m4.max_value(), 31.0);
    let e2m5 = t("f8e2m5");
    assert_eq!(e2m5, DType::Float { exp: 2, man: 5 });
    assert!(e2m5.decode(0x7f).is_finite());
}

#[test]
fn integers_decode() {
    for b in 1..=8u32 {
        let u = DType::UInt(b as u8);
        assert_eq!(u.kind(), Kind::UInt);
        let vals = u.values().unwrap();
        assert_eq!(vals.len(), 1 << b);
        for (c, v) in vals.iter().enumerate() {
            assert_eq!(*v, c as f64);
        }
        if b < 2 {
            continue;
        }
        let i = DType::Int(b as u8);
        assert_eq!(i.kind(), Kind::Int);
        for c in 0..(1u32 << b) {
            let want = if c >= 1 << (b - 1) {
                c as f64 - (1u32 << b) as f64
            } else {
                c as f64
            };
            assert_eq!(i.decode(c), want, "i{b} {c:#b}");
        }
        assert_eq!(i.min_value(), -((1u32 << (b - 1)) as f64));
        assert_eq!(i.max_value(), ((1u32 << (b - 1)) - 1) as f64);
    }
    assert_eq!(t("i32").decode(0xffff_ffff), -1.0);
    assert_eq!(t("i32").decode(0x8000_0000), i32::MIN as f64);
    assert_eq!(t("u32").decode(0xffff_ffff), u32::MAX as f64);
    assert_eq!(t("u8").decode(200), 200.0);
    assert_eq!(t("i8").decode(200), -56.0);
}

#[test]
fn wide_floats_use_ieee_bits() {
    assert_eq!(t("f16").decode(0x3c00), 1.0);
    assert_eq!(t("f16").max_value(), 65504.0);
    assert_eq!(t("bf16").decode(0x3f80), 1.0);
    assert_eq!(t("bf16").decode(0x7f80), f64::INFINITY);
    assert_eq!(t("f32").decode(1.5f32.to_bits()), 1.5);
    assert_eq!(t("f32").max_value(), f32::MAX as f64);
    assert!(t("f16").values().is_none() && t("f32").values().is_none());
}

#[test]
fn decode_ignores_bits_above_the_width() {
    let f4 = t("f4e2m1");
    assert_eq!(f4.decode(0xf3), f4.decode(0x3));
    assert_eq!(t("i4").decode(0x1f), -1.0);
}

// ---------------------------------------------------------------------------------------------
// Encoding

/// Nearest-value encoder by search over the type's finite non-negative values: the reference
/// for rounding. Ties go to the even code; beyond the range it saturates.
struct Nearest {
    dtype: DType,
    /// (value, code) for every finite non-negative value, ascending, one entry per value.
    table: Vec<(f64, u32)>,
}

impl Nearest {
    fn new(dtype: DType) -> Self {
        let sign = 1u32 << (dtype.bits() - 1);
        let mut table: Vec<(f64, u32)> = (0..sign)
            .map(|c| (dtype.decode(c), c))
            .filter(|(v, _)| v.is_finite())
            .collect();
        table.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in table.windows(2) {
            assert!(w[0].0 < w[1].0, "{dtype}: values must be distinct");
        }
        Nearest { dtype, table }
    }

    fn encode(&self, x: f32) -> u32 {
        let sign = if x.is_sign_negative() {
            1u32 << (self.dtype.bits() - 1)
        } else {
            0
        };
        let mag = (x as f64).abs();
        let &(max, max_code) = self.table.last().unwrap();
        if mag >= max {
            return sign | max_code;
        }
        // table[i].0 <= mag < table[i + 1].0
        let i = self.table.partition_point(|&(v, _)| v <= mag) - 1;
        let (lo, lo_code) = self.table[i];
        let (hi, hi_code) = self.table[i + 1];
        // Adjacent values have few significant bits, so their midpoint is exact in f64.
        let mid = (lo + hi) / 2.0;
        let code = if mag < mid {
            lo_code
        } else if mag > mid {
            hi_code
        } else if lo_code % 2 == 0 {
            lo_code
        } else {
            hi_code
        };
        sign | code
    }

    /// Every midpoint between adjacent values that an f32 holds exactly, and its neighbours.
    fn probes(&self) -> Vec<f32> {
        let mut out = Vec::new();
        for w in self.table.windows(2) {
            let mid = (w[0].0 + w[1].0) / 2.0;
            let m = mid as f32;
            if m as f64 != mid {
                continue;
            }
            for p in [m, next_up(m), next_down(m)] {
                out.extend([p, -p]);
            }
        }
        out
    }
}

fn next_up(x: f32) -> f32 {
    f32::from_bits(x.to_bits() + 1)
}

fn next_down(x: f32) -> f32 {
    f32::from_bits(x.to_bits() - 1)
}

/// Random f32s that matter for `dtype`: any bit pattern, uniform over (and a bit past) the range,
/// and small relative perturbations of representable values.
fn random_inputs(rng: &mut impl Rng, dtype: DType, table: &[(f64, u32)], n: usize) -> Vec<f32> {
    let max = dtype.max_value();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let x = match out.len() % 3 {
            0 => f32::from_bits(rng.random()),
            1 => (rng.random_range(-1.25..1.25) * max) as f32,
            _ => {
                let v = table[rng.random_range(0..table.len())].0;
                let s = if rng.random() { -1.0 } else { 1.0 };
                (s * v * (1.0 + rng.random_range(-0.3..0.3))) as f32
            }
        };
        if !x.is_nan() {
            out.push(x);
        }
    }
    out
}

#[test]
fn float_encode_is_nearest_with_ties_to_even_by_brute_force() {
    let mut rng = rand::rng();
    let types = DType::all().filter(|d| d.is_float() && d.bits() <= 16);
    for d in types {
        let reference = Nearest::new(d);
        let mut inputs = reference.probes();
        let n = if d.bits() <= 8 { 20_000 } else { 50_000 };
        inputs.extend(random_inputs(&mut rng, d, &reference.table, n));
        inputs.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
        ]);
        inputs.extend([f32::from_bits(1), -f32::from_bits(1)]);
        for x in inputs {
            let got = d.encode(x).unwrap();
            let want = reference.encode(x);
            assert_eq!(
                got,
                want,
                "{d}: encode({x:e}) gave {got:#x} = {}, nearest is {want:#x} = {}",
                d.decode(got),
                d.decode(want)
            );
        }
    }
}

#[test]
fn exact_ties_go_to_the_even_code() {
    let f4 = t("f4e2m1");
    // 0.25 is between 0 (code 0) and 0.5 (code 1); 2.5 between 2 (code 4) and 3 (code 5);
    // 5 between 4 (code 6) and 6 (code 7); 1.25 between 1 (code 2) and 1.5 (code 3).
    assert_eq!(f4.encode(0.25).unwrap(), 0);
    assert_eq!(f4.encode(0.75).unwrap(), 2);
    assert_eq!(f4.encode(1.25).unwrap(), 2);
    assert_eq!(f4.encode(2.5).unwrap(), 4);
    assert_eq!(f4.encode(3.5).unwrap(), 6);
    assert_eq!(f4.encode(5.0).unwrap(), 6);
    assert_eq!(f4.encode(-5.0).unwrap(), 0b1110);
    // Half an ulp past the top rounds up in IEEE terms; we saturate.
    assert_eq!(t("f8e4m3").encode(464.0).unwrap(), 0x7e);
    assert_eq!(t("f8e4m3").encode(1e6).unwrap(), 0x7e);
    assert_eq!(t("f8e5m2").encode(61440.0).unwrap(), 0x7b);
    assert_eq!(t("f16").encode(65520.0).unwrap(), 0x7bff);
}

/// Arithmetic results (`DType::round`) overflow to an infinity in f16 and bf16, as IEEE
/// rounding does, at exactly half an ulp past the largest finite value; the other types round
/// as `encode` does (saturating), and NaN is an error.
#[test]
fn round_overflows_to_infinity_in_the_half_types() {
    let (f16, bf16) = (t("f16"), t("bf16"));
    assert_eq!(f16.round(65519.0).unwrap(), 0x7bff);
    assert_eq!(f16.round(65520.0).unwrap(), 0x7c00);
    assert_eq!(f16.round(-65520.0).unwrap(), 0xfc00);
    assert_eq!(f16.round(f32::NEG_INFINITY).unwrap(), 0xfc00);
    let top = f32::from_bits(0x7f7f_0000); // bf16's largest finite value
    let half_ulp = 2f32.powi(127 - 8);
    assert_eq!(bf16.round(top + half_ulp / 2.0).unwrap(), 0x7f7f);
    assert_eq!(bf16.round(top + half_ulp).unwrap(), 0x7f80);
    assert_eq!(bf16.round(f32::INFINITY).unwrap(), 0x7f80);
    for d in DType::all().filter(|d| !matches!(*d, DType::F16 | DType::BF16)) {
        for v in [0.3f32, -7.0, 1e30, f32::INFINITY] {
            assert_eq!(d.round(v).ok(), d.encode(v).ok(), "{d} {v}");
        }
    }
    assert!(f16.round(f32::NAN).is_err() && bf16.round(f32::NAN).is_err());
}

#[test]
fn encode_saturates_and_never_makes_infinity() {
    for d in DType::all().filter(|d| d.is_float() && *d != DType::F32) {
        let beyond = (d.max_value() * 1.5).min(f32::MAX as f64) as f32;
        for x in [f32::INFINITY, f32::MAX, beyond] {
            let pos = d.encode(x).unwrap();
            let neg = d.encode(-x).unwrap();
            assert_eq!(d.decode(pos), d.max_value(), "{d} {x}");
            assert_eq!(d.decode(neg), d.min_value(), "{d} -{x}");
        }
    }
    // f32 is the identity, so it keeps its infinities.
    assert_eq!(
        t("f32").encode(f32::INFINITY).unwrap(),
        f32::INFINITY.to_bits()
    );
}

#[test]
fn nan_is_an_error_for_every_type() {
    for d in DType::all() {
        for nan in [f32::NAN, -f32::NAN, f32::from_bits(0x7f80_0001)] {
            assert_eq!(d.encode(nan), Err(DTypeError::NaN { dtype: d }));
        }
    }
    let msg = t("f4e2m1").encode(f32::NAN).unwrap_err().to_string();
    assert_eq!(msg, "cannot encode NaN as f4e2m1");
}

#[test]
fn negative_zero_is_the_sign_bit_code() {
    for d in DType::all().filter(|d| d.is_float()) {
        let sign = 1u32 << (d.bits() - 1);
        assert_eq!(d.encode(-0.0).unwrap(), sign, "{d}");
        assert_eq!(d.encode(0.0).unwrap(), 0, "{d}");
        // A tiny negative value rounds to negative zero too.
        if d != DType::F32 {
            assert_eq!(d.encode(-f32::from_bits(1)).unwrap(), sign, "{d}");
        }
    }
    for d in DType::all().filter(|d| !d.is_float()) {
        assert_eq!(d.encode(-0.0).unwrap(), 0, "{d}");
    }
}

#[test]
fn every_finite_code_survives_decode_then_encode() {
    for d in DType::all().filter(|d| d.bits() <= 16) {
        for c in 0..(1u32 << d.bits()) {
            let v = d.decode(c);
            if !v.is_finite() {
                continue;
            }
            assert_eq!(v as f32 as f64, v, "{d}: values fit f32 exactly");
            assert_eq!(d.encode(v as f32).unwrap(), c, "{d} code {c:#x} = {v}");
        }
    }
}

#[test]
fn f32_encode_is_the_identity_on_bits() {
    let mut rng = rand::rng();
    for _ in 0..10_000 {
        let x = f32::from_bits(rng.random());
        if !x.is_nan() {
            assert_eq!(t("f32").encode(x).unwrap(), x.to_bits());
        }
    }
}

/// Round half to even, then clamp: the integer rule, from f64 arithmetic done independently.
fn reference_int_encode(d: DType, x: f32) -> u32 {
    let x = x as f64;
    let f = x.floor();
    if x.is_infinite() {
        return reference_int_encode(d, x.signum() as f32 * 1e30);
    }
    let r = match (x - f).partial_cmp(&0.5).unwrap() {
        std::cmp::Ordering::Less => f,
        std::cmp::Ordering::Greater => f + 1.0,
        std::cmp::Ordering::Equal if f % 2.0 == 0.0 => f,
        std::cmp::Ordering::Equal => f + 1.0,
    };
    let bits = d.bits();
    let (lo, hi) = match d {
        DType::UInt(_) => (0.0, 2f64.powi(bits as i32) - 1.0),
        _ => (
            -(2f64.powi(bits as i32 - 1)),
            2f64.powi(bits as i32 - 1) - 1.0,
        ),
    };
    let v = r.max(lo).min(hi) as i64;
    (v as u64 & ((1u64 << bits) - 1)) as u32
}

#[test]
fn integer_encode_rounds_half_even_and_clamps() {
    let mut rng = rand::rng();
    for d in DType::all().filter(|d| !d.is_float()) {
        let span = d.max_value() - d.min_value();
        let mut inputs: Vec<f32> = (-600..=600).map(|i| i as f32 * 0.25).collect();
        for _ in 0..20_000 {
            inputs.push((d.min_value() + rng.random_range(-0.2..1.2) * span) as f32);
        }
        inputs.extend([
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
            4294967296.0,
        ]);
        for x in inputs {
            assert_eq!(
                d.encode(x).unwrap(),
                reference_int_encode(d, x),
                "{d} encode({x})"
            );
        }
    }
    assert_eq!(t("i4").encode(-8.5).unwrap(), 0b1000);
    assert_eq!(t("i4").encode(-7.5).unwrap(), 0b1000);
    assert_eq!(t("i4").encode(-6.5).unwrap(), 0b1010);
    assert_eq!(t("u2").encode(2.5).unwrap(), 2);
    assert_eq!(t("u2").encode(-3.0).unwrap(), 0);
    assert_eq!(t("u32").encode(4294967296.0).unwrap(), u32::MAX);
    assert_eq!(t("i32").encode(2147483648.0).unwrap(), i32::MAX as u32);
    assert_eq!(t("i32").encode(-2147483648.0).unwrap(), i32::MIN as u32);
    assert_eq!(t("i32").encode(-1.0).unwrap(), u32::MAX);
}

proptest! {
    /// Encoding preserves order: x <= y implies decode(encode(x)) <= decode(encode(y)).
    #[test]
    fn encode_is_monotonic(x in any::<f32>(), y in any::<f32>(), i in 0usize..47) {
        prop_assume!(!x.is_nan() && !y.is_nan());
        let d = DType::all().nth(i).unwrap();
        let (x, y) = if x <= y { (x, y) } else { (y, x) };
        let (a, b) = (d.decode(d.encode(x).unwrap()), d.decode(d.encode(y).unwrap()));
        prop_assert!(a <= b, "{} {} -> {}, {} -> {}", d, x, a, y, b);
    }

    /// The result is never farther from the input than the other neighbour would be.
    #[test]
    fn encode_error_is_within_half_a_step(x in -500f32..500f32, i in 0usize..29) {
        let d = small_floats().chain([DType::F16, DType::BF16]).nth(i).unwrap();
        let v = d.decode(d.encode(x).unwrap());
        let err = (v - x as f64).abs();
        let max = d.max_value();
        if (x as f64).abs() <= max {
            // Some representable value lies on each side of x (or x is exact).
            let values = Nearest::new(d).table;
            let best = values
                .iter()
                .map(|(w, _)| (w - (x as f64).abs()).abs())
                .fold(f64::INFINITY, f64::min);
            prop_assert_eq!(err, best);
        } else {
            prop_assert_eq!(v.abs(), max);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Names

#[test]
fn names_print_as_documented() {
    let cases = [
        (DType::UInt(4), "u4"),
        (DType::Int(6), "i6"),
        (DType::Float { exp: 3, man: 2 }, "f6e3m2"),
        (DType::Float { exp: 2, man: 1 }, "f4e2m1"),
        (DType::Float { exp: 3, man: 4 }, "f8e3m4"),
        (DType::F8E4M3, "f8e4m3"),
        (DType::F8E5M2, "f8e5m2"),
        (DType::F16, "f16"),
        (DType::BF16, "bf16"),
        (DType::F32, "f32"),
        (DType::UInt(32), "u32"),
        (DType::Int(32), "i32"),
        (DType::UInt(8), "u8"),
        (DType::Int(8), "i8"),
    ];
    for (d, name) in cases {
        assert_eq!(d.to_string(), name);
        assert_eq!(name.parse::<DType>().unwrap(), d);
    }
}

#[test]
fn every_type_round_trips_through_its_name() {
    let all: Vec<DType> = DType::all().collect();
    assert_eq!(all.len(), 9 + 8 + 27 + 3);
    for d in &all {
        assert!(d.is_valid(), "{d:?}");
        assert_eq!(d.to_string().parse::<DType>().unwrap(), *d);
    }
    let mut names: Vec<String> = all.iter().map(|d| d.to_string()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), all.len(), "names are distinct");
    let sub: Vec<DType> = DType::all_sub_byte().collect();
    assert_eq!(sub.len(), 7 + 6 + 20);
    assert!(sub.iter().all(|d| d.bits() < 8 && d.is_sub_byte()));
}

#[test]
fn hand_built_ocp_splits_are_not_valid_generic_types() {
    assert!(!DType::Float { exp: 4, man: 3 }.is_valid());
    assert!(!DType::Float { exp: 5, man: 2 }.is_valid());
    assert!(!DType::Float { exp: 0, man: 3 }.is_valid());
    assert!(!DType::UInt(9).is_valid());
    assert!(!DType::Int(1).is_valid());
}

#[test]
fn hand_built_invalid_types_do_not_panic() {
    let odd = [
        DType::UInt(0),
        DType::UInt(9),
        DType::UInt(255),
        DType::Int(0),
        DType::Int(1),
        DType::Int(64),
        DType::Int(255),
        DType::Float { exp: 0, man: 0 },
        DType::Float { exp: 0, man: 7 },
        DType::Float { exp: 9, man: 9 },
        DType::Float { exp: 255, man: 255 },
        DType::Float { exp: 4, man: 3 },
    ];
    for d in odd {
        let _ = (d.bits(), d.kind(), d.code_mask(), d.to_string());
        let _ = (
            d.min_value(),
            d.max_value(),
            d.exponent_bias(),
            d.is_valid(),
        );
        for c in [0, 1, 0x80, u32::MAX] {
            let _ = d.decode(c);
        }
        for x in [0.0, -1.5, 1e30, f32::INFINITY] {
            let _ = d.encode(x);
        }
        if d.bits() <= 8 {
            let _ = d.values();
        }
    }
}

#[test]
fn bad_names_are_errors_with_reasons() {
    let cases = [
        ("i1", "at least 2 bits"),
        ("i0", "at least 2 bits"),
        ("u0", "at least one bit"),
        ("u9", "1..=8 or 32"),
        ("i16", "2..=8 or 32"),
        ("u99999999999999999999999", "1..=8 or 32"),
        ("f9e4m4", "3..=8 bits"),
        ("f2e1m0", "3..=8 bits"),
        ("f3e0m2", "at least one exponent bit"),
        (
            "f4e3m1",
            "1 sign + 3 exponent + 1 mantissa bits = 5 bits, but the name says 4",
        ),
        ("f8", "f8e4m3"),
        ("f6", "f6e2m3"),
        ("f64", "not a VM type"),
        ("f4e2m1x", "fNeEmM"),
        ("u04", "e.g. `u4`"),
        ("u", "e.g. `u4`"),
        ("i-4", "e.g. `i4`"),
        ("foo", "starts with"),
        ("", "empty"),
        ("F16", "did you mean `f16`"),
        ("fp8", "did you mean `f8e4m3`"),
        ("bfloat16", "did you mean `bf16`"),
        ("é", "starts with"),
    ];
    for (name, reason_part) in cases {
        match name.parse::<DType>() {
            Err(DTypeError::UnknownName { name: n, reason }) => {
                assert_eq!(n, name);
                assert!(reason.contains(reason_part), "{name:?}: {reason}");
            }
            other => panic!("{name:?} parsed as {other:?}"),
        }
    }
    let msg = "i1".parse::<DType>().unwrap_err().to_string();
    assert!(
        msg.starts_with("unknown data type `i1`: a signed integer needs"),
        "{msg}"
    );
    assert!(msg.contains("known types are u1..u8"), "{msg}");
    assert!(!msg.contains('\n'));
}

#[test]
fn kinds_and_predicates() {
    assert_eq!(t("u3").kind(), Kind::UInt);
    assert_eq!(t("i3").kind(), Kind::Int);
    assert_eq!(t("f3e1m1").kind(), Kind::Float);
    assert_eq!(Kind::UInt.to_string(), "uint");
    assert!(!t("u3").is_signed() && t("i3").is_signed() && t("f5e2m2").is_signed());
    assert!(t("f5e2m2").is_sub_byte() && !t("u8").is_sub_byte());
    assert_eq!(t("u32").code_mask(), u32::MAX);
    assert_eq!(t("i6").code_mask(), 0x3f);
}

/// Every hand-built invalid type is rejected with a reason naming what is wrong, by
/// `validate`, `encode`, `try_decode` and `values` alike (before: `Int(1)`/`Float { exp: 0 }`
/// decoded to NaN and `encode` gave a made-up code 0).
#[test]
fn invalid_types_are_named_errors() {
    let cases = [
        (DType::UInt(0), "1..=8 or 32 bits, not 0"),
        (DType::UInt(9), "1..=8 or 32 bits, not 9"),
        (DType::Int(0), "2..=8 or 32 bits"),
        (DType::Int(1), "not 1"),
        (DType::Int(64), "not 64"),
        (DType::Float { exp: 0, man: 3 }, "at least one exponent bit"),
        (DType::Float { exp: 8, man: 22 }, "1 + 8 + 22 = 31"),
        (DType::Float { exp: 255, man: 255 }, "1 + 255 + 255 = 511"),
        (DType::Float { exp: 1, man: 0 }, "1 + 1 + 0 = 2"),
        (DType::Float { exp: 4, man: 3 }, "DType::F8E4M3"),
        (DType::Float { exp: 5, man: 2 }, "DType::F8E5M2"),
    ];
    for (d, want) in cases {
        let e = d.validate().unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("{d:?}")) && msg.contains(want),
            "{d:?}: {msg}"
        );
        assert!(
            matches!(d.encode(1.0), Err(DTypeError::Invalid { .. })),
            "{d:?}"
        );
        assert!(
            matches!(d.try_decode(1), Err(DTypeError::Invalid { .. })),
            "{d:?}"
        );
        assert_eq!(d.values(), None, "{d:?}");
        assert!(!d.is_valid());
    }
    for d in DType::all() {
        assert_eq!(d.validate(), Ok(()), "{d}");
        assert_eq!(d.try_decode(0), Ok(d.decode(0)), "{d}");
    }
}

/// Deserializing validates, so an invalid type cannot come in through serde either.
#[test]
fn deserializing_an_invalid_type_fails() {
    for d in DType::all() {
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<DType>(&json).unwrap(), d, "{json}");
    }
    let e = serde_json::from_str::<DType>(r#"{"Int":1}"#).unwrap_err();
    assert!(e.to_string().contains("2..=8 or 32"), "{e}");
    let e = serde_json::from_str::<DType>(r#"{"Float":{"exp":0,"man":2}}"#).unwrap_err();
    assert!(e.to_string().contains("exponent bit"), "{e}");
}

fn any_dtype() -> impl Strategy<Value = DType> {
    prop_oneof![
        any::<u8>().prop_map(DType::UInt),
        any::<u8>().prop_map(DType::Int),
        (any::<u8>(), any::<u8>()).prop_map(|(exp, man)| DType::Float { exp, man }),
        (0u8..20, 0u8..20).prop_map(|(exp, man)| DType::Float { exp, man }),
        Just(DType::F8E4M3),
        Just(DType::F8E5M2),
        Just(DType::F16),
        Just(DType::BF16),
        Just(DType::F32),
    ]
}

proptest! {
    /// Any `DType` value, valid or not: the checked decode/encode/pack APIs answer Ok or a
    /// named error, never panic, and take bounded time (the whole case runs in well under a
    /// second; before, `Float { exp: 8, man: 22 }` went through 2^31 codes in quantization).
    #[test]
    fn any_dtype_is_ok_or_a_named_error(
        d in any_dtype(),
        code in any::<u32>(),
        x in any::<f32>(),
        codes in proptest::collection::vec(any::<u32>(), 0..40),
    ) {
        use tilus_core::storage::{try_pack, try_packed_len, try_unpack, StorageError};
        let start = std::time::Instant::now();
        let valid = d.validate().is_ok();
        match d.try_decode(code) {
            Ok(v) => prop_assert!(valid && (v.is_finite() || d.has_nan() || d.has_inf())),
            Err(e) => prop_assert!(!valid && e.to_string().contains("not a valid data type")),
        }
        match d.encode(x) {
            Ok(c) => prop_assert!(valid && c & !d.code_mask() == 0),
            Err(DTypeError::NaN { .. }) => prop_assert!(valid && x.is_nan()),
            Err(e) => {
                let invalid = matches!(e, DTypeError::Invalid { .. });
                prop_assert!(!valid && invalid, "{}", e);
            }
        }
        match try_pack(d, &codes) {
            Ok(bytes) => {
                prop_assert!(valid);
                prop_assert_eq!(bytes.len(), try_packed_len(d, codes.len()).unwrap());
                let back = try_unpack(d, &bytes, codes.len()).unwrap();
                let masked: Vec<u32> = codes.iter().map(|c| c & d.code_mask()).collect();
                prop_assert_eq!(back, masked);
            }
            Err(e) => {
                prop_assert!(!valid);
                let named = matches!(e, StorageError::DType(_));
                prop_assert!(named, "{}", e);
                prop_assert!(e.to_string().starts_with("argument `dtype`"), "{}", e);
            }
        }
        prop_assert!(try_unpack(d, &[], 1).is_err());
        if let Some(values) = d.values() {
            prop_assert!(valid);
            prop_assert_eq!(values.len(), 1usize << d.bits());
        }
        prop_assert!(start.elapsed() < std::time::Duration::from_secs(2));
    }
}

#[test]
fn fill_codes_keep_infinities_where_the_type_has_them() {
    use tilus_core::DType;
    assert_eq!(DType::F16.fill_code(f64::NEG_INFINITY), Ok(0xfc00));
    assert_eq!(DType::F16.fill_code(f64::INFINITY), Ok(0x7c00));
    assert_eq!(DType::BF16.fill_code(f64::NEG_INFINITY), Ok(0xff80));
    assert_eq!(DType::F32.fill_code(f64::NEG_INFINITY), Ok(0xff80_0000));
    assert_eq!(DType::F8E5M2.fill_code(f64::NEG_INFINITY), Ok(0xfc));
    assert!(DType::F8E5M2.decode(0xfc).is_infinite());
    // No infinity: saturate like every conversion; integers clamp exactly.
    let e4m3 = DType::F8E4M3.fill_code(f64::NEG_INFINITY).unwrap();
    assert_eq!(DType::F8E4M3.decode(e4m3), -DType::F8E4M3.max_value());
    assert_eq!(DType::Int(8).fill_code(f64::NEG_INFINITY), Ok(0x80));
    assert_eq!(DType::Int(32).fill_code(16777217.0), Ok(16777217));
    assert_eq!(DType::UInt(4).fill_code(-3.0), Ok(0));
    assert_eq!(DType::F16.fill_code(1.5), DType::F16.encode(1.5));
    assert!(DType::F16.fill_code(f64::NAN).is_err());
}
