//! Shared test helpers: .npy reading, the fixture manifest, the reference interpreter.
#![allow(dead_code, clippy::needless_range_loop, clippy::neg_cmp_op_on_partial_ord)]

pub mod interp;

use interp::T;
use std::path::{Path, PathBuf};
use tpuc_ir::DType;

/// The repository's `tests/fixtures` folder.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// The crate's own op-coverage fixtures.
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// A parsed .npy file.
pub fn read_npy(path: &Path) -> T {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&b[..6], b"\x93NUMPY", "{}: not .npy", path.display());
    let (hlen, start) = if b[6] == 1 { (u16::from_le_bytes([b[8], b[9]]) as usize, 10) } else { (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12) };
    let header = std::str::from_utf8(&b[start..start + hlen]).unwrap();
    let descr = header.split("'descr':").nth(1).unwrap().split('\'').nth(1).unwrap();
    assert!(!header.contains("'fortran_order': True"));
    let shape_txt = header.split("'shape':").nth(1).unwrap();
    let shape_txt = &shape_txt[shape_txt.find('(').unwrap() + 1..shape_txt.find(')').unwrap()];
    let shape: Vec<usize> = shape_txt.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect();
    let data = &b[start + hlen..];
    let (dtype, vals): (DType, Vec<f64>) = match descr {
        "<f4" => (DType::F32, data.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect()),
        "<f8" => (DType::F64, data.chunks(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()),
        "<f2" => (DType::F16, data.chunks(2).map(|c| half::f16::from_le_bytes(c.try_into().unwrap()).to_f64()).collect()),
        "<i8" => (DType::I64, data.chunks(8).map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f64).collect()),
        "<i4" => (DType::I32, data.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f64).collect()),
        "<i2" => (DType::I16, data.chunks(2).map(|c| i16::from_le_bytes(c.try_into().unwrap()) as f64).collect()),
        "|i1" => (DType::I8, data.iter().map(|&c| c as i8 as f64).collect()),
        "|u1" => (DType::U8, data.iter().map(|&c| c as f64).collect()),
        "|b1" => (DType::Bool, data.iter().map(|&c| f64::from(c)).collect()),
        other => panic!("{}: dtype {other}", path.display()),
    };
    assert_eq!(vals.len(), shape.iter().product::<usize>(), "{}", path.display());
    T { dtype, shape, data: vals }
}

/// What an imported module promises beyond verifying (which the import checks itself): its
/// text parses back into a module that verifies and prints the same text.
pub fn check_text_roundtrip(m: &tpuc_ir::Module) {
    let text = tpuc_ir::print_module(m);
    let parsed = tpuc_ir::parse_module(&text).unwrap_or_else(|e| panic!("the imported module does not parse back: {e}\n{text}"));
    if let Err(errs) = tpuc_ir::verify(&parsed) {
        let errs: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        panic!("the imported module does not verify after a text round trip:\n{}\n{text}", errs.join("\n"));
    }
    let again = tpuc_ir::print_module(&parsed);
    if again != text {
        let line = text.lines().zip(again.lines()).position(|(a, b)| a != b).unwrap_or(0);
        panic!(
            "the imported module prints differently after a text round trip, first at line {}:\n  {}\n  {}",
            line + 1,
            text.lines().nth(line).unwrap_or(""),
            again.lines().nth(line).unwrap_or("")
        );
    }
}

/// A weight as an interpreter value.
pub fn tensor_of(w: &tpuc_ir::TensorData) -> T {
    let shape: Vec<usize> = w.ty.static_dims().unwrap().iter().map(|&d| d as usize).collect();
    let n: usize = shape.iter().product();
    T { dtype: w.ty.dtype, shape, data: (0..n).map(|i| w.element(i).as_f64()).collect() }
}

/// Compares with numpy's allclose rule; integers and bools must match exactly.
pub fn check_close(label: &str, got: &T, want: &T, rtol: f64, atol: f64) -> Result<f64, String> {
    if got.shape != want.shape {
        return Err(format!("{label}: shape {:?}, expected {:?}", got.shape, want.shape));
    }
    let mut worst = 0.0f64;
    for (i, (&g, &w)) in got.data.iter().zip(&want.data).enumerate() {
        if w.is_nan() && g.is_nan() {
            continue;
        }
        if w.is_infinite() || !want.dtype.is_float() {
            if g != w {
                return Err(format!("{label}: element {i} is {g}, expected {w}"));
            }
            continue;
        }
        let d = (g - w).abs();
        worst = worst.max(d);
        if !(d <= atol + rtol * w.abs()) {
            return Err(format!("{label}: element {i} is {g}, expected {w} (|diff| {d:.3e})"));
        }
    }
    Ok(worst)
}

/// One manifest entry.
pub struct Entry {
    pub name: String,
    pub file: PathBuf,
    pub kind: String,
    pub inputs: Vec<Option<PathBuf>>,
    pub expected: Vec<Option<PathBuf>>,
    pub rtol: f64,
    pub atol: f64,
}

pub fn manifest(dir: &Path) -> Vec<Entry> {
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let paths = |x: &serde_json::Value| -> Vec<Option<PathBuf>> {
        x.as_array().unwrap().iter().map(|p| p.as_str().map(|s| dir.join(s))).collect()
    };
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| Entry {
            name: e["name"].as_str().unwrap().to_string(),
            file: dir.join(e["file"].as_str().unwrap()),
            kind: e["kind"].as_str().unwrap_or("inference").to_string(),
            inputs: paths(&e["inputs"]),
            expected: paths(&e["expected"]),
            rtol: e["rtol"].as_f64().unwrap_or(1e-5),
            atol: e["atol"].as_f64().unwrap_or(1e-6),
        })
        .collect()
}

/// Runs an imported program on the entry's inputs and compares every output.
pub fn run_and_compare(imp: &tpuc_frontend_fx::Imported, e: &Entry) -> Result<f64, String> {
    let f = imp.module.main_func().unwrap();
    let mut user = e.inputs.iter();
    let mut args = Vec::new();
    for info in &f.args {
        if info.kind.is_weight() {
            let w = imp.weights.get(&info.name).ok_or_else(|| format!("no weight {}", info.name))?;
            args.push(tensor_of(w));
        } else {
            let p = user.next().ok_or("too few inputs")?.clone().ok_or("non-tensor input")?;
            args.push(read_npy(&p));
        }
    }
    let outs = interp::run(&imp.module, &args);
    let mut worst = 0.0f64;
    if imp.outputs.len() != e.expected.len() {
        return Err(format!("{} outputs, expected {}", imp.outputs.len(), e.expected.len()));
    }
    for (i, (slot, want)) in imp.outputs.iter().zip(&e.expected).enumerate() {
        match (slot, want) {
            (tpuc_frontend_fx::OutputSlot::Result(k), Some(p)) => {
                let w = read_npy(p);
                worst = worst.max(check_close(&format!("{} output {i}", e.name), &outs[*k], &w, e.rtol, e.atol)?);
            }
            (tpuc_frontend_fx::OutputSlot::Const(tpuc_frontend_fx::ConstValue::None), None) => {}
            (s, w) => return Err(format!("output {i}: {s:?} vs expected {w:?}")),
        }
    }
    Ok(worst)
}
