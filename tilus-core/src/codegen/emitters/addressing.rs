//! `item`, `gather`, `gather_rows`, `scatter`, `scatter_rows` and atomics: per local, an
//! address computed from a register.
//!
//! A global or shared tensor is addressed as one flat row-major array. Each local of the index
//! tensor becomes one guarded access `0 <= ix < numel` (masked: out-of-range gathers read 0,
//! stores and updates are skipped), so no index can touch memory outside the tensor. Shared
//! tensors (possibly slices of an allocation, possibly swizzled) turn the flat index into the
//! root element offset at run time. Stores and atomics of replicated elements are done by one
//! replica (the same guard as `store_global`). Where the value ranges
//! ([`crate::ir::value_ranges`]) prove every element of the index tensor inside a shared
//! tensor (its size is a constant), the guard is not emitted: a byte code scaled into a
//! codebook costs no compare and no select per look-up.
//!
//! `gather_rows` guards each index local once (`0 <= ix < rows`) and reads the whole row into
//! the out words of locals `[l * w, (l + 1) * w)`. A row of a shared table is read with vector
//! loads (`uint32_t`, `uint2`, `uint4`: `LDS`, `LDS.64`, `LDS.128`) when its address is provably
//! a multiple of the vector size: the view is compact row-major without swizzle (so a row is
//! contiguous), the allocation's byte offset is a multiple, and every origin term
//! `origin[d] * stride[d] * bytes` is one (by its stride, or by the origin's value: a constant
//! or a `let` the divisibility prover sees through); the row's `w * bytes` is a multiple by
//! choice of the vector. The widest such vector of at most 16 bytes is used, several per row
//! when the row is longer; otherwise each element is read alone, as `gather` does. A global
//! view starts at its pointer, so its rows are read by the widest vector of at most 16 bytes
//! that divides a row, as `load_global` reads its vectors: the pointer's alignment to it
//! becomes a launch assumption (the launcher refuses a misaligned argument by name, before the
//! kernel could fault).
//!
//! `scatter_rows` is the same access pattern stored: per index local one guarded row write
//! (`if (0 <= ix < rows)`) from the value's words of locals `[l * w, (l + 1) * w)`, with the
//! vector chosen by the same proof ([`rows_vector`]: `STS`, `STS.64`, `STS.128`; a global
//! table's as for `gather_rows`), per element otherwise. Replicas of an index element write
//! its row once: the replica guard of `scatter`, from the index layout (the value's has the
//! same threads).
//!
//! `f32` atomic max/min use the integer-compare lowering: a non-negative value (sign bit clear)
//! is combined with `atomicMax`/`atomicMin` on the bits as `int`, a negative one with
//! `atomicMin`/`atomicMax` on the bits as `unsigned`; each step is exact for every non-NaN
//! value, with `-0 < +0` (the interpreter's total order).

use super::global::replica_guard;
use super::shared::swizzle_c;
use crate::codegen::context::{Ctx, GlobalInfo, SharedInfo, SMEM};
use crate::codegen::expr::Divisible;
use crate::codegen::regs::{get_bits, word_count, WordBuilder};
use crate::codegen::{cast, CodegenError};
use crate::ir::{AtomicOp, Expr, Instruction, VarId, VarType};
use crate::DType;

/// A flat-addressed tensor: its element count and how to form an element's byte address.
struct Flat {
    dtype: DType,
    /// `const long long` holding the element count.
    numel: String,
    /// The element count where it is known at compile time (shared tensors).
    len: Option<i64>,
    target: Target,
}

enum Target {
    /// Byte pointer of a global tensor, and the parameter it comes from (`None`: a workspace
    /// the runtime allocates, aligned to 256 bytes).
    Global {
        ptr: String,
        param: Option<String>,
    },
    Shared(SharedInfo),
}

impl Flat {
    /// Byte address (a `uint8_t*` expression) of flat element `ix` (an in-range `int`).
    fn addr(&self, cx: &Ctx, ix: &str) -> String {
        let bytes = self.dtype.bits() / 8;
        match &self.target {
            Target::Global { ptr, .. } => format!("{ptr} + (long long){ix} * {bytes}"),
            Target::Shared(s) => {
                let root = &s.root_layout;
                let (rank, root_rank) = (s.shape.len(), root.rank());
                let lead = root_rank - rank;
                let compact = compact(s);
                let mut terms = Vec::new();
                if compact {
                    terms.push(ix.to_string());
                }
                for d in 0..root_rank {
                    if compact {
                        let origin = cx.expr(&s.origin[d]);
                        if origin != "0" {
                            terms.push(match root.strides[d] {
                                1 => format!("({origin})"),
                                st => format!("({origin}) * {st}"),
                            });
                        }
                        continue;
                    }
                    let origin = cx.expr(&s.origin[d]);
                    let mut part = if origin == "0" {
                        Vec::new()
                    } else {
                        vec![origin]
                    };
                    if d >= lead {
                        let k = d - lead;
                        let inner: usize = s.shape[k + 1..].iter().product();
                        let q = if inner == 1 {
                            ix.to_string()
                        } else {
                            format!("({ix} / {inner})")
                        };
                        part.push(if k == 0 {
                            q
                        } else {
                            format!("{q} % {}", s.shape[k])
                        });
                    }
                    if part.is_empty() {
                        continue;
                    }
                    let p = if part.len() == 1 {
                        part[0].clone()
                    } else {
                        format!("({})", part.join(" + "))
                    };
                    terms.push(match root.strides[d] {
                        1 => p,
                        st => format!("{p} * {st}"),
                    });
                }
                let off = if terms.is_empty() {
                    "0".to_string()
                } else {
                    terms.join(" + ")
                };
                shared_byte_addr(s, &off)
            }
        }
    }

    /// Byte address of element `(row, col)` (in-range `int` expressions) of a rank-2 tensor.
    /// A shared one is addressed through its strides directly, with no division whatever its
    /// strides and swizzle; a global one through its flat index (64-bit).
    fn addr_rc(&self, cx: &Ctx, row: &str, col: &str, w: usize) -> String {
        let s = match &self.target {
            Target::Global { ptr, .. } => {
                let bytes = self.dtype.bits() / 8;
                let flat = match (w, col) {
                    (1, _) => format!("(long long){row}"),
                    (_, "0") => format!("(long long){row} * {w}"),
                    _ => format!("((long long){row} * {w} + {col})"),
                };
                return format!("{ptr} + {flat} * {bytes}");
            }
            Target::Shared(s) => s,
        };
        let root = &s.root_layout;
        let lead = root.rank() - 2;
        let mut terms = Vec::new();
        for d in 0..root.rank() {
            let origin = cx.expr(&s.origin[d]);
            let mut part = Vec::new();
            if origin != "0" {
                part.push(format!("({origin})"));
            }
            let own = match d.checked_sub(lead) {
                Some(0) => row,
                Some(1) => col,
                _ => "0",
            };
            if own != "0" {
                part.push(own.to_string());
            }
            let p = match part.len() {
                0 => continue,
                1 => part.pop().unwrap_or_default(),
                _ => format!("({})", part.join(" + ")),
            };
            terms.push(match root.strides[d] {
                1 => p,
                st => format!("{p} * {st}"),
            });
        }
        let off = if terms.is_empty() {
            "0".to_string()
        } else {
            terms.join(" + ")
        };
        shared_byte_addr(s, &off)
    }
}

/// The byte address (`uint8_t*`) of unswizzled element offset `off` of `s`'s allocation.
fn shared_byte_addr(s: &SharedInfo, off: &str) -> String {
    let bytes = s.dtype.bits() / 8;
    let off = swizzle_c(&format!("({off})"), s.root_layout.swizzle);
    let base = if s.root_offset == 0 {
        SMEM.to_string()
    } else {
        format!("({SMEM} + {})", s.root_offset)
    };
    format!("{base} + ({off}) * {bytes}")
}

/// A compact row-major view (strides of its own shape, no swizzle): the flat index is the
/// offset from the view's first element, no division needed.
fn compact(s: &SharedInfo) -> bool {
    let root = &s.root_layout;
    let (rank, root_rank) = (s.shape.len(), root.rank());
    let lead = root_rank - rank;
    root.swizzle.is_none()
        && (0..rank).all(|k| root.strides[lead + k] == s.shape[k + 1..].iter().product::<usize>())
}

/// The widest vector (4, 8 or 16 bytes) that reads rows of `row_bytes` bytes of shared view
/// `s` at addresses provably multiples of its size, with `divisible` the scalar divisibility
/// prover (`divisible(e, d)`: `e % d == 0` always); `None` when not even 4 bytes are provable
/// (the rows are then read per element). See the module documentation.
fn row_vector(
    s: &SharedInfo,
    row_bytes: usize,
    divisible: &dyn Fn(&Expr, i64) -> bool,
) -> Option<usize> {
    if !compact(s) {
        return None;
    }
    let bytes = (s.dtype.bits() / 8) as usize;
    [16, 8, 4].into_iter().find(|&v| {
        row_bytes.is_multiple_of(v)
            && s.root_offset.is_multiple_of(v)
            && s.origin.iter().enumerate().all(|(d, origin)| {
                let step = s.root_layout.strides[d] * bytes;
                // `origin * step` is a multiple of `v` when `origin` is one of `v / gcd`.
                let need = v / gcd(step, v);
                need == 1 || divisible(origin, need as i64)
            })
    })
}

/// The vector (4, 8 or 16 bytes) for whole rows of `row_bytes` bytes of `f`, by
/// [`row_vector`] with the emitter's divisibility facts for a shared table (`None` where no
/// vector is provable: per element); for a global one the widest dividing the row, its
/// pointer's alignment a launch assumption.
fn rows_vector(cx: &mut Ctx, f: &Flat, row_bytes: usize) -> Option<usize> {
    match &f.target {
        Target::Shared(s) => {
            let facts = &cx.facts;
            row_vector(s, row_bytes, &|e, d| {
                facts.divisible(e, d) == Divisible::Yes
            })
        }
        Target::Global { param, .. } => {
            // Rows are consecutive from the pointer: one aligned to `v` aligns every row.
            let v = [16, 8, 4]
                .into_iter()
                .find(|v| row_bytes.is_multiple_of(*v))?;
            cx.assume_aligned(param, v as u32);
            Some(v)
        }
    }
}

/// The CUDA type of a `v`-byte vector access (4, 8 or 16), its zero, and the components that
/// hold its words in order (`""`: the value itself is the one word).
fn vector_type(v: usize) -> (&'static str, &'static str, &'static [&'static str]) {
    match v {
        16 => ("uint4", "make_uint4(0u, 0u, 0u, 0u)", &["x", "y", "z", "w"]),
        8 => ("uint2", "make_uint2(0u, 0u)", &["x", "y"]),
        _ => ("uint32_t", "0u", &[""]),
    }
}

/// The row width of a `gather_rows` source or `scatter_rows` destination (the verifier
/// checked it is a `[rows, w]` table with a constant `w`).
fn table_width(cx: &Ctx, table: VarId) -> Result<usize, CodegenError> {
    crate::ir::gather_rows_width(cx.p.ty(table)).ok_or_else(|| {
        cx.err(format!(
            "{} must be a [rows, w] table with a constant w",
            cx.ir_name(table)
        ))
    })
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Declare the element count of `v` (a global or shared tensor) and describe its addressing.
fn flat(cx: &mut Ctx, v: VarId, write: bool) -> Result<Flat, CodegenError> {
    let (dtype, numel, len, target) = match cx.p.ty(v) {
        VarType::Global(_) => {
            let g: GlobalInfo = cx.global(v)?;
            let bytes = g.dtype.bits() / 8;
            cx.assume_aligned(&g.ptr_param, bytes);
            let n = if g.dims.is_empty() {
                "1LL".to_string()
            } else {
                g.dims
                    .iter()
                    .map(|d| format!("(long long){d}"))
                    .collect::<Vec<_>>()
                    .join(" * ")
            };
            let ptr = if write {
                g.ptr.clone()
            } else {
                format!("(const uint8_t*){}", g.ptr)
            };
            let param = g.ptr_param.clone();
            (g.dtype, n, None, Target::Global { ptr, param })
        }
        VarType::Shared(_) => {
            let s = cx.shared_info(v)?;
            let n: usize = s.shape.iter().product();
            (s.dtype, format!("{n}LL"), Some(n as i64), Target::Shared(s))
        }
        other => {
            return Err(cx.err(format!(
                "{} must be a global or shared tensor, not {}",
                cx.ir_name(v),
                other.describe()
            )))
        }
    };
    if !matches!(dtype.bits(), 8 | 16 | 32) {
        return Err(cx.err(format!(
            "{} holds {dtype}; only 8-, 16- and 32-bit elements are addressed by index",
            cx.ir_name(v)
        )));
    }
    let name = cx.fresh("numel");
    cx.w.line(format!("const long long {name} = {numel};"));
    Ok(Flat {
        dtype,
        numel: name,
        len,
        target,
    })
}

/// The bounds check of one index local: `0 <= ix < n`, or nothing where the value ranges
/// ([`crate::ir::value_ranges`]) prove every element of the index tensor in range.
struct Guard(Option<String>);

impl Guard {
    /// `value`, or `zero` where the index is out of range.
    fn read(&self, value: &str, zero: &str) -> String {
        match &self.0 {
            Some(c) => format!("({c}) ? {value} : {zero}"),
            None => value.to_string(),
        }
    }
    /// The statement `stmt`, skipped where the index is out of range.
    fn write(&self, stmt: &str) -> String {
        match &self.0 {
            Some(c) => format!("if ({c}) {stmt}"),
            None => stmt.to_string(),
        }
    }
}

/// Whether every element of `index` provably lies in `0..n` (`n` known at compile time).
fn in_range(cx: &Ctx, index: VarId, n: Option<i64>) -> bool {
    n.zip(cx.ranges.of(index)).is_some_and(|(n, r)| r.within(n))
}

fn uint_type(bits: u32) -> &'static str {
    match bits {
        8 => "uint8_t",
        16 => "uint16_t",
        _ => "uint32_t",
    }
}

/// Declare `const int ix = index[i];` and its in-range test; returns (ix, condition).
fn index_local(cx: &mut Ctx, index: VarId, i: usize, f: &Flat) -> (String, Guard) {
    let ix = cx.fresh("ix");
    cx.w.line(format!("const int {ix} = (int){}[{i}];", cx.name(index)));
    let cond = (!in_range(cx, index, f.len))
        .then(|| format!("{ix} >= 0 && (long long){ix} < {}", f.numel));
    (ix, Guard(cond))
}

pub(crate) fn emit(cx: &mut Ctx, i: &Instruction) -> Result<(), CodegenError> {
    match i {
        Instruction::Item { out, x } => item(cx, *out, *x),
        Instruction::Gather { out, src, index } => gather(cx, *out, *src, *index),
        Instruction::Lookup {
            out,
            table,
            rows,
            cols,
        } => lookup(cx, *out, *table, *rows, *cols),
        Instruction::GatherRows {
            out, src, index, ..
        } => gather_rows(cx, *out, *src, *index),
        Instruction::Scatter { src, dst, index } => scatter(cx, *src, *dst, *index),
        Instruction::ScatterRows {
            src, dst, index, ..
        } => scatter_rows(cx, *src, *dst, *index),
        Instruction::Atomic {
            op,
            dst,
            index,
            value,
            compare,
            out,
        } => atomic(cx, *op, *dst, *index, *value, *compare, *out),
        _ => Err(cx.err("not an addressing instruction")),
    }
}

/// Every thread holds the one element at local 0.
fn item(cx: &mut Ctx, out: VarId, x: VarId) -> Result<(), CodegenError> {
    let (dtype, _) = cx.reg(x)?;
    let code = get_bits(&cx.name(x), 0, dtype.bits());
    let value = if dtype.is_float() {
        cast::decode_to_f32_expr(dtype, &code)
    } else {
        format!("(int){}", crate::codegen::scalar::decode(dtype, &code))
    };
    let line = format!("{} = {value};", cx.name(out));
    cx.w.line(line);
    Ok(())
}

fn gather(cx: &mut Ctx, out: VarId, src: VarId, index: VarId) -> Result<(), CodegenError> {
    let (_, layout) = cx.reg(index)?;
    cx.w.open("");
    let f = flat(cx, src, false)?;
    let bits = f.dtype.bits();
    let ty = uint_type(bits);
    let locals = layout.num_locals();
    let mut wb = WordBuilder::new(word_count(bits, locals));
    for l in 0..locals {
        let (ix, guard) = index_local(cx, index, l, &f);
        let v = cx.fresh("g");
        let addr = f.addr(cx, &ix);
        let read = guard.read(&format!("(uint32_t)*(const {ty}*)({addr})"), "0u");
        cx.w.line(format!("const uint32_t {v} = {read};"));
        if bits == 32 {
            wb.word(l, &v);
        } else {
            wb.field(l * bits as usize, bits, &v);
        }
    }
    // Written after every read: `out` may be the index tensor itself.
    for line in wb.finish(&cx.name(out)) {
        cx.w.line(line);
    }
    cx.w.close();
    Ok(())
}

/// `lookup(table, rows, cols)`: per local of `rows`, element `(row, col % C)` of the shared
/// `[R, C]` table (the vector `(row, col % C, ..)` of an `[R, C, W]` table: one load where its
/// alignment is provable, entries of 256-byte rows by the fast path below). A compact, unswizzled table of 256-byte rows read by `u8` rows (at least 256
/// of them, so no row is out of range) is addressed with one `PRMT` per element: the row's
/// byte, taken from its register word, becomes byte 1 of the offset and the column's byte
/// offset (`< 256`, the same for every look-up of a column: hoisted out of loops) byte 0,
/// `base + offset` then folds into the `LDS`. Any other compact, unswizzled table is read at
/// `base + col · bytes + row · (C · bytes)`, the column's part hoisted like the fast path's, so a
/// look-up costs one `LEA` of its row; its bounds check is dropped where the value ranges prove
/// the rows in `[0, R)` (a 12-bit code into 4096 rows). A strided or swizzled table is read as
/// in `gather`, one guarded read per local.
fn lookup(
    cx: &mut Ctx,
    out: VarId,
    table: VarId,
    rows: VarId,
    cols: VarId,
) -> Result<(), CodegenError> {
    let (rdt, rlay) = cx.reg(rows)?;
    let (_, clay) = cx.reg(cols)?;
    let lid = cx.layout(&rlay)?;
    let cid = cx.layout(&clay)?;
    let col_of = super::elementwise::broadcast_locals(
        &cx.layouts[lid].map,
        &cx.layouts[cid].map,
        cx.block_threads,
    )
    .map_err(|e| cx.err(format!("lookup: {e}")))?;
    cx.w.open("");
    let f = flat(cx, table, false)?;
    let Target::Shared(s) = &f.target else {
        return Err(cx.err("lookup reads a shared table"));
    };
    let (height, width) = (s.shape[0], s.shape[1]);
    // A rank-3 table's entries are vectors of `w` elements (the verifier: 4, 8 or 16 bytes).
    let w = s.shape.get(2).copied().unwrap_or(1);
    let bits = f.dtype.bits();
    let bytes = bits as usize / 8;
    let entry = w * bytes;
    // A vector entry is one load where its address is provably aligned, else element-wise.
    let vector = if w > 1 {
        rows_vector(cx, &f, entry).filter(|&v| v == entry)
    } else {
        None
    };
    let by_rows = compact(s) && (w == 1 || vector.is_some());
    let fast = by_rows && width * entry == 256 && height >= 256 && rdt == DType::UInt(8);
    let proven = in_range(cx, rows, Some(height as i64));
    let ty = uint_type(bits);
    let (rn, cn) = (cx.name(rows), cx.name(cols));
    let base = f.addr(cx, "0");
    // Each column's byte offset (or index), once per distinct column local.
    let mut col_offsets: Vec<Option<String>> = vec![None; col_of.iter().max().map_or(0, |m| m + 1)];
    let locals = rlay.num_locals();
    let mut wb = WordBuilder::new(word_count(bits, locals * w));
    for (l, &k) in col_of.iter().enumerate().take(locals) {
        let col = match &col_offsets[k] {
            Some(c) => c.clone(),
            None => {
                let c = cx.fresh("col");
                let scale = if by_rows { entry } else { 1 };
                cx.w.line(format!(
                    "const uint32_t {c} = ({} & {}u) * {scale}u;",
                    get_bits(&cn, k * 32, 32),
                    width - 1
                ));
                col_offsets[k] = Some(c.clone());
                c
            }
        };
        // The entry's address (compact tables), or its row for the element-wise read.
        let (addr, row) = if fast {
            let (word, byte) = (l / 4, l % 4);
            let a = format!(
                "{base} + __byte_perm({rn}[{word}], {col}, {}u)",
                0x5504 | (byte << 4)
            );
            (Some(a), None)
        } else {
            let row = cx.fresh("row");
            cx.w.line(format!(
                "const long long {row} = (long long){};",
                crate::codegen::scalar::decode(
                    rdt,
                    &get_bits(&rn, l * rdt.bits() as usize, rdt.bits())
                )
            ));
            let a =
                by_rows.then(|| format!("{base} + (uint32_t){row} * {}u + {col}", width * entry));
            (a, Some(row))
        };
        let guard = Guard(
            row.as_ref()
                .filter(|_| !proven)
                .map(|row| format!("{row} >= 0 && {row} < {height}LL")),
        );
        match (vector, &addr) {
            (Some(v), Some(a)) => {
                let (vty, zero, comps) = vector_type(v);
                let g = cx.fresh("lk");
                let read = guard.read(&format!("*(const {vty}*)({a})"), zero);
                cx.w.line(format!("const {vty} {g} = {read};"));
                for (j, c) in comps.iter().enumerate() {
                    let value = if c.is_empty() {
                        g.clone()
                    } else {
                        format!("{g}.{c}")
                    };
                    wb.word(l * entry / 4 + j, &value);
                }
            }
            _ => {
                for e in 0..w {
                    let v = cx.fresh("lk");
                    let read = match (&addr, &row) {
                        (Some(a), _) => format!("(uint32_t)*(const {ty}*)({a} + {}u)", e * bytes),
                        (None, Some(row)) => {
                            let ix =
                                format!("(int)(({row} * {width} + (long long){col}) * {w} + {e})");
                            format!("(uint32_t)*(const {ty}*)({})", f.addr(cx, &ix))
                        }
                        (None, None) => unreachable!("a row without an address"),
                    };
                    cx.w.line(format!("const uint32_t {v} = {};", guard.read(&read, "0u")));
                    let local = l * w + e;
                    if bits == 32 {
                        wb.word(local, &v);
                    } else {
                        wb.field(local * bits as usize, bits, &v);
                    }
                }
            }
        }
    }
    // Written after every read: `out` may be an operand.
    for line in wb.finish(&cx.name(out)) {
        cx.w.line(line);
    }
    cx.w.close();
    Ok(())
}

/// `gather_rows`: per index local one guarded row read, by vectors where the alignment is
/// provable (see the module documentation). The out layout is the index layout composed with
/// a local of `w` (the verifier checked it), so the row of index local `l` is out locals
/// `l * w ..`: `dim` does not change the registers, only the tile shape.
/// `gather_rows` from a register table ([`crate::ir::WarpTable`]): per index local and 32-bit
/// word of a row, one `__shfl_sync` per slot from the row's lane, the slot's value kept by a
/// select (none with one slot); a row outside the table reads zeros. Every lane of the warp
/// runs the shuffles (the verifier's placement gives each warp the whole table).
fn shuffle_rows(cx: &mut Ctx, out: VarId, src: VarId, index: VarId) -> Result<(), CodegenError> {
    let (dtype, tlay) = cx.reg(src)?;
    let (_, layout) = cx.reg(index)?;
    let place = crate::ir::warp_table(&tlay, cx.block_threads)
        .map_err(|e| cx.err(format!("gather_rows: {e}")))?;
    let bits = dtype.bits() as usize;
    let words = place.width * bits / 32;
    let (s, tab, idx) = (place.slots, cx.name(src), cx.name(index));
    let proven = in_range(cx, index, Some(place.rows as i64));
    cx.w.open("");
    let locals = layout.num_locals();
    let mut wb = WordBuilder::new(locals * words);
    for l in 0..locals {
        let ix = cx.fresh("ix");
        cx.w.line(format!("const int {ix} = (int){idx}[{l}];"));
        let (lane, slot) = if place.blocked {
            (format!("{ix} / {s}"), format!("{ix} % {s}"))
        } else {
            (format!("{ix} & 31"), format!("{ix} >> 5"))
        };
        let (ln, sn) = (cx.fresh("lane"), cx.fresh("slot"));
        cx.w.line(format!("const int {ln} = {lane};"));
        if s > 1 {
            cx.w.line(format!("const int {sn} = {slot};"));
        }
        let ok = (!proven).then(|| format!("(unsigned){ix} < {}u", place.rows));
        for k in 0..words {
            let v = cx.fresh("sh");
            cx.w.line(format!(
                "uint32_t {v} = __shfl_sync(0xffffffffu, {}, {ln});",
                get_bits(&tab, k * 32, 32)
            ));
            for j in 1..s {
                let t = cx.fresh("sh");
                let word = get_bits(&tab, (j * words + k) * 32, 32);
                cx.w.line(format!(
                    "const uint32_t {t} = __shfl_sync(0xffffffffu, {word}, {ln});"
                ));
                cx.w.line(format!("{v} = {sn} == {j} ? {t} : {v};"));
            }
            let value = match &ok {
                Some(ok) => format!("({ok} ? {v} : 0u)"),
                None => v,
            };
            wb.word(l * words + k, &value);
        }
    }
    // Written after every read: `out` may be the index tensor itself.
    for line in wb.finish(&cx.name(out)) {
        cx.w.line(line);
    }
    cx.w.close();
    Ok(())
}

fn gather_rows(cx: &mut Ctx, out: VarId, src: VarId, index: VarId) -> Result<(), CodegenError> {
    if matches!(cx.p.ty(src), VarType::Register(_)) {
        return shuffle_rows(cx, out, src, index);
    }
    let (_, layout) = cx.reg(index)?;
    let w = table_width(cx, src)?;
    cx.w.open("");
    let f = flat(cx, src, false)?;
    let bits = f.dtype.bits();
    let bytes = (bits / 8) as usize;
    let row_bytes = w * bytes;
    let vector = rows_vector(cx, &f, row_bytes);
    let proven = in_range(cx, index, f.len.map(|n| n / w as i64));
    let rows = cx.fresh("rows");
    if !proven {
        cx.w.line(format!("const long long {rows} = {} / {w};", f.numel));
    }
    let locals = layout.num_locals();
    let idx = cx.name(index);
    let mut wb = WordBuilder::new(word_count(bits, locals * w));
    for l in 0..locals {
        let ix = cx.fresh("ix");
        cx.w.line(format!("const int {ix} = (int){idx}[{l}];"));
        let guard = Guard((!proven).then(|| format!("{ix} >= 0 && (long long){ix} < {rows}")));
        match vector {
            Some(v) => {
                let (ty, zero, comps) = vector_type(v);
                let per = v / bytes;
                for k in 0..row_bytes / v {
                    let g = cx.fresh("g");
                    let addr = f.addr_rc(cx, &ix, &(k * per).to_string(), w);
                    let read = guard.read(&format!("*(const {ty}*)({addr})"), zero);
                    cx.w.line(format!("const {ty} {g} = {read};"));
                    // Rows are whole words here (`v` divides `row_bytes`, `v >= 4`).
                    let word = (l * row_bytes + k * v) / 4;
                    for (j, c) in comps.iter().enumerate() {
                        let value = if c.is_empty() {
                            g.clone()
                        } else {
                            format!("{g}.{c}")
                        };
                        wb.word(word + j, &value);
                    }
                }
            }
            None => {
                let ty = uint_type(bits);
                for c in 0..w {
                    let g = cx.fresh("g");
                    let addr = f.addr_rc(cx, &ix, &c.to_string(), w);
                    let read = guard.read(&format!("(uint32_t)*(const {ty}*)({addr})"), "0u");
                    cx.w.line(format!("const uint32_t {g} = {read};"));
                    let local = l * w + c;
                    if bits == 32 {
                        wb.word(local, &g);
                    } else {
                        wb.field(local * bits as usize, bits, &g);
                    }
                }
            }
        }
    }
    // Written after every read: `out` may be the index tensor itself.
    for line in wb.finish(&cx.name(out)) {
        cx.w.line(line);
    }
    cx.w.close();
    Ok(())
}

fn scatter(cx: &mut Ctx, src: VarId, dst: VarId, index: VarId) -> Result<(), CodegenError> {
    let (_, layout) = cx.reg(src)?;
    let lay = cx.layout(&layout)?;
    let guard = replica_guard(&cx.layouts[lay].map, cx.block_threads);
    cx.w.open("");
    let f = flat(cx, dst, true)?;
    if let Some(g) = &guard {
        cx.w.open(format!("if ({g})"));
    }
    let bits = f.dtype.bits();
    let ty = uint_type(bits);
    let arr = cx.name(src);
    for l in 0..layout.num_locals() {
        let (ix, guard) = index_local(cx, index, l, &f);
        let addr = f.addr(cx, &ix);
        let value = get_bits(&arr, l * bits as usize, bits);
        cx.w.line(guard.write(&format!("*({ty}*)({addr}) = ({ty}){value};")));
    }
    if guard.is_some() {
        cx.w.close();
    }
    cx.w.close();
    Ok(())
}

/// `scatter_rows`: per index local one guarded row write, by vectors where the alignment is
/// provable (see the module documentation), by one replica of each index element. The value's
/// layout is the index layout composed with a local of `w` (the verifier checked it), so the
/// row of index local `l` is the value's locals `l * w ..`.
fn scatter_rows(cx: &mut Ctx, src: VarId, dst: VarId, index: VarId) -> Result<(), CodegenError> {
    let (_, layout) = cx.reg(index)?;
    let w = table_width(cx, dst)?;
    let lay = cx.layout(&layout)?;
    let guard = replica_guard(&cx.layouts[lay].map, cx.block_threads);
    cx.w.open("");
    let f = flat(cx, dst, true)?;
    let bits = f.dtype.bits();
    let bytes = (bits / 8) as usize;
    let row_bytes = w * bytes;
    let vector = rows_vector(cx, &f, row_bytes);
    let proven = in_range(cx, index, f.len.map(|n| n / w as i64));
    let rows = cx.fresh("rows");
    if !proven {
        cx.w.line(format!("const long long {rows} = {} / {w};", f.numel));
    }
    if let Some(g) = &guard {
        cx.w.open(format!("if ({g})"));
    }
    let (idx, arr) = (cx.name(index), cx.name(src));
    for l in 0..layout.num_locals() {
        let ix = cx.fresh("ix");
        cx.w.line(format!("const int {ix} = (int){idx}[{l}];"));
        cx.w.open(if proven {
            String::new()
        } else {
            format!("if ({ix} >= 0 && (long long){ix} < {rows})")
        });
        match vector {
            Some(v) => {
                let (ty, _, comps) = vector_type(v);
                let per = v / bytes;
                for k in 0..row_bytes / v {
                    let addr = f.addr_rc(cx, &ix, &(k * per).to_string(), w);
                    // Rows are whole words here (`v` divides `row_bytes`, `v >= 4`).
                    let word = (l * row_bytes + k * v) / 4;
                    let words: Vec<String> = (0..comps.len())
                        .map(|j| format!("{arr}[{}]", word + j))
                        .collect();
                    let value = if comps.len() == 1 {
                        words[0].clone()
                    } else {
                        format!("make_{ty}({})", words.join(", "))
                    };
                    cx.w.line(format!("*({ty}*)({addr}) = {value};"));
                }
            }
            None => {
                let ty = uint_type(bits);
                for c in 0..w {
                    let addr = f.addr_rc(cx, &ix, &c.to_string(), w);
                    let value = get_bits(&arr, (l * w + c) * bits as usize, bits);
                    cx.w.line(format!("*({ty}*)({addr}) = ({ty}){value};"));
                }
            }
        }
        cx.w.close();
    }
    if guard.is_some() {
        cx.w.close();
    }
    cx.w.close();
    Ok(())
}

/// The call performing one update; `a` is the byte address, `v` and `c` the value and compared
/// codes (`uint32_t`); the result is the old code as `uint32_t`.
fn atomic_call(op: AtomicOp, dtype: DType, a: &str, v: &str, c: &str) -> String {
    let (ptr, val, cmp) = match dtype {
        DType::Int(32) => (
            format!("(int*)({a})"),
            format!("(int){v}"),
            format!("(int){c}"),
        ),
        _ => (
            format!("(unsigned int*)({a})"),
            v.to_string(),
            c.to_string(),
        ),
    };
    let call = match (op, dtype) {
        (AtomicOp::Add, DType::F32) => {
            format!("__float_as_uint(atomicAdd((float*)({a}), __uint_as_float({v})))")
        }
        (AtomicOp::Max | AtomicOp::Min, DType::F32) => {
            let (pos, neg) = if op == AtomicOp::Max {
                ("atomicMax", "atomicMin")
            } else {
                ("atomicMin", "atomicMax")
            };
            format!(
                "(({v} >> 31) == 0u ? (uint32_t){pos}((int*)({a}), (int){v}) : {neg}((unsigned int*)({a}), {v}))"
            )
        }
        (AtomicOp::Cas, _) => format!("atomicCAS({ptr}, {cmp}, {val})"),
        _ => format!("{}({ptr}, {val})", op.cuda_name()),
    };
    format!("(uint32_t){call}")
}

fn atomic(
    cx: &mut Ctx,
    op: AtomicOp,
    dst: VarId,
    index: VarId,
    value: VarId,
    compare: Option<VarId>,
    out: Option<VarId>,
) -> Result<(), CodegenError> {
    let (_, layout) = cx.reg(value)?;
    let lay = cx.layout(&layout)?;
    let guard = replica_guard(&cx.layouts[lay].map, cx.block_threads);
    if guard.is_some() && out.is_some() {
        return Err(cx.err("returning the old values of an atomic needs a layout without replicas"));
    }
    cx.w.open("");
    let f = flat(cx, dst, true)?;
    if !matches!(f.dtype, DType::Int(32) | DType::UInt(32) | DType::F32) {
        return Err(cx.err(format!("atomics on {} are not supported", f.dtype)));
    }
    if let Some(g) = &guard {
        cx.w.open(format!("if ({g})"));
    }
    let arr = cx.name(value);
    let cmp = compare.map(|c| cx.name(c));
    let mut olds = Vec::new();
    for l in 0..layout.num_locals() {
        let (ix, guard) = index_local(cx, index, l, &f);
        let addr = f.addr(cx, &ix);
        let v = format!("{arr}[{l}]");
        let c = cmp
            .as_ref()
            .map(|c| format!("{c}[{l}]"))
            .unwrap_or_default();
        let call = atomic_call(op, f.dtype, &addr, &v, &c);
        if out.is_some() {
            let o = cx.fresh("old");
            cx.w.line(format!("const uint32_t {o} = {};", guard.read(&call, "0u")));
            olds.push(o);
        } else {
            cx.w.line(guard.write(&format!("{call};")));
        }
    }
    if let Some(o) = out {
        let name = cx.name(o);
        for (l, v) in olds.iter().enumerate() {
            cx.w.line(format!("{name}[{l}] = {v};"));
        }
    }
    if guard.is_some() {
        cx.w.close();
    }
    cx.w.close();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{SharedLayout, Swizzle};

    fn info(dtype: DType, root: SharedLayout, offset: usize, origin: Vec<Expr>) -> SharedInfo {
        let rank = root.rank();
        SharedInfo {
            dtype,
            shape: root.shape[rank - 2..].to_vec(),
            root_layout: root,
            root_offset: offset,
            origin,
        }
    }

    /// Only constants are known here (no `let`s): the prover of the emitter, without facts.
    fn constant_divisible(e: &Expr, d: i64) -> bool {
        e.const_i32().is_some_and(|c| c as i64 % d == 0)
    }

    fn vector(s: &SharedInfo, w: usize) -> Option<usize> {
        let bytes = (s.dtype.bits() / 8) as usize;
        row_vector(s, w * bytes, &constant_divisible)
    }

    #[test]
    fn gather_rows_vectors_follow_the_provable_alignment() {
        let zero = || vec![Expr::Int(0), Expr::Int(0)];
        let book = |w| SharedLayout::row_major(&[256, w]);
        // A whole allocation at an aligned offset: the row's own size, up to 16 bytes.
        for (w, want) in [(2, Some(4)), (4, Some(8)), (8, Some(16)), (16, Some(16))] {
            assert_eq!(
                vector(&info(DType::F16, book(w), 1024, zero()), w),
                want,
                "w={w}"
            );
        }
        // 2-byte rows, or 6-byte rows: no vector divides them.
        assert_eq!(vector(&info(DType::F16, book(1), 0, zero()), 1), None);
        assert_eq!(vector(&info(DType::F16, book(3), 0, zero()), 3), None);
        // 12-byte rows: three 4-byte words each.
        assert_eq!(vector(&info(DType::F16, book(6), 0, zero()), 6), Some(4));
        // An allocation at byte 8 halves a 16-byte row's vector; at byte 2 none is provable.
        assert_eq!(vector(&info(DType::F16, book(8), 8, zero()), 8), Some(8));
        assert_eq!(vector(&info(DType::F16, book(8), 2, zero()), 8), None);
        // u8 rows of 4 and i32 rows of 2: one word, one uint2.
        assert_eq!(
            vector(&info(DType::UInt(8), book(4), 0, zero()), 4),
            Some(4)
        );
        assert_eq!(
            vector(&info(DType::Int(32), book(2), 0, zero()), 2),
            Some(8)
        );
        // A slice: constant origins count by their value, unknown ones by their stride.
        let root = SharedLayout::row_major(&[2, 256, 8]);
        let origin = |o: Vec<Expr>| info(DType::F16, root.clone(), 0, o);
        let var = || Expr::Var(crate::ir::VarId(0));
        assert_eq!(
            vector(&origin(vec![1.into(), 3.into(), 0.into()]), 8),
            Some(16)
        );
        assert_eq!(vector(&origin(vec![var(), var(), 0.into()]), 8), Some(16));
        // Columns from 2 on, or an unknown column: the row starts mid-vector.
        let cols = SharedLayout::row_major(&[256, 8]);
        let at = |o: Vec<Expr>| info(DType::F16, cols.clone(), 0, o);
        assert_eq!(vector(&at(vec![0.into(), 4.into()]), 8), Some(8));
        assert_eq!(vector(&at(vec![0.into(), 2.into()]), 8), Some(4));
        assert_eq!(vector(&at(vec![0.into(), var()]), 8), None);
        // Swizzled, or rows of a wider allocation (not compact): per element.
        let sw = book(8).with_swizzle(Swizzle::new(2, 0, 3).unwrap());
        assert_eq!(vector(&info(DType::F16, sw, 0, zero()), 8), None);
        let wide = SharedInfo {
            shape: vec![256, 4],
            ..info(DType::F16, book(8), 0, zero())
        };
        assert_eq!(vector(&wide, 4), None);
    }
}
