//! The one type inference of the IR: the type of the variable an instruction defines, from the
//! types of its operands. The builder gives new variables these types; the verifier checks that
//! every defined variable has exactly this type (so a hand-built program cannot disagree with
//! what the instruction produces). Checking that the operands themselves are acceptable is the
//! verifier's job: here a wrong operand only makes the result [`VarType::Unknown`].

use super::{GlobalType, Instruction, RegisterType, ScalarType, SharedType, VarId, VarType};
use crate::layout::SharedLayout;

impl Instruction {
    /// Each variable this instruction defines, with its type; `ty` gives the operands' types.
    pub fn output_types(&self, ty: &dyn Fn(VarId) -> VarType) -> Vec<(VarId, VarType)> {
        let register = |dtype, layout| VarType::Register(RegisterType { dtype, layout });
        let one = |out: &VarId, t: VarType| vec![(*out, t)];
        match self {
            Instruction::BlockIndices { outs } => outs
                .iter()
                .map(|o| (*o, VarType::Scalar(ScalarType::I32)))
                .collect(),
            // A scratch tensor is addressed like a mutable view of its own allocation.
            Instruction::AllocateGlobal { out, dtype, shape } => one(
                out,
                VarType::Global(GlobalType {
                    dtype: *dtype,
                    ptr: *out,
                    mutable: true,
                    shape: shape.clone(),
                }),
            ),
            Instruction::AllocateShared { out, dtype, layout } => one(
                out,
                VarType::Shared(SharedType {
                    dtype: *dtype,
                    layout: layout.clone(),
                }),
            ),
            Instruction::AllocateRegister {
                out, dtype, layout, ..
            } => one(out, register(*dtype, layout.clone())),
            Instruction::Mbarriers { out, count, .. } => one(
                out,
                VarType::Shared(SharedType {
                    dtype: crate::DType::UInt(32),
                    layout: crate::layout::SharedLayout::row_major(&[*count as usize, 2]),
                }),
            ),
            Instruction::ViewGlobal {
                out,
                ptr,
                dtype,
                shape,
            } => one(
                out,
                VarType::Global(GlobalType {
                    dtype: *dtype,
                    ptr: *ptr,
                    mutable: matches!(ty(*ptr), VarType::Pointer { mutable: true, .. }),
                    shape: shape.clone(),
                }),
            ),
            Instruction::LoadGlobal {
                out, src, layout, ..
            } => one(
                out,
                match ty(*src) {
                    VarType::Global(g) => register(g.dtype, layout.clone()),
                    _ => VarType::Unknown,
                },
            ),
            Instruction::LoadShared {
                out, src, layout, ..
            } => one(
                out,
                match ty(*src) {
                    VarType::Shared(s) => register(s.dtype, layout.clone()),
                    _ => VarType::Unknown,
                },
            ),
            // Slicing keeps the trailing strides, like tiles of a lower rank do.
            Instruction::SliceShared {
                out, src, shape, ..
            } => one(
                out,
                match ty(*src) {
                    VarType::Shared(s) => {
                        let skip = s.layout.strides.len().saturating_sub(shape.len());
                        VarType::Shared(SharedType {
                            dtype: s.dtype,
                            layout: SharedLayout {
                                shape: shape.clone(),
                                strides: s.layout.strides[skip..].to_vec(),
                                swizzle: s.layout.swizzle,
                            },
                        })
                    }
                    _ => VarType::Unknown,
                },
            ),
            Instruction::PermuteShared { out, src, dims } => one(
                out,
                match ty(*src) {
                    VarType::Shared(s) => match s.layout.permute(dims) {
                        Ok(layout) => VarType::Shared(SharedType {
                            dtype: s.dtype,
                            layout,
                        }),
                        Err(_) => VarType::Unknown,
                    },
                    _ => VarType::Unknown,
                },
            ),
            // Elementwise results have the first operand's type; `dot` has the accumulator's.
            Instruction::Binary { out, lhs: x, .. }
            | Instruction::MulAdd { out, a: x, .. }
            | Instruction::Neg { out, x }
            | Instruction::Unary { out, x, .. }
            | Instruction::Select { out, a: x, .. }
            | Instruction::Scan { out, x, .. }
            | Instruction::Dot { out, c: x, .. }
            | Instruction::DotAsync { out, c: x, .. } => one(out, ty(*x)),
            Instruction::Cast {
                out,
                x,
                dtype,
                layout,
                ..
            } => one(
                out,
                match (ty(*x), layout) {
                    (VarType::Register(_), Some(l)) => register(*dtype, l.clone()),
                    (VarType::Register(r), None) => register(*dtype, r.layout),
                    _ => VarType::Unknown,
                },
            ),
            Instruction::View {
                out, dtype, layout, ..
            } => one(out, register(*dtype, layout.clone())),
            // A mask of the left operand's shape and layout.
            Instruction::Compare { out, lhs, .. } => one(
                out,
                match ty(*lhs) {
                    VarType::Register(r) => register(crate::DType::UInt(1), r.layout),
                    _ => VarType::Unknown,
                },
            ),
            Instruction::Arange { out, layout, .. } => {
                one(out, register(crate::DType::Int(32), layout.clone()))
            }
            Instruction::Reduce { out, x, op, dim } => {
                one(out, super::reduce_type(&ty(*x), *op, *dim))
            }
            Instruction::PlaneDot { out, w, dim, .. } => one(
                out,
                match ty(*w) {
                    VarType::Register(r) => match r.layout.reduce(&[0, *dim]) {
                        Ok(layout) if *dim > 0 => register(crate::DType::Int(32), layout),
                        _ => VarType::Unknown,
                    },
                    _ => VarType::Unknown,
                },
            ),
            Instruction::Item { .. }
            | Instruction::Gather { .. }
            | Instruction::Lookup { .. }
            | Instruction::GatherRows { .. }
            | Instruction::Scatter { .. }
            | Instruction::ScatterRows { .. }
            | Instruction::Atomic { .. } => self.addressing_output_types(ty),
            Instruction::StoreGlobal { .. }
            | Instruction::StoreShared { .. }
            | Instruction::CopyAsync { .. }
            | Instruction::CopyAsyncCommitGroup
            | Instruction::CopyAsyncWaitGroup { .. }
            | Instruction::DotWait { .. }
            | Instruction::TmaLoad { .. }
            | Instruction::TmaStore { .. }
            | Instruction::TmaStoreWait
            | Instruction::MbarrierArrive { .. }
            | Instruction::MbarrierWait { .. }
            | Instruction::Synchronize
            | Instruction::Fence
            | Instruction::GridDependency(_)
            | Instruction::Exit
            | Instruction::Print { .. } => Vec::new(),
        }
    }
}
