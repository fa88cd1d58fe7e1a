//! Kernels that exercise the language beyond tensor instructions: `f32` scalar parameters and
//! arithmetic, float constants computed from tile parameters, stepped and unrolled loops, and
//! reassigning a tensor variable. Shared by `macro_language.rs` (interpreter) and `macro_gpu.rs`.

/// `y = x * (2 * scale + n / 1024) + 1 / BLOCK`: an `f32` parameter, a run-time `f32`
/// expression with `as f32`, and a constant folded from a tile parameter.
#[tilus::kernel(grid = [cdiv(n, BLOCK)], warps = 1, space(BLOCK = [32, 64]))]
pub fn scale_shift<const BLOCK: i32>(n: i32, scale: f32, x: Global<f32>, y: GlobalMut<f32>) {
    let [bi] = block_indices();
    let gx = view_global(x, [n]);
    let gy = view_global(y, [n]);
    let r = load_global(gx, layout!(local(BLOCK / 32).spatial(32)), [bi * BLOCK]);
    let s = scale * 2.0 + (n as f32) / 1024.0;
    let mut acc = r * s;
    acc = acc + 1.0 / BLOCK;
    store_global(acc, gy, [bi * BLOCK]);
}

/// The elementwise maximum of a row's chunks of `CH` columns: a stepped, unrolled loop that
/// reassigns a tensor variable (`best = m`). Columns past `cols` read as 0 (masked loads).
#[tilus::kernel(grid = [rows], warps = 1, space(CH = [32, 64]))]
pub fn chunk_max<const CH: i32>(rows: i32, cols: i32, x: Global<f32>, y: GlobalMut<f32>) {
    let [r] = block_indices();
    let gx = view_global(x, [rows, cols]);
    let gy = view_global(y, [rows, CH]);
    let tile = layout!(local(1, CH / 32).spatial(1, 32));
    let mut best = load_global(gx, tile, [r, 0]);
    #[unroll(2)]
    for c in (CH..cols).step_by(CH) {
        let chunk = load_global(gx, tile, [r, c]);
        let m = max(best, chunk);
        best = m;
    }
    store_global(best, gy, [r, 0]);
}

/// Helper functions: `affine` is called twice (inlined each time), `order` returns two tensors
/// (destructured by `let` and by assignment), and a helper calls another.
#[tilus::kernel(grid = [cdiv(n, 64)], warps = 2)]
pub fn helpers(n: i32, s: f32, x: Global<f32>, hi: GlobalMut<f32>, lo: GlobalMut<f32>) {
    fn affine(t: Tensor, scale: f32, shift: _) -> Tensor {
        let u = t * scale;
        u + shift
    }
    fn order(a: Tensor, b: Tensor) -> (Tensor, Tensor) {
        (max(a, b), min(a, b))
    }
    fn spread(t: Tensor, scale: f32) -> (Tensor, Tensor) {
        let up = affine(t, scale, 1.0);
        order(up, t)
    }
    let [bi] = block_indices();
    let tile = layout!(spatial(64));
    let r = load_global(view_global(x, [n]), tile, [bi * 64]);
    let (mut a, mut b) = spread(r, s);
    (a, b) = order(affine(a, 0.5, -1.0), b);
    store_global(a, view_global(hi, [n]), [bi * 64]);
    store_global(b, view_global(lo, [n]), [bi * 64]);
}

/// Helpers shared by two kernels (`#[tilus::helpers]`): `clamp_store` reads its kernel's `n`,
/// `y` and tile parameter `B`, and calls the other shared helper, `bounded`; each kernel also
/// has a helper of its own.
#[tilus::helpers]
pub mod shared {
    /// `t` clamped to `[-limit, limit]`.
    #[helper]
    fn bounded(t: Tensor, limit: f32) -> Tensor {
        max(min(t, limit), -limit)
    }
    /// Store block `bi`'s tile of `t`, clamped, to `y`.
    #[helper]
    fn clamp_store(t: Tensor, bi: i32, limit: f32) {
        store_global(bounded(t, limit), view_global(y, [n]), [bi * B]);
    }

    /// `y = clamp(x * s, ±limit)`.
    #[tilus::kernel(grid = [cdiv(n, B)], warps = 1, space(B = [32, 64]))]
    pub fn scaled<const B: i32>(n: i32, s: f32, limit: f32, x: Global<f32>, y: GlobalMut<f32>) {
        let [bi] = block_indices();
        let r = load_global(
            view_global(x, [n]),
            layout!(local(B / 32).spatial(32)),
            [bi * B],
        );
        clamp_store(r * s, bi, limit);
    }

    /// `y = clamp(x + a, ±limit)`.
    #[tilus::kernel(grid = [cdiv(n, B)], warps = 1, space(B = [32]))]
    pub fn shifted<const B: i32>(n: i32, a: f32, limit: f32, x: Global<f32>, y: GlobalMut<f32>) {
        fn shift(t: Tensor, by: f32) -> Tensor {
            t + by
        }
        let [bi] = block_indices();
        let r = load_global(view_global(x, [n]), layout!(spatial(B)), [bi * B]);
        clamp_store(shift(r, a), bi, limit);
    }
}

/// Scalar operands: an `i32` added to an `i32` tensor exactly (also past 2^24), and an `f32`
/// parameter compared with and selected into an `f32` tensor (`min(x, t)` spelled with a mask).
#[tilus::kernel(grid = [cdiv(n, 32)], warps = 1)]
pub fn scalar_operands(
    n: i32,
    big: i32,
    t: f32,
    xi: Global<i32>,
    xf: Global<f32>,
    yi: GlobalMut<i32>,
    yf: GlobalMut<f32>,
) {
    let [bi] = block_indices();
    let tile = layout!(spatial(32));
    let a = load_global(view_global(xi, [n]), tile, [bi * 32]);
    store_global(a + big, view_global(yi, [n]), [bi * 32]);
    let f = load_global(view_global(xf, [n]), tile, [bi * 32]);
    let below = lt(f, t);
    store_global(select(below, f, t), view_global(yf, [n]), [bi * 32]);
}

/// A `bool` parameter steering a run-time branch: `y = -x` or `y = x`.
#[tilus::kernel(grid = [cdiv(n, 32)], warps = 1)]
pub fn flagged(n: i32, negate: bool, x: Global<f32>, y: GlobalMut<f32>) {
    let [bi] = block_indices();
    let tile = layout!(spatial(32));
    let r = load_global(view_global(x, [n]), tile, [bi * 32]);
    if negate && n > 0 {
        store_global(-r, view_global(y, [n]), [bi * 32]);
    } else {
        store_global(r, view_global(y, [n]), [bi * 32]);
    }
}

/// Closures: `axpy` captures the view `gx`, the layout `tile` and the mutable accumulator `acc`,
/// which its body updates in place; `scaled` takes a tensor and returns one; a closure is
/// called in a loop and from a const branch. `bonus` exists in one configuration only.
#[tilus::kernel(grid = [cdiv(n, 32)], warps = 1, space(REPS = [1, 3]))]
pub fn closures<const REPS: i32>(n: i32, s: f32, x: Global<f32>, y: GlobalMut<f32>) {
    let [bi] = block_indices();
    let tile = layout!(spatial(32));
    let gx = view_global(x, [n]);
    let mut acc = register::<f32>(tile, 0.0);
    let scaled = |t: Tensor, by| t * by;
    let axpy = |rep: i32| {
        let r = load_global(gx, tile, [bi * 32]);
        acc = mul_add(scaled(r, s), r, acc);
        acc += rep;
    };
    for rep in 0..REPS {
        axpy(rep);
    }
    // Present only where the constant condition holds (`()` otherwise), used under it.
    let bonus = if REPS > 1 {
        register::<f32>(tile, 0.5)
    } else {
        ()
    };
    if REPS > 1 {
        axpy(100);
        acc += bonus;
    }
    store_global(acc, view_global(y, [n]), [bi * 32]);
}

/// An `if` that ends a block is a statement when its branches end in statements, as in Rust:
/// closures whose bodies end in an `if` without `else` (a run-time condition), a constant
/// branch ending in an `if`/`else` of statements, and a helper ending in an `if`/`else` whose
/// branches end in a loop and in an `if`. Odd blocks store `2x` (`TWICE = 1`) or `3x`, even
/// blocks `x + t`.
#[tilus::kernel(grid = [cdiv(n, 32)], warps = 1, space(TWICE = [0, 1]))]
pub fn tail_ifs<const TWICE: i32>(n: i32, t: f32, x: Global<f32>, y: GlobalMut<f32>) {
    fn thrice_or_shift(v: Tensor, bi: i32, shift: f32) {
        let gy = view_global(y, [n]);
        if bi % 2 == 1 {
            for _ in 0..1 {
                store_global(v * 3.0, gy, [bi * 32]);
            }
        } else {
            if bi >= 0 {
                store_global(v + shift, gy, [bi * 32]);
            }
        }
    }
    let [bi] = block_indices();
    let tile = layout!(spatial(32));
    let gy = view_global(y, [n]);
    let r = load_global(view_global(x, [n]), tile, [bi * 32]);
    let odd = |v: Tensor| {
        if bi % 2 == 1 {
            store_global(v * 2.0, gy, [bi * 32]);
        }
    };
    let even = |v: Tensor| {
        if bi % 2 == 0 {
            store_global(v + t, gy, [bi * 32]);
        }
    };
    if TWICE == 1 {
        odd(r);
        even(r);
    } else {
        if bi % 4 < 2 {
            if bi % 2 == 1 {
                store_global(r * 3.0, gy, [bi * 32]);
            } else {
                even(r);
            }
        } else {
            thrice_or_shift(r, bi, t);
        }
    }
}

/// `#[unroll]` over constant bounds is written out by the translator (each copy sees its index
/// as a constant); a loop over an empty constant range emits nothing.
#[tilus::kernel(grid = [cdiv(n, 32)], warps = 1, space(COPIES = [0, 3]))]
pub fn unrolled<const COPIES: i32>(n: i32, x: Global<f32>, y: GlobalMut<f32>) {
    let [bi] = block_indices();
    let tile = layout!(spatial(32));
    let mut acc = load_global(view_global(x, [n]), tile, [bi * 32]);
    #[unroll]
    for i in 0..COPIES {
        acc = acc * 2.0 + i;
    }
    for _ in COPIES..COPIES {
        acc = acc * 0.0;
    }
    store_global(acc, view_global(y, [n]), [bi * 32]);
}

/// `i64` scalars as global offsets: 32 elements from flat element `start + 32 * bi` (an `i64`:
/// `i64 + i32` promotes) of a `[rows, cols]` view, addressed as `[at / cols, at % cols]` with
/// `i64` offsets, once by `load_global` and once through shared memory by `copy_async`. Blocks
/// whose tile passes the view's end (`i64` comparison with `rows as i64 * cols`) add 1.
#[tilus::kernel(grid = [cdiv(n, 32)], warps = 1)]
pub fn wide_offsets(
    rows: i32,
    cols: i32,
    n: i32,
    start: i64,
    x: Global<f32>,
    y: GlobalMut<f32>,
    z: GlobalMut<f32>,
) {
    let [bi] = block_indices();
    let gx = view_global(x, [rows, cols]);
    let tile = layout!(spatial(1, 32));
    let at = start + bi * 32;
    let total = rows as i64 * cols;
    let r = load_global(gx, tile, [at / cols, at % cols]);
    let s = shared::<f32>([1, 32]);
    copy_async(gx, s, [at / cols, at % cols]);
    commit_group();
    wait_group(0);
    sync();
    let q = load_shared(s, tile, [0, 0]);
    if at + 32i64 <= total {
        store_global(r, view_global(y, [1, n]), [0, bi * 32]);
        store_global(q, view_global(z, [1, n]), [0, bi * 32]);
    } else {
        store_global(r + 1.0, view_global(y, [1, n]), [0, bi * 32]);
        store_global(q + 1.0, view_global(z, [1, n]), [0, bi * 32]);
    }
}

/// `i64` arithmetic and narrowing: `y = x + (v * k / 2) as i32`. `v * k` is checked in 64
/// bits and the narrowing is checked against the i32 range (both errors in the interpreter).
#[tilus::kernel(grid = [1], warps = 1)]
pub fn narrow_wide(v: i64, k: i32, x: Global<i32>, y: GlobalMut<i32>) {
    let tile = layout!(spatial(32));
    let t = load_global(view_global(x, [32]), tile, [0]);
    let w = v * k;
    let s = (w / 2) as i32;
    store_global(t + s, view_global(y, [32]), [0]);
}

/// Blocks as values: a constant `if` whose taken branch holds statements before its value (a
/// scalar, or a tuple whose `()` items are absent names), a statement-only constant `if` as a
/// closure's tail, and a plain block value.
#[tilus::kernel(grid = [cdiv(n, 32)], warps = 1, space(MODE = [0, 1]))]
pub fn block_values<const MODE: i32>(n: i32, x: Global<f32>, y: GlobalMut<f32>) {
    let [bi] = block_indices();
    let tile = layout!(spatial(32));
    let gy = view_global(y, [n]);
    let base = if MODE == 1 {
        let k = bi * 2;
        k + 3
    } else {
        7
    };
    let (r, extra) = if MODE == 1 {
        let r = load_global(view_global(x, [n]), tile, [bi * 32]);
        (r, register::<f32>(tile, 0.25))
    } else {
        (load_global(view_global(x, [n]), tile, [bi * 32]), ())
    };
    let shifted = {
        let one = register::<f32>(tile, 1.0);
        r + one
    };
    let put = |t: Tensor| {
        if MODE == 1 {
            store_global(t + extra, gy, [bi * 32]);
        } else {
            store_global(t, gy, [bi * 32]);
        }
    };
    put(shifted * (base as f32));
}

/// `c = a · b` (f16 in, f32 out) on the run fragments (`mma_a_k4`/`mma_b_k4` for `R = 4`,
/// `mma_a_k8`/`mma_b_k8` for `R = 8`): each thread loads `R` consecutive k of a row of `a` and
/// of a column of `b` (stored n-major, `bt [16, k]`), the mma on k permuted. 32 x 16 outputs,
/// two warps along m, two fragments of k per step.
#[tilus::kernel(grid = [1], warps = 2, space(R = [4, 8]))]
pub fn run_mma<const R: i32>(k: i32, a: Global<f16>, bt: Global<f16>, c: GlobalMut<f32>) {
    let la = if R == 4 {
        layout!(spatial(2, 1).local(1, 2).mma_a_k4)
    } else {
        layout!(spatial(2, 1).local(1, 2).mma_a_k8)
    };
    // B's runs are rows of the n-major `bt`: loaded as `[16, 8 R]` and viewed as `[8 R, 16]`,
    // the same registers in the same order.
    let lbt = layout!(spatial(1, 1)
        .replicated(2)
        .column_local(2, 2)
        .spatial(8, 4)
        .local(1, R));
    let lb = if R == 4 {
        layout!(spatial(1, 1).replicated(2).local(2, 2).mma_b_k4)
    } else {
        layout!(spatial(1, 1).replicated(2).local(2, 2).mma_b_k8)
    };
    let lc = layout!(spatial(2, 1).local(1, 2).mma_c);
    let ga = view_global(a, [32, k]);
    let gb = view_global(bt, [16, k]);
    let mut acc = register::<f32>(lc, 0.0);
    for kt in 0..k / (8 * R) {
        let ta = load_global(ga, la, [0, kt * 8 * R]);
        let tb = view::<f16>(load_global(gb, lbt, [0, kt * 8 * R]), lb);
        acc = dot(ta, tb, acc);
    }
    store_global(acc, view_global(c, [32, 16]), [0, 0]);
}

/// `c = a · btᵀ` on OCP fp8 e4m3 codes (`mma.sync.m16n8k32`, sm_90): `a [32, k]` and the
/// n-major `bt [16, k]` are bytes, loaded in the fp8 fragments and viewed as `f8e4m3`; two warps
/// along m, two n tiles, one k32 fragment per step.
#[tilus::kernel(grid = [1], warps = 2, target = sm90)]
pub fn fp8_mma(k: i32, a: Global<u8>, bt: Global<u8>, c: GlobalMut<f32>) {
    let la = layout!(spatial(2, 1).mma_a_f8);
    // B as the mma.m16n8k32 fragment of each n tile: `bt`'s rows, viewed as columns.
    let lbt = layout!(spatial(1, 1).replicated(2).local(2, 1).mma_b_f8_t);
    let lb = layout!(spatial(1, 1).replicated(2).local(1, 2).mma_b_f8);
    let lc = layout!(spatial(2, 1).local(1, 2).mma_c);
    let ga = view_global(a, [32, k]);
    let gb = view_global(bt, [16, k]);
    let mut acc = register::<f32>(lc, 0.0);
    for kt in 0..k / 32 {
        let ta = view::<f8e4m3>(load_global(ga, la, [0, kt * 32]), la);
        let tb = view::<f8e4m3>(load_global(gb, lbt, [0, kt * 32]), lb);
        acc = dot(ta, tb, acc);
    }
    store_global(acc, view_global(c, [32, 16]), [0, 0]);
}

/// Random e4m3 codes of `a [32, k]` and `bt [16, k]` and the f64 product `a · btᵀ`: with
/// `tiny`, `a` holds subnormals (`c · 2^-9`, the codes of the fp8 gemv's weights) and `bt`
/// integers; otherwise both hold integers in -8..=8, whose products and sums are exact.
pub fn fp8_mma_case(k: usize, tiny: bool) -> (Vec<u8>, Vec<u8>, Vec<f64>) {
    use rand::Rng;
    let mut rng = rand::rng();
    let e4m3 = tilus::DType::F8E4M3;
    let int_code = |rng: &mut rand::rngs::ThreadRng| {
        let v = rng.random_range(-8..=8) as f32;
        e4m3.encode(v).unwrap() as u8
    };
    let a: Vec<u8> = (0..32 * k)
        .map(|_| {
            if tiny {
                rng.random_range(0u8..16)
            } else {
                int_code(&mut rng)
            }
        })
        .collect();
    let bt: Vec<u8> = (0..16 * k).map(|_| int_code(&mut rng)).collect();
    let dec = |c: u8| e4m3.decode(c as u32);
    let mut c = vec![0f64; 32 * 16];
    for i in 0..32 {
        for j in 0..16 {
            c[i * 16 + j] = (0..k)
                .map(|kk| dec(a[i * k + kk]) * dec(bt[j * k + kk]))
                .sum();
        }
    }
    (a, bt, c)
}

/// `c = seed + a · btᵀ` on 8-bit integers of either signedness each (`mma.sync.m16n8k32
/// .s32.A.B`): the bytes of `a [32, k]` and the n-major `bt [16, k]` are loaded in the 8-bit
/// k32 fragments and viewed as `A` and `B`; two warps along m, two n tiles, one k32 fragment per
/// step. The accumulator starts at `0x4B400000` (the f32 bits of 1.5 · 2^23, the seed that makes
/// an i32 sum its own f32), so the instruction's accumulate is checked too.
#[tilus::kernel(grid = [1], warps = 2, dtypes(A = [u8, i8], B = [i8, u8]))]
pub fn int8_mma<A: DTypeParam, B: DTypeParam>(
    k: i32,
    a: Global<u8>,
    bt: Global<u8>,
    c: GlobalMut<i32>,
) {
    let la = layout!(spatial(2, 1).mma_a_f8);
    let lbt = layout!(spatial(1, 1).replicated(2).local(2, 1).mma_b_f8_t);
    let lb = layout!(spatial(1, 1).replicated(2).local(1, 2).mma_b_f8);
    let lc = layout!(spatial(2, 1).local(1, 2).mma_c);
    let ga = view_global(a, [32, k]);
    let gb = view_global(bt, [16, k]);
    let mut acc = register::<i32>(lc, 0x4B400000);
    for kt in 0..k / 32 {
        let ta = view::<A>(load_global(ga, la, [0, kt * 32]), la);
        let tb = view::<B>(load_global(gb, lbt, [0, kt * 32]), lb);
        acc = dot(ta, tb, acc);
    }
    store_global(acc, view_global(c, [32, 16]), [0, 0]);
}

/// Random bytes of `a [32, k]` and `bt [16, k]` and the exact product `0x4B400000 + a · btᵀ`,
/// each operand read as i8 where `signed` says so and as u8 otherwise.
pub fn int8_mma_case(k: usize, signed: (bool, bool)) -> (Vec<u8>, Vec<u8>, Vec<i64>) {
    use rand::Rng;
    let mut rng = rand::rng();
    let a: Vec<u8> = (0..32 * k).map(|_| rng.random()).collect();
    let bt: Vec<u8> = (0..16 * k).map(|_| rng.random()).collect();
    let val = |b: u8, s: bool| if s { b as i8 as i64 } else { b as i64 };
    let mut c = vec![0i64; 32 * 16];
    for i in 0..32 {
        for j in 0..16 {
            c[i * 16 + j] = 0x4B40_0000
                + (0..k)
                    .map(|kk| val(a[i * k + kk], signed.0) * val(bt[j * k + kk], signed.1))
                    .sum::<i64>();
        }
    }
    (a, bt, c)
}

/// The batched `dot`: `c[i] = a[i] · b[i]` for `i` in `0..4`, each warp its own product
/// (`spatial(4, 1, 1)` over the batch dimension: warps do not share operands). `a [4, 16, k]`,
/// `b [4, k, 16]` (f16), `c [4, 16, 16]` (f32). `TL = 1` computes the same with thread-local
/// FMAs (each thread a row of its warp's product) instead of the mma.
#[tilus::kernel(grid = [1], warps = 4, space(TL = [0, 1]))]
pub fn batched_mma<const TL: i32>(k: i32, a: Global<f16>, b: Global<f16>, c: GlobalMut<f32>) {
    let (la, lb, lc) = if TL == 0 {
        (
            layout!(spatial(4, 1, 1).local(1, 1, 2).mma_a),
            layout!(spatial(4, 1, 1).local(1, 2, 2).mma_b),
            layout!(spatial(4, 1, 1).local(1, 1, 2).mma_c),
        )
    } else {
        (
            layout!(spatial(4, 16, 1).replicated(2).local(1, 1, 32)),
            layout!(spatial(4, 1, 1).replicated(32).local(1, 32, 16)),
            layout!(spatial(4, 16, 1).replicated(2).local(1, 1, 16)),
        )
    };
    let ga = view_global(a, [4, 16, k]);
    let gb = view_global(b, [4, k, 16]);
    let mut acc = register::<f32>(lc, 0.0);
    for kt in 0..k / 32 {
        let ta = load_global(ga, la, [0, 0, kt * 32]);
        let tb = load_global(gb, lb, [0, kt * 32, 0]);
        acc = dot(ta, tb, acc);
    }
    store_global(acc, view_global(c, [4, 16, 16]), [0, 0, 0]);
}

/// `y = x & ((1 << BITS) - 1) | (0xF0 >> 4 ^ 1) << BITS`: bit operators on integer constants,
/// folded when the kernel is compiled (a mask of `BITS` ones, and a constant shifted past it),
/// applied to an integer tensor.
#[tilus::kernel(grid = [cdiv(n, 32)], warps = 1, space(BITS = [3, 7]))]
pub fn constant_bits<const BITS: i32>(n: i32, x: Global<i32>, y: GlobalMut<i32>) {
    let [b] = block_indices();
    let mask = (1 << BITS) - 1;
    let high = (0xF0 >> 4 ^ 1) << BITS;
    let l = layout!(spatial(32));
    let v = load_global(view_global(x, [n]), l, [b * 32]);
    let keep = register::<i32>(l, mask);
    let add = register::<i32>(l, high);
    store_global((v & keep) | add, view_global(y, [n]), [b * 32]);
}

/// The bit operators on run-time scalars: a block's parity and a parameter's fields, mixed
/// with an `i64` (which `&` promotes to and shifts do not).
#[tilus::kernel(grid = [cdiv(n, 32)], warps = 1)]
pub fn scalar_bits(n: i32, s: i32, w: i64, out: GlobalMut<i32>) {
    let [bi] = block_indices();
    let go = view_global(out, [n]);
    let l = layout!(spatial(32));
    let parity = bi & 1;
    let field = (s >> 4) & 15;
    let mixed = ((w & 0xFF) | (bi << 8)) ^ 5;
    let shifted = 3 << (s & 7);
    let v = parity + field * 2 + (mixed as i32) * 64 + shifted * 1_000_000;
    store_global(register::<i32>(l, 0) + v, go, [bi * 32]);
}

/// What [`scalar_bits`] writes, computed on the host in `i64`.
pub fn scalar_bits_reference(n: usize, s: i32, w: i64) -> Vec<i32> {
    (0..n)
        .map(|i| {
            let bi = (i / 32) as i64;
            let mixed = ((w & 0xFF) | (bi << 8)) ^ 5;
            let v =
                (bi & 1) + ((s as i64 >> 4) & 15) * 2 + mixed * 64 + (3i64 << (s & 7)) * 1_000_000;
            v as i32
        })
        .collect()
}

/// The prelude's `grouped_tile`, called without a declaration: block `pid` writes the index
/// `bi * cols + bj` of its tile 32 times from `pid * 32`.
#[tilus::kernel(grid = [rows * cols], warps = 1)]
pub fn tile_order(rows: i32, cols: i32, group: i32, out: GlobalMut<i32>) {
    let [pid] = block_indices();
    let (bi, bj) = grouped_tile(pid, rows, cols, group);
    let tile = layout!(spatial(32));
    let at = register::<i32>(tile, 0) + (bi * cols + bj);
    store_global(at, view_global(out, [rows * cols * 32]), [pid * 32]);
}

/// A kernel's own `grouped_tile` (column-major tiles, `group` unused) replaces the prelude's.
#[tilus::kernel(grid = [rows * cols], warps = 1)]
pub fn own_tile_order(rows: i32, cols: i32, group: i32, out: GlobalMut<i32>) {
    fn grouped_tile(pid: i32, rows: i32, cols: i32, group: i32) -> (i32, i32) {
        (pid % rows, pid / rows)
    }
    let [pid] = block_indices();
    let (bi, bj) = grouped_tile(pid, rows, cols, group);
    let tile = layout!(spatial(32));
    let at = register::<i32>(tile, 0) + (bi * cols + bj);
    store_global(at, view_global(out, [rows * cols * 32]), [pid * 32]);
}

/// A `copy_async` of rows of `3 x f16` (6 bytes, no 4-byte chunk divides them): the code is a
/// synchronous element copy, and the generated kernel says so in its notes. `y = x` through
/// shared memory, one row a thread.
#[tilus::kernel(grid = [1], warps = 1)]
pub fn odd_rows(x: Global<f16>, y: GlobalMut<f16>) {
    let gx = view_global(x, [32, 3]);
    let s = shared::<f16>([32, 3]);
    copy_async(gx, s, [0, 0]);
    commit_group();
    wait_group(0);
    sync();
    let tile = layout!(spatial(32, 1).local(1, 3));
    let t = load_shared(s, tile, [0, 0]);
    store_global(t, view_global(y, [32, 3]), [0, 0]);
}

/// `let b = a;` of a register tensor where either is mutable is a copy, as in Rust: `out[0..32]
/// = x` (the value `a` had), `out[32..64] = x + 1` (`a` after `a = a + 1`), `out[64..96] =
/// 2 (x + 1)` (`c = a` then `c = c * 2`, leaving `a`), `out[96..128] = x + 1` (`a` again).
#[tilus::kernel(grid = [1], warps = 1)]
pub fn let_copies(x: Global<i32>, out: GlobalMut<i32>) {
    let l = layout!(spatial(32));
    let go = view_global(out, [128]);
    let mut a = load_global(view_global(x, [32]), l, [0]);
    let b = a;
    a = a + 1;
    let mut c = a;
    c = c * 2;
    store_global(b, go, [0]);
    store_global(a, go, [32]);
    store_global(c, go, [64]);
    store_global(a, go, [96]);
}
