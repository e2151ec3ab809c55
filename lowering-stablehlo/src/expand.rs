//! Expansions of the high-level ops into plain StableHLO: softmax / log_softmax, erf, gelu,
//! layer_norm and attention.
//!
//! - softmax subtracts the row max before `exp` and computes in the input dtype.
//! - erf: f32 uses XLA's rational approximation `x·P(x²)/Q(x²)` on x clamped to ±3.7439…
//!   (erfinv(1 - 2⁻²³)) and returns sign(x) from |x| ≥ 3.8325… (erfinv(1 - 2⁻²⁴), where erf
//!   rounds to ±1); f16/bf16/f8 are computed in f32; f64
//!   uses Cephes' pair: `x·T(x²)/U(x²)` for |x| < 1 and `1 - erfc(x)` above, with
//!   `erfc(x) = exp(-x²)·P(|x|)/Q(|x|)` (|x| < 8) or `exp(-x²)·R(|x|)/S(|x|)`.
//! - gelu and layer_norm compute in f32 for 8- and 16-bit floats (as PyTorch does), then convert
//!   back; layer_norm uses the biased variance.
//! - attention: `softmax(q·kᵀ·scale + mask)·v` with the causal mask from two iotas, in the form
//!   XLA CPU runs fastest (measured on the GPT-2 block; XLA CPU fuses a matmul with following
//!   elementwise ops and reductions only when they are arithmetic, not `select`): the scale on
//!   q (the smaller tensor, and the multiply joins the head-split copy q already gets), masks
//!   as additive `0 / -inf` biases so the scores matmul, mask, row max and `exp` become one
//!   fused kernel, and the softmax division after the second matmul (`(e·v) / Σe`, one divide
//!   per output element instead of per score).

// Coefficients keep the digits they were published with (XLA, Cephes).
#![allow(clippy::excessive_precision)]

use crate::emitter::{iota_list, Emitter, Ty, V};
use crate::literal::Lit;
use crate::{EmitError, ErfLowering};
use smallvec::SmallVec;
use tpuc_ir::DType;

/// XLA's f32 erf (ErfImpl32): numerator x·α(x²), denominator β(x²), highest degree first.
const ERF32_ALPHA: [f64; 5] = [
    0.00022905065861350646,
    0.0034082910107109506,
    0.050955695062380861,
    0.18520832239976145,
    1.128379143519084,
];
const ERF32_BETA: [f64; 7] = [
    -1.1791602954361697e-7,
    0.000023547966471313185,
    0.0010179625278914885,
    0.014070470171167667,
    0.11098505178285362,
    0.49746925110067538,
    1.0,
];
/// erfinv(1 - 2⁻²³): erf of anything larger rounds to ±1 in f32.
const ERF32_CLAMP: f64 = 3.7439211627767994;
/// erfinv(1 - 2⁻²⁴): from here on erf(x) rounds to ±1 in f32.
const ERF32_ONE: f64 = 3.832506856900711;

// Cephes' f64 erf / erfc coefficients (highest degree first).
const ERF64_T: [f64; 5] = [
    9.60497373987051638749E0,
    9.00260197203842689217E1,
    2.23200534594684319226E3,
    7.00332514112805075473E3,
    5.55923013010394962768E4,
];
const ERF64_U: [f64; 6] = [
    1.00000000000000000000E0,
    3.35617141647503099647E1,
    5.21357949780152679795E2,
    4.59432382970980127987E3,
    2.26290000613890934246E4,
    4.92673942608635921086E4,
];
const ERFC64_P: [f64; 9] = [
    2.46196981473530512524E-10,
    5.64189564831068821977E-1,
    7.46321056442269912687E0,
    4.86371970985681366614E1,
    1.96520832956077098242E2,
    5.26445194995477358631E2,
    9.34528527171957607540E2,
    1.02755188689515710272E3,
    5.57535335369399327526E2,
];
const ERFC64_Q: [f64; 9] = [
    1.00000000000000000000E0,
    1.32281951154744992508E1,
    8.67072140885989742329E1,
    3.54937778887819891062E2,
    9.75708501743205489753E2,
    1.82390916687909736289E3,
    2.24633760818710981792E3,
    1.65666309194161350182E3,
    5.57535340817727675546E2,
];
const ERFC64_R: [f64; 6] = [
    5.64189583547755073984E-1,
    1.27536670759978104416E0,
    5.01905042251180477414E0,
    6.16021097993053585195E0,
    7.40974269950448939160E0,
    2.97886665372100240670E0,
];
const ERFC64_S: [f64; 7] = [
    1.00000000000000000000E0,
    2.26052863220117276590E0,
    9.39603524938001434673E0,
    1.20489539808096656605E1,
    1.70814450747565897222E1,
    9.60896809063285878198E0,
    3.36907645100081516050E0,
];
/// Below exp(-MAXLOG) an f64 is zero.
const MAXLOG64: f64 = 7.09782712893383996843E2;

/// The dtype to compute in: f32 for floats narrower than f32.
fn compute_dtype(dt: DType) -> DType {
    match dt {
        DType::F16 | DType::BF16 | DType::F8E4M3FN | DType::F8E5M2 => DType::F32,
        d => d,
    }
}

impl Emitter<'_> {
    fn need_real_float(&self, ty: &Ty) -> Result<(), EmitError> {
        if ty.dt.is_float() {
            Ok(())
        } else {
            Err(self.unsupported(format!(
                "needs a real floating-point type, got {}",
                ty.dt.name()
            )))
        }
    }

    /// `c[0]·x^(n-1) + ... + c[n-1]` by Horner's rule, with splat constants of `ty`.
    fn poly(&mut self, x: V, coeffs: &[f64], ty: &Ty) -> V {
        let mut p = self.splat(ty, Lit::F(coeffs[0]));
        for &c in &coeffs[1..] {
            let px = self.binary("multiply", p, x, ty);
            let k = self.splat(ty, Lit::F(c));
            p = self.binary("add", px, k, ty);
        }
        p
    }

    fn mul_const(&mut self, x: V, c: f64, ty: &Ty) -> V {
        let k = self.splat(ty, Lit::F(c));
        self.binary("multiply", x, k, ty)
    }

    /// `chlo.<op>` on `xs` (all of type `ty`), which XLA expands itself: the special functions
    /// (lgamma, digamma, polygamma, zeta, erfc, erf_inv, bessel_i1e), the inverse hyperbolic
    /// functions and next_after. f8 operands go through f32.
    pub fn chlo(&mut self, op: &str, xs: &[V], ty: &Ty) -> Result<V, EmitError> {
        self.need_real_float(ty)?;
        let ct = ty.with_dt(if matches!(ty.dt, DType::F8E4M3FN | DType::F8E5M2) { DType::F32 } else { ty.dt });
        let xc: Vec<V> = xs.iter().map(|&x| self.convert(x, ty, ct.dt)).collect();
        let r = self.def();
        self.s("chlo.");
        self.s(op);
        self.s(" ");
        for (i, &x) in xc.iter().enumerate() {
            if i > 0 {
                self.s(", ");
            }
            self.val(x);
        }
        self.s(" : ");
        for i in 0..xc.len() {
            if i > 0 {
                self.s(", ");
            }
            self.ty(&ct);
        }
        self.s(" -> ");
        self.ty(&ct);
        self.end();
        Ok(self.convert(r, &ct, ty.dt))
    }

    pub fn erf(&mut self, x: V, ty: &Ty) -> Result<V, EmitError> {
        self.need_real_float(ty)?;
        if self.opts.erf == ErfLowering::Chlo {
            // CHLO's legalization handles f16, bf16, f32 and f64; f8 goes through f32.
            let ct = ty.with_dt(if matches!(ty.dt, DType::F8E4M3FN | DType::F8E5M2) {
                DType::F32
            } else {
                ty.dt
            });
            let xc = self.convert(x, ty, ct.dt);
            let r = self.def();
            self.s("chlo.erf ");
            self.val(xc);
            self.s(" : ");
            self.ty(&ct);
            self.s(" -> ");
            self.ty(&ct);
            self.end();
            return Ok(self.convert(r, &ct, ty.dt));
        }
        if ty.dt == DType::F64 {
            return Ok(self.erf_f64(x, ty));
        }
        let ct = ty.with_dt(DType::F32);
        let xc = self.convert(x, ty, DType::F32);
        let r = self.erf_f32(xc, &ct);
        Ok(self.convert(r, &ct, ty.dt))
    }

    fn erf_f32(&mut self, x: V, ty: &Ty) -> V {
        let s = Ty::scalar(ty.dt);
        let lo = self.splat(&s, Lit::F(-ERF32_CLAMP));
        let hi = self.splat(&s, Lit::F(ERF32_CLAMP));
        let xc = self.clamp(lo, x, hi, ty);
        let x2 = self.binary("multiply", xc, xc, ty);
        let p = self.poly(x2, &ERF32_ALPHA, ty);
        let num = self.binary("multiply", xc, p, ty);
        let den = self.poly(x2, &ERF32_BETA, ty);
        let r = self.binary("divide", num, den, ty);
        // The rational function misses ±1 at the clamp by an ulp; from erfinv(1 - 2⁻²⁴) on,
        // erf rounds to ±1 (and erf(±inf) must be exactly ±1).
        let ax = self.unary("abs", x, ty);
        let t = self.splat(ty, Lit::F(ERF32_ONE));
        let big = self.compare("GE", ax, t, ty);
        let sign = self.unary("sign", x, ty);
        self.select(big, sign, r, ty)
    }

    fn erf_f64(&mut self, x: V, ty: &Ty) -> V {
        let ax = self.unary("abs", x, ty);
        let one = self.splat(ty, Lit::F(1.0));
        let small = self.compare("LT", ax, one, ty);
        // |x| < 1: x·T(x²)/U(x²)
        let z = self.binary("multiply", x, x, ty);
        let t = self.poly(z, &ERF64_T, ty);
        let xt = self.binary("multiply", x, t, ty);
        let u = self.poly(z, &ERF64_U, ty);
        let erf_small = self.binary("divide", xt, u, ty);
        // otherwise 1 - erfc(x)
        let nz = self.unary("negate", z, ty);
        let ez = self.unary("exponential", nz, ty);
        let p = self.poly(ax, &ERFC64_P, ty);
        let q = self.poly(ax, &ERFC64_Q, ty);
        let pq = self.binary("divide", p, q, ty);
        let r = self.poly(ax, &ERFC64_R, ty);
        let s = self.poly(ax, &ERFC64_S, ty);
        let rs = self.binary("divide", r, s, ty);
        let eight = self.splat(ty, Lit::F(8.0));
        let lt8 = self.compare("LT", ax, eight, ty);
        let ratio = self.select(lt8, pq, rs, ty);
        let y = self.binary("multiply", ez, ratio, ty);
        let minus_maxlog = self.splat(ty, Lit::F(-MAXLOG64));
        let under = self.compare("LT", nz, minus_maxlog, ty);
        let zero = self.splat(ty, Lit::F(0.0));
        let y = self.select(under, zero, y, ty);
        let two = self.splat(ty, Lit::F(2.0));
        let two_minus = self.binary("subtract", two, y, ty);
        let neg = self.compare("LT", x, zero, ty);
        let erfc = self.select(neg, two_minus, y, ty);
        let erf_big = self.binary("subtract", one, erfc, ty);
        self.select(small, erf_small, erf_big, ty)
    }

    /// softmax (or log_softmax) along `dim`, in the input dtype.
    pub fn softmax(&mut self, x: V, ty: &Ty, dim: i64, log: bool) -> V {
        let (shifted, e, sum) = self.softmax_parts(x, ty, dim);
        let rt = ty.without(&[dim]);
        let keep = keep_dims(ty, dim);
        if log {
            let ls = self.unary("log", sum, &rt);
            let lsb = self.broadcast_in_dim(ls, &rt, &keep, ty);
            self.binary("subtract", shifted, lsb, ty)
        } else {
            let sb = self.broadcast_in_dim(sum, &rt, &keep, ty);
            self.binary("divide", e, sb, ty)
        }
    }

    /// The unnormalized parts of a softmax along `dim`: `x - max`, `e = exp(x - max)` and
    /// `Σ e` (of type `ty` without `dim`).
    fn softmax_parts(&mut self, x: V, ty: &Ty, dim: i64) -> (V, V, V) {
        let rt = ty.without(&[dim]);
        let keep = keep_dims(ty, dim);
        let s = Ty::scalar(ty.dt);
        let lowest = self.splat(&s, Lit::Lowest);
        let mx = self.reduce_applies(x, ty, lowest, "maximum", &[dim], &rt);
        let mxb = self.broadcast_in_dim(mx, &rt, &keep, ty);
        let shifted = self.binary("subtract", x, mxb, ty);
        let e = self.unary("exponential", shifted, ty);
        let zero = self.splat(&s, Lit::I(0));
        let sum = self.reduce_applies(e, ty, zero, "add", &[dim], &rt);
        (shifted, e, sum)
    }

    /// gelu: 0.5·x·(1 + erf(x/√2)), or with `tanh`: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
    pub fn gelu(&mut self, x: V, ty: &Ty, tanh: bool) -> Result<V, EmitError> {
        self.need_real_float(ty)?;
        let ct = ty.with_dt(compute_dtype(ty.dt));
        let xc = self.convert(x, ty, ct.dt);
        let half = self.mul_const(xc, 0.5, &ct);
        let one = self.splat(&ct, Lit::F(1.0));
        let g = if tanh {
            let x2 = self.binary("multiply", xc, xc, &ct);
            let x3 = self.binary("multiply", x2, xc, &ct);
            let kx3 = self.mul_const(x3, 0.044715, &ct);
            let inner = self.binary("add", xc, kx3, &ct);
            let u = self.mul_const(inner, (2.0 / std::f64::consts::PI).sqrt(), &ct);
            self.unary("tanh", u, &ct)
        } else {
            let t = self.mul_const(xc, std::f64::consts::FRAC_1_SQRT_2, &ct);
            self.erf(t, &ct)?
        };
        let opg = self.binary("add", g, one, &ct);
        let r = self.binary("multiply", half, opg, &ct);
        Ok(self.convert(r, &ct, ty.dt))
    }

    /// Normalizes over the trailing `n` dims: ((x - mean)·rstd, mean, rstd), the statistics
    /// with the normalized dims kept as 1; biased variance.
    pub fn layer_norm(
        &mut self,
        x: V,
        ty: &Ty,
        n: usize,
        eps: f64,
    ) -> Result<(V, V, V), EmitError> {
        self.need_real_float(ty)?;
        let r = ty.rank();
        let k = r - n;
        let ct = ty.with_dt(compute_dtype(ty.dt));
        let red: SmallVec<[i64; 6]> = (k as i64..r as i64).collect();
        let keep = iota_list(k);
        let rt = Ty::new(ct.dt, &ty.dims[..k]);
        let count: i64 = ty.dims[k..].iter().product();
        let s = Ty::scalar(ct.dt);
        let xc = self.convert(x, ty, ct.dt);
        let zero = self.splat(&s, Lit::I(0));
        let sum = self.reduce_applies(xc, &ct, zero, "add", &red, &rt);
        let nn = self.splat(&rt, Lit::F(count as f64));
        let mean = self.binary("divide", sum, nn, &rt);
        let meanb = self.broadcast_in_dim(mean, &rt, &keep, &ct);
        let xm = self.binary("subtract", xc, meanb, &ct);
        let sq = self.binary("multiply", xm, xm, &ct);
        let zero2 = self.splat(&s, Lit::I(0));
        let sqs = self.reduce_applies(sq, &ct, zero2, "add", &red, &rt);
        let var = self.binary("divide", sqs, nn, &rt);
        let e = self.splat(&rt, Lit::F(eps));
        let ve = self.binary("add", var, e, &rt);
        let rstd = self.unary("rsqrt", ve, &rt);
        let rstdb = self.broadcast_in_dim(rstd, &rt, &keep, &ct);
        let y = self.binary("multiply", xm, rstdb, &ct);
        let mut stats = rt.clone();
        stats.dims.extend(std::iter::repeat_n(1, n));
        let mean_s = self.reshape(mean, &rt, &stats);
        let rstd_s = self.reshape(rstd, &rt, &stats);
        let y = self.convert(y, &ct, ty.dt);
        let mean_s = self.convert(mean_s, &stats, ty.dt);
        let rstd_s = self.convert(rstd_s, &stats, ty.dt);
        Ok((y, mean_s, rstd_s))
    }

    /// Broadcasts `x` to `to` NumPy-style (trailing alignment).
    fn broadcast_trailing(&mut self, x: V, ty: &Ty, to: &Ty) -> Result<V, EmitError> {
        let (r, rx) = (to.rank(), ty.rank());
        if rx > r {
            return Err(self.unsupported(format!("mask of rank {rx} for scores of rank {r}")));
        }
        let off = r - rx;
        for (i, &d) in ty.dims.iter().enumerate() {
            if d != 1 && d != to.dims[off + i] {
                return Err(self.unsupported(format!(
                    "mask dim {i} of size {d} does not broadcast to {}",
                    to.dims[off + i]
                )));
            }
        }
        let dims: SmallVec<[i64; 6]> = (off as i64..r as i64).collect();
        Ok(self.broadcast_in_dim(x, ty, &dims, &to.with_dt(ty.dt)))
    }

    /// softmax(q·kᵀ·scale + bias) · v, written for XLA CPU (see the module header): the scale
    /// multiplies q when q is no larger than the scores, masks are additive `0 / -inf` biases
    /// (PyTorch's own math path does the same), and the softmax division happens after the
    /// second matmul, on the `[.., L, Ev]` output instead of the `[.., L, S]` weights. Both
    /// matmuls carry `precision` (the op's, from the precision policy).
    pub fn attention(
        &mut self,
        (q, k, v): (V, V, V),
        (tq, tk, tv): (&Ty, &Ty, &Ty),
        mask: Option<(V, Ty)>,
        (scale, causal): (f64, bool),
        precision: Option<&str>,
    ) -> Result<V, EmitError> {
        self.need_real_float(tq)?;
        let r = tq.rank();
        let nb = r - 2;
        // Several batch dims ([B, H, L, E]) as one ([B·H, L, E]): XLA CPU runs a batched
        // matmul with one batch dim (and the head split feeding it) much faster than with two.
        // Measured (jaxlib 0.10.2, 2 cores, shuffled multi-process medians) on the GPT-2 block
        // written by hand: 1.040 → 0.967 of torch_xla's time. Reshapes of the operands and the
        // result only; the matmuls, softmax and their sums are the same.
        if nb >= 2 && mask.is_none() {
            let flat = |t: &Ty| {
                let b: i64 = t.dims[..nb].iter().product();
                Ty::new(t.dt, &[b, t.dims[nb], t.dims[nb + 1]])
            };
            let (fq, fk, fv) = (flat(tq), flat(tk), flat(tv));
            let q3 = self.reshape(q, tq, &fq);
            let k3 = self.reshape(k, tk, &fk);
            let v3 = self.reshape(v, tv, &fv);
            let o3 = self.attention((q3, k3, v3), (&fq, &fk, &fv), None, (scale, causal), precision)?;
            let mut ot = tq.clone();
            ot.dims[r - 1] = tv.dims[r - 1];
            let mut fo = fq.clone();
            fo.dims[2] = tv.dims[r - 1];
            return Ok(self.reshape(o3, &fo, &ot));
        }
        let batch = iota_list(nb);
        let (l, s_len) = (tq.dims[r - 2], tk.dims[r - 2]);
        let mut st = tq.clone();
        st.dims[r - 1] = s_len;
        let last = [r as i64 - 1];
        // The scale on the smaller of q [.., L, E] and the scores [.., L, S]: q·(s·k) and
        // s·(q·k) are the same product up to rounding (exact for powers of two, 1/√64 = 1/8).
        let scale_q = scale != 1.0 && tq.num_elements() <= st.num_elements();
        let q = if scale_q { self.mul_const(q, scale, tq) } else { q };
        let mut scores = self.dot_general(q, k, (tq, tk), (&batch, &batch), (&last, &last), precision, &st);
        if scale != 1.0 && !scale_q {
            scores = self.mul_const(scores, scale, &st);
        }
        if causal {
            // bias[i, j] = 0 where j <= i, else -inf: one [L, S] tensor broadcast over the batch.
            let it = Ty::new(DType::I64, &[l, s_len]);
            let row = self.iota(0, &it);
            let col = self.iota(1, &it);
            let keep = self.compare("GE", row, col, &it);
            let bias = self.mask_bias(keep, &it.with_dt(st.dt));
            let bb = self.broadcast_in_dim(bias, &it.with_dt(st.dt), &[nb as i64, nb as i64 + 1], &st);
            scores = self.binary("add", scores, bb, &st);
        }
        if let Some((mv, mt)) = mask {
            let (mv, mt) = if mt.dt.is_bool() {
                let bt = mt.with_dt(st.dt);
                (self.mask_bias(mv, &bt), bt)
            } else {
                (mv, mt)
            };
            let mb = self.broadcast_trailing(mv, &mt, &st)?;
            scores = self.binary("add", scores, mb, &st);
        }
        // softmax without the division: e = exp(scores - max), out = (e·v) / Σe.
        let dim = r as i64 - 1;
        let (_, e, sum) = self.softmax_parts(scores, &st, dim);
        let rt = st.without(&[dim]);
        let mut ot = tq.clone();
        ot.dims[r - 1] = tv.dims[r - 1];
        let ev = self.dot_general(e, v, (&st, tv), (&batch, &batch), (&last, &[nb as i64]), precision, &ot);
        let sb = self.broadcast_in_dim(sum, &rt, &keep_dims(&ot, dim), &ot);
        Ok(self.binary("divide", ev, sb, &ot))
    }

    /// `select(keep, 0, -inf)` of type `ty` (the additive form of a boolean mask).
    fn mask_bias(&mut self, keep: V, ty: &Ty) -> V {
        let zero = self.splat(ty, Lit::F(0.0));
        let ninf = self.splat(ty, Lit::Lowest);
        self.select(keep, zero, ninf, ty)
    }
}

/// Every dim of `ty` but `dim`, in order: how a reduction over `dim` broadcasts back.
fn keep_dims(ty: &Ty, dim: i64) -> SmallVec<[i64; 6]> {
    (0..ty.rank() as i64).filter(|&i| i != dim).collect()
}
