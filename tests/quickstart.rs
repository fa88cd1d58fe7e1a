//! `examples/quickstart.rs`, the README's first command: its argument checks (one-line errors
//! naming the argument and the accepted values, exit status 2, before a GPU is looked for) and
//! its CPU-interpreter path. The GPU path (autotuned `GpuQuantizedLinear` at n = 57344,
//! k = 8192) is exercised by running the example on a GPU machine.

#[allow(dead_code)]
#[path = "../examples/quickstart.rs"]
mod quickstart;

use quickstart::{on_cpu, parse_args, run, Args};
use tilus::DType;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn good_arguments() {
    assert_eq!(
        parse_args(&[]).unwrap(),
        Args {
            wdtype: DType::Int(4),
            m: 1
        }
    );
    assert_eq!(
        parse_args(&args(&["f6e3m2", "16"])).unwrap(),
        Args {
            wdtype: "f6e3m2".parse().unwrap(),
            m: 16
        }
    );
    assert_eq!(parse_args(&args(&["u1"])).unwrap().wdtype, DType::UInt(1));
}

#[test]
fn bad_arguments_name_the_argument_and_what_it_accepts() {
    for (bad, argument, accepted) in [
        (&["i4", "0"][..], "argument M: `0`", "from 1 to 16384"),
        (&["i4", "x"][..], "argument M: `x`", "from 1 to 16384"),
        (
            &["i4", "100000"][..],
            "argument M: `100000`",
            "from 1 to 16384",
        ),
        (&["f16"][..], "argument WDTYPE: `f16`", "accepted: u1, u2"),
        (&["i9"][..], "argument WDTYPE: `i9`", "f8e5m2"),
        (
            &["i4", "1", "2"][..],
            "unexpected argument `2`",
            "usage: quickstart",
        ),
    ] {
        let err = parse_args(&args(bad)).unwrap_err();
        assert!(err.contains(argument), "{bad:?}: {err}");
        assert!(err.contains(accepted), "{bad:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{bad:?}: {err}");
        // `run` is `main` without the process: status 2, without opening a GPU.
        assert_eq!(run(&args(bad)), 2, "{bad:?}");
    }
    assert_eq!(run(&args(&["--help"])), 0);
}

#[test]
fn runs_on_the_cpu_interpreter() {
    // What the example does without a GPU: an f64-checked interpreter run (it errors on a
    // wrong result). One integer, one unsigned (zero points) and one float type.
    for (wdtype, m) in [("i4", 1), ("u3", 3), ("f6e3m2", 16)] {
        on_cpu(wdtype.parse().unwrap(), m).unwrap_or_else(|e| panic!("{wdtype} m={m}: {e}"));
    }
}
