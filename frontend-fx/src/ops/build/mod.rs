//! The floor of the op families: the node context ([`Ctx`]) and the typed builders more than one
//! family uses (slices, gathers and scatters, reductions and scans, the random generator, the FFT
//! and solver helpers, data-dependent sizes). A family imports the floor (`use
//! crate::ops::build::*`) and never another family; the floor imports nothing above it. A
//! builder used by one family stays in that family.

mod arith;
mod complex;
mod ctx;
pub mod defaults;
mod index;
mod linalg;
mod random;
mod reduce;
mod shape;
mod sizes;

pub use arith::*;
pub use complex::*;
pub use ctx::*;
pub use index::*;
pub use linalg::*;
pub use random::*;
pub use reduce::*;
pub use shape::*;
pub use sizes::*;
