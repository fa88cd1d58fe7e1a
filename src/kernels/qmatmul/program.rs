//! The programs of one quantized matmul configuration: the `#[kernel]` templates of
//! [`super::kernel`] instantiated for it, verified, with the layouts the host side needs.

use super::config::{config_err, QMatmulConfig, QMatmulError, QMatmulMethod};
use super::kernel;
use super::layouts::{pack_split, QMatmulLayouts};
use tilus_core::ir::Program;
use tilus_core::layout::Swizzle;
use tilus_core::verify::{self, Target};

/// The shared-memory target the programs are checked against (sm_80, the smallest we support).
pub const TARGET: Target = Target::SM80;

/// The target a configuration's programs are built for: [`TARGET`], or sm_90a for the
/// warpgroup MMA of [`QMatmulMethod::GemvWgmma`].
pub fn target(config: &QMatmulConfig) -> Target {
    if config.method.needs_sm90a() {
        Target::SM90
    } else {
        TARGET
    }
}

/// Whether a device of NVRTC architecture `arch` (`sm_90a`, `sm_80`, ...) runs `config`'s
/// programs: the warpgroup MMA only on sm_90a.
pub fn runs_on(config: &QMatmulConfig, arch: &str) -> bool {
    !config.method.needs_sm90a() || arch == "sm_90a"
}

/// Whether the warpgroup gemv's ring is filled by the copy engine: one thread's `tma_load`s
/// instead of every thread's `cp.async` (perf note 30). A box row holds at most 256 elements,
/// so a tile's scale row of more than 256 columns stays on `cp.async`.
fn gemv_wgmma_tma(config: &QMatmulConfig) -> bool {
    config.method == QMatmulMethod::GemvWgmma && config.bn <= 256
}

/// A built member of the family: the verified programs and the layouts they use.
#[derive(Clone, Debug)]
pub struct QMatmulKernel {
    pub config: QMatmulConfig,
    /// The tile layouts of the mma methods (`None` for [`QMatmulMethod::Lut`], whose bit
    /// planes are laid out by `super::lut`).
    pub layouts: Option<QMatmulLayouts>,
    /// The matmul. Parameters: `m, n, k: i32`, `a: *adtype [m, k]`, `b: *u8` (re-laid-out
    /// weight), `scales: *adtype [k / group, n]`, `zeros` (same, only with `has_zeros`),
    /// `c: *mut adtype [m, n]`, then the split-k buffers `workspace: *mut f32 [split_k, m, n]`
    /// and `semaphores: *mut i32 [cdiv(m, bm) * (n / bn)]` (zero before a launch, zero again
    /// after it; not read with `split_k = 1`). Grid `[cdiv(m, bm), n / bn, split_k]`; with
    /// `split_k > 1` the last block of each output tile sums the partial sums (one launch).
    pub main: Program,
    /// With [`QMatmulMethod::DequantizeThenGemm`]: writes the dense weight for the GEMM.
    /// Parameters `n, k: i32`, `b: *u8`, `scales`, `zeros` (with `has_zeros`), `w: *mut
    /// adtype [k, n]`. Grid `[k / bk, n / bn]`.
    pub dequant: Option<Program>,
    /// With [`QMatmulMethod::GemvImma`] for `bm > 1` tokens a block: the pre-pass that splits
    /// the activations into two s8 digits a value (`kernel::qmatmul_imma_digits`), launched
    /// before `main`. Parameters `m, k: i32`, `a: *adtype [m, k]`, `digits: *mut u8 [2 mp, k]`,
    /// `side: *mut f32 [k / group, mp, 2]` (`mp = cdiv(m, 32) · 32`,
    /// [`QMatmulConfig::digit_buffers`]); `main` then takes `digits` and `side` after the
    /// split-k buffers.
    pub digits: Option<Program>,
}

impl QMatmulKernel {
    /// Whether `main` can be launched as a programmatic dependent of the kernel before it
    /// (it executes `wait_prior_grid()`: the gemv, [`QMatmulMethod::Gemv`], the one-token
    /// integer-mma gemv and the look-up kernel, [`QMatmulMethod::Lut`]). Such a `main` takes
    /// one more parameter, last: `dependent: i32`, 1 when it is launched so (the gemvs then
    /// issue their first weight tiles before the wait and the activations after it; the
    /// look-up kernel runs in that order either way).
    pub fn takes_dependent(&self) -> bool {
        tilus_core::launch::waits_prior_grid(&self.main)
    }
}

/// A short name of the configuration, used for the program names.
pub fn config_name(c: &QMatmulConfig) -> String {
    let group = c.group_rows.map_or("pc".to_string(), |g| format!("g{g}"));
    let zeros = if c.has_zeros { "_z" } else { "" };
    let method = match c.method {
        QMatmulMethod::Fused => "",
        QMatmulMethod::DequantizeThenGemm => "_dq",
        QMatmulMethod::Gemv => "_gemv",
        QMatmulMethod::GemvWgmma => "_gemvwg",
        QMatmulMethod::Lut => "_lut",
        QMatmulMethod::GemvImma => "_gemvimma",
        QMatmulMethod::GemvIgmma => "_gemvigmma",
    };
    let stream = if c.stream_k > 0 {
        format!("_st{}", c.stream_k)
    } else {
        String::new()
    };
    let occupancy = if c.blocks_per_sm > 1 {
        format!("_o{}", c.blocks_per_sm)
    } else {
        String::new()
    };
    let occupancy = if c.specialize {
        format!("{occupancy}_ws")
    } else {
        occupancy
    };
    let occupancy = if c.stage_tiles > 1 {
        format!("{occupancy}_kt{}", c.stage_tiles)
    } else {
        occupancy
    };
    format!(
        "{}_{}_{group}{zeros}_{}x{}x{}_w{}_s{}_k{}{stream}{occupancy}{method}",
        c.adtype, c.wdtype, c.bm, c.bn, c.bk, c.warps, c.stages, c.split_k
    )
}

/// Build and verify the programs of `config`: the `#[kernel]` templates of [`super::kernel`]
/// instantiated for it.
pub fn build(config: &QMatmulConfig) -> Result<QMatmulKernel, QMatmulError> {
    if config.method == QMatmulMethod::Lut {
        return build_lut(config);
    }
    let layouts = QMatmulLayouts::new(config)?;
    let t = layouts.tiling;
    let name = config_name(config);
    let h = pack_order(config, &layouts);
    let group = config.group_rows.map_or(0, |g| g as i32);
    let zeros = i32::from(config.has_zeros);
    let (swizzle_bits, swizzle_shift) = match a_swizzle(config.bk) {
        Some(sw) => {
            debug_assert_eq!(sw.base, 3, "the kernel's swizzle has base 3");
            (sw.bits as i32, sw.shift as i32)
        }
        None => (0, 0),
    };
    let v = |x: usize| x as i32;
    let tokens = config.method == QMatmulMethod::GemvImma && config.bm > 1;
    // The kernels read f3e1m1 as i3 (`config::kernel_codes`).
    let kernel_w = super::config::kernel_codes(config.wdtype);
    let signed = i32::from(matches!(kernel_w, crate::DType::Int(_)));
    let main = if config.method == QMatmulMethod::GemvIgmma {
        let cfg = kernel::qmatmul_gemv_igmma::Config {
            BM: v(config.bm),
            BN: v(config.bn),
            BK: v(config.bk),
            WG: v(config.warps / 4),
            STAGES: v(config.stages),
            SPLIT: v(config.split_k),
            G: group,
            ZEROS: zeros,
            SIGNED: signed,
            VEC: v(t.vector_bytes),
            OCC: v(config.blocks_per_sm),
            A: config.adtype,
            W: kernel_w,
        };
        kernel::qmatmul_gemv_igmma::translate(&cfg)
    } else if tokens {
        let cfg = kernel::qmatmul_gemv_imma_tokens::Config {
            BM: v(config.bm),
            BN: v(config.bn),
            BK: v(config.bk),
            WN: v(t.warps_n),
            STAGES: v(config.stages),
            SPLIT: v(config.split_k),
            G: group,
            ZEROS: zeros,
            SIGNED: signed,
            VEC: v(t.vector_bytes),
            OCC: v(config.blocks_per_sm),
            A: config.adtype,
            W: kernel_w,
        };
        kernel::qmatmul_gemv_imma_tokens::translate(&cfg)
    } else if config.method == QMatmulMethod::GemvImma && config.stream_k > 0 {
        let cfg = kernel::qmatmul_gemv_imma_persistent::Config {
            BM: 1,
            BN: v(config.bn),
            BK: v(config.bk),
            WN: v(t.warps_n),
            STAGES: v(config.stages),
            SPLIT: v(config.split_k),
            G: group,
            ZEROS: zeros,
            SIGNED: signed,
            VEC: v(t.vector_bytes),
            OCC: v(config.blocks_per_sm),
            WORKERS: v(config.stream_k),
            A: config.adtype,
            W: kernel_w,
        };
        kernel::qmatmul_gemv_imma_persistent::translate(&cfg)
    } else if config.method == QMatmulMethod::GemvImma {
        let cfg = kernel::qmatmul_gemv_imma::Config {
            BM: 1,
            BN: v(config.bn),
            BK: v(config.bk),
            WN: v(t.warps_n),
            STAGES: v(config.stages),
            SPLIT: v(config.split_k),
            G: group,
            ZEROS: zeros,
            SIGNED: signed,
            VEC: v(t.vector_bytes),
            OCC: v(config.blocks_per_sm),
            A: config.adtype,
            W: kernel_w,
        };
        kernel::qmatmul_gemv_imma::translate(&cfg)
    } else if config.method == QMatmulMethod::GemvWgmma {
        let cfg = kernel::qmatmul_gemv_wgmma::Config {
            BM: v(config.bm),
            BN: v(config.bn),
            WG: v(config.warps / 4),
            STAGES: v(config.stages),
            SPLIT: v(config.split_k),
            G: group,
            ZEROS: zeros,
            H: v(h),
            VEC: v(t.vector_bytes),
            TMA: i32::from(gemv_wgmma_tma(config)),
            STREAM: v(config.stream_k),
            WS: i32::from(config.specialize),
            OCC: v(config.blocks_per_sm),
            KT: v(config.stage_tiles),
            A: config.adtype,
            W: kernel_w,
        };
        kernel::qmatmul_gemv_wgmma::translate(&cfg)
    } else if config.method == QMatmulMethod::Gemv {
        let cfg = kernel::qmatmul_gemv::Config {
            BM: v(config.bm),
            BN: v(config.bn),
            BK: v(config.bk),
            WN: v(t.warps_n),
            STAGES: v(config.stages),
            SPLIT: v(config.split_k),
            G: group,
            ZEROS: zeros,
            H: v(h),
            VEC: v(t.vector_bytes),
            SWB: swizzle_bits,
            SWS: swizzle_shift,
            BIAS: i32::from(biased_cast(config, h)),
            A: config.adtype,
            W: kernel_w,
        };
        kernel::qmatmul_gemv::translate(&cfg)
    } else {
        let cfg = kernel::qmatmul_main::Config {
            BM: v(config.bm),
            BN: v(config.bn),
            BK: v(config.bk),
            WM: v(t.warps_m),
            WN: v(t.warps_n),
            STAGES: v(config.stages),
            SPLIT: v(config.split_k),
            G: group,
            ZEROS: zeros,
            H: v(h),
            VEC: v(t.vector_bytes),
            SWB: swizzle_bits,
            SWS: swizzle_shift,
            A: config.adtype,
            W: kernel_w,
        };
        kernel::qmatmul_main::translate(&cfg)
    };
    let main = instantiate(main, format!("qmatmul_{name}"))?;
    check_for(&main, &target(config))?;
    let shared = verify::shared_bytes(&main);
    let limit = target(config).max_shared_bytes;
    check_imma_occupancy(config, shared)?;
    if shared > limit {
        return Err(config_err(
            "stages",
            format!(
                "{} stages of the A, weight and scale tiles need {shared} bytes of shared memory, more than {limit}",
                config.stages
            ),
        ));
    }
    let dequant = match config.method {
        QMatmulMethod::Fused
        | QMatmulMethod::Gemv
        | QMatmulMethod::GemvWgmma
        | QMatmulMethod::Lut
        | QMatmulMethod::GemvImma
        | QMatmulMethod::GemvIgmma => None,
        QMatmulMethod::DequantizeThenGemm => {
            let rows = super::dequant::store_rows(32 * t.warps_n, config.bk, config.bn)?;
            let cfg = kernel::qmatmul_dequant::Config {
                BN: v(config.bn),
                BK: v(config.bk),
                WN: v(t.warps_n),
                G: group,
                ZEROS: zeros,
                H: v(h),
                VEC: v(t.vector_bytes),
                ROWS: v(rows),
                A: config.adtype,
                W: kernel_w,
            };
            let p = instantiate(
                kernel::qmatmul_dequant::translate(&cfg),
                format!("qmatmul_dequant_{name}"),
            )?;
            check(&p)?;
            Some(p)
        }
    };
    let digits = if config.uses_digits() {
        let cfg = kernel::qmatmul_imma_digits::Config {
            G: group,
            WD: 4,
            A: config.adtype,
        };
        let p = instantiate(
            kernel::qmatmul_imma_digits::translate(&cfg),
            format!("qmatmul_digits_{name}"),
        )?;
        check(&p)?;
        Some(p)
    } else {
        None
    };
    Ok(QMatmulKernel {
        config: *config,
        layouts: Some(layouts),
        main,
        dequant,
        digits,
    })
}

/// [`build`] for [`QMatmulMethod::Lut`]: `kernel::qmatmul_lut` with the parameters
/// `super::lut` derives.
fn build_lut(config: &QMatmulConfig) -> Result<QMatmulKernel, QMatmulError> {
    let s = super::lut::lut_shape(config)?;
    let v = |x: usize| x as i32;
    let cfg = kernel::qmatmul_lut::Config {
        BM: 1,
        BN: v(config.bn),
        WARPS: v(config.warps),
        R: v(s.rows),
        TG: v(s.tables_per_group),
        P: v(s.planes),
        SIGNED: i32::from(s.signed),
        ZEROS: i32::from(config.has_zeros),
        SPLIT: v(config.split_k),
        OCC: v(config.blocks_per_sm),
        A: config.adtype,
    };
    let main = instantiate(
        kernel::qmatmul_lut::translate(&cfg),
        format!("qmatmul_{}", config_name(config)),
    )?;
    check_for(&main, &target(config))?;
    Ok(QMatmulKernel {
        config: *config,
        layouts: None,
        main,
        dequant: None,
        digits: None,
    })
}

/// Whether the gemv program converts the codes with `cast_biased`: when the weight type has a
/// biased cast for the packing order `h` that takes fewer instructions than the exact one
/// (integers of up to 6 bits), its biases then coming off the accumulator once per group.
pub(crate) fn biased_cast(config: &QMatmulConfig, h: usize) -> bool {
    use tilus_core::codegen::cast::{
        cast_op_count, cast_plan_biased, cast_plan_ordered, PackOrder,
    };
    let order = if h > 1 {
        PackOrder::Split(h)
    } else {
        PackOrder::Natural
    };
    let kernel_w = super::config::kernel_codes(config.wdtype);
    let count = |plan: Option<tilus_core::codegen::cast::CastPlan>| {
        plan.map(|p| cast_op_count(&p) as f64 / p.out_words as f64)
    };
    match (
        count(cast_plan_biased(kernel_w, config.adtype, order)),
        count(cast_plan_ordered(kernel_w, config.adtype, order)),
    ) {
        (Some(b), Some(e)) => b < e,
        (Some(_), None) => true,
        _ => false,
    }
}

/// How the re-laid-out weight packs each thread's codes, as `layouts.q` does: the `H` of
/// `swap_inner_locals(B, 2, H)` (1: the natural order).
pub(crate) fn pack_order(config: &QMatmulConfig, layouts: &QMatmulLayouts) -> usize {
    pack_split(super::config::kernel_codes(config.wdtype), config.adtype)
        .filter(|&h| layouts.b.swap_inner_locals(2, h).is_ok())
        .unwrap_or(1)
}

/// A translated template, renamed after the configuration; a translation error for a valid
/// configuration is a bug here, reported instead of run.
pub(crate) fn instantiate(
    program: Result<Program, crate::macro_support::KernelError>,
    name: String,
) -> Result<Program, QMatmulError> {
    match program {
        Ok(mut p) => {
            p.name = name;
            Ok(p)
        }
        Err(e) => Err(QMatmulError::Verify {
            program: name,
            diagnostics: e.to_string(),
        }),
    }
}

/// Verify a generated program; a failure is a bug here, reported with every diagnostic.
pub(crate) fn check(p: &Program) -> Result<(), QMatmulError> {
    check_for(p, &TARGET)
}

/// [`check`] against `target`.
fn check_for(p: &Program, target: &Target) -> Result<(), QMatmulError> {
    // Shared memory is checked separately so that its error names the config field.
    let target = Target {
        max_shared_bytes: usize::MAX,
        ..*target
    };
    verify::verify(p, &target).map_err(|diags| QMatmulError::Verify {
        program: p.name.clone(),
        diagnostics: diags
            .iter()
            .map(|d| d.message.clone())
            .collect::<Vec<_>>()
            .join("; "),
    })
}

/// The XOR swizzle of the `[bm, bk]` activation tile in shared memory (16-bit elements), so that
/// the eight 16-byte rows one `ldmatrix` reads fall into distinct banks; `None` when `bk` is not
/// a power of two. With `c = bk / 8` 16-byte chunks per row, the chunk index is XORed with the
/// row index (divided by the rows per 128-byte line when a row is shorter than 128 bytes).
pub fn a_swizzle(bk: usize) -> Option<Swizzle> {
    if !bk.is_power_of_two() || bk < 16 {
        return None;
    }
    let chunks = (bk / 8).trailing_zeros();
    Swizzle::new(chunks.min(3), 3, chunks.max(3)).ok()
}

/// The integer-mma gemv's `blocks_per_sm > 1` blocks, `shared` bytes each (the built program's
/// count), fit an sm_90 multiprocessor: 228 KiB, a block's 227 and the 1 KiB the hardware keeps
/// per block. Its programs are verified for sm_80, but occupancy pays on the H100 and H200 (an
/// sm_80 device, with 164 KiB, runs fewer of them at once).
fn check_imma_occupancy(config: &QMatmulConfig, shared: usize) -> Result<(), QMatmulError> {
    let blocks = config.blocks_per_sm;
    if !matches!(
        config.method,
        QMatmulMethod::GemvImma | QMatmulMethod::GemvIgmma
    ) || blocks <= 1
    {
        return Ok(());
    }
    let limit = Target::SM90.max_shared_bytes + 1024;
    if blocks.saturating_mul(shared + 1024) > limit {
        return Err(config_err(
            "blocks_per_sm",
            format!(
                "{blocks} blocks of {shared} bytes of shared memory (and 1024 reserved each) \
                 exceed a multiprocessor's {limit}"
            ),
        ));
    }
    Ok(())
}
