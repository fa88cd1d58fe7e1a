//! The instructions. Each returns a message without the instruction's name (the caller adds it
//! and the span).

mod addressing;
mod tma;
mod wgmma;

pub(super) use wgmma::PendingDot;

use super::memory::{GlobalView, RegTensor, SharedView, Value};
use super::numeric::{convert, decode_int, encode_float, encode_int, is_int};
use super::scalar::Scalar;
use super::{Block, Flow, Machine};
use crate::ir::{ElementOp, Expr, Instruction, Operand, VarId};
use crate::layout::SharedLayout;
use crate::storage;
use crate::verify::shared::allocation_bytes;
use crate::verify::table::{unravel, ThreadMap, NONE};
use crate::DType;

impl Machine<'_> {
    fn name(&self, v: VarId) -> &str {
        &self.p.var(v).name
    }

    fn value<'b>(&self, block: &'b Block, v: VarId) -> Result<&'b Value, String> {
        block.env[v.0 as usize]
            .as_ref()
            .ok_or_else(|| format!("`{}` has no value", self.name(v)))
    }

    pub(super) fn reg<'b>(&self, block: &'b Block, v: VarId) -> Result<&'b RegTensor, String> {
        match self.value(block, v)? {
            Value::Reg(r) => Ok(r),
            _ => Err(format!("`{}` is not a register tensor", self.name(v))),
        }
    }

    fn global(&self, block: &Block, v: VarId) -> Result<GlobalView, String> {
        match self.value(block, v)? {
            Value::Global(g) => Ok(g.clone()),
            _ => Err(format!("`{}` is not a global tensor", self.name(v))),
        }
    }

    fn shared(&self, block: &Block, v: VarId) -> Result<SharedView, String> {
        match self.value(block, v)? {
            Value::Shared(s) => Ok(s.clone()),
            _ => Err(format!("`{}` is not a shared tensor", self.name(v))),
        }
    }

    fn ints(&self, block: &Block, exprs: &[Expr], what: &str) -> Result<Vec<i64>, String> {
        exprs
            .iter()
            .map(|e| self.eval_i32(e, block, what).map(i64::from))
            .collect()
    }

    /// Offsets into a global view: `i32` or `i64` (the GPU computes global addresses in 64 bits).
    fn global_offsets(&self, block: &Block, exprs: &[Expr]) -> Result<Vec<i64>, String> {
        exprs
            .iter()
            .map(|e| match self.eval(e, block)? {
                Scalar::I32(v) => Ok(v as i64),
                Scalar::I64(v) => Ok(v),
                v => Err(format!("offset is {v:?}, not an integer")),
            })
            .collect()
    }

    fn extents(&self, block: &Block, exprs: &[Expr], what: &str) -> Result<Vec<i64>, String> {
        let shape = self.ints(block, exprs, what)?;
        if let Some(d) = shape.iter().find(|&&d| d < 0) {
            return Err(format!("{what} {d} is negative (shape {shape:?})"));
        }
        Ok(shape)
    }

    /// Indices of a shared tile of `tile` shape at `offset` of `view`, checked to lie inside.
    fn shared_index(
        &self,
        view: &SharedView,
        name: &str,
        offset: &[i64],
        tile: &[usize],
    ) -> Result<Vec<usize>, String> {
        let shape = &view.layout.shape;
        let lead = shape.len() - tile.len();
        let index: Vec<i64> = (0..shape.len())
            .map(|d| offset[d] + if d < lead { 0 } else { tile[d - lead] as i64 })
            .collect();
        if index
            .iter()
            .zip(shape)
            .any(|(&i, &n)| i < 0 || i >= n as i64)
        {
            return Err(format!(
                "index {index:?} is outside shared tensor `{name}` of shape {shape:?}"
            ));
        }
        Ok(index.into_iter().map(|i| i as usize).collect())
    }

    /// What an asynchronous copy (`copy_async`, `tma_load`) into `view` reads: the tile of
    /// `view`'s shape at `src_offset` of global `src`, row-major, out-of-view elements zero.
    fn copy_source(
        &self,
        block: &Block,
        src: VarId,
        view: &SharedView,
        src_offset: &[Expr],
    ) -> Result<Vec<(Vec<usize>, u32)>, String> {
        let global = self.global(block, src)?;
        let offset = self.global_offsets(block, src_offset)?;
        let shape = &view.layout.shape;
        let lead = global.shape.len() - shape.len();
        let size: usize = shape.iter().product();
        let mut codes = Vec::with_capacity(size);
        let mut index = offset.clone();
        for flat in 0..size {
            let tile = unravel(flat, shape);
            for (d, x) in tile.iter().enumerate() {
                index[lead + d] = offset[lead + d].saturating_add(*x as i64);
            }
            let code = self
                .globals
                .read(&global, &index)
                .map_err(|e| format!("`{}`{index:?} cannot be read: {e}", self.name(src)))?;
            codes.push((tile, code.unwrap_or(0)));
        }
        Ok(codes)
    }

    pub(super) fn instr(&mut self, ins: &Instruction, block: &mut Block) -> Result<Flow, String> {
        let bt = self.block_threads;
        if !block.pending_dots.is_empty() {
            self.check_pending_dots(ins, block)?;
        }
        match ins {
            Instruction::BlockIndices { outs } => {
                for (d, &o) in outs.iter().enumerate() {
                    block.env[o.0 as usize] = Some(Value::I32(block.index[d]));
                }
            }
            Instruction::AllocateGlobal { out, dtype, shape } => {
                let shape = self.extents(block, shape, "extent")?;
                let len = storage::packed_len(*dtype, shape.iter().product::<i64>() as usize);
                let buffer = match self.scratch.get(out) {
                    Some(&b) if self.globals.buffers[b].len() == len => b,
                    Some(_) => {
                        return Err(format!(
                            "`{}` was allocated with another size by an earlier block",
                            self.name(*out)
                        ))
                    }
                    None => {
                        self.globals.buffers.push(vec![0; len]);
                        self.globals.names.push(self.name(*out).to_string());
                        let b = self.globals.buffers.len() - 1;
                        self.scratch.insert(*out, b);
                        b
                    }
                };
                let view = GlobalView {
                    buffer,
                    dtype: *dtype,
                    shape,
                };
                block.env[out.0 as usize] = Some(Value::Global(view));
            }
            Instruction::AllocateShared { out, dtype, layout } => {
                let shared = &mut block.shared;
                let alloc = *block
                    .shared_alloc
                    .entry(*out)
                    .or_insert_with(|| shared.alloc(allocation_bytes(*dtype, layout)));
                let view = SharedView {
                    alloc,
                    base: 0,
                    dtype: *dtype,
                    layout: layout.clone(),
                };
                block.env[out.0 as usize] = Some(Value::Shared(view));
            }
            Instruction::AllocateRegister {
                out,
                dtype,
                layout,
                init,
            } => {
                let mut reg = RegTensor::new(*dtype, layout.clone(), bt);
                if let Some(v) = init {
                    let code = convert(*v, *dtype)?;
                    for t in 0..bt {
                        for i in 0..layout.num_locals() {
                            reg.set(t, i, code);
                        }
                    }
                }
                block.env[out.0 as usize] = Some(Value::Reg(reg));
            }
            Instruction::ViewGlobal {
                out,
                ptr,
                dtype,
                shape,
            } => {
                let buffer = match self.value(block, *ptr)? {
                    Value::Ptr(b) => *b,
                    _ => return Err(format!("`{}` is not a pointer", self.name(*ptr))),
                };
                let shape = self.extents(block, shape, "extent")?;
                let view = GlobalView {
                    buffer,
                    dtype: *dtype,
                    shape,
                };
                block.env[out.0 as usize] = Some(Value::Global(view));
            }
            Instruction::LoadGlobal {
                out,
                src,
                offset,
                layout,
                fill,
            } => {
                let view = self.global(block, *src)?;
                let fill = match fill {
                    Some(v) => view.dtype.fill_code(*v).map_err(|e| e.to_string())?,
                    None => 0,
                };
                let offset = self.global_offsets(block, offset)?;
                let tab = self.table(layout)?;
                let lead = view.shape.len() - tab.shape.len();
                let mut reg = RegTensor::new(view.dtype, layout.clone(), bt);
                let mut index = offset.clone();
                // Replicas load the same elements: load once per layout thread, then copy.
                for t in 0..tab.threads.min(bt) {
                    for i in 0..tab.locals {
                        let tile = unravel(tab.at(t, i), &tab.shape);
                        for (d, x) in tile.iter().enumerate() {
                            index[lead + d] = offset[lead + d].saturating_add(*x as i64);
                        }
                        let code = self.globals.read(&view, &index).map_err(|e| {
                            format!("`{}`{index:?} cannot be read: {e}", self.name(*src))
                        })?;
                        reg.set(t, i, code.unwrap_or(fill));
                    }
                }
                reg.replicate(tab.threads);
                block.env[out.0 as usize] = Some(Value::Reg(reg));
            }
            Instruction::StoreGlobal { src, dst, offset } => {
                let view = self.global(block, *dst)?;
                let offset = self.global_offsets(block, offset)?;
                let layout = self.reg(block, *src)?.layout.clone();
                let tab = self.table(&layout)?;
                let reg = self.reg(block, *src)?;
                let lead = view.shape.len() - tab.shape.len();
                let mut index = offset.clone();
                for (flat, owner) in tab.first_owner.iter().enumerate() {
                    let Some((t, i)) = *owner else { continue };
                    for (d, x) in unravel(flat, &tab.shape).iter().enumerate() {
                        index[lead + d] = offset[lead + d].saturating_add(*x as i64);
                    }
                    let code = reg.get(t as usize, i as usize);
                    self.globals.write(&view, &index, code).map_err(|e| {
                        format!(
                            "`{}`{index:?} cannot be written: {e}",
                            self.p.var(*dst).name
                        )
                    })?;
                }
            }
            Instruction::LoadShared {
                out,
                src,
                offset,
                layout,
            } => {
                let view = self.shared(block, *src)?;
                let offset = self.ints(block, offset, "offset")?;
                let tab = self.table(layout)?;
                let name = self.name(*src).to_string();
                let mut reg = RegTensor::new(view.dtype, layout.clone(), bt);
                // Every block thread reads (replicas too): the race checks need each reader.
                for t in 0..bt {
                    for i in 0..tab.locals {
                        let tile = unravel(tab.at(t % tab.threads, i), &tab.shape);
                        let index = self.shared_index(&view, &name, &offset, &tile)?;
                        let code = block.shared.read(t, &view, &name, &index)?;
                        reg.set(t, i, code);
                    }
                }
                block.env[out.0 as usize] = Some(Value::Reg(reg));
            }
            Instruction::StoreShared { src, dst, offset } => {
                let view = self.shared(block, *dst)?;
                let offset = self.ints(block, offset, "offset")?;
                let layout = self.reg(block, *src)?.layout.clone();
                let tab = self.table(&layout)?;
                let name = self.name(*dst).to_string();
                let Block { env, shared, .. } = block;
                let Some(Value::Reg(reg)) = &env[src.0 as usize] else {
                    unreachable!("checked above")
                };
                for (flat, owner) in tab.first_owner.iter().enumerate() {
                    let Some((t, i)) = *owner else { continue };
                    let tile = unravel(flat, &tab.shape);
                    let index = self.shared_index(&view, &name, &offset, &tile)?;
                    let code = reg.get(t as usize, i as usize);
                    shared.write(t as usize, &view, &name, &index, code)?;
                }
            }
            Instruction::PermuteShared { out, src, dims } => {
                let view = self.shared(block, *src)?;
                let layout = view.layout.permute(dims).map_err(|e| e.to_string())?;
                let permuted = SharedView { layout, ..view };
                block.env[out.0 as usize] = Some(Value::Shared(permuted));
            }
            Instruction::SliceShared {
                out,
                src,
                offset,
                shape,
            } => {
                let view = self.shared(block, *src)?;
                let offset = self.ints(block, offset, "offset")?;
                let name = self.name(*src).to_string();
                // The slice's first and last elements must lie inside the source.
                let first = self.shared_index(&view, &name, &offset, &vec![0; shape.len()])?;
                if shape.iter().all(|&n| n > 0) {
                    let last: Vec<usize> = shape.iter().map(|n| n - 1).collect();
                    self.shared_index(&view, &name, &offset, &last)?;
                }
                let linear: usize = first
                    .iter()
                    .zip(&view.layout.strides)
                    .map(|(i, s)| i * s)
                    .sum();
                let skip = view.layout.strides.len() - shape.len();
                let slice = SharedView {
                    alloc: view.alloc,
                    base: view.base + linear,
                    dtype: view.dtype,
                    layout: SharedLayout {
                        shape: shape.clone(),
                        strides: view.layout.strides[skip..].to_vec(),
                        swizzle: view.layout.swizzle,
                    },
                };
                block.env[out.0 as usize] = Some(Value::Shared(slice));
            }
            Instruction::CopyAsync {
                dst,
                src,
                src_offset,
            } => {
                let view = self.shared(block, *dst)?;
                let codes = self.copy_source(block, *src, &view, src_offset)?;
                let name = self.name(*dst).to_string();
                block.shared.copy_async(&view, &name, codes.into_iter())?;
            }
            Instruction::Mbarriers {
                out,
                count,
                arrivals,
            } => self.mbarriers(block, *out, *count, *arrivals)?,
            Instruction::TmaLoad {
                dst,
                src,
                src_offset,
                barrier,
                index,
            } => self.tma_load(block, *dst, *src, src_offset, *barrier, index)?,
            Instruction::TmaStore {
                src,
                dst,
                dst_offset,
            } => self.tma_store(block, *src, *dst, dst_offset)?,
            Instruction::TmaStoreWait => {
                block.shared.retire_store_reads();
                block.shared.synchronize();
            }
            Instruction::MbarrierArrive { barrier, index } => {
                self.mbarrier_arrive(block, *barrier, index)?
            }
            Instruction::MbarrierWait {
                barrier,
                index,
                phase,
            } => {
                if let Some(what) = self.mbarrier_wait(block, *barrier, index, phase)? {
                    return Ok(Flow::Wait(what));
                }
            }
            Instruction::CopyAsyncCommitGroup => block.shared.commit(),
            Instruction::CopyAsyncWaitGroup { n } => block.shared.wait(*n as usize),
            Instruction::Synchronize => block.shared.synchronize(),
            // Blocks run one after another here: nothing to order (see `Instruction::Fence`).
            Instruction::Fence => {}
            // Launches run one after another here: the prior one has ended before this starts.
            Instruction::GridDependency(_) => {}
            Instruction::Exit => return Ok(Flow::Exit),
            Instruction::Binary { out, op, lhs, rhs } => {
                let dtype = self.reg(block, *lhs)?.dtype;
                let result =
                    self.elementwise(block, *lhs, rhs, |_, _, x, y| element_op(*op, dtype, x, y))?;
                block.env[out.0 as usize] = Some(Value::Reg(result));
            }
            Instruction::MulAdd { out, a, b, c } => {
                // The addend, broadcast to `a`'s layout where it has another (its finite codes
                // re-encoded exactly).
                let rc = self.reg(block, *c)?;
                let c = if rc.layout == self.reg(block, *a)?.layout {
                    rc.clone()
                } else {
                    let cdt = rc.dtype;
                    self.elementwise(block, *a, &Operand::Tensor(*c), |_, _, _, z| {
                        convert(z, cdt)
                    })?
                };
                let result = self.elementwise(block, *a, b, |t, j, x, y| {
                    let z = c.dtype.decode(c.get(t, j));
                    match c.dtype {
                        DType::F32 => convert(fma_f32(x, y, z) as f64, DType::F32),
                        dtype => fma_half(x, y, z, dtype),
                    }
                })?;
                block.env[out.0 as usize] = Some(Value::Reg(result));
            }
            Instruction::Neg { out, x } => {
                let x = self.reg(block, *x)?;
                let mut result = RegTensor::new(x.dtype, x.layout.clone(), bt);
                for t in 0..bt {
                    for i in 0..x.layout.num_locals() {
                        let code = x.get(t, i);
                        let code = if is_int(x.dtype) {
                            encode_int(x.dtype, -decode_int(x.dtype, code))?
                        } else {
                            encode_float(x.dtype, -x.dtype.decode(code))?
                        };
                        result.set(t, i, code);
                    }
                }
                block.env[out.0 as usize] = Some(Value::Reg(result));
            }
            Instruction::Cast {
                out,
                x,
                dtype,
                layout,
                biased,
            } => {
                let from = self.reg(block, *x)?.layout.clone();
                let layout = layout.clone().unwrap_or_else(|| from.clone());
                let sigma = self.permutation(&from, &layout)?;
                let x = self.reg(block, *x)?;
                let bias = if *biased {
                    crate::codegen::cast::biased_cast_offsets(x.dtype, *dtype, &sigma)
                } else {
                    vec![0.0; sigma.len()]
                };
                let mut result = RegTensor::new(*dtype, layout, bt);
                for t in 0..bt {
                    for (i, &src) in sigma.iter().enumerate() {
                        // A cast to the operand's own type moves codes, as the GPU code does:
                        // an infinity stays one (a conversion would saturate it).
                        if x.dtype == *dtype && bias[i] == 0.0 {
                            result.set(t, i, x.get(t, src));
                            continue;
                        }
                        let mut v = x.dtype.decode(x.get(t, src));
                        // Only a real bias is added: -0.0 + 0.0 would lose the sign of zero.
                        if bias[i] != 0.0 {
                            v += bias[i];
                        }
                        result.set(t, i, convert(v, *dtype)?);
                    }
                }
                block.env[out.0 as usize] = Some(Value::Reg(result));
            }
            Instruction::View {
                out,
                x,
                dtype,
                layout,
            } => {
                let result = self.reg(block, *x)?.reinterpret(*dtype, layout.clone());
                block.env[out.0 as usize] = Some(Value::Reg(result));
            }
            Instruction::DotAsync { out, a, b, c } => {
                let mut reads = Vec::new();
                let result = self.dot_shared(block, *a, *b, *c, Some(&mut reads))?;
                let a_reg = matches!(self.value(block, *a)?, Value::Reg(_)).then_some(*a);
                block.pending_dots.push_back(PendingDot {
                    acc: *out,
                    a_reg,
                    reads,
                });
                block.env[out.0 as usize] = Some(Value::Reg(result));
            }
            Instruction::DotWait { n } => {
                while block.pending_dots.len() > *n as usize {
                    let done = block.pending_dots.pop_front().expect("non-empty");
                    for (t, bytes) in done.reads {
                        block.shared.retire_dot_read(t, bytes);
                    }
                }
            }
            Instruction::Dot { out, a, b, c } => {
                // A shared operand selects the warpgroup MMA (`a` shared or in registers).
                let shared = |v| matches!(self.value(block, v), Ok(Value::Shared(_)));
                let result = if shared(*a) || shared(*b) {
                    self.dot_shared(block, *a, *b, *c, None)?
                } else {
                    self.dot(block, *a, *b, *c)?
                };
                block.env[out.0 as usize] = Some(Value::Reg(result));
            }
            Instruction::Print { label, x } => self.print(block, label, x)?,
            Instruction::Unary { out, op, x } => {
                let result = self.math(block, *op, *x)?;
                block.env[out.0 as usize] = Some(Value::Reg(result));
            }
            Instruction::Compare { out, op, lhs, rhs } => {
                let result = self.compare(block, *op, *lhs, rhs)?;
                block.env[out.0 as usize] = Some(Value::Reg(result));
            }
            Instruction::Select { out, cond, a, b } => {
                let result = self.select(block, *cond, *a, b)?;
                block.env[out.0 as usize] = Some(Value::Reg(result));
            }
            Instruction::Arange {
                out,
                layout,
                dim,
                offset,
            } => {
                let result = self.arange(block, layout, *dim, offset)?;
                block.env[out.0 as usize] = Some(Value::Reg(result));
            }
            Instruction::Reduce { out, x, op, dim } => self.reduce(block, *out, *x, *op, *dim)?,
            Instruction::PlaneDot { out, w, a, dim } => {
                self.plane_dot(block, *out, *w, *a, *dim)?
            }
            Instruction::Scan { out, x, dim, .. } => self.scan(block, *out, *x, *dim)?,
            Instruction::Item { .. }
            | Instruction::Gather { .. }
            | Instruction::Lookup { .. }
            | Instruction::GatherRows { .. }
            | Instruction::Scatter { .. }
            | Instruction::ScatterRows { .. }
            | Instruction::Atomic { .. } => self.addressing(ins, block)?,
        }
        Ok(Flow::Next)
    }

    /// `lhs op rhs`, with `rhs` broadcast: each thread finds the source of each of its locals
    /// among its own registers (the verifier's thread-local condition guarantees it is there).
    /// A tensor of `lhs`'s type whose element `(t, j)` is `f(t, j, lhs[t, j], rhs at the same
    /// index)` (the right operand broadcast, or uniform).
    pub(super) fn elementwise(
        &mut self,
        block: &Block,
        lhs: VarId,
        rhs: &Operand,
        f: impl FnMut(usize, usize, f64, f64) -> Result<u32, String>,
    ) -> Result<RegTensor, String> {
        self.elementwise_to(block, lhs, rhs, false, f)
    }

    /// The exact value of a scalar operand (`i32` or `f32`).
    pub(super) fn scalar_operand(&self, e: &Expr, block: &Block) -> Result<f64, String> {
        match self.eval(e, block)? {
            Scalar::I32(v) => Ok(v as f64),
            Scalar::F32(v) => Ok(v as f64),
            Scalar::Bool(b) => Err(format!("the scalar operand is the bool {b}")),
            Scalar::I64(v) => Err(format!("the scalar operand is the i64 {v}")),
        }
    }

    /// [`Self::elementwise`], or with `compare` a comparison: a `u1` result, and a scalar right
    /// operand seen at its exact value rather than converted to `lhs`'s dtype.
    pub(super) fn elementwise_to(
        &mut self,
        block: &Block,
        lhs: VarId,
        rhs: &Operand,
        compare: bool,
        mut f: impl FnMut(usize, usize, f64, f64) -> Result<u32, String>,
    ) -> Result<RegTensor, String> {
        let bt = self.block_threads;
        let l = self.reg(block, lhs)?;
        let dtype = l.dtype;
        let tl = self.table(&l.layout.clone())?;
        let right = match rhs {
            Operand::Tensor(r) => {
                let r = self.reg(block, *r)?;
                Some((r, self.table(&r.layout.clone())?))
            }
            _ => None,
        };
        // A uniform right value: converted to the dtype, except that a comparison sees a
        // scalar's exact value.
        let uniform = match rhs {
            Operand::Scalar(e) if compare => Some(self.scalar_operand(e, block)?),
            Operand::Scalar(e) => {
                let v = self.scalar_operand(e, block)?;
                Some(dtype.decode(scalar_code(v, dtype)?))
            }
            Operand::Imm(v) => Some(dtype.decode(convert(*v, dtype)?)),
            Operand::Tensor(_) => None,
        };
        let mut result = RegTensor::new(
            if compare { DType::UInt(1) } else { dtype },
            l.layout.clone(),
            bt,
        );
        let mut map = ThreadMap::default();
        for t in 0..bt {
            if let Some((_, tr)) = &right {
                tr.thread_map(t % tr.threads, &mut map);
            }
            for j in 0..tl.locals {
                let x = dtype.decode(l.get(t, j));
                let y = match (&right, uniform) {
                    (_, Some(y)) => y,
                    (Some((r, tr)), None) => {
                        let li = unravel(tl.at(t % tl.threads, j), &tl.shape);
                        let lead = li.len() - tr.shape.len();
                        let mut flat = 0;
                        for (&n, &i) in tr.shape.iter().zip(&li[lead..]) {
                            flat = flat * n + if n == 1 { 0 } else { i };
                        }
                        let local = map[flat];
                        if local == NONE {
                            return Err(format!(
                                "thread {t} does not hold the right operand for its local {j}"
                            ));
                        }
                        dtype.decode(r.get(t, local as usize))
                    }
                    (None, None) => unreachable!("an operand is a tensor or uniform"),
                };
                result.set(t, j, f(t, j, x, y)?);
            }
        }
        Ok(result)
    }

    /// `c + a · b`. Operands are gathered per warp: a thread-local dot finds them in the
    /// thread itself, an mma in its warp (the verifier guarantees one of the two).
    fn dot(&mut self, block: &Block, a: VarId, b: VarId, c: VarId) -> Result<RegTensor, String> {
        let bt = self.block_threads;
        let (ra, rb, rc) = (
            self.reg(block, a)?,
            self.reg(block, b)?,
            self.reg(block, c)?,
        );
        let ta = self.table(&ra.layout.clone())?;
        let tb = self.table(&rb.layout.clone())?;
        let tc = self.table(&rc.layout.clone())?;
        // `[batch, m, k, n]`: a batched dot holds `batch` independent products.
        let [batch, m, k, n] = crate::verify::dot_shapes(&ta.shape, &tb.shape, &tc.shape)
            .ok_or("dot: the operand shapes do not agree")?;
        let mut result = RegTensor::new(rc.dtype, rc.layout.clone(), bt);
        let gather = |r: &RegTensor, tab: &crate::verify::table::LayoutTable, warp: usize, size| {
            let mut vals = vec![f64::NAN; size];
            let mut have = vec![false; size];
            for t in warp * 32..(warp + 1) * 32 {
                for i in 0..tab.locals {
                    let f = tab.at(t % tab.threads, i);
                    if !have[f] {
                        have[f] = true;
                        vals[f] = r.dtype.decode(r.get(t, i));
                    }
                }
            }
            (vals, have)
        };
        for warp in 0..bt / 32 {
            let (av, ah) = gather(ra, &ta, warp, batch * m * k);
            let (bv, bh) = gather(rb, &tb, warp, batch * k * n);
            for t in warp * 32..(warp + 1) * 32 {
                for j in 0..tc.locals {
                    let f = tc.at(t % tc.threads, j);
                    let (bi, mi, ni) = (f / (m * n), f / n % m, f % n);
                    let mut sum = rc.dtype.decode(rc.get(t, j));
                    for kk in 0..k {
                        let (fa, fb) = ((bi * m + mi) * k + kk, (bi * k + kk) * n + ni);
                        if !ah[fa] || !bh[fb] {
                            return Err(format!(
                                "warp {warp} does not hold `{}`[{bi}, {mi}, {kk}] and `{}`[{bi}, {kk}, {ni}]",
                                self.name(a),
                                self.name(b)
                            ));
                        }
                        sum += av[fa] * bv[fb];
                    }
                    let code = if is_int(rc.dtype) {
                        encode_int(rc.dtype, sum as i64)
                    } else {
                        encode_float(rc.dtype, sum)
                    }
                    .map_err(|e| format!("`{}`[{mi}, {ni}]: {e}", self.name(c)))?;
                    result.set(t, j, code);
                }
            }
        }
        Ok(result)
    }

    fn print(&mut self, block: &Block, label: &str, x: &Operand) -> Result<(), String> {
        let text = match x {
            Operand::Imm(v) => v.to_string(),
            Operand::Scalar(e) => match self.eval(e, block)? {
                Scalar::I32(v) => v.to_string(),
                Scalar::I64(v) => v.to_string(),
                Scalar::Bool(b) => b.to_string(),
                Scalar::F32(v) => format!("{v:?}"),
            },
            Operand::Tensor(v) => match self.value(block, *v)? {
                Value::I32(x) => x.to_string(),
                Value::I64(x) => x.to_string(),
                Value::Bool(b) => b.to_string(),
                Value::F32(v) => format!("{v:?}"),
                Value::Reg(r) => {
                    let tab = self.table(&r.layout.clone())?;
                    let values: Vec<Option<f64>> = tab
                        .first_owner
                        .iter()
                        .map(|o| o.map(|(t, i)| r.dtype.decode(r.get(t as usize, i as usize))))
                        .collect();
                    format_tile(&tab.shape, &values)
                }
                Value::Shared(s) => {
                    let size: usize = s.layout.shape.iter().product();
                    let values: Vec<Option<f64>> = (0..size)
                        .map(|f| {
                            let index = unravel(f, &s.layout.shape);
                            Some(s.dtype.decode(block.shared.peek(s, &index)))
                        })
                        .collect();
                    format_tile(&s.layout.shape, &values)
                }
                Value::Global(g) => format!("global {} tensor of shape {:?}", g.dtype, g.shape),
                Value::Ptr(b) => format!("pointer to buffer `{}`", self.globals.names[*b]),
            },
        };
        eprintln!("[{} block {:?}] {label}: {text}", self.p.name, block.index);
        Ok(())
    }
}

/// One elementwise operation, exact then encoded (see `numeric`).
fn element_op(op: ElementOp, dtype: crate::DType, x: f64, y: f64) -> Result<u32, String> {
    if is_int(dtype) {
        let (x, y) = (x as i64, y as i64);
        let v = match op {
            ElementOp::Add => x + y,
            ElementOp::Sub => x - y,
            ElementOp::Mul => x * y,
            ElementOp::Div | ElementOp::Mod if y == 0 => {
                return Err(format!("division by zero: {x} {} 0", op.name()))
            }
            ElementOp::Div => x / y,
            ElementOp::Mod => x % y,
            ElementOp::Min => x.min(y),
            ElementOp::Max => x.max(y),
            ElementOp::And => x & y,
            ElementOp::Or => x | y,
            ElementOp::Xor => x ^ y,
            ElementOp::Shl | ElementOp::Shr => return super::math::shift(op, dtype, x, y),
        };
        encode_int(dtype, v)
    } else {
        let v = match op {
            ElementOp::Add => x + y,
            ElementOp::Sub => x - y,
            ElementOp::Mul => x * y,
            ElementOp::Div => x / y,
            ElementOp::Mod => x % y,
            ElementOp::Min => x.min(y),
            ElementOp::Max => x.max(y),
            ElementOp::And | ElementOp::Or | ElementOp::Xor | ElementOp::Shl | ElementOp::Shr => {
                return Err(format!("{} is defined for integer tensors", op.name()))
            }
        };
        encode_float(dtype, v)
    }
}

fn format_tile(shape: &[usize], values: &[Option<f64>]) -> String {
    let cell = |v: &Option<f64>| v.map_or("-".to_string(), |x| x.to_string());
    let row_len = shape.last().copied().unwrap_or(1).max(1);
    let rows: Vec<String> = values
        .chunks(row_len)
        .map(|row| row.iter().map(cell).collect::<Vec<_>>().join(" "))
        .collect();
    format!("{shape:?}\n  {}", rows.join("\n  "))
}

/// `x * y + z` for f32 values, rounded once to f32 (to nearest, ties to even), as the GPU's
/// FFMA does. The product of two f32 values is exact in f64; the sum is not always, so its
/// rounding error (TwoSum) decides the one case where rounding the f64 sum again to f32 could
/// differ: a sum that lands exactly halfway between two f32 values.
pub(crate) fn fma_f32(x: f64, y: f64, z: f64) -> f32 {
    let p = x * y;
    let s = p + z;
    let bb = s - p;
    let err = (p - (s - bb)) + (z - bb);
    let r = s as f32;
    if err != 0.0 && s.is_finite() && r.is_finite() && r as f64 != s {
        let other = if (r as f64) < s {
            r.next_up()
        } else {
            r.next_down()
        };
        if other.is_finite() && (r as f64 + other as f64) / 2.0 == s {
            // A tie only in f64: the exact value lies on err's side of it.
            let (lo, hi) = if r < other { (r, other) } else { (other, r) };
            return if err > 0.0 { hi } else { lo };
        }
    }
    r
}

/// The code of `x * y + z` for f16 or bf16 values, rounded once to `dtype` (to nearest, ties to
/// even; beyond the largest finite value an infinity, as IEEE rounding gives), as
/// `fma.rn.{f16,bf16}x2` does. An infinite operand gives the infinite result IEEE gives; a NaN
/// result (`inf * 0`, `inf - inf`) is an error. The product is exact in f64 and the sum's rounding error (TwoSum)
/// breaks the one tie that rounding the f64 sum could create, as in [`fma_f32`]. The f64 sum is
/// rounded to `dtype`'s quantum directly: `half`'s conversions from f64 go through f32 and
/// would round twice.
pub(crate) fn fma_half(x: f64, y: f64, z: f64, dtype: DType) -> Result<u32, String> {
    let (mantissa, emin) = match dtype {
        DType::F16 => (10, -14),
        DType::BF16 => (7, -126),
        _ => return Err(format!("mul_add on {dtype} tensors")),
    };
    let p = x * y;
    let s = p + z;
    if s.is_nan() {
        return Err(format!("mul_add: {x} * {y} + {z} is NaN"));
    }
    if s.is_infinite() {
        let inf = match dtype {
            DType::F16 => half::f16::INFINITY.to_bits(),
            _ => half::bf16::INFINITY.to_bits(),
        };
        return Ok((inf | if s < 0.0 { 0x8000 } else { 0 }) as u32);
    }
    let bb = s - p;
    let err = (p - (s - bb)) + (z - bb);
    // The spacing of `dtype`'s values at |s| (the subnormal one below the normal range).
    let a = s.abs();
    let e = if a == 0.0 {
        emin
    } else {
        (((a.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(emin)
    };
    let quantum = 2f64.powi(e - mantissa);
    let steps = a / quantum; // exact: a power-of-two scaling
    let mut n = steps.round_ties_even();
    if steps.fract() == 0.5 && err != 0.0 {
        // A tie only in f64: the exact value lies on err's side of it.
        n = if (err > 0.0) == (s > 0.0) {
            steps.ceil()
        } else {
            steps.floor()
        };
    }
    // Representable in `dtype`, or past its largest finite value, where the conversion gives
    // the infinity that IEEE rounding gives.
    let v = (n * quantum).copysign(s);
    let code = match dtype {
        DType::F16 => half::f16::from_f64(v).to_bits(),
        _ => half::bf16::from_f64(v).to_bits(),
    };
    Ok(code as u32)
}

/// The code of a scalar operand `v` (an exact `i32` or `f32` value) in `dtype`, as the GPU code
/// converts it: to a float dtype through `f32` (round to nearest even, then saturate), to an
/// integer dtype by rounding half to even and clamping (exact for every `i32` in range).
pub(super) fn scalar_code(v: f64, dtype: DType) -> Result<u32, String> {
    if is_int(dtype) {
        convert(v, dtype)
    } else {
        convert(v as f32 as f64, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::{fma_f32, fma_half};
    use crate::DType;
    use rand::{Rng, SeedableRng};

    /// The value of a 16-bit float code of `dtype`.
    fn half_value(dtype: DType, code: u16) -> f64 {
        match dtype {
            DType::F16 => half::f16::from_bits(code).to_f64(),
            _ => half::bf16::from_bits(code).to_f64(),
        }
    }

    /// An independent reference for `fma_half`: the exact `x * y + z` in integer units of
    /// `2^-2s` (`s` such that every operand times `2^s` is an integer), rounded to `dtype` by
    /// comparing exact distances to the nearest codes (ties to the even code); an f16 sum at or
    /// past 65520, halfway between the largest finite value and the next power of two, is an
    /// infinity (bf16 operands stay far from the top of its range).
    fn exact_fma(dtype: DType, s: i32, x: u16, y: u16, z: u16) -> u16 {
        // Units of 2^-(2s + 16): the sum's own units, 16 bits finer for the codes near it.
        let unit = 2 * s + 16;
        let scaled = |c: u16, k: i32| {
            let v = half_value(dtype, c) * 2f64.powi(k);
            (v.fract() == 0.0).then_some(v as i128)
        };
        let int = |c: u16, k: i32| scaled(c, k).expect("an operand on the test's grid");
        let exact = ((int(x, s) * int(y, s)) << 16) + int(z, unit);
        if dtype == DType::F16 && exact.abs() >= 65520i128 << unit {
            return if exact > 0 { 0x7c00 } else { 0xfc00 };
        }
        let max: u16 = if dtype == DType::F16 { 0x7bff } else { 0x7f7f };
        // Codes in value order: ..., -max, ..., -0 = +0, ..., max.
        let order = |c: u16| -> i32 {
            if c & 0x8000 != 0 {
                -((c & 0x7fff) as i32)
            } else {
                c as i32
            }
        };
        let code = |i: i32| -> u16 {
            if i < 0 {
                (-i) as u16 | 0x8000
            } else {
                i as u16
            }
        };
        let guess = match dtype {
            DType::F16 => half::f16::from_f64(exact as f64 * 2f64.powi(-unit)).to_bits(),
            _ => half::bf16::from_f64(exact as f64 * 2f64.powi(-unit)).to_bits(),
        };
        let g = order(guess).clamp(-(max as i32), max as i32);
        let mut best: Option<(i128, u16)> = None;
        for i in (g - 2..=g + 2).filter(|i| i.abs() <= max as i32) {
            let c = code(i);
            // A code finer than the units is never the nearest to a nonzero sum (zero is).
            let Some(v) = scaled(c, unit) else { continue };
            let d = (v - exact).abs();
            let better = match best {
                None => true,
                Some((bd, bc)) => d < bd || (d == bd && c % 2 == 0 && bc % 2 == 1),
            };
            if better {
                best = Some((d, c));
            }
        }
        best.unwrap().1
    }

    /// f16 over its whole finite range and bf16 over [2^-20, 2^20] in magnitude, against the
    /// exact integer reference: random operands, products cancelled by the addend, and sums
    /// built to sit at or next to the halfway point between two codes.
    #[test]
    fn fma_half_rounds_once_and_overflows_to_infinity() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(rand::random());
        for (dtype, s) in [(DType::F16, 24), (DType::BF16, 27)] {
            let random = |rng: &mut rand::rngs::StdRng| -> u16 {
                loop {
                    let c: u16 = rng.random();
                    let v = half_value(dtype, c);
                    let ok = v.is_finite()
                        && (dtype == DType::F16
                            || v == 0.0
                            || (2f64.powi(-20)..=2f64.powi(20)).contains(&v.abs()));
                    if ok {
                        return c;
                    }
                }
            };
            let check = |x: u16, y: u16, z: u16| {
                let (xv, yv, zv) = (
                    half_value(dtype, x),
                    half_value(dtype, y),
                    half_value(dtype, z),
                );
                let got = fma_half(xv, yv, zv, dtype).unwrap() as u16;
                let want = exact_fma(dtype, s, x, y, z);
                assert_eq!(
                    half_value(dtype, got),
                    half_value(dtype, want),
                    "{dtype} fma({xv:e}, {yv:e}, {zv:e}): {got:#06x} vs {want:#06x}"
                );
            };
            for _ in 0..100_000 {
                let (x, y, z) = (random(&mut rng), random(&mut rng), random(&mut rng));
                check(x, y, z);
                if dtype == DType::F16 {
                    // Subnormal addends against large products and the reverse.
                    check(x, y, z & 0x83ff);
                    check(x & 0x83ff, y, z);
                }
                // The addend cancelling most of the product.
                let p = half_value(dtype, x) * half_value(dtype, y);
                let minus_p = match dtype {
                    DType::F16 => half::f16::from_f64(-p).to_bits(),
                    _ => half::bf16::from_f64(-p).to_bits(),
                };
                let v = half_value(dtype, minus_p);
                let on_grid = dtype == DType::F16
                    || v == 0.0
                    || (2f64.powi(-20)..=2f64.powi(20)).contains(&v.abs());
                if v.is_finite() && on_grid {
                    check(x, y, minus_p);
                }
            }
        }
        // f16: 1 * (1 + 2^-11 + 2^-22-ish) lands just above a tie in f64 terms; (2^-11 +
        // 2^-32) + 1 is above the tie between 1 and 1 + 2^-10 only by 2^-32.
        let f = |v: f64| half::f16::from_f64(v).to_bits();
        for (x, y, z) in [
            (1.0 + 2f64.powi(-10), 2f64.powi(-11), 1.0),
            (1.0 + 2f64.powi(-10), -(2f64.powi(-11)), 1.0),
            (65504.0, 2.0, 0.0),
            (-65504.0, 2.0, -1.0),
            (3.0, 2f64.powi(-24), 2048.0 + 2.0),
        ] {
            let (x, y, z) = (f(x), f(y), f(z));
            let got = fma_half(
                half_value(DType::F16, x),
                half_value(DType::F16, y),
                half_value(DType::F16, z),
                DType::F16,
            )
            .unwrap() as u16;
            assert_eq!(got, exact_fma(DType::F16, 24, x, y, z));
        }
        // Just below and at the overflow threshold; infinite operands; NaN results.
        let code = |x: f64, y: f64, z: f64, d: DType| fma_half(x, y, z, d).map(|c| c as u16);
        assert_eq!(code(65504.0, 1.0, 15.0, DType::F16), Ok(0x7bff));
        assert_eq!(code(65504.0, 1.0, 16.0, DType::F16), Ok(0x7c00));
        assert_eq!(code(-65504.0, 1.0, -16.0, DType::F16), Ok(0xfc00));
        assert_eq!(code(f64::INFINITY, 2.0, 1.0, DType::F16), Ok(0x7c00));
        assert_eq!(code(1.0, 2.0, f64::NEG_INFINITY, DType::BF16), Ok(0xff80));
        assert_eq!(code(3e38, 2.0, 0.0, DType::BF16), Ok(0x7f80));
        assert!(code(f64::INFINITY, 0.0, 1.0, DType::F16).is_err());
        assert!(code(f64::INFINITY, 1.0, f64::NEG_INFINITY, DType::BF16).is_err());
    }

    /// Against the platform's fused multiply-add (correctly rounded by IEEE 754), on random
    /// operands and on sums built to land halfway between two f32 values in f64.
    #[test]
    fn fma_f32_rounds_once() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(rand::random());
        let check = |x: f32, y: f32, z: f32| {
            let want = x.mul_add(y, z);
            let got = fma_f32(x as f64, y as f64, z as f64);
            assert_eq!(got.to_bits(), want.to_bits(), "fma({x:e}, {y:e}, {z:e})");
        };
        for _ in 0..200_000 {
            let x = f32::from_bits(rng.random::<u32>() & 0xBFFF_FFFF);
            let y: f32 = rng.random_range(-4.0..4.0);
            let z: f32 = rng.random_range(-1e3..1e3);
            check(x, y, z);
            check(x, y, -(x * y));
        }
        // x*y = 1 + 2^-24 + 2^-48 (exact), z = 0: the f64 sum is exact, no tie.
        // x*y = 2^24 + 1 + tiny: f64 holds 2^24 + 1 + 2^-k, halfway candidates in f32.
        for k in 1..30 {
            let x = 1.0 + f32::EPSILON;
            let y = 1.0 + (2f32).powi(-k);
            check(x, y, 0.0);
            check(x, y, -1.0);
            check(
                (2f32).powi(12) + 1.0,
                (2f32).powi(12) + 1.0,
                (2f32).powi(-k),
            );
            check(x, -y, (2f32).powi(-k));
        }
    }
}
