//! tpuc-driver
