//! `load_shared` (vectorized `ld.shared` or `ldmatrix`), `store_shared` and `copy_async`
//! (`cp.async` 16/8/4 bytes with zero fill, or a synchronous element copy).
//!
//! Addresses: a shared tensor is a root allocation (placed by the planner) plus an origin in
//! root coordinates (slices); element `index` of the root is at element offset
//! `swizzle(sum(index[d] * strides[d]))`, the swizzle applied to the whole root offset, exactly
//! as `SharedLayout::offset`/`Swizzle::apply` define it.

use super::global::{
    contiguous_groups, load_chunk, load_sub_byte, replica_guard, store_chunk, store_sub_byte,
};
use crate::codegen::context::{Ctx, SharedInfo, SMEM, TID};
use crate::codegen::expr::{add_const, Divisible};
use crate::codegen::regmap::{derive_terms, FragTiling, LayoutMap, FRAG_LDSM, FRAG_LDSM_T};
use crate::codegen::regs::{get_bits, word_count, WordBuilder};
use crate::codegen::CodegenError;
use crate::ir::{BinaryOp, Expr, VarId};
use crate::layout::{Layout, Swizzle};

/// C expression of `x` (an `int` expression) swizzled.
pub(crate) fn swizzle_c(x: &str, sw: Option<Swizzle>) -> String {
    match sw {
        None => x.to_string(),
        Some(s) if s.bits == 0 => x.to_string(),
        Some(s) => {
            let x = crate::codegen::expr::paren(x);
            format!(
                "({x} ^ ((({x} >> {}) & {}) << {}))",
                s.base + s.shift,
                (1u32 << s.bits) - 1,
                s.base
            )
        }
    }
}

/// Expressions for an access to shared tensor `s` at instruction offset `offset` (rank of `s`)
/// of a tile covering its trailing `tile_rank` dims: per root dim, the base index (`origin +
/// offset`, without any thread part).
fn root_base(s: &SharedInfo, offset: &[Expr], tile_rank: usize) -> Result<Vec<Expr>, String> {
    let root_rank = s.root_layout.rank();
    let rank = s.shape.len();
    if offset.len() != rank || tile_rank > rank || rank > root_rank {
        return Err(format!(
            "a rank-{tile_rank} tile at a rank-{} offset of a rank-{rank} shared tensor",
            offset.len()
        ));
    }
    let lead = root_rank - rank;
    let mut base = s.origin.clone();
    for (d, e) in offset.iter().enumerate() {
        base[lead + d] = add_expr(&base[lead + d], e);
    }
    Ok(base)
}

fn add_expr(a: &Expr, b: &Expr) -> Expr {
    match (a, b) {
        (Expr::Int(0), x) | (x, Expr::Int(0)) => x.clone(),
        _ => Expr::binary(BinaryOp::Add, a.clone(), b.clone()),
    }
}

/// Whether `sum(base[d] * strides[d])` is provably a multiple of `v` (last dim by proof, other
/// dims because their strides are multiples of `v`), with the root's last stride 1 and a
/// swizzle that keeps `v`-element runs together.
fn vector_ok(cx: &Ctx, s: &SharedInfo, base: &[Expr], v: usize) -> Divisible {
    let l = &s.root_layout;
    let last = l.rank() - 1;
    // One element per access: any strides (a permuted tile copies element by element).
    if v == 1 {
        return Divisible::Yes;
    }
    if l.strides[last] != 1 {
        return Divisible::No;
    }
    if l.strides[..last].iter().any(|st| st % v != 0) {
        return Divisible::No;
    }
    if let Some(sw) = l.swizzle {
        if sw.bits > 0 && (1usize << sw.base) < v {
            return Divisible::No;
        }
    }
    cx.facts.divisible(&base[last], v as i64)
}

/// A register-tile access to shared memory: declares the per-thread base offset.
struct Access {
    /// `const int` holding the unswizzled element offset of thread part + base.
    off: String,
    /// Compile-time offset of each local (unswizzled).
    local_off: Vec<i64>,
    /// Byte pointer of the root allocation.
    ptr: String,
    swizzle: Option<Swizzle>,
}

fn access(cx: &mut Ctx, s: &SharedInfo, base: &[Expr], lay: usize) -> Access {
    let l = &s.root_layout;
    let root_rank = l.rank();
    let map = &cx.layouts[lay].map;
    let lead = root_rank - map.rank();
    let mut terms = Vec::new();
    for (d, b) in base.iter().enumerate() {
        let mut parts = Vec::new();
        let b = cx.expr(b);
        if b != "0" {
            parts.push(b);
        }
        if d >= lead {
            let t = cx.layouts[lay].dims[d - lead].clone();
            if t != "0" {
                parts.push(t);
            }
        }
        if parts.is_empty() {
            continue;
        }
        let x = parts.join(" + ");
        terms.push(crate::codegen::expr::mul_const(&x, l.strides[d] as i64));
    }
    let local_off = map
        .local_index
        .iter()
        .map(|idx| {
            idx.iter()
                .enumerate()
                .map(|(d, x)| x * l.strides[lead + d] as i64)
                .sum()
        })
        .collect();
    let off = cx.fresh("so");
    cx.w.line(format!(
        "const int {off} = {};",
        crate::codegen::expr::sum(&terms)
    ));
    let ptr = if s.root_offset == 0 {
        SMEM.to_string()
    } else {
        format!("({SMEM} + {})", s.root_offset)
    };
    Access {
        off,
        local_off,
        ptr,
        swizzle: l.swizzle,
    }
}

impl Access {
    /// Element offset (swizzled) of local `i`.
    fn elem(&self, i: usize) -> String {
        swizzle_c(&add_const(&self.off, self.local_off[i]), self.swizzle)
    }
    fn byte_addr(&self, i: usize, bits: u32) -> String {
        if bits >= 8 {
            format!("{} + ({}) * {}", self.ptr, self.elem(i), bits / 8)
        } else {
            format!("{} + ({}) * {bits} / 8", self.ptr, self.elem(i))
        }
    }
}

/// The widest vector (elements, bits) for a register tile access to shared memory.
fn pick_width(cx: &mut Ctx, s: &SharedInfo, base: &[Expr], map: &LayoutMap) -> (usize, u32) {
    let bits = s.dtype.bits();
    for width in [128u32, 64, 32, 16, 8] {
        if width % bits != 0 || width / bits < 2 {
            continue;
        }
        let v = (width / bits) as usize;
        if contiguous_groups(map, v) < v {
            continue;
        }
        let proof = vector_ok(cx, s, base, v);
        if proof != Divisible::No {
            cx.assume(&proof);
            return (v, width);
        }
    }
    (1, 0)
}

/// `out = load_shared(src, layout, offset)`.
pub(crate) fn load(
    cx: &mut Ctx,
    out: VarId,
    src: VarId,
    offset: &[Expr],
    layout: &Layout,
) -> Result<(), CodegenError> {
    let s = cx.shared_info(src)?;
    let lay = cx.layout(layout)?;
    let map = cx.layouts[lay].map.clone();
    let base =
        root_base(&s, offset, map.rank()).map_err(|e| cx.err(format!("load_shared: {e}")))?;
    let arr = cx.name(out);
    cx.w.open("");
    if try_ldmatrix(cx, &s, &base, &map, &arr)? {
        cx.w.close();
        return Ok(());
    }
    let bits = s.dtype.bits();
    let (v, width) = pick_width(cx, &s, &base, &map);
    let a = access(cx, &s, &base, lay);
    let mut wb = WordBuilder::new(word_count(bits, map.locals));
    let mut lines = Vec::new();
    for g in 0..map.locals / v {
        let i = g * v;
        let pos = i * bits as usize;
        if width > 0 || bits >= 8 {
            let w = if width > 0 { width } else { bits };
            let addr = a.byte_addr(i, bits);
            lines.extend(load_chunk(cx, &mut wb, pos, w, &addr, None));
        } else {
            let bit = format!("(long long)({}) * {bits}", a.elem(i));
            lines.extend(load_sub_byte(cx, &mut wb, pos, bits, &a.ptr, &bit, None));
        }
    }
    lines.extend(wb.finish(&arr));
    for l in lines {
        cx.w.line(l);
    }
    cx.w.close();
    Ok(())
}

fn uint_type(bits: u32) -> &'static str {
    match bits {
        8 => "uint8_t",
        16 => "uint16_t",
        _ => "uint32_t",
    }
}

/// `store_shared(src, dst, offset)`.
pub(crate) fn store(
    cx: &mut Ctx,
    src: VarId,
    dst: VarId,
    offset: &[Expr],
) -> Result<(), CodegenError> {
    let s = cx.shared_info(dst)?;
    let (dtype, layout) = cx.reg(src)?;
    if dtype.bits() != s.dtype.bits() {
        return Err(
            cx.err("store_shared: the register tensor's dtype differs from the shared tensor's")
        );
    }
    let lay = cx.layout(&layout)?;
    let map = cx.layouts[lay].map.clone();
    let base =
        root_base(&s, offset, map.rank()).map_err(|e| cx.err(format!("store_shared: {e}")))?;
    let arr = cx.name(src);
    let bits = s.dtype.bits();
    cx.w.open("");
    let (v, width) = pick_width(cx, &s, &base, &map);
    let a = access(cx, &s, &base, lay);
    let guard = replica_guard(&map, cx.block_threads);
    if let Some(g) = &guard {
        cx.w.open(format!("if ({g})"));
    }
    let mut lines = Vec::new();
    for g in 0..map.locals / v {
        let i = g * v;
        let pos = i * bits as usize;
        if width > 0 {
            lines.extend(store_chunk(&arr, pos, width, &a.byte_addr(i, bits), None));
        } else if bits >= 8 {
            let ty = uint_type(bits);
            lines.push(format!(
                "*({ty}*)({}) = ({ty}){};",
                a.byte_addr(i, bits),
                get_bits(&arr, pos, bits)
            ));
        } else {
            let bit = format!("(long long)({}) * {bits}", a.elem(i));
            lines.extend(store_sub_byte(cx, &arr, pos, bits, &a.ptr, &bit, None));
        }
    }
    for l in lines {
        cx.w.line(l);
    }
    if guard.is_some() {
        cx.w.close();
    }
    cx.w.close();
    Ok(())
}

/// Emit `ldmatrix` for a 16-bit load whose layout tiles the ldmatrix fragment (plain or
/// transposed) from a row-major tile with 16-byte aligned rows. Returns false (emitting
/// nothing) when it does not apply.
fn try_ldmatrix(
    cx: &mut Ctx,
    s: &SharedInfo,
    base: &[Expr],
    map: &LayoutMap,
    arr: &str,
) -> Result<bool, CodegenError> {
    let l = &s.root_layout;
    let root_rank = l.rank();
    if !cx.target.features.ldmatrix || s.dtype.bits() != 16 || map.rank() != 2 || root_rank < 2 {
        return Ok(false);
    }
    let last = root_rank - 1;
    if l.strides[last] != 1 || l.strides[..last].iter().any(|st| st % 8 != 0) {
        return Ok(false);
    }
    if l.swizzle.is_some_and(|sw| sw.bits > 0 && sw.base < 3) {
        return Ok(false);
    }
    let proof = cx.facts.divisible(&base[last], 8);
    if proof == Divisible::No {
        return Ok(false);
    }
    let (tiling, trans) = match FragTiling::of(map, &FRAG_LDSM) {
        Some(t) => (t, false),
        None => match FragTiling::of(map, &FRAG_LDSM_T) {
            Some(t) => (t, true),
            None => return Ok(false),
        },
    };
    let per = tiling.per_warp;
    let k = if per % 4 == 0 {
        4
    } else if per % 2 == 0 {
        2
    } else {
        1
    };
    let threads = cx.block_threads;
    // Per group: the (row, col) each lane points at, as an affine function of tid, and the
    // positions themselves (for the address classes below).
    let mut groups = Vec::new();
    let mut positions = Vec::new();
    for g in 0..per / k {
        let at = |t: usize| -> Vec<i64> {
            let (w, lane) = (t / 32, t % 32);
            let jj = g * k + (lane / 8) % k;
            let (tr, tc) = tiling.tiles_of(w)[jj];
            vec![(tr * 8 + lane % 8) as i64, (tc * 8) as i64]
        };
        let pos: Vec<Vec<i64>> = (0..threads).map(at).collect();
        let p0 = pos[0].clone();
        let vals: Vec<Vec<i64>> = pos
            .iter()
            .map(|p| p.iter().zip(&p0).map(|(a, b)| a - b).collect())
            .collect();
        let Some(terms) = derive_terms(&vals, threads) else {
            return Ok(false);
        };
        groups.push((p0, terms));
        positions.push(pos);
    }
    cx.assume(&proof);
    cx.features.insert(match (k, trans) {
        (4, false) => "ldsm_x4",
        (2, false) => "ldsm_x2",
        (1, false) => "ldsm_x1",
        (4, true) => "ldsm_x4_trans",
        (2, true) => "ldsm_x2_trans",
        _ => "ldsm_x1_trans",
    });
    let lead = root_rank - 2;
    let ptr = if s.root_offset == 0 {
        SMEM.to_string()
    } else {
        format!("({SMEM} + {})", s.root_offset)
    };
    let sbase = cx.fresh("sbase");
    cx.w.line(format!("const uint32_t {sbase} = tilus_smem_addr({ptr});"));
    let lin: Vec<Vec<i64>> = positions
        .iter()
        .map(|pos| {
            pos.iter()
                .map(|p| p[0] * l.strides[lead] as i64 + p[1] * l.strides[lead + 1] as i64)
                .collect()
        })
        .collect();
    let classes = address_classes(cx, base, l, &lin);
    // Offset of the base index (no thread part): with classes, only its run-time part (a
    // multiple of the swizzle's period); the constant part goes into each class.
    let mut terms = Vec::new();
    for (d, e) in base.iter().enumerate() {
        if classes.is_some() && cx.facts.constant(e).is_some() {
            continue;
        }
        let x = cx.expr(e);
        if x != "0" {
            terms.push(crate::codegen::expr::mul_const(&x, l.strides[d] as i64));
        }
    }
    let off0 = cx.fresh("so");
    cx.w.line(format!(
        "const int {off0} = {};",
        crate::codegen::expr::sum(&terms)
    ));
    let suffix = if trans { "_trans" } else { "" };
    // The element offset of group `g` for every thread, as a C expression: with `split`, the
    // run-time base `off0` (a multiple of the swizzle's period, which therefore passes
    // through it) plus the swizzled thread part and constant `extra`; else the whole offset
    // swizzled.
    let group_elem = |g: usize, extra: i64, split: bool| -> String {
        let (p0, terms) = &groups[g];
        let lm = LayoutMap {
            shape: vec![0, 0],
            threads,
            locals: 1,
            terms: terms.clone(),
            local_index: vec![vec![0, 0]],
        };
        let row = add_const(&lm.thread_expr(0, TID, threads), p0[0]);
        let col = add_const(&lm.thread_expr(1, TID, threads), p0[1]);
        let thread = [
            crate::codegen::expr::mul_const(&row, l.strides[lead] as i64),
            crate::codegen::expr::mul_const(&col, l.strides[lead + 1] as i64),
        ];
        if split {
            let y = add_const(&crate::codegen::expr::sum(&thread), extra);
            crate::codegen::expr::sum(&[off0.clone(), swizzle_c(&y, l.swizzle)])
        } else {
            let lin =
                crate::codegen::expr::sum(&[off0.clone(), thread[0].clone(), thread[1].clone()]);
            swizzle_c(&add_const(&lin, extra), l.swizzle)
        }
    };
    match classes {
        Some((konst, class_of)) => {
            // One shared address per class; each group of a class is that address plus a
            // constant number of bytes (which ptxas folds into LDSM's immediate offset).
            let mut names: Vec<Option<String>> = vec![None; per / k];
            for (g, &(c, delta)) in class_of.iter().enumerate() {
                let a = match &names[c] {
                    Some(a) => a.clone(),
                    None => {
                        let a = cx.fresh("sa");
                        let e = group_elem(c, konst, true);
                        cx.w.line(format!(
                            "const uint32_t {a} = {sbase} + (uint32_t)({e}) * 2u;"
                        ));
                        names[c] = Some(a.clone());
                        a
                    }
                };
                // The byte offset wraps like the `uint32_t` sum it replaces.
                let bytes = (delta as i32 as u32).wrapping_mul(2);
                let addr = if bytes == 0 {
                    a
                } else {
                    format!("{a} + {bytes}u")
                };
                cx.w.line(format!(
                    "tilus_ldsm_x{k}{suffix}(&{arr}[{}], {addr});",
                    g * k
                ));
            }
        }
        None => {
            for g in 0..per / k {
                let elem = group_elem(g, 0, false);
                cx.w.line(format!(
                    "tilus_ldsm_x{k}{suffix}(&{arr}[{}], {sbase} + (uint32_t)({elem}) * 2u);",
                    g * k
                ));
            }
        }
    }
    Ok(true)
}

/// Address classes of an access whose groups (ldmatrix calls, cp.async chunks) have thread
/// `t` of group `g` at the unswizzled element offset `base + lin[g][t]` of the root:
/// `Some((k, class_of))` when the base's run-time part is provably a multiple of the swizzle's
/// period (its constant part is `k` elements), so that `swizzle(runtime + y) = runtime +
/// swizzle(y)`; group `g`'s element offset is then `runtime + swizzle(lin[c][t] + k) + delta`
/// for every thread, with `class_of[g] = (c, delta)` (`c` the class's first group). Checked
/// over every thread, so a class shares one address computation exactly. `None`: every group
/// computes its own address.
fn address_classes(
    cx: &Ctx,
    base: &[Expr],
    l: &crate::layout::SharedLayout,
    lin: &[Vec<i64>],
) -> Option<(i64, Vec<(usize, i64)>)> {
    let period: i64 = match l.swizzle {
        Some(sw) if sw.bits > 0 => 1i64.checked_shl(sw.base + sw.shift + sw.bits)?,
        _ => 1,
    };
    let mut konst = 0i64;
    for (d, e) in base.iter().enumerate() {
        let stride = l.strides[d] as i64;
        match cx.facts.constant(e) {
            Some(c) => konst = konst.checked_add(c.checked_mul(stride)?)?,
            None => {
                let need = period / gcd_i64(period, stride);
                if cx.facts.divisible(e, need) != Divisible::Yes {
                    return None;
                }
            }
        }
    }
    let swz = |y: i64| -> Option<i64> {
        let y = usize::try_from(y).ok()?;
        Some(match l.swizzle {
            Some(sw) => sw.apply(y) as i64,
            None => y as i64,
        })
    };
    // Each group's swizzled offset (without the run-time part) for every thread.
    let offsets: Vec<Vec<i64>> = lin
        .iter()
        .map(|g| {
            g.iter()
                .map(|&y| swz(y.checked_add(konst)?))
                .collect::<Option<Vec<i64>>>()
        })
        .collect::<Option<Vec<_>>>()?;
    let mut class_of: Vec<(usize, i64)> = Vec::new();
    let mut reps: Vec<usize> = Vec::new();
    for (g, off) in offsets.iter().enumerate() {
        let found = reps.iter().find_map(|&c| {
            let delta = off[0] - offsets[c][0];
            off.iter()
                .zip(&offsets[c])
                .all(|(a, b)| a - b == delta)
                .then_some((c, delta))
        });
        match found {
            Some(cd) => class_of.push(cd),
            None => {
                reps.push(g);
                class_of.push((g, 0));
            }
        }
    }
    Some((konst, class_of))
}

fn gcd_i64(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.abs(), b.abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// `copy_async(dst, src, src_offset)`.
pub(crate) fn copy_async(
    cx: &mut Ctx,
    dst: VarId,
    src: VarId,
    src_offset: &[Expr],
) -> Result<(), CodegenError> {
    if !cx.target.features.cp_async {
        return Err(cx.err(format!(
            "copy_async needs cp.async, which the target {} does not have",
            cx.target.arch.name()
        )));
    }
    let s = cx.shared_info(dst)?;
    let g = cx.global(src)?;
    let rank = s.shape.len();
    let grank = g.dims.len();
    if src_offset.len() != grank || rank > grank || rank == 0 {
        return Err(cx.err(format!(
            "copy_async: a rank-{rank} tile at a rank-{} offset of a rank-{grank} view",
            src_offset.len()
        )));
    }
    if s.dtype.bits() != g.dtype.bits() {
        return Err(cx.err("copy_async: source and destination dtypes differ"));
    }
    let bits = s.dtype.bits();
    let zeros = vec![Expr::Int(0); rank];
    let sbase = root_base(&s, &zeros, rank).map_err(|e| cx.err(format!("copy_async: {e}")))?;
    let glead = grank - rank;
    let last_extent = s.shape[rank - 1];
    // Chunk size: 16, 8 or 4 bytes.
    let mut chosen = None;
    for bytes in [16u32, 8, 4] {
        if (bytes * 8) % bits != 0 {
            continue;
        }
        let v = (bytes * 8 / bits) as usize;
        if v < 1 || last_extent % v != 0 {
            continue;
        }
        let mut proof = vector_ok(cx, &s, &sbase, v);
        if proof == Divisible::No {
            continue;
        }
        let gp = cx.facts.divisible(&src_offset[grank - 1], v as i64);
        proof = proof.and(gp);
        if grank >= 2 {
            proof = proof.and(cx.facts.divisible(&g.shape[grank - 1], v as i64));
        }
        if proof != Divisible::No {
            chosen = Some((bytes, v, proof));
            break;
        }
    }
    cx.w.open("");
    let total: usize = s.shape.iter().product();
    let threads = cx.block_threads;
    let ptr = if s.root_offset == 0 {
        SMEM.to_string()
    } else {
        format!("({SMEM} + {})", s.root_offset)
    };
    // Global index base per view dim (offsets) and shared base offset.
    // An i64 offset keeps 64 bits, and its mask compares 64 bits (no truncation into range).
    let mut gidx = Vec::new();
    let mut wide = Vec::new();
    for (d, e) in src_offset.iter().enumerate() {
        let n = cx.fresh(&format!("g{d}"));
        wide.push(cx.is_i64(e));
        let ty = if wide[d] { "long long" } else { "int" };
        let line = format!("const {ty} {n} = {};", cx.expr(e));
        cx.w.line(line);
        gidx.push(n);
    }
    let l = s.root_layout.clone();
    let slead = l.rank() - rank;
    let mut sterms = Vec::new();
    for (d, e) in sbase.iter().enumerate() {
        let x = cx.expr(e);
        if x != "0" {
            sterms.push(crate::codegen::expr::mul_const(&x, l.strides[d] as i64));
        }
    }
    // The shared base offset, written where a path uses it (the address classes of the
    // affine path split it instead).
    let soff = cx.fresh("so");
    let soff_line = format!("const int {soff} = {};", crate::codegen::expr::sum(&sterms));
    // Element `idx` (tile coordinates as C expressions) -> (mask, global byte address, shared
    // element offset).
    let gather = |idx: &[String]| -> (String, String, String) {
        let mut mask = Vec::new();
        let mut lin = Vec::new();
        for d in 0..grank {
            let x = if d < glead || idx[d - glead] == "0" {
                gidx[d].clone()
            } else {
                format!(
                    "{} + {}",
                    gidx[d],
                    crate::codegen::expr::paren(&idx[d - glead])
                )
            };
            let u = if wide[d] {
                "unsigned long long"
            } else {
                "unsigned"
            };
            mask.push(format!("({u})({x}) < ({u}){}", g.dims[d]));
            if d == grank - 1 {
                lin.push(format!("({x})"));
            } else {
                lin.push(format!("(long long)({x}) * {}", g.strides[d]));
            }
        }
        let lin = lin.join(" + ");
        let gaddr = if bits >= 8 {
            format!("{} + ({lin}) * {}", g.ptr, bits / 8)
        } else {
            format!("{} + ({lin}) * {bits} / 8", g.ptr)
        };
        let mut st = vec![soff.clone()];
        for (d, x) in idx.iter().enumerate() {
            st.push(crate::codegen::expr::mul_const(
                x,
                l.strides[slead + d] as i64,
            ));
        }
        (mask.join(" && "), gaddr, crate::codegen::expr::sum(&st))
    };
    match chosen {
        Some((bytes, v, proof)) => {
            cx.assume(&proof);
            cx.assume_aligned(&g.ptr_param, bytes);
            cx.features.insert(match bytes {
                16 => "cp_async_16",
                8 => "cp_async_8",
                _ => "cp_async_4",
            });
            let chunk_shape: Vec<usize> = s
                .shape
                .iter()
                .enumerate()
                .map(|(d, &n)| if d == rank - 1 { n / v } else { n })
                .collect();
            let chunks = total / v;
            let dst_base = cx.fresh("sdst");
            cx.w.line(format!(
                "const uint32_t {dst_base} = tilus_smem_addr({ptr});"
            ));
            let unravel = |c: usize| -> Vec<i64> {
                let mut out = vec![0i64; rank];
                let mut c = c;
                for d in (0..rank).rev() {
                    out[d] = (c % chunk_shape[d]) as i64;
                    c /= chunk_shape[d];
                }
                out[rank - 1] *= v as i64;
                out
            };
            let per_thread = chunks.div_ceil(threads);
            // Affine distribution when every thread has the same number of chunks, or when
            // there are fewer chunks than threads (the first `chunks` threads copy one each).
            let active = threads.min(chunks);
            let affine = if chunks.is_multiple_of(threads) || chunks < threads {
                let vals: Vec<Vec<i64>> = (0..active).map(unravel).collect();
                let ok = (0..active).all(|t| {
                    (0..per_thread).all(|k| {
                        let a = unravel(t + k * threads);
                        let b: Vec<i64> = vals[t]
                            .iter()
                            .zip(unravel(k * threads))
                            .map(|(x, y)| x + y)
                            .collect();
                        a == b
                    })
                });
                if ok {
                    derive_terms(&vals, active)
                } else {
                    None
                }
            } else {
                None
            };
            let fname = format!("tilus_cp_async_{bytes}");
            if let Some(terms) = affine {
                let lm = LayoutMap {
                    shape: vec![0; rank],
                    threads: active,
                    locals: 1,
                    terms,
                    local_index: vec![vec![0; rank]],
                };
                if active < threads {
                    cx.w.open(format!("if ({TID} < {active})"));
                }
                let mut tnames = Vec::new();
                for d in 0..rank {
                    let e = lm.thread_expr(d, TID, active);
                    if e == "0" {
                        tnames.push("0".to_string());
                    } else {
                        let n = cx.fresh(&format!("c{d}"));
                        cx.w.line(format!("const int {n} = {e};"));
                        tnames.push(n);
                    }
                }
                let offs: Vec<Vec<i64>> = (0..per_thread).map(|k| unravel(k * threads)).collect();
                // Chunk k of thread t is at tile index unravel(t) + offs[k] (checked above).
                let classes = if bits >= 8 {
                    let lin: Vec<Vec<i64>> = offs
                        .iter()
                        .map(|off| {
                            (0..active)
                                .map(|t| {
                                    let at = unravel(t);
                                    (0..rank)
                                        .map(|d| (at[d] + off[d]) * l.strides[slead + d] as i64)
                                        .sum()
                                })
                                .collect()
                        })
                        .collect();
                    address_classes(cx, &sbase, &l, &lin)
                } else {
                    None
                };
                match classes {
                    Some((konst, class_of)) => {
                        let esz = (bits / 8) as i64;
                        // The run-time part of the shared base (a multiple of the swizzle's
                        // period: it passes through the swizzle).
                        let mut rterms = Vec::new();
                        for (d, e) in sbase.iter().enumerate() {
                            if cx.facts.constant(e).is_none() {
                                let x = cx.expr(e);
                                rterms
                                    .push(crate::codegen::expr::mul_const(&x, l.strides[d] as i64));
                            }
                        }
                        let sr = cx.fresh("sr");
                        cx.w.line(format!(
                            "const int {sr} = {};",
                            crate::codegen::expr::sum(&rterms)
                        ));
                        // The thread's global element offset (chunk 0), as gather writes it.
                        let mut glin = Vec::new();
                        for d in 0..grank {
                            let x = if d < glead || tnames[d - glead] == "0" {
                                gidx[d].clone()
                            } else {
                                format!("{} + {}", gidx[d], tnames[d - glead])
                            };
                            glin.push(if d == grank - 1 {
                                format!("({x})")
                            } else {
                                format!("(long long)({x}) * {}", g.strides[d])
                            });
                        }
                        let go = cx.fresh("go");
                        cx.w.line(format!("const long long {go} = {};", glin.join(" + ")));
                        let mut names: Vec<Option<String>> = vec![None; per_thread];
                        for (k, &(c, delta)) in class_of.iter().enumerate() {
                            let sa = match &names[c] {
                                Some(a) => a.clone(),
                                None => {
                                    let mut t = Vec::new();
                                    for d in 0..rank {
                                        t.push(crate::codegen::expr::mul_const(
                                            &add_const(&tnames[d], offs[c][d]),
                                            l.strides[slead + d] as i64,
                                        ));
                                    }
                                    let y = add_const(&crate::codegen::expr::sum(&t), konst);
                                    let a = cx.fresh("sa");
                                    cx.w.line(format!(
                                        "const uint32_t {a} = {dst_base} + (uint32_t)({}) * {esz}u;",
                                        crate::codegen::expr::sum(&[
                                            sr.clone(),
                                            swizzle_c(&y, l.swizzle)
                                        ])
                                    ));
                                    names[c] = Some(a.clone());
                                    a
                                }
                            };
                            let sbytes = (delta as i32 as u32).wrapping_mul(esz as u32);
                            let saddr = if sbytes == 0 {
                                sa
                            } else {
                                format!("{sa} + {sbytes}u")
                            };
                            // The chunk's global offset from chunk 0: constants times strides.
                            let mut dterms = vec![go.clone()];
                            for d in glead..grank {
                                let o = offs[k][d - glead];
                                if o == 0 {
                                    continue;
                                }
                                dterms.push(if d == grank - 1 {
                                    format!("{o}")
                                } else {
                                    format!("(long long)({o}) * {}", g.strides[d])
                                });
                            }
                            let idx: Vec<String> = (0..rank)
                                .map(|d| add_const(&tnames[d], offs[k][d]))
                                .collect();
                            let (mask, _, _) = gather(&idx);
                            let m = cx.fresh("m");
                            cx.w.line(format!("const bool {m} = {mask};"));
                            // A masked chunk reads nothing from the buffer's start: the
                            // offset, not the pointer, is selected.
                            cx.w.line(format!(
                                "{fname}({saddr}, (const void*)({} + ({m} ? {} : 0ll) * {esz}), {m} ? {bytes}u : 0u);",
                                g.ptr,
                                dterms.join(" + ")
                            ));
                        }
                    }
                    None => {
                        cx.w.line(soff_line.clone());
                        for off in &offs {
                            let idx: Vec<String> =
                                (0..rank).map(|d| add_const(&tnames[d], off[d])).collect();
                            let (mask, gaddr, selem) = gather(&idx);
                            let m = cx.fresh("m");
                            cx.w.line(format!("const bool {m} = {mask};"));
                            let swz = swizzle_c(&selem, l.swizzle);
                            cx.w.line(format!(
                                "{fname}({dst_base} + (uint32_t)({swz}){}, {m} ? (const void*)({gaddr}) : (const void*){}, {m} ? {bytes}u : 0u);",
                                byte_scale(bits),
                                g.ptr
                            ));
                        }
                    }
                }
                if active < threads {
                    cx.w.close();
                }
            } else {
                cx.w.line(soff_line.clone());
                let c = cx.fresh("c");
                cx.w.open(format!(
                    "for (int {c} = {TID}; {c} < {chunks}; {c} += {threads})"
                ));
                let idx = unravel_c(&c, &chunk_shape, v);
                let (mask, gaddr, selem) = gather(&idx);
                let m = cx.fresh("m");
                cx.w.line(format!("const bool {m} = {mask};"));
                let swz = swizzle_c(&selem, l.swizzle);
                cx.w.line(format!(
                    "{fname}({dst_base} + (uint32_t)({swz}){}, {m} ? (const void*)({gaddr}) : (const void*){}, {m} ? {bytes}u : 0u);",
                    byte_scale(bits),
                    g.ptr
                ));
                cx.w.close();
            }
        }
        None => {
            // Synchronous element copy (the copy is complete before any wait).
            let dst_name = cx.name(dst);
            cx.note(format!(
                "copy_async into `{dst_name}`: no 4-, 8- or 16-byte chunk of its last dimension \
                 ({last_extent} x {bits}-bit elements) divides it with an aligned start, so the \
                 copy is synchronous, one element a thread at a time"
            ));
            cx.w.line(soff_line.clone());
            let e = cx.fresh("e");
            cx.w.open(format!(
                "for (int {e} = {TID}; {e} < {total}; {e} += {threads})"
            ));
            let idx = unravel_c(&e, &s.shape, 1);
            let (mask, gaddr, selem) = gather(&idx);
            let m = cx.fresh("m");
            cx.w.line(format!("const bool {m} = {mask};"));
            let swz = swizzle_c(&selem, l.swizzle);
            if bits >= 8 {
                let ty = uint_type(bits);
                cx.w.line(format!(
                    "*({ty}*)({ptr} + ({swz}) * {}) = {m} ? *(const {ty}*)({gaddr}) : ({ty})0;",
                    bits / 8
                ));
            } else {
                // Sub-byte: read the element's bits, then insert them atomically.
                let tmp = cx.fresh("t");
                let gbit = gaddr_bit(&gaddr, &g.ptr, bits);
                let mut wb = WordBuilder::new(1);
                let mut lines = load_sub_byte(cx, &mut wb, 0, bits, &g.ptr, &gbit, Some(&m));
                lines.push(format!("uint32_t {tmp}[1];"));
                lines.extend(wb.finish(&tmp));
                for line in lines {
                    cx.w.line(line);
                }
                let sbit = format!("(long long)({swz}) * {bits}");
                for line in store_sub_byte(cx, &tmp, 0, bits, &ptr, &sbit, None) {
                    cx.w.line(line);
                }
            }
            cx.w.close();
        }
    }
    cx.w.close();
    Ok(())
}

/// ` * k` for the byte size of an element (`bits >= 8`), or ` * bits / 8` for sub-byte
/// elements, applied to a `uint32_t` element offset.
fn byte_scale(bits: u32) -> String {
    if bits >= 8 {
        format!(" * {}u", bits / 8)
    } else {
        format!(" * {bits}u / 8u")
    }
}

/// The bit address of a sub-byte element whose byte address expression is
/// `ptr + (lin) * bits / 8`: recover `(lin) * bits`.
fn gaddr_bit(gaddr: &str, ptr: &str, bits: u32) -> String {
    let lin = gaddr
        .strip_prefix(&format!("{ptr} + "))
        .and_then(|s| s.strip_suffix(&format!(" * {bits} / 8")))
        .unwrap_or("0");
    format!("{lin} * {bits}")
}

/// C expressions unravelling chunk index `c` over `shape` (row-major), the last one scaled by
/// `v`.
fn unravel_c(c: &str, shape: &[usize], v: usize) -> Vec<String> {
    let rank = shape.len();
    let mut out = vec![String::new(); rank];
    let mut div = 1usize;
    for d in (0..rank).rev() {
        let q = if div == 1 {
            c.to_string()
        } else {
            format!("({c} / {div})")
        };
        let x = if shape[d] == 1 {
            "0".to_string()
        } else if d == 0 {
            q
        } else {
            format!("({q} % {})", shape[d])
        };
        out[d] = if d == rank - 1 && v > 1 && x != "0" {
            format!("{x} * {v}")
        } else {
            x
        };
        div *= shape[d];
    }
    out
}
