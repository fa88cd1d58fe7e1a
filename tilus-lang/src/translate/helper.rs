//! Helper functions in a kernel body, so that a piece of a kernel (an online-softmax update, a
//! dequantization step) is written once:
//!
//! ```ignore
//! fn update(m: Tensor, l: Tensor, x: Tensor) -> (Tensor, Tensor) { .. (m_new, l_new) }
//! let (m1, l1) = update(m, l, x);   // or `(m, l) = update(m, l, x);`
//! ```
//!
//! Helpers are declared among the kernel's top-level statements (anywhere: like Rust items,
//! they are visible before their declaration) and every call is inlined: the arguments are
//! bound to the parameters in a fresh scope that sees the kernel's parameters, tile parameters
//! and data types but none of the caller's locals; the body is translated in place, and its
//! tail expression is the call's value (a tuple of values for several results). Parameters are
//! immutable. Their types are checked: `Tensor`, `i32`, `f32`, `bool`, `Layout`, or `_` for any.
//!
//! A closure, `let issue = |tile: i32, stage: i32| { .. };`, is the same thing written where
//! it is needed: its body sees every name in scope where the closure is written (captured by
//! reference, as Rust's closures do: `acc = dot(a, b, acc)` inside writes the captured `mut`
//! tensor). Untyped closure parameters accept any value.

use std::rc::Rc;

use syn::{Expr as SynExpr, ExprCall, FnArg, ItemFn, Pat, Stmt};
use tilus_core::ir::{syntax, ProgramBuilder};

use super::*;

/// Calls nest at most this deep (a deeper chain is almost surely recursion, which cannot be
/// inlined).
const MAX_DEPTH: usize = 16;

/// What a helper parameter accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ParamType {
    Tensor,
    Scalar(ScalarType),
    Layout,
    Any,
}

/// A declared helper function, or a closure.
pub struct Helper {
    name: String,
    params: Vec<(String, ParamType)>,
    body: Rc<syn::Block>,
    /// For a closure, the scopes where it was written; a helper sees the kernel's names only.
    captured: Option<Vec<Vec<(String, Binding)>>>,
}

impl std::fmt::Debug for Helper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "helper `{}` of {} parameters",
            self.name,
            self.params.len()
        )
    }
}

impl Translator<'_, '_> {
    /// Register the helper functions among the kernel body's top-level statements; report bad
    /// declarations (they are left undeclared, so calls to them report "not found" quietly
    /// poisoned).
    pub(super) fn declare_helpers(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            let Stmt::Item(syn::Item::Fn(f)) = s else {
                continue;
            };
            let name = f.sig.ident.to_string();
            if let Some(params) = self.helper_signature(f) {
                if syntax::lookup(&name).is_some() {
                    let _ = self.err(
                        &f.sig.ident,
                        format!("`{name}` is an instruction; give the helper another name"),
                    );
                } else if self.helpers.iter().any(|(n, _)| *n == name) {
                    let _ = self.err(
                        &f.sig.ident,
                        format!("the helper `{name}` is declared twice"),
                    );
                } else {
                    let helper = Helper {
                        name: name.clone(),
                        params,
                        body: Rc::new((*f.block).clone()),
                        captured: None,
                    };
                    self.helpers.push((name, Rc::new(helper)));
                }
            } else {
                self.failed_helpers.push(name);
            }
        }
    }

    /// Register the prelude's helpers ([`super::prelude`]) but those the kernel declares itself.
    pub(super) fn declare_prelude(&mut self) {
        let file: syn::File = syn::parse_str(super::prelude::SOURCE).expect("the prelude parses");
        for item in file.items {
            let syn::Item::Fn(f) = item else { continue };
            let name = f.sig.ident.to_string();
            if self.helpers.iter().any(|(n, _)| *n == name) || self.failed_helpers.contains(&name) {
                continue;
            }
            let params = self
                .helper_signature(&f)
                .expect("the prelude's signatures are valid");
            let helper = Helper {
                name: name.clone(),
                params,
                body: Rc::new(*f.block),
                captured: None,
            };
            self.helpers.push((name, Rc::new(helper)));
        }
    }

    /// The parameters of a helper declaration, or `None` after reporting what is wrong.
    fn helper_signature(&mut self, f: &ItemFn) -> Option<Vec<(String, ParamType)>> {
        let sig = &f.sig;
        let mut ok = true;
        if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
            let _ = self.err(
                &sig.generics,
                "helpers have no generics: they see the kernel's tile and dtype parameters",
            );
            ok = false;
        }
        if let Some(tok) = sig
            .asyncness
            .as_ref()
            .map(|t| t.span)
            .or(sig.unsafety.as_ref().map(|t| t.span))
            .or(sig.constness.as_ref().map(|t| t.span))
        {
            let _ = self.error(Diag::at_span(
                tok,
                "a helper is a plain `fn` (no `async`, `unsafe` or `const`)",
            ));
            ok = false;
        }
        let mut params = Vec::new();
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(r) => {
                    let _ = self.err(r, "helpers take no `self`");
                    ok = false;
                }
                FnArg::Typed(pt) => {
                    let name = match &*pt.pat {
                        Pat::Ident(pi) if pi.mutability.is_none() && pi.by_ref.is_none() => {
                            pi.ident.to_string()
                        }
                        Pat::Ident(pi) if pi.mutability.is_some() => {
                            let _ = self.err(
                                &*pt.pat,
                                "helper parameters are immutable; bind a `let mut` copy inside",
                            );
                            ok = false;
                            continue;
                        }
                        other => {
                            let _ = self.err(other, "expected a parameter name");
                            ok = false;
                            continue;
                        }
                    };
                    match self.param_type(&pt.ty) {
                        Some(t) => params.push((name, t)),
                        None => ok = false,
                    }
                }
            }
        }
        // The return type is documentation: the tail expression decides what a call gives.
        ok.then_some(params)
    }

    /// The type a parameter accepts, or `None` after reporting a type that is not one.
    fn param_type(&mut self, ty: &syn::Type) -> Option<ParamType> {
        let t = match ty {
            syn::Type::Infer(_) => Some(ParamType::Any),
            syn::Type::Path(p) if p.qself.is_none() => {
                match p.path.get_ident().map(|i| i.to_string()).as_deref() {
                    Some("Tensor") => Some(ParamType::Tensor),
                    Some("i32") => Some(ParamType::Scalar(ScalarType::I32)),
                    Some("i64") => Some(ParamType::Scalar(ScalarType::I64)),
                    Some("f32") => Some(ParamType::Scalar(ScalarType::F32)),
                    Some("bool") => Some(ParamType::Scalar(ScalarType::Bool)),
                    Some("Layout") => Some(ParamType::Layout),
                    _ => None,
                }
            }
            _ => None,
        };
        if t.is_none() {
            let _ = self.err(
                ty,
                "a helper parameter is a `Tensor`, `i32`, `f32`, `bool`, `Layout`, or `_` for any of them",
            );
        }
        t
    }

    /// A closure written in the body: `|a: Tensor, kt: i32| expr`.
    pub(super) fn closure(&mut self, c: &syn::ExprClosure) -> R<Value> {
        if let Some(tok) = c
            .movability
            .as_ref()
            .map(|t| t.span)
            .or(c.asyncness.as_ref().map(|t| t.span))
            .or(c.constness.as_ref().map(|t| t.span))
            .or(c.lifetimes.as_ref().map(|l| l.for_token.span))
        {
            return Err(self.error(Diag::at_span(
                tok,
                "a kernel closure is a plain `|args| body` (no `static`, `async`, `const` or `for<..>`); `move` is allowed and changes nothing",
            )));
        }
        let mut params = Vec::new();
        let mut ok = true;
        for input in &c.inputs {
            let (pat, ty) = match input {
                Pat::Type(pt) => (&*pt.pat, self.param_type(&pt.ty)),
                other => (other, Some(ParamType::Any)),
            };
            match pat {
                Pat::Ident(pi) if pi.mutability.is_none() && pi.by_ref.is_none() => match ty {
                    Some(t) => params.push((pi.ident.to_string(), t)),
                    None => ok = false,
                },
                Pat::Ident(pi) if pi.mutability.is_some() => {
                    let _ = self.err(
                        pat,
                        "closure parameters are immutable; bind a `let mut` copy inside",
                    );
                    ok = false;
                }
                other => {
                    let _ = self.err(other, "expected a parameter name");
                    ok = false;
                }
            }
        }
        if !ok {
            return Err(Reported);
        }
        let body = match &*c.body {
            SynExpr::Block(b) if b.label.is_none() => b.block.clone(),
            other => syn::Block {
                brace_token: Default::default(),
                stmts: vec![Stmt::Expr(other.clone(), None)],
            },
        };
        Ok(Value::Closure(Rc::new(Helper {
            name: "closure".to_string(),
            params,
            body: Rc::new(body),
            captured: Some(self.scopes.clone()),
        })))
    }

    /// The closure or helper called `name`: a closure in scope first, then a declared helper.
    pub(super) fn helper(&self, name: &str) -> Option<Rc<Helper>> {
        if let Some(Binding::Closure(h)) = self.lookup(name) {
            return Some(h.clone());
        }
        self.helpers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, h)| h.clone())
    }

    /// Inline a call of `helper`.
    /// `dest` goes to the tail instruction of a helper with one result, so `acc = f(acc, ..)`
    /// whose tail is `mul_add(.., acc_t)` writes `acc` in place, as a direct call would.
    pub(super) fn call_helper(
        &mut self,
        b: &mut ProgramBuilder,
        c: &ExprCall,
        helper: &Helper,
        dest: DestHint,
    ) -> R<Value> {
        let name = match &c.func.as_ref() {
            SynExpr::Path(p) => p.path.to_token_stream().to_string(),
            _ => helper.name.clone(),
        };
        if self.in_grid {
            return Err(self.err(c, "the grid cannot call helpers"));
        }
        if c.args.len() != helper.params.len() {
            return Err(self.err(
                c,
                format!(
                    "`{name}` takes {} argument{}, found {}",
                    helper.params.len(),
                    if helper.params.len() == 1 { "" } else { "s" },
                    c.args.len()
                ),
            ));
        }
        if self.helper_depth >= MAX_DEPTH {
            return Err(self.err(
                c,
                format!("helper calls nest deeper than {MAX_DEPTH}: `{name}` is recursive or nearly so, and calls are inlined"),
            ));
        }
        // Arguments, in the caller's scope.
        let mut bound = Vec::new();
        let mut failed = false;
        for (arg, (pname, pty)) in c.args.iter().zip(&helper.params) {
            match self.value(b, arg, DestHint::Temp) {
                Ok(v) => match self.bind_param(b, arg, &name, pname, *pty, v) {
                    Ok(binding) => bound.push((pname.clone(), binding)),
                    Err(Reported) => failed = true,
                },
                Err(Reported) => failed = true,
            }
        }
        if failed {
            return Err(Reported);
        }
        // The body, in a scope with the kernel's own names (a closure: the names where it was
        // written) and the parameters.
        let mut scopes = match &helper.captured {
            Some(captured) => captured.clone(),
            None => vec![self.scopes[0].clone()],
        };
        scopes.push(bound);
        let saved = std::mem::replace(&mut self.scopes, scopes);
        self.helper_depth += 1;
        let stmts = &helper.body.stmts;
        // A trailing loop, `if` without `else` or `if` of statements is a statement, as in
        // Rust.
        let (body, tail) = match stmts.split_last() {
            Some((Stmt::Expr(e, None), rest)) if !super::expr::is_unit(e) => (rest, Some(e)),
            _ => (&stmts[..], None),
        };
        for s in body {
            self.stmt(b, s);
        }
        let result = match tail {
            Some(e) => self.helper_result(b, e, dest),
            None => Ok(Value::Unit),
        };
        self.helper_depth -= 1;
        self.scopes = saved;
        result
    }

    /// The tail expression of a helper: a value, or a tuple of values.
    pub(super) fn helper_result(
        &mut self,
        b: &mut ProgramBuilder,
        e: &SynExpr,
        dest: DestHint,
    ) -> R<Value> {
        match e {
            SynExpr::Tuple(t) => {
                let mut items = Vec::new();
                let mut failed = false;
                for x in &t.elems {
                    match self.value(b, x, DestHint::Temp) {
                        Ok(v) => items.push(v),
                        Err(Reported) => failed = true,
                    }
                }
                if failed {
                    Err(Reported)
                } else {
                    Ok(Value::Tuple(items))
                }
            }
            other => self.value(b, other, dest),
        }
    }

    /// The binding of parameter `pname` for the argument value `v`, checked against its type.
    fn bind_param(
        &mut self,
        b: &mut ProgramBuilder,
        arg: &SynExpr,
        helper: &str,
        pname: &str,
        pty: ParamType,
        v: Value,
    ) -> R<Binding> {
        // An i32 argument for an i64 parameter is promoted exactly.
        let v = match (v, pty) {
            (Value::Scalar(e, ScalarType::I32), ParamType::Scalar(ScalarType::I64)) => {
                Value::Scalar(super::expr::widen(e), ScalarType::I64)
            }
            (v, _) => v,
        };
        let ok = match (&v, pty) {
            (Value::Poisoned, _) => return Err(Reported),
            (_, ParamType::Any) => true,
            (Value::Tensor(_), ParamType::Tensor) => true,
            (Value::Scalar(_, t), ParamType::Scalar(want)) => *t == want,
            (Value::Float(_), ParamType::Scalar(ScalarType::F32)) => true,
            (Value::Layout(..), ParamType::Layout) => true,
            _ => false,
        };
        if !ok {
            let found = self.describe(&v);
            let want = match pty {
                ParamType::Tensor => "a tensor",
                ParamType::Scalar(ScalarType::I32) => "an i32 scalar",
                ParamType::Scalar(ScalarType::F32) => "an f32 scalar",
                ParamType::Scalar(ScalarType::I64) => "an i64 scalar",
                ParamType::Scalar(ScalarType::Bool) => "a boolean",
                ParamType::Layout => "a layout",
                ParamType::Any => "a value",
            };
            return Err(self.err(
                arg,
                format!("parameter `{pname}` of `{helper}` is {want}, found {found}"),
            ));
        }
        Ok(match v {
            Value::Scalar(Expr::Int(c), ScalarType::I32) => Binding::Const(c),
            Value::Scalar(Expr::Bool(c), ScalarType::Bool) => Binding::ConstBool(c),
            Value::Scalar(Expr::Var(var), ty) => Binding::Scalar {
                var,
                ty,
                mutable: false,
            },
            // A computed scalar is evaluated once, at the call.
            Value::Scalar(e, ty) => {
                let n = self.unique(pname);
                Binding::Scalar {
                    var: b.let_(&n, ty, e),
                    ty,
                    mutable: false,
                }
            }
            Value::Float(f) => Binding::Float(f),
            Value::Tensor(var) => Binding::Tensor {
                var,
                mutable: false,
            },
            Value::Pointer(var) => Binding::Pointer(var),
            Value::Layout(l, t) => Binding::Layout(l, t, None),
            Value::Array(a) => Binding::Array(a),
            Value::Closure(h) => Binding::Closure(h),
            Value::Tuple(_) | Value::Unit | Value::Poisoned => {
                let found = self.describe(&v);
                return Err(self.err(arg, format!("`{pname}` cannot be {found}")));
            }
        })
    }
}
