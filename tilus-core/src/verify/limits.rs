//! Resource limits: what one block may ask of the hardware, and how much code a program may
//! unroll. They are checked before any other rule, because the other rules build per-element
//! tables of register layouts (`LayoutTable`) and the code generator unrolls every instruction
//! over each thread's locals: without these bounds a tile parameter such as `BM = 2^31` costs
//! gigabytes and minutes, inside rustc when it comes from a `#[kernel]` tile space. With them,
//! every program is accepted or rejected in time and memory bounded by a few million elements.
//!
//! | what | limit | where it comes from |
//! | --- | --- | --- |
//! | threads of a block | 1024 ([`MAX_BLOCK_THREADS`]) | CUDA, every architecture (checked with the kernel header) |
//! | threads of a register layout | 1024 | it must span the block or a divisor of it |
//! | 32-bit registers per thread of one register tensor | `65536 / block threads` ([`max_register_words`]; 512 for 128 threads) | a block's share of the register file: 64 Ki 32-bit registers on sm_50 to sm_90 |
//! | (thread, local) pairs of a register layout | 2^19 ([`MAX_LAYOUT_CELLS`]) | the per-element tables of the verifier and interpreter; the register row allows at most 2^18 for elements of 8 bits or more, so this caps sub-byte tensors only (e.g. 4096 u1 locals per thread of 128), keeping every check well under a second in a debug build |
//! | elements of a register tensor | fits `usize` (checked product) | at most the pairs above for layouts from the constructors |
//! | bytes of one shared allocation | fits `usize` (checked) | the total against `Target::max_shared_bytes` is the usual shared check |
//! | unrolled element operations per thread, whole kernel | 2^17 ([`MAX_UNROLLED_OPS`]) | bounds the generated source and codegen time; the largest library kernel counts 80 036 (u1 weights, 128 x 256 x 64 tiles: 343 KB of CUDA) |
//!
//! A register tensor's per-thread storage is `ceil(locals * bits / 32)` words, the packed
//! `uint32_t` array the code generator declares for it. A tensor over the register file cannot
//! live in registers whatever the compiler does. Between 255 words (what one thread can address)
//! and that bound the CUDA compiler spills to local memory: slow, but it compiles, and tests
//! use such tiles, so it is allowed. The bound is per tensor: the sum over simultaneously live
//! tensors is left to the CUDA compiler, which interleaves producers and consumers element by
//! element (a dequantized tile and its bytes are never live in full together), so a sum would
//! reject kernels that compile without spills.
//!
//! Unrolled operations are estimated per instruction from the declared types: the locals of
//! every register operand and result, plus for `dot` one multiply-add per `c` local and `k`
//! step (`c_locals * min(k, a_locals)`: a thread-local dot needs each `a` row in one thread, and
//! an mma issues fewer instructions than that), plus for `copy_async` the tile's elements per
//! thread. Loop bodies count once: the code generator does not unroll VM loops.

use std::collections::HashMap;

use super::{shared, Diagnostic};
use crate::ir::{Instruction, Operand, Program, SpanId, Stmt, StmtKind, VarId, VarType};
use crate::layout::Layout;
use crate::DType;

/// Threads in one block.
pub const MAX_BLOCK_THREADS: usize = 1024;
/// 32-bit registers of one block (the register file an SM grants a block, sm_50 to sm_90).
pub const MAX_BLOCK_REGISTERS: usize = 65536;
/// (thread, local) pairs of one register layout: the size of the verifier's and interpreter's
/// per-element tables. Only sub-byte tensors can reach it (see the module documentation).
pub const MAX_LAYOUT_CELLS: usize = 1 << 19;
/// Unrolled element operations per thread in one kernel (see the module documentation).
pub const MAX_UNROLLED_OPS: usize = 1 << 17;

/// The most 32-bit words of one register tensor each thread of a `block_threads` block may hold:
/// the block's share of the register file, `65536 / block_threads` (`block_threads` 0, an
/// invalid block, counts as one warp).
pub fn max_register_words(block_threads: usize) -> usize {
    MAX_BLOCK_REGISTERS / block_threads.max(32)
}

/// 32-bit words that `locals` elements of `dtype` take in the packed per-thread array, or
/// `None` on overflow.
pub fn register_words(dtype: DType, locals: usize) -> Option<usize> {
    Some(locals.checked_mul(dtype.bits() as usize)?.div_ceil(32))
}

/// Check every limit of the module documentation; `block_threads` is the block's thread count
/// or 0 when the header is invalid (its error is reported there).
pub(crate) fn check(program: &Program, block_threads: usize) -> Vec<Diagnostic> {
    let mut l = Limits {
        p: program,
        block_threads,
        diags: Vec::new(),
        locals: HashMap::new(),
        ops: 0,
        largest: None,
    };
    l.block(&program.body);
    if l.diags.is_empty() && l.ops > MAX_UNROLLED_OPS {
        let (span, what, ops) = l
            .largest
            .take()
            .expect("a positive count has a contributor");
        l.diags.push(Diagnostic {
            span,
            message: format!(
                "the kernel unrolls to {} element operations per thread, more than the limit of \
                 {MAX_UNROLLED_OPS}; the largest is {what} ({ops}); use smaller tiles",
                l.ops
            ),
        });
    }
    l.diags
}

struct Limits<'p> {
    p: &'p Program,
    block_threads: usize,
    diags: Vec<Diagnostic>,
    /// Register tensors checked so far: their locals per thread, `None` when over a limit.
    locals: HashMap<VarId, Option<usize>>,
    /// Unrolled operations so far (saturating), and the statement contributing most.
    ops: usize,
    largest: Option<(SpanId, String, usize)>,
}

impl<'p> Limits<'p> {
    fn err(&mut self, span: SpanId, message: String) {
        self.diags.push(Diagnostic { span, message });
    }

    fn name(&self, v: VarId) -> String {
        match self.p.vars.get(v.0 as usize) {
            Some(var) => format!("`{}`", var.name),
            None => format!("`%{}`", v.0),
        }
    }

    fn block(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            match &s.kind {
                StmtKind::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    self.block(then_body);
                    self.block(else_body);
                }
                StmtKind::For { body, .. } | StmtKind::While { body, .. } => self.block(body),
                StmtKind::Specialize { roles } => {
                    // A role is a block of its own threads (`specialize.rs`).
                    let saved = self.block_threads;
                    for r in roles {
                        if saved > 0 && r.warps > 0 {
                            self.block_threads = (r.warps as usize * 32).min(MAX_BLOCK_THREADS);
                        }
                        self.block(&r.body);
                    }
                    self.block_threads = saved;
                }
                StmtKind::Let { .. } | StmtKind::Assign { .. } => {}
                StmtKind::Instr(ins) => self.instr(ins, s.span),
            }
        }
    }

    /// Threads and locals of `layout` in checked arithmetic (a deserialized layout need not come
    /// from the checked constructors), or a diagnostic naming `what`.
    fn layout(&mut self, layout: &Layout, dtype: DType, span: SpanId, what: &str) -> Option<usize> {
        let threads = checked_product(
            layout
                .spatial_digits()
                .iter()
                .map(|&d| layout.digit_size(d)),
        );
        let locals = checked_product(
            layout
                .local_digits()
                .iter()
                .map(|&id| layout.modes()[id].size),
        );
        let elements = checked_product(layout.shape().iter().copied());
        let show = |x: Option<usize>| x.map_or("more than 2^64".to_string(), |x| x.to_string());
        if elements.is_none() {
            self.err(
                span,
                format!(
                    "{what}: the shape {:?} has more than 2^64 elements",
                    layout.shape()
                ),
            );
            return None;
        }
        if threads.is_none_or(|t| t > MAX_BLOCK_THREADS) {
            self.err(
                span,
                format!(
                    "{what}: the layout spans {} threads; a block has at most {MAX_BLOCK_THREADS}",
                    show(threads)
                ),
            );
            return None;
        }
        let limit = max_register_words(self.block_threads);
        let words = locals.and_then(|l| register_words(dtype, l));
        if words.is_none_or(|w| w > limit) {
            let threads = self.block_threads.max(32);
            self.err(
                span,
                format!(
                    "{what}: each thread holds {} {dtype} elements in {} 32-bit registers, more \
                     than the limit of {limit} (a block's {MAX_BLOCK_REGISTERS} registers over \
                     {threads} threads); use a smaller tile",
                    show(locals),
                    show(words)
                ),
            );
            return None;
        }
        let cells = threads.zip(locals).and_then(|(t, l)| t.checked_mul(l));
        if cells.is_none_or(|c| c > MAX_LAYOUT_CELLS) {
            self.err(
                span,
                format!(
                    "{what}: the layout has {} threads x {} locals = {} (thread, local) pairs, \
                     more than the limit of {MAX_LAYOUT_CELLS}; use a smaller tile",
                    show(threads),
                    show(locals),
                    show(cells)
                ),
            );
            return None;
        }
        locals
    }

    /// Check register tensor `v` (once) at the first statement that mentions it; its locals.
    fn tensor(&mut self, v: VarId, span: SpanId) -> Option<usize> {
        if let Some(&locals) = self.locals.get(&v) {
            return locals;
        }
        let p = self.p;
        let locals = match p.vars.get(v.0 as usize).map(|var| &var.ty) {
            Some(VarType::Register(r)) => {
                let what = format!("register tensor {}", self.name(v));
                self.layout(&r.layout, r.dtype, span, &what)
            }
            _ => None,
        };
        self.locals.insert(v, locals);
        locals
    }

    fn count(&mut self, span: SpanId, what: String, ops: usize) {
        self.ops = self.ops.saturating_add(ops);
        if self.largest.as_ref().is_none_or(|(_, _, n)| ops > *n) {
            self.largest = Some((span, what, ops));
        }
    }

    fn instr(&mut self, ins: &Instruction, span: SpanId) {
        let name = ins.name();
        // Layouts the instruction carries: the verifier's rules read them besides the
        // declared type of the result (with which they must agree).
        let carried: Option<(&Layout, VarId, Option<DType>)> = match ins {
            Instruction::AllocateRegister {
                out, dtype, layout, ..
            } => Some((layout, *out, Some(*dtype))),
            Instruction::Cast {
                out,
                dtype,
                layout: Some(layout),
                ..
            }
            | Instruction::View {
                out, dtype, layout, ..
            } => Some((layout, *out, Some(*dtype))),
            Instruction::LoadGlobal { out, layout, .. }
            | Instruction::LoadShared { out, layout, .. } => Some((layout, *out, None)),
            _ => None,
        };
        // (The declared type is checked below; check the carried layout only where it differs,
        // so that a mismatch, reported by the main rules, cannot hide a huge layout.)
        let carried = carried.filter(|(layout, out, _)| {
            self.p
                .ty(*out)
                .as_register()
                .is_none_or(|r| &r.layout != *layout)
        });
        if let Some((layout, out, dtype)) = carried {
            let dtype = dtype
                .or_else(|| {
                    self.p
                        .vars
                        .get(out.0 as usize)?
                        .ty
                        .as_register()
                        .map(|r| r.dtype)
                })
                .unwrap_or(DType::UInt(1));
            let what = format!("{name} into {}", self.name(out));
            if self.layout(layout, dtype, span, &what).is_none() {
                return;
            }
        }
        if let Instruction::AllocateShared { out, dtype, layout } = ins {
            if shared::checked_allocation_bytes(*dtype, layout).is_none() {
                let on = self.name(*out);
                self.err(
                    span,
                    format!(
                        "allocate_shared {on}: the shape {:?} with strides {:?} spans more than \
                         2^64 bytes",
                        layout.shape, layout.strides
                    ),
                );
            }
        }
        let mut ops = 1usize;
        let mut what = format!("`{name}`");
        for v in register_operands(ins) {
            if let Some(locals) = self.tensor(v, span) {
                ops = ops.saturating_add(locals);
            }
        }
        match ins {
            Instruction::Dot { out, a, c, .. } => {
                let ra = self.p.ty(*a).as_register();
                let (la, lc) = (self.locals.get(a).copied(), self.locals.get(c).copied());
                if let (Some(ra), Some(Some(la)), Some(Some(lc))) = (ra, la, lc) {
                    let k = ra.layout.shape().last().copied().unwrap_or(1);
                    ops = ops.saturating_add(lc.saturating_mul(k.min(la)));
                    what = format!("the `dot` into {}", self.name(*out));
                }
            }
            Instruction::CopyAsync { dst, .. } => {
                if let Some(s) = self.p.ty(*dst).as_shared() {
                    let elements =
                        checked_product(s.layout.shape.iter().copied()).unwrap_or(usize::MAX);
                    let threads = match self.block_threads {
                        0 => MAX_BLOCK_THREADS,
                        t => t,
                    };
                    ops = ops.saturating_add(elements.div_ceil(threads));
                    what = format!("the `copy_async` into {}", self.name(*dst));
                }
            }
            _ => {}
        }
        self.count(span, what, ops);
    }
}

fn checked_product(sizes: impl IntoIterator<Item = usize>) -> Option<usize> {
    sizes.into_iter().try_fold(1usize, |a, b| a.checked_mul(b))
}

/// The register tensors `ins` reads or writes (others are skipped by the caller's type test).
fn register_operands(ins: &Instruction) -> Vec<VarId> {
    let tensor = |o: &Operand| match o {
        Operand::Tensor(v) => Some(*v),
        Operand::Scalar(_) | Operand::Imm(_) => None,
    };
    match ins {
        Instruction::AllocateRegister { out, .. }
        | Instruction::LoadGlobal { out, .. }
        | Instruction::LoadShared { out, .. } => vec![*out],
        Instruction::StoreGlobal { src, .. } | Instruction::StoreShared { src, .. } => vec![*src],
        Instruction::Binary { out, lhs, rhs, .. } => [Some(*out), Some(*lhs), tensor(rhs)]
            .into_iter()
            .flatten()
            .collect(),
        Instruction::MulAdd { out, a, b, c } => [Some(*out), Some(*a), tensor(b), Some(*c)]
            .into_iter()
            .flatten()
            .collect(),
        Instruction::Compare { out, lhs, rhs, .. } => [Some(*out), Some(*lhs), tensor(rhs)]
            .into_iter()
            .flatten()
            .collect(),
        Instruction::Select { out, cond, a, b } => [Some(*out), Some(*cond), Some(*a), tensor(b)]
            .into_iter()
            .flatten()
            .collect(),
        Instruction::Arange { out, .. } => vec![*out],
        Instruction::Neg { out, x }
        | Instruction::Unary { out, x, .. }
        | Instruction::Cast { out, x, .. }
        | Instruction::View { out, x, .. }
        | Instruction::Reduce { out, x, .. }
        | Instruction::Scan { out, x, .. } => vec![*out, *x],
        Instruction::Dot { out, a, b, c } | Instruction::DotAsync { out, a, b, c } => {
            vec![*out, *a, *b, *c]
        }
        Instruction::PlaneDot { out, w, a, .. } => vec![*out, *w, *a],
        Instruction::Print { x, .. } => tensor(x).into_iter().collect(),
        Instruction::Item { .. }
        | Instruction::Gather { .. }
        | Instruction::Lookup { .. }
        | Instruction::GatherRows { .. }
        | Instruction::Scatter { .. }
        | Instruction::ScatterRows { .. }
        | Instruction::Atomic { .. } => ins.addressing_vars(),
        Instruction::BlockIndices { .. }
        | Instruction::AllocateGlobal { .. }
        | Instruction::AllocateShared { .. }
        | Instruction::ViewGlobal { .. }
        | Instruction::SliceShared { .. }
        | Instruction::PermuteShared { .. }
        | Instruction::CopyAsync { .. }
        | Instruction::CopyAsyncCommitGroup
        | Instruction::CopyAsyncWaitGroup { .. }
        | Instruction::DotWait { .. }
        | Instruction::Mbarriers { .. }
        | Instruction::TmaLoad { .. }
        | Instruction::TmaStore { .. }
        | Instruction::TmaStoreWait
        | Instruction::MbarrierArrive { .. }
        | Instruction::MbarrierWait { .. }
        | Instruction::Synchronize
        | Instruction::Fence
        | Instruction::GridDependency(_)
        | Instruction::Exit => Vec::new(),
    }
}
