//! Reading the size expressions `torch.export` writes: Python's form (`2*s0 + 1`,
//! `((s0 + 1)//2)`, `Max(1, s0)`, `s0**2`) and sympy's `srepr` form
//! (`Mul(Integer(16), Symbol('s27', positive=True, integer=True))`), which newer
//! exports write.

use super::{Expr, SymError, SymId, Symbols};

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Int(i64),
    Name(String),
    Quoted(String),
    Open,
    Close,
    Comma,
    Equals,
    Plus,
    Minus,
    Star,
    Power,
    FloorDiv,
    Percent,
}

fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let two = |s: &str| chars[i..].iter().take(2).collect::<String>() == s;
        let token = match c {
            _ if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '0'..='9' => {
                let start = i;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
                let digits: String = chars[start..i].iter().collect();
                out.push(Token::Int(
                    digits
                        .parse()
                        .map_err(|_| format!("{digits} does not fit in 64 bits"))?,
                ));
                continue;
            }
            'a'..='z' | 'A'..='Z' | '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push(Token::Name(chars[start..i].iter().collect()));
                continue;
            }
            '\'' | '"' => {
                let end = chars[i + 1..]
                    .iter()
                    .position(|&q| q == c)
                    .ok_or_else(|| format!("an unclosed quote at character {i}"))?;
                out.push(Token::Quoted(chars[i + 1..i + 1 + end].iter().collect()));
                i += end + 2;
                continue;
            }
            '*' if two("**") => {
                i += 1;
                Token::Power
            }
            '/' if two("//") => {
                i += 1;
                Token::FloorDiv
            }
            '(' => Token::Open,
            ')' => Token::Close,
            ',' => Token::Comma,
            '=' => Token::Equals,
            '+' => Token::Plus,
            '-' => Token::Minus,
            '*' => Token::Star,
            '%' => Token::Percent,
            other => return Err(format!("`{other}` at character {i}")),
        };
        out.push(token);
        i += 1;
    }
    Ok(out)
}

struct Parser<'a> {
    tokens: Vec<Token>,
    at: usize,
    symbols: &'a Symbols,
    resolve: &'a mut dyn FnMut(&str) -> Result<SymId, String>,
}

type Parsed = Result<Expr, String>;

fn sym(e: SymError) -> String {
    e.to_string()
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn expect(&mut self, want: Token) -> Result<(), String> {
        match self.next() {
            Some(t) if t == want => Ok(()),
            other => Err(format!("expected {want:?}, found {other:?}")),
        }
    }

    fn sum(&mut self) -> Parsed {
        let mut e = self.product()?;
        loop {
            match self.peek() {
                Some(Token::Plus) => {
                    self.at += 1;
                    e = e.add(&self.product()?).map_err(sym)?;
                }
                Some(Token::Minus) => {
                    self.at += 1;
                    e = e.sub(&self.product()?).map_err(sym)?;
                }
                _ => return Ok(e),
            }
        }
    }

    fn product(&mut self) -> Parsed {
        let mut e = self.unary()?;
        loop {
            let op = self.peek().cloned();
            match op {
                Some(Token::Star) => {
                    self.at += 1;
                    e = e.mul(&self.unary()?).map_err(sym)?;
                }
                Some(Token::FloorDiv) => {
                    self.at += 1;
                    e = e.floor_div(&self.unary()?, self.symbols).map_err(sym)?;
                }
                Some(Token::Percent) => {
                    self.at += 1;
                    e = e.modulo(&self.unary()?, self.symbols).map_err(sym)?;
                }
                _ => return Ok(e),
            }
        }
    }

    fn unary(&mut self) -> Parsed {
        if self.peek() == Some(&Token::Minus) {
            self.at += 1;
            return self.unary()?.scale(-1).map_err(sym);
        }
        let base = self.primary()?;
        if self.peek() == Some(&Token::Power) {
            self.at += 1;
            let exponent = self.unary()?;
            return power(&base, &exponent);
        }
        Ok(base)
    }

    fn primary(&mut self) -> Parsed {
        match self.next() {
            Some(Token::Int(n)) => Ok(Expr::constant(n)),
            Some(Token::Open) => {
                let e = self.sum()?;
                self.expect(Token::Close)?;
                Ok(e)
            }
            Some(Token::Name(name)) if self.peek() == Some(&Token::Open) => {
                self.at += 1;
                self.call(&name)
            }
            Some(Token::Name(name)) => Ok(Expr::symbol((self.resolve)(&name)?)),
            other => Err(format!("expected a size, found {other:?}")),
        }
    }

    /// The arguments of a call, after its `(`: expressions, and `Symbol`'s quoted name
    /// (as a symbol); keyword arguments (`positive=True`) are skipped.
    fn arguments(&mut self) -> Result<Vec<Expr>, String> {
        let mut args = Vec::new();
        if self.peek() == Some(&Token::Close) {
            self.at += 1;
            return Ok(args);
        }
        loop {
            let keyword = matches!(
                (self.tokens.get(self.at), self.tokens.get(self.at + 1)),
                (Some(Token::Name(_)), Some(Token::Equals))
            );
            if keyword {
                self.at += 3;
            } else if let Some(Token::Quoted(name)) = self.peek().cloned() {
                self.at += 1;
                args.push(Expr::symbol((self.resolve)(&name)?));
            } else {
                args.push(self.sum()?);
            }
            match self.next() {
                Some(Token::Comma) => continue,
                Some(Token::Close) => return Ok(args),
                other => return Err(format!("expected `,` or `)`, found {other:?}")),
            }
        }
    }

    fn call(&mut self, name: &str) -> Parsed {
        let args = self.arguments()?;
        let two = |args: &[Expr]| -> Result<(Expr, Expr), String> {
            match args {
                [a, b] => Ok((a.clone(), b.clone())),
                _ => Err(format!("{name} takes two arguments, not {}", args.len())),
            }
        };
        let syms = self.symbols;
        match name {
            "Symbol" | "Integer" => match args.as_slice() {
                [one] => Ok(one.clone()),
                _ => Err(format!("{name} takes one argument")),
            },
            "Add" => args
                .iter()
                .try_fold(Expr::default(), |s, a| s.add(a))
                .map_err(sym),
            "Mul" => args
                .iter()
                .try_fold(Expr::constant(1), |s, a| s.mul(a))
                .map_err(sym),
            "Pow" => {
                let (a, b) = two(&args)?;
                power(&a, &b)
            }
            // `CleanDiv` is a division PyTorch has proven exact.
            "FloorDiv" | "CleanDiv" => {
                let (a, b) = two(&args)?;
                a.floor_div(&b, syms).map_err(sym)
            }
            "Mod" | "PythonMod" => {
                let (a, b) = two(&args)?;
                a.modulo(&b, syms).map_err(sym)
            }
            "Min" | "Max" if args.is_empty() => Err(format!("{name} of nothing")),
            "Min" => Expr::min(&args, syms).map_err(sym),
            "Max" => Expr::max(&args, syms).map_err(sym),
            other => Err(format!(
                "`{other}` is not a size function Kiln reads (Add, Mul, Pow, FloorDiv, \
                 CleanDiv, Mod, PythonMod, Min, Max)"
            )),
        }
    }
}

fn power(base: &Expr, exponent: &Expr) -> Parsed {
    match exponent.as_const().and_then(|n| u32::try_from(n).ok()) {
        Some(n) if n <= 64 => base.pow(n).map_err(sym),
        _ => Err("a power whose exponent is not a small non-negative integer".into()),
    }
}

/// Reads `text`, a size expression of an exported program, in either of its forms;
/// `resolve` gives the symbol of each name it uses (and refuses one it does not know),
/// whose ranges `symbols` holds for simplification.
pub fn parse(
    text: &str,
    symbols: &Symbols,
    resolve: &mut dyn FnMut(&str) -> Result<SymId, String>,
) -> Result<Expr, SymError> {
    let bad = |why: String| SymError::Parse {
        text: text.to_string(),
        why,
    };
    let mut p = Parser {
        tokens: tokens(text).map_err(bad)?,
        at: 0,
        symbols,
        resolve,
    };
    let e = p.sum().map_err(bad)?;
    match p.peek() {
        None => Ok(e),
        Some(t) => Err(bad(format!("unexpected {t:?} after the expression"))),
    }
}
