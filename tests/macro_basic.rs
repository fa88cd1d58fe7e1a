//! Basic #[kernel] behaviour: generated API, interpreter runs, embedded programs.

/// Adds a constant to each element of a vector, BLOCK elements per block.
#[tilus::kernel(grid = [cdiv(n, BLOCK)], warps = 1, space(BLOCK = [32, 64, 128]))]
pub fn add_one<const BLOCK: i32>(n: i32, x: Global<f32>, y: GlobalMut<f32>) {
    let [bi] = block_indices();
    let gx = view_global(x, [n]);
    let gy = view_global(y, [n]);
    let r = load_global(gx, layout!(local(BLOCK / 32).spatial(32)), [bi * BLOCK]);
    let r = r + 1.0;
    store_global(r, gy, [bi * BLOCK]);
}

#[test]
fn space_and_config() {
    assert_eq!(add_one::SPACE.len(), 3);
    assert_eq!(add_one::SPACE[1], add_one::Config { BLOCK: 64 });
    assert_eq!(add_one::SPACE[2].to_string(), "BLOCK=128");
    assert_eq!(add_one::Config { BLOCK: 64 }.index(), Some(1));
    assert_eq!(add_one::Config { BLOCK: 48 }.index(), None);
    assert_eq!(add_one::NAME, "add_one");
}

#[test]
fn program_roundtrips() {
    for cfg in add_one::SPACE {
        let p = add_one::program(cfg).expect("embedded program");
        assert_eq!(p.name, "add_one");
        assert_eq!(p.num_threads, 32);
        tilus::core::verify::verify(&p, &Default::default()).unwrap();
    }
    assert!(add_one::program(&add_one::Config { BLOCK: 48 }).is_none());
}

#[test]
fn interprets() {
    for cfg in add_one::SPACE {
        let n = 300;
        let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let mut y = vec![-7.0f32; n];
        add_one::interpret(cfg, n as i32, &x, &mut y).unwrap();
        for i in 0..n {
            assert_eq!(y[i], x[i] + 1.0, "{cfg} at {i}");
        }
    }
}

/// `y = x * s + y` with one rounding (`mul_add`), and a cast whose result holds the same
/// elements per thread in another local order (`cast::<T>(x, layout)`).
#[tilus::kernel(grid = [cdiv(n, 128)], warps = 1)]
pub fn fma_and_reorder(n: i32, x: Global<f32>, y: Global<f32>, out: GlobalMut<f16>) {
    let [bi] = block_indices();
    let gx = view_global(x, [n / 2, 2]);
    let gy = view_global(y, [n / 2, 2]);
    let go = view_global(out, [n / 2, 2]);
    let rx = load_global(gx, layout!(spatial(32, 1).local(2, 2)), [bi * 64, 0]);
    let ry = load_global(gy, layout!(spatial(32, 1).local(2, 2)), [bi * 64, 0]);
    let f = mul_add(rx, 3.0, ry);
    let h = cast::<f16>(f, layout!(spatial(32, 1).column_local(2, 2)));
    store_global(h, go, [bi * 64, 0]);
}

#[test]
fn mul_add_and_reordering_cast_interpret() {
    use rand::Rng;
    let n = 300;
    let mut rng = rand::rng();
    let x: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0..4.0)).collect();
    let y: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0..4.0)).collect();
    let mut out = vec![half::f16::NAN; n];
    fma_and_reorder::interpret(&fma_and_reorder::SPACE[0], n as i32, &x, &y, &mut out).unwrap();
    for i in 0..n {
        let want = half::f16::from_f32(x[i].mul_add(3.0, y[i]));
        assert_eq!(out[i].to_bits(), want.to_bits(), "at {i}");
    }
}

#[allow(dead_code)]
#[path = "kernels/launch.rs"]
mod launch_kernels;

/// The workspace kernel on the interpreter: the scratch tensor starts at zero and round-trips.
#[test]
fn workspace_kernel_interprets() {
    use rand::Rng;
    let mut rng = rand::rng();
    let n = 300; // not a multiple of the tile: the last block is masked
    let x: Vec<f32> = (0..n).map(|_| rng.random_range(-2.0f32..2.0)).collect();
    let mut y = vec![f32::NAN; n];
    let cfg = launch_kernels::scratch::SPACE[0];
    launch_kernels::scratch::interpret(&cfg, n as i32, &x, &mut y).unwrap();
    for (i, (&xi, &yi)) in x.iter().zip(&y).enumerate() {
        let want = (xi as f64 + 1.0).powi(2);
        assert!(
            (yi as f64 - want).abs() <= 1e-6 * want.max(1.0),
            "y[{i}] = {yi}, want {want}"
        );
    }
}

/// The launch spec embedded for a workspace kernel lists the hidden workspace, and the
/// vector-copy kernel's spec carries the assumptions a launch is checked against.
#[test]
fn embedded_launch_specs() {
    use tilus::core::launch::ParamKind;
    let k = tilus::core::codegen::emit(
        &launch_kernels::scratch::program(&launch_kernels::scratch::SPACE[0]).unwrap(),
        &Default::default(),
    )
    .unwrap();
    let kinds: Vec<&ParamKind> = k.params.iter().map(|p| &p.kind).collect();
    assert_eq!(kinds.len(), 4, "{kinds:?}");
    assert!(matches!(kinds[3], ParamKind::Workspace { .. }), "{kinds:?}");
    let cfg = launch_kernels::copy_rows::SPACE[0];
    let k = tilus::core::codegen::emit(
        &launch_kernels::copy_rows::program(&cfg).unwrap(),
        &Default::default(),
    )
    .unwrap();
    let text: Vec<String> = k.assumptions.iter().map(|a| a.to_string()).collect();
    assert!(text.iter().any(|a| a == "param k % 8 == 0"), "{text:?}");
    assert!(
        text.iter().any(|a| a.contains("aligned to 16 bytes")),
        "{text:?}"
    );
    assert_eq!(k.views.len(), 2, "{:?}", k.views);
}
/// `layout!` composes layouts of different ranks by broadcasting the lower-rank one (paper
/// appendix A): `local(2)` before the rank-2 `spatial(8, 4)` is `local(1, 2)`, so each thread
/// holds two columns 4 apart. Both spellings and a spliced layout variable.
#[tilus::kernel(grid = [cdiv(m, 8)], warps = 1, space(C = [1, 2]))]
pub fn mixed_rank_layouts<const C: i32>(m: i32, x: Global<f32>, y: GlobalMut<f32>) {
    let [bi] = block_indices();
    let gx = view_global(x, [m, 8 * C]);
    let gy = view_global(y, [m, 8 * C]);
    let warp = layout!(spatial(8, 4));
    let r = load_global(gx, layout!(local(2 * C).warp), [bi * 8, 0]);
    let s = load_global(gx, layout!("spatial(8, 4).local(2)"), [bi * 8, 0]);
    store_global(r + 1.0, gy, [bi * 8, 0]);
    print(s);
}

#[test]
fn mixed_rank_layouts_broadcast() {
    use tilus::core::ir::{Instruction, StmtKind};
    use tilus::core::layout::parse;
    for cfg in mixed_rank_layouts::SPACE {
        let p = mixed_rank_layouts::program(cfg).expect("embedded program");
        tilus::core::verify::verify(&p, &Default::default()).unwrap();
        let loads: Vec<_> = p
            .body
            .iter()
            .filter_map(|s| match &s.kind {
                StmtKind::Instr(Instruction::LoadGlobal { layout, .. }) => Some(layout.clone()),
                _ => None,
            })
            .collect();
        let c = cfg.C as usize;
        // Thread t, local i of local(1, 2C).spatial(8, 4) holds [t / 4, 4 i + t % 4].
        let want = parse(&format!("local(1,{}).spatial(8,4)", 2 * c)).unwrap();
        assert_eq!(loads[0], want, "{cfg}");
        assert_eq!(loads[0].shape(), &[8, 8 * c]);
        for t in 0..32 {
            for i in 0..2 * c {
                assert_eq!(loads[0].eval(t, i), vec![t / 4, 4 * i + t % 4], "{cfg}");
            }
        }
        assert_eq!(loads[1], parse("spatial(8,4).local(1,2)").unwrap());

        // Every element of the [m, 8C] view is written once, masked past m.
        let m = 13;
        let cols = 8 * c;
        let x: Vec<f32> = (0..m * cols).map(|i| i as f32 * 0.25 - 3.0).collect();
        let mut y = vec![f32::NAN; m * cols];
        mixed_rank_layouts::interpret(cfg, m as i32, &x, &mut y).unwrap();
        for i in 0..m * cols {
            assert_eq!(y[i], x[i] + 1.0, "{cfg} at {i}");
        }
    }
}

/// Every embedded configuration's launch spec lists exactly the parameters of its CUDA entry
/// (the one launcher refuses a kernel whose spec and source disagree).
#[test]
fn embedded_specs_match_their_entries() {
    for cfg in add_one::SPACE {
        let info = add_one::kernel(cfg).expect("spec and source agree");
        assert!(info.source.contains(&format!(" {}(", info.entry)));
    }
    let info = launch_kernels::scratch::kernel(&launch_kernels::scratch::SPACE[0]).unwrap();
    // n, x, y and the hidden workspace pointer.
    let decl = info
        .source
        .lines()
        .find(|l| l.contains(&format!(" {}(", info.entry)))
        .unwrap();
    let params = &decl[decl.find(&format!(" {}(", info.entry)).unwrap()..];
    let params = &params[..params.find(')').unwrap()];
    assert_eq!(params.matches(',').count() + 1, 4, "{decl}");
}
