#!/usr/bin/env python3
"""exit_code.py N CMD ARGS...: run CMD and fail unless it exits with status N.

lit's internal shell has no `$?`; this checks exact exit codes (0 ok, 1 user error, 2
internal error) that `not` cannot tell apart. The command's output passes through.
"""
import subprocess
import sys

want = int(sys.argv[1])
rc = subprocess.call(sys.argv[2:])
if rc != want:
    sys.exit("expected exit status %d, got %d: %s" % (want, rc, " ".join(sys.argv[2:])))
