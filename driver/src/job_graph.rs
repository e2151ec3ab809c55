//! How a graph with collectives runs inside a torch.distributed job (one process per rank): the
//! compute between the collectives is cut into regions, each compiled as one program, and the
//! collectives run in the job's own process group, scheduled to overlap that compute.
//!
//! The graph is Dynamo's FX graph, of which Python hands over only a table ([`JobNode`]: a kind,
//! the op's name, the inputs as node indices, in graph order); both answers are node indices.
//! Python reads the FX graph, builds the parts and runs the collectives; the decisions are here.
//!
//! - [`regions`]: every compute node is keyed by the eager nodes (collectives, waits, ops that
//!   run in eager PyTorch) upstream of it and those downstream of it; nodes with one key form
//!   one region, which is convex (no path leaves a region and comes back). Keying by both
//!   directions is what makes the overlap: in a backward, the gradient of a layer's weights
//!   (downstream: that layer's reduce-scatter only) is a region of its own, so its collective
//!   starts before the next layer's gradients are computed. Regions are then merged where that
//!   costs no overlap.
//! - [`schedule`]: a topological order in which each collective is issued as soon as its input
//!   exists, compute that feeds one comes before other compute, and each wait comes as late as
//!   its first user allows.
//!
//! Needs: `inputs` name earlier nodes only (a graph order). Guarantees: every region is a set of
//! compute nodes whose split keeps the graph acyclic; the schedule is a topological order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Calls the macro `$m` with [`NodeKind`]'s variants (their docs included), the one list a
/// binding mirrors them from (the Python extension's `_C.NodeKind`).
#[macro_export]
macro_rules! node_kinds {
    ($m:ident) => {
        $m! {
            Placeholder,
            Output,
            /// An op compiled by tpuc.
            Compute,
            /// An op tpuc cannot compile: it runs in eager PyTorch, between regions.
            Eager,
            /// A functional collective (`_c10d_functional`), issued without waiting.
            Collective,
            /// `wait_tensor`: where a collective's result is first needed.
            Wait,
            /// `operator.getitem` of a multi-output node (its first input).
            Getitem,
            /// Anything else (`get_attr`, a fused part's `call_module`).
            Other,
        }
    };
}

macro_rules! define_node_kind {
    ($($(#[$doc:meta])* $v:ident,)*) => {
        /// What an FX node is, as far as the job's split and schedule are concerned.
        #[derive(Copy, Clone, Debug, PartialEq, Eq)]
        pub enum NodeKind {
            $($(#[$doc])* $v,)*
        }
    };
}
node_kinds!(define_node_kind);

/// One node of the table.
#[derive(Clone, Debug)]
pub struct JobNode {
    pub kind: NodeKind,
    /// The op's name (`mm.default`), for the cost class of a region; empty where there is none.
    pub target: String,
    /// Indices of the nodes it reads, the first argument first.
    pub inputs: Vec<usize>,
}

/// Ops whose cost is worth overlapping a collective with (prefixes of the op name's first
/// segment); a region without any is light.
const HEAVY: &[&str] = &[
    "mm", "bmm", "addmm", "baddbmm", "convolution", "_scaled_dot_product", "linear", "matmul", "einsum",
    "_flash_attention", "_efficient_attention", "convolution_backward",
];

fn heavy(target: &str) -> bool {
    let op = target.split('.').next().unwrap_or("");
    HEAVY.iter().any(|h| op.starts_with(h))
}

/// A set of small integers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn one(k: usize) -> Bits {
        let mut b = Bits::default();
        b.insert(k);
        b
    }
    fn insert(&mut self, k: usize) {
        if self.0.len() <= k / 64 {
            self.0.resize(k / 64 + 1, 0);
        }
        self.0[k / 64] |= 1 << (k % 64);
    }
    fn remove(&mut self, k: usize) {
        if let Some(w) = self.0.get_mut(k / 64) {
            *w &= !(1 << (k % 64));
        }
        self.trim();
    }
    fn contains(&self, k: usize) -> bool {
        self.0.get(k / 64).is_some_and(|w| w >> (k % 64) & 1 == 1)
    }
    fn union_with(&mut self, o: &Bits) {
        if self.0.len() < o.0.len() {
            self.0.resize(o.0.len(), 0);
        }
        for (a, b) in self.0.iter_mut().zip(&o.0) {
            *a |= b;
        }
    }
    /// `self \ o`.
    fn minus(&self, o: &Bits) -> Bits {
        let mut r = Bits(self.0.iter().enumerate().map(|(i, a)| a & !o.0.get(i).copied().unwrap_or(0)).collect());
        r.trim();
        r
    }
    fn intersects(&self, o: &Bits) -> bool {
        self.0.iter().zip(&o.0).any(|(a, b)| a & b != 0)
    }
    fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &w)| (0..64).filter(move |b| w >> b & 1 == 1).map(move |b| i * 64 + b))
    }
    /// Equal sets compare and hash equal: no trailing zero words.
    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }
}

/// Each node's distinct inputs, and its distinct users, in order.
fn edges(nodes: &[JobNode]) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    let mut ins = Vec::with_capacity(nodes.len());
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (n, node) in nodes.iter().enumerate() {
        let mut seen = Vec::new();
        for &i in &node.inputs {
            if !seen.contains(&i) {
                seen.push(i);
                users[i].push(n);
            }
        }
        ins.push(seen);
    }
    (ins, users)
}

/// Per node, the eager nodes (their bits) reachable through `next` (inputs or users), visiting
/// the nodes in `order` (which must visit a node's `next` before it).
fn reach(order: impl Iterator<Item = usize>, next: &[Vec<usize>], bit: &HashMap<usize, usize>) -> Vec<Bits> {
    let mut r = vec![Bits::default(); next.len()];
    for n in order {
        let mut b = Bits::default();
        for &m in &next[n] {
            b.union_with(&r[m]);
            if let Some(&k) = bit.get(&m) {
                b.insert(k);
            }
        }
        r[n] = b;
    }
    r
}

struct Region {
    up: Bits,
    down: Bits,
    nodes: Vec<usize>,
    light: bool,
}

/// The compute regions of the graph, each a list of node indices (see the module header).
pub fn regions(nodes: &[JobNode]) -> Vec<Vec<usize>> {
    let (ins, users) = edges(nodes);
    let calls = |k: NodeKind| matches!(k, NodeKind::Compute | NodeKind::Eager | NodeKind::Collective | NodeKind::Wait | NodeKind::Getitem);
    // Which call nodes run outside the programs; a getitem goes with its source.
    let mut eager = vec![false; nodes.len()];
    for (n, node) in nodes.iter().enumerate() {
        eager[n] = match node.kind {
            NodeKind::Getitem => node.inputs.first().is_none_or(|&s| !calls(nodes[s].kind) || eager[s]),
            NodeKind::Eager | NodeKind::Collective | NodeKind::Wait => true,
            _ => false,
        };
    }
    // Bit sets over the eager nodes: which of them each node depends on, and which depend on it.
    let mut bit: HashMap<usize, usize> = HashMap::new();
    for n in (0..nodes.len()).filter(|&n| eager[n]) {
        let k = bit.len();
        bit.insert(n, k);
    }
    let up = reach(0..nodes.len(), &ins, &bit);
    let down = reach((0..nodes.len()).rev(), &users, &bit);
    let mut index: HashMap<(Bits, Bits), usize> = HashMap::new();
    let mut groups: Vec<Region> = Vec::new();
    let mut group_of: Vec<Option<usize>> = vec![None; nodes.len()];
    for (n, node) in nodes.iter().enumerate() {
        if !calls(node.kind) || eager[n] {
            continue;
        }
        let joined = match node.kind {
            NodeKind::Getitem => node.inputs.first().and_then(|&s| group_of[s]),
            _ => None,
        };
        let g = joined.unwrap_or_else(|| {
            *index.entry((up[n].clone(), down[n].clone())).or_insert_with(|| {
                groups.push(Region { up: up[n].clone(), down: down[n].clone(), nodes: Vec::new(), light: true });
                groups.len() - 1
            })
        });
        group_of[n] = Some(g);
        groups[g].nodes.push(n);
        groups[g].light &= !heavy(&node.target);
    }
    merge(nodes.len(), &ins, groups)
}

/// Fewer, larger regions. In a topological order of the regions, each joins the one before it
/// where that keeps the split graph acyclic (no node outside the two on a path from one to the
/// other) and costs no overlap: the earlier one does not newly wait for a collective unless it
/// is light, and no collective that only one of them feeds waits for the other's heavy compute.
fn merge(n_nodes: usize, ins: &[Vec<usize>], mut regions: Vec<Region>) -> Vec<Vec<usize>> {
    // Units: the regions, then every other node (collectives, eager ops, placeholders).
    let mut unit_of: Vec<Option<usize>> = vec![None; n_nodes];
    for (k, r) in regions.iter().enumerate() {
        for &n in &r.nodes {
            unit_of[n] = Some(k);
        }
    }
    let mut count = regions.len();
    let unit_of: Vec<usize> = unit_of
        .into_iter()
        .map(|u| {
            u.unwrap_or_else(|| {
                count += 1;
                count - 1
            })
        })
        .collect();
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); count];
    let mut first = vec![usize::MAX; count];
    for (n, node_ins) in ins.iter().enumerate() {
        let u = unit_of[n];
        first[u] = first[u].min(n);
        for &i in node_ins {
            if unit_of[i] != u && !preds[u].contains(&unit_of[i]) {
                preds[u].push(unit_of[i]);
            }
        }
    }
    // A topological order of the units, earliest first node first.
    let mut indegree: Vec<usize> = preds.iter().map(Vec::len).collect();
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); count];
    for (u, ps) in preds.iter().enumerate() {
        for &v in ps {
            succs[v].push(u);
        }
    }
    let mut ready: BinaryHeap<Reverse<(usize, usize)>> =
        (0..count).filter(|&u| indegree[u] == 0).map(|u| Reverse((first[u], u))).collect();
    let mut order = Vec::with_capacity(count);
    while let Some(Reverse((_, u))) = ready.pop() {
        order.push(u);
        for &w in &succs[u] {
            indegree[w] -= 1;
            if indegree[w] == 0 {
                ready.push(Reverse((first[w], w)));
            }
        }
    }
    if order.len() != count {
        // Cannot happen for keyed regions: keep them as they are.
        return regions.into_iter().map(|r| r.nodes).collect();
    }
    let mut anc = vec![Bits::default(); count];
    for &u in &order {
        let mut a = Bits::default();
        for &v in &preds[u] {
            a.union_with(&anc[v]);
            a.insert(v);
        }
        anc[u] = a;
    }
    let mut alive = vec![true; regions.len()];
    let mut last: Option<usize> = None;
    for &u in &order {
        if u >= regions.len() {
            continue;
        }
        if let Some(l) = last {
            let (cur, r) = (&regions[l], &regions[u]);
            let mut between = anc[u].clone();
            between.remove(l);
            let cycle = between.iter().any(|x| anc[x].contains(l));
            let extra_waits = r.up.minus(&cur.up);
            // Collectives one part feeds and the other does not: in one program they would
            // wait for the other part's compute too.
            let (delayed_by_r, delayed_by_cur) = (cur.down.minus(&r.down), r.down.minus(&cur.down));
            if !cycle
                && (extra_waits.is_empty() || cur.light)
                && (delayed_by_r.is_empty() || r.light)
                && (delayed_by_cur.is_empty() || cur.light)
            {
                let taken = std::mem::take(&mut regions[u].nodes);
                let (r_up, r_down, r_light) = (regions[u].up.clone(), regions[u].down.clone(), regions[u].light);
                let cur = &mut regions[l];
                cur.nodes.extend(taken);
                cur.up.union_with(&r_up);
                cur.down.union_with(&r_down);
                cur.light &= r_light;
                alive[u] = false;
                let mut pair = Bits::one(l);
                pair.insert(u);
                let mut merged = anc[l].clone();
                merged.union_with(&anc[u]);
                anc[l] = merged.minus(&pair);
                let joined = anc[l].clone();
                for a in anc.iter_mut() {
                    if a.intersects(&pair) {
                        a.union_with(&joined);
                        a.insert(l);
                        a.remove(u);
                    }
                }
                continue;
            }
        }
        last = Some(u);
    }
    regions.into_iter().zip(alive).filter(|(_, a)| *a).map(|(r, _)| r.nodes).collect()
}

/// A topological order of the nodes (see the module header); with `overlap` false each wait
/// follows its collective at once (what running every collective as its own step costs, for
/// measurements). `None` if the table has a cycle (then the graph stays as it is).
pub fn schedule(nodes: &[JobNode], overlap: bool) -> Option<Vec<usize>> {
    let (ins, users) = edges(nodes);
    let collective = |k: NodeKind| matches!(k, NodeKind::Collective | NodeKind::Wait);
    // Whether a node feeds a collective, directly or through getitems (users come later).
    let mut feeds = vec![false; nodes.len()];
    for n in (0..nodes.len()).rev() {
        feeds[n] = users[n].iter().any(|&u| collective(nodes[u].kind) || (nodes[u].kind == NodeKind::Getitem && feeds[u]));
    }
    let rank = |n: usize| -> u8 {
        match nodes[n].kind {
            NodeKind::Placeholder => 0,
            NodeKind::Output => 5,
            NodeKind::Wait => 4,
            NodeKind::Collective => 1,
            NodeKind::Getitem if nodes[n].inputs.first().is_some_and(|&s| collective(nodes[s].kind)) => 1,
            // Compute a collective waits for goes first, so the collective is in flight while
            // the rest runs.
            _ if feeds[n] => 2,
            _ => 3,
        }
    };
    let mut indegree: Vec<usize> = ins.iter().map(Vec::len).collect();
    let mut ready: BinaryHeap<Reverse<(u8, usize)>> =
        (0..nodes.len()).filter(|&n| indegree[n] == 0).map(|n| Reverse((rank(n), n))).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(Reverse((_, n))) = ready.pop() {
        order.push(n);
        for &u in &users[n] {
            indegree[u] -= 1;
            if indegree[u] == 0 {
                ready.push(Reverse((rank(u), u)));
            }
        }
    }
    if order.len() != nodes.len() {
        return None;
    }
    if !overlap {
        let waits: Vec<usize> = order.iter().copied().filter(|&n| nodes[n].kind == NodeKind::Wait).collect();
        for w in waits {
            let Some(&src) = nodes[w].inputs.first() else { continue };
            let at = order.iter().position(|&n| n == w).expect("in the order");
            order.remove(at);
            let after = order.iter().position(|&n| n == src).expect("a wait's input is scheduled");
            order.insert(after + 1, w);
        }
    }
    Some(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(kind: NodeKind, target: &str, inputs: &[usize]) -> JobNode {
        JobNode { kind, target: target.into(), inputs: inputs.to_vec() }
    }

    /// A backward of two layers: each layer's weight gradient feeds its own all-reduce; the
    /// input gradient of layer 2 feeds layer 1.
    fn two_layer_backward() -> Vec<JobNode> {
        use NodeKind::*;
        vec![
            node(Placeholder, "", &[]),             // 0 grad_out
            node(Placeholder, "", &[]),             // 1 x2
            node(Placeholder, "", &[]),             // 2 x1
            node(Compute, "mm.default", &[0, 1]),   // 3 dW2
            node(Collective, "all_reduce.default", &[3]), // 4
            node(Compute, "mm.default", &[0]),      // 5 dx2
            node(Compute, "mm.default", &[5, 2]),   // 6 dW1
            node(Collective, "all_reduce.default", &[6]), // 7
            node(Wait, "wait_tensor.default", &[4]), // 8
            node(Wait, "wait_tensor.default", &[7]), // 9
            node(Output, "", &[8, 9]),              // 10
        ]
    }

    #[test]
    fn weight_gradients_are_regions_of_their_own_and_collectives_go_early() {
        let g = two_layer_backward();
        let mut r = regions(&g);
        r.iter_mut().for_each(|x| x.sort());
        r.sort();
        // dW2 feeds only the first all-reduce; dx2 and dW1 feed the second; all heavy, so no merge.
        assert_eq!(r, vec![vec![3], vec![5, 6]]);
        let order = schedule(&g, true).unwrap();
        let pos = |n: usize| order.iter().position(|&x| x == n).unwrap();
        assert!(pos(4) < pos(5), "the first all-reduce is issued before layer 1's compute: {order:?}");
        assert!(pos(8) > pos(6) && pos(9) > pos(7), "waits as late as their users allow: {order:?}");
        let serial = schedule(&g, false).unwrap();
        let spos = |n: usize| serial.iter().position(|&x| x == n).unwrap();
        assert_eq!(spos(8), spos(4) + 1);
        assert_eq!(spos(9), spos(7) + 1);
    }

    #[test]
    fn light_regions_merge() {
        use NodeKind::*;
        let g = vec![
            node(Placeholder, "", &[]),
            node(Compute, "add.Tensor", &[0]),
            node(Collective, "all_reduce.default", &[1]),
            node(Wait, "wait_tensor.default", &[2]),
            node(Compute, "mul.Tensor", &[0]),
            node(Compute, "add.Tensor", &[3, 4]),
            node(Output, "", &[5]),
        ];
        // 1 feeds the collective; 4 and 5 come after: {4} may join {1} (light), and {5} waits.
        let r = regions(&g);
        assert_eq!(r.iter().map(Vec::len).sum::<usize>(), 3);
        assert!(r.len() < 3, "{r:?}");
    }

    #[test]
    fn a_schedule_is_a_topological_order() {
        let g = two_layer_backward();
        for overlap in [true, false] {
            let order = schedule(&g, overlap).unwrap();
            let mut seen = vec![false; g.len()];
            for &n in &order {
                assert!(g[n].inputs.iter().all(|&i| seen[i]), "{order:?}");
                seen[n] = true;
            }
            assert!(seen.iter().all(|s| *s));
        }
    }

    fn arbitrary_graph() -> impl proptest::strategy::Strategy<Value = Vec<JobNode>> {
        use proptest::prelude::*;
        // Per node after the two placeholders: a kind and up to three earlier inputs.
        prop::collection::vec((0u8..6, prop::collection::vec(any::<prop::sample::Index>(), 1..4)), 1..40).prop_map(|spec| {
            let mut g = vec![node(NodeKind::Placeholder, "", &[]), node(NodeKind::Placeholder, "", &[])];
            for (k, ins) in spec {
                let n = g.len();
                let mut inputs: Vec<usize> = ins.iter().map(|ix| ix.index(n)).collect();
                let (kind, target) = match k {
                    0 => (NodeKind::Compute, "mm.default"),
                    1 | 2 => (NodeKind::Compute, "add.Tensor"),
                    3 => (NodeKind::Collective, "all_reduce.default"),
                    4 => (NodeKind::Wait, "wait_tensor.default"),
                    _ => (NodeKind::Eager, "nonzero.default"),
                };
                if kind == NodeKind::Wait {
                    inputs.truncate(1);
                }
                g.push(node(kind, target, &inputs));
            }
            let all: Vec<usize> = (2..g.len()).collect();
            g.push(node(NodeKind::Output, "", &all));
            g
        })
    }

    proptest::proptest! {
        /// Every compute node is in exactly one region, and the graph with each region
        /// contracted to one node is still acyclic; every schedule is a topological order.
        #[test]
        fn regions_partition_the_compute_acyclically(g in arbitrary_graph()) {
            let rs = regions(&g);
            let mut region_of = vec![None; g.len()];
            for (k, r) in rs.iter().enumerate() {
                for &n in r {
                    proptest::prop_assert!(region_of[n].is_none());
                    region_of[n] = Some(k);
                }
            }
            for (n, x) in g.iter().enumerate() {
                proptest::prop_assert_eq!(region_of[n].is_some(), x.kind == NodeKind::Compute);
            }
            // Units: regions, then every other node; a DAG iff a topological sort consumes all.
            let unit = |n: usize| region_of[n].unwrap_or(rs.len() + n);
            let count = rs.len() + g.len();
            let mut succ: Vec<Vec<usize>> = vec![Vec::new(); count];
            let mut indeg = vec![0usize; count];
            for (n, x) in g.iter().enumerate() {
                for &i in &x.inputs {
                    let (a, b) = (unit(i), unit(n));
                    if a != b && !succ[a].contains(&b) {
                        succ[a].push(b);
                        indeg[b] += 1;
                    }
                }
            }
            let mut stack: Vec<usize> = (0..count).filter(|&u| indeg[u] == 0).collect();
            let mut seen = 0;
            while let Some(u) = stack.pop() {
                seen += 1;
                for &v in &succ[u] {
                    indeg[v] -= 1;
                    if indeg[v] == 0 {
                        stack.push(v);
                    }
                }
            }
            proptest::prop_assert_eq!(seen, count);
            for overlap in [true, false] {
                let order = schedule(&g, overlap).unwrap();
                let mut done = vec![false; g.len()];
                for &n in &order {
                    proptest::prop_assert!(g[n].inputs.iter().all(|&i| done[i]));
                    done[n] = true;
                }
                proptest::prop_assert!(done.iter().all(|d| *d));
            }
        }
    }
}
