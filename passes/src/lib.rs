//! tpuc-passes
