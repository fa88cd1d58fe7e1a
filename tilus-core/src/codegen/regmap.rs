//! Layout analysis for code generation.
//!
//! Every layout of the algebra maps (thread `t`, local `i`) to `A(t) + B(i)`: the thread index is
//! a mixed-radix number whose digits each move the logical index by a fixed weight (or by nothing,
//! for replicated digits), and likewise the local index. [`LayoutMap::analyze`] recovers that
//! form from `Layout::eval` alone: `A(t)` as a list of `((t / stride) % size) * weight` terms and
//! `B(i)` as a table of constants, and checks it exhaustively against `eval`, so any layout the
//! algebra can express lowers to exact integer arithmetic or is reported.
//!
//! [`FragTiling`] recognises layouts that tile a warp-level fragment (`L = f ∘ F`, with `F` one
//! of the ldmatrix fragments), again by exhaustive evaluation.

use crate::layout::Layout;

/// `((t / stride) % size) * weight[d]` for each logical dimension `d`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ThreadTerm {
    pub(crate) stride: usize,
    pub(crate) size: usize,
    pub(crate) weight: Vec<i64>,
}

/// The affine form of a register layout; see the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LayoutMap {
    pub(crate) shape: Vec<usize>,
    /// Threads of the layout (block thread `t` plays `t % threads`).
    pub(crate) threads: usize,
    pub(crate) locals: usize,
    /// `A(t)`: zero at `t = 0`.
    pub(crate) terms: Vec<ThreadTerm>,
    /// `B(i)` = the logical index of thread 0's local `i`.
    pub(crate) local_index: Vec<Vec<i64>>,
}

impl LayoutMap {
    /// Recover the affine form of `layout`, or explain why it has none.
    pub(crate) fn analyze(layout: &Layout) -> Result<LayoutMap, String> {
        let shape = layout.shape().to_vec();
        let rank = shape.len();
        let threads = layout.num_threads().max(1);
        let locals = layout.num_locals();
        let ev = |t: usize, i: usize| -> Vec<i64> {
            layout.eval(t, i).into_iter().map(|x| x as i64).collect()
        };
        let local_index: Vec<Vec<i64>> = (0..locals).map(|i| ev(0, i)).collect();
        let origin = if locals > 0 { ev(0, 0) } else { vec![0; rank] };
        let thread_vals: Vec<Vec<i64>> = (0..threads)
            .map(|t| {
                if locals == 0 {
                    vec![0; rank]
                } else {
                    sub(&ev(t, 0), &origin)
                }
            })
            .collect();
        let terms = derive_terms(&thread_vals, threads).ok_or_else(|| {
            format!("the thread part of layout with shape {shape:?} is not a mixed-radix sum")
        })?;
        let map = LayoutMap {
            shape,
            threads,
            locals,
            terms,
            local_index,
        };
        for t in 0..threads {
            let a = map.thread_index(t);
            for i in 0..locals {
                if add(&a, &map.local_index[i]) != ev(t, i) {
                    return Err(format!(
                        "layout with shape {:?} is not of the form A(thread) + B(local) \
                         (thread {t}, local {i})",
                        map.shape
                    ));
                }
            }
        }
        Ok(map)
    }

    pub(crate) fn rank(&self) -> usize {
        self.shape.len()
    }

    /// `A(t)` for block thread `t`.
    pub(crate) fn thread_index(&self, t: usize) -> Vec<i64> {
        let t = t % self.threads;
        let mut out = vec![0i64; self.rank()];
        for term in &self.terms {
            let digit = ((t / term.stride) % term.size) as i64;
            for (o, w) in out.iter_mut().zip(&term.weight) {
                *o += digit * w;
            }
        }
        out
    }

    /// The logical index of (block thread `t`, local `i`).
    pub(crate) fn eval(&self, t: usize, i: usize) -> Vec<i64> {
        add(&self.thread_index(t), &self.local_index[i])
    }

    /// C expression (over `tid`, an `int` in `0..block_threads`) for `A(t)[dim]`.
    pub(crate) fn thread_expr(&self, dim: usize, tid: &str, block_threads: usize) -> String {
        let mut parts = Vec::new();
        for term in &self.terms {
            let w = term.weight[dim];
            if w == 0 {
                continue;
            }
            // The `% size` is needed unless the digit is the block's most significant one.
            let needs_mod = term.stride * term.size < block_threads;
            let digit = digit_expr(tid, term.stride, term.size, needs_mod);
            parts.push(super::expr::mul_const(&digit, w));
        }
        super::expr::sum(&parts)
    }

    /// Whether `A(t)[dim]` is a multiple of `d` for every thread.
    pub(crate) fn thread_part_multiple_of(&self, dim: usize, d: i64) -> bool {
        self.terms.iter().all(|t| t.weight[dim] % d == 0)
    }
}

/// `(t / stride) % size`, with shifts and masks for powers of two.
fn digit_expr(t: &str, stride: usize, size: usize, needs_mod: bool) -> String {
    let shifted = if stride == 1 {
        t.to_string()
    } else if stride.is_power_of_two() {
        format!("({t} >> {})", stride.trailing_zeros())
    } else {
        format!("({t} / {stride})")
    };
    if !needs_mod {
        return shifted;
    }
    if size.is_power_of_two() {
        format!("({shifted} & {})", size - 1)
    } else {
        format!("({shifted} % {size})")
    }
}

fn add(a: &[i64], b: &[i64]) -> Vec<i64> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

fn sub(a: &[i64], b: &[i64]) -> Vec<i64> {
    a.iter().zip(b).map(|(x, y)| x - y).collect()
}

fn scale(a: &[i64], k: i64) -> Vec<i64> {
    a.iter().map(|x| x * k).collect()
}

/// Decompose `vals[t]` (with `vals[0] == 0`) into mixed-radix digit terms; `None` when the
/// greedy decomposition does not reproduce every value.
pub(crate) fn derive_terms(vals: &[Vec<i64>], n: usize) -> Option<Vec<ThreadTerm>> {
    let mut terms = Vec::new();
    let mut stride = 1usize;
    while stride < n {
        let w = vals[stride].clone();
        // The digit's size is the first k whose value breaks the run 0, w, 2w, ... (or the end).
        let mut p = 1usize;
        while p * stride < n && vals[p * stride] == scale(&w, p as i64) {
            p += 1;
        }
        if !n.is_multiple_of(stride) || !(n / stride).is_multiple_of(p) {
            return None;
        }
        terms.push(ThreadTerm {
            stride,
            size: p,
            weight: w,
        });
        stride *= p;
    }
    terms.retain(|t| t.weight.iter().any(|&x| x != 0));
    // Verify.
    for (t, v) in vals.iter().enumerate().take(n) {
        let mut acc = vec![0i64; v.len()];
        for term in &terms {
            let digit = ((t / term.stride) % term.size) as i64;
            for (a, w) in acc.iter_mut().zip(&term.weight) {
                *a += digit * w;
            }
        }
        if &acc != v {
            return None;
        }
    }
    Some(terms)
}

/// A warp-level fragment: 32 lanes, `locals` elements each, covering a `rows x cols` tile.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fragment {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) locals: usize,
    /// `(row, col)` of (lane, local).
    pub(crate) eval: fn(usize, usize) -> (usize, usize),
}

/// One 8x8 matrix of 16-bit elements as `ldmatrix` delivers it: `spatial(8,4).local(1,2)`.
pub(crate) const FRAG_LDSM: Fragment = Fragment {
    rows: 8,
    cols: 8,
    locals: 2,
    eval: |lane, i| (lane / 4, (lane % 4) * 2 + i),
};

/// The same with `.trans`: `column_spatial(4,8).local(2,1)`.
pub(crate) const FRAG_LDSM_T: Fragment = Fragment {
    rows: 8,
    cols: 8,
    locals: 2,
    eval: |lane, i| ((lane % 4) * 2 + i, lane / 4),
};

/// A rank-2 layout written as `f ∘ F` for a fragment `F`: the tile coordinate (in units of the
/// fragment's shape) of each (warp, fragment-local block).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FragTiling {
    /// Warps of the layout (block warp `w` plays `w % warps`).
    pub(crate) warps: usize,
    /// Fragments per thread (`locals / fragment.locals`).
    pub(crate) per_warp: usize,
    /// `coord[w][j] = (tile_row, tile_col)`.
    pub(crate) coord: Vec<Vec<(usize, usize)>>,
}

impl FragTiling {
    /// Recognise `map` as a tiling of `frag`.
    pub(crate) fn of(map: &LayoutMap, frag: &Fragment) -> Option<FragTiling> {
        if map.rank() != 2
            || !map.threads.is_multiple_of(32)
            || !map.locals.is_multiple_of(frag.locals)
            || map.locals == 0
            || !map.shape[0].is_multiple_of(frag.rows)
            || !map.shape[1].is_multiple_of(frag.cols)
        {
            return None;
        }
        let warps = map.threads / 32;
        let per_warp = map.locals / frag.locals;
        let mut coord = vec![vec![(0, 0); per_warp]; warps];
        for (w, row) in coord.iter_mut().enumerate() {
            for (j, c) in row.iter_mut().enumerate() {
                let base = map.eval(w * 32, j * frag.locals);
                let (r0, c0) = (frag.eval)(0, 0);
                let (br, bc) = (base[0] - r0 as i64, base[1] - c0 as i64);
                if br < 0 || bc < 0 || br % frag.rows as i64 != 0 || bc % frag.cols as i64 != 0 {
                    return None;
                }
                *c = (br as usize / frag.rows, bc as usize / frag.cols);
                for lane in 0..32 {
                    for e in 0..frag.locals {
                        let (r, cc) = (frag.eval)(lane, e);
                        let got = map.eval(w * 32 + lane, j * frag.locals + e);
                        if got != vec![br + r as i64, bc + cc as i64] {
                            return None;
                        }
                    }
                }
            }
        }
        Some(FragTiling {
            warps,
            per_warp,
            coord,
        })
    }

    /// Tile coordinates of block warp `w`.
    pub(crate) fn tiles_of(&self, w: usize) -> &[(usize, usize)] {
        &self.coord[w % self.warps]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derives_spatial_terms() {
        // spatial(8,4): t -> (t / 4, t % 4).
        let vals: Vec<Vec<i64>> = (0..32).map(|t| vec![t / 4, t % 4]).collect();
        let terms = derive_terms(&vals, 32).unwrap();
        assert_eq!(
            terms,
            vec![
                ThreadTerm {
                    stride: 1,
                    size: 4,
                    weight: vec![0, 1]
                },
                ThreadTerm {
                    stride: 4,
                    size: 8,
                    weight: vec![1, 0]
                },
            ]
        );
    }

    #[test]
    fn derives_replicated_and_non_power_of_two_terms() {
        // Two replicas of spatial(3) scaled by 2, then a digit of 5 in dim 1.
        let vals: Vec<Vec<i64>> = (0..30).map(|t| vec![((t / 2) % 3) * 2, t / 6]).collect();
        let terms = derive_terms(&vals, 30).unwrap();
        assert_eq!(terms.len(), 2);
        assert_eq!(terms[0].stride, 2);
        assert_eq!(terms[0].size, 3);
        assert_eq!(terms[1].stride, 6);
        assert_eq!(terms[1].size, 5);
    }

    #[test]
    fn rejects_non_affine_maps() {
        let vals: Vec<Vec<i64>> = vec![vec![0], vec![1], vec![3], vec![2]];
        assert!(derive_terms(&vals, 4).is_none());
    }

    #[test]
    fn fragments_cover_their_tiles_once() {
        for f in [FRAG_LDSM, FRAG_LDSM_T] {
            let mut seen = vec![false; f.rows * f.cols];
            for lane in 0..32 {
                for i in 0..f.locals {
                    let (r, c) = (f.eval)(lane, i);
                    assert!(!seen[r * f.cols + c]);
                    seen[r * f.cols + c] = true;
                }
            }
            assert!(seen.iter().all(|&s| s));
        }
    }
}
