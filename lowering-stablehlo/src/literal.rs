//! Spelling of constants: element literals (`1.5`, `0x7FC00000`, `true`, `-128`) and dense
//! payloads (`"0x0000803F..."`).
//!
//! MLIR reads a decimal float literal as a double and rounds it to the element type, so a
//! decimal is written only when that path gives back the exact bits; otherwise (NaN, infinities,
//! values whose short form would round differently) the element's bit pattern is written in hex,
//! which MLIR takes as the raw bits. Non-splat payloads are the IR's little-endian bytes in hex
//! (MLIR's raw dense format on little-endian hosts; `i1` is one byte per element).

use std::fmt::Write;
use tpuc_ir::{DType, Scalar};

/// A value for a constant built by the emitter, resolved per dtype.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) enum Lit {
    F(f64),
    I(i64),
    B(bool),
    /// The smallest value ([`DType::lowest`]): -inf for floats with infinities, the lowest
    /// finite value otherwise, MIN for integers, false for bool.
    Lowest,
    /// The largest value ([`DType::highest`]): +inf, the highest finite, MAX, true.
    Highest,
    /// All bits set: -1 / MAX / true (identity of `and`).
    AllOnes,
}

/// Little-endian bytes of `lit` as one element of `dt`.
pub(crate) fn lit_bytes(lit: Lit, dt: DType) -> Vec<u8> {
    match lit {
        Lit::F(f) => Scalar::Float(f).to_bytes(dt),
        Lit::I(i) => Scalar::Int(i).to_bytes(dt),
        Lit::B(b) => Scalar::Bool(b).to_bytes(dt),
        Lit::AllOnes => vec![if dt == DType::Bool { 1 } else { 0xFF }; dt.size_bytes()],
        Lit::Lowest => dt.lowest().to_bytes(dt),
        Lit::Highest => dt.highest().to_bytes(dt),
    }
}

/// Writes one element of `dt` given by its little-endian bytes, in the form MLIR's dense
/// literal parser reads back to the same bits.
pub(crate) fn write_elem(out: &mut String, scratch: &mut String, dt: DType, raw: &[u8]) {
    match Scalar::from_bytes(dt, raw) {
        Scalar::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        Scalar::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Scalar::UInt(u) => {
            let _ = write!(out, "{u}");
        }
        Scalar::Float(_) if dt.is_complex() => {
            // One element in hex is a splat of that element (real and imaginary parts).
            out.push_str("\"0x");
            write_hex(out, raw);
            out.push('"');
        }
        Scalar::Float(f) => {
            if f.is_finite() && exact_decimal(scratch, dt, f, raw) {
                out.push_str(scratch);
            } else {
                out.push_str("0x");
                // The bit pattern as one big-endian integer.
                write_hex(
                    out,
                    &raw.iter()
                        .rev()
                        .copied()
                        .collect::<smallvec::SmallVec<[u8; 8]>>(),
                );
            }
        }
    }
}

/// Puts into `scratch` the shortest decimal of `f` that MLIR (double parse, then round to `dt`)
/// reads back as exactly `raw`; false if there is none that short.
fn exact_decimal(scratch: &mut String, dt: DType, f: f64, raw: &[u8]) -> bool {
    scratch.clear();
    if dt == DType::F64 {
        let _ = write!(scratch, "{f:?}");
    } else {
        // f16, bf16 and f8 values are exact f32 values.
        let _ = write!(scratch, "{:?}", f as f32);
    }
    // MLIR's lexer needs a `.` in a float literal (`1e20` would lex as an integer).
    if !scratch.contains('.') {
        match scratch.find('e') {
            Some(i) => scratch.insert_str(i, ".0"),
            None => scratch.push_str(".0"),
        }
    }
    match scratch.parse::<f64>() {
        Ok(d) => Scalar::Float(d).to_bytes(dt) == raw,
        Err(_) => false,
    }
}

/// Two uppercase hex digits per byte value.
const HEX2: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [DIGITS[i >> 4], DIGITS[i & 15]];
        i += 1;
    }
    t
};

/// Uppercase hex of `bytes`, in order, written in chunks (large weights go through here).
pub(crate) fn write_hex(out: &mut String, bytes: &[u8]) {
    out.reserve(bytes.len() * 2);
    let mut buf = [0u8; 16384];
    for chunk in bytes.chunks(buf.len() / 2) {
        for (pair, &b) in buf.chunks_exact_mut(2).zip(chunk) {
            pair.copy_from_slice(&HEX2[b as usize]);
        }
        out.push_str(std::str::from_utf8(&buf[..2 * chunk.len()]).expect("hex is ASCII"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spell(dt: DType, lit: Lit) -> String {
        let (mut out, mut scratch) = (String::new(), String::new());
        write_elem(&mut out, &mut scratch, dt, &lit_bytes(lit, dt));
        out
    }

    #[test]
    fn floats_are_exact() {
        assert_eq!(spell(DType::F32, Lit::F(1.0)), "1.0");
        assert_eq!(spell(DType::F32, Lit::F(-2.5)), "-2.5");
        assert_eq!(spell(DType::F32, Lit::F(0.1)), "0.1");
        assert_eq!(spell(DType::F32, Lit::F(1e20)), "1.0e20");
        assert_eq!(spell(DType::F32, Lit::F(-0.0)), "-0.0");
        assert_eq!(spell(DType::F32, Lit::Lowest), "0xFF800000");
        assert_eq!(spell(DType::F32, Lit::Highest), "0x7F800000");
        assert_eq!(spell(DType::F32, Lit::F(f64::NAN)), "0x7FC00000");
        assert_eq!(spell(DType::F64, Lit::F(0.1)), "0.1");
        assert_eq!(spell(DType::F64, Lit::Lowest), "0xFFF0000000000000");
        assert_eq!(spell(DType::F16, Lit::F(0.1)), "0.099975586");
        assert_eq!(spell(DType::F16, Lit::Lowest), "0xFC00");
        assert_eq!(spell(DType::BF16, Lit::F(1.0)), "1.0");
        assert_eq!(spell(DType::BF16, Lit::Highest), "0x7F80");
        assert_eq!(spell(DType::F8E4M3FN, Lit::Lowest), "-448.0");
        assert_eq!(spell(DType::F8E5M2, Lit::Lowest), "0xFC");
        // A subnormal f32: the shortest form reads back exactly.
        let tiny = f32::from_bits(1) as f64;
        assert_eq!(spell(DType::F32, Lit::F(tiny)), "1.0e-45");
    }

    #[test]
    fn ints_and_bools() {
        assert_eq!(spell(DType::I64, Lit::Lowest), "-9223372036854775808");
        assert_eq!(spell(DType::I32, Lit::Highest), "2147483647");
        assert_eq!(spell(DType::U8, Lit::Highest), "255");
        assert_eq!(spell(DType::U64, Lit::AllOnes), "18446744073709551615");
        assert_eq!(spell(DType::I16, Lit::AllOnes), "-1");
        assert_eq!(spell(DType::Bool, Lit::AllOnes), "true");
        assert_eq!(spell(DType::Bool, Lit::Lowest), "false");
        assert_eq!(spell(DType::I8, Lit::I(-128)), "-128");
    }

    #[test]
    fn every_f16_and_bf16_value_round_trips() {
        for dt in [DType::F16, DType::BF16] {
            for bits in 0..=u16::MAX {
                let raw = bits.to_le_bytes();
                let (mut out, mut scratch) = (String::new(), String::new());
                write_elem(&mut out, &mut scratch, dt, &raw);
                let back: Vec<u8> = if let Some(h) = out.strip_prefix("0x") {
                    u16::from_str_radix(h, 16).unwrap().to_le_bytes().to_vec()
                } else {
                    Scalar::Float(out.parse::<f64>().unwrap()).to_bytes(dt)
                };
                assert_eq!(back, raw, "{dt} bits {bits:#06x} spelled {out}");
            }
        }
    }
}
