//! Layout algebra: primitives, the mma.sync fragments, composition, division, reduce,
//! unsqueeze, owners, rendering.

use tilus_core::layout::{parse, Digit, Layout, LayoutError, Mode};

fn l(text: &str) -> Layout {
    parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// Row-major unravel of `flat` over `shape`.
fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        index[d] = flat % shape[d];
        flat /= shape[d];
    }
    index
}

/// Column-major unravel (dimension 0 fastest).
fn unravel_col(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for d in 0..shape.len() {
        index[d] = flat % shape[d];
        flat /= shape[d];
    }
    index
}

#[test]
fn primitives_follow_their_definitions() {
    for shape in [
        vec![1],
        vec![5],
        vec![2, 3],
        vec![4, 1],
        vec![3, 2, 4],
        vec![2, 1, 3],
    ] {
        let n: usize = shape.iter().product();
        let loc = Layout::local(&shape);
        let spa = Layout::spatial(&shape);
        let cloc = Layout::column_local(&shape);
        let cspa = Layout::column_spatial(&shape);
        for layout in [&loc, &spa, &cloc, &cspa] {
            assert_eq!(layout.shape(), &shape[..]);
        }
        assert_eq!((loc.num_threads(), loc.num_locals()), (1, n));
        assert_eq!((spa.num_threads(), spa.num_locals()), (n, 1));
        assert_eq!((cloc.num_threads(), cloc.num_locals()), (1, n));
        assert_eq!((cspa.num_threads(), cspa.num_locals()), (n, 1));
        for k in 0..n {
            assert_eq!(loc.eval(0, k), unravel(k, &shape));
            assert_eq!(spa.eval(k, 0), unravel(k, &shape));
            assert_eq!(cloc.eval(0, k), unravel_col(k, &shape));
            assert_eq!(cspa.eval(k, 0), unravel_col(k, &shape));
        }
    }
}

#[test]
fn rank_zero_primitive_is_a_single_element() {
    let s = Layout::local(&[]);
    assert_eq!(s.shape(), &[] as &[usize]);
    assert_eq!((s.num_threads(), s.num_locals()), (1, 1));
    assert_eq!(s.eval(0, 0), Vec::<usize>::new());
    assert_eq!(s.owners(&[]), vec![(0, 0)]);
}

// PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" (f16 A/B, f32 C).
fn mma_a(lane: usize, i: usize) -> Vec<usize> {
    let (group, tig) = (lane >> 2, lane % 4);
    vec![group + 8 * ((i >> 1) & 1), tig * 2 + (i & 1) + 8 * (i >> 2)]
}
fn mma_b(lane: usize, i: usize) -> Vec<usize> {
    let (group, tig) = (lane >> 2, lane % 4);
    vec![tig * 2 + (i & 1) + 8 * (i >> 1), group]
}
fn mma_c(lane: usize, i: usize) -> Vec<usize> {
    let (group, tig) = (lane >> 2, lane % 4);
    vec![group + 8 * (i >> 1), tig * 2 + (i & 1)]
}

fn check_fragment(
    layout: &Layout,
    shape: [usize; 2],
    locals: usize,
    reference: fn(usize, usize) -> Vec<usize>,
) {
    assert_eq!(layout.shape(), &shape);
    assert_eq!(layout.num_threads(), 32);
    assert_eq!(layout.num_locals(), locals);
    for lane in 0..32 {
        for i in 0..locals {
            assert_eq!(
                layout.eval(lane, i),
                reference(lane, i),
                "lane {lane} local {i}"
            );
            assert_eq!(layout.owners(&reference(lane, i)), vec![(lane, i)]);
        }
    }
}

#[test]
fn mma_m16n8k16_fragments_match_the_ptx_isa() {
    let a = Layout::column_local(&[2, 2])
        .compose(&Layout::spatial(&[8, 4]))
        .and_then(|x| x.compose(&Layout::local(&[1, 2])))
        .unwrap();
    check_fragment(&a, [16, 16], 8, mma_a);
    check_fragment(
        &l("local(2,1).column_spatial(4,8).local(2,1)"),
        [16, 8],
        4,
        mma_b,
    );
    check_fragment(&l("local(2,1).spatial(8,4).local(1,2)"), [16, 8], 4, mma_c);
    // `∘` is accepted as well as `.`.
    assert_eq!(l("column_local(2,2) ∘ spatial(8,4) ∘ local(1,2)"), a);
}

#[test]
fn representation_of_the_accumulator_fragment() {
    let c = l("local(2,1).spatial(8,4).local(1,2)");
    let m = |dim, size, stride| Mode { dim, size, stride };
    assert_eq!(c.modes(), &[m(0, 2, 8), m(0, 8, 1), m(1, 4, 2), m(1, 2, 1)]);
    assert_eq!(c.spatial_digits(), &[Digit::Mode(1), Digit::Mode(2)]);
    assert_eq!(c.local_digits(), &[0, 3]);
    assert_eq!(c.num_replicas(), 1);
    assert_eq!(c.to_expr(), "local(2,1).spatial(8,4).local(1,2)");
}

#[test]
fn normalization_merges_and_drops() {
    assert_eq!(l("local(2).local(3)"), Layout::local(&[6]));
    // Dim 0's two modes are consecutive thread digits only when dim 1 is not between them.
    assert_eq!(
        l("spatial(2,1).spatial(4,3)"),
        l("spatial(8,1).spatial(1,3)")
    );
    assert_ne!(l("spatial(2,3).spatial(4,1)"), l("spatial(8,3)"));
    assert_eq!(Layout::column_local(&[5, 1]), Layout::local(&[5, 1]));
    assert_eq!(l("local(1,1).spatial(1,1)"), Layout::local(&[1, 1]));
    assert!(l("local(1,1)").modes().is_empty());
    // Row-major spatial(2,3) is one digit per dim, not mergeable across dims.
    assert_eq!(l("spatial(2,3)").spatial_digits().len(), 2);
    // spatial(4).spatial(2) is a single mode of 8: thread t -> t.
    let s = l("spatial(4).spatial(2)");
    assert_eq!(s, Layout::spatial(&[8]));
    assert_eq!(s.modes().len(), 1);
}

#[test]
fn composition_follows_the_definition() {
    let cases = [
        ("local(2,1)", "spatial(8,4)"),
        ("spatial(2,2)", "local(3,1)"),
        ("column_spatial(2,3)", "column_local(2,2)"),
        ("local(2,2,1).spatial(1,2,2)", "column_spatial(2,1,3)"),
        ("reduce(spatial(2,4),[1])", "local(2,2)"),
    ];
    for (fs, gs) in cases {
        let (f, g) = (l(fs), l(gs));
        let h = f.compose(&g).unwrap();
        let (tg, lg) = (g.num_threads(), g.num_locals());
        assert_eq!(h.num_threads(), f.num_threads() * tg);
        assert_eq!(h.num_locals(), f.num_locals() * lg);
        for t in 0..h.num_threads() {
            for i in 0..h.num_locals() {
                let outer = f.eval(t / tg, i / lg);
                let inner = g.eval(t % tg, i % lg);
                let want: Vec<usize> = (0..f.rank())
                    .map(|d| outer[d] * g.shape()[d] + inner[d])
                    .collect();
                assert_eq!(h.eval(t, i), want, "{fs} . {gs} at ({t}, {i})");
            }
        }
    }
}

/// Every `(t, i)` of `h` against a hand-written formula.
fn check_map(
    h: &Layout,
    shape: &[usize],
    threads: usize,
    locals: usize,
    want: fn(usize, usize) -> Vec<usize>,
) {
    assert_eq!(
        (h.shape(), h.num_threads(), h.num_locals()),
        (shape, threads, locals),
        "{}",
        h.to_expr()
    );
    for t in 0..threads {
        for i in 0..locals {
            assert_eq!(h.eval(t, i), want(t, i), "{} at ({t}, {i})", h.to_expr());
        }
    }
}

#[test]
fn broadcast_prepends_unit_dims() {
    let f = l("spatial(3).local(2)");
    let b = f.broadcast_to_rank(3).unwrap();
    // Thread t holds [2t, 2t+1] of the rank-1 tile; at rank 3 the index gains two leading 0s.
    check_map(&b, &[1, 1, 6], 3, 2, |t, i| vec![0, 0, 2 * t + i]);
    assert_eq!(b, f.unsqueeze(&[0, 1]).unwrap());
    assert_eq!(f.broadcast_to_rank(1).unwrap(), f);
    assert_eq!(
        Layout::local(&[]).broadcast_to_rank(2).unwrap(),
        Layout::local(&[1, 1])
    );
    assert_eq!(
        f.broadcast_to_rank(0),
        Err(LayoutError::Invalid(
            "cannot broadcast a rank-1 layout to rank 0: broadcasting only prepends dimensions"
                .into()
        ))
    );
    // A hostile rank is an error, not an allocation that aborts the process (fuzz_host).
    use tilus_core::layout::MAX_BROADCAST_RANK;
    assert_eq!(
        f.broadcast_to_rank(MAX_BROADCAST_RANK).unwrap().rank(),
        MAX_BROADCAST_RANK
    );
    for rank in [MAX_BROADCAST_RANK + 1, 1 << 40, usize::MAX] {
        let e = f.broadcast_to_rank(rank).unwrap_err();
        assert!(e.to_string().contains("at most 65536 dimensions"), "{e}");
    }
}

#[test]
fn composition_broadcasts_the_lower_rank_operand() {
    // local(2) is local(1,2): one thread with locals [0,0] and [0,1], outside spatial(8,4).
    let h = l("local(2)").compose(&l("spatial(8,4)")).unwrap();
    check_map(&h, &[8, 8], 32, 2, |t, i| vec![t / 4, 4 * i + t % 4]);
    assert_eq!(h, l("local(1,2).spatial(8,4)"));
    // Inside: each thread of spatial(8,4) owns two adjacent columns.
    let h = l("spatial(8,4)").compose(&l("local(2)")).unwrap();
    check_map(&h, &[8, 8], 32, 2, |t, i| vec![t / 4, 2 * (t % 4) + i]);
    assert_eq!(h, l("spatial(8,4).local(1,2)"));
    // Rank 1 with rank 3: spatial(3) is spatial(1,1,3).
    let h = l("spatial(3)").compose(&l("local(2,1,2)")).unwrap();
    check_map(&h, &[2, 1, 6], 3, 4, |t, i| vec![i / 2, 0, 2 * t + i % 2]);
    // Rank 0 composes with anything as a unit.
    let c = l("local(2,1).spatial(8,4)");
    assert_eq!(Layout::local(&[]).compose(&c).unwrap(), c);
    assert_eq!(c.compose(&Layout::spatial(&[])).unwrap(), c);
    // A rank-1 replication digit applies at any rank.
    assert_eq!(
        l("spatial(2,2)")
            .compose(&Layout::replicated(1, 3))
            .unwrap(),
        l("spatial(2,2)")
            .compose(&Layout::replicated(2, 3))
            .unwrap()
    );
}

#[test]
fn division_broadcasts_the_lower_rank_operand() {
    let c = l("local(2,1).spatial(8,4).local(1,2)");
    // A rank-1 divisor is local(1,2).
    assert_eq!(
        c.divide(&l("local(2)")).unwrap(),
        l("local(2,1).spatial(8,4)")
    );
    // (f.g)/g is f at the rank of f.g: local(1,2), not local(2).
    let h = l("local(2).spatial(8,4)");
    assert_eq!(h.divide(&l("spatial(8,4)")).unwrap(), l("local(1,2)"));
    assert_eq!(
        h.divide(&l("spatial(8,4)")).unwrap(),
        l("local(2)").broadcast_to_rank(2).unwrap()
    );
    // A higher-rank divisor: spatial(4) is spatial(1,4) = spatial(1,2).spatial(1,2).
    let q = l("spatial(4)").divide(&l("spatial(1,2)")).unwrap();
    check_map(&q, &[1, 2], 2, 1, |t, _| vec![0, t]);
    // ...whose extra leading extents must be 1.
    let e = l("spatial(4)").divide(&l("spatial(2,1)")).unwrap_err();
    assert!(
        e.to_string()
            .contains("dim 0: the divisor's extent 2 does not divide the extent 1"),
        "{e}"
    );
}

#[test]
fn composition_rejects_overflow() {
    let big = Layout::spatial(&[1 << 40]);
    assert!(matches!(big.compose(&big), Err(LayoutError::Invalid(_))));
}

#[test]
fn division_recovers_the_outer_layout() {
    let c = l("local(2,1).spatial(8,4).local(1,2)");
    assert_eq!(
        c.divide(&l("local(1,2)")).unwrap(),
        l("local(2,1).spatial(8,4)")
    );
    assert_eq!(
        c.divide(&l("spatial(8,4).local(1,2)")).unwrap(),
        l("local(2,1)")
    );
    assert_eq!(c.divide(&c).unwrap(), Layout::local(&[1, 1]));
    assert_eq!(
        l("spatial(8)").divide(&l("spatial(2)")).unwrap(),
        l("spatial(4)")
    );
    assert_eq!(
        l("local(12)").divide(&l("local(3)")).unwrap(),
        l("local(4)")
    );
    // Splitting a mode of the divisor: spatial(4) . spatial(2) ... the divisor's mode of 4
    // against the dividend's modes 2 (inner) and 2.
    let h = l("spatial(2).spatial(4)");
    assert_eq!(h.divide(&l("spatial(4)")).unwrap(), l("spatial(2)"));
    // Replicas split by size.
    let r = Layout::replicated(1, 4);
    let rr = l("spatial(3)").compose(&r).unwrap();
    assert_eq!(
        rr.divide(&Layout::replicated(1, 2)).unwrap(),
        l("spatial(3)").compose(&Layout::replicated(1, 2)).unwrap()
    );
}

#[test]
fn division_failures_say_why() {
    let err = l("local(2,1).spatial(8,4)")
        .divide(&l("spatial(4,8)"))
        .unwrap_err();
    let LayoutError::NotDivisible(msg) = &err else {
        panic!("{err:?}")
    };
    assert!(
        msg.starts_with("local(2,1).spatial(8,4) is not divisible by spatial(4,8): dim 1"),
        "{msg}"
    );
    // Shapes divide but the digits are in the wrong list.
    let err = l("local(4)").divide(&l("spatial(2)")).unwrap_err();
    assert!(err.to_string().contains("threads"), "{err}");
    // Wrong digit order.
    let err = l("spatial(2,2)")
        .divide(&l("column_spatial(2,2)"))
        .unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");
    // The divisor's extent cuts a mode off-boundary.
    let err = l("local(3).spatial(4)").divide(&l("local(6)")).unwrap_err();
    assert!(err.to_string().contains("cuts through"), "{err}");
    // No common refinement.
    let err = l("spatial(3).local(2)")
        .divide(&l("spatial(2).local(3)"))
        .unwrap_err();
    assert!(matches!(err, LayoutError::NotDivisible(_)), "{err}");
}

#[test]
fn reduce_replicates_threads_and_drops_locals() {
    let r = l("reduce(spatial(4,8),[1])");
    assert_eq!(r.shape(), &[4, 1]);
    assert_eq!(
        (r.num_threads(), r.num_locals(), r.num_replicas()),
        (32, 1, 8)
    );
    assert_eq!(r.spatial_digits(), &[Digit::Mode(0), Digit::Replicated(8)]);
    for t in 0..32 {
        assert_eq!(r.eval(t, 0), vec![t / 8, 0]);
    }
    assert_eq!(
        r.owners(&[1, 0]),
        (8..16).map(|t| (t, 0)).collect::<Vec<_>>()
    );

    let c = l("local(2,1).spatial(8,4).local(1,2)");
    let rc = c.reduce(&[1]).unwrap();
    assert_eq!(rc.shape(), &[16, 1]);
    assert_eq!(
        (rc.num_threads(), rc.num_locals(), rc.num_replicas()),
        (32, 2, 4)
    );
    for t in 0..32 {
        for i in 0..2 {
            assert_eq!(rc.eval(t, i), vec![t / 4 + 8 * i, 0]);
        }
    }
    assert_eq!(c.reduce(&[0, 1]).unwrap().shape(), &[1, 1]);
    assert_eq!(c.reduce(&[0, 1]).unwrap().num_replicas(), 32);
    assert!(matches!(c.reduce(&[2]), Err(LayoutError::Invalid(_))));
    // Adjacent replication digits merge.
    assert_eq!(l("reduce(spatial(4,8),[0,1])"), Layout::replicated(2, 32));
}

#[test]
fn unsqueeze_inserts_unit_dims() {
    let c = l("local(2,1).spatial(8,4)");
    let u = c.unsqueeze(&[0, 3]).unwrap();
    assert_eq!(u.shape(), &[1, 16, 4, 1]);
    for t in 0..32 {
        for i in 0..2 {
            let e = c.eval(t, i);
            assert_eq!(u.eval(t, i), vec![0, e[0], e[1], 0]);
        }
    }
    assert!(c.unsqueeze(&[4]).is_err());
    assert!(c.unsqueeze(&[1, 1]).is_err());
    assert_eq!(c.unsqueeze(&[]).unwrap(), c);
}

#[test]
fn owners_inverts_eval() {
    for text in [
        "local(2,1).spatial(8,4).local(1,2)",
        "reduce(local(2,2).spatial(2,4),[1]).spatial(3,1)",
        "column_spatial(3,2).local(2,2)",
    ] {
        let layout = l(text);
        let mut count = std::collections::HashMap::new();
        for t in 0..layout.num_threads() {
            for i in 0..layout.num_locals() {
                let index = layout.eval(t, i);
                assert!(layout.owners(&index).contains(&(t, i)), "{text}");
                *count.entry(index).or_insert(0) += 1;
            }
        }
        for (index, n) in count {
            let owners = layout.owners(&index);
            assert_eq!(owners.len(), n);
            assert_eq!(n, layout.num_replicas());
            assert!(owners.iter().all(|&(t, i)| layout.eval(t, i) == index));
        }
        assert!(layout.owners(&vec![99; layout.rank()]).is_empty());
        assert!(layout.owners(&[0]).is_empty() || layout.rank() == 1);
    }
}

#[test]
fn to_map_is_eval() {
    let c = l("local(2,1).spatial(8,4).local(1,2)");
    let map = c.to_map();
    assert_eq!(map.len(), 32);
    for (t, row) in map.iter().enumerate() {
        assert_eq!(row.len(), 4);
        for (i, index) in row.iter().enumerate() {
            assert_eq!(index, &c.eval(t, i));
        }
    }
}

#[test]
fn replicated_layout_repeats_threads() {
    let r = l("spatial(2,2)")
        .compose(&Layout::replicated(2, 3))
        .unwrap();
    assert_eq!(r.num_threads(), 12);
    for t in 0..12 {
        assert_eq!(r.eval(t, 0), vec![t / 6, t / 3 % 2]);
    }
    assert_eq!(r.to_expr(), "spatial(2,2).replicated(3)");
}

#[test]
fn to_expr_names_simple_layouts() {
    for text in [
        "local(2,1).spatial(8,4).local(1,2)",
        "column_local(2,2).spatial(8,4).local(1,2)",
        "local(2,1).column_spatial(4,8).local(2,1)",
        "spatial(3,5,7)",
        "column_spatial(2,3,4)",
        "local(1,1)",
    ] {
        assert_eq!(l(text).to_expr(), text);
    }
}

#[test]
fn from_parts_validates_and_normalizes() {
    let m = |dim, size| Mode {
        dim,
        size,
        stride: 0,
    };
    let built = Layout::from_parts(
        &[16, 8],
        &[m(0, 2), m(0, 8), m(1, 4), m(1, 2)],
        &[Digit::Mode(1), Digit::Mode(2)],
        &[0, 3],
    )
    .unwrap();
    assert_eq!(built, l("local(2,1).spatial(8,4).local(1,2)"));
    // Mode used twice, unused, bad product, bad dim.
    assert!(Layout::from_parts(&[4], &[m(0, 4)], &[Digit::Mode(0)], &[0]).is_err());
    assert!(Layout::from_parts(&[4], &[m(0, 4)], &[], &[]).is_err());
    assert!(Layout::from_parts(&[4], &[m(0, 2)], &[], &[0]).is_err());
    assert!(Layout::from_parts(&[4], &[m(1, 4)], &[], &[0]).is_err());
    assert!(Layout::from_parts(&[1], &[], &[Digit::Replicated(0)], &[]).is_err());
    // A digit order no chain of primitives produces still prints, structurally.
    let odd = Layout::from_parts(
        &[4, 4],
        &[m(0, 2), m(0, 2), m(1, 2), m(1, 2)],
        &[Digit::Mode(1), Digit::Mode(2)],
        &[3, 0],
    )
    .unwrap();
    assert!(odd.to_expr().starts_with("layout{"), "{}", odd.to_expr());
}

#[test]
fn display_renders_the_grid() {
    let text = l("local(2,1).spatial(2,2)").to_string();
    let want = concat!(
        "     0    1\n",
        "0  0:0  1:0\n",
        "1  2:0  3:0\n",
        "2  0:1  1:1\n",
        "3  2:1  3:1"
    );
    assert_eq!(text, want);
    assert_eq!(
        l("spatial(3)").to_string(),
        "    0    1    2\n  0:0  1:0  2:0"
    );
    let rep = l("reduce(spatial(2,2),[1])").to_string();
    assert!(
        rep.starts_with("(each element is held by 2 replicated threads"),
        "{rep}"
    );
    assert!(rep.ends_with("0  0:0\n1  2:0"), "{rep}");
    let cube = l("spatial(2,1,2)").to_string();
    assert_eq!(
        cube,
        "[0, :, :]\n     0    1\n0  0:0  1:0\n\n[1, :, :]\n     0    1\n0  2:0  3:0"
    );
}

/// `swap_inner_locals(p, x)`: local `(rest, x, p)` of the input is local `(rest, p, x)` of the
/// result, on the same thread; `local_permutation` recovers exactly that map.
#[test]
fn swap_inner_locals_reorders_each_thread_and_nothing_else() {
    for (expr, p, x) in [
        // The mma B fragment with repeats: pair innermost, then the k half, then n repeats.
        ("local(2,8).local(2,1).column_spatial(4,8).local(2,1)", 2, 8),
        ("local(2,8).local(2,1).column_spatial(4,8).local(2,1)", 2, 4),
        (
            "local(2,8).local(2,1).column_spatial(4,8).local(2,1)",
            2,
            16,
        ),
        (
            "spatial(1,4).local(4,4).local(2,1).column_spatial(4,8).local(2,1)",
            2,
            2,
        ),
        ("local(4,3).spatial(2,2).local(2,2)", 2, 6),
        ("local(8)", 4, 2),
    ] {
        let l: Layout = expr.parse().unwrap();
        let s = l.swap_inner_locals(p, x).unwrap();
        assert_eq!(s.shape(), l.shape());
        assert_eq!(
            (s.num_threads(), s.num_locals()),
            (l.num_threads(), l.num_locals())
        );
        let sigma = l.local_permutation(&s).expect("same elements per thread");
        for t in 0..l.num_threads() {
            for i in 0..l.num_locals() {
                let (rest, xi, pi) = (i / (p * x), i / p % x, i % p);
                let j = rest * p * x + pi * x + xi;
                assert_eq!(s.eval(t, j), l.eval(t, i), "{expr}: t={t} i={i}");
                assert_eq!(sigma[j], i);
            }
        }
        // Swapping back restores the layout.
        assert_eq!(s.swap_inner_locals(x, p).unwrap(), l, "{expr}");
    }
}

#[test]
fn swap_inner_locals_and_local_permutation_reject_what_they_cannot_do() {
    let l: Layout = "local(2,8).spatial(4,8).local(2,1)".parse().unwrap();
    // 32 locals: 2 * 32 does not divide them.
    assert!(l.swap_inner_locals(2, 32).is_err());
    // A local mode of size 3 cannot be split at 2.
    let odd: Layout = "local(3,2)".parse().unwrap();
    assert!(odd.swap_inner_locals(1, 2).is_ok());
    assert!(odd.swap_inner_locals(2, 2).is_err());
    // Zero, and a product that overflows usize (was an arithmetic-overflow panic; fuzz_host).
    assert!(odd.swap_inner_locals(0, 2).is_err());
    let e = odd.swap_inner_locals(1 << 63, 2).unwrap_err();
    assert!(
        e.to_string()
            .contains("not a multiple of 18446744073709551616"),
        "{e}"
    );
    // Different threads hold different elements: no local permutation.
    let a: Layout = "spatial(2).local(2)".parse().unwrap();
    let b: Layout = "local(2).spatial(2)".parse().unwrap();
    assert!(a.local_permutation(&b).is_none());
    assert_eq!(a.local_permutation(&a), Some(vec![0, 1]));
}
