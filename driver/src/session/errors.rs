//! What an error is about, for callers that report it: the FX nodes it names and a short name
//! of its kind.

use crate::exec::ExecError;
use crate::DriverError;
use tpuc_frontend_fx::{ImportError, NodeRef};
use tpuc_lowering_stablehlo::EmitError;

/// The FX node an error is about, when it names one (for an import that failed at several
/// nodes, the first).
pub fn error_node(e: &DriverError) -> Option<NodeRef> {
    match e {
        DriverError::Import(e) => e.node(),
        DriverError::Emit(EmitError::Unsupported { context, opcode, .. }) => {
            // context: " (node `x` at model.py:3)"
            let rest = context.split("node `").nth(1)?;
            let (node, tail) = rest.split_once('`')?;
            let source = tail.trim().strip_prefix("at ").map(|s| s.trim_end_matches(')').to_string());
            Some(NodeRef { node: node.to_string(), target: opcode.to_string(), source })
        }
        _ => None,
    }
}

/// One node an import failed at: the kind of failure (as [`error_kind`] names it), the node
/// and the message.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeFailure {
    pub kind: &'static str,
    pub at: NodeRef,
    pub message: String,
}

/// Every node an error names, in graph order: all the nodes an import failed at (the importer
/// reports them in one pass), else the one node of [`error_node`], else none.
pub fn error_nodes(e: &DriverError) -> Vec<NodeFailure> {
    if let DriverError::Import(ie) = e {
        if !ie.node_errors().is_empty() {
            return ie
                .node_errors()
                .iter()
                .filter_map(|n| Some(NodeFailure { kind: import_kind(n), at: n.node()?, message: n.to_string() }))
                .collect();
        }
    }
    match error_node(e) {
        Some(at) => vec![NodeFailure { kind: error_kind(e), at, message: e.to_string() }],
        None => Vec::new(),
    }
}

fn import_kind(e: &ImportError) -> &'static str {
    match e.first() {
        ImportError::UnsupportedOp { .. } => "unsupported_op",
        ImportError::Op { .. } | ImportError::TypeMismatch { .. } => "op",
        _ => "import",
    }
}

/// A short name for the kind of an error, for callers that dispatch on it (for an import that
/// failed at several nodes, the kind of the first).
pub fn error_kind(e: &DriverError) -> &'static str {
    match e {
        DriverError::Import(ie) => import_kind(ie),
        DriverError::Emit(EmitError::Unsupported { .. }) => "lowering",
        DriverError::Emit(EmitError::DynamicDim { .. }) => "dynamic_shape",
        DriverError::Exec(ExecError::Plugin(_)) => "plugin",
        DriverError::Exec(_) => "exec",
        _ if !e.is_user_error() => "internal",
        _ => "other",
    }
}
