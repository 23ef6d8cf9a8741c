//! The cost model for writers whose slots step on their own (the C writer ABI, the preload
//! library): each step is one forward of one row, so its shape follows from the slot's
//! record, and the forecaster keeps the shape of each step in flight until it finishes.
//!
//! A writer calls [`Forecaster::step_started`] right after [`SlotState::start_step`] and
//! publishes the prediction it returns with the record
//! ([`crate::SegmentWriter::publish_with_prediction`]); it calls
//! [`Forecaster::step_finished`] right after [`SlotState::finish_step`], and
//! [`Forecaster::step_abandoned`] when a step ends any other way (an error, a cancellation),
//! so that an interrupted step is never learnt.

use crate::costmodel::{CostModel, ModelConfig, Observed, StepShape};
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
    in_flight: Vec<Option<StepShape>>,
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

    /// `state` (slot `slot`) has just started a step: remembers its shape and returns the
    /// prediction to publish with the record (fields the model cannot predict yet are 0;
    /// None when the step is not a forward, or the slot is out of range).
    pub fn step_started(&mut self, slot: usize, state: &SlotState) -> Option<Prediction> {
        let shape = Self::shape_of(state);
        self.step_started_as(slot, state, shape)
    }

    /// [`step_started`](Self::step_started) for a step whose shape the writer knows better
    /// than the record says (a decode batch of several rows: `StepShape::decode(rows,
    /// context_sum)`); `None`: not a forward.
    fn step_started_as(
        &mut self,
        slot: usize,
        state: &SlotState,
        shape: Option<StepShape>,
    ) -> Option<Prediction> {
        let entry = self.in_flight.get_mut(slot)?;
        *entry = shape;
        let shape = shape?;
        let remaining =
            (state.work_total > state.work_done).then(|| state.work_total - state.work_done);
        Some(
            self.model
                .prediction(&shape, state.step_start_ns, state.phase_start_ns, remaining),
        )
    }

    /// `state` (slot `slot`) has just finished its step in flight: learns from its duration
    /// (`LAST_STEP_NS`). None when no step of a known shape was in flight.
    pub fn step_finished(&mut self, slot: usize, state: &SlotState) -> Option<Observed> {
        let shape = self.in_flight.get_mut(slot)?.take()?;
        Some(self.model.observe(&shape, state.last_step_ns))
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
}
