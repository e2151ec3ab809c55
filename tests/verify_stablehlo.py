#!/usr/bin/env python3
"""Verify StableHLO MLIR files with the real StableHLO parser and verifier.

Uses the MLIR Python bindings that ship inside jaxlib (pinned in
requirements-dev.txt; see tests/STABLEHLO_NOTES.md). The builtin, func, arith,
... dialects plus StableHLO, CHLO and (if present) Shardy are registered;
unknown dialects are rejected. Parsing already runs the verifier; we run
`module.operation.verify()` again explicitly.

Usage:
  verify_stablehlo.py [options] FILE...     ("-" reads stdin)
  verify_stablehlo.py --self-test

Prints "ok FILE" per file that verifies. On failure prints
"FILE:LINE:COL: error: ..." (plus notes) to stderr and exits 1.
Exit status 2 means bad usage, an unreadable file or missing jaxlib.

Options:
  --split-input-file  treat "// -----" lines as separators between modules
                      (as mlir-opt does); line numbers stay file-relative
  --print             print the canonical (pretty) form of each module to
                      stdout instead of "ok FILE" (which then goes to stderr)
  --generic           with --print: print the generic operation form
  --debug-info        with --print: keep loc(...) locations
  --portable          also check that the module serializes to a StableHLO
                      portable artifact (VHLO); CHLO ops are legalized to
                      StableHLO first, as an exporter would have to
  --target-version V  portable artifact version for --portable: "1.10.0", or
                      current, week4, week12 (the default) or min (oldest
                      supported)
  --self-test         verify the built-in examples (good ones must pass, bad
                      ones must fail) and every ```mlir block in
                      tests/STABLEHLO_NOTES.md, then exercise the CLI
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
NOTES = os.path.join(HERE, "STABLEHLO_NOTES.md")
SPLIT_MARKER = re.compile(r"^// -----\s*$", re.MULTILINE)
BYTECODE_MAGIC = b"ML\xefR"

# --------------------------------------------------------------------------
# MLIR context
# --------------------------------------------------------------------------


class Mlir:
    """Lazily imported jaxlib MLIR modules plus one configured Context."""

    def __init__(self):
        try:
            from jaxlib.mlir import ir, passmanager
            from jaxlib.mlir.dialects import stablehlo
        except ImportError as e:  # pragma: no cover - environment problem
            sys.stderr.write(
                "verify_stablehlo.py: cannot import jaxlib's MLIR bindings (%s).\n"
                "Run scripts/setup.sh and use .venv/bin/python.\n" % e
            )
            sys.exit(2)
        self.ir = ir
        self.passmanager = passmanager
        self.stablehlo = stablehlo
        self.dialects = []
        self.ctx = self._make_context()

    def _make_context(self):
        ir = self.ir
        ctx = ir.Context()
        # Upstream dialects (builtin, func, arith, ...) as jax registers them.
        try:
            from jaxlib.mlir._mlir_libs import _jax_mlir_ext

            registry = ir.DialectRegistry()
            _jax_mlir_ext.register_dialects(registry)
            ctx.append_dialect_registry(registry)
            ctx.load_all_available_dialects()
        except ImportError:
            # Fallback for builds without the jax extension: func only.
            from jaxlib.mlir.dialects import func  # noqa: F401
        self.stablehlo.register_dialect(ctx)
        self.dialects.append("stablehlo")
        for name in ("chlo", "sdy"):
            try:
                mod = __import__("jaxlib.mlir.dialects." + name, fromlist=[name])
                mod.register_dialect(ctx)
                self.dialects.append(name)
            except (ImportError, AttributeError):
                pass
        ctx.allow_unregistered_dialects = False
        return ctx


_MLIR = None


def mlir():
    global _MLIR
    if _MLIR is None:
        _MLIR = Mlir()
    return _MLIR


# --------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------


class VerifyError(Exception):
    pass


_LOC_RE = re.compile(r'loc\("(?:-|)":(\d+):(\d+)\)')


def _format_loc(loc, name):
    s = str(loc)
    m = _LOC_RE.fullmatch(s)
    if m:
        return "%s:%s:%s" % (name, m.group(1), m.group(2))
    if s in ("loc(unknown)", 'loc("-":0:0)', 'loc(":0:0)'):
        return name
    return "%s: %s" % (name, s)


def _format_diag(diag, name, lines):
    sev = str(diag.severity).rsplit(".", 1)[-1].lower()
    lines.append("%s: %s: %s" % (_format_loc(diag.location, name), sev, diag.message))
    for note in diag.notes:
        _format_diag(note, name, lines)


def format_mlir_error(err, name):
    """Turn an MLIRError into compiler-style 'FILE:LINE:COL: error: msg' lines."""
    lines = []
    diags = list(getattr(err, "error_diagnostics", []) or [])
    if diags:
        for d in diags:
            _format_diag(d, name, lines)
    else:
        lines.append("%s: error: %s" % (name, str(err).strip()))
    return "\n".join(lines)


def split_modules(text, split):
    """Yield (first_line_index, chunk) pairs; chunks keep file line numbers."""
    if not split:
        yield 0, text
        return
    pos = 0
    for m in list(SPLIT_MARKER.finditer(text)) + [None]:
        end = m.start() if m else len(text)
        chunk = text[pos:end]
        first = text.count("\n", 0, pos)
        code = [l for l in chunk.splitlines() if l.strip() and not l.strip().startswith("//")]
        if code:  # skip chunks holding only comments
            yield first, chunk
        if m:
            pos = m.end()


def parse_module(source, name):
    """Parse (text or bytecode) and verify; return the Module or raise VerifyError."""
    m = mlir()
    ir = m.ir
    with m.ctx, ir.Location.unknown():
        try:
            module = ir.Module.parse(source)
            module.operation.verify()
        except ir.MLIRError as e:
            raise VerifyError(format_mlir_error(e, name))
        body_ops = list(module.body.operations)
        if not body_ops:
            raise VerifyError("%s: error: no operations (empty module)" % name)
    return module


def resolve_version(version):
    sh = mlir().stablehlo
    aliases = {"min": "MAX", "minimum": "MAX", "current": "NONE", "week4": "WEEK_4",
               "week12": "WEEK_12"}
    key = aliases.get((version or "week12").lower())
    if key is None:
        return version
    req = sh.StablehloCompatibilityRequirement.__members__[key]
    return sh.get_version_from_compatibility_requirement(req)


def check_portable(text, name, version):
    """Legalize CHLO on a fresh copy and serialize to a portable artifact."""
    m = mlir()
    version = resolve_version(version)
    module = parse_module(text, name)
    captured = []

    def on_diag(d):
        sev = str(d.severity).rsplit(".", 1)[-1].lower()
        captured.append("%s: %s: %s" % (_format_loc(d.location, name), sev, d.message))
        return True  # handled: keep it off stderr

    with m.ctx, m.ir.Location.unknown():
        handler = m.ctx.attach_diagnostic_handler(on_diag)
        try:
            try:
                pm = m.passmanager.PassManager.parse(
                    "builtin.module(func.func(chlo-legalize-to-stablehlo))")
            except Exception:  # pass not registered yet in this build
                m.stablehlo.register_stablehlo_passes()
                pm = m.passmanager.PassManager.parse(
                    "builtin.module(func.func(chlo-legalize-to-stablehlo))")
            try:
                pm.run(module.operation)
            except Exception as e:
                raise VerifyError("%s: error: CHLO legalization failed: %s\n%s"
                                  % (name, e, "\n".join(captured)))
            try:
                m.stablehlo.serialize_portable_artifact(module, version)
            except Exception as e:
                raise VerifyError(
                    "%s: error: cannot serialize to a StableHLO portable artifact "
                    "(target version %s): %s\n%s"
                    % (name, version, str(e).strip(), "\n".join(captured)))
        finally:
            handler.detach()
    return version


def render(module, generic=False, debug_info=False):
    m = mlir()
    with m.ctx:
        return module.operation.get_asm(
            print_generic_op_form=generic, enable_debug_info=debug_info
        )


def verify_source(data, name, split=False, portable=False):
    """Verify bytes/str `data`; return a list of Modules or raise VerifyError."""
    if isinstance(data, bytes) and data.startswith(BYTECODE_MAGIC):
        module = parse_module(data, name)
        return [module]
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise VerifyError("%s: error: not UTF-8 text or MLIR bytecode (%s)" % (name, e))
    modules = []
    errors = []
    chunks = list(split_modules(data, split))
    if not chunks:
        raise VerifyError("%s: error: no operations (empty input)" % name)
    for first, chunk in chunks:
        padded = "\n" * first + chunk  # keep file-relative line numbers
        try:
            modules.append(parse_module(padded, name))
            if portable is not False:
                check_portable(padded, name, portable)
        except VerifyError as e:
            errors.append(str(e))
    if errors:
        raise VerifyError("\n".join(errors))
    return modules


def read_input(path):
    if path == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    with open(path, "rb") as f:
        return f.read(), path


# --------------------------------------------------------------------------
# Self-test: hand-written modules checked against the real parser.
# The same snippets are documented in tests/STABLEHLO_NOTES.md, whose ```mlir
# blocks are verified too, so the notes cannot drift from the parser.
# --------------------------------------------------------------------------

GOOD = {
    "add_mul_multi_result": """
func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>
  %1 = stablehlo.multiply %0, %arg1 : tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}
""",
    "dot_general": """
func.func public @main(%a: tensor<8x2x3xf32>, %b: tensor<8x3x4xf32>, %c: tensor<3x4xbf16>, %d: tensor<2x3xbf16>) -> (tensor<8x2x4xf32>, tensor<2x4xf32>) {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<8x2x3xf32>, tensor<8x3x4xf32>) -> tensor<8x2x4xf32>
  %1 = stablehlo.dot_general %d, %c, contracting_dims = [1] x [0] : (tensor<2x3xbf16>, tensor<3x4xbf16>) -> tensor<2x4xf32>
  return %0, %1 : tensor<8x2x4xf32>, tensor<2x4xf32>
}
""",
    "reduce_applies_and_region": """
func.func public @main(%x: tensor<2x3xf32>, %i: tensor<2x3xi32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xi32>) {
  %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %izero = stablehlo.constant dense<0> : tensor<i32>
  %0 = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
  %1:2 = stablehlo.reduce(%x init: %ninf), (%i init: %izero) across dimensions = [1] : (tensor<2x3xf32>, tensor<2x3xi32>, tensor<f32>, tensor<i32>) -> (tensor<2xf32>, tensor<2xi32>)
   reducer(%a: tensor<f32>, %b: tensor<f32>) (%ai: tensor<i32>, %bi: tensor<i32>) {
    %ge = stablehlo.compare GE, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %v = stablehlo.select %ge, %a, %b : tensor<i1>, tensor<f32>
    %j = stablehlo.select %ge, %ai, %bi : tensor<i1>, tensor<i32>
    stablehlo.return %v, %j : tensor<f32>, tensor<i32>
  }
  return %0, %1#0, %1#1 : tensor<2xf32>, tensor<2xf32>, tensor<2xi32>
}
""",
    "compare_select": """
func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>, %i: tensor<4xi64>) -> (tensor<4xf32>, tensor<4xi1>) {
  %0 = stablehlo.compare GT, %a, %b, FLOAT : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %1 = stablehlo.select %0, %a, %b : tensor<4xi1>, tensor<4xf32>
  %2 = stablehlo.compare LT, %i, %i, SIGNED : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
  return %1, %2 : tensor<4xf32>, tensor<4xi1>
}
""",
    "constants": """
func.func public @main() -> (tensor<2x3xf32>, tensor<2xf32>, tensor<3xi1>, tensor<i64>, tensor<f16>, tensor<3xbf16>, tensor<2xf32>) {
  %0 = stablehlo.constant dense<1.000000e+00> : tensor<2x3xf32>
  %1 = stablehlo.constant dense<[1.000000e+00, -2.500000e+00]> : tensor<2xf32>
  %2 = stablehlo.constant dense<[true, false, true]> : tensor<3xi1>
  %3 = stablehlo.constant dense<-9223372036854775808> : tensor<i64>
  %4 = stablehlo.constant dense<0x3E00> : tensor<f16>
  %5 = stablehlo.constant dense<[0x3F80, 0x7F80, 0xFF80]> : tensor<3xbf16>
  %6 = stablehlo.constant dense<"0x0000803F00000040"> : tensor<2xf32>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<2x3xf32>, tensor<2xf32>, tensor<3xi1>, tensor<i64>, tensor<f16>, tensor<3xbf16>, tensor<2xf32>
}
""",
    "composite": """
func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.composite "tpuc.silu" %arg0 {composite_attributes = {approximate = "none"}, decomposition = @tpuc.silu.impl, version = 1 : i32} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @tpuc.silu.impl(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.logistic %arg0 : tensor<4xf32>
  %1 = stablehlo.multiply %arg0, %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}
""",
    "convolution": """
func.func public @main(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32> {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32>
  return %0 : tensor<1x4x8x8xf32>
}
""",
    "reduce_window_max_pool": """
func.func public @main(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %0 = "stablehlo.reduce_window"(%x, %ninf) <{padding = dense<0> : tensor<4x2xi64>, window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %m = stablehlo.maximum %a, %b : tensor<f32>
    stablehlo.return %m : tensor<f32>
  }) : (tensor<1x3x8x8xf32>, tensor<f32>) -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}
""",
    "gather_embedding": """
func.func public @main(%table: tensor<100x16xf32>, %ids: tensor<5xi64>) -> tensor<5x16xf32> {
  %0 = "stablehlo.gather"(%table, %ids) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 16>}> : (tensor<100x16xf32>, tensor<5xi64>) -> tensor<5x16xf32>
  return %0 : tensor<5x16xf32>
}
""",
    "select_and_scatter": """
func.func public @main(%x: tensor<1x1x4x4xf32>, %src: tensor<1x1x2x2xf32>) -> tensor<1x1x4x4xf32> {
  %init = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %0 = "stablehlo.select_and_scatter"(%x, %src, %init) <{padding = dense<0> : tensor<4x2xi64>, window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %p = stablehlo.compare GE, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  }, {
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<1x1x4x4xf32>, tensor<1x1x2x2xf32>, tensor<f32>) -> tensor<1x1x4x4xf32>
  return %0 : tensor<1x1x4x4xf32>
}
""",
    "sort_key_value": """
func.func public @main(%k: tensor<2x8xf32>, %v: tensor<2x8xi32>) -> (tensor<2x8xf32>, tensor<2x8xi32>) {
  %0:2 = "stablehlo.sort"(%k, %v) <{dimension = 1 : i64, is_stable = true}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i32>, %d: tensor<i32>):
    %p = stablehlo.compare GT, %a, %b, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  }) : (tensor<2x8xf32>, tensor<2x8xi32>) -> (tensor<2x8xf32>, tensor<2x8xi32>)
  return %0#0, %0#1 : tensor<2x8xf32>, tensor<2x8xi32>
}
""",
    "chlo_erf": """
func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = chlo.erf %x : tensor<4xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
""",
    "shape_ops": """
func.func public @main(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> (tensor<3x2xf32>, tensor<6xf32>, tensor<2x3xbf16>, tensor<4x3xf32>, tensor<1x2xf32>, tensor<4xi64>) {
  %0 = stablehlo.broadcast_in_dim %y, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
  %1 = stablehlo.transpose %x, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %2 = stablehlo.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>
  %3 = stablehlo.convert %x : (tensor<2x3xf32>) -> tensor<2x3xbf16>
  %4 = stablehlo.concatenate %x, %0, dim = 0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %5 = stablehlo.slice %x [0:1, 0:3:2] : (tensor<2x3xf32>) -> tensor<1x2xf32>
  %6 = stablehlo.iota dim = 0 : tensor<4xi64>
  return %1, %2, %3, %4, %5, %6 : tensor<3x2xf32>, tensor<6xf32>, tensor<2x3xbf16>, tensor<4x3xf32>, tensor<1x2xf32>, tensor<4xi64>
}
""",
}

# name -> (module text, substring expected in the diagnostics)
BAD = {
    "add_mismatched_shapes": (
        """
func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<3xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %arg0, %arg1 : (tensor<4xf32>, tensor<3xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
""",
        "requires the same shape",
    ),
    "convolution_wrong_result_shape": (
        """
func.func public @main(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32> {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  return %0 : tensor<1x4x6x6xf32>
}
""",
        "incompatible with return type",
    ),
    "convolution_missing_group_counts": (
        """
func.func public @main(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32> {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32>
  return %0 : tensor<1x4x8x8xf32>
}
""",
        "requires attribute 'batch_group_count'",
    ),
    "return_type_mismatch": (
        """
func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf16> {
  return %arg0 : tensor<4xf32>
}
""",
        "doesn't match function result type",
    ),
    "float_literal_needs_dot": (
        """
func.func public @main() -> tensor<f32> {
  %0 = stablehlo.constant dense<1> : tensor<f32>
  return %0 : tensor<f32>
}
""",
        "unexpected decimal integer literal",
    ),
    "unknown_dialect": (
        """
func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mhlo.add %arg0, %arg0 : tensor<4xf32>
  return %0 : tensor<4xf32>
}
""",
        "Dialect `mhlo' not found",
    ),
    "empty_module": ("", "empty"),
}


def _notes_blocks():
    """Yield (kind, line, text) for ```mlir / ```mlir-invalid blocks in the notes."""
    if not os.path.exists(NOTES):
        return
    with open(NOTES, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```(mlir(?:-invalid)?)\s*$", lines[i])
        if m:
            start = i + 1
            j = start
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            yield m.group(1), start + 1, "\n".join(lines[start:j]) + "\n"
            i = j
        i += 1


def self_test():
    failures = []
    count = 0

    def expect_ok(label, text):
        nonlocal count
        count += 1
        try:
            mods = verify_source(text, label)
        except VerifyError as e:
            failures.append("%s should verify but failed:\n%s" % (label, e))
            return
        # The printer's output is the canonical pretty form: it must re-parse
        # and print identically (a fixed point).
        printed = render(mods[0])
        try:
            again = render(verify_source(printed, label + " (reprinted)")[0])
        except VerifyError as e:
            failures.append("%s: printed form does not re-parse:\n%s" % (label, e))
            return
        if again != printed:
            failures.append("%s: printing is not a fixed point" % label)

    def expect_bad(label, text, needle):
        nonlocal count
        count += 1
        try:
            verify_source(text, label)
        except VerifyError as e:
            if needle and needle not in str(e):
                failures.append(
                    "%s failed, but without %r in the message:\n%s" % (label, needle, e)
                )
            return
        failures.append("%s should fail verification but passed" % label)

    for name, text in GOOD.items():
        expect_ok("builtin:" + name, text)
    for name, (text, needle) in BAD.items():
        expect_bad("builtin:" + name, text, needle)

    n_notes = 0
    for kind, line, text in _notes_blocks():
        n_notes += 1
        label = "STABLEHLO_NOTES.md:%d" % line
        if kind == "mlir":
            expect_ok(label, text)
        else:
            expect_bad(label, text, None)

    # --split-input-file keeps file-relative line numbers.
    count += 1
    text = GOOD["chlo_erf"] + "// -----\n" + BAD["add_mismatched_shapes"][0]
    try:
        verify_source(text, "split.mlir", split=True)
        failures.append("split: second module should fail")
    except VerifyError as e:
        bad_line = text.split("\n").index(
            [l for l in text.split("\n") if "stablehlo.add" in l][0]
        ) + 1
        if "split.mlir:%d:" % bad_line not in str(e):
            failures.append("split: expected line %d in:\n%s" % (bad_line, e))

    # --portable: CHLO gets legalized, then serialized to VHLO.
    count += 1
    try:
        for name in ("chlo_erf", "composite", "sort_key_value"):
            verify_source(GOOD[name], "portable:" + name, portable="week12")
    except VerifyError as e:
        failures.append("portable check failed:\n%s" % e)
    count += 1
    try:
        verify_source(GOOD["composite"], "portable-old", portable="0.9.0")
        failures.append("composite should not serialize to the minimum version")
    except VerifyError as e:
        if "vhlo.composite" not in str(e):
            failures.append("portable-old: diagnostics not captured:\n%s" % e)

    # The command line itself, through stdin and a file.
    me = os.path.abspath(__file__)
    runs = [
        (["-"], GOOD["add_mul_multi_result"], 0, "ok <stdin>"),
        (["-"], BAD["add_mismatched_shapes"][0], 1, "<stdin>:3:"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        good_path = os.path.join(tmp, "good.mlir")
        with open(good_path, "w") as f:
            f.write(GOOD["convolution"])
        runs.append(([good_path], "", 0, "ok " + good_path))
        runs.append(([os.path.join(tmp, "missing.mlir")], "", 2, "cannot read"))
        for args, stdin, want_rc, needle in runs:
            count += 1
            p = subprocess.run(
                [sys.executable, me] + args,
                input=stdin.encode(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            out = p.stdout.decode() + p.stderr.decode()
            if p.returncode != want_rc or needle not in out:
                failures.append(
                    "CLI %s: rc %d (want %d), output lacks %r:\n%s"
                    % (args, p.returncode, want_rc, needle, out)
                )

    if n_notes == 0:
        failures.append("no ```mlir blocks found in %s" % NOTES)
    for f in failures:
        sys.stderr.write("FAIL " + f + "\n")
    status = "FAILED" if failures else "passed"
    print(
        "self-test %s: %d checks (%d built-in modules, %d note blocks), "
        "%d failures; dialects: %s"
        % (status, count, len(GOOD) + len(BAD), n_notes, len(failures),
           ", ".join(mlir().dialects))
    )
    return 1 if failures else 0


# --------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Verify StableHLO MLIR files with jaxlib's StableHLO bindings."
    )
    ap.add_argument("files", nargs="*", metavar="FILE", help='MLIR text or bytecode; "-" for stdin')
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--split-input-file", action="store_true")
    ap.add_argument("--print", dest="do_print", action="store_true")
    ap.add_argument("--generic", action="store_true")
    ap.add_argument("--debug-info", action="store_true")
    ap.add_argument("--portable", action="store_true")
    ap.add_argument("--target-version", default="week12", metavar="VERSION")
    args = ap.parse_args(argv)

    if args.self_test:
        return self_test()
    if not args.files:
        ap.error("no input files (use - for stdin)")

    rc = 0
    for path in args.files:
        try:
            data, name = read_input(path)
        except OSError as e:
            sys.stderr.write("%s: error: cannot read: %s\n" % (path, e.strerror or e))
            rc = max(rc, 2)
            continue
        try:
            modules = verify_source(
                data, name, split=args.split_input_file,
                portable=args.target_version if args.portable else False)
        except VerifyError as e:
            sys.stderr.write("%s\n" % e)
            sys.stderr.write("FAILED %s\n" % name)
            rc = max(rc, 1)
            continue
        if args.do_print:
            for i, mod in enumerate(modules):
                if i:
                    sys.stdout.write("// -----\n")
                sys.stdout.write(render(mod, args.generic, args.debug_info))
            sys.stderr.write("ok %s\n" % name)
        else:
            print("ok %s" % name)
        sys.stdout.flush()
    return rc


if __name__ == "__main__":
    sys.exit(main())
