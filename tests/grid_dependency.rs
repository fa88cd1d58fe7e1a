//! `wait_prior_grid()` and `launch_dependents()` (a programmatic dependent launch): the
//! instruction table, the printed IR, the launch spec's flag, the generated code (guarded so
//! that one source serves every architecture), and the two kernels of a dependent pair on the
//! interpreter against a reference on fresh random data (outputs poisoned). The GPU side, a
//! dependent launch that must see the producer's output, is `macro_gpu`'s
//! `dependent_launch_waits_for_the_prior_kernel`.

#[allow(dead_code)]
#[path = "kernels/grid_dependency.rs"]
mod pdl;

use pdl::{pdl_consume, pdl_produce, pdl_unsynced, produce_ref};
use rand::Rng;
use tilus::core::ir::syntax::{lookup, Family, Op};
use tilus::core::ir::GridDependency;
use tilus::core::launch::LaunchSpec;

#[test]
fn the_table_spells_both_sides() {
    for (name, g) in [
        ("wait_prior_grid", GridDependency::Wait),
        ("launch_dependents", GridDependency::LaunchDependents),
    ] {
        let row = lookup(name).unwrap();
        assert_eq!(row.op, Op::GridDependency(g));
        assert_eq!(row.family, Family::Control);
        assert_eq!(row.arity, (0, 0));
    }
}

#[test]
fn programs_print_and_flag_the_wait() {
    let consume = pdl_consume::program(&pdl_consume::SPACE[0]).unwrap();
    let produce = pdl_produce::program(&pdl_produce::SPACE[0]).unwrap();
    let unsynced = pdl_unsynced::program(&pdl_unsynced::SPACE[0]).unwrap();
    assert!(consume.to_string().contains("wait_prior_grid()"));
    assert!(produce.to_string().contains("launch_dependents()"));
    // Only a kernel that waits may be launched as a dependent.
    assert!(LaunchSpec::of_program(&consume).waits_prior_grid);
    assert!(!LaunchSpec::of_program(&produce).waits_prior_grid);
    assert!(!LaunchSpec::of_program(&unsynced).waits_prior_grid);
    let emitted = tilus::core::codegen::emit(&consume, &Default::default()).unwrap();
    assert!(emitted.launch.waits_prior_grid);
}

#[test]
fn generated_code_guards_griddepcontrol_below_sm90() {
    let consume = pdl_consume::source(&pdl_consume::SPACE[0]).unwrap();
    let produce = pdl_produce::source(&pdl_produce::SPACE[0]).unwrap();
    for (src, ptx) in [
        (consume, "griddepcontrol.wait;"),
        (produce, "griddepcontrol.launch_dependents;"),
    ] {
        let lines: Vec<&str> = src.lines().map(str::trim).collect();
        let at = lines
            .iter()
            .position(|l| l.contains(ptx))
            .unwrap_or_else(|| panic!("no {ptx} in\n{src}"));
        assert_eq!(lines[at - 1], "#if __CUDA_ARCH__ >= 900", "{src}");
        assert_eq!(lines[at + 1], "#endif", "{src}");
    }
    // The wait keeps the compiler from hoisting the producer's output's loads above it.
    assert!(consume.contains("griddepcontrol.wait;\\n\" ::: \"memory\""));
}

#[test]
fn the_pair_matches_the_reference_on_the_interpreter() {
    let mut rng = rand::rng();
    // Partial last blocks too.
    for n in [1usize, 200, 1000] {
        let iters = rng.random_range(1..20);
        let x: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0f32..4.0)).collect();
        let w: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0f32..4.0)).collect();
        let mut y = vec![f32::NAN; n];
        let mut z = vec![f32::NAN; n];
        let (pc, cc) = (&pdl_produce::SPACE[0], &pdl_consume::SPACE[0]);
        pdl_produce::interpret(pc, n as i32, iters, &x, &mut y).unwrap();
        pdl_consume::interpret(cc, n as i32, &w, &y, &mut z).unwrap();
        for i in 0..n {
            let want = w[i] + produce_ref(x[i], iters);
            assert_eq!(z[i], want, "n = {n}, element {i}");
        }
    }
}
