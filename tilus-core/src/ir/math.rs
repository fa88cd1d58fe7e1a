//! The operators of the elementwise math, comparison and selection instructions
//! ([`super::Instruction::Unary`], [`super::Instruction::Compare`]): their exact definitions and
//! the accuracy the generated code guarantees.

/// A unary elementwise function (`Instruction::Unary`). Named `MathOp` so it does not clash
/// with the scalar [`super::UnaryOp`].
///
/// Float ops take f16, bf16 and f32 tensors. The GPU decodes each element to `float`, calls the
/// CUDA math library's accurate function (never a fast-math intrinsic) and rounds the `float`
/// result to the dtype (to nearest even, an overflow an infinity: `DType::round`). The
/// interpreter computes the exact value in f64 from the same `float` input, rounds it to f32,
/// then to the dtype. Before the final rounding the two differ by at most [`MathOp::max_ulp`]
/// f32 ulps (the CUDA C Programming Guide's table of maximum ulp errors of single-precision
/// functions, measured against the correctly rounded result, for results in f32's normal
/// range):
///
/// | op | definition | GPU | max ulp |
/// | --- | --- | --- | --- |
/// | `exp` | e^x | `expf` | 2 |
/// | `exp2` | 2^x | `exp2f` | 2 |
/// | `log` | ln x | `logf` | 1 |
/// | `log2` | log2 x | `log2f` | 1 |
/// | `sqrt` | √x | `sqrtf` (correctly rounded, `-prec-sqrt=true` is NVRTC's default) | 0 |
/// | `rsqrt` | 1/√x | `rsqrtf` | 2 |
/// | `abs` | \|x\| | `fabsf` | 0 |
/// | `tanh` | tanh x | `tanhf` | 2 |
/// | `sigmoid` | 1/(1+e^-x) | `1.0f / (1.0f + expf(-x))` | 6 |
/// | `silu` | x·sigmoid(x) | `x / (1.0f + expf(-x))` | 6 |
/// | `gelu` | 0.5x(1+tanh(√(2/π)(x+0.044715x³))) | `x / (1.0f + expf(-t))`, `t = x·(k0 + k1·x²)` | 6 + 4\|t\| |
/// | `sin`, `cos` | sin x, cos x | `sinf`, `cosf` | 2 |
/// | `floor` | ⌊x⌋ | `floorf` | 0 |
/// | `round` | nearest integer, ties to even | `rintf` | 0 |
/// | `not` | bitwise not (integers) | `~` | exact |
/// | `popc` | number of set bits of the code (integers) | `__popc` | exact |
///
/// The composed bounds: `expf` is within 2 ulp (relative error 4u, u = 2^-24), the sum `1 + e`
/// and the IEEE division (`-prec-div=true`, NVRTC's default) add u each, so the quotient is
/// within 6u relative, 6 ulp. `gelu` uses the identity `0.5(1 + tanh(t/2)) = 1/(1 + e^-t)` with
/// `t = 2√(2/π)(x + 0.044715x³)`, which avoids the cancellation of `1 + tanh` for negative `x`;
/// `t` is computed with relative error 4u (x², one FMA with the rounded constants, one
/// product), which `e^-t` turns into a relative error of 4u·|t|. A NaN result (`log` or `sqrt`
/// of a negative number, `sin` of an infinity) is an interpreter error. `popc` of an `i2` code
/// `0b11` (2, above `i2`'s maximum) is an interpreter error, like any integer overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum MathOp {
    Exp,
    Exp2,
    Log,
    Log2,
    Sqrt,
    Rsqrt,
    Abs,
    Tanh,
    Sigmoid,
    Silu,
    Gelu,
    Sin,
    Cos,
    Floor,
    Round,
    Not,
    Popc,
}

/// `2·√(2/π)` and `2·√(2/π)·0.044715`: `t = x·(GELU_K0 + GELU_K1·x²)`.
pub const GELU_K0: f64 = 1.595_769_121_605_730_7;
pub const GELU_K1: f64 = 0.071_354_816_272_600_2;

impl MathOp {
    pub const ALL: [MathOp; 17] = [
        MathOp::Exp,
        MathOp::Exp2,
        MathOp::Log,
        MathOp::Log2,
        MathOp::Sqrt,
        MathOp::Rsqrt,
        MathOp::Abs,
        MathOp::Tanh,
        MathOp::Sigmoid,
        MathOp::Silu,
        MathOp::Gelu,
        MathOp::Sin,
        MathOp::Cos,
        MathOp::Floor,
        MathOp::Round,
        MathOp::Not,
        MathOp::Popc,
    ];

    /// True for the bit operations on integer tensors (`not`, `popc`); the others take floats.
    pub fn is_integer(self) -> bool {
        matches!(self, MathOp::Not | MathOp::Popc)
    }

    /// The exact value of the float op at `x`, in f64 (NaN where undefined). `gelu`, `sigmoid`
    /// and `silu` use the forms without cancellation, which are exact identities.
    pub fn eval_f64(self, x: f64) -> f64 {
        let sigmoid = |t: f64| 1.0 / (1.0 + (-t).exp());
        match self {
            MathOp::Exp => x.exp(),
            MathOp::Exp2 => x.exp2(),
            MathOp::Log => x.ln(),
            MathOp::Log2 => x.log2(),
            MathOp::Sqrt => x.sqrt(),
            MathOp::Rsqrt => 1.0 / x.sqrt(),
            MathOp::Abs => x.abs(),
            MathOp::Tanh => x.tanh(),
            MathOp::Sigmoid => sigmoid(x),
            MathOp::Silu => x * sigmoid(x),
            MathOp::Gelu => x * sigmoid(x * (GELU_K0 + GELU_K1 * x * x)),
            MathOp::Sin => x.sin(),
            MathOp::Cos => x.cos(),
            MathOp::Floor => x.floor(),
            MathOp::Round => x.round_ties_even(),
            MathOp::Not | MathOp::Popc => f64::NAN,
        }
    }

    /// The largest distance, in f32 ulps, between the GPU's f32 result at `x` and the correctly
    /// rounded one (see the table above; for results in f32's normal range).
    pub fn max_ulp(self, x: f32) -> u32 {
        match self {
            MathOp::Exp | MathOp::Exp2 | MathOp::Rsqrt | MathOp::Tanh => 2,
            MathOp::Sin | MathOp::Cos => 2,
            MathOp::Log | MathOp::Log2 => 1,
            MathOp::Sigmoid | MathOp::Silu => 6,
            MathOp::Gelu => {
                let x = x as f64;
                let t = (x * (GELU_K0 + GELU_K1 * x * x)).abs();
                6 + (4.0 * t).ceil().min(1e9) as u32
            }
            MathOp::Sqrt
            | MathOp::Abs
            | MathOp::Floor
            | MathOp::Round
            | MathOp::Not
            | MathOp::Popc => 0,
        }
    }
}

/// A comparison (`Instruction::Compare`); the result is 1 where it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl CmpOp {
    pub const ALL: [CmpOp; 6] = [
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
        CmpOp::Eq,
        CmpOp::Ne,
    ];

    pub fn holds(self, x: f64, y: f64) -> bool {
        match self {
            CmpOp::Lt => x < y,
            CmpOp::Le => x <= y,
            CmpOp::Gt => x > y,
            CmpOp::Ge => x >= y,
            CmpOp::Eq => x == y,
            CmpOp::Ne => x != y,
        }
    }

    /// The C operator.
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
        }
    }
}
