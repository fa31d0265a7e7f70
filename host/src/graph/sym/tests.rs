use super::*;
use proptest::prelude::*;

/// `s0` in 1..=16 (a batch), `s1` in 2..=64 (a sequence length), `s2` in 0..=5.
fn table() -> Symbols {
    let mut t = Symbols::default();
    t.add("s0", 1, 16).unwrap();
    t.add("s1", 2, 64).unwrap();
    t.add("s2", 0, 5).unwrap();
    t
}

fn read(text: &str) -> Expr {
    let t = table();
    parse(text, &t, &mut |name| {
        t.find(name).ok_or_else(|| format!("no symbol {name}"))
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

fn shown(text: &str) -> String {
    read(text).display(&table())
}

#[test]
fn both_export_forms_read_as_one_expression() {
    assert_eq!(
        read("Mul(Integer(16), Symbol('s1', positive=True, integer=True))"),
        read("16*s1")
    );
    assert_eq!(
        read("Mul(Symbol('s0', positive=True, integer=True), Symbol('s1', positive=True, integer=True))"),
        read("s1*s0")
    );
    assert_eq!(
        read("Pow(Symbol('s1', integer=True), Integer(2))"),
        read("s1*s1")
    );
    assert_eq!(read("Add(Integer(-1), Symbol('s1'))"), read("s1 - 1"));
    assert_eq!(shown("-s1 + 10"), "-s1 + 10");
    // A power prints as a product (Triton's JIT takes no `**` of integer arguments).
    assert_eq!(shown("s1**2 + 2*s0*s1 + 1"), "2*s0*s1 + s1*s1 + 1");
}

/// The symbols whose being multiples of 16 makes an expression one: a symbol of
/// each term whose coefficient is not; none where a term has no symbol.
#[test]
fn a_multiple_given_its_symbols_are_multiples() {
    let id = |name: &str| table().find(name).unwrap();
    assert_eq!(read("768*s1").multiple_of_given(16), Some(vec![]));
    assert_eq!(read("s1*s1").multiple_of_given(16), Some(vec![id("s1")]));
    assert_eq!(
        read("s0*s1 + 32*s0 + 3*s2").multiple_of_given(16),
        Some(vec![id("s0"), id("s2")])
    );
    // A constant term, or a division alone, is no multiple whatever the symbols.
    assert_eq!(read("16*s1 + 8").multiple_of_given(16), None);
    assert_eq!(read("s1 // 2").multiple_of_given(16), None);
    // Checked at every value where the symbols given are multiples of 16.
    let e = read("s0*s1 + 32*s0 + 3*s2");
    for (a, b, c) in [(16, 5, 0), (32, 7, 16), (48, 64, 32)] {
        let v = e.eval(&|s| [a, b, c][s.0 as usize]).unwrap();
        assert_eq!(v % 16, 0, "{a} {b} {c}");
    }
}

#[test]
fn exact_divisions_and_remainders_below_the_divisor_simplify() {
    assert_eq!(read("(s0*s1)//s1"), read("s0"));
    assert_eq!(read("(4*s0*s1 + 8*s1)//(4*s1)"), read("s0 + 2"));
    // 2*s0 + 1 = 2*s0 + (1 in [0, 2)).
    assert_eq!(read("(2*s0 + 1)//2"), read("s0"));
    assert_eq!(read("FloorDiv(FloorDiv(s1, 2), 4)"), read("s1//8"));
    assert_eq!(read("CleanDiv(6*s1, 3)"), read("2*s1"));
    assert_eq!(read("Mod(2*s0, 2)"), Expr::constant(0));
    assert_eq!(read("(3*s0 + 5) % 3"), read("2"));
    assert_eq!(read("(s0*s1) % s0"), Expr::constant(0));
    // s2 in 0..=5 is its own remainder modulo 8, not modulo 4.
    assert_eq!(read("s2 % 8"), read("s2"));
    assert_eq!(shown("s2 % 4"), "(s2 % 4)");
    assert_eq!(shown("(s1 + 1)//2"), "((s1 + 1)//2)");
    assert_eq!(read("7 // -2"), Expr::constant(-4));
    assert_eq!(read("-7 % 3"), Expr::constant(2));
}

#[test]
fn minima_and_maxima_the_ranges_decide_go() {
    assert_eq!(
        read("Min(Integer(16), Mul(Integer(16), Symbol('s1')))"),
        Expr::constant(16)
    );
    assert_eq!(read("Max(1, s0)"), read("s0"));
    assert_eq!(read("Min(s1, s1 + 3)"), read("s1"));
    assert_eq!(read("Max(Max(s0, 3), s0)"), read("Max(3, s0)"));
    assert_eq!(shown("Max(3, s0)"), "max(3, s0)");
    assert_eq!(shown("Min(s0, s1)"), "min(s0, s1)");
}

#[test]
fn bounds_follow_the_ranges() {
    let t = table();
    assert_eq!(read("s0*s1").bounds(&t), (2, 1024));
    assert_eq!(read("s1 - s0").bounds(&t), (-14, 63));
    assert_eq!(read("s1//2").bounds(&t), (1, 32));
    assert_eq!(read("s1 % 5").bounds(&t), (0, 4));
    assert_eq!(read("Min(s0, s1)").bounds(&t), (1, 16));
}

#[test]
fn what_cannot_be_read_is_refused_with_the_text() {
    let t = table();
    let err = |text: &str| {
        parse(text, &t, &mut |n| {
            t.find(n).ok_or_else(|| format!("no symbol `{n}`"))
        })
        .unwrap_err()
        .to_string()
    };
    assert!(
        err("s9 + 1").contains("no symbol `s9`"),
        "{}",
        err("s9 + 1")
    );
    assert!(err("TruncToInt(s0)").contains("`TruncToInt` is not a size function"));
    assert!(err("s0 // 0").contains("divided by zero"));
    assert!(err("s0 +").contains("`s0 +`"));
    assert!(err("s0 ** s1").contains("exponent"));
    let mut s = Symbols::default();
    s.add("b", 1, 4).unwrap();
    assert!(s
        .add("b", 1, 4)
        .unwrap_err()
        .to_string()
        .contains("declared twice"));
    assert!(s
        .add("c", 5, 4)
        .unwrap_err()
        .to_string()
        .contains("empty range"));
}

/// A size expression as written, evaluated directly in Python's arithmetic: the
/// reference the canonical form must agree with.
#[derive(Clone, Debug)]
enum Tree {
    Const(i64),
    Sym(u32),
    Add(Box<Tree>, Box<Tree>),
    Sub(Box<Tree>, Box<Tree>),
    Mul(Box<Tree>, Box<Tree>),
    Div(Box<Tree>, Box<Tree>),
    Mod(Box<Tree>, Box<Tree>),
    Min(Box<Tree>, Box<Tree>),
    Max(Box<Tree>, Box<Tree>),
}

fn tree() -> impl Strategy<Value = Tree> {
    let leaf = prop_oneof![
        (-9i64..10).prop_map(Tree::Const),
        (0u32..3).prop_map(Tree::Sym)
    ];
    leaf.prop_recursive(4, 24, 2, |inner| {
        let pair = (inner.clone(), inner);
        prop_oneof![
            pair.clone()
                .prop_map(|(a, b)| Tree::Add(a.into(), b.into())),
            pair.clone()
                .prop_map(|(a, b)| Tree::Sub(a.into(), b.into())),
            pair.clone()
                .prop_map(|(a, b)| Tree::Mul(a.into(), b.into())),
            pair.clone()
                .prop_map(|(a, b)| Tree::Div(a.into(), b.into())),
            pair.clone()
                .prop_map(|(a, b)| Tree::Mod(a.into(), b.into())),
            pair.clone()
                .prop_map(|(a, b)| Tree::Min(a.into(), b.into())),
            pair.prop_map(|(a, b)| Tree::Max(a.into(), b.into())),
        ]
    })
}

/// The tree's value, `None` where it divides by zero.
fn reference(t: &Tree, v: &[i64; 3]) -> Option<i128> {
    let two = |a: &Tree, b: &Tree| Some((reference(a, v)?, reference(b, v)?));
    Some(match t {
        Tree::Const(c) => i128::from(*c),
        Tree::Sym(s) => i128::from(v[*s as usize]),
        Tree::Add(a, b) => two(a, b).map(|(a, b)| a + b)?,
        Tree::Sub(a, b) => two(a, b).map(|(a, b)| a - b)?,
        Tree::Mul(a, b) => two(a, b).map(|(a, b)| a * b)?,
        Tree::Div(a, b) => match two(a, b)? {
            (_, 0) => return None,
            (a, b) => floor_div_i128(a, b),
        },
        Tree::Mod(a, b) => match two(a, b)? {
            (_, 0) => return None,
            (a, b) => py_mod_i128(a, b),
        },
        Tree::Min(a, b) => two(a, b).map(|(a, b)| a.min(b))?,
        Tree::Max(a, b) => two(a, b).map(|(a, b)| a.max(b))?,
    })
}

/// The tree built through the simplifying constructors; `None` where one divides by zero.
fn build(t: &Tree, s: &Symbols) -> Option<Expr> {
    let two = |a: &Tree, b: &Tree| Some((build(a, s)?, build(b, s)?));
    match t {
        Tree::Const(c) => Some(Expr::constant(*c)),
        Tree::Sym(i) => Some(Expr::symbol(SymId(*i))),
        Tree::Add(a, b) => two(a, b).and_then(|(a, b)| a.add(&b).ok()),
        Tree::Sub(a, b) => two(a, b).and_then(|(a, b)| a.sub(&b).ok()),
        Tree::Mul(a, b) => two(a, b).and_then(|(a, b)| a.mul(&b).ok()),
        Tree::Div(a, b) => two(a, b).and_then(|(a, b)| a.floor_div(&b, s).ok()),
        Tree::Mod(a, b) => two(a, b).and_then(|(a, b)| a.modulo(&b, s).ok()),
        Tree::Min(a, b) => two(a, b).and_then(|(a, b)| Expr::min(&[a, b], s).ok()),
        Tree::Max(a, b) => two(a, b).and_then(|(a, b)| Expr::max(&[a, b], s).ok()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Simplification never changes a value: wherever the expression as written is
    /// defined, its canonical form (and that form printed and read back) gives the same
    /// value, inside the bounds it claims, at every binding within the symbols' ranges.
    #[test]
    fn the_canonical_form_keeps_every_value(t in tree(), v0 in 1i64..=16, v1 in 2i64..=64, v2 in 0i64..=5) {
        let s = table();
        let values = [v0, v1, v2];
        let Some(want) = reference(&t, &values) else { return Ok(()); };
        // A division by zero the simplifier could not see is an error at evaluation.
        let Some(e) = build(&t, &s) else { return Ok(()); };
        let at = |id: SymId| values[id.0 as usize];
        match e.eval(&at) {
            Ok(got) => prop_assert_eq!(i128::from(got), want, "{:?} = {}", t, e.display(&s)),
            Err(SymError::DivisionByZero(_)) => {}
            Err(other) => prop_assert!(false, "{other}"),
        }
        let (lo, hi) = e.bounds(&s);
        prop_assert!(lo <= want && want <= hi, "{} in [{lo}, {hi}], got {want}", e.display(&s));
        let text = e.display(&s);
        let back = parse(&text, &s, &mut |n| s.find(n).ok_or_else(|| n.to_string()));
        if let Ok(back) = back {
            if let Ok(got) = back.eval(&at) {
                prop_assert_eq!(i128::from(got), want, "{} read back", text);
            }
        }
    }
}

#[test]
fn an_expression_without_ranges_reads_as_python_writes_it() {
    assert_eq!(
        pretty("Mul(Integer(2), Symbol('u0', integer=True), Symbol('s1'))").as_deref(),
        Some("2*u0*s1")
    );
    assert_eq!(
        pretty("Add(Symbol('u0'), Integer(-1))").as_deref(),
        Some("u0 - 1")
    );
    assert_eq!(pretty("TruncToInt(u0)"), None);
}

#[test]
fn a_size_carries_its_value_at_the_hints() {
    let mut t = table();
    t.set_hint(SymId(0), 4).unwrap();
    t.set_hint(SymId(1), 10).unwrap();
    assert!(t.set_hint(SymId(1), 65).is_err(), "a hint outside 2..=64");
    let (b, s) = (Size::symbol(SymId(0), &t), Size::symbol(SymId(1), &t));
    let rows = b.mul(&s).unwrap();
    assert_eq!(rows.hint(), 40);
    assert_eq!(rows.scale(768).unwrap().hint(), 30720);
    let half = s
        .add(&Size::from(1))
        .unwrap()
        .floor_div(&Size::from(2), &t)
        .unwrap();
    assert_eq!(
        (half.hint(), half.expr().display(&t)),
        (5, "((s1 + 1)//2)".to_string())
    );
    assert_eq!(s.modulo(&Size::from(4), &t).unwrap().hint(), 2);
    assert_eq!(rows.exact_div(&s), Some(b.clone()));
    // At any binding, a size evaluates as its expression does.
    assert_eq!(rows.eval(&|id| if id.0 == 0 { 3 } else { 7 }), Ok(21));
}
