//! The host side of [`QMatmulMethod::Lut`](super::QMatmulMethod::Lut): its tile rules and the
//! bit-plane re-layout of the weight (the kernel is `kernel::qmatmul_lut`).
//!
//! The kernel reads one token's activations through look-up tables: per k tile of 256, table
//! `T` (0..32) holds the 256 partial sums of activations `8T..8T + 8`, and one byte of a bit
//! plane (8 weights of one output column, bit `j` for k = `8T + j`) is one look-up. A `P`-bit
//! integer code is `P` planes, plane `p` counting `2^p` (the top plane of a signed type
//! `-2^(P-1)`: two's complement).
//!
//! Each thread loads its bytes of a tile as 16-byte chunks, chunk-major across the block's
//! threads (a warp's load is 512 contiguous bytes). Byte `i` of thread `th` of block column `bj`
//! in tile `t`, with `warp = th / 32`, `lane = th % 32`, `σ = lane / TG`, `lr = lane % TG` and
//! `i = (r · TG + s) · P + p`:
//!
//! ```text
//! offset = (((bj · tiles + t) · chunks + i / 16) · threads + th) · 16 + i % 16
//! column = bj · bn + (warp · R + r) · TG + lr
//! table  = σ · TG + (lr + s) % TG          (lane lr reads a different table at each step s)
//! byte   = Σ_j bit_p(code[t · 256 + 8 · table + j, column]) << j
//! ```

use super::config::{config_err, packed_bytes, QMatmulConfig, QMatmulError};
use crate::quant::QuantizedWeight;
use crate::DType;
use tilus_core::storage;

/// k per table tile: 32 tables of 8 activations.
pub(crate) const TILE_K: usize = 256;

/// The kernel parameters a valid look-up configuration derives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LutShape {
    /// Rows (output columns) per thread and lane set.
    pub rows: usize,
    /// Tables per scale group (`group_rows / 8`); lanes come in sets of this many.
    pub tables_per_group: usize,
    /// Bit planes: the weight type's bits.
    pub planes: usize,
    /// Two's complement codes: the top plane counts negative.
    pub signed: bool,
}

impl LutShape {
    /// Weight bytes each thread loads per table tile.
    pub fn thread_bytes(&self) -> usize {
        self.rows
            .saturating_mul(self.tables_per_group)
            .saturating_mul(self.planes)
    }
}

/// Check a [`QMatmulMethod::Lut`](super::QMatmulMethod::Lut) configuration; errors name the
/// field at fault.
pub(crate) fn lut_shape(c: &QMatmulConfig) -> Result<LutShape, QMatmulError> {
    let (planes, signed) = match c.wdtype {
        DType::UInt(b) if b <= 8 => (b as usize, false),
        DType::Int(b) if b <= 8 => (b as usize, true),
        other => {
            return Err(config_err(
                "wdtype",
                format!(
                    "{other}: the look-up method splits integer codes into bit planes; use u1..u8 \
                     or i2..i8"
                ),
            ))
        }
    };
    let tables_per_group =
        match c.group_rows {
            Some(g @ (32 | 64 | 128 | 256)) => g / 8,
            Some(g) => {
                return Err(config_err(
                    "group_rows",
                    format!("{g}; the look-up method takes groups of 32, 64, 128 or 256 rows"),
                ))
            }
            None => return Err(config_err(
                "group_rows",
                "per-channel scales; the look-up method takes groups of 32, 64, 128 or 256 rows",
            )),
        };
    if c.bm != 1 {
        return Err(config_err(
            "bm",
            format!(
                "{}; the look-up method builds one token's tables per block (bm = 1)",
                c.bm
            ),
        ));
    }
    if c.bk != 2 * TILE_K {
        return Err(config_err(
            "bk",
            format!(
                "{}; the look-up method walks k in pairs of tables tiles, bk = 512",
                c.bk
            ),
        ));
    }
    if !matches!(c.warps, 4 | 8 | 16) {
        return Err(config_err(
            "warps",
            format!(
                "{}; the look-up method splits a table's 256 entries over 4, 8 or 16 warps",
                c.warps
            ),
        ));
    }
    if c.stages != 2 {
        return Err(config_err(
            "stages",
            format!(
                "{}; the look-up method keeps two table stages (build one, read the other)",
                c.stages
            ),
        ));
    }
    let per_row = c.warps * tables_per_group;
    if c.bn > 4096 {
        return Err(config_err("bn", format!("{} exceeds 4096", c.bn)));
    }
    if c.bn == 0 || !c.bn.is_multiple_of(per_row) {
        return Err(config_err(
            "bn",
            format!(
                "{} is not a positive multiple of warps x group_rows / 8 = {per_row} (the rows \
                 one row of every thread covers)",
                c.bn
            ),
        ));
    }
    let shape = LutShape {
        rows: c.bn / per_row,
        tables_per_group,
        planes,
        signed,
    };
    if !shape.thread_bytes().is_multiple_of(16) {
        return Err(config_err(
            "bn",
            format!(
                "{}: each thread would hold {} bytes of weight per tile ({} rows x {} tables x \
                 {planes} planes), not a whole number of 16-byte loads",
                c.bn,
                shape.thread_bytes(),
                shape.rows,
                tables_per_group
            ),
        ));
    }
    // Two tiles of weight bytes live in registers (the one read, the one loading).
    if shape.thread_bytes() > 128 {
        return Err(config_err(
            "bn",
            format!(
                "{}: each thread would hold {} bytes of weight per tile ({} rows x {} tables x \
                 {planes} planes), more than 128 (two tiles are in registers)",
                c.bn,
                shape.thread_bytes(),
                shape.rows,
                tables_per_group
            ),
        ));
    }
    check_occupancy(c, &shape)?;
    Ok(shape)
}

/// Shared memory of one block: two stages of 32 f32 tables of 256 entries, and two stages of
/// the groups' activation sums.
pub(crate) fn shared_bytes(s: &LutShape) -> usize {
    2 * 32 * 256 * 4 + 2 * (32 / s.tables_per_group) * 4
}

/// `blocks_per_sm` blocks must fit a multiprocessor: their tables in its shared memory, and
/// at least 64 registers per thread (a block is compiled to `65536 / (threads ·
/// blocks_per_sm)`; fewer spill the weight tiles).
fn check_occupancy(c: &QMatmulConfig, s: &LutShape) -> Result<(), QMatmulError> {
    let blocks = c.blocks_per_sm;
    let threads = blocks.saturating_mul(32 * c.warps);
    if threads > 1024 {
        return Err(config_err(
            "blocks_per_sm",
            format!(
                "{blocks} blocks of {} warps would leave {} registers per thread, fewer than 64",
                c.warps,
                65536 / threads
            ),
        ));
    }
    let limit = super::program::target(c).max_shared_bytes;
    let shared = blocks.saturating_mul(shared_bytes(s));
    if shared > limit {
        return Err(config_err(
            "blocks_per_sm",
            format!(
                "{blocks} blocks need {shared} bytes of look-up tables, more than the {limit} \
                 bytes of shared memory"
            ),
        ));
    }
    Ok(())
}

/// Where thread `th`'s byte `i` of a tile comes from: `(column in the block, table, plane)`.
fn source(s: &LutShape, warps_rows: usize, th: usize, i: usize) -> (usize, usize, usize) {
    let tg = s.tables_per_group;
    let (warp, lane) = (th / 32, th % 32);
    let (set, lr) = (lane / tg, lane % tg);
    let (r, step, p) = (i / (tg * s.planes), i / s.planes % tg, i % s.planes);
    debug_assert!(warp * s.rows + r < warps_rows);
    let column = (warp * s.rows + r) * tg + lr;
    let table = set * tg + (lr + step) % tg;
    (column, table, p)
}

/// Visit every byte of block column `bj`'s slab: `(offset in the slab, first k of its table,
/// column, plane)`.
fn visit_slab(
    c: &QMatmulConfig,
    s: &LutShape,
    k: usize,
    bj: usize,
    mut visit: impl FnMut(usize, usize, usize, usize),
) {
    let threads = 32 * c.warps;
    let per = s.thread_bytes();
    let chunks = per / 16;
    let warps_rows = c.warps * s.rows;
    for t in 0..k / TILE_K {
        for th in 0..threads {
            for i in 0..per {
                let (column, table, p) = source(s, warps_rows, th, i);
                let offset = ((t * chunks + i / 16) * threads + th) * 16 + i % 16;
                visit(offset, t * TILE_K + 8 * table, bj * c.bn + column, p);
            }
        }
    }
}

/// Check a weight against the configuration (type, group, shape); errors name the field.
fn check_weight(w: &QuantizedWeight, c: &QMatmulConfig) -> Result<LutShape, QMatmulError> {
    let s = lut_shape(c)?;
    w.check()?;
    if w.dtype != c.wdtype {
        return Err(config_err(
            "wdtype",
            format!("{} but the weight holds {}", c.wdtype, w.dtype),
        ));
    }
    if Some(w.group_rows()) != c.group_rows {
        return Err(config_err(
            "group_rows",
            format!(
                "{:?} but the weight has groups of {} rows",
                c.group_rows,
                w.group_rows()
            ),
        ));
    }
    check_shape(c, w.k, w.n)?;
    Ok(s)
}

fn check_shape(c: &QMatmulConfig, k: usize, n: usize) -> Result<(), QMatmulError> {
    c.check_shape(1, n, k)
}

/// The weight's bit planes in the look-up kernel's order (module docs).
pub fn relayout_lut(w: &QuantizedWeight, c: &QMatmulConfig) -> Result<Vec<u8>, QMatmulError> {
    let s = check_weight(w, c)?;
    let (k, n) = (w.k, w.n);
    let codes = storage::unpack(w.dtype, &w.codes, k * n);
    let mut out = vec![0u8; packed_bytes("k", w.dtype, k, n)?];
    // A slab per block column (`k x bn` codes), slabs in parallel.
    let slab_bytes = out.len() / (n / c.bn);
    crate::parallel::for_each_chunk_mut(&mut out, slab_bytes, |bj, slab| {
        visit_slab(c, &s, k, bj, |offset, k0, column, p| {
            let mut byte = 0u8;
            for j in 0..8 {
                let code = codes[(k0 + j) * n + column];
                byte |= (((code >> p) & 1) as u8) << j;
            }
            slab[offset] = byte;
        });
    });
    Ok(out)
}

/// The packed `[k, n]` codes back from [`relayout_lut`]'s bytes.
pub fn relayout_lut_inverse(
    bytes: &[u8],
    c: &QMatmulConfig,
    k: usize,
    n: usize,
) -> Result<Vec<u8>, QMatmulError> {
    let s = lut_shape(c)?;
    check_shape(c, k, n)?;
    let len = packed_bytes("k", c.wdtype, k, n)?;
    if bytes.len() != len {
        return Err(QMatmulError::Buffer {
            arg: "bytes",
            expected: len,
            got: bytes.len(),
            what: format!("{k} x {n} {} codes", c.wdtype),
        });
    }
    let mut codes = vec![0u32; k * n];
    let slab_bytes = len / (n / c.bn);
    for bj in 0..n / c.bn {
        let slab = &bytes[bj * slab_bytes..(bj + 1) * slab_bytes];
        visit_slab(c, &s, k, bj, |offset, k0, column, p| {
            for j in 0..8 {
                codes[(k0 + j) * n + column] |= (((slab[offset] >> j) & 1) as u32) << p;
            }
        });
    }
    Ok(storage::pack(c.wdtype, &codes))
}
