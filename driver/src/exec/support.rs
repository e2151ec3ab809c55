//! What a target cannot compute: the check that refuses f64 and complex128 on TPU before a
//! compile, naming the argument or op.

use super::{ExecError, Target};
use tpuc_ir::{DType, Module};

/// Refuses what the target cannot compute, naming the op: TPUs have no f64 and no complex128.
/// The TPU pipeline's `narrow-64bit` pass computes f64 as f32 and keeps f64 only at the
/// boundary, in `convert`s it marks `tpuc.boundary`, which are accepted: an f64 argument used
/// only by such converts, and such a convert's f64 result used only by `return`.
pub fn check_target_support(module: &Module, target: Target) -> Result<(), ExecError> {
    if target != Target::Tpu {
        return Ok(());
    }
    let func = module.main_func().ok_or_else(|| ExecError::Unsupported("module has no functions".into()))?;
    let entry = module.entry_block(func);
    let unsupported = |t: &tpuc_ir::TensorType| matches!(t.dtype, DType::F64 | DType::C128);
    let is_boundary = |data: &tpuc_ir::OpData| data.opcode() == tpuc_ir::Opcode::Convert && data.attrs.bool("tpuc.boundary") == Some(true);
    // True if every attached user of `v` is `op` (a boundary convert when `op` is `convert`).
    let only_used_by = |v: tpuc_ir::ValueId, op: tpuc_ir::Opcode| {
        module.users(v).map(|u| &module.ops[u]).filter(|d| d.block().is_some()).all(|d| d.opcode() == op && (op != tpuc_ir::Opcode::Convert || is_boundary(d)))
    };
    for (i, &a) in module.blocks[entry].args().iter().enumerate() {
        let t = &module.values[a].ty;
        if unsupported(t) && !(t.dtype == DType::F64 && only_used_by(a, tpuc_ir::Opcode::Convert)) {
            let name = func.args.get(i).map_or("?", |a| a.name.as_str());
            return Err(ExecError::Unsupported(format!(
                "{} is not supported on TPU: argument {i} (`{name}`) is {t}; the TPU pipeline (`--target tpu`, pass narrow-64bit) computes f64 as f32",
                t.dtype
            )));
        }
    }
    for (op, data) in module.ops.iter() {
        if data.block().is_none() {
            continue;
        }
        for &r in data.results() {
            let t = &module.values[r].ty;
            let boundary = t.dtype == DType::F64 && is_boundary(data) && only_used_by(r, tpuc_ir::Opcode::Return);
            if unsupported(t) && !boundary {
                let at = module.loc(op).map_or(String::new(), |l| format!(" from {l}"));
                return Err(ExecError::Unsupported(format!(
                    "{} is not supported on TPU: `{}`{at} produces {t}; the TPU pipeline (`--target tpu`, pass narrow-64bit) computes f64 as f32",
                    t.dtype, data.opcode()
                )));
            }
        }
    }
    Ok(())
}
