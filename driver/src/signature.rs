//! The signature of a StableHLO module's public `main` read from its text, so that a module
//! from any producer (tpuc's `lower`, JAX's `jax.jit(f).lower(...).as_text()`, torch_xla) can
//! be run without tpuc IR beside it: argument names and types, result types.
//!
//! Only the function header is read (no full MLIR parser): `func.func public @main(%a: T
//! {attrs}, ...) -> (T {attrs}, ...)` or `-> T`, the module's `mhlo.num_partitions` /
//! `num_replicas` and its first `sdy.mesh`. Names come from a `tpuc.name` argument attribute
//! when present, else from the SSA name (`%arg0` → `arg0`); `sdy.sharding` attributes give
//! each value's split. Dynamic dims (`?`), tuples and non-tensor types are refused with a
//! message naming them.

use tpuc_ir::{DType, TensorType};

/// A function signature: (name, type) per argument, then the result types; for a module
/// sharded with Shardy, its mesh and each argument's and result's split (per dim, the mesh
/// axes; `None` when the value carries no `sdy.sharding`).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Signature {
    pub args: Vec<(String, TensorType)>,
    pub results: Vec<TensorType>,
    pub mesh: Option<Vec<(String, i64)>>,
    pub arg_shardings: Vec<Option<Vec<Vec<String>>>>,
    pub result_shardings: Vec<Option<Vec<Vec<String>>>>,
}

impl Signature {
    /// The module's shardings as the SPMD runner takes them, when it declares a mesh.
    pub fn mesh_sharding(&self) -> Option<crate::spmd::MeshSharding> {
        let axes = self.mesh.clone()?;
        let args = self.args.iter().zip(&self.arg_shardings).filter_map(|((n, _), s)| Some((n.clone(), s.clone()?))).collect();
        let results = self.result_shardings.iter().enumerate().filter_map(|(i, s)| Some((i, s.clone()?))).collect();
        Some(crate::spmd::MeshSharding { axes, args, results })
    }
}

/// `text` with every result of `main` that has no `sdy.sharding` marked replicated over mesh
/// `@mesh_name`, so that the partitioner returns it whole on every device (instead of a block
/// laid out as its propagation chose). `None` when nothing needed marking or the header cannot
/// be read.
pub fn with_replicated_results(text: &str, mesh_name: &str) -> Option<String> {
    let start = ["func.func public @main(", "func.func @main("].iter().find_map(|h| text.find(h).map(|i| i + h.len()))?;
    let args_end = start + matching(&text[start..])?;
    let tail = &text[args_end + 1..];
    let arrow = tail.find("->")?;
    let after = tail[arrow + 2..].trim_start();
    let base = text.len() - after.len();
    let pieces: Vec<(usize, usize)> = if let Some(inner) = after.strip_prefix('(') {
        let c = matching(inner)?;
        let list = &inner[..c];
        let list_at = base + 1;
        split_top(list).iter().map(|p| (list_at + (p.as_ptr() as usize - list.as_ptr() as usize), p.len())).collect()
    } else {
        // A single result: its type and, when present, its attribute dictionary.
        let (_, rest) = tensor_prefix(after).ok()?;
        let ty_len = after.len() - rest.len();
        let len = ty_len + single_result_attrs(rest).map_or(0, |a| rest.len() - rest.trim_start().len() + a.len());
        vec![(base, len)]
    };
    let mut out = String::with_capacity(text.len() + 64 * pieces.len());
    let mut at = 0;
    let mut marked = false;
    for (off, len) in pieces {
        let piece = &text[off..off + len];
        if piece.contains("sdy.sharding") {
            continue;
        }
        let Ok((ty, _)) = tensor_prefix(piece.trim()) else { return None };
        let dims = vec!["{}"; ty.rank()].join(", ");
        let attr = format!("sdy.sharding = #sdy.sharding<@{mesh_name}, [{dims}]>");
        match piece.find('{') {
            // `tensor<...> {attrs}`: the attribute first in the dictionary.
            Some(b) if piece[..b].contains('>') => {
                out.push_str(&text[at..off + b + 1]);
                out.push_str(&attr);
                out.push_str(", ");
                at = off + b + 1;
            }
            _ => {
                let end = off + piece.trim_end().len();
                out.push_str(&text[at..end]);
                out.push_str(&format!(" {{{attr}}}"));
                at = end;
            }
        }
        marked = true;
    }
    out.push_str(&text[at..]);
    marked.then_some(out)
}

/// The attribute dictionary of `main`'s single result, given what follows its type: a `{...}`
/// that the body's own `{` follows (otherwise that first `{` is the body).
fn single_result_attrs(after_type: &str) -> Option<&str> {
    let t = after_type.trim_start();
    let inner = t.strip_prefix('{')?;
    let end = matching(inner)?;
    inner[end + 1..].trim_start().starts_with('{').then(|| &t[..end + 2])
}

/// The name of the module's first `sdy.mesh`.
pub fn sdy_mesh_name(text: &str) -> Option<&str> {
    let at = text.find("sdy.mesh @")? + "sdy.mesh @".len();
    let rest = &text[at..];
    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

/// `sdy.mesh @mesh = <["x"=2, "y"=2]>`: the module's first mesh, if it is a plain one (no
/// explicit device order).
fn sdy_mesh(text: &str) -> Result<Option<Vec<(String, i64)>>, String> {
    let Some(at) = text.find("sdy.mesh @") else { return Ok(None) };
    let line = text[at..].lines().next().unwrap_or("");
    let body = line.split_once("<[").and_then(|(_, r)| r.split_once(']')).map(|(b, _)| b).ok_or("unreadable sdy.mesh")?;
    if line.contains("device_ids") {
        return Err("an sdy.mesh with an explicit device order is not supported".into());
    }
    let mut axes = Vec::new();
    for part in split_top(body) {
        let (name, size) = part.split_once('=').ok_or_else(|| format!("unreadable mesh axis `{}`", part.trim()))?;
        let size: i64 = size.trim().parse().map_err(|_| format!("unreadable mesh axis size `{}`", size.trim()))?;
        axes.push((name.trim().trim_matches('"').to_string(), size));
    }
    Ok(Some(axes))
}

/// The split of `sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>` in an attribute dictionary:
/// per dim, the axes named (open dims `?` and priorities ignored).
fn sdy_sharding(attrs: &str) -> Option<Vec<Vec<String>>> {
    let at = attrs.find("#sdy.sharding<")?;
    let rest = &attrs[at..];
    let list = rest.split_once('[')?.1;
    let end = matching(list)?;
    let mut dims = Vec::new();
    for d in split_top(&list[..end]) {
        let inner = d.trim().strip_prefix('{').and_then(|x| x.split_once('}')).map_or("", |(x, _)| x);
        dims.push(inner.split(',').map(|a| a.trim()).filter(|a| a.starts_with('"')).map(|a| a.trim_matches('"').to_string()).collect());
    }
    Some(dims)
}

/// Reads the signature of the public function `main` of a StableHLO module.
pub fn main_signature(text: &str) -> Result<Signature, String> {
    let start = ["func.func public @main(", "func.func @main("]
        .iter()
        .find_map(|h| text.find(h).map(|i| i + h.len()))
        .ok_or("no `func.func public @main(` in the module")?;
    let rest = &text[start..];
    let close = matching(rest).ok_or("unbalanced parentheses in @main's arguments")?;
    let mut sig = Signature { mesh: sdy_mesh(text)?, ..Default::default() };
    for (i, a) in split_top(&rest[..close]).into_iter().enumerate() {
        let (ssa, after) = a.split_once(':').ok_or_else(|| format!("argument {i} of @main has no type: `{a}`"))?;
        let (ty, attrs) = tensor_prefix(after.trim()).map_err(|e| format!("argument {i} of @main: {e}"))?;
        let name = attr_string(attrs, "tpuc.name").unwrap_or_else(|| ssa.trim().trim_start_matches('%').to_string());
        sig.arg_shardings.push(sdy_sharding(attrs));
        sig.args.push((name, ty));
    }
    let tail = rest[close + 1..].trim_start();
    if let Some(r) = tail.strip_prefix("->") {
        let r = r.trim_start();
        if let Some(inner) = r.strip_prefix('(') {
            let c = matching(inner).ok_or("unbalanced parentheses in @main's results")?;
            for (i, t) in split_top(&inner[..c]).into_iter().enumerate() {
                let (ty, attrs) = tensor_prefix(t.trim()).map_err(|e| format!("result {i} of @main: {e}"))?;
                sig.result_shardings.push(sdy_sharding(attrs));
                sig.results.push(ty);
            }
        } else {
            let (ty, attrs) = tensor_prefix(r).map_err(|e| format!("the result of @main: {e}"))?;
            sig.result_shardings.push(single_result_attrs(attrs).and_then(sdy_sharding));
            sig.results.push(ty);
        }
    }
    Ok(sig)
}

/// Walks `s` outside string literals, calling `f(index, char, depth)` with the bracket depth
/// after the char (round, square and curly brackets, and angle brackets when `angles`), until
/// `f` returns true; returns that index.
fn scan(s: &str, angles: bool, mut f: impl FnMut(usize, char, i32) -> bool) -> Option<usize> {
    let (mut depth, mut in_str, mut prev) = (0i32, false, '\0');
    for (i, c) in s.char_indices() {
        if in_str {
            in_str = !(c == '"' && prev != '\\');
        } else {
            match c {
                '"' => in_str = true,
                '(' | '[' | '{' => depth += 1,
                '<' if angles => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                '>' if angles => depth -= 1,
                _ => {}
            }
            if f(i, c, depth) {
                return Some(i);
            }
        }
        prev = c;
    }
    None
}

/// The `mhlo.num_partitions` and `mhlo.num_replicas` a module declares in its header
/// attributes (JAX writes them; a sharded module needs its partition count to compile).
pub fn module_counts(text: &str) -> (Option<i64>, Option<i64>) {
    let header = text.lines().find(|l| l.trim_start().starts_with("module")).unwrap_or("");
    let count = |key: &str| {
        let at = header.find(key)? + key.len();
        let rest = header[at..].trim_start().strip_prefix('=')?.trim_start();
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse().ok()
    };
    (count("mhlo.num_partitions"), count("mhlo.num_replicas"))
}

/// The index in `s` of the bracket closing one opened just before `s`.
fn matching(s: &str) -> Option<usize> {
    scan(s, false, |_, c, depth| matches!(c, ')' | ']' | '}') && depth < 0)
}

/// `s` split at the commas outside brackets and strings.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut begin = 0;
    scan(s, true, |i, c, depth| {
        if c == ',' && depth == 0 {
            out.push(&s[begin..i]);
            begin = i + 1;
        }
        false
    });
    if !s[begin..].trim().is_empty() {
        out.push(&s[begin..]);
    }
    out
}

/// A `tensor<...>` type at the start of `s`, and what follows it.
fn tensor_prefix(s: &str) -> Result<(TensorType, &str), String> {
    let body_start = s.strip_prefix("tensor<").ok_or_else(|| format!("`{}` is not a ranked tensor type", head(s)))?;
    let mut depth = 1usize;
    let mut end = None;
    for (i, c) in body_start.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    end = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let end = end.ok_or_else(|| format!("unterminated `{}`", head(s)))?;
    let body = &body_start[..end];
    // Encodings (`tensor<4xf32, #enc>`) are not part of the host signature.
    let body = split_top(body).first().copied().unwrap_or(body).trim();
    let mut parts: Vec<&str> = Vec::new();
    let mut rest = body;
    // Dims are `N` or `?` followed by `x`; the element type may contain `x` only inside `<>`.
    loop {
        match rest.find('x') {
            Some(i) if !rest[..i].contains('<') && (rest[..i].chars().all(|c| c.is_ascii_digit()) || &rest[..i] == "?") && i > 0 => {
                parts.push(&rest[..i]);
                rest = &rest[i + 1..];
            }
            _ => break,
        }
    }
    let mut dims = Vec::with_capacity(parts.len());
    for p in parts {
        if p == "?" {
            return Err(format!("`tensor<{body}>` has a dynamic dim; run takes static shapes"));
        }
        dims.push(p.parse::<i64>().map_err(|_| format!("bad dim `{p}` in `tensor<{body}>`"))?);
    }
    let dtype = DType::ALL
        .iter()
        .copied()
        .find(|d| d.mlir_name() == rest)
        .ok_or_else(|| format!("element type `{rest}` of `tensor<{body}>` is not supported"))?;
    Ok((TensorType::from_static(dtype, &dims), &body_start[end + 1..]))
}

fn head(s: &str) -> &str {
    let n = s.char_indices().nth(40).map_or(s.len(), |(i, _)| i);
    &s[..n]
}

/// The string value of `key = "..."` inside an attribute dictionary at the start of `s`.
fn attr_string(s: &str, key: &str) -> Option<String> {
    let s = s.trim_start();
    let dict = s.strip_prefix('{')?;
    let end = matching(dict)?;
    for entry in split_top(&dict[..end]) {
        if let Some((k, v)) = entry.split_once('=') {
            if k.trim() == key {
                let v = v.trim();
                return v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).map(str::to_string);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_jax_module() {
        let text = r#"module @jit_f attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main(%arg0: tensor<4x8xf32> {mhlo.layout_mode = "default", mhlo.sharding = "{replicated}"}, %arg1: tensor<i1>) -> (tensor<4xf32> {jax.result_info = "[0]"}, tensor<2x3xcomplex<f32>>) {
    return
  }
}"#;
        let s = main_signature(text).unwrap();
        assert_eq!(s.args.len(), 2);
        assert_eq!(s.args[0], ("arg0".to_string(), TensorType::from_static(DType::F32, &[4, 8])));
        assert_eq!(s.args[1], ("arg1".to_string(), TensorType::from_static(DType::Bool, &[])));
        assert_eq!(s.results, vec![TensorType::from_static(DType::F32, &[4]), TensorType::from_static(DType::C64, &[2, 3])]);
    }

    #[test]
    fn reads_tpuc_names_and_a_single_result() {
        let text = r#"func.func public @main(%arg0: tensor<2x16xbf16> {tpuc.kind = "input", tpuc.name = "x"}, %arg1: tensor<8xui8> {tpuc.name = "fc.weight"}) -> tensor<2x8xf64> {"#;
        let s = main_signature(text).unwrap();
        assert_eq!(s.args[0].0, "x");
        assert_eq!(s.args[1], ("fc.weight".to_string(), TensorType::from_static(DType::U8, &[8])));
        assert_eq!(s.results, vec![TensorType::from_static(DType::F64, &[2, 8])]);
    }

    #[test]
    fn refuses_what_it_cannot_run() {
        assert!(main_signature("func.func private @f() {").unwrap_err().contains("@main"));
        let e = main_signature("func.func public @main(%a: tensor<?x4xf32>) -> tensor<4xf32> {").unwrap_err();
        assert!(e.contains("dynamic dim"), "{e}");
        let e = main_signature("func.func public @main(%a: tuple<tensor<4xf32>>) {").unwrap_err();
        assert!(e.contains("argument 0"), "{e}");
        let e = main_signature("func.func public @main(%a: tensor<4xf4E2M1FN>) {").unwrap_err();
        assert!(e.contains("f4E2M1FN"), "{e}");
    }

    #[test]
    fn reads_shardy_meshes_and_shardings() {
        let text = r#"module @jit_f attributes {mhlo.num_partitions = 4 : i32} {
  sdy.mesh @mesh = <["x"=2, "y"=2]> {stablehlo.mesh = {axes = [{name = "x", size = 2 : i64}]}}
  func.func public @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, %arg1: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y", "x", ?}]>}, %arg2: tensor<f32>) -> (tensor<8x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, tensor<4xf32>) {"#;
        let s = main_signature(text).unwrap();
        assert_eq!(s.mesh, Some(vec![("x".to_string(), 2), ("y".to_string(), 2)]));
        let v = |a: &[&[&str]]| Some(a.iter().map(|d| d.iter().map(|x| x.to_string()).collect()).collect::<Vec<Vec<String>>>());
        assert_eq!(s.arg_shardings, vec![v(&[&["x"], &[]]), v(&[&[], &["y", "x"]]), None]);
        assert_eq!(s.result_shardings, vec![v(&[&["x"], &[]]), None]);
        let ms = s.mesh_sharding().unwrap();
        assert_eq!((ms.args.len(), ms.results.len()), (2, 1));
    }

    #[test]
    fn marks_unsharded_results_replicated() {
        let text = "module {\n  sdy.mesh @m = <[\"x\"=2]>\n  func.func public @main(%arg0: tensor<8xf32>) -> (tensor<8xf32> {jax.result_info = \"r\"}, tensor<2x3xf32>, tensor<4xf32> {sdy.sharding = #sdy.sharding<@m, [{\"x\"}]>}) {\n  }\n}";
        assert_eq!(sdy_mesh_name(text), Some("m"));
        let out = with_replicated_results(text, "m").unwrap();
        let s = main_signature(&out).unwrap();
        let v = |a: &[&[&str]]| Some(a.iter().map(|d| d.iter().map(|x| x.to_string()).collect()).collect::<Vec<Vec<String>>>());
        assert_eq!(s.result_shardings, vec![v(&[&[]]), v(&[&[], &[]]), v(&[&["x"]])]);
        assert!(out.contains("jax.result_info = \"r\""));
        let single = "func.func public @main(%a: tensor<4xf32>) -> tensor<4xcomplex<f32>> {\n  %0 = sdy.sharding_constraint\n}";
        assert_eq!(main_signature(single).unwrap().result_shardings, vec![None]);
        let out = with_replicated_results(single, "mesh").unwrap();
        assert_eq!(main_signature(&out).unwrap().result_shardings, vec![v(&[&[]])]);
        assert!(with_replicated_results(&out, "mesh").is_none());
        let attrs = "func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {jax.result_info = \"\"} {\n}";
        let out = with_replicated_results(attrs, "mesh").unwrap();
        assert!(out.contains("-> tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>, jax.result_info"), "{out}");
    }

    #[test]
    fn reads_the_partition_and_replica_counts() {
        let t = "module @jit_f attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 2 : i32} {\n}";
        assert_eq!(module_counts(t), (Some(4), Some(2)));
        assert_eq!(module_counts("module @m {\n}"), (None, None));
    }

    #[test]
    fn no_results_and_no_arguments() {
        let s = main_signature("func.func public @main() {").unwrap();
        assert!(s.args.is_empty() && s.results.is_empty() && s.mesh.is_none());
    }
}
