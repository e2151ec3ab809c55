//! `tpuc opt`: run IR passes (a chosen list, or the default pipeline) on a program or tpuc IR
//! text and print the IR (or StableHLO).

use clap::Args;
use std::path::PathBuf;

use crate::args::{EmitKind, PassRunArgs};
use crate::common::{output_text, write_output, Failure};

#[derive(Args)]
pub struct OptArgs {
    /// The program: a .pt2 archive, a torch.export model.json, or tpuc IR text (.tpuc).
    model: PathBuf,
    /// Write the output here instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// What to write.
    #[arg(long, value_enum, default_value = "ir")]
    emit: EmitKind,
    #[command(flatten)]
    passes: PassRunArgs,
}

pub fn run(a: OptArgs) -> Result<(), Failure> {
    let lowered = a.passes.lower(&a.model, a.emit)?;
    write_output(a.output.as_deref(), &output_text(lowered))
}
