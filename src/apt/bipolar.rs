//! Bipolar-INT: a `b`-bit code `x` (bits `x_0..x_{b-1}`) reads every bit as -1 or +1,
//!
//! ```text
//! value(x) = Σ_i (2·x_i - 1)·2^i = 2·x - (2^b - 1)
//! ```
//!
//! so the values are the odd integers of `[-(2^b - 1), 2^b - 1]`, symmetric around zero (no
//! zero, unlike signed INT). A product of two bipolar bits is `(2a - 1)(2b - 1) = 4ab - 2a - 2b
//! + 1`, so a bipolar dot product needs only AND and popcounts (the 1-bit tensor cores'
//! `.and.popc`): `Σ_k v_a v_w = 4·Σ x_a x_w - 2(2^A - 1)·Σ x_w - 2(2^W - 1)·Σ x_a + K(2^A - 1)(2^W - 1)`
//! for codes of `A` and `W` bits (see [`super::matrix`]).
//!
//! **From signed INT, losslessly.** A signed `b`-bit integer `q` in `[-2^(b-1), 2^(b-1) - 1]`
//! with its two's-complement code `c`: flipping the sign bit, `x = c XOR 2^(b-1)`, gives the
//! unsigned `x = q + 2^(b-1)`, whose bipolar value is `v = 2x - (2^b - 1) = 2q + 1`. Hence
//! `q = (v - 1) / 2`, and a dequantization rule carries over exactly:
//! - with an additive zero, `w = s·q + z`: `w = (s/2)·v + (z - s/2)`, i.e. scale `s/2` and zero
//!   `z - s/2` (the rule of the APT-LLM paper);
//! - with a zero point in codes, `w = s·(q - z)`: `w = (s/2)·(v - (2z + 1))`, i.e. scale `s/2`
//!   and zero point `2z + 1`.
//!
//! [`Bipolar::from_signed_code`] and [`Bipolar::from_signed_affine`] implement them; the tests
//! check every `q` of every width.

use super::AptError;

/// The bipolar-INT format of `bits` bits (1..=8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bipolar {
    bits: u32,
}

impl Bipolar {
    /// The format of `bits` bits, 1 to 8.
    pub fn new(bits: u32) -> Result<Bipolar, AptError> {
        if !(1..=8).contains(&bits) {
            return Err(AptError::Bits { arg: "bits", bits });
        }
        Ok(Bipolar { bits })
    }

    pub fn bits(self) -> u32 {
        self.bits
    }

    /// The largest value, `2^bits - 1` (the smallest is its negation).
    pub fn max(self) -> i32 {
        (1 << self.bits) - 1
    }

    /// The value of `code` (its low `bits` bits): `2·code - (2^bits - 1)`.
    pub fn decode(self, code: u32) -> Result<i32, AptError> {
        if code >> self.bits != 0 {
            return Err(AptError::Code {
                code,
                bits: self.bits,
            });
        }
        Ok(2 * code as i32 - self.max())
    }

    /// The code of `value`, an odd integer with `|value| <= 2^bits - 1`.
    pub fn encode(self, value: i64) -> Result<u32, AptError> {
        let max = self.max() as i64;
        if value % 2 == 0 || value.abs() > max {
            return Err(AptError::Value {
                value,
                bits: self.bits,
                max,
            });
        }
        Ok(((value + max) / 2) as u32)
    }

    /// The nearest value to the real `t` (odd, clamped to the range): `2·floor(t/2) + 1`.
    /// Computed on the f32 `t` exactly as the activation kernel does.
    pub fn nearest(self, t: f32) -> i32 {
        let v = 2.0 * (t * 0.5).floor() + 1.0;
        let max = self.max() as f32;
        v.clamp(-max, max) as i32
    }

    /// The bipolar code of the signed `bits`-bit integer `q`: its two's-complement code with
    /// the sign bit flipped (`q + 2^(bits-1)`); its value is `2q + 1`.
    pub fn from_signed_code(self, q: i32) -> Result<u32, AptError> {
        let half = 1i32 << (self.bits - 1);
        if q < -half || q >= half {
            return Err(AptError::Value {
                value: q as i64,
                bits: self.bits,
                max: (half - 1) as i64,
            });
        }
        let mask = (1u32 << self.bits) - 1;
        Ok((q as u32 & mask) ^ half as u32)
    }

    /// `(scale, zero)` of the bipolar codes for signed codes dequantized as `w = s·q + z`:
    /// `(s/2, z - s/2)`, so that `w = scale·v + zero`.
    pub fn from_signed_affine(s: f64, z: f64) -> (f64, f64) {
        (s / 2.0, z - s / 2.0)
    }

    /// `(scale, zero point)` for signed codes dequantized as `w = s·(q - z)`: `(s/2, 2z + 1)`,
    /// so that `w = scale·(v - zero point)`.
    pub fn from_signed_zero_point(s: f64, z: i32) -> (f64, i32) {
        (s / 2.0, 2 * z + 1)
    }
}
