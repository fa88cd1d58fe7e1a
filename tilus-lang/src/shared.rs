//! `#[helpers]`: helper functions shared by the kernels of one module.
//!
//! A helper `fn` of `#[kernel]` is declared among the kernel body's top-level statements, so a
//! piece that several kernels need (a split-k epilogue, a pipeline prologue) had to be written
//! out in each. `#[helpers]` on an inline module takes its `#[helper]` functions out of the
//! module and inserts them at the top of every `#[kernel]` function's body, where `#[kernel]`
//! reads helpers: each kernel sees them as its own, with the same rules (their bodies see their
//! parameters and the kernel's parameters, tile parameters and data types). The outer attribute
//! runs before the kernels' own, so lazy kernels embed the helpers with their source too.

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};
use syn::spanned::Spanned;
use syn::{Attribute, Item, ItemMod, Stmt};

/// Whether `attr` is `#[name]` or a path ending in `name` (`#[tilus::kernel(..)]`).
fn is(attr: &Attribute, name: &str) -> bool {
    attr.path().segments.last().is_some_and(|s| s.ident == name)
}

fn error(span: Span, message: &str) -> TokenStream {
    syn::Error::new(span, message).to_compile_error()
}

/// Expand `#[helpers] mod name { .. }`.
pub fn helpers(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return error(attr.span(), "`#[helpers]` takes no arguments");
    }
    let mut module: ItemMod = match syn::parse2(item.clone()) {
        Ok(m) => m,
        Err(_) => {
            let e = error(
                item.span(),
                "`#[helpers]` applies to an inline module: `#[helpers] mod name { .. }`",
            );
            return quote!(#e #item);
        }
    };
    let Some((_, items)) = module.content.as_mut() else {
        let e = error(
            module.ident.span(),
            "`#[helpers]` needs the module's items inline (`mod name { .. }`, not `mod name;`)",
        );
        return quote!(#e #module);
    };
    let mut shared = Vec::new();
    let mut errors = TokenStream::new();
    items.retain_mut(|it| {
        let Item::Fn(f) = it else { return true };
        let Some(at) = f.attrs.iter().position(|a| is(a, "helper")) else {
            return true;
        };
        if f.attrs.iter().any(|a| is(a, "kernel")) {
            errors.extend(error(
                f.attrs[at].span(),
                "a `#[kernel]` function cannot also be a `#[helper]`",
            ));
            return true;
        }
        f.attrs.remove(at);
        shared.push(Stmt::Item(Item::Fn(f.clone())));
        false
    });
    if shared.is_empty() {
        errors.extend(error(
            module.ident.span(),
            "no `#[helper]` function in this `#[helpers]` module",
        ));
    }
    let mut kernels = 0;
    for it in items.iter_mut() {
        if let Item::Fn(f) = it {
            if f.attrs.iter().any(|a| is(a, "kernel")) {
                kernels += 1;
                f.block.stmts.splice(0..0, shared.iter().cloned());
            }
        }
    }
    if kernels == 0 {
        errors.extend(error(
            module.ident.span(),
            "no `#[kernel]` function in this `#[helpers]` module to share the helpers with",
        ));
    }
    let mut out = errors;
    module.to_tokens(&mut out);
    out
}
