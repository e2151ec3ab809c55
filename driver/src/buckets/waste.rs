//! [`Waste`]: the padding statistics reported for a plan, for sizes uniform over the range or
//! under a histogram.

use super::weights::Histogram;
use super::WORST_ABOVE;
use serde::Serialize;

/// Padding waste of a plan, as fractions in [0, 1]; (bucket − n)/bucket is the share of a padded
/// input of size n that is padding.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Waste {
    /// The largest (bucket − n)/bucket over the sizes.
    pub worst: f64,
    /// The same over sizes above [`WORST_ABOVE`] (`None` when there are none).
    pub worst_above_256: Option<f64>,
    /// The mean of (bucket − n)/bucket over the sizes.
    pub mean: f64,
    /// Σ(bucket − n) / Σ bucket: the share of all padded elements that is padding.
    pub tokens: f64,
}

impl Waste {
    /// For sizes uniform over `[lo, hi]`.
    pub fn uniform(buckets: &[i64], lo: i64) -> Waste {
        let mut prev = lo - 1;
        let (mut worst, mut above): (f64, Option<f64>) = (0.0, None);
        let (mut ratio_sum, mut pad, mut padded, mut sizes) = (0.0f64, 0u128, 0u128, 0u128);
        for &b in buckets {
            let k = (b - prev) as u128; // sizes prev+1 ..= b
            worst = worst.max((b - prev - 1) as f64 / b as f64);
            let first_above = (prev + 1).max(WORST_ABOVE + 1);
            if first_above <= b {
                let r = (b - first_above) as f64 / b as f64;
                above = Some(above.map_or(r, |a| a.max(r)));
            }
            let seg_pad = k * (k - 1) / 2;
            ratio_sum += seg_pad as f64 / b as f64;
            pad += seg_pad;
            padded += k * b as u128;
            sizes += k;
            prev = b;
        }
        Waste { worst, worst_above_256: above, mean: ratio_sum / sizes as f64, tokens: pad as f64 / padded as f64 }
    }

    /// Under a histogram of sizes (every observed size must be served by `buckets`).
    pub fn histogram(buckets: &[i64], hist: &Histogram) -> Waste {
        let (mut worst, mut above): (f64, Option<f64>) = (0.0, None);
        let (mut ratio_sum, mut pad, mut padded, mut total) = (0.0f64, 0u128, 0u128, 0u128);
        for &(n, c) in hist.entries() {
            let b = buckets[buckets.partition_point(|&b| b < n)];
            let r = (b - n) as f64 / b as f64;
            worst = worst.max(r);
            if n > WORST_ABOVE {
                above = Some(above.map_or(r, |a| a.max(r)));
            }
            ratio_sum += c as f64 * r;
            pad += c as u128 * (b - n) as u128;
            padded += c as u128 * b as u128;
            total += c as u128;
        }
        Waste { worst, worst_above_256: above, mean: ratio_sum / total as f64, tokens: pad as f64 / padded as f64 }
    }
}
