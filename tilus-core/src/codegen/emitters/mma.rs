//! `dot`: warp-level `mma.sync.aligned.m16n8k16` when the verifier's [`plan_dot`] says the
//! operands are warp tiles of the mma fragments, else scalar FMAs from each thread's own
//! registers (the thread-local condition).
//!
//! mma: the quotient layouts (`a = qa ∘ A` etc.) are over warps; for each of a warp's `c`
//! fragments `jq` and each `kq`, one mma on `a` fragment `la(jq, kq)` and `b` fragment
//! `lb(jq, kq)`. Fragment `l` of a 16-bit `a` is words `[4l, 4l+4)`, of `b` words `[2l, 2l+2)`;
//! of an 8-bit `a` words `[2l, 2l+2)`, of `b` word `l`; of `c` words `[4l, 4l+4)`; of a u1 `a`
//! (m16n8k256) words `[4l, 4l+4)`, of `b` words `[2l, 2l+2)`; of an fp8 or 8-bit integer `a`
//! on m16n8k32 words `[4l, 4l+4)`, of `b` words `[2l, 2l+2)`.

use super::elementwise::store_codes;
use crate::codegen::context::Ctx;
use crate::codegen::regmap::LayoutMap;
use crate::codegen::regs::get_bits;
use crate::codegen::scalar::{self, CType};
use crate::codegen::CodegenError;
use crate::ir::{RegisterType, VarId};
use crate::verify::{plan_dot, DotPlan, MmaKind};
use std::collections::HashMap;

/// `out = dot(a, b, c)`.
pub(crate) fn dot(
    cx: &mut Ctx,
    out: VarId,
    a: VarId,
    b: VarId,
    c: VarId,
) -> Result<(), CodegenError> {
    let (adt, al) = cx.reg(a)?;
    let (bdt, bl) = cx.reg(b)?;
    let (cdt, cl) = cx.reg(c)?;
    let rt = |dtype, layout| RegisterType { dtype, layout };
    let plan = plan_dot(
        &rt(adt, al.clone()),
        &rt(bdt, bl.clone()),
        &rt(cdt, cl.clone()),
        cx.block_threads,
        &cx.target,
    )
    .map_err(|e| cx.err(format!("dot: {e}")))?;
    match plan {
        DotPlan::Mma {
            kind,
            a: qa,
            b: qb,
            c: qc,
        } => {
            let qa = LayoutMap::analyze(&qa).map_err(|e| cx.err(e))?;
            let qb = LayoutMap::analyze(&qb).map_err(|e| cx.err(e))?;
            let qc = LayoutMap::analyze(&qc).map_err(|e| cx.err(e))?;
            mma(cx, kind, out, a, b, c, &qa, &qb, &qc)
        }
        DotPlan::ThreadLocal => {
            let ia = cx.layout(&al)?;
            let ib = cx.layout(&bl)?;
            let ic = cx.layout(&cl)?;
            let (ma, mb, mc) = (
                cx.layouts[ia].map.clone(),
                cx.layouts[ib].map.clone(),
                cx.layouts[ic].map.clone(),
            );
            thread_local(cx, out, a, b, c, (adt, bdt, cdt), &ma, &mb, &mc)
        }
    }
}

/// For each `c` local and each `k`, the `a` and `b` locals holding `a[m, k]` and `b[k, n]`, the
/// same for every unit (thread, or warp for mma quotients).
fn operand_tables(
    ma: &LayoutMap,
    mb: &LayoutMap,
    mc: &LayoutMap,
    units: usize,
) -> Result<Vec<Vec<(usize, usize)>>, String> {
    // A batched dot has a leading batch dimension: `c[i, m, n]` from `a[i, m, k]`, `b[i, k, n]`.
    let k = *ma.shape.last().expect("dot operands have rank 2 or 3");
    let mut table: Vec<Vec<Option<(usize, usize)>>> = vec![vec![None; k]; mc.locals];
    let mut seen = std::collections::HashSet::new();
    for t in 0..units.max(1) {
        let (ta, tb, tc) = (t % ma.threads, t % mb.threads, t % mc.threads);
        if !seen.insert((ta, tb, tc)) {
            continue;
        }
        let ha: HashMap<Vec<i64>, usize> =
            (0..ma.locals).rev().map(|l| (ma.eval(ta, l), l)).collect();
        let hb: HashMap<Vec<i64>, usize> =
            (0..mb.locals).rev().map(|l| (mb.eval(tb, l), l)).collect();
        for (j, row) in table.iter_mut().enumerate() {
            let ci = mc.eval(tc, j);
            let (batch, [mi, ni]) = (&ci[..ci.len() - 2], [ci[ci.len() - 2], ci[ci.len() - 1]]);
            for (kk, cell) in row.iter_mut().enumerate() {
                let key_a: Vec<i64> = batch.iter().copied().chain([mi, kk as i64]).collect();
                let key_b: Vec<i64> = batch.iter().copied().chain([kk as i64, ni]).collect();
                let la = *ha
                    .get(&key_a)
                    .ok_or_else(|| format!("unit {t} lacks a{key_a:?}"))?;
                let lb = *hb
                    .get(&key_b)
                    .ok_or_else(|| format!("unit {t} lacks b{key_b:?}"))?;
                match cell {
                    None => *cell = Some((la, lb)),
                    Some(x) if *x == (la, lb) => {}
                    Some(_) => return Err(format!("operand positions depend on unit {t}")),
                }
            }
        }
    }
    Ok(table
        .into_iter()
        .map(|r| r.into_iter().map(|x| x.unwrap_or((0, 0))).collect())
        .collect())
}

#[allow(clippy::too_many_arguments)]
fn mma(
    cx: &mut Ctx,
    kind: MmaKind,
    out: VarId,
    a: VarId,
    b: VarId,
    c: VarId,
    qa: &LayoutMap,
    qb: &LayoutMap,
    qc: &LayoutMap,
) -> Result<(), CodegenError> {
    let warps = cx.block_threads / 32;
    let table = operand_tables(qa, qb, qc, warps).map_err(|e| cx.err(format!("dot (mma): {e}")))?;
    // The helper, and the words of one fragment of `a` and of `b`. A run fragment (`mma_a_k4`..,
    // see `layout::fragments`) of `r` is `r / 4` instructions: fragment `l` of `a` is words
    // `[r l, r l + r)` in the instructions' order, of `b` words `[r l / 2, r l / 2 + r / 2)`,
    // and instruction `j` takes `a` words `4 j .. 4 j + 4` and `b` words `2 j`, `2 j + 1`.
    let (fname, a_words, b_words) = match kind {
        MmaKind::F16 => {
            cx.features.insert("mma_f16");
            ("tilus_mma_f16", 4, 2)
        }
        MmaKind::Bf16 => {
            cx.features.insert("mma_bf16");
            ("tilus_mma_bf16", 4, 2)
        }
        MmaKind::I8 => {
            cx.features.insert("mma_s8");
            ("tilus_mma_s8", 2, 1)
        }
        MmaKind::U8 => {
            cx.features.insert("mma_u8");
            ("tilus_mma_u8", 2, 1)
        }
        // m16n8k256: 128 u1 of A in 4 words, 64 of B in 2 (see `super::bmma`).
        MmaKind::B1 => {
            cx.features.insert(super::bmma::FEATURE);
            (super::bmma::HELPER, 4, 2)
        }
        MmaKind::B1Paired => {
            cx.features.insert(super::bmma::FEATURE_PAIRED);
            (super::bmma::HELPER_PAIRED, 4, 2)
        }
        MmaKind::F16Runs(r) => {
            cx.features.insert("mma_f16");
            ("tilus_mma_f16", r as usize, r as usize / 2)
        }
        MmaKind::Bf16Runs(r) => {
            cx.features.insert("mma_bf16");
            ("tilus_mma_bf16", r as usize, r as usize / 2)
        }
        // m16n8k32: 16 fp8 of A in 4 words, 8 of B in 2.
        MmaKind::E4M3 => {
            cx.features.insert("mma_e4m3");
            ("tilus_mma_e4m3", 4, 2)
        }
        MmaKind::E5M2 => {
            cx.features.insert("mma_e5m2");
            ("tilus_mma_e5m2", 4, 2)
        }
        // m16n8k32: 16 bytes of A in 4 words, 8 of B in 2, each operand `.s8` or `.u8`.
        MmaKind::Int8K32 { a_signed, b_signed } => {
            let name = crate::codegen::prelude::mma_int8_k32_feature(a_signed, b_signed);
            cx.features.insert(name);
            (name, 4, 2)
        }
    };
    // Instructions per fragment: one, or `r / 4` for the runs of `r`.
    let per_fragment = match kind {
        MmaKind::F16Runs(r) | MmaKind::Bf16Runs(r) => r as usize / 4,
        _ => 1,
    };
    let (an, bn, cn, on) = (cx.name(a), cx.name(b), cx.name(c), cx.name(out));
    if out != c {
        for w in 0..qc.locals * 4 {
            cx.w.line(format!("{on}[{w}] = {cn}[{w}];"));
        }
    }
    let k_tiles = *qa.shape.last().expect("dot operands have rank 2 or 3");
    for kq in 0..k_tiles {
        for (jq, row) in table.iter().enumerate() {
            let (la, lb) = row[kq];
            for j in 0..per_fragment {
                cx.w.line(format!(
                    "{fname}(&{on}[{}], &{an}[{}], &{bn}[{}]);",
                    jq * 4,
                    la * a_words + 4 * j,
                    lb * b_words + 2 * j
                ));
            }
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn thread_local(
    cx: &mut Ctx,
    out: VarId,
    a: VarId,
    b: VarId,
    c: VarId,
    (adt, bdt, cdt): (crate::DType, crate::DType, crate::DType),
    ma: &LayoutMap,
    mb: &LayoutMap,
    mc: &LayoutMap,
) -> Result<(), CodegenError> {
    let table = operand_tables(ma, mb, mc, cx.block_threads)
        .map_err(|e| cx.err(format!("dot (thread-local): {e}")))?;
    let (an, bn, cn, on) = (cx.name(a), cx.name(b), cx.name(c), cx.name(out));
    let cbits = cdt.bits();
    let cct = CType::of(cdt);
    cx.w.open("");
    // Decode each operand element once (the operands may differ in signedness: u8 x i8).
    let mut dec_a: HashMap<usize, String> = HashMap::new();
    let mut dec_b: HashMap<usize, String> = HashMap::new();
    let decode = |cx: &mut Ctx,
                  arr: &str,
                  dt: crate::DType,
                  l: usize,
                  cache: &mut HashMap<usize, String>|
     -> String {
        if let Some(n) = cache.get(&l) {
            return n.clone();
        }
        let (cc, v) = (
            cx.fresh(&format!("{arr}_c{l}")),
            cx.fresh(&format!("{arr}_v{l}")),
        );
        let bits = dt.bits();
        cx.w.line(format!(
            "const uint32_t {cc} = {};",
            get_bits(arr, l * bits as usize, bits)
        ));
        let value = scalar::decode(dt, &cc);
        cx.w.line(format!("const {} {v} = {value};", CType::of(dt).name()));
        cache.insert(l, v.clone());
        v
    };
    let mut codes = Vec::new();
    for (j, row) in table.iter().enumerate() {
        let (cc, acc) = (cx.fresh("c"), cx.fresh("acc"));
        cx.w.line(format!(
            "const uint32_t {cc} = {};",
            get_bits(&cn, j * cbits as usize, cbits)
        ));
        cx.w.line(format!(
            "{} {acc} = {};",
            cct.name(),
            scalar::decode(cdt, &cc)
        ));
        for &(la, lb) in row {
            let x = decode(cx, &an, adt, la, &mut dec_a);
            let y = decode(cx, &bn, bdt, lb, &mut dec_b);
            let line = match cct {
                CType::Float => format!("{acc} = fmaf({x}, {y}, {acc});"),
                CType::Int64 => format!("{acc} += {x} * {y};"),
            };
            cx.w.line(line);
        }
        codes.push(scalar::round(cdt, &acc));
    }
    store_codes(cx, &on, cbits, &codes);
    cx.w.close();
    Ok(())
}
