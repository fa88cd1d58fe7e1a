//! The tensor memory accelerator and transaction barriers of sm_90: `mbarriers`, `tma_load`,
//! `tma_store`, `tma_store_wait`, `mbarrier_arrive`, `mbarrier_wait`.
//!
//! Accepted when:
//!
//! - **Target**: it has the TMA and mbarriers (sm_90).
//! - **`mbarriers(count, arrivals)`**: `count >= 1`; `arrivals` in `1..2^20` (the hardware's
//!   pending-count range). The tensor it makes is used only by the instructions of this family.
//! - **`tma_load(src, dst, offset, barriers, i)`**: `src` is a global view of a *pointer
//!   parameter* whose extents read only scalar parameters (the launcher encodes its tensor map
//!   from them), of rank 1 to 5, with 8-, 16- or 32-bit elements, or 1-, 2- or 4-bit ones, which
//!   the copy engine moves as bytes (the tensor map views the innermost dimension as bytes: its
//!   extent and the offset into it are whole bytes, which the launcher and the code generator
//!   check); `offset` has `src`'s rank and `i32` entries (tensor-map coordinates are 32-bit);
//!   `dst` is a shared tensor of the same dtype and at most `src`'s rank (its shape is the box,
//!   covering `src`'s trailing dimensions), each extent at most 256 (of bytes, innermost, for
//!   sub-byte elements), the inner extent a multiple of 16 bytes, the box at most 2^20 - 1 bytes
//!   (the barrier's transaction count); `dst` is laid out row-major and compact (a whole tensor
//!   or a slice of whole inner rows), unswizzled or with a swizzle the copy engine writes:
//!   `swizzle(b, log2(128 / element bits), 3)` for `b` = 1, 2, 3 (32, 64 or 128-byte spans)
//!   with an inner extent of exactly the span. `barriers` is an `mbarriers`
//!   tensor and `i` an `i32`.
//! - **`tma_store(src, dst, offset)`**: the rules of `tma_load` with the roles exchanged: `dst`
//!   a global view of a *mutable* pointer parameter, `src` the shared box (no barrier). Target:
//!   the TMA (sm_90), as for **`tma_store_wait()`**.
//! - **`mbarrier_arrive(barriers, i)`**, **`mbarrier_wait(barriers, i, phase)`**: `barriers` an
//!   `mbarriers` tensor, `i` and `phase` `i32`; a constant `i` is in range.
//!
//! The code generator checks what only it sees: the destination's address is a multiple of 128
//! bytes (of the swizzle's 8-row atom with a swizzle).

use super::Checker;
use crate::ir::{Expr, GlobalType, Instruction, ScalarType, SharedType, SpanId, VarId, VarType};
use crate::launch::TmaSwizzle;
use crate::layout::{SharedLayout, Swizzle};
use crate::DType;

/// Most elements of one box dimension of a tensor-map copy.
pub const MAX_BOX_EXTENT: usize = 256;
/// Most bytes one mbarrier phase can wait for (its transaction count is 20 bits).
pub const MAX_TX_BYTES: usize = (1 << 20) - 1;
/// Most arrivals one mbarrier phase can expect.
pub const MAX_ARRIVALS: u32 = (1 << 20) - 1;

/// The copy engine's swizzle mode equal to `layout`'s swizzle for elements of `dtype`, or why
/// there is none. Without a swizzle the mode is [`TmaSwizzle::None`].
pub fn tma_swizzle(layout: &SharedLayout, dtype: DType) -> Result<TmaSwizzle, String> {
    let Some(sw) = layout.swizzle else {
        return Ok(TmaSwizzle::None);
    };
    let bits = dtype.bits() as usize;
    if !matches!(bits, 1 | 2 | 4 | 8 | 16 | 32) {
        return Err(format!("{dtype} elements have no copy-engine swizzle"));
    }
    // 16-byte chunks of elements.
    let base = (128 / bits).trailing_zeros();
    let mode = match sw.bits {
        1 => TmaSwizzle::B32,
        2 => TmaSwizzle::B64,
        3 => TmaSwizzle::B128,
        _ => TmaSwizzle::None,
    };
    let want = Swizzle {
        bits: sw.bits,
        base,
        shift: 3,
    };
    if mode == TmaSwizzle::None || sw != want {
        return Err(format!(
            "its swizzle({}, {}, {}) is not one the copy engine writes: for {dtype} use \
             swizzle(b, {base}, 3) with b = 1, 2 or 3 (32, 64 or 128-byte rows)",
            sw.bits, sw.base, sw.shift
        ));
    }
    let inner_bits = layout.shape.last().copied().unwrap_or(0) * bits;
    if inner_bits != 8 * mode.span() {
        return Err(format!(
            "with swizzle({}, {base}, 3) the inner extent must be {} bytes ({} elements), not \
             {} bytes",
            sw.bits,
            mode.span(),
            8 * mode.span() / bits,
            inner_bits as f64 / 8.0
        ));
    }
    Ok(mode)
}

/// Whether `layout` is compact row-major over its own shape (a whole tensor, or a slice of
/// whole inner rows of one).
pub fn is_compact_row_major(layout: &SharedLayout) -> bool {
    layout.strides == SharedLayout::row_major(&layout.shape).strides
}

/// The `mbarriers` tensors of `p` and their counts.
pub(super) fn barrier_tensors(p: &crate::ir::Program) -> std::collections::HashMap<VarId, u32> {
    let mut out = std::collections::HashMap::new();
    p.visit_instructions(&mut |i| {
        if let Instruction::Mbarriers { out: v, count, .. } = i {
            out.insert(*v, *count);
        }
    });
    out
}

impl<'p> Checker<'p> {
    fn is_barrier(&self, v: VarId) -> bool {
        self.barriers.contains_key(&v)
    }

    fn barrier_count(&self, v: VarId) -> Option<u32> {
        self.barriers.get(&v).copied()
    }

    fn needs_sm90(&mut self, span: SpanId, instr: &str) {
        let f = self.target.features;
        if !(f.tma && f.mbarrier) {
            let arch = self.target.arch.name();
            self.err(
                span,
                format!("{instr} needs the tensor memory accelerator and mbarriers of sm_90, which the target {arch} does not have\nhelp: compile for sm_90 (`target = sm90`)"),
            );
        }
    }

    pub(super) fn needs_tma(&mut self, span: SpanId, instr: &str) {
        if !self.target.features.tma {
            let arch = self.target.arch.name();
            self.err(
                span,
                format!("{instr} needs the tensor memory accelerator of sm_90, which the target {arch} does not have\nhelp: compile for sm_90 (`target = sm90`)"),
            );
        }
    }

    /// Only this family may use an `mbarriers` tensor: a load, store or copy of its bytes
    /// would corrupt the barriers' state.
    pub(super) fn check_barrier_uses(&mut self, ins: &Instruction, span: SpanId) {
        let allowed: &[VarId] = match ins {
            Instruction::TmaLoad { barrier, .. }
            | Instruction::MbarrierArrive { barrier, .. }
            | Instruction::MbarrierWait { barrier, .. } => std::slice::from_ref(barrier),
            _ => &[],
        };
        for v in ins.inputs() {
            if !allowed.contains(&v) && self.is_barrier(v) {
                let msg = format!(
                    "{}: {} holds mbarriers, which only tma_load, mbarrier_arrive and mbarrier_wait may use",
                    ins.name(),
                    self.name(v)
                );
                self.err(span, msg);
            }
        }
    }

    pub(super) fn check_mbarriers(&mut self, out: VarId, count: u32, arrivals: u32, span: SpanId) {
        self.needs_sm90(span, "mbarriers");
        if count == 0 {
            let msg = format!("mbarriers {}: the count must be at least 1", self.name(out));
            self.err(span, msg);
        }
        if arrivals == 0 || arrivals > MAX_ARRIVALS {
            let msg = format!(
                "mbarriers {}: {arrivals} arrivals per phase, but a barrier takes 1 to {MAX_ARRIVALS}",
                self.name(out)
            );
            self.err(span, msg);
        }
        self.define(out, true, span, "mbarriers");
    }

    /// `barriers` is an `mbarriers` tensor and `index` an `i32` in range when constant.
    fn check_barrier_operand(&mut self, barrier: VarId, index: &Expr, span: SpanId, instr: &str) {
        let ty = self.use_var(barrier, span);
        if ty.is_some() && ty != Some(&VarType::Unknown) && !self.is_barrier(barrier) {
            let msg = format!(
                "{instr}: {} must be a barrier tensor made by `mbarriers(count, arrivals)`",
                self.name(barrier)
            );
            self.err(span, msg);
        }
        self.expect_expr(
            index,
            ScalarType::I32,
            span,
            &format!("the barrier index of {instr}"),
        );
        if let (Some(count), Some(i)) = (self.barrier_count(barrier), super::const_eval(index)) {
            if i < 0 || i >= i64::from(count) {
                let msg = format!(
                    "{instr}: barrier index {i} is outside {} of {count} barriers",
                    self.name(barrier)
                );
                self.err(span, msg);
            }
        }
    }

    pub(super) fn check_mbarrier_arrive(&mut self, barrier: VarId, index: &Expr, span: SpanId) {
        self.needs_sm90(span, "mbarrier_arrive");
        self.check_barrier_operand(barrier, index, span, "mbarrier_arrive");
    }

    pub(super) fn check_mbarrier_wait(
        &mut self,
        barrier: VarId,
        index: &Expr,
        phase: &Expr,
        span: SpanId,
    ) {
        self.needs_sm90(span, "mbarrier_wait");
        self.check_barrier_operand(barrier, index, span, "mbarrier_wait");
        self.expect_expr(phase, ScalarType::I32, span, "the phase of mbarrier_wait");
    }

    pub(super) fn check_tma_load(
        &mut self,
        dst: VarId,
        src: VarId,
        src_offset: &[Expr],
        barrier: VarId,
        index: &Expr,
        span: SpanId,
    ) {
        let instr = "tma_load";
        self.needs_sm90(span, instr);
        self.check_barrier_operand(barrier, index, span, instr);
        for e in src_offset {
            self.expect_expr(
                e,
                ScalarType::I32,
                span,
                "an offset of tma_load (tensor-map coordinates are i32)",
            );
        }
        let g = self.global_for_tma(src, span, instr, "the source");
        let d = self.shared_op(dst, span, instr, "the destination");
        let (Some(g), Some(d)) = (g, d) else { return };
        self.check_tma_box(instr, src, g, dst, d, src_offset, span);
    }

    pub(super) fn check_tma_store(
        &mut self,
        src: VarId,
        dst: VarId,
        dst_offset: &[Expr],
        span: SpanId,
    ) {
        let instr = "tma_store";
        self.needs_tma(span, instr);
        for e in dst_offset {
            self.expect_expr(
                e,
                ScalarType::I32,
                span,
                "an offset of tma_store (tensor-map coordinates are i32)",
            );
        }
        let g = self.global_for_tma(dst, span, instr, "the destination");
        if let Some(g) = g.filter(|g| !g.mutable) {
            let msg = format!(
                "tma_store: {} is a view of read-only pointer {}; stores need a mutable pointer",
                self.name(dst),
                self.name(g.ptr)
            );
            self.err(span, msg);
        }
        let s = self.shared_op(src, span, instr, "the source");
        let (Some(g), Some(s)) = (g, s) else { return };
        self.check_tma_box(instr, dst, g, src, s, dst_offset, span);
    }

    /// The global side of a copy through a tensor map (`role`: "the source" or "the
    /// destination"): a view of a pointer parameter whose extents the launcher can evaluate.
    fn global_for_tma(
        &mut self,
        v: VarId,
        span: SpanId,
        instr: &str,
        role: &str,
    ) -> Option<&'p GlobalType> {
        let g = self.global(v, span, instr, role)?;
        let p = self.p;
        let is_param = |v: VarId| p.params.iter().any(|q| q.var == v);
        if !is_param(g.ptr) {
            let msg = format!(
                "{instr}: {role} {} must view a pointer parameter (the launcher builds its tensor map from the argument); scratch tensors from allocate_global cannot be copied with {instr}",
                self.name(v)
            );
            self.err(span, msg);
            return None;
        }
        let mut runtime = Vec::new();
        for e in &g.shape {
            e.visit_vars(&mut |v| {
                if !(is_param(v) && matches!(p.ty(v), VarType::Scalar(_))) {
                    runtime.push(v);
                }
            });
        }
        if let Some(&r) = runtime.first() {
            let msg = format!(
                "{instr}: the extents of {} read {}, which is not a scalar parameter; the launcher encodes the tensor map before the kernel runs, so the view's extents must be expressions of the kernel's scalar parameters",
                self.name(v),
                self.name(r)
            );
            self.err(span, msg);
            return None;
        }
        Some(g)
    }

    #[allow(clippy::too_many_arguments)]
    fn check_tma_box(
        &mut self,
        instr: &str,
        global: VarId,
        g: &GlobalType,
        shared: VarId,
        d: &SharedType,
        offset: &[Expr],
        span: SpanId,
    ) {
        let (sn, dn) = (self.name(global), self.name(shared));
        self.same_dtype(span, instr, shared, d.dtype, global, g.dtype);
        let bits = g.dtype.bits() as usize;
        if !matches!(bits, 1 | 2 | 4 | 8 | 16 | 32) {
            self.err(span, format!("{instr}: {sn} holds {}; the copy engine moves 8-, 16- or 32-bit elements, or 1-, 2- or 4-bit ones as bytes (view other codes as u8)", g.dtype));
            return;
        }
        let rank = g.shape.len();
        if !(1..=5).contains(&rank) {
            self.err(
                span,
                format!("{instr}: {sn} has rank {rank}; tensor maps have rank 1 to 5"),
            );
            return;
        }
        if offset.len() != rank {
            self.err(
                span,
                format!(
                    "{instr}: the offset has rank {} but {sn} has rank {rank}",
                    offset.len()
                ),
            );
        }
        let shape = &d.layout.shape;
        if shape.len() > rank {
            self.err(span, format!("{instr}: the box {dn} of shape {shape:?} has a higher rank than {sn} of rank {rank}"));
            return;
        }
        // The map's elements: sub-byte ones are copied as bytes.
        let units = |i: usize, x: usize| {
            if i + 1 == shape.len() && bits < 8 {
                x * bits / 8
            } else {
                x
            }
        };
        if let Some((_, &x)) = shape
            .iter()
            .enumerate()
            .find(|&(i, &x)| units(i, x) == 0 || units(i, x) > MAX_BOX_EXTENT)
        {
            self.err(span, format!("{instr}: the box {dn} of shape {shape:?} has an extent of {x}; each must be 1 to {MAX_BOX_EXTENT} (innermost: bytes, for sub-byte elements)\nhelp: copy a large tile as several boxes (slices of it)"));
        }
        let inner_bits = shape.last().copied().unwrap_or(1) * bits;
        if !inner_bits.is_multiple_of(128) {
            self.err(span, format!("{instr}: the inner extent of {dn} is {} bytes; the copy engine needs a multiple of 16", inner_bits as f64 / 8.0));
        }
        let total = shape.iter().product::<usize>().saturating_mul(bits) / 8;
        if instr == "tma_load" && total > MAX_TX_BYTES {
            self.err(span, format!("{instr}: the box {dn} is {total} bytes, more than one barrier phase can count ({MAX_TX_BYTES})"));
        }
        if !is_compact_row_major(&d.layout) {
            self.err(span, format!("{instr}: {dn} has strides {:?}; the copy engine reads and writes compact row-major boxes (strides {:?}): use a whole tensor or a slice of whole inner rows", d.layout.strides, SharedLayout::row_major(shape).strides));
        }
        if let Err(why) = tma_swizzle(&d.layout, d.dtype) {
            self.err(span, format!("{instr}: the shared tensor {dn}: {why}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::ProgramBuilder;
    use crate::verify::{verify, Target};

    const SW128: Swizzle = Swizzle {
        bits: 3,
        base: 3,
        shift: 3,
    };

    /// A kernel copying one `[rows, cols]` box of `dtype` from `x [n, 64]` into a shared tile
    /// allocated with `alloc` and `swizzle` (sliced to `[rows, cols]` at its origin), then
    /// waiting; `edit` changes the program before it is finished. Returns the messages.
    fn check(
        dtype: DType,
        alloc: &[usize],
        swizzle: Option<Swizzle>,
        rows_cols: [usize; 2],
        target: &Target,
        edit: impl FnOnce(&mut ProgramBuilder, VarId, VarId, VarId),
    ) -> Vec<String> {
        let mut b = ProgramBuilder::new("k", 128);
        let n = b.param_i32("n");
        let x = b.param_ptr("x", dtype, false);
        b.grid(vec![1.into()]);
        let gx = b.view_global("gx", x, dtype, vec![n.into(), 64.into()]);
        let mut layout = SharedLayout::row_major(alloc);
        layout.swizzle = swizzle;
        let s = b.allocate_shared("s", dtype, layout);
        let zeros = vec![0.into(); alloc.len()];
        let tile = b.slice_shared("tile", s, zeros, rows_cols.to_vec());
        let bars = b.mbarriers("bars", 2, 1);
        b.tma_load(gx, tile, vec![0.into(), 0.into()], bars, 0);
        edit(&mut b, gx, tile, bars);
        b.mbarrier_wait(bars, 0, 0);
        match verify(&b.finish(), target) {
            Ok(()) => Vec::new(),
            Err(d) => d.into_iter().map(|d| d.message).collect(),
        }
    }

    fn one(msgs: Vec<String>, needle: &str) {
        assert!(
            msgs.iter().any(|m| m.contains(needle)),
            "no message with `{needle}` in {msgs:#?}"
        );
    }

    #[test]
    fn accepts_swizzled_and_plain_boxes() {
        let sm90 = &Target::SM90;
        let ok = |m: Vec<String>| assert!(m.is_empty(), "{m:#?}");
        ok(check(
            DType::F16,
            &[2, 128, 64],
            Some(SW128),
            [128, 64],
            sm90,
            |_, _, _, _| {},
        ));
        ok(check(
            DType::F16,
            &[64, 64],
            None,
            [64, 64],
            sm90,
            |_, _, _, _| {},
        ));
        // 64-byte swizzle on 32 f16 per row, 128-byte on 128 bytes of u8.
        let sw64 = Swizzle {
            bits: 2,
            base: 3,
            shift: 3,
        };
        ok(check(
            DType::F16,
            &[64, 32],
            Some(sw64),
            [64, 32],
            sm90,
            |_, _, _, _| {},
        ));
        let sw_u8 = Swizzle {
            bits: 3,
            base: 4,
            shift: 3,
        };
        ok(check(
            DType::UInt(8),
            &[64, 128],
            Some(sw_u8),
            [64, 128],
            sm90,
            |_, _, _, _| {},
        ));
        // Sub-byte codes go as bytes: 64 u4 (32 bytes) plain, 1024 bits (128 bytes) with the
        // 128-byte swizzle on bits.
        ok(check(
            DType::UInt(4),
            &[64, 64],
            None,
            [64, 64],
            sm90,
            |_, _, _, _| {},
        ));
        let sw_bits = Swizzle {
            bits: 3,
            base: 7,
            shift: 3,
        };
        ok(check(
            DType::UInt(1),
            &[2, 64, 1024],
            Some(sw_bits),
            [64, 1024],
            sm90,
            |_, _, _, _| {},
        ));
    }

    #[test]
    fn rejections_name_the_operand_and_the_rule() {
        let sm90 = &Target::SM90;
        let none = |_: &mut ProgramBuilder, _, _, _| {};
        one(
            check(DType::F16, &[64, 64], None, [64, 64], &Target::SM80, none),
            "needs the tensor memory accelerator and mbarriers of sm_90",
        );
        // A box of 512 rows.
        one(
            check(DType::F16, &[512, 64], None, [512, 64], sm90, none),
            "has an extent of 512; each must be 1 to 256",
        );
        // 4 f16 per row: 8 bytes.
        one(
            check(DType::F16, &[64, 4], None, [64, 4], sm90, none),
            "the inner extent of `tile` is 8 bytes",
        );
        // A slice of half rows is not a compact box.
        one(
            check(DType::F16, &[64, 64], None, [64, 32], sm90, none),
            "the copy engine reads and writes compact row-major boxes",
        );
        // The swizzle of 16-bit elements on 8-bit ones.
        one(
            check(
                DType::UInt(8),
                &[64, 128],
                Some(SW128),
                [64, 128],
                sm90,
                none,
            ),
            "is not one the copy engine writes: for u8 use swizzle(b, 4, 3)",
        );
        // A 128-byte swizzle on 64-byte rows.
        one(
            check(DType::F16, &[64, 32], Some(SW128), [64, 32], sm90, none),
            "the inner extent must be 128 bytes (64 elements), not 64 bytes",
        );
        // Codes the copy engine cannot move as bytes; 16 u4 per row, 8 bytes; a row of 4096
        // bits is 512 bytes of the map's inner extent; the 8-bit swizzle on bits.
        one(
            check(DType::UInt(3), &[64, 128], None, [64, 128], sm90, none),
            "the copy engine moves 8-, 16- or 32-bit elements, or 1-, 2- or 4-bit ones as bytes",
        );
        one(
            check(DType::UInt(4), &[64, 16], None, [64, 16], sm90, none),
            "the inner extent of `tile` is 8 bytes",
        );
        one(
            check(DType::UInt(1), &[8, 4096], None, [8, 4096], sm90, none),
            "has an extent of 4096; each must be 1 to 256 (innermost: bytes, for sub-byte elements)",
        );
        let sw_u8 = Swizzle {
            bits: 3,
            base: 4,
            shift: 3,
        };
        one(
            check(
                DType::UInt(1),
                &[64, 1024],
                Some(sw_u8),
                [64, 1024],
                sm90,
                none,
            ),
            "for u1 use swizzle(b, 7, 3)",
        );
        // The barrier tensor used as data, an index out of range, a non-barrier as barrier.
        one(
            check(DType::F16, &[64, 64], None, [64, 64], sm90, |b, _, _, bars| {
                let l = crate::layout::Layout::spatial(&[32]);
                b.load_shared("x", bars, l, vec![0.into(), 0.into()]);
            }),
            "`bars` holds mbarriers, which only tma_load, mbarrier_arrive and mbarrier_wait may use",
        );
        one(
            check(
                DType::F16,
                &[64, 64],
                None,
                [64, 64],
                sm90,
                |b, _, _, bars| {
                    b.mbarrier_arrive(bars, 2);
                },
            ),
            "mbarrier_arrive: barrier index 2 is outside `bars` of 2 barriers",
        );
        one(
            check(
                DType::F16,
                &[64, 64],
                None,
                [64, 64],
                sm90,
                |b, _, tile, _| {
                    b.mbarrier_wait(tile, 0, 0);
                },
            ),
            "mbarrier_wait: `tile` must be a barrier tensor made by `mbarriers(count, arrivals)`",
        );
    }

    #[test]
    fn the_source_must_be_a_parameter_view_with_parameter_extents() {
        let mut b = ProgramBuilder::new("k", 128);
        let x = b.param_ptr("x", DType::F16, false);
        b.grid(vec![1.into()]);
        let bi = b.block_indices(&["bi"])[0];
        let gx = b.view_global("gx", x, DType::F16, vec![bi.into(), 64.into()]);
        let s = b.allocate_shared("s", DType::F16, SharedLayout::row_major(&[64, 64]));
        let bars = b.mbarriers("bars", 1, 1);
        b.tma_load(gx, s, vec![0.into(), 0.into()], bars, 0);
        b.mbarrier_wait(bars, 0, 0);
        let msgs: Vec<String> = verify(&b.finish(), &Target::SM90)
            .unwrap_err()
            .into_iter()
            .map(|d| d.message)
            .collect();
        one(
            msgs,
            "the extents of `gx` read `bi`, which is not a scalar parameter",
        );
    }

    /// A `dot_async` inside an `if` is refused (measured: the CUDA compiler moved an in-flight
    /// accumulator's registers at a branch merge); the same dot outside the branch verifies.
    #[test]
    fn dot_async_inside_a_branch_is_refused() {
        let run = |in_branch: bool| {
            let mut b = ProgramBuilder::new("k", 128);
            let flag = b.param_bool("flag");
            b.grid(vec![1.into()]);
            let mut l = SharedLayout::row_major(&[64, 64]);
            l.swizzle = Some(SW128);
            let s = b.allocate_shared("s", DType::F16, l);
            let st = b.permute_shared("st", s, vec![1, 0]);
            let c = crate::layout::parse("spatial(4, 1).local(1, 8).mma_c").unwrap();
            let acc = b.allocate_register("acc", DType::F32, c, Some(0.0));
            if in_branch {
                b.if_else(
                    flag.into(),
                    |b| {
                        b.dot_async(acc, s, st, acc);
                    },
                    |_| {},
                );
            } else {
                b.dot_async(acc, s, st, acc);
            }
            b.dot_wait(0);
            verify(&b.finish(), &Target::SM90)
                .err()
                .unwrap_or_default()
                .into_iter()
                .map(|d| d.message)
                .collect::<Vec<_>>()
        };
        one(run(true), "dot_async into `acc` inside an `if`");
        let outside = run(false);
        assert!(
            !outside.iter().any(|m| m.contains("inside an `if`")),
            "{outside:#?}"
        );
    }

    /// `tma_store`: a shared tile to a view of a mutable pointer parameter, with the box rules
    /// of `tma_load` (read the other way) and no barrier; each misuse named.
    #[test]
    fn tma_store_rules() {
        let run = |target: &Target, mutable: bool, edit: &dyn Fn(&mut ProgramBuilder) -> VarId| {
            let mut b = ProgramBuilder::new("k", 128);
            let n = b.param_i32("n");
            let y = b.param_ptr("y", DType::F16, mutable);
            b.grid(vec![1.into()]);
            let gy = b.view_global("gy", y, DType::F16, vec![n.into(), 64.into()]);
            let src = edit(&mut b);
            b.tma_store(src, gy, vec![0.into(), 0.into()]);
            verify(&b.finish(), target)
                .err()
                .unwrap_or_default()
                .into_iter()
                .map(|d| d.message)
                .collect::<Vec<_>>()
        };
        let tile = |sw: Option<Swizzle>, shape: &[usize]| {
            let shape = shape.to_vec();
            move |b: &mut ProgramBuilder| {
                let mut layout = SharedLayout::row_major(&shape);
                layout.swizzle = sw;
                let s = b.allocate_shared("s", DType::F16, layout);
                if shape[1] == 64 {
                    s
                } else {
                    b.slice_shared("t", s, vec![0.into(), 0.into()], vec![16, 64])
                }
            }
        };
        let sm90 = &Target::SM90;
        for sw in [None, Some(SW128)] {
            let m = run(sm90, true, &tile(sw, &[16, 64]));
            assert!(m.is_empty(), "{m:#?}");
        }
        one(
            run(sm90, false, &tile(None, &[16, 64])),
            "tma_store: `gy` is a view of read-only pointer `y`",
        );
        one(
            run(&Target::SM80, true, &tile(None, &[16, 64])),
            "tma_store needs the tensor memory accelerator of sm_90",
        );
        one(
            run(sm90, true, &tile(None, &[16, 128])),
            "the copy engine reads and writes compact row-major boxes",
        );
        let bad = Swizzle {
            bits: 3,
            base: 4,
            shift: 3,
        };
        one(
            run(sm90, true, &tile(Some(bad), &[16, 64])),
            "tma_store: the shared tensor `s`: its swizzle(3, 4, 3) is not one the copy engine writes",
        );
        one(
            run(sm90, true, &|b: &mut ProgramBuilder| {
                let l = crate::layout::parse("spatial(16, 8).local(1, 8)").unwrap();
                b.allocate_register("r", DType::F16, l, Some(0.0))
            }),
            "tma_store: the source `r` must be a shared tensor",
        );
        let mut b = ProgramBuilder::new("k", 128);
        b.grid(vec![1.into()]);
        b.tma_store_wait();
        let msgs = verify(&b.finish(), &Target::SM80)
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|d| d.message)
            .collect();
        one(
            msgs,
            "tma_store_wait needs the tensor memory accelerator of sm_90",
        );
    }
}
