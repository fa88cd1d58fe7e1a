//! The result type of reductions, shared by the type inference, the verifier and the emitters.

use super::{ReduceOp, RegisterType, VarType};
use crate::DType;

impl ReduceOp {
    /// The dtype of the result of reducing `x` elements: `i32` indices for `ArgMax`, else `x`.
    pub fn result_dtype(self, x: DType) -> DType {
        match self {
            ReduceOp::ArgMax => DType::Int(32),
            _ => x,
        }
    }
}

/// The type of `op(x, dim)`: a register tensor in `x.layout.reduce(&[dim])`, or `Unknown` when
/// `x` is not a register tensor or `dim` is out of range (the verifier reports why).
pub(crate) fn reduce_type(x: &VarType, op: ReduceOp, dim: usize) -> VarType {
    match x {
        VarType::Register(r) => match r.layout.reduce(&[dim]) {
            Ok(layout) => VarType::Register(RegisterType {
                dtype: op.result_dtype(r.dtype),
                layout,
            }),
            Err(_) => VarType::Unknown,
        },
        _ => VarType::Unknown,
    }
}
