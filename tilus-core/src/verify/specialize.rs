//! Warp specialization (`StmtKind::Specialize`): the region's shape and what a role may do.
//!
//! - The region is the kernel's last top-level statement (after it the warps would run with
//!   different register files, and nothing re-joins them).
//! - Roles are whole warpgroups (a positive multiple of 4 warps), together the block's warps.
//! - `registers` (sm_90a `setmaxnreg`) is a multiple of 8 from 24 to 256, and the roles'
//!   registers fit the block's share of the register file: `sum(threads x registers) <= 65536 /
//!   blocks_per_sm`, a role without `registers` counting the kernel's cap.
//! - Inside a role the block is the role: layouts span its threads, `synchronize` is a named
//!   barrier of its threads. A role may not assign scalars or use register tensors defined
//!   outside it (each warp has its own copies, which the other roles never see), nor
//!   allocate shared or global memory, initialise mbarriers, reduce or scan through shared
//!   scratch (one area for the block), or `exit`.

use super::limits::MAX_BLOCK_REGISTERS;
use super::Checker;
use crate::ir::{Instruction, Role, SpanId, VarType};

/// The smallest and largest `setmaxnreg` counts (PTX ISA: a multiple of 8 in 24..=256).
pub const MIN_ROLE_REGISTERS: u32 = 24;
pub const MAX_ROLE_REGISTERS: u32 = 256;

/// What the checker knows inside a role.
pub(super) struct RoleScope {
    /// Variables defined before the region (scalars a role must not assign, register tensors
    /// it must not use).
    pub outer: Vec<bool>,
}

/// The registers per thread the CUDA compiler may give every thread of a `threads`-thread
/// kernel with `blocks_per_sm` blocks on an SM (`__launch_bounds__`), rounded down to the
/// allocation unit of 8.
pub fn kernel_register_cap(threads: u32, blocks_per_sm: u32) -> u32 {
    let per_thread = MAX_BLOCK_REGISTERS as u32 / (threads.max(32) * blocks_per_sm.max(1));
    (per_thread.min(255) / 8) * 8
}

impl Checker<'_> {
    pub(super) fn specialize(&mut self, roles: &[Role], span: SpanId, top_last: bool) {
        if !top_last {
            self.err(
                span,
                "a specialize! region must be the kernel's last top-level statement (not inside \
                 a loop, an if or another region, and nothing after it)"
                    .to_string(),
            );
        }
        if roles.is_empty() {
            self.err(
                span,
                "a specialize! region needs at least one role".to_string(),
            );
        }
        let nt = self.p.num_threads;
        let mut warps = 0u64;
        for (i, r) in roles.iter().enumerate() {
            if r.warps == 0 || !r.warps.is_multiple_of(4) {
                self.err(
                    span,
                    format!(
                        "role {i} has {} warps; a role is whole warpgroups (a positive multiple of 4 warps)",
                        r.warps
                    ),
                );
            }
            warps += r.warps as u64;
            if let Some(n) = r.registers {
                if !self.target.features.setmaxnreg {
                    self.err(
                        span,
                        format!(
                            "role {i} sets registers = {n}, but setmaxnreg needs sm_90a (the target is {:?})",
                            self.target.arch
                        ),
                    );
                }
                if !n.is_multiple_of(8) || !(MIN_ROLE_REGISTERS..=MAX_ROLE_REGISTERS).contains(&n) {
                    self.err(
                        span,
                        format!(
                            "role {i}: registers = {n}; setmaxnreg takes a multiple of 8 from {MIN_ROLE_REGISTERS} to {MAX_ROLE_REGISTERS}"
                        ),
                    );
                }
            }
        }
        if warps * 32 != nt as u64 {
            self.err(
                span,
                format!(
                    "the roles have {warps} warps together, but the block has {} ({nt} threads)",
                    nt / 32
                ),
            );
        }
        if roles.iter().any(|r| r.registers.is_some()) && nt > 0 {
            let bps = self.p.blocks_per_sm.max(1);
            let cap = kernel_register_cap(nt, bps);
            let used: u64 = roles
                .iter()
                .map(|r| r.warps as u64 * 32 * r.registers.unwrap_or(cap) as u64)
                .sum();
            let avail = MAX_BLOCK_REGISTERS as u64 / bps as u64;
            if used > avail {
                let parts: Vec<String> = roles
                    .iter()
                    .map(|r| format!("{} x {}", r.warps * 32, r.registers.unwrap_or(cap)))
                    .collect();
                self.err(
                    span,
                    format!(
                        "the roles' registers ({} = {used}) exceed the {avail} registers a block has with blocks_per_sm = {bps}",
                        parts.join(" + ")
                    ),
                );
            }
        }
        let saved_threads = self.block_threads;
        let outer = self.defined.clone();
        for r in roles {
            self.role = Some(RoleScope {
                outer: outer.clone(),
            });
            if saved_threads > 0 && r.warps > 0 {
                self.block_threads = r.warps as usize * 32;
            }
            self.block(&r.body);
        }
        self.role = None;
        self.block_threads = saved_threads;
    }

    /// The rules of a role's instructions (module documentation).
    pub(super) fn role_instr(&mut self, ins: &Instruction, span: SpanId) {
        if self.role.is_none() {
            return;
        }
        let why = match ins {
            Instruction::AllocateShared { .. } => "allocates shared memory",
            Instruction::AllocateGlobal { .. } => "allocates global memory",
            Instruction::Mbarriers { .. } => "initialises mbarriers",
            Instruction::Exit => "exits",
            _ => return,
        };
        self.err(
            span,
            format!(
                "{} {why} inside a specialize! role; do it before the region (roles share the \
                 block's shared memory and barriers, and a role may not leave early)",
                ins.name()
            ),
        );
    }

    /// A role uses variable `v`: not a register tensor from outside the region.
    pub(super) fn role_use(&mut self, v: crate::ir::VarId, span: SpanId) {
        let Some(scope) = &self.role else { return };
        if !scope.outer.get(v.0 as usize).copied().unwrap_or(false) {
            return;
        }
        if matches!(self.p.var(v).ty, VarType::Register(_)) {
            let name = self.name(v);
            self.err(
                span,
                format!(
                    "register tensor {name} is defined outside the specialize! region; a role \
                     has its own threads (define the tensor inside the role, or pass it through \
                     shared memory)"
                ),
            );
        }
    }

    /// A role assigns scalar `v`: only its own.
    pub(super) fn role_assign(&mut self, v: crate::ir::VarId, span: SpanId) {
        let Some(scope) = &self.role else { return };
        if scope.outer.get(v.0 as usize).copied().unwrap_or(false) {
            let name = self.name(v);
            self.err(
                span,
                format!(
                    "assignment to {name} inside a specialize! role, but it is defined before the \
                     region: each role has its own copy (define a variable inside the role)"
                ),
            );
        }
    }

    /// A reduction or scan inside a role needs no shared scratch.
    pub(super) fn role_scratch(&mut self, bytes: usize, name: &str, span: SpanId) {
        if self.role.is_some() && bytes > 0 {
            self.err(
                span,
                format!(
                    "{name} inside a specialize! role needs {bytes} bytes of the block's shared \
                     reduction scratch, which the roles would share; reduce within warps (a \
                     layout whose reduced dimension lies in each warp) or before the region"
                ),
            );
        }
    }
}
