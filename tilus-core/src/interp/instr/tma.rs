//! `mbarriers`, `tma_load`, `tma_store`, `mbarrier_arrive`, `mbarrier_wait` (sm_90's copy
//! engine and transaction barriers, `crate::verify::tma`).
//!
//! The block (or a role of a `specialize!` region) runs as one: a `tma_load` is issued once
//! (one arrival on its barrier, its bytes in flight), `mbarrier_arrive` is one arrival per warp
//! of the role. An `mbarrier_wait` whose phase has not completed blocks its role until another
//! role arrives (`super::super::roles`); outside a region nothing else can arrive, and that is
//! reported as a deadlock. A `tma_store` is a barrier and the copy, whose source bytes stay in
//! flight (writing them is an error) until a `tma_store_wait`, a barrier.

use super::super::barrier::Barrier;
use super::super::memory::{SharedView, Value};
use super::super::{Block, Machine};
use crate::ir::{Expr, VarId};
use crate::layout::SharedLayout;
use crate::verify::table::unravel;
use crate::DType;

impl Machine<'_> {
    /// Byte address of barrier `index` of `barriers`, checked to be one.
    fn barrier_addr(&self, block: &Block, barriers: VarId, index: &Expr) -> Result<usize, String> {
        let view = self.shared(block, barriers)?;
        let count = view.layout.shape[0];
        let i = self.eval_i32(index, block, "barrier index")?;
        if i < 0 || i as usize >= count {
            return Err(format!(
                "barrier index {i} is outside `{}` of {count} barriers",
                self.name(barriers)
            ));
        }
        Ok(view.alloc + 8 * i as usize)
    }

    pub(super) fn mbarriers(
        &mut self,
        block: &mut Block,
        out: VarId,
        count: u32,
        arrivals: u32,
    ) -> Result<(), String> {
        let shared = &mut block.shared;
        let layout = SharedLayout::row_major(&[count as usize, 2]);
        let bytes = (8 * count as usize).next_multiple_of(16);
        let alloc = *block
            .shared_alloc
            .entry(out)
            .or_insert_with(|| shared.alloc(bytes));
        for i in 0..count as usize {
            shared
                .barriers
                .insert(alloc + 8 * i, Barrier::new(arrivals));
        }
        let view = SharedView {
            alloc,
            base: 0,
            dtype: DType::UInt(32),
            layout,
        };
        block.env[out.0 as usize] = Some(Value::Shared(view));
        Ok(())
    }

    pub(super) fn tma_load(
        &mut self,
        block: &mut Block,
        dst: VarId,
        src: VarId,
        src_offset: &[Expr],
        barriers: VarId,
        index: &Expr,
    ) -> Result<(), String> {
        let addr = self.barrier_addr(block, barriers, index)?;
        let view = self.shared(block, dst)?;
        if let Some(inner) = src_offset.last() {
            let x = self.eval_i32(inner, block, "tma_load offset")?;
            self.whole_byte("tma_load", src, view.dtype, i64::from(x))?;
        }
        let codes = self.copy_source(block, src, &view, src_offset)?;
        let name = self.name(dst).to_string();
        let phase = block.shared.barriers[&addr].phase;
        block
            .shared
            .tma_load(&view, &name, codes.into_iter(), addr, phase)?;
        self.arrive(block, barriers, addr, 1, false)
    }

    /// The shared tensor `src` to the tile at `dst_offset` of the global view `dst`; elements
    /// outside the view are skipped. The block synchronizes before the copy (so every thread's
    /// writes are in it); `src`'s bytes are then in flight until a `tma_store_wait`. Reading an
    /// element nobody wrote, or one a copy is still filling, is an error here as for any
    /// reader.
    pub(super) fn tma_store(
        &mut self,
        block: &mut Block,
        src: VarId,
        dst: VarId,
        dst_offset: &[Expr],
    ) -> Result<(), String> {
        let view = self.shared(block, src)?;
        let global = self.global(block, dst)?;
        let offset = self.global_offsets(block, dst_offset)?;
        if let Some(&x) = offset.last() {
            self.whole_byte("tma_store", dst, view.dtype, x)?;
        }
        block.shared.synchronize();
        let name = self.name(src).to_string();
        let shape = &view.layout.shape;
        let lead = global.shape.len() - shape.len();
        let mut index = offset.clone();
        for flat in 0..shape.iter().product::<usize>() {
            let tile = unravel(flat, shape);
            let code = block.shared.store_read(&view, &name, &tile)?;
            for (d, x) in tile.iter().enumerate() {
                index[lead + d] = offset[lead + d].saturating_add(*x as i64);
            }
            self.globals
                .write(&global, &index, code)
                .map_err(|e| format!("`{}`{index:?} cannot be written: {e}", self.name(dst)))?;
        }
        Ok(())
    }

    /// Sub-byte elements go through the copy engine as bytes: the innermost coordinate `x`
    /// into global `g` is a whole byte (the code generator divides it).
    fn whole_byte(&self, instr: &str, g: VarId, dtype: DType, x: i64) -> Result<(), String> {
        let per_byte = 8 / i64::from(dtype.bits().min(8));
        if x % per_byte != 0 {
            return Err(format!(
                "{instr}: the innermost offset {x} into `{}` is not a whole byte of {dtype} elements (a multiple of {per_byte})",
                self.name(g)
            ));
        }
        Ok(())
    }

    /// `n` arrivals on the barrier at `addr`; with `release`, the running role's accesses so far
    /// are ordered before whatever waits for the phase.
    fn arrive(
        &self,
        block: &mut Block,
        barriers: VarId,
        addr: usize,
        n: u32,
        release: bool,
    ) -> Result<(), String> {
        let name = self.name(barriers);
        let barrier = block
            .shared
            .barriers
            .get_mut(&addr)
            .ok_or_else(|| format!("`{name}` holds no initialised barrier at that index"))?;
        if n > barrier.pending {
            // Checked again by `arrive`, before anything changes.
            return barrier.arrive(n).map_err(|e| format!("`{name}`: {e}"));
        }
        let mut clock = std::mem::take(&mut barrier.clock);
        if release {
            block.shared.release(&mut clock);
        }
        let barrier = block.shared.barriers.get_mut(&addr).expect("found above");
        barrier.clock = clock;
        barrier.arrive(n).map_err(|e| format!("`{name}`: {e}"))
    }

    pub(super) fn mbarrier_arrive(
        &mut self,
        block: &mut Block,
        barriers: VarId,
        index: &Expr,
    ) -> Result<(), String> {
        let addr = self.barrier_addr(block, barriers, index)?;
        let warps = self.block_threads.div_ceil(32) as u32;
        self.arrive(block, barriers, addr, warps, true)
    }

    /// Wait for a phase: `Ok(None)` when it has completed (its copies land, and the role
    /// acquires what its arrivals released), `Ok(Some(what))` when it has not (the wait
    /// blocks; `what` describes it for a deadlock report).
    pub(super) fn mbarrier_wait(
        &mut self,
        block: &mut Block,
        barriers: VarId,
        index: &Expr,
        phase: &Expr,
    ) -> Result<Option<String>, String> {
        let addr = self.barrier_addr(block, barriers, index)?;
        let parity = self.eval_i32(phase, block, "phase")?;
        let b = &block.shared.barriers[&addr];
        if !b.passes(parity) {
            let i = (addr - self.shared(block, barriers)?.alloc) / 8;
            return Ok(Some(format!(
                "waiting on barrier {i} of `{}` for the phase of parity {}, but its phase {} \
                 (that parity) still expects {} of its {} arrivals",
                self.name(barriers),
                parity.rem_euclid(2),
                b.phase,
                b.pending,
                b.arrivals
            )));
        }
        let (done, acquired) = (b.phase, b.acquired(parity).to_vec());
        block.shared.tma_complete(addr, done);
        block.shared.acquire(&acquired);
        Ok(None)
    }
}
