"""The OpInfo records (tests/opinfo/expected_<dtype>.json) and the table made from them
(docs/opinfo.md): entries that do not pass are reported as known when they are recorded so, and
the table is the one the records give. No OpInfo entry is run here (scripts/test.sh runs the suite)."""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "opinfo"))

import run as opinfo  # noqa: E402


def recorded(dtype: str) -> dict:
    return json.load(open(opinfo.expected_path(dtype)))


def as_results(rec: dict) -> dict[str, dict]:
    return {n: {"entry": n, "status": st, "message": why} for n, (st, why) in rec["entries"].items()}


def test_the_table_is_the_one_the_records_give():
    assert open(opinfo.DOC).read() == opinfo.render_doc(), "run tests/opinfo/run.py --update (or write_doc())"


def test_the_table_names_the_known_failures_of_each_dtype():
    doc = opinfo.render_doc()
    rec = recorded("float16")
    known = opinfo.known_failures(rec)
    assert rec["summary"]["wrong"] == len(known["wrong"]) and rec["summary"]["error"] == len(known["error"])
    # The summary row has the pass rate; the row of known failures follows.
    row = next(line for line in doc.splitlines() if line.startswith("| float16 |") and "%" not in line)
    for name in known["wrong"] + known["error"]:
        assert name in row, (name, row)
    assert "is known: it is recorded with that" in doc


def test_a_check_equal_to_the_record_says_its_failures_are_known(capsys):
    rec = recorded("float16")
    assert opinfo.check("float16", as_results(rec)) == 0
    out = capsys.readouterr().out
    c = rec["summary"]
    assert f"known: {c['wrong']} wrong, {c['refused']} refused, {c['error']} error, recorded as not passing in " \
           "expected_float16.json" in out, out
    assert "not recorded" not in out and out.rstrip().endswith("no regressions"), out


def test_a_failure_that_is_not_recorded_is_named(capsys):
    rec = recorded("float16")
    results = as_results(rec)
    results["new.entry"] = {"entry": "new.entry", "status": "error", "message": "boom"}
    opinfo.check("float16", results)
    out = capsys.readouterr().out
    assert "not passing and not recorded (1; record with --update): new.entry (error)" in out, out
