//! `tpuc plugins`: the PJRT plugins tpuc finds, and an error when there is none.

use crate::common::Failure;

pub fn run() -> Result<(), Failure> {
    let (lines, usable) = tpuc_driver::exec::plugin_report();
    for line in lines {
        println!("{line}");
    }
    if usable == 0 {
        return Err(Failure::User("no PJRT plugin found: tpuc can lower, but not compile or run".into()));
    }
    Ok(())
}
