//! Elementwise expressions: the `expression` attribute of `ai.fuselab.FusedElementwise`, as a
//! tree (`Expr`) with a printer (`Display`) and a parser (`Expr::parse`). The pass that builds
//! them is `passes::fuse_elementwise`; the reference kernel evaluates them; a code generator
//! (WGSL) can walk the same tree.
//!
//! Grammar (S-expressions, ASCII whitespace between tokens):
//!
//! ```text
//!   expr    := input | literal | "(" unary expr ")" | "(" binary expr expr ")"
//!   input   := "x0" | "x1" | ...          the node's inputs, by position (no leading zeros)
//!   literal := "-"? digits ("." digits)? (("e" | "E") ("+" | "-")? digits)?   a finite f32
//!   unary   := neg | abs | sqrt | exp | log | erf | tanh | sigmoid | relu
//!   binary  := add | sub | mul | div | pow        (first operand is ONNX's A, second B)
//! ```
//!
//! Example: `(relu (mul (add x0 x1) 0.5))`. Literals print as Rust's `{:?}` of f32, the
//! shortest text that parses back to the same bits (`-0.0`, `1e-5`, `3.4028235e38`). Only finite
//! literals exist: WGSL has no spelling for inf or NaN, so the pass keeps a non-finite constant
//! as an input instead, and the parser refuses text that rounds to inf (`1e39`).
//!
//! Limits, checked before anything recurses so that hostile text cannot overflow the stack:
//! at most `MAX_LEN` bytes and `MAX_DEPTH` nested parentheses.

use std::fmt;

/// Longest accepted expression text, in bytes.
pub const MAX_LEN: usize = 1 << 16;
/// Deepest accepted nesting of parenthesized ops (a leaf alone has depth 0).
pub const MAX_DEPTH: usize = 256;

/// One-operand ops. Semantics are the ONNX op's of the same name on float32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Abs,
    Sqrt,
    Exp,
    Log,
    Erf,
    Tanh,
    Sigmoid,
    Relu,
}

/// Two-operand ops; operands broadcast (numpy rules) as the ONNX ops' do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 9] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Sqrt,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Erf,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
    ];

    /// The ONNX op type (default domain) this op computes.
    pub fn onnx_op(self) -> &'static str {
        match self {
            UnaryOp::Neg => "Neg",
            UnaryOp::Abs => "Abs",
            UnaryOp::Sqrt => "Sqrt",
            UnaryOp::Exp => "Exp",
            UnaryOp::Log => "Log",
            UnaryOp::Erf => "Erf",
            UnaryOp::Tanh => "Tanh",
            UnaryOp::Sigmoid => "Sigmoid",
            UnaryOp::Relu => "Relu",
        }
    }

    /// The spelling in expression text: the ONNX name in lower case.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Erf => "erf",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Relu => "relu",
        }
    }

    pub fn from_name(name: &str) -> Option<UnaryOp> {
        UnaryOp::ALL.into_iter().find(|op| op.name() == name)
    }

    pub fn from_onnx(op_type: &str) -> Option<UnaryOp> {
        UnaryOp::ALL.into_iter().find(|op| op.onnx_op() == op_type)
    }
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 5] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
    ];

    /// The ONNX op type (default domain) this op computes.
    pub fn onnx_op(self) -> &'static str {
        match self {
            BinaryOp::Add => "Add",
            BinaryOp::Sub => "Sub",
            BinaryOp::Mul => "Mul",
            BinaryOp::Div => "Div",
            BinaryOp::Pow => "Pow",
        }
    }

    /// The spelling in expression text: the ONNX name in lower case.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
        }
    }

    pub fn from_name(name: &str) -> Option<BinaryOp> {
        BinaryOp::ALL.into_iter().find(|op| op.name() == name)
    }

    pub fn from_onnx(op_type: &str) -> Option<BinaryOp> {
        BinaryOp::ALL.into_iter().find(|op| op.onnx_op() == op_type)
    }
}

/// An expression tree. Trees the parser returns are at most `MAX_DEPTH` deep and name only
/// inputs below the count it was given.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// The node's input `i` (`xi` in text).
    Input(usize),
    /// A finite float32 constant.
    Literal(f32),
    Unary(UnaryOp, Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
}

impl Expr {
    pub fn unary(op: UnaryOp, a: Expr) -> Expr {
        Expr::Unary(op, Box::new(a))
    }

    pub fn binary(op: BinaryOp, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }

    /// Nesting depth of ops: 0 for a leaf, as the parser counts parentheses.
    pub fn depth(&self) -> usize {
        match self {
            Expr::Input(_) | Expr::Literal(_) => 0,
            Expr::Unary(_, a) => 1 + a.depth(),
            Expr::Binary(_, a, b) => 1 + a.depth().max(b.depth()),
        }
    }

    /// Number of ops (unary and binary nodes) in the tree.
    pub fn op_count(&self) -> usize {
        match self {
            Expr::Input(_) | Expr::Literal(_) => 0,
            Expr::Unary(_, a) => 1 + a.op_count(),
            Expr::Binary(_, a, b) => 1 + a.op_count() + b.op_count(),
        }
    }

    /// Parses `text` for a node with `n_inputs` inputs. Malformed text is an error, never a
    /// panic: unknown op, wrong operand count, an input index `>= n_inputs`, a literal that is
    /// not a finite f32, unbalanced parentheses, trailing tokens, or text past `MAX_LEN` bytes
    /// or `MAX_DEPTH` levels.
    pub fn parse(text: &str, n_inputs: usize) -> Result<Expr, ExprError> {
        if text.len() > MAX_LEN {
            return Err(ExprError::at(
                MAX_LEN,
                format!(
                    "expression is {} bytes long, over the {MAX_LEN}-byte limit",
                    text.len()
                ),
            ));
        }
        let tokens = tokenize(text)?;
        let mut p = Parser {
            text,
            tokens: &tokens,
            pos: 0,
            n_inputs,
        };
        let e = p.expr()?;
        if let Some(t) = tokens.get(p.pos) {
            return Err(ExprError::at(
                t.start,
                format!(
                    "trailing text after the expression: '{}'",
                    excerpt(&text[t.start..])
                ),
            ));
        }
        Ok(e)
    }
}

/// Prints the canonical text `Expr::parse` reads back to an equal tree.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Input(i) => write!(f, "x{i}"),
            // `{:?}` is the shortest round-trip form and always has a '.' or an exponent.
            Expr::Literal(c) => write!(f, "{c:?}"),
            Expr::Unary(op, a) => write!(f, "({} {a})", op.name()),
            Expr::Binary(op, a, b) => write!(f, "({} {a} {b})", op.name()),
        }
    }
}

/// Why expression text was refused; `offset` is the byte where the problem was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExprError {
    pub offset: usize,
    pub message: String,
}

impl ExprError {
    fn at(offset: usize, message: String) -> ExprError {
        ExprError { offset, message }
    }
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.message, self.offset)
    }
}

impl std::error::Error for ExprError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    Open,
    Close,
    Atom,
}

#[derive(Clone, Copy, Debug)]
struct Token {
    kind: Tok,
    start: usize,
    end: usize,
}

/// Splits `text` into parentheses and atoms, and checks nesting (balance and `MAX_DEPTH`) in
/// the same flat scan, so that the recursive parser never goes deeper than `MAX_DEPTH`.
fn tokenize(text: &str) -> Result<Vec<Token>, ExprError> {
    let b = text.as_bytes();
    let mut tokens = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            c if c.is_ascii_whitespace() => i += 1,
            b'(' => {
                if open.len() == MAX_DEPTH {
                    return Err(ExprError::at(
                        i,
                        format!("expression is nested deeper than {MAX_DEPTH} levels"),
                    ));
                }
                open.push(i);
                tokens.push(Token {
                    kind: Tok::Open,
                    start: i,
                    end: i + 1,
                });
                i += 1;
            }
            b')' => {
                if open.pop().is_none() {
                    return Err(ExprError::at(i, "unbalanced ')'".into()));
                }
                tokens.push(Token {
                    kind: Tok::Close,
                    start: i,
                    end: i + 1,
                });
                i += 1;
            }
            _ => {
                let start = i;
                while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'(' && b[i] != b')' {
                    i += 1;
                }
                tokens.push(Token {
                    kind: Tok::Atom,
                    start,
                    end: i,
                });
            }
        }
    }
    if let Some(&at) = open.last() {
        return Err(ExprError::at(at, "'(' is never closed".into()));
    }
    if tokens.is_empty() {
        return Err(ExprError::at(0, "empty expression".into()));
    }
    Ok(tokens)
}

/// At most 32 characters of `s`, for messages (an atom may be the whole 64 KiB text).
fn excerpt(s: &str) -> String {
    let mut out: String = s.chars().take(32).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

struct Parser<'a> {
    text: &'a str,
    tokens: &'a [Token],
    pos: usize,
    n_inputs: usize,
}

impl Parser<'_> {
    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).copied();
        self.pos += 1;
        t
    }

    fn expr(&mut self) -> Result<Expr, ExprError> {
        let end = self.text.len();
        let Some(t) = self.next() else {
            return Err(ExprError::at(end, "unexpected end of expression".into()));
        };
        match t.kind {
            Tok::Atom => self.atom(t),
            Tok::Close => Err(ExprError::at(
                t.start,
                "expected an operand, got ')'".into(),
            )),
            Tok::Open => {
                let head = self.next().filter(|h| h.kind == Tok::Atom).ok_or_else(|| {
                    ExprError::at(t.start, "expected an op name after '('".into())
                })?;
                let name = &self.text[head.start..head.end];
                let (unary, binary) = (UnaryOp::from_name(name), BinaryOp::from_name(name));
                let arity = match (unary, binary) {
                    (Some(_), _) => 1,
                    (_, Some(_)) => 2,
                    _ => {
                        return Err(ExprError::at(
                            head.start,
                            format!("unknown op '{}'", excerpt(name)),
                        ))
                    }
                };
                let mut args = Vec::with_capacity(arity);
                loop {
                    match self.tokens.get(self.pos) {
                        Some(c) if c.kind == Tok::Close => {
                            self.pos += 1;
                            break;
                        }
                        // `tokenize` checked the balance, so a ')' always comes first.
                        None => return Err(ExprError::at(end, "missing ')'".into())),
                        Some(c) if args.len() == arity => {
                            return Err(ExprError::at(
                                c.start,
                                format!("'{name}' takes {arity} operand(s), got more"),
                            ))
                        }
                        Some(_) => args.push(self.expr()?),
                    }
                }
                let got = args.len();
                let mut args = args.into_iter();
                match (unary, binary, args.next(), args.next()) {
                    (Some(op), _, Some(a), None) => Ok(Expr::unary(op, a)),
                    (_, Some(op), Some(a), Some(b)) => Ok(Expr::binary(op, a, b)),
                    _ => Err(ExprError::at(
                        head.start,
                        format!("'{name}' takes {arity} operand(s), got {got}"),
                    )),
                }
            }
        }
    }

    fn atom(&self, t: Token) -> Result<Expr, ExprError> {
        let s = &self.text[t.start..t.end];
        if let Some(digits) = s.strip_prefix('x') {
            let canonical = !digits.is_empty()
                && digits.bytes().all(|c| c.is_ascii_digit())
                && (digits == "0" || !digits.starts_with('0'));
            if canonical {
                let i = digits.parse::<usize>().unwrap_or(usize::MAX);
                if i >= self.n_inputs {
                    return Err(ExprError::at(
                        t.start,
                        format!(
                            "input {} is out of range: the node has {} input(s)",
                            excerpt(s),
                            self.n_inputs
                        ),
                    ));
                }
                return Ok(Expr::Input(i));
            }
        }
        if UnaryOp::from_name(s).is_some() || BinaryOp::from_name(s).is_some() {
            return Err(ExprError::at(t.start, format!("op '{s}' must follow '('")));
        }
        if !is_literal(s) {
            return Err(ExprError::at(
                t.start,
                format!(
                    "'{}' is neither an input (x0, x1, ...) nor a float literal",
                    excerpt(s)
                ),
            ));
        }
        match s.parse::<f32>() {
            Ok(v) if v.is_finite() => Ok(Expr::Literal(v)),
            _ => Err(ExprError::at(
                t.start,
                format!("literal '{}' is not a finite float32", excerpt(s)),
            )),
        }
    }
}

/// `-? digits (. digits)? ([eE] [+-]? digits)?`: what `{:?}` of a finite f32 prints, and no
/// more (`str::parse` alone would also take `inf`, `NaN`, `+1` and `.5`).
fn is_literal(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(b.first() == Some(&b'-'));
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > start
    };
    if !digits(&mut i) {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return false;
        }
    }
    i == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str, n: usize) -> String {
        Expr::parse(text, n).unwrap_err().to_string()
    }

    #[test]
    fn prints_and_parses_back() {
        let e = Expr::unary(
            UnaryOp::Relu,
            Expr::binary(
                BinaryOp::Mul,
                Expr::binary(BinaryOp::Add, Expr::Input(0), Expr::Input(1)),
                Expr::Literal(0.5),
            ),
        );
        assert_eq!(e.to_string(), "(relu (mul (add x0 x1) 0.5))");
        assert_eq!(Expr::parse(&e.to_string(), 2).unwrap(), e);
        assert_eq!(e.depth(), 3);
        assert_eq!(e.op_count(), 3);
        let spaced = Expr::parse("  (relu\n(mul\t(add x0 x1)   0.5 ) ) ", 2).unwrap();
        assert_eq!(spaced, e);
    }

    #[test]
    fn literals_round_trip_bit_for_bit() {
        let vals = [
            0.0f32,
            -0.0,
            0.5,
            0.1,
            1.0 / 3.0,
            1e-5,
            -2.5e-38,
            f32::MIN_POSITIVE,
            1e-45,
            f32::MAX,
            f32::MIN,
            std::f32::consts::FRAC_1_SQRT_2,
            0.044715,
            1e16,
            123456790.0,
        ];
        for v in vals {
            let text = Expr::Literal(v).to_string();
            match Expr::parse(&text, 0).unwrap() {
                Expr::Literal(p) => assert_eq!(p.to_bits(), v.to_bits(), "{v:?} printed {text}"),
                other => panic!("{text} parsed as {other:?}"),
            }
        }
        assert_eq!(Expr::parse("2", 0).unwrap(), Expr::Literal(2.0));
        assert_eq!(Expr::parse("1E+3", 0).unwrap(), Expr::Literal(1000.0));
    }

    #[test]
    fn refuses_malformed_text() {
        for (text, n, needle) in [
            ("", 1, "empty expression"),
            ("   ", 1, "empty expression"),
            ("(foo x0)", 1, "unknown op 'foo'"),
            ("(add x0)", 1, "'add' takes 2 operand(s), got 1"),
            ("(add x0 x0 x0)", 1, "'add' takes 2 operand(s), got more"),
            ("(neg)", 1, "'neg' takes 1 operand(s), got 0"),
            ("(neg x0 1.0)", 1, "'neg' takes 1 operand(s), got more"),
            (
                "(add x0 x7)",
                2,
                "input x7 is out of range: the node has 2 input(s)",
            ),
            ("x0", 0, "out of range"),
            ("x99999999999999999999999", 2, "out of range"),
            ("x0 x1", 2, "trailing text after the expression: 'x1'"),
            ("(neg x0))", 1, "unbalanced ')'"),
            (")", 1, "unbalanced ')'"),
            ("(neg x0", 1, "never closed"),
            ("()", 1, "expected an op name"),
            ("((neg x0))", 1, "expected an op name"),
            ("(x0)", 1, "unknown op 'x0'"),
            ("neg", 1, "must follow '('"),
            ("(neg add)", 1, "must follow '('"),
            ("x01", 2, "neither an input"),
            ("x", 1, "neither an input"),
            ("X0", 1, "neither an input"),
            ("inf", 0, "neither an input"),
            ("-inf", 0, "neither an input"),
            ("NaN", 0, "neither an input"),
            ("+1.0", 0, "neither an input"),
            (".5", 0, "neither an input"),
            ("5.", 0, "neither an input"),
            ("1e", 0, "neither an input"),
            ("1.0.0", 0, "neither an input"),
            ("1e39", 0, "not a finite float32"),
            ("(neg 1e39)", 0, "not a finite float32"),
            ("(nég x0)", 1, "unknown op 'nég'"),
            ("(neg x0)\u{0}", 1, "trailing text"),
        ] {
            let e = err(text, n);
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn hostile_sizes_are_errors_not_stack_overflows() {
        let deep = "(".repeat(100_000);
        assert!(err(&deep, 1).contains("over the 65536-byte limit"));
        let deep = "(".repeat(MAX_LEN - 10);
        assert!(err(&deep, 1).contains("nested deeper than 256"));
        let nested = |d: usize| format!("{}x0{}", "(neg ".repeat(d), ")".repeat(d));
        assert_eq!(
            Expr::parse(&nested(MAX_DEPTH), 1).unwrap().depth(),
            MAX_DEPTH
        );
        assert!(err(&nested(MAX_DEPTH + 1), 1).contains("nested deeper"));
        let long = format!("(add x0 {}1.0)", " ".repeat(MAX_LEN));
        assert!(err(&long, 1).contains("over the 65536-byte limit"));
        // A giant atom: the message quotes only its start.
        let atom = "y".repeat(MAX_LEN);
        let e = err(&atom, 1);
        assert!(e.len() < 200, "{e}");
    }
}
