//! Programs with symbolic dimensions, run as padded buckets.
//!
//! ```text
//! inputs ─► infer_sizes (n per symbol, range checked) ─► BucketPlan::select (B per symbol)
//!        ─► specialize (passes/specialize.rs: static program + masks, n as `symint` args)
//!        ─► lower + compile (cached; the key hashes the specialized program, never n)
//!        ─► pad_input (host) ─► run ─► unpad (host: the valid part of each result)
//! ```
//!
//! Everything here works on the host: the masking that keeps padded results exact is in the
//! program (see `tpuc_passes::specialize`).

use crate::buckets::BucketPlan;
use crate::exec::ExecError;
use crate::boxes::{copy_box, gather_box};
use crate::tensor::HostTensor;
use std::collections::BTreeMap;
use tpuc_ir::{ArgKind, Dim, Module, Scalar, TensorType};
use tpuc_passes::specialize::{DimLayout, Layout};

/// A size per symbol.
pub type Sizes = BTreeMap<String, i64>;

/// The user-input arguments of `main` (no weights, no `symint`s), with their types.
pub fn user_input_types(module: &Module) -> Vec<(String, TensorType)> {
    crate::exec::arg_specs(module)
        .into_iter()
        .filter(|a| !a.kind.is_weight() && a.kind != ArgKind::SymInt)
        .map(|a| (a.name, a.ty))
        .collect()
}

/// The seed input of a program with random ops for `seed`: int64[2], the low and the high 31
/// bits (the generator mixes both words, so nearby seeds give unrelated streams).
pub fn seed_tensor(seed: u64) -> HostTensor {
    let words = [(seed & 0x7FFF_FFFF) as i64, ((seed >> 31) & 0x7FFF_FFFF) as i64];
    HostTensor { dtype: tpuc_ir::DType::I64, dims: vec![2], bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect() }
}

/// Whether `main` takes the seed input of random ops (`tpuc_frontend_fx::SEED_INPUT`), and
/// `inputs` stops just before it: then the seed for `seed` is appended.
pub fn append_seed(module: &Module, inputs: &mut Vec<(String, HostTensor)>, seed: u64) -> bool {
    let args = user_input_types(module);
    let wants = args.len() == inputs.len() + 1 && args.last().is_some_and(|(n, _)| n == tpuc_frontend_fx::SEED_INPUT);
    if wants {
        inputs.push((format!("--seed {seed}"), seed_tensor(seed)));
    }
    wants
}

/// The real size of every symbol, read from the user inputs' shapes (in signature order), and
/// checked against the symbols' ranges and every symbolic dim.
pub fn infer_sizes(module: &Module, shapes: &[Vec<i64>]) -> Result<Sizes, ExecError> {
    let args = user_input_types(module);
    if args.len() != shapes.len() {
        return Err(ExecError::BadInput(format!("the program takes {} input(s), got {}", args.len(), shapes.len())));
    }
    let mut sizes = Sizes::new();
    for ((name, ty), shape) in args.iter().zip(shapes) {
        if ty.rank() != shape.len() {
            return Err(ExecError::BadInput(format!("input `{name}` expects {ty}, got rank {}", shape.len())));
        }
        for (d, &n) in ty.dims.iter().zip(shape) {
            if let Dim::Sym(e) = d {
                if let Some(s) = e.as_symbol() {
                    match sizes.get(s) {
                        Some(&m) if m != n => {
                            return Err(ExecError::BadInput(format!(
                                "input `{name}` gives symbol `{s}` the size {n}, another input gave {m}"
                            )))
                        }
                        _ => {
                            sizes.insert(s.to_string(), n);
                        }
                    }
                }
            }
        }
    }
    let data_dependent = data_dependent_symbols(module);
    for s in module.symbols.iter() {
        if data_dependent.iter().any(|d| *d == *s.name) {
            continue; // the program computes it
        }
        let Some(&n) = sizes.get(&*s.name) else {
            return Err(ExecError::BadInput(format!(
                "the size of symbol `{}` cannot be read from the inputs (no input dim is exactly `{}`)",
                s.name, s.name
            )));
        };
        if n < 1 {
            return Err(ExecError::BadInput(format!("symbol `{}` has size {n}: bucketed programs need sizes of at least 1", s.name)));
        }
        if n < s.min || s.max.is_some_and(|hi| n > hi) {
            let hi = s.max.map_or("inf".to_string(), |h| h.to_string());
            return Err(ExecError::BadInput(format!("size {n} of symbol `{}` is outside its range [{}, {hi}]", s.name, s.min)));
        }
    }
    for ((name, ty), shape) in args.iter().zip(shapes) {
        for (d, &n) in ty.dims.iter().zip(shape) {
            let want = match d {
                Dim::Static(k) => Some(*k),
                Dim::Sym(e) => e.eval(&|s| sizes.get(s).copied()),
            };
            if want != Some(n) {
                return Err(ExecError::BadInput(format!("input `{name}` expects {ty}, got shape {shape:?}")));
            }
        }
    }
    Ok(sizes)
}

/// The program cut down to the numbers it reads on the host and sizes tensors with
/// (`imported.host_reads`): `main` returns them, one i64 scalar each, in order, and keeps only
/// what computes them. Run first, it gives those symbols their sizes (read back as
/// [`take_returned_sizes`] reads a program's sizes); the whole program is then compiled at them
/// ([`with_sizes`]). A number computed from a tensor that another such number sizes is an
/// error naming both reads.
pub fn host_read_prelude(imported: &tpuc_frontend_fx::Imported) -> Result<tpuc_frontend_fx::Imported, ExecError> {
    let mut module = imported.module.clone();
    let entry = module.main_func().map(|f| module.entry_block(f)).ok_or_else(|| ExecError::BadInput("the program has no `main`".into()))?;
    let values: Vec<tpuc_ir::ValueId> = imported.host_reads.iter().map(|r| r.value).collect();
    if let Some(ret) = module.terminator(entry) {
        module.erase_op(ret);
    }
    tpuc_ir::Builder::new(&mut module, entry).ret(&values).map_err(|e| ExecError::BadInput(format!("internal: {e}")))?;
    if let Some(f) = module.main_func_mut() {
        f.results = imported
            .host_reads
            .iter()
            .map(|r| tpuc_ir::ResultInfo::new(tpuc_ir::ResultKind::UserOutput, format!("read {}", r.symbol)))
            .collect();
    }
    tpuc_passes::util::remove_dead(&mut module);
    module.compact();
    let reads: Vec<&str> = imported.host_reads.iter().map(|r| r.symbol.as_str()).collect();
    for v in module.values.values() {
        for d in &v.ty.dims {
            let Dim::Sym(e) = d else { continue };
            if let Some(s) = e.symbols().into_iter().find(|s| reads.contains(&&**s)) {
                let by = imported.host_reads.iter().find(|r| r.symbol == *s).map_or("?", |r| r.node.as_str());
                return Err(ExecError::Unsupported(format!(
                    "a number read on the host (`.item()`) depends on a tensor sized by another such number (`{s}`, read at node `{by}`): \
                     tpuc reads one level of such numbers ahead of the program"
                )));
            }
        }
    }
    module.symbols.retain(|s| !reads.contains(&&*s.name));
    tpuc_ir::verify(&module).map_err(|errs| ExecError::BadInput(format!("internal: the host-read prelude does not verify: {}", errs[0])))?;
    Ok(tpuc_frontend_fx::Imported {
        module,
        weights: imported.weights.clone(),
        inputs: imported.inputs.clone(),
        outputs: (0..values.len()).map(tpuc_frontend_fx::OutputSlot::Result).collect(),
        sym_inputs: imported.sym_inputs.clone(),
        torch_version: imported.torch_version.clone(),
        has_weight_data: imported.has_weight_data,
        source: Default::default(),
        host_reads: Vec::new(),
    })
}

/// Where a call's arguments carry one symbol's size: signature input `input`'s dim `dim`, or
/// the input itself for a SymInt input (`dim` None); with the symbol's range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeRead {
    pub input: usize,
    pub dim: Option<usize>,
    pub symbol: String,
    /// The smallest size (at least 1).
    pub min: i64,
    /// The largest, `None` when unbounded.
    pub max: Option<i64>,
}

/// Where each symbol's size is read at a call, in signature order: every input dim (and SymInt
/// input) that is exactly one symbol. `None` when neither the inputs nor the program's
/// data-dependent results have a symbolic size, or when a symbol of an input's shape is never
/// one by itself (`2*s0` only): its size cannot be read, so the program cannot be bucketed;
/// `None` too when a dim shrinks as a symbol grows (`384 - s0`): it cannot be padded.
pub fn size_reads(imported: &tpuc_frontend_fx::Imported) -> Option<Vec<SizeRead>> {
    let module = &imported.module;
    // A dim that shrinks as a symbol grows (`384 - s`, after a graph break split a fixed
    // width in two, in an input or in the backward's slice of a gradient) cannot be padded:
    // such a program is compiled per shape.
    if module.values.values().any(|v| v.ty.dims.iter().any(|d| matches!(d, tpuc_ir::Dim::Sym(e) if !e.is_nondecreasing()))) {
        return None;
    }
    let args = module.main_func().map(|f| module.blocks[module.entry_block(f)].args().to_vec()).unwrap_or_default();
    let (mut reads, mut needed) = (Vec::new(), std::collections::BTreeSet::new());
    let mut read = |input: usize, dim: Option<usize>, e: &tpuc_ir::SymExpr| {
        needed.extend(e.symbols().iter().map(|s| s.to_string()));
        if let Some(name) = e.as_symbol() {
            let (min, max) = module.symbols.get(name).map_or((1, None), |s| (s.min.max(1), s.max));
            reads.push(SizeRead { input, dim, symbol: name.to_string(), min, max });
        }
    };
    for (input, slot) in imported.inputs.iter().enumerate() {
        let tpuc_frontend_fx::InputSlot::Arg(k) = *slot else { continue };
        if let Some((_, e)) = imported.sym_inputs.iter().find(|(a, _)| *a == k) {
            read(input, None, e);
            continue;
        }
        let Some(&v) = args.get(k) else { continue };
        for (d, dim) in module.values[v].ty.dims.iter().enumerate() {
            if let tpuc_ir::Dim::Sym(e) = dim {
                read(input, Some(d), e);
            }
        }
    }
    let seen: std::collections::BTreeSet<&str> = reads.iter().map(|r| r.symbol.as_str()).collect();
    // Data-dependent sizes (`nonzero`) are no input's: the program returns them.
    let data_dependent = !tpuc_passes::specialize::defined_sizes(module).is_empty();
    ((data_dependent || !reads.is_empty()) && needed.iter().all(|s| seen.contains(s.as_str()))).then_some(reads)
}

/// The symbols the program computes (data-dependent sizes such as `nonzero`'s count), which no
/// input gives and no bucket plan covers.
pub fn data_dependent_symbols(module: &Module) -> Vec<String> {
    tpuc_passes::specialize::defined_sizes(module).into_iter().map(|(s, _)| s).collect()
}

/// Takes the data-dependent sizes a run returned after its results (one i64 scalar per symbol
/// of `size_results`, in order) off the end of `outputs`, into `sizes`; `bytes` reads an output.
pub fn take_returned_sizes<T>(
    program: &str,
    outputs: &mut Vec<T>,
    bytes: impl Fn(&T) -> &[u8],
    size_results: &[String],
    sizes: &mut Sizes,
) -> Result<(), ExecError> {
    let Some(at) = outputs.len().checked_sub(size_results.len()) else {
        return Err(ExecError::BadInput(format!("{program}: {} outputs, fewer than its {} sizes", outputs.len(), size_results.len())));
    };
    for (sym, arr) in size_results.iter().zip(outputs.split_off(at)) {
        let bytes = bytes(&arr);
        let n = <[u8; 8]>::try_from(bytes).map(i64::from_le_bytes).map_err(|_| {
            ExecError::BadInput(format!("{program}: the size `{sym}` came back as {} bytes, not an i64", bytes.len()))
        })?;
        sizes.insert(sym.clone(), n);
    }
    Ok(())
}

/// The bucket of every symbol for real sizes `sizes`.
pub fn select_bucket(plan: &BucketPlan, sizes: &Sizes) -> Result<Sizes, ExecError> {
    let mut out = Sizes::new();
    for (name, &n) in sizes {
        let p = plan
            .symbol(name)
            .ok_or_else(|| ExecError::BadInput(format!("the bucket plan has no symbol `{name}`")))?;
        out.insert(name.clone(), p.select(n).map_err(|e| ExecError::BadInput(e.to_string()))?);
    }
    Ok(out)
}

/// `module` at real sizes `sizes` (`--buckets off`): every symbolic dim replaced by its size
/// and the symbols dropped, a static program of its own, compiled once per shape with nothing
/// padded or masked.
pub fn at_sizes(module: &Module, sizes: &Sizes) -> Result<Module, ExecError> {
    let mut m = with_sizes(module, sizes)?;
    if let Some(e) = m.values.values().flat_map(|v| &v.ty.dims).find_map(|d| if let Dim::Sym(e) = d { Some(e) } else { None }) {
        return Err(ExecError::BadInput(format!("dim `{e}` has no size for {}", bucket_name(sizes))));
    }
    m.symbols = Default::default();
    Ok(m)
}

/// `module` with the symbols of `sizes` replaced by their sizes and dropped; the other symbols
/// stay (numbers read on the host fixed, the inputs' sizes still bucketed).
pub fn with_sizes(module: &Module, sizes: &Sizes) -> Result<Module, ExecError> {
    for s in module.symbols.iter() {
        if let Some(&n) = sizes.get(&*s.name) {
            if n < s.min || s.max.is_some_and(|hi| n > hi) {
                let hi = s.max.map_or("inf".to_string(), |h| h.to_string());
                return Err(ExecError::BadInput(format!("size {n} of symbol `{}` is outside its range [{}, {hi}]", s.name, s.min)));
            }
        }
    }
    let mut m = module.clone();
    let subst = |s: &str| sizes.get(s).map(|&n| tpuc_ir::SymExpr::constant(n));
    for v in m.values.values_mut() {
        if v.ty.is_static() {
            continue;
        }
        let mut dims = Vec::with_capacity(v.ty.rank());
        for d in &v.ty.dims {
            dims.push(match d {
                Dim::Static(n) => Dim::Static(*n),
                Dim::Sym(e) => match e.substitute(&subst) {
                    e if e.as_const().is_some_and(|n| n < 0) => {
                        return Err(ExecError::BadInput(format!("dim `{e}` is negative at {}", bucket_name(sizes))))
                    }
                    e => Dim::from_expr(e),
                },
            });
        }
        v.ty = TensorType::new(v.ty.dtype, dims);
    }
    // A slice that takes a symbolic dim whole says so with the limit i64::MAX: the size now.
    let ops: Vec<tpuc_ir::OpId> = m.ops.keys().collect();
    for op in ops {
        let d = &m.ops[op];
        if d.opcode() != tpuc_ir::Opcode::Slice {
            continue;
        }
        let Some(s) = tpuc_ir::payload::Slice::of(&d.attrs) else { continue };
        // An operand still symbolic keeps its limit (a slice of it whole).
        let Some(shape) = m.values[d.operands()[0]].ty.static_dims() else { continue };
        let clamped: Vec<i64> = s.limit_indices.iter().zip(&shape).map(|(&l, &n)| l.min(n)).collect();
        if clamped != s.limit_indices {
            let attrs = tpuc_ir::payload::Slice { limit_indices: &clamped, ..s }.attrs();
            m.ops[op].attrs.update(attrs);
        }
    }
    m.symbols.retain(|s| !sizes.contains_key(&*s.name));
    tpuc_ir::verify(&m).map_err(|errs| {
        let first = errs.first().map_or(String::new(), |e| e.to_string());
        ExecError::BadInput(format!("the program at {} does not verify: {first}", bucket_name(sizes)))
    })?;
    Ok(m)
}

/// `s0=128,s1=64`: how a bucket is named in labels, tables and messages.
pub fn bucket_name(sizes: &Sizes) -> String {
    sizes.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// `t` padded at the end of every dim to `padded`, the padding filled with `fill` (zeros when
/// `None`).
pub fn pad_input(t: &HostTensor, padded: &[i64], fill: Option<f64>) -> HostTensor {
    if t.dims == padded {
        return t.clone();
    }
    let esz = t.dtype.size_bytes();
    let count: i64 = padded.iter().product();
    let mut bytes = match fill {
        None => vec![0u8; count as usize * esz],
        Some(v) => {
            let one = if t.dtype.is_float() { Scalar::Float(v) } else { Scalar::Int(v as i64) }.to_bytes(t.dtype);
            one.repeat(count as usize)
        }
    };
    copy_box(&t.bytes, &t.dims, &vec![0; t.dims.len()], &mut bytes, padded, &t.dims, esz);
    HostTensor { dtype: t.dtype, dims: padded.to_vec(), bytes }
}

/// Per padded dim of a result of shape `dims` with layout `layout`, its factors as (padded,
/// valid) pairs for real sizes `sizes`, outer to inner (`(n, n)` for a dim not padded).
pub fn cuts(layout: &Layout, dims: &[i64], sizes: &Sizes) -> Result<Vec<(i64, i64)>, ExecError> {
    let mut out = Vec::with_capacity(dims.len());
    for (d, &p) in dims.iter().enumerate() {
        let Some(l) = layout.get(d) else {
            out.push((p, p));
            continue;
        };
        for f in l.factors(p) {
            let e = f
                .extent
                .eval(&|s| sizes.get(s).copied())
                .ok_or_else(|| ExecError::BadInput(format!("no size for `{}`", f.extent)))?;
            out.push((f.padded, e.clamp(0, f.padded)));
        }
    }
    Ok(out)
}

/// The real dims of a padded result of shape `dims` with layout `layout`, given its
/// [`cuts`]: each dim's real length is the product of its factors' valid lengths.
pub fn real_dims(layout: &Layout, dims: &[i64], cuts: &[(i64, i64)]) -> Vec<i64> {
    let mut out = Vec::with_capacity(dims.len());
    let mut k = 0;
    for (d, &p) in dims.iter().enumerate() {
        let n = layout.get(d).map_or(1, |l| l.factors(p).len());
        out.push(cuts[k..k + n].iter().map(|&(_, v)| v).product());
        k += n;
    }
    out
}

/// The valid part of a padded result with layout `layout`, for real sizes `sizes`.
pub fn unpad(t: &HostTensor, layout: &Layout, sizes: &Sizes) -> Result<HostTensor, ExecError> {
    if layout.iter().all(|l| matches!(l, DimLayout::Exact)) {
        return Ok(t.clone());
    }
    let cuts = cuts(layout, &t.dims, sizes)?;
    let fdims: Vec<i64> = cuts.iter().map(|&(p, _)| p).collect();
    let region: Vec<i64> = cuts.iter().map(|&(_, v)| v).collect();
    let out_dims = real_dims(layout, &t.dims, &cuts);
    let bytes = gather_box(&t.bytes, &fdims, &region, t.dtype.size_bytes());
    Ok(HostTensor { dtype: t.dtype, dims: out_dims, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuc_ir::{DType, SymExpr};
    use tpuc_passes::specialize::Factor;

    fn t(dims: &[i64]) -> HostTensor {
        let n: i64 = dims.iter().product();
        HostTensor { dtype: DType::I32, dims: dims.to_vec(), bytes: (0..n as i32).flat_map(|v| v.to_le_bytes()).collect() }
    }

    fn vals(h: &HostTensor) -> Vec<i32> {
        h.bytes.chunks(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }

    #[test]
    fn pad_then_unpad_gives_the_input_back() {
        let x = t(&[2, 3]);
        let p = pad_input(&x, &[2, 8], Some(-1.0));
        assert_eq!(vals(&p), vec![0, 1, 2, -1, -1, -1, -1, -1, 3, 4, 5, -1, -1, -1, -1, -1]);
        let s = SymExpr::symbol("s");
        let lay = vec![DimLayout::Exact, DimLayout::Factors(vec![Factor { padded: 8, extent: s }])];
        let sizes: Sizes = [("s".to_string(), 3)].into();
        assert_eq!(unpad(&p, &lay, &sizes).unwrap(), x);
    }

    #[test]
    fn unpad_of_a_product_of_padded_dims() {
        // [2*s] padded as [2, 4] with s = 3: rows 0..3 and 4..7 are valid.
        let x = t(&[8]);
        let s = SymExpr::symbol("s");
        let lay = vec![DimLayout::Factors(vec![
            Factor { padded: 2, extent: SymExpr::constant(2) },
            Factor { padded: 4, extent: s },
        ])];
        let sizes: Sizes = [("s".to_string(), 3)].into();
        let u = unpad(&x, &lay, &sizes).unwrap();
        assert_eq!(u.dims, vec![6]);
        assert_eq!(vals(&u), vec![0, 1, 2, 4, 5, 6]);
    }
}
