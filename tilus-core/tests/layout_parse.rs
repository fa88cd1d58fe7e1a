//! The layout text form: accepted syntax, error messages and spans, and never panicking.

use proptest::prelude::*;
use tilus_core::layout::{parse, Layout, ParseError};

fn err(text: &str) -> ParseError {
    match parse(text) {
        Ok(l) => panic!("{text:?} parsed as {}", l.to_expr()),
        Err(e) => e,
    }
}

/// The offending text of an error.
fn culprit<'a>(text: &'a str, e: &ParseError) -> &'a str {
    &text[e.span.clone()]
}

#[test]
fn accepts_the_grammar() {
    let c = Layout::local(&[2, 1])
        .compose(&Layout::spatial(&[8, 4]))
        .unwrap()
        .compose(&Layout::local(&[1, 2]))
        .unwrap();
    for text in [
        "local(2,1).spatial(8,4).local(1,2)",
        "  local ( 2 , 1 ) . spatial( 8,4 )\n.local(1,2)  ",
        "local(2,1)∘spatial(8,4)∘local(1,2)",
        "(local(2,1).spatial(8,4).local(1,2))",
        "((local(2,1).spatial(8,4).local(1,2)))",
        "(local(2,1).spatial(8,4)).local(1,2)",
        "local(2,1).spatial(8,4).local(1,2).local(2,2) / local(2,2)",
        "local(2,1).spatial(8,4).local(1,2) / local(1,1) / (local(1,1).spatial(1,1))",
    ] {
        assert_eq!(parse(text).unwrap(), c, "{text}");
    }
    // Composition binds tighter than division: this is h / (g . p), not (h / g) . p.
    let text = "local(4,1).spatial(8,4).local(1,2) / spatial(8,4).local(1,2)";
    assert_eq!(parse(text).unwrap(), Layout::local(&[4, 1]));
    // Division is left-associative: (a / b) / c.
    let text = "local(8) / local(2) / local(2)";
    assert_eq!(parse(text).unwrap(), Layout::local(&[2]));
    let r = parse("reduce(spatial(4,8), [1])").unwrap();
    assert_eq!(r, Layout::spatial(&[4, 8]).reduce(&[1]).unwrap());
    let r = parse("reduce( (local(2,1).spatial(8,4)) , [ 0 , 1 ] ).local(1,3)").unwrap();
    assert_eq!(r.shape(), &[1, 3]);
    assert_eq!(r.num_replicas(), 32);
    assert_eq!(parse("local(7)").unwrap(), Layout::local(&[7]));
    assert_eq!(
        parse("column_spatial(2,3,4)").unwrap(),
        Layout::column_spatial(&[2, 3, 4])
    );
    assert_eq!(
        parse("column_local(2,3)").unwrap(),
        Layout::column_local(&[2, 3])
    );
    assert_eq!(
        "spatial(3)".parse::<Layout>().unwrap(),
        Layout::spatial(&[3])
    );
}

#[test]
fn unknown_primitive() {
    let text = "local(2,1).spacial(8,4)";
    let e = err(text);
    assert_eq!(
        e.message,
        "unknown layout primitive `spacial`; expected local, spatial, column_local, column_spatial, replicated, reduce, split, swap_inner_locals or an mma fragment (mma_a, mma_b, mma_c, mma_a_i8, mma_b_i8, mma_b_t, mma_a_t, mma_c_t, mma_b1_a, mma_b1_b, mma_b1_c, mma_b1_ap, mma_b1_bp, mma_b1_cp, mma_a_k4, mma_b_k4, mma_a_k8, mma_b_k8, mma_a_f8, mma_b_f8, mma_a_f8_t, mma_b_f8_t)"
    );
    assert_eq!(culprit(text, &e), "spacial");
    let e = err("spätial(2)");
    assert_eq!(culprit("spätial(2)", &e), "spätial");
}

#[test]
fn missing_parenthesis() {
    let text = "local(2,1";
    let e = err(text);
    assert_eq!(
        e.message,
        "expected `,` or `)` in `local(..)`, found end of input"
    );
    assert_eq!(e.span, 9..9);
    let text = "(local(2,1).spatial(2,2)";
    let e = err(text);
    assert_eq!(
        e.message,
        "expected `)` to close the `(` at byte 0, found end of input"
    );
    let text = "local 2";
    let e = err(text);
    assert_eq!(e.message, "expected `(` after `local`, found `2`");
    assert_eq!(culprit(text, &e), "2");
}

#[test]
fn bad_extents() {
    let text = "spatial(8, 0)";
    let e = err(text);
    assert_eq!(e.message, "extent must be positive, found 0 in `spatial`");
    assert_eq!(culprit(text, &e), "0");
    for (text, found) in [
        ("local(2, x)", "x"),
        ("local(-1)", "-"),
        ("local()", ")"),
        ("local(2,)", ")"),
    ] {
        let e = err(text);
        assert_eq!(
            e.message,
            format!("expected an integer, found `{found}`"),
            "{text}"
        );
        assert_eq!(culprit(text, &e), found);
    }
    let e = err("local(2.5)");
    assert_eq!(e.message, "expected `,` or `)` in `local(..)`, found `.`");
    let text = "local(99999999999999999999999)";
    let e = err(text);
    assert_eq!(e.message, "integer `99999999999999999999999` is too large");
    assert_eq!(culprit(text, &e), "99999999999999999999999");
    let text = "spatial(4294967296, 4294967296)";
    let e = err(text);
    assert!(e.message.contains("too large"), "{}", e.message);
    assert_eq!(culprit(text, &e), text);
    let text = "spatial(4294967296).local(4294967296)";
    assert!(err(text).message.contains("too large"));
}

#[test]
fn trailing_garbage_and_empty_input() {
    let text = "local(2) local(2)";
    let e = err(text);
    assert_eq!(e.message, "unexpected `local` after the layout expression");
    assert_eq!(e.span, 9..14);
    let e = err("local(2))");
    assert_eq!(e.message, "unexpected `)` after the layout expression");
    assert_eq!(e.span, 8..9);
    let e = err("");
    assert_eq!(
        e.message,
        "expected a layout expression, found end of input"
    );
    assert_eq!(e.span, 0..0);
    let e = err("   ");
    assert_eq!(e.span, 3..3);
    let e = err("local(2) #");
    assert_eq!(e.message, "unexpected `#` after the layout expression");
    let e = err("local(2).");
    assert_eq!(
        e.message,
        "expected local, spatial, column_local, column_spatial or replicated after `.`, found end of input"
    );
    let e = err("local(2).(spatial(2))");
    assert_eq!(e.span, 9..10);
    let e = err("local(2).reduce(spatial(2),[0])");
    assert_eq!(
        e.message,
        "expected local, spatial, column_local, column_spatial or replicated after `.`, found `reduce`"
    );
    let e = err("3");
    assert_eq!(e.message, "expected a layout expression, found `3`");
}

#[test]
fn mixed_ranks_broadcast() {
    // The lower-rank operand gains leading extent-1 dims, on either side of `.` and `/`.
    assert_eq!(
        parse("local(2).spatial(8,4)").unwrap(),
        parse("local(1,2).spatial(8,4)").unwrap()
    );
    assert_eq!(
        parse("spatial(8,4).local(2)").unwrap(),
        parse("spatial(8,4).local(1,2)").unwrap()
    );
    assert_eq!(
        parse("local(2,1).spatial(8)").unwrap(),
        parse("local(2,1).spatial(1,8)").unwrap()
    );
    assert_eq!(
        parse("local(3) ∘ spatial(2,2,2)").unwrap().shape(),
        &[2, 2, 6]
    );
    assert_eq!(
        parse("local(2,1).spatial(8,4).local(1,2) / local(2)").unwrap(),
        parse("local(2,1).spatial(8,4)").unwrap()
    );
    assert_eq!(
        parse("(local(2).spatial(8,4)) / spatial(8,4)").unwrap(),
        parse("local(1,2)").unwrap()
    );
    assert_eq!(
        parse("spatial(4) / spatial(1,2)").unwrap(),
        parse("spatial(1,2)").unwrap()
    );
    // A higher-rank divisor must have extent 1 in the dims the dividend lacks.
    let text = "(local(2)) / spatial(2,2)";
    let e = err(text);
    assert_eq!(
        e.message,
        "`(local(2))` is not divisible by `spatial(2,2)`: dim 0: the divisor's extent 2 does \
         not divide the extent 1"
    );
    assert_eq!(culprit(text, &e), text);
}

#[test]
fn not_divisible() {
    let text = "local(2,1).spatial(8,4) / spatial(4,8)";
    let e = err(text);
    assert!(
        e.message.starts_with(
            "`local(2,1).spatial(8,4)` is not divisible by `spatial(4,8)`: dim 1: the divisor's extent 8 does not divide the extent 4"
        ),
        "{}",
        e.message
    );
    assert_eq!(culprit(text, &e), text);
    // The span covers both operands of the failing division only.
    let text = "local(2) / local(1) / spatial(2)";
    let e = err(text);
    assert!(
        e.message
            .starts_with("`local(2) / local(1)` is not divisible by `spatial(2)`: threads"),
        "{}",
        e.message
    );
    assert_eq!(e.span, 0..text.len());
}

#[test]
fn reduce_errors() {
    let text = "reduce(spatial(4,8), [2])";
    let e = err(text);
    assert_eq!(
        e.message,
        "reduce dim 2 is out of range for a rank-2 layout"
    );
    assert_eq!(culprit(text, &e), "2");
    let e = err("reduce(spatial(4,8) [0])");
    assert_eq!(
        e.message,
        "expected `,` between the layout and the dims of `reduce`, found `[`"
    );
    let e = err("reduce(spatial(4,8), 0)");
    assert_eq!(
        e.message,
        "expected `[` to start the dims of `reduce`, found `0`"
    );
    let e = err("reduce(spatial(4,8), [])");
    assert_eq!(e.message, "expected an integer, found `]`");
    let e = err("reduce(spatial(4,8), [0)");
    assert_eq!(
        e.message,
        "expected `,` or `]` in the dims of `reduce`, found `)`"
    );
    let e = err("reduce(spatial(4,8), [0]");
    assert_eq!(
        e.message,
        "expected `)` to close `reduce(`, found end of input"
    );
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let text = format!("{}local(2){}", "(".repeat(100_000), ")".repeat(100_000));
    let e = err(&text);
    assert!(e.message.contains("nested too deeply"), "{}", e.message);
    let ok = format!("{}local(2){}", "(".repeat(60), ")".repeat(60));
    assert_eq!(parse(&ok).unwrap(), Layout::local(&[2]));
    let text = format!(
        "{}spatial(4,8){}",
        "reduce(".repeat(1000),
        ", [0])".repeat(1000)
    );
    assert!(err(&text).message.contains("nested too deeply"));
}

fn check_span(text: &str, e: &ParseError) -> Result<(), TestCaseError> {
    prop_assert!(e.span.start <= e.span.end && e.span.end <= text.len());
    prop_assert!(text.is_char_boundary(e.span.start) && text.is_char_boundary(e.span.end));
    prop_assert!(!e.message.is_empty() && !e.message.contains('\n'));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_text_never_panics(text in "\\PC{0,40}") {
        if let Err(e) = parse(&text) {
            check_span(&text, &e)?;
        }
    }

    #[test]
    fn random_token_soup_never_panics(
        tokens in prop::collection::vec(
            prop::sample::select(vec![
                "local", "spatial", "column_local", "column_spatial", "reduce", "spacial", "(", ")",
                "[", "]", ",", ".", "∘", "/", "0", "1", "2", "3", "4", "8", "18446744073709551615",
                " ", "x", "-",
            ]),
            0..30,
        )
    ) {
        let text: String = tokens.concat();
        if let Err(e) = parse(&text) {
            check_span(&text, &e)?;
        }
    }

    #[test]
    fn random_well_formed_expressions_never_panic(
        parts in prop::collection::vec(
            (prop::sample::select(vec!["local", "spatial", "column_local", "column_spatial"]),
             prop::collection::vec(1..5usize, 1..3),
             prop::sample::select(vec![".", " / ", "∘"])),
            1..5,
        )
    ) {
        let mut text = String::new();
        for (k, (name, shape, op)) in parts.iter().enumerate() {
            if k > 0 {
                text.push_str(op);
            }
            let shape: Vec<String> = shape.iter().map(usize::to_string).collect();
            text.push_str(&format!("{name}({})", shape.join(",")));
        }
        match parse(&text) {
            Ok(l) => prop_assert!(l.num_threads() >= 1),
            Err(e) => check_span(&text, &e)?,
        }
    }
}

/// `replicated(n)`, `split(..)` and `swap_inner_locals(..)` denote the methods of the same names,
/// and every printed layout (replicated digits included) parses back to itself.
#[test]
fn replicated_split_and_swap() {
    let spatial = Layout::spatial;
    let local = Layout::local;
    let rep = Layout::replicated;
    // Replication in the middle of a chain, after `.` and as the first atom.
    let want = spatial(&[2, 1])
        .compose(&rep(2, 4))
        .unwrap()
        .compose(&local(&[2, 2]))
        .unwrap();
    let got = parse("spatial(2, 1).replicated(4).local(2, 2)").unwrap();
    assert_eq!(got, want);
    assert_eq!(got.num_threads(), 8);
    assert_eq!(parse(&got.to_expr()).unwrap(), got, "{}", got.to_expr());
    let first = parse("replicated(3).spatial(4, 8)").unwrap();
    assert_eq!(
        first,
        rep(2, 3).compose(&spatial(&[4, 8])).unwrap(),
        "{}",
        first.to_expr()
    );
    assert_eq!(parse(&first.to_expr()).unwrap(), first);

    let b = parse("local(2, 1).column_spatial(4, 8).local(2, 1)").unwrap();
    let split = parse("split(local(2, 1).column_spatial(4, 8).local(2, 1), 0, 4)").unwrap();
    assert_eq!(split, b.split_dim(0, 4).unwrap());
    assert_eq!(split.shape(), [4, 4, 8]);
    for t in 0..b.num_threads() {
        for i in 0..b.num_locals() {
            let x = b.eval(t, i);
            assert_eq!(split.eval(t, i), [x[0] / 4, x[0] % 4, x[1]]);
        }
    }
    let swapped = parse("swap_inner_locals(local(4, 1).local(1, 2), 2, 4)").unwrap();
    let base = local(&[4, 1]).compose(&local(&[1, 2])).unwrap();
    assert_eq!(swapped, base.swap_inner_locals(2, 4).unwrap());
    // Local (x, p) of the base is local (p, x) of the result.
    for x in 0..4 {
        for p in 0..2 {
            assert_eq!(swapped.eval(0, p * 4 + x), base.eval(0, x * 2 + p));
        }
    }

    // Errors point at the call and say why.
    for (text, culprit_text, why) in [
        ("replicated(0)", "0", "positive"),
        (
            "split(local(4), 0, 3)",
            "split(local(4), 0, 3)",
            "3 does not divide",
        ),
        (
            "split(local(4), 2, 2)",
            "split(local(4), 2, 2)",
            "out of range",
        ),
        (
            "swap_inner_locals(local(6), 4, 2)",
            "swap_inner_locals(local(6), 4, 2)",
            "not a multiple",
        ),
        ("split(local(4) 0, 2)", "0", "expected `,`"),
    ] {
        let e = err(text);
        assert_eq!(culprit(text, &e), culprit_text, "{text}: {}", e.message);
        assert!(e.message.contains(why), "{text}: {}", e.message);
    }
}

/// A layout of replicas only keeps its rank when printed and parsed back (the fuzzer found
/// `reduce(spatial(1,2), [1])` printing as the rank-1 `replicated(2)`).
#[test]
fn replicas_only_keep_their_rank() {
    let l = parse("reduce(spatial(1,2), [1])").unwrap();
    assert_eq!(l.rank(), 2);
    assert_eq!(parse(&l.to_expr()).unwrap(), l, "{}", l.to_expr());
}

/// The `mma` fragments by name: as an atom, after a `.`, inside `reduce`, equal to their
/// spelled-out compositions (the same definitions the verifier's `dot` rule uses).
#[test]
fn named_mma_fragments() {
    use tilus_core::verify::{mma_fragments, MmaKind};
    let [a, b, c] = mma_fragments(MmaKind::F16);
    assert_eq!(parse("mma_a").unwrap(), a);
    assert_eq!(parse("mma_b").unwrap(), b);
    assert_eq!(parse("mma_c").unwrap(), c);
    assert_eq!(
        parse("spatial(1, 4).local(1, 8).mma_c").unwrap(),
        parse("spatial(1, 4).local(1, 8).local(2, 1).spatial(8, 4).local(1, 2)").unwrap()
    );
    assert_eq!(
        parse("reduce(local(1, 4).mma_c, [1])").unwrap(),
        parse("reduce(local(1, 4).local(2, 1).spatial(8, 4).local(1, 2), [1])").unwrap()
    );
    let [ai, bi, _] = mma_fragments(MmaKind::I8);
    assert_eq!(parse("mma_a_i8").unwrap(), ai);
    assert_eq!(parse("mma_b_i8").unwrap(), bi);
    // The B fragment transposed: the same thread holds the same elements, indices swapped.
    let bt = parse("mma_b_t").unwrap();
    assert_eq!(bt.shape(), &[8, 16]);
    let e = err("local(2).mma_d");
    assert!(e.message.contains("mma fragment"), "{}", e.message);
}
