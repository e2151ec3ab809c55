//! Snapshot of the printed text of a small MLP built through the `Builder`, with provenance.
//! Re-record with `INSTA_UPDATE=always cargo test -p tpuc-ir --test print_snapshot` (or
//! `cargo insta accept`) after an intended change to the text form.

use tpuc_ir::*;

fn arg(dtype: DType, dims: Vec<Dim>, kind: ArgKind, name: &str) -> (TensorType, ArgInfo) {
    (TensorType::new(dtype, dims), ArgInfo::new(kind, name))
}

/// `log_softmax(fc2(gelu(fc1(x))))` on a symbolic batch.
fn mlp() -> Module {
    let mut m = Module::new();
    m.symbols.declare("s0", 1, Some(1024));
    let b = Dim::symbol("s0");
    let st = Dim::Static;
    let args = vec![
        arg(DType::F32, vec![b.clone(), st(16)], ArgKind::UserInput, "x"),
        arg(DType::F32, vec![st(32), st(16)], ArgKind::Parameter, "fc1.weight"),
        arg(DType::F32, vec![st(32)], ArgKind::Parameter, "fc1.bias"),
        arg(DType::F32, vec![st(10), st(32)], ArgKind::Parameter, "fc2.weight"),
        arg(DType::F32, vec![st(10)], ArgKind::Parameter, "fc2.bias"),
    ];
    let (fi, block) = m.add_func("main", args);
    let a = m.blocks[block].args().to_vec();
    let mut bd = Builder::new(&mut m, block);

    let linear = |bd: &mut Builder, node: &str, line: u32, x: ValueId, w: ValueId, bias: ValueId| {
        let src = format!("model.py:{line} in forward");
        bd.loc = Some(bd.module.add_loc(Loc::new(node, "torch.ops.aten.linear.default", Some(src))));
        let wt = bd.transpose(w, &[1, 0]).unwrap();
        let y = bd.dot_general(x, wt, &[], &[], &[1], &[0]).unwrap();
        let shape = bd.ty(y).dims.to_vec();
        let bb = bd.broadcast_in_dim(bias, &[1], shape).unwrap();
        bd.binary(Opcode::Add, y, bb).unwrap()
    };
    let h = linear(&mut bd, "fc1", 12, a[0], a[1], a[2]);
    bd.loc = Some(bd.module.add_loc(Loc::new("gelu", "torch.ops.aten.gelu.default", Some("model.py:13 in forward".into()))));
    let h = bd.build1(Opcode::Gelu, &[h], Attrs::new().with("approximate", Attr::Str("tanh".into())), None).unwrap();
    let y = linear(&mut bd, "fc2", 14, h, a[3], a[4]);
    bd.loc = Some(bd.module.add_loc(Loc::new("log_softmax", "torch.ops.aten._log_softmax.default", None)));
    let y = bd.build1(Opcode::LogSoftmax, &[y], Attrs::new().with("dimension", Attr::Int(1)), None).unwrap();
    bd.loc = None;
    bd.ret(&[y]).unwrap();
    m.funcs[fi].results = vec![ResultInfo::new(ResultKind::UserOutput, "logits")];
    m
}

#[test]
fn mlp_prints_as_recorded() {
    let m = mlp();
    verify(&m).unwrap_or_else(|e| panic!("{e:?}"));
    let text = print_module(&m);
    insta::assert_snapshot!("mlp", text);
    // The recorded text is also a fixed point of parse → print.
    assert_eq!(print_module(&parse_module(&text).unwrap()), text);
}
