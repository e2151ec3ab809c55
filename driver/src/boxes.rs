//! Copies of boxes (rectangular sub-arrays) between row-major arrays of bytes: padding an input
//! into its bucket, cutting a result back to its real size, splitting a tensor into shards and
//! assembling shards. Each copy moves whole runs: the innermost dims both arrays hold whole are
//! merged into one `copy_from_slice` per row.

/// Copies the box `[0, region)` of a row-major array of shape `src_dims` to
/// `[dst_start, dst_start + region)` of one of shape `dst_dims`.
pub fn copy_box_to(src: &[u8], src_dims: &[i64], dst: &mut [u8], dst_dims: &[i64], dst_start: &[i64], region: &[i64], esz: usize) {
    box_copy(src, src_dims, &vec![0; region.len()], dst, dst_dims, dst_start, region, esz)
}

/// Copies the box `[src_start, src_start + region)` of a row-major array of shape `src_dims`
/// to `[0, region)` of one of shape `dst_dims` (both large enough in every dim).
pub fn copy_box(src: &[u8], src_dims: &[i64], src_start: &[i64], dst: &mut [u8], dst_dims: &[i64], region: &[i64], esz: usize) {
    box_copy(src, src_dims, src_start, dst, dst_dims, &vec![0; region.len()], region, esz)
}

#[allow(clippy::too_many_arguments)]
fn box_copy(src: &[u8], src_dims: &[i64], src_start: &[i64], dst: &mut [u8], dst_dims: &[i64], dst_start: &[i64], region: &[i64], esz: usize) {
    box_runs(src_dims, src_start, dst_dims, dst_start, region, esz, |so, d_o, run| {
        dst[d_o..d_o + run].copy_from_slice(&src[so..so + run]);
    });
}

/// The box `[0, region)` of a row-major array of shape `src_dims`, as a dense array of shape
/// `region` (written once, in order: no zeroing first).
pub fn gather_box(src: &[u8], src_dims: &[i64], region: &[i64], esz: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(region.iter().product::<i64>().max(0) as usize * esz);
    let zeros = vec![0; region.len()];
    box_runs(src_dims, &zeros, region, &zeros, region, esz, |so, _, run| out.extend_from_slice(&src[so..so + run]));
    out
}

/// Calls `copy(src_offset, dst_offset, bytes)` for each contiguous run of the box `region`
/// at `src_start` of a row-major array of shape `src_dims` and at `dst_start` of one of
/// shape `dst_dims`, in row-major order of the box.
fn box_runs(src_dims: &[i64], src_start: &[i64], dst_dims: &[i64], dst_start: &[i64], region: &[i64], esz: usize, mut copy: impl FnMut(usize, usize, usize)) {
    let rank = region.len();
    if region.contains(&0) {
        return;
    }
    if rank == 0 {
        copy(0, 0, esz);
        return;
    }
    let strides = |dims: &[i64]| -> Vec<usize> {
        let mut s = vec![esz; rank];
        for i in (0..rank.saturating_sub(1)).rev() {
            s[i] = s[i + 1] * dims[i + 1] as usize;
        }
        s
    };
    let (ss, ds) = (strides(src_dims), strides(dst_dims));
    // Merge the innermost dims while both arrays hold them whole: one longer run per row.
    let mut inner = rank - 1;
    let mut run = region[inner] as usize * esz;
    while inner > 0 && region[inner] == src_dims[inner] && region[inner] == dst_dims[inner] && src_start[inner] == 0 && dst_start[inner] == 0 {
        inner -= 1;
        run *= region[inner] as usize;
    }
    let mut so: usize = src_start.iter().zip(&ss).map(|(&i, &s)| i as usize * s).sum();
    let mut d_o: usize = dst_start.iter().zip(&ds).map(|(&i, &s)| i as usize * s).sum();
    // Rows are the index tuples of dims 0..inner; offsets advance incrementally.
    let mut idx = vec![0i64; inner];
    loop {
        copy(so, d_o, run);
        let mut k = inner;
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            so += ss[k];
            d_o += ds[k];
            if idx[k] < region[k] {
                break;
            }
            so -= region[k] as usize * ss[k];
            d_o -= region[k] as usize * ds[k];
            idx[k] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The box copy equals an element-by-element copy, whatever dims merge into runs.
        #[test]
        fn box_copy_equals_element_copy(dims in proptest::collection::vec(1i64..5, 1..5), cut in proptest::collection::vec(0i64..5, 5), off in proptest::collection::vec(0i64..3, 5)) {
            let rank = dims.len();
            let region: Vec<i64> = (0..rank).map(|d| 1 + cut[d] % dims[d]).collect();
            let start: Vec<i64> = (0..rank).map(|d| off[d] % (dims[d] - region[d] + 1)).collect();
            let dst_dims: Vec<i64> = (0..rank).map(|d| region[d] + off[(d + 1) % 5] % 2).collect();
            let n: i64 = dims.iter().product();
            let src: Vec<u8> = (0..n as i32).flat_map(|v| v.to_le_bytes()).collect();
            let count: i64 = dst_dims.iter().product();
            let mut got = vec![0u8; count as usize * 4];
            copy_box(&src, &dims, &start, &mut got, &dst_dims, &region, 4);
            let mut want = vec![0u8; count as usize * 4];
            let total: i64 = region.iter().product();
            for flat in 0..total {
                let (mut rem, mut si, mut di) = (flat, 0i64, 0i64);
                let mut idx = vec![0i64; rank];
                for d in (0..rank).rev() {
                    idx[d] = rem % region[d];
                    rem /= region[d];
                }
                for d in 0..rank {
                    si = si * dims[d] + idx[d] + start[d];
                    di = di * dst_dims[d] + idx[d];
                }
                want[di as usize * 4..di as usize * 4 + 4].copy_from_slice(&src[si as usize * 4..si as usize * 4 + 4]);
            }
            proptest::prop_assert_eq!(got, want);
            let (zeros, sd) = (vec![0; rank], dims.clone());
            let mut dense = vec![0u8; region.iter().product::<i64>() as usize * 4];
            copy_box(&src, &sd, &zeros, &mut dense, &region, &region, 4);
            proptest::prop_assert_eq!(gather_box(&src, &dims, &region, 4), dense);
        }
    }

}
