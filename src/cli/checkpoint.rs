//! `tilus quantize`, `tilus inspect` and `tilus bench import`: quantized checkpoints in
//! safetensors files (see `docs/checkpoints.md`).

use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Instant;
use tilus::checkpoint::format::{self, RawTensor};
use tilus::checkpoint::{
    synth, Checkpoint, Format, GptqZeros, ImportOptions, ImportedLayer, TensorDtype,
};
use tilus::quant::{Group, QuantizedWeight};
use tilus::DType;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// What `tilus quantize` was asked.
pub struct QuantizeArgs<'a> {
    pub input: &'a Path,
    pub output: &'a Path,
    pub wdtype: Option<&'a str>,
    pub group: Option<usize>,
    pub scale_dtype: Option<&'a str>,
    pub from: Option<&'a str>,
    pub gptq_v2: bool,
}

/// The tensors of a layer prefix in a GPTQ / AWQ file (not copied when converting).
const LAYER_SUFFIXES: [&str; 4] = ["qweight", "qzeros", "scales", "g_idx"];

fn raw(ckpt: &Checkpoint, name: &str) -> Result<RawTensor, String> {
    let t = ckpt.tensor(name).map_err(err)?;
    Ok(RawTensor {
        dtype: t.dtype,
        shape: t.shape.to_vec(),
        data: t.data.to_vec(),
    })
}

fn progress(len: usize) -> ProgressBar {
    // Drawn on stderr only when it is a terminal (indicatif hides it otherwise).
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} tensors {elapsed} {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// `tilus quantize IN OUT ...`.
pub fn quantize(a: &QuantizeArgs<'_>) -> Result<String, String> {
    if a.input == a.output {
        return Err("argument `OUTPUT`: the same file as `INPUT`".into());
    }
    match a.from {
        Some(from) => convert(a, from),
        None => quantize_floats(a),
    }
}

fn convert(a: &QuantizeArgs<'_>, from: &str) -> Result<String, String> {
    let want = match from {
        "gptq" => Format::Gptq,
        "awq" => Format::Awq,
        _ => return Err(format!("argument `--from`: `{from}` is not gptq or awq")),
    };
    for (flag, given) in [
        ("--wdtype", a.wdtype.is_some()),
        ("--group", a.group.is_some()),
        ("--scale-dtype", a.scale_dtype.is_some()),
    ] {
        if given {
            return Err(format!(
                "argument `{flag}`: not used with --from (the checkpoint's codes, groups and \
                 scales are kept as they are)"
            ));
        }
    }
    if a.gptq_v2 && want != Format::Gptq {
        return Err("argument `--gptq-v2`: only with --from gptq".into());
    }
    let ckpt = Checkpoint::open(a.input).map_err(err)?;
    let infos = ckpt.layers().map_err(err)?;
    if infos.is_empty() {
        return Err(format!(
            "argument `INPUT`: `{}` holds no quantized layer (no `*.qweight` tensor)",
            a.input.display()
        ));
    }
    if let Some(bad) = infos.iter().find(|l| l.format != want) {
        return Err(format!(
            "argument `--from`: layer `{}` is {} by its shapes, not {from}",
            bad.prefix, bad.format
        ));
    }
    let options = ImportOptions {
        gptq_zeros: a.gptq_v2.then_some(GptqZeros::V2),
        ..Default::default()
    };
    let bar = progress(infos.len());
    let mut layers = Vec::new();
    let mut owned: BTreeSet<String> = BTreeSet::new();
    let mut out = String::new();
    for info in &infos {
        bar.set_message(info.prefix.clone());
        let layer = ckpt.load(&info.prefix, &options).map_err(err)?;
        out += &format!(
            "converted {} [{} x {}] {} u{} group {}{}\n",
            info.prefix,
            info.n,
            info.k,
            info.format,
            info.bits,
            info.group,
            if info.act_order { " act-order" } else { "" }
        );
        for s in LAYER_SUFFIXES {
            owned.insert(format!("{}.{s}", info.prefix));
        }
        layers.push((info.prefix.clone(), layer));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mut extra = Vec::new();
    for name in ckpt.names() {
        if !owned.contains(name) {
            extra.push((name.to_string(), raw(&ckpt, name)?));
            out += &format!("copied {name} as is\n");
        }
    }
    format::save_with(a.output, &layers, &extra).map_err(err)?;
    out += &format!(
        "wrote {}: {} layers, {} other tensors",
        a.output.display(),
        layers.len(),
        extra.len()
    );
    Ok(out)
}

/// A float tensor's values as f32.
fn floats(dtype: TensorDtype, data: &[u8]) -> Option<Vec<f32>> {
    Some(match dtype {
        TensorDtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        TensorDtype::F16 => data
            .chunks_exact(2)
            .map(|b| half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect(),
        TensorDtype::BF16 => data
            .chunks_exact(2)
            .map(|b| half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect(),
        _ => return None,
    })
}

fn quantize_floats(a: &QuantizeArgs<'_>) -> Result<String, String> {
    if a.gptq_v2 {
        return Err("argument `--gptq-v2`: only with --from gptq".into());
    }
    let wdtype_text = a
        .wdtype
        .ok_or("argument `--wdtype`: required (or --from gptq|awq to convert)")?;
    let wdtype: DType = wdtype_text
        .parse()
        .map_err(|e| format!("argument `--wdtype`: `{wdtype_text}`: {e}"))?;
    let scale_text = a.scale_dtype.unwrap_or("f16");
    let scale_dtype = match scale_text {
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        _ => {
            return Err(format!(
                "argument `--scale-dtype`: `{scale_text}` is not f16 or bf16"
            ))
        }
    };
    let group_rows = a.group.unwrap_or(128);
    // Check the type before touching the file: the same rules as the library's quantizer.
    QuantizedWeight::quantize(
        &[0.0; 128],
        128,
        1,
        wdtype,
        Group::PerChannel,
        scale_dtype,
        matches!(wdtype, DType::UInt(_)),
    )
    .map_err(|e| format!("argument `--wdtype`: {e}"))?;
    let ckpt = Checkpoint::open(a.input).map_err(err)?;
    let names: Vec<&str> = ckpt.names();
    // Quantized: 2-D float `*.weight` tensors whose input dimension the group divides.
    let mut chosen = Vec::new();
    let mut notes = String::new();
    let mut extra = Vec::new();
    for &name in &names {
        let t = ckpt.tensor(name).map_err(err)?;
        let float = matches!(
            t.dtype,
            TensorDtype::F32 | TensorDtype::F16 | TensorDtype::BF16
        );
        let reason = if !name.ends_with(".weight") {
            Some("not a `.weight`")
        } else if t.shape.len() != 2 {
            Some("not 2-D")
        } else if !float {
            Some("not f32, f16 or bf16")
        } else if t.shape[0] == 0 || t.shape[1] == 0 {
            Some("empty")
        } else if group_rows != 0 && !t.shape[1].is_multiple_of(group_rows) {
            Some("its input dimension is not a multiple of --group")
        } else {
            None
        };
        match reason {
            None => chosen.push(name),
            Some(why) => {
                notes += &format!("copied {name} as is ({why})\n");
                extra.push((name.to_string(), raw(&ckpt, name)?));
            }
        }
    }
    let group = if group_rows == 0 {
        Group::PerChannel
    } else {
        Group::Rows(group_rows)
    };
    let bar = progress(chosen.len());
    let mut layers = Vec::new();
    let mut out = String::new();
    for name in chosen {
        bar.set_message(name.to_string());
        let t = ckpt.tensor(name).map_err(err)?;
        // PyTorch's nn.Linear.weight is [out, in] = [n, k]; ours is [k, n].
        let (n, k) = (t.shape[0], t.shape[1]);
        let w = floats(t.dtype, t.data).ok_or_else(|| format!("tensor `{name}`: not a float"))?;
        let mut wt = vec![0f32; k * n];
        for (o, row) in w.chunks_exact(k).enumerate() {
            for (i, &v) in row.iter().enumerate() {
                wt[i * n + o] = v;
            }
        }
        let q = QuantizedWeight::quantize(
            &wt,
            k,
            n,
            wdtype,
            group,
            scale_dtype,
            matches!(wdtype, DType::UInt(_)),
        )
        .map_err(|e| format!("tensor `{name}`: {e}"))?;
        let prefix = name.strip_suffix(".weight").unwrap_or(name).to_string();
        out += &format!(
            "quantized {name} [{n} x {k}] -> {wdtype}, group {}\n",
            if group_rows == 0 {
                "per channel".to_string()
            } else {
                group_rows.to_string()
            }
        );
        layers.push((
            prefix,
            ImportedLayer {
                weight: q,
                input_perm: None,
            },
        ));
        bar.inc(1);
    }
    bar.finish_and_clear();
    format::save_with(a.output, &layers, &extra).map_err(err)?;
    Ok(format!(
        "{out}{notes}wrote {}: {} layers, {} other tensors",
        a.output.display(),
        layers.len(),
        extra.len()
    ))
}

#[derive(serde::Serialize)]
struct LayerRow {
    name: String,
    format: String,
    dtype: String,
    /// `[out, in]` = `[n, k]`, PyTorch's order.
    shape: [usize; 2],
    group: usize,
    act_order: bool,
    bytes: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    import_s: Option<f64>,
}

#[derive(serde::Serialize)]
struct TensorRow {
    name: String,
    dtype: String,
    shape: Vec<usize>,
    bytes: usize,
}

#[derive(serde::Serialize)]
struct Inspect {
    file: String,
    format: String,
    layers: Vec<LayerRow>,
    tensors: Vec<TensorRow>,
}

/// `tilus inspect FILE [--json] [--time]`.
pub fn inspect(path: &Path, json: bool, time: bool) -> Result<String, String> {
    let ckpt = Checkpoint::open(path).map_err(err)?;
    let infos = ckpt.layers().map_err(err)?;
    let tilus = format::is_tilus(&ckpt);
    let mut owned: BTreeSet<String> = BTreeSet::new();
    let mut layers = Vec::new();
    for info in &infos {
        let suffixes: &[&str] = if tilus {
            &["codes", "scales", "zeros", "input_perm"]
        } else {
            &LAYER_SUFFIXES
        };
        let mut bytes = 0;
        for s in suffixes {
            let name = format!("{}.{s}", info.prefix);
            if let Some(t) = ckpt.get(&name) {
                bytes += t.data.len();
                owned.insert(name);
            }
        }
        let import_s = if time {
            let start = Instant::now();
            ckpt.load(&info.prefix, &ImportOptions::default())
                .map_err(err)?;
            Some(start.elapsed().as_secs_f64())
        } else {
            None
        };
        let dtype = if tilus {
            format::layer_table(&ckpt)
                .map_err(err)?
                .get(&info.prefix)
                .map(|m| m.dtype.clone())
                .unwrap_or_default()
        } else {
            format!("u{}", info.bits)
        };
        layers.push(LayerRow {
            name: info.prefix.clone(),
            format: info.format.to_string(),
            dtype,
            shape: [info.n, info.k],
            group: info.group,
            act_order: info.act_order,
            bytes,
            import_s,
        });
    }
    let tensors: Vec<TensorRow> = ckpt
        .names()
        .into_iter()
        .filter(|n| !owned.contains(*n))
        .map(|name| {
            let t = ckpt.get(name).expect("listed");
            TensorRow {
                name: name.to_string(),
                dtype: format!("{:?}", t.dtype),
                shape: t.shape.to_vec(),
                bytes: t.data.len(),
            }
        })
        .collect();
    let kinds: BTreeSet<String> = layers.iter().map(|l| l.format.clone()).collect();
    let format = if tilus {
        format!("tilus (format version {})", format::FORMAT_VERSION)
    } else if kinds.is_empty() {
        "safetensors (no quantized layers)".to_string()
    } else {
        kinds.into_iter().collect::<Vec<_>>().join(" + ")
    };
    let report = Inspect {
        file: path.display().to_string(),
        format,
        layers,
        tensors,
    };
    if json {
        return serde_json::to_string(&report).map_err(err);
    }
    let mut out = format!("file: {}\nformat: {}\n", report.file, report.format);
    if !report.layers.is_empty() {
        let w = report
            .layers
            .iter()
            .map(|l| l.name.len())
            .max()
            .unwrap_or(0)
            .max(5);
        out += &format!(
            "\n{:<w$}  {:<6} {:<7} {:>16} {:>6} {:>10} {:>12}{}\n",
            "layer",
            "format",
            "dtype",
            "shape [out, in]",
            "group",
            "act-order",
            "bytes",
            if time { "   import s" } else { "" }
        );
        for l in &report.layers {
            out += &format!(
                "{:<w$}  {:<6} {:<7} {:>16} {:>6} {:>10} {:>12}{}\n",
                l.name,
                l.format,
                l.dtype,
                format!("[{}, {}]", l.shape[0], l.shape[1]),
                l.group,
                if l.act_order { "yes" } else { "no" },
                l.bytes,
                l.import_s.map_or(String::new(), |s| format!(" {s:>10.4}"))
            );
        }
        if time {
            let total: f64 = report.layers.iter().filter_map(|l| l.import_s).sum();
            out += &format!("import of {} layers: {total:.3} s\n", report.layers.len());
        }
    }
    if !report.tensors.is_empty() {
        let w = report
            .tensors
            .iter()
            .map(|t| t.name.len())
            .max()
            .unwrap_or(0)
            .max(6);
        out += &format!(
            "\n{:<w$}  {:<6} {:>16} {:>12}\n",
            "tensor", "dtype", "shape", "bytes"
        );
        for t in &report.tensors {
            out += &format!(
                "{:<w$}  {:<6} {:>16} {:>12}\n",
                t.name,
                t.dtype,
                format!("{:?}", t.shape),
                t.bytes
            );
        }
    }
    Ok(out.trim_end().to_string())
}

/// The largest layer `tilus bench import` builds (4x the 70B-shaped layer).
const MAX_ELEMENTS: usize = 1 << 31;
const MAX_RUNS: usize = 1000;

/// `tilus bench import`: write a synthetic GPTQ layer, read it once (warm page cache), then
/// time its import `runs` times.
pub fn bench_import(
    k: usize,
    n: usize,
    bits: usize,
    group: usize,
    runs: usize,
    act_order: bool,
) -> Result<String, String> {
    for (flag, v) in [("--k", k), ("--n", n), ("--group", group), ("--runs", runs)] {
        if v == 0 {
            return Err(format!("argument `{flag}`: must be positive"));
        }
    }
    if !tilus::checkpoint::gptq::BITS.contains(&bits) {
        return Err(format!("argument `--bits`: {bits} is not 2, 3, 4 or 8"));
    }
    if runs > MAX_RUNS {
        return Err(format!("argument `--runs`: at most {MAX_RUNS}"));
    }
    if k.checked_mul(n).is_none_or(|e| e > MAX_ELEMENTS) {
        return Err(format!(
            "argument `--n`: {k} x {n} is more than 2^31 elements (the file is built in memory)"
        ));
    }
    if !(k * bits).is_multiple_of(32) {
        return Err(format!(
            "argument `--k`: k * bits = {k} * {bits} is not a multiple of 32"
        ));
    }
    if !(n * bits).is_multiple_of(32) {
        return Err(format!(
            "argument `--n`: n * bits = {n} * {bits} is not a multiple of 32"
        ));
    }
    if !k.is_multiple_of(group) {
        return Err(format!(
            "argument `--group`: {group} does not divide k = {k}"
        ));
    }
    let prefix = "model.layers.0.mlp.gate_up_proj";
    let dir = std::env::temp_dir().join(format!("tilus-bench-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(err)?;
    let path = dir.join("layer.safetensors");
    let result = (|| {
        let bytes = synth::gptq_file_with(prefix, k, n, bits, group, 7, act_order);
        std::fs::write(&path, &bytes).map_err(err)?;
        drop(bytes);
        let ckpt = Checkpoint::open(&path).map_err(err)?;
        // Warm the page cache: touch every page of the map.
        let sum: u64 = ckpt.bytes().iter().step_by(4096).map(|&b| b as u64).sum();
        std::hint::black_box(sum);
        let mut times = Vec::new();
        for _ in 0..runs {
            let start = Instant::now();
            let layer = ckpt.load(prefix, &ImportOptions::default()).map_err(err)?;
            times.push(start.elapsed().as_secs_f64());
            std::hint::black_box(&layer);
        }
        times.sort_by(f64::total_cmp);
        let file_mb = ckpt.bytes().len() as f64 / 1e6;
        Ok(format!(
            "import of a GPTQ u{bits} layer [{n} x {k}] (out x in), group {group}{}, {file_mb:.0} \
             MB file, warm page cache, {} threads: median {:.3} s, min {:.3} s ({runs} runs)",
            if act_order { ", act-order" } else { "" },
            std::thread::available_parallelism().map_or(1, |p| p.get()),
            times[times.len() / 2],
            times[0],
        ))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
