//! GPU tests of the runtime: compile, cache, launch and check handwritten kernels.
//!
//! Each test skips with a printed reason when this machine cannot run CUDA (no `libcuda`, no
//! device, driver too old). Set `TILUS_REQUIRE_GPU=1` to turn a skip into a failure (on the GPU
//! machine, so that a broken setup is not mistaken for a pass). Every test uses its own
//! temporary cache directory, given through the context builder, never the process
//! environment.
//!
//! Run: `cargo test --test gpu -- --nocapture --test-threads=1` to see the timing lines.

mod common;

use common::TempDir;
use rand::Rng;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Instant;
use tilus::runtime::disk_cache::{decode_entry, encode_entry, CacheKey};
use tilus::runtime::half::f16;
use tilus::runtime::{
    check_align, check_divisible, check_len, Context, DeviceBuffer, KernelSource, LaunchDims,
    Origin, PackedTensor, Param, RuntimeError,
};
use tilus::DType;

/// A context on device 0 with its disk cache in `cache`; `None` without a usable GPU.
fn context(test: &str, cache: &Path) -> Option<Arc<Context>> {
    common::gpu_context(test, Context::builder(0).cache_dir(cache))
}

const ADD_F16: &str = r#"
#include <cuda_fp16.h>

extern "C" __global__ void add_f16(int n, const __half* __restrict__ a,
                                   const __half* __restrict__ b, __half* __restrict__ c) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = __hadd(a[i], b[i]);
    }
}
"#;

fn add_f16_source() -> KernelSource {
    KernelSource::new(
        "add_f16",
        "",
        "add_f16",
        ADD_F16,
        vec![
            Param::value::<i32>("n"),
            Param::ptr::<f16>("a"),
            Param::ptr::<f16>("b"),
            Param::ptr_mut::<f16>("c"),
        ],
    )
}

fn random_f16(rng: &mut impl Rng, n: usize) -> Vec<f16> {
    (0..n)
        .map(|_| f16::from_f32(rng.random_range(-4.0f32..4.0)))
        .collect()
}

/// `||out - ref|| / ||ref||`, with NaN anywhere in `out` counted as an infinite error.
fn rel_error(out: &[f16], reference: &[f64]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (o, r) in out.iter().zip(reference) {
        let o = o.to_f64();
        if o.is_nan() {
            return f64::INFINITY;
        }
        num += (o - r) * (o - r);
        den += r * r;
    }
    (num / den).sqrt()
}

/// Launch `add_f16` on fresh random data with a NaN-poisoned output and check it against an
/// f64 reference. Returns nothing; panics on mismatch.
fn run_add_f16(ctx: &Context, n: usize) {
    let kernel = ctx.load(&add_f16_source()).expect("add_f16 loads");
    let mut rng = rand::rng();
    let (a_host, b_host) = (random_f16(&mut rng, n), random_f16(&mut rng, n));
    let a = DeviceBuffer::from_host(ctx, &a_host).unwrap();
    let b = DeviceBuffer::from_host(ctx, &b_host).unwrap();
    let mut c = DeviceBuffer::filled(ctx, n, f16::NAN).unwrap();
    check_len("a", a.len(), n).unwrap();
    check_len("b", b.len(), n).unwrap();
    check_len("c", c.len(), n).unwrap();
    let blocks = n.div_ceil(256) as u32;
    kernel
        .args()
        .value(n as i32)
        .arg(&a)
        .arg(&b)
        .arg_mut(&mut c)
        .launch(LaunchDims::new([blocks, 1, 1], [256, 1, 1]))
        .expect("launch");
    let out = c.to_host().unwrap();
    let reference: Vec<f64> = a_host
        .iter()
        .zip(&b_host)
        .map(|(x, y)| x.to_f64() + y.to_f64())
        .collect();
    let err = rel_error(&out, &reference);
    assert!(err < 1e-2, "relative error {err} (n = {n})");
    // Each element is one correctly rounded f16 addition: within half an f16 ulp of the exact
    // sum, so the whole vector is far inside the bound above.
    assert!(err < 1e-3, "relative error {err} (n = {n})");
}

#[test]
fn f16_vector_add_cold_and_warm() {
    let cache = TempDir::new("add");
    let Some(ctx) = context("f16_vector_add_cold_and_warm", &cache.0) else {
        return;
    };
    let d = ctx.device();
    eprintln!(
        "device {}: {} ({}), {} SMs, driver {}.{}, {} KiB shared memory per block (opt-in)",
        d.ordinal,
        d.name,
        d.arch,
        d.multiprocessors,
        d.driver_version / 1000,
        (d.driver_version % 1000) / 10,
        d.smem_per_block_optin / 1024
    );

    // Cold: nothing cached anywhere.
    let t = Instant::now();
    let kernel = ctx.load(&add_f16_source()).expect("compiles");
    let Origin::Compiled { nvrtc } = kernel.origin() else {
        panic!("a fresh cache dir must compile, got {:?}", kernel.origin());
    };
    run_add_f16(&ctx, (1 << 20) + 123);
    ctx.synchronize().unwrap();
    eprintln!(
        "cold: NVRTC {:.1} ms, load {:.1} ms, to first launch done {:.1} ms ({} registers)",
        nvrtc.as_secs_f64() * 1e3,
        kernel.load_time().as_secs_f64() * 1e3,
        t.elapsed().as_secs_f64() * 1e3,
        kernel.registers()
    );
    assert_eq!(ctx.stats().compiles, 1);

    // Warm: a new context (empty memory cache) over the same directory reads the disk entry.
    let ctx2 = context("f16_vector_add_cold_and_warm", &cache.0).unwrap();
    let t = Instant::now();
    let kernel2 = ctx2.load(&add_f16_source()).expect("loads from disk");
    assert_eq!(kernel2.origin(), Origin::DiskCache);
    run_add_f16(&ctx2, 1000);
    ctx2.synchronize().unwrap();
    eprintln!(
        "warm (disk cache): load {:.2} ms, to first launch done {:.2} ms",
        kernel2.load_time().as_secs_f64() * 1e3,
        t.elapsed().as_secs_f64() * 1e3
    );
    let s = ctx2.stats();
    assert_eq!((s.compiles, s.disk_hits), (0, 1), "{s:?}");

    // Hot: the same context again answers from memory.
    let t = Instant::now();
    let again = ctx2.load(&add_f16_source()).unwrap();
    assert!(Arc::ptr_eq(&again, &kernel2));
    eprintln!(
        "hot (memory): load {:.1} us",
        t.elapsed().as_secs_f64() * 1e6
    );
}

/// Both L2 flushes run (the clean one compiles and launches its read-back kernel) and leave
/// the device's data alone: a buffer written before reads back the same after each.
#[test]
fn l2_flushes_run_in_both_modes() {
    use tilus::runtime::{L2Flush, L2Mode};
    let cache = TempDir::new("flush");
    let Some(ctx) = context("l2_flushes_run_in_both_modes", &cache.0) else {
        return;
    };
    let mut rng = rand::rng();
    let data: Vec<u32> = (0..1 << 20)
        .map(|_| rng.random_range(1..u32::MAX))
        .collect();
    let buf = DeviceBuffer::from_host(&ctx, &data).unwrap();
    for mode in [L2Mode::Dirty, L2Mode::Clean] {
        let mut flush = L2Flush::with_mode(&ctx, mode).unwrap();
        assert_eq!(flush.mode(), mode);
        for _ in 0..3 {
            flush.flush().unwrap();
        }
        ctx.synchronize().unwrap();
        assert_eq!(buf.to_host().unwrap(), data, "{mode:?}");
    }
}

#[test]
fn fill_zeros_clears_on_the_device() {
    let cache = TempDir::new("zeros");
    let Some(ctx) = context("fill_zeros_clears_on_the_device", &cache.0) else {
        return;
    };
    let mut rng = rand::rng();
    let data: Vec<u32> = (0..4099).map(|_| rng.random_range(1..u32::MAX)).collect();
    let mut buf = DeviceBuffer::from_host(&ctx, &data).unwrap();
    assert_eq!(buf.to_host().unwrap(), data);
    buf.fill_zeros().unwrap();
    assert!(buf.to_host().unwrap().iter().all(|&v| v == 0));
}

#[test]
fn grow_zeroed_keeps_a_buffer_that_serves_and_remakes_one_that_does_not() {
    let cache = TempDir::new("grow");
    let Some(ctx) = context("grow_zeroed_keeps_a_buffer_that_serves", &cache.0) else {
        return;
    };
    let mut rng = rand::rng();
    let mut slot: Option<DeviceBuffer<u32>> = None;
    let made = DeviceBuffer::grow_zeroed(&mut slot, &ctx, 1000).unwrap();
    assert_eq!(made.len(), 1000);
    assert!(made.to_host().unwrap().iter().all(|&v| v == 0));
    let data: Vec<u32> = (0..1000).map(|_| rng.random_range(1..u32::MAX)).collect();
    made.copy_from_host(&data).unwrap();
    // A smaller or equal need keeps the buffer and what it holds.
    let kept = DeviceBuffer::grow_zeroed(&mut slot, &ctx, 999).unwrap();
    assert_eq!((kept.len(), kept.to_host().unwrap()), (1000, data));
    // A larger one remakes it, zeroed.
    let grown = DeviceBuffer::grow_zeroed(&mut slot, &ctx, 1001).unwrap();
    assert_eq!(grown.len(), 1001);
    assert!(grown.to_host().unwrap().iter().all(|&v| v == 0));
    // An impossible size is an error naming `len`, and the buffer held stays.
    let err = DeviceBuffer::grow_zeroed(&mut slot, &ctx, usize::MAX).unwrap_err();
    assert!(err.to_string().contains("len"), "{err}");
    assert_eq!(slot.map(|b| b.len()), Some(1001));
}

#[test]
fn packed_tensor_round_trip() {
    let cache = TempDir::new("packed");
    let Some(ctx) = context("packed_tensor_round_trip", &cache.0) else {
        return;
    };
    let dtype = DType::UInt(6);
    let shape = [33usize, 7]; // 231 values * 6 bits = 1386 bits = 173.25 -> 174 bytes
    let mut rng = rand::rng();
    let bytes: Vec<u8> = (0..174).map(|_| rng.random()).collect();
    let t = PackedTensor::from_host(&ctx, dtype, &shape, &bytes).unwrap();
    assert_eq!((t.dtype(), t.shape(), t.numel()), (dtype, &shape[..], 231));
    assert_eq!(t.bytes().len(), 174);
    assert_eq!(t.to_host().unwrap(), bytes);

    let err = PackedTensor::from_host(&ctx, dtype, &shape, &bytes[..173]).unwrap_err();
    assert_eq!(err.arg(), Some("bytes"), "{err}");

    // Through a kernel: invert every byte into a second tensor of the same type and shape.
    let src = KernelSource::new(
        "invert_bytes",
        "",
        "invert_bytes",
        r#"extern "C" __global__ void invert_bytes(int n, const unsigned char* x, unsigned char* y) {
               int i = blockIdx.x * blockDim.x + threadIdx.x;
               if (i < n) y[i] = (unsigned char)~x[i];
           }"#,
        vec![
            Param::value::<i32>("n"),
            Param::ptr::<u8>("x"),
            Param::ptr_mut::<u8>("y"),
        ],
    );
    let kernel = ctx.load(&src).unwrap();
    let mut out = PackedTensor::zeros(&ctx, dtype, &shape).unwrap();
    out.bytes_mut().fill(0x5a).unwrap(); // poison
    kernel
        .args()
        .value(174i32)
        .arg(&t)
        .arg_mut(&mut out)
        .launch(LaunchDims::new([1, 1, 1], [256, 1, 1]))
        .unwrap();
    let inverted: Vec<u8> = bytes.iter().map(|b| !b).collect();
    assert_eq!(out.to_host().unwrap(), inverted);
}

fn fill_source(block: u32) -> KernelSource {
    KernelSource::new(
        "fill_index",
        format!("BLOCK={block}"),
        "fill_index",
        format!(
            r#"#define BLOCK {block}
               extern "C" __global__ void __launch_bounds__(BLOCK) fill_index(int n, float* out) {{
                   int i = blockIdx.x * BLOCK + threadIdx.x;
                   if (i < n) out[i] = 0.5f * (float)i + (float)BLOCK;
               }}"#
        ),
        vec![Param::value::<i32>("n"), Param::ptr_mut::<f32>("out")],
    )
}

#[test]
fn concurrent_first_use_compiles_each_configuration_once() {
    let cache = TempDir::new("concurrent");
    let Some(ctx) = context(
        "concurrent_first_use_compiles_each_configuration_once",
        &cache.0,
    ) else {
        return;
    };
    const THREADS: usize = 8;
    let barrier = Barrier::new(THREADS);
    let t = Instant::now();
    let kernels: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let (ctx, barrier) = (&ctx, &barrier);
                s.spawn(move || {
                    let block = if i % 2 == 0 { 128 } else { 256 };
                    barrier.wait();
                    let kernel = ctx.load(&fill_source(block)).expect("loads");
                    let n = 10_000 + i;
                    let mut out = DeviceBuffer::filled(ctx, n, f32::NAN).unwrap();
                    kernel
                        .args()
                        .value(n as i32)
                        .arg_mut(&mut out)
                        .launch(LaunchDims::new(
                            [n.div_ceil(block as usize) as u32, 1, 1],
                            [block, 1, 1],
                        ))
                        .expect("launch");
                    let host = out.to_host().unwrap();
                    for (j, v) in host.iter().enumerate() {
                        assert_eq!(*v, 0.5 * j as f32 + block as f32, "thread {i}, element {j}");
                    }
                    (block, kernel)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let stats = ctx.stats();
    eprintln!(
        "{THREADS} threads, 2 configurations: {:?} in {:.1} ms",
        stats,
        t.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(
        stats.compiles, 2,
        "exactly one compile per configuration: {stats:?}"
    );
    assert_eq!(stats.disk_hits, 0, "{stats:?}");
    assert_eq!(stats.memory_hits, (THREADS - 2) as u64, "{stats:?}");
    for (block, kernel) in &kernels {
        let first = &kernels.iter().find(|(b, _)| b == block).unwrap().1;
        assert!(
            Arc::ptr_eq(kernel, first),
            "one LoadedKernel per configuration"
        );
        assert_eq!(kernel.source().config(), format!("BLOCK={block}"));
    }
}

fn cache_entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cubin"))
        .collect()
}

#[test]
fn corrupt_disk_entries_are_rebuilt() {
    let cache = TempDir::new("corrupt");
    let Some(ctx) = context("corrupt_disk_entries_are_rebuilt", &cache.0) else {
        return;
    };
    ctx.load(&add_f16_source()).unwrap();
    let entries = cache_entries(&cache.0);
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];

    // 1. Truncated (a crash mid-copy, a full disk): detected by length, deleted, recompiled.
    let bytes = std::fs::read(entry).unwrap();
    std::fs::write(entry, &bytes[..bytes.len() / 2]).unwrap();
    let ctx2 = context("corrupt_disk_entries_are_rebuilt", &cache.0).unwrap();
    assert!(matches!(
        ctx2.load(&add_f16_source()).unwrap().origin(),
        Origin::Compiled { .. }
    ));
    let s = ctx2.stats();
    assert_eq!(
        (s.disk_rejected, s.compiles, s.disk_hits),
        (1, 1, 0),
        "{s:?}"
    );
    run_add_f16(&ctx2, 4097);
    let key = CacheKey(bytes[8..40].try_into().unwrap());
    let rebuilt = std::fs::read(entry).unwrap();
    assert!(
        decode_entry(&key, &rebuilt).is_ok(),
        "the rebuilt entry is whole again"
    );

    // 2. One flipped payload bit: detected by checksum.
    let mut flipped = bytes.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    std::fs::write(entry, &flipped).unwrap();
    let ctx3 = context("corrupt_disk_entries_are_rebuilt", &cache.0).unwrap();
    ctx3.load(&add_f16_source()).unwrap();
    let s = ctx3.stats();
    assert_eq!((s.disk_rejected, s.compiles), (1, 1), "{s:?}");

    // 3. A well-formed entry whose payload is not a CUBIN: the driver rejects it, the entry is
    //    dropped and rebuilt.
    std::fs::write(entry, encode_entry(&key, b"definitely not a cubin")).unwrap();
    let ctx4 = context("corrupt_disk_entries_are_rebuilt", &cache.0).unwrap();
    ctx4.load(&add_f16_source()).unwrap();
    let s = ctx4.stats();
    assert_eq!((s.disk_rejected, s.compiles), (1, 1), "{s:?}");
    run_add_f16(&ctx4, 333);

    // 4. And after all that, a fresh context reads the good entry.
    let ctx5 = context("corrupt_disk_entries_are_rebuilt", &cache.0).unwrap();
    assert_eq!(
        ctx5.load(&add_f16_source()).unwrap().origin(),
        Origin::DiskCache
    );
    run_add_f16(&ctx5, 100);
}

#[test]
fn launch_validation_errors_name_the_argument() {
    let cache = TempDir::new("validation");
    let Some(ctx) = context("launch_validation_errors_name_the_argument", &cache.0) else {
        return;
    };
    let kernel = ctx.load(&add_f16_source()).unwrap();
    let n = 1024usize;
    let a = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; n]).unwrap();
    let b = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; n + 1]).unwrap();
    let mut c = DeviceBuffer::<f16>::zeros(&ctx, n).unwrap();
    let wrong_type = DeviceBuffer::<f32>::zeros(&ctx, n).unwrap();
    let ok_dims = LaunchDims::new([4, 1, 1], [256, 1, 1]);

    let expect_arg = |r: Result<(), RuntimeError>, arg: &str| {
        let e = r.expect_err(arg);
        assert_eq!(e.arg(), Some(arg), "{e}");
        assert!(e.to_string().contains(arg), "{e}");
        eprintln!("  rejected as expected: {e}");
    };

    // Validators the generated launchers call.
    expect_arg(check_len("b", b.len(), n), "b");
    let misaligned = a.view(1..n).unwrap();
    assert!(check_align("a", a.device_ptr(), 16).is_ok());
    expect_arg(check_align("a", misaligned.device_ptr(), 16), "a");
    expect_arg(check_divisible("k", 1000i32, 64), "k");

    // Launch shape against the device's limits.
    let launch = |dims: LaunchDims, c: &mut DeviceBuffer<f16>| {
        kernel
            .args()
            .value(n as i32)
            .arg(&a)
            .arg(&a)
            .arg_mut(c)
            .launch(dims)
    };
    let max = ctx.device().max_grid;
    expect_arg(
        launch(LaunchDims::new([0, 1, 1], [256, 1, 1]), &mut c),
        "grid.x",
    );
    expect_arg(
        launch(LaunchDims::new([1, max[1] + 1, 1], [256, 1, 1]), &mut c),
        "grid.y",
    );
    expect_arg(
        launch(LaunchDims::new([1, 1, max[2] + 1], [256, 1, 1]), &mut c),
        "grid.z",
    );
    expect_arg(
        launch(LaunchDims::new([1, 1, 1], [2048, 1, 1]), &mut c),
        "block.x",
    );
    expect_arg(
        launch(LaunchDims::new([1, 1, 1], [64, 64, 1]), &mut c),
        "block",
    );
    let too_much = ctx.device().smem_per_block_optin + 1;
    expect_arg(launch(ok_dims.with_dyn_smem(too_much), &mut c), "dyn_smem");

    // Arguments against the declared parameters.
    expect_arg(
        kernel
            .args()
            .value(n as i32)
            .arg(&wrong_type)
            .arg(&a)
            .arg_mut(&mut c)
            .launch(ok_dims),
        "a",
    );
    expect_arg(
        kernel
            .args()
            .value(n as i32)
            .arg(&a)
            .arg(&a)
            .arg(&c)
            .launch(ok_dims),
        "c",
    );
    expect_arg(
        kernel
            .args()
            .value(n as u32)
            .arg(&a)
            .arg(&a)
            .arg_mut(&mut c)
            .launch(ok_dims),
        "n",
    );
    expect_arg(
        kernel
            .args()
            .value(n as i32)
            .arg(&a)
            .arg(&a)
            .launch(ok_dims),
        "c",
    );

    // Nothing was launched by the rejected calls: c is still zero.
    ctx.synchronize().unwrap();
    assert!(c.to_host().unwrap().iter().all(|v| *v == f16::ZERO));

    // And a correct launch still works.
    launch(ok_dims, &mut c).unwrap();
    assert!(c
        .to_host()
        .unwrap()
        .iter()
        .all(|v| *v == f16::from_f32(2.0)));
}

#[test]
fn large_dynamic_shared_memory_is_opted_into() {
    let cache = TempDir::new("smem");
    let Some(ctx) = context("large_dynamic_shared_memory_is_opted_into", &cache.0) else {
        return;
    };
    let src = KernelSource::new(
        "smem_reverse",
        "",
        "smem_reverse",
        r#"extern "C" __global__ void smem_reverse(int n, const float* in, float* out) {
               extern __shared__ float buf[];
               for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = in[i];
               __syncthreads();
               for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];
           }"#,
        vec![
            Param::value::<i32>("n"),
            Param::ptr::<f32>("in"),
            Param::ptr_mut::<f32>("out"),
        ],
    );
    let kernel = ctx.load(&src).unwrap();
    // 100 KB: more than the 48 KiB a block gets without opting in.
    let n = 25_000usize;
    let mut rng = rand::rng();
    let input: Vec<f32> = (0..n).map(|_| rng.random()).collect();
    let x = DeviceBuffer::from_host(&ctx, &input).unwrap();
    let mut y = DeviceBuffer::filled(&ctx, n, f32::NAN).unwrap();
    kernel
        .args()
        .value(n as i32)
        .arg(&x)
        .arg_mut(&mut y)
        .launch(LaunchDims::new([1, 1, 1], [1024, 1, 1]).with_dyn_smem((n * 4) as u32))
        .expect("opt-in above 48 KiB");
    let out = y.to_host().unwrap();
    let expected: Vec<f32> = input.iter().rev().copied().collect();
    assert_eq!(out, expected);
}

#[test]
fn compile_errors_and_missing_entry_points_through_the_context() {
    let cache = TempDir::new("errors");
    let Some(ctx) = context(
        "compile_errors_and_missing_entry_points_through_the_context",
        &cache.0,
    ) else {
        return;
    };
    let broken = KernelSource::new(
        "matmul_f16_i6",
        "BM=16,BN=64",
        "k",
        "extern \"C\" __global__ void k(float* x) {\n  x[0] = nope;\n}\n",
        vec![Param::ptr_mut::<f32>("x")],
    );
    let e = ctx.load(&broken).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, RuntimeError::Compile(_)), "{msg}");
    for needle in ["matmul_f16_i6", "BM=16,BN=64", "nope", "> 2 |"] {
        assert!(msg.contains(needle), "missing {needle:?} in {msg}");
    }
    let misnamed = KernelSource::new(
        "k",
        "",
        "no_such_entry",
        "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }",
        vec![Param::ptr_mut::<f32>("x")],
    );
    let e = ctx.load(&misnamed).unwrap_err();
    assert!(matches!(e, RuntimeError::InvalidKernel { .. }), "{e}");
    assert!(e.to_string().contains("no_such_entry"), "{e}");
}

#[test]
fn missing_device_is_an_error() {
    let cache = TempDir::new("nodev");
    if context("missing_device_is_an_error", &cache.0).is_none() {
        // Also the path this machine takes: an error, not a panic, was already shown.
        return;
    }
    let e = Context::builder(1000)
        .cache_dir(&cache.0)
        .build()
        .unwrap_err();
    assert!(
        matches!(e, RuntimeError::NoDevice { ordinal: 1000, .. }),
        "{e}"
    );
}
