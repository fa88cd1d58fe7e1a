//! `tilus quantize`, `tilus inspect` and `tilus bench import` on small files in a temp dir:
//! float weights quantized into the tilus format (checked against the input), a GPTQ file
//! converted without re-quantizing (checked against the library's import), the inspect table
//! and JSON, and bad arguments named with exit status 2. No python needed.

mod common;

use common::TempDir;
use half::{bf16, f16};
use rand::Rng;
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use std::path::Path;
use std::process::{Command, Output};
use tilus::checkpoint::{format, synth, Checkpoint, ImportOptions};
use tilus::quant::Group;
use tilus::DType;

fn tilus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tilus"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn ok(args: &[&str]) -> String {
    let out = tilus(args);
    assert!(
        out.status.success(),
        "tilus {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Fails with exit status 2 and a one-line message naming `flag`.
fn fails_naming(args: &[&str], flag: &str) {
    let out = tilus(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "tilus {args:?}: {stderr}");
    assert!(
        stderr.contains(flag),
        "tilus {args:?}: message does not name {flag}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

struct FloatTensor {
    name: &'static str,
    dtype: Dtype,
    shape: Vec<usize>,
    values: Vec<f32>,
}

impl FloatTensor {
    fn bytes(&self) -> Vec<u8> {
        match self.dtype {
            Dtype::F32 => self.values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            Dtype::F16 => self
                .values
                .iter()
                .flat_map(|v| f16::from_f32(*v).to_bits().to_le_bytes())
                .collect(),
            _ => self
                .values
                .iter()
                .flat_map(|v| bf16::from_f32(*v).to_bits().to_le_bytes())
                .collect(),
        }
    }

    /// The values as the file holds them.
    fn stored(&self) -> Vec<f32> {
        match self.dtype {
            Dtype::F32 => self.values.clone(),
            Dtype::F16 => self
                .values
                .iter()
                .map(|v| f16::from_f32(*v).to_f32())
                .collect(),
            _ => self
                .values
                .iter()
                .map(|v| bf16::from_f32(*v).to_f32())
                .collect(),
        }
    }
}

fn write_floats(path: &Path, tensors: &[FloatTensor]) {
    let bytes: Vec<Vec<u8>> = tensors.iter().map(FloatTensor::bytes).collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .zip(&bytes)
        .map(|(t, b)| {
            (
                t.name.to_string(),
                TensorView::new(t.dtype, t.shape.clone(), b).unwrap(),
            )
        })
        .collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

fn random(len: usize) -> Vec<f32> {
    let mut rng = rand::rng();
    (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

#[test]
fn quantize_floats_into_the_tilus_format() {
    let dir = TempDir::new("cli-quantize");
    let input = dir.0.join("model.safetensors");
    let output = dir.0.join("model.tilus.safetensors");
    let tensors = vec![
        FloatTensor {
            name: "model.layers.0.mlp.down_proj.weight",
            dtype: Dtype::F32,
            shape: vec![64, 256],
            values: random(64 * 256),
        },
        FloatTensor {
            name: "model.layers.0.self_attn.q_proj.weight",
            dtype: Dtype::BF16,
            shape: vec![32, 128],
            values: random(32 * 128),
        },
        FloatTensor {
            name: "model.norm.weight",
            dtype: Dtype::F16,
            shape: vec![64],
            values: random(64),
        },
        FloatTensor {
            name: "model.odd.weight",
            dtype: Dtype::F16,
            shape: vec![8, 100],
            values: random(800),
        },
    ];
    write_floats(&input, &tensors);
    let text = ok(&[
        "quantize",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--wdtype",
        "u4",
        "--group",
        "64",
    ]);
    assert!(
        text.contains("quantized model.layers.0.mlp.down_proj.weight [64 x 256] -> u4"),
        "{text}"
    );
    assert!(
        text.contains("copied model.norm.weight as is (not 2-D)"),
        "{text}"
    );
    assert!(
        text.contains(
            "copied model.odd.weight as is (its input dimension is not a multiple of --group)"
        ),
        "{text}"
    );
    let layers = format::load(&output).unwrap();
    assert_eq!(layers.len(), 2);
    for (name, layer) in &layers {
        let t = tensors
            .iter()
            .find(|t| t.name == format!("{name}.weight"))
            .unwrap();
        let w = &layer.weight;
        let (n, k) = (t.shape[0], t.shape[1]);
        assert_eq!(
            (w.k, w.n, w.dtype, w.group),
            (k, n, DType::UInt(4), Group::Rows(64))
        );
        assert_eq!(w.scale_dtype, DType::F16);
        // Within a step of the stored weight, transposed to [k, n] (half a step, plus the
        // zero point's rounding at the ends of a group's range).
        let deq = w.dequantize();
        let stored = t.stored();
        for i in 0..k {
            for o in 0..n {
                let scale = w.scales[(i / 64) * n + o] as f64;
                let err = (deq[i * n + o] - stored[o * k + i] as f64).abs();
                assert!(
                    err <= scale + 1e-6,
                    "{name} [{o}, {i}]: error {err}, scale {scale}"
                );
            }
        }
    }
    // Copied tensors are byte for byte the input's.
    let out = Checkpoint::open(&output).unwrap();
    for t in &tensors[2..] {
        assert_eq!(
            out.tensor(t.name).unwrap().data,
            &t.bytes()[..],
            "{}",
            t.name
        );
    }
    // inspect: the table and the JSON.
    let text = ok(&["inspect", output.to_str().unwrap()]);
    assert!(text.contains("format: tilus (format version 1)"), "{text}");
    assert!(text.contains("model.layers.0.mlp.down_proj"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", output.to_str().unwrap(), "--json"])).unwrap();
    let layers = json["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 2);
    let down = layers
        .iter()
        .find(|l| l["name"] == "model.layers.0.mlp.down_proj")
        .unwrap();
    assert_eq!(down["dtype"], "u4");
    assert_eq!(down["shape"], serde_json::json!([64, 256]));
    assert_eq!(down["group"], 64);
    // codes 256 x 64 u4 + scales and zeros 4 x 64 f16 each.
    assert_eq!(down["bytes"], 256 * 64 / 2 + 2 * 4 * 64 * 2);
    assert_eq!(json["tensors"].as_array().unwrap().len(), 2);
}

#[test]
fn convert_a_gptq_file_without_requantizing() {
    let dir = TempDir::new("cli-convert");
    let input = dir.0.join("gptq.safetensors");
    let output = dir.0.join("out.safetensors");
    let prefix = "model.layers.3.mlp.up_proj";
    std::fs::write(&input, synth::gptq_file(prefix, 256, 128, 4, 64, 3)).unwrap();
    let text = ok(&["inspect", input.to_str().unwrap(), "--time"]);
    assert!(
        text.contains("format: gptq")
            && text.contains(prefix)
            && text.contains("import of 1 layers"),
        "{text}"
    );
    let text = ok(&[
        "quantize",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--from",
        "gptq",
    ]);
    assert!(
        text.contains(&format!("converted {prefix} [128 x 256] gptq u4 group 64")),
        "{text}"
    );
    let want = Checkpoint::open(&input)
        .unwrap()
        .load(prefix, &ImportOptions::default())
        .unwrap();
    let got = format::load(&output).unwrap();
    assert_eq!(got, vec![(prefix.to_string(), want)]);
}

#[test]
fn bad_arguments_name_the_flag() {
    let dir = TempDir::new("cli-bad");
    let gptq = dir.0.join("gptq.safetensors");
    std::fs::write(&gptq, synth::gptq_file("l", 64, 32, 4, 32, 3)).unwrap();
    let floats = dir.0.join("f.safetensors");
    write_floats(
        &floats,
        &[FloatTensor {
            name: "a.weight",
            dtype: Dtype::F32,
            shape: vec![4, 64],
            values: random(256),
        }],
    );
    let (g, f) = (gptq.to_str().unwrap(), floats.to_str().unwrap());
    let out = dir.0.join("o.safetensors");
    let o = out.to_str().unwrap();
    fails_naming(&["quantize", f, o, "--wdtype", "u9"], "--wdtype");
    fails_naming(&["quantize", f, o, "--wdtype", "f32"], "--wdtype");
    fails_naming(&["quantize", f, o], "--wdtype");
    fails_naming(
        &["quantize", f, o, "--wdtype", "u4", "--scale-dtype", "f32"],
        "--scale-dtype",
    );
    fails_naming(
        &["quantize", f, o, "--wdtype", "u4", "--group=-1"],
        "--group",
    );
    fails_naming(&["quantize", g, o, "--from", "exl2"], "--from");
    fails_naming(&["quantize", g, o, "--from", "awq"], "--from");
    fails_naming(&["quantize", f, o, "--from", "gptq"], "INPUT");
    fails_naming(
        &["quantize", g, o, "--from", "gptq", "--wdtype", "u4"],
        "--wdtype",
    );
    fails_naming(
        &["quantize", g, o, "--from", "gptq", "--group", "32"],
        "--group",
    );
    fails_naming(
        &["quantize", f, o, "--wdtype", "u4", "--gptq-v2"],
        "--gptq-v2",
    );
    fails_naming(&["quantize", f, f, "--wdtype", "u4"], "OUTPUT");
    fails_naming(
        &[
            "quantize",
            "/nonexistent/x.safetensors",
            o,
            "--wdtype",
            "u4",
        ],
        "/nonexistent/x.safetensors",
    );
    fails_naming(
        &["inspect", "/nonexistent/x.safetensors"],
        "/nonexistent/x.safetensors",
    );
    // Not a safetensors file.
    let junk = dir.0.join("junk.bin");
    std::fs::write(&junk, b"not a safetensors file at all").unwrap();
    fails_naming(&["inspect", junk.to_str().unwrap()], "safetensors");
    fails_naming(&["bench", "import", "--bits", "5"], "--bits");
    fails_naming(&["bench", "import", "--k", "0"], "--k");
    fails_naming(&["bench", "import", "--k", "100", "--group", "100"], "--k");
    fails_naming(
        &["bench", "import", "--k", "256", "--group", "100"],
        "--group",
    );
    fails_naming(&["bench", "import", "--runs", "0"], "--runs");
    assert!(!out.exists(), "no output written on errors");
}

#[test]
fn bench_import_prints_the_time() {
    let text = ok(&[
        "bench", "import", "--k", "512", "--n", "1024", "--runs", "1",
    ]);
    assert!(
        text.starts_with("import of a GPTQ u4 layer [1024 x 512]") && text.contains(" s"),
        "{text}"
    );
}
