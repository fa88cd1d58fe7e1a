//! Instruction emitters, one module per family. Each is a set of functions over the emitter
//! state ([`super::context::Ctx`]); the driver (`super::program`) dispatches to them.
//!
//! | family | instructions |
//! | --- | --- |
//! | [`global`] | `LoadGlobal`, `StoreGlobal` (vectorized, masked by the view) |
//! | [`shared`] | `LoadShared` (`ldmatrix` when the layout allows), `StoreShared`, `CopyAsync` |
//! | [`elementwise`] | `AllocateRegister`, `Binary`, `MulAdd`, `Neg`, `Cast`, `View`, `Print` of tensors |
//! | [`cast_pair`] | `Cast` of f32 to f16/bf16 pairs (`cvt.rn.satfinite.*x2.f32`) |
//! | [`math`] | `Unary` (`exp`, `sqrt`, `not`, ...), bit operations of `Binary`, `Compare`, `Select`, `Arange` |
//! | [`mma`] | `Dot` (`mma.sync` per the target, or the thread-local fallback) |
//! | [`bmma`] | the 1-bit `mma.m16n8k256 .and.popc` helper of a u1 `Dot` |
//! | [`plane_dot`] | `PlaneDot` (full adders on whole words, then `popc` per remaining word) |
//! | [`reduce`] | `Reduce` (thread-local, warp shuffles, shared scratch) |
//! | [`wgmma`] | `Dot` with shared operands (`wgmma.mma_async`, sm_90a) |
//! | [`tma`] | `Mbarriers`, `TmaLoad` (`cp.async.bulk.tensor` through a tensor map), `MbarrierArrive`, `MbarrierWait` (sm_90) |
//! | [`addressing`] | `Item`, `Gather`, `GatherRows`, `Scatter`, `ScatterRows`, `Atomic` (data-dependent addresses) |
//! | [`fence`] | `Fence` (`fence.acq_rel.gpu`), `GridDependency` (`griddepcontrol`, sm_90) |

pub(crate) mod addressing;
pub(crate) mod bmma;
pub(crate) mod cast_pair;
pub(crate) mod elementwise;
pub(crate) mod fence;
pub(crate) mod global;
pub(crate) mod math;
pub(crate) mod mma;
pub(crate) mod plane_dot;
pub(crate) mod reduce;
pub(crate) mod shared;
pub(crate) mod tma;
pub(crate) mod wgmma;
