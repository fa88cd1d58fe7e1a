//! The codebook cache of VQ-LLM (issue 18, `docs/vq.md` "The three-tier codebook cache") as a
//! library component written in the kernel language: `#[helper]`s that a `#[kernel]` calls,
//! and [`vq_gemv_cached`], the VQ-GEMV built on them.
//!
//! A codebook's entries are stored most used first ([`crate::vq::VqWeight::reorder_by_frequency`]),
//! and split in three tiers by two knobs, `NREG` and `NSH`:
//!
//! - **registers**: entries `[0, NREG)` (a multiple of 32) of every residual stage, held whole
//!   by every warp, entry `e` of stage `r` on lane `e % 32` (row `r · NREG + e` of a
//!   `[R · NREG, V / 2]` i32 table, `(R · NREG / 32)` rows a lane). A look-up reads its entry
//!   from that lane with warp shuffles (`gather_rows` from registers: one `SHFL` per 32-bit
//!   word and row a lane, every look-up paying all of them whatever its code);
//! - **shared memory**: entries `[NREG, NREG + NSH)`, `[R · NSH, V / 2]` i32 per buffer (two
//!   buffers for per-tile codebooks, one for a single codebook): one load a look-up, with the
//!   bank conflicts of random rows;
//! - **global memory**: the rest, read from the whole codebook through L1.
//!
//! Each look-up runs all three reads with the others masked (a masked read makes no access, and
//! reads zeros), and ORs the words: one tier holds the entry, the others give zeros, so the
//! result is the entry bit for bit. `NREG` and `NSH` are chosen from the kernel's resource slack
//! ([`CacheTiers::for_kernel`]) and are in the autotuner's space ([`super::tune::tune_tiers`]).
//!
//! The component's contract: the calling kernel has the constants `R`, `E`, `V`, `NREG`, `NSH`
//! and `ONE` (one codebook for the whole matrix), and the parameters `hot_book` (the register
//! tier of every group, `[groups, R, NREG, V]` f16), `warm_book` (the shared tier, `[groups, R,
//! NSH, V]`) and `codebooks` (every entry, `[groups, R, E, V]`), as [`CachedWeight`] lays them
//! out. The operations are the paper's:
//!
//! - `cache_load(g, buf, warm, groups)`: start loading group `g`'s tiers: its shared tier into
//!   buffer `buf` of `warm` by `cp.async` (one commit group), its register tier returned;
//! - `cache_switch()`: wait for the shared tier loading and publish it to the block;
//! - `cache_access(hot, warm, buf, g, code, r, cold_rows)`: the entries of stage `r` for the
//!   `i32` codes `code` (rank 2, the rows widening dim 1), as `V / 2` i32 words each.

use super::linear::kernel_err;
use crate::runtime::{Context, DeviceBuffer};
use crate::vq::{arg_err, CodebookScope, VqConfig, VqError, VqWeight};
use half::f16;
use std::sync::Arc;

#[tilus::helpers]
pub mod kernels {
    /// load: group `g`'s shared tier into buffer `buf` of `warm` (one `cp.async` commit group),
    /// and its register tier, returned (a placeholder when `NREG = 0`).
    #[helper]
    fn cache_load(g: i32, buf: i32, warm: _, groups: i32) -> _ {
        let hv = V / 2;
        copy_async(
            view_global::<i32>(warm_book, [groups * R * NSH, hv]),
            slice_shared(warm, [buf * R * NSH, 0], [R * NSH, hv]),
            [g * R * NSH, 0],
        );
        commit_group();
        // Every warp holds the whole register tier (the shuffles read it in-warp).
        #[allow(replicated)]
        let table = if NREG > 0 {
            load_global(
                view_global::<i32>(hot_book, [groups * R * NREG, hv]),
                layout!(local(R * NREG / 32, 1).spatial(32, 1).local(1, hv)),
                [g * R * NREG, 0],
            )
        } else {
            // No register tier: a placeholder the look-ups never read.
            register::<i32>(layout!(spatial(32, 1).local(1, hv)), 0)
        };
        table
    }

    /// switch: the loading shared tier lands and every thread sees it (the register tier is
    /// the caller's value, already in hand).
    #[helper]
    fn cache_switch() {
        wait_group(0);
        sync();
    }

    /// access: stage `r`'s entries of group `g` for `code` (`i32`, rank 2), rows along dim 1,
    /// as i32 words: the three tiers' reads, each masked to its own entries, ORed.
    #[helper]
    fn cache_access(
        hot: _,
        warm: _,
        buf: i32,
        g: i32,
        code: Tensor,
        r: i32,
        cold_rows: i32,
    ) -> Tensor {
        let hv = V / 2;
        // The shared tier's slice: codes below NREG or past NREG + NSH fall outside it.
        let mut w = gather_rows(
            slice_shared(warm, [(buf * R + r) * NSH, 0], [NSH, hv]),
            code - NREG,
            1,
        );
        if NREG > 0 {
            let at = if R == 1 {
                code
            } else {
                select(code < NREG, code + r * NREG, -1)
            };
            w = w | gather_rows(hot, at, 1);
        }
        if NREG + NSH < E {
            let at = select(code >= NREG + NSH, code + (g * R + r) * E, -1);
            w = w | gather_rows(view_global::<i32>(codebooks, [cold_rows, hv]), at, 1);
        }
        w
    }

    /// `y[m, n] = scale[n] · Σ_k x[m, k] · W[n, k]` on the CUDA cores with the three-tier
    /// codebook cache (module docs): a block of `WARPS` warps owns `WARPS · RPW` output channels
    /// of one token (grid `[n / (WARPS · RPW), m]`: each token reads the weight again, so it
    /// serves one token), each warp `RPW` of them, its lanes along `k`, `CPL` codes a lane and
    /// step. Per step and stage: the codes (`u8` low bytes `[R · n, k / V]`; with `HB = 4` the
    /// high nibbles `[R · n, k / 2V]` beside them), one `cache_access`, the stages added in
    /// f16, multiplied by `x` in f32 and summed over the vector in registers; the lanes' sums
    /// are added once at the end. Per-tile codebooks (`ONE = 0`) switch every `tile_cols`,
    /// the next group's tiers loading during the current one. The host keeps `WARPS · RPW`
    /// dividing `tile_rows`, `32 · CPL · V` dividing `tile_cols`, and `NSH > 0`.
    #[tilus::kernel(
        lazy,
        grid = [n / (WARPS * RPW), m],
        warps = WARPS,
        space(
            WARPS = [4],
            RPW = [2, 4],
            CPL = [2],
            V = [4, 8],
            R = [1, 2],
            E = [256],
            HB = [0],
            NREG = [0, 32],
            NSH = [64, 224, 256],
            ONE = [0, 1],
            SCALE = [0, 1],
        ),
    )]
    #[allow(clippy::too_many_arguments)]
    pub fn vq_gemv_cached<
        const WARPS: i32,
        const RPW: i32,
        const CPL: i32,
        const V: i32,
        const R: i32,
        const E: i32,
        const HB: i32,
        const NREG: i32,
        const NSH: i32,
        const ONE: i32,
        const SCALE: i32,
    >(
        m: i32,
        n: i32,
        k: i32,
        tile_rows: i32,
        tile_cols: i32,
        x: Global<f16>,
        codes: Global<u8>,
        high: Global<u8>,
        hot_book: Global<f16>,
        warm_book: Global<f16>,
        codebooks: Global<f16>,
        scales: Global<f16>,
        y: GlobalMut<f16>,
    ) {
        let br = WARPS * RPW;
        // Codes a row and step, and the k they cover.
        let cpr = 32 * CPL;
        let ks = cpr * V;
        let [bj, bt] = block_indices();
        // A warp's rows, its lanes along k: `[br, cpr]` codes, `[br, cpr, V]` values.
        let lc = layout!(spatial(WARPS, 1).local(RPW, 1).spatial(1, 32).local(1, CPL));
        let lh = layout!(spatial(WARPS, 1)
            .local(RPW, 1)
            .spatial(1, 32)
            .local(1, CPL / 2));
        let lw = layout!(spatial(WARPS, 1, 1)
            .local(RPW, 1, 1)
            .spatial(1, 32, 1)
            .local(1, CPL, V));
        // The token's activations of a step, the same on every warp.
        let lxr = layout!(spatial(1, 1)
            .replicated(WARPS)
            .spatial(1, 32)
            .local(1, CPL * V));
        let lx = layout!(spatial(1, 1, 1)
            .replicated(WARPS)
            .spatial(1, 32, 1)
            .local(1, CPL, V));
        let kv = k / V;
        let gcodes = view_global(codes, [R * n, kv]);
        let ghigh = view_global(high, [R * n, kv / 2]);
        let gx = view_global(x, [m, k]);
        let col_tiles = k / tile_cols;
        let groups = (n / tile_rows) * col_tiles;
        let cold_rows = groups * R * E;
        let warm = shared::<i32>([(2 - ONE) * R * NSH, V / 2]);
        let g0 = bj * br / tile_rows * col_tiles;
        let tile_steps = tile_cols / ks;
        let mut acc = register::<f32>(layout!(reduce(lw, [2])), 0.0);
        let mut hot = cache_load(g0, 0, warm, groups);
        for kt in 0..col_tiles {
            let g = g0 + kt;
            // A mask, not a remainder: the value ranges see `buf` in {0, 1}.
            let buf = if ONE == 1 { 0 } else { kt & 1 };
            cache_switch();
            let cur = hot;
            if ONE == 0 {
                // The next group's tiers (the last group's again past the end) load during
                // this one; its shared buffer was last read before the switch's barrier.
                hot = cache_load(min(g + 1, groups - 1), 1 - buf, warm, groups);
            }
            for s in 0..tile_steps {
                let step = kt * tile_steps + s;
                let xs = cast::<f32>(view::<f16>(load_global(gx, lxr, [bt, step * ks]), lx));
                let lo = load_global(gcodes, lc, [bj * br, step * cpr]);
                let code = if HB == 0 {
                    cast::<i32>(lo)
                } else {
                    let hi = load_global(ghigh, lh, [bj * br, step * cpr / 2]);
                    cast::<i32>(lo) + (cast::<i32>(view::<u4>(hi, lc)) << 8)
                };
                let mut wv = view::<f16>(cache_access(cur, warm, buf, g, code, 0, cold_rows), lw);
                #[unroll]
                for r in 1..R {
                    let lo = load_global(gcodes, lc, [r * n + bj * br, step * cpr]);
                    let code = if HB == 0 {
                        cast::<i32>(lo)
                    } else {
                        let hi = load_global(ghigh, lh, [r * n + bj * br, step * cpr / 2]);
                        cast::<i32>(lo) + (cast::<i32>(view::<u4>(hi, lc)) << 8)
                    };
                    wv = wv + view::<f16>(cache_access(cur, warm, buf, g, code, r, cold_rows), lw);
                }
                acc = acc + sum(cast::<f32>(wv) * xs, 2);
            }
        }
        let mut total = sum(acc, 1);
        if SCALE == 1 {
            let sv = load_global(
                view_global(scales, [n, 1, 1]),
                layout!(reduce(reduce(lw, [2]), [1])),
                [bj * br, 0, 0],
            );
            total = total * cast::<f32>(sv);
        }
        store_global(
            cast::<f16>(total),
            view_global(y, [m * n, 1, 1]),
            [bt * n + bj * br, 0, 0],
        );
    }
}

pub use kernels::vq_gemv_cached;

/// The two knobs of the codebook cache: entries in registers (`n_reg`, a multiple of 32) and
/// in shared memory (`n_shared`, at least 1); the rest of a codebook's `entries` are read from
/// global memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CacheTiers {
    pub n_reg: usize,
    pub n_shared: usize,
}

impl CacheTiers {
    /// The shared memory the cache's shared tier may take in a block of [`vq_gemv_cached`]:
    /// 24 KiB. Every block fills its tier from L2 for a few channels (8 or 16), so a larger
    /// tier costs more in fills than it saves in global reads: AQLM-3 on the H100 (session 73,
    /// uniform codes, one token) took 360 / 198 / 61 us with 768 entries a stage in shared
    /// memory (24 KiB) on 57344 x 8192 / 8192 x 28672 / 8192 x 8192, 757 / 411 / 113 with 1536
    /// (48 KiB) and 468 / 279 / 77 with 384. GPTVQ-2's two tiles (4 KiB) and AQLM-2x8's
    /// codebooks (8 KiB) fit whole.
    pub const SHARED_BUDGET: usize = 24 * 1024;

    /// The tiers from the kernel's resource slack: every entry in shared memory that fits
    /// [`Self::SHARED_BUDGET`] (both buffers for per-tile codebooks), the rest in global
    /// memory, none in registers. A register tier costs every look-up its shuffles (one a word
    /// and row a lane, whatever the code) and a lane `R · V / 2` registers per 32 entries, and
    /// it was slower at every point measured on the H100 (session 73, uniform codes: 1.1-1.8x
    /// the same shared tier without it; `tilus bench vq --tiers`); it stays in the tuner's
    /// space ([`Self::candidates`]) for codes skewed enough to pay for it.
    pub fn for_kernel(c: VqConfig) -> CacheTiers {
        CacheTiers {
            n_reg: 0,
            n_shared: Self::shared_fit(c),
        }
    }

    /// Entries of every stage that fit [`Self::SHARED_BUDGET`], at most all of them.
    fn shared_fit(c: VqConfig) -> usize {
        let per_entry = Self::buffers(c) * c.residuals * c.vector_size * 2;
        (Self::SHARED_BUDGET / per_entry).min(c.entries())
    }

    /// Shared buffers of the cache: two for per-tile codebooks (the next loads during the
    /// current), one for a single codebook.
    pub fn buffers(c: VqConfig) -> usize {
        match c.scope {
            CodebookScope::Tile { .. } => 2,
            _ => 1,
        }
    }

    /// Checks the tiers against a format (errors name `tiers`).
    pub fn check(&self, c: VqConfig) -> Result<(), VqError> {
        let e = c.entries();
        let bad = |msg: String| Err(arg_err("tiers", msg));
        if !self.n_reg.is_multiple_of(32) || self.n_reg * c.residuals > 1024 {
            return bad(format!(
                "n_reg = {} must be a multiple of 32 (the lanes of a warp) with n_reg · residuals at most 1024",
                self.n_reg
            ));
        }
        if self.n_shared == 0 {
            return bad("n_shared must be at least 1 (the shared tier is the cache's base)".into());
        }
        if self.n_reg + self.n_shared > e {
            return bad(format!(
                "n_reg + n_shared = {} is more than the {e} entries of {}",
                self.n_reg + self.n_shared,
                c.name
            ));
        }
        let bytes = Self::buffers(c) * c.residuals * self.n_shared * c.vector_size * 2;
        if bytes > 200 * 1024 {
            return bad(format!(
                "the shared tier takes {bytes} bytes, more than the 200 KiB a block may have"
            ));
        }
        Ok(())
    }
}

impl CacheTiers {
    /// The points the autotuner measures ([`super::tune::tune_tiers`]): the rule's, and 0, 32
    /// or 64 entries in registers with the shared tier twice the budget, the budget, a half or
    /// a quarter of it (the rest of the entries from global memory), each valid for the format.
    pub fn candidates(c: VqConfig) -> Vec<CacheTiers> {
        let fit = Self::shared_fit(c);
        let mut out = vec![Self::for_kernel(c)];
        for n_reg in [0, 32, 64] {
            for shared in [2 * fit, fit, fit / 2, fit / 4] {
                let n_shared = shared.min(c.entries().saturating_sub(n_reg));
                let t = CacheTiers { n_reg, n_shared };
                if !out.contains(&t) && t.check(c).is_ok() {
                    out.push(t);
                }
            }
        }
        out
    }
}

impl tilus_runtime::TuneCandidate for CacheTiers {
    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "n_reg": self.n_reg, "n_shared": self.n_shared })
    }
}

impl std::fmt::Display for CacheTiers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "r{}s{}", self.n_reg, self.n_shared)
    }
}

/// Warps of a [`vq_gemv_cached`] block and codes a lane and step.
const WARPS: usize = 4;
const CPL: usize = 2;

/// Output channels a warp: 4 for vectors of 4, 2 for vectors of 8 (whose look-ups hold twice
/// the registers: 4 channels of AQLM's two stages took 165-193 registers a thread, ptxas for
/// sm_90a).
fn rows_per_warp(c: VqConfig) -> usize {
    16 / c.vector_size
}

/// Why [`vq_gemv_cached`] cannot serve a format and shape (`None`: it can).
pub fn cached_refusal(c: VqConfig, n: usize, k: usize) -> Option<String> {
    let step = 32 * CPL * c.vector_size;
    let (rows, cols) = c.tile(n, k);
    if c.e8p {
        return Some(format!(
            "{}'s lattice codebook is decoded, not looked up",
            c.name
        ));
    }
    if matches!(c.scope, CodebookScope::Columns { .. }) {
        return Some(format!(
            "{}'s codebooks change along k every vector (a KV cache format)",
            c.name
        ));
    }
    if c.log2_entries > 12 || !(c.vector_size == 4 || c.vector_size == 8) || c.residuals > 2 {
        return Some(format!(
            "{}: the kernel takes vectors of 4 or 8, up to 4096 entries and 2 stages",
            c.name
        ));
    }
    let block_rows = WARPS * rows_per_warp(c);
    if !rows.is_multiple_of(block_rows) || !cols.is_multiple_of(step) {
        return Some(format!(
            "a codebook tile of {rows} x {cols} is not whole blocks of {block_rows} rows and steps of {step} columns"
        ));
    }
    None
}

/// [`vq_gemv_cached`]'s configuration for a format and tiers.
pub fn cached_config(c: VqConfig, tiers: CacheTiers) -> vq_gemv_cached::Config {
    vq_gemv_cached::Config {
        WARPS: WARPS as i32,
        RPW: rows_per_warp(c) as i32,
        CPL: CPL as i32,
        V: c.vector_size as i32,
        R: c.residuals as i32,
        E: c.entries() as i32,
        HB: if c.log2_entries > 8 { 4 } else { 0 },
        NREG: tiers.n_reg as i32,
        NSH: tiers.n_shared as i32,
        ONE: (CacheTiers::buffers(c) == 1) as i32,
        SCALE: c.channel_scale as i32,
    }
}

/// A weight laid out for [`vq_gemv_cached`] with its tiers: the codes in their original order
/// (low bytes, and for 12-bit codes their high nibbles), each group's register and shared
/// tiers, and every entry. The entries are taken in the weight's order, so the tiers hold the
/// hottest where the weight is ordered by frequency
/// ([`VqWeight::reorder_by_frequency`], which k-means and the random weights already apply).
#[derive(Clone, Debug)]
pub struct CachedWeight {
    pub config: VqConfig,
    pub n: usize,
    pub k: usize,
    pub tiers: CacheTiers,
    /// Low bytes of the codes, `[R, n, k / V]`.
    pub codes: Arc<Vec<u8>>,
    /// High nibbles of 12-bit codes, `[R, n, k / 2V]` (code `2i` in the low nibble of byte
    /// `i`); one unused byte for 8-bit codes.
    pub high: Arc<Vec<u8>>,
    /// Entries `[0, n_reg)` of every group and stage, `[groups, R, n_reg, V]` (one unused value
    /// when `n_reg = 0`).
    pub hot: Vec<f16>,
    /// Entries `[n_reg, n_reg + n_shared)`, `[groups, R, n_shared, V]`.
    pub warm: Vec<f16>,
    /// Every entry, `[groups, R, entries, V]`.
    pub codebooks: Vec<f16>,
    /// `[n]`, or one unused value.
    pub scales: Vec<f16>,
}

impl CachedWeight {
    /// Lays `w` out for tiers `tiers` (errors name `weight` or `tiers`).
    pub fn new(w: &VqWeight, tiers: CacheTiers) -> Result<CachedWeight, VqError> {
        let c = w.config;
        if let Some(why) = cached_refusal(c, w.n, w.k) {
            return Err(arg_err("weight", format!("no cached VQ-GEMV: {why}")));
        }
        tiers.check(c)?;
        let codes = w.codes.iter().map(|&x| x as u8).collect();
        let high = if c.log2_entries > 8 {
            w.codes
                .chunks(2)
                .map(|p| ((p[0] >> 8) as u8 & 15) | (((p[1] >> 8) as u8 & 15) << 4))
                .collect()
        } else {
            vec![0]
        };
        let whole = CachedWeight {
            config: c,
            n: w.n,
            k: w.k,
            tiers,
            codes: Arc::new(codes),
            high: Arc::new(high),
            hot: Vec::new(),
            warm: Vec::new(),
            codebooks: w.codebooks.iter().map(|&x| f16::from_f32(x)).collect(),
            scales: match &w.scales {
                Some(s) => s.iter().map(|&x| f16::from_f32(x)).collect(),
                None => vec![f16::ONE],
            },
        };
        whole.with_tiers(tiers)
    }

    /// The kernel's configuration.
    pub fn config(&self) -> vq_gemv_cached::Config {
        cached_config(self.config, self.tiers)
    }

    fn dims(&self, x: usize, m: usize) -> Result<[i32; 5], VqError> {
        if m == 0 || m > 65535 {
            return Err(arg_err(
                "m",
                format!("{m}: must lie in 1..=65535 (one block row a token)"),
            ));
        }
        if x != m * self.k {
            return Err(arg_err(
                "x",
                format!("{x} values, expected m · k = {}", m * self.k),
            ));
        }
        let (tr, tc) = self.config.tile(self.n, self.k);
        Ok([m as i32, self.n as i32, self.k as i32, tr as i32, tc as i32])
    }

    /// `y [m, n]` on the interpreter.
    pub fn forward_cpu(&self, x: &[f16], m: usize) -> Result<Vec<f16>, VqError> {
        let [mi, n, k, tr, tc] = self.dims(x.len(), m)?;
        let mut y = vec![f16::NAN; m * self.n];
        vq_gemv_cached::interpret(
            &self.config(),
            mi,
            n,
            k,
            tr,
            tc,
            x,
            &self.codes,
            &self.high,
            &self.hot,
            &self.warm,
            &self.codebooks,
            &self.scales,
            &mut y,
        )
        .map_err(kernel_err)?;
        Ok(y)
    }

    /// The same weight with other tiers (the codes are shared, only the tiers are cut again).
    pub fn with_tiers(&self, tiers: CacheTiers) -> Result<CachedWeight, VqError> {
        tiers.check(self.config)?;
        let (e, v) = (self.config.entries(), self.config.vector_size);
        let tier = |from: usize, len: usize| -> Vec<f16> {
            let mut out: Vec<f16> = self
                .codebooks
                .chunks(e * v)
                .flat_map(|book| book[from * v..(from + len) * v].iter().copied())
                .collect();
            if out.is_empty() {
                out.push(f16::ZERO);
            }
            out
        };
        Ok(CachedWeight {
            tiers,
            hot: tier(0, tiers.n_reg),
            warm: tier(tiers.n_reg, tiers.n_shared),
            ..self.clone()
        })
    }

    /// Uploads the layout to the GPU.
    pub fn to_gpu(&self, ctx: &Arc<Context>) -> Result<GpuCachedWeight, VqError> {
        let up = kernel_err;
        Ok(GpuCachedWeight {
            codes: Arc::new(DeviceBuffer::from_host(ctx, &self.codes).map_err(up)?),
            high: Arc::new(DeviceBuffer::from_host(ctx, &self.high).map_err(up)?),
            hot: DeviceBuffer::from_host(ctx, &self.hot).map_err(up)?,
            warm: DeviceBuffer::from_host(ctx, &self.warm).map_err(up)?,
            codebooks: Arc::new(DeviceBuffer::from_host(ctx, &self.codebooks).map_err(up)?),
            scales: Arc::new(DeviceBuffer::from_host(ctx, &self.scales).map_err(up)?),
            host: self.clone(),
            ctx: ctx.clone(),
        })
    }
}

/// A [`CachedWeight`] on the GPU.
pub struct GpuCachedWeight {
    pub host: CachedWeight,
    ctx: Arc<Context>,
    codes: Arc<DeviceBuffer<u8>>,
    high: Arc<DeviceBuffer<u8>>,
    hot: DeviceBuffer<f16>,
    warm: DeviceBuffer<f16>,
    codebooks: Arc<DeviceBuffer<f16>>,
    scales: Arc<DeviceBuffer<f16>>,
}

impl GpuCachedWeight {
    /// The same weight with other tiers: only the two tiers are uploaded; the codes, the
    /// codebooks and the scales are shared.
    pub fn with_tiers(&self, tiers: CacheTiers) -> Result<GpuCachedWeight, VqError> {
        let host = self.host.with_tiers(tiers)?;
        Ok(GpuCachedWeight {
            hot: DeviceBuffer::from_host(&self.ctx, &host.hot).map_err(kernel_err)?,
            warm: DeviceBuffer::from_host(&self.ctx, &host.warm).map_err(kernel_err)?,
            codes: self.codes.clone(),
            high: self.high.clone(),
            codebooks: self.codebooks.clone(),
            scales: self.scales.clone(),
            ctx: self.ctx.clone(),
            host,
        })
    }

    /// `y [m, n] = x [m, k] · Wᵀ` by [`vq_gemv_cached`] (errors name `x`, `y` or `m`).
    pub fn forward_into(
        &self,
        x: &DeviceBuffer<f16>,
        m: usize,
        y: &mut DeviceBuffer<f16>,
    ) -> Result<(), VqError> {
        let h = &self.host;
        let [mi, n, k, tr, tc] = h.dims(x.len(), m)?;
        if y.len() != m * h.n {
            return Err(arg_err(
                "y",
                format!("{} values, expected m · n = {}", y.len(), m * h.n),
            ));
        }
        vq_gemv_cached::launch(
            &self.ctx,
            &h.config(),
            mi,
            n,
            k,
            tr,
            tc,
            x,
            &*self.codes,
            &*self.high,
            &self.hot,
            &self.warm,
            &*self.codebooks,
            &*self.scales,
            y,
        )
        .map_err(kernel_err)
    }
}
