//! An engine server built in-process: the compute thread on the embedded model, its task
//! channel, and the router over the one `AppState`, stopped and joined on drop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use hydra_engine_server::compute::Compute;
use hydra_engine_server::config::ServerConfig;
use hydra_engine_server::serving::{AppState, Serving};
use hydra_engine_server::task::{SlotId, Task, TaskKind, TaskSender};
use tower::ServiceExt as _;

/// How long a test waits for any one reply before it fails.
pub const LIMIT: Duration = Duration::from_secs(60);

/// The compute thread and the handlers' state, on the embedded model.
pub struct Rig {
    pub state: AppState,
    tx: Option<Sender<Task>>,
    shutdown: Arc<AtomicBool>,
    compute: Option<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Rig {
    /// `slots` slots, a context of `ctx` tokens (0: the model's), the rest as `serve`'s
    /// defaults; the segment in a temporary directory.
    pub fn new(slots: usize, ctx: usize) -> Self {
        Self::with(slots, |c| c.ctx = ctx)
    }

    /// As [`Rig::new`] with `edit` applied to the configuration.
    pub fn with(slots: usize, edit: impl FnOnce(&mut ServerConfig)) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = ServerConfig::builtin("inproc", dir.path().to_path_buf(), slots);
        edit(&mut config);
        let shutdown = Arc::new(AtomicBool::new(false));
        let (compute, shared) = Compute::new(&config, shutdown.clone()).expect("compute");
        let (tx, rx) = std::sync::mpsc::channel();
        let compute = std::thread::spawn(move || {
            hydra_engine_core::threads::run_in_pool(move || compute.run(rx))
        });
        let tasks = TaskSender::new(tx.clone(), slots, shared.pending.clone());
        let state = Arc::new(Serving::new(&config, shared, tasks).expect("serving"));
        Self {
            state,
            tx: Some(tx),
            shutdown,
            compute: Some(compute),
            _dir: dir,
        }
    }

    /// The compute thread's queue, as the front end posts on it.
    pub fn post(&self, slot: SlotId, kind: TaskKind) {
        let task = Task::new(slot, kind);
        self.tx.as_ref().expect("running").send(task).expect("post");
    }

    /// The router over this rig's state.
    pub fn router(&self) -> Router {
        hydra_engine_server::http::router(self.state.clone())
    }

    /// `method path` with `body` through the router: the status, the `Retry-After` header
    /// and the body parsed as JSON (Null when it is not JSON).
    pub async fn call(&self, method: &str, path: &str, body: &str) -> Answer {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Body::from(body.to_owned()))
            .expect("request");
        let res = tokio::time::timeout(LIMIT, self.router().oneshot(req))
            .await
            .expect("answered in time")
            .expect("infallible");
        let status = res.status();
        let retry_after = res
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap_or_default().to_owned());
        let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .expect("body");
        Answer {
            status,
            retry_after,
            json: serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
            text: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // The state's sender keeps the queue open: the compute thread sees the flag at its
        // next idle tick. Joined within a bound; a thread that never stops is left behind
        // rather than hanging the test binary.
        self.shutdown.store(true, Ordering::Release);
        self.tx.take();
        if let Some(t) = self.compute.take() {
            for _ in 0..1000 {
                if t.is_finished() {
                    let _ = t.join();
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// An OpenAI error as `(status, type, code, param)`.
pub type OpenAiShape<'a> = (u16, &'a str, Option<&'a str>, Option<&'a str>);

/// An HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub retry_after: Option<String>,
    pub json: serde_json::Value,
    pub text: String,
}

impl Answer {
    /// The llama surface's error: `(status, code)`, checking the body has no other keys.
    pub fn llama_error(&self) -> (u16, &str) {
        let e = &self.json["error"];
        let keys: Vec<&String> = e
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["code", "message"], "{}", self.text);
        (self.status.as_u16(), e["code"].as_str().unwrap_or_default())
    }

    /// OpenAI's error: `(status, type, code, param)`, checking its shape.
    pub fn openai_error(&self) -> OpenAiShape<'_> {
        let e = &self.json["error"];
        let mut keys: Vec<&String> = e
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        keys.sort();
        assert_eq!(keys, ["code", "message", "param", "type"], "{}", self.text);
        (
            self.status.as_u16(),
            e["type"].as_str().unwrap_or_default(),
            e["code"].as_str(),
            e["param"].as_str(),
        )
    }
}
