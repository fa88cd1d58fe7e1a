//! Which block barriers of a program with a shared-operand wgmma carry the async-proxy fence.
//!
//! The tensor cores read a wgmma's shared operands through the async proxy. Shared memory the
//! threads wrote through the generic proxy (stores, `cp.async`, scatters, atomics, the scratch
//! of reductions, mbarrier initialisation) is visible to those reads only after each writing
//! thread's `fence.proxy.async.shared::cta`, then the barrier; the code generator puts the
//! fence right before the barrier. A barrier that no such write can precede since the last
//! fenced one, on any path, orders only reads and async-proxy writes (the copy engine's, which
//! complete on mbarriers) and needs none: the warpgroup gemv's k loop, whose ring the copy
//! engine fills, then pays one `MEMBAR` and one `FENCE.VIEW.ASYNC.S` less per step (perf
//! note 58).

use std::collections::HashSet;

use crate::ir::{Instruction, Stmt, StmtKind};

/// The `Synchronize` instructions of `body` that no generic-proxy shared write can precede
/// since the last fenced barrier, by address (the code generator emits from the same program;
/// a barrier it does not find here keeps its fence).
pub(crate) fn unfenced_barriers(body: &[Stmt]) -> HashSet<*const Instruction> {
    let mut clean = HashSet::new();
    walk(body, false, &mut clean);
    clean
}

/// May `i` write shared memory through the generic proxy? Conservative: every instruction
/// that can write shared memory at all, except the copy engine's loads.
fn writes_generic_shared(i: &Instruction) -> bool {
    matches!(
        i,
        Instruction::StoreShared { .. }
            | Instruction::CopyAsync { .. }
            | Instruction::CopyAsyncWaitGroup { .. }
            | Instruction::Mbarriers { .. }
            | Instruction::Reduce { .. }
            | Instruction::Scan { .. }
            | Instruction::Scatter { .. }
            | Instruction::ScatterRows { .. }
            | Instruction::Atomic { .. }
    )
}

/// Walk `body` entered with (`dirty`) or without a generic write pending since the last fenced
/// barrier, recording the barriers reached with none pending; returns the state at the end.
/// A barrier reached both ways (a loop's first and later iterations) is recorded dirty: the
/// final pass over a loop enters it with the join of both states.
fn walk(body: &[Stmt], mut dirty: bool, clean: &mut HashSet<*const Instruction>) -> bool {
    for s in body {
        dirty = match &s.kind {
            StmtKind::Instr(i @ Instruction::Synchronize) => {
                if !dirty {
                    clean.insert(i as *const Instruction);
                }
                false
            }
            StmtKind::Instr(i) => dirty || writes_generic_shared(i),
            StmtKind::Let { .. } | StmtKind::Assign { .. } => dirty,
            StmtKind::If {
                then_body,
                else_body,
                ..
            } => walk(then_body, dirty, clean) | walk(else_body, dirty, clean),
            StmtKind::For { body, .. } | StmtKind::While { body, .. } => {
                // An iteration starts after the statements before the loop or after an
                // iteration: the state at entry is the join of both (one trial pass finds the
                // second; the states only grow, so the next pass is final).
                let after_one = walk(body, dirty, &mut HashSet::new());
                let end = walk(body, dirty || after_one, clean);
                // Zero iterations leave the state as it was.
                dirty || end
            }
            // Each role runs its body on its own threads, after the statements before it.
            StmtKind::Specialize { roles } => roles
                .iter()
                .fold(false, |acc, r| walk(&r.body, dirty, clean) | acc),
        };
    }
    dirty
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Expr, Program, ProgramBuilder as Builder};
    use crate::layout::{Layout, SharedLayout};
    use crate::DType;

    /// Whether each barrier of `p`, in program order, is left unfenced.
    fn clean_flags(p: &Program) -> Vec<bool> {
        let clean = unfenced_barriers(&p.body);
        let mut flags = Vec::new();
        p.visit_instructions(&mut |i| {
            if matches!(i, Instruction::Synchronize) {
                flags.push(clean.contains(&(i as *const Instruction)));
            }
        });
        flags
    }

    #[test]
    fn barriers_after_generic_shared_writes_keep_the_fence() {
        let mut b = Builder::new("proxy", 32);
        let s = b.allocate_shared("s", DType::F32, SharedLayout::row_major(&[32]));
        let r = b.allocate_register("r", DType::F32, Layout::spatial(&[32]), Some(1.0));
        b.synchronize(); // nothing written yet
        b.store_shared(r, s, vec![Expr::from(0)]);
        b.synchronize(); // after a store
        b.synchronize(); // after a fenced barrier only
        b.for_range("i", 0.into(), 4.into(), |b, _| {
            b.synchronize(); // a later iteration follows the store below
            b.load_shared("x", s, Layout::spatial(&[32]), vec![Expr::from(0)]);
            b.store_shared(r, s, vec![Expr::from(0)]);
        });
        b.synchronize(); // the loop ends with a store
        b.for_range("j", 0.into(), 4.into(), |b, _| {
            b.synchronize(); // reads only, and entered clean
            b.load_shared("y", s, Layout::spatial(&[32]), vec![Expr::from(0)]);
        });
        b.if_else(
            Expr::from(1),
            |b| b.copy_async_wait_group(0),
            |b| b.synchronize(),
        );
        b.synchronize(); // one branch waited for cp.async copies
        let p = b.finish();
        assert_eq!(
            clean_flags(&p),
            [true, false, true, false, false, true, true, false]
        );
    }
}
