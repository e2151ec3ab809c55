//! IR → IR passes and the pass manager that runs them.
//!
//! A pass is a value implementing [`Pass`]: it has a name, mutates a [`Module`] and says
//! whether it changed anything. [`PassManager`] runs an explicit, ordered list of passes and,
//! when asked (always in tests and debug builds), runs the verifier after each one, so a pass
//! that breaks an invariant is named at once. It can also print or dump the IR after each pass
//! and time them.

pub mod inline_weights;
mod manager;

pub use inline_weights::InlineWeights;
pub use manager::{Pass, PassError, PassManager, PassTiming};
