//! `tilus emit <kernel> [--config K=V ...]`: print the CUDA C generated for a paper program.
//!
//! Kernels (names are case-insensitive; `_` and `-` are interchangeable):
//!
//! | kernel | also | configuration keys (defaults) |
//! | --- | --- | --- |
//! | `fig2` | `matmul_f16_int`, `matmul_f16_i6` | `BM=16 BN=64 BK=64 WEIGHT=i6` |
//! | `fig8` | `relayout_int`, `relayout_i6`, `relayout` | `BK=64 BN=64 WEIGHT=i6` |
//! | `fig14` | `matmul_f16_pipelined`, `pipelined` | `BM=64 BN=64 BK=32 STAGES=3` |
//! | `apt_popc` | | `WBITS=2 ABITS=2 N=57344 K=8192 TILES=` (the layer's rule for the shape; else `WARPSxROWSxVEC[xPER_SM[xSTAGES[xQSPLIT]]]` as `tilus bench apt --popc-tiles`) |
//! | `apt_imma` | | `WBITS=2 ABITS=2 N=57344 K=8192 TILES=` (the layer's rule; else `BNxBKxWARPSxSTAGES[xSPLIT]` as `tilus bench apt --imma-tiles`) |
//! | `vq` | `vq_gemv` | `FORMAT=gptvq2 N=57344 K=8192 M=1 WARPS= SPLIT= STAGES= PRODUCT= REPLICAS=` (the VQ layer's direct kernel; empty values take the layer's rules for the shape and `M`) |
//! | `qmatmul` | | `WDTYPE=i4 ADTYPE=f16 GROUP=128 BM=16 BN=BK=WARPS=STAGES=SPLIT_K= METHOD=fused` (the library's defaults for the type; `GROUP=0` is per channel; `METHOD=gemv` or `gemv_wgmma` sets `BM=8`; `gemv_wgmma` also needs `BK=64` and whole warpgroups, and takes `STREAM_K=` workers, `BLOCKS_PER_SM=` 1 to 4, `STAGE_TILES=2` (two k tiles a stage, with stream-k), or `WS=1` (warp-specialized: a producer warpgroup more, `BLOCKS_PER_SM=1` or `2`); `METHOD=lut` sets `BM=1 BK=512 STAGES=2 WARPS=8 BLOCKS_PER_SM=2` and two rows per lane set) |
//!
//! `--config` may be repeated and may hold several comma-separated pairs (`--config
//! BM=32,BN=128`). `--ptx sm_90a` prints the PTX that NVRTC makes of it instead (no GPU needed;
//! `ptxas` and `cuobjdump -sass` then show the machine code, e.g. to count the instructions of a
//! dequantization loop). `--ir` prints the verified VM program instead. An unknown kernel or key, a bad value or a configuration the program does
//! not support is an error (one line, exit status 2).

use std::collections::BTreeMap;
use tilus::kernels::apt::kernel::{apt_gemv_imma, apt_gemv_popc};
use tilus::kernels::apt::{ImmaTiles, PopcTiles};
use tilus::kernels::qmatmul::{self, QMatmulConfig, QMatmulMethod};
use tilus::kernels::vq::kernel::vq_gemv;
use tilus::kernels::vq::{VqCache, VqLinear};
use tilus::programs;
use tilus::vq::{VqConfig, VqWeight};
use tilus_core::codegen::emit;
use tilus_core::ir::Program;
use tilus_core::verify::{verify, Target};
use tilus_core::DType;

#[derive(Clone, Copy)]
enum Kernel {
    Fig2,
    Fig8,
    Fig14,
    QMatmul,
    AptPopc,
    AptImma,
    Vq,
}

impl Kernel {
    fn parse(name: &str) -> Option<(Kernel, Option<DType>)> {
        let n = name.to_ascii_lowercase().replace('-', "_");
        Some(match n.as_str() {
            "fig2" | "matmul_f16_int" => (Kernel::Fig2, None),
            "matmul_f16_i6" => (Kernel::Fig2, Some(DType::Int(6))),
            "fig8" | "relayout" | "relayout_int" => (Kernel::Fig8, None),
            "relayout_i6" => (Kernel::Fig8, Some(DType::Int(6))),
            "fig14" | "matmul_f16_pipelined" | "pipelined" => (Kernel::Fig14, None),
            "qmatmul" => (Kernel::QMatmul, None),
            "apt_popc" => (Kernel::AptPopc, None),
            "apt_imma" => (Kernel::AptImma, None),
            "vq" | "vq_gemv" => (Kernel::Vq, None),
            _ => return None,
        })
    }

    /// Configuration keys and their defaults.
    fn defaults(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Kernel::Fig2 => &[("BM", "16"), ("BN", "64"), ("BK", "64"), ("WEIGHT", "i6")],
            Kernel::Fig8 => &[("BK", "64"), ("BN", "64"), ("WEIGHT", "i6")],
            Kernel::Fig14 => &[("BM", "64"), ("BN", "64"), ("BK", "32"), ("STAGES", "3")],
            // Empty values take the library's default tiles for the weight type.
            Kernel::QMatmul => &[
                ("WDTYPE", "i4"),
                ("ADTYPE", "f16"),
                ("GROUP", "128"),
                ("BM", ""),
                ("BN", ""),
                ("BK", ""),
                ("WARPS", ""),
                ("STAGES", ""),
                ("SPLIT_K", ""),
                ("STREAM_K", "0"),
                ("BLOCKS_PER_SM", ""),
                ("WS", "0"),
                ("STAGE_TILES", "1"),
                ("METHOD", "fused"),
            ],
            Kernel::AptPopc | Kernel::AptImma => &[
                ("WBITS", "2"),
                ("ABITS", "2"),
                ("N", "57344"),
                ("K", "8192"),
                ("TILES", ""),
            ],
            Kernel::Vq => &[
                ("FORMAT", "gptvq2"),
                ("N", "57344"),
                ("K", "8192"),
                ("M", "1"),
                ("WARPS", ""),
                ("SPLIT", ""),
                ("STAGES", ""),
                ("PRODUCT", ""),
                ("REPLICAS", ""),
            ],
        }
    }
}

/// The kernels, their configuration keys and accepted values, as `tilus emit --help` shows them.
/// A unit test checks that every key of [`Kernel::defaults`] is listed here.
pub const KERNELS_HELP: &str = "\
Kernels and their --config keys (default in brackets):
  fig2     the paper's Figure 2, f16 x int matmul (alias matmul_f16_int; matmul_f16_i6 fixes WEIGHT=i6)
             BM, BN, BK  positive tile sizes [16, 64, 64]
             WEIGHT      signed or unsigned integer weight type, i2..i8 or u1..u8 [i6]
  fig8     the paper's Figure 8, weight re-layout (aliases relayout, relayout_int; relayout_i6)
             BK, BN      positive tile sizes [64, 64]
             WEIGHT      integer weight type, i2..i8 or u1..u8 [i6]
  fig14    the paper's Figure 14, pipelined f16 matmul (aliases matmul_f16_pipelined, pipelined)
             BM, BN, BK  positive tile sizes [64, 64, 32]
             STAGES      pipeline depth, a positive integer [3]
  qmatmul  the library's quantized matmul C = A x dequant(W) (split-k reduced in the same kernel)
             WDTYPE      weight type: u1..u8, i2..i8 or a float fNeEmM such as f4e2m1, f6e3m2 [i4]
             ADTYPE      activation type: f16 or bf16 [f16]
             GROUP       rows per scale group, 0 for per-channel scales [128]
             BM, BN, BK, WARPS, STAGES, SPLIT_K
                         positive integers [the library's default tiles for WDTYPE]
             METHOD      fused, gemv (the weight as the mma's A operand; BM=8), gemv_wgmma (the same on wgmma, sm90; BK=64), gemv_imma (one token on the integer mma, 1- to 5-bit integer weights; BM=1 BK=256/bits, 128 for 3 bits, 64 for 5), gemv_igmma (8-64 tokens on the integer wgmma, 2/4-bit integer weights, sm90; BM=16 BN=128 BK=128 WARPS=8) or lut (one token by look-up tables, integer weights; BM=1 BK=512 STAGES=2) [fused]
             STREAM_K    gemv_wgmma: stream-k workers per block row; gemv_imma at BM=1: persistent workers claiming units of SPLIT_K chunks; 0 for whole tiles [0]
             BLOCKS_PER_SM
                         lut, gemv_wgmma and gemv_imma: blocks compiled to share a multiprocessor [2 for lut up to 8 warps, else 1]
             WS          gemv_wgmma only: 1 for warp specialization (a producer warpgroup fills the ring; split 1, no stream-k) [0]
             STAGE_TILES gemv_wgmma only: k tiles of 64 in a ring stage, 1 or 2 (2: with STREAM_K, groups of 128 rows or more) [1]
  apt_popc the APT layer's one-token kernel (bit-serial WxAy, popcounts on the CUDA cores)
             WBITS, ABITS  weight and activation bits, 1..8 [2, 2]
             N, K          the layer's outputs and inputs (K a multiple of 32) [57344, 8192]
             TILES         WARPSxROWSxVEC[xPER_SM[xSTAGES[xQSPLIT]]] as `tilus bench apt --popc-tiles` [the layer's rule for N, K, WBITS]
  apt_imma the APT layer's one-token kernel on the integer tensor cores (weights of 1-5 bits, activations of 1-7)
             WBITS, ABITS, N, K  as apt_popc [2, 2, 57344, 8192]
             TILES         BNxBKxWARPSxSTAGES[xSPLIT] as `tilus bench apt --imma-tiles` [the layer's rule for N, K, WBITS]
  vq       the VQ layer's direct kernel, vq_gemv (alias vq_gemv), as the layer launches it for M tokens
             FORMAT        a named VQ format: gptvq2, aqlm2x8, aqlm3, quip4 [gptvq2]
             N, K, M       the layer's outputs and inputs, and the tokens [57344, 8192, 1]
             WARPS, SPLIT, STAGES, PRODUCT, REPLICAS
                           the knobs of `VqLinear::with_warps` etc. [the layer's rules]

--config may be repeated and may hold comma-separated pairs: --config WDTYPE=u3,BN=256.
Names are case-insensitive and `-` is `_`. Unknown kernels or keys, bad values and configurations
a program does not support are one-line errors (exit status 2).";

const KERNELS: &str = "fig2 (matmul_f16_int, matmul_f16_i6), fig8 (relayout_int, relayout_i6), \
                       fig14 (matmul_f16_pipelined), qmatmul, apt_popc, apt_imma, vq (vq_gemv)";

/// What `tilus emit` prints of each program.
pub enum Output<'a> {
    /// The generated CUDA C.
    Cuda,
    /// NVRTC's PTX of it for this architecture.
    Ptx(&'a str),
    /// The verified VM program.
    Ir,
}

/// The requested text of each program of the kernel, or a one-line error.
pub fn run(kernel: &str, configs: &[String], output: Output<'_>) -> Result<String, String> {
    let mut out = Vec::new();
    for program in programs(kernel, configs)? {
        if let Output::Ir = output {
            out.push(program.to_string());
            continue;
        }
        let cuda = emit(&program, &Target::default())
            .map_err(|e| format!("code generation failed: {e}"))?;
        // Correct but slow lowerings go to stderr, so the printed code stays pipeable.
        for note in &cuda.notes {
            eprintln!("note: {note}");
        }
        let source = cuda.source.trim_end().to_string();
        out.push(match output {
            Output::Ptx(arch) => {
                tilus::runtime::compile_ptx(&source, arch).map_err(|e| format!("NVRTC: {e}"))?
            }
            _ => source,
        });
    }
    Ok(out.join("\n").trim_end().to_string())
}

/// The verified programs of the kernel (the quantized matmul may have two).
fn programs(kernel: &str, configs: &[String]) -> Result<Vec<Program>, String> {
    let (k, fixed_weight) = Kernel::parse(kernel)
        .ok_or_else(|| format!("unknown kernel `{kernel}`; known kernels: {KERNELS}"))?;
    let cfg = merge(k, kernel, fixed_weight, configs)?;
    // Tile sizes become i32 constants of the program, so larger values would wrap.
    let num = |key: &str| -> Result<usize, String> {
        let v = &cfg[key];
        v.parse::<usize>()
            .ok()
            .filter(|&x| x > 0 && x <= i32::MAX as usize)
            .ok_or_else(|| {
                format!(
                    "{key}={v}: expected a positive integer of at most {} (tile sizes are i32)",
                    i32::MAX
                )
            })
    };
    let weight = || -> Result<DType, String> {
        cfg["WEIGHT"]
            .parse::<DType>()
            .map_err(|e| format!("WEIGHT={}: {e}", cfg["WEIGHT"]))
    };
    match k {
        Kernel::QMatmul => return qmatmul(&cfg),
        Kernel::AptPopc => return apt_popc(&cfg),
        Kernel::AptImma => return apt_imma(&cfg),
        Kernel::Vq => return vq(&cfg),
        _ => {}
    }
    let build: Box<dyn FnOnce() -> Program> = match k {
        Kernel::Fig2 => {
            let (w, bm, bn, bk) = (weight()?, num("BM")?, num("BN")?, num("BK")?);
            Box::new(move || programs::matmul_f16_int(w, bm, bn, bk))
        }
        Kernel::Fig8 => {
            let (w, bk, bn) = (weight()?, num("BK")?, num("BN")?);
            Box::new(move || programs::relayout_int(w, bk, bn))
        }
        Kernel::Fig14 => {
            let (bm, bn, bk, s) = (num("BM")?, num("BN")?, num("BK")?, num("STAGES")?);
            Box::new(move || programs::matmul_f16_pipelined(bm, bn, bk, s))
        }
        Kernel::QMatmul | Kernel::AptPopc | Kernel::AptImma | Kernel::Vq => {
            unreachable!("handled above")
        }
    };
    let program = quietly(build).map_err(|e| format!("unsupported configuration: {e}"))?;
    verify(&program, &Target::default()).map_err(|diags| {
        let all: Vec<String> = diags.iter().map(|d| d.message.clone()).collect();
        format!("{} does not verify: {}", program.name, all.join("; "))
    })?;
    Ok(vec![program])
}

/// The configuration of `kernel` (named `name` in errors): its defaults, the fixed weight of an
/// alias, then the `KEY=VALUE` pairs of `configs` (comma-separated, later ones win).
fn merge(
    k: Kernel,
    kernel: &str,
    fixed_weight: Option<DType>,
    configs: &[String],
) -> Result<BTreeMap<String, String>, String> {
    let mut cfg: BTreeMap<String, String> = k
        .defaults()
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    if let Some(w) = fixed_weight {
        cfg.insert("WEIGHT".into(), w.to_string());
    }
    let keys: Vec<&str> = k.defaults().iter().map(|(a, _)| *a).collect();
    for item in configs.iter().flat_map(|c| c.split(',')) {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| format!("--config `{item}`: expected KEY=VALUE"))?;
        let key = key.trim().to_ascii_uppercase();
        if !keys.contains(&key.as_str()) {
            return Err(format!(
                "unknown configuration key `{key}` for kernel {kernel}; keys: {}",
                keys.join(", ")
            ));
        }
        if fixed_weight.is_some() && key == "WEIGHT" {
            return Err(format!(
                "kernel {kernel} fixes WEIGHT; use fig2 or fig8 to choose it"
            ));
        }
        cfg.insert(key, value.trim().to_string());
    }
    Ok(cfg)
}

/// The APT kernels' layer keys: `WBITS`, `ABITS` (1..=8), `N` and `K` (positive i32s).
fn apt_layer(cfg: &BTreeMap<String, String>) -> Result<(u32, u32, usize, usize), String> {
    let number = |key: &str, max: usize| -> Result<usize, String> {
        let v = cfg[key].trim();
        v.parse::<usize>()
            .ok()
            .filter(|&x| x > 0 && x <= max)
            .ok_or_else(|| format!("{key}={v}: expected an integer in 1..={max}"))
    };
    let (wbits, abits) = (number("WBITS", 8)? as u32, number("ABITS", 8)? as u32);
    let (n, k) = (
        number("N", i32::MAX as usize)?,
        number("K", i32::MAX as usize)?,
    );
    Ok((wbits, abits, n, k))
}

/// The APT popc decode kernel's program for a layer shape, widths and tiling (the rule's when
/// `TILES` is empty), checked as the layer checks it.
fn apt_popc(cfg: &BTreeMap<String, String>) -> Result<Vec<Program>, String> {
    let (wbits, abits, n, k) = apt_layer(cfg)?;
    if !k.is_multiple_of(32) {
        return Err(format!(
            "K={k}: expected a multiple of 32 (the planes' words)"
        ));
    }
    let tiles = match cfg["TILES"].trim() {
        "" => PopcTiles::for_shape(n, k, wbits),
        t => super::bench_apt::parse_popc_tiles(Some(t))
            .map_err(|e| e.replace("argument `--popc-tiles`", "TILES"))?[0],
    };
    let config = tiles
        .config(k, wbits, abits, false)
        .map_err(|e| e.to_string())?;
    let program = apt_gemv_popc::program(&config).map_err(|e| e.to_string())?;
    Ok(vec![program])
}

/// The APT integer-mma decode kernel's program for a layer shape, widths and tiling (the
/// rule's when `TILES` is empty), checked as the layer checks it.
fn apt_imma(cfg: &BTreeMap<String, String>) -> Result<Vec<Program>, String> {
    let (wbits, abits, n, k) = apt_layer(cfg)?;
    let tiles = match cfg["TILES"].trim() {
        "" => ImmaTiles::for_shape(n, k, wbits).ok_or_else(|| {
            format!("N={n}, K={k}, WBITS={wbits}: no integer-mma tiling serves the layer")
        })?,
        t => super::bench_apt::parse_imma_tiles(Some(t))
            .map_err(|e| e.replace("argument `--imma-tiles`", "TILES"))?[0],
    };
    let config = tiles
        .config(n, k, wbits, abits, false)
        .map_err(|e| e.to_string())?;
    let program = apt_gemv_imma::program(&config).map_err(|e| e.to_string())?;
    Ok(vec![program])
}

/// The VQ layer's direct kernel ([`vq_gemv`]) for a format, shape and token count, with the
/// layer's rules for every knob left empty and the layer's checks on the ones given.
fn vq(cfg: &BTreeMap<String, String>) -> Result<Vec<Program>, String> {
    let format = cfg["FORMAT"].trim();
    let c = VqConfig::by_name(format)
        .ok_or_else(|| format!("FORMAT={format}: expected gptvq2, aqlm2x8, aqlm3 or quip4"))?;
    // PRODUCT counts from 0 (the 16-token product the layer runs above 8 tokens); every other
    // knob is positive.
    let number = |key: &str| -> Result<Option<usize>, String> {
        let v = cfg[key].trim();
        if v.is_empty() {
            return Ok(None);
        }
        let least = usize::from(key != "PRODUCT");
        v.parse::<usize>()
            .ok()
            .filter(|&x| x >= least && x <= i32::MAX as usize)
            .map(Some)
            .ok_or_else(|| {
                let what = if least == 0 {
                    "a whole number"
                } else {
                    "a positive integer"
                };
                format!("{key}={v}: expected {what}")
            })
    };
    let given = |key: &str| number(key).map(|v| v.expect("N, K and M have defaults"));
    let (n, k, m) = (given("N")?, given("K")?, given("M")?);
    // The layer's checks: a weight of the shape (random codes; its values do not matter).
    let weight = VqWeight::random(c, n, k, 1, false).map_err(|e| e.to_string())?;
    let mut layer = VqLinear::new(weight).map_err(|e| e.to_string())?;
    if let Some(w) = number("WARPS")? {
        layer = layer.with_warps(w).map_err(|e| e.to_string())?;
    }
    if let Some(s) = number("SPLIT")? {
        layer = layer.with_split(s).map_err(|e| e.to_string())?;
    }
    if let Some(s) = number("STAGES")? {
        layer = layer.with_stages(s).map_err(|e| e.to_string())?;
    }
    if let Some(p) = number("PRODUCT")? {
        layer = layer.with_product(p).map_err(|e| e.to_string())?;
    }
    if let Some(r) = number("REPLICAS")? {
        layer = layer
            .with_cache(VqCache { replicas: r })
            .map_err(|e| e.to_string())?;
    }
    let program = vq_gemv::program(&layer.config(m)).map_err(|e| e.to_string())?;
    Ok(vec![program])
}

/// The main program of a quantized-matmul configuration (split-k included: one program).
fn qmatmul(cfg: &BTreeMap<String, String>) -> Result<Vec<Program>, String> {
    let config = qmatmul_from(cfg)?;
    let kernel = qmatmul::build(&config).map_err(|e| e.to_string())?;
    Ok(vec![kernel.main])
}

/// A quantized-matmul configuration from `--config` pairs (the `qmatmul` kernel's keys, as
/// `tilus emit qmatmul` takes them), checked by the library; `tilus bench qmatmul --config`
/// times exactly these.
pub fn qmatmul_config(configs: &[String]) -> Result<QMatmulConfig, String> {
    let cfg = merge(Kernel::QMatmul, "qmatmul", None, configs)?;
    let config = qmatmul_from(&cfg)?;
    config.tiling().map_err(|e| e.to_string())?;
    Ok(config)
}

fn qmatmul_from(cfg: &BTreeMap<String, String>) -> Result<QMatmulConfig, String> {
    let dtype = |key: &str| -> Result<DType, String> {
        cfg[key]
            .parse::<DType>()
            .map_err(|e| format!("{key}={}: {e}", cfg[key]))
    };
    let number = |key: &str| -> Result<Option<usize>, String> {
        let v = cfg[key].trim();
        if v.is_empty() {
            return Ok(None);
        }
        v.parse::<usize>()
            .map(Some)
            .map_err(|_| format!("{key}={v}: expected a non-negative integer"))
    };
    let (wdtype, adtype) = (dtype("WDTYPE")?, dtype("ADTYPE")?);
    let group = match number("GROUP")? {
        Some(0) | None => None,
        Some(g) => Some(g),
    };
    let base = QMatmulConfig::default_for(wdtype, adtype, group, matches!(wdtype, DType::UInt(_)));
    let pick = |key: &str, default: usize| number(key).map(|v| v.unwrap_or(default));
    // Each method's defaults, which the keys given override.
    let defaults = match cfg["METHOD"].trim() {
        "fused" => base,
        "gemv" => QMatmulConfig {
            method: QMatmulMethod::Gemv,
            bm: 8,
            ..base
        },
        "gemv_wgmma" => QMatmulConfig {
            method: QMatmulMethod::GemvWgmma,
            bm: 8,
            ..base
        },
        // One token; bk of one k32 fragment a field (the method's error names an unfit type).
        "gemv_imma" => QMatmulConfig {
            method: QMatmulMethod::GemvImma,
            bm: 1,
            bn: 256,
            bk: qmatmul::gemv_imma_bk(wdtype).unwrap_or(128),
            stages: 4,
            ..base
        },
        // 16 tokens on two warpgroups; bk of whole k32 steps for each code of a byte.
        "gemv_igmma" => QMatmulConfig {
            method: QMatmulMethod::GemvIgmma,
            bm: 16,
            bn: 128,
            bk: 128,
            warps: 8,
            stages: 4,
            ..base
        },
        // The look-up method's fixed tiles, with 8 warps of rows enough for a 16-byte load
        // per thread (two for groups of 64 on), two blocks to a multiprocessor.
        "lut" => {
            let tables = group.unwrap_or(128) / 8;
            let bn = tables.saturating_mul(8 * (16 / tables.max(1)).max(2));
            base.lut(bn, 8, base.split_k, 2)
        }
        other => {
            return Err(format!(
                "METHOD={other}: expected fused, gemv, gemv_wgmma, gemv_imma, gemv_igmma or lut"
            ))
        }
    };
    let warps = pick("WARPS", defaults.warps)?;
    // Two look-up blocks of up to 8 warps share a multiprocessor (perf note 37); 16 take one.
    let occupancy = if defaults.method == QMatmulMethod::Lut && warps > 8 {
        1
    } else {
        defaults.blocks_per_sm
    };
    let config = QMatmulConfig {
        bm: pick("BM", defaults.bm)?,
        bn: pick("BN", defaults.bn)?,
        bk: pick("BK", defaults.bk)?,
        warps,
        stages: pick("STAGES", defaults.stages)?,
        split_k: pick("SPLIT_K", defaults.split_k)?,
        stream_k: pick("STREAM_K", defaults.stream_k)?,
        blocks_per_sm: pick("BLOCKS_PER_SM", occupancy)?,
        specialize: pick("WS", usize::from(defaults.specialize))? == 1,
        stage_tiles: pick("STAGE_TILES", defaults.stage_tiles)?,
        ..defaults
    };
    Ok(config)
}

/// Run `f`, turning a panic (the program builders assert their tile constraints) into an error
/// message without printing the panic.
fn quietly<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    r.map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "the program builder rejected it".to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_every_kernel_and_key() {
        for (name, kernel) in [
            ("fig2", Kernel::Fig2),
            ("fig8", Kernel::Fig8),
            ("fig14", Kernel::Fig14),
            ("qmatmul", Kernel::QMatmul),
            ("apt_popc", Kernel::AptPopc),
            ("apt_imma", Kernel::AptImma),
            ("vq", Kernel::Vq),
        ] {
            assert!(KERNELS_HELP.contains(&format!("  {name} ")), "{name}");
            for (key, _) in kernel.defaults() {
                assert!(
                    KERNELS_HELP.contains(key),
                    "{name}: key {key} missing from the help"
                );
            }
        }
    }

    #[test]
    fn apt_imma_takes_the_rule_or_a_tiling() {
        let rule = programs("apt_imma", &[]).expect("the rule's program");
        assert!(rule[0].name.contains("apt_gemv_imma"), "{}", rule[0].name);
        let other = programs("apt_imma", &["WBITS=3,ABITS=4,TILES=448x128x4x6".into()])
            .expect("a ring of 6");
        assert_ne!(rule[0].to_string(), other[0].to_string());
        for (bad, names) in [
            ("WBITS=6", "WBITS=6"),
            ("ABITS=8", "abits"),
            ("TILES=100x256x4x4", "bn"),
            ("TILES=448x256x4", "TILES"),
        ] {
            let e = programs("apt_imma", &[bad.into()]).unwrap_err();
            assert!(e.contains(names), "{bad}: {e}");
        }
    }

    #[test]
    fn apt_popc_takes_the_rule_or_a_tiling() {
        let rule = programs("apt_popc", &[]).expect("the rule's program");
        assert!(rule[0].name.contains("apt_gemv_popc"), "{}", rule[0].name);
        let ring = programs("apt_popc", &["WBITS=3,ABITS=4,TILES=16x2x4x1x3x2".into()])
            .expect("a ring of 3");
        assert_ne!(rule[0].to_string(), ring[0].to_string());
        for (bad, names) in [
            ("K=100", "K=100"),
            ("WBITS=9", "WBITS=9"),
            ("TILES=7x2x4", "TILES"),
            ("TILES=8x4x4x1x9x2", "TILES"),
        ] {
            let e = programs("apt_popc", &[bad.into()]).unwrap_err();
            assert!(e.contains(names), "{bad}: {e}");
        }
    }

    #[test]
    fn vq_takes_the_rules_or_the_knobs() {
        let small = "N=512,K=1024";
        let rule = programs("vq", &[small.into()]).expect("the rule's program");
        assert!(rule[0].name.contains("vq_gemv"), "{}", rule[0].name);
        // One token of GPTVQ-2 pairs rows by the rule.
        let t3 = programs("vq", &[small.into(), "PRODUCT=3".into()]).expect("t3");
        assert_eq!(rule[0].to_string(), t3[0].to_string());
        let t1 = programs("vq", &[small.into(), "PRODUCT=1".into()]).expect("t1");
        assert_ne!(rule[0].to_string(), t1[0].to_string());
        // 16 tokens take the 16-token product (0) by the rule, and it can be named.
        let rule16 = programs("vq", &[small.into(), "M=16".into()]).expect("m = 16");
        let t0 = programs("vq", &[small.into(), "M=16,PRODUCT=0".into()]).expect("t0");
        assert_eq!(rule16[0].to_string(), t0[0].to_string());
        assert_ne!(t0[0].to_string(), t1[0].to_string());
        for (bad, names) in [
            ("FORMAT=vq9", "FORMAT=vq9"),
            ("FORMAT=aqlm2x8,PRODUCT=3", "`product`"),
            ("REPLICAS=4", "`cache`"),
            ("N=100", "n = 100"),
            ("M=0", "M=0"),
            ("PRODUCT=4", "`product`"),
            ("PRODUCT=-1", "PRODUCT=-1: expected a whole number"),
            ("WARPS=0", "WARPS=0: expected a positive integer"),
        ] {
            let e = programs("vq", &[small.into(), bad.into()]).unwrap_err();
            assert!(e.contains(names), "{bad}: {e}");
        }
    }
}
