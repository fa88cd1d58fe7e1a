//! Tensor maps end to end: a hand-written TMA kernel (`cp.async.bulk.tensor` completing on an
//! mbarrier) copies boxes of a random u16 matrix through shared memory to an output, with the
//! map encoded by `encode_tiled` and passed by value with `.tensor_map`. Checks the map's
//! dimension order and strides, zero fill outside the tensor, and the 128-byte swizzle pattern
//! that `TmaSwizzle` documents (16-byte chunk `c` of box row `r` lands at chunk `c ^ (r % 8)`).
//!
//! The compile check needs NVRTC (skips without it; `TILUS_REQUIRE_NVRTC=1` fails instead); the
//! launch needs a Hopper GPU (skips without one; `TILUS_REQUIRE_GPU=1` fails instead).

#[path = "../../tests/common/skip.rs"]
mod skip;

use rand::Rng;
use skip::{skip, Need};
use tilus_runtime::{
    encode_tiled, Context, DeviceBuffer, KernelSource, LaunchDims, Param, RuntimeError, TmaSwizzle,
};

/// Box rows and columns (u16): 64 columns are 128 bytes, one 128-byte swizzle span.
const BR: usize = 8;
const BC: usize = 64;

/// One block per box: thread 0 arms the mbarrier with the box's bytes and issues the copy, all
/// threads wait for phase 0, then write the box out (unswizzling when `SWIZZLE128` is set) to
/// an output `out_cols` wide that covers whole boxes, so the zero fill past the tensor shows.
fn source(swizzle: bool) -> String {
    format!(
        r#"
#define BR {BR}
#define BC {BC}
#define SWIZZLE128 {swizzle}
struct __align__(64) tilus_tensor_map {{ unsigned long long opaque[16]; }};

extern "C" __global__ void tma_copy(const __grid_constant__ tilus_tensor_map map, int out_cols,
                                    unsigned short* __restrict__ out) {{
    // The 128-byte swizzle repeats every 8 rows of 128 bytes: the box sits on 1024 bytes.
    __shared__ __align__(1024) unsigned short tile[BR * BC];
    __shared__ __align__(8) unsigned long long bar;
    const int r0 = blockIdx.y * BR, c0 = blockIdx.x * BC;
    const unsigned bar_at = (unsigned)__cvta_generic_to_shared(&bar);
    const unsigned tile_at = (unsigned)__cvta_generic_to_shared(tile);
    if (threadIdx.x == 0) {{
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar_at) : "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }}
    __syncthreads();
    if (threadIdx.x == 0) {{
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     :: "r"(bar_at), "r"((unsigned)(BR * BC * 2)) : "memory");
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
            " [%0], [%1, {{%2, %3}}], [%4];"
            :: "r"(tile_at), "l"((unsigned long long)&map), "r"(c0), "r"(r0), "r"(bar_at)
            : "memory");
    }}
    unsigned done = 0;
    while (!done) {{
        asm volatile("{{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;"
                     " selp.u32 %0, 1, 0, p; }}"
                     : "=r"(done) : "r"(bar_at) : "memory");
    }}
    for (int e = threadIdx.x; e < BR * BC; e += blockDim.x) {{
        const int i = e / BC, j = e % BC;
        int at = e;
        if (SWIZZLE128) {{
            at = i * BC + ((((j * 2) / 16) ^ (i % 8)) * 16 + (j * 2) % 16) / 2;
        }}
        out[(size_t)(r0 + i) * out_cols + c0 + j] = tile[at];
    }}
}}
"#,
        swizzle = swizzle as i32
    )
}

fn kernel(swizzle: bool) -> KernelSource {
    KernelSource::new(
        "tma_copy",
        if swizzle { "B128" } else { "none" },
        "tma_copy",
        source(swizzle),
        vec![
            Param::tensor_map("map"),
            Param::value::<i32>("out_cols"),
            Param::ptr_mut::<u16>("out"),
        ],
    )
}

fn nvrtc_ready(test: &str) -> bool {
    match tilus_runtime::nvrtc::nvrtc() {
        Ok(_) if tilus_runtime::nvrtc::include_dir().is_some() => true,
        Ok(_) => {
            skip(test, Need::Nvrtc, "no CUDA include directory found");
            false
        }
        Err(e) => {
            skip(test, Need::Nvrtc, &e.to_string());
            false
        }
    }
}

/// The test kernel is valid sm_90a code (what a Hopper context compiles it for).
#[test]
fn tma_kernel_compiles_for_sm_90a() {
    if !nvrtc_ready("tma_kernel_compiles_for_sm_90a") {
        return;
    }
    for swizzle in [false, true] {
        let ptx = tilus_runtime::compile_ptx(kernel(swizzle).source(), "sm_90a")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(ptx.contains("cp.async.bulk.tensor.2d"), "{ptx}");
        // And through ptxas: the CUBIN NVRTC makes for the device.
        let cubin = tilus_runtime::compile_cubin(kernel(swizzle).source(), "sm_90a")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!cubin.is_empty());
    }
}

/// A Hopper context, or `None` after reporting the skip.
fn hopper(test: &str) -> Option<std::sync::Arc<Context>> {
    let ctx = match Context::new(0) {
        Ok(ctx) => ctx,
        Err(e) if e.is_unavailable() => {
            skip(test, Need::Gpu, &e.to_string());
            return None;
        }
        Err(e) => panic!("{test}: {e}"),
    };
    if ctx.device().compute_capability.0 < 9 {
        let reason = format!(
            "{} has no TMA (needs compute capability 9.0)",
            ctx.device().name
        );
        skip(test, Need::Gpu, &reason);
        return None;
    }
    Some(ctx)
}

#[test]
fn tma_copies_boxes_through_an_encoded_map() {
    let Some(ctx) = hopper("tma_copies_boxes_through_an_encoded_map") else {
        return;
    };
    // Ragged on both axes: 37 rows, 200 columns (400-byte rows: 16-byte aligned as TMA needs).
    let (rows, cols) = (37usize, 200usize);
    let mut rng = rand::rng();
    let host: Vec<u16> = (0..rows * cols)
        .map(|_| rng.random_range(1..=u16::MAX))
        .collect();
    let input = DeviceBuffer::from_host(&ctx, &host).unwrap();
    let (grid_y, grid_x) = (rows.div_ceil(BR), cols.div_ceil(BC));
    let (out_rows, out_cols) = (grid_y * BR, grid_x * BC);
    for (swizzle, tma_swizzle) in [(false, TmaSwizzle::None), (true, TmaSwizzle::B128)] {
        let map = encode_tiled(
            "input",
            input.device_ptr(),
            2,
            &[rows as u64, cols as u64],
            &[BR as u32, BC as u32],
            tma_swizzle,
        )
        .unwrap();
        let poison = vec![0xDEADu16; out_rows * out_cols];
        let mut out = DeviceBuffer::from_host(&ctx, &poison).unwrap();
        let loaded = ctx.load(&kernel(swizzle)).unwrap();
        loaded
            .args()
            .tensor_map(map)
            .value(out_cols as i32)
            .arg_mut(&mut out)
            .launch(LaunchDims::new(
                [grid_x as u32, grid_y as u32, 1],
                [128, 1, 1],
            ))
            .unwrap();
        let got = out.to_host().unwrap();
        for r in 0..out_rows {
            for c in 0..out_cols {
                let want = if r < rows && c < cols {
                    host[r * cols + c]
                } else {
                    0
                };
                assert_eq!(
                    got[r * out_cols + c],
                    want,
                    "swizzle {tma_swizzle:?}: element ({r}, {c})"
                );
            }
        }
    }
}

/// Encoding a real map: valid arguments give a descriptor, and the driver's own refusals (none
/// expected past our validation) would be a `Driver` error naming the argument.
#[test]
fn encodes_a_real_map() {
    let Some(ctx) = hopper("encodes_a_real_map") else {
        return;
    };
    let buf = DeviceBuffer::<u8>::zeros(&ctx, 1 << 20).unwrap();
    let map = encode_tiled(
        "w",
        buf.device_ptr(),
        1,
        &[1024, 1024],
        &[64, 128],
        TmaSwizzle::B128,
    )
    .unwrap();
    assert_ne!(map.words(), &[0u64; 16]);
    // A misaligned address is ours to refuse, before the driver.
    let e = encode_tiled("w", buf.device_ptr() + 8, 1, &[64], &[16], TmaSwizzle::None);
    assert!(matches!(e, Err(RuntimeError::InvalidArgument { ref arg, .. }) if arg == "w"));
}
