//! The kernel language of `#[kernel]`: Tilus VM programs written as Rust functions, checked and
//! compiled to CUDA C at build time. `tilus-macros` is a shell calling [`kernel`]; the facade
//! uses [`lazy`] to instantiate `#[kernel(lazy, ..)]` kernels at run time with the same
//! translator. No dependency on CUDA or a runtime.
//!
//! ```ignore
//! #[tilus::kernel(
//!     grid = [cdiv(m, BM), cdiv(n, BN)],
//!     warps = 4,
//!     space(BM = [16, 32], BN = [64, 128]),
//!     dtypes(W = [i4, i6]),
//! )]
//! pub fn matmul<const BM: i32, const BN: i32, W: DTypeParam>(
//!     m: i32, n: i32, k: i32, a: Global<f16>, b: Global<u8>, c: GlobalMut<f16>,
//! ) { /* instructions */ }
//! ```
//!
//! For every configuration of the declared space (tile values x dtype choices) the macro
//! translates the body into `tilus_core` IR, runs the verifier, and generates CUDA C. Every
//! problem of every configuration becomes a `compile_error!` at the user's tokens; the same
//! problem in many configurations is reported once, naming them. The output is a module named
//! after the function (see `api.rs` for its items); with errors, a fallback module with the
//! same names keeps the rest of the crate type-checking. The macro never panics: a panic inside
//! (a bug, or a `tilus_core` piece that is not implemented) becomes a compile error too.
//!
//! Modules: `attr` (the attribute), `signature` (generics and parameters), `space`
//! (configurations), `translate` (body -> IR), `diag` (spans and merged diagnostics),
//! `embed` (compact embedding), `api` (the generated Rust API), [`lazy`] (lazy kernels:
//! what they embed, and their instantiation at run time).
//!
//! With `lazy` in the attribute every configuration is still translated, verified and
//! compiled here (same diagnostics), but only the kernel's text is embedded.

mod api;
mod attr;
mod diag;
mod dtypes;
mod embed;
pub mod lazy;
mod shared;
mod signature;
mod space;
mod translate;

pub use shared::helpers;

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::{self, AssertUnwindSafe};

use proc_macro2::TokenStream;
use quote::quote;
use syn::ItemFn;
use tilus_core::ir::Program;

use crate::diag::{Diag, Report, Sites};

/// The whole `#[kernel]` attribute: `attr` is the attribute's arguments, `item` the function.
/// Never panics: a panic inside (a bug, or a `tilus_core` piece that is not implemented)
/// becomes a `compile_error!`.
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    match catch(|| expand(attr, item.clone())) {
        Ok(out) => out,
        Err(message) => {
            let msg = format!("internal error in #[kernel]: {message}");
            let err = quote!(::core::compile_error!(#msg););
            // Best effort: keep the item's names around.
            let fallback = catch(|| fallback_only(item)).unwrap_or_default();
            quote!(#err #fallback)
        }
    }
}

thread_local! {
    static PANIC_MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Run `f`, turning a panic into `Err(message)` without printing it.
fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let previous = panic::take_hook();
    panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_string());
        let loc = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        PANIC_MESSAGE.with(|m| *m.borrow_mut() = Some(format!("{msg}{loc}")));
    }));
    let r = panic::catch_unwind(AssertUnwindSafe(f));
    panic::set_hook(previous);
    r.map_err(|_| {
        PANIC_MESSAGE
            .with(|m| m.borrow_mut().take())
            .unwrap_or_else(|| "panic".to_string())
    })
}

fn fallback_only(item: TokenStream) -> TokenStream {
    let Ok(f) = syn::parse2::<ItemFn>(item) else {
        return TokenStream::new();
    };
    let mut report = Report::default();
    let (sig, space) = signature::parse(&f, None, &mut report);
    api::fallback(&f, &sig, &space, false)
}

/// Expand `#[kernel(args)] item` (may panic on internal errors; [`kernel`] catches them).
pub fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let started = std::time::Instant::now();
    let f: ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(e) => {
            let e = e.to_compile_error();
            return quote!(#e #item);
        }
    };
    let mut report = Report::default();
    let attr = attr::parse(args.clone(), &mut report);
    if let Some(a) = &attr {
        if a.grid.is_none() {
            report.push(Diag::at(
                &f.sig.ident,
                "missing `grid = [..]` in `#[kernel(..)]`, e.g. `grid = [cdiv(m, BM), cdiv(n, BN)]`",
            ));
        }
    }
    let (sig, space) = signature::parse(&f, attr.as_ref(), &mut report);
    let Some(attr) = attr else {
        return errors_and_fallback(&report, &f, &sig, &space, false);
    };
    let attr_ok = report.is_empty();
    if attr.grid.is_none() || space.len() == 0 || (!attr_ok && space_incomplete(&f, &sig)) {
        return errors_and_fallback(&report, &f, &sig, &space, attr.lazy);
    }

    // Build and verify every configuration.
    let (kernel_range, kernel_key) = translate::kernel_range(&f);
    let mut sites = Sites::new(kernel_range, kernel_key);
    let mut layouts = HashMap::new();
    let mut macros = translate::MacroCache::default();
    let mut warnings = Report::default();
    let mut programs: Vec<Program> = Vec::with_capacity(space.len());
    for (i, point) in space.points.iter().enumerate() {
        let mut shared = translate::Shared {
            sites: &mut sites,
            layouts: &mut layouts,
            macros: &mut macros,
            warnings: Vec::new(),
        };
        let built = translate::translate(&f, &sig, &attr, &space, point, &mut shared);
        match built {
            Ok(program) => {
                // Only a program that builds shows how its replicated tensors are used.
                for w in translate::replicated::unused_copies(&program, shared.warnings) {
                    warnings.push_in(w, i);
                }
                match catch(|| tilus_core::verify::verify(&program, &attr.target)) {
                    Ok(Ok(())) => {}
                    Ok(Err(diags)) => {
                        for d in diags {
                            report.push_in(sites.diag(d.span, d.message), i);
                        }
                    }
                    Err(m) => report.push_in(
                        Diag::at(&f.sig.ident, format!("internal error in the verifier: {m}")),
                        i,
                    ),
                }
                programs.push(program);
            }
            Err(diags) => {
                for d in diags {
                    report.push_in(d, i);
                }
            }
        }
    }
    // Warnings go out with the errors, or with the kernel.
    let warnings = warnings.to_warnings(&space, "replicated_layout");
    if !report.is_empty() {
        let errors = errors_and_fallback(&report, &f, &sig, &space, attr.lazy);
        return quote!(#warnings #errors);
    }

    let verified_at = started.elapsed();
    // Generate CUDA and embed everything.
    let mut pack = embed::PackBuilder::default();
    let mut configs = Vec::with_capacity(space.len());
    // No errors so far: every configuration has its program, in order.
    for (i, program) in programs.iter().enumerate() {
        let bytes = match postcard::to_allocvec(program) {
            Ok(b) => b,
            Err(e) => {
                report.push(Diag::at(
                    &f.sig.ident,
                    format!("internal error: cannot serialize the program: {e}"),
                ));
                continue;
            }
        };
        let program_entry = pack.add(&bytes);
        match catch(|| tilus_core::codegen::emit(program, &attr.target)) {
            Ok(Ok(k)) => {
                // The generated launcher passes the signature's parameters in order; the entry
                // must take exactly those (plus hidden workspaces, which the one launcher
                // allocates).
                let own = k.launch.user_params().count();
                if own != sig.params.len() {
                    report.push_in(
                        Diag::at(
                            &f.sig.ident,
                            format!(
                                "internal error: the CUDA entry takes {own} parameters, the \
                                 signature has {}",
                                sig.params.len()
                            ),
                        ),
                        i,
                    );
                }
                match postcard::to_allocvec(&k.launch) {
                    Ok(spec) => {
                        let spec = pack.add(&spec);
                        let source = pack.add(k.source.as_bytes());
                        configs.push(api::ConfigOut {
                            program: program_entry,
                            source,
                            spec,
                        });
                    }
                    Err(e) => report.push(Diag::at(
                        &f.sig.ident,
                        format!("internal error: cannot serialize the launch spec: {e}"),
                    )),
                }
            }
            Ok(Err(e)) => report.push_in(sites.diag(e.span, e.message), i),
            Err(m) => report.push_in(
                Diag::at(
                    &f.sig.ident,
                    format!("internal error in code generation: {m}"),
                ),
                i,
            ),
        }
    }
    if !report.is_empty() {
        let errors = errors_and_fallback(&report, &f, &sig, &space, attr.lazy);
        return quote!(#warnings #errors);
    }
    if attr.lazy {
        // Checked like an eager kernel; only the text is embedded.
        let source = lazy::embed(&sig.name.to_string(), &args, &item);
        let api = api::generate_lazy(&f, &sig, &space, source);
        return quote!(#warnings #api);
    }
    let generated_at = started.elapsed();
    let (pack, stats) = pack.finish();
    if std::env::var_os("TILUS_MACRO_STATS").is_some() {
        eprintln!(
            "tilus-lang: {}: {} configurations, {} embedded entries, {} bytes -> {} bytes stored; \
             {:.0} ms (translate+verify {:.0}, codegen+serialize {:.0}, compress {:.0})",
            sig.name,
            space.len(),
            stats.entries,
            stats.raw_bytes,
            stats.stored_bytes,
            started.elapsed().as_secs_f64() * 1e3,
            verified_at.as_secs_f64() * 1e3,
            (generated_at - verified_at).as_secs_f64() * 1e3,
            (started.elapsed() - generated_at).as_secs_f64() * 1e3,
        );
    }
    let embedded = api::Embedded {
        configs,
        pack,
        sites: sites
            .list
            .iter()
            .map(|s| {
                let lc = s.range.start.start();
                (lc.line, lc.column + 1)
            })
            .collect(),
    };
    let api = api::generate(&f, &sig, &space, &embedded);
    quote!(#warnings #api)
}

/// True when some const generic has no values, so configurations cannot be enumerated.
fn space_incomplete(f: &ItemFn, sig: &signature::KernelSig) -> bool {
    let declared = f
        .sig
        .generics
        .params
        .iter()
        .filter(|g| !matches!(g, syn::GenericParam::Lifetime(_)))
        .count();
    declared != sig.generics.len()
}

fn errors_and_fallback(
    report: &Report,
    f: &ItemFn,
    sig: &signature::KernelSig,
    space: &space::Space,
    lazy: bool,
) -> TokenStream {
    let errors = report.to_compile_errors(space);
    let fallback = api::fallback(f, sig, space, lazy);
    quote!(#errors #fallback)
}
