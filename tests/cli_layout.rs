//! `tilus layout`: the JSON map of every primitive, compositions (of equal and of mixed ranks),
//! the mma.m16n8k16 fragments, a division and a reduce, each checked against an evaluator
//! written here from the definitions (not tilus-core), plus the error path.

use serde_json::Value;
use std::process::Command;

/// A layout as a plain table: `map[t][i]` is the logical index of local `i` of thread `t`.
#[derive(Clone, Debug, PartialEq)]
struct Table {
    shape: Vec<usize>,
    map: Vec<Vec<Vec<usize>>>,
}

fn unravel(mut flat: usize, shape: &[usize], column: bool) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    let order: Vec<usize> = if column {
        (0..shape.len()).collect()
    } else {
        (0..shape.len()).rev().collect()
    };
    for d in order {
        index[d] = flat % shape[d];
        flat /= shape[d];
    }
    index
}

fn local(shape: &[usize], column: bool) -> Table {
    let n = shape.iter().product();
    Table {
        shape: shape.to_vec(),
        map: vec![(0..n).map(|i| unravel(i, shape, column)).collect()],
    }
}

fn spatial(shape: &[usize], column: bool) -> Table {
    let n = shape.iter().product();
    Table {
        shape: shape.to_vec(),
        map: (0..n).map(|t| vec![unravel(t, shape, column)]).collect(),
    }
}

/// `f.g` by its definition: `h(t, i) = f(t / Tg, i / Lg) * shape(g) + g(t % Tg, i % Lg)`.
fn compose(f: &Table, g: &Table) -> Table {
    let (tg, lg) = (g.map.len(), g.map[0].len());
    let (th, lh) = (f.map.len() * tg, f.map[0].len() * lg);
    let map = (0..th)
        .map(|t| {
            (0..lh)
                .map(|i| {
                    let (o, n) = (&f.map[t / tg][i / lg], &g.map[t % tg][i % lg]);
                    (0..o.len()).map(|d| o[d] * g.shape[d] + n[d]).collect()
                })
                .collect()
        })
        .collect();
    Table {
        shape: f.shape.iter().zip(&g.shape).map(|(a, b)| a * b).collect(),
        map,
    }
}

fn chain(parts: &[Table]) -> Table {
    parts[1..]
        .iter()
        .fold(parts[0].clone(), |acc, p| compose(&acc, p))
}

fn from_fn(
    shape: &[usize],
    threads: usize,
    locals: usize,
    f: impl Fn(usize, usize) -> Vec<usize>,
) -> Table {
    Table {
        shape: shape.to_vec(),
        map: (0..threads)
            .map(|t| (0..locals).map(|i| f(t, i)).collect())
            .collect(),
    }
}

fn tilus(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tilus"))
        .args(args)
        .output()
        .expect("run tilus")
}

/// Run `tilus layout <expr> --json` and read the table back, checking the JSON's shape.
fn run_json(expr: &str) -> Table {
    let out = tilus(&["layout", expr, "--json"]);
    assert!(
        out.status.success(),
        "{expr}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("{\"shape\":[") && !text.trim_end().contains('\n') && !text.contains(' '),
        "not compact JSON in the documented key order: {text}"
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    let obj = v.as_object().unwrap();
    assert_eq!(obj.len(), 4, "{text}");
    let ints = |v: &Value| -> Vec<usize> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect()
    };
    let shape = ints(&obj["shape"]);
    let map: Vec<Vec<Vec<usize>>> = obj["map"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row.as_array().unwrap().iter().map(ints).collect())
        .collect();
    assert_eq!(
        obj["threads"].as_u64().unwrap() as usize,
        map.len(),
        "{expr}"
    );
    assert!(map
        .iter()
        .all(|row| row.len() == obj["locals"].as_u64().unwrap() as usize));
    Table { shape, map }
}

fn check(expr: &str, want: &Table) {
    assert_eq!(&run_json(expr), want, "{expr}");
}

#[test]
fn primitives_of_ranks_one_to_three() {
    for shape in [
        vec![1],
        vec![6],
        vec![2, 3],
        vec![4, 1],
        vec![1, 5],
        vec![2, 3, 4],
        vec![3, 1, 2],
    ] {
        let args: Vec<String> = shape.iter().map(usize::to_string).collect();
        let args = args.join(",");
        check(&format!("local({args})"), &local(&shape, false));
        check(&format!("spatial({args})"), &spatial(&shape, false));
        check(&format!("column_local({args})"), &local(&shape, true));
        check(&format!("column_spatial({args})"), &spatial(&shape, true));
    }
}

#[test]
fn compositions() {
    check(
        "local(2,1).spatial(8,4).local(1,2)",
        &chain(&[
            local(&[2, 1], false),
            spatial(&[8, 4], false),
            local(&[1, 2], false),
        ]),
    );
    check(
        "spatial(2,2)∘column_local(3,2)",
        &chain(&[spatial(&[2, 2], false), local(&[3, 2], true)]),
    );
    check(
        "column_spatial(2,1,3).local(1,2,2).spatial(2,2,1)",
        &chain(&[
            spatial(&[2, 1, 3], true),
            local(&[1, 2, 2], false),
            spatial(&[2, 2, 1], false),
        ]),
    );
    check(
        "local(3).spatial(4).local(2)",
        &chain(&[local(&[3], false), spatial(&[4], false), local(&[2], false)]),
    );
}

#[test]
fn mixed_rank_compositions_broadcast_the_lower_rank() {
    // local(2) is local(1,2): its two locals step over whole spatial(8,4) tiles along dim 1.
    check(
        "local(2).spatial(8,4)",
        &from_fn(&[8, 8], 32, 2, |t, i| vec![t / 4, 4 * i + t % 4]),
    );
    // Inside: each thread of spatial(8,4) holds two adjacent columns.
    check(
        "spatial(8,4).local(2)",
        &from_fn(&[8, 8], 32, 2, |t, i| vec![t / 4, 2 * (t % 4) + i]),
    );
    // Rank 1 then rank 3: spatial(3) is spatial(1,1,3).
    check(
        "spatial(3).local(2,1,2)",
        &from_fn(&[2, 1, 6], 3, 4, |t, i| vec![i / 2, 0, 2 * t + i % 2]),
    );
    // The mma.m16n8k16 accumulator with its innermost local(1,2) written local(2).
    check(
        "local(2,1).spatial(8,4).local(2)",
        &from_fn(&[16, 8], 32, 4, |lane, i| {
            vec![lane / 4 + 8 * (i >> 1), (lane % 4) * 2 + (i & 1)]
        }),
    );
    // A rank-1 divisor; and the quotient of (f.g)/g keeps the rank of f.g.
    check(
        "local(2,1).spatial(8,4).local(1,2) / local(2)",
        &chain(&[local(&[2, 1], false), spatial(&[8, 4], false)]),
    );
    check(
        "(local(2).spatial(8,4)) / spatial(8,4)",
        &local(&[1, 2], false),
    );
}

#[test]
fn mixed_rank_composition_exact_output() {
    // local(1,2).spatial(1,2): h(t, i) = [0, 2 i + t].
    let out = tilus(&["layout", "local(2).spatial(1,2)", "--json"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim_end(),
        r#"{"shape":[1,4],"threads":2,"locals":2,"map":[[[0,0],[0,2]],[[0,1],[0,3]]]}"#
    );
    // h(t, i) = [t / 2, 2 i + t % 2]: the text form names the broadcast operand.
    let out = tilus(&["layout", "local(2).spatial(2,2)"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim_end(),
        "layout:  local(1,2).spatial(2,2)\n\
         shape:   [2, 4]\n\
         threads: 4\n\
         locals:  2\n\
         \n     0    1    2    3\n\
         0  0:0  1:0  0:1  1:1\n\
         1  2:0  3:0  2:1  3:1"
    );
}

#[test]
fn mma_m16n8k16_fragments() {
    // PTX ISA fragment formulas: groupID = lane >> 2, threadID_in_group = lane % 4.
    let a = from_fn(&[16, 16], 32, 8, |lane, i| {
        let (g, tig) = (lane >> 2, lane % 4);
        vec![g + 8 * ((i >> 1) & 1), tig * 2 + (i & 1) + 8 * (i >> 2)]
    });
    let b = from_fn(&[16, 8], 32, 4, |lane, i| {
        let (g, tig) = (lane >> 2, lane % 4);
        vec![tig * 2 + (i & 1) + 8 * (i >> 1), g]
    });
    let c = from_fn(&[16, 8], 32, 4, |lane, i| {
        let (g, tig) = (lane >> 2, lane % 4);
        vec![g + 8 * (i >> 1), tig * 2 + (i & 1)]
    });
    check("column_local(2,2).spatial(8,4).local(1,2)", &a);
    check("local(2,1).column_spatial(4,8).local(2,1)", &b);
    check("local(2,1).spatial(8,4).local(1,2)", &c);
}

#[test]
fn division() {
    let h = chain(&[
        local(&[2, 1], false),
        spatial(&[8, 4], false),
        local(&[1, 2], false),
    ]);
    let g = chain(&[spatial(&[8, 4], false), local(&[1, 2], false)]);
    let f = run_json("local(2,1).spatial(8,4).local(1,2) / spatial(8,4).local(1,2)");
    assert_eq!(compose(&f, &g), h);
    assert_eq!(f, local(&[2, 1], false));
    let f = run_json("(column_local(2,2).spatial(8,4).local(1,2)) / local(1,2)");
    assert_eq!(f, chain(&[local(&[2, 2], true), spatial(&[8, 4], false)]));
}

#[test]
fn reduce() {
    // Threads 8k..8k+7 all hold row k.
    check(
        "reduce(spatial(4,8), [1])",
        &from_fn(&[4, 1], 32, 1, |t, _| vec![t / 8, 0]),
    );
    // The accumulator fragment reduced over columns: lanes of a quad are replicas.
    check(
        "reduce(local(2,1).spatial(8,4).local(1,2), [1])",
        &from_fn(&[16, 1], 32, 2, |t, i| vec![t / 4 + 8 * i, 0]),
    );
}

#[test]
fn text_output_shows_counts_and_grid() {
    let out = tilus(&["layout", "local(2,1).spatial(2,2)"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("shape:   [4, 2]\nthreads: 4\nlocals:  2\n"),
        "{text}"
    );
    assert!(text.contains("2  0:1  1:1\n"), "{text}");
}

#[test]
fn malformed_expressions_exit_2_with_one_line() {
    for expr in [
        "local(2,1).spacial(8,4)",
        "local(2,1",
        "spatial(0)",
        "spatial(4) / spatial(2,1)",
        "local(2,1).spatial(8,4) / spatial(4,8)",
        "local(2) extra",
        "",
    ] {
        let out = tilus(&["layout", expr]);
        assert_eq!(out.status.code(), Some(2), "{expr}");
        assert!(out.stdout.is_empty(), "{expr}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{expr}: {err}");
        assert!(err.starts_with("error: "), "{err}");
    }
    let out = tilus(&["layout", "local(2,1).spacial(8,4)", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("unknown layout primitive `spacial`"), "{err}");
}

/// Huge layouts are a one-line error at once, never a table of billions of cells.
#[test]
fn huge_layouts_exit_2_quickly() {
    for (expr, needle) in [
        (
            "spatial(65536,65536)",
            "4294967296 threads x 1 locals, too many to print",
        ),
        (
            "local(2147483647)",
            "1 threads x 2147483647 locals, too many to print",
        ),
        ("local(4294967296,4294967296)", "layout too large"),
        (
            "spatial(4294967296).local(4294967296)",
            "composition too large: 4294967296 threads x 4294967296 locals",
        ),
        ("local(99999999999999999999999)", "is too large"),
    ] {
        for json in [false, true] {
            let start = std::time::Instant::now();
            let args: &[&str] = if json {
                &["layout", expr, "--json"]
            } else {
                &["layout", expr]
            };
            let out = tilus(args);
            assert_eq!(out.status.code(), Some(2), "{expr}");
            let err = String::from_utf8(out.stderr).unwrap();
            assert_eq!(err.trim_end().lines().count(), 1, "{expr}: {err}");
            assert!(err.contains(needle), "{expr}: {err}");
            assert!(
                start.elapsed().as_secs_f64() < 5.0,
                "{expr}: {:?}",
                start.elapsed()
            );
        }
    }
}
