//! Parser for the sympy text torch writes for symbolic sizes.
//!
//! Two spellings occur: `srepr` form in tensor metadata (`Mul(Integer(2), Symbol('s77',
//! positive=True, integer=True))`) and `str` form in `range_constraints` keys and older
//! programs (`2*s77 + 1`, `(s77//2)`, `Mod(s77, 2)`). Both are read by one recursive-descent
//! parser into a [`SymExpr`]. Only integer polynomials with floor division and remainder by
//! positive constants are representable; anything else (`Max`, true division by a symbol, ...)
//! is an error naming the expression.
//!
//! Coefficients are kept well inside `i64` (a running bound on the sum of absolute
//! coefficients), so hostile input cannot overflow the IR's arithmetic.

use tpuc_ir::SymExpr;

/// Largest sum of absolute coefficients an expression may reach.
const BOUND: i128 = 1 << 60;
const MAX_DEPTH: usize = 64;

/// Parses `text`; `rename` maps torch symbol names to module symbol names.
pub fn parse_sym(text: &str, rename: &dyn Fn(&str) -> String) -> Result<SymExpr, String> {
    let mut p = Parser { s: text.as_bytes(), i: 0, depth: 0, rename };
    let v = p.expr()?;
    p.ws();
    if p.i != p.s.len() {
        return Err(format!("unexpected `{}` at offset {}", p.rest(), p.i));
    }
    match v {
        PVal::Expr(e, _) => Ok(e),
        _ => Err("not an integer expression".into()),
    }
}

#[derive(Debug)]
enum PVal {
    /// An expression and a bound on the sum of its absolute coefficients.
    Expr(SymExpr, i128),
    Str(String),
    Other,
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    depth: usize,
    rename: &'a dyn Fn(&str) -> String,
}

fn bounded(e: SymExpr, b: i128) -> Result<PVal, String> {
    if b > BOUND {
        return Err("coefficients too large".into());
    }
    Ok(PVal::Expr(e, b))
}

impl Parser<'_> {
    fn rest(&self) -> String {
        let end = (self.i + 20).min(self.s.len());
        String::from_utf8_lossy(self.s.get(self.i..end).unwrap_or_default()).into_owned()
    }

    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, tok: &str) -> bool {
        self.ws();
        if self.s.get(self.i..self.i + tok.len()) == Some(tok.as_bytes()) {
            self.i += tok.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, tok: &str) -> Result<(), String> {
        if self.eat(tok) {
            Ok(())
        } else {
            Err(format!("expected `{tok}` at offset {}, found `{}`", self.i, self.rest()))
        }
    }

    fn enter(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err("expression nested too deeply".into());
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<PVal, String> {
        self.enter()?;
        let mut acc = self.term()?;
        loop {
            if self.eat("+") {
                let r = self.term()?;
                acc = add(acc, r, false)?;
            } else if self.peek() == Some(b'-') {
                self.i += 1;
                let r = self.term()?;
                acc = add(acc, r, true)?;
            } else {
                break;
            }
        }
        self.depth -= 1;
        Ok(acc)
    }

    fn term(&mut self) -> Result<PVal, String> {
        let mut acc = self.unary()?;
        loop {
            if self.eat("//") {
                let r = self.unary()?;
                acc = floordiv(acc, r)?;
            } else if self.eat("**") {
                // handled in power(); a stray `**` here means `a*b**c` already consumed
                return Err("unexpected `**`".into());
            } else if self.eat("*") {
                let r = self.unary()?;
                acc = mul(acc, r)?;
            } else if self.eat("/") {
                let r = self.unary()?;
                acc = exact_div(acc, r)?;
            } else if self.eat("%") {
                let r = self.unary()?;
                acc = modulo(acc, r)?;
            } else {
                break;
            }
        }
        Ok(acc)
    }

    fn unary(&mut self) -> Result<PVal, String> {
        self.enter()?;
        let v = if self.peek() == Some(b'-') {
            self.i += 1;
            let v = self.unary()?;
            neg(v)?
        } else if self.peek() == Some(b'+') {
            self.i += 1;
            self.unary()?
        } else {
            self.power()?
        };
        self.depth -= 1;
        Ok(v)
    }

    fn power(&mut self) -> Result<PVal, String> {
        let base = self.primary()?;
        if self.eat("**") {
            let e = self.unary()?;
            return pow(base, e);
        }
        Ok(base)
    }

    fn primary(&mut self) -> Result<PVal, String> {
        match self.peek() {
            None => Err("unexpected end of expression".into()),
            Some(b'(') => {
                self.i += 1;
                let v = self.expr()?;
                self.expect(")")?;
                Ok(v)
            }
            Some(q @ (b'\'' | b'"')) => {
                self.i += 1;
                let start = self.i;
                while self.s.get(self.i).is_some_and(|&c| c != q) {
                    self.i += 1;
                }
                let text = String::from_utf8_lossy(self.s.get(start..self.i).unwrap_or_default()).into_owned();
                self.expect(if q == b'\'' { "'" } else { "\"" })?;
                Ok(PVal::Str(text))
            }
            Some(c) if c.is_ascii_digit() => {
                let start = self.i;
                while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                    self.i += 1;
                }
                let text = std::str::from_utf8(self.s.get(start..self.i).unwrap_or_default()).unwrap_or("");
                let n: i64 = text.parse().map_err(|_| format!("integer `{text}` out of range"))?;
                bounded(SymExpr::constant(n), i128::from(n))
            }
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let start = self.i;
                while self.s.get(self.i).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'.') {
                    self.i += 1;
                }
                let name = String::from_utf8_lossy(self.s.get(start..self.i).unwrap_or_default()).into_owned();
                if self.peek() == Some(b'(') {
                    self.i += 1;
                    let args = self.args()?;
                    return self.call(&name, args);
                }
                match name.as_str() {
                    "True" | "False" | "None" => Ok(PVal::Other),
                    "oo" | "int_oo" | "zoo" | "nan" => Err(format!("`{name}` is not a size")),
                    _ => {
                        let renamed = (self.rename)(&name);
                        bounded(SymExpr::symbol(renamed.as_str()), 1)
                    }
                }
            }
            Some(_) => Err(format!("unexpected `{}` at offset {}", self.rest(), self.i)),
        }
    }

    /// Call arguments up to and including `)`; keyword arguments are skipped.
    fn args(&mut self) -> Result<Vec<PVal>, String> {
        let mut out = Vec::new();
        if self.eat(")") {
            return Ok(out);
        }
        loop {
            // keyword argument `name=value`
            let save = self.i;
            self.ws();
            let start = self.i;
            while self.s.get(self.i).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
                self.i += 1;
            }
            let is_kw = self.i > start && self.peek() == Some(b'=') && self.s.get(self.i + 1) != Some(&b'=');
            if is_kw {
                self.i += 1;
                self.expr()?;
            } else {
                self.i = save;
                out.push(self.expr()?);
            }
            if self.eat(")") {
                return Ok(out);
            }
            self.expect(",")?;
        }
    }

    fn call(&mut self, name: &str, args: Vec<PVal>) -> Result<PVal, String> {
        let mut it = args.into_iter();
        let mut next = |what: &str| it.next().ok_or_else(|| format!("`{name}` needs {what}"));
        match name {
            "Symbol" => match next("a name")? {
                PVal::Str(s) => {
                    let renamed = (self.rename)(&s);
                    bounded(SymExpr::symbol(renamed.as_str()), 1)
                }
                _ => Err("Symbol needs a string name".into()),
            },
            "Integer" => next("a value"),
            "Mul" => {
                let mut acc = next("arguments")?;
                for a in it {
                    acc = mul(acc, a)?;
                }
                Ok(acc)
            }
            "Add" => {
                let mut acc = next("arguments")?;
                for a in it {
                    acc = add(acc, a, false)?;
                }
                Ok(acc)
            }
            "FloorDiv" | "floordiv" => {
                let a = next("two arguments")?;
                let b = next("two arguments")?;
                floordiv(a, b)
            }
            "CleanDiv" | "IntTrueDiv" | "ExactDiv" => {
                let a = next("two arguments")?;
                let b = next("two arguments")?;
                exact_div(a, b)
            }
            "Mod" | "PythonMod" | "mod" => {
                let a = next("two arguments")?;
                let b = next("two arguments")?;
                modulo(a, b)
            }
            "Pow" => {
                let a = next("two arguments")?;
                let b = next("two arguments")?;
                pow(a, b)
            }
            "Neg" => neg(next("an argument")?),
            _ => Err(format!("`{name}` is not supported in sizes")),
        }
    }
}

fn expr_of(v: PVal) -> Result<(SymExpr, i128), String> {
    match v {
        PVal::Expr(e, b) => Ok((e, b)),
        PVal::Str(s) => Err(format!("unexpected string `{s}`")),
        PVal::Other => Err("unexpected non-integer value".into()),
    }
}

fn add(a: PVal, b: PVal, sub: bool) -> Result<PVal, String> {
    let (a, ba) = expr_of(a)?;
    let (b, bb) = expr_of(b)?;
    let e = if sub { a.sub(&b) } else { a.add(&b) };
    bounded(e, ba + bb)
}

fn mul(a: PVal, b: PVal) -> Result<PVal, String> {
    let (a, ba) = expr_of(a)?;
    let (b, bb) = expr_of(b)?;
    let bound = ba.checked_mul(bb).ok_or("coefficients too large")?;
    if bound > BOUND {
        return Err("coefficients too large".into());
    }
    bounded(a.mul(&b), bound)
}

fn neg(a: PVal) -> Result<PVal, String> {
    let (a, ba) = expr_of(a)?;
    bounded(a.neg(), ba)
}

fn positive_const(b: &SymExpr, what: &str) -> Result<i64, String> {
    match b.as_const() {
        Some(c) if c > 0 => Ok(c),
        _ => Err(format!("{what} by `{b}` (only positive constants are supported)")),
    }
}

fn floordiv(a: PVal, b: PVal) -> Result<PVal, String> {
    let (a, ba) = expr_of(a)?;
    let (b, _) = expr_of(b)?;
    let c = positive_const(&b, "floor division")?;
    bounded(a.floordiv(c), ba.max(1))
}

fn exact_div(a: PVal, b: PVal) -> Result<PVal, String> {
    let (a, ba) = expr_of(a)?;
    let (b, _) = expr_of(b)?;
    let c = positive_const(&b, "division")?;
    // Exact only when c divides every coefficient: then floordiv folds to a polynomial.
    if a.modulo(c).as_const() == Some(0) {
        bounded(a.floordiv(c), ba.max(1))
    } else {
        Err(format!("`{a}` is not divisible by {c}"))
    }
}

fn modulo(a: PVal, b: PVal) -> Result<PVal, String> {
    let (a, ba) = expr_of(a)?;
    let (b, _) = expr_of(b)?;
    let c = positive_const(&b, "remainder")?;
    bounded(a.modulo(c), ba.max(i128::from(c)))
}

fn pow(a: PVal, b: PVal) -> Result<PVal, String> {
    let (a, ba) = expr_of(a)?;
    let (b, _) = expr_of(b)?;
    let n = match b.as_const() {
        Some(n) if (0..=16).contains(&n) => n,
        _ => return Err(format!("power `{b}` (only small non-negative integer exponents)")),
    };
    let mut acc = SymExpr::constant(1);
    let mut bound: i128 = 1;
    for _ in 0..n {
        bound = bound.checked_mul(ba).ok_or("coefficients too large")?;
        if bound > BOUND {
            return Err("coefficients too large".into());
        }
        acc = acc.mul(&a);
    }
    bounded(acc, bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> String {
        parse_sym(s, &|n| n.to_string()).map(|e| e.to_string()).unwrap_or_else(|e| format!("error: {e}"))
    }

    #[test]
    fn both_spellings() {
        assert_eq!(p("Symbol('s77', positive=True, integer=True)"), "s77");
        assert_eq!(p("Mul(Integer(2), Symbol('s69', positive=True, integer=True))"), "2*s69");
        assert_eq!(p("Add(Mul(Integer(2), Symbol('s69', integer=True)), Integer(-1))"), "2*s69 - 1");
        assert_eq!(p("s77"), "s77");
        assert_eq!(p("2*s77"), "2*s77");
        assert_eq!(p("s77 + 1"), "s77 + 1");
        assert_eq!(p("(s77//2)"), "floordiv(s77, 2)");
        assert_eq!(p("Mod(s77, 2)"), "mod(s77, 2)");
        assert_eq!(p("s0**2 - s0"), "s0*s0 - s0");
        assert_eq!(p("-s0 + 4"), "-s0 + 4");
        assert_eq!(p("FloorDiv(Mul(Integer(4), Symbol('s1')), Integer(2))"), "2*s1");
    }

    #[test]
    fn rejects() {
        assert!(p("Max(1, s0)").starts_with("error"));
        assert!(p("s0 // s1").starts_with("error"));
        assert!(p("99999999999999999999").starts_with("error"));
        assert!(p("4611686018427387904*4611686018427387904").starts_with("error"));
        assert!(p(&"(".repeat(1000)).starts_with("error"));
        assert!(p("s0 +").starts_with("error"));
    }
}
