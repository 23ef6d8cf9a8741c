//! JSON shapes of the layout crate's plain types (which do not depend on serde). Enums
//! serialise as their lower-case names; unknown raw values as "unknown".

use hydra_layout::{HeaderSnapshot, Identity, SlotState};
use serde::ser::{Serialize, SerializeStruct, Serializer};

/// Serialises a struct named `$name` with the fields `"key": value` (references or
/// `&str`s), in order, through `$ser`.
macro_rules! serialize_struct {
    ($ser:expr, $name:literal { $($key:literal: $value:expr,)* }) => {{
        let mut st = $ser.serialize_struct($name, [$($key),*].len())?;
        $(st.serialize_field($key, $value)?;)*
        st.end()
    }};
}
pub(crate) use serialize_struct;

pub(crate) fn slot_state<S: Serializer>(s: &SlotState, ser: S) -> Result<S::Ok, S::Error> {
    serialize_struct!(ser, "SlotState" {
        "task_id": &s.task_id,
        "phase": s.phase.as_str(),
        "finish_reason": s.finish_reason.as_str(),
        "error_code": s.error_code.as_str(),
        "work_unit": s.work_unit.as_str(),
        "work_done": &s.work_done,
        "work_total": &s.work_total,
        "tokens_cached": &s.tokens_cached,
        "n_past": &s.n_past,
        "n_ctx": &s.n_ctx,
        "state_size": &s.state_size,
        "task_start_ns": &s.task_start_ns,
        "phase_start_ns": &s.phase_start_ns,
        "last_progress_ns": &s.last_progress_ns,
        "step_start_ns": &s.step_start_ns,
        "step_size": &s.step_size,
        "last_step_ns": &s.last_step_ns,
        "steps_done": &s.steps_done,
    })
}

/// A slot record as its JSON object (a field of a struct serialised by hand).
pub(crate) struct StateJson<'a>(pub(crate) &'a SlotState);

impl Serialize for StateJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        slot_state(self.0, ser)
    }
}

pub(crate) fn identity<S: Serializer>(i: &Identity, ser: S) -> Result<S::Ok, S::Error> {
    let d = &i.description;
    serialize_struct!(ser, "Identity" {
        "engine_id": &i.engine_id,
        "pid": &i.pid,
        "process_start_ns": &i.process_start_ns,
        "boot_id": &i.boot_id,
        "instance_id": &i.instance_id,
        "created_realtime_ns": &i.created_realtime_ns,
        "created_monotonic_ns": &i.created_monotonic_ns,
        "version_major": &i.version_major,
        "version_minor": &i.version_minor,
        "model_name": &d.model_name,
        "model_quant": &d.model_quant,
        "model_path": &d.model_path,
        "tokenizer": &d.tokenizer,
        "model_alias": &d.model_alias,
        "device": &d.device,
        "capabilities": &d.capabilities,
    })
}

pub(crate) fn header<S: Serializer>(h: &HeaderSnapshot, ser: S) -> Result<S::Ok, S::Error> {
    let c = &h.counters;
    serialize_struct!(ser, "HeaderSnapshot" {
        "lifecycle": h.lifecycle.as_str(),
        "heartbeat_ns": &h.heartbeat_ns,
        "loop_iterations": &h.loop_iterations,
        "closed_ns": &h.closed_ns,
        "prompt_tokens_total": &c.prompt_tokens_total,
        "generated_tokens_total": &c.generated_tokens_total,
        "requests_running": &c.requests_running,
        "requests_waiting": &c.requests_waiting,
        "kv_cells_used": &c.kv_cells_used,
        "kv_cells_total": &c.kv_cells_total,
    })
}

/// Deserialises a field that may be absent (`None`, by `#[serde(default)]`), null
/// (`Some(None)`) or a value (`Some(Some(v))`).
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    <Option<T> as serde::Deserialize>::deserialize(d).map(Some)
}
