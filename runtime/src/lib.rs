//! tpuc-runtime
