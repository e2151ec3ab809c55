//! Tests of the bucket planner: the policies' grids and parsing, caps and coarsening (checked
//! against brute force), waste statistics, histogram plans and the total cap.

use super::coarsen::{choose, LexiCost, Ratio};
use super::weights::{padding, Weights};
use super::*;
use proptest::prelude::*;

fn uniform_plan(lo: i64, hi: i64, policy: &str, n: usize) -> SymbolPlan {
    plan_symbol(&SymbolRange::new("s", lo, Some(hi)), &policy.parse().unwrap(), n).unwrap()
}

#[test]
fn auto_on_1_to_2048() {
    let p = uniform_plan(1, 2048, "auto", DEFAULT_MAX_BUCKETS);
    assert_eq!(p.buckets, [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048]);
    assert_eq!((p.small_buckets, p.large_buckets), (7, 8));
    assert!(p.waste.worst_above_256.unwrap() <= 1.0 / 3.0);
    assert!(p.waste.tokens <= 0.15, "{:?}", p.waste);
}

#[test]
fn auto_clips_to_the_range() {
    assert_eq!(auto_buckets(2, 64), [2, 4, 8, 16, 32, 64]);
    assert_eq!(auto_buckets(100, 1000), [128, 256, 384, 512, 768, 1000]);
    assert_eq!(auto_buckets(1, 1), [1]);
    assert_eq!(auto_buckets(5, 5), [5]);
    assert_eq!(auto_buckets(1, 6144), [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144]);
}

#[test]
fn auto_coarsens_large_buckets_to_the_cap() {
    // 1..4096: 10 buckets of 128 and above on the grid; two go.
    let p = uniform_plan(1, 4096, "auto", 8);
    assert_eq!(p.large_buckets, 8);
    assert_eq!(p.small_buckets, 7);
    assert_eq!(p.proposed, 17);
    assert_eq!(*p.buckets.last().unwrap(), 4096);
    // Just past a grid point: the nearly empty last gap merges.
    let p = uniform_plan(1, 2100, "auto", 8);
    assert_eq!(&p.buckets[7..], [128, 256, 384, 512, 768, 1024, 1536, 2100]);
}

#[test]
fn linear_and_lists() {
    let p = uniform_plan(1, 2048, "linear:128", 16);
    assert_eq!(p.buckets, (1..=16).map(|i| i * 128).collect::<Vec<_>>());
    assert!(p.waste.tokens < 0.06, "{:?}", p.waste);
    assert_eq!(linear_buckets("s", 100, 1, 250).unwrap(), [100, 200, 250]);
    assert_eq!(linear_buckets("s", 100, 150, 200).unwrap(), [200]);
    let p = uniform_plan(1, 2048, "linear:128", 8);
    assert_eq!((p.buckets.len(), p.proposed), (8, 16));
    let p = uniform_plan(1, 300, "512,128,256,128", 8);
    assert_eq!(p.buckets, [128, 256, 300]);
    let e = plan_symbol(&SymbolRange::new("seq", 1, Some(2048)), &"128,256,512".parse().unwrap(), 8).unwrap_err();
    assert_eq!(e.to_string(), "the bucket list 128,256,512 does not cover the maximum 2048 of symbol seq: add 2048 (or a larger size)");
    let e = plan_symbol(&SymbolRange::new("seq", 1, Some(1 << 20)), &BucketPolicy::Linear(1), 8).unwrap_err();
    assert!(matches!(e, BucketError::TooManyCandidates { .. }), "{e}");
}

#[test]
fn policies_parse_and_print() {
    for (text, want) in [
        ("auto", BucketPolicy::Auto),
        ("linear:128", BucketPolicy::Linear(128)),
        ("512, 128,256,128", BucketPolicy::List(vec![128, 256, 512])),
        ("hist:sizes.json", BucketPolicy::Hist { path: "sizes.json".into(), n: None }),
        ("hist:C:/x.json:4", BucketPolicy::Hist { path: "C:/x.json".into(), n: Some(4) }),
    ] {
        assert_eq!(text.parse::<BucketPolicy>().unwrap(), want, "{text}");
        assert_eq!(want.to_string().parse::<BucketPolicy>().unwrap(), want);
    }
    for bad in ["", "pow2", "linear:", "linear:0", "linear:-4", "128,abc", "0,128", "hist:", "hist:f:0"] {
        let e = bad.parse::<BucketPolicy>().unwrap_err();
        assert!(e.to_string().starts_with(&format!("bad bucket policy `{bad}`")), "{e}");
    }
}

#[test]
fn unbounded_and_bad_ranges() {
    let e = plan_symbol(&SymbolRange::new("s0", 2, None), &BucketPolicy::Auto, 8).unwrap_err();
    let msg = e.to_string();
    for part in ["s0 has no upper bound", "torch.export.Dim(\"s0\", max=", "mark_dynamic(t, dim, min=2, max=", "--max-size s0="] {
        assert!(msg.contains(part), "{msg}");
    }
    assert!(plan_symbol(&SymbolRange::new("s", 10, Some(5)), &BucketPolicy::Auto, 8).is_err());
    assert!(plan_symbol(&SymbolRange::new("s", -1, Some(5)), &BucketPolicy::Auto, 8).is_err());
    assert!(plan_symbol(&SymbolRange::new("s", 0, Some(0)), &BucketPolicy::Auto, 8).is_err());
    assert!(plan_symbol(&SymbolRange::new("s", 1, Some(5)), &BucketPolicy::Auto, 0).is_err());
    // Size 0 is served by the first bucket.
    let p = uniform_plan(0, 4, "auto", 8);
    assert_eq!(p.buckets, [1, 2, 4]);
    assert_eq!(p.select(0).unwrap(), 1);
}

#[test]
fn select_checks_the_range() {
    let p = uniform_plan(2, 2048, "auto", 8);
    assert_eq!(p.select(2).unwrap(), 2);
    assert_eq!(p.select(129).unwrap(), 256);
    assert_eq!(p.select(2048).unwrap(), 2048);
    assert_eq!(p.select(2049).unwrap_err().to_string(), "size 2049 of symbol s is outside its range 2..2048");
    assert!(p.select(1).is_err());
}

#[test]
fn waste_matches_hand_counts() {
    // Buckets 2, 4 over 1..4: paddings 1, 0, 1, 0 over buckets 2, 2, 4, 4.
    let w = Waste::uniform(&[2, 4], 1);
    assert_eq!(w.worst, 0.5);
    assert_eq!(w.mean, (0.5 + 0.25) / 4.0);
    assert_eq!(w.tokens, 2.0 / 12.0);
    assert_eq!(w.worst_above_256, None);
    let w = Waste::uniform(&[300, 512], 1);
    assert_eq!(w.worst_above_256, Some((512.0 - 301.0) / 512.0));
    let h = Histogram::new([(3, 2), (4, 1)]).unwrap();
    let w = Waste::histogram(&[4], &h);
    assert_eq!(w.tokens, 2.0 / 12.0);
    assert_eq!(w.mean, 0.5 / 3.0);
}

#[test]
fn histogram_policy() {
    let h = Histogram::from_json(r#"{"100": 50, "120": 5, "500": 40, "1000": 1, "7": 0}"#).unwrap();
    let r = SymbolRange::new("len", 1, Some(2048));
    let p = plan_symbol_hist(&r, &h, Caps::for_max_buckets(2), "hist:h.json").unwrap();
    // Two buckets of 128 and above: 2048 is forced, 500 serves the big mass; small: both.
    assert_eq!(p.buckets, [100, 120, 500, 2048]);
    let p = plan_symbol_hist(&r, &h, Caps::for_max_buckets(1), "h").unwrap();
    assert_eq!(p.buckets, [120, 2048]);
    assert!(p.hist_waste.is_some());
    // hist:FILE:N counts every bucket.
    let p = plan_symbol_hist(&r, &h, Caps::Total(3), "h").unwrap();
    assert_eq!(p.buckets, [120, 500, 2048]);
    let p = plan_symbol_hist(&r, &h, Caps::Total(10), "h").unwrap();
    assert_eq!(p.buckets, [100, 120, 500, 1000, 2048]);
    let e = plan_symbol_hist(&SymbolRange::new("len", 1, Some(600)), &h, Caps::Total(4), "h.json").unwrap_err();
    assert!(e.to_string().contains("size 1000 is outside the range 1..600 of symbol len"), "{e}");
    assert!(Histogram::from_json("[1]").is_err());
    assert!(Histogram::from_json(r#"{"x": 1}"#).is_err());
    assert!(Histogram::from_json(r#"{"3": -1}"#).is_err());
    assert!(Histogram::from_json(r#"{"3": 0}"#).is_err());
}

#[test]
fn total_cap_coarsens_the_cheapest_symbol() {
    let syms = [
        (SymbolRange::new("seq", 1, Some(2048)), BucketPolicy::Auto),
        (SymbolRange::new("batch", 1, Some(64)), BucketPolicy::Auto),
    ];
    let p = plan(&syms, 8, 32).unwrap();
    // 15 × 7 = 105; dropping one at a time reaches 7 × 4 = 28, then seq gets one back.
    assert_eq!(p.combinations, 32);
    assert_eq!(p.symbols[0].buckets, [128, 256, 384, 512, 768, 1024, 1536, 2048]);
    assert_eq!(p.symbols[1].buckets, [8, 16, 32, 64]);
    assert_eq!(p.combinations, p.symbols.iter().map(|s| s.buckets.len() as u64).product::<u64>());
    assert_eq!(p.notes.len(), 1, "{:?}", p.notes);
    for s in &p.symbols {
        assert_eq!(*s.buckets.last().unwrap(), s.max);
    }
    let one = plan(&syms, 8, 1).unwrap();
    assert_eq!(one.symbols[0].buckets, [2048]);
    assert_eq!(one.symbols[1].buckets, [64]);
    assert!(plan(&syms, 8, 0).is_err());
    let none = plan(&[], 8, 32).unwrap();
    assert_eq!(none.combinations, 1);
}

/// Every subset of `cands` that keeps the last and fits `caps`.
fn subsets(cands: &[i64], caps: Caps) -> Vec<Vec<i64>> {
    let m = cands.len();
    (0u32..1 << (m - 1))
        .map(|mask| {
            let mut v: Vec<i64> = (0..m - 1).filter(|i| mask & (1 << i) != 0).map(|i| cands[i]).collect();
            v.push(cands[m - 1]);
            v
        })
        .filter(|v| caps.allows(v))
        .collect()
}

/// The plan's [`LexiCost`] under uniform sizes, computed directly.
fn lexi(b: &[i64], lo: i64) -> LexiCost {
    let mut prev = lo - 1;
    let mut ratios: Vec<Ratio> = b
        .iter()
        .map(|&x| {
            let r = Ratio::gap(prev, x);
            prev = x;
            r
        })
        .collect();
    ratios.sort_by(|a, b| b.cmp(a));
    LexiCost { ratios, padding: padding(b, lo, Weights::Uniform { lo }) }
}

fn range_and_grid() -> impl Strategy<Value = (i64, i64, Vec<i64>)> {
    (0i64..300, 1i64..700).prop_flat_map(|(lo, span)| {
        let hi = (lo + span).max(1);
        (Just(lo), Just(hi), proptest::collection::vec(lo.max(1)..=hi, 0..10))
    })
    .prop_map(|(lo, hi, mut v)| {
        v.retain(|&x| x < hi);
        v.sort_unstable();
        v.dedup();
        v.push(hi);
        (lo, hi, v)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn plans_cover_their_range(lo in 0i64..3000, span in 0i64..5000, policy in 0usize..4, k in 1i64..400, n in 1usize..10) {
        let hi = (lo + span).max(1);
        let policy = match policy {
            0 => BucketPolicy::Auto,
            1 => BucketPolicy::Linear(k.max(hi / 100 + 1)),
            2 => {
                let mut l = vec![k, k * 3, hi];
                l.sort_unstable();
                l.dedup();
                BucketPolicy::List(l)
            }
            _ => BucketPolicy::List(vec![hi + k]),
        };
        let p = plan_symbol(&SymbolRange::new("s", lo, Some(hi)), &policy, n).unwrap();
        let b = &p.buckets;
        prop_assert!(b.windows(2).all(|w| w[0] < w[1]), "{b:?}");
        prop_assert_eq!(*b.last().unwrap(), hi);
        prop_assert!(b[0] >= lo.max(1));
        prop_assert!(Caps::for_max_buckets(n).allows(b), "{b:?}");
        prop_assert!(b.len() <= n + n.min(MAX_SMALL_BUCKETS));
        let mut last = 0;
        for size in lo..=hi.min(lo + 3000) {
            let got = p.select(size).unwrap();
            prop_assert!(got >= size && b.binary_search(&got).is_ok());
            prop_assert!(got >= last, "select is monotone");
            last = got;
        }
        prop_assert!(p.select(hi + 1).is_err());
        prop_assert!(lo == 0 || p.select(lo - 1).is_err());
        let w = &p.waste;
        prop_assert!((0.0..1.0).contains(&w.tokens) && w.mean <= w.worst + 1e-12 && w.worst <= 1.0);
    }

    #[test]
    fn coarsening_is_optimal(grid in range_and_grid(), small in 1usize..4, large in 1usize..4, total in proptest::bool::ANY) {
        let (lo, _hi, cands) = grid;
        let caps = if total { Caps::Total(large) } else { Caps::Split { small, large } };
        let w = Weights::Uniform { lo };
        let got = choose(&cands, lo, w, caps, true);
        prop_assert!(caps.allows(&got));
        let best = subsets(&cands, caps).iter().map(|s| lexi(s, lo)).min().unwrap();
        let got = lexi(&got, lo);
        prop_assert_eq!(got.ratios.first(), best.ratios.first(), "the smallest worst case");
        prop_assert!(got == best, "{got:?} vs {best:?}");
    }

    #[test]
    fn histogram_dp_is_optimal(
        lo in 1i64..50,
        sizes in proptest::collection::btree_map(1i64..400, 1u64..1000, 1..11),
        extra in 0i64..100,
        n in 1usize..5,
        total in proptest::bool::ANY,
    ) {
        let sizes: Vec<(i64, u64)> = sizes.into_iter().map(|(s, c)| (s + lo, c)).collect();
        let hi = sizes.last().unwrap().0 + extra;
        let h = Histogram::new(sizes.iter().copied()).unwrap();
        let caps = if total { Caps::Total(n) } else { Caps::for_max_buckets(n) };
        let p = plan_symbol_hist(&SymbolRange::new("s", lo, Some(hi)), &h, caps, "h").unwrap();
        prop_assert!(caps.allows(&p.buckets));
        let mut cands: Vec<i64> = sizes.iter().map(|&(s, _)| s).filter(|&s| s < hi).collect();
        cands.push(hi);
        let best = subsets(&cands, caps).iter().map(|s| padding(s, lo, Weights::Hist(&h))).min().unwrap();
        prop_assert_eq!(p.expected_padding(), best);
    }

    #[test]
    fn total_cap_holds(his in proptest::collection::vec(1i64..3000, 1..4), cap in 1u64..40) {
        let syms: Vec<_> = his.iter().enumerate().map(|(i, &h)| (SymbolRange::new(format!("s{i}"), 1, Some(h)), BucketPolicy::Auto)).collect();
        let p = plan(&syms, 8, cap).unwrap();
        prop_assert!(p.combinations <= cap);
        for s in &p.symbols {
            prop_assert_eq!(*s.buckets.last().unwrap(), s.max);
            prop_assert!(s.buckets.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
