//! GPTQ / AWQ import against an independent writer (tests/checkpoint/write_checkpoints.py,
//! numpy + safetensors): every layer's dequantized weight must equal the writer's bit for bit.
//! Without python/numpy the writer tests print `SKIPPED` (`TILUS_REQUIRE_PYTHON=1`, set on
//! CI, makes that a failure). The error tests build their files here and always run.

mod common;

use common::skip::{skip, Need};
use common::TempDir;
use half::f16;
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use std::path::{Path, PathBuf};
use std::process::Command;
use tilus::checkpoint::{
    format, synth, Checkpoint, Format, GptqZeros, ImportOptions, ImportedLayer,
};
use tilus::kernels::linear::QuantizedLinear;

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Run the writer into `dir`; `None` (after a visible skip) without python and numpy.
fn write_checkpoints(test: &str, dir: &Path) -> Option<serde_json::Value> {
    let python = std::env::var("TILUS_PYTHON").unwrap_or_else(|_| "python3".into());
    let site = manifest_dir().join(".venv-py");
    let mut path = site.display().to_string();
    if let Ok(p) = std::env::var("PYTHONPATH") {
        path = format!("{path}:{p}");
    }
    let script = manifest_dir().join("tests/checkpoint/write_checkpoints.py");
    let probe = Command::new(&python)
        .args(["-c", "import numpy, safetensors"])
        .env("PYTHONPATH", &path)
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err.lines().last().unwrap_or("").to_string();
            skip(test, Need::Python, &format!("{python}: {last}"));
            return None;
        }
        Err(e) => {
            skip(test, Need::Python, &format!("{python}: {e}"));
            return None;
        }
    }
    let out = Command::new(&python)
        .arg(&script)
        .arg(dir)
        .env("PYTHONPATH", &path)
        .output()
        .expect("the writer starts");
    assert!(
        out.status.success(),
        "write_checkpoints.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    Some(serde_json::from_str(&text).unwrap())
}

fn reference(dir: &Path, file: &str, prefix: &str) -> Vec<f64> {
    let refs = Checkpoint::open(dir.join(format!("{file}.ref.safetensors"))).unwrap();
    let t = refs.tensor(&format!("{prefix}.weight")).unwrap();
    assert_eq!(t.dtype, Dtype::F64);
    t.data
        .chunks_exact(8)
        .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn assert_bits_equal(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{what}: element {i}: imported {g:e}, writer {w:e}"
        );
    }
}

#[test]
fn imports_match_the_writer_bit_for_bit() {
    let dir = TempDir::new("ckpt-import");
    let Some(manifest) = write_checkpoints("imports_match_the_writer_bit_for_bit", &dir.0) else {
        return;
    };
    let files = manifest.as_array().unwrap();
    assert!(files.len() >= 20, "{} files", files.len());
    let mut act_order_layers = 0;
    for f in files {
        let file = f["file"].as_str().unwrap();
        let bits = f["bits"].as_u64().unwrap() as usize;
        let fmt = match f["format"].as_str().unwrap() {
            "gptq" => Format::Gptq,
            _ => Format::Awq,
        };
        let ckpt = Checkpoint::open(dir.0.join(format!("{file}.safetensors"))).unwrap();
        let layers = ckpt.layers().unwrap();
        let want_layers = f["layers"].as_array().unwrap();
        assert_eq!(layers.len(), want_layers.len(), "{file}: layers found");
        for want in want_layers {
            let prefix = want["prefix"].as_str().unwrap();
            let info = layers.iter().find(|l| l.prefix == prefix).unwrap();
            let what = format!("{file} {prefix}");
            assert_eq!(info.format, fmt, "{what}");
            assert_eq!(info.bits, bits, "{what}");
            assert_eq!(info.k as u64, want["k"].as_u64().unwrap(), "{what}");
            assert_eq!(info.n as u64, want["n"].as_u64().unwrap(), "{what}");
            assert_eq!(info.group as u64, want["group"].as_u64().unwrap(), "{what}");
            assert_eq!(
                info.act_order,
                want["act_order"].as_bool().unwrap(),
                "{what}"
            );

            let layer = ckpt.load(prefix, &ImportOptions::default()).unwrap();
            let w = &layer.weight;
            assert_eq!(w.dtype, tilus::DType::UInt(bits as u8), "{what}");
            assert_eq!(layer.input_perm.is_some(), info.act_order, "{what}");
            let expected = reference(&dir.0, file, prefix);
            assert_bits_equal(&layer.dequantize_original_order(), &expected, &what);
            // The explicit loaders agree with the detected one.
            let again = match fmt {
                Format::Gptq => ckpt.load_gptq(prefix, &ImportOptions::default()),
                _ => ckpt.load_awq(prefix, &ImportOptions::default()),
            }
            .unwrap();
            assert_eq!(again, layer, "{what}");
            if let Some(perm) = &layer.input_perm {
                act_order_layers += 1;
                // Groups are contiguous after the sort: row j's scales are those of group
                // j / g, and the permuted dequantization is row perm[j] of the original.
                let deq = w.dequantize();
                let n = w.n;
                for (j, &r) in perm.iter().enumerate() {
                    let r = r as usize;
                    assert_bits_equal(
                        &deq[j * n..(j + 1) * n],
                        &expected[r * n..(r + 1) * n],
                        &format!("{what} permuted row {j}"),
                    );
                }
            }
            if f["v2"].as_bool().unwrap() {
                // The metadata says v2; forcing v1 adds one to every zero point.
                let v1 = ImportOptions {
                    gptq_zeros: Some(GptqZeros::V1),
                    ..Default::default()
                };
                let l1 = ckpt.load(prefix, &v1).unwrap();
                let (z1, z2) = (l1.weight.zeros.as_ref().unwrap(), w.zeros.as_ref().unwrap());
                assert!(z1.iter().zip(z2).all(|(a, b)| *a == b + 1.0), "{what}");
            }
        }
    }
    assert!(act_order_layers >= 8, "{act_order_layers} act-order layers");
}

#[test]
fn imported_layers_round_trip_through_the_tilus_format() {
    let dir = TempDir::new("ckpt-roundtrip");
    let Some(manifest) = write_checkpoints(
        "imported_layers_round_trip_through_the_tilus_format",
        &dir.0,
    ) else {
        return;
    };
    let mut layers: Vec<(String, ImportedLayer)> = Vec::new();
    for f in manifest.as_array().unwrap() {
        let file = f["file"].as_str().unwrap();
        let ckpt = Checkpoint::open(dir.0.join(format!("{file}.safetensors"))).unwrap();
        for info in ckpt.layers().unwrap() {
            let layer = ckpt.load(&info.prefix, &ImportOptions::default()).unwrap();
            layers.push((format!("{file}/{}", info.prefix), layer));
        }
    }
    let path = dir.0.join("all.tilus.safetensors");
    format::save(&path, &layers).unwrap();
    let back = format::load(&path).unwrap();
    let mut want = layers.clone();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(back, want);
    let ckpt = Checkpoint::open(&path).unwrap();
    let infos = ckpt.layers().unwrap();
    assert_eq!(infos.len(), layers.len());
    assert!(infos.iter().all(|i| i.format == Format::Tilus));
    assert!(infos.iter().any(|i| i.act_order));
}

/// An act-order layer computes `x · W` of the checkpoint: the layer permutes its input.
#[test]
fn act_order_layer_forward_matches_the_checkpoint_weight() {
    let dir = TempDir::new("ckpt-forward");
    let Some(_) = write_checkpoints(
        "act_order_layer_forward_matches_the_checkpoint_weight",
        &dir.0,
    ) else {
        return;
    };
    let ckpt = Checkpoint::open(dir.0.join("gptq_b4_asym_act.safetensors")).unwrap();
    let prefix = "model.layers.0.mlp.down_proj";
    let layer = ckpt.load(prefix, &ImportOptions::default()).unwrap();
    assert!(layer.input_perm.is_some());
    let (k, n) = (layer.weight.k, layer.weight.n);
    let w = layer.dequantize_original_order();
    let lin = QuantizedLinear::from_imported(layer).unwrap();
    let m = 3;
    let x: Vec<f16> = (0..m * k)
        .map(|i| f16::from_f32((((i * 7919 + 13) % 1001) as f32 - 500.0) / 700.0))
        .collect();
    let y = lin.forward_cpu(&x, m).unwrap();
    for r in 0..m {
        for c in 0..n {
            let want: f64 = (0..k).map(|i| x[r * k + i].to_f64() * w[i * n + c]).sum();
            let got = y[r * n + c].to_f64();
            assert!(
                (got - want).abs() <= 2e-2 * want.abs().max(1.0),
                "y[{r}, {c}] = {got}, reference {want}"
            );
        }
    }
}

// ------------------------------------------------------------------ error cases (no python)

struct Tensors(Vec<(String, Dtype, Vec<usize>, Vec<u8>)>);

impl Tensors {
    fn gptq(prefix: &str, k: usize, n: usize, bits: usize, group: usize) -> Tensors {
        let ckpt = Checkpoint::from_bytes(synth::gptq_file(prefix, k, n, bits, group, 5)).unwrap();
        Tensors(
            ckpt.names()
                .iter()
                .map(|name| {
                    let t = ckpt.tensor(name).unwrap();
                    (name.to_string(), t.dtype, t.shape.to_vec(), t.data.to_vec())
                })
                .collect(),
        )
    }

    fn set(mut self, name: &str, dtype: Dtype, shape: Vec<usize>, data: Vec<u8>) -> Tensors {
        self.0.retain(|t| t.0 != name);
        self.0.push((name.to_string(), dtype, shape, data));
        self
    }

    fn remove(mut self, name: &str) -> Tensors {
        self.0.retain(|t| t.0 != name);
        self
    }

    fn checkpoint(&self) -> Checkpoint {
        let views: Vec<(String, TensorView<'_>)> = self
            .0
            .iter()
            .map(|(name, d, s, data)| (name.clone(), TensorView::new(*d, s.clone(), data).unwrap()))
            .collect();
        Checkpoint::from_bytes(safetensors::serialize(views, None).unwrap()).unwrap()
    }
}

fn i32_bytes(values: impl IntoIterator<Item = i32>) -> Vec<u8> {
    values.into_iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn load_err(t: &Tensors, prefix: &str, options: ImportOptions) -> String {
    t.checkpoint()
        .load(prefix, &options)
        .expect_err("a bad checkpoint must not import")
        .to_string()
}

const P: &str = "model.layers.0.mlp.down_proj";

#[test]
fn bad_gptq_files_are_errors_naming_the_tensor() {
    let four = ImportOptions {
        bits: Some(4),
        ..Default::default()
    };
    let (k, n, g) = (256, 64, 32);
    let groups = k / g;
    // qzeros one column short, bits known: the exact expected shape.
    let t = Tensors::gptq(P, k, n, 4, g).set(
        &format!("{P}.qzeros"),
        Dtype::I32,
        vec![groups, 7],
        vec![0; groups * 7 * 4],
    );
    let e = load_err(&t, P, four);
    assert_eq!(
        e,
        format!("tensor `{P}.qzeros`: expected shape [{groups}, 8], got [{groups}, 7]")
    );
    // ... and bits taken from the shapes.
    let e = load_err(&t, P, ImportOptions::default());
    assert!(e.starts_with(&format!("tensor `{P}.qzeros`")), "{e}");
    // Missing qzeros.
    let e = load_err(
        &Tensors::gptq(P, k, n, 4, g).remove(&format!("{P}.qzeros")),
        P,
        four,
    );
    assert_eq!(e, format!("tensor `{P}.qzeros`: missing from the file"));
    // Missing qweight: listed nowhere, loading names it.
    let e = load_err(
        &Tensors::gptq(P, k, n, 4, g).remove(&format!("{P}.qweight")),
        P,
        four,
    );
    assert!(
        e.contains(&format!("`{P}.qweight`")) && e.contains("missing"),
        "{e}"
    );
    // Unsupported width: 5 bits by qzeros' shape (n * 5 / 32 = 10 columns), and by option.
    let t = Tensors::gptq(P, k, n, 4, g).set(
        &format!("{P}.qzeros"),
        Dtype::I32,
        vec![groups, 10],
        vec![0; groups * 10 * 4],
    );
    let e = load_err(&t, P, ImportOptions::default());
    assert!(
        e.contains(&format!("`{P}.qzeros`")) && e.contains("5-bit"),
        "{e}"
    );
    let e = load_err(
        &Tensors::gptq(P, k, n, 4, g),
        P,
        ImportOptions {
            bits: Some(5),
            ..Default::default()
        },
    );
    assert!(
        e.contains(&format!("`{P}.qweight`")) && e.contains("5-bit") && e.contains("2, 3, 4, 8"),
        "{e}"
    );
    // Scales in f32: refused (rounding would change the weight), naming the dtype.
    let t = Tensors::gptq(P, k, n, 4, g).set(
        &format!("{P}.scales"),
        Dtype::F32,
        vec![groups, n],
        vec![0; groups * n * 4],
    );
    let e = load_err(&t, P, four);
    assert!(
        e.contains(&format!("`{P}.scales`")) && e.contains("F16 or BF16"),
        "{e}"
    );
    // qweight as f32.
    let t = Tensors::gptq(P, k, n, 4, g).set(
        &format!("{P}.qweight"),
        Dtype::F32,
        vec![k / 8, n],
        vec![0; k / 8 * n * 4],
    );
    let e = load_err(&t, P, four);
    assert!(
        e.contains(&format!("`{P}.qweight`")) && e.contains("I32"),
        "{e}"
    );
    // A scale that is not finite.
    let mut scales = vec![0u8; groups * n * 2];
    for (i, s) in scales.chunks_exact_mut(2).enumerate() {
        let v = if i == n + 3 {
            f16::INFINITY
        } else {
            f16::from_f32(0.01)
        };
        s.copy_from_slice(&v.to_bits().to_le_bytes());
    }
    let t = Tensors::gptq(P, k, n, 4, g).set(
        &format!("{P}.scales"),
        Dtype::F16,
        vec![groups, n],
        scales,
    );
    let e = load_err(&t, P, four);
    assert!(
        e.contains(&format!("`{P}.scales`")) && e.contains("[1, 3]"),
        "{e}"
    );
    // g_idx out of range, of unequal groups, of the wrong length.
    let seq: Vec<i32> = (0..k as i32).map(|i| i / g as i32).collect();
    let mut out_of_range = seq.clone();
    out_of_range[17] = groups as i32;
    let mut negative = seq.clone();
    negative[3] = -1;
    let mut unequal = seq.clone();
    unequal[0] = 1; // group 0 loses a row, group 1 gains one
    for (g_idx, needle) in [
        (out_of_range, "entry 17 is 8, outside 0..8"),
        (negative, "entry 3 is -1"),
        (unequal, "group 0 has 31 rows"),
    ] {
        let t = Tensors::gptq(P, k, n, 4, g).set(
            &format!("{P}.g_idx"),
            Dtype::I32,
            vec![k],
            i32_bytes(g_idx),
        );
        let e = load_err(&t, P, four);
        assert!(
            e.starts_with(&format!("tensor `{P}.g_idx`")) && e.contains(needle),
            "{e}"
        );
    }
    let t = Tensors::gptq(P, k, n, 4, g).set(
        &format!("{P}.g_idx"),
        Dtype::I32,
        vec![k - 1],
        i32_bytes(seq[..k - 1].iter().copied()),
    );
    let e = load_err(&t, P, four);
    assert!(e.starts_with(&format!("tensor `{P}.g_idx`")), "{e}");
    // A non-monotone g_idx with equal groups is act-order, not an error.
    let mut act: Vec<i32> = seq.clone();
    act.swap(0, 40);
    let t = Tensors::gptq(P, k, n, 4, g).set(
        &format!("{P}.g_idx"),
        Dtype::I32,
        vec![k],
        i32_bytes(act),
    );
    let layer = t.checkpoint().load(P, &four).unwrap();
    let perm = layer.input_perm.unwrap();
    assert_eq!(perm[0], 1, "row 0 moved to group 1");
    // scales whose groups do not divide k.
    let t = Tensors::gptq(P, k, n, 4, g)
        .set(
            &format!("{P}.scales"),
            Dtype::F16,
            vec![7, n],
            vec![0; 7 * n * 2],
        )
        .set(
            &format!("{P}.qzeros"),
            Dtype::I32,
            vec![7, n / 8],
            vec![0; 7 * n / 8 * 4],
        );
    let e = load_err(&t, P, four);
    assert!(
        e.starts_with(&format!("tensor `{P}.scales`")) && e.contains("dividing k = 256"),
        "{e}"
    );
    // Bad metadata.
    let ckpt = Tensors::gptq(P, k, n, 4, g).checkpoint();
    assert!(ckpt.load(P, &four).is_ok());
}

#[test]
fn bad_awq_files_are_errors_naming_the_tensor() {
    let (k, n, groups) = (128usize, 64usize, 4usize);
    let awq = |qcols: usize, zcols: usize| {
        Tensors(vec![])
            .set(
                &format!("{P}.qweight"),
                Dtype::I32,
                vec![k, qcols],
                vec![0; k * qcols * 4],
            )
            .set(
                &format!("{P}.qzeros"),
                Dtype::I32,
                vec![groups, zcols],
                vec![0; groups * zcols * 4],
            )
            .set(
                &format!("{P}.scales"),
                Dtype::F16,
                vec![groups, n],
                f16::from_f32(0.5)
                    .to_bits()
                    .to_le_bytes()
                    .repeat(groups * n),
            )
    };
    let ok = awq(n / 8, n / 8).checkpoint();
    let info = ok.detect(P).unwrap();
    assert_eq!(
        (info.format, info.bits, info.k, info.n, info.group),
        (Format::Awq, 4, k, n, 32)
    );
    ok.load(P, &ImportOptions::default()).unwrap();
    // 8-bit AWQ (n / 4 columns): 4-bit only, said so.
    let e = load_err(&awq(n / 4, n / 4), P, ImportOptions::default());
    assert!(
        e.contains(&format!("`{P}.qweight`")) && e.contains("8-bit") && e.contains("supported: 4"),
        "{e}"
    );
    // qzeros of the wrong width.
    let e = load_err(&awq(n / 8, n / 8 + 1), P, ImportOptions::default());
    assert_eq!(
        e,
        format!("tensor `{P}.qzeros`: expected shape [{groups}, 8], got [{groups}, 9]")
    );
    // Missing qzeros.
    let e = load_err(
        &awq(n / 8, n / 8).remove(&format!("{P}.qzeros")),
        P,
        ImportOptions::default(),
    );
    assert_eq!(e, format!("tensor `{P}.qzeros`: missing from the file"));
}

/// A 70B-shaped GPTQ layer (57344 x 8192 in PyTorch's [out, in]: k = 8192, n = 57344, 4-bit,
/// group 128), imported once from memory; prints the time. Debug builds use an eighth of n:
/// the full shape is `tilus bench import` (or this test with `--release`).
#[test]
fn import_time_of_a_70b_shaped_layer() {
    let (k, n) = if cfg!(debug_assertions) {
        (8192, 57344 / 8)
    } else {
        (8192, 57344)
    };
    let ckpt = Checkpoint::from_bytes(synth::gptq_file(P, k, n, 4, 128, 1)).unwrap();
    let start = std::time::Instant::now();
    let layer = ckpt.load(P, &ImportOptions::default()).unwrap();
    let secs = start.elapsed().as_secs_f64();
    assert_eq!((layer.weight.k, layer.weight.n), (k, n));
    assert_eq!(layer.weight.codes.len(), k * n / 2);
    println!(
        "import of a {k} x {n} u4 GPTQ layer: {:.3} s ({} build)",
        secs,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
}

// ------------------------------------------------------------------ the tilus format (no python)

fn random_weight(k: usize, n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..k * n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn sample_layers() -> Vec<(String, ImportedLayer)> {
    use tilus::quant::{Group, QuantizedWeight};
    use tilus::DType;
    let q = |k, n, d: &str, g, s, asym, seed| {
        QuantizedWeight::quantize(
            &random_weight(k, n, seed),
            k,
            n,
            d.parse().unwrap(),
            g,
            s,
            asym,
        )
        .unwrap()
    };
    let perm: Vec<u32> = (0..96u32).map(|i| (i * 37) % 96).collect();
    vec![
        (
            "a.u4".into(),
            ImportedLayer {
                weight: q(64, 32, "u4", Group::Rows(32), DType::F16, true, 1),
                input_perm: None,
            },
        ),
        (
            "b.i4".into(),
            ImportedLayer {
                weight: q(64, 24, "i4", Group::PerChannel, DType::BF16, false, 2),
                input_perm: None,
            },
        ),
        (
            "c.f6".into(),
            ImportedLayer {
                weight: q(32, 8, "f6e3m2", Group::Rows(16), DType::F16, false, 3),
                input_perm: None,
            },
        ),
        // Rows of 5 u3 codes are not whole bytes: the codes tensor is 1-D.
        (
            "d.u3".into(),
            ImportedLayer {
                weight: q(96, 5, "u3", Group::Rows(32), DType::F16, true, 4),
                input_perm: Some(perm),
            },
        ),
    ]
}

/// Rewrite the tilus file at `path` with `edit` applied to its tensors and metadata.
fn rewrite(
    path: &Path,
    edit: impl FnOnce(
        &mut Vec<(String, Dtype, Vec<usize>, Vec<u8>)>,
        &mut std::collections::HashMap<String, String>,
    ),
) -> Checkpoint {
    let ckpt = Checkpoint::open(path).unwrap();
    let mut meta = ckpt.metadata().unwrap().clone();
    let mut tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = ckpt
        .names()
        .iter()
        .map(|n| {
            let t = ckpt.tensor(n).unwrap();
            (n.to_string(), t.dtype, t.shape.to_vec(), t.data.to_vec())
        })
        .collect();
    edit(&mut tensors, &mut meta);
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, d, s, data)| (name.clone(), TensorView::new(*d, s.clone(), data).unwrap()))
        .collect();
    Checkpoint::from_bytes(safetensors::serialize(views, Some(meta)).unwrap()).unwrap()
}

#[test]
fn tilus_format_round_trips_and_names_what_is_wrong() {
    let dir = TempDir::new("tilus-format");
    let path = dir.0.join("layers.safetensors");
    let layers = sample_layers();
    format::save(&path, &layers).unwrap();
    assert_eq!(
        format::load(&path).unwrap(),
        layers,
        "identical after a round trip"
    );
    let ckpt = Checkpoint::open(&path).unwrap();
    assert_eq!(ckpt.tensor("a.u4.codes").unwrap().shape, &[64, 16]);
    assert_eq!(ckpt.tensor("d.u3.codes").unwrap().shape, &[180]);
    assert_eq!(ckpt.tensor("b.i4.scales").unwrap().dtype, Dtype::BF16);
    assert!(ckpt.get("c.f6.zeros").is_none());
    let infos = ckpt.layers().unwrap();
    assert_eq!(
        infos.iter().map(|i| i.prefix.as_str()).collect::<Vec<_>>(),
        ["a.u4", "b.i4", "c.f6", "d.u3"]
    );
    assert_eq!(infos[1].group, 64, "per channel: one group of k rows");
    assert!(infos[3].act_order && infos[3].bits == 3);
    // A layer reloaded through `load` equals the saved one.
    assert_eq!(
        ckpt.load("d.u3", &ImportOptions::default()).unwrap(),
        layers[3].1
    );

    let err = |c: &Checkpoint| format::load_all(c).unwrap_err().to_string();
    let c = rewrite(&path, |_, m| {
        m.insert("tilus.format_version".into(), "2".into());
    });
    assert!(
        err(&c).starts_with("metadata key `tilus.format_version`: version `2`"),
        "{}",
        err(&c)
    );
    let c = rewrite(&path, |_, m| {
        m.insert("tilus.layers".into(), "{not json".into());
    });
    assert!(
        err(&c).starts_with("metadata key `tilus.layers`"),
        "{}",
        err(&c)
    );
    let c = rewrite(&path, |t, _| {
        let codes = t.iter_mut().find(|x| x.0 == "a.u4.codes").unwrap();
        codes.2 = vec![63, 16];
        codes.3.truncate(63 * 16);
    });
    assert!(
        err(&c).starts_with("tensor `a.u4.codes`: expected shape 1024 bytes"),
        "{}",
        err(&c)
    );
    let c = rewrite(&path, |t, _| t.retain(|x| x.0 != "a.u4.zeros"));
    assert_eq!(err(&c), "tensor `a.u4.zeros`: missing from the file");
    let c = rewrite(&path, |t, _| {
        let p = t.iter_mut().find(|x| x.0 == "d.u3.input_perm").unwrap();
        p.3[4..8].copy_from_slice(&0i32.to_le_bytes()); // entry 1 repeats entry 0
    });
    assert!(
        err(&c).starts_with("tensor `d.u3.input_perm`: entry 1 is 0"),
        "{}",
        err(&c)
    );
    let c = rewrite(&path, |t, _| {
        let s = t.iter_mut().find(|x| x.0 == "b.i4.scales").unwrap();
        s.1 = Dtype::F16; // the layer says bf16
    });
    assert!(
        err(&c).contains("`b.i4.scales`") && err(&c).contains("BF16"),
        "{}",
        err(&c)
    );
    // Saving: a name used twice, and scales that are not of the scale type.
    let mut twice = layers.clone();
    twice.push(("a.u4".into(), layers[0].1.clone()));
    let e = format::save(dir.0.join("x.safetensors"), &twice)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`a.u4.codes`") && e.contains("twice"), "{e}");
    let mut off = layers[0].1.clone();
    off.weight.scales[3] = 0.1; // not an f16 value
    let e = format::save(dir.0.join("x.safetensors"), &[("bad".into(), off)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("`bad.scales`") && e.contains("value 3"), "{e}");
}
