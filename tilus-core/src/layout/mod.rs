//! The algebraic layout system (paper section 4, appendices A and B).
//!
//! A register layout maps (thread `t`, local `i`) to a logical index of a tile. The contract:
//! `Layout::{local, spatial, column_local, column_spatial}` build primitives; `compose` (`f.g`),
//! `divide` (`h / g`), `broadcast_to_rank`, `reduce`, `unsqueeze`; `eval(t, i)`;
//! `owners(index)`; `Display` renders the grid of `t:i` cells. [`parse`] reads the text form, e.g. `local(2,1).spatial(8,4)`.
//!
//! # Semantics
//!
//! * `local(n0, .., nk)`: one thread, `prod(n)` locals; local `i` holds the row-major unravel of
//!   `i` over the shape. `spatial(..)`: `prod(n)` threads with one local each, thread `t` holds
//!   the row-major unravel of `t`. `column_local` / `column_spatial` unravel column-major
//!   (dimension 0 fastest).
//! * Composition `h = f.g` (of equal ranks; see below for mixed ranks):
//!   `shape(h) = shape(f) * shape(g)` elementwise, `T(h) = T(f) T(g)`, `L(h) = L(f) L(g)` and
//!   `h(t, i) = f(t / T(g), i / L(g)) * shape(g) + g(t % T(g), i % L(g))`.
//! * Division `h / g` is the `f` with `f.g == h`.
//!
//! ## Mixed ranks
//!
//! Following the paper's appendix A (Definition 5), operands of different ranks are broadcast
//! to the larger rank before composing. For `R >= rank(f) = r`, the broadcast `B_R(f)`
//! ([`Layout::broadcast_to_rank`]) has shape `[1; R - r] ++ shape(f)`, the same threads and
//! locals, and `B_R(f)(t, i) = [0; R - r] ++ f(t, i)`. Then, with `R = max(rank f, rank g)`:
//!
//! * `f.g = B_R(f) . B_R(g)`, of rank `R`. So `local(2).spatial(8,4)` is
//!   `local(1,2).spatial(8,4)`: shape `[8, 8]`, `h(t, i) = [t / 4, 4 i + t % 4]`.
//! * `h / g = B_R(h) / B_R(g)` with `R = max(rank h, rank g)`; the quotient has rank `R`. A
//!   higher-rank divisor is allowed too, but its extra leading extents must be 1 to divide.
//!
//! Broadcasting commutes with composition (`B_R(f.g) = B_R(f).B_R(g)`: leading extents stay 1
//! and leading coordinates 0), so composition stays associative over mixed ranks, and
//! `B_r` of a unit layout is a unit layout, so unit layouts stay identities (the result taking
//! the larger rank). Division undoes composition up to broadcast:
//! `(f.g) / g == f.broadcast_to_rank(max(rank f, rank g))`, which is `f` itself exactly when
//! `rank f >= rank g`. The quotient cannot recover a lower rank of `f`: `f.g` is the same
//! layout for `f` and `B_R(f)`, and an equal-rank quotient must keep its leading extent-1
//! dimensions (`local(1,2) / local(1,2)` is `local(1,1)`).
//!
//! # Representation
//!
//! Every layout is stored in one exact, canonical form that the CUDA code generator can read
//! off directly to emit index arithmetic:
//!
//! * Each logical dimension `d` is split into **modes** ([`Mode`]), listed outer to inner; the
//!   sizes of the modes of `d` multiply to `shape[d]`, and a mode's `stride` is the product of
//!   the sizes of the modes inside it (its place value in the dimension's mixed radix).
//! * The thread index is a mixed-radix number whose digits, most significant first, are
//!   [`Layout::spatial_digits`]: either a mode ([`Digit::Mode`]) or a replication digit
//!   ([`Digit::Replicated`]) whose value is ignored (threads that differ only in it are
//!   replicas holding the same elements).
//! * The local index is a mixed-radix number whose digits, most significant first, are the mode
//!   ids [`Layout::local_digits`] (locals are never replicated).
//! * Evaluation: split `t` and `i` into their digits, give each mode the value of its digit,
//!   then `index[d] = sum(value(m) * m.stride)` over the modes `m` of `d`.
//!
//! Every mode appears exactly once among the digits. The form is **normalized**: no mode or
//! digit has size 1, two modes that are adjacent in their dimension (outer then inner) and
//! appear as consecutive digits of the same list in the same order are merged into one, and
//! adjacent replication digits are merged. Mode ids are ordered by dimension, then outer to
//! inner. The normalized form of a function is unique (the digit sizes, targets and strides can
//! be read back from the values `eval(t, 0)` and `eval(0, i)`), so the derived `==` and `Hash`
//! of [`Layout`] are *semantic*: two layouts are equal exactly when they have the same shape,
//! thread count, local count and `eval` everywhere. [`Layout::same_function`] checks the same
//! thing by brute-force evaluation and exists for tests and for callers that want to be
//! explicit.
//!
//! Composition concatenates the per-dimension modes (`f`'s outer, `g`'s inner) and the digit
//! lists (`f`'s digits, then `g`'s), then normalizes. Broadcasting adds dimensions without
//! modes, so it only renumbers the dimensions of the digits. Division and the other operations are
//! described on their methods.

mod display;
mod divide;
pub mod fragments;
mod parse;
mod shared;
mod split;

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

/// One piece of a logical dimension: `size` consecutive place values of the dimension's mixed
/// radix, starting at `stride`. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Mode {
    /// The logical dimension this mode indexes.
    pub dim: usize,
    /// Number of values of the mode (always at least 2 in a normalized layout).
    pub size: usize,
    /// Place value of the mode within its dimension: product of the sizes of the inner modes.
    pub stride: usize,
}

/// A digit of the thread index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Digit {
    /// The digit is the value of mode `id` (an index into [`Layout::modes`]).
    Mode(usize),
    /// A digit of this many values that selects among replicas; it does not affect the index.
    Replicated(usize),
}

/// The four primitive layouts of the text form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Primitive {
    Local,
    Spatial,
    ColumnLocal,
    ColumnSpatial,
}

impl Primitive {
    /// The name used in the text form, e.g. `column_spatial`.
    pub fn name(self) -> &'static str {
        match self {
            Primitive::Local => "local",
            Primitive::Spatial => "spatial",
            Primitive::ColumnLocal => "column_local",
            Primitive::ColumnSpatial => "column_spatial",
        }
    }
    /// The primitive called `name` in the text form.
    pub fn from_name(name: &str) -> Option<Primitive> {
        match name {
            "local" => Some(Primitive::Local),
            "spatial" => Some(Primitive::Spatial),
            "column_local" => Some(Primitive::ColumnLocal),
            "column_spatial" => Some(Primitive::ColumnSpatial),
            _ => None,
        }
    }
}

/// A register layout. See the module documentation.
///
/// Equality and hashing are semantic because the stored form is canonical.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Layout {
    shape: Vec<usize>,
    modes: Vec<Mode>,
    spatial: Vec<Digit>,
    local: Vec<usize>,
}

/// The working form used by the algorithms: modes addressed as `(dim, position)` with
/// positions outer to inner, not yet normalized.
#[derive(Clone, Debug)]
pub(crate) struct Raw {
    pub(crate) dims: Vec<Vec<usize>>,
    pub(crate) spatial: Vec<RawDigit>,
    pub(crate) local: Vec<(usize, usize)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RawDigit {
    Mode(usize, usize),
    Rep(usize),
}

impl Raw {
    fn shape(&self) -> Vec<usize> {
        self.dims.iter().map(|m| m.iter().product()).collect()
    }

    /// Prepend extent-1 dimensions up to `rank` (Definition 5's broadcast). An extent-1
    /// dimension has no modes, so only the dimension numbers of the digits shift.
    fn broadcast(mut self, rank: usize) -> Raw {
        let k = rank.saturating_sub(self.dims.len());
        if k == 0 {
            return self;
        }
        self.dims.splice(0..0, std::iter::repeat_n(Vec::new(), k));
        for dig in &mut self.spatial {
            if let RawDigit::Mode(d, _) = dig {
                *d += k;
            }
        }
        for (d, _) in &mut self.local {
            *d += k;
        }
        self
    }

    /// Replace mode `(d, k)` of size `outer * inner` by two modes, `outer` then `inner`, and
    /// its digit by the two corresponding digits (outer first). Always function-preserving.
    pub(crate) fn split_mode(&mut self, d: usize, k: usize, outer: usize, inner: usize) {
        debug_assert_eq!(self.dims[d][k], outer * inner);
        self.dims[d][k] = outer;
        self.dims[d].insert(k + 1, inner);
        let shift = |p: usize| if p > k { p + 1 } else { p };
        let mut spatial = Vec::with_capacity(self.spatial.len() + 1);
        for &dig in &self.spatial {
            match dig {
                RawDigit::Mode(dd, p) if dd == d && p == k => {
                    spatial.push(RawDigit::Mode(d, k));
                    spatial.push(RawDigit::Mode(d, k + 1));
                }
                RawDigit::Mode(dd, p) if dd == d => spatial.push(RawDigit::Mode(d, shift(p))),
                other => spatial.push(other),
            }
        }
        self.spatial = spatial;
        let mut local = Vec::with_capacity(self.local.len() + 1);
        for &(dd, p) in &self.local {
            if dd == d && p == k {
                local.push((d, k));
                local.push((d, k + 1));
            } else if dd == d {
                local.push((d, shift(p)));
            } else {
                local.push((dd, p));
            }
        }
        self.local = local;
    }

    /// Bring into the canonical form described in the module documentation.
    pub(crate) fn normalize(mut self) -> Layout {
        let shape = self.shape();
        // Drop size-1 modes (renumbering positions) and size-1 digits.
        let mut renumber: Vec<Vec<Option<usize>>> = Vec::with_capacity(self.dims.len());
        for modes in &mut self.dims {
            let mut next = 0;
            let map = modes
                .iter()
                .map(|&s| {
                    (s != 1).then(|| {
                        next += 1;
                        next - 1
                    })
                })
                .collect();
            modes.retain(|&s| s != 1);
            renumber.push(map);
        }
        self.spatial = self
            .spatial
            .iter()
            .filter_map(|&dig| match dig {
                RawDigit::Mode(d, p) => renumber[d][p].map(|q| RawDigit::Mode(d, q)),
                RawDigit::Rep(1) => None,
                rep => Some(rep),
            })
            .collect();
        self.local = self
            .local
            .iter()
            .filter_map(|&(d, p)| renumber[d][p].map(|q| (d, q)))
            .collect();

        // Merge until nothing changes; layouts have a handful of digits, so quadratic is fine.
        loop {
            let mut merged = false;
            for j in 1..self.spatial.len() {
                match (self.spatial[j - 1], self.spatial[j]) {
                    (RawDigit::Rep(a), RawDigit::Rep(b)) => {
                        self.spatial[j - 1] = RawDigit::Rep(a * b);
                        self.spatial.remove(j);
                        merged = true;
                        break;
                    }
                    (RawDigit::Mode(d0, p0), RawDigit::Mode(d1, p1))
                        if d0 == d1 && p1 == p0 + 1 =>
                    {
                        self.merge_modes(d0, p0);
                        merged = true;
                        break;
                    }
                    _ => {}
                }
            }
            if !merged {
                for j in 1..self.local.len() {
                    let ((d0, p0), (d1, p1)) = (self.local[j - 1], self.local[j]);
                    if d0 == d1 && p1 == p0 + 1 {
                        self.merge_modes(d0, p0);
                        merged = true;
                        break;
                    }
                }
            }
            if !merged {
                break;
            }
        }

        // Flatten to ids ordered by dimension, then outer to inner.
        let mut first = Vec::with_capacity(self.dims.len());
        let mut modes = Vec::new();
        for (d, sizes) in self.dims.iter().enumerate() {
            first.push(modes.len());
            let mut stride: usize = sizes.iter().product();
            for &size in sizes {
                stride /= size;
                modes.push(Mode {
                    dim: d,
                    size,
                    stride,
                });
            }
        }
        let spatial = self
            .spatial
            .iter()
            .map(|&dig| match dig {
                RawDigit::Mode(d, p) => Digit::Mode(first[d] + p),
                RawDigit::Rep(n) => Digit::Replicated(n),
            })
            .collect();
        let local = self.local.iter().map(|&(d, p)| first[d] + p).collect();
        Layout {
            shape,
            modes,
            spatial,
            local,
        }
    }

    /// Merge mode `(d, p + 1)` into `(d, p)`, whose digits are consecutive (`p` first).
    fn merge_modes(&mut self, d: usize, p: usize) {
        let inner = self.dims[d].remove(p + 1);
        self.dims[d][p] *= inner;
        let fix = |q: usize| if q > p { q - 1 } else { q };
        let mut spatial = Vec::with_capacity(self.spatial.len());
        for &dig in &self.spatial {
            match dig {
                RawDigit::Mode(dd, q) if dd == d && q == p + 1 => {}
                RawDigit::Mode(dd, q) if dd == d => spatial.push(RawDigit::Mode(d, fix(q))),
                other => spatial.push(other),
            }
        }
        self.spatial = spatial;
        let mut local = Vec::with_capacity(self.local.len());
        for &(dd, q) in &self.local {
            if dd == d && q == p + 1 {
                continue;
            }
            local.push(if dd == d { (d, fix(q)) } else { (dd, q) });
        }
        self.local = local;
    }
}

/// The largest rank [`Layout::broadcast_to_rank`] builds: far above any tile's, and a bound on
/// what a hostile rank can make it allocate.
pub const MAX_BROADCAST_RANK: usize = 1 << 16;

/// Product of `sizes`, or `None` on overflow.
fn checked_product(sizes: impl IntoIterator<Item = usize>) -> Option<usize> {
    sizes.into_iter().try_fold(1usize, |a, b| a.checked_mul(b))
}

impl Layout {
    /// Primitive `kind` over `shape`, or an error for a zero extent or a layout whose element
    /// count does not fit in `usize`. Use this instead of the panicking constructors when the
    /// extents come from user input.
    pub fn primitive(kind: Primitive, shape: &[usize]) -> Result<Layout, LayoutError> {
        if let Some(d) = shape.iter().position(|&n| n == 0) {
            return Err(LayoutError::Invalid(format!(
                "{}: extent of dim {d} must be positive, found 0",
                kind.name()
            )));
        }
        if checked_product(shape.iter().copied()).is_none() {
            return Err(LayoutError::Invalid(format!(
                "{}: layout too large ({shape:?})",
                kind.name()
            )));
        }
        let dims = shape.iter().map(|&n| vec![n]).collect();
        let mut order: Vec<usize> = (0..shape.len()).collect();
        if matches!(kind, Primitive::ColumnLocal | Primitive::ColumnSpatial) {
            order.reverse();
        }
        let raw = match kind {
            Primitive::Local | Primitive::ColumnLocal => Raw {
                dims,
                spatial: vec![],
                local: order.iter().map(|&d| (d, 0)).collect(),
            },
            Primitive::Spatial | Primitive::ColumnSpatial => Raw {
                dims,
                spatial: order.iter().map(|&d| RawDigit::Mode(d, 0)).collect(),
                local: vec![],
            },
        };
        Ok(raw.normalize())
    }

    fn primitive_or_panic(kind: Primitive, shape: &[usize]) -> Layout {
        match Layout::primitive(kind, shape) {
            Ok(layout) => layout,
            Err(e) => panic!("{e}"),
        }
    }

    /// `local(n0, n1, ..)`: one thread holds the whole tile, row-major over locals.
    ///
    /// # Panics
    /// On a zero extent or overflow; see [`Layout::primitive`] for the fallible form.
    pub fn local(shape: &[usize]) -> Layout {
        Layout::primitive_or_panic(Primitive::Local, shape)
    }
    /// `spatial(n0, n1, ..)`: each of `prod(shape)` threads holds one element, row-major.
    ///
    /// # Panics
    /// On a zero extent or overflow; see [`Layout::primitive`] for the fallible form.
    pub fn spatial(shape: &[usize]) -> Layout {
        Layout::primitive_or_panic(Primitive::Spatial, shape)
    }
    /// Column-major variant of [`Layout::local`].
    ///
    /// # Panics
    /// On a zero extent or overflow; see [`Layout::primitive`] for the fallible form.
    pub fn column_local(shape: &[usize]) -> Layout {
        Layout::primitive_or_panic(Primitive::ColumnLocal, shape)
    }
    /// Column-major variant of [`Layout::spatial`].
    ///
    /// # Panics
    /// On a zero extent or overflow; see [`Layout::primitive`] for the fallible form.
    pub fn column_spatial(shape: &[usize]) -> Layout {
        Layout::primitive_or_panic(Primitive::ColumnSpatial, shape)
    }

    /// A rank-`rank` layout of shape `[1; rank]` whose `threads` threads all hold the single
    /// element (one replication digit). Compose with it to add replicas: `f.replicated(r, n)`
    /// makes each thread of `f` `n` adjacent replicas; `replicated(r, n).f` repeats `f` `n`
    /// times over the thread index.
    ///
    /// # Panics
    /// If `threads` is 0.
    pub fn replicated(rank: usize, threads: usize) -> Layout {
        assert!(threads > 0, "replicated: thread count must be positive");
        Raw {
            dims: vec![vec![]; rank],
            spatial: vec![RawDigit::Rep(threads)],
            local: vec![],
        }
        .normalize()
    }

    /// Build a layout from its parts (the representation of the module documentation, modes
    /// addressed by index into `modes`; `modes[k].stride` is ignored and recomputed, and the
    /// modes of each dimension are taken outer to inner in the order they appear in `modes`).
    /// The result is normalized, so the ids of [`Layout::modes`] may differ from the input's.
    ///
    /// Errors unless every mode appears exactly once among the digits, sizes are positive, the
    /// modes of each dimension multiply to its extent and the layout's size fits in `usize`.
    pub fn from_parts(
        shape: &[usize],
        modes: &[Mode],
        spatial: &[Digit],
        local: &[usize],
    ) -> Result<Layout, LayoutError> {
        let invalid = |msg: String| Err(LayoutError::Invalid(msg));
        let mut dims = vec![Vec::new(); shape.len()];
        let mut pos = Vec::with_capacity(modes.len());
        for (id, m) in modes.iter().enumerate() {
            if m.dim >= shape.len() {
                return invalid(format!(
                    "mode {id} indexes dim {} of a rank-{} layout",
                    m.dim,
                    shape.len()
                ));
            }
            if m.size == 0 {
                return invalid(format!("mode {id} has size 0"));
            }
            pos.push((m.dim, dims[m.dim].len()));
            dims[m.dim].push(m.size);
        }
        for (d, sizes) in dims.iter().enumerate() {
            if checked_product(sizes.iter().copied()) != Some(shape[d]) {
                return invalid(format!(
                    "the modes of dim {d} ({sizes:?}) do not multiply to its extent {}",
                    shape[d]
                ));
            }
        }
        let mut seen = vec![false; modes.len()];
        let mut use_mode = |id: usize| -> Result<(usize, usize), LayoutError> {
            match seen.get_mut(id) {
                None => Err(LayoutError::Invalid(format!(
                    "digit names unknown mode {id}"
                ))),
                Some(true) => Err(LayoutError::Invalid(format!(
                    "mode {id} appears in more than one digit"
                ))),
                Some(s) => {
                    *s = true;
                    Ok(pos[id])
                }
            }
        };
        let mut raw_spatial = Vec::with_capacity(spatial.len());
        for &dig in spatial {
            raw_spatial.push(match dig {
                Digit::Mode(id) => {
                    let (d, p) = use_mode(id)?;
                    RawDigit::Mode(d, p)
                }
                Digit::Replicated(0) => return invalid("replication digit of size 0".into()),
                Digit::Replicated(n) => RawDigit::Rep(n),
            });
        }
        let mut raw_local = Vec::with_capacity(local.len());
        for &id in local {
            raw_local.push(use_mode(id)?);
        }
        if let Some(id) = seen.iter().position(|s| !s) {
            return invalid(format!("mode {id} appears in no digit"));
        }
        let threads = checked_product(spatial.iter().map(|d| match *d {
            Digit::Mode(id) => modes[id].size,
            Digit::Replicated(n) => n,
        }));
        let locals = checked_product(local.iter().map(|&id| modes[id].size));
        if threads
            .zip(locals)
            .and_then(|(t, l)| t.checked_mul(l))
            .is_none()
        {
            return invalid("layout too large".into());
        }
        Ok(Raw {
            dims,
            spatial: raw_spatial,
            local: raw_local,
        }
        .normalize())
    }

    pub(crate) fn to_raw(&self) -> Raw {
        let mut dims = vec![Vec::new(); self.shape.len()];
        let mut pos = Vec::with_capacity(self.modes.len());
        for m in &self.modes {
            pos.push((m.dim, dims[m.dim].len()));
            dims[m.dim].push(m.size);
        }
        Raw {
            dims,
            spatial: self
                .spatial
                .iter()
                .map(|&dig| match dig {
                    Digit::Mode(id) => RawDigit::Mode(pos[id].0, pos[id].1),
                    Digit::Replicated(n) => RawDigit::Rep(n),
                })
                .collect(),
            local: self.local.iter().map(|&id| pos[id]).collect(),
        }
    }

    /// The same function viewed at rank `rank >= self.rank()`: extent-1 dimensions are
    /// prepended, so the shape becomes `[1, .., 1, s0, .., s(r-1)]` and `eval(t, i)` gains
    /// leading zeros; threads and locals are unchanged. This is how operands of different ranks
    /// meet in [`Layout::compose`] and [`Layout::divide`]. Errors when `rank < self.rank()`:
    /// broadcasting never drops a dimension; and when it would add dimensions beyond
    /// [`MAX_BROADCAST_RANK`].
    pub fn broadcast_to_rank(&self, rank: usize) -> Result<Layout, LayoutError> {
        if rank > MAX_BROADCAST_RANK.max(self.rank()) {
            // Each added dimension is allocated: a hostile rank aborted the process.
            return Err(LayoutError::Invalid(format!(
                "cannot broadcast to rank {rank}: at most {MAX_BROADCAST_RANK} dimensions"
            )));
        }
        if rank < self.rank() {
            return Err(LayoutError::Invalid(format!(
                "cannot broadcast a rank-{} layout to rank {rank}: broadcasting only prepends \
                 dimensions",
                self.rank()
            )));
        }
        Ok(self.at_rank(rank).into_owned())
    }

    /// `self` at rank `max(rank, self.rank())`, borrowed when no dimension is added.
    pub(crate) fn at_rank(&self, rank: usize) -> std::borrow::Cow<'_, Layout> {
        if rank <= self.rank() {
            std::borrow::Cow::Borrowed(self)
        } else {
            std::borrow::Cow::Owned(self.to_raw().broadcast(rank).normalize())
        }
    }

    /// `self.inner` (`f ∘ g`): `h(t, i) = f(t / Tg, i / Lg) * shape(g) + g(t % Tg, i % Lg)`.
    /// Operands of different ranks are first broadcast to the larger rank
    /// ([`Layout::broadcast_to_rank`]), so the result has rank `max(rank f, rank g)`.
    pub fn compose(&self, inner: &Layout) -> Result<Layout, LayoutError> {
        let size = [
            self.num_threads(),
            inner.num_threads(),
            self.num_locals(),
            inner.num_locals(),
        ];
        if checked_product(size).is_none() {
            return Err(LayoutError::Invalid(format!(
                "composition too large: {} threads x {} locals",
                self.num_threads() as u128 * inner.num_threads() as u128,
                self.num_locals() as u128 * inner.num_locals() as u128
            )));
        }
        let rank = self.rank().max(inner.rank());
        let f = self.to_raw().broadcast(rank);
        let g = inner.to_raw().broadcast(rank);
        let offset: Vec<usize> = f.dims.iter().map(Vec::len).collect();
        let dims = f
            .dims
            .iter()
            .zip(&g.dims)
            .map(|(a, b)| a.iter().chain(b).copied().collect())
            .collect();
        let mut spatial = f.spatial;
        spatial.extend(g.spatial.iter().map(|&dig| match dig {
            RawDigit::Mode(d, p) => RawDigit::Mode(d, p + offset[d]),
            rep => rep,
        }));
        let mut local = f.local;
        local.extend(g.local.iter().map(|&(d, p)| (d, p + offset[d])));
        Ok(Raw {
            dims,
            spatial,
            local,
        }
        .normalize())
    }

    /// `self / g`: the `f` with `f ∘ g == self`, or an error when there is none. Operands of
    /// different ranks are first broadcast to the larger rank, which is the quotient's rank
    /// (see "Mixed ranks" in the module documentation).
    ///
    /// Per dimension, `self`'s modes are split where `g`'s extent ends (counting from the
    /// innermost) and the inner part is refined together with `g`'s modes to a common
    /// refinement; then `self`'s thread digits must end with `g`'s thread digits (replication
    /// digits matched by size) and its local digits with `g`'s local digits. The remaining
    /// prefixes are `f`. The result is checked by composing it back.
    pub fn divide(&self, g: &Layout) -> Result<Layout, LayoutError> {
        divide::divide(self, g).map_err(|why| {
            LayoutError::NotDivisible(format!(
                "{} is not divisible by {}: {why}",
                self.to_expr(),
                g.to_expr()
            ))
        })
    }

    /// Collapse `dims` to extent 1: the threads that spanned them become replicas of each other
    /// and locals along them disappear (appendix B's `reduce`). Each thread digit of a reduced
    /// dimension becomes a replication digit of the same size at the same position, so the
    /// thread count is unchanged; the local count shrinks. Repeated dims are allowed.
    pub fn reduce(&self, dims: &[usize]) -> Result<Layout, LayoutError> {
        if let Some(&d) = dims.iter().find(|&&d| d >= self.rank()) {
            return Err(LayoutError::Invalid(format!(
                "reduce: dim {d} is out of range for a rank-{} layout",
                self.rank()
            )));
        }
        let mut raw = self.to_raw();
        raw.spatial = raw
            .spatial
            .iter()
            .map(|&dig| match dig {
                RawDigit::Mode(d, p) if dims.contains(&d) => RawDigit::Rep(raw.dims[d][p]),
                other => other,
            })
            .collect();
        raw.local.retain(|(d, _)| !dims.contains(d));
        for &d in dims {
            raw.dims[d].clear();
        }
        Ok(raw.normalize())
    }

    /// Insert extent-1 dimensions at positions `dims` of the result (broadcast to higher rank).
    /// The result has rank `rank() + dims.len()`; `dims` must be distinct and below that rank
    /// (numpy's `expand_dims`).
    pub fn unsqueeze(&self, dims: &[usize]) -> Result<Layout, LayoutError> {
        let rank = self.rank() + dims.len();
        let mut is_new = vec![false; rank];
        for &d in dims {
            if d >= rank {
                return Err(LayoutError::Invalid(format!(
                    "unsqueeze: position {d} is out of range for a rank-{rank} result"
                )));
            }
            if std::mem::replace(&mut is_new[d], true) {
                return Err(LayoutError::Invalid(format!(
                    "unsqueeze: position {d} given twice"
                )));
            }
        }
        let map: Vec<usize> = (0..rank).filter(|&d| !is_new[d]).collect();
        let raw = self.to_raw();
        let mut dims_out = vec![Vec::new(); rank];
        for (d, sizes) in raw.dims.into_iter().enumerate() {
            dims_out[map[d]] = sizes;
        }
        Ok(Raw {
            dims: dims_out,
            spatial: raw
                .spatial
                .iter()
                .map(|&dig| match dig {
                    RawDigit::Mode(d, p) => RawDigit::Mode(map[d], p),
                    rep => rep,
                })
                .collect(),
            local: raw.local.iter().map(|&(d, p)| (map[d], p)).collect(),
        }
        .normalize())
    }

    /// Logical shape of the tile.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn rank(&self) -> usize {
        self.shape().len()
    }
    /// Threads of the layout, replicas included.
    pub fn num_threads(&self) -> usize {
        self.spatial.iter().map(|&d| self.digit_size(d)).product()
    }
    /// Elements each thread holds.
    pub fn num_locals(&self) -> usize {
        self.local.iter().map(|&id| self.modes[id].size).product()
    }
    /// How many threads hold each element (product of the replication digits).
    pub fn num_replicas(&self) -> usize {
        self.spatial
            .iter()
            .map(|&d| match d {
                Digit::Replicated(n) => n,
                Digit::Mode(_) => 1,
            })
            .product()
    }

    /// The modes, ordered by dimension and, within a dimension, outer to inner.
    pub fn modes(&self) -> &[Mode] {
        &self.modes
    }
    /// Digits of the thread index, most significant first.
    pub fn spatial_digits(&self) -> &[Digit] {
        &self.spatial
    }
    /// Digits of the local index (mode ids), most significant first.
    pub fn local_digits(&self) -> &[usize] {
        &self.local
    }
    /// Number of values of a thread digit.
    pub fn digit_size(&self, digit: Digit) -> usize {
        match digit {
            Digit::Mode(id) => self.modes[id].size,
            Digit::Replicated(n) => n,
        }
    }

    /// Logical index held by thread `t` at local `i`.
    ///
    /// # Panics
    /// If `t >= num_threads()` or `i >= num_locals()`.
    pub fn eval(&self, t: usize, i: usize) -> Vec<usize> {
        assert!(
            t < self.num_threads() && i < self.num_locals(),
            "Layout::eval({t}, {i}) out of range: {} threads, {} locals",
            self.num_threads(),
            self.num_locals()
        );
        let mut index = vec![0; self.rank()];
        let mut rest = t;
        for &dig in self.spatial.iter().rev() {
            let size = self.digit_size(dig);
            if let Digit::Mode(id) = dig {
                let m = self.modes[id];
                index[m.dim] += (rest % size) * m.stride;
            }
            rest /= size;
        }
        let mut rest = i;
        for &id in self.local.iter().rev() {
            let m = self.modes[id];
            index[m.dim] += (rest % m.size) * m.stride;
            rest /= m.size;
        }
        index
    }

    /// Every `(thread, local)` holding logical `index` (several when threads are replicated),
    /// sorted by thread. Empty when `index` is outside the shape or of the wrong rank.
    pub fn owners(&self, index: &[usize]) -> Vec<(usize, usize)> {
        if index.len() != self.rank() || index.iter().zip(&self.shape).any(|(&x, &n)| x >= n) {
            return Vec::new();
        }
        let value = |id: usize| {
            let m = self.modes[id];
            index[m.dim] / m.stride % m.size
        };
        let mut local = 0;
        for &id in &self.local {
            local = local * self.modes[id].size + value(id);
        }
        // Thread with every replication digit 0, and the place values of those digits.
        let mut base = 0;
        let mut place = 1;
        let mut reps = Vec::new();
        for &dig in self.spatial.iter().rev() {
            match dig {
                Digit::Mode(id) => base += value(id) * place,
                Digit::Replicated(n) => reps.push((n, place)),
            }
            place *= self.digit_size(dig);
        }
        let mut threads = vec![base];
        for (n, place) in reps {
            threads = threads
                .iter()
                .flat_map(|&t| (0..n).map(move |v| t + v * place))
                .collect();
        }
        threads.sort_unstable();
        threads.into_iter().map(|t| (t, local)).collect()
    }

    /// The same elements on the same threads with each thread's locals in another order: the
    /// innermost `inner` locals and the `outer` locals just outside them trade places. Reading
    /// the local index as the mixed-radix number `(rest, x, p)` with `x < outer` and `p < inner`
    /// innermost, local `(rest, x, p)` of `self` is local `(rest, p, x)` of the result.
    ///
    /// The quantized matmul uses it to pack the two codes of each f16 pair of an mma fragment
    /// (`inner = 2`) 16 bits apart, so that a mask puts them into the two lanes of a word without
    /// moving bytes. Modes are split where the boundaries fall inside them; errors when
    /// `inner * outer` does not divide the local count or a boundary cannot split a mode.
    pub fn swap_inner_locals(&self, inner: usize, outer: usize) -> Result<Layout, LayoutError> {
        let locals = self.num_locals();
        // Checked: `inner * outer` of hostile arguments overflowed (a panic in debug builds).
        let block = inner.checked_mul(outer).filter(|&b| b > 0);
        if !block.is_some_and(|b| locals.is_multiple_of(b)) {
            return Err(LayoutError::NotDivisible(format!(
                "swap_inner_locals({inner}, {outer}): {} locals are not a multiple of {}",
                locals,
                inner as u128 * outer as u128
            )));
        }
        let mut raw = self.to_raw();
        // Split local modes so that the boundaries at `inner` and `inner * outer` (counted from
        // the innermost local) fall between digits.
        for boundary in [inner, inner * outer] {
            let mut below = 1;
            let mut j = raw.local.len();
            while j > 0 && below < boundary {
                j -= 1;
                let (d, k) = raw.local[j];
                let size = raw.dims[d][k];
                if below * size > boundary {
                    let lower = boundary / below;
                    if !(boundary.is_multiple_of(below) && size.is_multiple_of(lower)) {
                        return Err(LayoutError::NotDivisible(format!(
                            "swap_inner_locals({inner}, {outer}): a local mode of size {size} \
                             cannot be split at {boundary} locals"
                        )));
                    }
                    raw.split_mode(d, k, size / lower, lower);
                    break;
                }
                below *= size;
            }
        }
        // Digits from the innermost: those of `p` (product inner), then of `x` (product outer).
        let mut cut = [0usize; 2];
        let mut below = 1;
        let mut j = raw.local.len();
        for (slot, boundary) in [inner, inner * outer].into_iter().enumerate() {
            while below < boundary {
                j -= 1;
                let (d, k) = raw.local[j];
                below *= raw.dims[d][k];
            }
            cut[slot] = j;
        }
        let (x0, p0) = (cut[1], cut[0]);
        let mut local = raw.local[..x0].to_vec();
        local.extend_from_slice(&raw.local[p0..]);
        local.extend_from_slice(&raw.local[x0..p0]);
        raw.local = local;
        Ok(raw.normalize())
    }

    /// The permutation `sigma` with `to.eval(t, i) == self.eval(t, sigma[i])` for every thread
    /// and local: `to` holds the same elements on the same threads in another local order.
    /// `None` when it does not (a register-only reordering cannot turn one into the other).
    pub fn local_permutation(&self, to: &Layout) -> Option<Vec<usize>> {
        if self.shape != to.shape
            || self.num_threads() != to.num_threads()
            || self.num_locals() != to.num_locals()
        {
            return None;
        }
        if self == to {
            return Some((0..self.num_locals()).collect());
        }
        let at: std::collections::HashMap<Vec<usize>, usize> = (0..self.num_locals())
            .map(|i| (self.eval(0, i), i))
            .collect();
        let sigma: Vec<usize> = (0..to.num_locals())
            .map(|i| at.get(&to.eval(0, i)).copied())
            .collect::<Option<_>>()?;
        (0..self.num_threads())
            .all(|t| (0..to.num_locals()).all(|i| to.eval(t, i) == self.eval(t, sigma[i])))
            .then_some(sigma)
    }

    /// The whole function as a table: `map[t][i] == eval(t, i)`.
    pub fn to_map(&self) -> Vec<Vec<Vec<usize>>> {
        (0..self.num_threads())
            .map(|t| (0..self.num_locals()).map(|i| self.eval(t, i)).collect())
            .collect()
    }

    /// Whether the two layouts have the same shape, thread and local counts and `eval`
    /// everywhere, checked by evaluating every `(t, i)`. Agrees with `==` (the representation
    /// is canonical); this is the brute-force definition.
    pub fn same_function(&self, other: &Layout) -> bool {
        self.shape() == other.shape()
            && self.num_threads() == other.num_threads()
            && self.num_locals() == other.num_locals()
            && (0..self.num_threads())
                .all(|t| (0..self.num_locals()).all(|i| self.eval(t, i) == other.eval(t, i)))
    }
}

impl std::str::FromStr for Layout {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Layout, ParseError> {
        parse(s)
    }
}
