//! The sharding notation of the command line and of plan files: `--mesh`, `--shard`,
//! `--group` and [`ShardPlan`] (`--shard-plan FILE.json`), parsed and written back.

use super::{MeshSharding, ShardPolicy};
use std::collections::BTreeMap;

/// Parses `x=2,y=2` (axis names and sizes, major to minor).
pub fn parse_mesh(text: &str) -> Result<Vec<(String, i64)>, String> {
    let mut axes: Vec<(String, i64)> = Vec::new();
    for part in text.split(',') {
        let (name, size) = part.split_once('=').ok_or_else(|| format!("mesh axis `{part}`: expected NAME=SIZE (e.g. --mesh x=2,y=2)"))?;
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || name == "_" {
            return Err(format!("mesh axis name `{name}`: letters, digits and `_` only"));
        }
        if axes.iter().any(|(n, _)| n == name) {
            return Err(format!("mesh axis `{name}` given twice"));
        }
        let size: i64 = size.trim().parse().ok().filter(|&s| s >= 1).ok_or_else(|| format!("mesh axis `{name}`: size `{size}` is not a positive integer"))?;
        axes.push((name.to_string(), size));
    }
    Ok(axes)
}

/// Parses one `--shard NAME=AXES`: AXES one entry per dim, an axis name, several joined by
/// `+` (major first), or `_` for a dim kept whole.
pub fn parse_shard(text: &str) -> Result<(String, Vec<Vec<String>>), String> {
    let (name, axes) = text
        .rsplit_once('=')
        .ok_or_else(|| format!("--shard `{text}`: expected NAME=AXES, one entry per dim (e.g. fc1.weight=y,_)"))?;
    let dims = axes
        .split(',')
        .map(|d| match d.trim() {
            "_" | "" => Vec::new(),
            d => d.split('+').map(|a| a.trim().to_string()).collect(),
        })
        .collect();
    Ok((name.trim().to_string(), dims))
}

/// One argument's `--shard` entries as written on the command line (`y,_`, `x+y,_`).
pub fn format_shard(dims: &[Vec<String>]) -> String {
    dims.iter().map(|d| if d.is_empty() { "_".to_string() } else { d.join("+") }).collect::<Vec<_>>().join(",")
}

/// A sharding plan file (`--shard-plan FILE.json`): what `--mesh`, `--shard` and
/// `--shard-policy` say, in the same notation, every key optional:
/// `{"mesh": "x=2,y=2", "shard": {"fc1.weight": "y,_", "x": "x,_"}, "policy": "tp"}`.
/// `tpuc compile --json` of a sharded program reports its final plan (policy choices
/// included) under `"sharding"` in this form.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShardPlan {
    pub mesh: Option<Vec<(String, i64)>>,
    pub shard: BTreeMap<String, Vec<Vec<String>>>,
    pub policy: Option<ShardPolicy>,
}

impl ShardPlan {
    /// Parses a plan file's text; unknown keys are errors (a misspelt key would otherwise
    /// silently shard nothing).
    pub fn parse(text: &str) -> Result<ShardPlan, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let obj = v.as_object().ok_or("expected an object with `mesh`, `shard` and `policy`")?;
        let mut plan = ShardPlan::default();
        for (key, value) in obj {
            match key.as_str() {
                "mesh" => {
                    let m = value.as_str().ok_or("`mesh`: expected a string such as \"x=2,y=2\"")?;
                    plan.mesh = Some(parse_mesh(m).map_err(|e| format!("`mesh`: {e}"))?);
                }
                "shard" => {
                    let entries = value.as_object().ok_or("`shard`: expected an object of argument name -> axes (\"y,_\")")?;
                    for (name, axes) in entries {
                        let axes = axes.as_str().ok_or_else(|| format!("`shard`.`{name}`: expected a string such as \"y,_\""))?;
                        let (_, dims) = parse_shard(&format!("{name}={axes}")).map_err(|e| format!("`shard`: {e}"))?;
                        plan.shard.insert(name.clone(), dims);
                    }
                }
                "policy" => {
                    let p = value.as_str().ok_or("`policy`: expected a string")?;
                    plan.policy = Some(ShardPolicy::parse(p).ok_or_else(|| format!("`policy` {p:?}: expected one of {}", ShardPolicy::NAMES.join(", ")))?);
                }
                other => return Err(format!("unknown key `{other}` (known: mesh, shard, policy)")),
            }
        }
        Ok(plan)
    }

    /// The plan a sharding amounts to (every argument's entries; no policy: its choices are in).
    pub fn of(sh: &MeshSharding) -> ShardPlan {
        ShardPlan { mesh: Some(sh.axes.clone()), shard: sh.args.clone(), policy: None }
    }

    /// The plan file's JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let mut obj = serde_json::Map::new();
        if let Some(m) = &self.mesh {
            let text = m.iter().map(|(n, s)| format!("{n}={s}")).collect::<Vec<_>>().join(",");
            obj.insert("mesh".into(), text.into());
        }
        let shard: serde_json::Map<String, serde_json::Value> = self.shard.iter().map(|(n, d)| (n.clone(), format_shard(d).into())).collect();
        obj.insert("shard".into(), shard.into());
        if let Some(p) = self.policy {
            obj.insert("policy".into(), p.name().into());
        }
        obj.into()
    }
}

/// Parses `--group NAME=RANKS`: the rank groups of process group NAME, `|`-separated lists of
/// ranks (`0,1|2,3`: two groups of two), each rank of `0..count` in exactly one group.
pub fn parse_group(text: &str, count: i64) -> Result<(String, Vec<Vec<i64>>), String> {
    let (name, ranks) = text.split_once('=').ok_or_else(|| format!("--group `{text}`: expected NAME=RANKS (e.g. 1=0,1|2,3)"))?;
    let mut groups = Vec::new();
    for g in ranks.split('|') {
        let members: Vec<i64> = g
            .split(',')
            .map(|r| r.trim().parse::<i64>().map_err(|_| format!("--group {name}: `{r}` is not a rank")))
            .collect::<Result<_, _>>()?;
        groups.push(members);
    }
    let mut seen = vec![false; count.max(0) as usize];
    for &r in groups.iter().flatten() {
        if !(0..count).contains(&r) || std::mem::replace(&mut seen[r as usize], true) {
            return Err(format!("--group {name}: rank {r} is out of 0..{count} or listed twice"));
        }
    }
    if seen.iter().any(|s| !s) || groups.iter().any(|g| g.len() != groups[0].len()) {
        return Err(format!("--group {name}: the groups must cover every rank of 0..{count} in groups of one size"));
    }
    Ok((name.trim().to_string(), groups))
}
