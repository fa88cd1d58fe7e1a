//! Diagnostics: where they point, and how the ones from many configurations are merged.
//!
//! Every problem becomes a [`Diag`]: a message plus the source range it points at (a first and
//! a last token, so that `compile_error!` underlines the whole range on stable Rust, the way
//! `syn::Error::new_spanned` does). The same mistake usually shows up in many configurations of
//! the space; [`Report`] merges diagnostics with the same source site and message and says in
//! which configurations they occur ("in configurations BM=16,BN=64 and 3 more", or "in the 8
//! configurations with BM=128" when one parameter value explains them all).
//!
//! [`Sites`] is the span table behind the IR's `SpanId`s: the builder is told a `SpanId` before
//! each statement, and the verifier's and code generator's diagnostics are mapped back through
//! it. Sites are keyed by the syntax node they came from, so the same node has the same `SpanId`
//! in every configuration.

use std::collections::HashMap;

use proc_macro2::{Ident, Span, TokenStream, TokenTree};
use quote::ToTokens;
use tilus_core::ir::SpanId;

use crate::space::Space;

/// Identity of a source site that is the same in every configuration: the address of the
/// syntax node (the AST is parsed once), a tag telling node kinds that share an address apart,
/// and a byte range inside the node (for errors inside a `layout!` expression).
pub type SiteKey = (usize, &'static str, usize, usize);

/// A first and a last token span.
#[derive(Clone, Copy, Debug)]
pub struct Range {
    pub start: Span,
    pub end: Span,
}

impl Range {
    pub fn single(span: Span) -> Range {
        Range {
            start: span,
            end: span,
        }
    }

    /// The range covered by the tokens of `node`.
    pub fn of(node: &dyn ToTokens) -> Range {
        let mut tokens = node.to_token_stream().into_iter();
        let start = match tokens.next() {
            Some(t) => t.span(),
            None => return Range::single(Span::call_site()),
        };
        let end = tokens.last().map(|t| last_span(&t)).unwrap_or(start);
        Range { start, end }
    }

    /// A compile error over this range.
    pub fn error(&self, message: &str) -> syn::Error {
        // Two tokens with the first and the last span: `new_spanned` underlines from the start
        // of the first to the end of the second.
        let mut ts = TokenStream::new();
        ts.extend([
            TokenTree::Ident(Ident::new("start", self.start)),
            TokenTree::Ident(Ident::new("end", self.end)),
        ]);
        syn::Error::new_spanned(ts, message)
    }
}

fn last_span(t: &TokenTree) -> Span {
    match t {
        TokenTree::Group(g) => g.span_close(),
        other => other.span(),
    }
}

/// One problem at one place.
#[derive(Clone, Debug)]
pub struct Diag {
    pub range: Range,
    pub key: SiteKey,
    pub message: String,
}

impl Diag {
    /// A diagnostic at a syntax node.
    pub fn at<T: ToTokens + 'static>(node: &T, message: impl Into<String>) -> Diag {
        Diag {
            range: Range::of(node),
            key: node_key(node),
            message: message.into(),
        }
    }

    /// A diagnostic at a single span (keys by the span's position).
    pub fn at_span(span: Span, message: impl Into<String>) -> Diag {
        let lc = span.start();
        Diag {
            range: Range::single(span),
            key: (lc.line, "span", lc.column, 0),
            message: message.into(),
        }
    }
}

/// The configuration-independent identity of a syntax node.
pub fn node_key<T: 'static>(node: &T) -> SiteKey {
    (node as *const T as usize, std::any::type_name::<T>(), 0, 0)
}

/// One entry of the span table.
#[derive(Clone, Debug)]
pub struct Site {
    pub range: Range,
    pub key: SiteKey,
    /// Sub-ranges diagnostics can be narrowed to: the layout argument, the offset argument.
    pub layout: Option<Range>,
    pub offset: Option<Range>,
    /// Appended to diagnostics about the layout: where a layout variable in the argument was
    /// defined (`note: layout `a` is defined at line 12: layout!(..)`).
    pub note: Option<String>,
}

/// The span table: `SpanId(i)` is `sites[i]`. Site 0 is the kernel itself.
#[derive(Default)]
pub struct Sites {
    pub list: Vec<Site>,
    by_key: HashMap<SiteKey, u32>,
}

impl Sites {
    pub fn new(kernel: Range, key: SiteKey) -> Sites {
        let mut s = Sites::default();
        s.intern(Site {
            range: kernel,
            key,
            layout: None,
            offset: None,
            note: None,
        });
        s
    }

    /// The id of `site`, the same for the same node in every configuration.
    pub fn intern(&mut self, site: Site) -> SpanId {
        if let Some(&id) = self.by_key.get(&site.key) {
            return SpanId(id);
        }
        let id = self.list.len() as u32;
        self.by_key.insert(site.key, id);
        self.list.push(site);
        SpanId(id)
    }

    /// A diagnostic reported by the verifier or code generator at `span`. Messages about a
    /// layout or an offset are narrowed to that argument when the instruction has one.
    pub fn diag(&self, span: SpanId, message: String) -> Diag {
        let site = self.list.get(span.0 as usize).unwrap_or(&self.list[0]);
        let lower = message.to_ascii_lowercase();
        let (range, tag) = if lower.contains("offset") && site.offset.is_some() {
            (site.offset.unwrap_or(site.range), "offset")
        } else if lower.contains("layout") && site.layout.is_some() {
            (site.layout.unwrap_or(site.range), "layout")
        } else {
            (site.range, "site")
        };
        let message = match (&site.note, tag) {
            (Some(note), "layout") => format!("{message}\n{note}"),
            _ => message,
        };
        Diag {
            range,
            key: (site.key.0, tag, site.key.2, site.key.3),
            message,
        }
    }
}

struct Entry {
    diag: Diag,
    /// Merged messages differed in their numbers (the shown one is the first configuration's).
    varies: bool,
    /// Indices into the space; `None` for problems that are not about a configuration.
    configs: Option<Vec<usize>>,
}

/// All diagnostics of one macro invocation, merged across configurations.
#[derive(Default)]
pub struct Report {
    entries: Vec<Entry>,
    index: HashMap<(SiteKey, String), usize>,
}

impl Report {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The merged diagnostics, in the order they were first reported.
    pub fn diags(&self) -> Vec<&Diag> {
        self.entries.iter().map(|e| &e.diag).collect()
    }

    /// A problem independent of the configuration (attribute, signature).
    pub fn push(&mut self, diag: Diag) {
        self.add(diag, None);
    }

    /// A problem found while building, verifying or compiling configuration `config`.
    pub fn push_in(&mut self, diag: Diag, config: usize) {
        self.add(diag, Some(config));
    }

    fn add(&mut self, diag: Diag, config: Option<usize>) {
        // Messages that differ only in their numbers (sizes, counts) are one problem.
        let mut normalized = String::with_capacity(diag.message.len());
        for c in diag.message.chars() {
            if !c.is_ascii_digit() {
                normalized.push(c);
            } else if !normalized.ends_with('#') {
                normalized.push('#');
            }
        }
        let k = (diag.key, normalized);
        match self.index.get(&k) {
            Some(&i) => {
                if self.entries[i].diag.message != diag.message {
                    self.entries[i].varies = true;
                }
                if let (Some(list), Some(c)) = (&mut self.entries[i].configs, config) {
                    if list.last() != Some(&c) {
                        list.push(c);
                    }
                }
            }
            None => {
                self.index.insert(k, self.entries.len());
                self.entries.push(Entry {
                    diag,
                    varies: false,
                    configs: config.map(|c| vec![c]),
                });
            }
        }
    }

    /// The merged diagnostics in source order, each with its message and the configurations
    /// it occurs in.
    fn messages(&self, space: &Space) -> Vec<(&Diag, String)> {
        let mut entries: Vec<&Entry> = self.entries.iter().collect();
        entries.sort_by_key(|e| {
            let lc = e.diag.range.start.start();
            (lc.line, lc.column)
        });
        let mut out = Vec::new();
        for e in entries {
            // The configurations go at the end of the first line, before any `help:`/`note:`.
            let (head, rest) = e
                .diag
                .message
                .split_once('\n')
                .map_or((e.diag.message.as_str(), None), |(h, r)| (h, Some(r)));
            let mut message = head.to_string();
            if let Some(configs) = &e.configs {
                if let Some(suffix) = space.describe_subset(configs) {
                    if e.varies {
                        let first = space.describe(&space.points[configs[0]]);
                        message.push_str(&format!(" ({suffix}; the figures are for {first})"));
                    } else {
                        message.push_str(&format!(" ({suffix})"));
                    }
                }
            }
            if let Some(rest) = rest {
                message.push('\n');
                message.push_str(rest);
            }
            out.push((&e.diag, message));
        }
        out
    }

    /// One `compile_error!` per merged diagnostic, in source order.
    pub fn to_compile_errors(&self, space: &Space) -> TokenStream {
        let mut out = TokenStream::new();
        for (d, message) in self.messages(space) {
            out.extend(d.range.error(&message).to_compile_error());
        }
        out
    }

    /// The merged diagnostics as warnings. A proc macro on stable Rust cannot emit a warning,
    /// but rustc warns where a `#[deprecated]` item is used: each warning is such an item, used
    /// with the span of the user's tokens, so rustc shows the note there (and `-D warnings`
    /// or `#![deny(deprecated)]` turn it into an error). `name` names the item, which rustc
    /// shows: "use of deprecated unit struct `_::name`: <message>".
    pub fn to_warnings(&self, space: &Space, name: &str) -> TokenStream {
        let mut out = TokenStream::new();
        for (d, message) in self.messages(space) {
            let item = Ident::new(name, Span::call_site());
            // The user's own span (not one located in the macro's expansion), so that rustc
            // shows their line without "in this attribute macro expansion".
            let used = Ident::new(name, d.range.start);
            out.extend(quote::quote! {
                const _: () = {
                    #[deprecated(note = #message)]
                    #[allow(non_camel_case_types)]
                    struct #item;
                    let _ = #used;
                };
            });
        }
        out
    }
}
