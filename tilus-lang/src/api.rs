//! The Rust API generated for a kernel: a module named after the function.
//!
//! ```text
//! pub mod matmul {
//!     pub struct Config { pub BM: i32, .., pub W: DType }  // a point of the space
//!     pub const NAME: &str;                                 // the kernel's name
//!     pub const SPACE: &[Config];                           // every configuration, in order
//!     pub fn source(&Config) -> Option<&'static str>;       // the embedded CUDA C
//!     pub fn program(&Config) -> Option<Program>;           // the verified VM program
//!     pub fn kernel(&Config) -> Option<KernelInfo>;         // source + entry + launch shape
//!     pub fn interpret(&Config, m: i32, a: &[f16], c: &mut [f16], ..) -> Result<(), KernelError>;
//!     pub fn interpret_ordered(&Config, &BlockOrder, m: i32, ..) -> Result<(), KernelError>; // blocks in any order
//!     pub fn launch(&Context, &Config, m: i32, a: &impl DeviceRead<f16>, c: &mut impl DeviceWrite<f16>, ..)
//!         -> Result<(), KernelError>;
//!     pub fn launch_on(&Context, Option<&Arc<CudaStream>>, &Config, m: i32, ..) -> Result<(), KernelError>;
//!     pub fn launch_with(&Context, LaunchOptions, &Config, m: i32, ..) -> Result<(), KernelError>; // stream, dependent launch
//! }
//! ```
//!
//! A `#[kernel(lazy, ..)]` kernel ([`generate_lazy`]) has the same names for any `Config`, but
//! instantiates configurations at run time, so the lookups that are `Option`s above (`None`:
//! not in `SPACE`) are `Result`s (`Err(KernelError::Instantiate)`: the configuration does not
//! translate or verify, with each diagnostic located in the user's source):
//!
//! ```text
//!     pub fn translate(&Config) -> Result<Program, KernelError>;   // unverified, not cached
//!     pub fn instance(&Config) -> Result<&'static LazyInstance, KernelError>; // cached
//!     pub fn program(&Config) -> Result<Program, KernelError>;
//!     pub fn source(&Config) -> Result<&'static str, KernelError>;
//!     pub fn kernel(&Config) -> Result<KernelInfo, KernelError>;
//! ```
//!
//! Parameters `Global<A>` / `GlobalMut<A>` with `A` a dtype parameter are bytes (`&[u8]`,
//! `&mut [u8]`, `u8` device buffers) in both modes.
//!
//! When the kernel has errors the same names are generated with an empty space (the
//! *fallback*, with the lookups of the kernel's mode), so code using the kernel still
//! type-checks while the errors are fixed.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ItemFn;

use crate::dtypes;
use crate::signature::{KernelSig, ParamKind};
use crate::space::{Param, Space};

/// The generated `launch_with`'s documentation.
const LAUNCH_WITH_DOC: &str = "[`launch`] with `how`: on `how.stream` (a stream of `ctx`, or \
    `ctx`'s own when `None`), and with `how.dependent` as a programmatic dependent of the kernel \
    before it on the stream (sm_90): it may start before that one ends, so it must execute \
    `wait_prior_grid()` before touching anything that kernel writes (the launch is refused for \
    a kernel that never waits; which memory the two kernels share is the caller's contract).";

/// What the macro embeds for one configuration: entries of the pack.
pub struct ConfigOut {
    /// The verified program.
    pub program: u32,
    /// The CUDA source.
    pub source: u32,
    /// The launch spec.
    pub spec: u32,
}

pub struct Embedded {
    pub configs: Vec<ConfigOut>,
    pub pack: TokenStream,
    /// (line, column) of each span id, for run-time error messages.
    pub sites: Vec<(usize, usize)>,
}

/// The `Config` struct, its `Display`, and `NAME`.
fn config_items(sig: &KernelSig, fields: &[(Ident, bool)]) -> TokenStream {
    let name_str = sig.name.to_string();
    let decls = fields.iter().map(|(id, is_dtype)| {
        let doc = if *is_dtype {
            format!("Data type parameter `{id}`.")
        } else {
            format!("Tile parameter `{id}`.")
        };
        if *is_dtype {
            quote!(#[doc = #doc] pub #id: ::tilus::DType)
        } else {
            quote!(#[doc = #doc] pub #id: i32)
        }
    });
    let fmt = fields
        .iter()
        .map(|(id, _)| format!("{id}={{}}"))
        .collect::<Vec<_>>()
        .join(",");
    let fmt_args = fields.iter().map(|(id, _)| quote!(self.#id));
    let config_doc = format!("A point of the configuration space of kernel `{name_str}`.");
    quote! {
        #[doc = #config_doc]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct Config {
            #(#decls,)*
        }

        impl Config {
            /// Position of this configuration in [`SPACE`], or `None` when it is not in it.
            pub fn index(&self) -> ::core::option::Option<usize> {
                SPACE.iter().position(|c| c == self)
            }
        }

        impl ::core::fmt::Display for Config {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                ::core::write!(f, #fmt, #(#fmt_args),*)
            }
        }

        /// The kernel's name.
        pub const NAME: &str = #name_str;
    }
}

/// Host and device argument types of the kernel parameters.
struct Args {
    /// `m: i32`, `a: &[f16]`, `c: &mut [f16]`
    host: Vec<TokenStream>,
    /// `m: i32`, `a: &DeviceBuffer<f16>`, `c: &mut DeviceBuffer<f16>`
    device: Vec<TokenStream>,
    /// Generic parameters for parameters whose type was an error.
    generics: Vec<Ident>,
}

fn args(sig: &KernelSig) -> Args {
    let mut a = Args {
        host: Vec::new(),
        device: Vec::new(),
        generics: Vec::new(),
    };
    for (i, p) in sig.params.iter().enumerate() {
        let n = &p.name;
        match &p.kind {
            ParamKind::I32 => {
                a.host.push(quote!(#n: i32));
                a.device.push(quote!(#n: i32));
            }
            ParamKind::I64 => {
                a.host.push(quote!(#n: i64));
                a.device.push(quote!(#n: i64));
            }
            ParamKind::F32 => {
                a.host.push(quote!(#n: f32));
                a.device.push(quote!(#n: f32));
            }
            ParamKind::Bool => {
                a.host.push(quote!(#n: bool));
                a.device.push(quote!(#n: bool));
            }
            ParamKind::Ptr { elem, mutable, .. } => {
                let t = dtypes::host_type(elem);
                if *mutable {
                    a.host.push(quote!(#n: &mut [#t]));
                    a.device
                        .push(quote!(#n: &mut impl ::tilus::runtime::DeviceWrite<#t>));
                } else {
                    a.host.push(quote!(#n: &[#t]));
                    a.device
                        .push(quote!(#n: &impl ::tilus::runtime::DeviceRead<#t>));
                }
            }
            ParamKind::Bad => {
                let g = format_ident!("P{}", i);
                a.host.push(quote!(#n: #g));
                a.device.push(quote!(#n: #g));
                a.generics.push(g);
            }
        }
    }
    a
}

fn fields(sig: &KernelSig, space: &Space) -> Vec<(Ident, bool)> {
    // Generics in declaration order, only those that made it into the space.
    sig.generics
        .iter()
        .filter(|(id, _)| space.params.iter().any(|p| *id == p.name()))
        .cloned()
        .collect()
}

fn wrap(f: &ItemFn, sig: &KernelSig, body: TokenStream) -> TokenStream {
    let vis = &f.vis;
    let name = &sig.name;
    let docs = f.attrs.iter().filter(|a| a.path().is_ident("doc"));
    quote! {
        #(#docs)*
        #[allow(non_snake_case, dead_code, unused_variables, clippy::all)]
        #vis mod #name {
            #body
        }
    }
}

/// The code turning the generated functions' arguments into interpreter arguments, argument
/// checks and launcher arguments (shared by eager and lazy kernels).
struct ArgCode {
    to_args: Vec<TokenStream>,
    write_back: Vec<TokenStream>,
    checks_host: Vec<TokenStream>,
    gpu_args: Vec<TokenStream>,
}

fn arg_code(sig: &KernelSig) -> ArgCode {
    let to_args = sig
        .params
        .iter()
        .map(|p| {
            let n = &p.name;
            match &p.kind {
                ParamKind::I32 => quote!(::tilus::core::interp::Arg::I32(#n)),
                ParamKind::I64 => quote!(::tilus::core::interp::Arg::I64(#n)),
                ParamKind::F32 => quote!(::tilus::core::interp::Arg::F32(#n)),
                ParamKind::Bool => quote!(::tilus::core::interp::Arg::Bool(#n)),
                _ => quote!(::tilus::core::interp::Arg::Buffer(
                ::tilus::macro_support::HostElement::to_bytes(&*#n))),
            }
        })
        .collect();
    let write_back = sig
        .params
        .iter()
        .enumerate()
        .filter_map(|(i, p)| match &p.kind {
            ParamKind::Ptr { mutable: true, .. } => {
                let n = &p.name;
                Some(quote_spanned! {Span::mixed_site()=>
                    if let ::tilus::core::interp::Arg::Buffer(bytes) = &args[#i] {
                        ::tilus::macro_support::HostElement::copy_from_bytes(bytes, #n);
                    }
                })
            }
            _ => None,
        })
        .collect();
    let checks_host = sig
        .params
        .iter()
        .map(|p| {
            let n = &p.name;
            match &p.kind {
                ParamKind::I32 => quote!(::tilus::macro_support::ArgCheck::I32(#n)),
                ParamKind::I64 => quote!(::tilus::macro_support::ArgCheck::I64(#n)),
                ParamKind::F32 => quote!(::tilus::macro_support::ArgCheck::F32(#n)),
                ParamKind::Bool => quote!(::tilus::macro_support::ArgCheck::Bool(#n)),
                _ => {
                    quote!(::tilus::macro_support::ArgCheck::Buffer(::core::mem::size_of_val(&*#n)))
                }
            }
        })
        .collect();
    let gpu_args = sig
        .params
        .iter()
        .map(|p| {
            let n = &p.name;
            match &p.kind {
                ParamKind::I32 => quote!(::tilus::macro_support::GpuArg::I32(#n)),
                ParamKind::I64 => quote!(::tilus::macro_support::GpuArg::I64(#n)),
                ParamKind::F32 => quote!(::tilus::macro_support::GpuArg::F32(#n)),
                ParamKind::Bool => quote!(::tilus::macro_support::GpuArg::Bool(#n)),
                // A pointer typed by a dtype parameter holds bytes of the configuration's type.
                ParamKind::Ptr {
                    mutable: true,
                    by_param: Some(_),
                    ..
                } => quote!(::tilus::macro_support::GpuArg::OutBytes(#n)),
                ParamKind::Ptr {
                    by_param: Some(_), ..
                } => quote!(::tilus::macro_support::GpuArg::InBytes(#n)),
                ParamKind::Ptr { mutable: true, .. } => {
                    quote!(::tilus::macro_support::GpuArg::Out(#n))
                }
                _ => quote!(::tilus::macro_support::GpuArg::In(#n)),
            }
        })
        .collect();
    ArgCode {
        to_args,
        write_back,
        checks_host,
        gpu_args,
    }
}

/// `Config { .. }` of every point of the space, in order.
fn space_points(space: &Space) -> Vec<TokenStream> {
    space
        .points
        .iter()
        .map(|pt| {
            let inits = space.params.iter().zip(&pt.0).map(|(p, &i)| match p {
                Param::Tile { name, values } => {
                    let id = Ident::new(name, Span::call_site());
                    let v = values[i];
                    quote!(#id: #v)
                }
                Param::DType { name, values } => {
                    let id = Ident::new(name, Span::call_site());
                    let d = dtypes::dtype_tokens(values[i].0);
                    quote!(#id: #d)
                }
            });
            quote!(Config { #(#inits),* })
        })
        .collect()
}

/// The full API of a kernel that verified.
pub fn generate(f: &ItemFn, sig: &KernelSig, space: &Space, emb: &Embedded) -> TokenStream {
    let fields = fields(sig, space);
    let config = config_items(sig, &fields);
    let n = space.len();
    let points = space_points(space);
    let metas = emb.configs.iter().map(|c| {
        let program = c.program;
        let (source, spec) = (c.source, c.spec);
        quote!(::tilus::macro_support::Meta { program: #program, source: #source, spec: #spec })
    });
    let sites = emb.sites.iter().map(|(l, c)| {
        let (l, c) = (*l as u32, *c as u32);
        quote!((#l, #c))
    });
    let pack = &emb.pack;
    let a = args(sig);
    let (host_args, device_args) = (&a.host, &a.device);
    let nparams = sig.params.len();
    let arg_names: Vec<&Ident> = sig.params.iter().map(|p| &p.name).collect();
    let ArgCode {
        to_args,
        write_back,
        checks_host,
        gpu_args,
    } = arg_code(sig);
    let interpret_doc = "Run the kernel on host buffers through the CPU interpreter (the semantic \
        oracle): every block of the grid, with the layouts' exact register semantics. Buffers of \
        `GlobalMut` parameters are written back. Buffers too small for the kernel's global views \
        are reported (naming the parameter) before anything runs, and so are scalars that break \
        a divisibility the generated CUDA assumes (a launch refuses those too).";
    let launch_doc = "Launch the kernel on `ctx`'s stream: compiles (and caches, in memory and on \
        disk) the embedded CUDA source of `cfg`, then, through the one launcher \
        (`tilus::gpu::GpuKernel`), checks every buffer against the kernel's global views and \
        every assumption of the generated code (alignment, divisibility), evaluates the grid, \
        allocates the kernel's workspaces, and enqueues the launch. Buffers may be whole \
        `DeviceBuffer`s or views of part of one. Bad arguments are errors naming the argument; a \
        fault inside the kernel surfaces at the next synchronizing call (`ctx.synchronize()`).";
    let launch_on_doc =
        "[`launch`] on `stream` (a stream of `ctx`, from `ctx.new_stream()`), or on \
        `ctx`'s own stream when `None`.";
    let launch_with_doc = LAUNCH_WITH_DOC;
    // Mixed-site hygiene: the locals and parameters written here (`cfg`, `m`, `args`, ..)
    // never collide with the kernel's parameter names.
    let body = quote_spanned! {Span::mixed_site()=>
        #config

        /// Every configuration of the space, in the order the autotuner sees them.
        pub const SPACE: &[Config] = &[#(#points),*];

        static META: [::tilus::macro_support::Meta; #n] = [#(#metas),*];
        static SITES: &[(u32, u32)] = &[#(#sites),*];
        static PACK: ::tilus::macro_support::Pack = #pack;
        static PROGRAMS: [::std::sync::OnceLock<::tilus::core::ir::Program>; #n] =
            [const { ::std::sync::OnceLock::new() }; #n];
        static KERNELS: [::std::sync::OnceLock<::tilus::gpu::GpuKernel>; #n] =
            [const { ::std::sync::OnceLock::new() }; #n];
        static CACHES: ::tilus::macro_support::Caches = ::tilus::macro_support::Caches {
            programs: &PROGRAMS,
            kernels: &KERNELS,
        };

        fn index(cfg: &Config) -> ::core::result::Result<usize, ::tilus::macro_support::KernelError> {
            cfg.index().ok_or_else(|| ::tilus::macro_support::KernelError::NotInSpace {
                kernel: NAME,
                config: ::std::string::ToString::to_string(cfg),
            })
        }

        /// The CUDA C source generated for `cfg` (`None` when `cfg` is not in [`SPACE`]).
        pub fn source(cfg: &Config) -> ::core::option::Option<&'static str> {
            let i = self::index(cfg).ok()?;
            PACK.str(META[i].source).ok()
        }

        /// The verified VM program of `cfg` (`None` when `cfg` is not in [`SPACE`]).
        pub fn program(cfg: &Config) -> ::core::option::Option<::tilus::core::ir::Program> {
            let i = self::index(cfg).ok()?;
            CACHES.program(NAME, &PACK, i, &META[i]).ok().cloned()
        }

        /// Everything a launcher needs for `cfg`: source, entry point, block size, shared memory.
        pub fn kernel(cfg: &Config) -> ::core::option::Option<::tilus::macro_support::KernelInfo> {
            let i = self::index(cfg).ok()?;
            CACHES.info(NAME, cfg, &PACK, i, &META[i])
        }

        #[doc = #interpret_doc]
        pub fn interpret(cfg: &Config, #(#host_args),*) -> ::core::result::Result<(), ::tilus::macro_support::KernelError> {
            self::interpret_ordered(cfg, &::tilus::core::interp::BlockOrder::Launch, #(#arg_names),*)
        }

        /// [`interpret`] with the grid's blocks run in `order` (each to its end before the next
        /// starts): a kernel whose blocks communicate through global memory (a split-k
        /// semaphore) must give the same result in every order.
        pub fn interpret_ordered(cfg: &Config, order: &::tilus::core::interp::BlockOrder, #(#host_args),*) -> ::core::result::Result<(), ::tilus::macro_support::KernelError> {
            let i = self::index(cfg)?;
            let program = CACHES.program(NAME, &PACK, i, &META[i])?;
            let generated = CACHES.launch_spec(NAME, &PACK, &META[i])?;
            let checks = [#(#checks_host),*];
            if !::tilus::macro_support::check_host_args(NAME, cfg, program, &generated, &checks)? {
                return ::core::result::Result::Ok(());
            }
            let mut args: [::tilus::core::interp::Arg; #nparams] = [#(#to_args),*];
            ::tilus::core::interp::run_ordered(program, &mut args, order).map_err(|e| {
                ::tilus::macro_support::KernelError::interp(NAME, cfg, SITES, ::core::file!(), e)
            })?;
            #(#write_back)*
            ::core::result::Result::Ok(())
        }

        #[doc = #launch_doc]
        pub fn launch(ctx: &::tilus::runtime::Context, cfg: &Config, #(#device_args),*) -> ::core::result::Result<(), ::tilus::macro_support::KernelError> {
            self::launch_on(ctx, ::core::option::Option::None, cfg, #(#arg_names),*)
        }

        #[doc = #launch_on_doc]
        pub fn launch_on(
            ctx: &::tilus::runtime::Context,
            stream: ::core::option::Option<&::std::sync::Arc<::tilus::runtime::CudaStream>>,
            cfg: &Config,
            #(#device_args),*
        ) -> ::core::result::Result<(), ::tilus::macro_support::KernelError> {
            let how = ::tilus::gpu::LaunchOptions { stream, dependent: false };
            self::launch_with(ctx, how, cfg, #(#arg_names),*)
        }

        #[doc = #launch_with_doc]
        pub fn launch_with(
            ctx: &::tilus::runtime::Context,
            how: ::tilus::gpu::LaunchOptions<'_>,
            cfg: &Config,
            #(#device_args),*
        ) -> ::core::result::Result<(), ::tilus::macro_support::KernelError> {
            let i = self::index(cfg)?;
            let kernel = CACHES.kernel(NAME, cfg, &PACK, i, &META[i])?;
            kernel
                .launch_with(ctx, how, ::std::vec![#(#gpu_args),*])
                .map_err(|e| ::tilus::macro_support::KernelError::launch(NAME, cfg, e))
        }
    };
    wrap(f, sig, body)
}

/// The API of a lazy kernel that verified: the same names, instantiated at run time for any
/// `Config` (`source`, `program` and `kernel` return `Result` instead of `Option`, and
/// `translate` and `instance` are added).
pub fn generate_lazy(
    f: &ItemFn,
    sig: &KernelSig,
    space: &Space,
    source: TokenStream,
) -> TokenStream {
    let fields = fields(sig, space);
    let config = config_items(sig, &fields);
    let points = space_points(space);
    let nvalues = fields.len();
    let values = fields.iter().map(|(id, is_dtype)| {
        let name = id.to_string();
        if *is_dtype {
            quote_spanned!(Span::mixed_site()=> (#name, ::tilus::lang::lazy::Value::DType(cfg.#id)))
        } else {
            quote_spanned!(Span::mixed_site()=> (#name, ::tilus::lang::lazy::Value::Tile(cfg.#id)))
        }
    });
    let a = args(sig);
    let (host_args, device_args) = (&a.host, &a.device);
    let nparams = sig.params.len();
    let arg_names: Vec<&Ident> = sig.params.iter().map(|p| &p.name).collect();
    let ArgCode {
        to_args,
        write_back,
        checks_host,
        gpu_args,
    } = arg_code(sig);
    let launch_with_doc = LAUNCH_WITH_DOC;
    let body = quote_spanned! {Span::mixed_site()=>
        #config

        /// The configurations checked at build time, in the order the autotuner sees them. A
        /// lazy kernel also runs any other configuration (instantiated on first use).
        pub const SPACE: &[Config] = &[#(#points),*];

        static SOURCE: ::tilus::lang::lazy::LazySource = #source;
        static CACHE: ::tilus::macro_support::LazyCache<Config> =
            ::tilus::macro_support::LazyCache::new();

        fn values(cfg: &Config) -> [(&'static str, ::tilus::lang::lazy::Value); #nvalues] {
            [#(#values),*]
        }

        /// Translate the kernel for `cfg` (any tile values, any dtypes) at run time; the
        /// program is not verified and not cached.
        pub fn translate(cfg: &Config) -> ::core::result::Result<::tilus::core::ir::Program, ::tilus::macro_support::KernelError> {
            ::tilus::macro_support::lazy_translate(NAME, &SOURCE, cfg, &self::values(cfg))
        }

        /// The instantiated configuration `cfg`: translated and verified on first use, then
        /// cached for the life of the process (its CUDA source and launcher too).
        pub fn instance(cfg: &Config) -> ::core::result::Result<&'static ::tilus::macro_support::LazyInstance, ::tilus::macro_support::KernelError> {
            CACHE.get(NAME, &SOURCE, cfg, &self::values(cfg))
        }

        /// The verified VM program of `cfg`, instantiated on first use.
        pub fn program(cfg: &Config) -> ::core::result::Result<::tilus::core::ir::Program, ::tilus::macro_support::KernelError> {
            ::core::result::Result::Ok(self::instance(cfg)?.program().clone())
        }

        /// The CUDA C source generated for `cfg`, instantiated on first use.
        pub fn source(cfg: &Config) -> ::core::result::Result<&'static str, ::tilus::macro_support::KernelError> {
            self::instance(cfg)?.source(NAME, cfg)
        }

        /// Everything a launcher needs for `cfg`: source, entry point, block size, shared memory.
        pub fn kernel(cfg: &Config) -> ::core::result::Result<::tilus::macro_support::KernelInfo, ::tilus::macro_support::KernelError> {
            self::instance(cfg)?.info(NAME, cfg)
        }

        /// Run the kernel on host buffers through the CPU interpreter, as for an eager kernel
        /// (`cfg` is instantiated on first use).
        pub fn interpret(cfg: &Config, #(#host_args),*) -> ::core::result::Result<(), ::tilus::macro_support::KernelError> {
            self::interpret_ordered(cfg, &::tilus::core::interp::BlockOrder::Launch, #(#arg_names),*)
        }

        /// [`interpret`] with the grid's blocks run in `order` (each to its end before the next
        /// starts): a kernel whose blocks communicate through global memory (a split-k
        /// semaphore) must give the same result in every order.
        pub fn interpret_ordered(cfg: &Config, order: &::tilus::core::interp::BlockOrder, #(#host_args),*) -> ::core::result::Result<(), ::tilus::macro_support::KernelError> {
            let instance = self::instance(cfg)?;
            let program = instance.program();
            let generated = instance.launch_spec(NAME, cfg)?;
            let checks = [#(#checks_host),*];
            if !::tilus::macro_support::check_host_args(NAME, cfg, program, generated, &checks)? {
                return ::core::result::Result::Ok(());
            }
            let mut args: [::tilus::core::interp::Arg; #nparams] = [#(#to_args),*];
            ::tilus::core::interp::run_ordered(program, &mut args, order).map_err(|e| {
                ::tilus::macro_support::KernelError::interp(NAME, cfg, instance.sites(), SOURCE.file, e)
            })?;
            #(#write_back)*
            ::core::result::Result::Ok(())
        }

        /// Launch the kernel on `ctx`'s stream through the one launcher, as for an eager
        /// kernel; `cfg` is instantiated and its CUDA source generated on first use.
        pub fn launch(ctx: &::tilus::runtime::Context, cfg: &Config, #(#device_args),*) -> ::core::result::Result<(), ::tilus::macro_support::KernelError> {
            self::launch_on(ctx, ::core::option::Option::None, cfg, #(#arg_names),*)
        }

        /// [`launch`] on `stream` (a stream of `ctx`), or on `ctx`'s own stream when `None`.
        pub fn launch_on(
            ctx: &::tilus::runtime::Context,
            stream: ::core::option::Option<&::std::sync::Arc<::tilus::runtime::CudaStream>>,
            cfg: &Config,
            #(#device_args),*
        ) -> ::core::result::Result<(), ::tilus::macro_support::KernelError> {
            let how = ::tilus::gpu::LaunchOptions { stream, dependent: false };
            self::launch_with(ctx, how, cfg, #(#arg_names),*)
        }

        #[doc = #launch_with_doc]
        pub fn launch_with(
            ctx: &::tilus::runtime::Context,
            how: ::tilus::gpu::LaunchOptions<'_>,
            cfg: &Config,
            #(#device_args),*
        ) -> ::core::result::Result<(), ::tilus::macro_support::KernelError> {
            let kernel = self::instance(cfg)?.kernel(NAME, cfg)?;
            kernel
                .launch_with(ctx, how, ::std::vec![#(#gpu_args),*])
                .map_err(|e| ::tilus::macro_support::KernelError::launch(NAME, cfg, e))
        }
    };
    wrap(f, sig, body)
}

/// The same names, with an empty space: used when the kernel has errors.
pub fn fallback(f: &ItemFn, sig: &KernelSig, space: &Space, lazy: bool) -> TokenStream {
    let fields = fields(sig, space);
    let config = config_items(sig, &fields);
    let a = args(sig);
    let (host_args, device_args, generics) = (&a.host, &a.device, &a.generics);
    // The lookups have the signatures of the kernel's mode, so callers type-check either way.
    let lookups = if lazy {
        quote_spanned! {Span::mixed_site()=>
            pub fn translate(cfg: &Config) -> ::core::result::Result<::tilus::core::ir::Program, ::tilus::macro_support::KernelError> {
                ::core::result::Result::Err(not_built(cfg))
            }

            pub fn program(cfg: &Config) -> ::core::result::Result<::tilus::core::ir::Program, ::tilus::macro_support::KernelError> {
                ::core::result::Result::Err(not_built(cfg))
            }

            pub fn instance(cfg: &Config) -> ::core::result::Result<&'static ::tilus::macro_support::LazyInstance, ::tilus::macro_support::KernelError> {
                ::core::result::Result::Err(not_built(cfg))
            }

            pub fn source(cfg: &Config) -> ::core::result::Result<&'static str, ::tilus::macro_support::KernelError> {
                ::core::result::Result::Err(not_built(cfg))
            }

            pub fn kernel(cfg: &Config) -> ::core::result::Result<::tilus::macro_support::KernelInfo, ::tilus::macro_support::KernelError> {
                ::core::result::Result::Err(not_built(cfg))
            }
        }
    } else {
        quote_spanned! {Span::mixed_site()=>
            pub fn source(cfg: &Config) -> ::core::option::Option<&'static str> {
                ::core::option::Option::None
            }

            pub fn program(cfg: &Config) -> ::core::option::Option<::tilus::core::ir::Program> {
                ::core::option::Option::None
            }

            pub fn kernel(cfg: &Config) -> ::core::option::Option<::tilus::macro_support::KernelInfo> {
                ::core::option::Option::None
            }
        }
    };
    let body = quote_spanned! {Span::mixed_site()=>
        #config

        /// Empty: the kernel did not compile.
        pub const SPACE: &[Config] = &[];

        fn not_built(cfg: &Config) -> ::tilus::macro_support::KernelError {
            ::tilus::macro_support::KernelError::NotInSpace {
                kernel: NAME,
                config: ::std::string::ToString::to_string(cfg),
            }
        }

        #lookups

        pub fn interpret<#(#generics),*>(cfg: &Config, #(#host_args),*) -> ::core::result::Result<(), ::tilus::macro_support::KernelError> {
            ::core::result::Result::Err(not_built(cfg))
        }

        pub fn interpret_ordered<#(#generics),*>(cfg: &Config, order: &::tilus::core::interp::BlockOrder, #(#host_args),*) -> ::core::result::Result<(), ::tilus::macro_support::KernelError> {
            ::core::result::Result::Err(not_built(cfg))
        }

        pub fn launch<#(#generics),*>(ctx: &::tilus::runtime::Context, cfg: &Config, #(#device_args),*) -> ::core::result::Result<(), ::tilus::macro_support::KernelError> {
            ::core::result::Result::Err(not_built(cfg))
        }

        pub fn launch_on<#(#generics),*>(
            ctx: &::tilus::runtime::Context,
            stream: ::core::option::Option<&::std::sync::Arc<::tilus::runtime::CudaStream>>,
            cfg: &Config,
            #(#device_args),*
        ) -> ::core::result::Result<(), ::tilus::macro_support::KernelError> {
            ::core::result::Result::Err(not_built(cfg))
        }

        pub fn launch_with<#(#generics),*>(
            ctx: &::tilus::runtime::Context,
            how: ::tilus::gpu::LaunchOptions<'_>,
            cfg: &Config,
            #(#device_args),*
        ) -> ::core::result::Result<(), ::tilus::macro_support::KernelError> {
            ::core::result::Result::Err(not_built(cfg))
        }

    };
    wrap(f, sig, body)
}
