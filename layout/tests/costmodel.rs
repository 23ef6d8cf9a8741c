//! Properties of the writer's cost model (`hydra_layout::costmodel`): it learns any engine
//! of the modelled form from a few steps, its phase sums are the sums of its steps, and no
//! input makes it panic or predict nonsense.

use hydra_layout::{CostModel, Observed, StepKind, StepShape};
use proptest::prelude::*;

/// An engine of the modelled form: `a` ns per forward, `b` ns per token, `c` ns per
/// attended pair.
#[derive(Debug, Clone, Copy)]
struct Engine {
    a: f64,
    b: f64,
    c: f64,
}

impl Engine {
    fn ns(&self, s: &StepShape) -> u64 {
        (self.a + self.b * s.tokens as f64 + self.c * s.attended()) as u64
    }
}

fn engine() -> impl Strategy<Value = Engine> {
    // 0.1-20 ms per forward, 1 us - 2 ms per token, 1-200 ns per pair: CPUs and GPUs,
    // small and large models.
    (1e5..2e7f64, 1e3..2e6f64, 1.0..200.0f64).prop_map(|(a, b, c)| Engine { a, b, c })
}

fn rel(a: u64, b: u64) -> f64 {
    (a as f64 - b as f64).abs() / b as f64
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// After the chunks of one prompt with two chunk sizes, the next prompt's chunks are
    /// predicted within 5%, and the model states a bound.
    #[test]
    fn prefill_chunks_are_learnt(e in engine(), chunk in 64u64..1024) {
        let mut m = CostModel::default();
        // A first prompt in chunks of `chunk`, its tail in a shorter one; then a second.
        for prompt in 0..2 {
            let mut ctx = 0;
            for k in 0..8u64 {
                let n = if k == 7 { chunk / 2 + 1 } else { chunk };
                let s = StepShape::prefill(n, ctx);
                if prompt == 1 && k >= 2 {
                    let p = m.predict(&s).expect("a prediction after learnt steps");
                    prop_assert!(rel(p.ns, e.ns(&s)) < 0.05,
                        "chunk {k} of {n} at {ctx}: {} vs {}", p.ns, e.ns(&s));
                }
                prop_assert_eq!(m.observe(&s, e.ns(&s)), Observed::Learnt);
                ctx += n;
            }
        }
        prop_assert!(m.rel_error(StepKind::Prefill).is_some());
    }

    /// The predicted rest of a phase is the sum of the predictions of its steps (the
    /// model is linear, the closed form must agree with summing), for prefill and decode.
    #[test]
    fn phase_sums_are_sums_of_steps(e in engine(), chunk in 16u64..512, chunks in 1u64..12,
                                    ctx in 0u64..8000, rows in 1u64..8) {
        let mut m = CostModel::default();
        for k in 0..6u64 {
            for s in [StepShape::prefill(chunk + k * 7, k * 300), StepShape::decode(rows + k % 2, 100 + 900 * k)] {
                m.observe(&s, e.ns(&s));
            }
        }
        let first = StepShape::prefill(chunk, ctx);
        let total = chunk * chunks;
        let sum: u64 = (0..chunks).map(|k| m.predict(&StepShape::prefill(chunk, ctx + k * chunk)).unwrap().ns).sum();
        let rest = m.predict_remaining(&first, total).unwrap().ns;
        prop_assert!(rel(rest, sum) < 1e-6 || rest.abs_diff(sum) <= chunks, "{rest} vs {sum}");

        let first = StepShape::decode(rows, ctx * rows);
        let sum: u64 = (0..chunks).map(|k| m.predict(&StepShape::decode(rows, (ctx + k) * rows)).unwrap().ns).sum();
        let rest = m.predict_remaining(&first, chunks).unwrap().ns;
        prop_assert!(rel(rest, sum) < 1e-6 || rest.abs_diff(sum) <= chunks, "{rest} vs {sum}");
    }

    /// Whatever it is fed (any shapes, any durations, in any order), the model never panics,
    /// and a prediction it makes is a positive number of ns with a finite, non-negative bound.
    #[test]
    fn hostile_steps_never_break_it(steps in prop::collection::vec(
        (any::<bool>(), any::<u64>(), any::<u64>(), any::<u64>()), 0..60)) {
        let mut m = CostModel::default();
        for (prefill, tokens, ctx, ns) in steps {
            let s = if prefill { StepShape::prefill(tokens, ctx) } else { StepShape::decode(tokens, ctx) };
            m.observe(&s, ns);
            for kind_shape in [StepShape::prefill(512, 4096), StepShape::decode(1, 4096), s] {
                if let Some(p) = m.predict(&kind_shape) {
                    prop_assert!(p.ns >= 1);
                    if let Some(b) = p.rel_error {
                        prop_assert!(b.is_finite() && b >= 0.0, "bound {b}");
                    }
                }
                if let Some(p) = m.predict_remaining(&kind_shape, 1000) {
                    prop_assert!(p.ns >= 1);
                }
            }
        }
    }

    /// A stall (a step far past a confident prediction) is left out and changes nothing.
    #[test]
    fn a_single_stall_changes_nothing(e in engine(), factor in 9.0..1e4f64) {
        let mut m = CostModel::default();
        for k in 0..20u64 {
            let s = StepShape::decode(1, 100 + k);
            m.observe(&s, e.ns(&s));
        }
        let s = StepShape::decode(1, 121);
        let before = (m.predict(&s), m.samples(StepKind::Decode), m.rel_error(StepKind::Decode));
        prop_assert_eq!(m.observe(&s, (e.ns(&s) as f64 * factor) as u64), Observed::LeftOutAsStall);
        prop_assert_eq!((m.predict(&s), m.samples(StepKind::Decode), m.rel_error(StepKind::Decode)), before);
    }
}
