//! `#[kernel]` spellings of the math family: `exp`/`gelu`/... calls, comparison operators on
//! tensors into masks, `select` (and its `where_` spelling), `arange`, `!`, the bit operators
//! `& | ^ << >>`, and `load_global` with a fill value; each kernel against an f64 reference
//! through the interpreter on fresh random inputs.

use rand::Rng;

/// Row tiles of `x[m, n]` with a ragged tail: columns at or past `n - 3` become `-1`, the
/// others `exp(x)`; elements outside the view read as `-inf` (so `exp` gives 0 there, never
/// seen since the store is masked too); the second output is `-exp(x)` on the dropped
/// columns and `gelu` of the first output on the kept ones (`gelu(-inf)` would be NaN, an
/// error).
#[tilus::kernel(grid = [cdiv(m, 4), cdiv(n, 32)], warps = 1)]
pub fn masked_exp(m: i32, n: i32, x: Global<f32>, y: GlobalMut<f32>, g: GlobalMut<f32>) {
    let [bi, bj] = block_indices();
    let gx = view_global(x, [m, n]);
    let gy = view_global(y, [m, n]);
    let gg = view_global(g, [m, n]);
    let tile = layout!(spatial(4, 8).local(1, 4));
    let t = load_global(gx, tile, [bi * 4, bj * 32], f32::NEG_INFINITY);
    let idx = arange(tile, 1, bj * 32);
    let keep = idx < n - 3;
    let e = exp(t);
    let z = select(keep, e, -1.0);
    store_global(z, gy, [bi * 4, bj * 32]);
    let drop = ge(idx, n - 3);
    let h = where_(drop, -1.0 * e, gelu(z));
    store_global(h, gg, [bi * 4, bj * 32]);
}

/// Integer bit manipulation with the Rust operators and the named forms.
#[tilus::kernel(grid = [cdiv(n, 32)], warps = 1)]
pub fn bits(n: i32, a: Global<i32>, b: Global<i32>, out: GlobalMut<i32>, cnt: GlobalMut<i32>) {
    let [bi] = block_indices();
    let ga = view_global(a, [n]);
    let gb = view_global(b, [n]);
    let go = view_global(out, [n]);
    let gc = view_global(cnt, [n]);
    let l = layout!(spatial(32));
    let x = load_global(ga, l, [bi * 32]);
    let y = load_global(gb, l, [bi * 32]);
    let k = (x & y) ^ (x << 3) | (y >> 2);
    let k = xor(k, !x);
    store_global(k, go, [bi * 32]);
    let c = popc(shr(x, 1));
    store_global(c, gc, [bi * 32]);
}

/// `x << s` of a run-time amount.
#[tilus::kernel(grid = [1], warps = 1)]
pub fn shift_by(x: i32, s: i32, out: GlobalMut<i32>) {
    let go = view_global(out, [32]);
    store_global(register::<i32>(layout!(spatial(32)), 0) + (x << s), go, [0]);
}

#[test]
fn scalar_shifts_out_of_range_are_errors() {
    let mut out = vec![0i32; 32];
    shift_by::interpret(&shift_by::SPACE[0], 3, 4, &mut out).unwrap();
    assert!(out.iter().all(|&v| v == 48), "{out:?}");
    // C leaves these undefined; the interpreter names them.
    for (x, s, what) in [
        (1, 32, "shift amount"),
        (1, -1, "shift amount"),
        (1 << 30, 2, "overflow"),
    ] {
        let err = shift_by::interpret(&shift_by::SPACE[0], x, s, &mut out).unwrap_err();
        assert!(err.to_string().contains(what), "{x} << {s}: {err}");
    }
}

#[test]
fn masked_exp_interprets() {
    let mut rng = rand::rng();
    // The last 3 columns masked; `n` a multiple of 4, as the generated code's loads need.
    let (m, n) = (7usize, 44usize);
    let x: Vec<f32> = (0..m * n).map(|_| rng.random_range(-3.0..3.0)).collect();
    let mut y = vec![f32::NAN; m * n];
    let mut g = vec![f32::NAN; m * n];
    masked_exp::interpret(
        &masked_exp::SPACE[0],
        m as i32,
        n as i32,
        &x,
        &mut y,
        &mut g,
    )
    .unwrap();
    let c = (2.0 / std::f64::consts::PI).sqrt();
    for r in 0..m {
        for col in 0..n {
            let v = x[r * n + col] as f64;
            let i = r * n + col;
            let kept = col + 3 < n;
            let want = if kept { v.exp() as f32 } else { -1.0 };
            assert_eq!(y[i], want, "y[{r}, {col}]");
            let z = y[i] as f64;
            let gelu = 0.5 * z * (1.0 + (c * (z + 0.044715 * z * z * z)).tanh());
            let want = if kept { gelu as f32 } else { -(v.exp() as f32) };
            assert_eq!(g[i], want, "g[{r}, {col}] at x = {v}");
        }
    }
}

#[test]
fn bits_interprets() {
    let mut rng = rand::rng();
    let n = 100;
    let a: Vec<i32> = (0..n).map(|_| rng.random()).collect();
    let b: Vec<i32> = (0..n).map(|_| rng.random()).collect();
    let mut out = vec![0i32; n];
    let mut cnt = vec![-1i32; n];
    bits::interpret(&bits::SPACE[0], n as i32, &a, &b, &mut out, &mut cnt).unwrap();
    for i in 0..n {
        let (x, y) = (a[i], b[i]);
        // Rust's precedence: `<<`/`>>` bind tighter than `&`, then `^`, then `|`.
        let k = ((x & y) ^ x.wrapping_shl(3)) | (y >> 2);
        assert_eq!(out[i], k ^ !x, "at {i}: {x} {y}");
        assert_eq!(cnt[i], (x >> 1).count_ones() as i32, "popc at {i}");
    }
}

#[test]
fn programs_print_the_instruction_names() {
    let p = masked_exp::program(&masked_exp::SPACE[0])
        .unwrap()
        .to_string();
    for needle in [
        "arange(",
        "= lt(idx",
        "= exp(t)",
        "= select(",
        "= ge(idx",
        "= gelu(z)",
        "-inf)",
    ] {
        assert!(p.contains(needle), "`{needle}` not in\n{p}");
    }
    let p = bits::program(&bits::SPACE[0]).unwrap().to_string();
    for needle in [
        "= and(x, y)",
        "= shl(x, 3)",
        "= shr(y, 2)",
        "= or(",
        "= not(x)",
        "= popc(",
    ] {
        assert!(p.contains(needle), "`{needle}` not in\n{p}");
    }
}
