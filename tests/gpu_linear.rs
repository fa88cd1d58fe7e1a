//! `GpuQuantizedLinear` on the GPU: autotuned forward against the f64 reference, reuse of the
//! persisted winner, and input validation.
//!
//! Skips with a printed reason when this machine cannot run CUDA; `TILUS_REQUIRE_GPU=1` turns the
//! skip into a failure. Every context here caches kernels and tuning records in a fresh
//! temporary directory. Fresh random weights and activations each run; outputs are poisoned with
//! NaN before every launch.

mod common;

use common::TempDir;
use half::{bf16, f16};
use rand::Rng;
use std::path::Path;
use std::sync::Arc;
use tilus::element::Activation;
use tilus::kernels::linear::GpuQuantizedLinear;
use tilus::kernels::qmatmul::QMatmulMethod;
use tilus::quant::Group;
use tilus::runtime::{Context, DeviceBuffer, TuneSource};
use tilus::DType;

/// A context on device 0 with its disk cache in `cache`; `None` without a usable GPU.
fn context(test: &str, cache: &Path) -> Option<Arc<Context>> {
    common::gpu_context(test, Context::builder(0).cache_dir(cache))
}

fn random_weight(k: usize, n: usize) -> Vec<f32> {
    let mut rng = rand::rng();
    (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// `layer.forward_into` for `m` random rows (output poisoned) against `x · dequantize(W)` in
/// f64; returns `||out - ref|| / ||ref||`.
fn check_forward<T: Activation>(layer: &GpuQuantizedLinear<T>, m: usize) -> f64 {
    let (k, n) = (layer.k(), layer.n());
    let ctx = layer.context();
    let mut rng = rand::rng();
    let x: Vec<T> = (0..m * k)
        .map(|_| T::from_f32(rng.random_range(-1.0f32..1.0)))
        .collect();
    let xd = DeviceBuffer::from_host(ctx, &x).unwrap();
    let mut yd = DeviceBuffer::from_host(ctx, &vec![T::from_f32(f32::NAN); m * n]).unwrap();
    layer.forward_into(&xd, m, &mut yd).unwrap();
    let y = yd.to_host().unwrap();
    // The allocating and host paths agree with it.
    let y2 = layer.forward(&xd, m).unwrap().to_host().unwrap();
    let y3 = layer.forward_host(&x, m).unwrap();
    let deq = layer.quantized().dequantize();
    let (mut err, mut norm) = (0f64, 0f64);
    for i in 0..m {
        for j in 0..n {
            let r: f64 = (0..k)
                .map(|kk| x[i * k + kk].to_f32() as f64 * deq[kk * n + j])
                .sum();
            let out = y[i * n + j].to_f32() as f64;
            assert!(
                out.is_finite(),
                "y[{i}, {j}] = {out} (unwritten or overflow)"
            );
            let bits = y[i * n + j].to_f32().to_bits();
            assert_eq!(
                y2[i * n + j].to_f32().to_bits(),
                bits,
                "forward vs forward_into"
            );
            assert_eq!(
                y3[i * n + j].to_f32().to_bits(),
                bits,
                "forward_host vs forward_into"
            );
            err += (out - r).powi(2);
            norm += r * r;
        }
    }
    (err / norm).sqrt()
}

#[test]
fn forward_matches_the_reference_and_reuses_the_persisted_winner() {
    let dir = TempDir::new("reuse");
    let Some(ctx) = context(
        "forward_matches_the_reference_and_reuses_the_persisted_winner",
        &dir.0,
    ) else {
        return;
    };
    let (k, n) = (1024, 512);
    let w = random_weight(k, n);
    let layer =
        GpuQuantizedLinear::<f16>::new(&ctx, &w, k, n, DType::Int(4), Group::Rows(128)).unwrap();
    assert!(
        layer.plans().is_empty(),
        "nothing is tuned before first use"
    );
    for m in [1, 17] {
        let rel = check_forward(&layer, m);
        let plan = layer.plan(m).unwrap();
        println!(
            "i4 f16 m={m}: rel err {rel:.2e}; bucket {} -> {:?} ({:?}, {:.1} us of {} candidates)",
            plan.m_bucket, plan.config, plan.source, plan.median_us, plan.candidates
        );
        assert!(rel < 1e-2, "m={m}: relative error {rel}");
        assert_eq!(plan.source, TuneSource::Measured);
        let record = plan.record.expect("records are persisted in the cache dir");
        assert!(record.starts_with(dir.0.join("tune")), "{record:?}");
        assert!(record.exists());
    }
    assert_eq!(
        layer.plans().iter().map(|p| p.m_bucket).collect::<Vec<_>>(),
        [1, 32]
    );
    let first: Vec<_> = layer.plans().iter().map(|p| p.config).collect();

    // Same context: the tuner's memory.
    let again =
        GpuQuantizedLinear::<f16>::new(&ctx, &w, k, n, DType::Int(4), Group::Rows(128)).unwrap();
    let p = again.plan(1).unwrap();
    assert_eq!((p.source, p.config), (TuneSource::Memory, first[0]));

    // A new context on the same cache directory (as a new process would): from disk, with no
    // measurement, and still correct.
    drop(again);
    let ctx2 = context("reuse (second context)", &dir.0).unwrap();
    let reused =
        GpuQuantizedLinear::<f16>::new(&ctx2, &w, k, n, DType::Int(4), Group::Rows(128)).unwrap();
    for (m, cfg) in [(1, first[0]), (17, first[1])] {
        let started = std::time::Instant::now();
        let p = reused.plan(m).unwrap();
        println!("m={m}: reused in {:?}", started.elapsed());
        assert_eq!((p.source, p.config), (TuneSource::Disk, cfg));
        let rel = check_forward(&reused, m);
        assert!(rel < 1e-2, "reused m={m}: relative error {rel}");
    }
    assert_eq!(ctx2.tuner().stats().tuned, 0);
    // 20 rows is in the bucket of 17: no new tuning.
    assert_eq!(reused.plan(20).unwrap().m_bucket, 32);
    assert_eq!(reused.plans().len(), 2);
}

/// One token of 1- and 2-bit layers, where the tuner tries the look-up method first: whichever
/// plan wins (its weight re-laid for it), the forward matches the reference, and the bucket of
/// two tokens, which has no look-up candidate, uses another layout of the same weight.
#[test]
fn one_and_two_bit_decode_layers() {
    let dir = TempDir::new("lowbit");
    let Some(ctx) = context("one_and_two_bit_decode_layers", &dir.0) else {
        return;
    };
    let (k, n) = (4096, 2048);
    for wdtype in [DType::UInt(1), DType::Int(2)] {
        let layer = GpuQuantizedLinear::<f16>::new(
            &ctx,
            &random_weight(k, n),
            k,
            n,
            wdtype,
            Group::Rows(128),
        )
        .unwrap();
        // Two and four tokens of a 2-bit weight: the integer-mma gemv with several tokens a
        // block, its digits' pre-pass buffers reserved by the layer.
        for m in [1, 2, 4] {
            let rel = check_forward(&layer, m);
            let plan = layer.plan(m).unwrap();
            println!(
                "{wdtype} m={m}: rel err {rel:.2e}; {:?} ({:.1} us of {} candidates)",
                plan.config, plan.median_us, plan.candidates
            );
            assert!(rel < 1e-2, "{wdtype} m={m}: relative error {rel}");
            if m > 1 {
                assert_ne!(
                    plan.config.method,
                    QMatmulMethod::Lut,
                    "one token per block"
                );
            }
        }
    }
}

#[test]
fn bf16_zero_points_and_per_channel() {
    let dir = TempDir::new("bf16");
    let Some(ctx) = context("bf16_zero_points_and_per_channel", &dir.0) else {
        return;
    };
    let (k, n) = (512, 256);
    for (wdtype, group) in [
        (DType::UInt(4), Group::Rows(64)),
        (DType::Int(8), Group::PerChannel),
        ("f6e3m2".parse().unwrap(), Group::Rows(128)),
    ] {
        let layer =
            GpuQuantizedLinear::<bf16>::new(&ctx, &random_weight(k, n), k, n, wdtype, group)
                .unwrap();
        for m in [1, 17, 100] {
            let rel = check_forward(&layer, m);
            println!("{wdtype} {group:?} bf16 m={m}: rel err {rel:.2e}");
            assert!(rel < 1e-2, "{wdtype} m={m}: relative error {rel}");
        }
        assert!(layer.weight_layouts() <= 4);
    }
}

#[test]
fn bad_inputs_are_named() {
    let dir = TempDir::new("bad");
    let Some(ctx) = context("bad_inputs_are_named", &dir.0) else {
        return;
    };
    let (k, n) = (256, 256);
    let layer = GpuQuantizedLinear::<f16>::new(
        &ctx,
        &random_weight(k, n),
        k,
        n,
        DType::Int(4),
        Group::Rows(128),
    )
    .unwrap();
    let x = DeviceBuffer::<f16>::zeros(&ctx, 2 * k).unwrap();
    use tilus::kernels::qmatmul::QMatmulError;
    fn err<V>(r: Result<V, QMatmulError>) -> String {
        r.map(|_| ()).unwrap_err().to_string()
    }
    let e = err(layer.forward(&x, 0));
    assert!(e.contains("`m`"), "{e}");
    let e = err(layer.forward(&x, 3));
    assert!(e.contains("`x`"), "{e}");
    let mut y = DeviceBuffer::<f16>::zeros(&ctx, 2 * n + 1).unwrap();
    let e = err(layer.forward_into(&x, 2, &mut y));
    assert!(e.contains("`y`"), "{e}");
    let e = err(layer.forward_host(&vec![f16::ZERO; k + 1], 1));
    assert!(e.contains("`x`"), "{e}");
    assert!(layer.plans().is_empty(), "bad input must not tune");
    // Wrong activation type for a host layer.
    let host = tilus::kernels::linear::QuantizedLinear::new(
        &random_weight(k, n),
        k,
        n,
        DType::Int(4),
        Group::Rows(128),
        DType::BF16,
    )
    .unwrap();
    let e = host.to_gpu::<f16>(&ctx).unwrap_err().to_string();
    assert!(e.contains("`T`"), "{e}");
}

/// `reserve(max_m)` plans every bucket up to `max_m` ahead (tuning each, with its split-k
/// buffers): later forwards of up to `max_m` rows match the reference, twice in a row, and add
/// no plan; more rows is an error naming `m` (it would tune and allocate), until a larger
/// `reserve`.
#[test]
fn reserve_plans_ahead_and_bounds_m() {
    let dir = TempDir::new("reserve");
    let Some(ctx) = context("reserve_plans_ahead_and_bounds_m", &dir.0) else {
        return;
    };
    let (k, n) = (2048, 1024);
    let layer = GpuQuantizedLinear::<f16>::new(
        &ctx,
        &random_weight(k, n),
        k,
        n,
        DType::Int(4),
        Group::Rows(128),
    )
    .unwrap();
    assert_eq!(layer.reserved_rows(), None);
    layer.reserve(16).unwrap();
    assert_eq!(layer.reserved_rows(), Some(16));
    let buckets: Vec<usize> = layer.plans().iter().map(|p| p.m_bucket).collect();
    assert_eq!(buckets, [1, 2, 4, 8, 16]);
    for p in layer.plans() {
        println!("m<={} {:?}", p.m_bucket, p.config);
    }
    for m in [1, 3, 9, 16] {
        for call in 0..2 {
            let rel = check_forward(&layer, m);
            assert!(rel < 1e-2, "m={m} call {call}: relative error {rel}");
        }
    }
    assert_eq!(layer.plans().len(), 5);
    let x = DeviceBuffer::<f16>::zeros(&ctx, 17 * k).unwrap();
    let mut y = DeviceBuffer::<f16>::zeros(&ctx, 17 * n).unwrap();
    let e = layer.forward_into(&x, 17, &mut y).unwrap_err().to_string();
    assert!(e.contains("argument `m`") && e.contains("reserve"), "{e}");
    assert_eq!(layer.plans().len(), 5, "a refused forward must not tune");
    layer.reserve(17).unwrap();
    layer.forward_into(&x, 17, &mut y).unwrap();
    assert_eq!(layer.plans().len(), 6);
}

/// Two chained layers' forwards (u2 4096 -> 512, the shape split-k serves, then i4 512 -> 2048)
/// captured in a CUDA graph on a context with its own stream: the capture runs nothing (the
/// poisoned output stays NaN), each replay gives the bits of the direct forwards, also with new
/// activations copied into the captured input buffer, replay after replay (the split-k
/// semaphores are left zero); the second layer launched as the first's programmatic dependent,
/// eagerly and in a graph, gives the same bits. A context on the legacy default stream refuses
/// to capture, naming the option; an error inside the capture is returned and the stream works
/// afterwards.
#[test]
fn forwards_replay_in_a_cuda_graph() {
    let dir = TempDir::new("graph");
    let builder = Context::builder(0).cache_dir(&dir.0).own_stream(true);
    let Some(ctx) = common::gpu_context("forwards_replay_in_a_cuda_graph", builder) else {
        return;
    };
    let (k, h, n) = (4096, 512, 2048);
    let first = GpuQuantizedLinear::<f16>::new(
        &ctx,
        &random_weight(k, h),
        k,
        h,
        DType::UInt(2),
        Group::Rows(128),
    )
    .unwrap();
    let second = GpuQuantizedLinear::<f16>::new(
        &ctx,
        &random_weight(h, n),
        h,
        n,
        DType::Int(4),
        Group::Rows(128),
    )
    .unwrap();
    first.reserve(1).unwrap();
    second.reserve(1).unwrap();
    for p in first.plans().iter().chain(second.plans().iter()) {
        println!("m<={} {:?}", p.m_bucket, p.config);
    }
    let mut rng = rand::rng();
    let mut activations = || -> Vec<f16> {
        (0..k)
            .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect()
    };
    // The direct forwards of `x` into fresh buffers.
    let direct = |x: &[f16]| -> Vec<u16> {
        let xd = DeviceBuffer::from_host(&ctx, x).unwrap();
        let mut mid = DeviceBuffer::<f16>::filled(&ctx, h, f16::NAN).unwrap();
        let mut y = DeviceBuffer::<f16>::filled(&ctx, n, f16::NAN).unwrap();
        first.forward_into(&xd, 1, &mut mid).unwrap();
        second.forward_into(&mid, 1, &mut y).unwrap();
        y.to_host().unwrap().iter().map(|v| v.to_bits()).collect()
    };
    let x0 = activations();
    let mut x = DeviceBuffer::from_host(&ctx, &x0).unwrap();
    let mut mid = DeviceBuffer::<f16>::filled(&ctx, h, f16::NAN).unwrap();
    let mut y = DeviceBuffer::<f16>::filled(&ctx, n, f16::NAN).unwrap();
    let graph = ctx
        .capture(|| {
            first.forward_into(&x, 1, &mut mid)?;
            second.forward_into(&mid, 1, &mut y)
        })
        .unwrap();
    ctx.synchronize().unwrap();
    assert!(
        y.to_host().unwrap().iter().all(|v| v.is_nan()),
        "the capture ran the forwards"
    );
    let expected = direct(&x0);
    assert!(expected.iter().all(|&b| f16::from_bits(b).is_finite()));
    graph.upload().unwrap();
    for replay in 0..3 {
        let inputs = if replay == 0 {
            x0.clone()
        } else {
            activations()
        };
        x.copy_from_host(&inputs).unwrap();
        y.fill(f16::NAN).unwrap();
        graph.launch().unwrap();
        let got: Vec<u16> = y.to_host().unwrap().iter().map(|v| v.to_bits()).collect();
        let want = if replay == 0 {
            expected.clone()
        } else {
            direct(&inputs)
        };
        assert_eq!(
            got, want,
            "replay {replay} differs from the direct forwards"
        );
    }

    // The second layer as the first's programmatic dependent (`forward_into_dependent`),
    // eagerly and captured (a programmatic edge in the graph where the layer's kernel waits
    // for the prior grid): the bits of the ordinary forwards.
    let inputs = activations();
    x.copy_from_host(&inputs).unwrap();
    mid.fill(f16::NAN).unwrap();
    y.fill(f16::NAN).unwrap();
    first.forward_into(&x, 1, &mut mid).unwrap();
    second.forward_into_dependent(&mid, 1, &mut y).unwrap();
    let got: Vec<u16> = y.to_host().unwrap().iter().map(|v| v.to_bits()).collect();
    assert_eq!(got, direct(&inputs), "the eager dependent forward");
    let overlapped = ctx
        .capture(|| {
            first.forward_into(&x, 1, &mut mid)?;
            second.forward_into_dependent(&mid, 1, &mut y)
        })
        .unwrap();
    overlapped.upload().unwrap();
    for replay in 0..2 {
        let inputs = activations();
        x.copy_from_host(&inputs).unwrap();
        mid.fill(f16::NAN).unwrap();
        y.fill(f16::NAN).unwrap();
        overlapped.launch().unwrap();
        let got: Vec<u16> = y.to_host().unwrap().iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, direct(&inputs), "dependent replay {replay}");
    }

    // An error inside the capture (two rows, one reserved) comes back; the stream works
    // afterwards.
    let x2 = DeviceBuffer::<f16>::zeros(&ctx, 2 * k).unwrap();
    let mut mid2 = DeviceBuffer::<f16>::zeros(&ctx, 2 * h).unwrap();
    let e = ctx
        .capture(|| first.forward_into(&x2, 2, &mut mid2))
        .unwrap_err()
        .to_string();
    assert!(e.contains("argument `m`") && e.contains("reserve"), "{e}");
    assert_eq!(direct(&x0), expected, "after a failed capture");

    // The legacy default stream cannot be captured.
    let legacy = Context::builder(0).cache_dir(&dir.0).build().unwrap();
    let e = legacy
        .capture(|| Ok::<(), tilus::runtime::RuntimeError>(()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("own_stream"), "{e}");
}
