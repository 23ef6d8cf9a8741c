//! The cost model for writers that publish their slots' steps themselves (the engine, the
//! C writer ABI): a step that is a forward of its own has the shape its record says; steps
//! of several slots computed by one forward (a batched decode) share that forward's shape
//! ([`StepShape::of_shares`]). The forecaster keeps the shape of each step in flight until
//! it finishes, and learns each forward once.
//!
//! A writer calls [`Forecaster::step_started`] right after [`SlotState::start_step`] (or
//! [`Forecaster::batch_started`] once the steps of every slot of a batched forward have
//! started) and publishes the prediction it returns with the record
//! ([`crate::SegmentWriter::publish_with_prediction`]); it calls
//! [`Forecaster::step_finished`] right after [`SlotState::finish_step`], and
//! [`Forecaster::step_abandoned`] when a step ends any other way (an error, a cancellation),
//! so that an interrupted step is never learnt.

use crate::costmodel::{CostModel, ModelConfig, Observed, StepKind, StepShape};
use crate::slot::{Phase, Prediction, SlotState, WorkUnit};

/// Whether a writer can say when a phase's work will be done. Every writer that uses a
/// forecaster can (the Rust engine, the C ABI: `WORK_TOTAL` is the real amount of work);
/// the preload library, whose host does not say the total, keeps its own
/// [`CostModel`] and never predicts the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseEnd {
    /// `WORK_TOTAL` is the real amount of work left: publish the predicted end.
    Predict,
}

/// One writer's cost model and the shapes of its slots' steps in flight.
#[derive(Debug, Clone)]
pub struct Forecaster {
    model: CostModel,
    in_flight: Vec<Option<InFlight>>,
    /// Forwards started so far: each step in flight names its forward.
    forwards: u64,
    /// The last forward learnt: the steps of a batch finish one by one, and the forward
    /// is learnt at the first.
    learnt: u64,
}

/// A step in flight: the shape of the forward computing it, and which forward that is.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    shape: StepShape,
    forward: u64,
}

impl Forecaster {
    /// A forecaster for `slots` slots with the default model.
    pub fn new(slots: usize, phase_end: PhaseEnd) -> Self {
        Self::with_config(slots, phase_end, ModelConfig::default())
    }

    /// A forecaster for `slots` slots with a model of `config`.
    pub fn with_config(slots: usize, phase_end: PhaseEnd, config: ModelConfig) -> Self {
        // The one kind of writer a forecaster serves: a new kind must be handled here.
        let PhaseEnd::Predict = phase_end;
        Self {
            model: CostModel::new(config),
            in_flight: vec![None; slots],
            forwards: 0,
            learnt: 0,
        }
    }

    /// A forecaster for `slots` slots whose model starts from `model` (one restored from an
    /// earlier run: [`CostModel::with_learnt`]).
    pub fn with_model(slots: usize, phase_end: PhaseEnd, model: CostModel) -> Self {
        Self {
            model,
            ..Self::with_config(slots, phase_end, ModelConfig::default())
        }
    }

    /// The model.
    pub fn model(&self) -> &CostModel {
        &self.model
    }

    /// The shape of a step `state` has just started: a prefill chunk or one decode row of
    /// `step_size` tokens after the `n_past` cached ones. None for anything but a token
    /// step of prefill or decode (state blocks are not forwards).
    pub fn shape_of(state: &SlotState) -> Option<StepShape> {
        if state.step_start_ns == 0 || state.step_size == 0 || state.work_unit != WorkUnit::Tokens {
            return None;
        }
        match state.phase {
            Phase::Prefill => Some(StepShape::prefill(state.step_size, state.n_past)),
            Phase::Decode => Some(StepShape::decode(1, state.n_past)),
            _ => None,
        }
    }

    /// `state` (slot `slot`) has just started a step, a forward of its own: remembers its
    /// shape and returns the prediction to publish with the record (fields the model
    /// cannot predict yet are 0; None when the step is not a forward, or the slot is out
    /// of range).
    pub fn step_started(&mut self, slot: usize, state: &SlotState) -> Option<Prediction> {
        let shape = Self::shape_of(state);
        self.forwards += 1;
        let forward = self.forwards;
        let entry = self.in_flight.get_mut(slot)?;
        *entry = shape.map(|shape| InFlight { shape, forward });
        let shape = shape?;
        let remaining =
            (state.work_total > state.work_done).then(|| state.work_total - state.work_done);
        Some(
            self.model
                .prediction(&shape, state.step_start_ns, state.phase_start_ns, remaining),
        )
    }

    /// The slots `rows` of `states` have each just started a decode step of one token,
    /// all computed by one forward (a batched decode): each step's prediction is the
    /// forward's, and each slot's predicted end of its phase counts the batch shrinking
    /// as the other rows finish their work ([`CostModel::predict_batch_remaining`]).
    /// Returns the predictions in the order of `rows` (None for a slot out of range or not
    /// decoding tokens). The forward is learnt once, when the first of its steps finishes.
    pub fn batch_started(
        &mut self,
        rows: &[usize],
        states: &[SlotState],
    ) -> Vec<Option<Prediction>> {
        let decoding = |s: usize| {
            states
                .get(s)
                .filter(|st| Self::shape_of(st).is_some_and(|sh| sh.kind == StepKind::Decode))
        };
        let shares = rows
            .iter()
            .filter_map(|&s| decoding(s))
            .map(|st| (1, st.n_past));
        let Some(shape) = StepShape::of_shares(shares) else {
            return vec![None; rows.len()];
        };
        self.forwards += 1;
        let forward = self.forwards;
        let left = |st: &SlotState| st.work_total.saturating_sub(st.work_done);
        let batch: Vec<(u64, u64)> = rows
            .iter()
            .filter_map(|&s| decoding(s))
            .map(|st| (st.n_past, left(st)))
            .collect();
        let step = self.model.predict(&shape);
        rows.iter()
            .map(|&s| {
                let st = decoding(s)?;
                *self.in_flight.get_mut(s)? = Some(InFlight { shape, forward });
                let rest = self.model.predict_batch_remaining(left(st), &batch);
                Some(Prediction {
                    step_expected_ns: step.map_or(0, |e| e.ns),
                    step_start_ns: st.step_start_ns,
                    task_expected_end_ns: rest.map_or(0, |e| st.step_start_ns.saturating_add(e.ns)),
                    phase_start_ns: st.phase_start_ns,
                    error_ppm: step.map_or(0, |e| e.error_ppm()),
                })
            })
            .collect()
    }

    /// `state` (slot `slot`) has just finished its step in flight: learns from its duration
    /// (`LAST_STEP_NS`), the first step of its forward to finish only. None when no step
    /// of a known shape was in flight, or its forward was learnt already.
    pub fn step_finished(&mut self, slot: usize, state: &SlotState) -> Option<Observed> {
        let step = self.in_flight.get_mut(slot)?.take()?;
        if step.forward == self.learnt {
            return None;
        }
        self.learnt = step.forward;
        Some(self.model.observe(&step.shape, state.last_step_ns))
    }

    /// The step in flight on `slot` ended without finishing (an error, a cancellation, the
    /// task ended): it is not learnt.
    pub fn step_abandoned(&mut self, slot: usize) {
        if let Some(entry) = self.in_flight.get_mut(slot) {
            *entry = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slot::{ErrorCode, FinishReason};

    const MS: u64 = 1_000_000;

    fn run_prefill(f: &mut Forecaster, s: &mut SlotState, now: &mut u64, chunks: u64) {
        for _ in 0..chunks {
            s.start_step(256, *now);
            f.step_started(0, s);
            // 1 ms + 10 us per token + 10 ns per attended pair
            let shape = Forecaster::shape_of(s).unwrap();
            *now += MS + 10_000 * 256 + (10.0 * shape.attended()) as u64;
            s.finish_step(s.work_done + 256, *now);
            s.n_past += 256;
            assert_eq!(f.step_finished(0, s), Some(Observed::Learnt));
        }
    }

    #[test]
    fn steps_of_a_slot_teach_the_model_and_get_predictions() {
        let mut f = Forecaster::new(2, PhaseEnd::Predict);
        let mut s = SlotState::default();
        let mut now = 1_000;
        s.begin_task(1, Phase::Prefill, WorkUnit::Tokens, 4096, now);
        s.start_step(256, now);
        let first = f.step_started(0, &s).unwrap();
        assert_eq!(first.step_expected_ns, 0, "nothing learnt yet");
        assert_eq!(first.step_start_ns, now);
        f.step_abandoned(0);
        s.finish(FinishReason::Cancelled, ErrorCode::None);
        assert_eq!(
            f.step_finished(0, &s),
            None,
            "an abandoned step is not learnt"
        );

        s.begin_task(2, Phase::Prefill, WorkUnit::Tokens, 4096, now);
        run_prefill(&mut f, &mut s, &mut now, 6);
        s.start_step(256, now);
        let p = f.step_started(0, &s).unwrap();
        let shape = Forecaster::shape_of(&s).unwrap();
        let real = MS + 10_000 * 256 + (10.0 * shape.attended()) as u64;
        let err = (p.step_expected_ns as f64 - real as f64).abs() / real as f64;
        assert!(err < 0.02, "{} vs {real}", p.step_expected_ns);
        assert_eq!(p.step_in_flight(&s), Some(p.step_expected_ns));
        assert!(
            p.phase_end(&s).unwrap() > now + 9 * real,
            "ten chunks left, growing"
        );
        assert_ne!(p.error_ppm, 0);
    }

    #[test]
    fn byte_steps_are_not_predicted() {
        let mut f = Forecaster::new(1, PhaseEnd::Predict);
        let mut s = SlotState::default();
        s.begin_task(1, Phase::Save, WorkUnit::Bytes, 4096, 10);
        s.start_step(100, 20);
        assert_eq!(f.step_started(0, &s), None);
        let mut s = SlotState::default();
        let mut now = 1_000;
        s.begin_task(2, Phase::Prefill, WorkUnit::Tokens, 4096, now);
        run_prefill(&mut f, &mut s, &mut now, 3);
        s.start_step(256, now);
        let p = f.step_started(0, &s).unwrap();
        assert_ne!(p.step_expected_ns, 0);
        assert_eq!(f.step_started(5, &s), None, "out of range");
    }

    /// A "true" engine's decode batch: 2 ms per forward, 1 ms per row, 20 ns per pair.
    fn decode_truth(shape: &StepShape) -> u64 {
        2 * MS + MS * shape.tokens + (20.0 * shape.attended()) as u64
    }

    /// One decode step of every slot in `rows` (all decoding), as one forward: returns
    /// the predictions and how many of the steps taught the model.
    fn batch_step(
        f: &mut Forecaster,
        states: &mut [SlotState],
        rows: &[usize],
        now: &mut u64,
    ) -> (Vec<Option<Prediction>>, usize) {
        for &r in rows {
            states[r].start_step(1, *now);
        }
        let predictions = f.batch_started(rows, states);
        let ctx: u64 = rows.iter().map(|&r| states[r].n_past).sum();
        *now += decode_truth(&StepShape::decode(rows.len() as u64, ctx));
        let mut learnt = 0;
        for &r in rows {
            let s = &mut states[r];
            s.finish_step(s.work_done + 1, *now);
            s.n_past += 1;
            learnt += usize::from(f.step_finished(r, s).is_some());
        }
        (predictions, learnt)
    }

    #[test]
    fn a_batch_is_learnt_once_and_a_row_s_end_counts_the_rows_that_leave() {
        let mut f = Forecaster::new(4, PhaseEnd::Predict);
        let mut states = vec![SlotState::default(); 4];
        let mut now = 1_000;
        // A generation alone first: the model has seen one-row steps.
        states[0].begin_task(1, Phase::Decode, WorkUnit::Tokens, 64, now);
        states[0].n_past = 100;
        for _ in 0..64 {
            let (_, learnt) = batch_step(&mut f, &mut states, &[0], &mut now);
            assert_eq!(learnt, 1);
        }
        // Slot 0 decodes 1,024 tokens; slots 1-3 decode 256 beside it and leave.
        for (slot, total) in [(0, 1024), (1, 256), (2, 256), (3, 256)] {
            states[slot].begin_task(2 + slot as u64, Phase::Decode, WorkUnit::Tokens, total, now);
            states[slot].n_past = 100 * (slot as u64 + 1);
        }
        let mut ends = Vec::new();
        for step in 0..1024u64 {
            let rows: Vec<usize> = (0..4).filter(|&r| r == 0 || step < 256).collect();
            let at = now;
            let (predictions, learnt) = batch_step(&mut f, &mut states, &rows, &mut now);
            assert_eq!(learnt, 1, "one forward, learnt once");
            let p = predictions[0].expect("a prediction for slot 0");
            assert_eq!(p.step_start_ns, at);
            ends.push((step, at, p.task_expected_end_ns));
        }
        let end = now;
        for (step, at, predicted) in ends {
            if step < 256 || step % 256 != 0 {
                continue;
            }
            let left = (end - at) as f64;
            let err = (predicted as f64 - end as f64) / left;
            assert!(
                err.abs() < 0.10,
                "at step {step}: ETA off by {:.1}%",
                err * 100.0
            );
        }
    }

    #[test]
    fn rows_that_join_a_batch_are_predicted_once_they_are_in_it() {
        let mut f = Forecaster::new(4, PhaseEnd::Predict);
        let mut states = vec![SlotState::default(); 4];
        let mut now = 1_000;
        // Slot 0 decodes 1,024 tokens alone; at a quarter, slots 1-3 join with 768 each.
        states[0].begin_task(1, Phase::Decode, WorkUnit::Tokens, 1024, now);
        states[0].n_past = 100;
        let mut ends = Vec::new();
        for step in 0..1024u64 {
            if step == 256 {
                for (slot, s) in states.iter_mut().enumerate().skip(1) {
                    s.begin_task(1 + slot as u64, Phase::Decode, WorkUnit::Tokens, 768, now);
                    s.n_past = 50 * slot as u64;
                }
            }
            let rows: Vec<usize> = (0..4).filter(|&r| r == 0 || step >= 256).collect();
            let at = now;
            let (predictions, _) = batch_step(&mut f, &mut states, &rows, &mut now);
            ends.push((
                step,
                at,
                predictions[0].expect("slot 0").task_expected_end_ns,
            ));
        }
        let end = now;
        for (step, at, predicted) in ends {
            if step == 512 || step == 768 {
                let err = (predicted as f64 - end as f64) / (end - at) as f64;
                assert!(
                    err.abs() < 0.10,
                    "at step {step}: ETA off by {:.1}%",
                    err * 100.0
                );
            }
        }
    }

    #[test]
    fn a_forward_s_shape_follows_its_shares() {
        assert_eq!(StepShape::of_shares([]), None);
        assert_eq!(StepShape::of_shares([(0, 5)]), None, "no token");
        assert_eq!(
            StepShape::of_shares([(1, 10), (1, 20), (0, 7)]),
            Some(StepShape::decode(2, 30))
        );
        assert_eq!(
            StepShape::of_shares([(6, 100)]),
            Some(StepShape::prefill(6, 100))
        );
        // Two sequences' chunks read as one chunk attending as many pairs.
        let two = StepShape::of_shares([(4, 10), (2, 0)]).unwrap();
        let pairs = (4 * 10 + 4 * 5 / 2 + 2 * 3 / 2) as f64;
        assert_eq!(two.tokens, 6);
        assert!(
            (two.attended() - pairs).abs() <= 6.0,
            "{two:?}: {}",
            two.attended()
        );
    }
}
