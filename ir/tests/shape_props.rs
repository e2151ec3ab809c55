//! Property tests of the shape rules (`tpuc_ir::infer`) and of the symbolic-dimension algebra
//! (`tpuc_ir::sym`). Each reference rule is written here independently of the implementation.

use proptest::prelude::*;
use proptest::sample::subsequence;
use tpuc_ir::infer::{broadcast_shapes, check_op, dot_general_dims, infer_reshape};
use tpuc_ir::parse::parse_sym_expr;
use tpuc_ir::*;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

fn st(dims: &[i64]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Static(d)).collect()
}

fn ty(dims: &[i64]) -> TensorType {
    TensorType::from_static(DType::F32, dims)
}

fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

/// A dim that is usually small and static (often 1), sometimes symbolic.
fn dim() -> impl Strategy<Value = Dim> {
    prop_oneof![
        6 => (0i64..4).prop_map(Dim::Static),
        1 => Just(Dim::symbol("s0")),
        1 => Just(Dim::symbol("s1")),
        1 => Just(Dim::from_expr(SymExpr::symbol("s0").mul_const(2).add(&SymExpr::constant(1)))),
    ]
}

fn shape() -> impl Strategy<Value = Vec<Dim>> {
    proptest::collection::vec(dim(), 0..5)
}

fn perm(n: usize) -> impl Strategy<Value = Vec<i64>> {
    Just((0..n as i64).collect::<Vec<_>>()).prop_shuffle()
}

// ---------------------------------------------------------------- broadcasting

/// NumPy's rule, written from its documentation: pad the shorter shape with leading 1s; two
/// dims are compatible when equal or when one is 1; the result takes the dim that is not 1.
fn numpy_broadcast(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let n = a.len().max(b.len());
    let pad = |s: &[i64]| std::iter::repeat_n(1, n - s.len()).chain(s.iter().copied()).collect::<Vec<_>>();
    let (a, b) = (pad(a), pad(b));
    a.iter().zip(&b).map(|(&x, &y)| if x == y || y == 1 { Some(x) } else if x == 1 { Some(y) } else { None }).collect()
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn broadcast_is_commutative(a in shape(), b in shape()) {
        prop_assert_eq!(broadcast_shapes(&a, &b).ok(), broadcast_shapes(&b, &a).ok());
    }

    #[test]
    fn broadcast_rank_and_dims(a in shape(), b in shape()) {
        if let Ok(r) = broadcast_shapes(&a, &b) {
            prop_assert_eq!(r.len(), a.len().max(b.len()));
            for s in [&a, &b] {
                let off = r.len() - s.len();
                for (i, d) in s.iter().enumerate() {
                    prop_assert!(*d == r[off + i] || d.is_one(), "{d} vs result {}", r[off + i]);
                }
            }
        }
    }

    #[test]
    fn broadcast_with_itself_is_identity(a in shape()) {
        prop_assert_eq!(broadcast_shapes(&a, &a), Ok(a.clone()));
    }

    #[test]
    fn broadcast_agrees_with_numpy(
        a in proptest::collection::vec(0i64..4, 0..5),
        b in proptest::collection::vec(0i64..4, 0..5),
    ) {
        let got = broadcast_shapes(&st(&a), &st(&b)).ok();
        prop_assert_eq!(got, numpy_broadcast(&a, &b).map(|v| st(&v)));
    }
}

// ---------------------------------------------------------------- reshape

/// Factors, and a target that groups them differently (same element count).
fn regrouping() -> impl Strategy<Value = (i64, Vec<i64>)> {
    proptest::collection::vec(1i64..5, 0..6)
        .prop_shuffle()
        .prop_flat_map(|f| {
            let n = f.len();
            (Just(f), proptest::collection::vec(any::<bool>(), n))
        })
        .prop_map(|(factors, cuts)| {
            let numel = factors.iter().product();
            let mut target = Vec::new();
            let mut cur = 1;
            for (i, f) in factors.iter().enumerate() {
                cur *= f;
                if cuts[i] || i + 1 == factors.len() {
                    target.push(cur);
                    cur = 1;
                }
            }
            (numel, target)
        })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn reshape_preserves_element_count((numel, target) in regrouping()) {
        let r = infer_reshape(numel, &target).unwrap();
        prop_assert_eq!(r.iter().product::<i64>(), numel);
        prop_assert_eq!(r, target);
    }

    #[test]
    fn reshape_resolves_one_minus_one((numel, target) in regrouping(), pick in any::<prop::sample::Index>()) {
        prop_assume!(!target.is_empty());
        let i = pick.index(target.len());
        let mut t = target.clone();
        t[i] = -1;
        prop_assert_eq!(infer_reshape(numel, &t), Ok(target));
    }

    #[test]
    fn reshape_rejects_two_minus_ones((numel, target) in regrouping(), a in any::<prop::sample::Index>(), b in any::<prop::sample::Index>()) {
        prop_assume!(target.len() >= 2);
        let (i, mut j) = (a.index(target.len()), b.index(target.len() - 1));
        if j >= i { j += 1; }
        let mut t = target.clone();
        t[i] = -1;
        t[j] = -1;
        let e = infer_reshape(numel, &t).unwrap_err();
        prop_assert!(e.contains("more than one -1"), "{e}");
    }

    #[test]
    fn reshape_rejects_non_divisible((numel, target) in regrouping(), extra in 2i64..5, minus in any::<bool>()) {
        // numel * extra + 1 is never a multiple of numel * extra.
        let mut t = target.clone();
        t.push(extra);
        if minus { t.insert(0, -1); }
        let n = numel * extra + 1;
        prop_assert!(n % (numel * extra) != 0 || numel * extra == 1);
        if numel * extra != 1 {
            let e = infer_reshape(n, &t).unwrap_err();
            prop_assert!(e.contains("cannot reshape"), "{e}");
        }
    }
}

#[test]
fn reshape_edge_cases() {
    assert_eq!(infer_reshape(0, &[0, 4]), Ok(vec![0, 4]));
    // -1 next to a 0 is ambiguous (PyTorch rejects it too).
    assert!(infer_reshape(0, &[0, -1]).is_err());
    assert!(infer_reshape(6, &[-2, 3]).unwrap_err().contains("negative size"));
    assert_eq!(infer_reshape(1, &[]), Ok(vec![]));
    assert_eq!(infer_reshape(1, &[-1]), Ok(vec![1]));
}

// ---------------------------------------------------------------- dot_general

/// A random dot_general: sizes of batch, lhs-free, rhs-free and contracting dims, and where each
/// sits in lhs and rhs.
#[derive(Debug, Clone)]
struct Dot {
    batch: Vec<i64>,
    lfree: Vec<i64>,
    rfree: Vec<i64>,
    contract: Vec<i64>,
    lperm: Vec<i64>,
    rperm: Vec<i64>,
}

fn dot() -> impl Strategy<Value = Dot> {
    let sizes = || proptest::collection::vec(1i64..6, 0..3);
    (sizes(), sizes(), sizes(), sizes()).prop_flat_map(|(batch, lfree, rfree, contract)| {
        let (ln, rn) = (batch.len() + lfree.len() + contract.len(), batch.len() + rfree.len() + contract.len());
        (Just(batch), Just(lfree), Just(rfree), Just(contract), perm(ln), perm(rn))
            .prop_map(|(batch, lfree, rfree, contract, lperm, rperm)| Dot { batch, lfree, rfree, contract, lperm, rperm })
    })
}

impl Dot {
    /// (shape, batch positions, contracting positions) of one side. Logical dim `k` of
    /// [batch, free, contract] sits at position `perm[k]`.
    fn side(&self, free: &[i64], perm: &[i64]) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
        let logical: Vec<i64> = self.batch.iter().chain(free).chain(&self.contract).copied().collect();
        let mut shape = vec![0; logical.len()];
        for (k, &p) in perm.iter().enumerate() {
            shape[p as usize] = logical[k];
        }
        let nb = self.batch.len();
        let nf = free.len();
        let batch_pos = perm[..nb].to_vec();
        let contract_pos = perm[nb + nf..].to_vec();
        (shape, batch_pos, contract_pos)
    }

    fn run(&self, rhs_shape_edit: impl Fn(&mut Vec<i64>, &[i64])) -> Result<Vec<Dim>, String> {
        let (l, lb, lc) = self.side(&self.lfree, &self.lperm);
        let (mut r, rb, rc) = self.side(&self.rfree, &self.rperm);
        rhs_shape_edit(&mut r, &rc);
        dot_general_dims(&st(&l), &st(&r), &lb, &rb, &lc, &rc)
    }

    /// Free dims in the order they appear in the operand.
    fn free_in_order(&self, free: &[i64], perm: &[i64]) -> Vec<i64> {
        let nb = self.batch.len();
        let mut pos: Vec<(i64, i64)> = free.iter().enumerate().map(|(k, &s)| (perm[nb + k], s)).collect();
        pos.sort();
        pos.into_iter().map(|(_, s)| s).collect()
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn dot_general_result_dims(d in dot()) {
        let r = d.run(|_, _| {}).unwrap();
        prop_assert_eq!(r.len(), d.batch.len() + d.lfree.len() + d.rfree.len());
        let mut want = d.batch.clone();
        want.extend(d.free_in_order(&d.lfree, &d.lperm));
        want.extend(d.free_in_order(&d.rfree, &d.rperm));
        prop_assert_eq!(r, st(&want));
    }

    #[test]
    fn dot_general_rejects_mismatched_contracting(d in dot(), which in any::<prop::sample::Index>()) {
        prop_assume!(!d.contract.is_empty());
        let k = which.index(d.contract.len());
        let e = d.run(|r, rc| r[rc[k] as usize] += 1).unwrap_err();
        prop_assert!(e.contains("contracting dim sizes differ"), "{e}");
    }

    #[test]
    fn matmul(m in 1i64..9, k in 1i64..9, n in 1i64..9) {
        prop_assert_eq!(dot_general_dims(&st(&[m, k]), &st(&[k, n]), &[], &[], &[1], &[0]), Ok(st(&[m, n])));
        prop_assert!(dot_general_dims(&st(&[m, k]), &st(&[k + 1, n]), &[], &[], &[1], &[0]).is_err());
    }

    #[test]
    fn batched_matmul(b in 1i64..5, h in 1i64..5, m in 1i64..9, k in 1i64..9, n in 1i64..9) {
        let r = dot_general_dims(&st(&[b, h, m, k]), &st(&[b, h, k, n]), &[0, 1], &[0, 1], &[3], &[2]);
        prop_assert_eq!(r, Ok(st(&[b, h, m, n])));
        let e = dot_general_dims(&st(&[b, h, m, k]), &st(&[b + 1, h, k, n]), &[0, 1], &[0, 1], &[3], &[2]);
        prop_assert!(e.unwrap_err().contains("batch dim sizes differ"));
    }
}

#[test]
fn dot_general_symbolic_and_bad_lists() {
    let s = Dim::symbol("s0");
    let r = dot_general_dims(&[s.clone(), Dim::Static(4)], &st(&[4, 8]), &[], &[], &[1], &[0]);
    assert_eq!(r, Ok(vec![s, Dim::Static(8)]));
    assert!(dot_general_dims(&st(&[2, 3]), &st(&[3, 2]), &[], &[], &[1], &[]).is_err());
    assert!(dot_general_dims(&st(&[2, 3]), &st(&[3, 2]), &[], &[], &[2], &[0]).unwrap_err().contains("out of range"));
    assert!(dot_general_dims(&st(&[3, 3]), &st(&[3, 3]), &[0], &[0], &[0], &[1]).unwrap_err().contains("repeated"));
}

// ---------------------------------------------------------------- check_op

fn one_result(opcode: Opcode, operands: &[&TensorType], attrs: Attrs) -> Result<TensorType, String> {
    let mut r = check_op(opcode, operands, &attrs, None)?;
    assert_eq!(r.len(), 1);
    Ok(r.remove(0))
}

fn sym_shape() -> impl Strategy<Value = Vec<Dim>> {
    proptest::collection::vec(prop_oneof![3 => (0i64..6).prop_map(Dim::Static), 1 => Just(Dim::symbol("s0"))], 0..6)
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn transpose_then_inverse_is_identity(
        (dims, p) in sym_shape().prop_flat_map(|d| { let n = d.len(); (Just(d), perm(n)) })
    ) {
        let t = TensorType::new(DType::BF16, dims.clone());
        let once = one_result(Opcode::Transpose, &[&t], Attrs::new().with("permutation", ints(&p))).unwrap();
        for (i, &pi) in p.iter().enumerate() {
            prop_assert_eq!(&once.dims[i], &dims[pi as usize]);
        }
        let mut inv = vec![0i64; p.len()];
        for (i, &pi) in p.iter().enumerate() {
            inv[pi as usize] = i as i64;
        }
        let back = one_result(Opcode::Transpose, &[&once], Attrs::new().with("permutation", ints(&inv))).unwrap();
        prop_assert_eq!(back, t);
    }

    #[test]
    fn slice_result_dims(spec in proptest::collection::vec((0i64..12, 0i64..12, 0i64..12, 1i64..5), 0..5)) {
        // Per dim: size n and 0 <= start <= limit <= n.
        let mut dims = Vec::new();
        let (mut s, mut l, mut strides) = (Vec::new(), Vec::new(), Vec::new());
        for &(n, a, b, stride) in &spec {
            let (a, b) = (a.min(n), b.min(n));
            dims.push(n);
            s.push(a.min(b));
            l.push(a.max(b));
            strides.push(stride);
        }
        let attrs = Attrs::new().with("start_indices", ints(&s)).with("limit_indices", ints(&l)).with("strides", ints(&strides));
        let r = one_result(Opcode::Slice, &[&ty(&dims)], attrs).unwrap();
        for i in 0..dims.len() {
            let want = ((l[i] - s[i]) as f64 / strides[i] as f64).ceil() as i64;
            prop_assert_eq!(&r.dims[i], &Dim::Static(want));
        }
    }

    #[test]
    fn slice_rejects_limit_past_end(n in 0i64..8, over in 1i64..4) {
        let attrs = Attrs::new().with("start_indices", ints(&[0])).with("limit_indices", ints(&[n + over])).with("strides", ints(&[1]));
        prop_assert!(one_result(Opcode::Slice, &[&ty(&[n])], attrs).unwrap_err().contains("exceeds"));
    }

    #[test]
    fn concatenate_sums_sizes(
        (base, d, sizes) in sym_shape()
            .prop_filter("rank >= 1", |s| !s.is_empty())
            .prop_flat_map(|s| { let r = s.len(); (Just(s), 0..r, proptest::collection::vec(sym_shape_dim(), 1..5)) })
    ) {
        let tys: Vec<TensorType> = sizes.iter().map(|sz| {
            let mut dims = base.clone();
            dims[d] = sz.clone();
            TensorType::new(DType::I64, dims)
        }).collect();
        let refs: Vec<&TensorType> = tys.iter().collect();
        let r = one_result(Opcode::Concatenate, &refs, Attrs::new().with("dimension", Attr::Int(d as i64))).unwrap();
        let total = sizes.iter().fold(SymExpr::constant(0), |acc, s| acc.add(&s.to_expr()));
        for (i, rd) in r.dims.iter().enumerate() {
            if i == d { prop_assert_eq!(rd, &Dim::from_expr(total.clone())); } else { prop_assert_eq!(rd, &base[i]); }
        }
    }

    #[test]
    fn reduce_removes_dims(
        (dims, red) in sym_shape().prop_flat_map(|d| { let n = d.len(); (Just(d), subsequence((0..n as i64).collect::<Vec<_>>(), 0..=n)) }),
        shuffle in any::<bool>(),
    ) {
        let mut red = red;
        if shuffle { red.reverse(); }
        let t = TensorType::new(DType::F16, dims.clone());
        let attrs = Attrs::new().with("dimensions", ints(&red)).with("kind", Attr::Str("sum".into()));
        let r = one_result(Opcode::Reduce, &[&t], attrs).unwrap();
        let want: Vec<Dim> = dims.iter().enumerate().filter(|(i, _)| !red.contains(&(*i as i64))).map(|(_, d)| d.clone()).collect();
        prop_assert_eq!(r, TensorType::new(DType::F16, want));
    }
}

fn sym_shape_dim() -> impl Strategy<Value = Dim> {
    prop_oneof![3 => (0i64..6).prop_map(Dim::Static), 1 => Just(Dim::symbol("s0")), 1 => Just(Dim::symbol("s1"))]
}

#[derive(Debug, Clone)]
struct Conv {
    n: i64,
    groups: i64,
    in_per_group: i64,
    out_per_group: i64,
    /// Per spatial dim: input size, kernel size, stride, pad low, pad high, lhs dilation, rhs dilation.
    spatial: Vec<(i64, i64, i64, i64, i64, i64, i64)>,
}

fn conv() -> impl Strategy<Value = Conv> {
    (
        1i64..3,
        1i64..3,
        1i64..3,
        1i64..3,
        proptest::collection::vec((1i64..12, 1i64..4, 1i64..4, 0i64..3, 0i64..3, 1i64..3, 1i64..3), 1..4),
    )
        .prop_map(|(n, groups, in_per_group, out_per_group, spatial)| Conv { n, groups, in_per_group, out_per_group, spatial })
}

/// The kernel shape and the attributes of `c`'s convolution.
fn conv_kernel(c: &Conv) -> (Vec<i64>, Attrs) {
    let mut rhs = vec![c.groups * c.out_per_group, c.in_per_group];
    let (mut strides, mut pad, mut ld, mut rd) = (vec![], vec![], vec![], vec![]);
    for &(_, k, s, lo, hi, dl, dr) in &c.spatial {
        rhs.push(k);
        strides.push(s);
        pad.extend([lo, hi]);
        ld.push(dl);
        rd.push(dr);
    }
    let attrs = Attrs::new()
        .with("window_strides", ints(&strides))
        .with("padding", ints(&pad))
        .with("lhs_dilation", ints(&ld))
        .with("rhs_dilation", ints(&rd))
        .with("feature_group_count", Attr::Int(c.groups))
        .with("batch_group_count", Attr::Int(1));
    (rhs, attrs)
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn convolution_output_sizes(c in conv()) {
        let (rhs, attrs) = conv_kernel(&c);
        let mut lhs = vec![c.n, c.groups * c.in_per_group];
        lhs.extend(c.spatial.iter().map(|&(x, ..)| x));
        let cout = c.groups * c.out_per_group;
        let r = one_result(Opcode::Convolution, &[&ty(&lhs), &ty(&rhs)], attrs).unwrap();
        // Closed form: out = floor((in_eff + lo + hi - k_eff) / s) + 1 with
        // in_eff = (in - 1) * dl + 1, k_eff = (k - 1) * dr + 1, and 0 if the window never fits.
        let mut want = vec![c.n, cout];
        for &(x, k, s, lo, hi, dl, dr) in &c.spatial {
            let span = (x - 1) * dl + 1 + lo + hi - ((k - 1) * dr + 1);
            want.push(if span < 0 { 0 } else { span.div_euclid(s) + 1 });
        }
        prop_assert_eq!(r, ty(&want));
    }

    /// A symbolic spatial dim gives an expression that, at every size where the window fits,
    /// equals the static rule at that size (the first spatial dim made symbolic).
    #[test]
    fn convolution_symbolic_spatial_dim_agrees_with_the_static_rule(c in conv(), sizes in proptest::collection::vec(1i64..40, 1..6)) {
        let cin = c.groups * c.in_per_group;
        let (rhs, attrs) = conv_kernel(&c);
        let mut lhs: Vec<Dim> = vec![Dim::Static(c.n), Dim::Static(cin), Dim::symbol("t")];
        lhs.extend(c.spatial[1..].iter().map(|&(x, ..)| Dim::Static(x)));
        let sym = one_result(Opcode::Convolution, &[&TensorType::new(DType::F32, lhs), &ty(&rhs)], attrs.clone()).unwrap();
        let (_, k, _, lo, hi, dl, dr) = c.spatial[0];
        for n in sizes {
            if (n - 1) * dl + 1 + lo + hi < (k - 1) * dr + 1 {
                continue; // the window does not fit: torch guards such sizes out
            }
            let mut at = vec![c.n, cin, n];
            at.extend(c.spatial[1..].iter().map(|&(x, ..)| x));
            let stat = one_result(Opcode::Convolution, &[&ty(&at), &ty(&rhs)], attrs.clone()).unwrap();
            let got = match &sym.dims[2] {
                Dim::Static(v) => *v,
                Dim::Sym(e) => e.eval(&|name| (name == "t").then_some(n)).unwrap(),
            };
            prop_assert_eq!(Dim::Static(got), stat.dims[2].clone());
            prop_assert_eq!(&sym.dims[3..], &stat.dims[3..]);
        }
    }

    #[test]
    fn convolution_rejects_bad_feature_count(c in conv()) {
        let cin = c.groups * c.in_per_group + 1;
        let mut lhs = vec![c.n, cin];
        let mut rhs = vec![c.groups * c.out_per_group, c.in_per_group];
        let sp = c.spatial.len();
        for &(x, k, ..) in &c.spatial {
            lhs.push(x);
            rhs.push(k);
        }
        let attrs = Attrs::new()
            .with("window_strides", ints(&vec![1; sp]))
            .with("padding", ints(&vec![0; 2 * sp]))
            .with("lhs_dilation", ints(&vec![1; sp]))
            .with("rhs_dilation", ints(&vec![1; sp]))
            .with("feature_group_count", Attr::Int(c.groups))
            .with("batch_group_count", Attr::Int(1));
        let e = one_result(Opcode::Convolution, &[&ty(&lhs), &ty(&rhs)], attrs).unwrap_err();
        prop_assert!(e.contains("input features"), "{e}");
    }

    #[test]
    fn gather_embedding(v in 1i64..100, d in prop_oneof![(1i64..64).prop_map(Dim::Static), Just(Dim::symbol("s1"))],
                        b in sym_shape_dim(), t in sym_shape_dim(), idx in prop::sample::select(vec![DType::I32, DType::I64])) {
        let operand = TensorType::new(DType::BF16, [Dim::Static(v), d.clone()]);
        let indices = TensorType::new(idx, [b.clone(), t.clone()]);
        // A symbolic operand dim is taken whole by any slice size other than 1.
        let slice_d = d.as_static().unwrap_or(i64::MAX);
        let attrs = Attrs::new()
            .with("offset_dims", ints(&[2]))
            .with("collapsed_slice_dims", ints(&[0]))
            .with("operand_batching_dims", ints(&[]))
            .with("start_indices_batching_dims", ints(&[]))
            .with("start_index_map", ints(&[0]))
            .with("index_vector_dim", Attr::Int(2))
            .with("slice_sizes", ints(&[1, slice_d]));
        let r = one_result(Opcode::Gather, &[&operand, &indices], attrs).unwrap();
        prop_assert_eq!(r, TensorType::new(DType::BF16, [b, t, d]));
    }
}

#[test]
fn gather_rejects_float_indices_and_oversized_slices() {
    let operand = ty(&[10, 4]);
    let attrs = |sizes: &[i64]| {
        Attrs::new()
            .with("offset_dims", ints(&[2]))
            .with("collapsed_slice_dims", ints(&[0]))
            .with("operand_batching_dims", ints(&[]))
            .with("start_indices_batching_dims", ints(&[]))
            .with("start_index_map", ints(&[0]))
            .with("index_vector_dim", Attr::Int(2))
            .with("slice_sizes", ints(sizes))
    };
    let fidx = ty(&[2, 3]);
    assert!(one_result(Opcode::Gather, &[&operand, &fidx], attrs(&[1, 4])).unwrap_err().contains("must be integers"));
    let idx = TensorType::from_static(DType::I64, &[2, 3]);
    assert!(one_result(Opcode::Gather, &[&operand, &idx], attrs(&[1, 5])).unwrap_err().contains("out of range"));
    assert!(one_result(Opcode::Gather, &[&operand, &idx], attrs(&[2, 4])).unwrap_err().contains("slice size <= 1"));
}

// ---------------------------------------------------------------- symbolic dims

/// An expression tree, evaluated directly (the reference) and built as a `SymExpr`.
#[derive(Debug, Clone)]
enum E {
    Sym(usize),
    Const(i64),
    Add(Box<E>, Box<E>),
    Sub(Box<E>, Box<E>),
    Mul(Box<E>, Box<E>),
    Neg(Box<E>),
    FloorDiv(Box<E>, i64),
    Mod(Box<E>, i64),
}

// Names with an `x` (the type syntax's dim separator) print parenthesized where they stand alone.
const SYMS: [&str; 3] = ["s0", "max_len", "x"];

fn expr() -> impl Strategy<Value = E> {
    let leaf = prop_oneof![(0..SYMS.len()).prop_map(E::Sym), (-4i64..5).prop_map(E::Const)];
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Add(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Sub(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Mul(Box::new(a), Box::new(b))),
            inner.clone().prop_map(|a| E::Neg(Box::new(a))),
            (inner.clone(), 1i64..5).prop_map(|(a, c)| E::FloorDiv(Box::new(a), c)),
            (inner, 1i64..5).prop_map(|(a, c)| E::Mod(Box::new(a), c)),
        ]
    })
}

impl E {
    fn build(&self) -> SymExpr {
        match self {
            E::Sym(i) => SymExpr::symbol(SYMS[*i]),
            E::Const(c) => SymExpr::constant(*c),
            E::Add(a, b) => a.build().add(&b.build()),
            E::Sub(a, b) => a.build().sub(&b.build()),
            E::Mul(a, b) => a.build().mul(&b.build()),
            E::Neg(a) => a.build().neg(),
            E::FloorDiv(a, c) => a.build().floordiv(*c),
            E::Mod(a, c) => a.build().modulo(*c),
        }
    }

    /// Direct evaluation with floor division and a non-negative remainder (written without
    /// `div_euclid`/`rem_euclid`).
    fn eval(&self, env: &[i64; 3]) -> Option<i64> {
        Some(match self {
            E::Sym(i) => env[*i],
            E::Const(c) => *c,
            E::Add(a, b) => a.eval(env)?.checked_add(b.eval(env)?)?,
            E::Sub(a, b) => a.eval(env)?.checked_sub(b.eval(env)?)?,
            E::Mul(a, b) => a.eval(env)?.checked_mul(b.eval(env)?)?,
            E::Neg(a) => a.eval(env)?.checked_neg()?,
            E::FloorDiv(a, c) => {
                let x = a.eval(env)?;
                let q = x / c;
                if x % c != 0 && x < 0 { q - 1 } else { q }
            }
            E::Mod(a, c) => {
                let r = a.eval(env)? % c;
                if r < 0 { r + c } else { r }
            }
        })
    }
}

fn env() -> impl Strategy<Value = [i64; 3]> {
    [-20i64..20, -20i64..20, -20i64..20]
}

fn eval_sym(e: &SymExpr, env: &[i64; 3]) -> Option<i64> {
    e.eval(&|s| SYMS.iter().position(|x| *x == s).map(|i| env[i]))
}

/// A polynomial as a list of monomials (coefficient, symbol indices).
fn poly() -> impl Strategy<Value = Vec<(i64, Vec<usize>)>> {
    proptest::collection::vec((-5i64..6, proptest::collection::vec(0..SYMS.len(), 0..3)), 0..5)
}

fn build_poly(p: &[(i64, Vec<usize>)]) -> SymExpr {
    p.iter().fold(SymExpr::constant(0), |acc, (c, syms)| {
        let m = syms.iter().fold(SymExpr::constant(*c), |m, &s| m.mul(&SymExpr::symbol(SYMS[s])));
        acc.add(&m)
    })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn sym_add_mul_commutative_associative(a in expr(), b in expr(), c in expr()) {
        let (a, b, c) = (a.build(), b.build(), c.build());
        prop_assert_eq!(a.add(&b), b.add(&a));
        prop_assert_eq!(a.mul(&b), b.mul(&a));
        prop_assert_eq!(a.add(&b).add(&c), a.add(&b.add(&c)));
        prop_assert_eq!(a.mul(&b).mul(&c), a.mul(&b.mul(&c)));
    }

    #[test]
    fn sym_distributive(a in expr(), b in expr(), c in expr()) {
        let (a, b, c) = (a.build(), b.build(), c.build());
        prop_assert_eq!(a.mul(&b.add(&c)), a.mul(&b).add(&a.mul(&c)));
    }

    #[test]
    fn sym_identities(a in expr()) {
        let a = a.build();
        prop_assert_eq!(a.sub(&a), SymExpr::constant(0));
        prop_assert_eq!(a.sub(&a).as_const(), Some(0));
        prop_assert_eq!(a.add(&SymExpr::constant(0)), a.clone());
        prop_assert_eq!(a.mul(&SymExpr::constant(1)), a.clone());
        prop_assert_eq!(a.mul(&SymExpr::constant(0)), SymExpr::constant(0));
        prop_assert_eq!(a.neg().neg(), a.clone());
        prop_assert_eq!(a.floordiv(1), a.clone());
        prop_assert_eq!(a.modulo(1), SymExpr::constant(0));
    }

    #[test]
    fn sym_eval_agrees_with_direct_evaluation(e in expr(), env in env()) {
        if let Some(want) = e.eval(&env) {
            prop_assert_eq!(eval_sym(&e.build(), &env), Some(want), "{}", e.build());
        }
    }

    #[test]
    fn sym_floordiv_mod_are_euclidean(e in expr(), c in 1i64..7, env in env()) {
        let s = e.build();
        if let Some(x) = eval_sym(&s, &env) {
            let q = eval_sym(&s.floordiv(c), &env).unwrap();
            let r = eval_sym(&s.modulo(c), &env).unwrap();
            prop_assert_eq!(q * c + r, x);
            prop_assert!((0..c).contains(&r));
            prop_assert_eq!(q, x.div_euclid(c));
            prop_assert_eq!(r, x.rem_euclid(c));
        }
    }

    #[test]
    fn sym_canonical_form(p in poly(), shuffle_seed in any::<u64>(), split in -3i64..4) {
        // The same polynomial built a second way: terms reversed and rotated, factors reversed,
        // each coefficient split in two, the pieces added separately.
        let mut q: Vec<(i64, Vec<usize>)> = Vec::new();
        for (c, syms) in p.iter().rev() {
            let mut syms = syms.clone();
            syms.reverse();
            q.push((c - split, syms.clone()));
            q.push((split, syms));
        }
        if !q.is_empty() {
            let k = (shuffle_seed % q.len() as u64) as usize;
            q.rotate_left(k);
        }
        let (a, b) = (build_poly(&p), build_poly(&q));
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(a.to_string(), b.to_string());
        // The printed form reads back to the same expression.
        let parsed = parse_sym_expr(&a.to_string()).unwrap();
        prop_assert_eq!(parsed, a);
    }

    #[test]
    fn sym_print_parse_roundtrip(e in expr()) {
        let s = e.build();
        let text = s.to_string();
        let parsed = parse_sym_expr(&text).unwrap_or_else(|err| panic!("{text}: {err}"));
        prop_assert_eq!(&parsed, &s, "{}", text);
        prop_assert_eq!(parsed.to_string(), text);
    }

    #[test]
    fn sym_substitute_then_eval(e in expr(), env in env()) {
        // Substituting every symbol by its value gives a constant equal to eval.
        let s = e.build();
        let c = s.substitute(&|name| SYMS.iter().position(|x| *x == name).map(|i| SymExpr::constant(env[i])));
        if let Some(want) = e.eval(&env) {
            prop_assert_eq!(c.as_const(), Some(want));
        }
    }
}

#[test]
fn dims_fold_constants() {
    let s0 = SymExpr::symbol("s0");
    assert_eq!(Dim::from_expr(s0.sub(&s0).add(&SymExpr::constant(3))), Dim::Static(3));
    assert_eq!(Dim::symbol("s0").mul(&Dim::Static(2)).to_string(), "(2*s0)");
    assert_eq!(Dim::Static(2).add(&Dim::Static(3)), Dim::Static(5));
}
