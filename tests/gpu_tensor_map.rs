//! The one launch path with tensor maps: a `GpuKernel` whose launch spec has a hidden
//! `ParamKind::TensorMap` of its pointer argument `x`, over a hand-written TMA kernel (the
//! `tma_load` instruction's code generator is tested with its instruction). The launcher
//! evaluates the view's extents from the launch's arguments, checks the buffer, encodes the map
//! and passes it by value; the kernel copies the boxes out, so the test sees the map's extents,
//! strides, zero fill past the tensor and swizzle. Bad buffers are errors naming `x`.
//!
//! Skips with a printed reason without a Hopper GPU; `TILUS_REQUIRE_GPU=1` fails instead.

mod common;

use rand::Rng;
use std::sync::Arc;
use tilus::core::ir::{Expr, ProgramBuilder};
use tilus::core::launch::{KernelParam, LaunchSpec, ParamKind, TmaSwizzle};
use tilus::core::Target;
use tilus::gpu::{GpuArg, GpuError, GpuKernel};
use tilus::runtime::half::f16;
use tilus::runtime::{Context, DeviceBuffer};
use tilus::DType;

/// Box rows and columns (f16): 64 columns are 128 bytes, one 128-byte swizzle span.
const BR: usize = 8;
const BC: usize = 64;

/// `tma_copy(rows, cols, x, out, tma_x)`: block (bx, by) copies box (by, bx) of `x` (a `rows x
/// cols` f16 matrix, through `tma_x`) to `out`, `gridDim.x * BC` wide, unswizzling when
/// `swizzle`.
fn source(swizzle: bool) -> String {
    format!(
        r#"
typedef unsigned char uint8_t;
#define BR {BR}
#define BC {BC}
#define SWIZZLE128 {swizzle}
struct __align__(64) tilus_tensor_map {{ unsigned long long opaque[16]; }};

extern "C" __global__ void tma_copy(int rows, int cols, const uint8_t* __restrict__ x, uint8_t* __restrict__ out_bytes, const __grid_constant__ tilus_tensor_map tma_x) {{
    __shared__ __align__(1024) unsigned short tile[BR * BC];
    __shared__ __align__(8) unsigned long long bar;
    unsigned short* out = (unsigned short*)out_bytes;
    const int out_cols = gridDim.x * BC;
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
            :: "r"(tile_at), "l"((unsigned long long)&tma_x), "r"(c0), "r"(r0), "r"(bar_at)
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
            // 16-byte chunk c of row i sits at chunk c ^ (i % 8).
            at = i * BC + ((((j * 2) / 16) ^ (i % 8)) * 16 + (j * 2) % 16) / 2;
        }}
        out[(size_t)(r0 + i) * out_cols + c0 + j] = tile[at];
    }}
}}
"#,
        swizzle = swizzle as i32
    )
}

/// The kernel with its spec: parameters `rows, cols, x, out` as a program declares them, the
/// grid of one block per box, and the hidden tensor map of `x` as `[rows, cols]`.
fn kernel(swizzle: TmaSwizzle) -> GpuKernel {
    let mut b = ProgramBuilder::new("tma_copy", 128);
    let rows = b.param_i32("rows");
    let cols = b.param_i32("cols");
    b.param_ptr("x", DType::F16, false);
    b.param_ptr("out", DType::F16, true);
    b.grid(vec![
        Expr::cdiv(cols, BC as i32),
        Expr::cdiv(rows, BR as i32),
    ]);
    let mut spec = LaunchSpec::of_program(&b.finish());
    spec.arch = Target::SM90.arch;
    spec.entry = "tma_copy".into();
    spec.params.push(KernelParam {
        name: "tma_x".into(),
        ir_name: "tma_x".into(),
        kind: ParamKind::TensorMap {
            param: 2,
            dtype: DType::F16,
            shape: vec![rows.into(), cols.into()],
            box_shape: vec![BR as u32, BC as u32],
            swizzle,
        },
    });
    let swizzled = swizzle == TmaSwizzle::B128;
    GpuKernel::new(
        "tma_copy",
        &format!("{swizzle:?}"),
        Arc::new(spec),
        source(swizzled),
    )
    .unwrap()
}

/// A Hopper context, or `None` after reporting the skip.
fn hopper(test: &str) -> Option<Arc<Context>> {
    let ctx = common::gpu_context(test, Context::builder(0))?;
    if ctx.device().compute_capability.0 < 9 {
        let reason = format!(
            "{} has no TMA (needs compute capability 9.0)",
            ctx.device().name
        );
        common::skip::skip(test, common::skip::Need::Gpu, &reason);
        return None;
    }
    Some(ctx)
}

#[test]
fn launches_encode_and_pass_tensor_maps() {
    let Some(ctx) = hopper("launches_encode_and_pass_tensor_maps") else {
        return;
    };
    let mut rng = rand::rng();
    // Ragged on both axes; 200 f16 columns are 400-byte rows, 16-byte aligned as TMA needs.
    for (rows, cols) in [(37usize, 200usize), (8, 64), (130, 8)] {
        let host: Vec<f16> = (0..rows * cols)
            .map(|_| f16::from_bits(rng.random_range(1..0x7c00)))
            .collect();
        let x = DeviceBuffer::from_host(&ctx, &host).unwrap();
        let (out_rows, out_cols) = (rows.div_ceil(BR) * BR, cols.div_ceil(BC) * BC);
        for swizzle in [TmaSwizzle::None, TmaSwizzle::B128] {
            let poison = vec![f16::from_bits(0xDEAD); out_rows * out_cols];
            let mut out = DeviceBuffer::from_host(&ctx, &poison).unwrap();
            let k = kernel(swizzle);
            let args = vec![
                GpuArg::I32(rows as i32),
                GpuArg::I32(cols as i32),
                GpuArg::In(&x),
                GpuArg::Out(&mut out),
            ];
            k.launch(&ctx, args).unwrap();
            let got = out.to_host().unwrap();
            for r in 0..out_rows {
                for c in 0..out_cols {
                    let want = if r < rows && c < cols {
                        host[r * cols + c].to_bits()
                    } else {
                        0 // outside the view: TMA's zero fill
                    };
                    assert_eq!(
                        got[r * out_cols + c].to_bits(),
                        want,
                        "{rows}x{cols}, swizzle {swizzle:?}: element ({r}, {c})"
                    );
                }
            }
        }
    }
}

/// What cannot be encoded is an argument error naming the buffer, before anything launches: a
/// buffer smaller than the view, a view that does not start on 16 bytes, rows that are not a
/// multiple of 16 bytes.
#[test]
fn bad_tensor_map_views_name_the_buffer() {
    let Some(ctx) = hopper("bad_tensor_map_views_name_the_buffer") else {
        return;
    };
    let x = DeviceBuffer::<f16>::zeros(&ctx, 64 * 64 + 8).unwrap();
    let mut out = DeviceBuffer::<f16>::zeros(&ctx, 80 * 128).unwrap();
    let k = kernel(TmaSwizzle::B128);
    let shifted = x.view(1..x.len()).unwrap();
    let cases: [(usize, usize, &dyn tilus::runtime::KernelArg, &str); 3] = [
        (65, 64, &x, "holds 8208 bytes"),
        (64, 64, &shifted, "multiple of 16 bytes"),
        (8, 100, &x, "multiple of 8 elements"),
    ];
    for (rows, cols, buffer, says) in cases {
        let args = vec![
            GpuArg::I32(rows as i32),
            GpuArg::I32(cols as i32),
            GpuArg::In(buffer),
            GpuArg::Out(&mut out),
        ];
        let e = k.launch(&ctx, args).unwrap_err();
        assert!(
            matches!(&e, GpuError::Arguments { message, .. } if message.contains("`x`")
                && message.contains(says)),
            "{rows}x{cols}: {e}"
        );
    }
    // Nothing faulted: the context still works.
    ctx.synchronize().unwrap();
}

/// The kernels compile for sm_90a, and their entry takes the tensor map last, by value, as the
/// spec lists it (checked by `GpuKernel::new`). Needs NVRTC, not a GPU.
#[test]
fn tma_kernels_compile() {
    let ready = match tilus::runtime::nvrtc::nvrtc() {
        Err(e) => Err(e.to_string()),
        Ok(_) if tilus::runtime::nvrtc::include_dir().is_none() => {
            Err("NVRTC is present but no CUDA include directory was found".to_string())
        }
        Ok(_) => Ok(()),
    };
    if let Err(problem) = ready {
        common::skip::skip("tma_kernels_compile", common::skip::Need::Nvrtc, &problem);
        return;
    }
    for swizzle in [TmaSwizzle::None, TmaSwizzle::B128] {
        let ptx = tilus::runtime::compile_ptx(kernel(swizzle).source().source(), "sm_90a")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(ptx.contains("cp.async.bulk.tensor.2d"), "{ptx}");
        // And through ptxas: the CUBIN NVRTC makes for the device.
        let cubin = tilus::runtime::compile_cubin(kernel(swizzle).source().source(), "sm_90a")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!cubin.is_empty());
    }
}
