//! The input permutation of an act-order GPTQ layer ([`crate::checkpoint`]): `y[r, j] =
//! x[r, perm[j]]` for `x, y: [m, k]`, a `gather` per row. The layer runs it into a scratch
//! buffer before its matmul, so `x' · W'` with the weight's rows sorted by group equals the
//! checkpoint's `x · W`.

use crate::macro_support::KernelError;
use tilus_runtime::half::{bf16, f16};
use tilus_runtime::{Context, DeviceRead, DeviceWrite};

/// Columns per block: 128 threads of 8 consecutive columns.
pub const BLOCK_COLS: usize = 1024;

macro_rules! permute_kernels {
    ($t:ident, $name:ident) => {
        /// `y[r, j] = x[r, perm[j]]` for `x, y: [m, k]` and `perm: [k]` with entries in
        /// `0..k`; one block per 1024 columns of a row. `m * k` must fit an i32 (the caller
        /// checks). Columns past `k` in the last block gather row `r`'s first element and are
        /// not stored.
        #[tilus::kernel(grid = [cdiv(k, 1024), m], warps = 4)]
        pub fn $name(m: i32, k: i32, perm: Global<i32>, x: Global<$t>, y: GlobalMut<$t>) {
            let [bj, r] = block_indices();
            let cols = layout!(spatial(1, 128).local(1, 8));
            let p = load_global(view_global(perm, [1, k]), cols, [0, bj * 1024]);
            let v = gather(view_global(x, [m * k]), p + r * k);
            store_global(v, view_global(y, [m, k]), [r, bj * 1024]);
        }
    };
}

permute_kernels!(f16, permute_columns_f16);
permute_kernels!(bf16, permute_columns_bf16);

/// The element types the permutation runs on (f16, bf16); a bound of
/// [`crate::element::Activation`].
pub trait PermuteElement: tilus_runtime::Element + Copy {
    /// Launch `y = x[:, perm]` on `ctx`'s stream.
    fn permute_columns(
        ctx: &Context,
        m: i32,
        k: i32,
        perm: &impl DeviceRead<i32>,
        x: &impl DeviceRead<Self>,
        y: &mut impl DeviceWrite<Self>,
    ) -> Result<(), KernelError>;

    /// The same on the CPU interpreter.
    fn permute_columns_cpu(
        m: i32,
        k: i32,
        perm: &[i32],
        x: &[Self],
        y: &mut [Self],
    ) -> Result<(), KernelError>;
}

macro_rules! impl_permute {
    ($t:ident, $name:ident) => {
        impl PermuteElement for $t {
            fn permute_columns(
                ctx: &Context,
                m: i32,
                k: i32,
                perm: &impl DeviceRead<i32>,
                x: &impl DeviceRead<Self>,
                y: &mut impl DeviceWrite<Self>,
            ) -> Result<(), KernelError> {
                $name::launch(ctx, &$name::SPACE[0], m, k, perm, x, y)
            }

            fn permute_columns_cpu(
                m: i32,
                k: i32,
                perm: &[i32],
                x: &[Self],
                y: &mut [Self],
            ) -> Result<(), KernelError> {
                $name::interpret(&$name::SPACE[0], m, k, perm, x, y)
            }
        }
    };
}

impl_permute!(f16, permute_columns_f16);
impl_permute!(bf16, permute_columns_bf16);
