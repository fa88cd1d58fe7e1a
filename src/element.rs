//! Host element types the library kernels compute in. Kept apart from any one kernel so that
//! kernels depend on it, not on each other (`qmatmul` used to import this from `linear`).

use crate::DType;
use half::{bf16, f16};

/// An activation element type: f16 or bf16.
pub trait Activation: Copy {
    const DTYPE: DType;
    fn to_f32(self) -> f32;
    fn from_f32(v: f32) -> Self;
}

impl Activation for f16 {
    const DTYPE: DType = DType::F16;
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Activation for bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}
