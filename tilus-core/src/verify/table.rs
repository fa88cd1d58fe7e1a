//! Dense tables of a register layout, shared by the verifier's layout conditions and the
//! interpreter: every `(thread, local)` as a flat (row-major) logical index, and the first owner
//! of every element. Building one costs `threads * locals` calls to `Layout::eval`; afterwards
//! every lookup is an array access.

use crate::layout::Layout;

/// "No local": an element the thread does not hold.
pub(crate) const NONE: u32 = u32::MAX;

#[derive(Debug)]
pub(crate) struct LayoutTable {
    pub shape: Vec<usize>,
    pub threads: usize,
    pub locals: usize,
    /// `flat[t * locals + i]`: row-major index of the element thread `t` holds at local `i`.
    pub flat: Vec<usize>,
    /// The lowest `(thread, local)` holding each element; `None` where no thread holds it.
    pub first_owner: Vec<Option<(u32, u32)>>,
}

impl LayoutTable {
    pub fn new(layout: &Layout) -> Result<LayoutTable, String> {
        let shape = layout.shape().to_vec();
        let threads = layout.num_threads();
        let locals = layout.num_locals();
        let size: usize = shape.iter().product();
        let mut flat = Vec::with_capacity(threads * locals);
        let mut first_owner = vec![None; size];
        for t in 0..threads {
            for i in 0..locals {
                let index = layout.eval(t, i);
                let f = ravel(&index, &shape).ok_or_else(|| {
                    format!(
                        "the layout maps thread {t}, local {i} to {index:?}, outside its shape {shape:?}"
                    )
                })?;
                flat.push(f);
                first_owner[f].get_or_insert((t as u32, i as u32));
            }
        }
        Ok(LayoutTable {
            shape,
            threads,
            locals,
            flat,
            first_owner,
        })
    }

    /// Number of logical elements.
    pub fn size(&self) -> usize {
        self.first_owner.len()
    }

    /// Flat logical index of local `i` of layout thread `t`.
    pub fn at(&self, t: usize, i: usize) -> usize {
        self.flat[t * self.locals + i]
    }

    /// `map[flat]` = the first local of layout thread `t` holding element `flat`, else [`NONE`].
    /// Costs `O(locals)` after the first call on a map, not `O(size)`: checks that visit every
    /// thread would otherwise cost threads x elements.
    pub fn thread_map(&self, t: usize, map: &mut ThreadMap) {
        if map.map.len() == self.size() {
            for &f in &map.set {
                map.map[f] = NONE;
            }
        } else {
            map.map.clear();
            map.map.resize(self.size(), NONE);
        }
        map.set.clear();
        for i in (0..self.locals).rev() {
            let f = self.at(t, i);
            map.map[f] = i as u32;
            map.set.push(f);
        }
    }
}

/// The buffer of [`LayoutTable::thread_map`]: the map and the entries it set last.
#[derive(Default)]
pub(crate) struct ThreadMap {
    map: Vec<u32>,
    set: Vec<usize>,
}

impl std::ops::Index<usize> for ThreadMap {
    type Output = u32;
    fn index(&self, flat: usize) -> &u32 {
        &self.map[flat]
    }
}

/// Row-major flat index of `index` in `shape`, or `None` when it is outside.
pub(crate) fn ravel(index: &[usize], shape: &[usize]) -> Option<usize> {
    if index.len() != shape.len() {
        return None;
    }
    let mut flat = 0;
    for (&i, &n) in index.iter().zip(shape) {
        if i >= n {
            return None;
        }
        flat = flat * n + i;
    }
    Some(flat)
}

/// Inverse of [`ravel`].
pub(crate) fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        index[d] = flat % shape[d];
        flat /= shape[d];
    }
    index
}
