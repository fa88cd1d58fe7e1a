//! Warp specialization, the statement
//!
//! ```ignore
//! specialize! {
//!     role(warps = 4, registers = 40) => { /* producer */ }
//!     role(warps = BM / 16, registers = 232) => { /* consumers */ },
//! }
//! ```
//!
//! a [`StmtKind::Specialize`](tilus_core::ir::StmtKind::Specialize) region: the block's warps
//! split, in order, into the roles, and each role runs its body as a block of its own threads.
//! Arms are separated by optional commas; `warps` is required and `registers` (sm_90a
//! `setmaxnreg`) optional, both constants of the configuration. Each body is a block of its
//! own scope, like an `if` body. The verifier checks the rest (whole warpgroups, the block's
//! warps in total, the last top-level statement: `tilus_core::verify::specialize`).
//!
//! The macro's tokens are parsed once per kernel and kept for all its configurations
//! ([`MacroCache`]): diagnostics are keyed by the address of their syntax node, so the nodes of
//! the role bodies must be the same in every configuration.

use std::rc::Rc;

use proc_macro2::{TokenStream, TokenTree};
use syn::parse::{ParseBuffer, ParseStream, Parser};
use syn::{token, Expr as SynExpr, Ident, Token};
use tilus_core::ir::ProgramBuilder;

use super::*;

/// The form, for messages.
const FORM: &str = "`specialize! { role(warps = N, registers = R) => { .. } .. }`";
const ROLE_FORM: &str = "`role(warps = N, registers = R) => { .. }` (`registers` is optional)";

/// A parsed `specialize!`.
pub struct Specialize {
    roles: Vec<RoleArm>,
}

/// One `role(warps = W, registers = R) => { body }`.
struct RoleArm {
    warps: SynExpr,
    registers: Option<SynExpr>,
    body: syn::Block,
}

/// A parse error: where and what.
struct ParseError {
    range: Range,
    message: String,
}

impl From<syn::Error> for ParseError {
    fn from(e: syn::Error) -> Self {
        ParseError {
            range: Range::single(e.span()),
            message: e.to_string(),
        }
    }
}

fn fail<T>(range: Range, message: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        range,
        message: message.into(),
    })
}

type Parsed = Result<Specialize, ParseError>;

/// The `specialize!` macros of one kernel, parsed, for all its configurations; keyed by the
/// macro's syntax node and its text (a helper's body is cloned per configuration, so its
/// macros move; the text tells them apart).
#[derive(Default)]
pub struct MacroCache {
    parsed: HashMap<(usize, String), Rc<Parsed>>,
}

/// The next token tree, for an error about it (the end of the input gives `or`).
fn next_range(input: ParseStream, or: Range) -> Range {
    input
        .fork()
        .parse::<TokenTree>()
        .map(|t| Range::of(&t))
        .unwrap_or(or)
}

fn parse_roles(input: ParseStream) -> Result<Specialize, ParseError> {
    let mut roles = Vec::new();
    while !input.is_empty() {
        roles.push(parse_role(input)?);
        if input.peek(Token![,]) {
            input.parse::<Token![,]>()?;
        }
    }
    Ok(Specialize { roles })
}

fn parse_role(input: ParseStream) -> Result<RoleArm, ParseError> {
    let here = next_range(input, Range::single(input.span()));
    let role = match input.fork().parse::<Ident>() {
        Ok(id) if id == "role" => input.parse::<Ident>()?,
        Ok(id) => {
            return fail(
                here,
                format!("expected `role(..) => {{ .. }}`, found `{id}`; each arm of `specialize!` is {ROLE_FORM}"),
            )
        }
        Err(_) => {
            return fail(
                here,
                format!("expected `role(..) => {{ .. }}`; each arm of `specialize!` is {ROLE_FORM}"),
            )
        }
    };
    if !input.peek(token::Paren) {
        return fail(
            Range::of(&role),
            format!("expected `(warps = N, ..)` after `role`: a role is {ROLE_FORM}"),
        );
    }
    let (parens, content) = parenthesized(input)?;
    let head = Range {
        start: role.span(),
        end: parens.span.close(),
    };
    let (warps, registers) = parse_args(&content, head)?;
    let Some(warps) = warps else {
        return fail(
            head,
            format!("this role has no `warps = N`, the number of warps it runs on; a role is {ROLE_FORM}"),
        );
    };
    if !input.peek(Token![=>]) {
        if input.peek(token::Brace) {
            return fail(
                next_range(input, head),
                format!("expected `=>` before the role's body: {ROLE_FORM}"),
            );
        }
        return fail(
            head,
            format!("this role has no body; write `=> {{ .. }}` after it: {ROLE_FORM}"),
        );
    }
    let arrow: Token![=>] = input.parse()?;
    if !input.peek(token::Brace) {
        let at = Range {
            start: role.span(),
            end: arrow.spans[1],
        };
        return fail(
            next_range(input, at),
            format!("expected the role's body in braces after `=>`: {ROLE_FORM}"),
        );
    }
    let body: syn::Block = input.parse()?;
    Ok(RoleArm {
        warps,
        registers,
        body,
    })
}

/// `( .. )`: the parentheses and what is inside.
fn parenthesized<'a>(input: ParseStream<'a>) -> syn::Result<(token::Paren, ParseBuffer<'a>)> {
    let content;
    let parens = syn::parenthesized!(content in input);
    Ok((parens, content))
}

/// `warps = W, registers = R` inside `role(..)`.
fn parse_args(
    input: ParseStream,
    head: Range,
) -> Result<(Option<SynExpr>, Option<SynExpr>), ParseError> {
    let (mut warps, mut registers) = (None, None);
    while !input.is_empty() {
        let here = next_range(input, head);
        let Ok(key) = input.parse::<Ident>() else {
            return fail(
                here,
                format!("expected `warps = N` or `registers = R`; a role is {ROLE_FORM}"),
            );
        };
        let name = key.to_string();
        let slot = match name.as_str() {
            "warps" => &mut warps,
            "registers" => &mut registers,
            _ => {
                let hint = suggest(&name, ["warps", "registers"])
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default();
                return fail(
                    Range::of(&key),
                    format!(
                        "unknown role argument `{name}`{hint}; a role takes `warps = N` and optionally `registers = R`"
                    ),
                );
            }
        };
        if slot.is_some() {
            return fail(Range::of(&key), format!("`{name}` is given twice"));
        }
        if !input.peek(Token![=]) || input.peek(Token![==]) || input.peek(Token![=>]) {
            return fail(
                Range::of(&key),
                format!("expected `{name} = ..`; a role is {ROLE_FORM}"),
            );
        }
        let eq: Token![=] = input.parse()?;
        if input.is_empty() || input.peek(Token![,]) {
            return fail(
                Range {
                    start: key.span(),
                    end: eq.span,
                },
                format!("`{name} =` needs a value"),
            );
        }
        *slot = Some(input.parse::<SynExpr>()?);
        if !input.is_empty() {
            let here = next_range(input, head);
            if input.parse::<Token![,]>().is_err() {
                return fail(
                    here,
                    format!("expected `,` between the role's arguments; a role is {ROLE_FORM}"),
                );
            }
        }
    }
    Ok((warps, registers))
}

/// Parse the tokens of a `specialize!`.
fn parse(tokens: TokenStream) -> Parsed {
    let mut parsed = None;
    let parser = |input: ParseStream| -> syn::Result<()> {
        let r = parse_roles(input);
        if r.is_err() {
            // Leave nothing behind (the parser would report the rest as unexpected).
            input.parse::<TokenStream>()?;
        }
        parsed = Some(r);
        Ok(())
    };
    let checked = parser.parse2(tokens);
    match (parsed, checked) {
        // Our error first: a nested group left half-read adds the parser's "unexpected token".
        (Some(Err(e)), _) => Err(e),
        (Some(Ok(sp)), Ok(())) => Ok(sp),
        (_, Err(e)) => Err(e.into()),
        (None, Ok(())) => unreachable!("the parser ran"),
    }
}

/// Whether `mac` is `specialize!`.
pub(super) fn is_specialize(mac: &syn::Macro) -> bool {
    mac.path.is_ident("specialize")
}

impl Translator<'_, '_> {
    /// `specialize! { .. }` in statement position.
    pub(super) fn specialize(&mut self, b: &mut ProgramBuilder, mac: &syn::Macro) -> R<()> {
        let key = (node_key(mac).0, mac.tokens.to_string());
        let parsed = match self.shared.macros.parsed.get(&key) {
            Some(p) => p.clone(),
            None => {
                let p = Rc::new(parse(mac.tokens.clone()));
                self.shared.macros.parsed.insert(key.clone(), p.clone());
                p
            }
        };
        let sp = match &*parsed {
            Ok(sp) => sp,
            Err(e) => {
                return Err(self.error(Diag {
                    range: e.range,
                    key: (key.0, "specialize", 0, 0),
                    message: e.message.clone(),
                }))
            }
        };
        if sp.roles.is_empty() {
            return Err(self.err(
                mac,
                format!("a `specialize!` region needs at least one role: {FORM}"),
            ));
        }
        // The values of every role first (all their errors at once); the bodies are
        // translated even when one is wrong, for their own errors.
        let mut failed = false;
        let mut roles = Vec::with_capacity(sp.roles.len());
        for arm in &sp.roles {
            let warps = self.role_value(&arm.warps, "warps");
            let registers = arm
                .registers
                .as_ref()
                .map(|r| self.role_value(r, "registers"));
            failed |= warps.is_err() || matches!(registers, Some(Err(_)));
            roles.push((warps.unwrap_or(0), registers.map(|r| r.unwrap_or(0))));
        }
        let site = self.site(mac);
        b.set_span(site);
        let block_threads = self.block_threads;
        b.specialize(&roles, |b, i| {
            // Inside a role, the block is the role's threads.
            let warps = roles[i].0;
            self.block_threads = if block_threads > 0 && warps > 0 {
                warps.saturating_mul(32)
            } else {
                0
            };
            self.block(b, &sp.roles[i].body);
        });
        self.block_threads = block_threads;
        if failed {
            Err(Reported)
        } else {
            Ok(())
        }
    }

    /// `warps = e` / `registers = e`: a positive constant.
    fn role_value(&mut self, e: &SynExpr, name: &str) -> R<u32> {
        match self.const_int(e) {
            Some(v) if v > 0 => Ok(v as u32),
            Some(v) => Err(self.err(
                e,
                format!("the role's `{name}` must be positive, found {v}"),
            )),
            None => Err(self.err(
                e,
                format!(
                    "the role's `{name}` must be a constant (integers and tile parameters, e.g. `{name} = {}`)",
                    if name == "warps" { "BM / 16" } else { "232" }
                ),
            )),
        }
    }
}
