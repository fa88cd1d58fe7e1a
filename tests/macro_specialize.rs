//! `specialize! { role(warps = W, registers = R) => { .. } .. }`: the warp-specialized region of
//! the kernel language, translated to `StmtKind::Specialize` (checked on the IR and by the
//! verifier; not run).

use tilus::core::ir::{Program, Role, Stmt, StmtKind};
use tilus::core::verify::{verify, Target};

/// 12 warps: a producer warpgroup (`PW` warps, `R` registers) copies the first 128 elements of
/// the block's 384, two consumer warpgroups the other 256 (plus one), with the registers the
/// producer gives up. The role values are expressions of the tile parameters.
#[tilus::kernel(grid = [cdiv(n, 384)], warps = 3 * PW, space(PW = [4], R = [40, 56]))]
pub fn split_copy<const PW: i32, const R: i32>(n: i32, x: Global<f32>, y: GlobalMut<f32>) {
    let [bi] = block_indices();
    let gx = view_global(x, [n]);
    let gy = view_global(y, [n]);
    let start = bi * 384;
    specialize! {
        role(warps = PW, registers = R) => {
            let r = load_global(gx, layout!(spatial(PW * 32)), [start]);
            store_global(r, gy, [start]);
        }
        role(warps = 2 * PW, registers = 272 - R) => {
            let r = load_global(gx, layout!(spatial(2 * PW * 32)), [start + PW * 32]);
            let r = r + 1.0;
            store_global(r, gy, [start + PW * 32]);
        },
    }
}

/// Two roles of one warpgroup each, without `registers`, the macro written with parentheses as
/// the body's tail expression; both roles bind `r` (each body is a scope of its own).
#[tilus::kernel(grid = [cdiv(n, 256)], warps = 8)]
pub fn halves(n: i32, x: Global<f32>, y: GlobalMut<f32>) {
    let [bi] = block_indices();
    let gx = view_global(x, [n]);
    let gy = view_global(y, [n]);
    specialize!(
        role(warps = 4) => {
            let r = load_global(gx, layout!(spatial(128)), [bi * 256]);
            store_global(r, gy, [bi * 256]);
        },
        role(warps = 4) => {
            let r = load_global(gx, layout!(spatial(128)), [bi * 256 + 128]);
            store_global(r * 2.0, gy, [bi * 256 + 128]);
        },
    )
}

/// The program's roles, from its last top-level statement.
fn roles(p: &Program) -> &[Role] {
    match p.body.last().map(|s: &Stmt| &s.kind) {
        Some(StmtKind::Specialize { roles }) => roles,
        other => panic!("the last statement is not a specialize! region: {other:?}\n{p}"),
    }
}

#[test]
fn roles_from_tile_parameters() {
    assert_eq!(split_copy::SPACE.len(), 2);
    for cfg in split_copy::SPACE {
        let p = split_copy::program(cfg).expect("embedded program");
        assert_eq!(p.num_threads, 384, "{cfg}");
        let roles = roles(&p);
        let shape: Vec<(u32, Option<u32>)> = roles.iter().map(|r| (r.warps, r.registers)).collect();
        let r = cfg.R as u32;
        assert_eq!(shape, [(4, Some(r)), (8, Some(272 - r))], "{cfg}");
        for (i, role) in roles.iter().enumerate() {
            assert!(!role.body.is_empty(), "{cfg}: role {i} is empty\n{p}");
        }
        // Nothing else is nested in a role: its statements are its own.
        assert!(
            p.body[..p.body.len() - 1]
                .iter()
                .all(|s| !matches!(s.kind, StmtKind::Specialize { .. })),
            "{p}"
        );
        verify(&p, &Target::SM90).unwrap_or_else(|d| panic!("{cfg}: {d:?}\n{p}"));
        let text = p.to_string();
        assert!(text.contains("specialize! {"), "{text}");
        assert!(
            text.contains(&format!("role(warps = 4, registers = {r}) => {{")),
            "{text}"
        );
        assert!(
            text.contains(&format!("role(warps = 8, registers = {}) => {{", 272 - r)),
            "{text}"
        );
    }
}

#[test]
fn roles_without_registers() {
    let p = halves::program(&halves::SPACE[0]).expect("embedded program");
    let roles = roles(&p);
    let shape: Vec<(u32, Option<u32>)> = roles.iter().map(|r| (r.warps, r.registers)).collect();
    assert_eq!(shape, [(4, None), (4, None)]);
    assert!(roles.iter().all(|r| !r.body.is_empty()), "{p}");
    verify(&p, &Target::SM90).unwrap_or_else(|d| panic!("{d:?}\n{p}"));
    // Without `registers`, the region also verifies for sm_80.
    verify(&p, &Target::SM80).unwrap_or_else(|d| panic!("{d:?}\n{p}"));
    assert!(p.to_string().contains("role(warps = 4) => {"), "{p}");
}
