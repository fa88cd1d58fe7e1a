//! Programs of the u1 `dot` (the 1-bit tensor-core mma, `mma.m16n8k256 .and.popc`), shared by
//! `tilus-core/tests/bmma.rs` (interpreter, verifier), the workspace's `tests/codegen_cuda.rs`
//! (NVRTC + SASS) and `tests/gpu_codegen.rs` (GPU vs interpreter).
//!
//! Operands are bit matrices packed 32 per `u32` along k, LSB first: `a` is `[m, k / 32]`
//! (row-major), `b` is `[n, k / 32]` (stored n-major, as weight planes are). Each tile of words
//! is loaded in a `u32` layout whose `view` as `u1` is the mma fragment.

use tilus_core::ir::{Expr, Program, ProgramBuilder};
use tilus_core::layout::{parse, Layout};
use tilus_core::DType;

fn l(s: &str) -> Layout {
    parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// The tiling of [`bmma_program`]: `wm x wn` warps, each with `fm x fn_` mma tiles of
/// `16 x 8`, `kt` tiles of 256 along k per step.
#[derive(Clone, Copy, Debug)]
pub struct Tiling {
    pub wm: usize,
    pub wn: usize,
    pub fm: usize,
    pub fn_: usize,
    pub kt: usize,
}

impl Tiling {
    pub fn bm(&self) -> usize {
        self.wm * self.fm * 16
    }
    pub fn bn(&self) -> usize {
        self.wn * self.fn_ * 8
    }
    pub fn bk(&self) -> usize {
        self.kt * 256
    }
    /// The u1 layouts `[a, b, c]` of one step's operands.
    pub fn bit_layouts(&self) -> [Layout; 3] {
        let Tiling {
            wm,
            wn,
            fm,
            fn_,
            kt,
        } = *self;
        [
            l(&format!(
                "reduce(spatial({wm},{wn}),[1]).local({fm},{kt}).mma_b1_a"
            )),
            l(&format!(
                "reduce(spatial({wm},{wn}),[0]).local({kt},{fn_}).mma_b1_b"
            )),
            l(&format!("spatial({wm},{wn}).local({fm},{fn_}).mma_b1_c")),
        ]
    }
    /// The `u32` layouts of the same registers: `a` words `[bm, bk / 32]`, `b` words
    /// `[bn, bk / 32]` (n-major).
    pub fn word_layouts(&self) -> [Layout; 2] {
        let Tiling {
            wm,
            wn,
            fm,
            fn_,
            kt,
        } = *self;
        [
            l(&format!(
                "reduce(spatial({wm},{wn}),[1]).local({fm},{kt}).column_local(2,2).spatial(8,4)"
            )),
            l(&format!(
                "reduce(column_spatial({wn},{wm}),[1]).column_local({fn_},{kt}).local(1,2).spatial(8,4)"
            )),
        ]
    }
}

impl Tiling {
    /// [`Tiling::bit_layouts`] with the paired fragments (`mma_b1_ap/bp/cp`).
    pub fn paired_bit_layouts(&self) -> [Layout; 3] {
        let Tiling {
            wm,
            wn,
            fm,
            fn_,
            kt,
        } = *self;
        [
            l(&format!(
                "reduce(spatial({wm},{wn}),[1]).local({fm},{kt}).mma_b1_ap"
            )),
            l(&format!(
                "reduce(spatial({wm},{wn}),[0]).local({kt},{fn_}).mma_b1_bp"
            )),
            l(&format!("spatial({wm},{wn}).local({fm},{fn_}).mma_b1_cp")),
        ]
    }
    /// [`Tiling::word_layouts`] for the paired fragments: two adjacent words per thread and row.
    pub fn paired_word_layouts(&self) -> [Layout; 2] {
        let Tiling {
            wm,
            wn,
            fm,
            fn_,
            kt,
        } = *self;
        [
            l(&format!(
                "reduce(spatial({wm},{wn}),[1]).local({fm},{kt}).spatial(8,4).local(2,2)"
            )),
            l(&format!(
                "reduce(column_spatial({wn},{wm}),[1]).column_local({fn_},{kt}).spatial(8,4).local(1,2)"
            )),
        ]
    }
}

/// `c[i, j] = init + Σ_k a[i, k] AND b[k, j]` for one `bm x bn` tile of an `m x n` product over
/// `k` (a runtime multiple of the tiling's `bk`), one block, a loop over k steps.
pub fn bmma_program(t: Tiling, init: i32) -> Program {
    bmma_program_with(t, init, false)
}

/// [`bmma_program`] on the paired fragments (8-byte loads and stores).
pub fn bmma_program_paired(t: Tiling, init: i32) -> Program {
    bmma_program_with(t, init, true)
}

fn bmma_program_with(t: Tiling, init: i32, paired: bool) -> Program {
    let name = if paired { "bmma_paired" } else { "bmma" };
    let mut b = ProgramBuilder::new(name, (t.wm * t.wn * 32) as u32);
    let k = b.param_i32("k");
    let pa = b.param_ptr("a", DType::UInt(32), false);
    let pb = b.param_ptr("b", DType::UInt(32), false);
    let pc = b.param_ptr("c", DType::Int(32), true);
    b.grid(vec![1.into()]);
    let (bm, bn, bkw) = (t.bm() as i32, t.bn() as i32, (t.bk() / 32) as i32);
    let kw = Expr::from(k) / 32;
    let ga = b.view_global("ga", pa, DType::UInt(32), vec![bm.into(), kw.clone()]);
    let gb = b.view_global("gb", pb, DType::UInt(32), vec![bn.into(), kw]);
    let gc = b.view_global("gc", pc, DType::Int(32), vec![bm.into(), bn.into()]);
    let ([la, lb, lc], [wa, wb]) = if paired {
        (t.paired_bit_layouts(), t.paired_word_layouts())
    } else {
        (t.bit_layouts(), t.word_layouts())
    };
    let acc = b.allocate_register("acc", DType::Int(32), lc, Some(init as f64));
    b.for_range("kb", 0.into(), Expr::from(k) / t.bk() as i32, |b, kb| {
        let off = Expr::from(kb) * bkw;
        let xa = b.load_global("xa", ga, wa.clone(), vec![0.into(), off.clone()]);
        let xb = b.load_global("xb", gb, wb.clone(), vec![0.into(), off]);
        let ra = b.view("ra", xa, DType::UInt(1), la.clone());
        let rb = b.view("rb", xb, DType::UInt(1), lb.clone());
        b.dot(acc, ra, rb, acc);
    });
    b.store_global(acc, gc, vec![0.into(), 0.into()]);
    b.finish()
}

/// The reference: `init + Σ_k bit(a, i, k) & bit(b, j, k)` over `[m, k / 32]` and `[n, k / 32]`
/// words, row-major `[m, n]`.
pub fn bmma_reference(a: &[u32], b: &[u32], m: usize, n: usize, k: usize, init: i32) -> Vec<i32> {
    let kw = k / 32;
    let mut c = vec![0i32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = init as i64;
            for w in 0..kw {
                s += (a[i * kw + w] & b[j * kw + w]).count_ones() as i64;
            }
            c[i * n + j] = s as i32;
        }
    }
    c
}
