//! `load_global` and `store_global`, and the register <-> memory chunk moves shared with the
//! shared-memory emitters.
//!
//! A thread's locals are grouped into vectors of `v` consecutive locals that are consecutive in
//! the last dimension of the view (so contiguous in the row-major buffer); `v * bits` is 128, 64,
//! 32, 16 or 8 bits. A vector access also needs its first element's linear index to be a
//! multiple of `v`: the thread and local parts of the last-dimension index are checked at
//! compile time, the tile offset and the view's row length are proven multiples of `v` (or
//! become launch assumptions on parameters), and the pointer must be aligned to the vector's
//! size (a launch assumption). Under those conditions a vector is entirely inside or entirely
//! outside the view, so one mask guards it. Otherwise elements are accessed one at a time
//! (sub-byte elements with bit arithmetic; sub-byte stores with 32-bit atomics, because
//! neighbouring elements of other threads share the bytes).

use crate::codegen::context::Ctx;
use crate::codegen::expr::{add_const, int_lit, Divisible};
use crate::codegen::regmap::LayoutMap;
use crate::codegen::regs::{get_bits, hex, word_count, WordBuilder};
use crate::codegen::CodegenError;
use crate::ir::{Expr, VarId};
use crate::layout::Layout;

/// Largest power of two `v <= max_v` such that the locals split into aligned groups of `v`
/// locals `[g*v, g*v + v)` that are consecutive along the last dimension and start at a
/// last-dimension index that is a multiple of `v` for every thread.
pub(crate) fn contiguous_groups(map: &LayoutMap, max_v: usize) -> usize {
    let last = map.rank() - 1;
    let mut v = max_v.next_power_of_two();
    if v > max_v {
        v /= 2;
    }
    while v > 1 {
        let ok = map.locals.is_multiple_of(v)
            && map.thread_part_multiple_of(last, v as i64)
            && (0..map.locals / v).all(|g| {
                let b0 = &map.local_index[g * v];
                b0[last] % v as i64 == 0
                    && (1..v).all(|j| {
                        let b = &map.local_index[g * v + j];
                        b.iter().enumerate().all(|(d, &x)| {
                            if d == last {
                                x == b0[d] + j as i64
                            } else {
                                x == b0[d]
                            }
                        })
                    })
            });
        if ok {
            return v;
        }
        v /= 2;
    }
    1
}

/// Declarations loading a `width`-bit chunk at byte pointer `addr` (zero when `mask` is
/// false) that `wb` places at bits `[pos, pos+width)`; `pos` is a multiple of
/// `min(width, 32)`.
pub(crate) fn load_chunk(
    cx: &mut Ctx,
    wb: &mut WordBuilder,
    pos: usize,
    width: u32,
    addr: &str,
    mask: Option<&str>,
) -> Vec<String> {
    load_chunk_filled(cx, wb, pos, width, addr, mask, 0)
}

/// [`load_chunk`] whose masked-off chunk reads as `fill`, a 32-bit word of repeated element
/// codes (its low `width` bits for narrower chunks).
fn load_chunk_filled(
    cx: &mut Ctx,
    wb: &mut WordBuilder,
    pos: usize,
    width: u32,
    addr: &str,
    mask: Option<&str>,
    fill: u32,
) -> Vec<String> {
    let w = pos / 32;
    let sel = |load: String, zero: &str| match mask {
        Some(m) => format!("{m} ? {load} : {zero}"),
        None => load,
    };
    let t = cx.fresh("v");
    let f = hex(fill);
    match width {
        128 | 64 => {
            let (ty, n, zero) = if width == 128 {
                ("uint4", 4, format!("make_uint4({f}, {f}, {f}, {f})"))
            } else {
                ("uint2", 2, format!("make_uint2({f}, {f})"))
            };
            let zero = zero.as_str();
            for (k, f) in ["x", "y", "z", "w"].iter().take(n).enumerate() {
                wb.word(w + k, &format!("{t}.{f}"));
            }
            vec![format!(
                "const {ty} {t} = {};",
                sel(format!("*(const {ty}*)({addr})"), zero)
            )]
        }
        32 | 16 | 8 => {
            let ty = match width {
                32 => "uint32_t",
                16 => "uint16_t",
                _ => "uint8_t",
            };
            if width == 32 {
                wb.word(w, &t);
            } else {
                wb.field(pos, width, &t);
            }
            let narrow = if width == 32 {
                fill
            } else {
                fill & ((1u32 << width) - 1)
            };
            vec![format!(
                "const uint32_t {t} = {};",
                sel(format!("(uint32_t)*(const {ty}*)({addr})"), &hex(narrow))
            )]
        }
        _ => unreachable!("chunk widths are 8..128 bits"),
    }
}

/// Statements storing bits `[pos, pos+width)` of `arr` to byte pointer `addr` (if `mask`).
pub(crate) fn store_chunk(
    arr: &str,
    pos: usize,
    width: u32,
    addr: &str,
    mask: Option<&str>,
) -> Vec<String> {
    let w = pos / 32;
    let st = match width {
        128 => format!(
            "*(uint4*)({addr}) = make_uint4({arr}[{w}], {arr}[{}], {arr}[{}], {arr}[{}]);",
            w + 1,
            w + 2,
            w + 3
        ),
        64 => format!(
            "*(uint2*)({addr}) = make_uint2({arr}[{w}], {arr}[{}]);",
            w + 1
        ),
        32 => format!("*(uint32_t*)({addr}) = {arr}[{w}];"),
        16 => format!(
            "*(uint16_t*)({addr}) = (uint16_t){};",
            get_bits(arr, pos, 16)
        ),
        8 => format!("*(uint8_t*)({addr}) = (uint8_t){};", get_bits(arr, pos, 8)),
        _ => unreachable!("chunk widths are 8..128 bits"),
    };
    match mask {
        Some(m) => vec![format!("if ({m}) {st}")],
        None => vec![st],
    }
}

/// Declarations loading one sub-byte element (`bits` < 8) whose bit address is `bit` (a
/// `long long` expression) from byte pointer `base`; `wb` places it at bits `[pos, pos+bits)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn load_sub_byte(
    cx: &mut Ctx,
    wb: &mut WordBuilder,
    pos: usize,
    bits: u32,
    base: &str,
    bit: &str,
    mask: Option<&str>,
) -> Vec<String> {
    load_sub_byte_filled(cx, wb, pos, bits, base, bit, mask, 0)
}

/// [`load_sub_byte`] whose masked-off element reads as code `fill`.
#[allow(clippy::too_many_arguments)]
fn load_sub_byte_filled(
    cx: &mut Ctx,
    wb: &mut WordBuilder,
    pos: usize,
    bits: u32,
    base: &str,
    bit: &str,
    mask: Option<&str>,
    fill: u32,
) -> Vec<String> {
    let (q, sh, e) = (cx.fresh("q"), cx.fresh("sh"), cx.fresh("e"));
    let m = hex((1u32 << bits) - 1);
    let byte = format!("{base}[{q} >> 3]");
    let value = if 8 % bits == 0 {
        format!("(((uint32_t){byte} >> {sh}) & {m})")
    } else {
        format!(
            "((((uint32_t){byte} | ({sh} + {bits}u > 8u ? (uint32_t){base}[({q} >> 3) + 1] << 8 : 0u)) >> {sh}) & {m})"
        )
    };
    let value = match mask {
        Some(mk) => format!("{mk} ? {value} : {}", hex(fill)),
        None => value,
    };
    wb.field(pos, bits, &e);
    vec![
        format!("const long long {q} = {bit};"),
        format!("const uint32_t {sh} = (uint32_t)({q} & 7);"),
        format!("const uint32_t {e} = {value};"),
    ]
}

/// Statements storing bits `[pos, pos+bits)` of `arr` (`bits` < 8) at bit address `bit` of
/// byte pointer `base` (4-byte aligned) with 32-bit atomics: other threads may write the
/// neighbouring bits of the same word concurrently. `atomic` selects the function names
/// (`atomicAnd`/`atomicOr` work on global and shared memory alike).
pub(crate) fn store_sub_byte(
    cx: &mut Ctx,
    arr: &str,
    pos: usize,
    bits: u32,
    base: &str,
    bit: &str,
    mask: Option<&str>,
) -> Vec<String> {
    let (q, wp, sh, val) = (cx.fresh("q"), cx.fresh("wp"), cx.fresh("sh"), cx.fresh("c"));
    let m = hex((1u32 << bits) - 1);
    let mut body = vec![
        format!("const long long {q} = {bit};"),
        format!("uint32_t* {wp} = (uint32_t*)({base} + (({q} >> 5) << 2));"),
        format!("const uint32_t {sh} = (uint32_t)({q} & 31);"),
        format!("const uint32_t {val} = {};", get_bits(arr, pos, bits)),
        format!("atomicAnd({wp}, ~({m} << {sh}));"),
        format!("atomicOr({wp}, {val} << {sh});"),
    ];
    if 32 % bits != 0 {
        body.push(format!(
            "if ({sh} + {bits}u > 32u) {{ atomicAnd({wp} + 1, ~({m} >> (32u - {sh}))); atomicOr({wp} + 1, {val} >> (32u - {sh})); }}"
        ));
    }
    let mut out = Vec::new();
    match mask {
        Some(mk) => {
            out.push(format!("if ({mk}) {{"));
            out.extend(body.into_iter().map(|s| format!("  {s}")));
            out.push("}".to_string());
        }
        None => {
            out.push("{".to_string());
            out.extend(body.into_iter().map(|s| format!("  {s}")));
            out.push("}".to_string());
        }
    }
    out
}

/// The per-instruction view of a tile access to global memory.
struct Access {
    /// `const int` names of the view index of each view dim for local 0's thread part
    /// (`const long long` where the offset is an `i64`).
    idx: Vec<String>,
    /// Which dims have an `i64` offset: their mask compares 64 bits, so an offset past the
    /// `i32` range is masked as the interpreter masks it, never truncated into range.
    wide: Vec<bool>,
    /// `const long long` name of the linear element index of `idx`.
    lin: String,
    /// Number of leading view dims not covered by the tile.
    lead: usize,
    /// Elements per vector, and bits per vector (0 when scalar).
    v: usize,
    width: u32,
    map: LayoutMap,
}

/// Pick the vector width and declare the base indices; records assumptions.
fn plan_access(
    cx: &mut Ctx,
    g: &crate::codegen::context::GlobalInfo,
    offset: &[Expr],
    layout: &Layout,
    what: &str,
) -> Result<Access, CodegenError> {
    let lay = cx.layout(layout)?;
    let map = cx.layouts[lay].map.clone();
    let rank = g.dims.len();
    if offset.len() != rank || map.rank() > rank || map.rank() == 0 {
        return Err(cx.err(format!(
            "{what}: a rank-{} tile at a rank-{} offset of a rank-{rank} view",
            map.rank(),
            offset.len()
        )));
    }
    let lead = rank - map.rank();
    let bits = g.dtype.bits();
    // Vector width: the widest of 128..8 bits that the layout, offsets and view allow.
    let mut chosen = (1usize, 0u32, Divisible::Yes);
    for width in [128u32, 64, 32, 16, 8] {
        if width % bits != 0 || width / bits < 2 {
            continue;
        }
        let v = (width / bits) as usize;
        if contiguous_groups(&map, v) < v {
            continue;
        }
        let mut proof = cx.facts.divisible(&offset[rank - 1], v as i64);
        if rank >= 2 {
            proof = proof.and(cx.facts.divisible(&g.shape[rank - 1], v as i64));
        }
        if proof != Divisible::No {
            chosen = (v, width, proof);
            break;
        }
    }
    let (v, width, proof) = chosen;
    cx.assume(&proof);
    if width >= 16 {
        cx.assume_aligned(&g.ptr_param, width / 8);
    }
    let mut idx = Vec::new();
    let mut wide = Vec::new();
    for (d, off) in offset.iter().enumerate() {
        let n = cx.fresh(&format!("i{d}"));
        wide.push(cx.is_i64(off));
        let off = cx.expr(off);
        let e = if d >= lead {
            let t = &cx.layouts[lay].dims[d - lead];
            if t == "0" {
                off
            } else if off == "0" {
                t.clone()
            } else {
                format!("{off} + {t}")
            }
        } else {
            off
        };
        let ty = if wide[d] { "long long" } else { "int" };
        cx.w.line(format!("const {ty} {n} = {e};"));
        idx.push(n);
    }
    let lin = cx.fresh("lin");
    let terms: Vec<String> = (0..rank)
        .map(|d| {
            if d == rank - 1 {
                idx[d].clone()
            } else {
                format!("(long long){} * {}", idx[d], g.strides[d])
            }
        })
        .collect();
    cx.w.line(format!("const long long {lin} = {};", terms.join(" + ")));
    Ok(Access {
        idx,
        wide,
        lin,
        lead,
        v,
        width,
        map,
    })
}

impl Access {
    /// View index of local `i` in dim `d`.
    fn index(&self, d: usize, i: usize) -> String {
        if d < self.lead {
            self.idx[d].clone()
        } else {
            add_const(&self.idx[d], self.map.local_index[i][d - self.lead])
        }
    }

    /// In-view mask of local `i` (all dims; for a vector, its first element).
    fn mask(&self, g: &crate::codegen::context::GlobalInfo, i: usize) -> String {
        (0..self.idx.len())
            .map(|d| {
                let u = if self.wide[d] {
                    "unsigned long long"
                } else {
                    "unsigned"
                };
                format!("({u})({}) < ({u}){}", self.index(d, i), g.dims[d])
            })
            .collect::<Vec<_>>()
            .join(" && ")
    }

    /// Linear element index (`long long`) of local `i`: the base plus compile-time multiples
    /// of the strides.
    fn linear(&self, g: &crate::codegen::context::GlobalInfo, i: usize) -> String {
        let rank = self.idx.len();
        let mut terms = vec![self.lin.clone()];
        let mut constant = 0i64;
        for d in self.lead..rank {
            let b = self.map.local_index[i][d - self.lead];
            if b == 0 {
                continue;
            }
            if d == rank - 1 {
                constant += b;
            } else {
                terms.push(format!("(long long){} * {b}", g.strides[d]));
            }
        }
        if constant != 0 {
            terms.push(format!("{constant}"));
        }
        terms.join(" + ")
    }
}

/// `out = load_global(src, layout, offset)`.
pub(crate) fn load(
    cx: &mut Ctx,
    out: VarId,
    src: VarId,
    offset: &[Expr],
    layout: &Layout,
    fill: Option<f64>,
) -> Result<(), CodegenError> {
    let g = cx.global(src)?;
    let (dtype, _) = cx.reg(out)?;
    if dtype.bits() != g.dtype.bits() {
        return Err(cx.err("load_global: the register tensor's dtype differs from the view's"));
    }
    // The fill code (converted as the interpreter does), repeated over a word for vectors.
    let code = match fill {
        Some(v) => g
            .dtype
            .fill_code(v)
            .map_err(|e| cx.err(format!("the fill value {v}: {e}")))?,
        None => 0,
    };
    let fill_word = if 32 % g.dtype.bits() == 0 {
        (0..32 / g.dtype.bits()).fold(0u32, |w, k| w | code << (k * g.dtype.bits()))
    } else {
        code
    };
    cx.w.open("");
    let a = plan_access(cx, &g, offset, layout, "load_global")?;
    let arr = cx.name(out);
    let bits = g.dtype.bits();
    let locals = a.map.locals;
    let mut wb = WordBuilder::new(word_count(bits, locals));
    let mut lines = Vec::new();
    for gi in 0..locals / a.v {
        let i = gi * a.v;
        let mask = a.mask(&g, i);
        let lin = a.linear(&g, i);
        let pos = i * bits as usize;
        if a.width > 0 || bits >= 8 {
            let width = if a.width > 0 { a.width } else { bits };
            let addr = if bits >= 8 {
                format!("{} + ({lin}) * {}", g.ptr, bits / 8)
            } else {
                format!("{} + ({lin}) * {bits} / 8", g.ptr)
            };
            let chunk_fill = if width < g.dtype.bits() {
                code
            } else {
                fill_word
            };
            lines.extend(load_chunk_filled(
                cx,
                &mut wb,
                pos,
                width,
                &addr,
                Some(&mask),
                chunk_fill,
            ));
        } else {
            let bit = format!("({lin}) * {bits}");
            let m = format!("({mask})");
            lines.extend(load_sub_byte_filled(
                cx,
                &mut wb,
                pos,
                bits,
                &g.ptr,
                &bit,
                Some(&m),
                code,
            ));
        }
    }
    lines.extend(wb.finish(&arr));
    for l in lines {
        cx.w.line(l);
    }
    cx.w.close();
    Ok(())
}

/// `store_global(src, dst, offset)`.
pub(crate) fn store(
    cx: &mut Ctx,
    src: VarId,
    dst: VarId,
    offset: &[Expr],
) -> Result<(), CodegenError> {
    let g = cx.global(dst)?;
    let (dtype, layout) = cx.reg(src)?;
    if dtype.bits() != g.dtype.bits() {
        return Err(cx.err("store_global: the register tensor's dtype differs from the view's"));
    }
    cx.w.open("");
    let a = plan_access(cx, &g, offset, &layout, "store_global")?;
    let arr = cx.name(src);
    let bits = g.dtype.bits();
    if a.width == 0 && bits < 8 {
        cx.assume_aligned(&g.ptr_param, 4);
    }
    // Replicated threads hold the same elements: only the first replica stores.
    let replicas = replica_guard(&a.map, cx.block_threads);
    if let Some(guard) = &replicas {
        cx.w.open(format!("if ({guard})"));
    }
    let mut lines = Vec::new();
    for gi in 0..a.map.locals / a.v {
        let i = gi * a.v;
        let mask = a.mask(&g, i);
        let lin = a.linear(&g, i);
        let pos = i * bits as usize;
        if a.width > 0 {
            let addr = if bits >= 8 {
                format!("{} + ({lin}) * {}", g.ptr, bits / 8)
            } else {
                format!("{} + ({lin}) * {bits} / 8", g.ptr)
            };
            lines.extend(store_chunk(&arr, pos, a.width, &addr, Some(&mask)));
        } else if bits >= 8 {
            let ty = match bits {
                8 => "uint8_t",
                16 => "uint16_t",
                _ => "uint32_t",
            };
            let addr = format!("{} + ({lin}) * {}", g.ptr, bits / 8);
            lines.push(format!(
                "if ({mask}) *({ty}*)({addr}) = ({ty}){};",
                get_bits(&arr, pos, bits)
            ));
        } else {
            let bit = format!("({lin}) * {bits}");
            let m = format!("({mask})");
            lines.extend(store_sub_byte(cx, &arr, pos, bits, &g.ptr, &bit, Some(&m)));
        }
    }
    for l in lines {
        cx.w.line(l);
    }
    if replicas.is_some() {
        cx.w.close();
    }
    cx.w.close();
    Ok(())
}

/// A condition true for exactly one thread of each set of replicas (threads holding the same
/// elements), or `None` when no thread is replicated.
pub(crate) fn replica_guard(map: &LayoutMap, block_threads: usize) -> Option<String> {
    // Digits of the thread index that move no element: replicated digits. They are the
    // mixed-radix digits not covered by any term.
    let mut conds = Vec::new();
    // Walk digits from stride 1 upwards using the terms (which skip zero-weight digits).
    let mut stride = 1usize;
    let mut terms = map.terms.clone();
    terms.sort_by_key(|t| t.stride);
    for t in &terms {
        if t.stride > stride {
            // Digits between `stride` and `t.stride` are replicated: require them to be zero.
            conds.push(replicated_digit_zero(stride, t.stride));
        }
        stride = t.stride * t.size;
    }
    if stride < map.threads {
        conds.push(replicated_digit_zero(stride, map.threads));
    }
    if map.threads < block_threads {
        conds.push(format!(
            "{} < {}",
            crate::codegen::context::TID,
            int_lit(map.threads as i64)
        ));
    }
    if conds.is_empty() {
        None
    } else {
        Some(conds.join(" && "))
    }
}

/// `((tid / lo) % (hi / lo)) == 0`.
fn replicated_digit_zero(lo: usize, hi: usize) -> String {
    let tid = crate::codegen::context::TID;
    let size = hi / lo;
    let shifted = if lo == 1 {
        tid.to_string()
    } else {
        format!("({tid} / {lo})")
    };
    format!("{shifted} % {size} == 0")
}
