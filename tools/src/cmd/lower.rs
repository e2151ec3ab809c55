//! `tpuc lower`: a program to StableHLO MLIR text (or tpuc IR with `--emit ir`), with
//! `--timing` for how long each step took.

use clap::Args;
use std::path::PathBuf;

use crate::args::{EmitKind, PassRunArgs};
use crate::common::{output_text, write_output, Failure};

#[derive(Args)]
pub struct LowerArgs {
    /// The program: a .pt2 archive or a torch.export model.json.
    model: PathBuf,
    /// Write the output here instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// What to write.
    #[arg(long, value_enum, default_value = "stablehlo")]
    emit: EmitKind,
    /// Print how long import, each pass and emission took, to stderr.
    #[arg(long)]
    timing: bool,
    #[command(flatten)]
    passes: PassRunArgs,
}

pub fn run(a: LowerArgs) -> Result<(), Failure> {
    let lowered = a.passes.lower(&a.model, a.emit)?;
    if a.timing {
        let t = &lowered.timings;
        eprintln!("import: {:.3} ms", t.import.as_secs_f64() * 1e3);
        for (p, d) in &t.passes {
            eprintln!("pass {p}: {:.3} ms", d.as_secs_f64() * 1e3);
        }
        eprintln!("emit: {:.3} ms", t.emit.as_secs_f64() * 1e3);
    }
    write_output(a.output.as_deref(), &output_text(lowered))
}
