//! Autotuning the quantized matmul: the shape buckets, a wide configuration space, and the
//! tuning run itself on top of the runtime's generic [`tilus_runtime::autotune`].
//!
//! * **Bucket.** One winner serves every problem with the same weight (`n`, `k`, weight type,
//!   activation type, group size, zero points) and an `m` in the same power-of-two bucket:
//!   `m` is rounded up to 1, 2, 4, ..., 4096, and everything above 4096 shares one bucket
//!   (tuned at `m = 8192`). [`bucket_label`] is the bucket string of the [`TuneKey`]; the GPU
//!   name and driver version complete it.
//! * **Space.** [`candidates`] is the short list the layer tunes over;
//!   [`tuning_space`] enumerates a wider one (tiles, warps, pipeline depth, split-k) for
//!   `tilus bench tune`.
//! * **Measuring.** Every candidate is built, its CUDA generated and compiled by NVRTC in
//!   parallel on all cores, then timed one after the other with CUDA events (warm-up, median,
//!   L2 flushed before each timed run) at the bucket's `m`. Timing does not depend on the
//!   weight values, so all candidates run on one weight buffer whatever their layout; only
//!   the winner's layout has to hold the real weight (see [`WeightLayoutKey`]).

use super::config::{shape_err, QMatmulConfig, QMatmulError, QMatmulMethod};
use super::gpu::{DeviceWeight, GpuQMatmul};
use super::layouts::QMatmulLayouts;
use super::program::build;
use crate::element::Activation;
use crate::kernels::timing::time_fallible;
use crate::DType;
use serde_json::{json, Value};
use tilus_core::Layout;
use tilus_runtime::autotune::{TuneCandidate, TuneKey, TuneOutcome, TIMED_RUNS, WARMUP_RUNS};
use tilus_runtime::{Context, DeviceBuffer, L2Flush, L2Mode};

/// The kernel family name in tuning keys and record file names.
pub const KERNEL: &str = "qmatmul";

/// Problems with more rows than this share one bucket.
pub const M_BUCKET_CAP: usize = 8192;

impl TuneCandidate for QMatmulConfig {
    fn to_json(&self) -> Value {
        json!({
            "wdtype": self.wdtype.to_string(),
            "adtype": self.adtype.to_string(),
            "group_rows": self.group_rows,
            "has_zeros": self.has_zeros,
            "bm": self.bm,
            "bn": self.bn,
            "bk": self.bk,
            "warps": self.warps,
            "stages": self.stages,
            "split_k": self.split_k,
            "stream_k": self.stream_k,
            "blocks_per_sm": self.blocks_per_sm,
            "specialize": self.specialize,
            "stage_tiles": self.stage_tiles,
            "method": match self.method {
                QMatmulMethod::Fused => "fused",
                QMatmulMethod::DequantizeThenGemm => "dequantize_then_gemm",
                QMatmulMethod::Gemv => "gemv",
                QMatmulMethod::GemvWgmma => "gemv_wgmma",
                QMatmulMethod::Lut => "lut",
                QMatmulMethod::GemvImma => "gemv_imma",
                QMatmulMethod::GemvIgmma => "gemv_igmma",
            },
        })
    }
}

/// The `m` a problem of `m` rows is tuned at: the next power of two, at most
/// [`M_BUCKET_CAP`] (`0` counts as 1).
pub fn m_bucket(m: usize) -> usize {
    m.max(1)
        .checked_next_power_of_two()
        .unwrap_or(M_BUCKET_CAP)
        .min(M_BUCKET_CAP)
}

/// The bucket string of a tuning key: `m<=16 n=4096 k=4096 w=i4 a=f16 g=128 z=0`
/// (`m>4096` for the last bucket, `g=channel` for per-channel scales).
pub fn bucket_label(cfg: &QMatmulConfig, m: usize, n: usize, k: usize) -> String {
    let mb = m_bucket(m);
    let rows = if mb == M_BUCKET_CAP {
        format!("m>{}", M_BUCKET_CAP / 2)
    } else {
        format!("m<={mb}")
    };
    let group = cfg
        .group_rows
        .map_or("channel".to_string(), |g| g.to_string());
    format!(
        "{rows} n={n} k={k} w={} a={} g={group} z={}",
        cfg.wdtype, cfg.adtype, cfg.has_zeros as u8
    )
}

/// The tuning key of `cfg`'s weight for an `m`-row problem on `ctx`'s GPU. The kernel name
/// carries [`codegen_fingerprint`], so a winner measured with other generated code is not
/// reused after an upgrade.
pub fn tune_key(ctx: &Context, cfg: &QMatmulConfig, m: usize, n: usize, k: usize) -> TuneKey {
    let kernel = format!("{KERNEL}-{}", codegen_fingerprint());
    TuneKey::for_device(ctx.device(), kernel, bucket_label(cfg, m, n, k))
}

/// 16 hex digits of a SHA-256 over the CUDA generated for a few reference configurations (the
/// fused pipeline with grouped scales and zero points, split-k, the dequantize program and
/// the gemv pipeline):
/// it changes whenever the code generator or the program templates change what they emit.
pub fn codegen_fingerprint() -> &'static str {
    static PRINT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PRINT.get_or_init(|| {
        let u3 = QMatmulConfig::default_for(DType::UInt(3), DType::F16, Some(128), true);
        let i4 = QMatmulConfig::default_for(DType::Int(4), DType::BF16, None, false);
        let references = [
            QMatmulConfig {
                split_k: 2,
                bk: 128,
                ..u3
            },
            i4,
            QMatmulConfig {
                method: QMatmulMethod::DequantizeThenGemm,
                ..u3
            },
            QMatmulConfig {
                method: QMatmulMethod::Gemv,
                bm: 8,
                bk: 128,
                bn: 256,
                split_k: 2,
                ..u3
            },
        ];
        let mut parts = vec![env!("CARGO_PKG_VERSION").to_string()];
        for cfg in references {
            let kernel = build(&cfg).expect("the reference configurations are valid");
            let programs = [
                Some(&kernel.main),
                kernel.dequant.as_ref(),
                kernel.digits.as_ref(),
            ];
            for p in programs.into_iter().flatten() {
                parts.push(match tilus_core::codegen::emit(p, &super::TARGET) {
                    Ok(cuda) => cuda.source.to_string(),
                    Err(e) => e.message,
                });
            }
        }
        crate::kernels::source_digest(parts.iter().map(|p| p.as_bytes()))
    })
}

/// A short description of the tiles: `bm16 bn128 bk64 w4 s3 sk1` (with ` dequant+gemm` for
/// the dequantize-then-GEMM method, ` ws` for warp specialization).
pub fn tiles(c: &QMatmulConfig) -> String {
    let method = match c.method {
        QMatmulMethod::Fused => "",
        QMatmulMethod::DequantizeThenGemm => " dequant+gemm",
        QMatmulMethod::Gemv => " gemv",
        QMatmulMethod::GemvWgmma => " gemv-wgmma",
        QMatmulMethod::Lut => " lut",
        QMatmulMethod::GemvImma => " gemv-imma",
        QMatmulMethod::GemvIgmma => " gemv-igmma",
    };
    let stream = if c.stream_k > 0 {
        format!(" stream{}", c.stream_k)
    } else {
        String::new()
    };
    let occupancy = if c.blocks_per_sm > 1 {
        format!(" o{}", c.blocks_per_sm)
    } else {
        String::new()
    };
    let method = if c.specialize {
        format!("{method} ws")
    } else {
        method.to_string()
    };
    let method = if c.stage_tiles > 1 {
        format!("{method} kt{}", c.stage_tiles)
    } else {
        method
    };
    format!(
        "bm{} bn{} bk{} w{} s{} sk{}{stream}{occupancy}{method}",
        c.bm, c.bn, c.bk, c.warps, c.stages, c.split_k
    )
}

/// What determines the re-laid-out weight bytes of a configuration: the tile (`bk`, `bn`) and
/// the two layouts [`super::relayout`] maps through (the mma B operand over one group of
/// warps along n, and the per-thread byte layout), or for [`QMatmulMethod::Lut`] its bit-plane
/// order (`bn` over `warps`). Configurations with equal keys read the same
/// [`super::PreparedWeight`], so a layer keeps one device copy per key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WeightLayoutKey {
    pub bk: usize,
    pub bn: usize,
    form: WeightForm,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum WeightForm {
    Mma { q: Layout, wbytes: Layout },
    Lut { warps: usize },
}

impl WeightLayoutKey {
    pub fn of(cfg: &QMatmulConfig) -> Result<WeightLayoutKey, QMatmulError> {
        let form = if cfg.method == QMatmulMethod::Lut {
            cfg.tiling()?;
            WeightForm::Lut { warps: cfg.warps }
        } else {
            let lay = QMatmulLayouts::distinct(cfg)?;
            WeightForm::Mma {
                q: lay.q,
                wbytes: lay.wbytes,
            }
        };
        Ok(WeightLayoutKey {
            bk: cfg.bk,
            bn: cfg.bn,
            form,
        })
    }
}

fn log2_distance(a: usize, b: usize) -> u32 {
    (a.max(1).ilog2() as i64 - b.max(1).ilog2() as i64).unsigned_abs() as u32
}

/// How unlikely a configuration is to win at `m` rows (lower first); orders the enumeration
/// so that a truncated space keeps the plausible part.
fn implausibility(c: &QMatmulConfig, base: &QMatmulConfig, m: usize) -> u32 {
    let target_bm = m.max(1).next_power_of_two().clamp(16, 128);
    let mut s = 2 * log2_distance(c.bm, target_bm);
    s += c.split_k.ilog2() * if m > 64 { 3 } else { 1 };
    s += match c.stages {
        3 | 4 => 0,
        2 | 5 => 1,
        _ => 2,
    };
    s += u32::from(!matches!(c.bk, 64 | 128));
    s += log2_distance(c.bn, base.bn);
    s += u32::from(c.warps == 8 && c.bm < 64) + u32::from(c.warps == 4 && c.bm >= 128);
    s
}

/// The most activation rows the tuner tries the gemv method for: its accumulator grows with
/// the token tiles, and from 64 rows on the fused pipeline's 16-row mma tiles are no longer
/// mostly padding.
pub const GEMV_MAX_ROWS: usize = 64;

/// The gemv method's rows per block for an `m`-row problem: whole token tiles of 8 rows,
/// at most [`GEMV_MAX_ROWS`].
pub fn gemv_rows(m: usize) -> usize {
    m.clamp(1, GEMV_MAX_ROWS).next_multiple_of(8)
}

/// The tiles tried first for 17 to [`GEMV_MAX_ROWS`] rows, in order: (method, n-tile multiple
/// of the default, bk, warps, stages, split_k); the warpgroup gemv's entries carry their own
/// width and stages instead (their multiple is 1 and their stages 0, unused). Still memory-
/// and issue-bound, so split-k stays (small layers have fewer n tiles than SMs). The
/// warpgroup gemv comes first: on an H200 it was the fastest at 64 tokens for u1, u2 and i4
/// and at 32 for i4, in 256-column tiles, since the copy engine fills its ring in two
/// warpgroups of 128 columns (117 against 126 us for one warpgroup of 256 at 32 tokens, i4,
/// 57344 x 8192), and 128-column tiles split 4 ways on 8192 x 8192 (docs/perf-notes.md
/// entries 28 to 30). Then the gemv method with all of the
/// rows in one block (the weight read once), the fused pipeline with all of the rows in one
/// block (up to 64), and the gemv method with half of the rows per block (two blocks side by
/// side in the grid: the second reads the weight from L2, with half the accumulator
/// registers). The warpgroup gemv is not tried for 16 tokens or fewer, where it measured
/// 1.4-2.6x slower than the mma.sync gemv. Its stream-k workers come second and third: at 32
/// and 64 tokens they won on 57344 x 8192 for i4 (119.6 -> 113.9 and 160.1 -> 149.2 us) and
/// u2 at 64 (183.6 -> 166.7), and on 10240 x 8192 (39.1 -> 34.8, 46.7 -> 41.7), while split-k
/// stayed ahead on 8192 x 8192 (perf note 32).
const SMALL_BATCH: [(SmallBatch, usize, usize, usize, usize, usize); 21] = [
    (SmallBatch::Wgmma(256), 1, 64, 8, 0, 1),
    (SmallBatch::WgmmaStream(256), 1, 64, 8, 0, 1),
    (SmallBatch::WgmmaStream(128), 1, 64, 8, 0, 1),
    (SmallBatch::Wgmma(128), 1, 64, 4, 0, 4),
    (SmallBatch::Wgmma(128), 1, 64, 8, 0, 4),
    (SmallBatch::Wgmma(256), 1, 64, 4, 0, 1),
    (SmallBatch::Gemv, 2, 128, 4, 4, 1),
    (SmallBatch::Gemv, 2, 128, 4, 3, 2),
    (SmallBatch::Fused, 1, 128, 4, 3, 1),
    (SmallBatch::GemvHalf, 2, 128, 4, 4, 1),
    (SmallBatch::Gemv, 2, 128, 4, 4, 4),
    (SmallBatch::Fused, 1, 128, 4, 3, 4),
    (SmallBatch::GemvHalf, 2, 128, 4, 3, 2),
    (SmallBatch::Gemv, 2, 128, 4, 3, 8),
    (SmallBatch::Fused, 2, 128, 4, 3, 2),
    (SmallBatch::GemvHalf, 2, 128, 4, 4, 4),
    (SmallBatch::Gemv, 1, 128, 4, 4, 1),
    (SmallBatch::Fused, 1, 64, 4, 3, 1),
    (SmallBatch::Wgmma(256), 1, 64, 4, 0, 2),
    (SmallBatch::Wgmma(512), 1, 64, 8, 0, 1),
    (SmallBatch::Wgmma(128), 1, 64, 4, 0, 1),
];

#[derive(Clone, Copy)]
enum SmallBatch {
    /// The warpgroup gemv with this many output columns per block, in whole tiles.
    Wgmma(usize),
    /// The same on stream-k workers: two per SM of an H100, one for 256 columns above 32
    /// tokens.
    WgmmaStream(usize),
    Gemv,
    GemvHalf,
    Fused,
}

/// Shared memory of a Hopper multiprocessor that blocks may use, less 4 KB for their barriers
/// and the launch's reserve.
const WGMMA_SHARED: usize = 223 * 1024;

/// Shared memory the warpgroup gemv may fill with its stages: two blocks per multiprocessor
/// (228 KB on Hopper), which is what its registers allow with 256-column tiles (223 per
/// thread); one block per SM measured slower (docs/perf-notes.md entry 29).
const WGMMA_STAGE_BUDGET: usize = 112 * 1024;

/// The stage budget of a block that has its multiprocessor to itself (the 256-row tiles of
/// [`TALL`], ~187 registers per thread), leaving room for the output tile's staging.
const WGMMA_ONE_BLOCK_BUDGET: usize = 192 * 1024;

/// The warpgroup gemv's tiles for more than [`GEMV_MAX_ROWS`] rows, in order, for up to 128
/// rows and for more: (rows per block, output columns, stage budget). On an H200 at
/// 57344 x 8192 (perf note 31) 128 x 128 tiles, two blocks per multiprocessor, were the
/// fastest at 128 tokens (i4 217 us against 523 for the best mma.sync tile, 1.8x cuBLAS f16)
/// and 256 x 128 tiles, one block per multiprocessor, from 256 tokens on (i4 354 us at 256,
/// 1255 at 1024, against cuBLAS's 339 and 1233: the fused weight at cuBLAS's speed, with no
/// dequantized copy); 256-column tiles and 64-row ones were slower at every point. The
/// count of tiles against the multiprocessors decides the small layers: 256 x 64 tiles, one
/// warpgroup and one block per multiprocessor, make 128 blocks of 8192 x 8192 at 256 tokens
/// (54.6 us against 60.4 for the best above) and lose wherever the wider tiles fill whole
/// waves.
const TALL: [&[(usize, usize, usize)]; 2] = [
    &[
        (128, 128, WGMMA_STAGE_BUDGET),
        (128, 256, WGMMA_ONE_BLOCK_BUDGET),
        (256, 128, WGMMA_ONE_BLOCK_BUDGET),
    ],
    &[
        (256, 128, WGMMA_ONE_BLOCK_BUDGET),
        (128, 128, WGMMA_STAGE_BUDGET),
        (256, 64, WGMMA_ONE_BLOCK_BUDGET),
    ],
];

/// Multiprocessors the tilings are rated for before they are measured.
const SMS: usize = crate::kernels::REFERENCE_MULTIPROCESSORS;

/// The look-up method's tilings for 8-warp blocks, two to a multiprocessor, `(bn, split_k)`,
/// best rated first (at most three). A block's time is taken as proportional to the
/// look-ups it does, `bn · (k / split + 512)` (the 512: its first table tile, which nothing
/// overlaps, and its share of the split-k sum), times `1 + 256 / (bn · planes)` for the table
/// builds, which cost the same whatever the block's width; the launch takes as many such
/// times as it has waves of `2 · SMS` blocks. On the H200 the first of the three was the
/// fastest look-up tiling measured on 9 of the 12 Llama-70B points of u1, u2 and i2, and
/// within 8% on the others (perf note 37).
fn lut_tilings(planes: usize, group: usize, n: usize, k: usize) -> Vec<(usize, usize)> {
    if !matches!(group, 32 | 64 | 128 | 256) || !(1..=8).contains(&planes) {
        return Vec::new();
    }
    let tg = group / 8;
    let pairs = k / 512;
    let mut rated = Vec::new();
    // At most 128 weight bytes per thread and tile, in whole 16-byte loads.
    for rows in (1..=8).filter(|r| r * planes <= 8 && (r * tg * planes).is_multiple_of(16)) {
        let bn = 8 * tg * rows;
        if !n.is_multiple_of(bn) {
            continue;
        }
        for split in (1..=pairs.min(64)).filter(|s| pairs.is_multiple_of(*s)) {
            let blocks = n / bn * split;
            let waves = blocks.div_ceil(2 * SMS) as f64;
            let builds = 1.0 + 256.0 / (bn * planes) as f64;
            let cost = waves * bn as f64 * (k / split).saturating_add(512) as f64 * builds;
            rated.push((cost, split, bn));
        }
    }
    // Ties (to a percent) go to the wider block: fewer table builds for the same look-ups.
    let best = rated.iter().map(|r| r.0).fold(f64::INFINITY, f64::min);
    rated.sort_by_key(|&(cost, split, bn)| {
        (
            (cost / best * 100.0).round() as u64,
            std::cmp::Reverse(bn),
            split,
        )
    });
    rated
        .into_iter()
        .take(3)
        .map(|(_, s, bn)| (bn, s))
        .collect()
}

/// The look-up method's tiling for 16-warp blocks of 4 rows, one to a multiprocessor (session
/// 22's): k split until the blocks about fill a wave.
fn lut_tilings_one_block(group: usize, n: usize, k: usize) -> Option<(usize, usize)> {
    let bn = (group / 8).saturating_mul(64);
    let pairs = k / 512;
    if bn == 0 || !n.is_multiple_of(bn) || pairs == 0 {
        return None;
    }
    let columns = n / bn;
    let splits: Vec<usize> = (1..=pairs.min(64))
        .filter(|s| pairs.is_multiple_of(*s))
        .collect();
    let split = splits
        .iter()
        .copied()
        .find(|&s| columns * s >= 100)
        .or_else(|| splits.last().copied())?;
    Some((bn, split))
}

/// `c`'s tiles on the warpgroup MMA ([`QMatmulMethod::GemvWgmma`]): `bm` rows and `bn` output
/// columns per block, k tiles of 64 (one swizzled row), as many stages (3 to 8) as fit
/// `budget` bytes of shared memory.
fn gemv_wgmma(c: QMatmulConfig, bm: usize, bn: usize, budget: usize) -> QMatmulConfig {
    let element = c.adtype.bits() as usize / 8;
    let columns = if c.has_zeros { 2 } else { 1 };
    let stage = bm * 64 * element + 64 * bn * c.wdtype.bits() as usize / 8 + columns * bn * element;
    QMatmulConfig {
        method: QMatmulMethod::GemvWgmma,
        bm,
        bn,
        bk: 64,
        // One warpgroup per 64 columns, at most two (the ring's copies are shared).
        warps: 4 * (bn / 64).clamp(1, 2),
        stages: (budget / stage).clamp(3, 8),
        ..c
    }
}

/// The warpgroup gemv with two k tiles a ring stage (perf note 58) on `blocks` stream-k workers
/// a multiprocessor (planned for [`SMS`]): `bm` rows, `bn` columns over `warps` warps, as many
/// stages (at least 3) as fit the block's share of shared memory.
fn gemv_wgmma_two_tiles(
    c: QMatmulConfig,
    bm: usize,
    bn: usize,
    warps: usize,
    blocks: usize,
) -> QMatmulConfig {
    let element = c.adtype.bits() as usize / 8;
    let columns = if c.has_zeros { 2 } else { 1 };
    let stage =
        bm * 128 * element + 128 * bn * c.wdtype.bits() as usize / 8 + columns * bn * element;
    QMatmulConfig {
        method: QMatmulMethod::GemvWgmma,
        bm,
        bn,
        bk: 64,
        warps,
        stages: (WGMMA_SHARED / blocks / stage).clamp(3, 4),
        stream_k: blocks * SMS,
        blocks_per_sm: blocks,
        stage_tiles: 2,
        ..c
    }
}

/// The gemv tile width for `bm` rows: `bn`, capped above 16 rows so that each thread's
/// accumulator holds at most 8 mma tiles (token tiles times fragments per warp; wider tiles
/// spill at 32 and 64 rows).
fn gemv_width(bn: usize, bm: usize, warps: usize) -> usize {
    if bm <= 16 {
        return bn;
    }
    bn.min(16 * warps * (64 / bm).max(1))
}

/// The most `points` [`tuning_space`] accepts: more than the enumeration below can produce
/// (4 x 2 x 4 x 4 x 4 x 4 = 2048 combinations plus the short list), and a bound on what it
/// reserves (`--points 18446744073709551615` was a capacity-overflow panic).
pub const MAX_TUNING_POINTS: usize = 4096;

/// The integer-mma gemv's first tilings at one token, `(bn, warps, stages, split_k,
/// blocks_per_sm)`: on an H200 512 columns of 8 warps in two k slices for 57344 x 8192 (u2
/// 38.7 us, u4 and i4 62.7 and 60.7 with a 4-stage ring; three blocks a multiprocessor with 3
/// stages within a microsecond of it), 256 of 4 warps in eight for the 8192-row layers, 512 of
/// 8 in eight for 8192 x 28672 (u4 35.0 us, u2 22.5; perf notes 61 to 63). 896 and 448 columns
/// (warps of seven fragments) tile only 57344 x 8192 of the Llama-70B layers, in 256 blocks
/// where 512 columns make 224 for 132 multiprocessors: u2 37.7-38.3 us against 38.9 (perf
/// note 63). Tilings that do not divide the shape, and slices over 4096 rows, are skipped.
/// The last two: deeper rings where a layer has one block a multiprocessor (8192 x 28672: u2
/// 22.1 us with 8 stages against 22.5, i2 21.2 against 22.0, i4 33.0 with 6 against 34.3;
/// session 46).
/// The first: 896 columns in two k slices, one block a multiprocessor with a 4-stage ring,
/// 128 blocks in one wave on 57344 x 8192, found by a scan of 51 tilings (session 50, perf
/// note 70): u2 35.2-36.6 us against 37.8-38.4 for the old first, i2 33.7-34.7 against
/// 35.4-35.8, f16 and bf16; 4-bit tiles of that ring do not fit (260 KB), and the tile does
/// not divide the other layers.
const IMMA_FIRST: [(usize, usize, usize, usize, usize); 9] = [
    (896, 8, 4, 2, 1),
    (512, 8, 4, 2, 1),
    (896, 8, 3, 4, 2),
    (448, 4, 4, 2, 1),
    (512, 8, 3, 2, 3),
    (256, 4, 4, 8, 1),
    (512, 8, 4, 8, 1),
    (512, 8, 8, 8, 1),
    (512, 8, 6, 8, 1),
];

/// [`IMMA_FIRST`] for 3- and 5-bit weights (two planes), whose tiles leave less room in a
/// block's 163 KiB: two 896-column blocks a multiprocessor fit with a 2-stage ring, and
/// 512-column ones with 3. On an H200 at one token (session 48): 57344 x 8192 i3
/// 50.4 us with `(896, 8, 2, 4, 2)`, 51.2 with `(512, 8, 3, 2, 2)`, 52.3 with `(448, 4, 4, 2,
/// 1)` (the f16 gemv 68.7); 8192 x 28672 27.4 with `(512, 8, 5, 8, 1)` (41.1); the 8192-row
/// layers 12.1-15.0 with `(256, 4, 4, 8, 1)`; i5 75.1 us with the first (the f16 gemv 98.9),
/// 75.9 with the second, and 40.3-40.5 us on 8192 x 28672 with 4 to 6 stages (47.6).
const IMMA_FIRST_PLANES: [(usize, usize, usize, usize, usize); 6] = [
    (896, 8, 2, 4, 2),
    (512, 8, 3, 2, 2),
    (512, 8, 5, 8, 1),
    (256, 4, 4, 8, 1),
    (448, 4, 4, 2, 1),
    (512, 8, 4, 8, 1),
];

/// One token of a 4- to 7-bit weight the integer mma does not take (u6, u7, i6, i7 and the
/// float types of 4 to 7 bits) on the gemv, on layers of at least a wave of 256-column tiles:
/// `(bn, stages, split_k)` of 4-warp blocks over 128 rows of k, before the measured-best tiles
/// of [`candidates`] (multiples of the type's default width, which on such layers sat at places
/// 7 to 13 of the list). Measured on an H200 at 57344 x 8192 (perf note 68): f5e2m2 125.2 ->
/// 94.6 us, f7e4m2 130.3 -> 109.0, u7 122.2 -> 108.3, i6 94.2 -> 86.8, f4e2m1 82.3 -> 77.4. On
/// the narrower layers the old head stays best (split 8: the 256-column tiles alone make 32 to
/// 40 blocks there).
const ONE_TOKEN_GEMV_FIRST: [(usize, usize, usize); 3] = [(256, 3, 1), (256, 3, 4), (256, 4, 4)];

/// The integer-mma gemv with several tokens a block (2 to 8 tokens of a 2- or 4-bit integer
/// weight), `(bn, warps, stages, split_k, blocks_per_sm)`, most promising first: on an H200 at
/// 2 and 4 tokens of 57344 x 8192 u2 45.5 us against the gemv's 53.2, i2 44.8 against 49.0,
/// u4 65.8 against 73.1, i4 63.7 against 66.7; 8192 x 28672 u2 29.1 against 32.7 (the 4-bit
/// weights tie there); at 8 tokens only u4 on 57344 x 8192 gains (71.6 against 75.5), so
/// from 5 tokens one tiling follows the gemv's first (session 46, perf note 64).
const IMMA_TOKENS: [(usize, usize, usize, usize, usize); 4] = [
    (512, 8, 3, 2, 2),
    (256, 4, 4, 2, 1),
    (256, 4, 4, 8, 1),
    (512, 8, 4, 8, 1),
];

/// The integer warpgroup gemv ([`QMatmulMethod::GemvIgmma`], 8 to 64 tokens of a 2- or 4-bit
/// integer weight), `(bn, warps, stages, split_k)`: late in the lists, since on an H200 it
/// measured behind the f16 warpgroup gemv at 16, 32 and 64 tokens (57344 x 8192 u2 87 / 125 /
/// 215 us against 79 / 89 / 123; perf note 65: each scale group's i32 sums are converted and
/// scaled per output, work that grows with the tokens, at a quarter rate for the conversion),
/// except split 4 ways on long layers at 9 to 16 tokens.
const IGMMA_TILES: [(usize, usize, usize, usize); 2] = [(128, 4, 4, 1), (64, 4, 4, 1)];

/// [`IGMMA_TILES`] for an `m`-row problem of `wdtype`, if the method takes it.
fn igmma_candidates(
    base: QMatmulConfig,
    wdtype: DType,
    group: Option<usize>,
    m: usize,
    k: usize,
) -> Vec<QMatmulConfig> {
    if !(8..=64).contains(&m)
        || group.is_none()
        || !matches!(wdtype, DType::UInt(2 | 4) | DType::Int(2 | 4))
    {
        return Vec::new();
    }
    let bm = m.next_power_of_two().max(8);
    IGMMA_TILES
        .into_iter()
        // 64 tokens hold two i32 tiles of 64 registers a thread: one 64-column tile a
        // warpgroup, or ptxas spills.
        .filter(|&(bn, warps, _, _)| bm < 64 || bn == 16 * warps)
        .flat_map(|(bn, warps, stages, split_k)| {
            // Narrow layers: split k so that the column tiles make about a wave.
            let long = if k >= 16384 { 4 } else { split_k };
            [split_k, long].map(|split_k| QMatmulConfig {
                method: QMatmulMethod::GemvIgmma,
                bm,
                bn,
                bk: 128,
                warps,
                stages,
                split_k,
                stream_k: 0,
                specialize: false,
                stage_tiles: 1,
                blocks_per_sm: 1,
                ..base
            })
        })
        .collect()
}

/// The configurations tried for an `m`-row problem, most promising first: for decode shapes
/// (`m <= 16`) split-k, wide and long tiles and deep pipelines in the order they measured on an
/// H100, each with the gemv method first (at one token of a 1- to 4-bit integer weight the
/// integer-mma gemv's [`IMMA_FIRST`] before all), then the rest of that space; up to
/// [`GEMV_MAX_ROWS`] rows the default tiles, then the small-batch list (gemv and fused tiles
/// with split-k); above, the warpgroup gemv's [`TALL`] tiles, each on stream-k workers, then
/// split and whole (sm_90a only: the tuner drops them elsewhere), with dequantize-then-GEMM
/// after the first tile for prefill (`m > 256`); then taller m tiles of the fused pipeline.
/// Every one is valid for the shape.
pub fn candidates(
    wdtype: DType,
    adtype: DType,
    group: Option<usize>,
    m: usize,
    n: usize,
    k: usize,
) -> Result<Vec<QMatmulConfig>, QMatmulError> {
    candidates_up_to(wdtype, adtype, group, m, n, k, usize::MAX)
}

/// The first `limit` of [`candidates`], without building the rest: each candidate is built and
/// verified to be kept (about 10 ms each, ~1.8 s for the whole decode list of a 1-bit weight),
/// and a layer or a benchmark only ever tries the head of the list.
pub fn candidates_up_to(
    wdtype: DType,
    adtype: DType,
    group: Option<usize>,
    m: usize,
    n: usize,
    k: usize,
    limit: usize,
) -> Result<Vec<QMatmulConfig>, QMatmulError> {
    let zeros = matches!(wdtype, DType::UInt(_));
    let base = QMatmulConfig::for_shape(wdtype, adtype, group, zeros, n, k)?;
    // Decode shapes start with the measured best, more than 64 rows with the warpgroup gemv's
    // tall tiles; the default tiles come first otherwise.
    let tall = m > GEMV_MAX_ROWS;
    let mut out = if m <= 16 || tall { vec![] } else { vec![base] };
    let mut push = |cfg: QMatmulConfig| {
        if out.len() < limit
            && cfg.tiling().is_ok()
            && cfg.check_shape(m, n, k).is_ok()
            && build(&cfg).is_ok()
            && !out.contains(&cfg)
        {
            out.push(cfg);
        }
    };
    // Tiles as (n-tile multiple of the default, bk, warps, stages, split_k).
    let decode =
        |(wide, bk, warps, stages, split_k): (usize, usize, usize, usize, usize)| QMatmulConfig {
            bn: base.bn * wide,
            bk,
            warps,
            stages,
            split_k,
            ..base
        };
    if m <= 16 {
        // Decode: a block is a chain of k / bk dependent pipeline steps, and the dequantization
        // chain of each step needs several warps per scheduler to hide its latency. Split-k
        // (more blocks), wide and long tiles (fewer per-step costs per weight) and deeper
        // pipelines (more bytes in flight) are what wins; the first configurations are the
        // ones that measured best on an H100 across i2, i3, i4, u1 and u4 at m = 1 and i8 at
        // m = 16 (docs/perf-notes.md, entries 2 and 5).
        // (n-tile multiple of the default, bk, warps, stages, split_k)
        const MEASURED_BEST: [(usize, usize, usize, usize, usize); 15] = [
            (2, 128, 4, 4, 4),
            (2, 128, 4, 3, 8),
            (2, 128, 4, 4, 8),
            (4, 128, 4, 3, 8),
            (4, 128, 4, 3, 1),
            (4, 64, 4, 3, 1),
            (4, 128, 4, 3, 4),
            (2, 128, 4, 3, 2),
            (2, 128, 4, 3, 1),
            (2, 64, 4, 4, 4),
            (4, 128, 8, 4, 4),
            (4, 64, 4, 4, 4),
            (1, 128, 4, 4, 4),
            (2, 128, 4, 4, 2),
            (1, 64, 4, 4, 2),
        ];
        // The gemv method (the weight as the mma's A operand, every token tile of the block
        // sharing each dequantized fragment) is tried beside each of the measured best, in
        // the same tiles.
        let gemv = |c: QMatmulConfig| QMatmulConfig {
            method: QMatmulMethod::Gemv,
            bm: gemv_rows(m),
            ..c
        };
        // One token of a 1- or 2-bit integer weight: the look-up tables first (perf notes 36
        // and 37: on an H200 u1 1.5-1.9x faster than the gemv on the four Llama-70B layers, u2
        // and i2 1.04-1.2x), in 8-warp blocks two to a multiprocessor, the three
        // tilings `lut_tilings` rates best; then 16-warp blocks one to a multiprocessor.
        // One token of a 1- to 4-bit integer weight on the integer tensor cores: a `lop3`
        // makes four weights (two `lop3`s for 3 bits, from two planes; `super::imma`); the
        // first tilings first, the rest at the end. `bk` is one k32 fragment a field.
        let imma_bk = super::imma::gemv_imma_bk(wdtype);
        let imma_bits = imma_bk.is_some();
        let imma = |bn: usize, warps: usize, stages: usize, split_k: usize| QMatmulConfig {
            method: QMatmulMethod::GemvImma,
            bm: 1,
            bn,
            bk: imma_bk.unwrap_or(32),
            warps,
            stages,
            split_k,
            ..base
        };
        let imma_first: Vec<QMatmulConfig> = if m == 1 && imma_bits {
            let first = if super::imma::two_planes(wdtype) {
                &IMMA_FIRST_PLANES[..]
            } else {
                &IMMA_FIRST[..]
            };
            first
                .iter()
                .map(
                    |&(bn, warps, stages, split_k, blocks_per_sm)| QMatmulConfig {
                        blocks_per_sm,
                        ..imma(bn, warps, stages, split_k)
                    },
                )
                .collect()
        } else {
            Vec::new()
        };
        // One token of a 1-bit weight: the look-up tables and the integer mma tie (H200,
        // session 58, groups of 256: 26.8 against 27.4 us at 57344 x 8192, 17.9 against 17.7
        // at 8192 x 28672; on an H100 in groups of 128 the mma won those two layers by 5% and
        // lost 8192 x 8192 by 1%), so the tables' first tiling leads, then the mma's.
        let one_bit = wdtype.bits() == 1;
        if !one_bit {
            for c in &imma_first {
                push(*c);
            }
        }
        // 2 to 8 tokens of a 2- or 4-bit integer weight: several tokens a block on the integer
        // mma, from the pre-pass's two digits a value (1-bit weights need the four digits of
        // one token a block).
        let imma_tokens = (2..=8).contains(&m)
            && group.is_some()
            && matches!(wdtype, DType::UInt(2 | 4) | DType::Int(2 | 4));
        let tokens =
            |(bn, warps, stages, split_k, blocks_per_sm): (usize, usize, usize, usize, usize)| {
                QMatmulConfig {
                    bm: if m <= 4 { 4 } else { 8 },
                    blocks_per_sm,
                    ..imma(bn, warps, stages, split_k)
                }
            };
        if imma_tokens && m <= 4 {
            for t in IMMA_TOKENS {
                push(tokens(t));
            }
        }
        let mut later_lut = Vec::new();
        if m == 1 && matches!(wdtype, DType::UInt(1 | 2) | DType::Int(2)) {
            if let Some(g) = group {
                let rated = lut_tilings(wdtype.bits() as usize, g, n, k);
                let mut rated = rated.into_iter();
                if let Some((bn, split)) = rated.next() {
                    push(base.lut(bn, 8, split, 2));
                }
                if one_bit {
                    for c in &imma_first {
                        push(*c);
                    }
                }
                // The gemv's best next (below), then the other look-up tilings.
                later_lut.extend(rated.take(2).map(|(bn, split)| base.lut(bn, 8, split, 2)));
                later_lut.extend(
                    lut_tilings_one_block(g, n, k).map(|(bn, split)| base.lut(bn, 16, split, 1)),
                );
            }
        }
        let bits = wdtype.bits();
        if m == 1 && !imma_bits && (4..=7).contains(&bits) && n / 256 >= SMS {
            for (bn, stages, split_k) in ONE_TOKEN_GEMV_FIRST {
                push(gemv(QMatmulConfig {
                    bn,
                    bk: 128,
                    warps: 4,
                    stages,
                    split_k,
                    ..base
                }));
            }
        }
        // At one token the gemv's tiles all come before the fused kernel's: the fused tile
        // never won a one-token layer (perf note 68), and interleaved they took every other
        // place of a short tuning.
        let mut fused_later = Vec::new();
        for (i, c) in MEASURED_BEST.into_iter().enumerate() {
            push(gemv(decode(c)));
            if i == 0 && imma_tokens && m > 4 {
                for t in IMMA_TOKENS {
                    push(tokens(t));
                }
            }
            if i == 0 && m > 8 {
                // 9 to 16 tokens: the warpgroup gemv, two k tiles a stage (perf note 58: i4
                // at 16 tokens 80.1 us against the fused tiles' 87.8; u2 80.0 against 78.7).
                push(gemv_wgmma_two_tiles(base, 16, 256, 8, 2));
                // Long, narrow layers (the down projection): the integer warpgroup gemv split 4
                // ways (perf note 65: 8192 x 28672 u2 at 16 tokens 44.8 us against 47.3).
                if k >= 16384 {
                    if let Some(c) = igmma_candidates(base, wdtype, group, m, k).get(1) {
                        push(*c);
                    }
                }
            }
            if m == 1 {
                fused_later.push(decode(c));
            } else {
                push(decode(c));
            }
            if i == 0 {
                for c in later_lut.drain(..) {
                    push(c);
                }
            }
        }
        for c in fused_later {
            push(c);
        }
        push(base);
        for c in igmma_candidates(base, wdtype, group, m, k) {
            push(c);
        }
        if m == 1 && imma_bits {
            for split_k in [2, 4, 8] {
                for (bn, warps) in [(256, 4), (512, 8), (128, 4), (256, 8)] {
                    for stages in [4, 3] {
                        push(imma(bn, warps, stages, split_k));
                    }
                }
            }
        }
        // Then the rest of the space, for longer tuning. Split 8 gives 4-8x the blocks of the
        // n tiles alone, which also evens out the last wave.
        for split_k in [1, 2, 4, 8] {
            for warps in [4, 8] {
                for bk in [128, 64] {
                    for wide in [2, 1, 4] {
                        for stages in [4, 3] {
                            let c = decode((wide, bk, warps, stages, split_k));
                            push(gemv(c));
                            push(c);
                        }
                    }
                }
            }
        }
    } else {
        if tall {
            let tall_tiles = TALL[usize::from(m > 128)];
            // Whole blocks of a tile over the problem.
            let blocks = |bm: usize, bn: usize| m.div_ceil(bm) * n.div_ceil(bn);
            // A tile whose whole blocks make one nearly full wave leads on the short-k layers
            // (H100, session 69, 8192 x 8192 at 256 tokens: 256 x 64 tiles, 128 blocks, i4
            // 51.6 us, u2 53.2, u8 54.8, against 65.9-71.1 for 132 stream-k workers over the
            // 64 tiles of 256 x 128, which add split tiles through memory). On 8192 x 28672
            // the k loop is long enough to pay for that (u2 168.9 on stream-k, 175.3 whole),
            // so only k <= 16384; the tallest such tile first.
            let wave = tall_tiles
                .iter()
                .filter(|&&(bm, bn, _)| {
                    k <= 16384 && (SMS - SMS / 16..=SMS).contains(&blocks(bm, bn))
                })
                .max_by_key(|&&(bm, _, _)| bm);
            if let Some(&(bm, bn, budget)) = wave {
                push(gemv_wgmma(base, bm, bn, budget));
            }
            for (i, &(bm, bn, budget)) in tall_tiles.iter().enumerate() {
                if i == 1 && m > 256 {
                    // Prefill: dequantize once, then cuBLAS, right after the first tile.
                    push(QMatmulConfig {
                        method: QMatmulMethod::DequantizeThenGemm,
                        ..base
                    });
                }
                let c = gemv_wgmma(base, bm, bn, budget);
                // Stream-k first: one worker per multiprocessor shares out the block row's
                // iterations, so no SM idles in a last partial wave (perf note 32: 57344 x
                // 8192 at 256 tokens 356 -> 336 us, 10240 x 8192 at 1024 266 -> 245); planned
                // for SMS, scaled to the device by `for_multiprocessors`.
                let rows = m.div_ceil(bm);
                push(QMatmulConfig {
                    stream_k: (SMS / rows).max(1),
                    ..c
                });
                // Tiles whose ring leaves room for two blocks a multiprocessor: two workers
                // each (H100, session 68, 57344 x 8192 at 128 tokens, 128 x 128 tiles: i4 195.3-
                // 195.6 us against 198.8-199.0 whole, u4 200.6 against 205.4, f4e2m1 204.8
                // against 209.0; the tuner's whole tile had beaten one worker a multiprocessor).
                if budget == WGMMA_STAGE_BUDGET {
                    push(QMatmulConfig {
                        stream_k: (2 * SMS / rows).max(1),
                        blocks_per_sm: 2,
                        ..c
                    });
                }
                // Fewer tiles than the multiprocessors (the 8192-wide layers): split
                // k until they make about a wave, the unsplit tile right after.
                let tiles = blocks(bm, bn);
                let mut split_k = 1;
                while tiles * split_k < 128 && split_k < 8 {
                    split_k *= 2;
                }
                push(QMatmulConfig { split_k, ..c });
                push(c);
            }
            if m <= 256 {
                push(base);
            }
        } else {
            // Two k tiles a stage first (perf note 58, H200, 57344 x 8192, i4/u2/u1): at 32
            // tokens 256-column blocks of 8 warps (92.8-93.8 us against 96.8 with one tile a
            // stage), at 64 tokens 128-column blocks of one warpgroup, three a
            // multiprocessor (125.3 against 131.3 and 135.9).
            let bm = gemv_rows(m);
            if n * k < 1 << 27 {
                // Layers of fewer weights (8192 x 8192, 10240 x 8192): split-k in whole
                // 128-column tiles of one warpgroup, one k tile a stage, leads at 32 tokens
                // and on 8192 x 8192 at 64 (perf note 58: i4 24.2 us on 8192 x 8192 at 32
                // tokens against 31.8 for two tiles a stage on stream-k).
                push(QMatmulConfig {
                    warps: 4,
                    ..gemv_wgmma(
                        QMatmulConfig { split_k: 4, ..base },
                        bm,
                        128,
                        WGMMA_STAGE_BUDGET,
                    )
                });
            }
            let firsts = if bm <= 32 {
                [(256, 8, 2), (128, 4, 4)]
            } else {
                [(128, 4, 3), (256, 8, 1)]
            };
            for (bn, warps, blocks) in firsts {
                push(gemv_wgmma_two_tiles(base, bm, bn, warps, blocks));
            }
            for (method, wide, bk, warps, stages, split_k) in SMALL_BATCH {
                let c = decode((wide, bk, warps, stages, split_k));
                let gemv = |bm: usize| QMatmulConfig {
                    method: QMatmulMethod::Gemv,
                    bm,
                    bn: gemv_width(c.bn, bm, warps),
                    ..c
                };
                push(match method {
                    SmallBatch::Wgmma(bn) => QMatmulConfig {
                        warps,
                        ..gemv_wgmma(c, gemv_rows(m), bn, WGMMA_STAGE_BUDGET)
                    },
                    SmallBatch::WgmmaStream(bn) => QMatmulConfig {
                        warps,
                        stream_k: if bn == 256 && m > 32 { SMS } else { 2 * SMS },
                        ..gemv_wgmma(c, gemv_rows(m), bn, WGMMA_STAGE_BUDGET)
                    },
                    SmallBatch::Gemv => gemv(gemv_rows(m)),
                    SmallBatch::GemvHalf => gemv(gemv_rows(m.div_ceil(2))),
                    SmallBatch::Fused => QMatmulConfig {
                        bm: m.next_multiple_of(16).min(64),
                        ..c
                    },
                });
            }
        }
        for c in igmma_candidates(base, wdtype, group, m, k) {
            push(c);
        }
        if m > 256 {
            // Prefill: dequantize once, then cuBLAS (the fused tiles below are the alternative).
            push(QMatmulConfig {
                method: QMatmulMethod::DequantizeThenGemm,
                ..base
            });
            push(base);
        }
        let shapes: &[(usize, usize, usize)] = if m <= 256 {
            // (bm, warps, stages)
            &[(32, 4, 3), (64, 4, 3)]
        } else {
            &[(64, 4, 3), (128, 8, 3), (128, 4, 3)]
        };
        for &(bm, warps, stages) in shapes {
            for bk in [128, base.bk] {
                push(QMatmulConfig {
                    bm,
                    warps,
                    stages,
                    bk,
                    ..base
                });
            }
        }
    }
    if out.is_empty() {
        out.push(base);
    }
    Ok(out)
}

/// Up to `points` distinct valid configurations for an `[m, k] x [k, n]` problem: first
/// [`candidates`] (the short list), then combinations of `bm` 16..128, `bn` from half to four
/// times the default, `bk` 32..256, 4 or 8 warps, 2 to 5 stages and split-k 1 to 8, ordered
/// from the most plausible for `m`. Each one passes [`QMatmulConfig::tiling`],
/// [`QMatmulConfig::check_shape`] and [`build`] (so its shared memory fits); fewer than
/// `points` come back when the shape admits fewer. Unsigned weights get zero points, like
/// [`candidates`]. Errors name `points`, or the argument `candidates` rejects.
pub fn tuning_space(
    wdtype: DType,
    adtype: DType,
    group: Option<usize>,
    m: usize,
    n: usize,
    k: usize,
    points: usize,
) -> Result<Vec<QMatmulConfig>, QMatmulError> {
    check_tuning_space(wdtype, adtype, group, n, k, points)?;
    let short = candidates(wdtype, adtype, group, m, n, k)?;
    // The default tiles (fused method) anchor the enumeration; the short list may start
    // elsewhere.
    let zeros = matches!(wdtype, DType::UInt(_));
    let base = QMatmulConfig::for_shape(wdtype, adtype, group, zeros, n, k)?;
    let mut out: Vec<QMatmulConfig> = Vec::with_capacity(points);
    for c in short {
        if out.len() < points
            && !out.contains(&c)
            && c.check_shape(m, n, k).is_ok()
            && build(&c).is_ok()
        {
            out.push(c);
        }
    }
    let mut extra = Vec::new();
    let bns = [base.bn / 2, base.bn, base.bn * 2, base.bn * 4];
    for bm in [16, 32, 64, 128] {
        for warps in [4, 8] {
            for bn in bns {
                for bk in [32, 64, 128, 256] {
                    for stages in [2, 3, 4, 5] {
                        for split_k in [1, 2, 4, 8] {
                            let c = QMatmulConfig {
                                bm,
                                bn,
                                bk,
                                warps,
                                stages,
                                split_k,
                                ..base
                            };
                            if bn > 0 && c.check_shape(m, n, k).is_ok() && !out.contains(&c) {
                                extra.push(c);
                            }
                        }
                    }
                }
            }
        }
    }
    // Stable: ties keep the enumeration order.
    extra.sort_by_key(|c| implausibility(c, &base, m));
    for c in extra {
        if out.len() >= points {
            break;
        }
        if build(&c).is_ok() {
            out.push(c);
        }
    }
    Ok(out)
}

/// Every error [`tuning_space`] can return, without building a configuration: cheap, so that a
/// caller can name a bad argument before it opens a GPU and build the space (thousands of
/// program builds for `points` = [`MAX_TUNING_POINTS`]) only once there is one to tune on.
pub fn check_tuning_space(
    wdtype: DType,
    adtype: DType,
    group: Option<usize>,
    n: usize,
    k: usize,
    points: usize,
) -> Result<(), QMatmulError> {
    if points == 0 {
        return Err(shape_err("points", "must be positive"));
    }
    if points > MAX_TUNING_POINTS {
        return Err(shape_err(
            "points",
            format!(
                "{points} is more than the space can hold; at most {MAX_TUNING_POINTS} \
                 (the enumeration has fewer configurations than that)"
            ),
        ));
    }
    let zeros = matches!(wdtype, DType::UInt(_));
    QMatmulConfig::for_shape(wdtype, adtype, group, zeros, n, k).map(drop)
}

/// The result of [`tune_qmatmul`].
pub struct TunedQMatmul {
    /// The winner.
    pub config: QMatmulConfig,
    /// The winner, ready to run: its split-k buffers are reserved for the bucket's `m`
    /// ([`m_bucket`]), the most rows of the bucket (except the last, unbounded one: reserve
    /// more with [`GpuQMatmul::reserve`]).
    pub kernel: GpuQMatmul,
    /// Where the winner came from, its time, the record (every candidate's time or error).
    pub outcome: TuneOutcome,
}

/// Non-constant, non-zero activations in [-0.5, 0.5).
fn pattern<T: Activation>(len: usize) -> Vec<T> {
    (0..len)
        .map(|i| {
            let h = i.wrapping_mul(2654435761) >> 9;
            T::from_f32((h % 1000) as f32 / 1000.0 - 0.5)
        })
        .collect()
}

/// The winner among `candidates` for an `m`-row problem with `weight`, from `ctx`'s tuner
/// (memory, then the record on disk), else measured now at the bucket's `m` (see the module
/// docs). All candidates must be for one weight: same weight and activation types, group
/// size and zero points (errors name `candidates`). `weight` may be laid out for any of them.
pub fn tune_qmatmul<T: Activation>(
    ctx: &Context,
    candidates: &[QMatmulConfig],
    m: usize,
    weight: &DeviceWeight<T>,
) -> Result<TunedQMatmul, QMatmulError> {
    // The warpgroup MMA only where the device has it.
    let candidates: Vec<QMatmulConfig> = candidates
        .iter()
        .copied()
        .filter(|c| super::runs_on(c, ctx.arch()))
        .collect();
    let candidates = &candidates[..];
    let Some(first) = candidates.first() else {
        return Err(shape_err(
            "candidates",
            format!("empty (or none runs on this {} device)", ctx.arch()),
        ));
    };
    let same_weight = |c: &QMatmulConfig| {
        (c.wdtype, c.adtype, c.group_rows, c.has_zeros)
            == (
                first.wdtype,
                first.adtype,
                first.group_rows,
                first.has_zeros,
            )
    };
    if let Some(c) = candidates.iter().find(|c| !same_weight(c)) {
        return Err(shape_err(
            "candidates",
            format!(
                "{} is for another weight than {}",
                super::config_name(c),
                super::config_name(first)
            ),
        ));
    }
    if T::DTYPE != first.adtype {
        return Err(shape_err(
            "weight",
            format!(
                "holds {} scales, the candidates compute in {}",
                T::DTYPE,
                first.adtype
            ),
        ));
    }
    let (n, k) = (weight.n, weight.k);
    let key = tune_key(ctx, first, m, n, k);
    let rows = m_bucket(m);
    // Allocated on the first measurement only: a remembered winner needs none of it.
    let mut scratch: Option<(L2Flush, DeviceBuffer<T>, DeviceBuffer<T>)> = None;
    let outcome = ctx.tuner().tune_with(
        &key,
        candidates,
        |_, cfg| -> Result<GpuQMatmul, QMatmulError> {
            cfg.check_shape(rows, n, k)?;
            let gpu = GpuQMatmul::new(&build(cfg)?)?;
            gpu.load(ctx)?;
            gpu.reserve(ctx, rows, n)?;
            Ok(gpu)
        },
        |_, _, gpu| -> Result<_, QMatmulError> {
            if scratch.is_none() {
                scratch = Some((
                    L2Flush::with_mode(ctx, L2Mode::Clean)?,
                    DeviceBuffer::from_host(ctx, &pattern::<T>(rows * k))?,
                    DeviceBuffer::zeros(ctx, rows * n)?,
                ));
            }
            let (flush, a, c) = scratch.as_mut().expect("allocated above");
            time_fallible(
                ctx,
                WARMUP_RUNS,
                TIMED_RUNS,
                Some(flush),
                || gpu.run(ctx, rows, a, weight, c),
                QMatmulError::from,
            )
        },
    )?;
    let config = candidates[outcome.index];
    let kernel = GpuQMatmul::new(&build(&config)?)?;
    kernel.reserve(ctx, rows, n)?;
    Ok(TunedQMatmul {
        config,
        kernel,
        outcome,
    })
}

/// Random codes, scales in [0.5, 1) and (with `zeros`) small zero points: a weight of the
/// right sizes for timing (any bytes are a valid re-laid-out weight).
pub fn synthetic_weight<T: Activation>(
    ctx: &Context,
    wdtype: DType,
    n: usize,
    k: usize,
    group: Option<usize>,
    zeros: bool,
) -> Result<DeviceWeight<T>, QMatmulError> {
    let groups = k / group.unwrap_or(k).max(1);
    let bytes = super::config::packed_bytes("k", wdtype, k, n)?;
    // xorshift64, eight bytes per step (a 470 MB weight in well under a second).
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let codes: Vec<u8> = (0..bytes.div_ceil(8))
        .flat_map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()
        })
        .take(bytes)
        .collect();
    let scales: Vec<T> = (0..groups * n)
        .map(|i| T::from_f32(0.5 + (i % 97) as f32 / 194.0))
        .collect();
    Ok(DeviceWeight {
        k,
        n,
        b: DeviceBuffer::from_host(ctx, &codes)?,
        scales: DeviceBuffer::from_host(ctx, &scales)?,
        zeros: if zeros {
            let z: Vec<T> = (0..groups * n)
                .map(|i| T::from_f32((i % 7) as f32))
                .collect();
            Some(DeviceBuffer::from_host(ctx, &z)?)
        } else {
            None
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::qmatmul::prepare;
    use crate::quant::{Group, QuantizedWeight};

    /// The head is the same list, in the same order, without building the rest.
    /// The integer warpgroup gemv is in the space for 8 to 64 tokens of grouped 2- and 4-bit
    /// integers, after the f16 warpgroup gemv that measured faster, and nowhere else.
    #[test]
    fn integer_warpgroup_gemv_is_in_the_tail_of_its_buckets() {
        let igmma = |c: &QMatmulConfig| c.method == QMatmulMethod::GemvIgmma;
        for m in [8, 16, 32, 64] {
            let all = candidates(DType::UInt(2), DType::F16, Some(128), m, 8192, 8192).unwrap();
            let first = all.iter().position(igmma).expect("in the space");
            let wgmma = all
                .iter()
                .position(|c| c.method == QMatmulMethod::GemvWgmma);
            assert!(wgmma.is_some_and(|w| w < first) || m < 9, "m={m}");
            assert!(all.iter().filter(|c| igmma(c)).all(|c| c.bm >= m));
        }
        for (wdtype, group, m) in [
            (DType::UInt(1), Some(128), 16),
            (DType::UInt(2), None, 16),
            (DType::UInt(2), Some(128), 4),
            (DType::UInt(2), Some(128), 128),
        ] {
            let all = candidates(wdtype, DType::F16, group, m, 8192, 8192).unwrap();
            assert!(!all.iter().any(igmma), "{wdtype} {group:?} m={m}");
        }
    }

    #[test]
    fn candidates_up_to_is_the_head_of_candidates() {
        for (w, m) in [
            (DType::UInt(1), 1),
            (DType::Int(4), 16),
            (DType::UInt(4), 64),
        ] {
            let all = candidates(w, DType::F16, Some(128), m, 256, 256).unwrap();
            for limit in [1, 5, all.len() + 3] {
                let head = candidates_up_to(w, DType::F16, Some(128), m, 256, 256, limit).unwrap();
                assert_eq!(head, all[..limit.min(all.len())], "{w} m={m} limit {limit}");
            }
        }
    }

    /// The gemv method is tried at every m up to [`GEMV_MAX_ROWS`], with all of the rows in
    /// one block first, and never above.
    #[test]
    fn gemv_is_tried_up_to_its_row_limit() {
        for (m, first_bm, half_bm) in [
            (1, 8, None),
            (12, 16, None),
            (32, 32, Some(16)),
            (40, 40, Some(24)),
            (64, 64, Some(32)),
        ] {
            let all = candidates(DType::Int(4), DType::F16, Some(128), m, 1024, 1024).unwrap();
            let gemv: Vec<usize> = all
                .iter()
                .filter(|c| c.method == QMatmulMethod::Gemv)
                .map(|c| c.bm)
                .collect();
            assert_eq!(gemv.first(), Some(&first_bm), "m={m}: {all:?}");
            assert!(
                gemv.iter().all(|&bm| bm == first_bm || Some(bm) == half_bm),
                "m={m}: {gemv:?}"
            );
            if let Some(half) = half_bm {
                assert!(gemv.contains(&half), "m={m}: {gemv:?}");
            }
        }
        let all = candidates(DType::Int(4), DType::F16, Some(128), 65, 1024, 1024).unwrap();
        assert!(
            all.iter().all(|c| c.method != QMatmulMethod::Gemv),
            "{all:?}"
        );
    }

    /// From 17 to 64 rows the warpgroup gemv comes first after the default tiles: two k tiles
    /// a stage on stream-k workers (256 columns, two blocks a multiprocessor up to 32 rows;
    /// 128 columns, three one-warpgroup blocks at 64), then one tile a stage, 256 columns wide
    /// where the shape allows, with all of the rows in one block and stages that leave room for
    /// two blocks per multiprocessor. At 9 to 16 rows the two-tile gemv is the second
    /// candidate; at 8 rows or fewer there is none.
    #[test]
    fn warpgroup_gemv_leads_small_batches_in_wide_tiles() {
        for wdtype in [DType::UInt(1), DType::Int(4)] {
            for m in [17, 64] {
                let all =
                    candidates_up_to(wdtype, DType::F16, Some(128), m, 57344, 8192, 20).unwrap();
                let two = |c: &QMatmulConfig| {
                    assert_eq!(c.method, QMatmulMethod::GemvWgmma, "{wdtype} m={m}");
                    assert_eq!(c.stage_tiles, 2, "{c:?}");
                    assert_eq!(c.bm, gemv_rows(m), "{c:?}");
                    (c.bn, c.warps, c.blocks_per_sm, c.stream_k)
                };
                let firsts = if m > 32 {
                    [(128, 4, 3, 396), (256, 8, 1, 132)]
                } else {
                    [(256, 8, 2, 264), (128, 4, 4, 528)]
                };
                assert_eq!([two(&all[1]), two(&all[2])], firsts, "{wdtype} m={m}");
                for c in &all[1..3] {
                    c.tiling().unwrap();
                    assert!((3..=4).contains(&c.stages), "{c:?}");
                }
                let first = all[3];
                assert_eq!(first.method, QMatmulMethod::GemvWgmma, "{wdtype} m={m}");
                assert_eq!(
                    (first.bn, first.bm, first.stage_tiles),
                    (256, gemv_rows(m), 1),
                    "{wdtype} m={m}"
                );
                let wg: Vec<_> = all
                    .iter()
                    .filter(|c| c.method == QMatmulMethod::GemvWgmma && c.stage_tiles == 1)
                    .collect();
                assert!(wg.iter().any(|c| c.bn == 128 && c.split_k == 4), "{wg:?}");
                let workers = if m > 32 { 132 } else { 264 };
                assert_eq!(
                    (all[4].bn, all[4].stream_k),
                    (256, workers),
                    "{wdtype} m={m}"
                );
                assert_eq!((all[5].bn, all[5].stream_k), (128, 264), "{wdtype} m={m}");
                for c in wg {
                    let stage = c.bm * 64 * 2 + 64 * c.bn * wdtype.bits() as usize / 8;
                    assert!((3..=8).contains(&c.stages), "{c:?}");
                    assert!(
                        c.stages == 3 || 2 * c.stages * stage <= 2 * WGMMA_STAGE_BUDGET,
                        "{c:?}"
                    );
                }
            }
            let all = candidates_up_to(wdtype, DType::F16, Some(128), 16, 57344, 8192, 40).unwrap();
            let wg: Vec<_> = all
                .iter()
                .enumerate()
                .filter(|(_, c)| c.method == QMatmulMethod::GemvWgmma)
                .map(|(i, c)| (i, c.bm, c.bn, c.stage_tiles))
                .collect();
            assert_eq!(wg, [(1, 16, 256, 2)], "{wdtype}");
            let all = candidates_up_to(wdtype, DType::F16, Some(128), 8, 57344, 8192, 40).unwrap();
            assert!(all.iter().all(|c| c.method != QMatmulMethod::GemvWgmma));
            // A layer of fewer weights starts with split-k in whole 128-column tiles of one
            // warpgroup, one tile a stage, before the two-tile stream-k workers.
            for m in [32, 64] {
                let all =
                    candidates_up_to(wdtype, DType::F16, Some(128), m, 8192, 8192, 4).unwrap();
                let heads: Vec<_> = all[1..]
                    .iter()
                    .map(|c| (c.bn, c.warps, c.split_k, c.stream_k, c.stage_tiles))
                    .collect();
                let streams = if m > 32 {
                    [(128, 4, 1, 396, 2), (256, 8, 1, 132, 2)]
                } else {
                    [(256, 8, 1, 264, 2), (128, 4, 1, 528, 2)]
                };
                assert_eq!(
                    heads,
                    [(128, 4, 4, 0, 1), streams[0], streams[1]],
                    "{wdtype} m={m}"
                );
            }
        }
    }

    /// Above 64 rows the warpgroup gemv's tall tiles lead: 128 rows per block up to 128
    /// tokens, 256 above, 128 columns, on stream-k workers first, whole tiles after;
    /// dequantize-then-GEMM stays in the prefill list. A layer of fewer tiles than
    /// multiprocessors also tries split-k.
    #[test]
    fn warpgroup_gemv_leads_tall_batches() {
        for wdtype in [DType::UInt(2), DType::Int(4), DType::Int(8)] {
            for (m, bm) in [(65, 128), (128, 128), (129, 256), (256, 256), (4096, 256)] {
                let all =
                    candidates_up_to(wdtype, DType::F16, Some(128), m, 57344, 8192, 5).unwrap();
                let first = all[0];
                assert_eq!(first.method, QMatmulMethod::GemvWgmma, "{wdtype} m={m}");
                assert_eq!(
                    (first.bm, first.bn, first.warps, first.split_k),
                    (bm, 128, 8, 1),
                    "{wdtype} m={m}"
                );
                assert_eq!(
                    first.stream_k,
                    (132 / m.div_ceil(bm)).max(1),
                    "{wdtype} m={m}"
                );
                assert!(
                    all.iter()
                        .any(|c| c.method == QMatmulMethod::GemvWgmma && c.stream_k == 0),
                    "{wdtype} m={m}: {all:?}"
                );
                if m <= 128 {
                    // Then two workers a multiprocessor on the same tiles.
                    let two = all[1];
                    assert_eq!(
                        (two.bm, two.bn, two.stages),
                        (first.bm, first.bn, first.stages)
                    );
                    assert_eq!((two.stream_k, two.blocks_per_sm), (2 * 132, 2), "{wdtype}");
                }
                let stage = bm * 64 * 2 + 64 * 128 * wdtype.bits() as usize / 8;
                assert!((4..=8).contains(&first.stages), "{first:?}");
                assert!(first.stages * stage <= WGMMA_ONE_BLOCK_BUDGET, "{first:?}");
                assert_eq!(
                    all.iter()
                        .any(|c| c.method == QMatmulMethod::DequantizeThenGemm),
                    m > 256,
                    "{wdtype} m={m}: {all:?}"
                );
            }
            // 8192 x 8192 at 256 tokens: 128 whole 256 x 64 tiles (one wave) first, then the
            // 64 tiles of 256 x 128 on 132 stream-k workers, split in two, and whole. Not on
            // 8192 x 28672, whose long k pays for the stream-k workers' partial tiles, nor
            // where the tiles make more than a wave (10240 x 8192: 160).
            let head = |n: usize, k: usize| -> Vec<_> {
                candidates_up_to(wdtype, DType::F16, Some(128), 256, n, k, 4)
                    .unwrap()
                    .iter()
                    .map(|c| (c.method, c.bm, c.bn, c.split_k, c.stream_k))
                    .collect()
            };
            let wg = QMatmulMethod::GemvWgmma;
            assert_eq!(
                head(8192, 8192),
                [
                    (wg, 256, 64, 1, 0),
                    (wg, 256, 128, 1, 132),
                    (wg, 256, 128, 2, 0),
                    (wg, 256, 128, 1, 0)
                ],
                "{wdtype}"
            );
            for (n, k) in [(8192, 28672), (10240, 8192)] {
                assert_eq!(head(n, k)[0], (wg, 256, 128, 1, 132), "{wdtype} {n}x{k}");
            }
        }
    }

    /// The stream-k workers planned for the reference GPU follow the device's multiprocessors
    /// (an H100 PCIe's 114, a larger part's 144); the reference count and configurations
    /// without stream-k are left as they are; every scaled configuration stays valid.
    #[test]
    fn stream_k_workers_follow_the_multiprocessors() {
        let mut seen = 0;
        for m in [32, 64, 128, 256, 1024] {
            let all =
                candidates_up_to(DType::Int(4), DType::F16, Some(128), m, 57344, 8192, 12).unwrap();
            for c in all {
                assert_eq!(c.for_multiprocessors(SMS), c);
                for sms in [114, 144] {
                    let d = c.for_multiprocessors(sms);
                    assert_eq!(d.stream_k == 0, c.stream_k == 0, "{c:?}");
                    assert_eq!(
                        QMatmulConfig {
                            stream_k: c.stream_k,
                            ..d
                        },
                        c
                    );
                    if c.stream_k > 0 {
                        seen += 1;
                        assert_eq!(d.stream_k, (c.stream_k * sms / SMS).max(1), "{c:?}");
                        assert!(d.tiling().is_ok() && d.check_shape(m, 57344, 8192).is_ok());
                    }
                }
            }
        }
        assert!(seen > 0, "no stream-k candidate among the heads");
        let one = QMatmulConfig {
            stream_k: 1,
            ..QMatmulConfig::for_shape(DType::Int(4), DType::F16, Some(128), false, 8192, 8192)
                .unwrap()
        };
        assert_eq!(one.for_multiprocessors(78).stream_k, 1);
    }

    #[test]
    fn buckets_are_powers_of_two_up_to_the_cap() {
        let got: Vec<usize> = [
            0,
            1,
            2,
            3,
            4,
            5,
            16,
            17,
            4096,
            4097,
            8192,
            100_000,
            usize::MAX,
        ]
        .iter()
        .map(|&m| m_bucket(m))
        .collect();
        assert_eq!(
            got,
            [1, 1, 2, 4, 4, 8, 16, 32, 4096, 8192, 8192, 8192, 8192]
        );
        let cfg = QMatmulConfig::for_shape(DType::UInt(4), DType::F16, Some(128), true, 256, 512)
            .unwrap();
        assert_eq!(
            bucket_label(&cfg, 17, 256, 512),
            "m<=32 n=256 k=512 w=u4 a=f16 g=128 z=1"
        );
        assert_eq!(
            bucket_label(&cfg, 5000, 256, 512),
            bucket_label(&cfg, 1 << 20, 256, 512)
        );
        assert!(bucket_label(&cfg, 5000, 256, 512).starts_with("m>4096 "));
        let pc = QMatmulConfig {
            group_rows: None,
            ..cfg
        };
        assert!(bucket_label(&pc, 1, 256, 512).contains("g=channel"));
        assert_ne!(
            bucket_label(&cfg, 16, 256, 512),
            bucket_label(&cfg, 17, 256, 512)
        );
    }

    #[test]
    fn the_codegen_fingerprint_is_stable_hex() {
        let a = codegen_fingerprint();
        assert_eq!(a.len(), 16);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_eq!(a, codegen_fingerprint());
    }

    #[test]
    fn config_json_names_every_field() {
        let cfg =
            QMatmulConfig::for_shape(DType::Int(4), DType::BF16, None, false, 256, 512).unwrap();
        let v = cfg.to_json();
        assert_eq!(v["wdtype"], "i4");
        assert_eq!(v["adtype"], "bf16");
        assert_eq!(v["group_rows"], Value::Null);
        for f in [
            "bm",
            "bn",
            "bk",
            "warps",
            "stages",
            "split_k",
            "stream_k",
            "blocks_per_sm",
        ] {
            assert!(v[f].is_u64(), "{f}");
        }
        assert_eq!(v["method"], "fused");
        assert_eq!(v["specialize"], false);
        let gemm = QMatmulConfig {
            method: QMatmulMethod::DequantizeThenGemm,
            ..cfg
        };
        assert_ne!(gemm.to_json(), v);
        let other = QMatmulConfig { stages: 4, ..cfg };
        assert_ne!(other.to_json(), v);
    }

    /// The rated look-up tilings are valid two-blocks-per-SM configurations; the first fills
    /// one wave of `2 · SMS` slots at least 84% (the Llama-70B layers), and equal ratings go
    /// to the wider block.
    #[test]
    fn lut_tilings_fill_a_wave_and_build() {
        for (wd, n, k) in [
            ("u1", 57344, 8192),
            ("u1", 8192, 28672),
            ("u1", 10240, 8192),
            ("u1", 8192, 8192),
            ("u2", 57344, 8192),
            ("i2", 8192, 28672),
            ("u2", 8192, 1024),
        ] {
            let wdtype: DType = wd.parse().unwrap();
            let tilings = lut_tilings(wdtype.bits() as usize, 128, n, k);
            assert_eq!(tilings.len(), 3, "{wd} {n}x{k}");
            for &(bn, split) in &tilings {
                let cfg =
                    QMatmulConfig::default_for(wdtype, DType::F16, Some(128), wd.starts_with('u'))
                        .lut(bn, 8, split, 2);
                cfg.check_shape(1, n, k).unwrap();
                build(&cfg).unwrap();
            }
            let (bn, split) = tilings[0];
            let blocks = n / bn * split;
            if k >= 8192 {
                assert!(
                    blocks <= 2 * SMS && blocks * 100 >= 84 * 2 * SMS,
                    "{wd} {n}x{k}: {blocks} blocks"
                );
            }
        }
        // u1 at 8192 x 8192: bn 256 split 8 and bn 512 split 16 do the same look-ups in
        // 256 blocks; the wider block builds half the tables.
        assert_eq!(lut_tilings(1, 128, 8192, 8192)[0], (512, 16));
        // Groups the method does not take, and hostile sizes: nothing, and no overflow.
        for group in [0, 8, 96, 512, usize::MAX] {
            assert!(lut_tilings(1, group, 8192, 8192).is_empty(), "{group}");
            let _ = lut_tilings_one_block(group, usize::MAX, usize::MAX);
        }
        assert!(lut_tilings(1, 128, 8192, 256).is_empty());
        assert!(!lut_tilings(2, 32, 1 << 40, usize::MAX).is_empty());
    }

    #[test]
    fn space_points_are_valid_and_distinct() {
        // (Fewer points for the large-m case: its large tiles are slow to build in debug.)
        for (w, m, n, k, group, points) in [
            ("i4", 1, 4096, 4096, Some(128), 50),
            ("f6e3m2", 17, 2048, 1024, None, 50),
            ("u3", 4096, 8192, 2048, Some(64), 12),
        ] {
            let wdtype: DType = w.parse().unwrap();
            let space = tuning_space(wdtype, DType::F16, group, m, n, k, points).unwrap();
            assert_eq!(space.len(), points, "{w} m={m}");
            let short = candidates(wdtype, DType::F16, group, m, n, k).unwrap();
            let first = short.len().min(points);
            assert_eq!(
                &space[..first],
                &short[..first],
                "the short list comes first"
            );
            for (i, c) in space.iter().enumerate() {
                assert!(!space[..i].contains(c), "{w}: duplicate {c:?}");
                c.check_shape(m, n, k).unwrap();
                assert_eq!(c.has_zeros, matches!(wdtype, DType::UInt(_)));
                assert_eq!(
                    (c.wdtype, c.adtype, c.group_rows),
                    (wdtype, DType::F16, group)
                );
            }
            // The space varies the dimensions that matter.
            let distinct = |f: fn(&QMatmulConfig) -> usize| {
                let mut v: Vec<usize> = space.iter().map(f).collect();
                v.sort();
                v.dedup();
                v.len()
            };
            assert!(distinct(|c| c.stages) >= 2, "{w}");
            assert!(distinct(|c| c.bk) >= 2, "{w}");
        }
        // Truncation and a small shape with few valid points.
        let space = tuning_space(DType::Int(4), DType::F16, Some(32), 1, 64, 32, 1000).unwrap();
        assert!(!space.is_empty() && space.len() < 1000, "{}", space.len());
        assert_eq!(
            tuning_space(DType::Int(4), DType::F16, Some(128), 1, 4096, 4096, 3)
                .unwrap()
                .len(),
            3
        );
        let e = tuning_space(DType::Int(4), DType::F16, Some(128), 1, 4096, 4096, 0).unwrap_err();
        assert!(e.to_string().contains("`points`"), "{e}");
        for points in [MAX_TUNING_POINTS + 1, usize::MAX] {
            let e = tuning_space(DType::Int(4), DType::F16, Some(128), 1, 4096, 4096, points)
                .unwrap_err();
            assert!(e.to_string().contains("argument `points`: "), "{e}");
            assert!(e.to_string().contains("at most 4096"), "{e}");
        }
        let e =
            tuning_space(DType::Int(4), DType::F16, Some(128), 1, 4000 + 8, 4096, 50).unwrap_err();
        assert!(e.to_string().contains("`n`"), "{e}");
    }

    /// Equal keys must mean equal prepared weights: a layer shares one device copy per key.
    #[test]
    fn equal_layout_keys_mean_equal_prepared_weights() {
        let (n, k) = (512, 512);
        for w in ["i4", "u3", "f6e3m2", "u8"] {
            let wdtype: DType = w.parse().unwrap();
            let zeros = matches!(wdtype, DType::UInt(_));
            let vals: Vec<f32> = (0..k * n)
                .map(|i| ((i * 7919 % 1013) as f32 - 506.0) / 506.0)
                .collect();
            let q =
                QuantizedWeight::quantize(&vals, k, n, wdtype, Group::Rows(128), DType::F16, zeros)
                    .unwrap();
            let space = tuning_space(wdtype, DType::F16, Some(128), 16, n, k, 60).unwrap();
            let mut seen: Vec<(WeightLayoutKey, Vec<u8>)> = Vec::new();
            for c in &space {
                let key = WeightLayoutKey::of(c).unwrap();
                let bytes = prepare(&q, c).unwrap().b;
                match seen.iter().find(|(k2, _)| *k2 == key) {
                    Some((_, b)) => assert!(*b == bytes, "{w}: same key, other bytes: {c:?}"),
                    None => seen.push((key, bytes)),
                }
            }
            assert!(
                seen.len() >= 2,
                "{w}: the space should cover several layouts"
            );
        }
    }
}
