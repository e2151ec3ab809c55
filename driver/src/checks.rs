//! The statuses a program returns for its caller to check after the run (results of kind
//! `check`, see `tpuc_frontend_fx::HostCheck`): where eager raises
//! `torch.linalg.LinAlgError` during the run, a compiled program returns the factorization's
//! `info` instead. The `torch.compile` path hands them to torch's own check; the CLI reads
//! them here.

use crate::tensor::HostTensor;
pub use tpuc_frontend_fx::HostCheck;

/// The first failed status among `outputs` (a program's results, in order), described as a
/// user would want to read it; `None` when every status is zero.
pub fn first_failure(checks: &[HostCheck], outputs: &[HostTensor]) -> Option<String> {
    for c in checks {
        let Some(t) = outputs.get(c.result) else { continue };
        let width = t.dtype.size_bytes().clamp(1, 8);
        for (k, e) in t.bytes.chunks_exact(width).enumerate() {
            if e.iter().all(|&b| b == 0) {
                continue;
            }
            // A little-endian signed integer of 1 to 8 bytes.
            let mut raw = [if e[width - 1] & 0x80 != 0 { 0xff } else { 0 }; 8];
            raw[..width].copy_from_slice(e);
            let status = i64::from_le_bytes(raw);
            let at = if c.is_matrix { String::new() } else { format!(" at batch element {k}") };
            return Some(format!(
                "{}{at}: LAPACK status {status}: the matrix is singular (or, for a Cholesky factorization, not positive-definite, or the algorithm did not converge); eager PyTorch raises torch.linalg.LinAlgError here",
                c.api
            ));
        }
    }
    None
}

/// `outputs` without the statuses.
pub fn without_statuses(checks: &[HostCheck], outputs: &[HostTensor]) -> Vec<HostTensor> {
    outputs.iter().enumerate().filter(|(i, _)| !checks.iter().any(|c| c.result == *i)).map(|(_, t)| t.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuc_ir::DType;

    fn status(dims: Vec<i64>, values: &[i32]) -> HostTensor {
        HostTensor { dtype: DType::I32, dims, bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect() }
    }

    #[test]
    fn a_nonzero_status_names_the_api_and_the_batch_element() {
        let checks = [HostCheck { result: 1, api: "linalg.inv".into(), is_matrix: false }];
        let outs = [status(vec![2], &[7, 7]), status(vec![3], &[0, 2, 0])];
        let msg = first_failure(&checks, &outs).expect("a failure");
        assert!(msg.starts_with("linalg.inv at batch element 1: LAPACK status 2:"), "{msg}");
        assert_eq!(without_statuses(&checks, &outs), vec![outs[0].clone()]);
        let fine = [status(vec![2], &[7, 7]), status(vec![3], &[0, 0, 0])];
        assert_eq!(first_failure(&checks, &fine), None);
        let neg = [HostCheck { result: 0, api: "linalg.cholesky".into(), is_matrix: true }];
        let msg = first_failure(&neg, &[status(vec![], &[-1])]).expect("a failure");
        assert!(msg.starts_with("linalg.cholesky: LAPACK status -1:"), "{msg}");
    }
}
