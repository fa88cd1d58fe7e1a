//! The shared-memory planner.
//!
//! Every `allocate_shared` gets a byte offset in the kernel's one dynamic shared buffer, aligned
//! to 128 bytes. Two tensors may share bytes when their lifetimes do not overlap:
//! - statements are numbered in program order (pre-order, so a loop's number precedes its body);
//! - a tensor lives from its `allocate_shared` to the last statement that uses it or any slice of
//!   it; a use inside a loop that does not contain the allocation extends the lifetime to the end
//!   of that loop (the next iteration uses it again); a tensor allocated inside a loop lives for
//!   the whole of its outermost enclosing loop;
//! - the destination of a `copy_async` lives at least until the next `copy_async_wait_group`
//!   (the copy is in flight until then), that of a `tma_load` until the last `mbarrier_wait`
//!   after it, the source of a `tma_store` until the next `tma_store_wait` (or the kernel's
//!   end: the copy engine reads it meanwhile);
//! - `mbarriers` live for the whole kernel (barrier objects are not repurposed).
//!
//! Placement is first fit over 128-byte aligned offsets (a swizzle block for swizzled tensors,
//! 1024 bytes for the 128-byte swizzle), largest tensors first. When a tensor
//! reuses bytes of a tensor that died earlier and no `synchronize` lies between them in the same
//! statement list as the new tensor's allocation, the emitter puts a `__syncthreads()` before the
//! allocation (`SharedSlot::barrier_before`), so no thread overwrites bytes another still reads.

use crate::ir::{Instruction, Operand, Program, Stmt, StmtKind, VarId, VarType};
use std::collections::HashMap;

/// Alignment of every shared tensor, in bytes.
pub const SHARED_ALIGN: usize = 128;

/// Where each shared tensor lives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SharedPlan {
    pub slots: Vec<SharedSlot>,
    /// Dynamic shared memory the kernel needs.
    pub total_bytes: usize,
    /// Byte offset of the scratch area every reduction with a shared stage reuses (after the
    /// tensors, aligned); its size is counted in `total_bytes`.
    pub reduce_scratch: usize,
}

/// One `allocate_shared`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedSlot {
    pub var: VarId,
    pub name: String,
    /// Byte offset in the dynamic shared buffer (a multiple of `align`).
    pub offset: usize,
    pub bytes: usize,
    /// [`SHARED_ALIGN`], or more for a swizzled tensor (one swizzle block: the hardware
    /// swizzles address bits, so the tensor must start on a block).
    pub align: usize,
    /// Lifetime, in statement numbers (inclusive).
    pub first: usize,
    pub last: usize,
    /// A barrier is emitted before the allocation because the bytes are reused.
    pub barrier_before: bool,
}

impl SharedPlan {
    pub fn slot(&self, var: VarId) -> Option<&SharedSlot> {
        self.slots.iter().find(|s| s.var == var)
    }
}

/// Bytes an allocation of `dtype` elements with `layout` spans.
pub(crate) fn allocation_bytes(dtype: crate::DType, layout: &crate::layout::SharedLayout) -> usize {
    crate::storage::packed_len(dtype, layout.size())
}

struct Walk<'p> {
    p: &'p Program,
    pos: usize,
    next_block: usize,
    /// Enclosing loops of the statement being visited: (start, end) filled in after the body.
    loop_stack: Vec<usize>,
    loops: Vec<(usize, usize)>,
    /// Root allocation of every shared variable.
    root: HashMap<VarId, VarId>,
    alloc: HashMap<VarId, AllocInfo>,
    /// (position, loops enclosing it, root) of every use.
    uses: Vec<(usize, Vec<usize>, VarId)>,
    copies: Vec<(usize, VarId)>,
    waits: Vec<usize>,
    /// (position, root) of each shared operand of a `dot_async`, and the `dot_wait`s.
    dot_reads: Vec<(usize, VarId)>,
    dot_waits: Vec<usize>,
    /// `mbarriers` tensors, (position, root) of each `tma_load` destination, and the positions
    /// of the `mbarrier_wait`s.
    barriers: Vec<VarId>,
    tma_copies: Vec<(usize, VarId)>,
    barrier_waits: Vec<usize>,
    /// (position, root) of each `tma_store` source, and the `tma_store_wait`s.
    tma_stores: Vec<(usize, VarId)>,
    store_waits: Vec<usize>,
    /// (block id, position) of every `synchronize`.
    syncs: Vec<(usize, usize)>,
    order: Vec<VarId>,
}

struct AllocInfo {
    pos: usize,
    block: usize,
    loops: Vec<usize>,
    bytes: usize,
    align: usize,
}

/// Variables an instruction reads or writes (every operand).
pub(crate) fn instruction_vars(i: &Instruction) -> Vec<VarId> {
    use Instruction::*;
    match i {
        BlockIndices { outs } => outs.clone(),
        AllocateGlobal { out, .. } | AllocateShared { out, .. } | AllocateRegister { out, .. } => {
            vec![*out]
        }
        ViewGlobal { out, ptr, .. } => vec![*out, *ptr],
        LoadGlobal { out, src, .. } | LoadShared { out, src, .. } => vec![*out, *src],
        StoreGlobal { src, dst, .. } | StoreShared { src, dst, .. } => vec![*src, *dst],
        SliceShared { out, src, .. } | PermuteShared { out, src, .. } => vec![*out, *src],
        CopyAsync { dst, src, .. } => vec![*dst, *src],
        Mbarriers { out, .. } => vec![*out],
        TmaLoad {
            dst, src, barrier, ..
        } => vec![*dst, *src, *barrier],
        TmaStore { src, dst, .. } => vec![*src, *dst],
        MbarrierArrive { barrier, .. } | MbarrierWait { barrier, .. } => vec![*barrier],
        CopyAsyncCommitGroup
        | CopyAsyncWaitGroup { .. }
        | TmaStoreWait
        | DotWait { .. }
        | Synchronize
        | Fence
        | GridDependency(_)
        | Exit => {
            vec![]
        }
        Binary { out, lhs, rhs, .. } => {
            let mut v = vec![*out, *lhs];
            if let Operand::Tensor(r) = rhs {
                v.push(*r);
            }
            v
        }
        MulAdd { out, a, b, c } => {
            let mut v = vec![*out, *a, *c];
            if let Operand::Tensor(r) = b {
                v.push(*r);
            }
            v
        }
        Neg { out, x } | Cast { out, x, .. } | View { out, x, .. } | Unary { out, x, .. } => {
            vec![*out, *x]
        }
        Compare { out, lhs, rhs, .. } => {
            let mut v = vec![*out, *lhs];
            if let Operand::Tensor(r) = rhs {
                v.push(*r);
            }
            v
        }
        Select { out, cond, a, b } => {
            let mut v = vec![*out, *cond, *a];
            if let Operand::Tensor(r) = b {
                v.push(*r);
            }
            v
        }
        Arange { out, .. } => vec![*out],
        Dot { out, a, b, c } | DotAsync { out, a, b, c } => vec![*out, *a, *b, *c],
        Reduce { out, x, .. } | Scan { out, x, .. } => vec![*out, *x],
        PlaneDot { out, w, a, .. } => vec![*out, *w, *a],
        Print { x, .. } => match x {
            Operand::Tensor(t) => vec![*t],
            _ => vec![],
        },
        Item { .. }
        | Gather { .. }
        | Lookup { .. }
        | GatherRows { .. }
        | Scatter { .. }
        | ScatterRows { .. }
        | Atomic { .. } => i.addressing_vars(),
    }
}

impl<'p> Walk<'p> {
    fn block(&mut self, stmts: &'p [Stmt]) {
        let block = self.next_block;
        self.next_block += 1;
        for s in stmts {
            let pos = self.pos;
            self.pos += 1;
            match &s.kind {
                StmtKind::Let { .. } | StmtKind::Assign { .. } => {}
                StmtKind::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    self.block(then_body);
                    self.block(else_body);
                }
                StmtKind::For { body, .. } | StmtKind::While { body, .. } => {
                    let id = self.loops.len();
                    self.loops.push((pos, pos));
                    self.loop_stack.push(id);
                    self.block(body);
                    self.loop_stack.pop();
                    self.loops[id].1 = self.pos - 1;
                }
                // The roles run at the same time: like a loop, whatever a role uses lives
                // through the whole region.
                StmtKind::Specialize { roles } => {
                    let id = self.loops.len();
                    self.loops.push((pos, pos));
                    self.loop_stack.push(id);
                    for r in roles {
                        self.block(&r.body);
                    }
                    self.loop_stack.pop();
                    self.loops[id].1 = self.pos - 1;
                }
                StmtKind::Instr(instr) => self.instr(instr, pos, block),
            }
        }
    }

    fn instr(&mut self, instr: &'p Instruction, pos: usize, block: usize) {
        match instr {
            Instruction::AllocateShared { out, dtype, layout } => {
                self.root.insert(*out, *out);
                self.order.push(*out);
                self.alloc.insert(
                    *out,
                    AllocInfo {
                        pos,
                        block,
                        loops: self.loop_stack.clone(),
                        bytes: allocation_bytes(*dtype, layout),
                        align: crate::verify::shared::allocation_align(*dtype, layout)
                            .max(SHARED_ALIGN),
                    },
                );
            }
            Instruction::SliceShared { out, src, .. }
            | Instruction::PermuteShared { out, src, .. } => {
                if let Some(r) = self.root.get(src).copied() {
                    self.root.insert(*out, r);
                }
            }
            Instruction::CopyAsync { dst, .. } => {
                if let Some(r) = self.root.get(dst).copied() {
                    self.copies.push((pos, r));
                }
            }
            Instruction::CopyAsyncWaitGroup { .. } => self.waits.push(pos),
            Instruction::Mbarriers { out, count, .. } => {
                self.root.insert(*out, *out);
                self.order.push(*out);
                self.barriers.push(*out);
                self.alloc.insert(
                    *out,
                    AllocInfo {
                        pos,
                        block,
                        loops: self.loop_stack.clone(),
                        bytes: 8 * *count as usize,
                        align: SHARED_ALIGN,
                    },
                );
            }
            Instruction::TmaLoad { dst, .. } => {
                if let Some(r) = self.root.get(dst).copied() {
                    self.tma_copies.push((pos, r));
                }
            }
            Instruction::MbarrierWait { .. } => self.barrier_waits.push(pos),
            Instruction::TmaStore { src, .. } => {
                if let Some(r) = self.root.get(src).copied() {
                    self.tma_stores.push((pos, r));
                }
            }
            Instruction::TmaStoreWait => self.store_waits.push(pos),
            // The operands of an in-flight dot are read until its dot_wait.
            Instruction::DotAsync { a, b, .. } => {
                for v in [a, b] {
                    if let Some(r) = self.root.get(v).copied() {
                        self.dot_reads.push((pos, r));
                    }
                }
            }
            Instruction::DotWait { .. } => self.dot_waits.push(pos),
            Instruction::Synchronize => self.syncs.push((block, pos)),
            _ => {}
        }
        for v in instruction_vars(instr) {
            if matches!(self.p.ty(v), VarType::Shared(_)) {
                if let Some(r) = self.root.get(&v).copied() {
                    self.uses.push((pos, self.loop_stack.clone(), r));
                }
            }
        }
    }
}

/// Plan the shared memory of `program`.
pub(crate) fn plan(program: &Program) -> SharedPlan {
    let mut w = Walk {
        p: program,
        pos: 0,
        next_block: 0,
        loop_stack: Vec::new(),
        loops: Vec::new(),
        root: HashMap::new(),
        alloc: HashMap::new(),
        uses: Vec::new(),
        copies: Vec::new(),
        waits: Vec::new(),
        dot_reads: Vec::new(),
        dot_waits: Vec::new(),
        barriers: Vec::new(),
        tma_copies: Vec::new(),
        barrier_waits: Vec::new(),
        tma_stores: Vec::new(),
        store_waits: Vec::new(),
        syncs: Vec::new(),
        order: Vec::new(),
    };
    w.block(&program.body);
    let end = w.pos.saturating_sub(1);

    let mut slots: Vec<SharedSlot> = Vec::new();
    for &var in &w.order {
        let info = &w.alloc[&var];
        let (mut first, mut last) = (info.pos, info.pos);
        if let Some(&outer) = info.loops.first() {
            first = w.loops[outer].0;
            last = w.loops[outer].1;
        }
        for (pos, loops, r) in &w.uses {
            if *r != var {
                continue;
            }
            last = last.max(*pos);
            for l in loops {
                if !info.loops.contains(l) {
                    last = last.max(w.loops[*l].1);
                }
            }
        }
        for (pos, r) in &w.dot_reads {
            if *r == var {
                let wait = w
                    .dot_waits
                    .iter()
                    .copied()
                    .find(|&p| p > *pos)
                    .unwrap_or(end);
                last = last.max(wait);
            }
        }
        for (pos, r) in &w.copies {
            if *r == var {
                let wait = w.waits.iter().copied().find(|&p| p > *pos).unwrap_or(end);
                last = last.max(wait);
            }
        }
        for (pos, r) in &w.tma_copies {
            if *r == var {
                let wait = w.barrier_waits.iter().copied().filter(|&p| p > *pos).max();
                last = last.max(wait.unwrap_or(end));
            }
        }
        for (pos, r) in &w.tma_stores {
            if *r == var {
                let wait = w.store_waits.iter().copied().find(|&p| p > *pos);
                last = last.max(wait.unwrap_or(end));
            }
        }
        if w.barriers.contains(&var) {
            last = end;
        }
        slots.push(SharedSlot {
            var,
            name: program.var(var).name.clone(),
            offset: 0,
            bytes: info.bytes,
            align: info.align,
            first,
            last,
            barrier_before: false,
        });
    }

    // First fit, largest first (ties: earlier first).
    let mut order: Vec<usize> = (0..slots.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(slots[i].bytes), slots[i].first));
    let mut placed: Vec<usize> = Vec::new();
    for &i in &order {
        let live: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| slots[j].first <= slots[i].last && slots[i].first <= slots[j].last)
            .map(|&j| (slots[j].offset, slots[j].offset + slots[j].bytes))
            .collect();
        let mut candidates: Vec<usize> = vec![0];
        let align = slots[i].align;
        candidates.extend(live.iter().map(|&(_, e)| e.next_multiple_of(align)));
        candidates.sort_unstable();
        let size = slots[i].bytes;
        let offset = candidates
            .into_iter()
            .find(|&o| live.iter().all(|&(s, e)| o + size <= s || e <= o))
            .expect("the end of the highest live tensor is always free");
        slots[i].offset = offset;
        placed.push(i);
    }

    // Barriers where bytes are reused without a synchronize in between.
    for i in 0..slots.len() {
        let s = &slots[i];
        let info = &w.alloc[&s.var];
        let needs = slots.iter().any(|p| {
            p.var != s.var
                && p.last < s.first
                && p.offset < s.offset + s.bytes
                && s.offset < p.offset + p.bytes
                && !w
                    .syncs
                    .iter()
                    .any(|&(b, q)| b == info.block && q > p.last && q < info.pos)
        });
        slots[i].barrier_before = needs;
    }

    let tensors = slots.iter().map(|s| s.offset + s.bytes).max().unwrap_or(0);
    let reduce_scratch = tensors.next_multiple_of(SHARED_ALIGN);
    let scratch = reduce_scratch_bytes(program, &program.body);
    let total_bytes = if scratch > 0 {
        reduce_scratch + scratch
    } else {
        tensors
    };
    SharedPlan {
        slots,
        total_bytes,
        reduce_scratch,
    }
}

/// The largest shared scratch of a reduction in `stmts` (see `crate::verify::plan_reduce`).
fn reduce_scratch_bytes(p: &Program, stmts: &[Stmt]) -> usize {
    let mut most = 0;
    for s in stmts {
        let bytes = match &s.kind {
            StmtKind::Instr(Instruction::Reduce { x, op, dim, .. }) => match p.ty(*x) {
                VarType::Register(r) => crate::verify::plan_reduce(&r.layout, *dim)
                    .map_or(0, |plan| plan.scratch_bytes(*op)),
                _ => 0,
            },
            StmtKind::Instr(Instruction::Scan { x, dim, .. }) => match p.ty(*x) {
                VarType::Register(r) => crate::verify::plan_scan(&r.layout, *dim)
                    .map_or(0, |plan| {
                        plan.scratch_bytes(p.num_threads as usize, r.layout.num_locals())
                    }),
                _ => 0,
            },
            other => other
                .bodies()
                .into_iter()
                .map(|b| reduce_scratch_bytes(p, b))
                .max()
                .unwrap_or(0),
        };
        most = most.max(bytes);
    }
    most
}
