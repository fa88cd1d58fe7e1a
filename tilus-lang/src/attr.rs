//! The attribute: `#[kernel(grid = [..], warps = N, space(..), dtypes(..), target = sm90)]`.
//!
//! - `grid = [e0, e1, e2]`: 1 to 3 extents over the kernel's `i32` parameters and the tile
//!   parameters (`cdiv(m, BM)`, `n / BN`).
//! - `warps = N` (default 4) or `threads = N` (a multiple of 32): threads per block; may use
//!   tile parameters (`warps = BM / 16`).
//! - `blocks_per_sm = N` (default 1): an occupancy hint, `__launch_bounds__(threads, N)`; the
//!   CUDA compiler keeps registers per thread low enough for N blocks on an SM. May use tile
//!   parameters.
//! - `space(BM = [16, 32], BN = [64, 128])`: the candidate values of each `const` tile
//!   parameter (a single value may be written without brackets).
//! - `dtypes(W = [i4, i6, u4])`: the candidate data types of each `W: DTypeParam` parameter.
//! - `target = sm90` (default) or `sm80` (also `sm86`, `sm89`): the [`Target`] the verifier and
//!   the code generator use (shared-memory limit, mma shapes, features); a launch on a device
//!   that cannot run it is an error.
//! - `lazy`: every configuration of the space is still checked at build time, but nothing per
//!   configuration is embedded; the kernel's text is, and the generated functions translate
//!   any configuration at run time ([`crate::lazy`]).

use proc_macro2::{Ident, TokenStream};
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{bracketed, parenthesized, Expr, Lit, Token};
use tilus_core::verify::Target;
use tilus_core::DType;

use crate::diag::{Diag, Range, Report};

pub struct SpaceEntry {
    pub name: Ident,
    pub values: Vec<i32>,
}

pub struct DTypeEntry {
    pub name: Ident,
    pub values: Vec<(DType, String)>,
}

pub struct KernelAttr {
    /// The grid extents and the range of the `grid = [..]` item.
    pub grid: Option<(Vec<Expr>, Range)>,
    /// Threads per block: the expression and whether it counts warps.
    pub threads: Option<(Expr, bool)>,
    /// The occupancy hint `blocks_per_sm = N`.
    pub blocks_per_sm: Option<Expr>,
    pub space: Vec<SpaceEntry>,
    pub dtypes: Vec<DTypeEntry>,
    pub target: Target,
    /// `lazy`: instantiate configurations at run time.
    pub lazy: bool,
}

const KEYS: &str =
    "`grid`, `warps`, `threads`, `blocks_per_sm`, `space`, `dtypes`, `target`, `lazy`";

/// Parse the attribute's arguments; problems go to `report` (and a syntax error makes the
/// result `None`).
pub fn parse(args: TokenStream, report: &mut Report) -> Option<KernelAttr> {
    let mut attr = KernelAttr {
        grid: None,
        threads: None,
        blocks_per_sm: None,
        space: Vec::new(),
        dtypes: Vec::new(),
        target: Target::SM90,
        lazy: false,
    };
    let mut seen: Vec<String> = Vec::new();
    let parser = |input: ParseStream| -> syn::Result<()> {
        while !input.is_empty() {
            let key: Ident = input.call(syn::ext::IdentExt::parse_any)?;
            let name = key.to_string();
            if seen.contains(&name) {
                report.push(Diag::at_span(
                    key.span(),
                    format!("`{name}` is given twice"),
                ));
            }
            seen.push(name.clone());
            match name.as_str() {
                "lazy" => attr.lazy = true,
                "grid" => {
                    input.parse::<Token![=]>()?;
                    let content;
                    let bracket = bracketed!(content in input);
                    let exprs: Punctuated<Expr, Token![,]> =
                        content.parse_terminated(Expr::parse, Token![,])?;
                    let range = Range {
                        start: key.span(),
                        end: bracket.span.close(),
                    };
                    let exprs: Vec<Expr> = exprs.into_iter().collect();
                    if exprs.is_empty() || exprs.len() > 3 {
                        report.push(Diag {
                            range,
                            key: (0, "grid", 0, 0),
                            message: format!(
                                "the grid has 1 to 3 dimensions, found {}",
                                exprs.len()
                            ),
                        });
                    }
                    attr.grid = Some((exprs, range));
                }
                "warps" | "threads" => {
                    input.parse::<Token![=]>()?;
                    let e: Expr = input.parse()?;
                    if attr.threads.is_some() && !seen[..seen.len() - 1].contains(&name) {
                        report.push(Diag::at_span(
                            key.span(),
                            "give either `warps` or `threads`, not both",
                        ));
                    }
                    attr.threads = Some((e, name == "warps"));
                }
                "blocks_per_sm" => {
                    input.parse::<Token![=]>()?;
                    attr.blocks_per_sm = Some(input.parse()?);
                }
                "target" => {
                    input.parse::<Token![=]>()?;
                    let t: Ident = input.parse()?;
                    match Target::parse(&t.to_string()) {
                        Ok(target) => {
                            attr.target = target;
                        }
                        Err(message) => report.push(Diag::at_span(t.span(), message)),
                    }
                }
                "space" => {
                    let content;
                    parenthesized!(content in input);
                    while !content.is_empty() {
                        let name: Ident = content.parse()?;
                        content.parse::<Token![=]>()?;
                        let values = parse_values(&content)?;
                        let mut ints = Vec::new();
                        for v in &values {
                            match int_literal(v) {
                                Some(Ok(i)) if ints.contains(&i) => {
                                    report.push(Diag::at(v, format!("`{name}` lists {i} twice")))
                                }
                                Some(Ok(i)) => ints.push(i),
                                Some(Err(e)) => report.push(Diag::at(v, e)),
                                None => report.push(Diag::at(
                                    v,
                                    "values of a tile parameter must be integer literals",
                                )),
                            }
                        }
                        if values.is_empty() {
                            report.push(Diag::at_span(
                                name.span(),
                                format!("empty space: `{name}` has no values"),
                            ));
                        }
                        if attr.space.iter().any(|e| e.name == name) {
                            report.push(Diag::at_span(
                                name.span(),
                                format!("`{name}` appears twice in `space(..)`"),
                            ));
                        } else {
                            attr.space.push(SpaceEntry { name, values: ints });
                        }
                        if !content.is_empty() {
                            content.parse::<Token![,]>()?;
                        }
                    }
                }
                "dtypes" => {
                    let content;
                    parenthesized!(content in input);
                    while !content.is_empty() {
                        let name: Ident = content.parse()?;
                        content.parse::<Token![=]>()?;
                        let values = parse_values(&content)?;
                        let mut dtypes: Vec<(DType, String)> = Vec::new();
                        for v in &values {
                            match dtype_literal(v) {
                                Ok((d, text)) if dtypes.iter().any(|(e, _)| *e == d) => report
                                    .push(Diag::at(v, format!("`{name}` lists `{text}` twice"))),
                                Ok(d) => dtypes.push(d),
                                Err(e) => report.push(Diag::at(v, e)),
                            }
                        }
                        if values.is_empty() {
                            report.push(Diag::at_span(
                                name.span(),
                                format!("empty space: `{name}` has no data types"),
                            ));
                        }
                        if attr.dtypes.iter().any(|e| e.name == name) {
                            report.push(Diag::at_span(
                                name.span(),
                                format!("`{name}` appears twice in `dtypes(..)`"),
                            ));
                        } else {
                            attr.dtypes.push(DTypeEntry {
                                name,
                                values: dtypes,
                            });
                        }
                        if !content.is_empty() {
                            content.parse::<Token![,]>()?;
                        }
                    }
                }
                other => {
                    report.push(Diag::at_span(
                        key.span(),
                        format!("unknown `#[kernel]` argument `{other}`; expected one of {KEYS}"),
                    ));
                    // Skip its value so the remaining arguments are still read.
                    if input.peek(Token![=]) {
                        input.parse::<Token![=]>()?;
                        input.parse::<Expr>()?;
                    } else if input.peek(syn::token::Paren) {
                        let _content;
                        parenthesized!(_content in input);
                    }
                }
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        Ok(())
    };
    match parser.parse2(args) {
        Ok(()) => Some(attr),
        Err(e) => {
            report.push(Diag {
                range: Range::single(e.span()),
                key: (0, "attr-syntax", 0, 0),
                message: format!("{e} (in the `#[kernel(..)]` arguments: {KEYS})"),
            });
            None
        }
    }
}

/// `[a, b, c]` or a single value.
fn parse_values(input: ParseStream) -> syn::Result<Vec<Expr>> {
    if input.peek(syn::token::Bracket) {
        let content;
        bracketed!(content in input);
        let list: Punctuated<Expr, Token![,]> = content.parse_terminated(Expr::parse, Token![,])?;
        Ok(list.into_iter().collect())
    } else {
        Ok(vec![input.parse()?])
    }
}

fn int_literal(e: &Expr) -> Option<Result<i32, String>> {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => Some(i.base10_parse::<i32>().map_err(|e| e.to_string())),
            _ => None,
        },
        Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => {
            int_literal(&u.expr).map(|r| r.map(|v| -v))
        }
        Expr::Group(g) => int_literal(&g.expr),
        Expr::Paren(p) => int_literal(&p.expr),
        _ => None,
    }
}

fn dtype_literal(e: &Expr) -> Result<(DType, String), String> {
    match e {
        Expr::Path(p) if p.path.get_ident().is_some() => {
            let name = p
                .path
                .get_ident()
                .map(|i| i.to_string())
                .unwrap_or_default();
            crate::dtypes::parse(&name).map(|d| (d, name))
        }
        _ => Err("expected a data type name such as `i4`, `u6` or `f16`".into()),
    }
}
