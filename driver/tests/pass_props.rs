//! Property: every pass preserves results. Random small programs (elementwise ops, broadcasting,
//! matmuls, reductions, reshapes and transposes, converts, constants, the high-level ops fusion
//! wraps) are built with the IR Builder, run on the XLA CPU plugin before and after each pass
//! (and each default pipeline), and must agree within tolerance: exactly-equivalent rewrites
//! within 1e-5, precision changes (bf16 matmuls, TPU narrowing, excess precision) within the
//! precision they trade away. The passes crate cannot depend on the runtime, so this lives
//! here.

use proptest::prelude::*;
use std::collections::BTreeMap;
use tpuc_driver::exec::{self, CompileRequest, Runner};
use tpuc_driver::tensor::{compare, HostTensor};
use tpuc_ir::{Attr, Attrs, Builder, DType, Dim, Module, Opcode, Scalar, TensorType, ValueId};
use tpuc_passes::{create_pass, default_pipeline, PassId, PassManager, PipelineOptions, Target};

/// One step of a random program, chosen by the strategy and applied to a pool of values.
#[derive(Clone, Debug)]
enum Step {
    Unary(u8, usize),
    Binary(u8, usize, usize),
    BinaryConst(u8, usize, u8),
    BroadcastRow(usize),
    Reshape(usize),
    Transpose(usize, u8),
    ReduceKeep(u8, usize, u8),
    Matmul(usize, usize, bool),
    Slice(usize),
    ConvertRoundTrip(usize, bool),
    ConstChain(u8),
    HighLevel(u8, usize),
    SameTwice(usize),
}

fn step() -> impl Strategy<Value = Step> {
    let i = 0usize..64;
    prop_oneof![
        (0u8..6, i.clone()).prop_map(|(k, a)| Step::Unary(k, a)),
        (0u8..5, i.clone(), i.clone()).prop_map(|(k, a, b)| Step::Binary(k, a, b)),
        (0u8..5, i.clone(), 0u8..4).prop_map(|(k, a, c)| Step::BinaryConst(k, a, c)),
        i.clone().prop_map(Step::BroadcastRow),
        i.clone().prop_map(Step::Reshape),
        (i.clone(), 0u8..6).prop_map(|(a, p)| Step::Transpose(a, p)),
        (0u8..2, i.clone(), 0u8..3).prop_map(|(k, a, d)| Step::ReduceKeep(k, a, d)),
        (i.clone(), i.clone(), any::<bool>()).prop_map(|(a, b, t)| Step::Matmul(a, b, t)),
        i.clone().prop_map(Step::Slice),
        (i.clone(), any::<bool>()).prop_map(|(a, n)| Step::ConvertRoundTrip(a, n)),
        (0u8..3).prop_map(Step::ConstChain),
        (0u8..5, i.clone()).prop_map(|(k, a)| Step::HighLevel(k, a)),
        i.prop_map(Step::SameTwice),
    ]
}

/// Builds `main(x: [4,6], y: [4,6], v: [6])` from the steps; returns the module.
fn build(steps: &[Step]) -> Module {
    let mut m = Module::new();
    let f32t = |d: &[i64]| TensorType::from_static(DType::F32, d);
    let info = |n: &str| tpuc_ir::ArgInfo::new(tpuc_ir::ArgKind::UserInput, n);
    let (_, block) = m.add_func("main", vec![(f32t(&[4, 6]), info("x")), (f32t(&[4, 6]), info("y")), (f32t(&[6]), info("v"))]);
    let mut pool: Vec<ValueId> = m.blocks[block].args().to_vec();
    let mut b = Builder::new(&mut m, block);
    let dims = |b: &Builder, v: ValueId| b.ty(v).static_dims().unwrap();
    let pick = |pool: &[ValueId], i: usize| pool[i % pool.len()];
    for s in steps {
        let r: Option<ValueId> = match *s {
            Step::Unary(k, a) => {
                let x = pick(&pool, a);
                let op = [Opcode::Neg, Opcode::Abs, Opcode::Tanh, Opcode::Logistic, Opcode::Sin, Opcode::Cos][k as usize];
                b.unary(op, x).ok()
            }
            Step::Binary(k, a, c) => {
                let (x, y) = (pick(&pool, a), pick(&pool, c));
                if b.ty(x) != b.ty(y) {
                    None
                } else {
                    let op = [Opcode::Add, Opcode::Sub, Opcode::Mul, Opcode::Max, Opcode::Min][k as usize];
                    b.binary(op, x, y).ok()
                }
            }
            Step::BinaryConst(k, a, c) => {
                let x = pick(&pool, a);
                let t = b.ty(x).clone();
                let val = [0.0, 1.0, 2.5, -0.5][c as usize];
                let s = b.scalar(Scalar::Float(val), DType::F32).unwrap();
                let cst = b.broadcast_in_dim(s, &[], t.dims.to_vec()).unwrap();
                let op = [Opcode::Add, Opcode::Sub, Opcode::Mul, Opcode::Div, Opcode::Max][k as usize];
                if op == Opcode::Div && val == 0.0 {
                    None
                } else {
                    b.binary(op, x, cst).ok()
                }
            }
            Step::BroadcastRow(a) => {
                // A vector broadcast along a new leading dim, added to a matrix of its width.
                let x = pick(&pool, a);
                let d = dims(&b, x);
                if d.len() != 1 {
                    None
                } else {
                    let r = b.reshape(x, vec![Dim::Static(1), Dim::Static(d[0])]).unwrap();
                    b.broadcast_in_dim(r, &[0, 1], vec![Dim::Static(4), Dim::Static(d[0])]).ok()
                }
            }
            Step::Reshape(a) => {
                let x = pick(&pool, a);
                let d = dims(&b, x);
                let n: i64 = d.iter().product();
                let to: Vec<i64> = if d.len() == 1 { vec![n] } else if n % 2 == 0 && d.len() == 2 { vec![2, n / 2] } else { vec![n] };
                let r = b.reshape(x, to.iter().map(|&v| Dim::Static(v)).collect()).unwrap();
                b.reshape(r, d.iter().map(|&v| Dim::Static(v)).collect()).ok()
            }
            Step::Transpose(a, p) => {
                let x = pick(&pool, a);
                match dims(&b, x).len() {
                    2 => {
                        let t = b.transpose(x, &[1, 0]).unwrap();
                        if p % 2 == 0 {
                            b.transpose(t, &[1, 0]).ok()
                        } else {
                            Some(t)
                        }
                    }
                    3 => {
                        let perms: [[i64; 3]; 6] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
                        let t = b.transpose(x, &perms[p as usize]).unwrap();
                        b.transpose(t, &perms[(p as usize + 3) % 6]).ok()
                    }
                    _ => None,
                }
            }
            Step::ReduceKeep(k, a, d) => {
                let x = pick(&pool, a);
                let xd = dims(&b, x);
                let dim = d as usize % xd.len();
                let kind = [tpuc_ir::ReduceKind::Sum, tpuc_ir::ReduceKind::Max][k as usize];
                let red = b.reduce(x, kind, &[dim as i64]).unwrap();
                let mut keep: Vec<Dim> = xd.iter().map(|&v| Dim::Static(v)).collect();
                keep[dim] = Dim::Static(1);
                let r = b.reshape(red, keep).unwrap();
                let bd: Vec<i64> = (0..xd.len() as i64).collect();
                let bb = b.broadcast_in_dim(r, &bd, xd.iter().map(|&v| Dim::Static(v)).collect()).unwrap();
                b.binary(Opcode::Sub, x, bb).ok()
            }
            Step::Matmul(a, c, t) => {
                let (x, y) = (pick(&pool, a), pick(&pool, c));
                let (xd, yd) = (dims(&b, x), dims(&b, y));
                if xd.len() != 2 || yd.len() != 2 {
                    None
                } else if t && xd[1] == yd[1] {
                    // x · yᵀ as the importer writes a linear layer: transpose, then dot.
                    let yt = b.transpose(y, &[1, 0]).unwrap();
                    b.dot_general(x, yt, &[], &[], &[1], &[0]).ok()
                } else if xd[1] == yd[0] {
                    b.dot_general(x, y, &[], &[], &[1], &[0]).ok()
                } else {
                    None
                }
            }
            Step::Slice(a) => {
                let x = pick(&pool, a);
                let d = dims(&b, x);
                let limit: Vec<i64> = d.clone();
                let start: Vec<i64> = vec![0; d.len()];
                let s = b.slice(x, &start, &limit, &vec![1; d.len()]).unwrap();
                Some(s)
            }
            Step::ConvertRoundTrip(a, narrow) => {
                let x = pick(&pool, a);
                let mid = if narrow { DType::BF16 } else { DType::F64 };
                let c = b.convert(x, mid).unwrap();
                b.convert(c, DType::F32).ok()
            }
            Step::ConstChain(k) => {
                let s = b.scalar(Scalar::Float(1.5 + k as f64), DType::F32).unwrap();
                let c = b.broadcast_in_dim(s, &[], vec![Dim::Static(4), Dim::Static(6)]).unwrap();
                let d = b.binary(Opcode::Mul, c, c).unwrap();
                let e = b.binary(Opcode::Add, d, c).unwrap();
                b.binary(Opcode::Add, e, pool[0]).ok()
            }
            Step::HighLevel(k, a) => {
                let x = pick(&pool, a);
                let r = dims(&b, x).len() as i64;
                match k {
                    0 => b.build1(Opcode::Softmax, &[x], Attrs::new().with("dimension", Attr::Int(r - 1)), None).ok(),
                    1 => b.build1(Opcode::Gelu, &[x], Attrs::new().with("approximate", Attr::Str("tanh".into())), None).ok(),
                    2 => b.build(Opcode::LayerNorm, &[x], Attrs::new().with("normalized_rank", Attr::Int(1)).with("epsilon", Attr::Float(1e-5)), None).ok().map(|v| v[0]),
                    3 => {
                        let s = b.unary(Opcode::Logistic, x).unwrap();
                        b.binary(Opcode::Mul, x, s).ok()
                    }
                    _ => b.build1(Opcode::LogSoftmax, &[x], Attrs::new().with("dimension", Attr::Int(r - 1)), None).ok(),
                }
            }
            Step::SameTwice(a) => {
                let x = pick(&pool, a);
                let e1 = b.unary(Opcode::Tanh, x).unwrap();
                let e2 = b.unary(Opcode::Tanh, x).unwrap();
                b.binary(Opcode::Add, e1, e2).ok()
            }
        };
        if let Some(r) = r {
            pool.push(r);
        }
    }
    let n = pool.len();
    let outs = if n > 4 { vec![pool[n - 1], pool[n - 2]] } else { vec![pool[n - 1]] };
    b.ret(&outs).unwrap();
    tpuc_ir::verify(&m).unwrap_or_else(|e| panic!("generated module does not verify: {e:?}\n{}", tpuc_ir::print_module(&m)));
    m
}

fn inputs(seed: u64) -> Vec<(String, HostTensor)> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 11) as f64 / (1u64 << 53) as f64) * 4.0 - 2.0
    };
    let mut t = |dims: Vec<i64>| {
        let n: i64 = dims.iter().product();
        let bytes = (0..n).flat_map(|_| (next() as f32).to_le_bytes()).collect();
        HostTensor { dtype: DType::F32, dims, bytes }
    };
    vec![("x".into(), t(vec![4, 6])), ("y".into(), t(vec![4, 6])), ("v".into(), t(vec![6]))]
}

fn run(m: &Module, ins: &[(String, HostTensor)]) -> Vec<HostTensor> {
    let text = tpuc_lowering_stablehlo::emit_stablehlo(m, &Default::default())
        .unwrap_or_else(|e| panic!("emit: {e}\n{}", tpuc_ir::print_module(m)));
    let compiled = exec::compile_stablehlo(&text, &CompileRequest::default()).unwrap_or_else(|e| panic!("compile: {e}\n{text}"));
    let weights = BTreeMap::new();
    Runner::new(&compiled, m, &weights).unwrap().run(ins).unwrap().0
}

/// Lossy passes (rtol above the exact 1e-5) round operands, so an element's error follows the
/// magnitudes that went into it, not the element itself (a dot product that cancels to near 0
/// keeps the rounding error of its large terms): their atol is relative to the output's largest
/// magnitude.
fn check(name: &str, before: &Module, after: &Module, want: &[HostTensor], got: &[HostTensor], rtol: f64, atol: f64) {
    assert_eq!(want.len(), got.len(), "{name}: output count");
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        let atol = if rtol > 1e-5 { atol * max_abs(w).max(1.0) } else { atol };
        let c = compare(g, w, rtol, atol).unwrap_or_else(|e| panic!("{name} output {i}: {e}"));
        assert!(
            c.mismatches == 0,
            "{name} changed output {i}: {} mismatches (max abs {:e}, first {:?})\nbefore:\n{}\nafter:\n{}",
            c.mismatches,
            c.max_abs_err,
            c.first_mismatch,
            tpuc_ir::print_module(before),
            tpuc_ir::print_module(after)
        );
    }
}

/// The largest finite magnitude of an f32 tensor (0 for other dtypes).
fn max_abs(t: &HostTensor) -> f64 {
    if t.dtype != DType::F32 {
        return 0.0;
    }
    t.bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).abs() as f64)
        .filter(|x| x.is_finite())
        .fold(0.0, f64::max)
}

/// (pass list, rtol, atol): single passes, then the default pipelines.
fn configs() -> Vec<(String, Vec<String>, PipelineOptions, f64, f64)> {
    let exact = 1e-5;
    let mut v: Vec<(String, Vec<String>, PipelineOptions, f64, f64)> = Vec::new();
    for p in ["canonicalize", "fold-constants", "fold-trivial", "collapse-shapes", "cse", "dce", "transpose-into-dot", "fuse", "precision", "sdpa-guard"] {
        v.push((p.to_string(), vec![p.to_string()], PipelineOptions::default(), exact, exact));
    }
    let loose = PipelineOptions::default();
    v.push(("bf16".into(), vec!["bf16".into()], loose.clone(), 5e-2, 5e-2));
    v.push(("excess-precision".into(), vec!["excess-precision".into()], loose.clone(), 2e-2, 2e-2));
    v.push(("narrow-64bit".into(), vec!["narrow-64bit".into()], loose, exact, exact));
    for (label, opts) in [
        ("default cpu", PipelineOptions::default()),
        ("default tpu", PipelineOptions { target: Target::Tpu, ..Default::default() }),
        ("default cpu --no-fusion", PipelineOptions { no_fusion: true, ..Default::default() }),
    ] {
        let names = default_pipeline(&opts).into_iter().map(|p| p.name().to_string()).collect();
        v.push((label.to_string(), names, opts, exact, exact));
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_pass_preserves_results(steps in prop::collection::vec(step(), 3..14), seed in any::<u64>()) {
        let module = build(&steps);
        let ins = inputs(seed);
        let want = run(&module, &ins);
        let weights = BTreeMap::new();
        for (label, names, opts, rtol, atol) in configs() {
            let mut m = module.clone();
            let mut pm = PassManager::new();
            pm.verify_each = true;
            for n in &names {
                pm.add_boxed(create_pass(n, &opts, &weights).unwrap());
            }
            pm.run(&mut m).unwrap_or_else(|e| panic!("{label}: {e}\n{}", tpuc_ir::print_module(&module)));
            let got = run(&m, &ins);
            check(&label, &module, &m, &want, &got, rtol, atol);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    /// A pass that reports "unchanged" leaves the printed IR identical, alone and at every step
    /// of the default pipelines; compaction never changes the printed IR; the use lists stay
    /// consistent (the verifier checks them after every pass).
    #[test]
    fn unchanged_means_identical_and_compaction_is_invisible(steps in prop::collection::vec(step(), 3..20)) {
        let module = build(&steps);
        let weights = BTreeMap::new();
        let mut pipelines: Vec<(Vec<PassId>, PipelineOptions)> =
            PassId::ALL
                .iter()
                .filter(|&&p| p != PassId::InlineWeights)
                .map(|&p| (vec![p], PipelineOptions { bucket: Some(BTreeMap::new()), ..Default::default() }))
                .collect();
        for opts in [PipelineOptions::default(), PipelineOptions { target: Target::Tpu, ..Default::default() }] {
            pipelines.push((default_pipeline(&opts), opts));
        }
        for (names, opts) in pipelines {
            let mut m = module.clone();
            for n in names {
                let before = tpuc_ir::print_module(&m);
                let mut pm = PassManager::new();
                pm.verify_each = true;
                pm.add_boxed(n.create(&opts, &weights));
                let timings = pm.run(&mut m).unwrap_or_else(|e| panic!("{n}: {e}\n{before}"));
                let after = tpuc_ir::print_module(&m);
                if !timings[0].changed {
                    prop_assert_eq!(&before, &after, "pass `{}` said unchanged but changed the IR", n);
                }
                let mut compacted = m.clone();
                compacted.compact();
                prop_assert!(tpuc_ir::verify(&compacted).is_ok(), "compact broke the module after {}", n);
                prop_assert_eq!(&tpuc_ir::print_module(&compacted), &after, "compact changed the IR after {}", n);
                prop_assert_eq!(compacted.ops.len(), compacted.num_live_ops());
            }
        }
    }
}
