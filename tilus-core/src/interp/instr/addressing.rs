//! `item`, `gather`, `gather_rows`, `scatter`, `scatter_rows` and atomics: addresses computed
//! from register values.
//!
//! A global or shared tensor is addressed as one flat row-major array; an index outside
//! `[0, numel)` is masked (reads 0, writes and updates are skipped). `gather_rows` and
//! `scatter_rows` access the `w` flat elements `row * w ..` of each row, and mask a row outside
//! `[0, rows)` whole. Each element of a register tensor is written or applied once, by its
//! first owner (replicas hold equal values), in row-major element order; `scatter_rows` writes
//! each row once, by the first owner of its index element, in row-major order of the index.
//! See [`crate::ir::AtomicOp`] for what that order means.

use std::collections::HashMap;

use super::super::memory::{GlobalView, RegTensor, SharedView, Value};
use super::super::numeric::decode_int;
use super::super::{Block, Machine};
use crate::ir::{AtomicOp, Instruction, VarId};
use crate::verify::table::unravel;
use crate::DType;

/// A global or shared tensor, addressed flat.
enum Mem {
    Global(GlobalView),
    Shared(SharedView),
}

impl Mem {
    fn numel(&self) -> i64 {
        match self {
            Mem::Global(g) => g.shape.iter().product(),
            Mem::Shared(s) => s.layout.shape.iter().product::<usize>() as i64,
        }
    }

    fn dtype(&self) -> DType {
        match self {
            Mem::Global(g) => g.dtype,
            Mem::Shared(s) => s.dtype,
        }
    }

    /// The multi-index of flat element `flat` (in range).
    fn index(&self, flat: i64) -> Vec<usize> {
        match self {
            Mem::Global(g) => {
                let shape: Vec<usize> = g.shape.iter().map(|&n| n as usize).collect();
                unravel(flat as usize, &shape)
            }
            Mem::Shared(s) => unravel(flat as usize, &s.layout.shape),
        }
    }
}

/// The row width `w` of a `[rows, w]` table, 0 when `mem` is not of rank 2.
fn rows_width(mem: &Mem) -> i64 {
    match mem {
        Mem::Global(g) if g.shape.len() == 2 => g.shape[1],
        Mem::Shared(s) if s.layout.shape.len() == 2 => s.layout.shape[1] as i64,
        _ => 0,
    }
}

/// The `i32` index held at local `i` of thread `t`.
fn index_at(index: &RegTensor, t: usize, i: usize) -> i64 {
    index.get(t, i) as i32 as i64
}

impl Machine<'_> {
    /// `gather_rows` from a register table: each thread reads row `index` from the lane of its
    /// own warp that holds it ([`crate::ir::WarpTable`]), as the GPU's shuffles do.
    fn shuffle_rows(
        &mut self,
        block: &mut Block,
        out: VarId,
        src: VarId,
        index: VarId,
        dim: usize,
    ) -> Result<(), String> {
        let table = self.reg(block, src)?.clone();
        let idx = self.reg(block, index)?.clone();
        let place = crate::ir::warp_table(&table.layout, self.block_threads)
            .map_err(|e| format!("gather_rows: `{}`: {e}", self.name(src)))?;
        let w = place.width;
        let layout = crate::ir::gather_rows_layout(&idx.layout, w, dim).ok_or_else(|| {
            format!(
                "gather_rows: no layout for rows of `{}` by index `{}` along dim {dim}",
                self.name(src),
                self.name(index)
            )
        })?;
        let tab = self.table(&idx.layout)?;
        let mut reg = RegTensor::new(table.dtype, layout, self.block_threads);
        for t in 0..self.block_threads {
            for l in 0..tab.locals {
                let r = index_at(&idx, t, l);
                let from = usize::try_from(r)
                    .ok()
                    .filter(|&r| r < place.rows)
                    .map(|r| place.place(r));
                for c in 0..w {
                    let code = match from {
                        Some((lane, slot)) => table.get(t / 32 * 32 + lane, slot * w + c),
                        None => 0,
                    };
                    reg.set(t, l * w + c, code);
                }
            }
        }
        block.env[out.0 as usize] = Some(Value::Reg(reg));
        Ok(())
    }

    fn mem(&self, block: &Block, v: VarId) -> Result<Mem, String> {
        match self.value(block, v)? {
            Value::Global(g) => Ok(Mem::Global(g.clone())),
            Value::Shared(s) => Ok(Mem::Shared(s.clone())),
            _ => Err(format!(
                "`{}` is not a global or shared tensor",
                self.name(v)
            )),
        }
    }

    /// Thread `t` reads flat element `flat` (in range) of `mem`, named `v`.
    fn read_flat(
        &mut self,
        block: &mut Block,
        t: usize,
        mem: &Mem,
        v: VarId,
        flat: i64,
    ) -> Result<u32, String> {
        let index = mem.index(flat);
        match mem {
            Mem::Global(g) => {
                let at: Vec<i64> = index.iter().map(|&x| x as i64).collect();
                let code = self.globals.read(g, &at).map_err(|e| {
                    format!("`{}`{at:?} (flat {flat}) cannot be read: {e}", self.name(v))
                })?;
                Ok(code.unwrap_or(0))
            }
            Mem::Shared(s) => {
                let name = self.name(v).to_string();
                block.shared.read(t, s, &name, &index)
            }
        }
    }

    pub(super) fn addressing(
        &mut self,
        ins: &Instruction,
        block: &mut Block,
    ) -> Result<(), String> {
        match ins {
            Instruction::Item { out, x } => {
                let r = self.reg(block, *x)?;
                let code = r.get(0, 0);
                let value = if r.dtype.is_float() {
                    let v = r.dtype.decode(code) as f32;
                    if v.is_nan() {
                        return Err(format!(
                            "`{}` holds NaN; f32 scalars are never NaN",
                            self.name(*x)
                        ));
                    }
                    Value::F32(v)
                } else {
                    let v = decode_int(r.dtype, code);
                    Value::I32(i32::try_from(v).map_err(|_| {
                        format!(
                            "`{}` holds {v}, which does not fit an i32 scalar",
                            self.name(*x)
                        )
                    })?)
                };
                block.env[out.0 as usize] = Some(value);
            }
            Instruction::Gather { out, src, index } => {
                let mem = self.mem(block, *src)?;
                let idx = self.reg(block, *index)?.clone();
                let tab = self.table(&idx.layout)?;
                let numel = mem.numel();
                let mut reg = RegTensor::new(mem.dtype(), idx.layout.clone(), self.block_threads);
                // Shared reads are checked per reading thread, replicas included; global reads
                // are done once per layout thread and copied to the replicas.
                let threads = match mem {
                    Mem::Global(_) => tab.threads.min(self.block_threads),
                    Mem::Shared(_) => self.block_threads,
                };
                for t in 0..threads {
                    for i in 0..tab.locals {
                        let f = index_at(&idx, t, i);
                        let code = if (0..numel).contains(&f) {
                            self.read_flat(block, t, &mem, *src, f)?
                        } else {
                            0
                        };
                        reg.set(t, i, code);
                    }
                }
                if matches!(mem, Mem::Global(_)) {
                    reg.replicate(tab.threads);
                }
                block.env[out.0 as usize] = Some(Value::Reg(reg));
            }
            Instruction::Lookup {
                out,
                table,
                rows,
                cols,
            } => {
                let mem = self.mem(block, *table)?;
                let r = self.reg(block, *rows)?.clone();
                let c = super::super::math::broadcast_codes(self, block, &r.layout, *cols)?;
                // `[R, C]`: one element per entry; `[R, C, W]`: a vector of `W`.
                let (height, width, w) = match &mem {
                    Mem::Shared(s) if (2..=3).contains(&s.layout.shape.len()) => {
                        let shape = &s.layout.shape;
                        (
                            shape[0] as i64,
                            shape[1] as i64,
                            shape.get(2).copied().unwrap_or(1) as i64,
                        )
                    }
                    _ => {
                        return Err(format!(
                            "`{}` is not a rank-2 or rank-3 shared table",
                            self.name(*table)
                        ))
                    }
                };
                let shape = match &mem {
                    Mem::Shared(s) => s.layout.shape.clone(),
                    _ => unreachable!("matched above"),
                };
                let layout = crate::ir::lookup_layout(&shape, &r.layout).ok_or_else(|| {
                    format!("lookup: no result layout for `{}`", self.name(*rows))
                })?;
                let tab = self.table(&r.layout)?;
                let mut reg = RegTensor::new(mem.dtype(), layout, self.block_threads);
                for (t, cols) in c.iter().enumerate() {
                    for (i, &col) in cols.iter().enumerate().take(tab.locals) {
                        let row = decode_int(r.dtype, r.get(t, i));
                        for v in 0..w {
                            let code = if (0..height).contains(&row) {
                                let col = (col as i32 as i64).rem_euclid(width);
                                let at = (row * width + col) * w + v;
                                self.read_flat(block, t, &mem, *table, at)?
                            } else {
                                0
                            };
                            reg.set(t, i * w as usize + v as usize, code);
                        }
                    }
                }
                block.env[out.0 as usize] = Some(Value::Reg(reg));
            }
            Instruction::GatherRows {
                out,
                src,
                index,
                dim,
            } if matches!(self.value(block, *src)?, Value::Reg(_)) => {
                self.shuffle_rows(block, *out, *src, *index, *dim)?
            }
            Instruction::GatherRows {
                out,
                src,
                index,
                dim,
            } => {
                let mem = self.mem(block, *src)?;
                let idx = self.reg(block, *index)?.clone();
                let w = rows_width(&mem);
                let layout = (w > 0)
                    .then(|| crate::ir::gather_rows_layout(&idx.layout, w as usize, *dim))
                    .flatten()
                    .ok_or_else(|| {
                        format!(
                            "gather_rows: `{}` is not a [rows, w] table for index `{}` along dim {dim}",
                            self.name(*src),
                            self.name(*index)
                        )
                    })?;
                let tab = self.table(&idx.layout)?;
                let rows = mem.numel() / w;
                let mut reg = RegTensor::new(mem.dtype(), layout, self.block_threads);
                // As `gather`: shared reads per reading thread (replicas included, so the
                // hazard checks see every one); global reads once per layout thread, copied to
                // the replicas.
                let threads = match mem {
                    Mem::Global(_) => tab.threads.min(self.block_threads),
                    Mem::Shared(_) => self.block_threads,
                };
                let w = w as usize;
                for t in 0..threads {
                    for l in 0..tab.locals {
                        let r = index_at(&idx, t, l);
                        for c in 0..w {
                            let code = if (0..rows).contains(&r) {
                                self.read_flat(block, t, &mem, *src, r * w as i64 + c as i64)?
                            } else {
                                0
                            };
                            reg.set(t, l * w + c, code);
                        }
                    }
                }
                if matches!(mem, Mem::Global(_)) {
                    reg.replicate(tab.threads);
                }
                block.env[out.0 as usize] = Some(Value::Reg(reg));
            }
            Instruction::Scatter { src, dst, index } => {
                let mem = self.mem(block, *dst)?;
                let x = self.reg(block, *src)?.clone();
                let idx = self.reg(block, *index)?.clone();
                let tab = self.table(&x.layout)?;
                let numel = mem.numel();
                let mut seen: HashMap<i64, usize> = HashMap::new();
                for (e, owner) in tab.first_owner.iter().enumerate() {
                    let Some((t, i)) = *owner else { continue };
                    let (t, i) = (t as usize, i as usize);
                    let f = index_at(&idx, t, i);
                    if !(0..numel).contains(&f) {
                        continue;
                    }
                    if let Some(&e1) = seen.get(&f) {
                        return Err(format!(
                            "elements {:?} and {:?} of `{}` both scatter to index {f} of `{}`; the GPU would keep either value",
                            unravel(e1, &tab.shape),
                            unravel(e, &tab.shape),
                            self.name(*src),
                            self.name(*dst)
                        ));
                    }
                    seen.insert(f, e);
                    self.write_flat(block, t, &mem, *dst, f, x.get(t, i))?;
                }
            }
            Instruction::ScatterRows {
                src,
                dst,
                index,
                dim,
            } => {
                let mem = self.mem(block, *dst)?;
                let x = self.reg(block, *src)?.clone();
                let idx = self.reg(block, *index)?.clone();
                let w = rows_width(&mem);
                let layout = (w > 0)
                    .then(|| crate::ir::gather_rows_layout(&idx.layout, w as usize, *dim))
                    .flatten();
                if layout.as_ref() != Some(&x.layout) {
                    return Err(format!(
                        "scatter_rows: `{}` is not the rows of [rows, w] table `{}` for index `{}` along dim {dim}",
                        self.name(*src),
                        self.name(*dst),
                        self.name(*index)
                    ));
                }
                let tab = self.table(&idx.layout)?;
                let rows = mem.numel() / w;
                let w = w as usize;
                // Row -> the index element that wrote it.
                let mut seen: HashMap<i64, usize> = HashMap::new();
                for (e, owner) in tab.first_owner.iter().enumerate() {
                    let Some((t, l)) = *owner else { continue };
                    let (t, l) = (t as usize, l as usize);
                    let r = index_at(&idx, t, l);
                    if !(0..rows).contains(&r) {
                        continue;
                    }
                    if let Some(&e1) = seen.get(&r) {
                        return Err(format!(
                            "elements {:?} and {:?} of the index `{}` both scatter row {r} of `{}` (from `{}`); the GPU would keep either row",
                            unravel(e1, &tab.shape),
                            unravel(e, &tab.shape),
                            self.name(*index),
                            self.name(*dst),
                            self.name(*src)
                        ));
                    }
                    seen.insert(r, e);
                    for c in 0..w {
                        let f = r * w as i64 + c as i64;
                        self.write_flat(block, t, &mem, *dst, f, x.get(t, l * w + c))?;
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
                let mem = self.mem(block, *dst)?;
                let x = self.reg(block, *value)?.clone();
                let idx = self.reg(block, *index)?.clone();
                let cmp = match compare {
                    Some(c) => Some(self.reg(block, *c)?.clone()),
                    None => None,
                };
                let tab = self.table(&x.layout)?;
                let numel = mem.numel();
                let dtype = mem.dtype();
                let mut old = RegTensor::new(dtype, x.layout.clone(), self.block_threads);
                for owner in tab.first_owner.iter() {
                    let Some((t, i)) = *owner else { continue };
                    let (t, i) = (t as usize, i as usize);
                    let f = index_at(&idx, t, i);
                    if !(0..numel).contains(&f) {
                        continue;
                    }
                    let v = x.get(t, i);
                    let c = cmp.as_ref().map(|c| c.get(t, i));
                    let update = |o: u32| apply(*op, dtype, o, v, c);
                    let code = match &mem {
                        Mem::Shared(s) => {
                            let name = self.name(*dst).to_string();
                            let at = mem.index(f);
                            block
                                .shared
                                .atomic(t, s, &name, &at, update)
                                .map_err(|e| format!("index {f}: {e}"))?
                        }
                        Mem::Global(_) => {
                            let o = self.read_flat(block, t, &mem, *dst, f)?;
                            let n = update(o)
                                .map_err(|e| format!("`{}` at index {f}: {e}", self.name(*dst)))?;
                            self.write_flat(block, t, &mem, *dst, f, n)?;
                            o
                        }
                    };
                    old.set(t, i, code);
                }
                if let Some(o) = out {
                    block.env[o.0 as usize] = Some(Value::Reg(old));
                }
            }
            _ => unreachable!("dispatched for addressing instructions only"),
        }
        Ok(())
    }

    /// Thread `t` writes `code` at flat element `flat` (in range) of `mem`, named `v`.
    fn write_flat(
        &mut self,
        block: &mut Block,
        t: usize,
        mem: &Mem,
        v: VarId,
        flat: i64,
        code: u32,
    ) -> Result<(), String> {
        let index = mem.index(flat);
        match mem {
            Mem::Global(g) => {
                let at: Vec<i64> = index.iter().map(|&x| x as i64).collect();
                self.globals.write(g, &at, code).map_err(|e| {
                    format!(
                        "`{}`{at:?} (flat {flat}) cannot be written: {e}",
                        self.name(v)
                    )
                })
            }
            Mem::Shared(s) => {
                let name = self.name(v).to_string();
                block.shared.write(t, s, &name, &index, code)
            }
        }
    }
}

/// The new code of an atomic update of `old` with `v` (and `cmp` for compare-and-swap).
fn apply(op: AtomicOp, dtype: DType, old: u32, v: u32, cmp: Option<u32>) -> Result<u32, String> {
    match op {
        AtomicOp::Exchange => return Ok(v),
        AtomicOp::Cas => return Ok(if Some(old) == cmp { v } else { old }),
        _ => {}
    }
    match dtype {
        DType::F32 => {
            let (a, b) = (f32::from_bits(old), f32::from_bits(v));
            if a.is_nan() || b.is_nan() {
                return Err(format!("atomic {op:?} of {a} and {b}: NaN operand"));
            }
            let r = match op {
                // One IEEE f32 addition: the exact sum rounded to nearest even.
                AtomicOp::Add => a + b,
                // The total order with -0 < +0, as the GPU's integer-compare lowering gives.
                AtomicOp::Max => {
                    if a.total_cmp(&b).is_ge() {
                        a
                    } else {
                        b
                    }
                }
                _ => {
                    if a.total_cmp(&b).is_le() {
                        a
                    } else {
                        b
                    }
                }
            };
            if r.is_nan() {
                return Err(format!("atomic add of {a} and {b} is NaN"));
            }
            Ok(r.to_bits())
        }
        DType::UInt(32) => match op {
            AtomicOp::Add => old
                .checked_add(v)
                .ok_or_else(|| format!("atomic add overflows u32: {old} + {v}")),
            AtomicOp::Max => Ok(old.max(v)),
            _ => Ok(old.min(v)),
        },
        _ => {
            let (a, b) = (old as i32, v as i32);
            match op {
                AtomicOp::Add => a
                    .checked_add(b)
                    .map(|r| r as u32)
                    .ok_or_else(|| format!("atomic add overflows i32: {a} + {b}")),
                AtomicOp::Max => Ok(a.max(b) as u32),
                _ => Ok(a.min(b) as u32),
            }
        }
    }
}
