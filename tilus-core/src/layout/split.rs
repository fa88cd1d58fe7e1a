//! Splitting one dimension of a layout in two (`[E] -> [E / inner, inner]`), keeping which
//! thread and local holds each element. The quantized matmul splits its weight tile's k
//! dimension per scale group this way; the text form spells it `split(layout, dim, inner)`.

use super::{Digit, Layout, LayoutError, Mode};

impl Layout {
    /// Reshape dimension `dim` (extent `E`) into `[E / inner, inner]`: `split.eval(t, i)` is
    /// `self.eval(t, i)` with index `x` of `dim` replaced by `x / inner, x % inner`. Errors
    /// when `inner` does not divide the extent or a mode of the dimension straddles the
    /// boundary in a way no split of it can express.
    pub fn split_dim(&self, dim: usize, inner: usize) -> Result<Layout, LayoutError> {
        split_dim(self, dim, inner).map_err(LayoutError::NotDivisible)
    }
}

/// Reshape dimension `dim` (extent `E`) of `layout` into `[E / inner, inner]`, keeping which
/// thread and local holds each element: `split.eval(t, i)` is `layout.eval(t, i)` with index
/// `x` of `dim` replaced by `x / inner, x % inner`. Errors when a mode of the dimension straddles
/// the boundary in a way no split of it can express.
fn split_dim(layout: &Layout, dim: usize, inner: usize) -> Result<Layout, String> {
    let shape = layout.shape();
    let extent = *shape
        .get(dim)
        .ok_or_else(|| format!("dim {dim} is out of range for rank {}", shape.len()))?;
    if inner == 0 || extent % inner != 0 {
        return Err(format!(
            "{inner} does not divide extent {extent} of dim {dim}"
        ));
    }
    let mut new_shape = shape.to_vec();
    new_shape[dim] = extent / inner;
    new_shape.insert(dim + 1, inner);
    let mut modes = Vec::new();
    // Each old mode becomes one or two (outer, inner) new mode ids.
    let mut parts: Vec<Vec<usize>> = Vec::new();
    let push = |modes: &mut Vec<Mode>, dim, size| {
        modes.push(Mode {
            dim,
            size,
            stride: 0,
        });
        modes.len() - 1
    };
    for m in layout.modes() {
        let ids = if m.dim < dim {
            vec![push(&mut modes, m.dim, m.size)]
        } else if m.dim > dim {
            vec![push(&mut modes, m.dim + 1, m.size)]
        } else if m.stride >= inner {
            if m.stride % inner != 0 {
                return Err(format!(
                    "a mode of stride {} straddles the boundary {inner}",
                    m.stride
                ));
            }
            vec![push(&mut modes, dim, m.size)]
        } else if m.stride * m.size <= inner {
            vec![push(&mut modes, dim + 1, m.size)]
        } else {
            let lo = inner / m.stride;
            if !inner.is_multiple_of(m.stride) || m.size % lo != 0 {
                return Err(format!(
                    "a mode of size {} and stride {} cannot be split at {inner}",
                    m.size, m.stride
                ));
            }
            vec![
                push(&mut modes, dim, m.size / lo),
                push(&mut modes, dim + 1, lo),
            ]
        };
        parts.push(ids);
    }
    let spatial: Vec<Digit> = layout
        .spatial_digits()
        .iter()
        .flat_map(|d| match *d {
            Digit::Mode(id) => parts[id].iter().map(|&n| Digit::Mode(n)).collect(),
            Digit::Replicated(r) => vec![Digit::Replicated(r)],
        })
        .collect();
    let local: Vec<usize> = layout
        .local_digits()
        .iter()
        .flat_map(|&id| parts[id].clone())
        .collect();
    let out =
        Layout::from_parts(&new_shape, &modes, &spatial, &local).map_err(|e| e.to_string())?;
    // The construction is exact; check it anyway. A layout's index is the sum of a thread part
    // and a local part, and no mode straddles the split, so the threads at local 0 and the
    // locals of thread 0 cover every mode.
    let agrees = |t: usize, i: usize| {
        let mut want = layout.eval(t, i);
        let x = want[dim];
        want[dim] = x / inner;
        want.insert(dim + 1, x % inner);
        out.eval(t, i) == want
    };
    let threads_ok = (0..layout.num_threads()).all(|t| agrees(t, 0));
    if !threads_ok || !(0..layout.num_locals()).all(|i| agrees(0, i)) {
        return Err(format!(
            "split of dim {dim} at {inner} does not preserve the layout {}",
            layout.to_expr()
        ));
    }
    Ok(out)
}
