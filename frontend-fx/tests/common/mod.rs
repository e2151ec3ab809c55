//! Shared test helpers: .npy reading, the fixture manifest, running a program on the reference
//! evaluator (`tpuc_passes::eval`) and comparing with PyTorch eager's outputs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use tpuc_ir::{DType, TensorData, TensorType};

/// The repository's `tests/fixtures` folder.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// The crate's own op-coverage fixtures.
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// A parsed .npy file (little-endian, C order).
pub fn read_npy(path: &Path) -> TensorData {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&b[..6], b"\x93NUMPY", "{}: not .npy", path.display());
    let (hlen, start) = if b[6] == 1 { (u16::from_le_bytes([b[8], b[9]]) as usize, 10) } else { (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12) };
    let header = std::str::from_utf8(&b[start..start + hlen]).unwrap();
    let descr = header.split("'descr':").nth(1).unwrap().split('\'').nth(1).unwrap();
    assert!(!header.contains("'fortran_order': True"));
    let shape_txt = header.split("'shape':").nth(1).unwrap();
    let shape_txt = &shape_txt[shape_txt.find('(').unwrap() + 1..shape_txt.find(')').unwrap()];
    let shape: Vec<i64> = shape_txt.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect();
    let dtype = match descr {
        "<f4" => DType::F32,
        "<f8" => DType::F64,
        "<f2" => DType::F16,
        "<i8" => DType::I64,
        "<i4" => DType::I32,
        "<i2" => DType::I16,
        "|i1" => DType::I8,
        "|u1" => DType::U8,
        "|b1" => DType::Bool,
        other => panic!("{}: dtype {other}", path.display()),
    };
    let data = b[start + hlen..].to_vec();
    TensorData::new(TensorType::from_static(dtype, &shape), data.into()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The dims of a static value.
pub fn dims(t: &TensorData) -> Vec<i64> {
    t.ty.static_dims().expect("static")
}

/// Compares with numpy's allclose rule; integers and bools must match exactly. Only shapes must
/// be equal: the fixtures store f16 and bf16 outputs as f32.
pub fn check_close(label: &str, got: &TensorData, want: &TensorData, rtol: f64, atol: f64) -> Result<f64, String> {
    if dims(got) != dims(want) {
        return Err(format!("{label}: shape {:?}, expected {:?}", dims(got), dims(want)));
    }
    let (got, exact, want) = (tpuc_passes::eval::to_f64s(got), !want.ty.dtype.is_float(), tpuc_passes::eval::to_f64s(want));
    let mut worst = 0.0f64;
    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
        if w.is_nan() && g.is_nan() {
            continue;
        }
        if w.is_infinite() || exact {
            if g != w {
                return Err(format!("{label}: element {i} is {g}, expected {w}"));
            }
            continue;
        }
        let d = (g - w).abs();
        worst = worst.max(d);
        if d.is_nan() || d > atol + rtol * w.abs() {
            return Err(format!("{label}: element {i} is {g}, expected {w} (|diff| {d:.3e})"));
        }
    }
    Ok(worst)
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

/// Runs an imported program on the entry's inputs with the reference evaluator and compares
/// every output.
pub fn run_and_compare(imp: &tpuc_frontend_fx::Imported, e: &Entry) -> Result<f64, String> {
    let f = imp.module.main_func().unwrap();
    let mut user = e.inputs.iter();
    let mut args = Vec::new();
    for info in &f.args {
        if info.kind.is_weight() {
            let w = imp.weights.get(&info.name).ok_or_else(|| format!("no weight {}", info.name))?;
            args.push(w.clone());
        } else {
            let p = user.next().ok_or("too few inputs")?.clone().ok_or("non-tensor input")?;
            args.push(read_npy(&p));
        }
    }
    let outs = tpuc_passes::eval::run_reference(&imp.module, &args)?;
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
