//! cuBLAS GEMM on f16 or bf16 row-major matrices with f32 accumulation: the baseline the
//! quantized kernels are compared with, and the GEMM of their dequantize-then-GEMM method for
//! prefill shapes. The library is loaded at run time; a missing one is an error, not a panic.

use crate::context::Context;
use crate::element::HostElement;
use crate::error::{Result, RuntimeError};
use crate::launch::{DeviceRead, DeviceWrite};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{CudaView, CudaViewMut};
use half::{bf16, f16};

/// A 16-bit float cuBLAS multiplies: f16 or bf16. Only the typed cuBLAS call; what the type
/// is lives in [`HostElement`].
pub trait GemmElement: HostElement {
    const ONE: Self;
    const ZERO: Self;
    /// The typed cuBLAS call (column-major, as cuBLAS sees it).
    #[doc(hidden)]
    fn gemm(
        blas: &CudaBlas,
        cfg: GemmConfig<Self>,
        a: &CudaView<'_, Self>,
        b: &CudaView<'_, Self>,
        c: &mut CudaViewMut<'_, Self>,
    ) -> std::result::Result<(), cudarc::cublas::result::CublasError>;
}

macro_rules! gemm_element {
    ($t:ty) => {
        impl GemmElement for $t {
            const ONE: Self = <$t>::ONE;
            const ZERO: Self = <$t>::ZERO;
            fn gemm(
                blas: &CudaBlas,
                cfg: GemmConfig<Self>,
                a: &CudaView<'_, Self>,
                b: &CudaView<'_, Self>,
                c: &mut CudaViewMut<'_, Self>,
            ) -> std::result::Result<(), cudarc::cublas::result::CublasError> {
                // Safety: the lengths were checked against the shapes in `Cublas::gemm`.
                unsafe { Gemm::<$t>::gemm(blas, cfg, a, b, c) }
            }
        }
    };
}
gemm_element!(f16);
gemm_element!(bf16);

/// A cuBLAS handle on a context's stream.
pub struct Cublas {
    blas: CudaBlas,
}

impl Cublas {
    pub fn new(ctx: &Context) -> Result<Cublas> {
        crate::discover::preload_cublas();
        // cudarc panics when the library is missing; ask first.
        if !crate::linking::cublas_present() {
            return Err(RuntimeError::LibraryMissing {
                library: "libcublas.so",
                hint: "install the CUDA toolkit or the `nvidia-cublas` wheel, or set CUDA_HOME"
                    .into(),
            });
        }
        let blas = CudaBlas::new(ctx.stream().clone()).map_err(|e| RuntimeError::Library {
            library: "cuBLAS",
            message: format!("creating a handle: {e:?}"),
        })?;
        Ok(Cublas { blas })
    }

    /// Row-major `c = a · b` (`a` is `[m, k]`, `b` is `[k, n]`); lengths are checked and named.
    pub fn gemm<T: GemmElement>(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: &impl DeviceRead<T>,
        b: &impl DeviceRead<T>,
        c: &mut impl DeviceWrite<T>,
    ) -> Result<()> {
        self.gemm_op(m, n, k, a, b, c, false)
    }

    /// Row-major `c = a · bᵀ` (`a` is `[m, k]`, `b` is `[n, k]`: a linear layer's weight, as
    /// `torch.nn.functional.linear` multiplies); lengths are checked and named.
    pub fn gemm_nt<T: GemmElement>(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: &impl DeviceRead<T>,
        b: &impl DeviceRead<T>,
        c: &mut impl DeviceWrite<T>,
    ) -> Result<()> {
        self.gemm_op(m, n, k, a, b, c, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn gemm_op<T: GemmElement>(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: &impl DeviceRead<T>,
        b: &impl DeviceRead<T>,
        c: &mut impl DeviceWrite<T>,
        b_transposed: bool,
    ) -> Result<()> {
        use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
        for (arg, v) in [("m", m), ("n", n), ("k", k)] {
            if v == 0 || v > i32::MAX as usize {
                return Err(RuntimeError::invalid_arg(
                    arg,
                    format!("{v} is not in 1..=i32::MAX"),
                ));
            }
        }
        // Each factor is at most i32::MAX, so the products fit a 64-bit usize.
        crate::checks::check_len("a", a.elements(), m * k)?;
        crate::checks::check_len("b", b.elements(), k * n)?;
        crate::checks::check_len("c", c.elements(), m * n)?;
        // Row-major C = A·B is column-major C^T = B^T · A^T: swap the operands. A row-major
        // `[n, k]` b is the column-major `[k, n]` Bᵀ, transposed back by the operation.
        let cfg = GemmConfig {
            transa: if b_transposed {
                CUBLAS_OP_T
            } else {
                CUBLAS_OP_N
            },
            transb: CUBLAS_OP_N,
            m: n as i32,
            n: m as i32,
            k: k as i32,
            alpha: T::ONE,
            lda: if b_transposed { k as i32 } else { n as i32 },
            ldb: k as i32,
            beta: T::ZERO,
            ldc: n as i32,
        };
        T::gemm(
            &self.blas,
            cfg,
            &b.cuda_view(),
            &a.cuda_view(),
            &mut c.cuda_view_mut(),
        )
        .map_err(|e| RuntimeError::Library {
            library: "cuBLAS",
            message: format!("{} GEMM {m}x{n}x{k}: {e:?}", T::DTYPE),
        })
    }
}
