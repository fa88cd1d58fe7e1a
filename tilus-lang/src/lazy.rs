//! Lazy kernels: `#[kernel(lazy, ..)]` instantiated at run time for any configuration.
//!
//! At build time the macro checks every configuration of the declared space exactly as for an
//! eager kernel, then embeds the kernel's text instead of its programs and CUDA sources: a
//! [`LazySource`] holding `(attribute arguments) fn item` (DEFLATE-compressed when large) and the
//! (line, column) in the user's file of every token of that text, in order. At run time
//! [`LazySource::instantiate`] re-parses the text (once per thread), narrows the attribute's
//! space to the one configuration asked for, and runs the same signature check, translator and
//! (optionally) verifier as the macro. Diagnostics come back as `file:line:column: message` in
//! the user's original source: the re-parse yields the tokens in the same order, so the span of a
//! re-parsed token maps to the embedded position of the original token.
//!
//! The parsed item lives in a thread-local cache: `proc_macro2` spans (and its table of
//! locations) are per thread and not `Send`, so a process-wide cache would have to re-parse to
//! answer locations anyway. Callers cache the resulting programs (they are plain data).

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use quote::quote;
use syn::ItemFn;
use tilus_core::ir::Program;
use tilus_core::verify::Target;
use tilus_core::DType;

use crate::attr;
use crate::diag::{Diag, Report, Sites};
use crate::signature;
use crate::translate;

/// Texts longer than this are embedded compressed.
const COMPRESS_ABOVE: usize = 2048;

/// The value of one generic parameter of a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// A tile parameter (`const BN: i32`): any `i32`.
    Tile(i32),
    /// A dtype parameter (`A: DTypeParam`): any [`DType`].
    DType(DType),
}

/// What a lazy kernel embeds (generated code builds one as a `static`).
pub struct LazySource {
    /// The kernel's name.
    pub name: &'static str,
    /// The file the kernel is written in (`file!()`), for locations in messages.
    pub file: &'static str,
    /// `(attribute arguments) fn item`, UTF-8, DEFLATE-compressed when `compressed`.
    pub text: &'static [u8],
    pub compressed: bool,
    /// (line, 1-based column) in `file` of each token of the text, in token order.
    pub positions: &'static [(u32, u32)],
}

/// One configuration, translated (and verified, when asked).
#[derive(Clone, Debug)]
pub struct Instance {
    pub program: Program,
    /// (line, column) in the user's file of each `SpanId` of the program, for run-time errors.
    pub sites: Vec<(u32, u32)>,
    /// The attribute's target: what the program is verified against and compiled for.
    pub target: Target,
    /// The kernel's file, to locate later diagnostics (code generation) through `sites`.
    pub file: &'static str,
}

/// The parsed text of a lazy kernel.
struct Parsed {
    args: TokenStream,
    item: ItemFn,
    /// (line, column) of each re-parsed token -> (line, column) in the user's file.
    map: HashMap<(usize, usize), (u32, u32)>,
}

thread_local! {
    /// Parsed kernels of this thread, by the address of their (static) [`LazySource`].
    static PARSED: RefCell<HashMap<usize, Rc<Parsed>>> = RefCell::new(HashMap::new());
}

/// Spans of every token of `ts` in order (delimiters of a visible group included), the order
/// [`LazySource::positions`] is written in and the re-parse reads back.
fn flatten(ts: TokenStream, out: &mut Vec<Span>) {
    for tt in ts {
        match tt {
            TokenTree::Group(g) => {
                let visible = g.delimiter() != Delimiter::None;
                if visible {
                    out.push(g.span_open());
                }
                flatten(g.stream(), out);
                if visible {
                    out.push(g.span_close());
                }
            }
            other => out.push(other.span()),
        }
    }
}

/// Build time: the `LazySource` expression embedding `#[kernel(args)] item`.
pub(crate) fn embed(name: &str, args: &TokenStream, item: &TokenStream) -> TokenStream {
    let text = format!("({args}) {item}");
    let mut spans = Vec::new();
    flatten(args.clone(), &mut spans);
    flatten(item.clone(), &mut spans);
    let positions = spans.iter().map(|s| {
        let lc = s.start();
        let (l, c) = (lc.line as u32, lc.column as u32 + 1);
        quote!((#l, #c))
    });
    let (compressed, bytes) = if text.len() > COMPRESS_ABOVE {
        (
            true,
            miniz_oxide::deflate::compress_to_vec(text.as_bytes(), 9),
        )
    } else {
        (false, text.into_bytes())
    };
    let lit = proc_macro2::Literal::byte_string(&bytes);
    quote! {
        ::tilus::lang::lazy::LazySource {
            name: #name,
            file: ::core::file!(),
            text: #lit,
            compressed: #compressed,
            positions: &[#(#positions),*],
        }
    }
}

impl LazySource {
    fn parse(&'static self) -> Result<Rc<Parsed>, String> {
        let key = self as *const LazySource as usize;
        if let Some(p) = PARSED.with(|m| m.borrow().get(&key).cloned()) {
            return Ok(p);
        }
        let bytes = if self.compressed {
            miniz_oxide::inflate::decompress_to_vec(self.text)
                .map_err(|e| format!("cannot inflate the kernel's text: {e:?}"))?
        } else {
            self.text.to_vec()
        };
        let text = String::from_utf8(bytes).map_err(|e| e.to_string())?;
        let ts: TokenStream = text.parse().map_err(|e| format!("{e}"))?;
        let mut tokens = ts.into_iter();
        let args = match tokens.next() {
            Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis => g.stream(),
            _ => return Err("the kernel's text does not start with its arguments".into()),
        };
        let item_tokens: TokenStream = tokens.collect();
        let item: ItemFn = syn::parse2(item_tokens.clone()).map_err(|e| e.to_string())?;
        let mut spans = Vec::new();
        flatten(args.clone(), &mut spans);
        flatten(item_tokens, &mut spans);
        let map = spans
            .iter()
            .zip(self.positions)
            .map(|(s, &p)| {
                let lc = s.start();
                ((lc.line, lc.column), p)
            })
            .collect();
        let parsed = Rc::new(Parsed { args, item, map });
        PARSED.with(|m| m.borrow_mut().insert(key, parsed.clone()));
        Ok(parsed)
    }

    /// Translate the kernel for the configuration `values` (every tile and dtype parameter by
    /// name, any values), and verify it against the attribute's target when `verify`.
    /// Errors are messages, `file:line:column: message` where the place is known. Never
    /// panics (a panic inside the translator or verifier becomes an error message).
    pub fn instantiate(
        &'static self,
        values: &[(&str, Value)],
        verify: bool,
    ) -> Result<Instance, Vec<String>> {
        let parsed = self.parse().map_err(|e| {
            vec![format!(
                "{}: the embedded text of kernel `{}` cannot be read: {e}",
                self.file, self.name
            )]
        })?;
        let run = panic::catch_unwind(AssertUnwindSafe(|| {
            self.instantiate_parsed(&parsed, values, verify)
        }));
        match run {
            Ok(r) => r,
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".into());
                Err(vec![format!("{}: internal error: {msg}", self.file)])
            }
        }
    }

    fn locate(&self, parsed: &Parsed, d: &Diag) -> String {
        let lc = d.range.start.start();
        match parsed.map.get(&(lc.line, lc.column)) {
            Some((l, c)) => format!("{}:{l}:{c}: {}", self.file, d.message),
            None => format!("{}: {}", self.file, d.message),
        }
    }

    fn instantiate_parsed(
        &self,
        parsed: &Parsed,
        values: &[(&str, Value)],
        verify: bool,
    ) -> Result<Instance, Vec<String>> {
        let f = &parsed.item;
        let mut report = Report::default();
        let Some(mut attr) = attr::parse(parsed.args.clone(), &mut report) else {
            return Err(vec![format!(
                "{}: the arguments of kernel `{}` do not parse",
                self.file, self.name
            )]);
        };
        // The space of exactly this configuration.
        let mut errors = Vec::new();
        let mut used = vec![false; values.len()];
        let mut value_of = |name: &str| {
            let i = values.iter().position(|(n, _)| *n == name)?;
            used[i] = true;
            Some(values[i].1)
        };
        for e in &mut attr.space {
            match value_of(&e.name.to_string()) {
                Some(Value::Tile(v)) => e.values = vec![v],
                Some(Value::DType(d)) => errors.push(format!(
                    "tile parameter `{}` is given a data type ({d})",
                    e.name
                )),
                None => errors.push(format!("tile parameter `{}` has no value", e.name)),
            }
        }
        for e in &mut attr.dtypes {
            match value_of(&e.name.to_string()) {
                Some(Value::DType(d)) => e.values = vec![(d, d.to_string())],
                Some(Value::Tile(v)) => errors.push(format!(
                    "dtype parameter `{}` is given an integer ({v})",
                    e.name
                )),
                None => errors.push(format!("dtype parameter `{}` has no value", e.name)),
            }
        }
        for ((name, _), used) in values.iter().zip(&used) {
            if !used {
                errors.push(format!("`{name}` is not a parameter of `{}`", self.name));
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let (sig, space) = signature::parse(f, Some(&attr), &mut report);
        let mut messages: Vec<String> = report
            .diags()
            .iter()
            .map(|d| self.locate(parsed, d))
            .collect();
        if !messages.is_empty() {
            return Err(messages);
        }
        if space.len() != 1 {
            return Err(vec![format!(
                "{}: kernel `{}`: the configuration does not name one point ({} points)",
                self.file,
                self.name,
                space.len()
            )]);
        }
        let (kernel_range, kernel_key) = translate::kernel_range(f);
        let mut sites = Sites::new(kernel_range, kernel_key);
        let mut layouts = HashMap::new();
        let mut macros = translate::MacroCache::default();
        let mut shared = translate::Shared {
            sites: &mut sites,
            layouts: &mut layouts,
            macros: &mut macros,
            warnings: Vec::new(),
        };
        let program = translate::translate(f, &sig, &attr, &space, &space.points[0], &mut shared)
            .map_err(|diags| {
            diags
                .iter()
                .map(|d| self.locate(parsed, d))
                .collect::<Vec<_>>()
        })?;
        if verify {
            if let Err(diags) = tilus_core::verify::verify(&program, &attr.target) {
                messages.extend(
                    diags
                        .into_iter()
                        .map(|d| self.locate(parsed, &sites.diag(d.span, d.message))),
                );
                return Err(messages);
            }
        }
        let site_positions = sites
            .list
            .iter()
            .map(|s| {
                let lc = s.range.start.start();
                parsed
                    .map
                    .get(&(lc.line, lc.column))
                    .copied()
                    .unwrap_or((0, 0))
            })
            .collect();
        Ok(Instance {
            program,
            sites: site_positions,
            target: attr.target,
            file: self.file,
        })
    }
}
