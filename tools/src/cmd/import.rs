//! `tpuc import`: read a program and print its tpuc IR.

use clap::Args;
use std::path::PathBuf;

use crate::common::{write_output, Failure};

#[derive(Args)]
pub struct ImportArgs {
    /// The program: a .pt2 archive or a torch.export model.json.
    model: PathBuf,
    /// Write the output here instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(a: ImportArgs) -> Result<(), Failure> {
    let imported = tpuc_driver::import(&a.model)?;
    write_output(a.output.as_deref(), &tpuc_ir::print_module(&imported.module))
}
