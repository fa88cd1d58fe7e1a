//! Notes that point at where a layout variable was defined, for verifier errors about an
//! instruction's layout argument: the argument is often just a name (`load_global(g, tile, ..)`)
//! and the mistake is in the `let tile = layout!(..)` lines above.

use std::rc::Rc;

use proc_macro2::{TokenStream, TokenTree};
use syn::Expr as SynExpr;

use super::*;

/// `note: layout `name` is defined at line N: <source>` for `let name = <expr>`.
pub(super) fn defined_at(name: &str, expr: &SynExpr) -> Rc<str> {
    let line = Range::of(expr).start.start().line;
    format!(
        "note: layout `{name}` is defined at line {line}: {}",
        source(expr)
    )
    .into()
}

/// The source text of `expr` as written: exact for `layout!(..)` (the macro's delimited group
/// has one span), else the tokens printed back.
fn source(expr: &SynExpr) -> String {
    if let SynExpr::Macro(m) = expr {
        let group = match &m.mac.delimiter {
            syn::MacroDelimiter::Paren(p) => p.span.join(),
            syn::MacroDelimiter::Brace(b) => b.span.join(),
            syn::MacroDelimiter::Bracket(b) => b.span.join(),
        };
        if let Some(text) = group.source_text() {
            let path = m.mac.path.to_token_stream().to_string();
            return format!("{path}!{}", one_line(&text));
        }
    }
    one_line(&expr.to_token_stream().to_string())
}

/// A layout written over several lines, on one: whitespace runs become one space, or none
/// next to brackets and dots (`(\n local(2, 1)\n .spatial(8, 8)\n)` is `(local(2, 1).spatial(8, 8))`).
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pending = false;
    for c in text.chars() {
        if c.is_whitespace() {
            pending = !out.is_empty();
            continue;
        }
        let glued = out.ends_with(['(', '[', '.']) || matches!(c, ')' | ']' | '.' | ',');
        if pending && !glued {
            out.push(' ');
        }
        pending = false;
        out.push(c);
    }
    out
}

impl Translator<'_, '_> {
    /// The definition notes of the layout variables an instruction's layout argument names:
    /// the argument itself (`tile`), or variables inside a `layout!(..)` (`local(2, 1).mma_c`).
    pub(super) fn layout_notes(&self, e: &SynExpr) -> Option<String> {
        let mut names = Vec::new();
        match e {
            SynExpr::Path(p) => names.extend(p.path.get_ident().map(|i| i.to_string())),
            SynExpr::Macro(m) => idents(&m.mac.tokens, &mut names),
            _ => {}
        }
        let mut notes: Vec<Rc<str>> = Vec::new();
        for n in &names {
            if let Some(Binding::Layout(_, _, Some(note))) = self.lookup(n) {
                if !notes.contains(note) {
                    notes.push(note.clone());
                }
            }
        }
        (!notes.is_empty()).then(|| notes.join("\n"))
    }
}

fn idents(tokens: &TokenStream, out: &mut Vec<String>) {
    for t in tokens.clone() {
        match t {
            TokenTree::Ident(i) => out.push(i.to_string()),
            TokenTree::Group(g) => idents(&g.stream(), out),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn layouts_over_several_lines_print_on_one() {
        assert_eq!(
            one_line("(\n    local(2, 1)\n        .spatial(8, 8)\n)"),
            "(local(2, 1).spatial(8, 8))"
        );
        assert_eq!(one_line("(spatial(BM / 16,  4))"), "(spatial(BM / 16, 4))");
    }
}
