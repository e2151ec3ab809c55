//! The signature of a StableHLO module's public `main` read from its text, so that a module
//! from any producer (tpuc's `lower`, JAX's `jax.jit(f).lower(...).as_text()`, torch_xla) can
//! be run without tpuc IR beside it: argument names and types, result types.
//!
//! Only the function header is read (no full MLIR parser): `func.func public @main(%a: T
//! {attrs}, ...) -> (T {attrs}, ...)` or `-> T`. Names come from a `tpuc.name` argument
//! attribute when present, else from the SSA name (`%arg0` → `arg0`). Dynamic dims (`?`),
//! tuples and non-tensor types are refused with a message naming them.

use tpuc_ir::{DType, TensorType};

/// A function signature: (name, type) per argument, then the result types.
#[derive(Clone, Debug, PartialEq)]
pub struct Signature {
    pub args: Vec<(String, TensorType)>,
    pub results: Vec<TensorType>,
}

/// Reads the signature of the public function `main` of a StableHLO module.
pub fn main_signature(text: &str) -> Result<Signature, String> {
    let start = ["func.func public @main(", "func.func @main("]
        .iter()
        .find_map(|h| text.find(h).map(|i| i + h.len()))
        .ok_or("no `func.func public @main(` in the module")?;
    let rest = &text[start..];
    let close = matching(rest).ok_or("unbalanced parentheses in @main's arguments")?;
    let mut args = Vec::new();
    for (i, a) in split_top(&rest[..close]).into_iter().enumerate() {
        let (ssa, after) = a.split_once(':').ok_or_else(|| format!("argument {i} of @main has no type: `{a}`"))?;
        let (ty, attrs) = tensor_prefix(after.trim()).map_err(|e| format!("argument {i} of @main: {e}"))?;
        let name = attr_string(attrs, "tpuc.name").unwrap_or_else(|| ssa.trim().trim_start_matches('%').to_string());
        args.push((name, ty));
    }
    let tail = rest[close + 1..].trim_start();
    let mut results = Vec::new();
    if let Some(r) = tail.strip_prefix("->") {
        let r = r.trim_start();
        if let Some(inner) = r.strip_prefix('(') {
            let c = matching(inner).ok_or("unbalanced parentheses in @main's results")?;
            for (i, t) in split_top(&inner[..c]).into_iter().enumerate() {
                results.push(tensor_prefix(t.trim()).map_err(|e| format!("result {i} of @main: {e}"))?.0);
            }
        } else {
            results.push(tensor_prefix(r).map_err(|e| format!("the result of @main: {e}"))?.0);
        }
    }
    Ok(Signature { args, results })
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
    fn reads_the_partition_and_replica_counts() {
        let t = "module @jit_f attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 2 : i32} {\n}";
        assert_eq!(module_counts(t), (Some(4), Some(2)));
        assert_eq!(module_counts("module @m {\n}"), (None, None));
    }

    #[test]
    fn no_results_and_no_arguments() {
        let s = main_signature("func.func public @main() {").unwrap();
        assert!(s.args.is_empty() && s.results.is_empty());
    }
}
