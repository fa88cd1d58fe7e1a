//! `layout!(..)`: a register layout in the text form of `tilus_core::layout::parse`.
//!
//! Two spellings:
//! - a string literal, `layout!("local(2, 1).spatial(8, 4)")`, parsed as written; a parse
//!   error points at the literal;
//! - bare tokens, `layout!(local(BM / 16, 1).spatial(8, 4))`. The tokens are turned back into
//!   text, and on the way every argument that is a compile-time integer (literals, tile
//!   parameters, constant `let`s, `+ - * / %`, `min`/`max`/`cdiv`) is replaced by its value,
//!   and a name bound to a layout (`let la = layout!(..)`) by that layout's text. The text keeps
//!   a map from byte ranges back to the tokens they came from, so a parse error points at the
//!   exact tokens (the same configuration-independent site in every configuration).
//!   `f.g` where `g` is a layout variable composes with it (`local(BM / 16, 1).mma_c`).
//!
//! Rank checks are left to the shared parser, which composes and divides operands of different
//! ranks by broadcasting the lower-rank one, so `local(2).mma_c` needs nothing here.

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use syn::{Expr as SynExpr, Lit};

use super::*;

/// Text built from tokens, with the source range of each piece.
#[derive(Default)]
struct Mapped {
    text: String,
    pieces: Vec<(usize, usize, Range)>,
    /// A name in the expression is poisoned (its definition failed and was reported).
    poisoned: bool,
}

impl Mapped {
    fn push(&mut self, s: &str, range: Range) {
        let start = self.text.len();
        self.text.push_str(s);
        self.pieces.push((start, self.text.len(), range));
    }

    /// The source range of text bytes `lo..hi`, and the indices of the pieces it spans.
    fn range_of(&self, lo: usize, hi: usize) -> Option<(Range, usize, usize)> {
        let hi = hi.max(lo + 1);
        let hits: Vec<usize> = (0..self.pieces.len())
            .filter(|&i| self.pieces[i].0 < hi && lo < self.pieces[i].1)
            .collect();
        let (first, last) = match (hits.first(), hits.last()) {
            (Some(&f), Some(&l)) => (f, l),
            // Past the end (e.g. "unexpected end of input"): the last piece.
            _ => {
                let l = self.pieces.len().checked_sub(1)?;
                (l, l)
            }
        };
        Some((
            Range {
                start: self.pieces[first].2.start,
                end: self.pieces[last].2.end,
            },
            first,
            last,
        ))
    }
}

impl Translator<'_, '_> {
    pub(super) fn layout_macro(&mut self, mac: &syn::Macro) -> R<(Layout, String)> {
        let name = mac
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default();
        if super::specialize::is_specialize(mac) {
            return Err(self.err(
                mac,
                "`specialize! { .. }` is a statement, not a value; write it on its own, as the kernel's last statement",
            ));
        }
        if name != "layout" || mac.path.segments.len() != 1 {
            return Err(self.err(
                mac,
                format!("unknown macro `{name}!`; the only macro in a kernel is `layout!(..)`"),
            ));
        }
        let key = node_key(mac);
        // A string literal?
        if let Ok(lit) = syn::parse2::<syn::LitStr>(mac.tokens.clone()) {
            let text = lit.value();
            return match self.parse_layout(&text) {
                Ok(l) => Ok((l, text)),
                Err(e) => Err(self.error(Diag {
                    range: Range::of(&lit),
                    key: (key.0, "layout-str", e.span.start, e.span.end),
                    message: format!("invalid layout `{text}`: {}", e.message),
                })),
            };
        }
        if mac.tokens.is_empty() {
            return Err(self.err(
                mac,
                "empty layout; e.g. `layout!(local(2, 1).spatial(8, 4))`",
            ));
        }
        let mut m = Mapped::default();
        match syn::parse2::<SynExpr>(mac.tokens.clone()) {
            Ok(e) => self.layout_expr(&e, &mut m),
            Err(_) => verbatim_tokens(&mac.tokens, &mut m),
        }
        if m.poisoned {
            return Err(Reported);
        }
        let source: String = mac.tokens.to_string();
        match self.parse_layout(&m.text) {
            Ok(l) => Ok((l, m.text)),
            Err(e) => {
                let (range, first, last) =
                    m.range_of(e.span.start, e.span.end)
                        .unwrap_or((Range::of(mac), 0, 0));
                let shown = if normalize(&source) == normalize(&m.text) {
                    String::new()
                } else {
                    format!(" (in `{}`)", m.text)
                };
                Err(self.error(Diag {
                    range,
                    key: (key.0, "layout", first, last),
                    message: format!("invalid layout: {}{shown}", e.message),
                }))
            }
        }
    }

    fn parse_layout(&mut self, text: &str) -> Result<Layout, tilus_core::layout::ParseError> {
        if let Some(r) = self.shared.layouts.get(text) {
            return r.clone();
        }
        let r = tilus_core::layout::parse(text);
        self.shared.layouts.insert(text.to_string(), r.clone());
        r
    }

    /// Text of a layout expression; arguments that are constants become numbers.
    fn layout_expr(&self, e: &SynExpr, m: &mut Mapped) {
        match e {
            SynExpr::MethodCall(mc) => {
                self.layout_expr(&mc.receiver, m);
                m.push(".", Range::of(&mc.dot_token));
                m.push(&mc.method.to_string(), Range::of(&mc.method));
                self.layout_args(mc.paren_token.span, mc.args.iter(), m);
            }
            // `f.g` with `g` a layout variable: composition is associative, so the variable's
            // composition chain is spliced in place (`f.(x.y)` is `f.x.y`).
            SynExpr::Field(fe) => {
                self.layout_expr(&fe.base, m);
                m.push(".", Range::of(&fe.dot_token));
                let name = match &fe.member {
                    syn::Member::Named(id) => id.to_string(),
                    syn::Member::Unnamed(i) => i.index.to_string(),
                };
                match self.lookup(&name) {
                    Some(Binding::Layout(_, text, _)) if !has_top_level_div(text) => {
                        let text = text.clone();
                        m.push(&text, Range::of(&fe.member));
                    }
                    Some(Binding::Poisoned) => m.poisoned = true,
                    _ => m.push(&name, Range::of(&fe.member)),
                }
            }
            SynExpr::Call(c) => {
                self.layout_expr(&c.func, m);
                self.layout_args(c.paren_token.span, c.args.iter(), m);
            }
            SynExpr::Binary(bin) if matches!(bin.op, syn::BinOp::Div(_)) => {
                self.layout_expr(&bin.left, m);
                m.push(" / ", Range::of(&bin.op));
                self.layout_expr(&bin.right, m);
            }
            SynExpr::Paren(p) => {
                m.push("(", Range::single(p.paren_token.span.open()));
                self.layout_expr(&p.expr, m);
                m.push(")", Range::single(p.paren_token.span.close()));
            }
            SynExpr::Group(g) => self.layout_expr(&g.expr, m),
            SynExpr::Array(a) => {
                m.push("[", Range::single(a.bracket_token.span.open()));
                for (i, x) in a.elems.iter().enumerate() {
                    if i > 0 {
                        m.push(", ", Range::of(x));
                    }
                    self.layout_text_arg(x, m);
                }
                m.push("]", Range::single(a.bracket_token.span.close()));
            }
            SynExpr::Path(p) => {
                let name = p.path.get_ident().map(|i| i.to_string());
                match name.as_deref().and_then(|n| self.lookup(n)) {
                    Some(Binding::Layout(_, text, _)) => {
                        let text = format!("({text})");
                        m.push(&text, Range::of(p));
                    }
                    Some(Binding::Const(v)) => {
                        let v = v.to_string();
                        m.push(&v, Range::of(p));
                    }
                    Some(Binding::Poisoned) => m.poisoned = true,
                    _ => m.push(&p.to_token_stream().to_string(), Range::of(p)),
                }
            }
            SynExpr::Lit(l) => m.push(&lit_text(&l.lit), Range::of(l)),
            other => match self.const_int(other) {
                Some(v) => m.push(&v.to_string(), Range::of(other)),
                None => m.push(&other.to_token_stream().to_string(), Range::of(other)),
            },
        }
    }

    fn layout_args<'e>(
        &self,
        parens: proc_macro2::extra::DelimSpan,
        args: impl Iterator<Item = &'e SynExpr>,
        m: &mut Mapped,
    ) {
        m.push("(", Range::single(parens.open()));
        for (i, a) in args.enumerate() {
            if i > 0 {
                m.push(", ", Range::of(a));
            }
            self.layout_text_arg(a, m);
        }
        m.push(")", Range::single(parens.close()));
    }

    fn layout_text_arg(&self, a: &SynExpr, m: &mut Mapped) {
        match self.const_int(a) {
            Some(v) => m.push(&v.to_string(), Range::of(a)),
            None => self.layout_expr(a, m),
        }
    }
}

fn lit_text(l: &Lit) -> String {
    match l {
        Lit::Int(i) => i.base10_digits().to_string(),
        other => other.to_token_stream().to_string(),
    }
}

/// Tokens that are not a Rust expression: their text, token by token.
fn verbatim_tokens(tokens: &TokenStream, m: &mut Mapped) {
    for t in tokens.clone() {
        match &t {
            TokenTree::Group(g) => {
                let (open, close) = match g.delimiter() {
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::Brace => ("{", "}"),
                    Delimiter::None => ("", ""),
                };
                m.push(open, Range::single(g.span_open()));
                verbatim_tokens(&g.stream(), m);
                m.push(close, Range::single(g.span_close()));
            }
            TokenTree::Punct(p) => {
                let s = p.as_char().to_string();
                m.push(&s, Range::single(p.span()));
                if p.spacing() == proc_macro2::Spacing::Alone {
                    m.text.push(' ');
                }
            }
            other => {
                m.push(&other.to_string(), Range::single(other.span()));
                m.text.push(' ');
            }
        }
    }
}

/// Text without whitespace, to tell whether substitution changed anything.
fn normalize(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Whether `text` has a `/` outside parentheses (so it cannot be spliced into a composition).
fn has_top_level_div(text: &str) -> bool {
    let mut depth = 0i32;
    for c in text.chars() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            '/' if depth == 0 => return true,
            _ => {}
        }
    }
    false
}
