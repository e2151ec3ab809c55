//! Property tests of the text form: random well-formed modules, built through the `Builder`,
//! print → parse → print identically and verify; mutated or truncated text never makes the
//! parser or the verifier panic.
//!
//! Modules come from an interpreter over a vector of random choices (`Gen`), so proptest shrinks
//! a failing module by shortening or zeroing the choices; running out of choices reads zeros,
//! which always gives a small valid module.

use proptest::prelude::*;
use tpuc_ir::*;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

struct Gen<'a> {
    data: &'a [u64],
    i: usize,
}

impl Gen<'_> {
    fn next(&mut self) -> u64 {
        let v = self.data.get(self.i).copied().unwrap_or(0);
        self.i += 1;
        v
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn range(&mut self, lo: i64, hi_incl: i64) -> i64 {
        lo + self.below((hi_incl - lo + 1) as usize) as i64
    }
    fn coin(&mut self) -> bool {
        self.next() % 2 == 1
    }
    fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())].clone()
    }
    /// A random subset of `0..n` in random order.
    fn subset(&mut self, n: usize) -> Vec<i64> {
        let mut v: Vec<i64> = (0..n as i64).filter(|_| self.coin()).collect();
        self.shuffle(&mut v);
        v
    }
    fn perm(&mut self, n: usize) -> Vec<i64> {
        let mut v: Vec<i64> = (0..n as i64).collect();
        self.shuffle(&mut v);
        v
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

// ---------------------------------------------------------------- random pieces

const STRING_PIECES: &[&str] = &[
    "a", "fc1.weight", "\"", "\\", "\n", "\t", "\r", "é", "日本語", "🦀", "\u{0}", "\u{1f}", "\u{7f}", "x", " ",
    "loc(#0)", "}", "%1", "\\u{41}", "\\n", "model.py:12 in forward", "#0 = ", "//", "'",
];

fn string(g: &mut Gen) -> String {
    (0..g.below(5)).map(|_| g.pick(STRING_PIECES)).collect()
}

fn sym_expr(name: &str) -> SymExpr {
    SymExpr::symbol(name)
}

fn dim(g: &mut Gen) -> Dim {
    let (s0, s1) = (sym_expr("s0"), sym_expr("s1"));
    match g.below(14) {
        0..=7 => Dim::Static(g.range(1, 4)),
        8 => Dim::Static(0),
        9 => Dim::symbol("s0"),
        10 => Dim::symbol("s1"),
        _ => Dim::from_expr(g.pick(&[
            s0.mul_const(2).add(&SymExpr::constant(1)),
            s0.mul(&s1),
            s0.floordiv(2),
            s1.modulo(3).add(&s0),
            SymExpr::constant(64).sub(&s0),
            s0.add(&s1).floordiv(4).mul_const(3),
        ])),
    }
}

fn static_dim(g: &mut Gen) -> Dim {
    Dim::Static(if g.below(10) == 0 { 0 } else { g.range(1, 4) })
}

fn dims(g: &mut Gen, max_rank: usize, d: fn(&mut Gen) -> Dim) -> Vec<Dim> {
    (0..g.below(max_rank + 1)).map(|_| d(g)).collect()
}

fn dtype(g: &mut Gen) -> DType {
    g.pick(&DType::ALL)
}

fn float(g: &mut Gen) -> f64 {
    g.pick(&[
        0.0,
        -0.0,
        1.0,
        -1.5,
        0.1,
        1e-5,
        1e-12,
        448.0,
        65504.0,
        1e300,
        -1e-300,
        5e-324,
        f64::MAX,
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        std::f64::consts::PI,
    ])
}

fn scalar(g: &mut Gen) -> Scalar {
    match g.below(4) {
        0 => Scalar::Bool(g.coin()),
        1 => Scalar::Int(g.pick(&[0, 1, -1, 7, 300, -129, i64::MIN, i64::MAX])),
        2 => Scalar::UInt(g.pick(&[0, 1, 255, 65535, u64::from(u32::MAX), i64::MAX as u64, u64::MAX])),
        _ => Scalar::Float(float(g)),
    }
}

fn tensor_data(g: &mut Gen) -> TensorData {
    let ty = TensorType::new(dtype(g), dims(g, 3, static_dim));
    if g.coin() {
        TensorData::splat(ty, scalar(g)).unwrap()
    } else {
        let n = ty.size_bytes().unwrap();
        let bytes: Vec<u8> = (0..n).map(|_| g.next() as u8).collect();
        TensorData::new(ty, bytes.into()).unwrap()
    }
}

/// An attribute of any kind (for `tpuc.*` extension attributes).
fn attr(g: &mut Gen) -> Attr {
    match g.below(7) {
        0 => Attr::Bool(g.coin()),
        1 => Attr::Int(g.pick(&[0, -1, 42, i64::MIN, i64::MAX])),
        2 => Attr::Float(float(g)),
        3 => Attr::Str(string(g)),
        4 => Attr::Ints((0..g.below(4)).map(|_| g.pick(&[0, -3, 5, i64::MAX])).collect()),
        5 => Attr::DType(dtype(g)),
        _ => Attr::Tensor(tensor_data(g)),
    }
}

fn extra_attrs(g: &mut Gen, mut attrs: Attrs) -> Attrs {
    for _ in 0..g.below(3) {
        let name = g.pick(&["tpuc.note", "tpuc.a_1", "tpuc.x.y", "tpuc.fused"]);
        attrs.set(name, attr(g));
    }
    attrs
}

fn loc(g: &mut Gen) -> Loc {
    let source = if g.coin() { Some(string(g)) } else { None };
    Loc::new(string(g), g.pick(&["torch.ops.aten.add.Tensor", "", "placeholder"]).to_string() + &string(g), source)
}

// ---------------------------------------------------------------- module generator

/// Appends one random op (or a few) using existing values; returns the new values.
fn random_op(g: &mut Gen, b: &mut Builder, vals: &[ValueId]) -> Result<Vec<ValueId>, IrError> {
    use Opcode::*;
    let x = g.pick(vals);
    let t = b.ty(x).clone();
    let r = t.rank();
    let is_float = t.dtype.is_float();
    let fl = is_float || t.dtype.is_complex();
    let same: Vec<ValueId> = vals.iter().copied().filter(|&v| *b.ty(v) == t).collect();
    let one = |v: ValueId| Ok(vec![v]);
    match g.below(24) {
        0 | 1 => {
            let mut c = Vec::new();
            if fl {
                c.extend([Exp, Expm1, Log, Log1p, Sqrt, Rsqrt, Tanh, Logistic, Sin, Cos, Tan, Erf, Floor, Ceil, RoundEven, IsFinite]);
                c.extend([Erfc, ErfInv, Lgamma, Digamma, Acosh, Asinh, Atanh, BesselI1e]);
            }
            if !t.dtype.is_bool() {
                c.extend([Abs, Sign]);
                if !t.dtype.is_unsigned_int() {
                    c.push(Neg);
                }
            }
            if t.dtype.is_bool() || t.dtype.is_int() {
                c.push(Not);
            }
            let op = g.pick(&c);
            let attrs = extra_attrs(g, Attrs::new());
            one(b.build1(op, &[x], attrs, None)?)
        }
        2 | 3 => {
            let y = g.pick(&same);
            let mut c = vec![Add, Sub, Mul, Div, Rem, Pow, Max, Min, Atan2];
            if t.dtype.is_bool() || t.dtype.is_int() {
                c.extend([And, Or, Xor]);
            }
            let op = g.pick(&c);
            let attrs = extra_attrs(g, Attrs::new());
            one(b.build1(op, &[x, y], attrs, None)?)
        }
        4 => {
            let y = g.pick(&same);
            let p = b.compare(g.pick(Direction::ALL), x, y)?;
            let s = b.select(p, y, x)?;
            Ok(vec![p, s])
        }
        5 => one(b.convert(x, dtype(g))?),
        6 => {
            // Insert new dims and stretch size-1 dims.
            let extra = g.below(3).min(4usize.saturating_sub(r));
            let n = r + extra;
            let mut pos: Vec<i64> = g.perm(n)[..r].to_vec();
            if g.coin() {
                pos.sort();
            }
            let mut shape: Vec<Dim> = (0..n).map(|_| dim(g)).collect();
            for (i, &p) in pos.iter().enumerate() {
                shape[p as usize] = if t.dims[i].is_one() && g.coin() { dim(g) } else { t.dims[i].clone() };
            }
            one(b.broadcast_in_dim(x, &pos, shape)?)
        }
        7 => {
            let shape = match g.below(3) {
                0 => vec![Dim::from_expr(t.num_elements_expr())],
                1 => {
                    let mut s = t.dims.to_vec();
                    s.insert(g.below(r + 1), Dim::Static(1));
                    s
                }
                _ => match t.num_elements() {
                    Some(n) if n > 0 => {
                        let divs: Vec<i64> = (1..=n).filter(|d| n % d == 0).collect();
                        let d = g.pick(&divs);
                        vec![Dim::Static(d), Dim::Static(n / d)]
                    }
                    _ => vec![Dim::from_expr(t.num_elements_expr()), Dim::Static(1)],
                },
            };
            one(b.reshape(x, shape)?)
        }
        8 if r >= 2 => one(b.transpose(x, &g.perm(r))?),
        9 => {
            let (mut s, mut l, mut st) = (Vec::new(), Vec::new(), Vec::new());
            for d in &t.dims {
                match d.as_static() {
                    Some(n) => {
                        let a = g.range(0, n);
                        s.push(a);
                        l.push(g.range(a, n));
                        st.push(g.range(1, 3));
                    }
                    None => {
                        s.push(0);
                        l.push(i64::MAX);
                        st.push(1);
                    }
                }
            }
            one(b.slice(x, &s, &l, &st)?)
        }
        10 if r >= 1 => {
            let k = g.range(2, 3) as usize;
            let xs: Vec<ValueId> = (0..k).map(|_| g.pick(&same)).collect();
            one(b.concatenate(&xs, g.below(r) as i64)?)
        }
        11 => {
            let kind = if t.dtype.is_bool() { g.pick(&[ReduceKind::And, ReduceKind::Or]) } else { g.pick(&[ReduceKind::Sum, ReduceKind::Prod, ReduceKind::Max, ReduceKind::Min]) };
            one(b.reduce(x, kind, &g.subset(r))?)
        }
        12 if r >= 1 && !t.dtype.is_bool() => {
            let y = g.pick(&same);
            let batch: &[i64] = if r >= 2 && g.coin() { &[0] } else { &[] };
            let c = [r as i64 - 1];
            let mut attrs = Attrs::new()
                .with("lhs_batching_dimensions", Attr::Ints(batch.to_vec()))
                .with("rhs_batching_dimensions", Attr::Ints(batch.to_vec()))
                .with("lhs_contracting_dimensions", Attr::Ints(c.to_vec()))
                .with("rhs_contracting_dimensions", Attr::Ints(c.to_vec()));
            if g.coin() {
                attrs.set("precision", Attr::Str(g.pick(&["default", "high", "highest"]).into()));
            }
            one(b.build1(DotGeneral, &[x, y], attrs, None)?)
        }
        13 | 14 => one(b.constant(tensor_data(g))?),
        15 => {
            let ty = TensorType::new(g.pick(&[DType::I32, DType::I64, DType::U8, DType::F32, DType::BF16]), {
                let mut d = dims(g, 3, dim);
                if d.is_empty() {
                    d.push(Dim::Static(3));
                }
                d
            });
            let dimension = g.below(ty.rank()) as i64;
            one(b.iota(ty, dimension)?)
        }
        16 if r >= 1 && is_float => {
            let attrs = Attrs::new()
                .with("normalized_rank", Attr::Int(g.range(1, r as i64)))
                .with("epsilon", Attr::Float(float(g)));
            let attrs = extra_attrs(g, attrs);
            Ok(b.build(LayerNorm, &[x], attrs, None)?.to_vec())
        }
        17 if r >= 1 && is_float => {
            let op = g.pick(&[Softmax, LogSoftmax]);
            one(b.build1(op, &[x], Attrs::new().with("dimension", Attr::Int(g.below(r) as i64)), None)?)
        }
        18 if is_float => {
            let a = Attrs::new().with("approximate", Attr::Str(g.pick(&["none", "tanh"]).into()));
            one(b.build1(Gelu, &[x], a, None)?)
        }
        19 if r >= 1 => {
            let d = g.below(r) as i64;
            match g.below(3) {
                0 => {
                    let a = Attrs::new().with("dimension", Attr::Int(d)).with("descending", Attr::Bool(g.coin()));
                    Ok(b.build(Sort, &[x], a, None)?.to_vec())
                }
                1 => {
                    let a = Attrs::new().with("dimension", Attr::Int(d)).with("kind", Attr::Str(g.pick(&["argmax", "argmin"]).into()));
                    let mut rd = t.dims.to_vec();
                    rd.remove(d as usize);
                    let rt = TensorType::new(g.pick(&[DType::I32, DType::I64]), rd);
                    one(b.build1(ArgReduce, &[x], a, Some(rt))?)
                }
                _ => {
                    let a = Attrs::new().with("dimension", Attr::Int(d)).with("kind", Attr::Str(g.pick(&["sum", "prod", "max", "min"]).into()));
                    one(b.build1(Scan, &[x], a, None)?)
                }
            }
        }
        20 => {
            let pv = b.scalar(scalar(g), t.dtype)?;
            let (mut lo, mut hi, mut int) = (Vec::new(), Vec::new(), Vec::new());
            for d in &t.dims {
                let n = d.as_static();
                lo.push(if n.is_some_and(|n| n >= 2) { g.range(-1, 2) } else { g.range(0, 2) });
                hi.push(g.range(0, 2));
                int.push(if n.is_some() { g.range(0, 2) } else { 0 });
            }
            Ok(vec![pv, b.pad(x, pv, &lo, &hi, &int)?])
        }
        21 => {
            let a = Attrs::new().with("dimensions", Attr::Ints(g.subset(r)));
            one(b.build1(Reverse, &[x], a, None)?)
        }
        22 if r >= 2 && is_float => {
            let a = Attrs::new().with("scale", Attr::Float(float(g))).with("is_causal", Attr::Bool(g.coin()));
            one(b.build1(Attention, &[x, x, x], a, None)?)
        }
        _ => {
            // A fresh typed value through a splat constant of a random (static) type.
            let ty = TensorType::new(dtype(g), dims(g, 2, static_dim));
            one(b.splat(scalar(g), ty)?)
        }
    }
}

fn gen_module(choices: &[u64]) -> Module {
    let g = &mut Gen { data: choices, i: 0 };
    let mut m = Module::new();
    m.symbols.declare("s0", g.range(0, 2), if g.coin() { Some(64) } else { None });
    m.symbols.declare("s1", 2, if g.coin() { Some(g.range(2, 1 << 20)) } else { None });
    if g.coin() {
        m.symbols.declare("s_unused2", 1, Some(1));
    }
    let nfuncs = 1 + g.below(2);
    for fi in 0..nfuncs {
        let name = if fi == 0 { "main".to_string() } else { g.pick(&["helper_1", "sub.fn", "_f9"]).to_string() };
        let args: Vec<(TensorType, ArgInfo)> = (0..1 + g.below(3))
            .map(|_| {
                let ty = TensorType::new(dtype(g), dims(g, 3, dim));
                let kind = g.pick(&[ArgKind::UserInput, ArgKind::Parameter, ArgKind::Buffer, ArgKind::Constant, ArgKind::SymInt]);
                (ty, ArgInfo::new(kind, string(g)))
            })
            .collect();
        let (fidx, block) = m.add_func(&name, args);
        let mut vals = m.blocks[block].args().to_vec();
        let mut locs: Vec<LocId> = Vec::new();
        let mut b = Builder::new(&mut m, block);
        for _ in 0..g.below(20) {
            b.loc = match g.below(3) {
                0 => None,
                1 if !locs.is_empty() => Some(g.pick(&locs)),
                _ => {
                    let l = b.module.add_loc(loc(g));
                    locs.push(l);
                    Some(l)
                }
            };
            let save = g.i;
            match random_op(g, &mut b, &vals) {
                Ok(new) => vals.extend(new),
                Err(e) => panic!("generator built an invalid op at choice {save}: {e}"),
            }
        }
        b.loc = None;
        let rets: Vec<ValueId> = (0..g.below(4)).map(|_| g.pick(&vals)).collect();
        b.ret(&rets).unwrap();
        if g.coin() {
            let infos = rets
                .iter()
                .map(|&r| ResultInfo {
                    layout: g.coin().then(|| {
                        // Any layout of the result's rank: the text form must carry each kind.
                        m.values[r]
                            .ty
                            .dims
                            .iter()
                            .map(|d| match (g.below(3), d.as_static()) {
                                (1, _) => DimLayout::Uniform(SymExpr::constant(1)),
                                (2, Some(n)) if n % 2 == 0 && n > 0 => DimLayout::Factors(vec![
                                    Factor { padded: 2, extent: SymExpr::constant(1) },
                                    Factor { padded: n / 2, extent: SymExpr::constant(1) },
                                ]),
                                _ => DimLayout::Exact,
                            })
                            .collect()
                    }),
                    kind: g.pick(&[
                        ResultKind::UserOutput,
                        ResultKind::BufferMutation,
                        ResultKind::UserInputMutation,
                        ResultKind::Gradient,
                        ResultKind::Loss,
                        ResultKind::Size,
                        ResultKind::Check,
                    ]),
                    name: string(g),
                    sharding: None,
                })
                .collect();
            m.funcs[fidx].results = infos;
        }
    }
    m
}

fn errors(e: Vec<VerifyError>) -> String {
    e.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n")
}

fn first_difference(a: &str, b: &str) -> String {
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!("line {}:\n  printed:   {x}\n  reprinted: {y}", i + 1);
        }
    }
    format!("line counts differ: {} vs {}", a.lines().count(), b.lines().count())
}

fn module_choices() -> impl Strategy<Value = Vec<u64>> {
    proptest::collection::vec(any::<u64>(), 0..400)
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn print_parse_print_is_identity(choices in module_choices()) {
        let m = gen_module(&choices);
        let text = print_module(&m);
        if let Err(e) = verify(&m) {
            panic!("generated module does not verify:\n{}\n{text}", errors(e));
        }
        let parsed = parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        if let Err(e) = verify(&parsed) {
            panic!("parsed module does not verify:\n{}\n{text}", errors(e));
        }
        let again = print_module(&parsed);
        prop_assert!(again == text, "{}\n{text}", first_difference(&text, &again));
        prop_assert_eq!(parsed.values.len(), m.values.len());
        prop_assert_eq!(parsed.ops.len(), m.ops.len());
        prop_assert_eq!(parsed.num_live_ops(), m.num_live_ops());
        prop_assert_eq!(parsed.funcs.len(), m.funcs.len());
        prop_assert_eq!(&parsed.symbols, &m.symbols);
        let with_loc = |m: &Module| m.ops.keys().filter(|&o| m.loc(o).is_some()).count();
        prop_assert_eq!(with_loc(&parsed), with_loc(&m));
        for (f, g) in parsed.funcs.iter().zip(&m.funcs) {
            prop_assert_eq!(&f.name, &g.name);
            prop_assert_eq!(&f.args, &g.args);
            prop_assert_eq!(&f.results(), &g.results());
        }
    }
}

// ---------------------------------------------------------------- mutations

#[derive(Debug, Clone)]
enum Mutation {
    SetByte(usize, u8),
    Delete(usize, usize),
    Insert(usize, &'static str),
    Duplicate(usize, usize, usize),
}

/// Fragments that tend to reach deep parser and verifier paths when spliced in.
const TOKENS: &[&str] = &[
    "-", "0", "x", "%", "%99", "(", ")", "{", "}", "<", ">", ",", ":", "\"", "\\", "\\u{", "\\u{110000}", "#", "#7",
    "^bb0(", "9223372036854775807", "-9223372036854775808", "18446744073709551616", "1e999", "nan", "-inf",
    "tensor<", "tensor<(0 - 5)xf32>", "(s0 - s0)x", "(9223372036854775807 + 9223372036854775807)x", "floordiv(s0, 0)",
    "mod(s0, -1)", "dense<", "dense<\"0x00\">", "dense<\"0xZZ\">", "dense<1.5> : tensor<", "loc(#0)", "return",
    "yield", "symbol @q : [5, 1]", "func @main() -> () {", "\u{e9}", "\u{1f980}", "\n", " ",
];

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::SetByte(i, b)),
        2 => (any::<usize>(), 1usize..8).prop_map(|(i, n)| Mutation::Delete(i, n)),
        3 => (any::<usize>(), prop::sample::select(TOKENS)).prop_map(|(i, t)| Mutation::Insert(i, t)),
        1 => (any::<usize>(), 1usize..40, any::<usize>()).prop_map(|(i, n, at)| Mutation::Duplicate(i, n, at)),
    ]
}

fn apply(text: &str, muts: &[Mutation], truncate: Option<usize>) -> String {
    let mut b = text.as_bytes().to_vec();
    for m in muts {
        let len = b.len().max(1);
        match *m {
            Mutation::SetByte(i, v) => {
                if !b.is_empty() {
                    b[i % len] = v;
                }
            }
            Mutation::Delete(i, n) => {
                let i = i % len;
                let end = (i + n).min(b.len());
                if i < end {
                    b.drain(i..end);
                }
            }
            Mutation::Insert(i, t) => {
                let i = i % (b.len() + 1);
                b.splice(i..i, t.bytes());
            }
            Mutation::Duplicate(i, n, at) => {
                let i = i % len;
                let end = (i + n).min(b.len());
                let piece: Vec<u8> = b.get(i..end).unwrap_or(&[]).to_vec();
                let at = at % (b.len() + 1);
                b.splice(at..at, piece);
            }
        }
    }
    if let Some(t) = truncate {
        b.truncate(t % (b.len() + 1));
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// Parse, and if that works verify and print: none of it may panic.
fn parse_verify_print(text: &str) {
    if let Ok(m) = parse_module(text) {
        let ok = verify(&m).is_ok();
        let printed = print_module(&m);
        if ok {
            // A module that verifies prints to text that reads back to the same text.
            let m2 = parse_module(&printed).unwrap_or_else(|e| panic!("reprint does not parse: {e}\n{printed}"));
            assert_eq!(print_module(&m2), printed);
        }
    }
}

proptest! {
    #![proptest_config(config(768))]

    #[test]
    fn mutated_text_never_panics(
        choices in module_choices(),
        muts in proptest::collection::vec(mutation(), 1..6),
        truncate in proptest::option::weighted(0.3, any::<usize>()),
    ) {
        let text = print_module(&gen_module(&choices));
        parse_verify_print(&apply(&text, &muts, truncate));
    }

    #[test]
    fn truncated_text_never_panics(choices in module_choices(), at in any::<usize>()) {
        let text = print_module(&gen_module(&choices));
        parse_verify_print(&apply(&text, &[], Some(at)));
    }
}

#[test]
fn every_prefix_of_the_sample_parses_or_errors() {
    let text = print_module(&gen_module(&[7; 400]));
    for i in 0..=text.len() {
        if text.is_char_boundary(i) {
            parse_verify_print(&text[..i]);
        }
    }
}

// ---------------------------------------------------------------- regressions

fn wrap(args: &str, body: &str) -> String {
    format!("module {{\n  func @main({args}) -> () {{\n    {body}\n    return\n  }}\n}}\n")
}

/// Numbers at the edges of i64 in types and attributes give errors, not panics (each of these
/// overflowed in the parser or a shape rule).
#[test]
fn overflowing_numbers_are_errors_not_panics() {
    let x10 = "%0: tensor<10xf32>";
    let cases: &[(String, &str)] = &[
        (wrap("", "%0 = iota {dimension = 0} : tensor<(9223372036854775807 + 9223372036854775807)xf32>"), "negative dimension"),
        (wrap("", "%0 = iota {dimension = 0} : tensor<(-(0 - 9223372036854775807 - 1))xf32>"), "negative dimension"),
        (wrap("", "%0 = constant {value = dense<\"0x00\"> : tensor<(0 - 5)xf32>} : tensor<(0 - 5)xf32>"), "needs a static type"),
        (wrap("", "%0 = constant {value = dense<\"0x00\"> : tensor<4611686018427387904xf32>} : tensor<4611686018427387904xf32>"), "needs a static type"),
        (wrap("%0: tensor<9223372036854775807xf32>", "%1 = concatenate %0, %0 {dimension = 0} : tensor<1xf32>"), "result type should be"),
        (wrap(&format!("{x10}, %1: tensor<f32>"), "%2 = pad %0, %1 {edge_padding_high = [9223372036854775807], edge_padding_low = [1], interior_padding = [0]} : tensor<1xf32>"), "overflows"),
        (wrap(&format!("{x10}, %1: tensor<f32>"), "%2 = pad %0, %1 {edge_padding_high = [0], edge_padding_low = [0], interior_padding = [9223372036854775807]} : tensor<1xf32>"), "overflows"),
        (wrap(x10, "%1 = reduce_window %0 {base_dilations = [9223372036854775807], kind = \"sum\", padding = [0, 0], window_dilations = [1], window_dimensions = [2], window_strides = [1]} : tensor<1xf32>"), "overflows"),
        (wrap("%0: tensor<1x1x10xf32>, %1: tensor<1x1x2xf32>", "%2 = convolution %0, %1 {batch_group_count = 1, feature_group_count = 1, lhs_dilation = [1], padding = [9223372036854775807, 9223372036854775807], rhs_dilation = [1], window_strides = [1]} : tensor<1x1x1xf32>"), "overflows"),
        (wrap("%0: tensor<1x2x10xf32>, %1: tensor<1x2x2xf32>", "%2 = convolution %0, %1 {batch_group_count = 1, feature_group_count = 4611686018427387905, lhs_dilation = [1], padding = [0, 0], rhs_dilation = [1], window_strides = [1]} : tensor<1x1x9xf32>"), "input features"),
        (wrap("%0: tensor<4294967296x4294967296xf32>", "%1 = reshape %0 : tensor<0xf32>"), "element count overflows"),
    ];
    for (text, want) in cases {
        let got = match parse_module(text) {
            Err(e) => e.to_string(),
            Ok(m) => match verify(&m) {
                Err(e) => errors(e),
                Ok(_) => "verifies".into(),
            },
        };
        assert!(got.contains(want), "{text}\nwant `{want}`, got: {got}");
    }
    // A huge stride is fine: one element.
    let m = parse_module(&wrap(x10, "%1 = slice %0 {limit_indices = [10], start_indices = [0], strides = [9223372036854775807]} : tensor<1xf32>")).unwrap();
    verify(&m).unwrap();
}

#[test]
fn large_u64_splat_and_results_without_metadata_round_trip() {
    let text = "module {\n  func @main() -> (tensor<2xu64>) {\n    %0 = constant {value = dense<18446744073709551615> : tensor<2xu64>} : tensor<2xu64>\n    return %0\n  }\n}\n";
    let m = parse_module(text).unwrap();
    verify(&m).unwrap();
    assert!(m.funcs[0].results().is_empty());
    assert_eq!(print_module(&m), text);
}

#[test]
fn fp8_codes_round_trip_and_keep_infinities() {
    for dtype in [DType::F8E4M3FN, DType::F8E5M2] {
        for code in 0..=255u8 {
            let v = Scalar::from_bytes(dtype, &[code]);
            if !v.as_f64().is_nan() {
                assert_eq!(v.to_bytes(dtype), vec![code], "{dtype} code {code:#04x} = {v:?}");
            }
        }
    }
    let e5 = |f: f64| Scalar::Float(f).to_bytes(DType::F8E5M2)[0];
    assert_eq!((e5(f64::INFINITY), e5(f64::NEG_INFINITY)), (0x7C, 0xFC));
    // 61440 is halfway between 57344 (odd code 0x7B) and infinity: ties to even give infinity.
    assert_eq!((e5(61439.0), e5(61440.0), e5(1e10)), (0x7B, 0x7C, 0x7C));
    let t = TensorData::splat(TensorType::scalar(DType::F8E5M2), Scalar::Float(f64::NEG_INFINITY)).unwrap();
    assert_eq!(t.element(0), Scalar::Float(f64::NEG_INFINITY));
}

#[test]
fn symbol_names_with_an_x_round_trip() {
    // `x` separates a tensor type's dims, so a symbol whose name holds one stands in parentheses.
    let text = "module {\n  symbol @max_len : [1, 64]\n  symbol @x : [0, 8]\n  func @main(%0: tensor<(max_len)x(x)x4xf32> {kind = \"input\", name = \"arg0\"}) -> (tensor<(max_len)x(x)x4xf32>) {\n    %1 = neg %0 : tensor<(max_len)x(x)x4xf32>\n    return %1\n  }\n}\n";
    let m = parse_module(text).unwrap();
    verify(&m).unwrap();
    assert_eq!(print_module(&m), text);
    assert!(m.symbols.get("max_len").is_some() && m.symbols.get("x").is_some());
    assert!(parse_module(&text.replace("(max_len)x(x)", "max_lenxx")).is_err());
    // The expression keywords are not symbol names.
    assert!(!tpuc_ir::is_symbol_name("mod") && !tpuc_ir::is_symbol_name("floordiv") && tpuc_ir::is_symbol_name("max_len"));
}

#[test]
fn sharding_round_trips_and_is_verified_against_the_types() {
    let text = "module {\n  mesh [\"x\" = 2, \"y\" = 2]\n  func @main(%0: tensor<4x6xf32> {kind = \"input\", name = \"a\", sharding = [{\"x\"}, {\"y\"}]}, %1: tensor<6xf32> {kind = \"parameter\", name = \"b\"}) -> (tensor<4x6xf32> {kind = \"output\", name = \"out\", sharding = [{\"x\", \"y\"}, {}]}) {\n    %2 = broadcast_in_dim %1 {broadcast_dimensions = [1]} : tensor<4x6xf32>\n    %3 = add %0, %2 : tensor<4x6xf32>\n    return %3\n  }\n}\n";
    let m = parse_module(text).unwrap();
    verify(&m).unwrap();
    assert_eq!(print_module(&m), text);
    let main = m.main_func().unwrap();
    let split = |d: &Option<tpuc_ir::DimAxes>| d.is_some();
    assert_eq!(m.mesh.as_ref().unwrap().devices(), 4);
    assert_eq!(main.args().iter().map(|a| split(&a.sharding)).collect::<Vec<_>>(), [true, false]);
    assert_eq!(main.results().iter().map(|r| split(&r.sharding)).collect::<Vec<_>>(), [true]);
    let mut c = m.clone();
    c.compact();
    assert_eq!(print_module(&c), text, "compaction keeps the sharding");
    let errors = |t: &str| match parse_module(t) {
        Err(e) => e.to_string(),
        Ok(m) => verify(&m).err().map(|e| e.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("; ")).unwrap_or_default(),
    };
    // 6 rows do not split 4 ways; an axis not in the mesh; rank; no mesh at all.
    assert!(errors(&text.replace("{\"x\", \"y\"}, {}]", "{}, {\"x\", \"y\"}]")).contains("dim 1 of size 6 does not split 4 ways"));
    assert!(errors(&text.replace("[{\"x\"}, {\"y\"}]", "[{\"z\"}, {}]")).contains("axis `z` is not in the mesh"));
    assert!(errors(&text.replace("[{\"x\"}, {\"y\"}]", "[{\"x\"}]")).contains("names 1 dims for a value of rank 2"));
    assert!(errors(&text.replace("  mesh [\"x\" = 2, \"y\" = 2]\n", "")).contains("needs the module's `mesh`"));
}
