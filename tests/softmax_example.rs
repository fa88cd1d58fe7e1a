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
    for n in [1, 77, 512, 1000, 2048] {
        let cfg = config_for(n).unwrap();
        let rows = 3;
        let x = random_input(rows, n);
        let mut y = vec![f16::NAN; rows * n];
        softmax::interpret(cfg, rows as i32, n as i32, &x, &mut y).unwrap();
        let err = max_error(&x, &y, n);
        assert!(err <= TOLERANCE, "{cfg} n={n}: {err}");
    }
}

#[test]
fn the_example_runs() {
    // On a machine without a GPU this is the interpreter run; with one, the GPU run too.
    example::run_example().unwrap();
}
