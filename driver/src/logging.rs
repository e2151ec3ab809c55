//! Diagnostics for every caller of the driver: one `tracing` subscriber on stderr, set up the
//! same way by the CLI and by the Python extension, so that a warning from the compiler or the
//! cache (a damaged cache entry, a tier turned off) reaches a `torch.compile` user as it
//! reaches a CLI user.
//!
//! `RUST_LOG` (an `EnvFilter` directive such as `tpuc_cache=debug`) overrides the level.

/// Installs the subscriber: `warn` and above at verbosity 0, `info` at 1, `debug` beyond. A
/// second call (or a subscriber the embedding process installed first) leaves the first one.
pub fn init(verbosity: u8) {
    let default = match verbosity {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}
