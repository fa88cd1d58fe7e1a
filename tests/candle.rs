//! The candle integration (feature `candle`): `QLinear` as a candle `Module` and the row
//! operations, against f64 references of the quantized weight. CPU tensors run on the VM's
//! interpreter (on CI); CUDA tensors (feature `candle-cuda`) run the kernels on candle's stream
//! and skip visibly without a GPU.
#![cfg(feature = "candle")]

mod common;

use candle_core::{DType as CDType, Device, Module, Tensor, D};
use rand::Rng;
use tilus::candle::{ops, DecodeAttn, QLinear};
use tilus::kernels::linear::QuantizedLinear;
use tilus::quant::Group;
use tilus::DType;

/// A layer quantized from fresh random weights, and its dequantized weight `[k, n]` in f64.
fn layer(k: usize, n: usize, wdtype: &str, adtype: DType) -> (QLinear, Vec<f64>) {
    let mut rng = rand::rng();
    let w: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let wdtype: DType = wdtype.parse().unwrap();
    let host = QuantizedLinear::new(&w, k, n, wdtype, Group::Rows(128), adtype).unwrap();
    let dq = host.quantized().dequantize();
    (QLinear::new(host), dq)
}

fn random_input(shape: &[usize], dtype: CDType, device: &Device) -> Tensor {
    let mut rng = rand::rng();
    let len: usize = shape.iter().product();
    let v: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    Tensor::from_vec(v, shape, &Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
        .to_device(device)
        .unwrap()
}

fn to_f64(t: &Tensor) -> Vec<f64> {
    t.to_dtype(CDType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap()
}

/// `x · W` in f64 from the values `x` holds (already rounded to its dtype).
fn reference(x: &Tensor, w: &[f64], k: usize, n: usize) -> Vec<f64> {
    let xs = to_f64(x);
    let m = xs.len() / k;
    let mut y = vec![0.0; m * n];
    for r in 0..m {
        for (kk, &xv) in xs[r * k..(r + 1) * k].iter().enumerate() {
            let row = &w[kk * n..(kk + 1) * n];
            for (yv, &wv) in y[r * n..(r + 1) * n].iter_mut().zip(row) {
                *yv += xv * wv;
            }
        }
    }
    y
}

/// Largest error relative to the largest reference magnitude.
fn rel_err(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(1e-30f64, |a, v| a.max(v.abs()));
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            assert!(g.is_finite(), "non-finite output {g}");
            (g - w).abs() / scale
        })
        .fold(0.0, f64::max)
}

fn check_layer(device: &Device, wdtype: &str, adtype: DType, cdtype: CDType) {
    let (k, n) = (512, 256);
    let (layer, w) = layer(k, n, wdtype, adtype);
    assert_eq!(layer.dtype(), cdtype);
    // Leading dimensions flatten into rows: [2, 3, k] is 6 rows; [1, k] one; [17, k] a ragged m.
    for shape in [vec![2, 3, k], vec![1, k], vec![17, k]] {
        let x = random_input(&shape, cdtype, device);
        let y = layer.forward(&x).unwrap();
        let mut want_shape = shape.clone();
        *want_shape.last_mut().unwrap() = n;
        assert_eq!(y.dims(), want_shape.as_slice());
        assert_eq!(y.dtype(), cdtype);
        assert!(y.device().same_device(device));
        let e = rel_err(&to_f64(&y), &reference(&x, &w, k, n));
        assert!(
            e < 1e-2,
            "{wdtype} {cdtype:?} {shape:?}: relative error {e}"
        );
    }
    // A non-contiguous input (a transposed view) is made contiguous first.
    let xt = random_input(&[k, 5], cdtype, device).t().unwrap();
    assert!(!xt.is_contiguous());
    let y = layer.forward(&xt).unwrap();
    let e = rel_err(&to_f64(&y), &reference(&xt, &w, k, n));
    assert!(e < 1e-2, "{wdtype} transposed input: relative error {e}");
}

#[test]
fn qlinear_on_cpu_tensors_runs_the_interpreter() {
    check_layer(&Device::Cpu, "i4", DType::F16, CDType::F16);
    check_layer(&Device::Cpu, "u2", DType::BF16, CDType::BF16);
}

#[test]
fn qlinear_errors_are_candle_errors_naming_the_input() {
    let (k, n) = (256, 128);
    let (layer, _) = layer(k, n, "u4", DType::F16);
    let wrong_dtype = random_input(&[2, k], CDType::BF16, &Device::Cpu);
    let e = layer.forward(&wrong_dtype).unwrap_err().to_string();
    assert!(e.contains("x is BF16") && e.contains("F16"), "{e}");
    let f32_input = random_input(&[2, k], CDType::F32, &Device::Cpu);
    let e = layer.forward(&f32_input).unwrap_err().to_string();
    assert!(e.contains("x is F32"), "{e}");
    let wrong_k = random_input(&[2, k + 8], CDType::F16, &Device::Cpu);
    let e = layer.forward(&wrong_k).unwrap_err().to_string();
    assert!(e.contains("last dimension") && e.contains("k = 256"), "{e}");
    // No rows: an empty output of the right shape.
    let empty = Tensor::zeros((0, k), CDType::F16, &Device::Cpu).unwrap();
    assert_eq!(layer.forward(&empty).unwrap().dims(), &[0, n]);
}

/// `x / sqrt(mean(x²) + eps) · w` and `silu(gate) · up` in f64.
fn row_references(x: &[f64], w: &[f64], n: usize, eps: f64) -> (Vec<f64>, Vec<f64>) {
    let mut norm = Vec::with_capacity(x.len());
    let mut silu = Vec::with_capacity(x.len() / 2);
    for row in x.chunks_exact(n) {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / n as f64;
        let r = 1.0 / (ms + eps).sqrt();
        norm.extend(row.iter().zip(w).map(|(v, g)| v * r * g));
        let (gate, up) = row.split_at(n / 2);
        silu.extend(gate.iter().zip(up).map(|(g, u)| g / (1.0 + (-g).exp()) * u));
    }
    (norm, silu)
}

fn check_row_ops(device: &Device, dtype: CDType) {
    let n = 1024;
    let eps = 1e-5;
    let x = random_input(&[3, 5, n], dtype, device);
    let w = random_input(&[n], dtype, device);
    let (want_norm, want_silu) = row_references(&to_f64(&x), &to_f64(&w), n, eps);
    let y = ops::rms_norm(&x, &w, eps as f32).unwrap();
    assert_eq!(y.dims(), &[3, 5, n]);
    let e = rel_err(&to_f64(&y), &want_norm);
    assert!(e < 1e-2, "rms_norm {dtype:?}: relative error {e}");
    let s = ops::silu_and_mul(&x).unwrap();
    assert_eq!(s.dims(), &[3, 5, n / 2]);
    let e = rel_err(&to_f64(&s), &want_silu);
    assert!(e < 1e-2, "silu_and_mul {dtype:?}: relative error {e}");
}

#[test]
fn row_ops_on_cpu_tensors() {
    check_row_ops(&Device::Cpu, CDType::F16);
    check_row_ops(&Device::Cpu, CDType::BF16);
    let x = random_input(&[2, 7], CDType::F16, &Device::Cpu);
    let e = ops::silu_and_mul(&x).unwrap_err().to_string();
    assert!(e.contains("must be even"), "{e}");
    let w = random_input(&[6], CDType::F16, &Device::Cpu);
    let e = ops::rms_norm(&x, &w, 1e-5).unwrap_err().to_string();
    assert!(e.contains("w must be"), "{e}");
    let x32 = random_input(&[2, 8], CDType::F32, &Device::Cpu);
    let e = ops::silu_and_mul(&x32).unwrap_err().to_string();
    assert!(e.contains("f16 or bf16"), "{e}");
    // The last-dimension helper agrees with the tensor.
    assert_eq!(x.dim(D::Minus1).unwrap(), 7);
}

/// Decode attention in f64: `[batch, q_heads, head_dim]` over the first `lens[b]` positions of
/// token-major caches `[batch, cap, kv_heads, head_dim]`.
#[allow(clippy::too_many_arguments)]
fn attention_reference(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    lens: &[i32],
    (qh, kvh, hd, cap): (usize, usize, usize, usize),
    scale: f64,
) -> Vec<f64> {
    let mut out = vec![0.0; q.len()];
    for (b, &len) in lens.iter().enumerate() {
        for h in 0..qh {
            let g = h / (qh / kvh);
            let qv = &q[(b * qh + h) * hd..][..hd];
            let row = |t: usize| ((b * cap + t) * kvh + g) * hd;
            let scores: Vec<f64> = (0..len as usize)
                .map(|t| {
                    scale
                        * qv.iter()
                            .zip(&k[row(t)..][..hd])
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = w.iter().sum();
            for (t, wt) in w.iter().enumerate() {
                for d in 0..hd {
                    out[(b * qh + h) * hd + d] += wt / total * v[row(t) + d];
                }
            }
        }
    }
    out
}

fn check_decode_attention(device: &Device, dtype: CDType) {
    let (qh, kvh, hd, cap) = (8, 2, 128, 80);
    let lens = [77i32, 5, 0];
    let batch = lens.len();
    let attn = DecodeAttn::new(qh, kvh, hd, cap, 1.0 / (hd as f32).sqrt()).unwrap();
    let q = random_input(&[batch, qh, hd], dtype, device);
    let k = random_input(&[batch, cap, kvh, hd], dtype, device);
    let v = random_input(&[batch, cap, kvh, hd], dtype, device);
    let l = Tensor::new(&lens[..], device).unwrap();
    let y = attn.forward(&q, &k, &v, &l).unwrap();
    assert_eq!(y.dims(), &[batch, qh, hd]);
    let want = attention_reference(
        &to_f64(&q),
        &to_f64(&k),
        &to_f64(&v),
        &lens,
        (qh, kvh, hd, cap),
        1.0 / (hd as f64).sqrt(),
    );
    let e = rel_err(&to_f64(&y), &want);
    assert!(e < 1e-2, "decode attention {dtype:?}: relative error {e}");
    // The empty sequence gives zeros.
    assert!(to_f64(&y)[2 * qh * hd..].iter().all(|&x| x == 0.0));
}

#[test]
fn decode_attention_on_cpu_tensors_runs_the_interpreter() {
    check_decode_attention(&Device::Cpu, CDType::F16);
    check_decode_attention(&Device::Cpu, CDType::BF16);
}

#[test]
fn decode_attention_errors_name_the_tensor() {
    let dev = Device::Cpu;
    let attn = DecodeAttn::new(4, 2, 64, 16, 0.125).unwrap();
    let q = random_input(&[1, 4, 64], CDType::F16, &dev);
    let k = random_input(&[1, 16, 2, 64], CDType::F16, &dev);
    let l = Tensor::new(&[3i32], &dev).unwrap();
    let short = random_input(&[1, 8, 2, 64], CDType::F16, &dev);
    let e = attn.forward(&q, &short, &k, &l).unwrap_err().to_string();
    assert!(e.contains("k_cache must be"), "{e}");
    let kt = random_input(&[1, 2, 16, 64], CDType::F16, &dev)
        .transpose(1, 2)
        .unwrap();
    let e = attn.forward(&q, &k, &kt, &l).unwrap_err().to_string();
    assert!(e.contains("v_cache must be contiguous"), "{e}");
    let lu = Tensor::new(&[3u32], &dev).unwrap();
    let e = attn.forward(&q, &k, &k, &lu).unwrap_err().to_string();
    assert!(e.contains("seq_lens must be i32"), "{e}");
    let q5 = random_input(&[1, 5, 64], CDType::F16, &dev);
    let e = attn.forward(&q5, &k, &k, &l).unwrap_err().to_string();
    assert!(e.contains("4 query heads"), "{e}");
    let e = DecodeAttn::new(4, 3, 64, 16, 0.125)
        .unwrap_err()
        .to_string();
    assert!(e.contains("kv_heads"), "{e}");
}

#[cfg(feature = "candle-cuda")]
mod cuda {
    use super::*;

    /// candle's CUDA device 0, or `None` after a visible skip (a failure with
    /// `TILUS_REQUIRE_GPU=1`).
    fn device(test: &str) -> Option<Device> {
        match tilus::runtime::device_count() {
            Ok(n) if n > 0 => Some(Device::new_cuda(0).expect("candle opens device 0")),
            Ok(_) => {
                common::skip::skip(test, common::skip::Need::Gpu, "no CUDA device");
                None
            }
            Err(e) => {
                common::skip::skip(test, common::skip::Need::Gpu, &e.to_string());
                None
            }
        }
    }

    #[test]
    fn qlinear_on_cuda_tensors() {
        let Some(dev) = device("qlinear_on_cuda_tensors") else {
            return;
        };
        check_layer(&dev, "i4", DType::F16, CDType::F16);
        check_layer(&dev, "u4", DType::BF16, CDType::BF16);
        check_layer(&dev, "u1", DType::F16, CDType::F16);
        check_layer(&dev, "i3", DType::F16, CDType::F16);
        check_layer(&dev, "u8", DType::BF16, CDType::BF16);
    }

    /// The same layer on CPU and CUDA tensors agrees, and the layer's GPU copy lives on the
    /// candle device's stream: its tilus context is shared across layers of that device.
    #[test]
    fn cuda_and_cpu_agree_and_share_one_context() {
        let Some(dev) = device("cuda_and_cpu_agree_and_share_one_context") else {
            return;
        };
        let (k, n) = (1024, 512);
        let (layer, w) = layer(k, n, "i4", DType::F16);
        let (other, _) = super::layer(256, 128, "u4", DType::F16);
        let x_cpu = random_input(&[4, k], CDType::F16, &Device::Cpu);
        let x_gpu = x_cpu.to_device(&dev).unwrap();
        let y_cpu = to_f64(&layer.forward(&x_cpu).unwrap());
        let y_gpu = to_f64(&layer.forward(&x_gpu).unwrap());
        let want = reference(&x_cpu, &w, k, n);
        assert!(rel_err(&y_cpu, &want) < 1e-2);
        assert!(rel_err(&y_gpu, &want) < 1e-2);
        assert!(rel_err(&y_gpu, &y_cpu) < 1e-2);
        let Device::Cuda(cuda) = &dev else {
            unreachable!()
        };
        let a = layer.gpu_f16(cuda).unwrap();
        let b = other.gpu_f16(cuda).unwrap();
        assert!(std::sync::Arc::ptr_eq(a.context(), b.context()));
        assert_eq!(
            a.context().stream().cu_stream(),
            cuda.cuda_stream().cu_stream()
        );
    }

    #[test]
    fn row_ops_on_cuda_tensors() {
        let Some(dev) = device("row_ops_on_cuda_tensors") else {
            return;
        };
        check_row_ops(&dev, CDType::F16);
        check_row_ops(&dev, CDType::BF16);
    }

    #[test]
    fn decode_attention_on_cuda_tensors() {
        let Some(dev) = device("decode_attention_on_cuda_tensors") else {
            return;
        };
        check_decode_attention(&dev, CDType::F16);
        check_decode_attention(&dev, CDType::BF16);
    }
}
