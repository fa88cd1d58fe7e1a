//! Data-dependent addressing: `item` (a register element as a uniform scalar), `gather`,
//! `gather_rows`, `scatter`, `scatter_rows` and atomics. The IR services for these instructions (result types, printing,
//! operands, builder methods) live here so the shared matches elsewhere stay one line each.

use super::builder::Dest;
use super::{Instruction, ProgramBuilder, RegisterType, ScalarType, VarId, VarType};
use crate::layout::Layout;

/// The `[rows, w]` row width of a `gather_rows` source or a `scatter_rows` destination: the
/// last extent of a rank-2 shared or register tensor, or of a rank-2 global view whose last
/// extent is a constant of at least 1. `None` for anything else (the verifier says why).
pub fn gather_rows_width(src: &VarType) -> Option<usize> {
    match src {
        VarType::Shared(s) if s.layout.shape.len() == 2 => Some(s.layout.shape[1]),
        VarType::Register(r) if r.layout.rank() == 2 => Some(r.layout.shape()[1]),
        VarType::Global(g) if g.shape.len() == 2 => match g.shape[1].const_i32() {
            Some(w) if w >= 1 => Some(w as usize),
            _ => None,
        },
        _ => None,
    }
}

/// How a register table `[rows, w]` of `gather_rows` lies on a warp's lanes: every warp holds
/// the whole table, row `r` on one lane as `w` consecutive locals from `slot(r) · w`, so that a
/// row is read from another lane by warp shuffles of the same registers (one per 32-bit word
/// and slot). Two placements qualify, the ones a layout writes most simply:
///
/// - **interleaved** (`local(S, 1).spatial(32, 1).local(1, w)`, replicated over the warps): row
///   `r` on lane `r % 32`, slot `r / 32`;
/// - **blocked** (`spatial(32, 1).local(S, w)`, replicated): row `r` on lane `r / S`, slot `r % S`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarpTable {
    pub rows: usize,
    pub width: usize,
    /// `S = rows / 32`: the rows each lane holds (one shuffle per slot and word).
    pub slots: usize,
    /// `true`: row `r` on lane `r / S` (blocked); `false`: on lane `r % 32` (interleaved).
    pub blocked: bool,
}

impl WarpTable {
    /// The most rows a register table may hold: 32 slots a lane, each read by one shuffle per
    /// word of every look-up.
    pub const MAX_ROWS: usize = 1024;

    /// The lane and slot of row `r`.
    pub fn place(&self, r: usize) -> (usize, usize) {
        if self.blocked {
            (r / self.slots, r % self.slots)
        } else {
            (r % 32, r / 32)
        }
    }
}

/// The [`WarpTable`] placement of a register table in `layout` for a block of `block_threads`
/// threads, or why it has none (the message names what to change).
pub fn warp_table(layout: &Layout, block_threads: usize) -> Result<WarpTable, String> {
    let shape = layout.shape();
    if shape.len() != 2 {
        return Err(format!(
            "a register table must be [rows, w]; this one has shape {shape:?}"
        ));
    }
    let (rows, width) = (shape[0], shape[1]);
    // Block thread `t` plays layout thread `t % n` (a smaller layout repeats over the block).
    let n = layout.num_threads();
    if n == 0 || !n.is_multiple_of(32) || !block_threads.is_multiple_of(n) {
        return Err(format!(
            "a register table must lie on whole warps, every warp holding all of it: its layout covers {n} threads, the block {block_threads}"
        ));
    }
    if !rows.is_multiple_of(32) || rows == 0 || rows > WarpTable::MAX_ROWS {
        return Err(format!(
            "a register table's rows must be a multiple of 32 (the lanes of a warp) up to {}; it has {rows}",
            WarpTable::MAX_ROWS
        ));
    }
    let slots = rows / 32;
    if layout.num_locals() != slots * width {
        return Err(format!(
            "each lane must hold rows / 32 = {slots} whole rows of {width} elements, {} locals; the layout gives it {}",
            slots * width,
            layout.num_locals()
        ));
    }
    let fits = |t: &WarpTable| {
        (0..rows).all(|r| {
            let (lane, slot) = t.place(r);
            (0..width).all(|c| {
                let owners = layout.owners(&[r, c]);
                (0..block_threads / 32)
                    .all(|g| owners.contains(&((g * 32 + lane) % n, slot * width + c)))
            })
        })
    };
    [false, true]
        .into_iter()
        .map(|blocked| WarpTable {
            rows,
            width,
            slots,
            blocked,
        })
        .find(fits)
        .ok_or_else(|| {
            format!(
                "every warp must hold the whole table, row r on lane r % 32 at locals [(r / 32) * {width}, ..) (local({slots}, 1).spatial(32, 1).local(1, {width}), replicated over the warps) or on lane r / {slots} at locals [(r % {slots}) * {width}, ..) (spatial(32, 1).local({slots}, {width}), replicated)"
            )
        })
}

/// The layout of `gather_rows(src, index, dim)` for an index in `index` and rows of `w`
/// elements: `index.local(1, .., w, .., 1)` (`w` at `dim`), so local `l * w + c` of each
/// thread is column `c` of the row its index local `l` selects. `None` when `dim` is not a
/// dimension of `index` or the result is too large to represent.
pub fn gather_rows_layout(index: &Layout, w: usize, dim: usize) -> Option<Layout> {
    if dim >= index.rank() || w == 0 {
        return None;
    }
    let mut shape = vec![1; index.rank()];
    shape[dim] = w;
    index.compose(&Layout::local(&shape)).ok()
}

/// The layout of a `lookup` result for a table of shape `table` read by rows in `rows`: the
/// rows' own layout for a rank-2 table `[R, C]` (one element each), and for a rank-3 table `[R,
/// C, W]` (a vector of `W` elements each) the rows' layout composed with `local(1, .., 1, W)`,
/// so out local `l · W + v` is element `v` of the vector of rows local `l`.
pub fn lookup_layout(table: &[usize], rows: &Layout) -> Option<Layout> {
    match table.len() {
        2 => Some(rows.clone()),
        3 => gather_rows_layout(rows, table[2], rows.rank().checked_sub(1)?),
        _ => None,
    }
}

/// The read-modify-write of an [`Instruction::Atomic`], on `i32`, `u32` or `f32` elements.
///
/// Updates of one launch apply in an unspecified order on the GPU. The interpreter applies them
/// in order (blocks in launch order, or the order given to `interp::run_ordered`, then elements in row-major order of the value tile), each
/// one exactly and then rounded (`f32` add) or checked (integer add overflowing the dtype is
/// an error, where the GPU wraps). Integer add, max and min, and `f32` max and min, give the
/// same result in any order; an `f32` sum does not, so tests compare it with a tolerance.
/// `f32` max and min order values totally with `-0 < +0`; NaN is an error in the interpreter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum AtomicOp {
    Add,
    Max,
    Min,
    /// Store `value`; the old value is the result.
    Exchange,
    /// Store `value` where the old value equals `compare` (bit for bit); the old value is the
    /// result.
    Cas,
}

impl AtomicOp {
    /// The CUDA function (and the verb in messages).
    pub fn cuda_name(self) -> &'static str {
        match self {
            AtomicOp::Add => "atomicAdd",
            AtomicOp::Max => "atomicMax",
            AtomicOp::Min => "atomicMin",
            AtomicOp::Exchange => "atomicExch",
            AtomicOp::Cas => "atomicCAS",
        }
    }
}

impl Instruction {
    /// [`Instruction::output_types`] of the addressing instructions.
    pub(super) fn addressing_output_types(
        &self,
        ty: &dyn Fn(VarId) -> VarType,
    ) -> Vec<(VarId, VarType)> {
        match self {
            Instruction::Item { out, x } => {
                let t = match ty(*x) {
                    VarType::Register(r) if r.dtype.is_float() => VarType::Scalar(ScalarType::F32),
                    VarType::Register(_) => VarType::Scalar(ScalarType::I32),
                    _ => VarType::Unknown,
                };
                vec![(*out, t)]
            }
            Instruction::Gather { out, src, index } => {
                let dtype = match ty(*src) {
                    VarType::Global(g) => Some(g.dtype),
                    VarType::Shared(s) => Some(s.dtype),
                    _ => None,
                };
                let t = match (dtype, ty(*index)) {
                    (Some(dtype), VarType::Register(r)) => VarType::Register(RegisterType {
                        dtype,
                        layout: r.layout,
                    }),
                    _ => VarType::Unknown,
                };
                vec![(*out, t)]
            }
            Instruction::Lookup {
                out, table, rows, ..
            } => {
                let t = match (ty(*table), ty(*rows)) {
                    (VarType::Shared(s), VarType::Register(r)) => {
                        match lookup_layout(&s.layout.shape, &r.layout) {
                            Some(layout) => VarType::Register(RegisterType {
                                dtype: s.dtype,
                                layout,
                            }),
                            None => VarType::Unknown,
                        }
                    }
                    _ => VarType::Unknown,
                };
                vec![(*out, t)]
            }
            Instruction::GatherRows {
                out,
                src,
                index,
                dim,
            } => {
                let src = ty(*src);
                let dtype = match &src {
                    VarType::Global(g) => Some(g.dtype),
                    VarType::Shared(s) => Some(s.dtype),
                    VarType::Register(r) => Some(r.dtype),
                    _ => None,
                };
                let t = match (dtype, gather_rows_width(&src), ty(*index)) {
                    (Some(dtype), Some(w), VarType::Register(r)) => {
                        match gather_rows_layout(&r.layout, w, *dim) {
                            Some(layout) => VarType::Register(RegisterType { dtype, layout }),
                            None => VarType::Unknown,
                        }
                    }
                    _ => VarType::Unknown,
                };
                vec![(*out, t)]
            }
            Instruction::Atomic {
                dst,
                value,
                out: Some(out),
                ..
            } => {
                let dtype = match ty(*dst) {
                    VarType::Global(g) => Some(g.dtype),
                    VarType::Shared(s) => Some(s.dtype),
                    _ => None,
                };
                let t = match (dtype, ty(*value)) {
                    (Some(dtype), VarType::Register(r)) => VarType::Register(RegisterType {
                        dtype,
                        layout: r.layout,
                    }),
                    _ => VarType::Unknown,
                };
                vec![(*out, t)]
            }
            _ => Vec::new(),
        }
    }

    /// [`Instruction::inputs`] of the addressing instructions (the destination of a store is
    /// read: it names the tensor written into).
    pub(super) fn addressing_inputs(&self) -> Vec<VarId> {
        match self {
            Instruction::Item { x, .. } => vec![*x],
            Instruction::Gather { src, index, .. } | Instruction::GatherRows { src, index, .. } => {
                vec![*src, *index]
            }
            Instruction::Lookup {
                table, rows, cols, ..
            } => vec![*table, *rows, *cols],
            Instruction::Scatter { src, dst, index }
            | Instruction::ScatterRows {
                src, dst, index, ..
            } => vec![*src, *dst, *index],
            Instruction::Atomic {
                dst,
                index,
                value,
                compare,
                ..
            } => {
                let mut v = vec![*dst, *index];
                v.extend(compare.iter().copied());
                v.push(*value);
                v
            }
            _ => Vec::new(),
        }
    }

    /// Every variable an addressing instruction reads or writes.
    pub(crate) fn addressing_vars(&self) -> Vec<VarId> {
        let mut v = self.addressing_inputs();
        v.extend(self.outputs());
        v
    }
}

impl super::Program {
    /// [`super::Program::instruction_text`] of the addressing instructions.
    pub(super) fn addressing_text(&self, i: &Instruction) -> String {
        let n = |v: &VarId| self.var_name(*v);
        let name = i.name();
        match i {
            Instruction::Item { out, x } => format!("{} = {name}({})", n(out), n(x)),
            Instruction::Gather { out, src, index } => {
                format!("{} = {name}({}, {})", n(out), n(src), n(index))
            }
            Instruction::GatherRows {
                out,
                src,
                index,
                dim,
            } => format!("{} = {name}({}, {}, {dim})", n(out), n(src), n(index)),
            Instruction::Lookup {
                out,
                table,
                rows,
                cols,
            } => format!(
                "{} = {name}({}, {}, {})",
                n(out),
                n(table),
                n(rows),
                n(cols)
            ),
            Instruction::Scatter { src, dst, index } => {
                format!("{name}({}, {}, {})", n(src), n(dst), n(index))
            }
            Instruction::ScatterRows {
                src,
                dst,
                index,
                dim,
            } => format!("{name}({}, {}, {}, {dim})", n(src), n(dst), n(index)),
            Instruction::Atomic {
                dst,
                index,
                value,
                compare,
                out,
                ..
            } => {
                let cmp = compare.map(|c| format!("{}, ", n(&c))).unwrap_or_default();
                let call = format!("{name}({}, {}, {cmp}{})", n(dst), n(index), n(value));
                match out {
                    Some(o) => format!("{} = {call}", n(o)),
                    None => call,
                }
            }
            _ => String::new(),
        }
    }
}

impl ProgramBuilder {
    /// `item(x)`: the one element of `x` as a uniform scalar (`i32`, or `f32` for floats).
    pub fn item(&mut self, name: &str, x: VarId) -> VarId {
        self.define(name, |out| Instruction::Item { out, x })
    }

    /// `gather(src, index)`: `out[e] = src.flat[index[e]]`, 0 outside `src`.
    pub fn gather(&mut self, dest: impl Into<Dest>, src: VarId, index: VarId) -> VarId {
        self.define(dest, |out| Instruction::Gather { out, src, index })
    }

    /// `lookup(table, rows, cols)`: `out[e] = table[rows[e], cols[e] % C]` for a shared `[R, C]`
    /// table, 0 for a row outside `[0, R)`; for an `[R, C, W]` table the vector
    /// `table[rows[e], cols[e] % C, ..]` ([`Instruction::Lookup`], [`lookup_layout`]).
    pub fn lookup(
        &mut self,
        dest: impl Into<Dest>,
        table: VarId,
        rows: VarId,
        cols: VarId,
    ) -> VarId {
        self.define(dest, |out| Instruction::Lookup {
            out,
            table,
            rows,
            cols,
        })
    }

    /// `gather_rows(src, index, dim)`: `out[.., i * w + c, ..] = src[index[.., i, ..], c]` for
    /// a `[rows, w]` table `src`, a row of zeros for an index outside `[0, rows)`
    /// ([`Instruction::GatherRows`]).
    pub fn gather_rows(
        &mut self,
        dest: impl Into<Dest>,
        src: VarId,
        index: VarId,
        dim: usize,
    ) -> VarId {
        self.define(dest, |out| Instruction::GatherRows {
            out,
            src,
            index,
            dim,
        })
    }

    /// `scatter(src, dst, index)`: `dst.flat[index[e]] = src[e]`, skipping indices outside.
    pub fn scatter(&mut self, src: VarId, dst: VarId, index: VarId) {
        self.instr(Instruction::Scatter { src, dst, index });
    }

    /// `scatter_rows(src, dst, index, dim)`: row `index[.., i, ..]` of the `[rows, w]` table
    /// `dst` becomes `src[.., i * w + c, ..]` (`c < w`), once per index element, skipping
    /// indices outside `[0, rows)`; `src` has the layout `gather_rows(dst, index, dim)` would
    /// ([`Instruction::ScatterRows`]).
    pub fn scatter_rows(&mut self, src: VarId, dst: VarId, index: VarId, dim: usize) {
        self.instr(Instruction::ScatterRows {
            src,
            dst,
            index,
            dim,
        });
    }

    /// An atomic update of `dst.flat[index[e]]` with `value[e]` (`compare` for
    /// [`AtomicOp::Cas`]); with `out`, the old values are returned in a new tensor.
    pub fn atomic(
        &mut self,
        op: AtomicOp,
        dst: VarId,
        index: VarId,
        value: VarId,
        compare: Option<VarId>,
        out: Option<Dest>,
    ) -> Option<VarId> {
        match out {
            None => {
                self.instr(Instruction::Atomic {
                    op,
                    dst,
                    index,
                    value,
                    compare,
                    out: None,
                });
                None
            }
            Some(d) => Some(self.define(d, |o| Instruction::Atomic {
                op,
                dst,
                index,
                value,
                compare,
                out: Some(o),
            })),
        }
    }
}
