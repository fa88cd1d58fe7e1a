//! `plane_dot(w, a, dim)`, the dot product of bit planes, written with `#[kernel]`: a row-wise
//! bit-serial product `y[r] = Σ_j (Σ_p 2^p w_p[r, j]) (Σ_q 2^q a_q[j])` over bits, against an
//! exact host reference, on the interpreter, through NVRTC and ptxas (the carry-save code it
//! emits), and on a GPU when there is one.
//!
//! Run: `cargo test --test macro_plane_dot -- --nocapture`.

mod common;

use common::skip;
use rand::Rng;

/// Each block takes 2·64 rows; thread `t` holds rows `t` and `t + 64` (every plane) and `V`
/// consecutive words of each chunk, and sums chunk after chunk with `plane_dot`; the
/// activation planes are replicated over the threads.
#[tilus::kernel(
    grid = [cdiv(n, 128)],
    warps = 2,
    space(P = [1, 2, 3], Q = [1, 2, 4], V = [1, 4])
)]
pub fn rows_plane_dot<const P: i32, const Q: i32, const V: i32>(
    n: i32,
    kw: i32,
    w: Global<u32>,
    a: Global<u32>,
    y: GlobalMut<i32>,
) {
    let [bi] = block_indices();
    let gw = view_global(w, [P, n, kw]);
    let ga = view_global(a, [Q, 1, kw]);
    let lw = layout!(local(P, 2, 1).spatial(1, 64, 1).local(1, 1, V));
    let la = layout!(local(Q, 1, 1).replicated(64).local(1, 1, V));
    let mut acc = register::<i32>(layout!(local(1, 2, 1).spatial(1, 64, 1)), 0);
    for c in 0..cdiv(kw, V) {
        let wt = load_global(gw, lw, [0, bi * 128, c * V]);
        let at = load_global(ga, la, [0, 0, c * V]);
        acc = acc + plane_dot(wt, at, 2);
    }
    store_global(acc, view_global(y, [1, n, 1]), [0, bi * 128, 0]);
}

/// The exact reference: `y[r] = Σ_{p, q, j} popc(w[p, r, j] & a[q, j]) << (p + q)`.
fn reference(p: usize, q: usize, n: usize, kw: usize, w: &[u32], a: &[u32]) -> Vec<i32> {
    (0..n)
        .map(|r| {
            let mut s: i64 = 0;
            for pp in 0..p {
                for qq in 0..q {
                    for j in 0..kw {
                        let x = w[(pp * n + r) * kw + j] & a[qq * kw + j];
                        s += (x.count_ones() as i64) << (pp + qq);
                    }
                }
            }
            s as i32
        })
        .collect()
}

fn random_words(rng: &mut impl Rng, len: usize) -> Vec<u32> {
    (0..len).map(|_| rng.random()).collect()
}

#[test]
fn plane_dot_interprets_every_width() {
    let mut rng = rand::rng();
    // A ragged row count (masked rows); the words a multiple of 4, as the GPU's 4-word loads
    // need (the next test).
    let (n, kw) = (200, 12);
    for cfg in rows_plane_dot::SPACE {
        let (p, q) = (cfg.P as usize, cfg.Q as usize);
        let w = random_words(&mut rng, p * n * kw);
        let a = random_words(&mut rng, q * kw);
        let mut y = vec![i32::MIN; n];
        rows_plane_dot::interpret(cfg, n as i32, kw as i32, &w, &a, &mut y)
            .unwrap_or_else(|e| panic!("{cfg}: {e}"));
        assert_eq!(y, reference(p, q, n, kw, &w, &a), "{cfg}");
    }
}

/// Words the generated CUDA's 4-word loads cannot take are refused by the interpreter as by a
/// launch, naming `kw`, with nothing written; 1-word loads take them.
#[test]
fn plane_dot_refuses_words_the_gpu_would() {
    let mut rng = rand::rng();
    let (n, kw) = (64, 9);
    for cfg in rows_plane_dot::SPACE {
        let (p, q) = (cfg.P as usize, cfg.Q as usize);
        let w = random_words(&mut rng, p * n * kw);
        let a = random_words(&mut rng, q * kw);
        let mut y = vec![i32::MIN; n];
        let got = rows_plane_dot::interpret(cfg, n as i32, kw as i32, &w, &a, &mut y);
        if cfg.V == 1 {
            got.unwrap_or_else(|e| panic!("{cfg}: {e}"));
            assert_eq!(y, reference(p, q, n, kw, &w, &a), "{cfg}");
        } else {
            let e = got.expect_err("kw = 9 with 4-word loads").to_string();
            assert!(
                e.contains("kw % 4 == 0") && e.contains("kw = 9"),
                "{cfg}: {e}"
            );
            assert!(
                y.iter().all(|&v| v == i32::MIN),
                "{cfg}: written before the refusal"
            );
        }
    }
}

/// The words of a `plane_dot` spread over lanes are refused at build time
/// (`tests/ui/fail/plane_dot_across_lanes.rs`).
#[test]
fn plane_dot_prints_its_name() {
    let cfg = rows_plane_dot::SPACE[0];
    let text = rows_plane_dot::program(&cfg).unwrap().to_string();
    assert!(text.contains("plane_dot(wt, at, 2)"), "{text}");
}

/// The carry-save sum compiles, and counts bits far fewer times than there are plane pairs:
/// W3A4 over 4 words, 48 pairs a row, leaves 12 `popc`s a row (2 rows a thread here).
#[test]
fn plane_dot_compiles_to_few_popcs() {
    if let Err(e) = tilus::runtime::nvrtc::nvrtc() {
        skip::skip(
            "plane_dot_compiles_to_few_popcs",
            skip::Need::Nvrtc,
            &e.to_string(),
        );
        return;
    }
    let cfg = rows_plane_dot::Config { P: 3, Q: 4, V: 4 };
    let info = rows_plane_dot::kernel(&cfg).unwrap();
    let ptx = tilus::runtime::compile_ptx(info.source, "sm_90a")
        .unwrap_or_else(|e| panic!("{e}\n{}", info.source));
    let popcs = ptx.matches("popc.b32").count();
    eprintln!("{cfg}: {popcs} popc.b32 for 2 rows x 48 plane pairs x 4 words");
    assert!(
        (1..=2 * 12).contains(&popcs),
        "{popcs} popc.b32 in the PTX of {cfg}, expected at most 24"
    );
}

#[test]
fn plane_dot_on_gpu() {
    let Some(ctx) = common::gpu_context("plane_dot_on_gpu", tilus::runtime::Context::builder(0))
    else {
        return;
    };
    let mut rng = rand::rng();
    // Ragged rows; the words a multiple of `V` (the launcher refuses others: the code loads
    // `V` words at once).
    let (n, kw) = (1000, 36);
    for cfg in rows_plane_dot::SPACE {
        let (p, q) = (cfg.P as usize, cfg.Q as usize);
        let w = random_words(&mut rng, p * n * kw);
        let a = random_words(&mut rng, q * kw);
        let dw = tilus::runtime::DeviceBuffer::from_host(&ctx, &w).unwrap();
        let da = tilus::runtime::DeviceBuffer::from_host(&ctx, &a).unwrap();
        let mut dy = tilus::runtime::DeviceBuffer::filled(&ctx, n, i32::MIN).unwrap();
        rows_plane_dot::launch(&ctx, cfg, n as i32, kw as i32, &dw, &da, &mut dy)
            .unwrap_or_else(|e| panic!("{cfg}: {e}"));
        assert_eq!(
            dy.to_host().unwrap(),
            reference(p, q, n, kw, &w, &a),
            "{cfg}"
        );
    }
}
