//! Body translation: the kernel's Rust syntax, for one configuration, into a
//! `tilus_core::ir::Program` built with `ProgramBuilder`.
//!
//! Tile parameters are constants of the configuration and scalar arithmetic on constants is
//! folded while translating, so `if BM >= 64 { .. }` keeps only the taken branch and
//! `layout!(local(BM / 16, 1))` sees a number. Each statement and instruction gets a `SpanId`
//! from [`Sites`], keyed by its syntax node, so verifier diagnostics point back at user tokens.
//!
//! Translation problems (undefined names, unknown instructions, malformed layouts, arguments of
//! the wrong kind) are collected in `diags` and translation goes on with the next statement; a
//! name whose definition failed is *poisoned* so that its uses do not repeat the error.

mod expr;
mod helper;
mod instr;
mod layout;
mod math;
mod notes;
mod prelude;
pub mod replicated;
mod specialize;
mod stmt;

use std::collections::HashMap;

use quote::ToTokens;
use syn::ItemFn;
use tilus_core::ir::{Expr, Program, ProgramBuilder, ScalarType, SpanId, VarId};
use tilus_core::layout::{Layout, ParseError};
use tilus_core::DType;

use crate::attr::KernelAttr;
use crate::diag::{node_key, Diag, Range, Site, Sites};
use crate::signature::{KernelSig, ParamKind};
use crate::space::{Point, Space};

pub use specialize::MacroCache;

/// What a name is bound to.
#[derive(Clone, Debug)]
pub enum Binding {
    /// A compile-time integer: a tile parameter or an immutable scalar that folded.
    Const(i32),
    ConstBool(bool),
    /// A floating-point constant (only usable as an immediate of tensor instructions).
    Float(f64),
    Scalar {
        var: VarId,
        ty: ScalarType,
        mutable: bool,
    },
    Tensor {
        var: VarId,
        mutable: bool,
    },
    /// A kernel parameter pointing at device memory.
    Pointer(VarId),
    /// A layout, its text, and for `let name = layout!(..)` a note saying where it was defined
    /// (appended to verifier errors about an instruction that uses it).
    Layout(Layout, String, Option<std::rc::Rc<str>>),
    Array(Vec<Expr>),
    /// A dtype parameter (`W`), usable in turbofish position and as `W::BITS`.
    DType(DType),
    /// A closure: a helper that sees the names in scope where it was written.
    Closure(std::rc::Rc<helper::Helper>),
    /// `let x = if CONST { .. } else { () };` in a configuration where the condition chose
    /// `()`: the name exists, and using it is an error (use it under the same condition).
    Absent,
    /// Its definition failed and was reported; uses are silently accepted.
    Poisoned,
}

/// The result of translating an expression.
#[derive(Clone, Debug)]
pub enum Value {
    Scalar(Expr, ScalarType),
    Float(f64),
    Tensor(VarId),
    Pointer(VarId),
    Layout(Layout, String),
    Array(Vec<Expr>),
    /// The results of a helper function (`(m, l)`), destructured by `let` or assignment.
    Tuple(Vec<Value>),
    /// A closure (`|kt: i32| { .. }`), inlined at each call.
    Closure(std::rc::Rc<helper::Helper>),
    Unit,
    Poisoned,
}

/// An error was reported; the caller skips what depended on it.
#[derive(Debug)]
pub struct Reported;
pub type R<T> = Result<T, Reported>;

/// Where an instruction's result goes.
#[derive(Clone, Debug)]
pub enum DestHint {
    /// A new variable named after the `let` binding.
    New(String),
    /// An existing mutable tensor (`acc = dot(a, b, acc)`).
    Existing(VarId),
    /// A temporary (an argument of another instruction).
    Temp,
}

/// Shared across the configurations of one kernel: the span table and parsed layouts.
pub struct Shared<'a> {
    pub sites: &'a mut Sites,
    pub layouts: &'a mut HashMap<String, Result<Layout, ParseError>>,
    /// The parsed `specialize!` macros (their syntax nodes must outlive every configuration).
    pub macros: &'a mut MacroCache,
    /// Replicated register tensors of this configuration, with the warning for each (kept by
    /// [`replicated::unused_copies`] when no wider computation consumes the copies).
    pub warnings: Vec<(VarId, Diag)>,
}

pub struct Translator<'a, 'b> {
    sig: &'a KernelSig,
    attr: &'a KernelAttr,
    shared: &'a mut Shared<'b>,
    pub diags: Vec<Diag>,
    scopes: Vec<Vec<(String, Binding)>>,
    used_names: HashMap<String, u32>,
    /// Translating the grid: instructions are not allowed.
    in_grid: bool,
    /// Helper functions declared in the kernel body, and those whose declaration failed.
    helpers: Vec<(String, std::rc::Rc<helper::Helper>)>,
    failed_helpers: Vec<String>,
    /// How deep the helper calls being inlined nest.
    helper_depth: usize,
    /// Threads per block (0 when `warps`/`threads` is wrong), and whether the `let` being
    /// translated has `#[allow(replicated)]`.
    block_threads: u32,
    allow_replicated: bool,
}

/// Translate the kernel for the configuration `point`.
pub fn translate(
    f: &ItemFn,
    sig: &KernelSig,
    attr: &KernelAttr,
    space: &Space,
    point: &Point,
    shared: &mut Shared,
) -> Result<Program, Vec<Diag>> {
    let mut t = Translator {
        sig,
        attr,
        shared,
        diags: Vec::new(),
        scopes: vec![Vec::new()],
        used_names: HashMap::new(),
        in_grid: false,
        helpers: Vec::new(),
        failed_helpers: Vec::new(),
        helper_depth: 0,
        block_threads: 0,
        allow_replicated: false,
    };
    for name in sig.tile_names() {
        let v = space.tile(point, &name.to_string()).unwrap_or(0);
        t.bind(&name.to_string(), Binding::Const(v));
    }
    for name in sig.dtype_names() {
        if let Some(d) = space.dtype(point, &name.to_string()) {
            t.bind(&name.to_string(), Binding::DType(d));
        }
    }
    let threads = t.threads();
    t.block_threads = threads.unwrap_or(0);
    let mut b = ProgramBuilder::new(&sig.name.to_string(), threads.unwrap_or(128));
    b.set_program_span(SpanId(0));
    for p in &sig.params {
        let name = p.name.to_string();
        t.used_names.insert(name.clone(), 1);
        let binding = match &p.kind {
            ParamKind::I32 => Binding::Scalar {
                var: b.param_i32(&name),
                ty: ScalarType::I32,
                mutable: false,
            },
            ParamKind::I64 => Binding::Scalar {
                var: b.param_i64(&name),
                ty: ScalarType::I64,
                mutable: false,
            },
            ParamKind::F32 => Binding::Scalar {
                var: b.param_f32(&name),
                ty: ScalarType::F32,
                mutable: false,
            },
            ParamKind::Bool => Binding::Scalar {
                var: b.param_bool(&name),
                ty: ScalarType::Bool,
                mutable: false,
            },
            ParamKind::Ptr {
                dtype,
                mutable,
                by_param,
                ..
            } => {
                // `Global<A>`: the element type of this configuration.
                let dtype = by_param
                    .as_ref()
                    .and_then(|a| space.dtype(point, a))
                    .unwrap_or(*dtype);
                Binding::Pointer(b.param_ptr(&name, dtype, *mutable))
            }
            ParamKind::Bad => Binding::Poisoned,
        };
        t.bind(&name, binding);
    }
    t.grid(&mut b);
    if let Some(e) = t.attr.blocks_per_sm.clone() {
        match t.const_int(&e) {
            Some(v) if v >= 1 => b.blocks_per_sm(v as u32),
            _ => {
                let _ = t.err(
                    &e,
                    "`blocks_per_sm` must be a positive constant (integers and tile parameters)",
                );
            }
        }
    }
    t.scopes.push(Vec::new());
    t.declare_helpers(&f.block.stmts);
    t.declare_prelude();
    for stmt in &f.block.stmts {
        t.stmt(&mut b, stmt);
    }
    if t.diags.is_empty() && threads.is_some() {
        Ok(b.finish())
    } else {
        Err(t.diags)
    }
}

impl Translator<'_, '_> {
    fn error(&mut self, d: Diag) -> Reported {
        self.diags.push(d);
        Reported
    }

    /// Report `message` at `node`.
    fn err<T: ToTokens + 'static>(&mut self, node: &T, message: impl Into<String>) -> Reported {
        self.error(Diag::at(node, message))
    }

    fn bind(&mut self, name: &str, binding: Binding) {
        self.scopes
            .last_mut()
            .expect("a scope is always open")
            .push((name.to_string(), binding));
    }

    fn lookup(&self, name: &str) -> Option<&Binding> {
        self.scopes
            .iter()
            .rev()
            .find_map(|s| s.iter().rev().find(|(n, _)| n == name).map(|(_, b)| b))
    }

    fn names_in_scope(&self) -> Vec<String> {
        self.scopes
            .iter()
            .flat_map(|s| s.iter().map(|(n, _)| n.clone()))
            .collect()
    }

    /// A variable name not used before in this program (shadowing gets `_1`, `_2`, ...).
    fn unique(&mut self, name: &str) -> String {
        let n = self.used_names.entry(name.to_string()).or_insert(0);
        *n += 1;
        if *n == 1 {
            name.to_string()
        } else {
            format!("{name}_{}", *n - 1)
        }
    }

    /// The span id of `node`, for the builder.
    fn site<T: ToTokens + 'static>(&mut self, node: &T) -> SpanId {
        self.site_with(node, None, None)
    }

    /// The span id of an instruction `node` with its layout argument and offset range:
    /// diagnostics about the layout point at that argument and say where a layout variable
    /// in it was defined.
    fn site_with<T: ToTokens + 'static>(
        &mut self,
        node: &T,
        layout: Option<&syn::Expr>,
        offset: Option<Range>,
    ) -> SpanId {
        let note = layout.and_then(|l| self.layout_notes(l));
        self.shared.sites.intern(Site {
            range: Range::of(node),
            key: node_key(node),
            layout: layout.map(|l| Range::of(l)),
            offset,
            note,
        })
    }

    /// Threads per block from `warps = ..` / `threads = ..` (default 4 warps).
    fn threads(&mut self) -> Option<u32> {
        let Some((e, warps)) = &self.attr.threads else {
            return Some(128);
        };
        let e = e.clone();
        let what = if *warps { "warps" } else { "threads" };
        match self.const_int(&e) {
            Some(v) if v > 0 => {
                let threads = if *warps { v.checked_mul(32) } else { Some(v) };
                match threads {
                    Some(t) if t % 32 == 0 && t <= 1024 => Some(t as u32),
                    _ => {
                        let _ = self.err(
                            &e,
                            format!(
                                "a block has a multiple of 32 threads, at most 1024; `{what} = {v}` gives {}",
                                threads.map(|t| t.to_string()).unwrap_or_else(|| "too many".into())
                            ),
                        );
                        None
                    }
                }
            }
            Some(v) => {
                let _ = self.err(&e, format!("`{what}` must be positive, found {v}"));
                None
            }
            None => {
                let _ = self.err(
                    &e,
                    format!("`{what}` must be a constant (integers and tile parameters)"),
                );
                None
            }
        }
    }

    fn grid(&mut self, b: &mut ProgramBuilder) {
        let Some((exprs, _)) = &self.attr.grid else {
            return;
        };
        let exprs = exprs.clone();
        self.in_grid = true;
        let mut extents = Vec::new();
        for e in &exprs {
            let site = self.site(e);
            b.set_span(site);
            if let Ok(x) = self.scalar(b, e, ScalarType::I32) {
                extents.push(x);
            }
        }
        self.in_grid = false;
        b.grid(extents);
    }
}

/// Levenshtein distance, for "did you mean" hints.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The closest of `candidates` to `name`, if close enough to be a likely typo.
pub fn suggest<'c>(name: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, c)| *d <= 2.max(name.len() / 4) && *d < name.len().max(c.len()))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// A span for diagnostics about the kernel as a whole.
pub fn kernel_range(f: &ItemFn) -> (Range, crate::diag::SiteKey) {
    (Range::single(f.sig.ident.span()), node_key(&f.sig.ident))
}
