# -*- Python -*-
# lit configuration for tpuc's command-line tests.
#
# Run:  .venv/bin/lit -v tests/lit          (scripts/test.sh does this)
#
# Substitutions:
#   %tpuc              the tpuc binary: $TPUC_BIN, else
#                      ${CARGO_TARGET_DIR:-<repo>/target}/debug/tpuc
#   %fixtures          <repo>/tests/fixtures
#   %python            the project Python (<repo>/.venv/bin/python, or $TPUC_PYTHON)
#   %verify-stablehlo  <repo>/.venv/bin/python <repo>/tests/verify_stablehlo.py
#                      (python: $TPUC_PYTHON if set)
#   FileCheck, split-file, `| not`, `| count`: LLVM test tools, from
#                      $LLVM_TOOLS_DIR, /usr/lib/llvm-14/bin, other
#                      /usr/lib/llvm-*/bin, or PATH (versioned names such as
#                      FileCheck-14 too). Their directory is also put first on
#                      PATH, so `not` and `count` at the start of a command work.
#   %repo              the repository root
# Features: `tpuc` when the tpuc binary exists (use `REQUIRES: tpuc` only for
# tests that may run before the binary is built; CLI tests should not, so a
# missing binary fails them loudly).

import glob
import os
import re
import shutil

import lit.formats

config.name = "tpuc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".test", ".mlir", ".tpuc"]
config.excludes = ["Inputs", "Output", "lit.cfg.py", "README.md", "exit_code.py"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
# Output/ directories live next to the tests (ignored by .gitignore).
config.test_exec_root = config.test_source_root

repo = os.path.dirname(os.path.dirname(config.test_source_root))

# ---------------------------------------------------------------- tpuc binary
target_dir = os.environ.get("CARGO_TARGET_DIR") or os.path.join(repo, "target")
if not os.path.isabs(target_dir):
    target_dir = os.path.join(repo, target_dir)
tpuc = os.environ.get("TPUC_BIN") or os.path.join(target_dir, "debug", "tpuc")
tpuc = os.path.abspath(tpuc)
if os.path.isfile(tpuc) and os.access(tpuc, os.X_OK):
    config.available_features.add("tpuc")
else:
    lit_config.note("tpuc binary not found at %s (build it, or set TPUC_BIN)" % tpuc)

# ------------------------------------------------------------------- verifier
python = os.environ.get("TPUC_PYTHON") or os.path.join(repo, ".venv", "bin", "python")
if not os.path.exists(python):
    lit_config.note("%s missing: run scripts/setup.sh" % python)
verify = "%s %s" % (python, os.path.join(repo, "tests", "verify_stablehlo.py"))

# ----------------------------------------------------------- LLVM test tools
LLVM_TOOLS = ["FileCheck", "not", "count", "split-file"]


def find_tool(name):
    dirs = []
    if os.environ.get("LLVM_TOOLS_DIR"):
        dirs.append(os.environ["LLVM_TOOLS_DIR"])
    dirs.append("/usr/lib/llvm-14/bin")

    def llvm_version(path):
        m = re.search(r"llvm-(\d+)", path)
        return int(m.group(1)) if m else 0

    dirs += sorted(glob.glob("/usr/lib/llvm-*/bin"), key=llvm_version, reverse=True)
    for d in dirs:
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return os.path.realpath(p)
    p = shutil.which(name)
    if p:
        return os.path.realpath(p)
    for v in range(30, 9, -1):
        p = shutil.which("%s-%d" % (name, v))
        if p:
            return os.path.realpath(p)
    return None


tools = {}
for name in LLVM_TOOLS:
    path = find_tool(name)
    if path is None:
        lit_config.fatal(
            "LLVM test tool '%s' not found (Debian: apt-get install llvm-14-tools; "
            "or set LLVM_TOOLS_DIR). scripts/setup.sh installs it." % name
        )
    tools[name] = path

# Put the tools' directories first on PATH (realpath: the llvm-14/bin dir, so
# plain `not` / `count` resolve there too).
path_dirs = []
for p in tools.values():
    d = os.path.dirname(p)
    if d not in path_dirs:
        path_dirs.append(d)
config.environment["PATH"] = os.pathsep.join(
    path_dirs + [os.environ.get("PATH", "/usr/bin:/bin")]
)

# Keep the tests hermetic but let the knobs the suite itself uses through.
for var in ("TPUC_BIN", "TPUC_PYTHON", "CARGO_TARGET_DIR", "RUST_BACKTRACE", "HOME", "TMPDIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

# Each test states the cache it uses: the persistent tier on by default would let one test's
# compile turn another's expected miss into a hit. A test of that tier sets TPUC_CACHE_DISK=1
# and its own XDG_CACHE_HOME.
config.environment["TPUC_CACHE_DISK"] = "0"

# Substitutions are regexes, applied in order before lit's own (%s, %t, ...),
# so %tpuc is never read as %t + "puc".
config.substitutions.append(("%verify-stablehlo", verify))
config.substitutions.append(("%fixtures", os.path.join(repo, "tests", "fixtures")))
config.substitutions.append(("%tpuc", tpuc))
config.substitutions.append(("%repo", repo))
config.substitutions.append(("%python", python))
config.substitutions.append(("%exit-code", "%s %s" % (python, os.path.join(config.test_source_root, "exit_code.py"))))
# Tool names: only as whole words not preceded by . - / or %, as LLVM does.
for name in ("FileCheck", "split-file"):
    config.substitutions.append(
        (r"(?<![-./%\w])" + re.escape(name) + r"(?![-.\w])", tools[name])
    )
config.substitutions.append((r"\| \s*not\b(?![-.])", "| " + tools["not"]))
config.substitutions.append((r"\| \s*count\b(?![-.])", "| " + tools["count"]))
