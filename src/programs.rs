//! The paper's programs, built with [`ProgramBuilder`]: the f16 x i6 matmul of Figure 2 (for any
//! integer weight type of at most 8 bits), the weight re-layout of Figure 8 that produces its
//! weight format, and the cp.async-pipelined matmul of Figure 14 / Appendix B. Codegen tests and
//! examples reuse them.
//!
//! Example and test material, not part of the VM: it lives in the facade (`tilus emit fig2`
//! uses it), and `tilus-core`'s tests include this file by path. Hence only `tilus_core::`
//! paths here, which name the core crate in both places.
//!
//! All use 4 warps ([`THREADS`] = 128), arranged along `n`: warp `w` computes columns
//! `[w * bn/4, (w + 1) * bn/4)` of the block's `[bm, bn]` tile, as `bm/16 x bn/32` mma tiles of
//! `16 x 8`. Their register layouts ([`a_tile`], [`b_tile`], [`c_tile`]) are compositions of
//! warp-level outer layouts with the `mma.m16n8k16` fragments ([`mma_a`], [`mma_b`], [`mma_c`]):
//! the `a` tile is one warp's layout, replicated over the 4 warps.
//!
//! Parameters are in the order `m, n, k` (i32), then the pointers. The kernels assume `n` a
//! multiple of `bn` and `k` a multiple of `bk`; `m` is arbitrary (rows beyond it are masked).
//!
//! # The weight format of Figure 2 (produced by Figure 8)
//!
//! A weight `B[k, n]` of a `b`-bit integer type is stored as `u8[k/bk, n/bn, bk*bn*b/8]`: tile
//! `(i, j)` holds `B[i*bk.., j*bn..]` so that thread `t`, reading the tile's bytes with
//! [`weight_bytes`], finds in its `nb` bytes exactly its `b_tile` locals, packed in the compact
//! storage order. The `view` to `b`-bit integers is then free: no shuffles, no bit twiddling
//! across threads.
//!
//! `weight_bytes = local(nb/v).spatial(128).local(v)`, with `v` the largest of 16, 8, 4, 2, 1
//! dividing `nb`: byte `q` of thread `t` sits at tile byte `(q / v) * 128 * v + t * v + q % v`.
//! Each thread reads `nb / v` vectors of `v` contiguous bytes, and consecutive threads read
//! consecutive vectors, so global loads are both vectorized and coalesced.

use tilus_core::ir::{Expr, Program, ProgramBuilder, ScalarType};
use tilus_core::layout::{Layout, SharedLayout};
use tilus_core::verify::{mma_fragments, MmaKind};
use tilus_core::DType;

/// Warps per block in these programs.
pub const WARPS: usize = 4;
/// Threads per block in these programs.
pub const THREADS: usize = WARPS * 32;

fn compose(parts: &[Layout]) -> Layout {
    parts[1..]
        .iter()
        .try_fold(parts[0].clone(), |acc, p| acc.compose(p))
        .expect("tile layouts compose (ranks agree by construction)")
}

/// The f16 `mma.m16n8k16` A fragment, `column_local(2,2).spatial(8,4).local(1,2)`, `[16, 16]`.
pub fn mma_a() -> Layout {
    mma_fragments(MmaKind::F16)[0].clone()
}

/// The f16 `mma.m16n8k16` B fragment, `local(2,1).column_spatial(4,8).local(2,1)`, `[16, 8]`.
pub fn mma_b() -> Layout {
    mma_fragments(MmaKind::F16)[1].clone()
}

/// The `mma.m16n8k16` C fragment, `local(2,1).spatial(8,4).local(1,2)`, `[16, 8]`.
pub fn mma_c() -> Layout {
    mma_fragments(MmaKind::F16)[2].clone()
}

/// `local(bm/16, bk/16).mma_a`: the `[bm, bk]` A tile of one warp (32 threads), replicated
/// over the block's warps.
pub fn a_tile(bm: usize, bk: usize) -> Layout {
    compose(&[Layout::local(&[bm / 16, bk / 16]), mma_a()])
}

/// `spatial(1, 4).local(bk/16, bn/32).mma_b`: the `[bk, bn]` B tile, warp `w` holding columns
/// `[w * bn/4, (w+1) * bn/4)`.
pub fn b_tile(bk: usize, bn: usize) -> Layout {
    compose(&[
        Layout::spatial(&[1, WARPS]),
        Layout::local(&[bk / 16, bn / (8 * WARPS)]),
        mma_b(),
    ])
}

/// `spatial(1, 4).local(bm/16, bn/32).mma_c`: the `[bm, bn]` accumulator tile.
pub fn c_tile(bm: usize, bn: usize) -> Layout {
    compose(&[
        Layout::spatial(&[1, WARPS]),
        Layout::local(&[bm / 16, bn / (8 * WARPS)]),
        mma_c(),
    ])
}

/// Bytes per thread of a `[bk, bn]` weight tile of `bits`-bit integers.
pub fn weight_bytes_per_thread(bk: usize, bn: usize, bits: usize) -> usize {
    bk * bn * bits / 8 / THREADS
}

/// The vector width `v` of [`weight_bytes`]: the largest of 16, 8, 4, 2, 1 dividing the bytes
/// per thread.
pub fn weight_vector_bytes(bk: usize, bn: usize, bits: usize) -> usize {
    let nb = weight_bytes_per_thread(bk, bn, bits);
    [16, 8, 4, 2, 1]
        .into_iter()
        .find(|v| nb.is_multiple_of(*v))
        .unwrap_or(1)
}

/// `local(nb/v).spatial(128).local(v)`: the u8 layout of one weight tile, `nb` bytes per thread
/// in vectors of `v` (see the module docs).
pub fn weight_bytes(bk: usize, bn: usize, bits: usize) -> Layout {
    let nb = weight_bytes_per_thread(bk, bn, bits);
    let v = weight_vector_bytes(bk, bn, bits);
    compose(&[
        Layout::local(&[nb / v]),
        Layout::spatial(&[THREADS]),
        Layout::local(&[v]),
    ])
}

fn check_tiles(bm: usize, bn: usize, bk: usize) {
    assert!(
        bm.is_multiple_of(16)
            && bm > 0
            && bk.is_multiple_of(16)
            && bk > 0
            && bn.is_multiple_of(8 * WARPS)
            && bn > 0,
        "tile sizes bm={bm}, bn={bn}, bk={bk}: need bm and bk multiples of 16, bn a multiple of 32"
    );
    // Tile extents and the weight tile's byte count become i32 constants of the program.
    let fits = |v: Option<usize>| v.is_some_and(|v| v <= i32::MAX as usize);
    assert!(
        fits(Some(bm)) && fits(bk.checked_mul(bn).and_then(|x| x.checked_mul(8))),
        "tile sizes bm={bm}, bn={bn}, bk={bk}: bm and bk x bn x 8 must fit the VM's i32 scalars"
    );
}

fn check_weight(weight: DType, bk: usize, bn: usize) -> usize {
    let bits = weight.bits() as usize;
    assert!(
        weight.kind() != tilus_core::dtype::Kind::Float && bits <= 8,
        "weight type {weight} must be an integer type of at most 8 bits"
    );
    let locals = b_tile(bk, bn).num_locals();
    assert!(
        (locals * bits).is_multiple_of(8),
        "a {bk}x{bn} tile of {weight} gives each thread {locals} x {bits} bits, not whole bytes"
    );
    bits
}

fn i(v: usize) -> Expr {
    Expr::Int(v as i32)
}

/// Figure 2: `c[m, n] (f16) = a[m, k] (f16) x B[k, n]`, `B` of integer type `weight` in the
/// re-laid-out format of the module docs. Parameters `m, n, k, a, b (u8), c (f16, mutable)`;
/// grid `[cdiv(m, bm), n / bn]`.
///
/// # Panics
/// On tile sizes outside the documented constraints (bm, bk multiples of 16, bn of 32, whole
/// bytes of weight per thread; bm and bk x bn x 8 within i32).
pub fn matmul_f16_int(weight: DType, bm: usize, bn: usize, bk: usize) -> Program {
    check_tiles(bm, bn, bk);
    let bits = check_weight(weight, bk, bn);
    let mut b = ProgramBuilder::new(
        &format!("matmul_f16_{weight}_bm{bm}_bn{bn}_bk{bk}"),
        THREADS as u32,
    );
    let m = b.param_i32("m");
    let n = b.param_i32("n");
    let k = b.param_i32("k");
    let a = b.param_ptr("a", DType::F16, false);
    let w = b.param_ptr("b", DType::UInt(8), false);
    let c = b.param_ptr("c", DType::F16, true);
    b.grid(vec![Expr::cdiv(m, i(bm)), Expr::from(n) / i(bn)]);
    let idx = b.block_indices(&["bi", "bj"]);
    let (bi, bj) = (idx[0], idx[1]);
    let ga = b.view_global("ga", a, DType::F16, vec![m.into(), k.into()]);
    let gb = b.view_global(
        "gb",
        w,
        DType::UInt(8),
        vec![
            Expr::from(k) / i(bk),
            Expr::from(n) / i(bn),
            i(bk * bn * bits / 8),
        ],
    );
    let acc = b.allocate_register("acc", DType::F32, c_tile(bm, bn), Some(0.0));
    b.for_range("kk", i(0), Expr::from(k) / i(bk), |b, kk| {
        let ra = b.load_global(
            "ra",
            ga,
            a_tile(bm, bk),
            vec![Expr::from(bi) * i(bm), Expr::from(kk) * i(bk)],
        );
        let rw = b.load_global(
            "rw",
            gb,
            weight_bytes(bk, bn, bits),
            vec![kk.into(), bj.into(), i(0)],
        );
        let rq = b.view("rq", rw, weight, b_tile(bk, bn));
        let rb = b.cast("rb", rq, DType::F16);
        b.dot(acc, ra, rb, acc);
    });
    let out = b.cast("out", acc, DType::F16);
    let gc = b.view_global("gc", c, DType::F16, vec![m.into(), n.into()]);
    b.store_global(
        out,
        gc,
        vec![Expr::from(bi) * i(bm), Expr::from(bj) * i(bn)],
    );
    b.finish()
}

/// Figure 2 with i6 weights.
pub fn matmul_f16_i6(bm: usize, bn: usize, bk: usize) -> Program {
    matmul_f16_int(DType::Int(6), bm, bn, bk)
}

/// Figure 8: re-lay out a row-major compact weight `w[k, n]` of integer type `weight` into the
/// format [`matmul_f16_int`] reads. Parameters `k, n, w (weight), out (u8, mutable)`; grid
/// `[k / bk, n / bn]`. Each block loads its tile with the B-operand layout [`b_tile`], views
/// each thread's bits as bytes and stores them with [`weight_bytes`].
///
/// # Panics
/// As [`matmul_f16_int`].
pub fn relayout_int(weight: DType, bk: usize, bn: usize) -> Program {
    relayout_with(weight, b_tile(bk, bn), bk, bn)
}

/// Figure 8 with the codes of each thread in the order of `codes` (a `[bk, bn]` layout holding
/// [`b_tile`]'s elements on the same threads, e.g. its locals reordered with
/// `Layout::swap_inner_locals`).
pub fn relayout_with(weight: DType, codes: Layout, bk: usize, bn: usize) -> Program {
    check_tiles(16, bn, bk);
    let bits = check_weight(weight, bk, bn);
    assert!(
        b_tile(bk, bn).local_permutation(&codes).is_some(),
        "relayout_with: {} does not hold the B tile's elements on the same threads",
        codes.to_expr()
    );
    let mut b = ProgramBuilder::new(&format!("relayout_{weight}_bk{bk}_bn{bn}"), THREADS as u32);
    let k = b.param_i32("k");
    let n = b.param_i32("n");
    let w = b.param_ptr("w", weight, false);
    let out = b.param_ptr("out", DType::UInt(8), true);
    b.grid(vec![Expr::from(k) / i(bk), Expr::from(n) / i(bn)]);
    let idx = b.block_indices(&["bk", "bn"]);
    let gw = b.view_global("gw", w, weight, vec![k.into(), n.into()]);
    let r = b.load_global(
        "r",
        gw,
        codes,
        vec![Expr::from(idx[0]) * i(bk), Expr::from(idx[1]) * i(bn)],
    );
    let bytes = b.view("bytes", r, DType::UInt(8), weight_bytes(bk, bn, bits));
    let go = b.view_global(
        "go",
        out,
        DType::UInt(8),
        vec![
            Expr::from(k) / i(bk),
            Expr::from(n) / i(bn),
            i(bk * bn * bits / 8),
        ],
    );
    b.store_global(bytes, go, vec![idx[0].into(), idx[1].into(), i(0)]);
    b.finish()
}

/// Figure 8 for i6 weights.
pub fn relayout_i6(bk: usize, bn: usize) -> Program {
    relayout_int(DType::Int(6), bk, bn)
}

/// A deliberate bug in [`matmul_f16_pipelined_with`], to show the interpreter catches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PipelineBug {
    /// No `copy_async_wait_group` before reading a stage: reads data still in flight.
    MissingWait,
    /// No `synchronize` after the wait: reads other threads' copies without a barrier, and
    /// refills a stage other warps may still be reading.
    MissingSynchronize,
}

/// Figure 14 / Appendix B: `c[m, n] (f16) = a[m, k] (f16) x b[k, n] (f16)` with a
/// `stages`-deep cp.async pipeline through shared tiles `[stages, bm, bk]` and
/// `[stages, bk, bn]`. Parameters `m, n, k, a, b, c (mutable)`; grid `[cdiv(m, bm), n / bn]`.
///
/// ```text
/// for s in 0..stages-1: copy_async(stage s <- k-tile s); commit
/// for kk in 0..k/bk:
///     wait_group(stages - 2); synchronize          // k-tile kk landed and is visible
///     ra, rb = load_shared(stage kk % stages)
///     copy_async(stage (kk+stages-1) % stages <- k-tile kk+stages-1); commit
///     acc = dot(ra, rb, acc)
/// ```
/// The `synchronize` also separates the reads of a stage from its refill one iteration later.
/// Copies past `k` are masked (zero-filled), so the tail needs no special case.
///
/// # Panics
/// On tile sizes outside the documented constraints or `stages < 2`.
pub fn matmul_f16_pipelined(bm: usize, bn: usize, bk: usize, stages: usize) -> Program {
    matmul_f16_pipelined_with(bm, bn, bk, stages, None)
}

/// [`matmul_f16_pipelined`], optionally with a deliberate bug.
pub fn matmul_f16_pipelined_with(
    bm: usize,
    bn: usize,
    bk: usize,
    stages: usize,
    bug: Option<PipelineBug>,
) -> Program {
    check_tiles(bm, bn, bk);
    assert!(
        (2..=i32::MAX as usize).contains(&stages),
        "a pipeline needs at least 2 stages (and at most i32::MAX), got {stages}"
    );
    let suffix = match bug {
        None => "",
        Some(PipelineBug::MissingWait) => "_no_wait",
        Some(PipelineBug::MissingSynchronize) => "_no_sync",
    };
    let mut b = ProgramBuilder::new(
        &format!("matmul_f16_pipelined_bm{bm}_bn{bn}_bk{bk}_s{stages}{suffix}"),
        THREADS as u32,
    );
    let m = b.param_i32("m");
    let n = b.param_i32("n");
    let k = b.param_i32("k");
    let a = b.param_ptr("a", DType::F16, false);
    let w = b.param_ptr("b", DType::F16, false);
    let c = b.param_ptr("c", DType::F16, true);
    b.grid(vec![Expr::cdiv(m, i(bm)), Expr::from(n) / i(bn)]);
    let idx = b.block_indices(&["bi", "bj"]);
    let (bi, bj) = (idx[0], idx[1]);
    let ga = b.view_global("ga", a, DType::F16, vec![m.into(), k.into()]);
    let gb = b.view_global("gb", w, DType::F16, vec![k.into(), n.into()]);
    let sa = b.allocate_shared("sa", DType::F16, SharedLayout::row_major(&[stages, bm, bk]));
    let sb = b.allocate_shared("sb", DType::F16, SharedLayout::row_major(&[stages, bk, bn]));
    let acc = b.allocate_register("acc", DType::F32, c_tile(bm, bn), Some(0.0));
    // Issue the copies of k-tile `kt` into stage `st`, as one group.
    let prefetch = |b: &mut ProgramBuilder, st: Expr, kt: Expr| {
        let za = b.slice_shared("sa_fill", sa, vec![st.clone(), i(0), i(0)], vec![bm, bk]);
        b.copy_async(za, ga, vec![Expr::from(bi) * i(bm), kt.clone() * i(bk)]);
        let zb = b.slice_shared("sb_fill", sb, vec![st, i(0), i(0)], vec![bk, bn]);
        b.copy_async(zb, gb, vec![kt * i(bk), Expr::from(bj) * i(bn)]);
        b.copy_async_commit_group();
    };
    b.for_range("s", i(0), i(stages - 1), |b, s| {
        prefetch(b, s.into(), s.into())
    });
    b.for_range("kk", i(0), Expr::from(k) / i(bk), |b, kk| {
        if bug != Some(PipelineBug::MissingWait) {
            b.copy_async_wait_group(stages as u32 - 2);
        }
        if bug != Some(PipelineBug::MissingSynchronize) {
            b.synchronize();
        }
        let stage = b.let_("stage", ScalarType::I32, Expr::from(kk) % i(stages));
        let ta = b.slice_shared("sa_use", sa, vec![stage.into(), i(0), i(0)], vec![bm, bk]);
        let ra = b.load_shared("ra", ta, a_tile(bm, bk), vec![i(0), i(0)]);
        let tb = b.slice_shared("sb_use", sb, vec![stage.into(), i(0), i(0)], vec![bk, bn]);
        let rb = b.load_shared("rb", tb, b_tile(bk, bn), vec![i(0), i(0)]);
        let next = b.let_("next", ScalarType::I32, Expr::from(kk) + i(stages - 1));
        prefetch(b, Expr::from(next) % i(stages), next.into());
        b.dot(acc, ra, rb, acc);
    });
    let out = b.cast("out", acc, DType::F16);
    let gc = b.view_global("gc", c, DType::F16, vec![m.into(), n.into()]);
    b.store_global(
        out,
        gc,
        vec![Expr::from(bi) * i(bm), Expr::from(bj) * i(bn)],
    );
    b.finish()
}
