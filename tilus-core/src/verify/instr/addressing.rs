//! Rules of the data-dependent addressing instructions: `item`, `gather`, `gather_rows`,
//! `scatter`, `scatter_rows`, atomics.

use super::super::expr::describe;
use super::super::Checker;
use crate::ir::{gather_rows_layout, AtomicOp, Instruction, RegisterType, SpanId, VarId, VarType};
use crate::layout::Layout;
use crate::verify::broadcast_thread_local;
use crate::DType;

/// The two instructions on whole rows of a `[rows, w]` table, for their shared rules' words.
#[derive(Clone, Copy)]
enum RowsInstr {
    Gather,
    Scatter,
}

impl RowsInstr {
    fn name(self) -> &'static str {
        match self {
            RowsInstr::Gather => "gather_rows",
            RowsInstr::Scatter => "scatter_rows",
        }
    }

    /// The table operand.
    fn role(self) -> &'static str {
        match self {
            RowsInstr::Gather => "the source",
            RowsInstr::Scatter => "the destination",
        }
    }

    fn verb(self) -> &'static str {
        match self {
            RowsInstr::Gather => "reads",
            RowsInstr::Scatter => "writes",
        }
    }

    fn participle(self) -> &'static str {
        match self {
            RowsInstr::Gather => "gathered",
            RowsInstr::Scatter => "scattered",
        }
    }

    fn why_constant(self) -> &'static str {
        match self {
            RowsInstr::Gather => "it sets the result's shape and layout",
            RowsInstr::Scatter => "it sets the shape and layout the scattered value must have",
        }
    }
}

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

    /// The operands of `lookup`: a shared `[R, C]` table of 8-, 16- or 32-bit elements with `C`
    /// a power of two, integer rows of 8 to 32 bits, and `i32` columns that broadcast to the
    /// rows in registers. Whether all of them are usable.
    fn lookup_operands(
        &mut self,
        span: SpanId,
        name: &str,
        table: VarId,
        rows: VarId,
        cols: VarId,
    ) -> bool {
        let t = match self.use_var(table, span) {
            Some(VarType::Shared(s)) => Some(s),
            Some(VarType::Unknown) | None => None,
            Some(other) => {
                let msg = format!(
                    "{name}: the table {} must be a shared tensor, but it is {}",
                    self.name(table),
                    describe(other)
                );
                self.err(span, msg);
                None
            }
        };
        if let Some(s) = t {
            self.addressable_dtype(span, name, table, s.dtype);
            let shape = &s.layout.shape;
            let c = shape.get(1).copied().unwrap_or(0);
            // A rank-3 table's entries are vectors of one load: 4, 8 or 16 bytes.
            let vector = shape.get(2).map(|w| w * s.dtype.bits() as usize / 8);
            if !(2..=3).contains(&shape.len())
                || !c.is_power_of_two()
                || vector.is_some_and(|b| ![4, 8, 16].contains(&b))
            {
                let msg = format!(
                    "{name}: the table {} has shape {:?}; lookup reads a rank-2 table [rows, columns] whose column count is a power of two, or a rank-3 one [rows, columns, w] whose entries are vectors of 4, 8 or 16 bytes",
                    self.name(table),
                    shape
                );
                self.err(span, msg);
            }
        }
        let r = self.reg(rows, span, name, "the rows");
        if let Some(r) = r {
            if !matches!(r.dtype, DType::UInt(8 | 16 | 32) | DType::Int(8 | 16 | 32)) {
                let msg = format!(
                    "{name}: the rows {} hold {}; lookup takes 8- to 32-bit integer rows",
                    self.name(rows),
                    r.dtype
                );
                self.err(span, msg);
            }
        }
        let c = self.reg(cols, span, name, "the columns");
        if let Some(c) = c {
            if c.dtype != DType::Int(32) {
                let msg = format!(
                    "{name}: the columns {} must hold i32, but they hold {}",
                    self.name(cols),
                    c.dtype
                );
                self.err(span, msg);
            }
        }
        if let (Some(r), Some(c)) = (r, c) {
            if self.block_threads > 0 {
                if let Err(e) = broadcast_thread_local(&r.layout, &c.layout, self.block_threads) {
                    let msg = format!(
                        "{name}: the columns {} cannot be broadcast to the rows {} in registers: {e}",
                        self.name(cols),
                        self.name(rows)
                    );
                    self.err(span, msg);
                }
            }
        }
        t.is_some() && r.is_some() && c.is_some()
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

    /// A register table of `gather_rows` (read by warp shuffles): its dtype and row width when
    /// it has a [`crate::ir::WarpTable`] placement and rows of whole 32-bit words.
    fn register_table(
        &mut self,
        table: VarId,
        r: &'p RegisterType,
        span: SpanId,
        instr: &str,
    ) -> (Option<DType>, Option<usize>) {
        self.use_var(table, span);
        self.addressable_dtype(span, instr, table, r.dtype);
        match crate::ir::warp_table(&r.layout, self.block_threads) {
            Err(why) => {
                let msg = format!(
                    "{instr}: the register table {} (layout {}): {why}",
                    self.name(table),
                    r.layout.to_expr()
                );
                self.err(span, msg);
                (None, None)
            }
            Ok(t) if !(t.width * r.dtype.bits() as usize).is_multiple_of(32) => {
                let msg = format!(
                    "{instr}: the register table {} has rows of {} {} elements; a row is read from its lane by 32-bit shuffles, so it must be whole 32-bit words (pad the rows)",
                    self.name(table),
                    t.width,
                    r.dtype
                );
                self.err(span, msg);
                (None, None)
            }
            Ok(t) => (Some(r.dtype), Some(t.width)),
        }
    }

    /// The row width `w` of a `[rows, w]` table (already known to be a global or shared
    /// tensor): the source of `gather_rows` or the destination of `scatter_rows` (`t`), or an
    /// error naming it: rank 2 is required, and a global view's last extent must be a constant
    /// (it sets the register tensor's shape and layout).
    fn row_width(&mut self, table: VarId, span: SpanId, t: RowsInstr) -> Option<usize> {
        let p = self.p;
        let (rank, last) = match p.ty(table) {
            VarType::Global(g) => (g.shape.len(), g.shape.last()),
            VarType::Shared(s) => return self.rank2(table, span, &s.layout.shape, t),
            _ => return None,
        };
        let (instr, role, verb) = (t.name(), t.role(), t.verb());
        if rank != 2 {
            let msg = format!(
                "{instr}: {role} {} has rank {rank}; {instr} {verb} rows of a rank-2 table [rows, w] (view it as one)",
                self.name(table)
            );
            self.err(span, msg);
            return None;
        }
        match last.and_then(|e| e.const_i32()) {
            Some(w) if w >= 1 => Some(w as usize),
            _ => {
                let msg = format!(
                    "{instr}: the row width of {role} {} (its last extent) must be a positive constant: {}",
                    self.name(table),
                    t.why_constant()
                );
                self.err(span, msg);
                None
            }
        }
    }

    fn rank2(
        &mut self,
        table: VarId,
        span: SpanId,
        shape: &[usize],
        t: RowsInstr,
    ) -> Option<usize> {
        if shape.len() != 2 {
            let (instr, role, verb) = (t.name(), t.role(), t.verb());
            let msg = format!(
                "{instr}: {role} {} has shape {shape:?} (rank {}); {instr} {verb} rows of a rank-2 table [rows, w] (slice it to one)",
                self.name(table),
                shape.len()
            );
            self.err(span, msg);
            return None;
        }
        Some(shape[1])
    }

    /// The register layout of the rows of `w` elements that `index` selects along `dim`
    /// (`gather_rows`'s result, `scatter_rows`'s value), or an error: `dim` out of range, or a
    /// layout too large to represent.
    fn rows_layout(
        &mut self,
        span: SpanId,
        t: RowsInstr,
        index: (VarId, &RegisterType),
        w: Option<usize>,
        dim: usize,
    ) -> Result<Option<Layout>, ()> {
        let instr = t.name();
        let rank = index.1.layout.rank();
        if dim >= rank {
            let msg = format!(
                "{instr}: dim {dim} is not a dimension of the index {} (rank {rank}, shape {:?}); dim selects the index dimension the rows are laid along, in 0..{rank}",
                self.name(index.0),
                index.1.layout.shape()
            );
            self.err(span, msg);
            return Err(());
        }
        let Some(w) = w else { return Ok(None) };
        match gather_rows_layout(&index.1.layout, w, dim) {
            Some(l) => Ok(Some(l)),
            None => {
                let msg = format!(
                    "{instr}: rows of {w} elements {} by the index {} ({} locals per thread) make a register tensor too large to represent",
                    t.participle(),
                    self.name(index.0),
                    index.1.layout.num_locals()
                );
                self.err(span, msg);
                Err(())
            }
        }
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
            Instruction::Lookup {
                out,
                table,
                rows,
                cols,
            } => {
                let ok = self.lookup_operands(span, name, *table, *rows, *cols);
                self.define(*out, ok, span, name);
            }
            Instruction::GatherRows {
                out,
                src,
                index,
                dim,
            } => {
                let t = RowsInstr::Gather;
                let (d, w) = if let VarType::Register(r) = self.p.ty(*src) {
                    self.register_table(*src, r, span, name)
                } else {
                    let d = self.memory_operand(*src, span, name, "the source", false);
                    let w = d.and_then(|d| {
                        self.addressable_dtype(span, name, *src, d);
                        self.row_width(*src, span, t)
                    });
                    (d, w)
                };
                let i = self.index_operand(*index, span, name);
                let mut ok = d.is_some() && i.is_some() && w.is_some();
                if let Some(i) = i {
                    ok &= self.rows_layout(span, t, (*index, i), w, *dim).is_ok();
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
            Instruction::ScatterRows {
                src,
                dst,
                index,
                dim,
            } => {
                let t = RowsInstr::Scatter;
                let r = self.reg(*src, span, name, "the scattered value");
                let d = self.memory_operand(*dst, span, name, "the destination", true);
                let i = self.index_operand(*index, span, name);
                let w = d.and_then(|d| {
                    self.addressable_dtype(span, name, *dst, d);
                    self.row_width(*dst, span, t)
                });
                if let (Some(r), Some(d)) = (r, d) {
                    if r.dtype != d {
                        let msg = format!(
                            "scatter_rows: the scattered value {} holds {} but {} holds {d}; the dtypes must match",
                            self.name(*src),
                            r.dtype,
                            self.name(*dst)
                        );
                        self.err(span, msg);
                    }
                }
                let want = match i {
                    Some(i) => self
                        .rows_layout(span, t, (*index, i), w, *dim)
                        .ok()
                        .flatten(),
                    None => None,
                };
                if let (Some(r), Some(i), Some(w), Some(want)) = (r, i, w, want) {
                    // Layouts are canonical: `==` compares the functions (thread, local) ->
                    // element.
                    if r.layout != want {
                        let mut local = vec!["1".to_string(); i.layout.rank()];
                        local[*dim] = w.to_string();
                        let local = format!("local({})", local.join(", "));
                        let msg = format!(
                            "scatter_rows: the scattered value {} has layout {} (shape {:?}), but rows of {w} elements written through the index {} along dim {dim} need {} (shape {:?}): the index's layout {} composed with {local}, the layout gather_rows({}, {}, {dim}) returns, so that local l * {w} + c of a thread is column c of the row its index local l selects",
                            self.name(*src),
                            r.layout.to_expr(),
                            r.layout.shape(),
                            self.name(*index),
                            want.to_expr(),
                            want.shape(),
                            i.layout.to_expr(),
                            self.name(*dst),
                            self.name(*index)
                        );
                        self.err(span, msg);
                    }
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
