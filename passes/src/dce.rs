//! `dce`: dead-code elimination.
//!
//! Needs: a verified module.
//! Guarantees: every pure op none of whose results is used (transitively) is removed, in
//! function bodies and in op regions; a removed `composite` takes its region's ops with it.
//! Function arguments and results are untouched (callers rely on the signature). Changed
//! when anything was removed.

use crate::{Pass, PassError};
use tpuc_ir::Module;

pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        crate::PassId::Dce.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        Ok(crate::util::remove_dead(m))
    }
}
