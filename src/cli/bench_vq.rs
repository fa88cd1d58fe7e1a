//! `tilus bench vq`: see [`tilus::kernels::vq::bench`].

use tilus::kernels::apt::bench::{bench_cublas_f16, bench_weight_only};
use tilus::kernels::vq::bench::{
    bench_vq, parse_cache, parse_configs, table, VqKnobs, LLAMA70B_SHAPES,
};
use tilus::kernels::vq::VqCache;
use tilus::vq::VqConfig;
use tilus_runtime::{copy_bandwidth, Context, L2Flush, L2Mode};

type Parsed = (
    Vec<VqConfig>,
    Vec<usize>,
    Vec<(usize, usize)>,
    Option<VqCache>,
);

/// Most tokens `--m` takes: the GEMV's 16, or with `--dense` a prefill's.
fn max_m(dense: bool) -> usize {
    if dense {
        16384
    } else {
        16
    }
}

/// The formats, m values, shapes and cache of the arguments; errors name the argument.
pub fn parse(
    configs: &str,
    m: &str,
    shapes: &str,
    cache: Option<&str>,
    dense: bool,
) -> Result<Parsed, String> {
    let configs = parse_configs(configs)?;
    let most = max_m(dense);
    let ms = m
        .split(',')
        .map(|v| match v.trim().parse::<usize>() {
            Ok(x) if (1..=most).contains(&x) => Ok(x),
            _ => Err(format!(
                "argument `--m`: `{v}` is not a number in 1..={most} ({})",
                if dense {
                    "tokens".to_string()
                } else {
                    format!(
                        "the GEMV's tokens; --dense takes prefill's, up to {}",
                        max_m(true)
                    )
                }
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let shapes = match shapes.trim() {
        "llama70b" => LLAMA70B_SHAPES.to_vec(),
        list => list
            .split(',')
            .map(|s| {
                let bad = || {
                    format!("argument `--shapes`: `{s}` is not NxK with n a multiple of 256 and k of 256, or `llama70b`")
                };
                let (n, k) = s.trim().split_once('x').ok_or_else(bad)?;
                let (n, k) = (
                    n.parse::<usize>().map_err(|_| bad())?,
                    k.parse::<usize>().map_err(|_| bad())?,
                );
                if n == 0 || n % 256 != 0 || k == 0 || k % 256 != 0 {
                    return Err(bad());
                }
                Ok((n, k))
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    Ok((configs, ms, shapes, parse_cache(cache)?))
}

#[allow(clippy::too_many_arguments)]
pub fn run(
    configs: &str,
    m: &str,
    shapes: &str,
    cache: Option<&str>,
    knobs: VqKnobs,
    runs: usize,
    (no_cublas, no_elementwise): (bool, bool),
    l2: L2Mode,
) -> Result<String, String> {
    let (configs, ms, shapes, cache) = parse(configs, m, shapes, cache, knobs.dense)?;
    let err = |e: tilus_runtime::RuntimeError| e.to_string();
    let ctx = Context::new(0).map_err(|e| {
        if e.is_unavailable() {
            format!("tilus bench vq needs a GPU: {e}")
        } else {
            e.to_string()
        }
    })?;
    let dev = ctx.device();
    let mut out = format!("device: {} ({})\n", dev.name, ctx.arch());
    let (_, copy_gbps) = copy_bandwidth(&ctx, 1 << 30).map_err(err)?;
    let mut flush = L2Flush::with_mode(&ctx, l2).map_err(err)?;
    let mut rows = Vec::new();
    for &(n, k) in &shapes {
        for &m in &ms {
            let cublas = if no_cublas {
                None
            } else {
                Some(bench_cublas_f16(&ctx, &mut flush, m, n, k)?)
            };
            let mut elementwise: Vec<(u32, Option<f64>)> = Vec::new();
            for &c in &configs {
                let bits = tilus::kernels::vq::bench::elementwise_bits(c);
                let ew = if no_elementwise {
                    None
                } else if let Some(&(_, t)) = elementwise.iter().find(|(b, _)| *b == bits) {
                    t
                } else {
                    // A shape the element-wise kernel does not serve leaves the column empty.
                    let t = match bench_weight_only(&ctx, &mut flush, bits, m, n, k, copy_gbps) {
                        Ok(t) => Some(t),
                        Err(e) => {
                            eprintln!("element-wise u{bits} m={m} {n}x{k}: {e}");
                            None
                        }
                    };
                    elementwise.push((bits, t));
                    t
                };
                let row = bench_vq(
                    &ctx,
                    &mut flush,
                    c,
                    m,
                    n,
                    k,
                    runs,
                    copy_gbps,
                    VqKnobs { cache, ..knobs },
                    cublas,
                    ew,
                )
                .map_err(|e| format!("{} m={m} {n}x{k}: {e}", c.name))?;
                let us = |t: &Option<tilus_runtime::Timing>| {
                    t.as_ref()
                        .map_or("-".to_string(), |t| format!("{:.1}", t.median_us))
                };
                let fused: Vec<String> = row
                    .fused
                    .iter()
                    .map(|(bm, t)| format!("{:.1}@{bm}", t.median_us))
                    .collect();
                eprintln!(
                    "{} m={m} {n}x{k}: {:.1} us (GC {} us, dense {} us, fused {})",
                    c.name,
                    row.cached.median_us,
                    us(&row.naive),
                    us(&row.dense),
                    fused.join(" ")
                );
                rows.push(row);
            }
        }
    }
    out += &table(copy_gbps, &rows);
    if rows.iter().any(|r| r.tiers.is_some()) {
        out += &tilus::kernels::vq::bench::tiers_table(&rows);
    }
    Ok(out)
}
