//! PyTorch's functional collectives (`torch.ops._c10d_functional.*`, what `torch.compile` and
//! `torch.export` record for `torch.distributed._functional_collectives` and DTensor code) as
//! the IR's collective ops of a per-rank program: `all_reduce`, `all_gather_into_tensor`,
//! `reduce_scatter_tensor` (dim 0), `all_to_all_single` with equal splits, `broadcast`, and
//! `wait_tensor` as the identity (the IR has no asynchrony). Group names stay names: the
//! emitter resolves them to ranks. Reduce ops: sum, avg, product, min, max, and band / bor
//! on integers.

use crate::ops::build::*;
use tpuc_ir::{AttrEnum, ReduceKind};
use Opcode as O;

pub const OPS: &[(&str, OpFn)] = &[
    ("torch.ops._c10d_functional.all_reduce.default", all_reduce),
    ("torch.ops._c10d_functional.all_gather_into_tensor.default", all_gather),
    ("torch.ops._c10d_functional.reduce_scatter_tensor.default", reduce_scatter),
    ("torch.ops._c10d_functional.all_to_all_single.default", all_to_all),
    ("torch.ops._c10d_functional.broadcast.default", broadcast),
    ("torch.ops._c10d_functional.wait_tensor.default", wait_tensor),
];

/// A reduce op's kind, and whether it averages.
fn reduce_op(cx: &Ctx, x: ValueId) -> R<(ReduceKind, bool)> {
    let op = cx.str("reduce_op")?;
    let int = cx.dtype(x).is_int() || cx.dtype(x).is_bool();
    Ok(match op.to_ascii_lowercase().as_str() {
        "sum" => (ReduceKind::Sum, false),
        "avg" if !int => (ReduceKind::Sum, true),
        "product" => (ReduceKind::Prod, false),
        "min" => (ReduceKind::Min, false),
        "max" => (ReduceKind::Max, false),
        "band" if int => (ReduceKind::And, false),
        "bor" if int => (ReduceKind::Or, false),
        other => {
            return err(format!(
                "reduce op `{other}` on {} is not supported (sum, avg on floats, product, min, max, band/bor on integers)",
                cx.dtype(x).name()
            ))
        }
    })
}

fn group(cx: &Ctx) -> R<Attr> {
    Ok(Attr::Str(cx.str("group_name")?))
}

fn group_size(cx: &Ctx) -> R<i64> {
    let n = cx.int("group_size")?;
    if !(1..=65536).contains(&n) {
        return err(format!("group_size {n} out of range"));
    }
    Ok(n)
}

fn input(cx: &Ctx, op: &str) -> R<ValueId> {
    let x = cx.t("input")?;
    if cx.rank(x) == 0 && op != "all_reduce" && op != "broadcast" {
        return err(format!("{op} of a rank-0 tensor (it splits or joins dim 0)"));
    }
    Ok(x)
}

fn all_reduce(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = input(cx, "all_reduce")?;
    let (kind, average) = reduce_op(cx, x)?;
    let mut attrs = Attrs::new().with("kind", kind.attr()).with("group", group(cx)?);
    if average {
        attrs = attrs.with("average", Attr::Bool(true));
    }
    one(cx.b.build1(O::AllReduce, &[x], attrs, None)?)
}

fn all_gather(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = input(cx, "all_gather_into_tensor")?;
    let attrs = Attrs::new().with("dimension", Attr::Int(0)).with("group_size", Attr::Int(group_size(cx)?)).with("group", group(cx)?);
    one(cx.b.build1(O::AllGather, &[x], attrs, None)?)
}

fn reduce_scatter(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = input(cx, "reduce_scatter_tensor")?;
    let (kind, average) = reduce_op(cx, x)?;
    let mut attrs = Attrs::new()
        .with("dimension", Attr::Int(0))
        .with("kind", kind.attr())
        .with("group_size", Attr::Int(group_size(cx)?))
        .with("group", group(cx)?);
    if average {
        attrs = attrs.with("average", Attr::Bool(true));
    }
    one(cx.b.build1(O::ReduceScatter, &[x], attrs, None)?)
}

fn all_to_all(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = input(cx, "all_to_all_single")?;
    let outs = cx.opt_ints("output_split_sizes")?.unwrap_or_default();
    let ins = cx.opt_ints("input_split_sizes")?.unwrap_or_default();
    let Some(rows) = cx.dims(x)[0].as_static() else {
        return err("all_to_all_single over a symbolic dim 0 is not supported");
    };
    let n = outs.len().max(ins.len()) as i64;
    if n == 0 {
        return err("all_to_all_single without split sizes needs the group size; give output_split_sizes");
    }
    let even = |s: &[i64]| s.is_empty() || (s.len() as i64 == n && s.iter().all(|&k| k * n == rows));
    if !even(&outs) || !even(&ins) {
        return err(format!(
            "all_to_all_single with uneven splits (input {ins:?}, output {outs:?} of {rows} rows) is not supported: the output size would depend on other ranks"
        ));
    }
    let attrs = Attrs::new().with("dimension", Attr::Int(0)).with("group_size", Attr::Int(n)).with("group", group(cx)?);
    one(cx.b.build1(O::AllToAll, &[x], attrs, None)?)
}

fn broadcast(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = input(cx, "broadcast")?;
    let src = cx.int("src")?;
    if src < 0 {
        return err(format!("broadcast from rank {src}"));
    }
    let attrs = Attrs::new().with("source", Attr::Int(src)).with("group", group(cx)?);
    one(cx.b.build1(O::CollectiveBroadcast, &[x], attrs, None)?)
}

fn wait_tensor(cx: &mut Ctx) -> R<Vec<Val>> {
    one(cx.t("tensor")?)
}
