#!/usr/bin/env python3
"""The README's table of bucket policies: `tpuc plan-buckets --json` for sequence lengths
1..2048 (uniform) under each policy, printed as a Markdown table.

Usage: bucket_table.py [--tpuc target/debug/tpuc] [--range 1..2048]
"""

import argparse
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def plan(tpuc, rng, policy, extra):
    cmd = [tpuc, "plan-buckets", "--range", "s=" + rng, "--buckets", policy, "--json", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    return json.loads(r.stdout)["symbols"][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tpuc", default=os.environ.get("TPUC_BIN", os.path.join(ROOT, "target", "debug", "tpuc")))
    ap.add_argument("--range", default="1..2048")
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.range.split(".."))
    powers = ",".join(str(1 << k) for k in range(hi.bit_length()) if lo <= (1 << k) < hi) + "," + str(hi)
    rows = [
        ("auto", "auto", []),
        ("linear:128, --max-buckets 16", "linear:128", ["--max-buckets", "16"]),
        ("linear:128 (default cap 8: coarsened)", "linear:128", []),
        ("powers of two (list)", powers, []),
    ]
    pct = lambda x: "-" if x is None else "%.1f %%" % (100 * x)
    print("| policy, lengths %s | buckets (>= 128) | worst | worst above 256 | mean | padded elements |" % args.range)
    print("|---|---|---|---|---|---|")
    for label, policy, extra in rows:
        s = plan(args.tpuc, args.range, policy, extra)
        w = s["waste"]
        print("| %s | %d (%d) | %s | %s | %s | %s |" % (
            label, len(s["buckets"]), s["large_buckets"], pct(w["worst"]), pct(w["worst_above_256"]),
            pct(w["mean"]), pct(w["tokens"])))


if __name__ == "__main__":
    main()
