//! Rules of the data-dependent addressing instructions: `item`, `gather`, `gather_rows`,
//! `scatter`, atomics.

use super::super::expr::describe;
use super::super::Checker;
use crate::ir::{gather_rows_layout, AtomicOp, Instruction, RegisterType, SpanId, VarId, VarType};
use crate::DType;

/// Bit widths `gather` and `scatter` address directly (one load or store per element).
fn addressable(dtype: DType) -> bool {
    matches!(dtype.bits(), 8 | 16 | 32)
}

impl<'p> Checker<'p> {
    /// A global or shared tensor operand: its dtype. A global destination must be a view of a
    /// mutable pointer when `write` is set.
    fn memory_operand(
        &mut self,
        v: VarId,
        span: SpanId,
        instr: &str,
        role: &str,
        write: bool,
    ) -> Option<DType> {
        let ty = self.use_var(v, span)?;
        match ty {
            VarType::Global(g) => {
                if write && !g.mutable {
                    let msg = format!(
                        "{instr}: {role} {} is a view of read-only pointer {}; {instr} writes, so it needs a mutable pointer (`GlobalMut`)",
                        self.name(v),
                        self.name(g.ptr)
                    );
                    self.err(span, msg);
                }
                Some(g.dtype)
            }
            VarType::Shared(s) => Some(s.dtype),
            VarType::Unknown => None,
            other => {
                let msg = format!(
                    "{instr}: {role} {} must be a global or shared tensor, but it is {}",
                    self.name(v),
                    describe(other)
                );
                self.err(span, msg);
                None
            }
        }
    }

    /// An `i32` register tensor of indices.
    fn index_operand(&mut self, v: VarId, span: SpanId, instr: &str) -> Option<&'p RegisterType> {
        let r = self.reg(v, span, instr, "the index")?;
        if r.dtype != DType::Int(32) {
            let msg = format!(
                "{instr}: the index {} must hold i32, but it holds {}",
                self.name(v),
                r.dtype
            );
            self.err(span, msg);
        }
        Some(r)
    }

    /// `other` (role `role`) must have the layout of `value`: its elements pair up one to one.
    fn same_layout(
        &mut self,
        span: SpanId,
        instr: &str,
        value: (VarId, &RegisterType),
        other: (VarId, &RegisterType),
        role: &str,
    ) {
        if value.1.layout != other.1.layout {
            let msg = format!(
                "{instr}: {role} {} ({}) must have the layout of {} ({}), so that their elements pair up",
                self.name(other.0),
                other.1.layout.to_expr(),
                self.name(value.0),
                value.1.layout.to_expr()
            );
            self.err(span, msg);
        }
    }

    fn addressable_dtype(&mut self, span: SpanId, instr: &str, v: VarId, dtype: DType) {
        if !addressable(dtype) {
            let msg = format!(
                "{instr}: {} holds {dtype} elements; {instr} supports 8-, 16- and 32-bit dtypes (address sub-byte data as bytes, e.g. view it as u8, and unpack the codes)",
                self.name(v)
            );
            self.err(span, msg);
        }
    }

    /// The row width `w` of a `gather_rows` source `[rows, w]` (already known to be a global
    /// or shared tensor), or an error naming it: rank 2 is required, and a global view's last
    /// extent must be a constant (it sets the result's shape and layout).
    fn row_width(&mut self, src: VarId, span: SpanId) -> Option<usize> {
        let p = self.p;
        let (rank, last) = match p.ty(src) {
            VarType::Global(g) => (g.shape.len(), g.shape.last()),
            VarType::Shared(s) => return self.rank2(src, span, &s.layout.shape),
            _ => return None,
        };
        if rank != 2 {
            let msg = format!(
                "gather_rows: the source {} has rank {rank}; gather_rows reads rows of a rank-2 table [rows, w] (view it as one)",
                self.name(src)
            );
            self.err(span, msg);
            return None;
        }
        match last.and_then(|e| e.const_i32()) {
            Some(w) if w >= 1 => Some(w as usize),
            _ => {
                let msg = format!(
                    "gather_rows: the row width of the source {} (its last extent) must be a positive constant: it sets the result's shape and layout",
                    self.name(src)
                );
                self.err(span, msg);
                None
            }
        }
    }

    fn rank2(&mut self, src: VarId, span: SpanId, shape: &[usize]) -> Option<usize> {
        if shape.len() != 2 {
            let msg = format!(
                "gather_rows: the source {} has shape {shape:?} (rank {}); gather_rows reads rows of a rank-2 table [rows, w] (slice it to one)",
                self.name(src),
                shape.len()
            );
            self.err(span, msg);
            return None;
        }
        Some(shape[1])
    }

    pub(super) fn check_addressing(&mut self, ins: &Instruction, span: SpanId) {
        let name = ins.name();
        match ins {
            Instruction::Item { out, x } => {
                let r = self.reg(*x, span, name, "the operand");
                if let Some(r) = r {
                    let shape = r.layout.shape();
                    let elements: usize = shape.iter().product();
                    if elements != 1 || r.layout.num_locals() != 1 {
                        let msg = format!(
                            "item: {} has shape {shape:?} ({elements} elements); item reads a tensor of exactly one element, which every thread holds (e.g. loaded with layout `local(1)`)",
                            self.name(*x)
                        );
                        self.err(span, msg);
                    }
                }
                self.define(*out, r.is_some(), span, name);
            }
            Instruction::Gather { out, src, index } => {
                let d = self.memory_operand(*src, span, name, "the source", false);
                let i = self.index_operand(*index, span, name);
                if let Some(d) = d {
                    self.addressable_dtype(span, name, *src, d);
                }
                self.define(*out, d.is_some() && i.is_some(), span, name);
            }
            Instruction::GatherRows {
                out,
                src,
                index,
                dim,
            } => {
                let d = self.memory_operand(*src, span, name, "the source", false);
                let i = self.index_operand(*index, span, name);
                let w = d.and_then(|d| {
                    self.addressable_dtype(span, name, *src, d);
                    self.row_width(*src, span)
                });
                let mut ok = d.is_some() && i.is_some() && w.is_some();
                if let Some(i) = i {
                    let rank = i.layout.rank();
                    if *dim >= rank {
                        let msg = format!(
                            "gather_rows: dim {dim} is not a dimension of the index {} (rank {rank}, shape {:?}); dim selects the index dimension the rows are laid along, in 0..{rank}",
                            self.name(*index),
                            i.layout.shape()
                        );
                        self.err(span, msg);
                        ok = false;
                    } else if let Some(w) = w {
                        if gather_rows_layout(&i.layout, w, *dim).is_none() {
                            let msg = format!(
                                "gather_rows: rows of {w} elements gathered by the index {} ({} locals per thread) make a result too large to represent",
                                self.name(*index),
                                i.layout.num_locals()
                            );
                            self.err(span, msg);
                            ok = false;
                        }
                    }
                }
                self.define(*out, ok, span, name);
            }
            Instruction::Scatter { src, dst, index } => {
                let r = self.reg(*src, span, name, "the scattered value");
                let d = self.memory_operand(*dst, span, name, "the destination", true);
                let i = self.index_operand(*index, span, name);
                if let (Some(r), Some(d)) = (r, d) {
                    if r.dtype != d {
                        let msg = format!(
                            "scatter: {} holds {} but {} holds {d}; the dtypes must match",
                            self.name(*src),
                            r.dtype,
                            self.name(*dst)
                        );
                        self.err(span, msg);
                    }
                    self.addressable_dtype(span, name, *dst, d);
                }
                if let (Some(r), Some(i)) = (r, i) {
                    self.same_layout(span, name, (*src, r), (*index, i), "the index");
                }
            }
            Instruction::Atomic {
                op,
                dst,
                index,
                value,
                compare,
                out,
            } => {
                let d = self.memory_operand(*dst, span, name, "the destination", true);
                let i = self.index_operand(*index, span, name);
                let v = self.reg(*value, span, name, "the value");
                if let Some(d) = d {
                    if !matches!(d, DType::Int(32) | DType::UInt(32) | DType::F32) {
                        let msg = format!(
                            "{name}: {} holds {d}; atomics work on i32, u32 and f32 tensors",
                            self.name(*dst)
                        );
                        self.err(span, msg);
                    }
                    if let Some(v) = v.filter(|v| v.dtype != d) {
                        let msg = format!(
                            "{name}: the value {} holds {} but {} holds {d}; the dtypes must match",
                            self.name(*value),
                            v.dtype,
                            self.name(*dst)
                        );
                        self.err(span, msg);
                    }
                }
                if let (Some(v), Some(i)) = (v, i) {
                    self.same_layout(span, name, (*value, v), (*index, i), "the index");
                }
                match (op, compare) {
                    (AtomicOp::Cas, Some(c)) => {
                        let rc = self.reg(*c, span, name, "the compared value");
                        if let (Some(v), Some(rc)) = (v, rc) {
                            self.same_layout(
                                span,
                                name,
                                (*value, v),
                                (*c, rc),
                                "the compared value",
                            );
                            if rc.dtype != v.dtype {
                                let msg = format!(
                                    "{name}: the compared value {} holds {} but {} holds {}; the dtypes must match",
                                    self.name(*c),
                                    rc.dtype,
                                    self.name(*value),
                                    v.dtype
                                );
                                self.err(span, msg);
                            }
                        }
                    }
                    (AtomicOp::Cas, None) => self.err(
                        span,
                        format!("{name}: compare-and-swap needs a compared value"),
                    ),
                    (_, Some(c)) => {
                        let msg = format!(
                            "{name}: only atomic_cas takes a compared value, found {}",
                            self.name(*c)
                        );
                        self.err(span, msg);
                    }
                    (_, None) => {}
                }
                if let Some(o) = out {
                    // Only the thread that performs an update learns the old value, so no
                    // other thread may hold the same element.
                    if let Some(v) = v {
                        let bt = self.block_threads;
                        let (reps, threads) = (v.layout.num_replicas(), v.layout.num_threads());
                        if bt > 0 && (reps != 1 || threads != bt) {
                            let msg = format!(
                                "{name}: returning the old values needs a value layout that gives each element to one thread, but each element of {} ({}) is held by {} of the block's {bt} threads",
                                self.name(*value),
                                v.layout.to_expr(),
                                reps * bt / threads.max(1)
                            );
                            self.err(span, msg);
                        }
                    }
                    self.define(*o, d.is_some() && v.is_some(), span, name);
                }
            }
            _ => {}
        }
    }
}
