//! llama.cpp's `prompt_progress {total, cache, processed, time_ms}`, read from the
//! progress segment (never through the task queue), plus the layer position of the chunk
//! in flight.

use hydra_layout::{clock, Phase, SegmentReader, SlotSnapshot};

use serde::Serialize;

/// Prompt evaluation progress, llama.cpp's `prompt_progress`, read from the segment;
/// `layer` adds where the forward in flight is (Hydra's layer position).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PromptProgress {
    /// Prompt tokens in all.
    pub total: u64,
    /// Of them, reused from the slot's cache.
    pub cache: u64,
    /// Prompt tokens in the slot's cache now (cached ones included), as llama.cpp counts.
    pub processed: u64,
    /// Milliseconds since the prompt's evaluation began.
    pub time_ms: u64,
    /// The layer position inside the chunk in flight, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<LayerPosition>,
}

/// Layers of the forward in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LayerPosition {
    /// Layers done.
    pub done: u64,
    /// Layers in the forward.
    pub total: u64,
}

/// What the front end knows of the prompt: its length and how much the slot reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptFacts {
    /// The task evaluating it (the segment's `TASK_ID`).
    pub task_id: u64,
    /// Prompt tokens in all.
    pub n_prompt: u64,
    /// Of them, reused from the slot's cache.
    pub n_cached: u64,
}

/// The prompt progress of `facts`' task on `slot`, read from `reader` now; None when
/// the slot's record is another task's (or cannot be read).
pub fn read(reader: &SegmentReader, slot: usize, facts: &PromptFacts) -> Option<PromptProgress> {
    let snap = reader.slot(slot).ok()?;
    from_snapshot(&snap, facts, clock::monotonic_ns())
}

/// [`read`] on a snapshot taken at `now_ns`.
pub fn from_snapshot(
    snap: &SlotSnapshot,
    facts: &PromptFacts,
    now_ns: u64,
) -> Option<PromptProgress> {
    let s = &snap.state;
    if s.task_id != facts.task_id {
        return None;
    }
    let since = |t: u64| now_ns.saturating_sub(t) / 1_000_000;
    if s.phase == Phase::Prefill {
        Some(PromptProgress {
            total: facts.n_prompt,
            cache: facts.n_cached,
            processed: s.n_past.min(facts.n_prompt),
            time_ms: since(s.phase_start_ns),
            layer: snap.layer().map(|l| LayerPosition {
                done: l.done,
                total: l.total,
            }),
        })
    } else {
        // Past the prefill (decoding or finished): the whole prompt is in.
        Some(PromptProgress {
            total: facts.n_prompt,
            cache: facts.n_cached,
            processed: facts.n_prompt,
            time_ms: since(s.task_start_ns),
            layer: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hydra_layout::{SlotState, Substep, WorkUnit};

    fn snapshot(state: SlotState, substep: Option<Substep>) -> SlotSnapshot {
        SlotSnapshot {
            state,
            pending: 0,
            substep,
            prediction: None,
            devices: None,
            waits_published: false,
            seq: 2,
            retries: 0,
        }
    }

    #[test]
    fn prefill_records_become_prompt_progress() {
        let ms = 1_000_000;
        let mut s = SlotState::default();
        s.begin_task(7, Phase::Prefill, WorkUnit::Tokens, 90, 10 * ms);
        s.tokens_cached = 10;
        s.n_past = 40;
        s.start_step(30, 20 * ms);
        let facts = PromptFacts {
            task_id: 7,
            n_prompt: 100,
            n_cached: 10,
        };
        let layer = Substep {
            done: 12,
            total: 30,
            at_ns: 21 * ms,
            step_start_ns: s.step_start_ns,
        };
        let p = from_snapshot(&snapshot(s, Some(layer)), &facts, 35 * ms).unwrap();
        assert_eq!(
            (p.total, p.cache, p.processed, p.time_ms),
            (100, 10, 40, 25)
        );
        assert_eq!(
            p.layer,
            Some(LayerPosition {
                done: 12,
                total: 30
            })
        );
        // Another task's record says nothing about ours.
        let other = PromptFacts {
            task_id: 8,
            ..facts
        };
        assert_eq!(from_snapshot(&snapshot(s, None), &other, 35 * ms), None);
        // Decoding: the prompt is all in.
        s.enter_phase(Phase::Decode, WorkUnit::Tokens, 16, 40 * ms);
        let p = from_snapshot(&snapshot(s, None), &facts, 50 * ms).unwrap();
        assert_eq!((p.processed, p.total, p.layer), (100, 100, None));
    }

    #[test]
    fn prompt_progress_has_llama_cpp_shape_plus_the_layer() {
        let p = PromptProgress {
            total: 10,
            cache: 2,
            processed: 6,
            time_ms: 5,
            layer: Some(LayerPosition { done: 3, total: 30 }),
        };
        assert_eq!(
            serde_json::to_value(p).unwrap(),
            serde_json::json!({"total":10,"cache":2,"processed":6,"time_ms":5,"layer":{"done":3,"total":30}})
        );
    }
}
