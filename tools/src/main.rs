//! `tpuc`: compile PyTorch programs (torch.export `.pt2` archives or their `model.json`) to
//! StableHLO.
//!
//! Exit codes: 0 success, 1 user error (bad input, unsupported op, bad option), 2 internal
//! error (a tpuc bug).
//!
//! This file holds the command line and the entry point; each subcommand lives in `cmd/`, the
//! flag groups they share in `args.rs` and `buckets.rs`, shared helpers in `common.rs` and the
//! thread pool in `pool.rs`.

mod args;
mod buckets;
mod cmd;
mod common;
mod pool;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

use cmd::cache::CacheCommand;
use cmd::compile::CompileArgs;
use cmd::import::ImportArgs;
use cmd::lower::LowerArgs;
use cmd::opt::OptArgs;
use cmd::plan_buckets::PlanBucketsArgs;
use cmd::run::RunArgs;
use common::Failure;

#[derive(Parser)]
#[command(
    name = "tpuc",
    version,
    about = "Compile PyTorch programs (torch.export .pt2 archives) to StableHLO for XLA / TPU",
    long_about = "Compile PyTorch programs to StableHLO.\n\n\
        MODEL is what `torch.export.save(ep, \"model.pt2\")` writes (as exported, or after \
        `ep.run_decompositions()`), or the bare `model.json` from inside such an archive.\n\n\
        Exit codes: 0 success, 1 user error (bad input, unsupported op, bad option), 2 internal error.",
    after_help = "Examples:\n  tpuc import model.pt2\n  tpuc lower model.pt2 -o model.mlir\n  tpuc opt model.pt2 --passes canonicalize,fuse --emit ir\n  tpuc compile model.pt2 --target tpu --topology v5e:2x2 -o model.v5e.xla\n  tpuc run model.pt2 --inputs x.npy --out-dir out/\n  tpuc plan-buckets model.pt2\n  tpuc plugins"
)]
struct Cli {
    /// More logging (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Import a program and print its tpuc IR.
    Import(ImportArgs),
    /// Lower a program to StableHLO MLIR text (or to tpuc IR with --emit ir).
    Lower(LowerArgs),
    /// Run IR passes on a program (a chosen list with --passes, else the default pipeline)
    /// and print the IR (or StableHLO with --emit stablehlo). MODEL may also be tpuc IR text
    /// (a .tpuc file).
    Opt(OptArgs),
    /// Compile a program to an XLA executable with a PJRT plugin (CPU here, or a TPU topology
    /// without a TPU) and write the serialized executable.
    Compile(CompileArgs),
    /// Compile and run a program on the CPU plugin with inputs from .npy files.
    Run(RunArgs),
    /// List the PJRT plugins tpuc finds: target, path, PJRT API version, platform (exit 1 when
    /// none is found, with how to get each).
    Plugins,
    /// Inspect and manage the compilation cache (configured by TPUC_CACHE_* variables or the
    /// --cache-* flags).
    #[command(subcommand)]
    Cache(CacheCommand),
    /// Plan the bucket sizes of a program's symbolic dimensions (or of --range symbols) and print
    /// them with their padding waste, without compiling.
    PlanBuckets(PlanBucketsArgs),
}

fn main() -> ExitCode {
    // --help and --version succeed; every other command-line error is a usage error and exits
    // 1 like any other user error (clap's own code, 2, is tpuc's internal-error code).
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 1 } else { 0 });
        }
    };
    tpuc_driver::logging::init(cli.verbose);
    // A panic is a tpuc bug: report it as an internal error (exit 2), never as a crash trace only.
    let result = std::panic::catch_unwind(|| run(cli));
    match result {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(Failure::User(msg))) => {
            eprintln!("error: {msg}");
            ExitCode::from(1)
        }
        Ok(Err(Failure::Internal(msg))) => {
            eprintln!("internal error: {msg}");
            ExitCode::from(2)
        }
        Err(_) => {
            eprintln!("internal error: tpuc panicked (see the message above); please report it with the input");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Import(a) => cmd::import::run(a),
        Command::Opt(a) => cmd::opt::run(a),
        Command::Lower(a) => cmd::lower::run(a),
        Command::Compile(a) => cmd::compile::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Cache(c) => cmd::cache::run(c),
        Command::PlanBuckets(a) => cmd::plan_buckets::run(a),
        Command::Plugins => cmd::plugins::run(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
