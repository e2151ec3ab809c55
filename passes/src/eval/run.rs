//! Runs a whole function with the reference semantics (see the module header).

use super::{eval, Ctx};
use std::collections::HashMap;
use tpuc_ir::{Dim, Module, Opcode, TensorData, TensorType, ValueId};

/// Runs `main` of `m` on `args`, one value per argument in order, and returns its results.
/// Symbolic dims of the signature take the sizes the arguments have (a dim `c*s + k` with one
/// symbol is solved for it). An error names the op that could not be evaluated.
pub fn run_reference(m: &Module, args: &[TensorData]) -> Result<Vec<TensorData>, String> {
    let f = m.main_func().ok_or("the module has no function")?;
    let block = m.entry_block(f);
    let params = &m.blocks[block].args();
    if params.len() != args.len() {
        return Err(format!("@{} takes {} arguments, got {}", f.name, params.len(), args.len()));
    }
    let mut syms: HashMap<String, i64> = HashMap::new();
    let mut env: HashMap<ValueId, TensorData> = HashMap::new();
    for (i, (&v, t)) in params.iter().zip(args).enumerate() {
        let want = m.value_type(v);
        let dims = t.ty.static_dims().ok_or_else(|| format!("argument {i} has the dynamic type {}", t.ty))?;
        if want.dtype != t.ty.dtype || want.rank() != dims.len() {
            return Err(format!("argument {i} is {want}, got {}", t.ty));
        }
        for (d, &n) in want.dims.iter().zip(&dims) {
            match d {
                Dim::Static(s) if *s != n => return Err(format!("argument {i} is {want}, got {}", t.ty)),
                Dim::Sym(e) => {
                    if let [s] = e.symbols().as_slice() {
                        let at = |x: i64| e.eval(&|_| Some(x));
                        if let (Some(k), Some(k1)) = (at(0), at(1)) {
                            let c = k1 - k;
                            if c != 0 && (n - k) % c == 0 {
                                syms.insert(s.to_string(), (n - k) / c);
                            }
                        }
                    }
                }
                Dim::Static(_) => {}
            }
        }
        env.insert(v, t.clone());
    }
    let concrete = |t: &TensorType| -> Result<TensorType, String> {
        let dims = t
            .dims
            .iter()
            .map(|d| match d {
                Dim::Static(n) => Ok(*n),
                Dim::Sym(e) => e.eval(&|s| syms.get(s).copied()).ok_or_else(|| format!("no value for the size {e} in {t}")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TensorType::from_static(t.dtype, &dims))
    };
    for op in m.ops_in(block) {
        let d = m.op(op);
        let xs = d
            .operands()
            .iter()
            .map(|v| env.get(v).ok_or_else(|| format!("`{}` uses a value defined nowhere before it", d.opcode())))
            .collect::<Result<Vec<_>, _>>()?;
        if d.opcode() == Opcode::Return {
            return Ok(xs.into_iter().cloned().collect());
        }
        let at = || m.loc(op).map_or(String::new(), |l| format!(" at {l}"));
        if !d.regions().is_empty() {
            return Err(format!("cannot evaluate `{}`{}: ops with regions are not supported", d.opcode(), at()));
        }
        let types = d.results().iter().map(|&r| concrete(m.value_type(r))).collect::<Result<Vec<_>, _>>()?;
        let outs = eval(d.opcode(), &d.attrs, &xs, &types, Ctx::REFERENCE)
            .ok_or_else(|| format!("cannot evaluate `{}`{} on {}", d.opcode(), at(), show(&xs)))?;
        for (&r, t) in d.results().iter().zip(outs) {
            env.insert(r, t);
        }
    }
    Err(format!("@{} has no return", f.name))
}

fn show(xs: &[&TensorData]) -> String {
    xs.iter().map(|t| t.ty.to_string()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(t: &TensorData) -> Vec<f64> {
        super::super::to_f64s(t)
    }

    fn data(dims: &[i64], vals: &[f32]) -> TensorData {
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        TensorData::new(TensorType::from_static(tpuc_ir::DType::F32, dims), bytes.into()).unwrap()
    }

    #[test]
    fn runs_a_function_with_a_symbolic_batch() {
        let m = tpuc_ir::parse_module(concat!(
            "module {\n  symbol @s0 : [1, 8]\n",
            "  func @main(%0: tensor<s0x2xf32> {kind = \"input\", name = \"x\"}, %1: tensor<2x3xf32> {kind = \"input\", name = \"w\"})",
            " -> (tensor<s0x3xf32>, tensor<s0xf32>) {\n",
            "    %2 = dot_general %0, %1 {lhs_batching_dimensions = [], lhs_contracting_dimensions = [1], ",
            "rhs_batching_dimensions = [], rhs_contracting_dimensions = [0]} : tensor<s0x3xf32>\n",
            "    %3 = exp %2 : tensor<s0x3xf32>\n",
            "    %4 = reduce %3 {dimensions = [1], kind = \"sum\"} : tensor<s0xf32>\n",
            "    return %2, %4\n  }\n}\n",
        ))
        .unwrap();
        let x = data(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let w = data(&[2, 3], &[1.0, 0.0, -1.0, 0.5, 1.0, 0.0]);
        let out = run_reference(&m, &[x, w]).unwrap();
        assert_eq!(f32s(&out[0]), vec![2.0, 2.0, -1.0, 5.0, 4.0, -3.0]);
        // Rounded to f32 after every op: after exp, and after the (f64) sum.
        let want: Vec<f64> = [[2.0f64, 2.0, -1.0], [5.0, 4.0, -3.0]]
            .iter()
            .map(|r| r.iter().map(|v| v.exp() as f32 as f64).sum::<f64>() as f32 as f64)
            .collect();
        assert_eq!(f32s(&out[1]), want);
        assert_eq!(out[1].ty, TensorType::from_static(tpuc_ir::DType::F32, &[2]));
    }

    #[test]
    fn names_what_it_cannot_evaluate() {
        let m = tpuc_ir::parse_module(
            "module {\n  func @main(%0: tensor<2xu64> {kind = \"input\", name = \"x\"}) -> (tensor<2xu64>) {\n    %1 = add %0, %0 : tensor<2xu64>\n    return %1\n  }\n}\n",
        )
        .unwrap();
        let x = TensorData::new(TensorType::from_static(tpuc_ir::DType::U64, &[2]), vec![0u8; 16].into()).unwrap();
        let err = run_reference(&m, &[x]).unwrap_err();
        assert!(err.contains("cannot evaluate `add`"), "{err}");
    }
}
