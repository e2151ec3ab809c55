//! The check both import targets make of a successful import.

/// What an imported module promises beyond verifying (which the import checks itself, so
/// verifying again could not fail): its text parses back into a module that verifies and
/// prints the same text.
pub fn check_text_roundtrip(m: &tpuc_ir::Module) {
    let text = tpuc_ir::print_module(m);
    let parsed = match tpuc_ir::parse_module(&text) {
        Ok(p) => p,
        Err(e) => panic!("the imported module does not parse back: {e}\n{text}"),
    };
    if let Err(errs) = tpuc_ir::verify(&parsed) {
        panic!("the imported module does not verify after a text round trip: {errs:?}\n{text}");
    }
    assert!(tpuc_ir::print_module(&parsed) == text, "the imported module prints differently after a text round trip:\n{text}");
}
