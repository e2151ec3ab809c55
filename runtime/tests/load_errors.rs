//! Loading things that are not PJRT plugins gives clear errors naming the file.

use std::path::{Path, PathBuf};

use tpuc_runtime::{discover, Error, Plugin, Target};

#[test]
fn missing_file_names_the_file() {
    let path = Path::new("/nonexistent/tpuc/libnothing.so");
    let err = Plugin::load(path).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Load { .. }), "{err:?}");
    assert!(
        text.contains("/nonexistent/tpuc/libnothing.so") && text.contains("no such file"),
        "{text}"
    );
}

#[test]
fn shared_library_without_get_pjrt_api_is_rejected() {
    // libm is on every glibc system and already mapped into this process.
    let libm = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/lib/aarch64-linux-gnu/libm.so.6",
        "/usr/lib64/libm.so.6",
        "/lib64/libm.so.6",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
    .expect("libm.so.6 not found in the usual places");
    let err = Plugin::load(&libm).unwrap_err();
    let text = err.to_string();
    eprintln!("{text}");
    assert!(text.contains("libm.so.6"), "{text}");
    assert!(text.contains("GetPjrtApi"), "{text}");
}

#[test]
fn non_elf_file_is_rejected() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let fake = dir.join("not_a_plugin.so");
    std::fs::write(&fake, b"this is text, not ELF").unwrap();
    let err = Plugin::load(&fake).unwrap_err();
    let text = err.to_string();
    eprintln!("{text}");
    assert!(matches!(err, Error::Load { .. }), "{err:?}");
    assert!(text.contains("not_a_plugin.so"), "{text}");
}

#[test]
fn discovery_finds_both_plugins_in_the_project_venv() {
    let d = discover();
    // The GPU plugin is not part of the project's setup (hosts with a GPU install it).
    for target in [Target::Cpu, Target::Tpu] {
        let found = d
            .get(target)
            .unwrap_or_else(|| panic!("{}\nrun scripts/setup.sh", d.plugin(target).unwrap_err()));
        eprintln!("{target}: {} ({})", found.path.display(), found.origin);
        assert!(tpuc_runtime::site_packages_files(target).iter().any(|f| found.path.ends_with(f)));
    }
}

#[test]
fn not_found_error_says_to_run_setup() {
    let d = tpuc_runtime::Discovery {
        searched: vec![
            (
                Some(Target::Tpu),
                "/x/site-packages/libtpu/libtpu.so".into(),
            ),
            (Some(Target::Cpu), "/x/site-packages/cpu.so".into()),
        ],
        ..Default::default()
    };
    let text = d.plugin(Target::Tpu).unwrap_err().to_string();
    assert!(
        text.contains("scripts/setup.sh") && text.contains("TPUC_PJRT_TPU_PLUGIN"),
        "{text}"
    );
}
