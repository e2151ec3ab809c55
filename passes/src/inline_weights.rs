//! `inline-weights`: turns weight arguments of `main` into `constant` ops.
//!
//! Needs: a verified module and the weight values by qualified name (parameters, buffers and
//! constants as the importer found them in the archive).
//! Guarantees: every `main` argument whose kind is parameter, buffer or constant is replaced by
//! a `constant` op at the top of the body holding the weight's bytes (shared, not copied),
//! except a weight with a sharding, which stays an argument so that each device gets its shard;
//! the remaining arguments keep their order and their metadata (sharding included). A weight argument without data is an error naming it;
//! a weight whose type differs from its argument's type is an error too.

use crate::{Pass, PassError};
use std::collections::BTreeMap;
use tpuc_ir::{payload, Module, Opcode, TensorData};

pub struct InlineWeights<'w> {
    pub weights: &'w BTreeMap<String, TensorData>,
}

impl Pass for InlineWeights<'_> {
    fn name(&self) -> &'static str {
        crate::PassId::InlineWeights.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        let fail = |message: String| PassError::Failed { pass: crate::PassId::InlineWeights.name().into(), message };
        let Some(fi) = m.funcs.iter().position(|f| f.name == "main") else {
            return Ok(false);
        };
        let block = m.entry_block(&m.funcs[fi]);
        let args = m.blocks[block].args().to_vec();
        let infos = m.funcs[fi].args.clone();
        let mut keep_args = Vec::new();
        let mut keep_infos = Vec::new();
        let mut inserted = 0;
        let mut last: Option<tpuc_ir::OpId> = None;
        for (arg, info) in args.into_iter().zip(infos) {
            // A weight the program's sharding splits stays an argument: each device is given
            // its shard.
            if !info.kind.is_weight() || info.sharding.is_some() {
                keep_args.push(arg);
                keep_infos.push(info);
                continue;
            }
            let data = self
                .weights
                .get(&info.name)
                .ok_or_else(|| fail(format!("no data for {} `{}` (a bare graph JSON carries no weights)", info.kind.name(), info.name)))?;
            let ty = m.values[arg].ty.clone();
            if data.ty != ty {
                return Err(fail(format!("weight `{}` has type {} but the argument is {ty}", info.name, data.ty)));
            }
            let op = m
                .create_op(Opcode::Constant, &[], payload::Constant { value: data }.attrs(), None, &[])
                .map_err(|e| fail(e.to_string()))?;
            match last {
                Some(p) => m.insert_op_after(p, op),
                None => m.prepend_op(block, op),
            }
            last = Some(op);
            inserted += 1;
            let c = m.ops[op].results()[0];
            m.replace_all_uses(arg, c);
        }
        if inserted == 0 {
            return Ok(false);
        }
        m.retain_block_args(block, keep_args).map_err(|e| fail(e.to_string()))?;
        m.funcs[fi].args = keep_infos;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuc_ir::{parse_module, print_module, verify, Scalar, TensorType};

    /// Dropping inlined weights keeps every other argument's sharding on that argument, and a
    /// weight the sharding splits stays an argument.
    #[test]
    fn shardings_stay_with_their_arguments() {
        let text = "module {\n  mesh [\"x\" = 2]\n  func @main(%0: tensor<4xf32> {kind = \"parameter\", name = \"w\"}, %1: tensor<4xf32> {kind = \"parameter\", name = \"v\", sharding = [{\"x\"}]}, %2: tensor<4xf32> {kind = \"input\", name = \"a\", sharding = [{\"x\"}]}) -> (tensor<4xf32>) {\n    %3 = add %0, %1 : tensor<4xf32>\n    %4 = add %3, %2 : tensor<4xf32>\n    return %4\n  }\n}\n";
        let mut m = parse_module(text).unwrap();
        let ty = TensorType::from_static(tpuc_ir::DType::F32, &[4]);
        let weights: BTreeMap<String, TensorData> =
            ["w", "v"].iter().map(|n| (n.to_string(), TensorData::splat(ty.clone(), Scalar::Float(1.0)).unwrap())).collect();
        assert!(InlineWeights { weights: &weights }.run(&mut m).unwrap());
        verify(&m).unwrap();
        let main = m.main_func().unwrap();
        let kept: Vec<(&str, bool)> = main.args().iter().map(|a| (a.name.as_str(), a.sharding.is_some())).collect();
        assert_eq!(kept, [("v", true), ("a", true)], "{}", print_module(&m));
        assert!(print_module(&m).contains("%0: tensor<4xf32> {kind = \"parameter\", name = \"v\", sharding = [{\"x\"}]}"));
    }
}
