//! The importer's error type. Every error that concerns one FX node names the node, its target
//! and, when the graph recorded one, the user source line.

use std::fmt;

/// Where in the program an error happened: the FX node, its target and source line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRef {
    pub node: String,
    pub target: String,
    /// `model.py:12 in forward`, when the node's stack trace has a user frame.
    pub source: Option<String>,
}

impl fmt::Display for NodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node `{}`", self.node)?;
        if let Some(s) = &self.source {
            write!(f, " ({s})")?;
        }
        Ok(())
    }
}

fn paren(location: &Option<String>) -> String {
    match location {
        Some(s) => format!(" ({s})"),
        None => String::new(),
    }
}

/// Everything that can go wrong while importing a program.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read `{path}`: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The input cannot be a program at all (a directory, an empty file).
    #[error("{0}")]
    Input(String),
    /// The input is neither a zip archive nor JSON.
    #[error("input is neither a .pt2 zip archive nor torch.export JSON (starts with {0:?})")]
    UnknownFormat(String),
    #[error("malformed .pt2 archive: {0}")]
    Archive(String),
    #[error("the archive has no `{0}`")]
    MissingFile(String),
    #[error("bad JSON in `{file}`: {message}")]
    Json { file: String, message: String },
    /// A field of the serialized program has the wrong shape or type.
    #[error("malformed program: {0}")]
    Schema(String),
    #[error("unknown torch dtype number {0} (see ScalarType in torch/_export/serde/schema.yaml)")]
    UnknownDType(i64),
    #[error("{0}")]
    UnsupportedDType(String),
    #[error("cannot parse symbolic expression `{expr}`: {message}")]
    SymExpr { expr: String, message: String },
    #[error("weight `{name}`: {message}")]
    Weight { name: String, message: String },
    /// A weight's data was needed but the program came without weights (a bare model.json).
    #[error("weight `{0}` is needed but the program has no weight data (imported from a bare model.json?)")]
    MissingWeight(String),
    #[error("unsupported op `{target}` at node `{node}`{}", paren(.location))]
    UnsupportedOp { target: String, node: String, location: Option<String> },
    /// An op is known but this use of it is not supported or its arguments are invalid.
    #[error("op `{}` at node `{}`{}: {message}", .at.target, .at.node, paren(&.at.source))]
    Op { at: Box<NodeRef>, message: String },
    /// The value an op produced disagrees with the type torch recorded for it.
    #[error("op `{}` at node `{}`{}: result `{value}` is {got}, but the program says {expected}", .at.target, .at.node, paren(&.at.source))]
    TypeMismatch { at: Box<NodeRef>, value: String, got: String, expected: String },
    #[error("signature: {0}")]
    Signature(String),
    /// The imported module does not pass the IR verifier (a bug in the importer).
    #[error("imported module does not verify:\n{0}")]
    Verify(String),
    /// Several nodes failed (two or more node errors: [`UnsupportedOp`](Self::UnsupportedOp),
    /// [`Op`](Self::Op), [`TypeMismatch`](Self::TypeMismatch)), in graph order. Shown as the
    /// first, then one `  also: ...` line for each of the others.
    #[error("{}", list_nodes(.0))]
    Nodes(Vec<ImportError>),
}

fn list_nodes(errors: &[ImportError]) -> String {
    let mut s = String::new();
    for (i, e) in errors.iter().enumerate() {
        if i > 0 {
            s.push_str("\n  also: ");
        }
        s.push_str(&e.to_string());
    }
    s
}

impl ImportError {
    pub(crate) fn schema(msg: impl Into<String>) -> Self {
        ImportError::Schema(msg.into())
    }

    /// Whether the error concerns one FX node (an unsupported op, arguments its lowering
    /// rejects, a result of the wrong type).
    pub fn is_node_error(&self) -> bool {
        matches!(self, ImportError::UnsupportedOp { .. } | ImportError::Op { .. } | ImportError::TypeMismatch { .. })
    }

    /// Every node that failed, in graph order: the list of [`Nodes`](Self::Nodes), the error
    /// itself for a single node error, and nothing for other errors.
    pub fn node_errors(&self) -> &[ImportError] {
        match self {
            ImportError::Nodes(v) => v,
            e if e.is_node_error() => std::slice::from_ref(e),
            _ => &[],
        }
    }

    /// The error shown first: the first failed node of [`Nodes`](Self::Nodes), else itself.
    pub fn first(&self) -> &ImportError {
        match self {
            ImportError::Nodes(v) => v.first().map_or(self, ImportError::first),
            e => e,
        }
    }

    /// The node a node error concerns (for [`Nodes`](Self::Nodes), the first one).
    pub fn node(&self) -> Option<NodeRef> {
        match self.first() {
            ImportError::UnsupportedOp { target, node, location } => {
                Some(NodeRef { node: node.clone(), target: target.clone(), source: location.clone() })
            }
            ImportError::Op { at, .. } | ImportError::TypeMismatch { at, .. } => Some((**at).clone()),
            _ => None,
        }
    }
}
