//! The look-up-table path of the VQ-GEMV for one token (`docs/vq.md`, "One token by tables").
//!
//! A format with one codebook per matrix and vectors of 8 (AQLM) pays for its look-ups in
//! bank conflicts: a 16-byte codebook row read from 64 KiB at random lands on about 10
//! wavefronts per warp instead of 4, and every code still costs 8 multiply-adds. For one token
//! `x`, the dot product of every codebook entry with every 8-value slice of `x` can be made once
//! per call, as a table, and each code then becomes one 2-byte look-up and one add:
//!
//! `y[r] = scale[r] · Σ_j Σ_s T[j, s, codes[s, r, j]]`, `T[j, s, e] = Σ_v book[s, e, v] · x[8 j + v]`.
//!
//! [`vq_lut_table`] makes `T` with the tensor cores (`[entries, 16] · [16, 8]` per chunk: the
//! two stages' rows side by side against a block-diagonal slice of `x`), rounded to f16.
//! [`vq_lut_gemv`] walks a block of rows and a slice of chunks with the chunk's table in shared
//! memory (a ring of two by `cp.async`, or one table per block with two blocks per
//! multiprocessor: [`LutTiling::tables`]), up to 8 rows per thread at a step; its sums are added
//! into an f32 `[n]` sum by atomics, and [`super::kernel::vq_finalize`] writes `y` and zeroes
//! the sum.
//!
//! **Chunks.** The codes of a row are cut into chunks of 8 codes (`8 / R` vectors of all `R`
//! stages; slot `j = p · R + s` for vector `p` of the chunk and stage `s`). A chunk's table is
//! `[entries, 8]` f16, 16 bytes per entry. The host stores each row's chunk rotated by the row
//! (stored code `i` is slot `(i + r) % 8`), so at every step the 32 lanes of a warp read 8
//! different slots: an entry's 16 bytes are 4 banks, and the lanes of one slot pair spread over
//! the 8 entries' bank groups (about 2.5 wavefronts per look-up instead of 3.5 for a
//! slot-major table).
//!
//! **Codes** (`lut_codes`): per chunk, `2 + HB / 4` u32 words per row, stored word-major
//! (`[chunk, word, row]`, so a warp's load of one word is 128 contiguous bytes): two words of
//! the 8 codes' low bytes, then their high nibbles (`HB = 4`, up to 12-bit codes) or bytes
//! (`HB = 8`).
//!
//! **Range.** A table entry is a dot product of 8 values rounded to f16: it overflows where
//! `8 · max|book| · max|x|` passes 65504, and the overflow is an infinity (the VM's IEEE half
//! arithmetic) that reaches the output. The direct kernel's f16 dequantized rows have the same
//! kind of limit, 65504 on each `Σ_s book`, which `VqWeight::from_parts` checks; the
//! activations' share is only known on the device.

/// `T[c, e, j] = Σ_v book[e, 8 (j % R) + v] · x[8 (c · 8 / R + j / R) + v]` for the `chunks`
/// chunks of `x` (`k = 64 · chunks / R` values), from `book [E, 16]` (stage `s`'s row of entry
/// `e` in columns `8 s ..`, zeros past the last stage) into `table [chunks · E, 8]` f16. A block
/// makes `64 · W` entries of `CPB` chunks.
#[tilus::kernel(
    lazy,
    grid = [E / (64 * W), chunks / CPB],
    warps = W,
    space(W = [4], E = [256, 4096], R = [1, 2], CPB = [4]),
)]
pub fn vq_lut_table<const W: i32, const E: i32, const R: i32, const CPB: i32>(
    chunks: i32,
    x: Global<f16>,
    book: Global<f16>,
    table: GlobalMut<f16>,
) {
    let rows = 64 * W;
    // Vectors per chunk.
    let cp = 8 / R;
    let la = layout!(spatial(W, 1).local(4, 1).mma_a);
    let lb = layout!(replicated(W).mma_b);
    let lc = layout!(spatial(W, 1).local(4, 1).mma_c);
    let [be, bc] = block_indices();
    let a = load_global(view_global(book, [E, 16]), la, [be * rows, 0]);
    let gx = view_global(x, [chunks * cp * 8]);
    let gt = view_global(table, [chunks * E, 8]);
    // B[kk, j]: x's value `kk % 8` of the chunk's vector `j / R` where `kk / 8` is slot `j`'s
    // stage, zero elsewhere.
    let kk = arange(lb, 0, 0);
    let j = arange(lb, 1, 0);
    let own = eq(kk >> 3, j % R);
    let at = (j / R) * 8 + (kk & 7);
    // Written out, so that every chunk's slice of x is loaded before the first product waits
    // on its own (a chain of `CPB` round trips otherwise).
    #[unroll]
    for i in 0..CPB {
        let c = bc * CPB + i;
        let b = select(own, gather(gx, at + c * cp * 8), 0.0);
        let t = dot(a, b, register::<f32>(lc, 0.0));
        store_global(cast::<f16>(t), gt, [c * E + be * rows, 0]);
    }
}

/// `sum[r] += scale[r] · Σ_{chunks c of this block} Σ_i T[c, code_i(r, c), (i + r) % 8]` for the
/// `RS · 32 · W` rows of block `bi` and the chunks `bk · per .. (bk + 1) · per`, from the
/// re-laid `codes` (module docs) and the `table` of [`vq_lut_table`]. `sum` is `[n]` f32, zero
/// before the first block adds to it; `scales` is `[n]` (any buffer when `SCALE = 0`).
#[tilus::kernel(
    lazy,
    grid = [n / (RS * 32 * W), chunks / per],
    warps = W,
    space(W = [4], RS = [2], G = [1, 2], E = [256, 4096], HB = [0, 4], SCALE = [0, 1], TB = [1, 2]),
)]
#[allow(clippy::too_many_arguments)]
pub fn vq_lut_gemv<
    const W: i32,
    const RS: i32,
    const G: i32,
    const E: i32,
    const HB: i32,
    const SCALE: i32,
    const TB: i32,
>(
    n: i32,
    chunks: i32,
    per: i32,
    table: Global<f16>,
    codes: Global<u8>,
    scales: Global<f16>,
    sum: GlobalMut<f32>,
) {
    let threads = 32 * W;
    let wpu = 2 + HB / 4;
    let [bi, bk] = block_indices();
    let c0 = bk * per;
    let r0 = bi * RS * threads;
    let gt = view_global(table, [chunks * E, 8]);
    let gcodes = view_global::<u32>(codes, [chunks * wpu, n]);
    // The chunk tables (a ring of two, or one for two blocks per multiprocessor), and the
    // block's row sums.
    let stab = shared::<f16>([TB * E, 8]);
    let sacc = shared::<f32>([RS / G, G * threads]);
    // A step takes `G` rows per thread (rows `t`, `t + threads`, ..: coalesced words), each
    // two words of low bytes, its high parts, its 8 codes, its sum; `G` rows' words are in
    // flight at once.
    let llo = layout!(local(1, G).local(2, 1).spatial(1, threads));
    let lhi = layout!(local(1, G).local(max(HB / 4, 1), 1).spatial(1, threads));
    let lcode = layout!(local(1, G).local(8, 1).spatial(1, threads));
    let lrow = layout!(reduce(lcode, [0]));
    let steps = RS / G;
    // Stored code `i` of the thread's row is slot `(i + row) % 8` (`threads` is a multiple of 8).
    let slot = (arange(lcode, 0, 0) + arange(lcode, 1, 0)) & 7;
    let issue = |c: i32| {
        copy_async(
            gt,
            slice_shared(stab, [(c & (TB - 1)) * E, 0], [E, 8]),
            [(c0 + c) * E, 0],
        );
    };
    let words = |c: i32, q: i32, first: i32, l: Layout| {
        load_global(gcodes, l, [(c0 + c) * wpu + first, r0 + q * G * threads])
    };
    for rs in 0..steps {
        store_shared(register::<f32>(lrow, 0.0), sacc, [rs, 0]);
    }
    if TB == 2 {
        issue(0);
        commit_group();
    }
    // The codes of the next step, loaded one step ahead.
    let mut lo = words(0, 0, 0, llo);
    let mut hi = if HB > 0 { words(0, 0, 2, lhi) } else { () };
    for c in 0..per {
        if TB == 2 {
            if c + 1 < per {
                issue(c + 1);
            }
            commit_group();
            wait_group(1);
        } else {
            // One table: the other block on the multiprocessor runs while this one waits.
            issue(c);
            commit_group();
            wait_group(0);
        }
        sync();
        let tab = slice_shared(stab, [(c & (TB - 1)) * E, 0], [E, 8]);
        for rs in 0..steps {
            let low = cast::<i32>(view::<u8>(lo, lcode));
            let code = if HB == 0 {
                low
            } else if HB == 4 {
                low + (cast::<i32>(view::<u4>(hi, lcode)) << 8)
            } else {
                low + (cast::<i32>(view::<u8>(hi, lcode)) << 8)
            };
            // The next step (the block's last one reloads itself: in range, never used).
            let more = rs + 1 < steps;
            let nc = if more { c } else { min(c + 1, per - 1) };
            let nrs = if more { rs + 1 } else { 0 };
            lo = words(nc, nrs, 0, llo);
            if HB > 0 {
                hi = words(nc, nrs, 2, lhi);
            }
            let s = sum(cast::<f32>(lookup(tab, code, slot)), 0);
            let a = load_shared(sacc, lrow, [rs, 0]);
            store_shared(a + s, sacc, [rs, 0]);
        }
        // Every lane has read this buffer before the next iteration's copy refills it.
        sync();
    }
    let gs = view_global(sum, [n]);
    for rs in 0..steps {
        let mut a = load_shared(sacc, lrow, [rs, 0]);
        let at = r0 + rs * G * threads;
        if SCALE == 1 {
            let sv = load_global(view_global(scales, [1, n]), lrow, [0, at]);
            a = a * cast::<f32>(sv);
        }
        atomic_add(gs, arange(lrow, 1, at), a);
    }
}

use super::linear::high_bits;
use crate::vq::{arg_err, CodebookScope, VqConfig, VqError, VqWeight};
use half::f16;

/// Shared memory a [`vq_lut_gemv`] block may take: the ring of two chunk tables and its rows'
/// sums.
const SHARED_BUDGET: usize = 200 * 1024;
/// Shared memory of a one-table block that leaves room for a second on the multiprocessor
/// (228 KiB each, 1 KiB of it reserved per block).
const PAIR_BUDGET: usize = 113 * 1024;
/// Blocks [`LutTiling::for_shape`] aims for: about one per multiprocessor of an H100/H200 (a
/// block of 4096-entry tables fills a multiprocessor's shared memory).
const BLOCKS: usize = 128;

/// Whether the table path takes a format: one codebook per matrix, vectors of 8, one or two
/// stages, 256 to 4096 entries.
pub fn lut_applies(c: VqConfig) -> bool {
    c.scope == CodebookScope::Matrix
        && c.vector_size == 8
        && (1..=2).contains(&c.residuals)
        && (8..=12).contains(&c.log2_entries)
}

/// The blocks of [`vq_lut_gemv`] for one shape: `warps` per block, `rs` rows per thread (a
/// block owns `rs · 32 · warps` rows) and `per` chunks per block. A step reads the codes of
/// [`LutTiling::group`] rows per thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LutTiling {
    pub warps: usize,
    pub rs: usize,
    pub per: usize,
    /// Chunk tables in shared memory: 2 (a ring: the next table loads during this one's
    /// look-ups) or 1 (a block waits for each table, and two blocks share a multiprocessor).
    pub tables: usize,
}

/// Chunks of 8 codes per row of a `k`-column weight.
pub fn chunks(c: VqConfig, k: usize) -> usize {
    k / c.vector_size * c.residuals / 8
}

impl LutTiling {
    /// The rule: the widest block (16 warps where `n` allows) whose rows' sums fit beside the
    /// tables, as few row blocks as that allows (each reads the whole table once), and the k
    /// slices that bring the blocks to about 128 (one per multiprocessor); where that leaves a
    /// block fewer than 8 chunks, blocks of 8 warps on one table, two per multiprocessor. `None` where `n` is not a multiple of
    /// 128 or `k` has no whole chunk.
    pub fn for_shape(c: VqConfig, n: usize, k: usize) -> Option<LutTiling> {
        let chunks = chunks(c, k);
        let warps = [16, 8, 4].into_iter().find(|w| n.is_multiple_of(32 * w))?;
        if chunks == 0 || !k.is_multiple_of(64) {
            return None;
        }
        let threads = 32 * warps;
        let tables = 2 * c.entries() * 16;
        let max_rows = SHARED_BUDGET.checked_sub(tables)? / 4;
        let units = n / threads;
        let row_blocks = (1..=units).find(|d| units.is_multiple_of(*d) && n / d <= max_rows)?;
        let slices = (1..=chunks)
            .find(|q| chunks.is_multiple_of(*q) && row_blocks * q >= BLOCKS)
            .unwrap_or(chunks);
        let ring = LutTiling {
            warps,
            rs: units / row_blocks,
            per: chunks / slices,
            tables: 2,
        };
        // A block that walks few chunks waits a large share of its time on its tables: there,
        // blocks of half the warps on one table each, two to a multiprocessor, hide one
        // another's waits (perf note 41: 4-5% faster at 8192 x 8192 and 8192 x 28672, slower
        // at 57344 x 8192's 8 chunks per block).
        let pair = LutTiling {
            warps: warps / 2,
            tables: 1,
            ..ring
        };
        let fits = pair.shared(c) <= PAIR_BUDGET && n.is_multiple_of(pair.rows());
        Some(if ring.per < 8 && warps == 16 && fits {
            pair
        } else {
            ring
        })
    }

    /// Rows of a block.
    fn rows(&self) -> usize {
        self.rs * 32 * self.warps
    }

    /// Shared memory of a block: its tables and its rows' sums.
    fn shared(&self, c: VqConfig) -> usize {
        self.tables * c.entries() * 16 + self.rows() * 4
    }

    /// Check a tiling against a format and shape; errors name `lut`.
    pub fn check(&self, c: VqConfig, n: usize, k: usize) -> Result<(), VqError> {
        let chunks = chunks(c, k);
        let threads = 32 * self.warps;
        let bad = |msg: String| Err(arg_err("lut", msg));
        if ![4, 8, 16].contains(&self.warps) {
            return bad(format!("{} warps: 4, 8 or 16", self.warps));
        }
        if ![1, 2].contains(&self.tables) {
            return bad(format!("{} tables: 1 or 2", self.tables));
        }
        if self.rs == 0 || self.per == 0 {
            return bad("rs and per must be positive".into());
        }
        if !n.is_multiple_of(self.rs * threads) {
            return bad(format!(
                "{} rows per block do not divide n = {n}",
                self.rs * threads
            ));
        }
        if !chunks.is_multiple_of(self.per) {
            return bad(format!(
                "{} chunks per block do not divide the {chunks} chunks of a row",
                self.per
            ));
        }
        let shared = self.shared(c);
        if shared > SHARED_BUDGET {
            return bad(format!(
                "{shared} bytes of shared memory, more than {SHARED_BUDGET}"
            ));
        }
        Ok(())
    }

    /// Rows per thread and step: the largest divisor of `rs` up to 8, so that each thread has
    /// 8 rows' words (96 bytes of 12-bit codes) in flight.
    pub fn group(&self) -> usize {
        (1..=8.min(self.rs))
            .rev()
            .find(|g| self.rs.is_multiple_of(*g))
            .unwrap_or(1)
    }

    /// [`vq_lut_gemv`]'s configuration.
    pub fn gemv_config(&self, c: VqConfig) -> vq_lut_gemv::Config {
        vq_lut_gemv::Config {
            W: self.warps as i32,
            RS: self.rs as i32,
            G: self.group() as i32,
            E: c.entries() as i32,
            HB: high_bits(c) as i32,
            SCALE: c.channel_scale as i32,
            TB: self.tables as i32,
        }
    }
}

/// [`vq_lut_table`]'s configuration for a format and `k`.
pub fn table_config(c: VqConfig, k: usize) -> vq_lut_table::Config {
    let chunks = chunks(c, k);
    let cpb = [4, 2, 1]
        .into_iter()
        .find(|b| chunks.is_multiple_of(*b))
        .unwrap_or(1);
    vq_lut_table::Config {
        W: 4,
        E: c.entries() as i32,
        R: c.residuals as i32,
        CPB: cpb as i32,
    }
}

/// The codes as [`vq_lut_gemv`] reads them (module docs): `[chunk, word, row]` u32, row `r`'s
/// chunk rotated by `r % 8`, little-endian bytes.
pub fn lut_codes(w: &VqWeight) -> Vec<u8> {
    let c = w.config;
    let (n, r) = (w.n, c.residuals);
    let kv = w.k / c.vector_size;
    let cp = 8 / r;
    let wpu = 2 + high_bits(c) / 4;
    let chunks = chunks(c, w.k);
    let mut words = vec![0u32; chunks * wpu * n];
    for ch in 0..chunks {
        for row in 0..n {
            for i in 0..8 {
                let slot = (i + row) % 8;
                let (p, s) = (slot / r, slot % r);
                let code = w.codes[(s * n + row) * kv + ch * cp + p] as u32;
                let at = |word: usize| (ch * wpu + word) * n + row;
                words[at(i / 4)] |= (code & 0xFF) << (8 * (i % 4));
                match high_bits(c) {
                    4 => words[at(2)] |= ((code >> 8) & 0xF) << (4 * i),
                    8 => words[at(2 + i / 4)] |= ((code >> 8) & 0xFF) << (8 * (i % 4)),
                    _ => {}
                }
            }
        }
    }
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The codebook as [`vq_lut_table`] reads it: `[entries, 16]` f16, entry `e`'s row of stage `s`
/// in columns `8 s .. 8 s + 8`, zeros past the last stage.
pub fn lut_book(w: &VqWeight) -> Vec<f16> {
    let c = w.config;
    let e = c.entries();
    let mut out = vec![f16::ZERO; e * 16];
    for entry in 0..e {
        for s in 0..c.residuals {
            for v in 0..8 {
                out[entry * 16 + 8 * s + v] = f16::from_f32(w.codebooks[(s * e + entry) * 8 + v]);
            }
        }
    }
    out
}
