//! Property tests of the layout algebra: associativity, identities, `(f.g)/g == f`, division
//! never panicking and always composing back, owners inverting eval, the canonical form; and
//! the same laws over operands of different ranks (broadcast to the larger rank).

use proptest::prelude::*;
use tilus_core::layout::{parse, Digit, Layout, Mode, Primitive};

const KINDS: [Primitive; 4] = [
    Primitive::Local,
    Primitive::Spatial,
    Primitive::ColumnLocal,
    Primitive::ColumnSpatial,
];

/// One step building a random layout.
#[derive(Clone, Debug)]
enum Step {
    Prim(usize, Vec<usize>),
    Reduce(Vec<usize>),
    Replicate(usize),
}

fn steps(rank: usize) -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        6 => (0..4usize, prop::collection::vec(1..=3usize, rank)).prop_map(|(k, s)| Step::Prim(k, s)),
        1 => prop::collection::vec(0..rank, 1..=rank).prop_map(Step::Reduce),
        1 => (2..=3usize).prop_map(Step::Replicate),
    ];
    prop::collection::vec(step, 1..=4)
}

fn build(rank: usize, steps: &[Step]) -> Layout {
    let mut layout = Layout::local(&vec![1; rank]);
    for step in steps {
        layout = match step {
            Step::Prim(k, shape) => layout
                .compose(&Layout::primitive(KINDS[*k], shape).unwrap())
                .unwrap(),
            Step::Reduce(dims) => layout.reduce(dims).unwrap(),
            Step::Replicate(n) => layout.compose(&Layout::replicated(rank, *n)).unwrap(),
        };
    }
    layout
}

/// A random layout of the given rank with at most `max` thread-local pairs.
fn layout(rank: usize, max: usize) -> impl Strategy<Value = Layout> {
    steps(rank)
        .prop_map(move |s| build(rank, &s))
        .prop_filter("small enough", move |l| {
            l.num_threads() * l.num_locals() <= max
        })
}

fn layout_small() -> impl Strategy<Value = Layout> {
    let step = prop_oneof![
        4 => (0..4usize, prop::collection::vec(1..=2usize, 2)).prop_map(|(k, s)| Step::Prim(k, s)),
        1 => prop::collection::vec(0..2usize, 1..=1).prop_map(Step::Reduce),
        1 => Just(Step::Replicate(2)),
    ];
    prop::collection::vec(step, 1..=3).prop_map(|s| build(2, &s))
}

fn pair(max: usize) -> impl Strategy<Value = (Layout, Layout)> {
    (1..=3usize).prop_flat_map(move |r| (layout(r, max), layout(r, max)))
}

fn triple(max: usize) -> impl Strategy<Value = (Layout, Layout, Layout)> {
    (1..=3usize).prop_flat_map(move |r| (layout(r, max), layout(r, max), layout(r, max)))
}

/// Direct definition of composition, by evaluation.
fn composes_to(f: &Layout, g: &Layout, h: &Layout) -> bool {
    let (tg, lg) = (g.num_threads(), g.num_locals());
    h.num_threads() == f.num_threads() * tg
        && h.num_locals() == f.num_locals() * lg
        && (0..h.num_threads()).all(|t| {
            (0..h.num_locals()).all(|i| {
                let (o, n) = (f.eval(t / tg, i / lg), g.eval(t % tg, i % lg));
                let want: Vec<usize> = (0..f.rank()).map(|d| o[d] * g.shape()[d] + n[d]).collect();
                h.eval(t, i) == want
            })
        })
}

/// Two layouts whose ranks (1 to 3) are drawn independently.
fn mixed_pair(max: usize) -> impl Strategy<Value = (Layout, Layout)> {
    (1..=3usize, 1..=3usize).prop_flat_map(move |(a, b)| (layout(a, max), layout(b, max)))
}

fn mixed_triple(max: usize) -> impl Strategy<Value = (Layout, Layout, Layout)> {
    (1..=3usize, 1..=3usize, 1..=3usize)
        .prop_flat_map(move |(a, b, c)| (layout(a, max), layout(b, max), layout(c, max)))
}

/// `x` with `fill` prepended up to length `rank`: Definition 5's broadcast of an index
/// (`fill = 0`) or a shape (`fill = 1`), written here independently of `broadcast_to_rank`.
fn pad(x: &[usize], rank: usize, fill: usize) -> Vec<usize> {
    let mut out = vec![fill; rank - x.len()];
    out.extend_from_slice(x);
    out
}

/// The composition definition over mixed ranks: both operands padded to the larger rank.
fn composes_to_broadcast(f: &Layout, g: &Layout, h: &Layout) -> bool {
    let r = f.rank().max(g.rank());
    let (sf, sg) = (pad(f.shape(), r, 1), pad(g.shape(), r, 1));
    let (tg, lg) = (g.num_threads(), g.num_locals());
    let shape: Vec<usize> = (0..r).map(|d| sf[d] * sg[d]).collect();
    h.shape() == shape.as_slice()
        && h.num_threads() == f.num_threads() * tg
        && h.num_locals() == f.num_locals() * lg
        && (0..h.num_threads()).all(|t| {
            (0..h.num_locals()).all(|i| {
                let o = pad(&f.eval(t / tg, i / lg), r, 0);
                let n = pad(&g.eval(t % tg, i % lg), r, 0);
                let want: Vec<usize> = (0..r).map(|d| o[d] * sg[d] + n[d]).collect();
                h.eval(t, i) == want
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn broadcast_prepends_unit_dims(
        f in (1..=3usize).prop_flat_map(|r| layout(r, 256)),
        extra in 0..=2usize,
    ) {
        let r = f.rank() + extra;
        let b = f.broadcast_to_rank(r).unwrap();
        prop_assert_eq!(b.shape().to_vec(), pad(f.shape(), r, 1));
        prop_assert_eq!((b.num_threads(), b.num_locals()), (f.num_threads(), f.num_locals()));
        for t in 0..f.num_threads() {
            for i in 0..f.num_locals() {
                prop_assert_eq!(b.eval(t, i), pad(&f.eval(t, i), r, 0));
            }
        }
        prop_assert!(f.broadcast_to_rank(f.rank() - 1).is_err());
    }

    #[test]
    fn mixed_rank_composition_is_composition_after_broadcast((f, g) in mixed_pair(64)) {
        let h = f.compose(&g).unwrap();
        let r = f.rank().max(g.rank());
        prop_assert_eq!(h.rank(), r);
        prop_assert!(composes_to_broadcast(&f, &g, &h));
        let explicit = f
            .broadcast_to_rank(r)
            .unwrap()
            .compose(&g.broadcast_to_rank(r).unwrap())
            .unwrap();
        prop_assert_eq!(h, explicit);
    }

    #[test]
    fn broadcast_commutes_with_composition((f, g) in mixed_pair(64), extra in 0..=2usize) {
        let r = f.rank().max(g.rank()) + extra;
        let b = |l: &Layout| l.broadcast_to_rank(r).unwrap();
        prop_assert_eq!(b(&f.compose(&g).unwrap()), b(&f).compose(&b(&g)).unwrap());
    }

    #[test]
    fn mixed_rank_composition_is_associative((f, g, h) in mixed_triple(16)) {
        let left = f.compose(&g).unwrap().compose(&h).unwrap();
        let right = f.compose(&g.compose(&h).unwrap()).unwrap();
        prop_assert!(left.same_function(&right));
        prop_assert_eq!(left, right);
    }

    #[test]
    fn unit_layouts_of_any_rank_are_identities_up_to_broadcast(
        f in (1..=3usize).prop_flat_map(|r| layout(r, 256)),
        k in 0..=3usize,
    ) {
        let ones = vec![1; k];
        let bf = f.broadcast_to_rank(f.rank().max(k)).unwrap();
        for id in [Layout::local(&ones), Layout::spatial(&ones)] {
            prop_assert_eq!(f.compose(&id).unwrap(), bf.clone());
            prop_assert_eq!(id.compose(&f).unwrap(), bf.clone());
            prop_assert_eq!(f.divide(&id).unwrap(), bf.clone());
        }
    }

    #[test]
    fn mixed_rank_division_undoes_composition((f, g) in mixed_pair(64)) {
        // (f.g)/g is f at the rank of f.g, i.e. f itself when rank f >= rank g.
        let h = f.compose(&g).unwrap();
        let q = h.divide(&g);
        prop_assert!(q.is_ok(), "{} / {}: {:?}", h.to_expr(), g.to_expr(), q);
        let q = q.unwrap();
        prop_assert_eq!(&q, &f.broadcast_to_rank(h.rank()).unwrap());
        if f.rank() >= g.rank() {
            prop_assert_eq!(q, f);
        }
    }

    #[test]
    fn mixed_rank_division_is_division_after_broadcast((h, g) in mixed_pair(64)) {
        let r = h.rank().max(g.rank());
        let q = h.divide(&g);
        let explicit = h.broadcast_to_rank(r).unwrap().divide(&g.broadcast_to_rank(r).unwrap());
        prop_assert_eq!(q.as_ref().ok(), explicit.as_ref().ok());
        if let Ok(f) = q {
            prop_assert_eq!(f.rank(), r);
            prop_assert!(composes_to_broadcast(&f, &g, &h.broadcast_to_rank(r).unwrap()));
        }
    }

    #[test]
    fn mixed_rank_division_of_a_composition_by_its_inner_part((f, g, k) in mixed_triple(16)) {
        let gk = g.compose(&k).unwrap();
        let h = f.compose(&gk).unwrap();
        let r = h.rank();
        prop_assert_eq!(h.divide(&gk).unwrap(), f.broadcast_to_rank(r).unwrap());
        let fg = f.compose(&g).unwrap();
        prop_assert_eq!(h.divide(&k).unwrap(), fg.broadcast_to_rank(r).unwrap());
    }

    #[test]
    fn composition_matches_its_definition((f, g) in pair(64)) {
        let h = f.compose(&g).unwrap();
        prop_assert!(composes_to(&f, &g, &h));
    }

    #[test]
    fn composition_is_associative((f, g, h) in triple(16)) {
        let left = f.compose(&g).unwrap().compose(&h).unwrap();
        let right = f.compose(&g.compose(&h).unwrap()).unwrap();
        prop_assert!(left.same_function(&right));
        prop_assert_eq!(left, right);
    }

    #[test]
    fn unit_layouts_are_identities(f in (1..=3usize).prop_flat_map(|r| layout(r, 256))) {
        let ones = vec![1; f.rank()];
        for id in [Layout::local(&ones), Layout::spatial(&ones)] {
            prop_assert!(f.compose(&id).unwrap().same_function(&f));
            prop_assert!(id.compose(&f).unwrap().same_function(&f));
            prop_assert_eq!(f.divide(&id).unwrap(), f.clone());
        }
        prop_assert_eq!(f.divide(&f).unwrap(), Layout::local(&ones));
    }

    #[test]
    fn division_undoes_composition((f, g) in pair(64)) {
        let h = f.compose(&g).unwrap();
        let q = h.divide(&g);
        prop_assert!(q.is_ok(), "{} / {}: {:?}", h.to_expr(), g.to_expr(), q);
        let q = q.unwrap();
        prop_assert!(q.same_function(&f));
        prop_assert_eq!(q, f);
    }

    #[test]
    fn division_never_panics_and_is_exact((h, g) in pair(64)) {
        if let Ok(f) = h.divide(&g) {
            prop_assert!(composes_to(&f, &g, &h));
        }
    }

    #[test]
    fn division_of_a_composition_by_its_inner_part((f, g, k) in triple(16)) {
        // (f.g.k) / (g.k) == f
        let gk = g.compose(&k).unwrap();
        let h = f.compose(&gk).unwrap();
        prop_assert_eq!(h.divide(&gk).unwrap(), f.clone());
        prop_assert_eq!(h.divide(&k).unwrap(), f.compose(&g).unwrap());
    }

    #[test]
    fn equality_is_semantic((f, g) in pair(64)) {
        prop_assert_eq!(f == g, f.same_function(&g));
    }

    #[test]
    fn equality_is_semantic_on_a_small_space(
        (f, g) in (layout_small(), layout_small())
    ) {
        // Small extents make different constructions of one function common.
        prop_assert_eq!(f == g, f.same_function(&g));
    }

    #[test]
    fn refined_representations_normalize_back(f in (1..=3usize).prop_flat_map(|r| layout(r, 256)), pick in 0..8usize) {
        // Split one composite mode into two (outer, inner) with consecutive digits: the same
        // function, so from_parts must give back the identical canonical layout.
        let modes = f.modes();
        let Some(id) = (0..modes.len()).map(|k| (k + pick) % modes.len()).find(|&k| modes[k].size % 2 == 0 && modes[k].size > 2 || modes[k].size % 3 == 0 && modes[k].size > 3) else {
            return Ok(());
        };
        let p = if modes[id].size % 2 == 0 { 2 } else { 3 };
        let mut new_modes = modes.to_vec();
        new_modes[id].size = modes[id].size / p;
        new_modes.insert(id + 1, Mode { dim: modes[id].dim, size: p, stride: 0 });
        let renum = |m: usize| if m > id { m + 1 } else { m };
        let mut spatial = Vec::new();
        for &d in f.spatial_digits() {
            match d {
                Digit::Mode(m) if m == id => spatial.extend([Digit::Mode(id), Digit::Mode(id + 1)]),
                Digit::Mode(m) => spatial.push(Digit::Mode(renum(m))),
                rep => spatial.push(rep),
            }
        }
        let mut local = Vec::new();
        for &m in f.local_digits() {
            if m == id {
                local.extend([id, id + 1]);
            } else {
                local.push(renum(m));
            }
        }
        let g = Layout::from_parts(f.shape(), &new_modes, &spatial, &local).unwrap();
        prop_assert_eq!(g, f);
    }

    #[test]
    fn owners_invert_eval(f in (1..=3usize).prop_flat_map(|r| layout(r, 256))) {
        let mut seen = 0;
        for t in 0..f.num_threads() {
            for i in 0..f.num_locals() {
                let index = f.eval(t, i);
                let owners = f.owners(&index);
                prop_assert_eq!(owners.len(), f.num_replicas());
                prop_assert!(owners.contains(&(t, i)));
                for &(u, j) in &owners {
                    prop_assert_eq!(f.eval(u, j), index.clone());
                }
                seen += 1;
            }
        }
        // Every element is held: threads * locals == elements * replicas.
        prop_assert_eq!(seen, f.shape().iter().product::<usize>() * f.num_replicas());
    }

    #[test]
    fn to_expr_parses_back(f in (1..=3usize).prop_flat_map(|r| layout(r, 256))) {
        let text = f.to_expr();
        if !text.contains("replicated") {
            prop_assert_eq!(parse(&text).unwrap(), f);
        }
    }

    #[test]
    fn reduce_keeps_threads_and_drops_locals(
        (f, dims) in (1..=3usize).prop_flat_map(|r| (layout(r, 256), prop::collection::vec(0..r, 0..=r)))
    ) {
        let r = f.reduce(&dims).unwrap();
        prop_assert_eq!(r.num_threads(), f.num_threads());
        for t in 0..f.num_threads() {
            for i in 0..f.num_locals() {
                let mut want = f.eval(t, i);
                for &d in &dims {
                    want[d] = 0;
                }
                // Local i of f maps to the local of r made of its non-reduced digits.
                let held: Vec<Vec<usize>> = (0..r.num_locals()).map(|j| r.eval(t, j)).collect();
                prop_assert!(held.contains(&want));
            }
        }
    }
}
