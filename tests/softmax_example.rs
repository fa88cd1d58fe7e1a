//! `examples/softmax.rs`, the worked example of `docs/macro.md` ("Writing softmax from
//! scratch"): correct on the interpreter for every configuration and ragged row lengths, and on
//! a GPU when there is one.

#[allow(dead_code)]
#[path = "../examples/softmax.rs"]
mod example;

mod common;

use example::{config_for, max_error, random_input, softmax, TOLERANCE};
use tilus::prelude::f16;

#[test]
fn every_configuration_matches_f64_on_the_interpreter() {
    // Rows shorter than the block (masked tails); multiples of 4, as the 8-byte loads need.
    for n in [4, 76, 512, 1000, 2048] {
        let cfg = config_for(n).unwrap();
        let rows = 3;
        let x = random_input(rows, n);
        let mut y = vec![f16::NAN; rows * n];
        softmax::interpret(cfg, rows as i32, n as i32, &x, &mut y).unwrap();
        let err = max_error(&x, &y, n);
        assert!(err <= TOLERANCE, "{cfg} n={n}: {err}");
    }
}

/// A row length the generated code's 4-element loads cannot take is refused, naming `n`, as a
/// launch refuses it, with nothing written.
#[test]
fn rows_the_gpu_cannot_load_are_refused() {
    let (rows, n) = (3, 77);
    let x = random_input(rows, n);
    let mut y = vec![f16::NAN; rows * n];
    let e = softmax::interpret(config_for(n).unwrap(), rows as i32, n as i32, &x, &mut y)
        .unwrap_err()
        .to_string();
    assert!(e.contains("n % 4 == 0") && e.contains("n = 77"), "{e}");
    assert!(y.iter().all(|v| v.is_nan()), "written before the refusal");
}

#[test]
fn the_example_runs() {
    // On a machine without a GPU this is the interpreter run; with one, the GPU run too.
    example::run_example().unwrap();
}
