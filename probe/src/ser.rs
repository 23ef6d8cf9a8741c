//! JSON shapes of the layout crate's plain types (which do not depend on serde).
//! Enums serialise as their lower-case names; unknown raw values as "unknown".

use hydra_layout::{HeaderSnapshot, Identity, SlotState};
use serde::ser::{SerializeStruct, Serializer};

pub(crate) fn slot_state<S: Serializer>(s: &SlotState, ser: S) -> Result<S::Ok, S::Error> {
    let mut st = ser.serialize_struct("SlotState", 19)?;
    st.serialize_field("task_id", &s.task_id)?;
    st.serialize_field("phase", s.phase.as_str())?;
    st.serialize_field("finish_reason", s.finish_reason.as_str())?;
    st.serialize_field("error_code", s.error_code.as_str())?;
    st.serialize_field("work_unit", s.work_unit.as_str())?;
    st.serialize_field("work_done", &s.work_done)?;
    st.serialize_field("work_total", &s.work_total)?;
    st.serialize_field("tokens_cached", &s.tokens_cached)?;
    st.serialize_field("n_past", &s.n_past)?;
    st.serialize_field("n_ctx", &s.n_ctx)?;
    st.serialize_field("state_size", &s.state_size)?;
    st.serialize_field("task_start_ns", &s.task_start_ns)?;
    st.serialize_field("phase_start_ns", &s.phase_start_ns)?;
    st.serialize_field("last_progress_ns", &s.last_progress_ns)?;
    st.serialize_field("step_start_ns", &s.step_start_ns)?;
    st.serialize_field("step_size", &s.step_size)?;
    st.serialize_field("last_step_ns", &s.last_step_ns)?;
    st.serialize_field("steps_done", &s.steps_done)?;
    st.end()
}

pub(crate) fn identity<S: Serializer>(i: &Identity, ser: S) -> Result<S::Ok, S::Error> {
    let d = &i.description;
    let mut st = ser.serialize_struct("Identity", 17)?;
    st.serialize_field("engine_id", &i.engine_id)?;
    st.serialize_field("pid", &i.pid)?;
    st.serialize_field("process_start_ns", &i.process_start_ns)?;
    st.serialize_field("boot_id", &i.boot_id)?;
    st.serialize_field("instance_id", &i.instance_id)?;
    st.serialize_field("created_realtime_ns", &i.created_realtime_ns)?;
    st.serialize_field("created_monotonic_ns", &i.created_monotonic_ns)?;
    st.serialize_field("version_major", &i.version_major)?;
    st.serialize_field("version_minor", &i.version_minor)?;
    st.serialize_field("model_name", &d.model_name)?;
    st.serialize_field("model_quant", &d.model_quant)?;
    st.serialize_field("model_path", &d.model_path)?;
    st.serialize_field("tokenizer", &d.tokenizer)?;
    st.serialize_field("model_alias", &d.model_alias)?;
    st.serialize_field("device", &d.device)?;
    st.serialize_field("capabilities", &d.capabilities)?;
    st.end()
}

pub(crate) fn header<S: Serializer>(h: &HeaderSnapshot, ser: S) -> Result<S::Ok, S::Error> {
    let c = &h.counters;
    let mut st = ser.serialize_struct("HeaderSnapshot", 10)?;
    st.serialize_field("lifecycle", h.lifecycle.as_str())?;
    st.serialize_field("heartbeat_ns", &h.heartbeat_ns)?;
    st.serialize_field("loop_iterations", &h.loop_iterations)?;
    st.serialize_field("closed_ns", &h.closed_ns)?;
    st.serialize_field("prompt_tokens_total", &c.prompt_tokens_total)?;
    st.serialize_field("generated_tokens_total", &c.generated_tokens_total)?;
    st.serialize_field("requests_running", &c.requests_running)?;
    st.serialize_field("requests_waiting", &c.requests_waiting)?;
    st.serialize_field("kv_cells_used", &c.kv_cells_used)?;
    st.serialize_field("kv_cells_total", &c.kv_cells_total)?;
    st.end()
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
