//! Torch's recorded tensor metadata as IR types: a `TensorMeta`'s dtype and sizes, its SymInts
//! (integers or sympy expressions over the program's symbols, renamed to the module's).

use crate::dtypes;
use crate::error::ImportError;
use crate::schema::{self, TensorMeta};
use crate::sympy;
use serde_json::Value;
use std::collections::HashMap;
use tpuc_ir::{Dim, SymExpr, TensorType};

/// Largest static size accepted from a program (2^40).
pub const MAX_SIZE: i64 = 1 << 40;

/// Parses one SymInt of tensor metadata.
pub fn meta_symint(v: &schema::SymIntJson, rename: &HashMap<String, String>) -> Result<SymExpr, ImportError> {
    match v {
        schema::SymIntJson::Int(i) => Ok(SymExpr::constant(*i)),
        schema::SymIntJson::Expr(e) => parse_expr(&e.expr_str, rename),
    }
}

/// Parses one serialized SymInt (`as_int` or `as_expr`).
pub fn parse_symint(v: &Value, rename: &HashMap<String, String>) -> Result<SymExpr, ImportError> {
    let (k, x) = schema::union_arm(v)?;
    match k {
        "as_int" => Ok(SymExpr::constant(schema::as_i64(x)?)),
        "as_expr" => {
            let text = schema::as_str(schema::field(x, "expr_str")?)?;
            parse_expr(text, rename)
        }
        other => Err(ImportError::schema(format!("unknown SymInt arm `{other}`"))),
    }
}

pub fn parse_expr(text: &str, rename: &HashMap<String, String>) -> Result<SymExpr, ImportError> {
    sympy::parse_sym(text, &|s| rename.get(s).cloned().unwrap_or_else(|| s.to_string()))
        .map_err(|message| ImportError::SymExpr { expr: text.to_string(), message })
}

/// The IR type of a TensorMeta.
pub fn meta_type(meta: &TensorMeta, rename: &HashMap<String, String>) -> Result<TensorType, ImportError> {
    let dtype = dtypes::from_torch(meta.dtype)?;
    let mut dims = Vec::with_capacity(meta.sizes.len());
    let mut numel: i64 = 1;
    for s in &meta.sizes {
        let e = meta_symint(s, rename)?;
        let d = Dim::from_expr(e);
        if let Dim::Static(n) = d {
            if !(0..=MAX_SIZE).contains(&n) {
                return Err(ImportError::schema(format!("tensor size {n} out of range")));
            }
            numel = numel.checked_mul(n).filter(|&x| x <= MAX_SIZE).ok_or_else(|| {
                ImportError::schema(format!("tensor with sizes {:?} is too large", meta.sizes))
            })?;
        }
        dims.push(d);
    }
    Ok(TensorType::new(dtype, dims))
}
