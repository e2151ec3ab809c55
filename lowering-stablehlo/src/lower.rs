//! One IR op → StableHLO. Primitive ops map one to one (with bool and unsigned special cases);
//! region-carrying ops go to [`crate::reduce`], high-level ops to [`crate::expand`].

use crate::emitter::{Emitter, Ty, V};
use crate::literal::Lit;
use crate::EmitError;
use smallvec::{smallvec, SmallVec};
use std::fmt::Write;
use tpuc_ir::{payload, ArgReduceKind, DType, FftType, GatherDims, GeluApproximation, OpId, Opcode, Precision};

type Results = SmallVec<[V; 3]>;


/// `default` → `DEFAULT`, ...
fn precision(p: Option<Precision>) -> Option<&'static str> {
    p.map(Precision::stablehlo)
}

impl Emitter<'_> {
    /// Lowers one op of a function body (not `return`) and names its results.
    pub fn lower_op(&mut self, op: OpId) -> Result<(), EmitError> {
        let m = self.m;
        let d = m.op(op);
        let xs: SmallVec<[V; 4]> = d.operands().iter().map(|&v| self.get(v)).collect();
        let ts: SmallVec<[Ty; 4]> = d.operands().iter().map(|&v| self.ty_of(v)).collect();
        let rt = d
            .results()
            .first()
            .map(|&r| self.ty_of(r))
            .unwrap_or_else(|| Ty::scalar(DType::F32));
        use Opcode::*;
        let results: Results = match d.opcode() {
            Constant => {
                let data = d.payload::<payload::Constant>().value;
                smallvec![self.constant(data, &rt)]
            }
            Iota => smallvec![self.iota(d.payload::<payload::Iota>().dimension, &rt)],
            BindSize => {
                return Err(self.unsupported(
                    "a data-dependent size reaches lowering unbucketed; the `specialize` pass pads it to its bound",
                ))
            }

            Abs if rt.dt.is_unsigned_int() => smallvec![xs[0]],
            Abs if rt.dt.is_complex() => {
                return Err(self.unsupported("abs of a complex tensor has a real result type"))
            }
            Floor | Ceil | RoundEven | IsFinite if ts[0].dt.is_complex() => {
                return Err(
                    self.unsupported("StableHLO defines it on real floats only, not on complex")
                )
            }
            Sign if rt.dt.is_unsigned_int() => {
                // 0 stays 0, everything else is 1.
                let zero = self.splat(&rt, Lit::I(0));
                let nz = self.compare("NE", xs[0], zero, &rt);
                smallvec![self.convert(nz, &rt.with_dt(DType::Bool), rt.dt)]
            }
            Abs | Neg | Exp | Expm1 | Log | Log1p | Sqrt | Rsqrt | Tanh | Logistic | Sin | Cos
            | Tan | Floor | Ceil | RoundEven | Sign | Not => {
                let name = match d.opcode() {
                    Abs => "abs",
                    Neg => "negate",
                    Exp => "exponential",
                    Expm1 => "exponential_minus_one",
                    Log => "log",
                    Log1p => "log_plus_one",
                    Sqrt => "sqrt",
                    Rsqrt => "rsqrt",
                    Tanh => "tanh",
                    Logistic => "logistic",
                    Sin => "sine",
                    Cos => "cosine",
                    Tan => "tan",
                    Floor => "floor",
                    Ceil => "ceil",
                    RoundEven => "round_nearest_even",
                    Sign => "sign",
                    _ => "not",
                };
                smallvec![self.unary(name, xs[0], &rt)]
            }
            IsFinite => smallvec![self.unary_to("is_finite", xs[0], &ts[0], &rt)],
            Convert => smallvec![self.convert(xs[0], &ts[0], rt.dt)],
            Erf => smallvec![self.erf(xs[0], &rt)?],
            Cholesky => smallvec![self.cholesky(xs[0], d.payload::<payload::Cholesky>().lower, &rt)],
            TriangularSolve => {
                let s = d.payload::<payload::TriangularSolve>();
                smallvec![self.triangular_solve(
                    xs[0],
                    xs[1],
                    [s.left_side, s.lower, s.unit_diagonal, s.transpose_a],
                    &ts[0],
                    &rt,
                )]
            }
            Qr => {
                let t1 = self.ty_of(d.results()[1]);
                let n = self.custom_call("Qr", &xs, &ts, &[&rt, &t1], None);
                smallvec![V::Res(n, 0), V::Res(n, 1)]
            }
            HouseholderProduct => {
                let n = self.custom_call("ProductOfElementaryHouseholderReflectors", &xs, &ts, &[&rt], None);
                smallvec![V::Res(n, 0)]
            }
            Eigh => {
                let t1 = self.ty_of(d.results()[1]);
                // lower, sort_eigenvalues, max sweeps, tolerance (XLA's Jacobi defaults).
                let lower = d.payload::<payload::Eigh>().lower;
                let cfg = format!("{},1,100,1e-6", u8::from(lower));
                let n = self.custom_call("Eigh", &xs, &ts, &[&rt, &t1], Some(&cfg));
                smallvec![V::Res(n, 0), V::Res(n, 1)]
            }
            Real => smallvec![self.unary_to("real", xs[0], &ts[0], &rt)],
            Imag => smallvec![self.unary_to("imag", xs[0], &ts[0], &rt)],
            Complex => smallvec![self.complex(xs[0], xs[1], &ts[0], &rt)],
            Fft => {
                let payload::Fft { fft_type, fft_length } = d.payload();
                let name = match fft_type {
                    FftType::Fft => "FFT",
                    FftType::Ifft => "IFFT",
                    FftType::Rfft => "RFFT",
                    FftType::Irfft => "IRFFT",
                };
                smallvec![self.fft(xs[0], name, fft_length, &ts[0], &rt)]
            }
            Erfc | ErfInv | Lgamma | Digamma | Acosh | Asinh | Atanh | BesselI1e | Polygamma | Zeta | NextAfter => {
                let name = match d.opcode() {
                    Erfc => "erfc",
                    ErfInv => "erf_inv",
                    Lgamma => "lgamma",
                    Digamma => "digamma",
                    Acosh => "acosh",
                    Asinh => "asinh",
                    Atanh => "atanh",
                    BesselI1e => "bessel_i1e",
                    Polygamma => "polygamma",
                    Zeta => "zeta",
                    _ => "next_after",
                };
                smallvec![self.chlo(name, &xs, &rt)?]
            }

            Add | Sub | Mul | Div | Rem | Pow | Max | Min | And | Or | Xor | Atan2 => {
                let name = if rt.dt.is_bool() {
                    match d.opcode() {
                        Add | Max | Or => "or",
                        Mul | Min | And => "and",
                        Xor => "xor",
                        _ => {
                            return Err(self.unsupported(
                                "arithmetic on bool tensors (convert to an integer type first)",
                            ))
                        }
                    }
                } else {
                    match d.opcode() {
                        Add => "add",
                        Sub => "subtract",
                        Mul => "multiply",
                        Div => "divide",
                        Rem => "remainder",
                        Pow => "power",
                        Max => "maximum",
                        Min => "minimum",
                        And => "and",
                        Or => "or",
                        Xor => "xor",
                        _ => "atan2",
                    }
                };
                smallvec![self.binary(name, xs[0], xs[1], &rt)]
            }
            ShiftLeft | ShiftRightArithmetic | ShiftRightLogical => {
                let name = match d.opcode() {
                    ShiftLeft => "shift_left",
                    ShiftRightArithmetic => "shift_right_arithmetic",
                    _ => "shift_right_logical",
                };
                smallvec![self.binary(name, xs[0], xs[1], &rt)]
            }
            Compare => {
                let dir = d.payload::<payload::Compare>().direction.stablehlo();
                smallvec![self.compare(dir, xs[0], xs[1], &ts[0])]
            }
            Select => smallvec![self.select(xs[0], xs[1], xs[2], &rt)],

            BroadcastInDim => smallvec![self.broadcast_in_dim(
                xs[0],
                &ts[0],
                d.payload::<payload::BroadcastInDim>().broadcast_dimensions,
                &rt
            )],
            Reshape => smallvec![self.reshape(xs[0], &ts[0], &rt)],
            Transpose => smallvec![self.transpose(xs[0], &ts[0], d.payload::<payload::Transpose>().permutation, &rt)],
            Slice => smallvec![self.slice_op(xs[0], &ts[0], d.payload(), &rt)],
            Concatenate => smallvec![self.concatenate(&xs, &ts, d.payload::<payload::Concatenate>().dimension, &rt)],
            Pad => smallvec![self.pad(xs[0], xs[1], &ts[0], d.payload(), &rt)],
            Reverse => {
                let r = self.def();
                self.s("stablehlo.reverse ");
                self.val(xs[0]);
                self.s(", dims = ");
                self.ints(d.payload::<payload::Reverse>().dimensions);
                self.s(" : ");
                self.ty(&rt);
                self.end();
                smallvec![r]
            }

            DotGeneral => {
                let dot = d.payload::<payload::DotGeneral>();
                smallvec![self.dot_general(
                    xs[0],
                    xs[1],
                    (&ts[0], &ts[1]),
                    (dot.lhs_batching_dimensions, dot.rhs_batching_dimensions),
                    (dot.lhs_contracting_dimensions, dot.rhs_contracting_dimensions),
                    precision(dot.precision),
                    &rt,
                )]
            }
            Convolution => smallvec![self.convolution(xs[0], xs[1], (&ts[0], &ts[1]), d.payload(), &rt)],
            Reduce => {
                let payload::Reduce { dimensions, kind } = d.payload();
                smallvec![self.reduce(xs[0], &ts[0], kind, dimensions, &rt)?]
            }
            AllReduce | AllGather | ReduceScatter | AllToAll => smallvec![self.collective(d, xs[0], &ts[0], &rt)?],
            CollectiveBroadcast => smallvec![self.collective_broadcast(xs[0], &ts[0], d.payload())?],
            ArgReduce => {
                let payload::ArgReduce { dimension, kind } = d.payload();
                smallvec![self.arg_reduce(xs[0], &ts[0], dimension, kind == ArgReduceKind::Argmax, &rt)?]
            }
            ReduceWindow => smallvec![self.reduce_window(xs[0], &ts[0], d.payload(), &rt)?],
            Gather => smallvec![self.gather(xs[0], xs[1], (&ts[0], &ts[1]), d.payload(), &rt)],
            Scatter => {
                smallvec![self.scatter((xs[0], xs[1], xs[2]), (&ts[0], &ts[1], &ts[2]), d.payload(), &rt)?]
            }
            SelectAndScatterAdd => {
                smallvec![self.select_and_scatter_add(xs[0], xs[1], (&ts[0], &ts[1]), d.payload())?]
            }
            Sort => {
                let payload::Sort { dimension, descending } = d.payload();
                let (v, i) = self.sort(xs[0], &ts[0], dimension, descending)?;
                smallvec![v, i]
            }
            Scan => {
                let payload::Scan { dimension, kind } = d.payload();
                smallvec![self.scan(xs[0], &ts[0], dimension, kind.into())?]
            }

            Softmax => smallvec![self.softmax(xs[0], &rt, d.payload::<payload::Softmax>().dimension, false)],
            LogSoftmax => smallvec![self.softmax(xs[0], &rt, d.payload::<payload::LogSoftmax>().dimension, true)],
            Gelu => smallvec![self.gelu(xs[0], &rt, d.payload::<payload::Gelu>().approximate == GeluApproximation::Tanh)?],
            LayerNorm => {
                let payload::LayerNorm { normalized_rank, epsilon: eps } = d.payload();
                let (y, mean, rstd) = self.layer_norm(xs[0], &rt, normalized_rank as usize, eps)?;
                smallvec![y, mean, rstd]
            }
            Attention => {
                let mask = (xs.len() > 3).then(|| (xs[3], ts[3].clone()));
                let at = d.payload::<payload::Attention>();
                smallvec![self.attention(
                    (xs[0], xs[1], xs[2]),
                    (&ts[0], &ts[1], &ts[2]),
                    mask,
                    (at.scale, at.is_causal),
                    precision(at.precision),
                )?]
            }
            Composite => self.composite(op)?,
            Return | Yield => return Err(self.unsupported("terminator outside its place")),
        };
        for (&r, &v) in d.results().iter().zip(results.iter()) {
            self.set(r, v);
        }
        Ok(())
    }

    fn slice_op(&mut self, x: V, ty: &Ty, s: payload::Slice, rt: &Ty) -> V {
        self.slice(x, ty, s.start_indices, s.limit_indices, s.strides, rt)
    }

    /// `stablehlo.slice %x [0:1, 0:3:2]`
    pub(crate) fn slice(&mut self, x: V, ty: &Ty, st: &[i64], li: &[i64], sd: &[i64], rt: &Ty) -> V {
        let r = self.def();
        self.s("stablehlo.slice ");
        self.val(x);
        self.s(" [");
        for i in 0..st.len() {
            if i > 0 {
                self.s(", ");
            }
            let _ = write!(self.out, "{}:{}", st[i], li[i]);
            if sd[i] != 1 {
                let _ = write!(self.out, ":{}", sd[i]);
            }
        }
        self.s("] : ");
        self.fn_ty(&[ty], rt);
        self.end();
        r
    }

    fn concatenate(&mut self, xs: &[V], ts: &[Ty], dim: i64, rt: &Ty) -> V {
        let r = self.def();
        self.s("stablehlo.concatenate ");
        for (i, &x) in xs.iter().enumerate() {
            if i > 0 {
                self.s(", ");
            }
            self.val(x);
        }
        let _ = write!(self.out, ", dim = {dim} : ");
        let refs: SmallVec<[&Ty; 4]> = ts.iter().collect();
        self.fn_ty(&refs, rt);
        self.end();
        r
    }

    fn pad(&mut self, x: V, value: V, ty: &Ty, p: payload::Pad, rt: &Ty) -> V {
        let r = self.def();
        self.s("stablehlo.pad ");
        self.val(x);
        self.s(", ");
        self.val(value);
        self.s(", low = ");
        self.ints(p.edge_padding_low);
        self.s(", high = ");
        self.ints(p.edge_padding_high);
        self.s(", interior = ");
        self.ints(p.interior_padding);
        self.s(" : ");
        self.fn_ty(&[ty, &Ty::scalar(ty.dt)], rt);
        self.end();
        r
    }

    /// Layout [b, f, 0, 1, ...] x [o, i, 0, 1, ...] -> [b, f, 0, 1, ...].
    fn convolution(&mut self, lhs: V, rhs: V, (tl, tr): (&Ty, &Ty), c: payload::Convolution, rt: &Ty) -> V {
        let sp = tl.rank().saturating_sub(2);
        let r = self.def();
        self.s("stablehlo.convolution(");
        self.val(lhs);
        self.s(", ");
        self.val(rhs);
        let spatial = |e: &mut Self| {
            for i in 0..sp {
                let _ = write!(e.out, ", {i}");
            }
        };
        self.s(") dim_numbers = [b, f");
        spatial(self);
        self.s("]x[o, i");
        spatial(self);
        self.s("]->[b, f");
        spatial(self);
        self.s("], window = {stride = ");
        self.ints(c.window_strides);
        self.s(", pad = [");
        let pad = c.padding;
        for i in 0..pad.len() / 2 {
            if i > 0 {
                self.s(", ");
            }
            let _ = write!(self.out, "[{}, {}]", pad[2 * i], pad[2 * i + 1]);
        }
        self.s("], lhs_dilate = ");
        self.ints(c.lhs_dilation);
        self.s(", rhs_dilate = ");
        self.ints(c.rhs_dilation);
        let _ = write!(
            self.out,
            "}} {{batch_group_count = {} : i64, feature_group_count = {} : i64",
            c.batch_group_count,
            c.feature_group_count
        );
        if let Some(p) = precision(c.precision) {
            let _ = write!(
                self.out,
                ", precision_config = [#stablehlo<precision {p}>, #stablehlo<precision {p}>]"
            );
        }
        self.s("} : ");
        self.fn_ty(&[tl, tr], rt);
        self.end();
        r
    }

    fn gather(&mut self, x: V, idx: V, (tx, ti): (&Ty, &Ty), g: payload::Gather, rt: &Ty) -> V {
        let r = self.def();
        self.s("\"stablehlo.gather\"(");
        self.val(x);
        self.s(", ");
        self.val(idx);
        self.s(") <{dimension_numbers = #stablehlo.gather<");
        let g = GatherDims::from(g);
        self.dimension_numbers(&g.lists(), g.index_vector_dim);
        self.s(">, indices_are_sorted = false, slice_sizes = ");
        self.array_i64(&g.slice_sizes);
        self.s("}> : ");
        self.fn_ty(&[tx, ti], rt);
        self.end();
        r
    }
}
