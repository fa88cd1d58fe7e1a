//! `tilus bench ...`: GPU measurements printed as tables.
//!
//! Every figure is a median of CUDA-event timings after warm-up. Bandwidth counts bytes read
//! plus bytes written, the same way the copy-bandwidth floor is counted.

use clap::Subcommand;
use half::f16;
use std::io::Write;
use tilus::element::Activation;
use tilus::kernels::qmatmul::bench::{bench_configs, bench_cublas, precompile, tuned_head};
use tilus::kernels::qmatmul::tune::candidates_up_to;
use tilus::kernels::qmatmul::tune::{
    bucket_label, check_tuning_space, m_bucket, synthetic_weight, tiles, tune_key, tune_qmatmul,
    tuning_space,
};
use tilus::kernels::qmatmul::{QMatmulConfig, QMatmulError};
use tilus::DType;
use tilus_runtime::{
    copy_bandwidth, time_runs, Context, Cublas, DeviceBuffer, L2Flush, L2Mode, TuneSource,
};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Device-to-device copy bandwidth (the floor memory-bound kernels are judged against).
    Copy {
        /// Bytes copied per run, in MiB (far over L2, so the copy streams from DRAM).
        #[arg(long, default_value_t = 1024)]
        mib: usize,
    },
    /// The quantized matmul `C[m,n] = A[m,k] · dequant(W)` (f16 activations), best of a few
    /// configurations, against the copy-bandwidth floor and cuBLAS f16.
    Qmatmul {
        /// Weight type, e.g. i4, u3, f6e3m2.
        #[arg(long)]
        wdtype: String,
        /// Rows of the activation A (tokens in the batch).
        #[arg(long)]
        m: usize,
        /// Output features: columns of the weight and of C.
        #[arg(long, default_value_t = 57344)]
        n: usize,
        /// Input features: rows of the weight, columns of A.
        #[arg(long, default_value_t = 8192)]
        k: usize,
        /// Rows per scale group; 0 for per-channel scales.
        #[arg(long, default_value_t = 128)]
        group: usize,
        /// How many configurations to try.
        #[arg(long, default_value_t = 3)]
        tune: usize,
        /// Print the time of every configuration tried.
        #[arg(long)]
        verbose: bool,
        /// Activation (and scale, output) type: f16 or bf16; cuBLAS stays f16.
        #[arg(long, default_value = "f16")]
        adtype: String,
        /// What the L2 flush before each run leaves in L2: `clean` lines (a memset, then a
        /// read-back) or `dirty` ones (a memset only: the timed kernel also writes ~50 MB back).
        #[arg(long, default_value = "clean")]
        l2: String,
        /// Time exactly this configuration instead of the tuner's first `--tune`; repeat for
        /// several. Keys as `tilus emit qmatmul` takes them, without the types and group
        /// (`--wdtype`, `--adtype`, `--group`): `METHOD=gemv_wgmma,BM=64,BN=128,BK=64,WARPS=4`.
        #[arg(long)]
        config: Vec<String>,
    },
    /// Sweep weight types x m and print a table (and write CSV with --csv).
    Sweep {
        /// Comma-separated weight types (default: all 25).
        #[arg(long)]
        wdtypes: Option<String>,
        /// Comma-separated m values.
        #[arg(long, default_value = "1,16,4096")]
        m: String,
        /// Output features: columns of the weight and of C.
        #[arg(long, default_value_t = 57344)]
        n: usize,
        /// Input features: rows of the weight, columns of A.
        #[arg(long, default_value_t = 8192)]
        k: usize,
        /// Comma-separated weight shapes `NxK` (output x input features) instead of `--n`/`--k`,
        /// or `llama70b` for the four layers of a Llama-3-70B decode step (qkv 10240x8192,
        /// o 8192x8192, gate+up 57344x8192, down 8192x28672).
        #[arg(long)]
        shapes: Option<String>,
        /// Rows per scale group; 0 for per-channel scales.
        #[arg(long, default_value_t = 128)]
        group: usize,
        /// How many configurations to try, best first in the tuning order.
        #[arg(long, default_value_t = 3)]
        tune: usize,
        /// Print the time of every configuration tried.
        #[arg(long)]
        verbose: bool,
        /// Activation (and scale, output) type: f16 or bf16; cuBLAS stays f16.
        #[arg(long, default_value = "f16")]
        adtype: String,
        /// What the L2 flush before each run leaves in L2: `clean` lines (a memset, then a
        /// read-back) or `dirty` ones (a memset only: the timed kernel also writes ~50 MB back).
        #[arg(long, default_value = "clean")]
        l2: String,
        /// Also write the table as CSV to this file.
        #[arg(long)]
        csv: Option<std::path::PathBuf>,
    },
    /// A decode step of weight-only layers: the shapes' `GpuQuantizedLinear` forwards (each
    /// layer planned at `m` by its own tuner) queued back to back, one L2 flush a step, as
    /// ordinary launches and with each layer after the first a programmatic dependent of the
    /// one before (its first weight tiles load while that layer ends), against the layers'
    /// floors added and their lone times added.
    Step {
        /// Comma-separated weight types.
        #[arg(long, default_value = "u2,i4")]
        wdtypes: String,
        /// Comma-separated m values.
        #[arg(long, default_value = "1")]
        m: String,
        /// Comma-separated weight shapes `NxK` in step order, or `llama70b` (qkv 10240x8192,
        /// o 8192x8192, gate+up 57344x8192, down 8192x28672).
        #[arg(long, default_value = "llama70b")]
        shapes: String,
        /// Rows per scale group; 0 for per-channel scales.
        #[arg(long, default_value_t = 128)]
        group: usize,
        /// Activation (and scale, output) type: f16 or bf16.
        #[arg(long, default_value = "f16")]
        adtype: String,
        /// Timed runs per measurement (the median is reported).
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// What the L2 flush before each step leaves in L2 (`clean` or `dirty`).
        #[arg(long, default_value = "clean")]
        l2: String,
    },
    /// Autotune the quantized matmul for one shape over a space of `--points` configurations:
    /// prints the time to tune, the winner, and whether a persisted winner was reused (a second
    /// run reuses the record under `<cache dir>/tune` and takes ~0 s).
    Tune {
        /// Weight type, e.g. i4, u3, f6e3m2.
        #[arg(long)]
        wdtype: String,
        /// Rows of the activation A (tokens in the batch).
        #[arg(long)]
        m: usize,
        /// Output features: columns of the weight and of C.
        #[arg(long, default_value_t = 57344)]
        n: usize,
        /// Input features: rows of the weight, columns of A.
        #[arg(long, default_value_t = 8192)]
        k: usize,
        /// Rows per scale group; 0 for per-channel scales.
        #[arg(long, default_value_t = 128)]
        group: usize,
        /// Activation type: f16 or bf16.
        #[arg(long, default_value = "f16")]
        adtype: String,
        /// Size of the configuration space.
        #[arg(long, default_value_t = 50)]
        points: usize,
        /// Forget a persisted winner first and measure again.
        #[arg(long)]
        retune: bool,
    },
    /// The row-wise kernels (softmax, LayerNorm, RMSNorm, the fused residual RMSNorm, argmax,
    /// SiLU-and-mul, rotary) on `[rows, n]` tensors, against the copy-bandwidth floor measured
    /// in the same run. `bench/torch_rowwise.py` prints torch's numbers in the same table.
    Rowwise {
        /// Comma-separated shapes `ROWSxN`, N at most 8192.
        #[arg(long, default_value = "8192x8192,4096x1024")]
        shapes: String,
        /// Element type: f16 or bf16.
        #[arg(long, default_value = "f16")]
        dtype: String,
        /// Timed runs per kernel (the median is reported).
        #[arg(long, default_value_t = 50)]
        runs: usize,
    },
    /// Decode attention (one new token per sequence) over a paged or contiguous KV cache, for
    /// each batch size and KV length, against the copy-bandwidth floor measured in the same run.
    /// `bench/torch_attention.py` prints torch's `scaled_dot_product_attention` in the same
    /// table.
    Attention {
        /// Comma-separated batch sizes.
        #[arg(long, default_value = "1,16,64")]
        batch: String,
        /// Comma-separated KV lengths (tokens per sequence).
        #[arg(long, default_value = "1024,8192,32768,131072")]
        lens: String,
        /// Query heads, KV heads and head dim, `Q/KV/D` (Llama-3-70B: 64/8/128).
        #[arg(long, default_value = "64/8/128")]
        heads: String,
        /// Tokens per page; 0 for a contiguous cache.
        #[arg(long, default_value_t = 32)]
        page: usize,
        /// Element type of queries, outputs and the cache: f16 or bf16.
        #[arg(long, default_value = "f16")]
        dtype: String,
        /// Timed runs per point (the median is reported).
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// What the L2 flush before each run leaves in L2: `clean` lines (a memset, then a
        /// read-back) or `dirty` ones (a memset only: the timed kernel also writes ~50 MB back).
        #[arg(long, default_value = "clean")]
        l2: String,
        /// Measure each point with several tile and schedule parameters, not only the default.
        #[arg(long)]
        sweep: bool,
        /// The cache's format: `act` (the activation type), a code type with a scale and
        /// zero point per token and head (`i8`, `f8e4m3`, `u4`, ...), or a vector-quantized
        /// (CQ) cache, `cq2`, `cq4` (`cq2g`, `cq4g`: a codebook per channel group), measured
        /// against the activation-type cache in the same run (both contiguous: `--page` is
        /// ignored; `--sweep` also tries 32 tokens per warp).
        #[arg(long, default_value = "act")]
        kv: String,
        /// Measure causal prefill instead of decode, on these shapes `BxNxHQxHKVxD` (batch,
        /// tokens per sequence, query heads, KV heads, head dim), comma-separated; `issue` is
        /// the two shapes of issue 17 (1x4096x32x8x128, 1x8192x64x8x128).
        #[arg(long)]
        prefill: Option<String>,
    },
    /// What a tuned quantized linear layer (f16) costs per call besides its kernels: the host
    /// time to queue `forward_into`, the GPU time per call of `--calls` calls queued back to
    /// back, one call timed alone, the configuration's kernel alone (back to back, no layer),
    /// and the calls captured in one CUDA graph and replayed (`graph`); `overhead` is one call
    /// alone minus the kernel. `--shapes small` is the decode
    /// layers that need split-k (8192x8192, 8192x1024, 4096x1024).
    Launch {
        /// Weight type, e.g. i4, u2.
        #[arg(long, default_value = "i4")]
        wdtype: String,
        /// Rows of the activation.
        #[arg(long, default_value_t = 1)]
        m: usize,
        /// Comma-separated weight shapes `NxK`, `llama70b`, or `small` (8192x8192, 8192x1024,
        /// 4096x1024: the decode layers that need split-k).
        #[arg(long, default_value = "8192x8192")]
        shapes: String,
        /// Rows per scale group; 0 for per-channel scales.
        #[arg(long, default_value_t = 128)]
        group: usize,
        /// Calls per measurement.
        #[arg(long, default_value_t = 200)]
        calls: usize,
    },
    /// The dense GEMM on Hopper's warpgroup MMA, `c = a · bᵀ` (f16, bf16, or 8-bit: i8 into
    /// i32, fp8 e4m3/e5m2 into f16), every configuration timed, the best against cuBLAS
    /// (`gemm_nt`, 16-bit types) in the same run; `bench/torch_gemm8.py` times torch's int8
    /// and fp8 GEMMs for the 8-bit types.
    Dense {
        /// Comma-separated `MxNxK`, or `default` (8192^3, the Llama-3-70B prefill layers at 8192
        /// tokens, 4096^3).
        #[arg(long, default_value = "default")]
        shapes: String,
        /// `f16`, `bf16`, `i8`, `e4m3` or `e5m2`.
        #[arg(long, default_value = "f16")]
        dtype: String,
        /// Timed runs per configuration (the median is reported).
        #[arg(long, default_value_t = 10)]
        runs: usize,
        /// Skip the cuBLAS column.
        #[arg(long = "no-cublas")]
        no_cublas: bool,
        /// Print every configuration's time (stderr), not only each pipeline's best.
        #[arg(long)]
        verbose: bool,
        /// Then time each pipeline's best and cuBLAS again in turns this many times, and report
        /// the medians (0: the sweep's own times).
        #[arg(long, default_value_t = 0)]
        rounds: usize,
    },
    /// The 4-bit-weight GEMM on the warpgroup MMA (`kernels::gemm::w4`) per m and shape,
    /// against the memory floor, cuBLAS f16 and the mma.sync quantized matmul in the same run.
    W4 {
        /// Comma-separated m values (tokens).
        #[arg(long, default_value = "16,32,64,128,256,1024")]
        m: String,
        /// Comma-separated weight shapes `NxK`, or `llama70b`.
        #[arg(long, default_value = "llama70b")]
        shapes: String,
        /// Elements of k per scale (a multiple of 64 dividing k).
        #[arg(long, default_value_t = 128)]
        group: usize,
        /// Timed runs per configuration (the median is reported).
        #[arg(long, default_value_t = 10)]
        runs: usize,
        /// Skip the cuBLAS column.
        #[arg(long = "no-cublas")]
        no_cublas: bool,
        /// Skip the mma.sync quantized matmul column.
        #[arg(long = "no-mma-sync")]
        no_mma_sync: bool,
    },
    /// cuBLAS f16 GEMM `C[m,n] = A[m,k] · B[k,n]` (the baseline of the quantized kernels).
    Gemm {
        /// Rows of A and of C.
        #[arg(long)]
        m: usize,
        /// Columns of B and of C.
        #[arg(long)]
        n: usize,
        /// Columns of A, rows of B.
        #[arg(long)]
        k: usize,
        /// What the L2 flush before each run leaves in L2: `clean` lines (a memset, then a
        /// read-back) or `dirty` ones (a memset only: the timed kernel also writes ~50 MB back).
        #[arg(long, default_value = "clean")]
        l2: String,
    },
    /// Import of a GPTQ layer from a safetensors file in the page cache (host only, no GPU):
    /// writes a synthetic layer to a temporary file, reads it once, then times the import
    /// (by default the 70B-shaped gate+up layer, 57344 x 8192, u4, group 128).
    Import {
        /// Input features (rows of our weight).
        #[arg(long, default_value_t = 8192)]
        k: usize,
        /// Output features.
        #[arg(long, default_value_t = 57344)]
        n: usize,
        /// Bits per weight: 2, 3, 4 or 8.
        #[arg(long, default_value_t = 4)]
        bits: usize,
        /// Rows per scale group.
        #[arg(long, default_value_t = 128)]
        group: usize,
        /// Timed imports (the median is reported).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// With an act-order `g_idx` (rows gathered by group while unpacking).
        #[arg(long = "act-order")]
        act_order: bool,
    },
    /// APT-LLM WxAy layers on the 1-bit tensor cores (activation quantizer + bit-serial GEMM)
    /// against the memory floor and cuBLAS f16 measured in the same run; `bench/torch_apt.py`
    /// prints cuBLAS f16 and torch's int8 `_int_mm` in the same table.
    Apt {
        /// Comma-separated widths `WxAy`.
        #[arg(long, default_value = "W1A2,W2A2,W3A4,W4A4,W2A8")]
        widths: String,
        /// Comma-separated m values (tokens).
        #[arg(long, default_value = "1,64,4096")]
        m: String,
        /// `paper` (the APT-LLM paper's Llama-3-8B shapes), `llama70b`, or comma-separated
        /// weight shapes `NxK` (output x input features).
        #[arg(long, default_value = "paper")]
        shapes: String,
        /// Timed runs per point (the median is reported).
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Skip the cuBLAS f16 column.
        #[arg(long = "no-cublas")]
        no_cublas: bool,
        /// Skip the column of the project's weight-only kernel (`bench qmatmul`, u<W> weight).
        #[arg(long = "no-weight-only")]
        no_weight_only: bool,
        /// The GEMM's shared-memory stages (0: register prefetch, 2..8: a cp.async ring)
        /// instead of the layer's choice (3 above m = 16, the fused kernel or 0 at decode).
        #[arg(long)]
        stages: Option<usize>,
        /// k slices of the fused decode kernel (1 or 4, dividing k's steps) instead of the
        /// layer's (1).
        #[arg(long)]
        split: Option<usize>,
        /// Comma-separated tilings `WARPSxROWSxVEC[xPER_SM[xSTAGES[xQSPLIT]]]` of the popc
        /// decode kernel to time (the fastest is reported) instead of the layer's rule, e.g.
        /// `4x4x4,16x2x4x1x0x4` (2 blocks per SM, register prefetch (stages 0) and one thread
        /// per activation word in the prologue when left out).
        #[arg(long = "popc-tiles")]
        popc_tiles: Option<String>,
        /// Comma-separated tilings `WMxWNxFMxFNxKTxSTAGES` of the bit-serial GEMM to time (the
        /// fastest is reported, and the 2-launch layer uses it) instead of the layer's rule,
        /// e.g. `2x2x2x2x1x3,2x4x2x1x2x4`.
        #[arg(long = "gemm-tiles")]
        gemm_tiles: Option<String>,
        /// Comma-separated tilings `BNxBKxWARPSxSTAGES[xSPLIT]` of the integer-mma decode
        /// kernel to time at decode sizes (the fastest is reported) instead of the layer's
        /// rule, e.g. `448x256x4x4,256x256x4x5x4` (k whole when SPLIT is left out).
        #[arg(long = "imma-tiles")]
        imma_tiles: Option<String>,
        /// Time only the popc decode kernel (with `--popc-tiles`, or the layer's rule), not the
        /// other kernels and launches of each point: a tiling scan at m <= 4 at a fraction of
        /// the device time. The layer column is then the popc kernel.
        #[arg(long = "popc-only")]
        popc_only: bool,
        /// Tune each layer first and time the winner: its one-token kernel and tiles (every
        /// point of `kernels::apt::tune::candidates` timed once) and, from 2 tokens on sm_90a,
        /// its GEMM (`kernels::apt::tune::batch_candidates`, the quantizer included), each
        /// winner remembered per GPU with the kernel cache; the log names the winners.
        #[arg(long)]
        tune: bool,
        /// What the L2 flush before each run leaves in L2: `clean` lines (a memset, then a
        /// read-back) or `dirty` ones (a memset only: the timed kernel also writes ~50 MB back).
        #[arg(long, default_value = "clean")]
        l2: String,
        /// Time a decode step instead of each layer: the shapes' forwards (`--shapes llama70b`:
        /// one Llama-70B block) queued back to back at each width and m, one L2 flush a step,
        /// against the layers' floors added and the layers timed one by one.
        #[arg(long)]
        step: bool,
    },
    /// VQ-GEMV (vector-quantized weights, `docs/vq.md`) with the codebook cache, against the
    /// memory floor, the naive GC kernel, cuBLAS f16 and the element-wise kernel of the same
    /// bit width, measured in the same run.
    Vq {
        /// Comma-separated formats: gptvq2, aqlm2x8, aqlm3, quip4 (default: all but aqlm2x8).
        #[arg(long, default_value = "gptvq2,aqlm3,quip4")]
        configs: String,
        /// Comma-separated m values (tokens, 1..=16; with `--dense` up to 16384).
        #[arg(long, default_value = "1,16")]
        m: String,
        /// Time prefill's path too: the dense weight (`vq_dequant`) and one cuBLAS GEMM on it
        /// (`dense us`). The naive GC kernel is timed up to 16 tokens only.
        #[arg(long)]
        dense: bool,
        /// `llama70b` (57344x8192, 8192x28672, 8192x8192) or comma-separated `NxK`.
        #[arg(long, default_value = "llama70b")]
        shapes: String,
        /// Copies of the codebook in shared memory (1, 16 for vectors of 4, 8 for quip4's
        /// table and aqlm2x8's codebook) instead of each format's default.
        #[arg(long)]
        cache: Option<String>,
        /// Stages of the kernel's cp.async ring of activations and codes (2..=8; default 3).
        #[arg(long)]
        stages: Option<usize>,
        /// The k split (1, 2, 4, 8) instead of the layer's choice per shape.
        #[arg(long)]
        split: Option<usize>,
        /// Warps per block (1, 2, 4, 8, 16; 32 output channels each) instead of the format's
        /// default.
        #[arg(long)]
        warps: Option<usize>,
        /// The product: 0 (`y = x · Wᵀ`, 16 tokens per block), 1 or 2 (`yᵀ = W · xᵀ`, 8 or 16
        /// tokens), 3 (the paired `yᵀ = W · xᵀ`, 4 tokens, vectors of 4) instead of the layer's
        /// choice per m.
        #[arg(long)]
        product: Option<usize>,
        /// How a split k adds its partial sums: `ordered` (stored apart, added in split order
        /// by the last block, one launch) or `atomic` (atomics into one sum, then a second
        /// launch), instead of the layer's choice per m.
        #[arg(long)]
        reduce: Option<String>,
        /// One token by tables (formats with one codebook per matrix and vectors of 8, e.g.
        /// AQLM): `on`, `off`, or `WARPSxRSxPER[xTABLES]` (warps per block, rows per thread,
        /// chunks of 8 codes per block, chunk tables in shared memory: 2, a ring, or 1, two
        /// blocks per multiprocessor) instead of the layer's rule. Where the tables run, the direct
        /// kernel is timed too (`direct us`).
        #[arg(long)]
        lut: Option<String>,
        /// Autotune the direct kernel's copies, warps, stages, k split and product per format,
        /// shape and m (`tilus::kernels::vq::tune`; the winner is remembered per GPU), after
        /// the knobs above, which the tuning then replaces.
        #[arg(long)]
        tune: bool,
        /// Time the three-tier codebook cache (`vq_gemv_cached`: entries in registers, shared
        /// and global memory) at every point of its tuning space, in a second table.
        #[arg(long)]
        tiers: bool,
        /// Skewed random codes (code `floor(u^2 * entries)` for uniform `u`: the hottest 1/8 of
        /// the entries take 35% of the look-ups) instead of uniform ones, the cache's worst case.
        #[arg(long)]
        skewed: bool,
        /// Timed runs per point (the median is reported).
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Skip the cuBLAS f16 column.
        #[arg(long = "no-cublas")]
        no_cublas: bool,
        /// Skip the element-wise kernel's column.
        #[arg(long = "no-elementwise")]
        no_elementwise: bool,
        /// What the L2 flush before each run leaves in L2: `clean` lines (a memset, then a
        /// read-back) or `dirty` ones (a memset only: the timed kernel also writes ~50 MB back).
        #[arg(long, default_value = "clean")]
        l2: String,
    },
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// `tilus bench w4 --shapes`: `llama70b` or comma-separated `NxK`.
fn parse_w4_shapes(shapes: &str) -> Result<Vec<(usize, usize)>, String> {
    if shapes.trim() == "llama70b" {
        return Ok(tilus::kernels::apt::bench::LLAMA70B_SHAPES.to_vec());
    }
    shapes
        .split(',')
        .map(|s| {
            let bad = || format!("argument `--shapes`: `{s}` is not NxK with positive extents below 2^31, or `llama70b`");
            let (n, k) = s.trim().split_once('x').ok_or_else(bad)?;
            let (n, k) = (n.parse::<usize>().map_err(|_| bad())?, k.parse::<usize>().map_err(|_| bad())?);
            if n == 0 || k == 0 || n > i32::MAX as usize || k > i32::MAX as usize {
                return Err(bad());
            }
            Ok((n, k))
        })
        .collect()
}

/// `tilus bench dense --shapes`: `default` or comma-separated `MxNxK`.
fn parse_dense_shapes(shapes: &str) -> Result<Vec<(usize, usize, usize)>, String> {
    if shapes.trim() == "default" {
        return Ok(tilus::kernels::gemm::bench::DEFAULT_SHAPES.to_vec());
    }
    shapes
        .split(',')
        .map(|s| {
            let bad = || format!("argument `--shapes`: `{s}` is not MxNxK with positive extents below 2^31, or `default`");
            let v: Vec<usize> = s
                .trim()
                .split('x')
                .map(|x| x.parse::<usize>().map_err(|_| bad()))
                .collect::<Result<_, _>>()?;
            match v[..] {
                [m, n, k] if [m, n, k].iter().all(|&x| x > 0 && x <= i32::MAX as usize) => {
                    Ok((m, n, k))
                }
                _ => Err(bad()),
            }
        })
        .collect()
}

/// Bad arguments are reported before a GPU is looked for.
fn validate(cmd: &BenchCommand) -> Result<(), String> {
    let positive: Vec<(&str, usize)> = match *cmd {
        BenchCommand::Copy { mib } => vec![("--mib", mib)],
        BenchCommand::Gemm { m, n, k, .. } => vec![("--m", m), ("--n", n), ("--k", k)],
        BenchCommand::Qmatmul { m, n, k, tune, .. } => {
            vec![("--m", m), ("--n", n), ("--k", k), ("--tune", tune)]
        }
        BenchCommand::Sweep { n, k, tune, .. } => vec![("--n", n), ("--k", k), ("--tune", tune)],
        BenchCommand::Step { runs, .. } => vec![("--runs", runs)],
        BenchCommand::Tune {
            m, n, k, points, ..
        } => vec![("--m", m), ("--n", n), ("--k", k), ("--points", points)],
        BenchCommand::Rowwise { runs, .. } => vec![("--runs", runs)],
        BenchCommand::Launch { m, calls, .. } => vec![("--m", m), ("--calls", calls)],
        BenchCommand::Attention { runs, .. } => vec![("--runs", runs)],
        BenchCommand::Apt { runs, .. } => vec![("--runs", runs)],
        BenchCommand::Vq { runs, .. } => vec![("--runs", runs)],
        BenchCommand::Dense { runs, .. } => vec![("--runs", runs)],
        BenchCommand::W4 { runs, group, .. } => vec![("--runs", runs), ("--group", group)],
        BenchCommand::Import {
            k, n, group, runs, ..
        } => vec![("--k", k), ("--n", n), ("--group", group), ("--runs", runs)],
    };
    if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
        return Err(format!("argument `{name}`: must be positive"));
    }
    match cmd {
        BenchCommand::Qmatmul {
            wdtype,
            m,
            n,
            k,
            l2,
            adtype,
            group,
            config,
            ..
        } => {
            parse_l2(l2)?;
            parse_adtype(adtype)?;
            parse_type(wdtype)?;
            qmatmul_configs(wdtype, adtype, *group, config, (*m, *n, *k)).map(drop)
        }
        BenchCommand::Gemm { l2, .. } => parse_l2(l2).map(drop),
        BenchCommand::Dense { shapes, dtype, .. } => {
            if !tilus::kernels::gemm::bench::DTYPES.contains(&dtype.as_str()) {
                return Err(format!(
                    "argument `--dtype`: `{dtype}` is not one of {}",
                    tilus::kernels::gemm::bench::DTYPES.join(", ")
                ));
            }
            parse_dense_shapes(shapes).map(drop)
        }
        BenchCommand::W4 { m, shapes, .. } => {
            parse_ms(m)?;
            parse_w4_shapes(shapes).map(drop)
        }
        BenchCommand::Launch { wdtype, shapes, .. } => {
            parse_type(wdtype)?;
            sweep_shapes(Some(shapes), 0, 0).map(drop)
        }
        BenchCommand::Step {
            wdtypes,
            m,
            shapes,
            l2,
            adtype,
            ..
        } => check_layer_flags(Some(wdtypes), m, Some(shapes), (0, 0), l2, adtype),
        BenchCommand::Sweep {
            wdtypes,
            m,
            shapes,
            n,
            k,
            l2,
            adtype,
            ..
        } => check_layer_flags(
            wdtypes.as_deref(),
            m,
            shapes.as_deref(),
            (*n, *k),
            l2,
            adtype,
        ),
        BenchCommand::Apt {
            widths,
            m,
            shapes,
            stages,
            split,
            popc_tiles,
            gemm_tiles,
            imma_tiles,
            popc_only,
            tune,
            l2,
            step,
            ..
        } => {
            parse_l2(l2)?;
            if *step
                && (*popc_only
                    || *tune
                    || stages.is_some()
                    || split.is_some()
                    || popc_tiles.is_some()
                    || gemm_tiles.is_some()
                    || imma_tiles.is_some())
            {
                return Err(
                    "argument `--step`: a step times each layer on its own path; it \
                     takes no --popc-only, --tune, --stages, --split or tilings"
                        .into(),
                );
            }
            super::bench_apt::check_tune(*tune, popc_tiles.is_some())?;
            if *popc_only {
                super::bench_apt::check_popc_only(
                    m,
                    stages.is_some(),
                    split.is_some(),
                    gemm_tiles.is_some(),
                )?;
            }
            if stages.is_some_and(|s| s == 1 || s > 8) {
                return Err(format!(
                    "argument `--stages`: {} is not 0 (register prefetch) or 2..8",
                    stages.unwrap_or(0)
                ));
            }
            if split.is_some_and(|s| s != 1 && s != 4) {
                return Err(format!(
                    "argument `--split`: {} is not 1 or 4",
                    split.unwrap_or(0)
                ));
            }
            super::bench_apt::parse_popc_tiles(popc_tiles.as_deref())?;
            super::bench_apt::parse_gemm_tiles(gemm_tiles.as_deref())?;
            super::bench_apt::parse_imma_tiles(imma_tiles.as_deref())?;
            super::bench_apt::parse(widths, m, shapes).map(drop)
        }
        BenchCommand::Vq {
            configs,
            m,
            shapes,
            cache,
            stages,
            split,
            warps,
            product,
            reduce,
            lut,
            dense,
            l2,
            ..
        } => {
            parse_l2(l2)?;
            parse_reduce(reduce.as_deref())?;
            parse_lut(lut.as_deref())?;
            if product.is_some_and(|p| p > 3) {
                return Err(format!(
                    "argument `--product`: {} is not 0, 1, 2 or 3",
                    product.unwrap_or(0)
                ));
            }
            if warps.is_some_and(|w| !matches!(w, 1 | 2 | 4 | 8 | 16)) {
                return Err(format!(
                    "argument `--warps`: {} is not 1, 2, 4, 8 or 16",
                    warps.unwrap_or(0)
                ));
            }
            if split.is_some_and(|s| !matches!(s, 1 | 2 | 4 | 8)) {
                return Err(format!(
                    "argument `--split`: {} is not 1, 2, 4 or 8",
                    split.unwrap_or(0)
                ));
            }
            if stages.is_some_and(|s| !(2..=8).contains(&s)) {
                return Err(format!(
                    "argument `--stages`: {} is not in 2..=8",
                    stages.unwrap_or(0)
                ));
            }
            super::bench_vq::parse(configs, m, shapes, cache.as_deref(), *dense).map(drop)
        }
        BenchCommand::Rowwise { shapes, dtype, .. } => {
            parse_shapes(shapes)?;
            parse_row_dtype(dtype).map(drop)
        }
        BenchCommand::Attention {
            batch,
            lens,
            heads,
            page,
            dtype,
            l2,
            kv,
            prefill,
            ..
        } => {
            parse_list("--batch", batch)?;
            parse_list("--lens", lens)?;
            parse_heads(heads)?;
            if ![0, 16, 32, 64].contains(page) {
                return Err(format!(
                    "argument `--page`: {page} is not 0 (contiguous), 16, 32 or 64"
                ));
            }
            parse_l2(l2)?;
            if tilus::kernels::attention::cq::CqFormat::by_name(kv).is_none() {
                parse_kv(kv)?;
            } else if parse_heads(heads)?.2 != 128 {
                return Err("argument `--heads`: a CQ cache (--kv cq..) needs head dim 128".into());
            }
            if let Some(p) = prefill {
                parse_prefill(p)?;
            }
            parse_row_dtype(dtype).map(drop)
        }
        _ => Ok(()),
    }
}

fn parse_type(name: &str) -> Result<DType, String> {
    let t: DType = name
        .trim()
        .parse()
        .map_err(|e| format!("argument `--wdtype`: {e}"))?;
    if !tilus::kernels::qmatmul::is_weight_type(t) {
        return Err(format!(
            "argument `--wdtype`: {t} is not a weight type (u1..u8, i2..i8, floats of 3 to 8 bits)"
        ));
    }
    Ok(t)
}

/// A comma-separated list of weight types; all 25 when absent.
fn parse_types(list: Option<&str>) -> Result<Vec<DType>, String> {
    match list {
        Some(list) => list
            .split(',')
            .map(|t| parse_type(t).map_err(|e| e.replace("`--wdtype`", "`--wdtypes`")))
            .collect(),
        None => Ok(tilus::kernels::qmatmul::weight_types()),
    }
}

/// `--group`: rows per scale group, 0 for per-channel scales.
fn group_arg(rows: usize) -> tilus::quant::Group {
    match rows {
        0 => tilus::quant::Group::PerChannel,
        g => tilus::quant::Group::Rows(g),
    }
}

/// The flags `tilus bench sweep` and `step` share: weight types, m values, shapes (or `n`
/// by `k`), the L2 flush mode and the activation type.
fn check_layer_flags(
    wdtypes: Option<&str>,
    m: &str,
    shapes: Option<&str>,
    (n, k): (usize, usize),
    l2: &str,
    adtype: &str,
) -> Result<(), String> {
    parse_l2(l2)?;
    parse_adtype(adtype)?;
    parse_types(wdtypes)?;
    sweep_shapes(shapes, n, k)?;
    parse_ms(m).map(drop)
}

/// `ROWSxN,ROWSxN,..` with positive extents and rows the kernels hold (`N` at most 8192).
fn parse_shapes(list: &str) -> Result<Vec<(usize, usize)>, String> {
    list.split(',')
        .map(|s| {
            let bad =
                || format!("argument `--shapes`: `{s}` is not ROWSxN with positive ROWS and N");
            let (r, n) = s.trim().split_once('x').ok_or_else(bad)?;
            let (r, n) = (
                r.parse::<usize>().map_err(|_| bad())?,
                n.parse::<usize>().map_err(|_| bad())?,
            );
            if r == 0 || n == 0 || r.checked_mul(n).is_none_or(|e| e > 1 << 31) {
                return Err(bad());
            }
            if n > tilus::kernels::rowwise::MAX_ROW {
                return Err(format!(
                    "argument `--shapes`: `{s}`: rows longer than {} elements are not supported",
                    tilus::kernels::rowwise::MAX_ROW
                ));
            }
            Ok((r, n))
        })
        .collect()
}

/// `f16` or `bf16`, the row kernels' element types.
fn parse_row_dtype(name: &str) -> Result<&'static str, String> {
    match name.trim() {
        "f16" => Ok("f16"),
        "bf16" => Ok("bf16"),
        other => Err(format!("argument `--dtype`: `{other}` is not f16 or bf16")),
    }
}

/// The `NxK` shapes of a sweep: `--shapes` (a list, or `llama70b`), else `--n` by `--k`.
fn sweep_shapes(list: Option<&str>, n: usize, k: usize) -> Result<Vec<(usize, usize)>, String> {
    let Some(list) = list else {
        return Ok(vec![(n, k)]);
    };
    if list.trim() == "llama70b" {
        return Ok(vec![
            (10240, 8192),
            (8192, 8192),
            (57344, 8192),
            (8192, 28672),
        ]);
    }
    // The decode layers too small to fill the GPU without split-k (issue 16).
    if list.trim() == "small" {
        return Ok(vec![(8192, 8192), (8192, 1024), (4096, 1024)]);
    }
    list.split(',')
        .map(|s| {
            let bad = || {
                format!(
                    "argument `--shapes`: `{s}` is not `NxK` with positive N and K (or `llama70b`, `small`)"
                )
            };
            let (n, k) = s.trim().split_once('x').ok_or_else(bad)?;
            match (n.parse::<usize>(), k.parse::<usize>()) {
                (Ok(n), Ok(k)) if n > 0 && k > 0 => Ok((n, k)),
                _ => Err(bad()),
            }
        })
        .collect()
}

/// A comma-separated list of positive numbers, for argument `arg`.
fn parse_list(arg: &str, list: &str) -> Result<Vec<usize>, String> {
    list.split(',')
        .map(|v| match v.trim().parse::<usize>() {
            Ok(x) if x > 0 => Ok(x),
            _ => Err(format!("argument `{arg}`: `{v}` is not a positive number")),
        })
        .collect()
}

/// `BxNxHQxHKVxD` shapes, or `issue`.
fn parse_prefill(
    s: &str,
) -> Result<Vec<tilus::kernels::attention::bench::PrefillBenchShape>, String> {
    let list = if s.trim() == "issue" {
        "1x4096x32x8x128,1x8192x64x8x128"
    } else {
        s
    };
    list.split(',')
        .map(|one| {
            let bad = || {
                format!("argument `--prefill`: `{one}` is not BxNxHQxHKVxD (e.g. 1x4096x32x8x128)")
            };
            let v: Vec<usize> = one
                .trim()
                .split('x')
                .map(|x| x.parse::<usize>().ok().filter(|&x| x > 0))
                .collect::<Option<_>>()
                .ok_or_else(bad)?;
            match v[..] {
                [b, n, hq, hkv, d] => Ok((b, n, hq, hkv, d)),
                _ => Err(bad()),
            }
        })
        .collect()
}

fn parse_kv(s: &str) -> Result<tilus::kernels::attention::kv::KvFormat, String> {
    use tilus::kernels::attention::kv::KvFormat;
    if s.trim() == "act" {
        return Ok(KvFormat::Activation);
    }
    let t: DType = s
        .trim()
        .parse()
        .map_err(|e| format!("argument `--kv`: {e}"))?;
    if t.bits() > 8 || matches!(t, DType::F16 | DType::BF16 | DType::F32) {
        return Err(format!(
            "argument `--kv`: {t} is not `act` or a code type of 8 bits or fewer"
        ));
    }
    Ok(KvFormat::Quantized(t))
}

fn parse_adtype(s: &str) -> Result<DType, String> {
    match s {
        "f16" => Ok(DType::F16),
        "bf16" => Ok(DType::BF16),
        other => Err(format!("argument `--adtype`: `{other}` is not f16 or bf16")),
    }
}

fn parse_l2(s: &str) -> Result<L2Mode, String> {
    match s.trim() {
        "clean" => Ok(L2Mode::Clean),
        "dirty" => Ok(L2Mode::Dirty),
        other => Err(format!("argument `--l2`: `{other}` is not clean or dirty")),
    }
}

/// `Q/KV/D`: query heads, KV heads, head dim.
fn parse_heads(s: &str) -> Result<(usize, usize, usize), String> {
    let bad = || format!("argument `--heads`: `{s}` is not Q/KV/D (e.g. 64/8/128)");
    let parts = parse_list("--heads", &s.replace('/', ",")).map_err(|_| bad())?;
    match parts[..] {
        [q, kv, d] => Ok((q, kv, d)),
        _ => Err(bad()),
    }
}

fn parse_ms(list: &str) -> Result<Vec<usize>, String> {
    list.split(',')
        .map(|v| match v.trim().parse::<usize>() {
            Ok(m) if m > 0 => Ok(m),
            _ => Err(format!("argument `--m`: `{v}` is not a positive number")),
        })
        .collect()
}

pub fn run(cmd: &BenchCommand) -> Result<String, String> {
    validate(cmd)?;
    if let BenchCommand::Tune { .. } = cmd {
        return tune(cmd);
    }
    if let BenchCommand::Import {
        k,
        n,
        bits,
        group,
        runs,
        act_order,
    } = *cmd
    {
        return super::checkpoint::bench_import(k, n, bits, group, runs, act_order);
    }
    if let BenchCommand::Apt {
        ref widths,
        ref m,
        ref shapes,
        runs,
        no_cublas,
        no_weight_only,
        stages,
        split,
        ref popc_tiles,
        ref gemm_tiles,
        ref imma_tiles,
        popc_only,
        tune,
        ref l2,
        step,
    } = *cmd
    {
        if step {
            return super::bench_apt::run_step(widths, m, shapes, runs, parse_l2(l2)?);
        }
        return super::bench_apt::run(
            widths,
            m,
            shapes,
            runs,
            (no_cublas, no_weight_only),
            (stages, split),
            (
                popc_tiles.as_deref(),
                gemm_tiles.as_deref(),
                imma_tiles.as_deref(),
            ),
            (popc_only, tune),
            parse_l2(l2)?,
        );
    }
    if let BenchCommand::Vq {
        ref configs,
        ref m,
        ref shapes,
        ref cache,
        stages,
        split,
        warps,
        product,
        ref reduce,
        ref lut,
        tune,
        tiers,
        skewed,
        dense,
        runs,
        no_cublas,
        no_elementwise,
        ref l2,
    } = *cmd
    {
        let knobs = tilus::kernels::vq::bench::VqKnobs {
            cache: None,
            stages,
            split,
            warps,
            product,
            ordered: parse_reduce(reduce.as_deref())?,
            lut: parse_lut(lut.as_deref())?,
            tune,
            dense,
            tiers,
            skewed,
        };
        return super::bench_vq::run(
            configs,
            m,
            shapes,
            cache.as_deref(),
            knobs,
            runs,
            (no_cublas, no_elementwise),
            parse_l2(l2)?,
        );
    }
    // `launch` also replays its calls from a CUDA graph, which needs a stream of the context's
    // own (CUDA cannot capture the legacy default stream).
    let own_stream = matches!(cmd, BenchCommand::Launch { .. });
    let ctx = Context::builder(0)
        .own_stream(own_stream)
        .build()
        .map_err(err)?;
    let dev = ctx.device();
    let mut out = format!("device: {} ({})\n", dev.name, ctx.arch());
    match *cmd {
        BenchCommand::Copy { mib } => {
            let (t, gbps) = copy_bandwidth(&ctx, mib << 20).map_err(err)?;
            out += &format!(
                "copy {mib} MiB: median {:.1} us (min {:.1}, max {:.1}, {} runs), {gbps:.0} GB/s read+write",
                t.median_us, t.min_us, t.max_us, t.samples
            );
        }
        BenchCommand::Gemm { m, n, k, ref l2 } => {
            let blas = Cublas::new(&ctx).map_err(err)?;
            let a = random_f16(&ctx, m * k, 1)?;
            let b = random_f16(&ctx, k * n, 2)?;
            let mut c = DeviceBuffer::<f16>::zeros(&ctx, m * n).map_err(err)?;
            let mut flush = L2Flush::with_mode(&ctx, parse_l2(l2)?).map_err(err)?;
            let t = time_runs(&ctx, 5, 30, Some(&mut flush), || {
                blas.gemm(m, n, k, &a, &b, &mut c)
            })
            .map_err(err)?;
            let bytes = 2.0 * (m * k + k * n + m * n) as f64;
            let tflops = 2.0 * (m * n * k) as f64 / (t.median_us * 1e-6) / 1e12;
            out += &format!(
                "cuBLAS f16 gemm m={m} n={n} k={k}: median {:.1} us, {:.0} GB/s, {tflops:.1} TFLOP/s",
                t.median_us,
                t.gb_per_s(bytes)
            );
        }
        BenchCommand::Dense {
            ref shapes,
            ref dtype,
            runs,
            no_cublas,
            verbose,
            rounds,
        } => {
            let blas = if no_cublas {
                None
            } else {
                Some(Cublas::new(&ctx).map_err(err)?)
            };
            let mut flush = L2Flush::new(&ctx).map_err(err)?;
            let mut rows = Vec::new();
            for (m, n, k) in parse_dense_shapes(shapes)? {
                let row = tilus::kernels::gemm::bench::bench_gemm(
                    &ctx,
                    blas.as_ref(),
                    &mut flush,
                    dtype,
                    m,
                    n,
                    k,
                    runs,
                    verbose,
                    rounds,
                )?;
                eprintln!(
                    "{dtype} {m}x{n}x{k}: cp.async {:?}, tma {:?}, persistent {:?}, specialized {:?}",
                    row.cp_async, row.tma, row.persistent, row.specialized
                );
                rows.push(row);
            }
            out += &tilus::kernels::gemm::bench::table(&rows);
        }
        BenchCommand::W4 {
            ref m,
            ref shapes,
            group,
            runs,
            no_cublas,
            no_mma_sync,
        } => {
            let blas = if no_cublas {
                None
            } else {
                Some(Cublas::new(&ctx).map_err(err)?)
            };
            let (_, copy_gbps) = copy_bandwidth(&ctx, 1 << 30).map_err(err)?;
            let mut flush = L2Flush::new(&ctx).map_err(err)?;
            let mut rows = Vec::new();
            for (n, k) in parse_w4_shapes(shapes)? {
                for mm in parse_ms(m)? {
                    let row = tilus::kernels::gemm::bench::bench_w4(
                        &ctx,
                        blas.as_ref(),
                        &mut flush,
                        (mm, n, k, group),
                        runs,
                        copy_gbps,
                        !no_mma_sync,
                    )?;
                    eprintln!("w4 m={mm} {n}x{k}: {:.1} us ({})", row.us, row.config);
                    rows.push(row);
                }
            }
            out += &tilus::kernels::gemm::bench::w4_table(copy_gbps, &rows);
        }
        BenchCommand::Tune { .. }
        | BenchCommand::Import { .. }
        | BenchCommand::Apt { .. }
        | BenchCommand::Vq { .. } => {
            unreachable!("handled above")
        }
        BenchCommand::Launch {
            ref wdtype,
            m,
            ref shapes,
            group,
            calls,
        } => {
            use tilus::kernels::qmatmul::bench::bench_launch;
            let wdtype = parse_type(wdtype)?;
            let group = group_arg(group);
            out += &format!(
                "{wdtype} f16 layers, m={m}, {calls} calls per measurement (no L2 flush)\n\
                 {:<12} {:>9} {:>12} {:>11} {:>10} {:>12} {:>9} {:>9}  config\n",
                "n x k",
                "host us",
                "per call us",
                "alone us",
                "kernel us",
                "overhead us",
                "graph us",
                "launches"
            );
            for (n, k) in sweep_shapes(Some(shapes), 0, 0)? {
                let b = bench_launch(&ctx, wdtype, m, n, k, group, calls).map_err(err)?;
                let graph = b.graph_us.map_or("-".to_string(), |g| format!("{g:.2}"));
                out += &format!(
                    "{:<12} {:>9.2} {:>12.2} {:>11.2} {:>10.2} {:>12.2} {:>9} {:>9}  {}\n",
                    format!("{n}x{k}"),
                    b.host_us,
                    b.eager_us,
                    b.single_us,
                    b.kernel_us,
                    b.single_us - b.kernel_us,
                    graph,
                    b.launches,
                    tiles(&b.config)
                );
            }
        }
        BenchCommand::Rowwise {
            ref shapes,
            ref dtype,
            runs,
        } => {
            use tilus::kernels::rowwise::bench::{bench_rowwise, table};
            let dtype = parse_row_dtype(dtype)?;
            let (_, copy_gbps) = copy_bandwidth(&ctx, 1 << 30).map_err(err)?;
            let mut results = Vec::new();
            for (rows, n) in parse_shapes(shapes)? {
                results.extend(match dtype {
                    "f16" => bench_rowwise::<f16>(&ctx, rows, n, runs)?,
                    _ => bench_rowwise::<half::bf16>(&ctx, rows, n, runs)?,
                });
            }
            out += &table(copy_gbps, dtype, &results);
        }
        BenchCommand::Attention {
            ref batch,
            ref lens,
            ref heads,
            page,
            ref dtype,
            runs,
            ref l2,
            sweep,
            ref kv,
            ref prefill,
        } => {
            use tilus::kernels::attention::bench::{
                bench_decode, bench_prefill, prefill_table, table, DecodeBenchSpec,
            };
            if let Some(p) = prefill {
                let shapes = parse_prefill(p)?;
                let l2 = parse_l2(l2)?;
                let dtype = parse_row_dtype(dtype)?;
                let results = match dtype {
                    "f16" => bench_prefill::<f16>(&ctx, &shapes, runs, l2, sweep)?,
                    _ => bench_prefill::<half::bf16>(&ctx, &shapes, runs, l2, sweep)?,
                };
                out += &prefill_table(dtype, l2, &results);
                return Ok(out);
            }
            let (q, kvh, d) = parse_heads(heads)?;
            let cq = tilus::kernels::attention::cq::CqFormat::by_name(kv);
            let spec = DecodeBenchSpec {
                batches: parse_list("--batch", batch)?,
                kv_lens: parse_list("--lens", lens)?,
                q_heads: q,
                kv_heads: kvh,
                head_dim: d,
                page_size: page,
                kv: if cq.is_some() {
                    tilus::kernels::attention::kv::KvFormat::Activation
                } else {
                    parse_kv(kv)?
                },
                runs,
                l2: parse_l2(l2)?,
                sweep,
            };
            let dtype = parse_row_dtype(dtype)?;
            let (_, copy_gbps) = copy_bandwidth(&ctx, 1 << 30).map_err(err)?;
            if let Some(format) = cq {
                use tilus::kernels::attention::bench::{bench_decode_cq, cq_table};
                let results = match dtype {
                    "f16" => bench_decode_cq::<f16>(&ctx, &spec, format)?,
                    _ => bench_decode_cq::<half::bf16>(&ctx, &spec, format)?,
                };
                out += &cq_table(copy_gbps, dtype, spec.l2, &results);
                return Ok(out);
            }
            let results = match dtype {
                "f16" => bench_decode::<f16>(&ctx, &spec)?,
                _ => bench_decode::<half::bf16>(&ctx, &spec)?,
            };
            let l2 = spec.l2;
            let cache = if page == 0 {
                "contiguous cache".to_string()
            } else {
                format!("paged cache ({page} tokens per page)")
            };
            out += &table(copy_gbps, dtype, &cache, l2, &results);
        }
        BenchCommand::Qmatmul {
            ref wdtype,
            m,
            n,
            k,
            group,
            tune,
            verbose,
            ref l2,
            ref adtype,
            ref config,
        } => {
            let configs = qmatmul_configs(wdtype, adtype, group, config, (m, n, k))?;
            let wdtype = parse_type(wdtype)?;
            let spec = SweepSpec {
                types: &[wdtype],
                ms: &[m],
                shapes: &[(n, k)],
                group,
                tune,
                verbose,
                l2: parse_l2(l2)?,
                adtype: parse_adtype(adtype)?,
                configs: &configs,
            };
            out += &sweep(&ctx, &spec, None)?;
        }
        BenchCommand::Sweep {
            ref wdtypes,
            ref m,
            n,
            k,
            ref shapes,
            group,
            tune,
            verbose,
            ref csv,
            ref l2,
            ref adtype,
        } => {
            let spec = SweepSpec {
                types: &parse_types(wdtypes.as_deref())?,
                ms: &parse_ms(m)?,
                shapes: &sweep_shapes(shapes.as_deref(), n, k)?,
                group,
                tune,
                verbose,
                l2: parse_l2(l2)?,
                adtype: parse_adtype(adtype)?,
                configs: &[],
            };
            out += &sweep(&ctx, &spec, csv.as_deref())?;
        }
        BenchCommand::Step {
            ref wdtypes,
            ref m,
            ref shapes,
            group,
            ref adtype,
            runs,
            ref l2,
        } => {
            out += &step(
                &ctx,
                &parse_types(Some(wdtypes))?,
                &parse_ms(m)?,
                &sweep_shapes(Some(shapes), 0, 0)?,
                group,
                parse_adtype(adtype)?,
                runs,
                parse_l2(l2)?,
            )?;
        }
    }
    Ok(out)
}

/// `tilus bench step`: [`bench_step`](tilus::kernels::qmatmul::bench::bench_step) per weight
/// type and m, in f16 or bf16.
#[allow(clippy::too_many_arguments)]
fn step(
    ctx: &std::sync::Arc<Context>,
    types: &[DType],
    ms: &[usize],
    shapes: &[(usize, usize)],
    group: usize,
    adtype: DType,
    runs: usize,
    l2: L2Mode,
) -> Result<String, String> {
    use tilus::kernels::qmatmul::bench::{bench_step, step_table};
    let group = group_arg(group);
    let (_, copy_gbps) = copy_bandwidth(ctx, 1 << 30).map_err(err)?;
    let mut flush = L2Flush::with_mode(ctx, l2).map_err(err)?;
    let mut rows = Vec::new();
    for &t in types {
        for &m in ms {
            let row = if adtype == DType::BF16 {
                bench_step::<half::bf16>(ctx, &mut flush, t, m, shapes, group, runs, copy_gbps)
            } else {
                bench_step::<half::f16>(ctx, &mut flush, t, m, shapes, group, runs, copy_gbps)
            }
            .map_err(|e| format!("{t} m={m} step: {e}"))?;
            eprintln!(
                "{t} m={m} step: {:.1} us, dependent {:.1} us",
                row.step.median_us, row.dependent.median_us
            );
            rows.push(row);
        }
    }
    Ok(step_table(copy_gbps, &rows))
}

/// What a sweep measures: every (shape, type, m) case, the best of the first `tune`
/// candidates, each run after an L2 flush of mode `l2`.
struct SweepSpec<'a> {
    types: &'a [DType],
    ms: &'a [usize],
    shapes: &'a [(usize, usize)],
    group: usize,
    tune: usize,
    verbose: bool,
    l2: L2Mode,
    /// f16 or bf16 activations.
    adtype: DType,
    /// The configurations to time (one type, one case); empty: the tuner's first `tune`.
    configs: &'a [QMatmulConfig],
}

/// `tilus bench qmatmul --config`'s configurations, each one `--config` value over the
/// benchmark's weight type, activation type and group, checked against the shape `(m, n, k)`
/// and built, so a tile that does not divide the shape or a ring that does not fit is refused
/// before the GPU is opened, naming the value (in a scan of dozens the compile step's error did
/// not say which); an error names the argument.
fn qmatmul_configs(
    wdtype: &str,
    adtype: &str,
    group: usize,
    config: &[String],
    (m, n, k): (usize, usize, usize),
) -> Result<Vec<QMatmulConfig>, String> {
    config
        .iter()
        .map(|c| {
            let fixed = ["WDTYPE", "ADTYPE", "GROUP"];
            for pair in c.split(',') {
                let key = pair
                    .split('=')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_uppercase();
                if fixed.contains(&key.as_str()) {
                    return Err(format!(
                        "argument `--config`: `{c}`: {key} is set by --{}",
                        key.to_ascii_lowercase()
                    ));
                }
            }
            let types = format!("WDTYPE={wdtype},ADTYPE={adtype},GROUP={group}");
            let named = |e: &dyn std::fmt::Display| format!("argument `--config`: `{c}`: {e}");
            let cfg = super::emit::qmatmul_config(&[types, c.clone()]).map_err(|e| named(&e))?;
            cfg.check_shape(m, n, k).map_err(|e| named(&e))?;
            tilus::kernels::qmatmul::build(&cfg).map_err(|e| named(&e))?;
            Ok(cfg)
        })
        .collect()
}

/// Measure every (shape, type, m) case; the copy bandwidth and cuBLAS are measured in the same
/// run. Rows are printed as they finish (a long sweep shows progress), and the table is
/// returned, one block per shape.
fn sweep(ctx: &Context, spec: &SweepSpec, csv: Option<&std::path::Path>) -> Result<String, String> {
    let SweepSpec {
        types,
        ms,
        shapes,
        group,
        tune,
        verbose,
        l2,
        adtype,
        configs,
    } = *spec;
    let (_, copy_gbps) = copy_bandwidth(ctx, 1 << 30).map_err(err)?;
    let blas = Cublas::new(ctx).map_err(err)?;
    let mut flush = L2Flush::with_mode(ctx, l2).map_err(err)?;
    let group = (group > 0).then_some(group);
    let mut cublas = std::collections::HashMap::new();
    // Compile every candidate of every case first, in parallel.
    let mut all = Vec::new();
    for &(n, k) in shapes {
        for &m in ms {
            for &wdtype in types {
                if !configs.is_empty() {
                    all.extend_from_slice(configs);
                    continue;
                }
                let c = candidates_up_to(wdtype, adtype, group, m, n, k, tune.max(1))
                    .map_err(|e| format!("{wdtype} m={m} {n}x{k}: {e}"))?;
                let sms = ctx.device().multiprocessors as usize;
                all.extend(
                    c.into_iter()
                        .take(tune.max(1))
                        .map(|c| c.for_multiprocessors(sms)),
                );
            }
        }
    }
    let started = std::time::Instant::now();
    precompile(ctx, &all).map_err(err)?;
    eprintln!(
        "compiled {} configurations in {:.1} s",
        all.len(),
        started.elapsed().as_secs_f64()
    );
    let mut table = String::new();
    // The CSV is written row by row, so an interrupted sweep keeps what it measured; the file
    // is created before the first case, so a bad path fails early.
    let csv_err = |path: &std::path::Path, e: std::io::Error| {
        format!("argument `--csv`: cannot write {}: {e}", path.display())
    };
    let mut csv_file = match csv {
        Some(path) => {
            let mut f = std::fs::File::create(path).map_err(|e| csv_err(path, e))?;
            writeln!(
                f,
                "wdtype,m,n,k,time_us,gb_per_s,percent_floor,floor_us,cublas_us,speedup,config,adtype,copy_us,percent_copy"
            )
            .map_err(|e| csv_err(path, e))?;
            Some((f, path))
        }
        None => None,
    };
    for &(n, k) in shapes {
        let header = format!(
        "copy bandwidth {copy_gbps:.0} GB/s; n={n} k={k} group={}; {adtype} activations; L2 flushed {}; \
         copy us = a device copy moving the same bytes, %copy = copy us / time us\n\
         {:<8} {:>5} {:>10} {:>8} {:>7} {:>8} {:>6} {:>10} {:>8}  config",
        group.map_or("channel".to_string(), |g| g.to_string()),
        l2.label(),
        "wdtype", "m", "time us", "GB/s", "%floor", "copy us", "%copy", "cuBLAS us", "speedup"
    );
        eprintln!("{header}");
        if !table.is_empty() {
            table += "\n\n";
        }
        table += &header;
        for &m in ms {
            for &wdtype in types {
                let cublas_us = match cublas.get(&(m, n, k)) {
                    Some(v) => *v,
                    None => {
                        let v = bench_cublas(ctx, &blas, &mut flush, m, n, k).map_err(err)?;
                        cublas.insert((m, n, k), v);
                        v
                    }
                };
                let cands = if configs.is_empty() {
                    tuned_head(ctx, wdtype, adtype, group, m, n, k, tune)
                        .map_err(|e| format!("{wdtype} m={m}: {e}"))?
                } else {
                    configs.to_vec()
                };
                let bench = match adtype {
                    DType::BF16 => bench_configs::<half::bf16>,
                    _ => bench_configs::<f16>,
                };
                let row = bench(ctx, Some(cublas_us), &mut flush, m, n, k, &cands, copy_gbps)
                    .map_err(|e| format!("{wdtype} m={m}: {e}"))?;
                if verbose {
                    for (c, us) in &row.tried {
                        eprintln!("  {wdtype} m={m} {}: {us:.1} us", tiles(c));
                    }
                }
                let cfg = tiles(&row.config);
                let speedup = row.speedup_over_cublas().unwrap_or(f64::NAN);
                let line = format!(
                    "{:<8} {:>5} {:>10.1} {:>8.0} {:>6.1}% {:>8.1} {:>5.0}% {:>10.1} {:>7.2}x  {cfg}",
                    wdtype.to_string(),
                    m,
                    row.timing.median_us,
                    row.gb_per_s(),
                    row.percent_of_floor(),
                    row.copy_us,
                    row.percent_of_copy(),
                    cublas_us,
                    speedup
                );
                eprintln!("{line}");
                table += "\n";
                table += &line;
                if let Some((f, path)) = csv_file.as_mut() {
                    writeln!(
                    f,
                    "{wdtype},{m},{n},{k},{:.2},{:.1},{:.2},{:.2},{cublas_us:.2},{speedup:.3},{cfg},{adtype},{:.2},{:.2}",
                    row.timing.median_us,
                    row.gb_per_s(),
                    row.percent_of_floor(),
                    row.floor_us,
                    row.copy_us,
                    row.percent_of_copy()
                )
                .and_then(|()| f.flush())
                .map_err(|e| csv_err(path, e))?;
                }
            }
        }
    }
    Ok(table)
}

/// Values in [-1, 1) from a small LCG: benchmarks need non-zero data, not statistical quality.
fn random_f16(ctx: &Context, len: usize, seed: u64) -> Result<DeviceBuffer<f16>, String> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let data: Vec<f16> = (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            f16::from_f32(((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
        })
        .collect();
    DeviceBuffer::from_host(ctx, &data).map_err(err)
}

/// `tilus bench tune`: every argument is checked before the GPU is opened (everything
/// [`tuning_space`] could reject, by [`check_tuning_space`]); the space is built after.
fn tune(cmd: &BenchCommand) -> Result<String, String> {
    let BenchCommand::Tune {
        ref wdtype,
        m,
        n,
        k,
        group,
        ref adtype,
        points,
        retune,
    } = *cmd
    else {
        unreachable!("called for tune only")
    };
    let wdtype = parse_type(wdtype)?;
    let adtype: DType = match adtype.as_str() {
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        other => return Err(format!("argument `--adtype`: f16 or bf16, not `{other}`")),
    };
    let group = (group > 0).then_some(group);
    let named = |e| match e {
        // Name the flag: `n` is `--n` here.
        QMatmulError::Shape { arg, reason } => format!("argument `--{arg}`: {reason}"),
        e => e.to_string(),
    };
    // The cheap checks, then the GPU, then the space: building it takes seconds (minutes for
    // --points 4096 in a debug build), which a machine without a GPU should not wait for.
    check_tuning_space(wdtype, adtype, group, n, k, points).map_err(named)?;
    let ctx = Context::new(0).map_err(err)?;
    let sms = ctx.device().multiprocessors as usize;
    let space: Vec<_> = tuning_space(wdtype, adtype, group, m_bucket(m), n, k, points)
        .map_err(named)?
        .into_iter()
        .map(|c| c.for_multiprocessors(sms))
        .collect();
    match adtype {
        DType::BF16 => tune_typed::<half::bf16>(&ctx, &space, m, n, k, points, retune),
        _ => tune_typed::<f16>(&ctx, &space, m, n, k, points, retune),
    }
}

fn tune_typed<T: Activation>(
    ctx: &Context,
    space: &[QMatmulConfig],
    m: usize,
    n: usize,
    k: usize,
    points: usize,
    retune: bool,
) -> Result<String, String> {
    let first = space[0];
    let dev = ctx.device();
    let mut out = format!(
        "device: {} ({}, driver {})\n",
        dev.name,
        ctx.arch(),
        dev.driver_version
    );
    let bucket = bucket_label(&first, m, n, k);
    out += &format!("bucket: {bucket}\n");
    if space.len() < points {
        out += &format!(
            "space: {} valid configurations (fewer than --points {points} fit this shape)\n",
            space.len()
        );
    }
    let key = tune_key(ctx, &first, m, n, k);
    if retune {
        ctx.tuner().forget(&key, space);
    }
    // A remembered winner needs no weight: skip making and uploading one.
    let outcome = match ctx.tuner().lookup(&key, space) {
        Some(o) => o,
        None => {
            let weight =
                synthetic_weight::<T>(ctx, first.wdtype, n, k, first.group_rows, first.has_zeros)
                    .map_err(err)?;
            tune_qmatmul(ctx, space, m, &weight).map_err(err)?.outcome
        }
    };
    let o = &outcome;
    let winner = space[o.index];
    let how = match o.source {
        TuneSource::Measured => "measured now",
        TuneSource::Memory => "reused the winner in memory",
        TuneSource::Disk => "reused the persisted winner",
    };
    let failed = o
        .record
        .candidates
        .iter()
        .filter(|c| c.error.is_some())
        .count();
    out += &format!(
        "points: {} ({} measured, {failed} failed when tuned)\n",
        space.len(),
        space.len() - failed
    );
    out += &format!("time to tune: {:.3} s ({how})\n", o.elapsed.as_secs_f64());
    if o.reused() {
        out += &format!("originally tuned in {:.1} s\n", o.record.tune_seconds);
    }
    out += &format!(
        "winner: {} (candidate {}): median {:.2} us at m={}\n",
        tiles(&winner),
        o.index,
        o.median_us,
        m_bucket(m)
    );
    let mut ranked: Vec<(usize, f64)> = o
        .record
        .candidates
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.median_us.map(|us| (i, us)))
        .collect();
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1));
    out += "fastest:";
    for (i, us) in ranked.iter().take(5) {
        out += &format!("\n  {:>9.2} us  {}", us, tiles(&space[*i]));
    }
    if let Some((i, e)) = o
        .record
        .candidates
        .iter()
        .enumerate()
        .find_map(|(i, c)| c.error.as_ref().map(|e| (i, e)))
    {
        out += &format!(
            "\nfirst failure: {} : {}",
            tiles(&space[i]),
            e.lines().next().unwrap_or("")
        );
    }
    out += &format!(
        "\nrecord: {}",
        o.path.as_ref().map_or(
            "not persisted (no writable cache directory)".to_string(),
            |p| p.display().to_string()
        )
    );
    Ok(out)
}

/// `--lut` of `tilus bench vq`: `on`, `off` or a tiling `WARPSxRSxPER[xTABLES]`.
fn parse_lut(lut: Option<&str>) -> Result<Option<tilus::kernels::vq::bench::LutKnob>, String> {
    use tilus::kernels::vq::bench::LutKnob;
    use tilus::kernels::vq::lut::LutTiling;
    let Some(text) = lut else { return Ok(None) };
    let bad = || {
        format!("argument `--lut`: {text:?} is not on, off or WARPSxRSxPER[xTABLES] (e.g. 16x28x8)")
    };
    Ok(Some(match text {
        "on" => LutKnob::On,
        "off" => LutKnob::Off,
        _ => {
            let v: Vec<usize> = text
                .split('x')
                .map(|p| p.parse().map_err(|_| bad()))
                .collect::<Result<_, _>>()?;
            let (warps, rs, per, tables) = match v[..] {
                [w, r, p] => (w, r, p, 2),
                [w, r, p, t] => (w, r, p, t),
                _ => return Err(bad()),
            };
            LutKnob::Tiling(LutTiling {
                warps,
                rs,
                per,
                tables,
            })
        }
    }))
}

/// `--reduce` of `tilus bench vq`: `Some(true)` for `ordered`, `Some(false)` for `atomic`.
fn parse_reduce(reduce: Option<&str>) -> Result<Option<bool>, String> {
    match reduce {
        None => Ok(None),
        Some("ordered") => Ok(Some(true)),
        Some("atomic") => Ok(Some(false)),
        Some(other) => Err(format!(
            "argument `--reduce`: {other:?} is not ordered or atomic"
        )),
    }
}
