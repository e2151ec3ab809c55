//! Tests of the sharding notation, plan files, device blocks and joined results.

use super::blocks::block;
use super::*;
use crate::tensor::HostTensor;
use std::borrow::Cow;
use tpuc_ir::DType;

fn iota(dims: &[i64]) -> HostTensor {
    let n: i64 = dims.iter().product();
    HostTensor { dtype: DType::I32, dims: dims.to_vec(), bytes: (0..n as i32).flat_map(|v| v.to_le_bytes()).collect() }
}

fn values(t: &HostTensor) -> Vec<i32> {
    t.bytes.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn parses_meshes_and_shards() {
    assert_eq!(parse_mesh("x=2,y=4").unwrap(), vec![("x".into(), 2), ("y".into(), 4)]);
    assert!(parse_mesh("x=2,x=2").unwrap_err().contains("twice"));
    assert!(parse_mesh("x=0").unwrap_err().contains("positive"));
    assert!(parse_mesh("x").unwrap_err().contains("NAME=SIZE"));
    let (n, d) = parse_shard("fc1.weight=y,_").unwrap();
    assert_eq!((n.as_str(), d), ("fc1.weight", vec![vec!["y".to_string()], vec![]]));
    assert_eq!(parse_shard("x=x+y,_").unwrap().1, vec![vec!["x".to_string(), "y".to_string()], vec![]]);
}

#[test]
fn shard_plans_round_trip_through_their_json() {
    let text = r#"{"mesh": "x=2,y=2", "shard": {"fc1.weight": "x+y,_", "x": "_,y"}, "policy": "tp"}"#;
    let plan = ShardPlan::parse(text).unwrap();
    assert_eq!(plan.mesh, Some(vec![("x".into(), 2), ("y".into(), 2)]));
    assert_eq!(plan.shard["x"], vec![vec![], vec!["y".to_string()]]);
    assert_eq!(plan.policy, Some(ShardPolicy::Tp));
    assert_eq!(ShardPlan::parse(&plan.to_json().to_string()).unwrap(), plan);
    assert_eq!(ShardPlan::parse("{}").unwrap(), ShardPlan::default());
    assert!(ShardPlan::parse(r#"{"policy": "zero3"}"#).unwrap_err().contains("expected one of dp, fsdp, tp"));
    assert!(ShardPlan::parse(r#"{"mesh": 4}"#).unwrap_err().contains("`mesh`"));
    assert!(ShardPlan::parse("[]").unwrap_err().contains("expected an object"));
}

#[test]
fn devices_hold_their_row_major_blocks() {
    let sh = MeshSharding {
        axes: vec![("x".into(), 2), ("y".into(), 2)],
        args: [("a".to_string(), vec![vec!["x".to_string()], vec!["y".to_string()]]), ("b".to_string(), vec![vec![], vec!["x".to_string(), "y".to_string()]])]
            .into_iter()
            .collect(),
        results: Default::default(),
    };
    let t = iota(&[4, 4]);
    // Device 1 = (x 0, y 1): rows 0..2, cols 2..4.
    assert_eq!(values(&shard_for_device(&sh, "a", &t, 1).unwrap()), vec![2, 3, 6, 7]);
    // Device 2 = (x 1, y 0): rows 2..4, cols 0..2.
    assert_eq!(values(&shard_for_device(&sh, "a", &t, 2).unwrap()), vec![8, 9, 12, 13]);
    // b: cols split 4 ways, x major: device 3 takes col 3.
    assert_eq!(values(&shard_for_device(&sh, "b", &t, 3).unwrap()), vec![3, 7, 11, 15]);
    // Unsharded arguments are whole on every device.
    assert!(matches!(shard_for_device(&sh, "c", &t, 2).unwrap(), Cow::Borrowed(b) if *b == t));
    // A dim that does not divide is an error naming it.
    let e = shard_for_device(&sh, "a", &iota(&[3, 4]), 0).unwrap_err().to_string();
    assert!(e.contains("dim 0 of `a`"), "{e}");
}

#[test]
fn results_join_from_their_pieces() {
    let mut sh = MeshSharding { axes: vec![("x".into(), 2), ("y".into(), 3)], ..Default::default() };
    for dims in [vec![vec!["x".to_string()], vec!["y".to_string()]], vec![vec![], vec!["y".to_string(), "x".to_string()]], vec![vec!["x".to_string()], vec![]]] {
        sh.args.insert("r".into(), dims.clone());
        sh.results.insert(0, dims);
        let t = iota(&[4, 6]);
        let pieces: Vec<HostTensor> = (0..6).map(|p| shard_for_device(&sh, "r", &t, p).unwrap().into_owned()).collect();
        assert_eq!(assemble(&sh, 0, &sh.results[&0], &t.dims, &pieces).unwrap(), t);
    }
    // A piece of the wrong shape is an error, not a silent mix-up.
    let bad = vec![iota(&[1, 1]); 6];
    assert!(assemble(&sh, 0, &sh.results[&0], &[4, 6], &bad).unwrap_err().to_string().contains("device 0 returned"));
}

#[test]
fn blocks_of_rank_3_and_0() {
    let t = iota(&[2, 3, 4]);
    assert_eq!(values(&block(&t, &[1, 1, 2], &[1, 2, 2])), vec![18, 19, 22, 23]);
    let s = iota(&[]);
    assert_eq!(block(&s, &[], &[]), s);
}
