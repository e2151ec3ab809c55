//! Reading the fixture manifests (tests/fixtures/manifest.json and tests/fixtures/passes/),
//! shared by the driver's test files.

use std::path::PathBuf;

pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// One program with its inputs and PyTorch eager's outputs.
pub struct Fixture {
    pub name: String,
    pub file: PathBuf,
    pub inputs: Vec<PathBuf>,
    /// `null` entries (outputs the program returns as None, e.g. unneeded gradients) are left out.
    pub expected: Vec<PathBuf>,
    pub rtol: f64,
    pub atol: f64,
}

/// The fixtures of `dir/manifest.json` with static shapes (symbolic ones do not lower yet).
pub fn read_manifest(dir: PathBuf) -> Vec<Fixture> {
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let list: serde_json::Value = serde_json::from_str(&text).unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .filter(|f| !f["name"].as_str().unwrap().contains("dynamic"))
        .map(|f| Fixture {
            name: f["name"].as_str().unwrap().to_string(),
            file: dir.join(f["file"].as_str().unwrap()),
            inputs: f["inputs"].as_array().unwrap().iter().map(|p| dir.join(p.as_str().unwrap())).collect(),
            expected: f["expected"].as_array().unwrap().iter().filter_map(|p| p.as_str()).map(|p| dir.join(p)).collect(),
            rtol: f["rtol"].as_f64().unwrap(),
            atol: f["atol"].as_f64().unwrap(),
        })
        .collect()
}
