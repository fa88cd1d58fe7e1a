//! Exact decoding and encoding of binary floating-point formats narrower than `f32`.
//!
//! One parameterised format covers the generic `fNeEmM` types and the two OCP FP8 types; they
//! differ only in which codes are special. The encoder works on the exact binary value of the
//! `f32` input (integer significand and power-of-two exponent), so rounding needs no floating
//! point arithmetic and no tolerance: it is exact by construction, and the tests check it against
//! a brute-force nearest-value search.

/// Which codes of a format are not finite numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Specials {
    /// None: every code is a finite number (the generic `fNeEmM`, all-ones exponent included).
    Finite,
    /// OCP e4m3fn: only S.1111.111 is NaN; there are no infinities.
    AllOnesNan,
    /// IEEE 754: an all-ones exponent is infinity (mantissa 0) or NaN (mantissa != 0).
    Ieee,
}

/// A sign / exponent / mantissa format with `bias = 2^(exp-1) - 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FloatFormat {
    pub exp: u32,
    pub man: u32,
    pub specials: Specials,
}

/// `2^k` as an exact `f64` (every exponent any supported format reaches is in the normal range).
fn pow2(k: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&k));
    f64::from_bits(((k + 1023) as u64) << 52)
}

impl FloatFormat {
    pub fn bias(self) -> i32 {
        (1 << (self.exp - 1)) - 1
    }

    fn sign_bit(self) -> u32 {
        1 << (self.exp + self.man)
    }

    /// Magnitude code (sign bit clear) of the largest finite value.
    pub fn max_finite_code(self) -> u32 {
        let all_ones = self.sign_bit() - 1;
        match self.specials {
            Specials::Finite => all_ones,
            Specials::AllOnesNan => all_ones - 1,
            // Largest exponent below all-ones, mantissa all ones.
            Specials::Ieee => all_ones - (1 << self.man),
        }
    }

    /// Value of `code` (bits above the format's width are ignored).
    pub fn decode(self, code: u32) -> f64 {
        let code = code & ((self.sign_bit() << 1) - 1);
        let mag = code & (self.sign_bit() - 1);
        let negative = code & self.sign_bit() != 0;
        let e = mag >> self.man;
        let m = mag & ((1 << self.man) - 1);
        let e_all_ones = (1 << self.exp) - 1;
        match self.specials {
            Specials::Ieee if e == e_all_ones => {
                return match (m, negative) {
                    (0, false) => f64::INFINITY,
                    (0, true) => f64::NEG_INFINITY,
                    _ => f64::NAN,
                };
            }
            Specials::AllOnesNan if mag == self.sign_bit() - 1 => return f64::NAN,
            _ => {}
        }
        let bias = self.bias();
        let man = self.man as i32;
        // Both products are exact: a small integer times a power of two.
        let v = if e == 0 {
            m as f64 * pow2(1 - bias - man)
        } else {
            ((1u32 << self.man) + m) as f64 * pow2(e as i32 - bias - man)
        };
        if negative {
            -v
        } else {
            v
        }
    }

    /// Code nearest to `x`: round to nearest, ties to the even code, saturate to the largest
    /// finite magnitude (infinities too). `x` must not be NaN. A negative input that rounds to
    /// zero (and `-0.0`) gives the sign-bit code, as IEEE rounding does.
    pub fn encode(self, x: f32) -> u32 {
        debug_assert!(!x.is_nan());
        let bits = x.to_bits();
        let sign = if bits >> 31 != 0 { self.sign_bit() } else { 0 };
        let abs = bits & 0x7fff_ffff;
        if abs == 0 {
            return sign;
        }
        if abs >= 0x7f80_0000 {
            return sign | self.max_finite_code();
        }
        // |x| = sig * 2^e2 exactly.
        let f32_exp = (abs >> 23) as i32;
        let frac = (abs & 0x7f_ffff) as u64;
        let (sig, e2) = if f32_exp == 0 {
            (frac, -149)
        } else {
            (frac | 1 << 23, f32_exp - 150)
        };
        // floor(log2 |x|).
        let log2 = e2 + (63 - sig.leading_zeros() as i32);
        // Smallest normal exponent; below it the spacing stays that of the subnormals.
        let e_min = 1 - self.bias();
        let te = log2.max(e_min);
        // Target spacing is 2^qe; k = |x| / 2^qe is the magnitude in units of that spacing.
        let qe = te - self.man as i32;
        // Magnitude codes grow by one per step of 2^qe inside a binade, and the carry k = 2^(M+1)
        // lands exactly on the next binade's first code, so code = base + k holds throughout
        // (subnormals included: base is 0 there).
        let base = ((te - e_min) as u64) << self.man;
        let code = if qe <= e2 {
            base + (sig << (e2 - qe))
        } else {
            let shift = (qe - e2) as u32;
            if shift > 40 {
                // sig < 2^24, far below half a step: rounds to zero.
                0
            } else {
                let down = base + (sig >> shift);
                let rem = sig & ((1u64 << shift) - 1);
                let half = 1u64 << (shift - 1);
                // The next code up is always down + 1; ties go to whichever code is even.
                if rem > half || (rem == half && down & 1 == 1) {
                    down + 1
                } else {
                    down
                }
            }
        };
        sign | code.min(self.max_finite_code() as u64) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    const F16: FloatFormat = FloatFormat {
        exp: 5,
        man: 10,
        specials: Specials::Ieee,
    };
    const BF16: FloatFormat = FloatFormat {
        exp: 8,
        man: 7,
        specials: Specials::Ieee,
    };

    /// The exact encoder, run on IEEE half formats, must agree with the `half` crate wherever
    /// `half` does not overflow to infinity (where we saturate instead).
    #[test]
    fn generic_encoder_agrees_with_half_crate() {
        let mut rng = rand::rng();
        for _ in 0..200_000 {
            let x = f32::from_bits(rng.random());
            if x.is_nan() {
                continue;
            }
            let h = half::f16::from_f32(x);
            if !h.is_infinite() {
                assert_eq!(F16.encode(x), h.to_bits() as u32, "f16 {x:e}");
            }
            let b = half::bf16::from_f32(x);
            if !b.is_infinite() {
                assert_eq!(BF16.encode(x), b.to_bits() as u32, "bf16 {x:e}");
            }
        }
    }

    #[test]
    fn decode_agrees_with_half_crate_for_every_code() {
        for c in 0..=u16::MAX {
            let want = half::f16::from_bits(c).to_f64();
            let got = F16.decode(c as u32);
            assert!(want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()));
            let want = half::bf16::from_bits(c).to_f64();
            let got = BF16.decode(c as u32);
            assert!(want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()));
        }
    }

    #[test]
    fn max_finite_codes() {
        let e4m3 = FloatFormat {
            exp: 4,
            man: 3,
            specials: Specials::AllOnesNan,
        };
        let e5m2 = FloatFormat {
            exp: 5,
            man: 2,
            specials: Specials::Ieee,
        };
        assert_eq!(e4m3.max_finite_code(), 0x7e);
        assert_eq!(e5m2.max_finite_code(), 0x7b);
        assert_eq!(F16.max_finite_code(), 0x7bff);
        assert_eq!(F16.decode(0x7bff), 65504.0);
    }

    /// With no mantissa bits, "ties to even" must still pick the even code, which is then a
    /// property of the exponent field rather than of the (absent) mantissa.
    #[test]
    fn ties_to_even_code_without_mantissa_bits() {
        let f = FloatFormat {
            exp: 2,
            man: 0,
            specials: Specials::Finite,
        };
        // Codes 0..=3: 0, 1, 2, 4.
        let values: Vec<f64> = (0..4).map(|c| f.decode(c)).collect();
        assert_eq!(values, [0.0, 1.0, 2.0, 4.0]);
        assert_eq!(f.encode(0.5), 0);
        assert_eq!(f.encode(1.5), 2);
        assert_eq!(f.encode(3.0), 2);
        assert_eq!(f.encode(3.0001), 3);
    }
}
