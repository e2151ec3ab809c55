//! libtpu without a TPU: describe topologies by name and compile for them ahead of time.
//! (All tests share one libtpu load; the process may load libtpu once.)

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;
use tpuc_runtime::{
    lookup, tpu_topology_options, Availability, CompileOptions, Plugin, Program, Target, Topology,
};

struct Loaded {
    plugin: Plugin,
    log_dir: PathBuf,
    lockfile_existed_before: bool,
}

/// Loads libtpu once, logging into the test's own folder.
fn libtpu() -> &'static Loaded {
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    LOADED.get_or_init(|| {
        let log_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("libtpu-logs");
        // Our own variable: the runtime turns it into TPU_LOG_DIR before dlopen.
        std::env::set_var("TPUC_TPU_LOG_DIR", &log_dir);
        let lockfile_existed_before = Path::new("/tmp/libtpu_lockfile").exists();
        let plugin = plugin(Target::Tpu);
        Loaded {
            plugin,
            log_dir,
            lockfile_existed_before,
        }
    })
}

fn topology(name: &str) -> Topology {
    libtpu()
        .plugin
        .create_topology(name, &tpu_topology_options())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn libtpu_loads_with_its_environment_set() {
    let loaded = libtpu();
    eprintln!(
        "libtpu {} API {}",
        loaded.plugin.path().display(),
        loaded.plugin.api_version()
    );
    for a in loaded.plugin.attributes() {
        eprintln!("  attribute {a}");
    }
    // Without chips (compiling only) libtpu skips the metadata server and the lock file; on
    // a TPU VM it keeps both.
    let chipless = !tpuc_runtime::tpu_chips_in(std::path::Path::new("/dev"));
    let expect = |var: &str| (std::env::var(var).as_deref() == Ok("1")) == chipless;
    assert!(expect("ALLOW_MULTIPLE_LIBTPU_LOAD"));
    assert!(expect("TPU_SKIP_MDS_QUERY"));
    assert_eq!(
        std::env::var_os("TPU_LOG_DIR").map(PathBuf::from),
        Some(loaded.log_dir.clone())
    );
    assert!(loaded.log_dir.is_dir());
    // Compile something so that libtpu has had every chance to write its files.
    let exe = topology("v5e:2x2")
        .compile(&Program::mlir(F32_MODULE), &CompileOptions::default())
        .unwrap();
    assert!(!exe.serialize().unwrap().is_empty());
    if !loaded.lockfile_existed_before {
        assert!(
            !Path::new("/tmp/libtpu_lockfile").exists(),
            "libtpu wrote /tmp/libtpu_lockfile"
        );
    }
    // A second load of the same file is the same plugin, not a second dlopen.
    let again = Plugin::load(loaded.plugin.path()).unwrap();
    assert_eq!(again.path(), loaded.plugin.path());
}

fn compile_single_device(name: &str, expect_devices: usize) {
    let topo = topology(name);
    assert_eq!(topo.platform_name().unwrap(), "tpu");
    let devices = topo.devices().unwrap();
    eprintln!(
        "{name}: {} devices, kind {:?}, version {:?}",
        devices.len(),
        devices[0].kind,
        topo.platform_version()
    );
    assert_eq!(devices.len(), expect_devices, "{devices:?}");
    assert!(!topo.serialize().unwrap().is_empty());

    let start = std::time::Instant::now();
    let exe = topo
        .compile(&Program::mlir(F32_MODULE), &CompileOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let elapsed = start.elapsed();
    let bytes = exe.serialize().unwrap();
    eprintln!(
        "{name}: compiled in {elapsed:?}, {} serialized bytes",
        bytes.len()
    );
    assert!(bytes.len() > 1000, "{name}: only {} bytes", bytes.len());
    assert_eq!(exe.num_outputs().unwrap(), 2);
    if let Availability::Available(shapes) = exe.output_shapes() {
        let printed: Vec<String> = shapes.iter().map(|s| s.to_string()).collect();
        assert_eq!(printed, ["tensor<2x2xf32>", "tensor<2xf32>"]);
    }
    match exe.cost_analysis() {
        Availability::Available(props) => {
            eprintln!(
                "{name}: cost analysis {}",
                props
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            // 2x2x3 multiply-adds plus adds: a few dozen flops, not zero, not millions.
            let flops = lookup(&props, "flops")
                .and_then(|v| v.as_f64())
                .expect("flops");
            assert!(flops > 10.0 && flops < 1e4, "{name}: flops {flops}");
            if let Some(secs) = lookup(&props, "optimal_seconds").and_then(|v| v.as_f64()) {
                assert!(secs > 0.0 && secs < 1.0, "{name}: optimal_seconds {secs}");
            }
        }
        Availability::NotAvailable(why) => eprintln!("{name}: cost analysis not available: {why}"),
    }
    match exe.memory_stats() {
        Availability::Available(m) => {
            eprintln!("{name}: memory {m:?}");
            // At least three 6-element f32 arguments (TPU layouts pad them to tiles).
            assert!(m.argument_size_in_bytes >= 3 * 6 * 4, "{name}: {m:?}");
            assert!(m.output_size_in_bytes >= (4 + 2) * 4, "{name}");
        }
        Availability::NotAvailable(why) => eprintln!("{name}: memory stats not available: {why}"),
    }
}

#[test]
fn compiles_for_v5e_2x2() {
    compile_single_device("v5e:2x2", 4);
}

#[test]
fn compiles_for_v6e_2x2() {
    compile_single_device("v6e:2x2", 4);
}

#[test]
fn compiles_for_v5p_2x2x1() {
    compile_single_device("v5p:2x2x1", 4);
}

#[test]
fn spmd_over_four_partitions_on_v5e_2x2() {
    let topo = topology("v5e:2x2");
    let exe = topo
        .compile(&Program::mlir(SPMD_MODULE), &CompileOptions::spmd(4))
        .unwrap();
    assert_eq!(exe.num_partitions().unwrap(), 4);
    assert_eq!(exe.num_replicas().unwrap(), 1);
    let bytes = exe.serialize().unwrap();
    eprintln!(
        "spmd: {} serialized bytes, outputs {:?}",
        bytes.len(),
        exe.output_shapes()
    );
    assert!(!bytes.is_empty());
    // Each partition produces its 2 of the 8 rows.
    if let Availability::Available(shapes) = exe.output_shapes() {
        assert_eq!(shapes.len(), 1);
        assert_eq!(shapes[0].dims, vec![2, 4]);
    }
    if let Availability::Available(props) = exe.cost_analysis() {
        eprintln!(
            "spmd cost: {}",
            props
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

#[test]
fn bad_topology_name_is_an_error() {
    let err = libtpu()
        .plugin
        .create_topology("v99x:7x7", &tpu_topology_options())
        .unwrap_err();
    eprintln!("{err}");
    assert!(
        matches!(
            err,
            tpuc_runtime::Error::Plugin {
                function: "PJRT_TopologyDescription_Create",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn no_client_without_a_tpu() {
    // Without a TPU, creating a client fails with libtpu's own status and message (not a
    // hang, a crash or a client without devices); on a TPU VM it gives the chips.
    let created = libtpu().plugin.create_client();
    if tpuc_runtime::tpu_chips_in(Path::new("/dev")) {
        let client = created.unwrap_or_else(|e| panic!("a TPU VM gives a client: {e}"));
        assert!(!client.devices().unwrap().is_empty());
        return;
    }
    let err = created
        .map(|_| ())
        .expect_err("a TPU client exists on a machine without TPU chips");
    eprintln!("as expected: {err}");
    match &err {
        tpuc_runtime::Error::Plugin {
            function,
            code,
            message,
            ..
        } => {
            assert_eq!(*function, "PJRT_Client_Create", "{err:?}");
            assert_eq!(*code, tpuc_runtime::ErrorCode::NotFound, "{err:?}");
            assert!(message.contains("TPU initialization failed"), "{err:?}");
        }
        other => panic!("expected libtpu's PJRT_Client_Create error, got {other:?}"),
    }
}
