//! The runtime's error type.

use std::fmt;
use std::path::PathBuf;

/// `Result` with the runtime's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A PJRT status code (absl's codes), as the plugin reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
    /// A code outside absl's list.
    Other(i32),
}

impl ErrorCode {
    pub(crate) fn from_raw(code: i32) -> ErrorCode {
        use ErrorCode::*;
        match code {
            1 => Cancelled,
            2 => Unknown,
            3 => InvalidArgument,
            4 => DeadlineExceeded,
            5 => NotFound,
            6 => AlreadyExists,
            7 => PermissionDenied,
            8 => ResourceExhausted,
            9 => FailedPrecondition,
            10 => Aborted,
            11 => OutOfRange,
            12 => Unimplemented,
            13 => Internal,
            14 => Unavailable,
            15 => DataLoss,
            16 => Unauthenticated,
            other => Other(other),
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ErrorCode::*;
        let name = match self {
            Cancelled => "CANCELLED",
            Unknown => "UNKNOWN",
            InvalidArgument => "INVALID_ARGUMENT",
            DeadlineExceeded => "DEADLINE_EXCEEDED",
            NotFound => "NOT_FOUND",
            AlreadyExists => "ALREADY_EXISTS",
            PermissionDenied => "PERMISSION_DENIED",
            ResourceExhausted => "RESOURCE_EXHAUSTED",
            FailedPrecondition => "FAILED_PRECONDITION",
            Aborted => "ABORTED",
            OutOfRange => "OUT_OF_RANGE",
            Unimplemented => "UNIMPLEMENTED",
            Internal => "INTERNAL",
            Unavailable => "UNAVAILABLE",
            DataLoss => "DATA_LOSS",
            Unauthenticated => "UNAUTHENTICATED",
            Other(code) => return write!(f, "code {code}"),
        };
        f.write_str(name)
    }
}

/// Everything that can go wrong in the runtime. Plugin failures carry the plugin's own
/// message; none of them panics.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened as a PJRT plugin (missing, not a shared library, no
    /// `GetPjrtApi`, initialization failed...).
    #[error("cannot load PJRT plugin {}: {reason}", path.display())]
    Load { path: PathBuf, reason: String },

    /// The plugin speaks a PJRT C API version these bindings do not support.
    #[error(
        "PJRT plugin {} has C API version {major}.{minor}; tpuc supports {} and newer {}.x",
        path.display(), crate::SUPPORTED_API, crate::SUPPORTED_API.major
    )]
    ApiVersion {
        path: PathBuf,
        major: i32,
        minor: i32,
    },

    /// A PJRT call returned an error.
    #[error("{function} failed ({code}) in {} (PJRT C API {api}): {message}", plugin.display())]
    Plugin {
        /// The C API function, e.g. `PJRT_Client_Compile`.
        function: &'static str,
        code: ErrorCode,
        /// The plugin's message (`PJRT_Error_Message`).
        message: String,
        plugin: PathBuf,
        /// `major.minor` of the plugin.
        api: String,
    },

    /// The plugin's function table does not have this function.
    #[error("{function} is not provided by {} (PJRT C API {api})", plugin.display())]
    Unsupported {
        function: &'static str,
        plugin: PathBuf,
        api: String,
    },

    /// A plugin broke the API contract (e.g. returned null without an error).
    #[error("{function} in {}: {what}", plugin.display())]
    Contract {
        function: &'static str,
        what: String,
        plugin: PathBuf,
    },

    /// The caller passed something the runtime refuses before reaching the plugin.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// No plugin was found for a target.
    #[error("no PJRT plugin for {target} found (looked at: {}); {} or set {env}", searched.join(", "), if target == "gpu" { "on a machine with an NVIDIA GPU, `pip install jax-cuda13-pjrt` (or jax-cuda12-pjrt) into the active Python," } else { "run scripts/setup.sh" })]
    NotFound {
        target: String,
        env: String,
        searched: Vec<String>,
    },
}

impl Error {
    /// The plugin's status code, for [`Error::Plugin`].
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Plugin { code, .. } => Some(*code),
            _ => None,
        }
    }
}
