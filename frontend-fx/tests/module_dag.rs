//! The importer's modules form a DAG, and the op families stand on the floor only.
//!
//! A module depends on another when its source names it: a `use` of a path through `crate::`,
//! `super::` or `self::` (braces expanded), such a path written inline, or a path through one
//! of its own child modules (`conv::expand_list` in `nn/mod.rs`). Declaring a child (`mod
//! conv;`) is not a dependency. Two rules are checked over `src/`:
//!
//! - no cycles: the dependency graph has no strongly connected component of two or more modules;
//! - a family (`ops::<name>` and its submodules) depends on `ops::build`, on its own submodules
//!   and on modules outside `ops`, never on another family or on the registry `ops` itself.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type ModPath = Vec<String>;

/// Every module of the crate and its source, keyed by path (`[]` is the crate root).
fn modules(src: &Path) -> BTreeMap<ModPath, String> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeMap<ModPath, String>) {
        for entry in std::fs::read_dir(dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, src, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(src)
                    .expect("under src")
                    .with_extension("");
                let mut m: ModPath = rel
                    .iter()
                    .map(|s| s.to_string_lossy().into_owned())
                    .collect();
                if matches!(m.last().map(String::as_str), Some("mod" | "lib")) {
                    m.pop();
                }
                out.insert(m, std::fs::read_to_string(&path).expect("read module"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

/// The source without comments, string and char literals, and the `#[cfg(test)]` tail.
fn code_of(src: &str) -> String {
    let src = src.split("#[cfg(test)]").next().unwrap_or("");
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            // A char literal ('x', '\n'); a lifetime ('a) is left alone.
            b'\'' if b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\') => {
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths a `use` tree names, braces expanded (`a::{b, c::d}` → `a::b`, `a::c::d`).
fn expand_use(tree: &str, prefix: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or("").trim();
        if !path.is_empty() {
            out.push(format!("{prefix}{path}"));
        }
        return;
    };
    let close = tree.rfind('}').expect("balanced use tree");
    let head = format!("{prefix}{}", &tree[..open]);
    let (mut depth, mut start) = (0, open + 1);
    for (i, c) in tree[..close].char_indices().skip(open + 1) {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand_use(&tree[start..i], &head, out);
                start = i + 1;
            }
            _ => {}
        }
    }
    expand_use(&tree[start..close], &head, out);
}

/// The module a path names, resolved from module `at`: the longest prefix that is a module.
fn resolve(at: &ModPath, path: &str, mods: &BTreeMap<ModPath, String>) -> Option<ModPath> {
    let mut segs = path
        .split("::")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .peekable();
    let mut m: ModPath = match *segs.peek()? {
        "crate" => {
            segs.next();
            Vec::new()
        }
        "self" => {
            segs.next();
            at.clone()
        }
        "super" => {
            let mut m = at.clone();
            while segs.peek() == Some(&"super") {
                segs.next();
                m.pop();
            }
            m
        }
        child => {
            // A path through a child module of `at`.
            let mut m = at.clone();
            m.push(child.to_string());
            if !mods.contains_key(&m) {
                return None;
            }
            m.pop();
            m
        }
    };
    for s in segs {
        m.push(s.to_string());
        if !mods.contains_key(&m) {
            m.pop();
            break;
        }
    }
    Some(m)
}

/// Each module's dependencies (itself and the crate root excluded).
fn dependencies(mods: &BTreeMap<ModPath, String>) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mut deps = BTreeMap::new();
    for (at, src) in mods {
        let code = code_of(src);
        let mut paths = Vec::new();
        let mut rest = String::with_capacity(code.len());
        // `use` items (their trees expanded); `mod x;` declarations dropped.
        for stmt in code.split_inclusive(';') {
            let t = stmt.trim_start();
            let body = t
                .strip_prefix("pub(crate) ")
                .or_else(|| t.strip_prefix("pub(super) "))
                .or_else(|| t.strip_prefix("pub "))
                .unwrap_or(t);
            if let Some(tree) = body.strip_prefix("use ") {
                expand_use(tree.trim_end_matches(';'), "", &mut paths);
            } else if body.starts_with("mod ") && !body.contains('{') {
            } else {
                rest.push_str(stmt);
            }
        }
        // Inline paths: an identifier followed by `::`, not itself after `::`.
        let chars: Vec<char> = rest.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            if is_ident(chars[i]) && (i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':')) {
                let start = i;
                while i < chars.len()
                    && (is_ident(chars[i]) || (chars[i] == ':' && chars.get(i + 1) == Some(&':')))
                {
                    i += if chars[i] == ':' { 2 } else { 1 };
                }
                let path: String = chars[start..i].iter().collect();
                if path.contains("::") {
                    paths.push(path);
                }
            } else {
                i += 1;
            }
        }
        let set: BTreeSet<ModPath> = paths
            .iter()
            .filter_map(|p| resolve(at, p, mods))
            .filter(|m| m != at && !m.is_empty())
            .collect();
        deps.insert(at.clone(), set);
    }
    deps
}

/// The strongly connected components of two or more modules (Tarjan).
fn cycles(deps: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct Walk<'a> {
        deps: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a ModPath) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in &self.deps[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.stack.contains(&w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    comp.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut walk = Walk {
        deps,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in deps.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.out
}

fn name(m: &ModPath) -> String {
    m.join("::")
}

fn crate_graph() -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    assert!(
        mods.len() > 40,
        "found only {} modules under {}",
        mods.len(),
        src.display()
    );
    dependencies(&mods)
}

#[test]
fn the_modules_form_a_dag() {
    let found: Vec<String> = cycles(&crate_graph())
        .iter()
        .map(|c| c.iter().map(name).collect::<Vec<_>>().join(" ↔ "))
        .collect();
    assert!(
        found.is_empty(),
        "module cycles in frontend-fx:\n{}",
        found.join("\n")
    );
}

#[test]
fn families_stand_on_the_floor_only() {
    let deps = crate_graph();
    let mut bad = Vec::new();
    for (m, ds) in &deps {
        let [ops, family, ..] = m.as_slice() else {
            continue;
        };
        if ops != "ops" || family == "build" {
            continue;
        }
        for d in ds {
            let ok = match d.as_slice() {
                [o, f, ..] if o == "ops" => f == "build" || f == family,
                [o] if o == "ops" => false,
                _ => true,
            };
            if !ok {
                bad.push(format!("{} → {}", name(m), name(d)));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "op families that reach past the floor:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_checker_sees_a_cycle_and_a_sideways_import() {
    // The same analysis over a made-up crate: `a` and `b` name each other, `ops::x` a sibling.
    let mods: BTreeMap<ModPath, String> = [
        (vec![], "mod a; mod b; mod ops;"),
        (
            vec!["a".into()],
            "use crate::b::{self, f};\n// crate::ops::y in a comment is no dependency\n",
        ),
        (
            vec!["b".into()],
            "fn g() { let s = \"crate::ops::x\"; super::a::h() }",
        ),
        (vec!["ops".into()], "pub mod build; pub mod x; pub mod y;"),
        (vec!["ops".into(), "build".into()], ""),
        (
            vec!["ops".into(), "x".into()],
            "use crate::ops::build::*;\nfn f() { super::y::g() }",
        ),
        (vec!["ops".into(), "y".into()], "use crate::ops::build::*;"),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_string()))
    .collect();
    let deps = dependencies(&mods);
    assert_eq!(
        deps[&vec!["a".to_string()]],
        BTreeSet::from([vec!["b".to_string()]])
    );
    assert_eq!(
        cycles(&deps),
        vec![vec![vec!["a".to_string()], vec!["b".to_string()]]]
    );
    let x = &deps[&vec!["ops".to_string(), "x".to_string()]];
    assert!(
        x.contains(&vec!["ops".to_string(), "y".to_string()]),
        "{x:?}"
    );
    assert!(
        deps[&vec!["ops".to_string()]].is_empty(),
        "declaring a child is no dependency"
    );
}
