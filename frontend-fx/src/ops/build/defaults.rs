//! The schema defaults of the registered ATen targets: one table, generated from torch's op
//! schemas (`tests/data/make_op_schemas.py --defaults`, beside `op_schemas.tsv`), read once.
//!
//! torch.export and the Dynamo hook leave out an argument that has its schema default; [`Ctx`]
//! reads an omitted argument from here, so no lowering states a default of its own. Defaults
//! that are None are not in the table: an omitted argument and an explicit None read alike.
//!
//! [`Ctx`]: super::Ctx
use crate::schema::Arg;
use std::collections::HashMap;
use std::sync::LazyLock;

/// `defaults.tsv`: target (as the registry names it), argument, kind, value.
const TABLE: &str = include_str!("defaults.tsv");

/// Full target (see [`full_target`]) → its defaulted arguments.
type Table = HashMap<String, Vec<(&'static str, Arg)>>;

static DEFAULTS: LazyLock<Table> = LazyLock::new(|| parse(TABLE).unwrap_or_else(|e| panic!("defaults.tsv: {e}")));

/// The full target string of a table name (an `OPS` entry, a line of `defaults.tsv`): bare
/// names are ATen ops.
pub fn full_target(short: &str) -> String {
    if short.starts_with("torch.") || short.starts_with("_operator.") || short.starts_with("math.") {
        short.to_string()
    } else {
        format!("torch.ops.aten.{short}")
    }
}

/// The schema default of argument `name` of `target` (a node's full target, e.g.
/// `torch.ops.aten.sum.dim_IntList`), if it has one that is not None.
pub fn schema_default(target: &str, name: &str) -> Option<&'static Arg> {
    DEFAULTS.get(target)?.iter().find(|(n, _)| *n == name).map(|(_, a)| a)
}

fn parse(text: &'static str) -> Result<Table, String> {
    let mut table = Table::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
        let bad = |what: &str| format!("line {}: {what}: {line:?}", i + 1);
        let f: Vec<&'static str> = line.split('\t').collect();
        let [target, name, kind, value] = f[..] else { return Err(bad("expected four tab-separated fields")) };
        let int = |s: &str| s.parse::<i64>().map_err(|_| bad("not an integer"));
        let arg = match kind {
            "bool" => match value {
                "true" => Arg::Bool(true),
                "false" => Arg::Bool(false),
                _ => return Err(bad("not a bool")),
            },
            "int" => Arg::Int(int(value)?),
            "float" => Arg::Float(value.parse().map_err(|_| bad("not a float"))?),
            "ints" if value.is_empty() => Arg::Ints(vec![]),
            "ints" => Arg::Ints(value.split(',').map(int).collect::<Result<_, _>>()?),
            "str" => Arg::Str(value.to_string()),
            "dtype" => Arg::ScalarType(int(value)?),
            _ => return Err(bad("unknown kind")),
        };
        table.entry(full_target(target)).or_default().push((name, arg));
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_parses_and_answers_by_full_target() {
        assert_eq!(schema_default("torch.ops.aten.layer_norm.default", "eps"), Some(&Arg::Float(1e-5)));
        assert_eq!(schema_default("torch.ops.aten.sum.dim_IntList", "keepdim"), Some(&Arg::Bool(false)));
        assert_eq!(schema_default("torch.ops.aten.roll.default", "dims"), Some(&Arg::Ints(vec![])));
        assert_eq!(schema_default("torch.ops.aten.gelu.default", "approximate"), Some(&Arg::Str("none".into())));
        // randint's dtype defaults to torch.long: the export schema's LONG.
        assert_eq!(schema_default("torch.ops.aten.randint.default", "dtype"), Some(&Arg::ScalarType(5)));
        // Required arguments and None defaults are not in the table.
        assert_eq!(schema_default("torch.ops.aten.native_layer_norm.default", "eps"), None);
        assert_eq!(schema_default("torch.ops.aten.sum.dim_IntList", "dtype"), None);
    }

    /// Every entry names an argument that has a default in the schema table generated with it
    /// (`tests/data/op_schemas.tsv`, whose targets the robustness sweep checks are registered).
    #[test]
    fn every_entry_is_a_defaulted_argument_of_a_registered_target() {
        let schemas = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/op_schemas.tsv"));
        let defaulted: std::collections::HashSet<(&str, &str)> = schemas
            .lines()
            .flat_map(|l| {
                let mut f = l.split('\t');
                let target = f.next().unwrap();
                let args = f.next().unwrap_or("");
                args.split(' ').filter_map(move |a| a.strip_suffix('=').map(|a| (target, a.split(':').next().unwrap())))
            })
            .collect();
        let mut n = 0;
        for (target, args) in DEFAULTS.iter() {
            for (name, _) in args {
                let short = target.strip_prefix("torch.ops.aten.").unwrap_or(target);
                assert!(defaulted.contains(&(short, *name)), "{target} `{name}` has no default in op_schemas.tsv");
                n += 1;
            }
        }
        assert!(n > 300, "the table has {n} entries");
    }

    #[test]
    fn malformed_lines_are_refused() {
        assert!(parse("a.default\tx\tint\tseven\n").is_err());
        assert!(parse("a.default\tx\tbool\tyes\n").is_err());
        assert!(parse("a.default\tx\tint\n").is_err());
        assert!(parse("a.default\tx\tlist\t1\n").is_err());
    }
}
