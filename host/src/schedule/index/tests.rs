use super::*;

fn ranges() -> Ranges<'static> {
    Ranges::fixed(64, 16)
}

#[test]
fn block_steps_hold_for_every_aligned_block() {
    let x = || Box::new(Index::Var(Var::X));
    let r = || Box::new(Index::Var(Var::R));
    // (expression, block, the step it must claim or None)
    let cases = [
        // [.., 32, 512] reduced over the 32: x = (outer, inner 512).
        (
            Index::Add(vec![
                Index::Mul(
                    Box::new(Index::Div(x(), Size::from(512))),
                    Size::from(131072),
                ),
                Index::Mul(r(), Size::from(512)),
                Index::Mod(x(), Size::from(512)),
            ]),
            512,
            Some(1),
        ),
        // Nested: 262144 * (x / 8192) + 8192 * r + 128 * ((x / 128) % 64) + x % 128.
        (
            Index::Add(vec![
                Index::Mul(
                    Box::new(Index::Div(x(), Size::from(8192))),
                    Size::from(262144),
                ),
                Index::Mul(r(), Size::from(8192)),
                Index::Mul(
                    Box::new(Index::Mod(
                        Box::new(Index::Div(x(), Size::from(128))),
                        Size::from(64),
                    )),
                    Size::from(128),
                ),
                Index::Mod(x(), Size::from(128)),
            ]),
            128,
            Some(1),
        ),
        // The same at a block the remainders' period does not divide.
        (
            Index::Add(vec![
                Index::Mul(
                    Box::new(Index::Div(x(), Size::from(8192))),
                    Size::from(262144),
                ),
                Index::Mod(x(), Size::from(128)),
            ]),
            256,
            None,
        ),
        // A per-row value: constant inside blocks of 64.
        (Index::Div(x(), Size::from(64)), 64, Some(0)),
        // An offset that is not a multiple of the block shifts the remainder.
        (
            Index::Mod(
                Box::new(Index::Add(vec![Index::Var(Var::X), Index::constant(3)])),
                Size::from(64),
            ),
            16,
            None,
        ),
        (
            Index::Mod(
                Box::new(Index::Add(vec![Index::Var(Var::X), Index::constant(32)])),
                Size::from(64),
            ),
            16,
            Some(1),
        ),
        // r inside the division: unknown alignment.
        (
            Index::Div(
                Box::new(Index::Add(vec![Index::Var(Var::X), Index::Var(Var::R)])),
                Size::from(64),
            ),
            16,
            None,
        ),
    ];
    for (e, block, want) in cases {
        let got = e.block_step(Var::X, block);
        assert_eq!(got, want, "{e} in blocks of {block}");
        let Some(step) = got else { continue };
        for x0 in (0..4 * 8192).step_by(block as usize) {
            for rv in [0, 1, 7] {
                let base = e.eval(x0, rv);
                for i in [0, 1, block / 2, block - 1] {
                    assert_eq!(
                        e.eval(x0 + i, rv),
                        base + step * i,
                        "{e} at x0 {x0} + {i}, r {rv}"
                    );
                }
            }
        }
    }
}

#[test]
fn unflatten_then_linear_is_the_identity_for_contiguous_strides() {
    let shape = [4, 4, 4];
    let idx = unflatten(Index::var(Var::X), &shape, &ranges());
    let back = linear(&idx, &[16, 4, 1], 0);
    assert_eq!(back, Index::var(Var::X));
    let scaled = linear(
        &unflatten(Index::var(Var::X), &[2, 3], &ranges()),
        &[24, 8],
        0,
    );
    assert_eq!(scaled, Index::var(Var::X).times(8));
}

#[test]
fn simplification_uses_the_loop_ranges() {
    assert_eq!(Index::var(Var::R).rem(16, &ranges()), Index::var(Var::R));
    assert_eq!(Index::var(Var::R).div(16, &ranges()), Index::constant(0));
    assert_eq!(
        Index::var(Var::X).times(4).div(2, &ranges()),
        Index::var(Var::X).times(2)
    );
    assert_eq!(
        Index::var(Var::X).div(4, &ranges()).div(4, &ranges()),
        Index::Div(Box::new(Index::var(Var::X)), Size::from(16))
    );
    assert_eq!(
        Index::var(Var::X).plus(Index::constant(0)),
        Index::var(Var::X)
    );
}

#[test]
fn division_of_a_sum_with_a_bounded_remainder() {
    let e = Index::var(Var::X).times(768).plus(Index::var(Var::R));
    let r = Ranges::fixed(4096, 768);
    assert_eq!(e.clone().div(768, &r), Index::var(Var::X));
    assert_eq!(e.clone().rem(768, &r), Index::var(Var::R));
    // Unflattening a reshape of [4096, 768] into [8, 512, 768] gives the row's own dims.
    let idx = unflatten(e, &[8, 512, 768], &r);
    assert_eq!(
        idx,
        unflatten(Index::var(Var::X), &[8, 512], &r)
            .into_iter()
            .chain([Index::var(Var::R)])
            .collect::<Vec<_>>()
    );
    // The remainder must be bounded: r ranges past 768 here.
    let wide = Ranges::fixed(4096, 1024);
    let f = Index::var(Var::X).times(768).plus(Index::var(Var::R));
    assert!(matches!(f.div(768, &wide), Index::Div(..)));
}

#[test]
fn permuted_access_evaluates_like_the_strided_tensor() {
    // A [2, 3] contiguous tensor read transposed as [3, 2].
    let r = Ranges::fixed(6, 1);
    let idx = unflatten(Index::var(Var::X), &[3, 2], &r);
    let access = linear(&idx, &[1, 3], 0);
    let got: Vec<i64> = (0..6).map(|x| access.eval(x, 0)).collect();
    assert_eq!(got, [0, 3, 1, 4, 2, 5]);
    assert_eq!(access.to_string(), "((xindex) // 2) + 3*((xindex) % 2)");
}

// ---- Sizes over symbols (a dynamic compile's indexes) ----

use proptest::prelude::*;

/// `s0` in 1..=8 (a batch), `s1` in 2..=16 (a sequence length).
fn symbols() -> Symbols {
    let mut t = Symbols::default();
    t.add("s0", 1, 8).unwrap();
    t.add("s1", 2, 16).unwrap();
    t
}

fn s(i: u32) -> Size {
    Size::symbol(SymId(i), &symbols())
}

#[test]
fn a_permute_over_symbolic_sizes_reads_like_the_strided_tensor() {
    // [s0, s1, 12, 64] contiguous, read as its permute (0, 2, 1, 3): [s0, 12, s1, 64].
    let table = symbols();
    let numel = s(0).mul(&s(1)).unwrap().scale(768).unwrap();
    let ranges = Ranges {
        x: numel,
        r: Size::from(1),
        symbols: &table,
    };
    let out_shape = [s(0), Size::from(12), s(1), Size::from(64)];
    let idx = unflatten(Index::var(Var::X), &out_shape, &ranges);
    let row = s(1).scale(768).unwrap();
    let access = linear(
        &idx,
        &[row, Size::from(64), Size::from(768), Size::from(1)],
        0,
    );
    assert_eq!(access.symbols(), vec![SymId(1)]);
    for (b, t) in [(1, 2), (3, 5), (8, 16)] {
        let size = |id: SymId| if id.0 == 0 { b } else { t };
        for x in 0..b * 12 * t * 64 {
            let (n, h, q, d) = (x / (12 * t * 64), x / (t * 64) % 12, x / 64 % t, x % 64);
            let want = n * t * 768 + q * 768 + h * 64 + d;
            assert_eq!(
                access.eval_at(x, 0, &size),
                want,
                "{access} at x {x}, s0 {b}, s1 {t}"
            );
        }
    }
}

#[test]
fn unflatten_then_contiguous_linear_is_the_identity_over_symbols() {
    let table = symbols();
    let ranges = Ranges {
        x: s(0).mul(&s(1)).unwrap().scale(64).unwrap(),
        r: Size::from(1),
        symbols: &table,
    };
    let shape = [s(0), s(1), Size::from(64)];
    let idx = unflatten(Index::var(Var::X), &shape, &ranges);
    let strides = [s(1).scale(64).unwrap(), Size::from(64), Size::from(1)];
    assert_eq!(linear(&idx, &strides, 0), Index::var(Var::X));
    // A row of s1 * 64 elements divides out of x * (s1 * 64) + r when r < 64 * s1's least.
    let rows = Ranges {
        x: s(0),
        r: Size::from(64),
        symbols: &table,
    };
    let flat = Index::var(Var::X)
        .times(s(1).scale(64).unwrap())
        .plus(Index::var(Var::R));
    assert_eq!(
        flat.clone().div(s(1).scale(64).unwrap(), &rows),
        Index::var(Var::X)
    );
    assert_eq!(flat.rem(s(1).scale(64).unwrap(), &rows), Index::var(Var::R));
}

#[test]
fn symbolic_sizes_print_as_kernel_arguments() {
    let i = Index::var(Var::X)
        .times(s(1).scale(768).unwrap())
        .plus(Index::Const(s(0).add(&Size::from(3)).unwrap()));
    assert_eq!(i.to_string(), "(768*ks1)*xindex + (ks0 + 3)");
    let halves = Index::var(Var::X).div(
        s(1).add(&Size::from(1))
            .unwrap()
            .floor_div(&Size::from(2), &symbols())
            .unwrap(),
        &Ranges::fixed(64, 1),
    );
    assert_eq!(halves.to_string(), "((xindex) // ((ks1 + 1)//2))");
}

/// An index built step by step, with a reference value for every step.
#[derive(Clone, Debug)]
enum Recipe {
    X,
    R,
    Const(i64),
    Plus(Box<Recipe>, Box<Recipe>),
    Times(Box<Recipe>, SizeRecipe),
    Div(Box<Recipe>, SizeRecipe),
    Rem(Box<Recipe>, SizeRecipe),
}

/// A positive size: `c`, `c * s_i + a`, or `c * s0 * s1`.
#[derive(Clone, Debug)]
enum SizeRecipe {
    Const(i64),
    Linear(u32, i64, i64),
    Product(i64),
}

impl SizeRecipe {
    fn size(&self) -> Size {
        match *self {
            SizeRecipe::Const(c) => Size::from(c),
            SizeRecipe::Linear(i, c, a) => s(i).scale(c).unwrap().add(&Size::from(a)).unwrap(),
            SizeRecipe::Product(c) => s(0).mul(&s(1)).unwrap().scale(c).unwrap(),
        }
    }

    fn value(&self, v: [i64; 2]) -> i64 {
        match *self {
            SizeRecipe::Const(c) => c,
            SizeRecipe::Linear(i, c, a) => c * v[i as usize] + a,
            SizeRecipe::Product(c) => c * v[0] * v[1],
        }
    }
}

fn size_recipe() -> impl Strategy<Value = SizeRecipe> {
    prop_oneof![
        prop_oneof![Just(1i64), Just(2), Just(3), Just(4), Just(12), Just(64)]
            .prop_map(SizeRecipe::Const),
        (0u32..2, 1i64..5, 0i64..4).prop_map(|(i, c, a)| SizeRecipe::Linear(i, c, a)),
        (1i64..4).prop_map(SizeRecipe::Product),
    ]
}

fn recipe() -> impl Strategy<Value = Recipe> {
    let leaf = prop_oneof![
        Just(Recipe::X),
        Just(Recipe::R),
        (0i64..10).prop_map(Recipe::Const)
    ];
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone())
                .prop_map(|(a, b)| Recipe::Plus(Box::new(a), Box::new(b))),
            (inner.clone(), size_recipe()).prop_map(|(a, k)| Recipe::Times(Box::new(a), k)),
            (inner.clone(), size_recipe()).prop_map(|(a, k)| Recipe::Div(Box::new(a), k)),
            (inner, size_recipe()).prop_map(|(a, k)| Recipe::Rem(Box::new(a), k)),
        ]
    })
}

fn build(r: &Recipe, ranges: &Ranges) -> Index {
    match r {
        Recipe::X => Index::var(Var::X),
        Recipe::R => Index::var(Var::R),
        Recipe::Const(c) => Index::constant(*c),
        Recipe::Plus(a, b) => build(a, ranges).plus(build(b, ranges)),
        Recipe::Times(a, k) => build(a, ranges).times(k.size()),
        Recipe::Div(a, k) => build(a, ranges).div(k.size(), ranges),
        Recipe::Rem(a, k) => build(a, ranges).rem(k.size(), ranges),
    }
}

fn reference(r: &Recipe, x: i64, rv: i64, v: [i64; 2]) -> i64 {
    match r {
        Recipe::X => x,
        Recipe::R => rv,
        Recipe::Const(c) => *c,
        Recipe::Plus(a, b) => reference(a, x, rv, v) + reference(b, x, rv, v),
        Recipe::Times(a, k) => reference(a, x, rv, v) * k.value(v),
        Recipe::Div(a, k) => reference(a, x, rv, v).div_euclid(k.value(v)),
        Recipe::Rem(a, k) => reference(a, x, rv, v).rem_euclid(k.value(v)),
    }
}

proptest! {
    /// The constructors' simplifications keep every value, whatever the sizes over
    /// their ranges and the loop variables over extents that are themselves sizes,
    /// and the bound they claim holds.
    #[test]
    fn simplification_over_symbols_keeps_every_value(
        r in recipe(),
        x_extent in size_recipe(),
        r_extent in size_recipe(),
        v0 in 1i64..=8,
        v1 in 2i64..=16,
        xs in proptest::collection::vec(0i64..1 << 20, 4),
        rs in proptest::collection::vec(0i64..1 << 20, 4),
    ) {
        let table = symbols();
        let ranges = Ranges { x: x_extent.size(), r: r_extent.size(), symbols: &table };
        let index = build(&r, &ranges);
        let v = [v0, v1];
        let (xn, rn) = (x_extent.value(v), r_extent.value(v));
        let max = index.max_value(&ranges);
        for (x, rv) in xs.iter().zip(&rs) {
            let (x, rv) = (x % xn, rv % rn);
            let got = index.eval_at(x, rv, &|id| v[id.0 as usize]);
            prop_assert_eq!(got, reference(&r, x, rv, v), "{} at x {}, r {}, sizes {:?}", index, x, rv, v);
            if let Some(m) = max {
                prop_assert!(i128::from(got) <= m, "{} = {} above its bound {}", index, got, m);
            }
        }
    }
}
