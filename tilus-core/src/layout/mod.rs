//! The algebraic layout system (paper section 4, appendices A and B).
//!
//! A register layout maps (thread `t`, local `i`) to a logical index of a tile. The contract:
//! `Layout::{local, spatial, column_local, column_spatial}` build primitives; `compose` (`f.g`),
//! `divide` (`h / g`), `reduce`, `unsqueeze`; `eval(t, i)`; `owners(index)`; `Display` renders
//! the grid of `t:i` cells. [`parse`] reads the text form, e.g. `local(2,1).spatial(8,4)`.

mod parse;
mod shared;

pub use parse::{parse, ParseError};
pub use shared::{SharedLayout, Swizzle};

/// Errors of layout algebra.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("rank mismatch: {op} of a rank-{left} layout with a rank-{right} layout")]
    RankMismatch {
        op: &'static str,
        left: usize,
        right: usize,
    },
    #[error("{0}")]
    NotDivisible(String),
    #[error("{0}")]
    Invalid(String),
}

/// A register layout. See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Layout {
    _todo: (),
}

impl Layout {
    /// `local(n0, n1, ..)`: one thread holds the whole tile, row-major over locals.
    pub fn local(shape: &[usize]) -> Layout {
        let _ = shape;
        todo!()
    }
    /// `spatial(n0, n1, ..)`: each of `prod(shape)` threads holds one element, row-major.
    pub fn spatial(shape: &[usize]) -> Layout {
        let _ = shape;
        todo!()
    }
    /// Column-major variant of [`Layout::local`].
    pub fn column_local(shape: &[usize]) -> Layout {
        let _ = shape;
        todo!()
    }
    /// Column-major variant of [`Layout::spatial`].
    pub fn column_spatial(shape: &[usize]) -> Layout {
        let _ = shape;
        todo!()
    }
    /// `self.inner` (`f ∘ g`): `h(t, i) = f(t / Tg, i / Lg) * shape(g) + g(t % Tg, i % Lg)`.
    pub fn compose(&self, inner: &Layout) -> Result<Layout, LayoutError> {
        let _ = inner;
        todo!()
    }
    /// `self / g`: the `f` with `f ∘ g == self`, or an error when there is none.
    pub fn divide(&self, g: &Layout) -> Result<Layout, LayoutError> {
        let _ = g;
        todo!()
    }
    /// Collapse `dims` to extent 1: the threads that spanned them become replicas of each other
    /// and locals along them disappear (appendix B's `reduce`).
    pub fn reduce(&self, dims: &[usize]) -> Result<Layout, LayoutError> {
        let _ = dims;
        todo!()
    }
    /// Insert extent-1 dimensions at positions `dims` of the result (broadcast to higher rank).
    pub fn unsqueeze(&self, dims: &[usize]) -> Result<Layout, LayoutError> {
        let _ = dims;
        todo!()
    }
    /// Logical shape of the tile.
    pub fn shape(&self) -> &[usize] {
        todo!()
    }
    pub fn rank(&self) -> usize {
        self.shape().len()
    }
    /// Threads of the layout, replicas included.
    pub fn num_threads(&self) -> usize {
        todo!()
    }
    /// Elements each thread holds.
    pub fn num_locals(&self) -> usize {
        todo!()
    }
    /// Logical index held by thread `t` at local `i`.
    pub fn eval(&self, t: usize, i: usize) -> Vec<usize> {
        let _ = (t, i);
        todo!()
    }
    /// Every `(thread, local)` holding logical `index` (several when threads are replicated).
    pub fn owners(&self, index: &[usize]) -> Vec<(usize, usize)> {
        let _ = index;
        todo!()
    }
}
