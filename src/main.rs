//! The `tilus` command-line tool: inspect layouts and dtypes, emit kernels, check the setup.

mod cli;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "tilus", version, about = "Tilus: low-precision GPU kernels")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show a register layout, e.g. `tilus layout 'local(2,1).spatial(8,4)'`.
    Layout {
        /// Layout expression.
        expr: String,
        /// Print `{"shape","threads","locals","map"}` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a data type and the value of each of its bit patterns, e.g. `tilus dtype f6e3m2`.
    Dtype {
        /// Type name: u1..u8, i2..i8, fNeEmM, f8e4m3, f8e5m2, f16, bf16, f32, i32, u32.
        name: String,
        /// Print `{"name","bits","kind","values"}` as JSON; `values` is null for 16/32-bit types,
        /// and NaN/inf print as the strings "nan", "inf", "-inf".
        #[arg(long)]
        json: bool,
    },
    /// Print the CUDA C generated for a kernel, e.g. `tilus emit fig14 --config STAGES=4`.
    #[command(after_help = cli::emit::KERNELS_HELP)]
    Emit {
        /// Kernel name: fig2, fig8, fig14 or qmatmul (aliases and keys below).
        kernel: String,
        /// A configuration value `KEY=VALUE` (repeatable, or comma-separated).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        config: Vec<String>,
        /// Print NVRTC's PTX for this architecture (e.g. sm_90a) instead of the CUDA C.
        #[arg(long = "ptx", value_name = "ARCH")]
        ptx: Option<String>,
        /// Print the verified VM program (the IR) instead of the CUDA C.
        #[arg(long, conflicts_with = "ptx")]
        ir: bool,
    },
    /// GPU benchmarks: copy bandwidth, cuBLAS f16, the quantized matmul, sweeps and autotuning.
    #[command(subcommand)]
    Bench(cli::bench::BenchCommand),
    /// Quantize the 2-D `*.weight` tensors of a safetensors file (PyTorch's `[out, in]`) into
    /// the tilus format, or convert a GPTQ / AWQ checkpoint (`--from`) without re-quantizing.
    ///
    /// A `*.weight` tensor is quantized when it is 2-D, f32/f16/bf16 and --group divides its
    /// input dimension; every other tensor is copied as is (each one is listed).
    Quantize {
        /// The input safetensors file.
        #[arg(value_name = "INPUT")]
        input: std::path::PathBuf,
        /// The tilus file to write.
        #[arg(value_name = "OUTPUT")]
        output: std::path::PathBuf,
        /// Weight type: u1..u8 (with zero points), i2..i8, fNeEmM, f8e4m3, f8e5m2.
        #[arg(long)]
        wdtype: Option<String>,
        /// Rows of the input dimension per scale group (default 128); 0 for per-channel.
        #[arg(long)]
        group: Option<usize>,
        /// Scale (and zero point) type: f16 (default) or bf16.
        #[arg(long = "scale-dtype")]
        scale_dtype: Option<String>,
        /// Convert a `gptq` or `awq` checkpoint instead (codes, scales and zeros kept exactly).
        #[arg(long)]
        from: Option<String>,
        /// With --from gptq: zero points are stored as is (`checkpoint_format: gptq_v2`), not
        /// minus one (v1, the default unless the file's metadata says gptq_v2).
        #[arg(long = "gptq-v2")]
        gptq_v2: bool,
    },
    /// Show what a safetensors file holds: its format (tilus, gptq, awq or plain), each
    /// quantized layer (dtype, shape, group, bytes) and the other tensors.
    Inspect {
        /// The safetensors file.
        file: std::path::PathBuf,
        /// Print `{"file","format","layers":[..],"tensors":[..]}` as JSON.
        #[arg(long)]
        json: bool,
        /// Also import every layer and print the time each took.
        #[arg(long)]
        time: bool,
    },
    /// Check driver, GPU, NVRTC, CUDA headers and cache directory: each OK or what to do.
    ///
    /// Exit status 1 if a check failed (with --strict, also on warnings), else 0.
    Doctor {
        /// Treat warnings (e.g. no GPU on this machine) as failures.
        #[arg(long)]
        strict: bool,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are not errors.
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match &cli.command {
        Command::Layout { expr, json } => cli::layout::run(expr, *json),
        Command::Dtype { name, json } => cli::dtype::run(name, *json),
        Command::Emit {
            kernel,
            config,
            ptx,
            ir,
        } => {
            let output = match (ptx, ir) {
                (Some(arch), _) => cli::emit::Output::Ptx(arch),
                (None, true) => cli::emit::Output::Ir,
                (None, false) => cli::emit::Output::Cuda,
            };
            cli::emit::run(kernel, config, output)
        }
        Command::Bench(cmd) => cli::bench::run(cmd),
        Command::Quantize {
            input,
            output,
            wdtype,
            group,
            scale_dtype,
            from,
            gptq_v2,
        } => cli::checkpoint::quantize(&cli::checkpoint::QuantizeArgs {
            input,
            output,
            wdtype: wdtype.as_deref(),
            group: *group,
            scale_dtype: scale_dtype.as_deref(),
            from: from.as_deref(),
            gptq_v2: *gptq_v2,
        }),
        Command::Inspect { file, json, time } => cli::checkpoint::inspect(file, *json, *time),
        Command::Doctor { strict } => return cli::doctor::run(*strict),
    };
    match result {
        Ok(text) => {
            // A closed pipe (`tilus emit ... | head`) is not an error worth a panic.
            use std::io::Write;
            let _ = writeln!(std::io::stdout(), "{text}");
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("error: {}", msg.lines().collect::<Vec<_>>().join("; "));
            ExitCode::from(2)
        }
    }
}
