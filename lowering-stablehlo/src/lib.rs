//! tpuc-lowering-stablehlo
