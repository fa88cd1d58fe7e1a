//! `dot` with operands in shared memory: the warpgroup MMA of sm_90a,
//! `wgmma.mma_async.sync.aligned.m64nNkK`, `b` read from shared memory through a matrix
//! descriptor, `a` either the same way (the SS form, [`plan_wgmma`]) or from registers (the RS
//! form, [`plan_wgmma_rs`]). The operand types and their `K` (one instruction reads 32 bytes of
//! each operand row, whatever the type):
//!
//! | operands | accumulator | `K` | forms |
//! | --- | --- | ---: | --- |
//! | `f16`, `bf16` | `f32` | 16 | SS, RS |
//! | `i8`, `u8`, each operand its own | `i32` | 32 | SS, RS |
//! | `f8e4m3`, `f8e5m2` | `f32` | 32 | SS |
//! | `u1` | `i32` | 256 | SS |
//!
//! On `u1` operands the product of two bits is their AND and the sum counts the set pairs
//! (`.s32.b1.b1.and.popc`), the same value as every `dot` of `u1`.
//!
//! A `dot(a, b, c)` takes this path when `a` and `b` are shared tensors, or `a` is a register
//! tensor and `b` a shared one (`c` stays a register tensor; the semantics are those of every
//! `dot`: `c + a · b`, `[m, k] x [k, n] + [m, n]`). It is accepted when:
//!
//! - **Target and block**: the target has wgmma for the operand type (the table above) and the
//!   block is whole warpgroups (a multiple of 128 threads).
//! - **Types**: both operands have one dtype, except that 8-bit integers take either
//!   signedness each (`.s32.u8.s8`: a weight code in `u8` against signed activations).
//! - **Operands**: both are *k-major with the 128-byte swizzle*, the canonical layout the
//!   hardware reads: each row of 128 bytes of `k` (64 16-bit, 128 8-bit or 1024 1-bit
//!   elements, [`OperandGeometry`]) is contiguous, rows follow each other, and 16-byte chunks
//!   are XOR-swizzled with the row index modulo 8 (`swizzle(3, 3, 3)` on 16-bit elements,
//!   `swizzle(3, 4, 3)` on 8-bit ones, `swizzle(3, 7, 3)` on bits). For `a: [m, k]` that is a slice of a tile allocated as
//!   `shared::<f16>([.., rows, 64], swizzle(3, 3, 3))` (strides `[64, 1]`); for `b: [k, n]` it
//!   is such an `[n, 64]` tile permuted with `permute_shared(t, [1, 0])` (strides `[1, 64]`).
//!   `k` is a multiple of `K` and at most one row, `m` a multiple of 64.
//! - **Accumulator**: `c`'s layout is warpgroup tiles of the wgmma accumulator fragment,
//!   `qc ∘ wgmma_c(nf)` (`spatial(4, 1).local(1, nf / 8).mma_c`, `layout::fragments`), for the
//!   widest `nf` the instruction has (a multiple of 8 up to 256; for 8-bit integers and bits 8,
//!   16, 24 or a multiple of 16) dividing `n` for which the division succeeds. Warpgroup `w` computes,
//!   for each local `j` of the quotient `qc` (warpgroup `w` plays quotient thread
//!   `w % qc.num_threads()`), the `[64, nf]` block of `c` at `qc.eval(w, j)` (in units of
//!   `[64, nf]`), with one wgmma per `K` of `k`.
//!
//! - **Register `a`** (the RS form, 16- and 8-bit operands, instead of the operand rule for
//!   `a`): `a`'s layout is warpgroup tiles of the wgmma A fragment, `wgmma_a()` =
//!   `spatial(4, 1).mma_a` (`[64, 16]`) on 16 bits or `wgmma_a8()` = `spatial(4, 1).mma_a_f8`
//!   (`[64, 32]`) on 8 bits (`layout::fragments`), that match `c`'s: with
//!   `qc = c.layout / wgmma_c(N)`, `a.layout / fragment == reduce(qc, [1]).local(1, k / K)`.
//!   That is, the warpgroup (and local) computing `c`'s 64-row block `i` holds `a`'s row block
//!   `i` with its `k / K` steps as the innermost locals, and warpgroups that split `n` hold
//!   replicas. In text:
//!   `<c's warpgroup tiles over m>.spatial(4, 1).local(1, k / 16).mma_a`, e.g.
//!   `spatial(2, 1).spatial(4, 1).local(1, 4).mma_a` for `c` in
//!   `spatial(2, 1).spatial(4, 1).local(1, N / 8).mma_c` and `k = 64`; the error's `help:` line
//!   prints the layout for the `c` at hand.
//!
//! What the code generator also needs, and checks when it emits the instruction (the offsets of
//! a slice are expressions it sees there): every operand starts on a 1024-byte swizzle atom in
//! its rows (a row offset that is a multiple of 8) and its `k` window lies inside the 128-byte
//! row at a multiple of `K`.
//!
//! The instruction is asynchronous on the GPU; this `dot` is not: the emitted code fences, issues
//! the wgmmas, commits them and waits for them, so `c` is complete after the `dot` like after
//! every instruction. Shared memory written before the `dot` must be made visible by a barrier
//! (`synchronize`), as for every shared read by other threads; the code generator puts the
//! async-proxy fence wgmma needs (`fence.proxy.async.shared::cta`) before every barrier of a
//! program that has such a `dot` where a generic-proxy shared write may be pending
//! (`codegen::proxy`).

use crate::ir::{RegisterType, SharedType};
use crate::layout::{
    fragments::{wgmma_a, wgmma_a8, wgmma_c},
    Layout, SharedLayout, Swizzle,
};
use crate::target::{MmaKind, Target};
use crate::DType;

/// The swizzle of the k-major 128-byte canonical layout, on 16-bit elements.
pub const SWIZZLE_128B: Swizzle = Swizzle {
    bits: 3,
    base: 3,
    shift: 3,
};

/// Elements of `k` in one swizzled row of 16-bit elements (128 bytes).
pub const ROW_ELEMENTS: usize = 64;

/// Where the elements of a wgmma operand of one width sit in the canonical layout: a 128-byte
/// row of `k`, read 32 bytes (one instruction's `K`) at a time, its 16-byte chunks swizzled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperandGeometry {
    /// Bits per element (16, 8 or 1).
    pub bits: usize,
    /// Elements of `k` in one swizzled row.
    pub row_elements: usize,
    /// Elements of `k` one instruction reads (its `K`).
    pub k_step: usize,
    /// The 128-byte swizzle on elements of this width.
    pub swizzle: Swizzle,
}

impl OperandGeometry {
    /// The geometry of `dtype`'s elements, if wgmma reads elements that wide (16, 8 or 1 bits).
    pub fn of(dtype: DType) -> Option<OperandGeometry> {
        let bits = dtype.bits() as usize;
        if !matches!(bits, 16 | 8 | 1) {
            return None;
        }
        Some(OperandGeometry {
            bits,
            row_elements: 1024 / bits,
            k_step: 256 / bits,
            swizzle: Swizzle {
                bits: 3,
                // 16-byte chunks: 8 16-bit, 16 8-bit or 128 1-bit elements.
                base: (128 / bits).trailing_zeros(),
                shift: 3,
            },
        })
    }

    /// Bytes of `elements` elements (a whole number wherever the code generator asks: rows
    /// and `K` steps are whole bytes).
    pub fn bytes_of(&self, elements: usize) -> usize {
        elements * self.bits / 8
    }

    /// The swizzle as the kernel language writes it: `swizzle(3, 3, 3)`.
    pub fn swizzle_text(&self) -> String {
        let s = self.swizzle;
        format!("swizzle({}, {}, {})", s.bits, s.base, s.shift)
    }
}

/// Whether `m64nNkK` exists for `kind`: every multiple of 8 up to 256, but for the 8-bit
/// integer kinds and bits only 8, 16, 24 and multiples of 16.
pub fn has_n(kind: MmaKind, n: usize) -> bool {
    let integer = matches!(kind, MmaKind::I8 | MmaKind::U8 | MmaKind::B1);
    (8..=256).contains(&n) && n.is_multiple_of(8) && (!integer || n <= 24 || n.is_multiple_of(16))
}

/// How a verified shared-operand `dot` runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgmmaPlan {
    /// The kind of `a` (and of the accumulator).
    pub kind: MmaKind,
    /// The kind of `b`: `kind`, or the other signedness of an 8-bit integer `a`.
    pub b_kind: MmaKind,
    /// Columns per wgmma (`N` of `m64nNkK`).
    pub n: usize,
    /// `c`'s layout divided by the accumulator fragment: its threads are warpgroups, its
    /// elements `[64, n]` blocks of `c`.
    pub c: Layout,
    /// Where the operands' elements sit (their width's row and `K`).
    pub geometry: OperandGeometry,
}

/// Check a `dot` of shared `a: [m, k]`, shared `b: [k, n]` and register `c: [m, n]`.
pub fn plan_wgmma(
    a: &SharedType,
    b: &SharedType,
    c: &RegisterType,
    block_threads: usize,
    target: &Target,
) -> Result<WgmmaPlan, String> {
    let (sa, sb) = (&a.layout.shape, &b.layout.shape);
    let (kind, g) = check_common(
        a.dtype,
        b.dtype,
        c,
        sa[0],
        sa[1],
        sb[1],
        block_threads,
        target,
    )?;
    k_major(&a.layout, [g.row_elements, 1], &g).map_err(|e| {
        format!(
            "the shared operand a {e}\nhelp: allocate it as `shared::<{}>([.., rows, {}], {})` and slice `[rows, k]` out of it",
            a.dtype,
            g.row_elements,
            g.swizzle_text()
        )
    })?;
    check_b(b, &g)?;
    plan_c(kind, b.dtype, c, sa[0], sb[1], g)
}

/// How a verified `dot` with `a` in registers runs (the RS form of wgmma).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgmmaRsPlan {
    /// The accumulator's plan, as for shared operands.
    pub base: WgmmaPlan,
    /// `a[j][s]`: the local of `a`'s quotient by [`wgmma_a`] or [`wgmma_a8`] (its A fragment, words
    /// `[4 l, 4 l + 4)` of `a`'s registers) that the wgmma of `c`'s quotient local `j` reads at
    /// k step `s`, the same for every warpgroup.
    pub a: Vec<Vec<usize>>,
}

/// Check a `dot` of register `a: [m, k]`, shared `b: [k, n]` and register `c: [m, n]`: `b` and
/// `c` as for [`plan_wgmma`], and `a` warpgroup tiles of the register A fragment that match
/// `c`'s: `a.layout / fragment` must be `reduce(qc, [1]).local(1, k / K)`, where `qc` is `c`'s
/// quotient by the accumulator fragment and the fragment is [`wgmma_a`] (16 bits, `K = 16`) or
/// [`wgmma_a8`] (8-bit integers, `K = 32`). So the warpgroup (and local) that computes the
/// `[64, N]` blocks of row block `i` holds row block `i` of `a`, all `k / K` steps as its
/// innermost locals; warpgroups that split `n` hold replicas of `a`.
pub fn plan_wgmma_rs(
    a: &RegisterType,
    b: &SharedType,
    c: &RegisterType,
    block_threads: usize,
    target: &Target,
) -> Result<WgmmaRsPlan, String> {
    let (sa, sb) = (a.layout.shape(), &b.layout.shape);
    let (m, k, n) = (sa[0], sa[1], sb[1]);
    let (kind, g) = check_common(a.dtype, b.dtype, c, m, k, n, block_threads, target)?;
    let (fragment, fragment_name) = match kind {
        MmaKind::F16 | MmaKind::Bf16 => (wgmma_a(), "mma_a"),
        MmaKind::I8 | MmaKind::U8 => (wgmma_a8(), "mma_a_f8"),
        _ => {
            return Err(format!(
                "a register operand a of {} is not supported: the RS form takes f16, bf16, i8 or u8\nhelp: put a in shared memory",
                a.dtype
            ))
        }
    };
    check_b(b, &g)?;
    let base = plan_c(kind, b.dtype, c, m, n, g)?;
    let steps = k / g.k_step;
    let want = base
        .c
        .reduce(&[1])
        .and_then(|r| Ok((r.clone(), r.compose(&Layout::local(&[1, steps]))?)))
        .map_err(|e| format!("the accumulator's warpgroup tiling has no A tiling: {e}"))?;
    let (rows, want) = want;
    let help = || {
        let mut text = String::new();
        if rows.num_threads() > 1 || rows.num_locals() > 1 {
            // In the spacing of the docs: `spatial(2, 1)`.
            text.push_str(&rows.to_expr().replace(',', ", "));
            text.push('.');
        }
        text.push_str("spatial(4, 1)");
        if steps > 1 {
            text.push_str(&format!(".local(1, {steps})"));
        }
        text.push('.');
        text.push_str(fragment_name);
        format!(
            "the register operand a is not warpgroup tiles of the wgmma A fragment matching c's warpgroup tiling (each warpgroup holds the 64-row blocks of a it multiplies, all {steps} steps of {} of k)\nhelp: write it as `{text}`",
            g.k_step
        )
    };
    let qa = match a.layout.divide(&fragment) {
        Ok(q) if q == want => q,
        _ => return Err(help()),
    };
    // For each block of c and step of k, the A fragment holding it: one local for all
    // warpgroups (warpgroup `w` plays quotient thread `w % threads`).
    let groups = block_threads / 128;
    let mut table = Vec::with_capacity(base.c.num_locals());
    for j in 0..base.c.num_locals() {
        let mut row = Vec::with_capacity(steps);
        for s in 0..steps {
            let holds = |l: usize| {
                (0..groups.max(1)).all(|w| {
                    let i = base.c.eval(w % base.c.num_threads(), j)[0];
                    qa.eval(w % qa.num_threads(), l) == [i, s]
                })
            };
            match (0..qa.num_locals()).find(|&l| holds(l)) {
                Some(l) => row.push(l),
                None => return Err(help()),
            }
        }
        table.push(row);
    }
    Ok(WgmmaRsPlan { base, a: table })
}

/// The checks shared by both forms: dtypes, target, block, shapes. Returns the MMA kind and
/// where its operands' elements sit.
#[allow(clippy::too_many_arguments)]
fn check_common(
    a_dtype: DType,
    b_dtype: DType,
    c: &RegisterType,
    m: usize,
    k: usize,
    n: usize,
    block_threads: usize,
    target: &Target,
) -> Result<(MmaKind, OperandGeometry), String> {
    let kind = match MmaKind::of(a_dtype, c.dtype) {
        Some(
            k @ (MmaKind::F16
            | MmaKind::Bf16
            | MmaKind::I8
            | MmaKind::U8
            | MmaKind::E4M3
            | MmaKind::E5M2
            | MmaKind::B1),
        ) => k,
        _ => {
            return Err(format!(
                "wgmma operands are f16 or bf16 with an f32 accumulator, i8 or u8 with an i32 one, f8e4m3 or f8e5m2 with an f32 one, or u1 with an i32 one, not {a_dtype} with {}",
                c.dtype
            ))
        }
    };
    let int8 = |d: DType| matches!(d, DType::Int(8) | DType::UInt(8));
    if b_dtype != a_dtype && !(int8(a_dtype) && int8(b_dtype)) {
        return Err(format!(
            "the operands hold {a_dtype} and {b_dtype}: wgmma multiplies one operand dtype, or 8-bit integers of either signedness each"
        ));
    }
    let g = OperandGeometry::of(a_dtype).expect("every wgmma kind has 16-, 8- or 1-bit operands");
    if !target
        .wgmma
        .iter()
        .any(|s| s.k as usize == g.k_step && s.kinds.contains(&kind))
    {
        return Err(format!(
            "the target {} has no wgmma for {kind:?}: the warpgroup MMA needs sm_90a",
            target.arch.name()
        ));
    }
    if !block_threads.is_multiple_of(128) {
        return Err(format!(
            "wgmma runs on whole warpgroups, but the block has {block_threads} threads (not a multiple of 128)"
        ));
    }
    let row = g.row_elements;
    let step = g.k_step;
    if !m.is_multiple_of(64) || !k.is_multiple_of(step) || k > row || !n.is_multiple_of(8) {
        return Err(format!(
            "wgmma tiles of {a_dtype} are 64 rows by multiples of {step} of k (at most {row}, one swizzled row) by multiples of 8 of n; got m = {m}, k = {k}, n = {n}"
        ));
    }
    Ok((kind, g))
}

/// `b: [k, n]` is a k-major 128-byte-swizzled tile seen through `permute_shared`.
fn check_b(b: &SharedType, g: &OperandGeometry) -> Result<(), String> {
    k_major(&b.layout, [1, g.row_elements], g).map_err(|e| {
        format!(
            "the shared operand b {e}\nhelp: allocate `[n, {}]` with `{}` (k contiguous) and pass `permute_shared(t, [1, 0])`",
            g.row_elements,
            g.swizzle_text()
        )
    })
}

/// `c`'s layout divided by the accumulator fragment of the widest `N` that divides it.
fn plan_c(
    kind: MmaKind,
    b_dtype: DType,
    c: &RegisterType,
    m: usize,
    n: usize,
    geometry: OperandGeometry,
) -> Result<WgmmaPlan, String> {
    let mut widths: Vec<usize> = (1..=n.min(256) / 8).map(|x| 8 * x).collect();
    widths.retain(|&w| n.is_multiple_of(w) && has_n(kind, w));
    for nf in widths.into_iter().rev() {
        if let Ok(q) = c.layout.divide(&wgmma_c(nf)) {
            let b_kind = MmaKind::of(b_dtype, c.dtype).unwrap_or(kind);
            return Ok(WgmmaPlan {
                kind,
                b_kind,
                n: nf,
                c: q,
                geometry,
            });
        }
    }
    Err(format!(
        "the layout of c is not warpgroup tiles of the wgmma accumulator\nhelp: write it as `<warpgroup tiles>.spatial(4, 1).local(1, N / 8).mma_c` with N a multiple of 8 up to 256 dividing {n}, e.g. `spatial({}, 1).spatial(4, 1).local(1, {}).mma_c` for {} warpgroups",
        (m / 64).max(1),
        n.min(256) / 8,
        (m / 64).max(1),
    ))
}

/// `Ok` when `layout` is k-major with the 128-byte swizzle of `g`'s elements: `strides` are the
/// expected `[row dim, k dim]` strides (the k dim has stride 1, the row dim one row).
fn k_major(layout: &SharedLayout, strides: [usize; 2], g: &OperandGeometry) -> Result<(), String> {
    if layout.swizzle != Some(g.swizzle) || layout.strides[..] != strides[..] {
        let swizzle = layout.swizzle.map_or("none".to_string(), |s| {
            format!("swizzle({}, {}, {})", s.bits, s.base, s.shift)
        });
        return Err(format!(
            "is not k-major with the 128-byte swizzle: it has strides {:?} and {swizzle}, wgmma reads strides {strides:?} with {}",
            layout.strides,
            g.swizzle_text()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::parse;
    use crate::DType;

    fn shared(shape: [usize; 2], strides: [usize; 2], swizzle: Option<Swizzle>) -> SharedType {
        SharedType {
            dtype: DType::F16,
            layout: SharedLayout {
                shape: shape.to_vec(),
                strides: strides.to_vec(),
                swizzle,
            },
        }
    }

    fn acc(text: &str) -> RegisterType {
        RegisterType {
            dtype: DType::F32,
            layout: parse(text).unwrap(),
        }
    }

    #[test]
    fn accepts_the_canonical_operands_and_picks_the_widest_n() {
        let a = shared([128, 64], [64, 1], Some(SWIZZLE_128B));
        let b = shared([64, 256], [1, 64], Some(SWIZZLE_128B));
        let c = acc("spatial(2, 1).spatial(4, 1).local(1, 32).mma_c");
        let plan = plan_wgmma(&a, &b, &c, 256, &Target::SM90).unwrap();
        assert_eq!((plan.kind, plan.n), (MmaKind::F16, 256));
        assert_eq!(plan.c.shape(), &[2, 1][..]);
        // Local column blocks outside the warps are the same layout (local and spatial modes
        // of different dimensions commute): still one 256-wide block.
        let c = acc("spatial(2, 1).local(1, 2).spatial(4, 1).local(1, 16).mma_c");
        let plan = plan_wgmma(&a, &b, &c, 256, &Target::SM90).unwrap();
        assert_eq!((plan.n, plan.c.shape()), (256, &[2, 1][..]));
        // Four warpgroups, each a 64 x 128 block: 128-wide wgmmas.
        let c = acc("spatial(2, 2).spatial(4, 1).local(1, 16).mma_c");
        let plan = plan_wgmma(&a, &b, &c, 512, &Target::SM90).unwrap();
        assert_eq!((plan.n, plan.c.shape()), (128, &[2, 2][..]));
    }

    #[test]
    fn rejections_say_what_is_wrong() {
        let a = shared([64, 64], [64, 1], Some(SWIZZLE_128B));
        let b = shared([64, 128], [1, 64], Some(SWIZZLE_128B));
        let c = acc("spatial(4, 1).local(1, 16).mma_c");
        assert!(plan_wgmma(&a, &b, &c, 128, &Target::SM90).is_ok());
        let err = |a: &SharedType, b: &SharedType, c: &RegisterType, threads, t: &Target| {
            plan_wgmma(a, b, c, threads, t).unwrap_err()
        };
        assert!(err(&a, &b, &c, 128, &Target::SM80).contains("sm_90a"));
        assert!(err(&a, &b, &c, 96, &Target::SM90).contains("multiple of 128"));
        let unswizzled = shared([64, 64], [64, 1], None);
        let e = err(&unswizzled, &b, &c, 128, &Target::SM90);
        assert!(
            e.contains("operand a") && e.contains("swizzle(3, 3, 3)"),
            "{e}"
        );
        // b as an n-major tile (not permuted): the strides are wrong.
        let n_major = shared([64, 128], [128, 1], Some(SWIZZLE_128B));
        let e = err(&a, &n_major, &c, 128, &Target::SM90);
        assert!(
            e.contains("operand b") && e.contains("permute_shared"),
            "{e}"
        );
        let short = shared([32, 64], [64, 1], Some(SWIZZLE_128B));
        let c32 = acc("spatial(2, 1).local(1, 16).mma_c");
        assert!(err(&short, &b, &c32, 128, &Target::SM90).contains("64 rows"));
        // Warps side by side along n: not the accumulator fragment.
        let wrong = acc("spatial(1, 4).local(4, 4).mma_c");
        let e = err(&a, &b, &wrong, 128, &Target::SM90);
        assert!(e.contains("wgmma accumulator"), "{e}");
        let ints = RegisterType {
            dtype: DType::Int(32),
            layout: c.layout.clone(),
        };
        assert!(err(&a, &b, &ints, 128, &Target::SM90).contains("f16 or bf16"));
    }

    fn shared_of(
        dtype: DType,
        shape: [usize; 2],
        strides: [usize; 2],
        swizzle: Option<Swizzle>,
    ) -> SharedType {
        SharedType {
            dtype,
            ..shared(shape, strides, swizzle)
        }
    }

    #[test]
    fn eight_bit_operands_read_128_element_rows_in_steps_of_32() {
        let sw8 = OperandGeometry::of(DType::Int(8)).unwrap().swizzle;
        assert_eq!((sw8.bits, sw8.base, sw8.shift), (3, 4, 3));
        let g16 = OperandGeometry::of(DType::BF16).unwrap();
        assert_eq!(
            (g16.row_elements, g16.k_step, g16.swizzle),
            (64, 16, SWIZZLE_128B)
        );
        assert!(OperandGeometry::of(DType::F32).is_none());
        let ints = |text: &str| RegisterType {
            dtype: DType::Int(32),
            layout: parse(text).unwrap(),
        };
        for (dtype, acc_dtype, kind) in [
            (DType::Int(8), DType::Int(32), MmaKind::I8),
            (DType::UInt(8), DType::Int(32), MmaKind::U8),
            (DType::F8E4M3, DType::F32, MmaKind::E4M3),
            (DType::F8E5M2, DType::F32, MmaKind::E5M2),
        ] {
            let a = shared_of(dtype, [128, 128], [128, 1], Some(sw8));
            let b = shared_of(dtype, [128, 256], [1, 128], Some(sw8));
            let c = RegisterType {
                dtype: acc_dtype,
                layout: parse("spatial(2, 1).spatial(4, 1).local(1, 32).mma_c").unwrap(),
            };
            let plan = plan_wgmma(&a, &b, &c, 256, &Target::SM90)
                .unwrap_or_else(|e| panic!("{dtype}: {e}"));
            assert_eq!((plan.kind, plan.n, plan.geometry.k_step), (kind, 256, 32));
            // The 16-bit swizzle on 8-bit elements: the help names the right one.
            let a16 = shared_of(dtype, [128, 128], [128, 1], Some(SWIZZLE_128B));
            let e = plan_wgmma(&a16, &b, &c, 256, &Target::SM90).unwrap_err();
            assert!(
                e.contains("operand a") && e.contains("swizzle(3, 4, 3)") && e.contains("128]"),
                "{e}"
            );
            // k = 48 is not whole instructions of 32.
            let a48 = shared_of(dtype, [128, 48], [128, 1], Some(sw8));
            let b48 = shared_of(dtype, [48, 256], [1, 128], Some(sw8));
            let e = plan_wgmma(&a48, &b48, &c, 256, &Target::SM90).unwrap_err();
            assert!(e.contains("multiples of 32 of k"), "{e}");
            // A register operand a of 8-bit integers is the 8-bit fragment; fp8 has none here.
            let ra = |text: &str| RegisterType {
                dtype,
                layout: parse(text).unwrap(),
            };
            let rs = plan_wgmma_rs(
                &ra("spatial(2, 1).spatial(4, 1).local(1, 4).mma_a_f8"),
                &b,
                &c,
                256,
                &Target::SM90,
            );
            if matches!(dtype, DType::Int(8) | DType::UInt(8)) {
                let p = rs.unwrap();
                assert_eq!(p.a, vec![vec![0, 1, 2, 3]; p.base.c.num_locals()]);
                let e = plan_wgmma_rs(
                    &ra("spatial(2, 1).spatial(4, 1).local(1, 8).mma_a"),
                    &b,
                    &c,
                    256,
                    &Target::SM90,
                )
                .unwrap_err();
                assert!(
                    e.contains(
                        "help: write it as `spatial(2, 1).spatial(4, 1).local(1, 4).mma_a_f8`"
                    ),
                    "{e}"
                );
            } else {
                assert!(rs.unwrap_err().contains("put a in shared memory"));
            }
            assert!(plan_wgmma(&a, &b, &c, 256, &Target::SM80)
                .unwrap_err()
                .contains("sm_90a"));
        }
        // Integer wgmmas are 8, 16, 24 or a multiple of 16 wide: 40 columns are five of 8,
        // fp8's one of 40.
        let a = shared_of(DType::Int(8), [64, 128], [128, 1], Some(sw8));
        let b = shared_of(DType::Int(8), [128, 40], [1, 128], Some(sw8));
        let c = ints("spatial(4, 1).local(1, 5).mma_c");
        let plan = plan_wgmma(&a, &b, &c, 128, &Target::SM90).unwrap();
        assert_eq!((plan.n, plan.c.num_locals()), (8, 5));
        let a = shared_of(DType::F8E4M3, [64, 128], [128, 1], Some(sw8));
        let b = shared_of(DType::F8E4M3, [128, 40], [1, 128], Some(sw8));
        let c = acc("spatial(4, 1).local(1, 5).mma_c");
        assert_eq!(plan_wgmma(&a, &b, &c, 128, &Target::SM90).unwrap().n, 40);
        assert!(has_n(MmaKind::I8, 24) && has_n(MmaKind::U8, 256) && !has_n(MmaKind::I8, 264));
        // i8 into an f32 accumulator has no wgmma.
        let c = acc("spatial(4, 1).local(1, 5).mma_c");
        let a = shared_of(DType::Int(8), [64, 128], [128, 1], Some(sw8));
        let b = shared_of(DType::Int(8), [128, 40], [1, 128], Some(sw8));
        let e = plan_wgmma(&a, &b, &c, 128, &Target::SM90).unwrap_err();
        assert!(e.contains("i8 or u8 with an i32"), "{e}");
    }

    #[test]
    fn bit_operands_read_1024_bit_rows_in_steps_of_256() {
        let g = OperandGeometry::of(DType::UInt(1)).unwrap();
        assert_eq!((g.row_elements, g.k_step, g.bits), (1024, 256, 1));
        assert_eq!((g.swizzle.bits, g.swizzle.base, g.swizzle.shift), (3, 7, 3));
        assert_eq!(
            (g.bytes_of(g.k_step), g.bytes_of(g.row_elements)),
            (32, 128)
        );
        // Stacked planes: a [2 x 64, 1024] by [1024, 2 x 64] product, one 128-wide wgmma per
        // 64-row block and step.
        let a = shared_of(DType::UInt(1), [128, 1024], [1024, 1], Some(g.swizzle));
        let b = shared_of(DType::UInt(1), [1024, 128], [1, 1024], Some(g.swizzle));
        let c = reg(
            DType::Int(32),
            "local(2, 1).spatial(4, 1).local(1, 16).mma_c",
        );
        let plan = plan_wgmma(&a, &b, &c, 128, &Target::SM90).unwrap();
        assert_eq!(
            (plan.kind, plan.n, plan.c.num_locals()),
            (MmaKind::B1, 128, 2)
        );
        // The 8-bit swizzle on bits: the help names the bits' one and their row.
        let a8 = shared_of(
            DType::UInt(1),
            [128, 1024],
            [1024, 1],
            Some(Swizzle {
                bits: 3,
                base: 4,
                shift: 3,
            }),
        );
        let e = plan_wgmma(&a8, &b, &c, 128, &Target::SM90).unwrap_err();
        assert!(e.contains("swizzle(3, 7, 3)") && e.contains("1024]"), "{e}");
        // k = 128 is half an instruction.
        let a128 = shared_of(DType::UInt(1), [128, 128], [1024, 1], Some(g.swizzle));
        let b128 = shared_of(DType::UInt(1), [128, 128], [1, 1024], Some(g.swizzle));
        let e = plan_wgmma(&a128, &b128, &c, 128, &Target::SM90).unwrap_err();
        assert!(e.contains("multiples of 256 of k"), "{e}");
        // Bits accumulate in i32 only, and have no register form.
        let f = reg(DType::F32, "local(2, 1).spatial(4, 1).local(1, 16).mma_c");
        let e = plan_wgmma(&a, &b, &f, 128, &Target::SM90).unwrap_err();
        assert!(e.contains("u1 with an i32"), "{e}");
        let ra = reg(DType::UInt(1), "spatial(4, 1).local(1, 8).mma_a");
        assert!(plan_wgmma_rs(&ra, &b, &c, 128, &Target::SM90).is_err());
        // The instruction's widths are the integer ones: 40 columns are five of 8.
        assert!(has_n(MmaKind::B1, 256) && has_n(MmaKind::B1, 24) && !has_n(MmaKind::B1, 40));
        assert!(plan_wgmma(&a, &b, &c, 128, &Target::SM80)
            .unwrap_err()
            .contains("sm_90a"));
    }

    fn reg(dtype: DType, text: &str) -> RegisterType {
        RegisterType {
            dtype,
            layout: parse(text).unwrap(),
        }
    }

    #[test]
    fn register_a_accepts_tiles_matching_the_accumulator() {
        let b = shared([64, 128], [1, 64], Some(SWIZZLE_128B));
        let b256 = shared([64, 256], [1, 64], Some(SWIZZLE_128B));
        let rs = |a: &str, b: &SharedType, c: &str, threads| {
            plan_wgmma_rs(&reg(DType::F16, a), b, &acc(c), threads, &Target::SM90)
                .unwrap_or_else(|e| panic!("{a} with {c}: {e}"))
        };
        // One warpgroup, k = 64: four k steps, fragments 0..4.
        let p = rs(
            "spatial(4, 1).local(1, 4).mma_a",
            &b,
            "spatial(4, 1).local(1, 16).mma_c",
            128,
        );
        assert_eq!((p.base.n, p.base.kind), (128, MmaKind::F16));
        assert_eq!(p.a, vec![vec![0, 1, 2, 3]]);
        // The k steps outside the warps: the same layout.
        let q = rs(
            "local(1, 4).spatial(4, 1).mma_a",
            &b,
            "spatial(4, 1).local(1, 16).mma_c",
            128,
        );
        assert_eq!(q, p);
        // Two warpgroups stacked along m.
        let p = rs(
            "spatial(2, 1).spatial(4, 1).local(1, 4).mma_a",
            &b256,
            "spatial(2, 1).spatial(4, 1).local(1, 32).mma_c",
            256,
        );
        assert_eq!((p.base.n, p.a.clone()), (256, vec![vec![0, 1, 2, 3]]));
        // One warpgroup owning two row blocks: row block j in fragments 4 j ..
        let p = rs(
            "local(2, 1).spatial(4, 1).local(1, 4).mma_a",
            &b,
            "local(2, 1).spatial(4, 1).local(1, 16).mma_c",
            128,
        );
        assert_eq!(p.a, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        // Four warpgroups, 2 x 2: the two of a row block hold replicas of it.
        let p = rs(
            "spatial(2, 1).replicated(2).spatial(4, 1).local(1, 4).mma_a",
            &b256,
            "spatial(2, 2).spatial(4, 1).local(1, 16).mma_c",
            512,
        );
        assert_eq!((p.base.n, p.a.clone()), (128, vec![vec![0, 1, 2, 3]]));
        // k = 16, bf16.
        let b16 = shared([16, 64], [1, 64], Some(SWIZZLE_128B));
        let p = plan_wgmma_rs(
            &reg(DType::BF16, "spatial(4, 1).mma_a"),
            &SharedType {
                dtype: DType::BF16,
                ..b16
            },
            &acc("spatial(4, 1).local(1, 8).mma_c"),
            128,
            &Target::SM90,
        )
        .unwrap();
        assert_eq!((p.base.kind, p.a), (MmaKind::Bf16, vec![vec![0]]));
    }

    #[test]
    fn eight_bit_integers_mix_signedness_and_nothing_else_does() {
        let sw8 = OperandGeometry::of(DType::UInt(8)).unwrap().swizzle;
        let ints = |text: &str| RegisterType {
            dtype: DType::Int(32),
            layout: parse(text).unwrap(),
        };
        let b = shared_of(DType::Int(8), [128, 64], [1, 128], Some(sw8));
        let c = ints("spatial(4, 1).local(1, 8).mma_c");
        // A u8 weight in registers against s8 activations: `.s32.u8.s8`.
        let a = RegisterType {
            dtype: DType::UInt(8),
            layout: parse("spatial(4, 1).local(1, 4).mma_a_f8").unwrap(),
        };
        let p = plan_wgmma_rs(&a, &b, &c, 128, &Target::SM90).unwrap();
        assert_eq!(
            (p.base.kind, p.base.b_kind, p.base.n),
            (MmaKind::U8, MmaKind::I8, 64)
        );
        let sa = shared_of(DType::Int(8), [64, 128], [128, 1], Some(sw8));
        let bu = shared_of(DType::UInt(8), [128, 64], [1, 128], Some(sw8));
        let p = plan_wgmma(&sa, &bu, &c, 128, &Target::SM90).unwrap();
        assert_eq!((p.kind, p.b_kind), (MmaKind::I8, MmaKind::U8));
        // f16 against bf16 (or 8-bit against fp8) is not an instruction.
        let a16 = shared_of(DType::F16, [64, 64], [64, 1], Some(SWIZZLE_128B));
        let b16 = shared_of(DType::BF16, [64, 64], [1, 64], Some(SWIZZLE_128B));
        let f32c = RegisterType {
            dtype: DType::F32,
            layout: parse("spatial(4, 1).local(1, 8).mma_c").unwrap(),
        };
        let e = plan_wgmma(&a16, &b16, &f32c, 128, &Target::SM90).unwrap_err();
        assert!(e.contains("f16 and bf16"), "{e}");
        let bf8 = shared_of(DType::F8E4M3, [128, 64], [1, 128], Some(sw8));
        assert!(plan_wgmma_rs(&a, &bf8, &c, 128, &Target::SM90).is_err());
    }

    #[test]
    fn register_a_rejections_name_a_and_show_the_layout() {
        let b = shared([64, 128], [1, 64], Some(SWIZZLE_128B));
        let b256 = shared([64, 256], [1, 64], Some(SWIZZLE_128B));
        let err = |dtype, a: &str, b: &SharedType, c: &str, threads, t: &Target| {
            plan_wgmma_rs(&reg(dtype, a), b, &acc(c), threads, t).unwrap_err()
        };
        let f16 = DType::F16;
        let good = "spatial(4, 1).local(1, 4).mma_a";
        let c = "spatial(4, 1).local(1, 16).mma_c";
        // Warps side by side along k: not the wgmma A fragment.
        let e = err(
            f16,
            "spatial(1, 4).local(4, 1).mma_a",
            &b,
            c,
            128,
            &Target::SM90,
        );
        assert!(
            e.contains("register operand a")
                && e.contains("help: write it as `spatial(4, 1).local(1, 4).mma_a`"),
            "{e}"
        );
        // Two warpgroups of c, but a held by one: the brief's help text.
        let e = err(
            f16,
            "local(2, 1).spatial(4, 1).local(1, 4).mma_a",
            &b256,
            "spatial(2, 1).spatial(4, 1).local(1, 32).mma_c",
            256,
            &Target::SM90,
        );
        assert!(
            e.contains("help: write it as `spatial(2, 1).spatial(4, 1).local(1, 4).mma_a`"),
            "{e}"
        );
        // k steps outside the row blocks of one warpgroup.
        let e = err(
            f16,
            "local(1, 4).local(2, 1).spatial(4, 1).mma_a",
            &b,
            "local(2, 1).spatial(4, 1).local(1, 16).mma_c",
            128,
            &Target::SM90,
        );
        assert!(
            e.contains("help: write it as `local(2, 1).spatial(4, 1).local(1, 4).mma_a`"),
            "{e}"
        );
        // 2 x 2 warpgroups without replicas: warpgroup 1 computes row block 0.
        let e = err(
            f16,
            "spatial(2, 1).spatial(4, 1).local(1, 4).mma_a",
            &b256,
            "spatial(2, 2).spatial(4, 1).local(1, 16).mma_c",
            512,
            &Target::SM90,
        );
        assert!(e.contains("replicated(2)"), "{e}");
        // The help text is a layout that is accepted.
        let help = e.split('`').nth(1).unwrap();
        plan_wgmma_rs(
            &reg(f16, help),
            &b256,
            &acc("spatial(2, 2).spatial(4, 1).local(1, 16).mma_c"),
            512,
            &Target::SM90,
        )
        .unwrap_or_else(|e| panic!("{help}: {e}"));
        // The rules shared with the SS form.
        assert!(err(f16, good, &b, c, 128, &Target::SM80).contains("sm_90a"));
        assert!(err(f16, good, &b, c, 96, &Target::SM90).contains("multiple of 128"));
        assert!(err(DType::F32, good, &b, c, 128, &Target::SM90).contains("f16 or bf16"));
        let n_major = shared([64, 128], [128, 1], Some(SWIZZLE_128B));
        let e = err(f16, good, &n_major, c, 128, &Target::SM90);
        assert!(
            e.contains("operand b") && e.contains("permute_shared"),
            "{e}"
        );
        let e = err(
            f16,
            good,
            &b,
            "spatial(1, 4).local(4, 4).mma_c",
            128,
            &Target::SM90,
        );
        assert!(e.contains("wgmma accumulator"), "{e}");
        let b80 = shared([80, 128], [1, 64], Some(SWIZZLE_128B));
        let e = err(
            f16,
            "spatial(4, 1).local(1, 5).mma_a",
            &b80,
            c,
            128,
            &Target::SM90,
        );
        assert!(e.contains("at most 64"), "{e}");
    }
}
