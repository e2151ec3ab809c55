//! Bucketed programs (symbolic dims compiled at padded sizes): inputs padded into reused
//! staging buffers, the size arguments filled in, and results cut to their real shapes.

use super::{CutResult, HostArray, Line, Program};
use crate::exec::{ExecError, RunTimes};
use std::borrow::Cow;
use tpuc_ir::TensorType;

impl Program {
    /// For a bucketed program and the real sizes of its symbols: per result, per padded dim,
    /// its factors as (padded, valid) pairs, outer to inner (one `(n, n)` pair for a dim
    /// that is not padded). Cutting each factor to its valid length gives the real result.
    pub fn result_cuts(&self, sizes: &crate::dynamic::Sizes) -> Result<Vec<Vec<(i64, i64)>>, ExecError> {
        let none = Vec::new();
        self.results
            .iter()
            .enumerate()
            .map(|(k, ty)| {
                let layout = self.result_layouts.get(k).unwrap_or(&none);
                crate::dynamic::cuts(layout, &ty.static_dims().unwrap_or_default(), sizes)
            })
            .collect()
    }

    /// Runs a bucketed program on inputs of their real sizes: each user input (the program's
    /// user-input arguments in order, without the size arguments) as its dense bytes and real
    /// dims. Inputs are padded into reused staging buffers (the padding left as it is: the
    /// program masks it), the size arguments are filled from `sizes`, and every result is cut
    /// to its real shape: in place when its valid part is a prefix of the padded result (a
    /// padded leading dim), else copied out.
    pub fn run_bucketed(&self, inputs: &[(&[u8], &[i64])], sizes: &crate::dynamic::Sizes) -> Result<(Vec<CutResult>, RunTimes), ExecError> {
        if inputs.len() != self.tensor_inputs.len() {
            return Err(ExecError::BadInput(format!(
                "{}: the program takes {} input(s), got {}",
                self.name,
                self.tensor_inputs.len(),
                inputs.len()
            )));
        }
        /// Where one user argument's bytes come from.
        enum Slot<'a> {
            Scalar(usize),
            Given(&'a [u8]),
            Staged(usize, usize),
        }
        // Owned storage first (scalars of the sizes, staging for padded inputs), then slices.
        let mut scalars: Vec<[u8; 8]> = Vec::new();
        let mut staged: Vec<Vec<Line>> = Vec::new();
        let mut slots = Vec::with_capacity(self.user_args.len());
        {
            let mut pool = self.staging.lock().unwrap_or_else(|e| e.into_inner());
            let mut next = inputs.iter();
            for &arg in &self.user_args {
                if let Some(bytes) = self.size_arg_bytes(arg, sizes)? {
                    scalars.push(bytes);
                    slots.push(Slot::Scalar(scalars.len() - 1));
                    continue;
                }
                let &(bytes, dims) = next.next().expect("counted above");
                let spec = &self.args[arg];
                if !self.needs_padding(arg, bytes, dims)? {
                    slots.push(Slot::Given(bytes));
                    continue;
                }
                let lines = spec.bytes.div_ceil(64);
                let mut buf = match pool.iter().position(|b| b.len() >= lines) {
                    Some(i) => pool.swap_remove(i),
                    None => vec![Line([0; 64]); lines],
                };
                self.pad_into(arg, bytes, dims, &mut bytemuck::cast_slice_mut::<Line, u8>(&mut buf)[..spec.bytes]);
                staged.push(buf);
                slots.push(Slot::Staged(staged.len() - 1, spec.bytes));
            }
        }
        let views: Vec<&[u8]> = slots
            .iter()
            .map(|slot| match *slot {
                Slot::Scalar(i) => &scalars[i][..],
                Slot::Given(bytes) => bytes,
                Slot::Staged(i, len) => &bytemuck::cast_slice::<Line, u8>(&staged[i])[..len],
            })
            .collect();
        let result = self.run(&views);
        drop(views);
        self.staging.lock().unwrap_or_else(|e| e.into_inner()).extend(staged);
        let (mut outputs, times) = result?;
        let sizes = self.read_sizes(&mut outputs, sizes)?;
        Ok((self.cut_results(outputs, &self.result_cuts(&sizes)?), times))
    }

    /// `sizes` with the data-dependent sizes one run returned ([`Program::size_results`]),
    /// which are taken off `outputs`.
    /// (Borrowed, not copied, for the programs without any: every bucketed call passes here.)
    fn read_sizes<'s>(&self, outputs: &mut Vec<HostArray>, sizes: &'s crate::dynamic::Sizes) -> Result<Cow<'s, crate::dynamic::Sizes>, ExecError> {
        if self.size_results.is_empty() {
            return Ok(Cow::Borrowed(sizes));
        }
        let mut sizes = sizes.clone();
        crate::dynamic::take_returned_sizes(&self.name, outputs, |a| &a[..], &self.size_results, &mut sizes)?;
        Ok(Cow::Owned(sizes))
    }

    /// One run's results cut to their real shapes (`cuts`: from [`Program::result_cuts`]).
    fn cut_results(&self, outputs: Vec<HostArray>, cuts: &[Vec<(i64, i64)>]) -> Vec<CutResult> {
        let none = Vec::new();
        outputs
            .into_iter()
            .zip(&self.results)
            .zip(cuts)
            .enumerate()
            .map(|(k, ((arr, ty), cut))| cut_result(arr, ty, self.result_layouts.get(k).unwrap_or(&none), cut))
            .collect()
    }

    /// The bytes of argument `arg` when it is a size argument: its symbol's real size.
    fn size_arg_bytes(&self, arg: usize, sizes: &crate::dynamic::Sizes) -> Result<Option<[u8; 8]>, ExecError> {
        let Some((sym, _)) = self.size_args.iter().find(|(_, a)| *a == arg) else { return Ok(None) };
        let n = sizes.get(sym).ok_or_else(|| ExecError::BadInput(format!("{}: no size for symbol `{sym}`", self.name)))?;
        Ok(Some(n.to_le_bytes()))
    }

    /// Whether argument `arg`, given as `bytes` of real shape `dims`, must be padded to its
    /// bucket's shape; an error when it does not fit the bucket.
    fn needs_padding(&self, arg: usize, bytes: &[u8], dims: &[i64]) -> Result<bool, ExecError> {
        let spec = &self.args[arg];
        let padded = spec.ty.static_dims().unwrap_or_default();
        if dims == padded.as_slice() {
            return Ok(false);
        }
        let real: i64 = dims.iter().product();
        if dims.len() != padded.len() || dims.iter().zip(&padded).any(|(d, p)| d > p || *d < 0) || bytes.len() != real as usize * spec.ty.dtype.size_bytes() {
            return Err(ExecError::BadInput(format!("{}: input `{}` of shape {dims:?} does not fit the bucket's {}", self.name, spec.name, spec.ty)));
        }
        Ok(true)
    }

    /// Copies argument `arg`'s real-shaped `bytes` into the corner of `dst`, its bucket-shaped
    /// buffer (the rest is left as it is: the program masks it).
    fn pad_into(&self, arg: usize, bytes: &[u8], dims: &[i64], dst: &mut [u8]) {
        let ty = &self.args[arg].ty;
        let padded = ty.static_dims().unwrap_or_default();
        crate::boxes::copy_box_to(bytes, dims, dst, &padded, &vec![0; dims.len()], dims, ty.dtype.size_bytes());
    }

    /// Runs a bucketed per-rank program: `per_rank[r]` holds rank r's value of every argument
    /// of `main` but the size arguments, each as dense bytes of its real shape. Each is padded
    /// to the bucket, the real sizes are added from `sizes`, all ranks run (as in
    /// [`Program::run_ranks`]) and every rank's results are cut to their real shapes.
    pub fn run_ranks_bucketed(&self, per_rank: &[Vec<(&[u8], &[i64])>], sizes: &crate::dynamic::Sizes) -> Result<Vec<Vec<CutResult>>, ExecError> {
        let given = self.args.len() - self.size_args.len();
        let mut owned: Vec<Vec<std::borrow::Cow<'_, [u8]>>> = Vec::with_capacity(per_rank.len());
        for (r, inputs) in per_rank.iter().enumerate() {
            if inputs.len() != given {
                return Err(ExecError::BadInput(format!("{}: rank {r}: the program takes {given} argument(s), got {}", self.name, inputs.len())));
            }
            let mut next = inputs.iter();
            let mut row = Vec::with_capacity(self.args.len());
            for arg in 0..self.args.len() {
                if let Some(bytes) = self.size_arg_bytes(arg, sizes)? {
                    row.push(std::borrow::Cow::Owned(bytes.to_vec()));
                    continue;
                }
                let &(bytes, dims) = next.next().expect("counted above");
                if self.needs_padding(arg, bytes, dims)? {
                    let mut buf = vec![0u8; self.args[arg].bytes];
                    self.pad_into(arg, bytes, dims, &mut buf);
                    row.push(std::borrow::Cow::Owned(buf));
                } else {
                    row.push(std::borrow::Cow::Borrowed(bytes));
                }
            }
            owned.push(row);
        }
        let views: Vec<Vec<&[u8]>> = owned.iter().map(|row| row.iter().map(|c| c.as_ref()).collect()).collect();
        let outputs = self.run_ranks(&views)?;
        let cuts = self.result_cuts(sizes)?;
        Ok(outputs.into_iter().map(|outs| self.cut_results(outs, &cuts)).collect())
    }
}

/// One padded result cut to its real shape (`cut`: its factors as (padded, valid) pairs).
fn cut_result(arr: HostArray, ty: &TensorType, layout: &tpuc_passes::specialize::Layout, cut: &[(i64, i64)]) -> CutResult {
    let padded = ty.static_dims().unwrap_or_default();
    if cut.iter().all(|&(p, v)| p == v) {
        return CutResult { bytes: arr, dims: padded };
    }
    let dims = crate::dynamic::real_dims(layout, &padded, cut);
    if valid_part_is_prefix(cut) {
        return CutResult { bytes: arr, dims };
    }
    let fdims: Vec<i64> = cut.iter().map(|&(p, _)| p).collect();
    let region: Vec<i64> = cut.iter().map(|&(_, v)| v).collect();
    CutResult { bytes: HostArray::from(crate::boxes::gather_box(&arr, &fdims, &region, ty.dtype.size_bytes())), dims }
}

/// Whether the valid box of a padded row-major array (its factors as (padded, valid) pairs)
/// is a prefix of its bytes: every factor before the first cut one has one element and every
/// factor after it is whole.
pub(super) fn valid_part_is_prefix(cut: &[(i64, i64)]) -> bool {
    match cut.iter().position(|&(p, v)| p != v) {
        None => true,
        Some(first) => cut[..first].iter().all(|&(p, _)| p == 1) && cut[first + 1..].iter().all(|&(p, v)| p == v),
    }
}
