//! Symbolic dimension expressions and the module's symbol table.
//!
//! A [`SymExpr`] is kept in a canonical form: a sum of terms, each an integer coefficient times a
//! sorted product of atoms, with like terms merged, zero terms dropped and terms sorted. Two
//! expressions that are equal as polynomials therefore compare equal with `==`, which is what
//! the verifier's shape rules rely on. Atoms are symbols (referred to by name, unique in a
//! module) and the two non-polynomial forms PyTorch produces for sizes, `floordiv(e, c)` and
//! `mod(e, c)` with a positive constant `c`.

use std::collections::BTreeMap;
use std::fmt;

/// Whether `name` can name a symbol: ASCII letters, digits and `_`, not starting with a digit,
/// and not one of the expression keywords `floordiv` and `mod`. A name holding an `x` is
/// parenthesized where it stands alone as a dimension (see [`crate::Dim`]'s printer).
pub fn is_symbol_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name != "floordiv"
        && name != "mod"
}
use std::sync::Arc;

/// One factor of a term.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Atom {
    Sym(Arc<str>),
    FloorDiv(Box<SymExpr>, i64),
    Mod(Box<SymExpr>, i64),
}

/// `coeff * atoms[0] * atoms[1] * ...`; the constant term has no atoms.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Term {
    atoms: Vec<Atom>,
    coeff: i64,
}

/// A canonical integer polynomial over symbols. Coefficient arithmetic wraps on overflow.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SymExpr {
    terms: Vec<Term>,
}

impl SymExpr {
    pub fn constant(c: i64) -> Self {
        if c == 0 {
            SymExpr { terms: Vec::new() }
        } else {
            SymExpr { terms: vec![Term { atoms: Vec::new(), coeff: c }] }
        }
    }

    pub fn symbol(name: impl Into<Arc<str>>) -> Self {
        Self::atom(Atom::Sym(name.into()))
    }

    fn atom(a: Atom) -> Self {
        SymExpr { terms: vec![Term { atoms: vec![a], coeff: 1 }] }
    }

    fn from_map(map: BTreeMap<Vec<Atom>, i64>) -> Self {
        let mut terms: Vec<Term> =
            map.into_iter().filter(|(_, c)| *c != 0).map(|(atoms, coeff)| Term { atoms, coeff }).collect();
        // Constant term last, higher-degree terms first, then by atoms.
        terms.sort_by(|a, b| {
            (a.atoms.is_empty(), std::cmp::Reverse(a.atoms.len()), &a.atoms).cmp(&(
                b.atoms.is_empty(),
                std::cmp::Reverse(b.atoms.len()),
                &b.atoms,
            ))
        });
        SymExpr { terms }
    }

    fn to_map(&self) -> BTreeMap<Vec<Atom>, i64> {
        let mut m = BTreeMap::new();
        for t in &self.terms {
            let c = m.entry(t.atoms.clone()).or_insert(0);
            *c = i64::wrapping_add(*c, t.coeff);
        }
        m
    }

    /// The value if the expression has no symbols.
    pub fn as_const(&self) -> Option<i64> {
        match self.terms.as_slice() {
            [] => Some(0),
            [t] if t.atoms.is_empty() => Some(t.coeff),
            _ => None,
        }
    }

    /// The terms: each a coefficient times a product of atoms (the constant term has none).
    pub fn terms(&self) -> impl Iterator<Item = (i64, &[Atom])> {
        self.terms.iter().map(|t| (t.coeff, t.atoms.as_slice()))
    }

    /// Whether the expression never decreases as any symbol grows (sizes are at least 1): every
    /// term but the constant has a non-negative coefficient and is a product of symbols and
    /// floor divisions of such expressions by positive divisors. A dim of such a size, padded
    /// to its value at the bucket's sizes, holds its real size; `384 - s` or `s % 8` does not.
    pub fn is_nondecreasing(&self) -> bool {
        self.terms.iter().all(|t| {
            (t.coeff >= 0 || t.atoms.is_empty())
                && t.atoms.iter().all(|a| match a {
                    Atom::Sym(_) => true,
                    Atom::FloorDiv(e, k) => *k > 0 && e.is_nondecreasing(),
                    Atom::Mod(..) => false,
                })
        })
    }

    /// The symbol name if the expression is exactly one symbol.
    pub fn as_symbol(&self) -> Option<&str> {
        match self.terms.as_slice() {
            [Term { atoms, coeff: 1 }] => match atoms.as_slice() {
                [Atom::Sym(s)] => Some(s),
                _ => None,
            },
            _ => None,
        }
    }

    pub fn add(&self, other: &SymExpr) -> SymExpr {
        let mut m = self.to_map();
        for t in &other.terms {
            let c = m.entry(t.atoms.clone()).or_insert(0);
            *c = i64::wrapping_add(*c, t.coeff);
        }
        Self::from_map(m)
    }

    pub fn neg(&self) -> SymExpr {
        SymExpr { terms: self.terms.iter().map(|t| Term { atoms: t.atoms.clone(), coeff: t.coeff.wrapping_neg() }).collect() }
    }

    pub fn sub(&self, other: &SymExpr) -> SymExpr {
        self.add(&other.neg())
    }

    pub fn mul(&self, other: &SymExpr) -> SymExpr {
        let mut m = BTreeMap::new();
        for a in &self.terms {
            for b in &other.terms {
                let mut atoms = a.atoms.clone();
                atoms.extend(b.atoms.iter().cloned());
                atoms.sort();
                let c = m.entry(atoms).or_insert(0);
                *c = i64::wrapping_add(*c, a.coeff.wrapping_mul(b.coeff));
            }
        }
        Self::from_map(m)
    }

    pub fn mul_const(&self, c: i64) -> SymExpr {
        self.mul(&SymExpr::constant(c))
    }

    /// Floor division by a positive constant.
    pub fn floordiv(&self, c: i64) -> SymExpr {
        assert!(c > 0, "floordiv by non-positive constant {c}");
        if c == 1 {
            return self.clone();
        }
        if let Some(v) = self.as_const() {
            return SymExpr::constant(v.div_euclid(c));
        }
        if self.terms.iter().all(|t| t.coeff % c == 0) {
            return SymExpr { terms: self.terms.iter().map(|t| Term { atoms: t.atoms.clone(), coeff: t.coeff / c }).collect() };
        }
        Self::atom(Atom::FloorDiv(Box::new(self.clone()), c))
    }

    /// Remainder (non-negative) of division by a positive constant.
    pub fn modulo(&self, c: i64) -> SymExpr {
        assert!(c > 0, "mod by non-positive constant {c}");
        if let Some(v) = self.as_const() {
            return SymExpr::constant(v.rem_euclid(c));
        }
        if self.terms.iter().all(|t| t.coeff % c == 0) {
            return SymExpr::constant(0);
        }
        Self::atom(Atom::Mod(Box::new(self.clone()), c))
    }

    /// Names of all symbols the expression mentions, sorted, without repetition.
    pub fn symbols(&self) -> Vec<Arc<str>> {
        let mut out = Vec::new();
        self.collect_symbols(&mut out);
        out.sort();
        out.dedup();
        out
    }

    fn collect_symbols(&self, out: &mut Vec<Arc<str>>) {
        for t in &self.terms {
            for a in &t.atoms {
                match a {
                    Atom::Sym(s) => out.push(s.clone()),
                    Atom::FloorDiv(e, _) | Atom::Mod(e, _) => e.collect_symbols(out),
                }
            }
        }
    }

    /// Evaluates the expression; `None` if `value` does not know a symbol.
    pub fn eval(&self, value: &dyn Fn(&str) -> Option<i64>) -> Option<i64> {
        let mut total: i64 = 0;
        for t in &self.terms {
            let mut p = t.coeff;
            for a in &t.atoms {
                let v = match a {
                    Atom::Sym(s) => value(s)?,
                    Atom::FloorDiv(e, c) => e.eval(value)?.div_euclid(*c),
                    Atom::Mod(e, c) => e.eval(value)?.rem_euclid(*c),
                };
                p = p.checked_mul(v)?;
            }
            total = total.checked_add(p)?;
        }
        Some(total)
    }

    /// Replaces symbols by expressions (symbols `subst` does not know stay as they are).
    pub fn substitute(&self, subst: &dyn Fn(&str) -> Option<SymExpr>) -> SymExpr {
        let mut acc = SymExpr::constant(0);
        for t in &self.terms {
            let mut p = SymExpr::constant(t.coeff);
            for a in &t.atoms {
                let f = match a {
                    Atom::Sym(s) => subst(s).unwrap_or_else(|| SymExpr::symbol(s.clone())),
                    Atom::FloorDiv(e, c) => e.substitute(subst).floordiv(*c),
                    Atom::Mod(e, c) => e.substitute(subst).modulo(*c),
                };
                p = p.mul(&f);
            }
            acc = acc.add(&p);
        }
        acc
    }

    /// True if printing needs parentheses when the expression stands alone as a dimension.
    pub fn is_atomic(&self) -> bool {
        self.as_const().is_some() || self.as_symbol().is_some()
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::Sym(s) => f.write_str(s),
            Atom::FloorDiv(e, c) => write!(f, "floordiv({e}, {c})"),
            Atom::Mod(e, c) => write!(f, "mod({e}, {c})"),
        }
    }
}

impl fmt::Display for SymExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return f.write_str("0");
        }
        for (i, t) in self.terms.iter().enumerate() {
            let (neg, mag) = if t.coeff < 0 { (true, t.coeff.unsigned_abs()) } else { (false, t.coeff as u64) };
            match (i, neg) {
                (0, true) => f.write_str("-")?,
                (0, false) => {}
                (_, true) => f.write_str(" - ")?,
                (_, false) => f.write_str(" + ")?,
            }
            if t.atoms.is_empty() {
                write!(f, "{mag}")?;
                continue;
            }
            if mag != 1 {
                write!(f, "{mag}*")?;
            }
            for (j, a) in t.atoms.iter().enumerate() {
                if j > 0 {
                    f.write_str("*")?;
                }
                write!(f, "{a}")?;
            }
        }
        Ok(())
    }
}

/// A symbolic size with its inclusive range. `max == None` means unbounded.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Symbol {
    pub name: Arc<str>,
    pub min: i64,
    pub max: Option<i64>,
}

/// The symbols of a module, in declaration order, unique by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymbolTable {
    symbols: Vec<Symbol>,
}

impl SymbolTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a symbol, or narrows the range of an existing one to the intersection.
    pub fn declare(&mut self, name: &str, min: i64, max: Option<i64>) -> Arc<str> {
        if let Some(s) = self.symbols.iter_mut().find(|s| &*s.name == name) {
            s.min = s.min.max(min);
            s.max = match (s.max, max) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            return s.name.clone();
        }
        let name: Arc<str> = name.into();
        self.symbols.push(Symbol { name: name.clone(), min, max });
        name
    }

    pub fn get(&self, name: &str) -> Option<&Symbol> {
        self.symbols.iter().find(|s| &*s.name == name)
    }

    /// Keeps the symbols `keep` accepts, in their order.
    pub fn retain(&mut self, keep: impl Fn(&Symbol) -> bool) {
        self.symbols.retain(|s| keep(s));
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Symbol> {
        self.symbols.iter()
    }

    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    /// A conservative inclusive range of `e` given the symbols' ranges (`None` upper = unbounded).
    /// Used for bounds; exact for sums of symbols with non-negative coefficients.
    pub fn range_of(&self, e: &SymExpr) -> (i64, Option<i64>) {
        let lo = e.eval(&|s| self.get(s).map(|x| x.min)).unwrap_or(i64::MIN);
        let hi = e.eval(&|s| self.get(s).and_then(|x| x.max));
        let monotone = e.terms.iter().all(|t| t.coeff >= 0 && t.atoms.iter().all(|a| matches!(a, Atom::Sym(_))));
        if monotone {
            (lo, hi)
        } else {
            (i64::MIN, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_equality() {
        let s0 = SymExpr::symbol("s0");
        let s1 = SymExpr::symbol("s1");
        let a = s0.mul_const(2).add(&SymExpr::constant(1)).mul(&s1);
        let b = s1.add(&s1.mul(&s0).mul_const(2));
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "2*s0*s1 + s1");
        assert_eq!(s0.sub(&s0).as_const(), Some(0));
    }

    #[test]
    fn nondecreasing() {
        let s0 = SymExpr::symbol("s0");
        let s1 = SymExpr::symbol("s1");
        assert!(s0.mul(&s1).mul_const(2).add(&SymExpr::constant(-3)).is_nondecreasing());
        assert!(s0.add(&SymExpr::constant(1)).floordiv(2).is_nondecreasing());
        assert!(!SymExpr::constant(384).sub(&s0).is_nondecreasing());
        assert!(!s0.modulo(8).is_nondecreasing());
        assert!(!s1.sub(&s0).floordiv(2).is_nondecreasing());
    }

    #[test]
    fn floordiv_and_mod() {
        let s0 = SymExpr::symbol("s0");
        assert_eq!(s0.mul_const(4).floordiv(2), s0.mul_const(2));
        assert_eq!(s0.mul_const(4).modulo(2).as_const(), Some(0));
        let d = s0.add(&SymExpr::constant(1)).floordiv(2);
        assert_eq!(d.to_string(), "floordiv(s0 + 1, 2)");
        assert_eq!(d.eval(&|_| Some(6)), Some(3));
    }
}
