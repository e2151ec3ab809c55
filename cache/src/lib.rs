//! tpuc-cache
