#!/usr/bin/env python3
"""The model corpus: every transformers AutoModel type and one model per timm module, small,
through tpuc's three paths (the CLI, torch.compile inference, three training steps), each
compared with eager. See scripts/corpus/README.md.

  scripts/corpus/run.py                      the whole corpus (resumes: families already in
                                             --results are skipped; --redo runs them again)
  scripts/corpus/run.py --sample             the fixed CI sample (sample.txt); fails when a
                                             path recorded ok in expected_sample.json is not
  scripts/corpus/run.py --only hf:gpt2,timm:resnet
  scripts/corpus/run.py --doc docs/coverage.md   also write the coverage page from --results

Each family runs in a process of its own (check.py), --jobs at a time, each with --timeout.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
PATHS = ("cli", "infer", "train")
COUNTED = ("ok", "mismatch", "refused", "error", "crash", "timeout")


def commit() -> str:
    """The checkout's commit, recorded with each result (results of older code stay visible)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def run_family(family: str, paths: str, timeout: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error",
               HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
    t0 = time.perf_counter()
    got: dict[str, dict] = {}

    def read(stdout) -> None:
        if isinstance(stdout, bytes):
            stdout = stdout.decode(errors="replace")
        for line in (stdout or "").splitlines():
            if line.startswith("CORPUS "):
                r = json.loads(line[7:])
                got[r.pop("path")] = r

    try:
        p = subprocess.run([sys.executable, os.path.join(HERE, "check.py"), family, "--paths", paths],
                           capture_output=True, text=True, timeout=timeout, env=env)
        read(p.stdout)
        tail = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        for path in paths.split(","):
            if path not in got:
                got[path] = {"status": "crash", "detail": f"exit {p.returncode}: {tail}"[:500]}
    except subprocess.TimeoutExpired as e:
        # The paths that finished before the time ran out keep their results (check.py
        # flushes each as it comes); only the path that was running, and those after it, time out.
        read(e.stdout)
        for path in paths.split(","):
            got.setdefault(path, {"status": "timeout", "detail": f"over {timeout} s"})
    return {"family": family, "wall_s": round(time.perf_counter() - t0, 1), "paths": got}


def wall_estimate(rs: dict[str, dict]) -> str:
    """The run's wall time from its records: a run of the whole corpus is resumed across sittings,
    so its time is the families' own times over the jobs that ran them side by side."""
    own = sum(r.get("wall_s", 0.0) for r in rs.values())
    jobs = max((r.get("jobs", 1) for r in rs.values()), default=1)
    return (f"the families' own times add up to {own / 60:.0f} min, {own / 60 / jobs:.0f} min of wall time at "
            f"{jobs} at a time on this machine")


def load(results: str) -> dict[str, dict]:
    out = {}
    if os.path.exists(results):
        for line in open(results):
            if line.strip():
                r = json.loads(line)
                out[r["family"]] = r
    return out


def summary(rs: dict[str, dict]) -> list[tuple]:
    rows = []
    for path in PATHS:
        c = collections.Counter(r["paths"][path]["status"] for r in rs.values() if path in r["paths"])
        counted = sum(c[s] for s in COUNTED)
        rate = 100.0 * c["ok"] / counted if counted else 0.0
        rows.append((path, counted, c["ok"], c["mismatch"], c["refused"], c["error"], c["crash"], c["timeout"],
                     c["torch"], rate))
    return rows


def print_summary(rs: dict[str, dict]) -> None:
    print(f"\n{len(rs)} families")
    print(f"{'path':6} {'counted':>7} {'ok':>5} {'mismatch':>8} {'refused':>7} {'error':>5} {'crash':>5} "
          f"{'timeout':>7} {'torch':>5} {'pass':>7}")
    for row in summary(rs):
        print(f"{row[0]:6} {row[1]:7} {row[2]:5} {row[3]:8} {row[4]:7} {row[5]:5} {row[6]:5} {row[7]:7} "
              f"{row[8]:5} {row[9]:6.1f}%")


def causes(rs: dict[str, dict]) -> dict[tuple, list[str]]:
    """Failures grouped by (status, cause): a refused op, or the first words of the error."""
    groups: dict[tuple, list[str]] = collections.defaultdict(list)
    for fam, r in sorted(rs.items()):
        for path, p in r["paths"].items():
            if p["status"] == "ok":
                continue
            cause = p.get("detail") or ""
            if p["status"] == "mismatch":
                cause = "numerics"
            elif p["status"] in ("error", "crash", "torch"):
                cause = cause.split(" | ")[0][:120]
            groups[(p["status"], cause)].append(f"{fam} ({path})" if p["status"] != "mismatch"
                                                else f"{fam} ({path}, {p.get('error', 0):.2g})")
    return groups


def write_doc(rs: dict[str, dict], doc: str, wall: float | None, note: str = "") -> None:
    import models

    total = len(models.families())
    lines = [
        "# Model coverage",
        "",
        "Generated by `scripts/corpus/run.py --doc docs/coverage.md` (do not edit): every model type of",
        "transformers' AutoModel mapping and one model per timm module, each from its default config shrunk",
        "by `scripts/corpus/models.py` (widths 32, two layers, four heads, small vocabulary and images, no",
        "dropout; where that config does not run eagerly, the same rules through the config's constructor and",
        "every input kind the forward takes), random weights, compared with eager on three paths: the CLI on",
        "the core-ATen export",
        "(`cli`), `torch.compile(backend=\"tpuc\")` strict inference (`infer`), and three AdamW steps through",
        "`torch.compile` (`train`). `torch` counts the failures before tpuc (eager, export, or inputs the",
        "harness cannot make): listed, not counted. A difference beyond the fixed tolerance passes when tpuc",
        "is no further from a float64 run than twice eager float32's own distance from it, the largest of",
        "eager as it is and with its weights moved by one ulp (eight draws); without a float64 run, when tpuc",
        "is no further from eager than twice what those one-ulp moves change in eager. A model whose traced",
        "program differs from eager when torch runs it (and tpuc equals that) counts as `torch`.",
        "",
        *([note, ""] if note else []),
        f"{len(rs)} of the corpus's {total} families" + (f"; the run took {wall / 60:.0f} min on this machine."
                                                          if wall else f"; {wall_estimate(rs)}."),
        "",
        "| path | counted | ok | mismatch | refused | error | crash | timeout | torch | pass |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summary(rs):
        lines.append("| " + " | ".join(str(x) for x in row[:9]) + f" | {row[9]:.1f} % |")
    lines += ["", "## Failures by cause", "", "| status | cause | families |", "|---|---|---|"]
    for (status, cause), fams in sorted(causes(rs).items(), key=lambda kv: (kv[0][0] == "torch", -len(kv[1]))):
        lines.append(f"| {status} | {cause.replace('|', '/')} | {', '.join(fams)} |")
    os.makedirs(os.path.dirname(os.path.abspath(doc)), exist_ok=True)
    with open(doc, "w") as f:
        f.write("\n".join(lines) + "\n")


def check_sample(rs: dict[str, dict], expected: str) -> int:
    """1 when a path recorded ok in `expected` is not ok now."""
    want = json.load(open(expected))
    bad = [(fam, path, rs[fam]["paths"][path]) for fam, paths in want.items() for path, st in paths.items()
           if st == "ok" and fam in rs and rs[fam]["paths"].get(path, {}).get("status") != "ok"]
    for fam, path, r in bad:
        print(f"REGRESSION {fam} {path}: {r['status']}: {r.get('detail', '')} {r.get('error') or ''}")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated families (hf:<type>, timm:<module>)")
    ap.add_argument("--sample", action="store_true", help="the CI sample (sample.txt), checked against expected_sample.json")
    ap.add_argument("--record", action="store_true", help="with --sample: write expected_sample.json from this run")
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--timeout", type=int, default=600, help="seconds per family")
    ap.add_argument("--results", default=os.path.join(ROOT, "docs", "coverage-results.jsonl"),
                    help="the record, one line a family (kept in the tree: a run of the whole corpus spans "
                         "several sittings and resumes from it)")
    ap.add_argument("--redo", action="store_true", help="run families already in --results again")
    ap.add_argument("--doc", help="write the coverage page (docs/coverage.md) from --results")
    ap.add_argument("--note", default="", help="with --doc: a paragraph to add under the header")
    ap.add_argument("--list", action="store_true", help="print the families and stop")
    a = ap.parse_args()

    import models

    if a.sample:
        fams = [ln.split("#")[0].strip() for ln in open(os.path.join(HERE, "sample.txt"))]
        fams = [f for f in fams if f]
        if a.results == ap.get_default("results"):
            a.results = os.path.join(ROOT, "target", "corpus", "sample.jsonl")
            a.redo = True
    elif a.only:
        fams = a.only.split(",")
    else:
        fams = models.families()
    if a.list:
        print("\n".join(fams))
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(a.results)), exist_ok=True)
    done = {} if a.redo else load(a.results)
    if a.redo and os.path.exists(a.results):
        keep = {k: v for k, v in load(a.results).items() if k not in fams}
        with open(a.results, "w") as f:
            for r in keep.values():
                f.write(json.dumps(r) + "\n")
    todo = [f for f in fams if f not in done]
    if not (a.only or a.sample):
        # A whole-corpus run spans sittings: in a fixed shuffled order, the part done so far is
        # a fair sample of the whole rather than its first letters.
        random.Random(0).shuffle(todo)
    print(f"{len(fams)} families, {len(todo)} to run, {a.jobs} at a time", flush=True)
    t0 = time.perf_counter()
    head = commit()
    with cf.ThreadPoolExecutor(a.jobs) as pool, open(a.results, "a") as out:
        futures = {pool.submit(run_family, f, a.paths, a.timeout): f for f in todo}
        for i, fut in enumerate(cf.as_completed(futures), 1):
            r = fut.result()
            r.update(commit=head, jobs=a.jobs)
            out.write(json.dumps(r) + "\n")
            out.flush()
            marks = " ".join(f"{p}={r['paths'][p]['status']}" for p in a.paths.split(",") if p in r["paths"])
            print(f"[{i}/{len(todo)}] {r['family']:32} {marks}  ({r['wall_s']} s)", flush=True)
    wall = time.perf_counter() - t0
    rs = {k: v for k, v in load(a.results).items() if k in set(fams)}
    print_summary(rs)
    print(f"wall time {wall:.0f} s")
    if a.doc:
        write_doc(load(a.results), a.doc, wall if len(todo) == len(fams) else None, a.note)
    if a.sample:
        expected = os.path.join(HERE, "expected_sample.json")
        if a.record:
            with open(expected, "w") as f:
                json.dump({k: {p: v["paths"][p]["status"] for p in sorted(v["paths"])} for k, v in sorted(rs.items())},
                          f, indent=1, sort_keys=True)
                f.write("\n")
            return 0
        return check_sample(rs, expected)
    return 0


if __name__ == "__main__":
    sys.exit(main())
