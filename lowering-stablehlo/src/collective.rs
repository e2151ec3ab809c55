//! Collectives of per-rank programs: `all_reduce`, `all_gather`, `reduce_scatter` and
//! `all_to_all` as the StableHLO ops of the same names, `collective_broadcast` as a gather and
//! a slice, over replica groups (the program is
//! compiled with one replica per rank; no channel handles, so the groups are cross-replica).
//!
//! A group name resolves through [`crate::Ranks`]: the names given there, else `"0"`
//! (PyTorch's default group) as all ranks. The group's size must match the op's `group_size`.

use crate::emitter::{Emitter, Ty, V};
use crate::literal::Lit;
use crate::EmitError;
use std::fmt::Write;
use tpuc_ir::{payload, OpData, Opcode};

impl Emitter<'_> {
    /// The replica groups of process group `name`, checked against `group_size` when given.
    fn replica_groups(&self, name: &str, group_size: Option<i64>) -> Result<Vec<Vec<i64>>, EmitError> {
        let Some(ranks) = &self.opts.ranks else {
            return Err(self.unsupported("a collective needs the number of ranks (tpuc run/compile --ranks N)"));
        };
        let groups = match ranks.groups.get(name) {
            Some(g) => g.clone(),
            None if name == "0" => vec![(0..ranks.count).collect()],
            None => {
                return Err(self.unsupported(format!("unknown process group `{name}`: give its ranks with --group {name}=RANKS")));
            }
        };
        if let Some(n) = group_size {
            if let Some(g) = groups.iter().find(|g| g.len() as i64 != n) {
                return Err(self.unsupported(format!("group `{name}` has {} ranks ({g:?}), the op expects {n}", g.len())));
            }
        }
        Ok(groups)
    }

    fn write_replica_groups(&mut self, groups: &[Vec<i64>]) {
        let width = groups.first().map_or(0, Vec::len);
        self.s("replica_groups = dense<[");
        for (i, g) in groups.iter().enumerate() {
            self.s(if i == 0 { "[" } else { ", [" });
            for (j, r) in g.iter().enumerate() {
                let _ = write!(self.out, "{}{r}", if j == 0 { "" } else { ", " });
            }
            self.s("]");
        }
        let _ = write!(self.out, "]> : tensor<{}x{width}xi64>", groups.len());
    }

    /// Writes `"stablehlo.<name>"(%x) ({reducer}) {<attrs>replica_groups = ...} : (tx) -> rt`,
    /// the reducer (a region combining two scalars with `body`) when given; returns the result.
    #[allow(clippy::too_many_arguments)]
    fn collective_op(&mut self, name: &str, x: V, tx: &Ty, body: Option<&str>, attrs: &str, groups: &[Vec<i64>], rt: &Ty) -> V {
        let r = self.def();
        let _ = write!(self.out, "\"stablehlo.{name}\"(");
        self.val(x);
        self.s(") ");
        if let Some(op) = body {
            let s = Ty::scalar(tx.dt);
            let args = self.region_begin(&[&s, &s]);
            let c = self.binary(op, args[0], args[1], &s);
            self.region_return(&[(c, &s)]);
            self.region_end();
            self.s(" ");
        }
        self.s("{");
        self.s(attrs);
        self.write_replica_groups(groups);
        self.s("} : (");
        self.ty(tx);
        self.s(") -> ");
        self.ty(rt);
        self.end();
        r
    }

    /// `all_reduce`, `all_gather`, `reduce_scatter` and `all_to_all` (IR and StableHLO share
    /// the names); an `average` divides the reduction by the group's size.
    pub fn collective(&mut self, op: &OpData, x: V, tx: &Ty, rt: &Ty) -> Result<V, EmitError> {
        let opcode = op.opcode();
        // (group, group size, reduction, average)
        let (group, size, kind, average) = match opcode {
            Opcode::AllReduce => {
                let a = op.payload::<payload::AllReduce>();
                (a.group, None, Some(a.kind), a.average)
            }
            Opcode::ReduceScatter => {
                let a = op.payload::<payload::ReduceScatter>();
                (a.group, Some(a.group_size), Some(a.kind), a.average)
            }
            Opcode::AllGather => {
                let a = op.payload::<payload::AllGather>();
                (a.group, Some(a.group_size), None, None)
            }
            _ => {
                let a = op.payload::<payload::AllToAll>();
                (a.group, Some(a.group_size), None, None)
            }
        };
        let groups = self.replica_groups(group, size)?;
        let body = match kind {
            Some(k) => Some(self.combiner_or_err(k, tx.dt)?.0),
            None => None,
        };
        let attrs = match opcode {
            Opcode::AllReduce => String::new(),
            Opcode::ReduceScatter => {
                let dim = op.payload::<payload::ReduceScatter>().dimension;
                format!("scatter_dimension = {dim} : i64, ")
            }
            Opcode::AllGather => format!("all_gather_dim = {} : i64, ", op.payload::<payload::AllGather>().dimension),
            _ => {
                let payload::AllToAll { dimension: dim, group_size: n, .. } = op.payload();
                format!("split_dimension = {dim} : i64, concat_dimension = {dim} : i64, split_count = {n} : i64, ")
            }
        };
        let r = self.collective_op(opcode.info().name, x, tx, body, &attrs, &groups, rt);
        if average != Some(true) {
            return Ok(r);
        }
        if !(rt.dt.is_float() || rt.dt.is_complex()) {
            return Err(self.unsupported(format!("an average over ranks of {}", rt.dt.name())));
        }
        let n = self.splat(rt, Lit::F(groups[0].len() as f64));
        Ok(self.binary("divide", r, n, rt))
    }

    /// The value of the group's rank `source` on every rank: everyone's value gathered along a
    /// new leading dim, then `source`'s row taken (exact, no arithmetic).
    pub fn collective_broadcast(&mut self, x: V, tx: &Ty, a: payload::CollectiveBroadcast) -> Result<V, EmitError> {
        let groups = self.replica_groups(a.group, None)?;
        let n = groups[0].len() as i64;
        let src = a.source;
        if !(0..n).contains(&src) {
            return Err(self.unsupported(format!("broadcast from rank {src} of a group of {n}")));
        }
        let mut one = vec![1];
        one.extend_from_slice(&tx.dims);
        let t1 = Ty::new(tx.dt, &one);
        let mut all = one.clone();
        all[0] = n;
        let tn = Ty::new(tx.dt, &all);
        let x1 = self.reshape(x, tx, &t1);
        let g = self.collective_op("all_gather", x1, &t1, None, "all_gather_dim = 0 : i64, ", &groups, &tn);
        let mut start = vec![0; all.len()];
        start[0] = src;
        let mut limit = all.clone();
        limit[0] = src + 1;
        let row = self.slice(g, &tn, &start, &limit, &vec![1; all.len()], &t1);
        Ok(self.reshape(row, &t1, tx))
    }
}
