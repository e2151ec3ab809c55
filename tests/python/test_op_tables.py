"""The front end's tables generated from torch's op schemas are what the installed torch gives:
`frontend-fx/tests/data/op_schemas.tsv` (the robustness sweep's schemas) and
`frontend-fx/src/ops/build/defaults.tsv` (the defaults an omitted argument reads as). A table
edited by hand, or left stale after a lowering is registered, fails here."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "frontend-fx", "tests", "data")


@pytest.mark.parametrize(
    "flags, table",
    [([], os.path.join(DATA, "op_schemas.tsv")), (["--defaults"], os.path.join(ROOT, "frontend-fx", "src", "ops", "build", "defaults.tsv"))],
    ids=["op_schemas", "defaults"],
)
def test_generated_table_is_current(flags, table):
    out = subprocess.run(
        [sys.executable, os.path.join(DATA, "make_op_schemas.py"), *flags], capture_output=True, text=True, check=True
    ).stdout
    with open(table) as f:
        have = f.read()
    assert out.strip() == have.strip(), f"{table} is stale: rerun make_op_schemas.py {' '.join(flags)}"
    # defaults: one default that is not None per line; torch's own values
    if flags:
        rows = {tuple(line.split("\t")[:2]): line.split("\t")[2:] for line in have.splitlines()}
        assert rows[("layer_norm.default", "eps")] == ["float", "1e-05"]
        assert rows[("randint.default", "dtype")] == ["dtype", "5"]  # torch.long as the export schema numbers it
        assert ("sum.dim_IntList", "dtype") not in rows  # a None default is not in the table
