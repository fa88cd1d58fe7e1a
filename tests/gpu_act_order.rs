//! Act-order layers (a GPTQ checkpoint whose `g_idx` is not `i / g`): the layer permutes its
//! input, `y = x[:, perm] · W'`. The permutation kernel and the CPU layer run here on the
//! interpreter; the GPU layer (gather kernel + matmul, scratch reused per `m`) skips with a
//! printed reason without a GPU (`TILUS_REQUIRE_GPU=1` makes that a failure). Fresh random
//! weights, permutations and activations each run; outputs are poisoned.

mod common;

use common::TempDir;
use half::{bf16, f16};
use rand::seq::SliceRandom;
use rand::Rng;
use tilus::checkpoint::ImportedLayer;
use tilus::element::Activation;
use tilus::kernels::linear::{GpuQuantizedLinear, QuantizedLinear};
use tilus::kernels::permute::PermuteElement;
use tilus::quant::{Group, QuantizedWeight};
use tilus::runtime::{Context, DeviceBuffer};
use tilus::DType;

fn random_perm(k: usize) -> Vec<u32> {
    let mut p: Vec<u32> = (0..k as u32).collect();
    p.shuffle(&mut rand::rng());
    p
}

fn act_order_layer(k: usize, n: usize, adtype: DType) -> ImportedLayer {
    let mut rng = rand::rng();
    let w: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let weight =
        QuantizedWeight::quantize(&w, k, n, DType::UInt(4), Group::Rows(64), adtype, true).unwrap();
    ImportedLayer {
        weight,
        input_perm: Some(random_perm(k)),
    }
}

/// `x[:, perm] · W'` in f64 for `m` rows.
fn reference<T: Activation>(layer: &ImportedLayer, x: &[T], m: usize) -> Vec<f64> {
    let (k, n) = (layer.weight.k, layer.weight.n);
    let deq = layer.weight.dequantize();
    let perm = layer.input_perm.as_ref().unwrap();
    let mut y = vec![0f64; m * n];
    for r in 0..m {
        for (j, &p) in perm.iter().enumerate() {
            let xv = x[r * k + p as usize].to_f32() as f64;
            for c in 0..n {
                y[r * n + c] += xv * deq[j * n + c];
            }
        }
    }
    y
}

fn rel_err<T: Activation>(got: &[T], want: &[f64]) -> f64 {
    let (mut err, mut norm) = (0f64, 0f64);
    for (g, w) in got.iter().zip(want) {
        let g = g.to_f32() as f64;
        assert!(g.is_finite(), "output {g} (unwritten?)");
        err += (g - w).powi(2);
        norm += w * w;
    }
    (err / norm).sqrt()
}

fn permute_kernel_case<T: Activation + PermuteElement>() {
    let mut rng = rand::rng();
    // A k the generated code's 8-element loads cannot take is refused, naming `k`, as a launch
    // refuses it, with nothing written.
    let x = vec![T::from_f32(1.0); 2];
    let mut y = vec![T::from_f32(f32::NAN); 2];
    let e = T::permute_columns_cpu(1, 2, &[1, 0], &x, &mut y).unwrap_err();
    assert!(e.to_string().contains("k = 2"), "{e}");
    assert!(
        y.iter().all(|v| v.to_f32().is_nan()),
        "written before the refusal"
    );
    for (m, k) in [(1, 8), (3, 1000), (2, 1024), (5, 2504)] {
        let perm = random_perm(k);
        let perm_i: Vec<i32> = perm.iter().map(|&p| p as i32).collect();
        let x: Vec<T> = (0..m * k)
            .map(|_| T::from_f32(rng.random_range(-4.0f32..4.0)))
            .collect();
        let mut y = vec![T::from_f32(f32::NAN); m * k];
        T::permute_columns_cpu(m as i32, k as i32, &perm_i, &x, &mut y).unwrap();
        for r in 0..m {
            for j in 0..k {
                assert_eq!(
                    y[r * k + j].to_f32().to_bits(),
                    x[r * k + perm[j] as usize].to_f32().to_bits(),
                    "{} m={m} k={k}: y[{r}, {j}]",
                    T::DTYPE
                );
            }
        }
    }
}

#[test]
fn permute_kernel_on_the_interpreter() {
    permute_kernel_case::<f16>();
    permute_kernel_case::<bf16>();
}

#[test]
fn cpu_layer_permutes_its_input() {
    let (k, n) = (256, 128);
    let layer = act_order_layer(k, n, DType::F16);
    let lin = QuantizedLinear::from_imported(layer.clone()).unwrap();
    assert_eq!(lin.input_perm(), layer.input_perm.as_deref());
    let mut rng = rand::rng();
    for m in [1, 5] {
        let x: Vec<f16> = (0..m * k)
            .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect();
        let y = lin.forward_cpu(&x, m).unwrap();
        let rel = rel_err(&y, &reference(&layer, &x, m));
        assert!(rel < 1e-2, "m={m}: relative error {rel}");
    }
    // A bad permutation is refused, naming it.
    let lin = QuantizedLinear::from_imported(ImportedLayer {
        input_perm: None,
        ..layer
    })
    .unwrap();
    let e = lin.with_input_perm(vec![0; k]).unwrap_err().to_string();
    assert!(e.contains("`perm`"), "{e}");
}

fn gpu_case<T: Activation>(ctx: &std::sync::Arc<Context>, adtype: DType) {
    let (k, n) = (1024 + 512, 256);
    let layer = act_order_layer(k, n, adtype);
    let gpu = GpuQuantizedLinear::<T>::from_imported(ctx, layer.clone()).unwrap();
    assert!(gpu.has_input_perm());
    let mut rng = rand::rng();
    // m repeats: the second call of an m reuses its scratch buffer.
    for m in [1, 7, 1, 33, 7] {
        let x: Vec<T> = (0..m * k)
            .map(|_| T::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect();
        let xd = DeviceBuffer::from_host(ctx, &x).unwrap();
        let mut yd = DeviceBuffer::from_host(ctx, &vec![T::from_f32(f32::NAN); m * n]).unwrap();
        gpu.forward_into(&xd, m, &mut yd).unwrap();
        let y = yd.to_host().unwrap();
        let rel = rel_err(&y, &reference(&layer, &x, m));
        println!("act-order {adtype} m={m}: rel err {rel:.2e}");
        assert!(rel < 1e-2, "{adtype} m={m}: relative error {rel}");
        let y2 = gpu.forward_host(&x, m).unwrap();
        for (a, b) in y.iter().zip(&y2) {
            assert_eq!(a.to_f32().to_bits(), b.to_f32().to_bits(), "forward_host");
        }
    }
}

#[test]
fn gpu_layer_permutes_its_input() {
    let dir = TempDir::new("act-order");
    let Some(ctx) = common::gpu_context(
        "gpu_layer_permutes_its_input",
        Context::builder(0).cache_dir(&dir.0),
    ) else {
        return;
    };
    gpu_case::<f16>(&ctx, DType::F16);
    gpu_case::<bf16>(&ctx, DType::BF16);
}
