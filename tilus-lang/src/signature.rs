//! The kernel function's signature: tile parameters (`const BM: i32`), dtype parameters
//! (`W: DTypeParam`) and the kernel parameters (`m: i32`, `a: Global<f16>`,
//! `c: GlobalMut<f16>`), checked against the attribute's space.

use proc_macro2::Ident;
use syn::{FnArg, GenericArgument, GenericParam, ItemFn, Pat, PathArguments, Type};
use tilus_core::DType;

use crate::attr::KernelAttr;
use crate::diag::{Diag, Report};
use crate::dtypes;
use crate::space::{Param, Space};

#[derive(Clone, Debug)]
pub enum ParamKind {
    I32,
    I64,
    F32,
    Bool,
    /// `Global<T>` (read only) or `GlobalMut<T>`.
    Ptr {
        elem: String,
        dtype: DType,
        mutable: bool,
        /// `Global<A>` with `A: DTypeParam`: the element type is `A`'s in each configuration
        /// (`dtype` is a placeholder) and the host API passes bytes.
        by_param: Option<String>,
    },
    /// A type we reported an error for; the fallback API keeps the parameter generic.
    Bad,
}

#[derive(Clone, Debug)]
pub struct KernelParam {
    pub name: Ident,
    pub kind: ParamKind,
}

pub struct KernelSig {
    pub name: Ident,
    /// Tile parameters (`BM`) and dtype parameters (`W`), in declaration order.
    pub generics: Vec<(Ident, bool)>,
    pub params: Vec<KernelParam>,
}

impl KernelSig {
    pub fn tile_names(&self) -> impl Iterator<Item = &Ident> {
        self.generics.iter().filter(|g| !g.1).map(|g| &g.0)
    }
    pub fn dtype_names(&self) -> impl Iterator<Item = &Ident> {
        self.generics.iter().filter(|g| g.1).map(|g| &g.0)
    }
}

/// Read the signature; the space is built from the generics that have values in the
/// attribute (every problem is reported, and what is well-formed is still returned).
pub fn parse(f: &ItemFn, attr: Option<&KernelAttr>, report: &mut Report) -> (KernelSig, Space) {
    let sig = &f.sig;
    let name = sig.ident.clone();
    if let Some(c) = &sig.constness {
        report.push(Diag::at(c, "a kernel cannot be a `const fn`"));
    }
    if let Some(a) = &sig.asyncness {
        report.push(Diag::at(a, "a kernel cannot be `async`"));
    }
    if let Some(u) = &sig.unsafety {
        report.push(Diag::at(u, "a kernel cannot be `unsafe`"));
    }
    if let Some(a) = &sig.abi {
        report.push(Diag::at(a, "a kernel cannot declare an ABI"));
    }
    if let Some(v) = &sig.variadic {
        report.push(Diag::at(v, "a kernel cannot be variadic"));
    }
    if let syn::ReturnType::Type(_, ty) = &sig.output {
        report.push(Diag::at(
            &**ty,
            "a kernel returns nothing: results are written with `store_global`",
        ));
    }
    if let Some(w) = &sig.generics.where_clause {
        report.push(Diag::at(w, "a kernel cannot have a `where` clause"));
    }

    let empty_space = Vec::new();
    let empty_dtypes = Vec::new();
    let (space_entries, dtype_entries) = match attr {
        Some(a) => (&a.space, &a.dtypes),
        None => (&empty_space, &empty_dtypes),
    };

    let mut generics = Vec::new();
    let mut params = Vec::new();
    for g in &sig.generics.params {
        match g {
            GenericParam::Lifetime(l) => {
                report.push(Diag::at(l, "a kernel cannot have lifetime parameters"))
            }
            GenericParam::Const(c) => {
                let is_i32 = matches!(&c.ty, Type::Path(p) if p.path.is_ident("i32"));
                if !is_i32 {
                    report.push(Diag::at(
                        &c.ty,
                        format!("tile parameters are `i32`: write `const {}: i32`", c.ident),
                    ));
                }
                if let Some(d) = &c.default {
                    report.push(Diag::at(
                        d,
                        "tile parameters take their values from `space(..)`, not a default",
                    ));
                }
                match space_entries.iter().find(|e| e.name == c.ident) {
                    Some(e) => {
                        if !e.values.is_empty() {
                            params.push(Param::Tile {
                                name: c.ident.to_string(),
                                values: e.values.clone(),
                            });
                            generics.push((c.ident.clone(), false));
                        }
                    }
                    None => report.push(Diag::at(
                        &c.ident,
                        format!(
                            "tile parameter `{0}` has no values: add `{0} = [..]` to `space(..)`",
                            c.ident
                        ),
                    )),
                }
            }
            GenericParam::Type(t) => {
                let is_dtype = t.bounds.iter().any(|b| match b {
                    syn::TypeParamBound::Trait(tb) => tb
                        .path
                        .segments
                        .last()
                        .is_some_and(|s| s.ident == "DTypeParam"),
                    _ => false,
                });
                let in_space = space_entries.iter().any(|e| e.name == t.ident);
                let entry = dtype_entries.iter().find(|e| e.name == t.ident);
                if in_space {
                    report.push(Diag::at(
                        &t.ident,
                        format!(
                            "tile parameter `{0}` must be a const generic: write `const {0}: i32`",
                            t.ident
                        ),
                    ));
                } else if !is_dtype {
                    report.push(Diag::at(
                        &t.ident,
                        format!(
                            "type parameters of a kernel are data types: write `{0}: DTypeParam` and list its types in `dtypes({0} = [..])`",
                            t.ident
                        ),
                    ));
                } else if let Some(e) = entry {
                    if !e.values.is_empty() {
                        params.push(Param::DType {
                            name: t.ident.to_string(),
                            values: e.values.clone(),
                        });
                        generics.push((t.ident.clone(), true));
                    }
                } else {
                    report.push(Diag::at(
                        &t.ident,
                        format!(
                            "dtype parameter `{0}` has no types: add `{0} = [..]` to `dtypes(..)`",
                            t.ident
                        ),
                    ));
                }
            }
        }
    }
    for e in space_entries {
        let known = sig.generics.params.iter().any(|g| match g {
            GenericParam::Const(c) => c.ident == e.name,
            GenericParam::Type(t) => t.ident == e.name,
            _ => false,
        });
        if !known {
            report.push(Diag::at_span(
                e.name.span(),
                format!(
                    "`{}` is not a parameter of `{name}`: declare it as `const {}: i32`",
                    e.name, e.name
                ),
            ));
        }
    }
    for e in dtype_entries {
        let known = sig.generics.params.iter().any(|g| match g {
            GenericParam::Type(t) => t.ident == e.name,
            _ => false,
        });
        if !known {
            report.push(Diag::at_span(
                e.name.span(),
                format!(
                    "`{}` is not a parameter of `{name}`: declare it as `{}: DTypeParam`",
                    e.name, e.name
                ),
            ));
        }
    }

    let mut kparams = Vec::new();
    for arg in &sig.inputs {
        match arg {
            FnArg::Receiver(r) => report.push(Diag::at(r, "a kernel cannot take `self`")),
            FnArg::Typed(pt) => {
                let pname = match &*pt.pat {
                    Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                        if let Some(m) = &pi.mutability {
                            report.push(Diag::at(
                                m,
                                "kernel parameters are immutable; bind a `let mut` copy",
                            ));
                        }
                        pi.ident.clone()
                    }
                    other => {
                        report.push(Diag::at(other, "expected a parameter name"));
                        continue;
                    }
                };
                if kparams.iter().any(|p: &KernelParam| p.name == pname) {
                    report.push(Diag::at(
                        &pname,
                        format!("parameter `{pname}` is given twice"),
                    ));
                }
                let kind = param_kind(&pt.ty, &params, report);
                kparams.push(KernelParam { name: pname, kind });
            }
        }
    }
    (
        KernelSig {
            name,
            generics,
            params: kparams,
        },
        Space::new(params),
    )
}

fn expected() -> String {
    format!(
        "expected `i32`, `i64`, `f32`, `bool`, `Global<T>` or `GlobalMut<T>` with `T` one of {}",
        dtypes::param_element_names()
    )
}

/// The kind of a parameter of type `ty`; `space` holds the dtype parameters with their types,
/// for `Global<A>` (each of `A`'s types must be a parameter element type).
fn param_kind(ty: &Type, space: &[Param], report: &mut Report) -> ParamKind {
    let bad = |report: &mut Report, msg: String| {
        report.push(Diag::at(ty, msg));
        ParamKind::Bad
    };
    let path = match ty {
        Type::Path(p) if p.qself.is_none() => &p.path,
        Type::Group(g) => return param_kind(&g.elem, space, report),
        _ => {
            return bad(
                report,
                format!("unsupported kernel parameter type; {}", expected()),
            )
        }
    };
    if path.is_ident("i32") {
        return ParamKind::I32;
    }
    if path.is_ident("i64") {
        return ParamKind::I64;
    }
    if path.is_ident("f32") {
        return ParamKind::F32;
    }
    if path.is_ident("bool") {
        return ParamKind::Bool;
    }
    let Some(last) = path.segments.last() else {
        return bad(
            report,
            format!("unsupported kernel parameter type; {}", expected()),
        );
    };
    let mutable = match last.ident.to_string().as_str() {
        "Global" => false,
        "GlobalMut" => true,
        other => {
            return bad(
                report,
                format!(
                    "unsupported kernel parameter type `{other}`; {}",
                    expected()
                ),
            )
        }
    };
    let elem = match &last.arguments {
        PathArguments::AngleBracketed(a) if a.args.len() == 1 => match &a.args[0] {
            GenericArgument::Type(Type::Path(p)) if p.path.get_ident().is_some() => p
                .path
                .get_ident()
                .map(|i| i.to_string())
                .unwrap_or_default(),
            _ => {
                return bad(
                    report,
                    format!(
                        "`{}` takes one element type, e.g. `{}<f16>`",
                        last.ident, last.ident
                    ),
                )
            }
        },
        _ => {
            return bad(
                report,
                format!(
                    "`{}` takes one element type, e.g. `{}<f16>`",
                    last.ident, last.ident
                ),
            )
        }
    };
    let by_param = space.iter().find_map(|p| match p {
        Param::DType { name, values } if *name == elem => Some(values),
        _ => None,
    });
    if let Some(values) = by_param {
        // The same rule as for a written element type, for each of the parameter's types.
        if let Some((_, t)) = values.iter().find(|(_, t)| !dtypes::is_param_element(t)) {
            return bad(
                report,
                format!(
                    "`{elem}` may be `{t}`, which has no host type: a `{}<{elem}>` parameter needs \
                     types from {}; pass packed bytes as `{}<u8>` and reinterpret them with \
                     `view_global::<{elem}>(..)`",
                    last.ident,
                    dtypes::param_element_names(),
                    last.ident
                ),
            );
        }
        return ParamKind::Ptr {
            by_param: Some(elem.clone()),
            elem,
            dtype: DType::UInt(8),
            mutable,
        };
    }
    if !dtypes::is_param_element(&elem) {
        let hint = match dtypes::parse(&elem) {
            Ok(_) => format!(
                "`{elem}` has no host type: pass its packed bytes as `{}<u8>` and reinterpret them with `view_global::<{elem}>(..)` or `view::<{elem}>(..)`",
                last.ident
            ),
            Err(_) => format!("unknown element type `{elem}`; {}", expected()),
        };
        return bad(report, hint);
    }
    let dtype = match dtypes::parse(&elem) {
        Ok(d) => d,
        Err(e) => return bad(report, e),
    };
    ParamKind::Ptr {
        elem,
        dtype,
        mutable,
        by_param: None,
    }
}
