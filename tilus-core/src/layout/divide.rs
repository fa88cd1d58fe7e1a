//! Layout division `h / g`: the `f` with `f.g == h`.
//!
//! Because `f.g` puts `g`'s modes inside `f`'s in every dimension and `g`'s digits after `f`'s
//! in both digit lists, `g` must be found at the inner end of `h`:
//!
//! 1. Per dimension, split `h`'s modes where `g`'s extent ends (counting from the innermost).
//!    A mode straddling that boundary is split in two, which needs the boundary to fall on one
//!    of its place values.
//! 2. Refine the inner part of `h` and `g`'s modes of the dimension to a common refinement,
//!    innermost first: equal sizes pair up, otherwise the larger is split so that its inner
//!    piece equals the smaller (which needs divisibility). Splitting a mode of size `a*b` into
//!    `a` (outer) and `b` (inner), with its digit replaced by two consecutive digits, never
//!    changes the function.
//! 3. `h`'s thread digits must end with `g`'s (through the pairing; a replication digit of `g`
//!    must divide the one of `h` at the same place), and likewise the local digits.
//! 4. What is left of `h` (outer modes, digit prefixes) is `f`. It is composed back with `g`
//!    and compared with `h`, so a mistake here can only produce an error, never a wrong `f`.
//!
//! Operands of different ranks are both broadcast to the larger rank first (leading extent-1
//! dimensions, see `Layout::broadcast_to_rank`), exactly as composition does.

use super::{Layout, Raw, RawDigit};

fn stride(raw: &Raw, d: usize, p: usize) -> usize {
    raw.dims[d][p + 1..].iter().product()
}

fn describe(raw: &Raw, digit: RawDigit) -> String {
    match digit {
        RawDigit::Mode(d, p) => {
            format!("dim {d} x{} (stride {})", raw.dims[d][p], stride(raw, d, p))
        }
        RawDigit::Rep(n) => format!("{n} replicas"),
    }
}

/// `h / g`, or why there is no quotient (the caller names the operands).
pub(crate) fn divide(h: &Layout, g: &Layout) -> Result<Layout, String> {
    // Mixed ranks: both sides at the larger rank, as composition does, so that
    // `(f.g) / g` is `f` broadcast to the rank of `f.g`.
    let rank = h.rank().max(g.rank());
    let (h, g) = (&*h.at_rank(rank), &*g.at_rank(rank));
    let reason = |msg: String| Err(msg);
    let mut hr = h.to_raw();
    let mut gr = g.to_raw();
    // Number of `h` modes of each dimension that belong to `f` (outer to the boundary).
    let mut boundary = Vec::with_capacity(rank);
    // pair[d][pg] = ph: `g`'s mode (d, pg) is `h`'s mode (d, ph) after refinement.
    let mut pair: Vec<Vec<usize>> = Vec::with_capacity(rank);
    for d in 0..rank {
        let (hn, gn) = (h.shape()[d], g.shape()[d]);
        if !hn.is_multiple_of(gn) {
            return reason(format!(
                "dim {d}: the divisor's extent {gn} does not divide the extent {hn}"
            ));
        }
        // 1. Boundary split.
        let mut covered = 1;
        let mut k = hr.dims[d].len();
        while covered < gn {
            k -= 1;
            let m = hr.dims[d][k];
            if covered * m <= gn {
                covered *= m;
            } else {
                let inner = gn / covered;
                if !gn.is_multiple_of(covered) || !m.is_multiple_of(inner) {
                    return reason(format!(
                        "dim {d}: the divisor's extent {gn} cuts through a mode of size {m} \
                         (stride {covered}) of the dividend"
                    ));
                }
                hr.split_mode(d, k, m / inner, inner);
                k += 1;
                covered = gn;
            }
        }
        boundary.push(k);

        // 2. Common refinement, innermost first. Positions are kept as distances from the
        // inner end, which splits further out do not change.
        let mut hi = hr.dims[d].len();
        let mut gi = gr.dims[d].len();
        let mut pairs_from_end = Vec::new();
        while hi > k && gi > 0 {
            let (x, y) = (hr.dims[d][hi - 1], gr.dims[d][gi - 1]);
            if x == y {
                hi -= 1;
                gi -= 1;
                pairs_from_end.push((hr.dims[d].len() - hi, gr.dims[d].len() - gi));
            } else if x > y && x.is_multiple_of(y) {
                hr.split_mode(d, hi - 1, x / y, y);
                gi -= 1;
                pairs_from_end.push((hr.dims[d].len() - hi, gr.dims[d].len() - gi));
            } else if y > x && y.is_multiple_of(x) {
                gr.split_mode(d, gi - 1, y / x, x);
                hi -= 1;
                pairs_from_end.push((hr.dims[d].len() - hi, gr.dims[d].len() - gi));
            } else {
                return reason(format!(
                    "dim {d}: the dividend's mode of size {x} and the divisor's mode of size {y} \
                     (both at stride {}) have no common refinement",
                    stride(&gr, d, gi - 1)
                ));
            }
        }
        let (hl, gl) = (hr.dims[d].len(), gr.dims[d].len());
        let mut map = vec![usize::MAX; gl];
        for (he, ge) in pairs_from_end {
            map[gl - ge] = hl - he;
        }
        pair.push(map);
    }

    // 3. Suffix matching of the thread digits, then of the local digits.
    let mut spatial = hr.spatial.clone();
    let mut j = spatial.len();
    for &gd in gr.spatial.iter().rev() {
        let Some(&hd) = j.checked_sub(1).map(|j| &spatial[j]) else {
            return reason(format!(
                "threads: the dividend has no thread digit left for the divisor's {}",
                describe(&gr, gd)
            ));
        };
        match (gd, hd) {
            (RawDigit::Mode(d, pg), RawDigit::Mode(dh, ph)) if d == dh && pair[d][pg] == ph => {
                j -= 1
            }
            (RawDigit::Rep(b), RawDigit::Rep(a)) if a.is_multiple_of(b) => {
                if a == b {
                    j -= 1;
                } else {
                    spatial[j - 1] = RawDigit::Rep(a / b);
                }
            }
            _ => {
                return reason(format!(
                    "threads: the divisor's digit {} does not match the dividend's digit {} \
                     at that place",
                    describe(&gr, gd),
                    describe(&hr, hd)
                ))
            }
        }
    }
    spatial.truncate(j);
    let mut local = hr.local.clone();
    for &(d, pg) in gr.local.iter().rev() {
        let gd = RawDigit::Mode(d, pg);
        match local.last() {
            Some(&(dh, ph)) if d == dh && pair[d][pg] == ph => {
                local.pop();
            }
            Some(&(dh, ph)) => {
                return reason(format!(
                    "locals: the divisor's digit {} does not match the dividend's digit {} \
                     at that place",
                    describe(&gr, gd),
                    describe(&hr, RawDigit::Mode(dh, ph))
                ))
            }
            None => {
                return reason(format!(
                    "locals: the dividend has no local digit left for the divisor's {}",
                    describe(&gr, gd)
                ))
            }
        }
    }

    // 4. The prefixes may only use modes outside the divisor's tile.
    let inside = |d: usize, p: usize| p >= boundary[d];
    for &dig in &spatial {
        if let RawDigit::Mode(d, p) = dig {
            if inside(d, p) {
                return reason(format!(
                    "threads: the dividend's digit {} lies inside the divisor's tile but is not \
                     one of the divisor's thread digits",
                    describe(&hr, dig)
                ));
            }
        }
    }
    for &(d, p) in &local {
        if inside(d, p) {
            return reason(format!(
                "locals: the dividend's digit {} lies inside the divisor's tile but is not one \
                 of the divisor's local digits",
                describe(&hr, RawDigit::Mode(d, p))
            ));
        }
    }
    let f = Raw {
        dims: hr
            .dims
            .iter()
            .zip(&boundary)
            .map(|(sizes, &k)| sizes[..k].to_vec())
            .collect(),
        spatial,
        local,
    }
    .normalize();
    match f.compose(g) {
        Ok(back) if &back == h => Ok(f),
        _ => reason("the digits match but the quotient does not compose back".into()),
    }
}
