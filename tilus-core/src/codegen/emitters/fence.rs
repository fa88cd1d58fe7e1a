//! `fence()`: a GPU-scope memory fence (`ir::Instruction::Fence`), and the grid dependency
//! control of a programmatic dependent launch (`ir::Instruction::GridDependency`).
//!
//! Emitted as `fence.acq_rel.gpu` in inline PTX (sm_70 and later), the lighter of the two
//! fences `__threadfence()` may stand for (`fence.sc.gpu`): release and acquire ordering is what
//! the counter idioms need, not a single total order of fences. The `"memory"` clobber keeps
//! the CUDA compiler from moving memory accesses across it.

use crate::codegen::context::Ctx;
use crate::ir::GridDependency;

pub(crate) fn emit(cx: &mut Ctx) {
    cx.w.line("asm volatile(\"fence.acq_rel.gpu;\\n\" ::: \"memory\");");
}

/// `wait_prior_grid()` / `launch_dependents()` (`ir::GridDependency`): `griddepcontrol` in
/// inline PTX (sm_90). The wait carries the `"memory"` clobber, so that no load of the prior
/// kernel's output is hoisted above it; the trigger orders nothing and needs none. Below sm_90
/// the source compiles to nothing: launches there are never dependent, so both are no-ops, and
/// one kernel serves every architecture.
pub(crate) fn grid_dependency(cx: &mut Ctx, g: GridDependency) {
    let ptx = match g {
        GridDependency::Wait => "asm volatile(\"griddepcontrol.wait;\\n\" ::: \"memory\");",
        GridDependency::LaunchDependents => {
            "asm volatile(\"griddepcontrol.launch_dependents;\\n\");"
        }
    };
    cx.w.line("#if __CUDA_ARCH__ >= 900");
    cx.w.line(ptx);
    cx.w.line("#endif");
}
