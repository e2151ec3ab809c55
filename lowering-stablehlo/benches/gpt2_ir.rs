//! A 12-layer GPT-2-small-shaped module in tpuc IR text (weights as arguments), shared by the
//! emission benchmark and the test that verifies the emitted module.

use std::fmt::Write;

/// Writes IR text with fresh value numbers.
struct Gen {
    body: String,
    next: usize,
}

impl Gen {
    fn op(&mut self, text: &str, ty: &str) -> String {
        let v = format!("%{}", self.next);
        self.next += 1;
        let _ = writeln!(self.body, "    {v} = {text} : {ty} loc(#0)");
        v
    }

    /// An op with `k` results; returns the first.
    fn op_multi(&mut self, k: usize, text: &str, ty: &str) -> String {
        let names: Vec<String> = (0..k).map(|i| format!("%{}", self.next + i)).collect();
        self.next += k;
        let _ = writeln!(
            self.body,
            "    {} = {text} : {ty} loc(#0)",
            names.join(", ")
        );
        names[0].clone()
    }
}

/// GPT-2 small: 12 layers, d_model 768, 12 heads, seq 128, vocab 50257, MLP 3072.
pub fn gpt2_small_ir() -> String {
    let (layers, d, h, t, vocab, ff) = (12, 768, 12, 128, 50257, 3072);
    let hd = d / h;
    let mut args = vec![
        (
            "input".to_string(),
            "ids".to_string(),
            format!("tensor<1x{t}xi64>"),
        ),
        (
            "parameter".into(),
            "wte.weight".into(),
            format!("tensor<{vocab}x{d}xf32>"),
        ),
        (
            "parameter".into(),
            "wpe.weight".into(),
            format!("tensor<1024x{d}xf32>"),
        ),
    ];
    for l in 0..layers {
        for (name, shape) in [
            ("ln_1.weight", format!("{d}")),
            ("ln_1.bias", format!("{d}")),
            ("attn.c_attn.weight", format!("{d}x{}", 3 * d)),
            ("attn.c_attn.bias", format!("{}", 3 * d)),
            ("attn.c_proj.weight", format!("{d}x{d}")),
            ("attn.c_proj.bias", format!("{d}")),
            ("ln_2.weight", format!("{d}")),
            ("ln_2.bias", format!("{d}")),
            ("mlp.c_fc.weight", format!("{d}x{ff}")),
            ("mlp.c_fc.bias", format!("{ff}")),
            ("mlp.c_proj.weight", format!("{ff}x{d}")),
            ("mlp.c_proj.bias", format!("{d}")),
        ] {
            args.push((
                "parameter".into(),
                format!("h.{l}.{name}"),
                format!("tensor<{shape}xf32>"),
            ));
        }
    }
    args.push((
        "parameter".into(),
        "ln_f.weight".into(),
        format!("tensor<{d}xf32>"),
    ));
    args.push((
        "parameter".into(),
        "ln_f.bias".into(),
        format!("tensor<{d}xf32>"),
    ));
    let arg = |i: usize| format!("%{i}");
    let mut g = Gen {
        body: String::new(),
        next: args.len(),
    };
    let x3 = format!("tensor<1x{t}x{d}xf32>");
    let stat = format!("tensor<1x{t}x1xf32>");

    let ln = |g: &mut Gen, x: &str, w: &str, b: &str| -> String {
        let y0 = g.op_multi(
            3,
            &format!("layer_norm {x} {{epsilon = 1e-5, normalized_rank = 1}}"),
            &format!("{x3}, {stat}, {stat}"),
        );
        let wb = g.op(
            &format!("broadcast_in_dim {w} {{broadcast_dimensions = [2]}}"),
            &x3,
        );
        let m = g.op(&format!("mul {y0}, {wb}"), &x3);
        let bb = g.op(
            &format!("broadcast_in_dim {b} {{broadcast_dimensions = [2]}}"),
            &x3,
        );
        g.op(&format!("add {m}, {bb}"), &x3)
    };
    let linear = |g: &mut Gen, x: &str, k: usize, w: &str, b: &str, n: usize| -> String {
        let x2 = g.op(&format!("reshape {x}"), &format!("tensor<{t}x{k}xf32>"));
        let y = g.op(
            &format!("dot_general {x2}, {w} {{lhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_batching_dimensions = [], rhs_contracting_dimensions = [0]}}"),
            &format!("tensor<{t}x{n}xf32>"),
        );
        let bb = g.op(
            &format!("broadcast_in_dim {b} {{broadcast_dimensions = [1]}}"),
            &format!("tensor<{t}x{n}xf32>"),
        );
        let yb = g.op(&format!("add {y}, {bb}"), &format!("tensor<{t}x{n}xf32>"));
        g.op(&format!("reshape {yb}"), &format!("tensor<1x{t}x{n}xf32>"))
    };

    let tok = g.op(
        &format!("gather {}, {} {{collapsed_slice_dims = [0], index_vector_dim = 2, offset_dims = [2], operand_batching_dims = [], slice_sizes = [1, {d}], start_index_map = [0], start_indices_batching_dims = []}}", arg(1), arg(0)),
        &x3,
    );
    let pos = g.op(
        &format!(
            "slice {} {{limit_indices = [{t}, {d}], start_indices = [0, 0], strides = [1, 1]}}",
            arg(2)
        ),
        &format!("tensor<{t}x{d}xf32>"),
    );
    let posb = g.op(
        &format!("broadcast_in_dim {pos} {{broadcast_dimensions = [1, 2]}}"),
        &x3,
    );
    let mut hcur = g.op(&format!("add {tok}, {posb}"), &x3);
    let sc = format!("tensor<1x{h}x{t}x{t}xf32>");
    let heads = format!("tensor<1x{h}x{t}x{hd}xf32>");
    for l in 0..layers {
        let p = |i: usize| arg(3 + 12 * l + i);
        let y = ln(&mut g, &hcur, &p(0), &p(1));
        let qkv = linear(&mut g, &y, d, &p(2), &p(3), 3 * d);
        let mut qkvh = Vec::new();
        for i in 0..3 {
            let s = g.op(
                &format!("slice {qkv} {{limit_indices = [1, {t}, {}], start_indices = [0, 0, {}], strides = [1, 1, 1]}}", (i + 1) * d, i * d),
                &x3,
            );
            let r = g.op(
                &format!("reshape {s}"),
                &format!("tensor<1x{t}x{h}x{hd}xf32>"),
            );
            qkvh.push(g.op(
                &format!("transpose {r} {{permutation = [0, 2, 1, 3]}}"),
                &heads,
            ));
        }
        let s = g.op(
            &format!("dot_general {}, {} {{lhs_batching_dimensions = [0, 1], lhs_contracting_dimensions = [3], rhs_batching_dimensions = [0, 1], rhs_contracting_dimensions = [3]}}", qkvh[0], qkvh[1]),
            &sc,
        );
        let k = g.op(&format!("constant {{value = dense<0.125> : {sc}}}"), &sc);
        let s = g.op(&format!("mul {s}, {k}"), &sc);
        let row = g.op("iota {dimension = 0}", &format!("tensor<{t}x{t}xi64>"));
        let col = g.op("iota {dimension = 1}", &format!("tensor<{t}x{t}xi64>"));
        let keep = g.op(
            &format!("compare {row}, {col} {{direction = \"ge\"}}"),
            &format!("tensor<{t}x{t}xbool>"),
        );
        let keepb = g.op(
            &format!("broadcast_in_dim {keep} {{broadcast_dimensions = [2, 3]}}"),
            &format!("tensor<1x{h}x{t}x{t}xbool>"),
        );
        let ninf = g.op(&format!("constant {{value = dense<-inf> : {sc}}}"), &sc);
        let s = g.op(&format!("select {keepb}, {s}, {ninf}"), &sc);
        let pr = g.op(&format!("softmax {s} {{dimension = 3}}"), &sc);
        let o = g.op(
            &format!("dot_general {pr}, {} {{lhs_batching_dimensions = [0, 1], lhs_contracting_dimensions = [3], rhs_batching_dimensions = [0, 1], rhs_contracting_dimensions = [2]}}", qkvh[2]),
            &heads,
        );
        let o = g.op(
            &format!("transpose {o} {{permutation = [0, 2, 1, 3]}}"),
            &format!("tensor<1x{t}x{h}x{hd}xf32>"),
        );
        let o = g.op(&format!("reshape {o}"), &x3);
        let a = linear(&mut g, &o, d, &p(4), &p(5), d);
        hcur = g.op(&format!("add {hcur}, {a}"), &x3);
        let y = ln(&mut g, &hcur, &p(6), &p(7));
        let f = linear(&mut g, &y, d, &p(8), &p(9), ff);
        let f = g.op(
            &format!("gelu {f} {{approximate = \"tanh\"}}"),
            &format!("tensor<1x{t}x{ff}xf32>"),
        );
        let f = linear(&mut g, &f, ff, &p(10), &p(11), d);
        hcur = g.op(&format!("add {hcur}, {f}"), &x3);
    }
    let n = args.len();
    let y = ln(&mut g, &hcur, &arg(n - 2), &arg(n - 1));
    let y2 = g.op(&format!("reshape {y}"), &format!("tensor<{t}x{d}xf32>"));
    let logits = g.op(
        &format!("dot_general {y2}, {} {{lhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_batching_dimensions = [], rhs_contracting_dimensions = [1]}}", arg(1)),
        &format!("tensor<{t}x{vocab}xf32>"),
    );
    let mut s = String::from("module {\n  func @main(");
    for (i, (kind, name, ty)) in args.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        let _ = write!(s, "%{i}: {ty} {{kind = \"{kind}\", name = \"{name}\"}}");
    }
    let _ = writeln!(
        s,
        ") -> (tensor<{t}x{vocab}xf32> {{kind = \"output\", name = \"logits\"}}) {{"
    );
    s.push_str(&g.body);
    let _ = writeln!(s, "    return {logits}\n  }}\n}}\n#0 = loc(\"block\", \"torch.ops.aten.addmm.default\", \"gpt2.py:87 in forward\")");
    s
}
