//! The text form of layouts, shared by the CLI and the `#[kernel]` macro.
//!
//! ```text
//! expr := term ('/' term)*                      division, left-associative
//! term := atom (('.' | '∘') prim)*              composition binds tighter than division
//! atom := prim | '(' expr ')' | 'reduce' '(' expr ',' '[' int (',' int)* ']' ')'
//!       | 'split' '(' expr ',' int ',' int ')' | 'swap_inner_locals' '(' expr ',' int ',' int ')'
//! prim := ('local' | 'spatial' | 'column_local' | 'column_spatial') '(' int (',' int)* ')'
//!       | 'replicated' '(' int ')' | fragment
//! fragment := 'mma_a' | 'mma_b' | 'mma_c' | 'mma_a_i8' | 'mma_b_i8' | 'mma_b_t' | 'mma_a_t' | 'mma_c_t'
//!           | 'mma_b1_a' | 'mma_b1_b' | 'mma_b1_c' | 'mma_b1_ap' | 'mma_b1_bp' | 'mma_b1_cp'
//!           | 'mma_a_k4' | 'mma_b_k4' | 'mma_a_k8' | 'mma_b_k8'
//!           | 'mma_a_f8' | 'mma_b_f8' | 'mma_a_f8_t' | 'mma_b_f8_t'
//! ```
//!
//! A fragment is the register layout of an `mma.m16n8k16` operand ([`super::fragments`]), so
//! `spatial(1, 4).local(1, 8).mma_c` tiles a warp's accumulators without spelling them out.
//!
//! `replicated(n)` is [`Layout::replicated`] (rank 1, broadcast like any operand): `n` threads
//! holding the same element, e.g. `spatial(2, 1).replicated(4).local(2, 2)` repeats each of the
//! two warps' work on four warps. `split(f, d, i)` is [`Layout::split_dim`] and
//! `swap_inner_locals(f, i, o)` is [`Layout::swap_inner_locals`].
//!
//! Operands of `.`, `∘` and `/` may have different ranks: the lower-rank one is broadcast by
//! prepending extent-1 dimensions (see "Mixed ranks" in [`super`]), so `local(2).spatial(8,4)`
//! is `local(1,2).spatial(8,4)`, of shape `[8, 8]`.
//!
//! Whitespace is allowed between any two tokens. Extents must be positive. The parser never
//! panics: every problem is a [`ParseError`] whose span is the byte range of the offending text
//! (an empty range at the end for a premature end of input). Nesting of parentheses and
//! `reduce` is limited to [`MAX_DEPTH`] levels so that hostile input cannot exhaust the stack.

use super::{divide, Layout, Primitive};
use std::ops::Range;

/// A parse error with the byte range of the offending text, so callers can point at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ParseError {
    pub message: String,
    pub span: std::ops::Range<usize>,
}

/// Deepest nesting of parentheses and `reduce(..)` the parser accepts.
pub const MAX_DEPTH: usize = 64;

/// Parse e.g. `local(2,1).spatial(8,4)`, `reduce(spatial(4,8), [0])`, `(f) / g`.
pub fn parse(text: &str) -> Result<Layout, ParseError> {
    let mut p = Parser {
        src: text,
        pos: 0,
        depth: 0,
    };
    let (layout, _) = p.expr()?;
    let (tok, span) = p.peek();
    if tok != Tok::End {
        return Err(p.error(
            span.clone(),
            format!(
                "unexpected {} after the layout expression",
                p.describe(&tok, &span)
            ),
        ));
    }
    Ok(layout)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    Ident,
    Int,
    Punct(char),
    End,
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    depth: usize,
}

type Parsed<T> = Result<(T, Range<usize>), ParseError>;

impl<'a> Parser<'a> {
    fn error(&self, span: Range<usize>, message: String) -> ParseError {
        ParseError { message, span }
    }

    /// The next token and its span, without consuming it.
    fn peek(&self) -> (Tok, Range<usize>) {
        let rest = &self.src[self.pos..];
        let start = self.pos + (rest.len() - rest.trim_start().len());
        let mut chars = self.src[start..].chars();
        let Some(c) = chars.next() else {
            return (Tok::End, start..start);
        };
        let run = |keep: fn(char) -> bool| {
            start
                + self.src[start..]
                    .find(|ch: char| !keep(ch))
                    .unwrap_or(self.src.len() - start)
        };
        if c.is_alphabetic() || c == '_' {
            (
                Tok::Ident,
                start..run(|ch| ch.is_alphanumeric() || ch == '_'),
            )
        } else if c.is_ascii_digit() {
            (Tok::Int, start..run(|ch| ch.is_ascii_digit()))
        } else {
            (Tok::Punct(c), start..start + c.len_utf8())
        }
    }

    fn next(&mut self) -> (Tok, Range<usize>) {
        let (tok, span) = self.peek();
        self.pos = span.end;
        (tok, span)
    }

    fn describe(&self, tok: &Tok, span: &Range<usize>) -> String {
        match tok {
            Tok::End => "end of input".to_string(),
            _ => format!("`{}`", &self.src[span.clone()]),
        }
    }

    /// Consume punctuation `c` or report what was found instead.
    fn expect(&mut self, c: char, context: &str) -> Result<Range<usize>, ParseError> {
        let (tok, span) = self.next();
        if tok == Tok::Punct(c) {
            Ok(span)
        } else {
            Err(self.error(
                span.clone(),
                format!(
                    "expected `{c}` {context}, found {}",
                    self.describe(&tok, &span)
                ),
            ))
        }
    }

    fn enter(&mut self, span: &Range<usize>) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(
                span.clone(),
                format!("layout expression nested too deeply (more than {MAX_DEPTH} levels)"),
            ));
        }
        Ok(())
    }

    fn expr(&mut self) -> Parsed<Layout> {
        let (mut layout, mut span) = self.term()?;
        while self.peek().0 == Tok::Punct('/') {
            self.next();
            let (divisor, dspan) = self.term()?;
            let whole = span.start..dspan.end;
            layout = match divide::divide(&layout, &divisor) {
                Ok(f) => f,
                Err(why) => {
                    return Err(self.error(
                        whole,
                        format!(
                            "`{}` is not divisible by `{}`: {why}",
                            &self.src[span.clone()],
                            &self.src[dspan.clone()]
                        ),
                    ))
                }
            };
            span = whole;
        }
        Ok((layout, span))
    }

    fn term(&mut self) -> Parsed<Layout> {
        let (mut layout, mut span) = self.atom()?;
        while matches!(self.peek().0, Tok::Punct('.') | Tok::Punct('∘')) {
            self.next();
            let (inner, pspan) = self.prim(true)?;
            let whole = span.start..pspan.end;
            layout = match layout.compose(&inner) {
                Ok(h) => h,
                Err(e) => return Err(self.error(whole, e.to_string())),
            };
            span = whole;
        }
        Ok((layout, span))
    }

    fn atom(&mut self) -> Parsed<Layout> {
        let (tok, span) = self.peek();
        match tok {
            Tok::Punct('(') => {
                self.next();
                self.enter(&span)?;
                let (layout, _) = self.expr()?;
                let close =
                    self.expect(')', &format!("to close the `(` at byte {}", span.start))?;
                self.depth -= 1;
                Ok((layout, span.start..close.end))
            }
            Tok::Ident if &self.src[span.clone()] == "reduce" => self.reduce(),
            Tok::Ident if super::fragments::fragment_text(&self.src[span.clone()]).is_some() => {
                self.fragment()
            }
            Tok::Ident if &self.src[span.clone()] == "split" => {
                self.layout_fn("split", |l, [dim, inner]| l.split_dim(dim, inner))
            }
            Tok::Ident if &self.src[span.clone()] == "swap_inner_locals" => self
                .layout_fn("swap_inner_locals", |l, [inner, outer]| {
                    l.swap_inner_locals(inner, outer)
                }),
            Tok::Ident => self.prim(false),
            _ => Err(self.error(
                span.clone(),
                format!(
                    "expected a layout expression, found {}",
                    self.describe(&tok, &span)
                ),
            )),
        }
    }

    /// `name(expr, int, int)`: a function of a layout and two integers.
    fn layout_fn(
        &mut self,
        name: &str,
        f: impl FnOnce(&Layout, [usize; 2]) -> Result<Layout, super::LayoutError>,
    ) -> Parsed<Layout> {
        let (_, start) = self.next();
        self.enter(&start)?;
        self.expect('(', &format!("after `{name}`"))?;
        let (layout, _) = self.expr()?;
        let mut args = [0; 2];
        for a in &mut args {
            self.expect(',', &format!("between the arguments of `{name}`"))?;
            *a = self.int()?.0;
        }
        let close = self.expect(')', &format!("to close `{name}(`"))?;
        self.depth -= 1;
        let whole = start.start..close.end;
        match f(&layout, args) {
            Ok(r) => Ok((r, whole)),
            Err(e) => Err(self.error(whole, format!("`{name}`: {e}"))),
        }
    }

    fn reduce(&mut self) -> Parsed<Layout> {
        let (_, start) = self.next();
        self.enter(&start)?;
        self.expect('(', "after `reduce`")?;
        let (layout, _) = self.expr()?;
        self.expect(',', "between the layout and the dims of `reduce`")?;
        self.expect('[', "to start the dims of `reduce`")?;
        let mut dims = Vec::new();
        loop {
            let (d, dspan) = self.int()?;
            if d >= layout.rank() {
                return Err(self.error(
                    dspan,
                    format!(
                        "reduce dim {d} is out of range for a rank-{} layout",
                        layout.rank()
                    ),
                ));
            }
            dims.push(d);
            let (tok, span) = self.next();
            match tok {
                Tok::Punct(',') => {}
                Tok::Punct(']') => break,
                _ => {
                    return Err(self.error(
                        span.clone(),
                        format!(
                            "expected `,` or `]` in the dims of `reduce`, found {}",
                            self.describe(&tok, &span)
                        ),
                    ))
                }
            }
        }
        let close = self.expect(')', "to close `reduce(`")?;
        self.depth -= 1;
        let whole = start.start..close.end;
        match layout.reduce(&dims) {
            Ok(r) => Ok((r, whole)),
            Err(e) => Err(self.error(whole, e.to_string())),
        }
    }

    /// A named `mma` fragment ([`super::fragments`]).
    fn fragment(&mut self) -> Parsed<Layout> {
        let (_, span) = self.next();
        let name = &self.src[span.clone()];
        let layout = super::fragments::fragment(name).expect("checked by the caller");
        Ok((layout, span))
    }

    /// A primitive; `after_dot` tailors the message when something else follows a `.`.
    fn prim(&mut self, after_dot: bool) -> Parsed<Layout> {
        if self.peek().0 == Tok::Ident
            && super::fragments::fragment_text(&self.src[self.peek().1]).is_some()
        {
            return self.fragment();
        }
        if self.peek().0 == Tok::Ident && &self.src[self.peek().1] == "replicated" {
            return self.replicated();
        }
        let (tok, name_span) = self.next();
        let name = &self.src[name_span.clone()];
        let kind = match (tok, Primitive::from_name(name)) {
            (Tok::Ident, Some(kind)) => kind,
            (Tok::Ident, None) if !after_dot || name != "reduce" => {
                return Err(self.error(
                    name_span.clone(),
                    format!(
                        "unknown layout primitive `{name}`; expected local, spatial, \
                         column_local, column_spatial, replicated, reduce, split, \
                         swap_inner_locals or an mma fragment ({})",
                        super::fragments::FRAGMENTS
                            .iter()
                            .map(|(n, _)| *n)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ))
            }
            _ if after_dot => {
                return Err(self.error(
                    name_span.clone(),
                    format!(
                        "expected local, spatial, column_local, column_spatial or replicated \
                         after `.`, \
                         found {}",
                        self.describe(&tok, &name_span)
                    ),
                ))
            }
            _ => {
                return Err(self.error(
                    name_span.clone(),
                    format!(
                        "expected a layout primitive, found {}",
                        self.describe(&tok, &name_span)
                    ),
                ))
            }
        };
        self.expect('(', &format!("after `{name}`"))?;
        let mut shape = Vec::new();
        let close = loop {
            let (n, nspan) = self.int()?;
            if n == 0 {
                return Err(self.error(
                    nspan,
                    format!("extent must be positive, found 0 in `{name}`"),
                ));
            }
            shape.push(n);
            let (tok, span) = self.next();
            match tok {
                Tok::Punct(',') => {}
                Tok::Punct(')') => break span,
                _ => {
                    return Err(self.error(
                        span.clone(),
                        format!(
                            "expected `,` or `)` in `{name}(..)`, found {}",
                            self.describe(&tok, &span)
                        ),
                    ))
                }
            }
        };
        let whole = name_span.start..close.end;
        match Layout::primitive(kind, &shape) {
            Ok(layout) => Ok((layout, whole)),
            Err(e) => Err(self.error(whole, e.to_string())),
        }
    }

    /// `replicated(n)`: `n` threads holding one element.
    fn replicated(&mut self) -> Parsed<Layout> {
        let (_, start) = self.next();
        self.expect('(', "after `replicated`")?;
        let (n, nspan) = self.int()?;
        if n == 0 {
            return Err(self.error(nspan, "`replicated` needs a positive thread count".into()));
        }
        let close = self.expect(')', "to close `replicated(`")?;
        Ok((Layout::replicated(1, n), start.start..close.end))
    }

    fn int(&mut self) -> Parsed<usize> {
        let (tok, span) = self.next();
        if tok != Tok::Int {
            return Err(self.error(
                span.clone(),
                format!("expected an integer, found {}", self.describe(&tok, &span)),
            ));
        }
        let text = &self.src[span.clone()];
        match text.parse::<usize>() {
            Ok(n) => Ok((n, span)),
            Err(_) => Err(self.error(span, format!("integer `{text}` is too large"))),
        }
    }
}
