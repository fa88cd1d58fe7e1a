//! `tilus bench apt`: see [`tilus::kernels::apt::bench`].

use tilus::kernels::apt::bench::{
    bench_apt, bench_cublas_f16, bench_step, bench_weight_only, step_table, table, LLAMA70B_SHAPES,
    PAPER_SHAPES, POPC_BENCH_MAX_M,
};
use tilus::kernels::apt::{AptTiles, ImmaTiles, PopcTiles};
use tilus_runtime::{copy_bandwidth, Context, L2Flush, L2Mode};

type Parsed = (Vec<(u32, u32)>, Vec<usize>, Vec<(usize, usize)>);

/// The widths, m values and shapes of the arguments; errors name the argument.
pub fn parse(widths: &str, m: &str, shapes: &str) -> Result<Parsed, String> {
    let widths = widths
        .split(',')
        .map(|w| {
            let t = w.trim().to_ascii_uppercase();
            let bad = || {
                format!("argument `--widths`: `{w}` is not WxAy with 1 <= x, y <= 8 (e.g. W2A2)")
            };
            let (a, b) = t
                .strip_prefix('W')
                .and_then(|r| r.split_once('A'))
                .ok_or_else(bad)?;
            let (x, y) = (
                a.parse::<u32>().map_err(|_| bad())?,
                b.parse::<u32>().map_err(|_| bad())?,
            );
            if !(1..=8).contains(&x) || !(1..=8).contains(&y) {
                return Err(bad());
            }
            Ok((x, y))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ms = m
        .split(',')
        .map(|v| match v.trim().parse::<usize>() {
            Ok(x) if x > 0 => Ok(x),
            _ => Err(format!("argument `--m`: `{v}` is not a positive number")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let shapes = match shapes.trim() {
        "paper" => PAPER_SHAPES.to_vec(),
        "llama70b" => LLAMA70B_SHAPES.to_vec(),
        list => list
            .split(',')
            .map(|s| {
                let bad = || format!("argument `--shapes`: `{s}` is not NxK with n a multiple of 8 and k of 256, or `paper`, `llama70b`");
                let (n, k) = s.trim().split_once('x').ok_or_else(bad)?;
                let (n, k) = (n.parse::<usize>().map_err(|_| bad())?, k.parse::<usize>().map_err(|_| bad())?);
                if n == 0 || n % 8 != 0 || k == 0 || k % 256 != 0 {
                    return Err(bad());
                }
                Ok((n, k))
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    Ok((widths, ms, shapes))
}

/// The numbers of an `AxBxC..` tiling, or `None` when one is not an integer.
fn dims(t: &str) -> Option<Vec<i32>> {
    t.trim().split('x').map(|x| x.parse::<i32>().ok()).collect()
}

const FORM: &str = "is not WARPSxROWSxVEC[xPER_SM[xSTAGES[xQSPLIT]]] (e.g. 4x4x4 or 16x2x4x1x0x4)";

/// The popc tilings of `--popc-tiles` (`WARPSxROWSxVEC[xPER_SM[xSTAGES[xQSPLIT]]],..`: two
/// blocks per SM, register prefetch and one thread per activation word when left out; none when
/// absent), each checked as the layer checks it.
pub fn parse_popc_tiles(list: Option<&str>) -> Result<Vec<PopcTiles>, String> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    list.split(',')
        .map(|t| {
            let bad = |why: String| format!("argument `--popc-tiles`: `{t}` {why}");
            let v = dims(t).ok_or_else(|| bad(FORM.into()))?;
            let (warps, rows, vec, per_sm, stages, qsplit) = match v[..] {
                [w, r, v] => (w, r, v, 2, 0, 1),
                [w, r, v, p] => (w, r, v, p, 0, 1),
                [w, r, v, p, s] => (w, r, v, p, s, 1),
                [w, r, v, p, s, q] => (w, r, v, p, s, q),
                _ => return Err(bad(FORM.into())),
            };
            let tiles = PopcTiles {
                warps,
                rows,
                vec,
                per_sm,
                stages,
                qsplit,
            };
            tiles
                .config(256, 2, 2, false)
                .map_err(|e| bad(format!("is refused: {e}")))?;
            Ok(tiles)
        })
        .collect()
}

const IMMA_FORM: &str = "is not BNxBKxWARPSxSTAGES[xSPLIT] (e.g. 448x256x4x4 or 256x256x4x5x4)";

/// The integer-mma decode tilings of `--imma-tiles` (`BNxBKxWARPSxSTAGES[xSPLIT],..`, no split
/// when absent; none when the list is absent); each layer checks them against its shape and
/// widths (a tiling it refuses is skipped with its reason).
pub fn parse_imma_tiles(list: Option<&str>) -> Result<Vec<ImmaTiles>, String> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    list.split(',')
        .map(|t| match dims(t).as_deref() {
            Some(&[bn, bk, warps, stages, ref split @ ..])
                if bn > 0 && bk > 0 && warps > 0 && stages > 0 && split.len() <= 1 =>
            {
                let split = split.first().copied().unwrap_or(1);
                if split < 1 {
                    return Err(format!("argument `--imma-tiles`: `{t}` {IMMA_FORM}"));
                }
                Ok(ImmaTiles {
                    bn,
                    bk,
                    warps,
                    stages,
                    split,
                })
            }
            _ => Err(format!("argument `--imma-tiles`: `{t}` {IMMA_FORM}")),
        })
        .collect()
}

const GEMM_FORM: &str = "is not WMxWNxFMxFNxKTxSTAGES (e.g. 2x2x2x2x1x3)";

/// The GEMM tilings of `--gemm-tiles` (`WMxWNxFMxFNxKTxSTAGES,..`; none when absent), each
/// checked as the kernel checks its configuration.
pub fn parse_gemm_tiles(list: Option<&str>) -> Result<Vec<AptTiles>, String> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    list.split(',')
        .map(|t| {
            let bad = |why: String| format!("argument `--gemm-tiles`: `{t}` {why}");
            let v = dims(t).ok_or_else(|| bad(GEMM_FORM.into()))?;
            let [wm, wn, fm, fn_, kt, stages] = v[..] else {
                return Err(bad(GEMM_FORM.into()));
            };
            let tiles = AptTiles {
                wm,
                wn,
                fm,
                fn_,
                kt,
                stages,
            };
            tiles.check().map_err(|e| bad(format!("is refused: {e}")))?;
            Ok(tiles)
        })
        .collect()
}

/// `--popc-only` times the popc decode kernel alone: every `m` must be one it runs at, and the
/// flags of the kernels it skips are refused, naming them.
pub fn check_popc_only(m: &str, stages: bool, split: bool, gemm_tiles: bool) -> Result<(), String> {
    for (given, flag, what) in [
        (
            stages,
            "--stages",
            "the GEMM's and the fused kernel's stages",
        ),
        (split, "--split", "the fused kernel's k slices"),
        (gemm_tiles, "--gemm-tiles", "the GEMM's tilings"),
    ] {
        if given {
            return Err(format!(
                "argument `{flag}`: {what} are not timed with `--popc-only`"
            ));
        }
    }
    for v in m.split(',') {
        if v.trim()
            .parse::<usize>()
            .is_ok_and(|x| x > POPC_BENCH_MAX_M)
        {
            return Err(format!(
                "argument `--popc-only`: the popc decode kernel is timed at m <= {POPC_BENCH_MAX_M}, and `--m` has {}",
                v.trim()
            ));
        }
    }
    Ok(())
}

/// `--tune` chooses the one-token kernel and tiles itself: refused with `--popc-tiles`.
pub fn check_tune(tune: bool, popc_tiles: bool) -> Result<(), String> {
    if tune && popc_tiles {
        return Err(
            "argument `--tune`: it times the tuner's choice of one-token kernel and tiles; leave out `--popc-tiles`"
                .into(),
        );
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub fn run(
    widths: &str,
    m: &str,
    shapes: &str,
    runs: usize,
    (no_cublas, no_weight_only): (bool, bool),
    (stages, split): (Option<usize>, Option<usize>),
    (popc_tiles, gemm_tiles, imma_tiles): (Option<&str>, Option<&str>, Option<&str>),
    (popc_only, tune): (bool, bool),
    l2: L2Mode,
) -> Result<String, String> {
    let (widths, ms, shapes) = parse(widths, m, shapes)?;
    if popc_only {
        check_popc_only(m, stages.is_some(), split.is_some(), gemm_tiles.is_some())?;
    }
    check_tune(tune, popc_tiles.is_some())?;
    let popc_tiles = parse_popc_tiles(popc_tiles)?;
    let gemm_tiles = parse_gemm_tiles(gemm_tiles)?;
    let imma_tiles = parse_imma_tiles(imma_tiles)?;
    let Bench {
        ctx,
        mut out,
        copy_gbps,
        mut flush,
    } = open(l2)?;
    let mut rows = Vec::new();
    for &(n, k) in &shapes {
        for &m in &ms {
            let cublas = if no_cublas {
                None
            } else {
                Some(bench_cublas_f16(&ctx, &mut flush, m, n, k)?)
            };
            // The weight-only kernel per distinct weight width.
            let mut weight_only: Vec<(u32, f64)> = Vec::new();
            for &(w, a) in &widths {
                let wo = if no_weight_only {
                    None
                } else if let Some(&(_, t)) = weight_only.iter().find(|(b, _)| *b == w) {
                    Some(t)
                } else {
                    // A shape the weight-only kernel does not serve leaves the column empty.
                    match bench_weight_only(&ctx, &mut flush, w, m, n, k, copy_gbps) {
                        Ok(t) => {
                            weight_only.push((w, t));
                            Some(t)
                        }
                        Err(e) => {
                            eprintln!("weight-only u{w} m={m} {n}x{k}: {e}");
                            None
                        }
                    }
                };
                let row = match bench_apt(
                    &ctx,
                    &mut flush,
                    w,
                    a,
                    m,
                    n,
                    k,
                    runs,
                    copy_gbps,
                    cublas,
                    wo,
                    (stages.map(|s| s as i32), split.map(|s| s as i32)),
                    (&popc_tiles, &gemm_tiles, &imma_tiles),
                    (popc_only, tune),
                )
                .map_err(|e| format!("W{w}A{a} m={m} {n}x{k}: {e}"))?
                {
                    Some(row) => row,
                    // `--popc-only` at a point no tiling of the list serves (a ring too deep
                    // for this width's planes): the scan goes on, as without it.
                    None => {
                        eprintln!("W{w}A{a} m={m} {n}x{k}: no popc tiling of the list runs here");
                        continue;
                    }
                };
                eprintln!("W{w}A{a} m={m} {n}x{k}: {:.1} us", row.layer.median_us);
                rows.push(row);
            }
        }
    }
    out += &table(copy_gbps, &rows);
    Ok(out)
}

/// `tilus bench apt --step`: a decode step of the shapes' layers per width and m
/// ([`bench_step`]).
pub fn run_step(
    widths: &str,
    m: &str,
    shapes: &str,
    runs: usize,
    l2: L2Mode,
) -> Result<String, String> {
    let (widths, ms, shapes) = parse(widths, m, shapes)?;
    let Bench {
        ctx,
        mut out,
        copy_gbps,
        mut flush,
    } = open(l2)?;
    let mut rows = Vec::new();
    for &(w, a) in &widths {
        for &m in &ms {
            let row = bench_step(&ctx, &mut flush, w, a, m, &shapes, runs, copy_gbps)
                .map_err(|e| format!("W{w}A{a} m={m} step: {e}"))?;
            eprintln!("W{w}A{a} m={m} step: {:.1} us", row.step.median_us);
            rows.push(row);
        }
    }
    out += &step_table(copy_gbps, &rows);
    Ok(out)
}

/// What both APT benches start from: the GPU, the table's device line, the copy bandwidth
/// measured now, and the L2 flush.
struct Bench {
    ctx: std::sync::Arc<Context>,
    out: String,
    copy_gbps: f64,
    flush: L2Flush,
}

fn open(l2: L2Mode) -> Result<Bench, String> {
    let err = |e: tilus_runtime::RuntimeError| e.to_string();
    let ctx = Context::new(0).map_err(err)?;
    let dev = ctx.device();
    let out = format!("device: {} ({})\n", dev.name, ctx.arch());
    let (_, copy_gbps) = copy_bandwidth(&ctx, 1 << 30).map_err(err)?;
    let flush = L2Flush::with_mode(&ctx, l2).map_err(err)?;
    Ok(Bench {
        ctx,
        out,
        copy_gbps,
        flush,
    })
}
