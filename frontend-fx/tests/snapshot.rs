//! Snapshot of the IR text of the MLP fixture in core ATen (re-record with
//! `INSTA_UPDATE=always cargo test -p tpuc-frontend-fx --test snapshot`).

mod common;

#[test]
fn mlp_core_ir() {
    let imp = tpuc_frontend_fx::import_file(&common::fixtures_dir().join("mlp/core.pt2")).unwrap();
    insta::assert_snapshot!("mlp_core", tpuc_ir::print_module(&imp.module));
}

#[test]
fn mlp_dynamic_core_ir() {
    let imp = tpuc_frontend_fx::import_file(&common::fixtures_dir().join("mlp/dynamic_core.pt2")).unwrap();
    insta::assert_snapshot!("mlp_dynamic_core", tpuc_ir::print_module(&imp.module));
}
