//! Effects: `torch.ops.higher_order.with_effects(token, op, *args, **kwargs)`, which
//! torch.export and aot_autograd wrap around an op with a side effect, threading an effect
//! token through the graph so that effects keep their order.
//!
//! The one effect tpuc lowers is linalg's error check, `aten._linalg_check_errors(info,
//! api_name, *, is_matrix)`, which raises `torch.linalg.LinAlgError` where a factorization
//! failed (`info` nonzero). A program cannot raise, so `info` becomes a result of kind
//! [`tpuc_ir::ResultKind::Check`], listed in [`crate::Imported::checks`], that the caller
//! checks after the run: the `torch.compile` path with torch's own check (so it raises as
//! eager does), the CLI with its own message. Tokens are [`Val::Token`], with no value at run
//! time; any other effectful op is refused by name.

use crate::ops::build::*;
use crate::schema::Arg;

pub const OPS: &[(&str, OpFn)] = &[("torch.ops.higher_order.with_effects", with_effects)];

const CHECK_ERRORS: &str = "torch.ops.aten._linalg_check_errors.default";

fn with_effects(cx: &mut Ctx) -> R<Vec<Val>> {
    let positional: Vec<Arg> = cx.node.inputs.iter().filter(|a| a.name.is_empty()).map(|a| a.arg.decode()).collect::<Result<_, _>>()?;
    match positional.get(1) {
        Some(Arg::Operator(op)) if op == CHECK_ERRORS => {}
        Some(Arg::Operator(op)) => return err(format!("the effectful op `{op}` is not supported (tpuc lowers only linalg's error checks)")),
        _ => return err("with_effects without an operator argument"),
    }
    let info = match positional.get(2) {
        Some(Arg::Tensor(n)) => cx.tensor_by_name(n)?,
        _ => return err("_linalg_check_errors without its `info` tensor"),
    };
    let api = match positional.get(3) {
        Some(Arg::Str(s)) => s.clone(),
        _ => cx.str("api_name")?,
    };
    if !cx.dtype(info).is_int() {
        return err(format!("_linalg_check_errors of a {} `info` (an integer status is expected)", cx.dtype(info)));
    }
    // `is_matrix` says whether one matrix was factorized, which is what a 0-d `info` says: the
    // result's rank carries it (see `HostCheck`).
    if cx.bool("is_matrix")? != (cx.rank(info) == 0) {
        return err(format!("_linalg_check_errors with is_matrix={} for a {}-d `info`", cx.bool("is_matrix")?, cx.rank(info)));
    }
    cx.st.checks.borrow_mut().push((info, api));
    // Outputs: the new token, then the op's own (none for the check).
    Ok(cx.outs.iter().enumerate().map(|(i, _)| if i == 0 { Val::Token } else { Val::None }).collect())
}
