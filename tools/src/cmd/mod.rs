//! The subcommands, one module each: its flags and what it does.

pub mod cache;
pub mod compile;
pub mod import;
pub mod lower;
pub mod opt;
pub mod plan_buckets;
pub mod plugins;
pub mod run;
pub mod steps;
