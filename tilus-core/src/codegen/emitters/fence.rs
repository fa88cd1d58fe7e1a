//! `fence()`: a GPU-scope memory fence (`ir::Instruction::Fence`).
//!
//! Emitted as `fence.acq_rel.gpu` in inline PTX (sm_70 and later), the lighter of the two
//! fences `__threadfence()` may stand for (`fence.sc.gpu`): release and acquire ordering is what
//! the counter idioms need, not a single total order of fences. The `"memory"` clobber keeps
//! the CUDA compiler from moving memory accesses across it.

use crate::codegen::context::Ctx;

pub(crate) fn emit(cx: &mut Ctx) {
    cx.w.line("asm volatile(\"fence.acq_rel.gpu;\\n\" ::: \"memory\");");
}
