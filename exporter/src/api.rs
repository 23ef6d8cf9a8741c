//! The JSON answers (`/engines`, the Hydra meta endpoints) and their one error type.
//!
//! Everything here is plain functions of a [`Collector`]; [`crate::http`] only routes.

use crate::collect::{Collector, EngineEntry, ReadError};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hydra_layout::naming::{segment_path, validate_engine_id};
use hydra_probe::{EngineView, HydraMeta};
use serde::Serialize;
use std::path::PathBuf;

/// Every error an HTTP client can get, as `{"error":{"code":..., "message":...}}`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// No engine with this id in the directory (404 `unknown_engine`).
    #[error("no engine {engine:?} in {dir}")]
    UnknownEngine {
        /// The id asked for.
        engine: String,
        /// The directory.
        dir: PathBuf,
    },
    /// The slot index is out of range or not a number (404 `unknown_slot`).
    #[error("engine {engine:?} has no slot {slot:?} (it has {count} slots)")]
    UnknownSlot {
        /// The engine.
        engine: String,
        /// The slot as given.
        slot: String,
        /// Its slot count.
        count: usize,
    },
    /// No engine named and several exist (409 `ambiguous_engine`).
    #[error("several engines in {dir}: name one with /engines/{{engine}}/slots/{{id}}/state/meta (found: {})", ids.join(", "))]
    AmbiguousEngine {
        /// The directory.
        dir: PathBuf,
        /// The engine ids found.
        ids: Vec<String>,
    },
    /// No engine at all (503 `no_engine`).
    #[error("no engines found in {dir}")]
    NoEngine {
        /// The directory.
        dir: PathBuf,
    },
    /// The engine's segment (or the directory) cannot be read (503 `unreadable`).
    #[error("{0}")]
    Unreadable(ReadError),
    /// The route does not exist (404 `not_found`).
    #[error("no such endpoint: {0}")]
    NotFound(String),
    /// An internal failure (500 `internal`); details are logged, not shown.
    #[error("internal error")]
    Internal,
}

impl ApiError {
    /// HTTP status of the error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::UnknownEngine { .. } | Self::UnknownSlot { .. } | Self::NotFound(_) => {
                StatusCode::NOT_FOUND
            }
            Self::AmbiguousEngine { .. } => StatusCode::CONFLICT,
            Self::NoEngine { .. } | Self::Unreadable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownEngine { .. } => "unknown_engine",
            Self::UnknownSlot { .. } => "unknown_slot",
            Self::AmbiguousEngine { .. } => "ambiguous_engine",
            Self::NoEngine { .. } => "no_engine",
            Self::Unreadable(_) => "unreadable",
            Self::NotFound(_) => "not_found",
            Self::Internal => "internal",
        }
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    code: &'a str,
    message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code(),
                message: self.to_string(),
            },
        };
        (self.status(), axum::Json(body)).into_response()
    }
}

/// One entry of `GET /engines`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EngineSummary {
    /// Engine id (from the file name).
    pub engine_id: String,
    /// Segment file.
    pub path: PathBuf,
    /// "live", "hung", "closed" or "dead"; absent when unreadable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liveness: Option<&'static str>,
    /// Model name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Compute device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Writer pid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u64>,
    /// Slot count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots: Option<usize>,
    /// Slots doing work.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy_slots: Option<usize>,
    /// Milliseconds since the compute loop's last heartbeat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat_age_ms: Option<u64>,
    /// Why the segment could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ReadError>,
}

/// `GET /engines`: every entry of the directory, readable or not, sorted by id.
pub fn engines(collector: &Collector) -> Result<Vec<EngineSummary>, ApiError> {
    let c = collector.collect();
    if let Some(e) = c.dir_error {
        return Err(ApiError::Unreadable(e));
    }
    Ok(c.engines.iter().map(summary_of).collect())
}

/// What `/engines` says of one entry of a collection.
pub fn summary_of(entry: &EngineEntry) -> EngineSummary {
    let mut s = EngineSummary {
        engine_id: entry.engine_id.clone(),
        path: entry.path.clone(),
        liveness: None,
        model: None,
        device: None,
        pid: None,
        slots: None,
        busy_slots: None,
        heartbeat_age_ms: None,
        error: None,
    };
    match &entry.view {
        Ok(v) => {
            s.liveness = Some(v.health.as_str());
            s.model = Some(v.identity.description.model_name.clone());
            s.device = Some(v.identity.description.device.clone());
            s.pid = Some(v.identity.pid);
            s.slots = Some(v.slots.len());
            s.busy_slots = Some(v.busy_slots());
            s.heartbeat_age_ms = Some(v.heartbeat_age_ns / 1_000_000);
        }
        Err(e) => s.error = Some(e.clone()),
    }
    s
}

/// The Hydra meta of slot `slot` of `engine` (an engine id in the collector's directory;
/// never a path). Same JSON as `hydra-probe meta ENGINE SLOT`.
pub fn slot_meta(collector: &Collector, engine: &str, slot: &str) -> Result<HydraMeta, ApiError> {
    let unknown = || ApiError::UnknownEngine {
        engine: engine.to_owned(),
        dir: collector.dir().to_path_buf(),
    };
    validate_engine_id(engine).map_err(|_| unknown())?;
    let path = segment_path(collector.dir(), engine);
    let view = collector
        .capture_path(&path)
        .map_err(ApiError::Unreadable)?
        .ok_or_else(unknown)?;
    meta_of(&view, engine, slot)
}

/// The Hydra meta of slot `slot` of the only engine in the directory: 503 when there is
/// none, 409 when there are several.
pub fn only_engine_slot_meta(collector: &Collector, slot: &str) -> Result<HydraMeta, ApiError> {
    let dir = collector.dir().to_path_buf();
    let found = hydra_probe::discover(&dir).map_err(|e| {
        ApiError::Unreadable(ReadError {
            kind: crate::stats::ErrorKind::Directory,
            message: format!("read directory {}: {e}", dir.display()),
        })
    })?;
    match found.as_slice() {
        [] => Err(ApiError::NoEngine { dir }),
        [one] => slot_meta(collector, &one.engine_id, slot),
        many => Err(ApiError::AmbiguousEngine {
            dir,
            ids: many.iter().map(|d| d.engine_id.clone()).collect(),
        }),
    }
}

fn meta_of(view: &EngineView, engine: &str, slot: &str) -> Result<HydraMeta, ApiError> {
    let unknown = || ApiError::UnknownSlot {
        engine: engine.to_owned(),
        slot: slot.to_owned(),
        count: view.slots.len(),
    };
    // Only plain decimal indices: no sign, no whitespace.
    if slot.is_empty() || !slot.bytes().all(|b| b.is_ascii_digit()) {
        return Err(unknown());
    }
    let index: usize = slot.parse().map_err(|_| unknown())?;
    HydraMeta::from_view(view, index).ok_or_else(unknown)
}
