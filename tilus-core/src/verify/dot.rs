//! Which implementations can serve a `dot`, and the register-layout conditions behind them.
//!
//! This is the contract between the verifier and the code generator. A `dot` over
//! `a: [m, k]`, `b: [k, n]`, `c: [m, n]` (result in `c`'s layout) is accepted when one of two
//! implementations serves it; [`plan_dot`] says which (mma is preferred when both do).
//!
//! **Dtypes.** `a` and `b` have the same dtype, or are 8-bit integers of different signedness
//! (u8 x i8, i8 x u8: the mma's mixed forms). The accumulator `c` is `f32` when they are floats
//! and `i32` when they are integers (signed or unsigned, any width).
//!
//! **Thread-local** ([`dot_thread_local`], any dtypes above). Each thread computes its own `c`
//! locals with scalar FMAs from its own registers: for every block thread `t` and every local
//! `j` of `c` (holding `c[m, n]`), thread `t` holds `a[m, kk]` and `b[kk, n]` for every `kk`, at
//! locals `la(j, kk)`, `lb(j, kk)` that depend only on `j` and `kk`, never on `t`. (Layout
//! replication applies: block thread `t` plays layout thread `t % layout.num_threads()`.) The
//! code generator emits one unrolled loop nest indexed by `(j, kk)`, valid for every thread.
//!
//! **Warp-level mma** (`mma.sync.aligned.m16n8k16`): `a`, `b`, `c` are compositions
//! `qa ∘ A`, `qb ∘ B`, `qc ∘ C` of warp-level layouts with the instruction's fragments
//! (found with `Layout::divide`), and the quotients `qa`, `qb`, `qc` satisfy the thread-local
//! condition with *warps* as the threads (block warp `w` plays quotient thread
//! `w % quotient.num_threads()`): for each of its `c` fragments `jq` the warp holds the `a` and
//! `b` fragments of every `kq` at fragment indices that depend only on `(jq, kq)`. The fragments:
//!
//! | operands              | A `[16, 16]`                              | B `[16, 8]`                                | C `[16, 8]`                         |
//! |-----------------------|-------------------------------------------|--------------------------------------------|-------------------------------------|
//! | f16/bf16 -> f32       | `column_local(2,2).spatial(8,4).local(1,2)` | `local(2,1).column_spatial(4,8).local(2,1)` | `local(2,1).spatial(8,4).local(1,2)` |
//! | i8/u8 -> i32          | `local(2,1).spatial(8,4).local(1,4)`      | `column_spatial(4,8).local(4,1)`            | `local(2,1).spatial(8,4).local(1,2)` |
//! | fp8 -> f32 (m16n8k32, sm_90) | `column_local(2,2).spatial(8,4).local(1,4)` `[16, 32]` | `local(2,1).column_spatial(4,8).local(4,1)` `[32, 8]` | `local(2,1).spatial(8,4).local(1,2)` |
//! | i8/u8, any pair -> i32 (m16n8k32) | as fp8 (`mma_a_f8`) | as fp8 (`mma_b_f8`) | `local(2,1).spatial(8,4).local(1,2)` |
//! | u1 -> i32 (m16n8k256) | `column_local(2,2).spatial(8,4).local(1,32)` `[16, 256]` | `local(2,1).column_spatial(4,8).local(32,1)` `[256, 8]` | `local(2,1).spatial(8,4).local(1,2)` |
//! | u1 -> i32, paired     | `spatial(8,4).local(2,64)`                 | `column_spatial(4,8).local(64,1)`            | `spatial(8,4).local(2,2)`            |
//! | f16/bf16, runs of 4   | `local(2,1).spatial(8,4).local(1,4)`, locals reordered | `column_spatial(4,8).local(4,1)`            | `local(2,1).spatial(8,4).local(1,2)` |
//! | f16/bf16, runs of 8   | `local(2,1).spatial(8,4).local(1,8)` `[16, 32]`, locals reordered | `column_spatial(4,8).local(8,1)` `[32, 8]` | `local(2,1).spatial(8,4).local(1,2)` |
//!
//! 8-bit integers take m16n8k32 (`MmaKind::Int8K32`) where its fragments divide the layouts, else
//! m16n8k16 for one signedness; a mixed pair has only m16n8k32.
//!
//! The paired u1 set (`MmaKind::B1Paired`, tried when the first does not divide) is the same
//! instruction on rows and k permuted within the tile, so that loads and stores are 8 bytes;
//! the run sets of f16/bf16 (`MmaKind::F16Runs`, tried next) the same instruction on k permuted
//! so that each thread holds 4 or 8 consecutive k, one codebook row or one 8/16-byte load
//! (`layout::fragments`).
//!
//! u1 operands use `mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc`: `c += Σ_k a AND b`,
//! the same value the thread-local plan and the interpreter compute (u1 products are ANDs). The
//! s32 sum wraps on the GPU; the interpreter reports an overflow of i32 as an error, so a program
//! it accepts gets the same exact values on both (with a zero accumulator that takes k ≥ 2^31).
//!
//! The code generator issues, for each warp-local `c` fragment `jq` and each `kq`, one mma on
//! the registers of fragments `qa`-local `la(jq, kq)`, `qb`-local `lb(jq, kq)`; fragment
//! registers are the layout's locals `[8 l, 8 l + 8)` (A), `[4 l, 4 l + 4)` (B, C) for f16, and
//! `[8 l, 8 l + 8)`, `[4 l, 4 l + 4)`, `[4 l, 4 l + 4)` for i8, and `[128 l, 128 l + 128)`,
//! `[64 l, 64 l + 64)`, `[4 l, 4 l + 4)` for u1 (32 u1 locals per 32-bit word).
//!
//! **Broadcast operands** of elementwise instructions satisfy the same thread-local condition
//! ([`broadcast_thread_local`]): for each local `j` of the left operand, every thread holds the
//! right operand's broadcast source element at a local that depends only on `j`.

use std::collections::HashSet;

use super::table::{LayoutTable, ThreadMap, NONE};
use crate::dtype::Kind;
use crate::ir::RegisterType;
use crate::layout::Layout;
use crate::target::Target;
use crate::DType;

pub use crate::target::MmaKind;

/// How a verified `dot` is implemented.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // made once per dot at verification time
pub enum DotPlan {
    /// Scalar FMAs, each thread from its own registers.
    ThreadLocal,
    /// `mma.m16n8k16`; `a`, `b`, `c` are the warp-level quotients of the operands' layouts by the
    /// fragments of [`mma_fragments`].
    Mma {
        kind: MmaKind,
        a: Layout,
        b: Layout,
        c: Layout,
    },
}

/// The `[A, B, C]` fragment layouts of `mma.m16n8k16` for `kind` (see the module table).
///
pub fn mma_fragments(kind: MmaKind) -> [Layout; 3] {
    let f = |name: &str| {
        crate::layout::fragments::fragment(name).expect("the mma fragments are named layouts")
    };
    match kind {
        MmaKind::F16 | MmaKind::Bf16 => [f("mma_a"), f("mma_b"), f("mma_c")],
        MmaKind::I8 | MmaKind::U8 => [f("mma_a_i8"), f("mma_b_i8"), f("mma_c")],
        MmaKind::B1 => [f("mma_b1_a"), f("mma_b1_b"), f("mma_b1_c")],
        MmaKind::B1Paired => [f("mma_b1_ap"), f("mma_b1_bp"), f("mma_b1_cp")],
        MmaKind::F16Runs(r) | MmaKind::Bf16Runs(r) => [
            f(&format!("mma_a_k{r}")),
            f(&format!("mma_b_k{r}")),
            f("mma_c"),
        ],
        MmaKind::E4M3 | MmaKind::E5M2 | MmaKind::Int8K32 { .. } => {
            [f("mma_a_f8"), f("mma_b_f8"), f("mma_c")]
        }
    }
}

/// Whether `dtype` is an 8-bit integer, and if so whether it is signed.
fn int8_signed(dtype: DType) -> Option<bool> {
    match dtype {
        DType::Int(8) => Some(true),
        DType::UInt(8) => Some(false),
        _ => None,
    }
}

/// Whether `a` and `b` may be the operands of one `dot`: the same dtype, or 8-bit integers of
/// either signedness each.
pub fn operand_dtypes_agree(a: DType, b: DType) -> bool {
    a == b || (int8_signed(a).is_some() && int8_signed(b).is_some())
}

/// The required accumulator dtype for operands of `dtype`.
pub(crate) fn accumulator_for(dtype: DType) -> DType {
    match dtype.kind() {
        Kind::Float => DType::F32,
        Kind::Int | Kind::UInt => DType::Int(32),
    }
}

/// `[batch, m, k, n]` of a `dot` over operands of these shapes, or `None` when they do not
/// agree: `[m, k] x [k, n] + [m, n]` (batch 1) or the batched `[b, m, k] x [b, k, n] + [b, m, n]`,
/// `b` independent products (one per warp when the batch dimension is spread over warps).
pub fn dot_shapes(a: &[usize], b: &[usize], c: &[usize]) -> Option<[usize; 4]> {
    match (a, b, c) {
        ([m, k], [k2, n], [m2, n2]) if k == k2 && m == m2 && n == n2 => Some([1, *m, *k, *n]),
        ([ba, m, k], [bb, k2, n], [bc, m2, n2])
            if ba == bb && ba == bc && k == k2 && m == m2 && n == n2 =>
        {
            Some([*ba, *m, *k, *n])
        }
        _ => None,
    }
}

/// Pick the implementation of `c + a · b` for `block_threads` threads, or say why none fits.
/// Shapes and dtypes must already agree ([`dot_shapes`], see the module docs).
pub fn plan_dot(
    a: &RegisterType,
    b: &RegisterType,
    c: &RegisterType,
    block_threads: usize,
    target: &Target,
) -> Result<DotPlan, String> {
    let mma = mma_plan(a, b, c, block_threads, target);
    if mma.is_ok() {
        return mma;
    }
    let local = dot_thread_local(&a.layout, &b.layout, &c.layout, block_threads, "thread");
    match (mma, local) {
        (_, Ok(())) => Ok(DotPlan::ThreadLocal),
        (Err(m), Err(l)) => {
            let (mm, mn, mk) = operand_kinds(a.dtype, b.dtype, c.dtype)
                .0
                .map_or((16, 8, 16), MmaKind::shape);
            Err(format!("thread-local: {l}; mma.m{mm}n{mn}k{mk}: {m}"))
        }
        (Ok(_), _) => unreachable!("returned above"),
    }
}

/// The mma kind of operands `a`, `b` and accumulator `c` (the same dtype's standard kind, or
/// m16n8k32 for a mixed 8-bit pair), and the m16n8k32 kind of 8-bit integer operands.
fn operand_kinds(a: DType, b: DType, c: DType) -> (Option<MmaKind>, Option<MmaKind>) {
    let k32 = match (int8_signed(a), int8_signed(b)) {
        (Some(a_signed), Some(b_signed)) if c == DType::Int(32) => {
            Some(MmaKind::Int8K32 { a_signed, b_signed })
        }
        _ => None,
    };
    let same = if a == b { MmaKind::of(a, c) } else { None };
    (same.or(k32), k32)
}

fn mma_plan(
    a: &RegisterType,
    b: &RegisterType,
    c: &RegisterType,
    block_threads: usize,
    target: &Target,
) -> Result<DotPlan, String> {
    let (kind, k32) = operand_kinds(a.dtype, b.dtype, c.dtype);
    let Some(kind) = kind else {
        return Err(format!(
            "needs f16/bf16/fp8 operands with an f32 accumulator or i8/u8/u1 with i32, not {} x {} with {}",
            a.dtype, b.dtype, c.dtype
        ));
    };
    // 8-bit integers take m16n8k32 where its fragments divide the layouts (half the
    // instructions of m16n8k16, which would also serve them as two k16 tiles).
    if let (Some(k32), MmaKind::I8 | MmaKind::U8) = (k32, kind) {
        if let Ok(p) = mma_plan_of(k32, a, b, c, block_threads, target) {
            return Ok(p);
        }
    }
    let plan = mma_plan_of(kind, a, b, c, block_threads, target);
    if plan.is_err() {
        // The same instruction on k-permuted fragments (see `layout::fragments`): the paired
        // u1 set, the runs of 4 and 8 of f16/bf16. The error stays the standard set's.
        let others: &[MmaKind] = match kind {
            MmaKind::B1 => &[MmaKind::B1Paired],
            MmaKind::F16 => &[MmaKind::F16Runs(4), MmaKind::F16Runs(8)],
            MmaKind::Bf16 => &[MmaKind::Bf16Runs(4), MmaKind::Bf16Runs(8)],
            _ => &[],
        };
        for &other in others {
            if let Ok(p) = mma_plan_of(other, a, b, c, block_threads, target) {
                return Ok(p);
            }
        }
    }
    plan
}

fn mma_plan_of(
    kind: MmaKind,
    a: &RegisterType,
    b: &RegisterType,
    c: &RegisterType,
    block_threads: usize,
    target: &Target,
) -> Result<DotPlan, String> {
    let (mm, mn, mk) = kind.shape();
    let shape = format!("m{mm}n{mn}k{mk}");
    if !target.has_mma(mm, mn, mk, kind) {
        return Err(format!(
            "the target {} has no {shape} mma for {kind:?}",
            target.arch.name()
        ));
    }
    let [fa, fb, fc] = mma_fragments(kind);
    let names = match kind {
        MmaKind::F16 | MmaKind::Bf16 => ["mma_a", "mma_b", "mma_c"],
        MmaKind::I8 | MmaKind::U8 => ["mma_a_i8", "mma_b_i8", "mma_c"],
        MmaKind::B1 => ["mma_b1_a", "mma_b1_b", "mma_b1_c"],
        MmaKind::B1Paired => ["mma_b1_ap", "mma_b1_bp", "mma_b1_cp"],
        MmaKind::F16Runs(4) | MmaKind::Bf16Runs(4) => ["mma_a_k4", "mma_b_k4", "mma_c"],
        MmaKind::F16Runs(_) | MmaKind::Bf16Runs(_) => ["mma_a_k8", "mma_b_k8", "mma_c"],
        MmaKind::E4M3 | MmaKind::E5M2 | MmaKind::Int8K32 { .. } => {
            ["mma_a_f8", "mma_b_f8", "mma_c"]
        }
    };
    let quotient = |x: &RegisterType, f: &Layout, which: &str, name: &str| {
        // A batched dot divides by the fragment with a leading extent of 1.
        let f = f
            .broadcast_to_rank(x.layout.rank())
            .map_err(|e| e.to_string())?;
        x.layout.divide(&f).map_err(|e| {
            format!(
                "the layout of {which} is not warp tiles of the mma {which} fragment ({e})\nhelp: write it as `<warp tiles>.{name}`, e.g. `spatial(..).local(..).{name}`, where `{name}` is the {shape} {which} fragment `{}`",
                f.to_expr()
            )
        })
    };
    let qa = quotient(a, &fa, "a", names[0])?;
    let qb = quotient(b, &fb, "b", names[1])?;
    let qc = quotient(c, &fc, "c", names[2])?;
    dot_thread_local(&qa, &qb, &qc, block_threads / 32, "warp")
        .map_err(|e| format!("the warp-level tiles do not line up: {e}"))?;
    Ok(DotPlan::Mma {
        kind,
        a: qa,
        b: qb,
        c: qc,
    })
}

/// The thread-local condition of a dot over `threads` threads (`unit` names them in messages:
/// "thread", or "warp" for mma quotients). Layouts must have shapes `[m, k]`, `[k, n]`, `[m, n]`,
/// or batched `[b, m, k]`, `[b, k, n]`, `[b, m, n]` (element `(i, ..)` of `c` from elements
/// `(i, ..)` of `a` and `b`).
pub fn dot_thread_local(
    a: &Layout,
    b: &Layout,
    c: &Layout,
    threads: usize,
    unit: &str,
) -> Result<(), String> {
    let (ta, tb, tc) = (
        LayoutTable::new(a)?,
        LayoutTable::new(b)?,
        LayoutTable::new(c)?,
    );
    let Some([_, m, k, n]) = dot_shapes(&ta.shape, &tb.shape, &tc.shape) else {
        return Err(format!(
            "shapes {:?} x {:?} + {:?} are not [m, k] x [k, n] + [m, n] (or batched [b, m, k] x [b, k, n] + [b, m, n])",
            ta.shape, tb.shape, tc.shape
        ));
    };
    let (mut amap, mut bmap) = (ThreadMap::default(), ThreadMap::default());
    // Locals chosen by the first thread, per (c local, kk): every thread must agree.
    let mut ref_a = vec![NONE; tc.locals * k];
    let mut ref_b = vec![NONE; tc.locals * k];
    let mut seen = HashSet::new();
    for t in 0..threads {
        let (la, lb, lc) = (t % ta.threads, t % tb.threads, t % tc.threads);
        if !seen.insert((la, lb, lc)) {
            continue;
        }
        ta.thread_map(la, &mut amap);
        tb.thread_map(lb, &mut bmap);
        for j in 0..tc.locals {
            let f = tc.at(lc, j);
            let (bi, mi, ni) = (f / (m * n), f / n % m, f % n);
            for kk in 0..k {
                let checks = [
                    (
                        "a",
                        amap[(bi * m + mi) * k + kk],
                        &mut ref_a[j * k + kk],
                        [bi, mi, kk],
                    ),
                    (
                        "b",
                        bmap[(bi * k + kk) * n + ni],
                        &mut ref_b[j * k + kk],
                        [bi, kk, ni],
                    ),
                ];
                for (name, local, reference, idx) in checks {
                    // The batch index is printed only for a batched dot.
                    let idx = &idx[3 - ta.shape.len()..];
                    if local == NONE {
                        return Err(format!(
                            "{unit} {t} computes c[{mi}, {ni}] but does not hold {name}{idx:?}"
                        ));
                    }
                    if *reference == NONE {
                        *reference = local;
                    } else if *reference != local {
                        return Err(format!(
                            "{unit} {t} holds {name}{idx:?} for c local {j} at local {local}, but {unit} 0 holds its operand at local {}; the position must not depend on the {unit}",
                            *reference
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The thread-local condition for broadcasting `rhs` to `lhs`'s shape over `threads` threads:
/// `rhs` aligns with the trailing dims of `lhs`, each extent equal or 1, and every thread holds
/// the source of each of its `lhs` locals at a local index that depends only on that local.
pub fn broadcast_thread_local(lhs: &Layout, rhs: &Layout, threads: usize) -> Result<(), String> {
    let (tl, tr) = (LayoutTable::new(lhs)?, LayoutTable::new(rhs)?);
    let (ls, rs) = (&tl.shape, &tr.shape);
    let lead = ls.len().checked_sub(rs.len());
    let broadcasts =
        lead.is_some_and(|lead| rs.iter().zip(&ls[lead..]).all(|(&r, &l)| r == l || r == 1));
    let Some(lead) = lead.filter(|_| broadcasts) else {
        return Err(format!("shape {rs:?} does not broadcast to {ls:?}"));
    };
    let mut map = ThreadMap::default();
    let mut reference = vec![NONE; tl.locals];
    let mut seen = HashSet::new();
    for t in 0..threads {
        let (ll, lr) = (t % tl.threads, t % tr.threads);
        if !seen.insert((ll, lr)) {
            continue;
        }
        tr.thread_map(lr, &mut map);
        for (j, reference) in reference.iter_mut().enumerate() {
            let li = super::table::unravel(tl.at(ll, j), ls);
            let ri: Vec<usize> = rs
                .iter()
                .zip(&li[lead..])
                .map(|(&r, &i)| if r == 1 { 0 } else { i })
                .collect();
            let flat = super::table::ravel(&ri, rs).expect("in range by construction");
            let local = map[flat];
            if local == NONE {
                return Err(format!(
                    "thread {t} holds lhs{li:?} but not the rhs element {ri:?} it needs"
                ));
            }
            if *reference == NONE {
                *reference = local;
            } else if *reference != local {
                return Err(format!(
                    "thread {t} holds rhs{ri:?} for lhs local {j} at local {local}, but thread 0 at local {}; the position must not depend on the thread",
                    *reference
                ));
            }
        }
    }
    Ok(())
}
